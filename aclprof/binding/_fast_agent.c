/* The agent's record conversion: library op records -> wire records, name ids remapped, in
 * one pass and without the GIL (see _fast.h). The agent's sender thread calls it once per
 * batch; in numpy the same work is four operations, each holding the GIL that the
 * service's step thread waits for. */
#include "_fast_internal.h"

/* OP_DTYPE offsets (numpy packs it: no padding) and the wire record's, the same 56 bytes. */
#define OFF_OP_NAME 4
#define OFF_OP_TYPE 8
#define OFF_FLAG 12
#define OFF_KEYPOINT 56

static inline uint32_t ld32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static inline void st32le(uint8_t *p, uint32_t v)
{
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap32(v);
#endif
    memcpy(p, &v, 4);
}

#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
/* The library's records are native-endian, the wire is little-endian. */
static void to_le(uint8_t *rec)
{
    for (int off = 0; off < 24; off += 4) {
        uint32_t v;
        memcpy(&v, rec + off, 4);
        v = __builtin_bswap32(v);
        memcpy(rec + off, &v, 4);
    }
    for (int off = 24; off < 56; off += 8) {
        uint64_t v;
        memcpy(&v, rec + off, 8);
        v = __builtin_bswap64(v);
        memcpy(rec + off, &v, 8);
    }
}
#endif

int64_t aclprof_agent_convert(uint8_t *out, const uint8_t *data, uint32_t n, uint32_t in_size,
                              const uint32_t *map, uint32_t map_len)
{
    uint32_t top = 0;
    int missing = 0;
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *src = data + (size_t)i * in_size;
        uint8_t *dst = out + (size_t)i * ACLPROF_WIRE_RECORD_SIZE;
        uint32_t name = ld32(src + OFF_OP_NAME), type = ld32(src + OFF_OP_TYPE);
        uint32_t hi = name > type ? name : type;
        if (hi > top)
            top = hi;
        if (hi >= map_len) {
            missing = 1; /* go on: the caller needs the largest id of the whole batch */
            continue;
        }
        if (missing)
            continue;
        uint32_t flag = ld32(src + OFF_FLAG);
        if (src[OFF_KEYPOINT])
            flag |= (uint32_t)ACLPROF_WIRE_FLAG_KEYPOINT;
        memcpy(dst, src, ACLPROF_WIRE_RECORD_SIZE);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        to_le(dst);
#endif
        st32le(dst + OFF_OP_NAME, map[name]);
        st32le(dst + OFF_OP_TYPE, map[type]);
        st32le(dst + OFF_FLAG, flag);
    }
    return missing ? (int64_t)top : -1;
}
