/* Hot-path helpers compiled in cffi API mode (see aclprof/_build_ffi.py).
 * The loader binds the vendor library's function pointers once with aclprof_fast_bind_*();
 * until then every call returns ACLPROF_FAST_UNBOUND. */

#define ACLPROF_FAST_UNBOUND -1000
#define ACLPROF_FAST_RANGE_ERROR_BIAS 1099511627776

int aclprof_fast_bind_tx(uintptr_t push, uintptr_t pop, uintptr_t mark,
                         uintptr_t range_start, uintptr_t range_stop);
int aclprof_tx_push(uintptr_t stamp);
int aclprof_tx_pop(void);
int aclprof_tx_mark(uintptr_t stamp);
/* Returns the range id (>= 0) on success; on failure the C return code minus
 * ACLPROF_FAST_RANGE_ERROR_BIAS (always negative), so one call gives both. */
int64_t aclprof_tx_range_start(uintptr_t stamp);
int aclprof_tx_range_stop(uint32_t range_id);
