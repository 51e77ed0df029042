/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) for aclprof's own C: the binding's
 * record signatures (aclprof/binding/_fast_crc.c) and the daemon's storage chunks
 * (aclprof/protocol/_batchgroup.c). One copy of the table and of the SSE4.2 loop, here beside the
 * record layouts, so the two cannot drift. The mock keeps its own (mock_acl/src/opdesc.c): it
 * stands for CANN's code, not ours.
 *
 * The functions update a raw CRC state: no initial or final inversion, which each caller
 * applies as its format says (a record signature: init 0xFFFFFFFF, no final XOR; a chunk CRC:
 * the usual inversions on both sides). */
#ifndef ACLPROF_CRC32C_H
#define ACLPROF_CRC32C_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define ACLPROF_CRC32C_POLY 0x82F63B78u

static inline void aclprof_crc32c_table_fill(uint32_t table[256])
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ ACLPROF_CRC32C_POLY : c >> 1;
        table[i] = c;
    }
}

/* A byte at a time through ``table`` (filled by aclprof_crc32c_table_fill). */
static inline uint32_t aclprof_crc32c_table_update(const uint32_t table[256], uint32_t s, const uint8_t *p,
                                                   size_t n)
{
    while (n--)
        s = table[(s ^ *p++) & 0xFF] ^ (s >> 8);
    return s;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define ACLPROF_CRC32C_HW 1

/* The SSE4.2 instruction, 8 bytes at a time (unaligned loads are cheap on x86-64), then 4,
 * then single bytes. Call only where aclprof_crc32c_cpu_has_hw() said yes. */
__attribute__((target("sse4.2"))) static inline uint32_t aclprof_crc32c_hw_update(uint32_t s, const uint8_t *p,
                                                                                 size_t n)
{
    uint64_t s64 = s;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        s64 = __builtin_ia32_crc32di(s64, v);
        p += 8;
        n -= 8;
    }
    s = (uint32_t)s64;
    if (n >= 4) { /* a record's 76 or 68 signed bytes end in one 4-byte word */
        uint32_t v;
        memcpy(&v, p, 4);
        s = __builtin_ia32_crc32si(s, v);
        p += 4;
        n -= 4;
    }
    while (n--)
        s = __builtin_ia32_crc32qi(s, *p++);
    return s;
}

static inline int aclprof_crc32c_cpu_has_hw(void)
{
    __builtin_cpu_init(); /* before any constructor may have run it */
    return __builtin_cpu_supports("sse4.2") != 0; /* a bit mask, not 1 */
}
#else
#define ACLPROF_CRC32C_HW 0

static inline int aclprof_crc32c_cpu_has_hw(void)
{
    return 0;
}
#endif

#endif /* ACLPROF_CRC32C_H */
