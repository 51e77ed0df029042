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
        aclprof_record r; /* a copy: rows are 57 bytes apart, never aligned */
        memcpy(&r, src + offsetof(aclprof_op_row, rec), sizeof r);
        uint32_t hi = r.op_name > r.op_type ? r.op_name : r.op_type;
        if (hi > top)
            top = hi;
        if (hi >= map_len) {
            missing = 1; /* go on: the caller needs the largest id of the whole batch */
            continue;
        }
        if (missing)
            continue;
        if (src[offsetof(aclprof_op_row, keypoint)])
            r.flag |= (uint32_t)ACLPROF_FLAG_KEYPOINT;
        r.op_name = map[r.op_name];
        r.op_type = map[r.op_type];
        memcpy(out + (size_t)i * sizeof r, &r, sizeof r);
    }
    return missing ? (int64_t)top : -1;
}
