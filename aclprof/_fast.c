/* Hot-path helpers for aclprof; see _fast.h. Kept free of any vendor header: the
 * prototypes of the few functions called are spelled out here and must match cdefs/. */
#include <stdint.h>

#define ACLPROF_FAST_UNBOUND -1000
#define ACLPROF_FAST_RANGE_ERROR_BIAS 1099511627776LL

typedef int (*stamp_fn)(void *);
typedef int (*void_fn)(void);
typedef int (*range_start_fn)(void *, uint32_t *);
typedef int (*range_stop_fn)(uint32_t);

static stamp_fn p_push, p_mark;
static void_fn p_pop;
static range_start_fn p_range_start;
static range_stop_fn p_range_stop;

int aclprof_fast_bind_tx(uintptr_t push, uintptr_t pop, uintptr_t mark,
                         uintptr_t range_start, uintptr_t range_stop)
{
    p_push = (stamp_fn)push;
    p_pop = (void_fn)pop;
    p_mark = (stamp_fn)mark;
    p_range_start = (range_start_fn)range_start;
    p_range_stop = (range_stop_fn)range_stop;
    return 0;
}

int aclprof_tx_push(uintptr_t stamp)
{
    return p_push ? p_push((void *)stamp) : ACLPROF_FAST_UNBOUND;
}

int aclprof_tx_pop(void)
{
    return p_pop ? p_pop() : ACLPROF_FAST_UNBOUND;
}

int aclprof_tx_mark(uintptr_t stamp)
{
    return p_mark ? p_mark((void *)stamp) : ACLPROF_FAST_UNBOUND;
}

int64_t aclprof_tx_range_start(uintptr_t stamp)
{
    uint32_t id = 0;
    int rc = p_range_start ? p_range_start((void *)stamp, &id) : ACLPROF_FAST_UNBOUND;
    return rc == 0 ? (int64_t)id : (int64_t)rc - ACLPROF_FAST_RANGE_ERROR_BIAS;
}

int aclprof_tx_range_stop(uint32_t range_id)
{
    return p_range_stop ? p_range_stop(range_id) : ACLPROF_FAST_UNBOUND;
}
