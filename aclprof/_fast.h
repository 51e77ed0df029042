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

/* ---- op record decoding (operator subscription) ---- */
#define ACLPROF_REC_OK 0
#define ACLPROF_REC_CORRUPT 1
#define ACLPROF_REC_NO_TYPE 2
#define ACLPROF_REC_NO_NAME 4

/* Binds aclprofGetOpTypeLen, aclprofGetOpType, aclprofGetOpNameLen, aclprofGetOpName. */
int aclprof_fast_bind_ops(uintptr_t type_len, uintptr_t type, uintptr_t name_len, uintptr_t name);

/* Interned byte strings: equal strings get equal ids, ids are dense from 0, and id 0 is the
 * reserved "?" given when a name could not be fetched or the table is full. */
typedef struct aclprof_interner aclprof_interner;
aclprof_interner *aclprof_interner_new(uint32_t max_entries);
void aclprof_interner_free(aclprof_interner *in);
uint32_t aclprof_interner_size(const aclprof_interner *in);
uint64_t aclprof_interner_overflows(const aclprof_interner *in);
const char *aclprof_interner_entry(const aclprof_interner *in, uint32_t id, size_t *len);

/* The record signature (CRC-32C, init ~0, no final xor, over bytes [4, rec_size)). */
uint32_t aclprof_signature(const uint8_t *rec, uint32_t rec_size);

/* For each of the n records of rec_size bytes at buf: check its signature (if validate),
 * then fetch its type and name once each through the library, calling the getters on a
 * one-record slice (index 0) so the cost stays linear, and intern them. status[i] gets
 * ACLPROF_REC_* bits (CORRUPT records are not passed to the getters). Returns the number
 * of records that are not CORRUPT. Releases the GIL (cffi API mode does). */
uint32_t aclprof_decode_names(aclprof_interner *in, const uint8_t *buf, uint32_t n,
                              uint32_t rec_size, int validate, uint32_t *type_ids,
                              uint32_t *name_ids, uint8_t *status);
