/* Loads and stores of a 4- or 8-byte field at any address, native order, for every C file
 * that reads records or rows in place (aclprof/binding's _fast_*.c, aclprof/protocol's
 * _jsonl.c and _batchgroup.c): records sit back to back in a pipe read or a frame and rows
 * are packed (57 bytes), so a field is never known to be aligned, and each access goes
 * through memcpy (one instruction on the platforms built for). One definition here, beside
 * the record layouts of aclprof_records.h, instead of one copy per package. */
#ifndef ACLPROF_UNALIGNED_H
#define ACLPROF_UNALIGNED_H

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

static inline void st32(void *p, uint32_t v)
{
    memcpy(p, &v, sizeof v);
}

#endif
