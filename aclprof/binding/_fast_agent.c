/* The agent's record conversion: op rows -> wire records, name ids remapped, in one pass and
 * without the GIL (see _fast.h). The agent's sender thread calls it once per batch; in numpy
 * the same work is four operations, each holding the GIL that the service's step thread
 * waits for. Both layouts are cdefs/aclprof_records.h's: an op row starts with the wire
 * record's ten fields, native-endian. */
#include "_fast_internal.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
/* The wire is little-endian and op rows are native: a big-endian port swaps each field of r
 * below (aclprof.protocol._jsonl, which the same package builds, refuses big-endian too). */
#error "aclprof.binding._fast writes little-endian wire records from native op rows: port the stores"
#endif

int64_t aclprof_agent_convert(uint8_t *out, const uint8_t *data, uint32_t n, uint32_t in_size,
                              const uint32_t *map, uint32_t map_len)
{
    uint32_t top = 0;
    int missing = 0;
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *src = data + (size_t)i * in_size;
        uint8_t *dst = out + (size_t)i * sizeof(aclprof_record);
        uint32_t name = ld32(src + ACLPROF_ROW_AT(op_name)), type = ld32(src + ACLPROF_ROW_AT(op_type));
        uint32_t hi = name > type ? name : type;
        if (hi > top)
            top = hi;
        if (hi >= map_len) {
            missing = 1; /* go on: the caller needs the largest id of the whole batch */
            continue;
        }
        if (missing)
            continue;
        /* The row's record copied whole, then the three fields that change patched in place:
         * a copy into a local struct and out again ran at half this speed (gcc keeps the
         * struct in memory: two 56-byte copies per record). */
        memcpy(dst, src + offsetof(aclprof_op_row, rec), sizeof(aclprof_record));
        uint32_t flag = ld32(src + ACLPROF_ROW_AT(flag));
        if (src[offsetof(aclprof_op_row, keypoint)])
            flag |= (uint32_t)ACLPROF_FLAG_KEYPOINT;
        st32(dst + offsetof(aclprof_record, op_name), map[name]);
        st32(dst + offsetof(aclprof_record, op_type), map[type]);
        st32(dst + offsetof(aclprof_record, flag), flag);
    }
    return missing ? (int64_t)top : -1;
}
