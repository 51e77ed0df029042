/* CRC-32C (Castagnoli) of op records: the SSE4.2 instruction when the CPU has it, a table
 * otherwise. Why both: the instruction is several times faster, and validating signatures is
 * the larger part of decoding a record; the table keeps non-x86 and old CPUs working.
 *
 * aclprof_crc_force_software() switches a machine with SSE4.2 to the table, so the tests can
 * check both paths against an independent CRC (tests/test_crc.py): otherwise only the path of
 * the test machine's CPU ever runs, and a fault in the other survives. */
#include "_fast_internal.h"

#include "aclprof_crc32c.h" /* the table and the SSE4.2 loop, shared with the daemon's storage CRC */

#define HAVE_CRC_SSE ACLPROF_CRC32C_HW

static uint32_t crc_table[256];
static int crc_hw = -1;      /* -1 unknown, 0 table, 1 hardware */
static int crc_force_sw;     /* set by tests; read with __atomic so a change is seen at once */

void aclprof_crc_init(void)
{
    aclprof_crc32c_table_fill(crc_table);
    crc_hw = aclprof_crc32c_cpu_has_hw();
}

static uint32_t crc_sw(uint32_t s, const uint8_t *p, size_t n)
{
    return aclprof_crc32c_table_update(crc_table, s, p, n);
}

#if HAVE_CRC_SSE
__attribute__((target("sse4.2"))) static uint32_t crc_sse(uint32_t s, const uint8_t *p, size_t n)
{
    return aclprof_crc32c_hw_update(s, p, n);
}

/* The signed bytes of the two record sizes (76 and 68: words of 8, then 4), the loop
 * unrolled: its counting and branching were as many instructions as the CRC itself, on
 * every record the reader checks. */
#define CRC_SSE_FIXED(fn, words)                                                                  \
    __attribute__((target("sse4.2"))) static uint32_t fn(const uint8_t *p)                        \
    {                                                                                             \
        uint64_t s = 0xFFFFFFFFu, v;                                                              \
        _Pragma("GCC unroll 16") for (int k = 0; k < (words); k++)                                \
        {                                                                                         \
            memcpy(&v, p + 8 * k, 8);                                                             \
            s = __builtin_ia32_crc32di(s, v);                                                     \
        }                                                                                         \
        uint32_t tail;                                                                            \
        memcpy(&tail, p + 8 * (words), 4);                                                        \
        return __builtin_ia32_crc32si((uint32_t)s, tail);                                         \
    }
CRC_SSE_FIXED(crc_sse_76, 9)
CRC_SSE_FIXED(crc_sse_68, 8)
_Static_assert(sizeof(ProfOpDesc) - 4 == 9 * 8 + 4 && offsetof(ProfOpDesc, devId) - 4 == 8 * 8 + 4,
               "the signed bytes of an 80- and a 72-byte record");
#endif

int aclprof_crc_force_software(int force)
{
    if (crc_hw < 0)
        aclprof_crc_init();
    return __atomic_exchange_n(&crc_force_sw, force != 0, __ATOMIC_RELAXED);
}

int aclprof_crc_hardware(void)
{
    if (crc_hw < 0)
        aclprof_crc_init();
    return crc_hw == 1 && !__atomic_load_n(&crc_force_sw, __ATOMIC_RELAXED);
}

/* The signature covers everything after itself: ProfOpDesc's first field. */
#define SIGNED_FROM ((uint32_t)offsetof(ProfOpDesc, modelId))
_Static_assert(offsetof(ProfOpDesc, signature) == 0 && SIGNED_FROM == sizeof(uint32_t),
               "the signature is ProfOpDesc's first field, a uint32");

uint32_t aclprof_signature(const uint8_t *rec, uint32_t rec_size)
{
    if (crc_hw < 0)
        aclprof_crc_init();
    if (rec_size <= SIGNED_FROM)
        return 0xFFFFFFFFu;
#if HAVE_CRC_SSE
    if (crc_hw == 1 && !__atomic_load_n(&crc_force_sw, __ATOMIC_RELAXED)) {
        if (rec_size == sizeof(ProfOpDesc))
            return crc_sse_76(rec + SIGNED_FROM);
        if (rec_size == offsetof(ProfOpDesc, devId))
            return crc_sse_68(rec + SIGNED_FROM);
        return crc_sse(0xFFFFFFFFu, rec + SIGNED_FROM, rec_size - SIGNED_FROM);
    }
#endif
    return crc_sw(0xFFFFFFFFu, rec + SIGNED_FROM, rec_size - SIGNED_FROM);
}
