/* msproftx for aclprof.api.markers: a stamp cache and per-thread push stacks (see _fast.h).
 *
 * Why in C: a marker must cost about one library call, and in Python the checkout, the
 * bookkeeping and the per-thread stack cost more than the library call itself.
 *
 * A stamp is checked out while it is pushed or its range is open: the library stores the
 * start time in the stamp and a range id is the stamp's pool slot, so two open uses of one
 * stamp would corrupt each other. The library's pool holds 100 stamps; when it is full,
 * idle stamps of other messages are destroyed to make room. */
#include <pthread.h>

#include "_fast_internal.h"

#define TX_POOL_SIZE 100      /* CURRENT_STAMP_SIZE in CANN */
#define TX_STACK_DEPTH 128    /* > the pool: a deeper push cannot get a stamp anyway */

/* Pointer types from the library's own prototypes (cdefs/acl_prof.h). */
typedef __typeof__(aclprofCreateStamp) *create_fn;
typedef __typeof__(aclprofDestroyStamp) *destroy_fn;
typedef __typeof__(aclprofSetStampTraceMessage) *set_message_fn;
typedef __typeof__(aclprofPush) *stamp_fn; /* aclprofPush and aclprofMark */
typedef __typeof__(aclprofPop) *void_fn;
typedef __typeof__(aclprofRangeStart) *range_start_fn;
typedef __typeof__(aclprofRangeStop) *range_stop_fn;

static create_fn p_create;
static destroy_fn p_destroy;
static set_message_fn p_set_message;
static stamp_fn p_push, p_mark;
static void_fn p_pop;
static range_start_fn p_range_start;
static range_stop_fn p_range_stop;

typedef struct {
    char *text;
    uint32_t len;
    uint32_t nidle, cap;
    void **idle;
} tx_message;

typedef struct {
    void *stamp;
    uint32_t id;
    uint32_t gen;
} tx_entry;

typedef struct {
    uint32_t range_id;
    tx_entry use;
} tx_range;

static pthread_mutex_t tx_lock = PTHREAD_MUTEX_INITIALIZER;
static tx_message *tx_messages;            /* indexed by message id; guarded by tx_lock */
static uint32_t tx_nmessages, tx_capmessages;
static void *tx_live[TX_POOL_SIZE * 4];    /* every stamp we created and not destroyed */
static uint32_t tx_nlive;
static tx_range tx_ranges[TX_POOL_SIZE * 4];
static uint32_t tx_nranges;
static uint32_t tx_gen;                    /* read without the lock with __atomic */

/* This thread's open push()es and annotations. They are ranges in the library
 * (RangeStart/RangeStop, which pair by id) because the library's own Push/Pop stack is ONE
 * stack for the whole process (audit #3): with two threads, aclprofPop would close
 * whichever push is on top, so the pairing (and the durations) would be wrong. */
typedef struct {
    tx_entry use;
    uint32_t range_id;
} tx_open;

static _Thread_local tx_open t_stack[TX_STACK_DEPTH];
static _Thread_local uint32_t t_depth;
/* The pre-#3 path over aclprofPush/Pop, kept only for the benchmark's comparison. */
static _Thread_local tx_entry t_stamp_stack[TX_STACK_DEPTH];
static _Thread_local uint32_t t_stamp_depth;

int aclprof_fast_bind_tx(uintptr_t create, uintptr_t destroy, uintptr_t set_message,
                         uintptr_t push, uintptr_t pop, uintptr_t mark,
                         uintptr_t range_start, uintptr_t range_stop)
{
    p_create = (create_fn)create;
    p_destroy = (destroy_fn)destroy;
    p_set_message = (set_message_fn)set_message;
    p_push = (stamp_fn)push;
    p_pop = (void_fn)pop;
    p_mark = (stamp_fn)mark;
    p_range_start = (range_start_fn)range_start;
    p_range_stop = (range_stop_fn)range_stop;
    return 0;
}

static uint32_t current_gen(void)
{
    return __atomic_load_n(&tx_gen, __ATOMIC_ACQUIRE);
}

int64_t aclprof_tx_register(const char *text, uint32_t len)
{
    char *copy = malloc((size_t)len + 1);
    if (!copy)
        return ACLPROF_TX_NO_MEMORY;
    memcpy(copy, text, len);
    copy[len] = '\0';
    pthread_mutex_lock(&tx_lock);
    if (tx_nmessages == tx_capmessages) {
        uint32_t cap = tx_capmessages ? tx_capmessages * 2 : 64;
        tx_message *grown = realloc(tx_messages, cap * sizeof *grown);
        if (!grown) {
            pthread_mutex_unlock(&tx_lock);
            free(copy);
            return ACLPROF_TX_NO_MEMORY;
        }
        tx_messages = grown;
        tx_capmessages = cap;
    }
    uint32_t id = tx_nmessages++;
    tx_messages[id] = (tx_message){copy, len, 0, 0, NULL};
    pthread_mutex_unlock(&tx_lock);
    return id;
}

static void forget_live(void *stamp)  /* tx_lock held */
{
    for (uint32_t i = 0; i < tx_nlive; i++) {
        if (tx_live[i] == stamp) {
            tx_live[i] = tx_live[--tx_nlive];
            return;
        }
    }
}

static int evict_one(void)  /* tx_lock held; destroys one idle stamp of any message */
{
    for (uint32_t id = 0; id < tx_nmessages; id++) {
        tx_message *m = &tx_messages[id];
        if (m->nidle) {
            void *stamp = m->idle[--m->nidle];
            forget_live(stamp);
            p_destroy(stamp);
            return 1;
        }
    }
    return 0;
}

/* Check a stamp out for message `id` (or a one-off stamp for `text`). */
static int acquire(uint32_t id, const char *text, uint32_t len, tx_entry *out)
{
    if (!p_create || !p_set_message || !p_destroy)
        return ACLPROF_FAST_UNBOUND;
    pthread_mutex_lock(&tx_lock);
    out->id = id;
    out->gen = tx_gen;
    if (id != ACLPROF_TX_ONE_OFF) {
        if (id >= tx_nmessages) {
            pthread_mutex_unlock(&tx_lock);
            return ACLPROF_TX_UNKNOWN_ID;
        }
        tx_message *m = &tx_messages[id];
        if (m->nidle) {
            out->stamp = m->idle[--m->nidle];
            pthread_mutex_unlock(&tx_lock);
            return 0;
        }
        text = m->text;
        len = m->len;
    }
    int rc = 0;
    if (tx_nlive == sizeof tx_live / sizeof tx_live[0]) {
        rc = ACLPROF_TX_POOL_EXHAUSTED;
        goto out;
    }
    void *stamp = p_create();
    while (!stamp && evict_one())
        stamp = p_create();
    if (!stamp) {
        rc = tx_nlive >= TX_POOL_SIZE ? ACLPROF_TX_POOL_EXHAUSTED : ACLPROF_TX_CREATE_FAILED;
        goto out;
    }
    rc = p_set_message(stamp, text, len);
    if (rc != 0) {
        p_destroy(stamp);
        goto out;
    }
    tx_live[tx_nlive++] = stamp;
    out->stamp = stamp;
out:
    pthread_mutex_unlock(&tx_lock);
    return rc;
}

/* Return a stamp after use: idle again, or destroyed if one-off or from an ended session. */
static void release(const tx_entry *use)
{
    pthread_mutex_lock(&tx_lock);
    if (use->gen != tx_gen) {
        /* reset() already destroyed it */
    } else if (use->id == ACLPROF_TX_ONE_OFF) {
        forget_live(use->stamp);
        p_destroy(use->stamp);
    } else {
        tx_message *m = &tx_messages[use->id];
        if (m->nidle == m->cap) {
            uint32_t cap = m->cap ? m->cap * 2 : 4;
            void **grown = realloc(m->idle, cap * sizeof *grown);
            if (!grown) {  /* cannot cache it: give it back to the library */
                forget_live(use->stamp);
                p_destroy(use->stamp);
                pthread_mutex_unlock(&tx_lock);
                return;
            }
            m->idle = grown;
            m->cap = cap;
        }
        m->idle[m->nidle++] = use->stamp;
    }
    pthread_mutex_unlock(&tx_lock);
}

int aclprof_tx_push(uint32_t id, const char *text, uint32_t len)
{
    /* Entries of ended sessions left on top (a session stopped inside an annotation whose
     * exit then saw no session) are dropped here, so they cannot pile up. */
    uint32_t gen = current_gen();
    while (t_depth && t_stack[t_depth - 1].use.gen != gen)
        t_depth--;
    if (t_depth == TX_STACK_DEPTH)
        return ACLPROF_TX_TOO_DEEP;
    if (!p_range_start)
        return ACLPROF_FAST_UNBOUND;
    tx_open open;
    int rc = acquire(id, text, len, &open.use);
    if (rc != 0)
        return rc;
    rc = p_range_start(open.use.stamp, &open.range_id);
    if (rc != 0) {
        release(&open.use);
        return rc;
    }
    t_stack[t_depth++] = open;
    return 0;
}

int aclprof_tx_pop(void)
{
    if (t_depth == 0)
        return ACLPROF_TX_EMPTY;
    tx_open open = t_stack[--t_depth];
    if (open.use.gen != current_gen())
        return ACLPROF_TX_STALE;
    if (!p_range_stop)
        return ACLPROF_FAST_UNBOUND;
    /* Stopped exactly once: the library would accept (and report) a second stop of the
     * id, and the stamp goes back to the cache right after. */
    int rc = p_range_stop(open.range_id);
    release(&open.use);
    return rc;
}

int aclprof_tx_push_stamp(uint32_t id, const char *text, uint32_t len)
{
    uint32_t gen = current_gen();
    while (t_stamp_depth && t_stamp_stack[t_stamp_depth - 1].gen != gen)
        t_stamp_depth--;
    if (t_stamp_depth == TX_STACK_DEPTH)
        return ACLPROF_TX_TOO_DEEP;
    if (!p_push)
        return ACLPROF_FAST_UNBOUND;
    tx_entry use;
    int rc = acquire(id, text, len, &use);
    if (rc != 0)
        return rc;
    rc = p_push(use.stamp);
    if (rc != 0) {
        release(&use);
        return rc;
    }
    t_stamp_stack[t_stamp_depth++] = use;
    return 0;
}

int aclprof_tx_pop_stamp(void)
{
    if (t_stamp_depth == 0)
        return ACLPROF_TX_EMPTY;
    tx_entry use = t_stamp_stack[--t_stamp_depth];
    if (use.gen != current_gen())
        return ACLPROF_TX_STALE;
    if (!p_pop)
        return ACLPROF_FAST_UNBOUND;
    int rc = p_pop();
    release(&use);
    return rc;
}

int aclprof_tx_mark(uint32_t id, const char *text, uint32_t len)
{
    if (!p_mark)
        return ACLPROF_FAST_UNBOUND;
    tx_entry use;
    int rc = acquire(id, text, len, &use);
    if (rc != 0)
        return rc;
    rc = p_mark(use.stamp);
    release(&use);
    return rc;
}

int64_t aclprof_tx_range_start(uint32_t id, const char *text, uint32_t len)
{
    if (!p_range_start)
        return (int64_t)ACLPROF_FAST_UNBOUND - ACLPROF_TX_RANGE_BIAS;
    tx_entry use;
    int rc = acquire(id, text, len, &use);
    if (rc != 0)
        return (int64_t)rc - ACLPROF_TX_RANGE_BIAS;
    uint32_t range_id = 0;
    rc = p_range_start(use.stamp, &range_id);
    if (rc != 0) {
        release(&use);
        return (int64_t)rc - ACLPROF_TX_RANGE_BIAS;
    }
    pthread_mutex_lock(&tx_lock);
    /* tx_ranges cannot overflow: each open range holds one of at most
     * sizeof tx_live / sizeof tx_live[0] live stamps. */
    tx_ranges[tx_nranges++] = (tx_range){range_id, use};
    pthread_mutex_unlock(&tx_lock);
    return (int64_t)(use.gen & 0x7FFFFFFFu) << 32 | range_id;
}

int aclprof_tx_range_end(int64_t handle)
{
    if (handle < 0)
        return ACLPROF_TX_EMPTY;
    uint32_t range_id = (uint32_t)handle, gen = (uint32_t)(handle >> 32);
    tx_entry use = {0};
    int found = 0;
    pthread_mutex_lock(&tx_lock);
    for (uint32_t i = 0; i < tx_nranges; i++) {
        if (tx_ranges[i].range_id == range_id && (tx_ranges[i].use.gen & 0x7FFFFFFFu) == gen) {
            use = tx_ranges[i].use;
            tx_ranges[i] = tx_ranges[--tx_nranges];
            found = 1;
            break;
        }
    }
    int stale = !found && gen != (tx_gen & 0x7FFFFFFFu);
    pthread_mutex_unlock(&tx_lock);
    if (!found)
        return stale ? ACLPROF_TX_STALE : ACLPROF_TX_EMPTY;
    if (!p_range_stop)
        return ACLPROF_FAST_UNBOUND;
    int rc = p_range_stop(range_id);
    release(&use);
    return rc;
}

void aclprof_tx_reset(void)
{
    pthread_mutex_lock(&tx_lock);
    for (uint32_t i = 0; i < tx_nlive && p_destroy; i++)
        p_destroy(tx_live[i]);
    tx_nlive = 0;
    for (uint32_t id = 0; id < tx_nmessages; id++)
        tx_messages[id].nidle = 0;
    tx_nranges = 0;
    __atomic_store_n(&tx_gen, tx_gen + 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&tx_lock);
}

void aclprof_tx_clear_thread(void)
{
    t_depth = 0;
    t_stamp_depth = 0;
}

uint32_t aclprof_tx_live_stamps(void)
{
    pthread_mutex_lock(&tx_lock);
    uint32_t n = tx_nlive;
    pthread_mutex_unlock(&tx_lock);
    return n;
}

uint32_t aclprof_tx_depth(void)
{
    return t_depth;
}
