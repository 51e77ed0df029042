/* Loads of a wire record's fields in place, for the protocol's C modules (_jsonl.c,
 * _batchgroup.c): records sit back to back in a frame, so a field is never known to be
 * aligned, and every load goes through memcpy (one instruction on the platforms built for). */
#ifndef ACLPROF_PROTOCOL_UNALIGNED_H
#define ACLPROF_PROTOCOL_UNALIGNED_H

#include <stdint.h>
#include <string.h>

static inline uint32_t ld32(const void *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline uint64_t ld64(const void *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

#endif
