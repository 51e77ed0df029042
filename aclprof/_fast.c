/* Hot-path helpers for aclprof; see _fast.h. Kept free of any vendor header: the
 * prototypes of the few functions called are spelled out here and must match cdefs/. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ACLPROF_FAST_UNBOUND -1000
#define ACLPROF_FAST_RANGE_ERROR_BIAS 1099511627776LL

typedef int (*stamp_fn)(void *);
typedef int (*void_fn)(void);
typedef int (*range_start_fn)(void *, uint32_t *);
typedef int (*range_stop_fn)(uint32_t);

static stamp_fn p_push, p_mark;
static void_fn p_pop;
static range_start_fn p_range_start;
static range_stop_fn p_range_stop;

int aclprof_fast_bind_tx(uintptr_t push, uintptr_t pop, uintptr_t mark,
                         uintptr_t range_start, uintptr_t range_stop)
{
    p_push = (stamp_fn)push;
    p_pop = (void_fn)pop;
    p_mark = (stamp_fn)mark;
    p_range_start = (range_start_fn)range_start;
    p_range_stop = (range_stop_fn)range_stop;
    return 0;
}

int aclprof_tx_push(uintptr_t stamp)
{
    return p_push ? p_push((void *)stamp) : ACLPROF_FAST_UNBOUND;
}

int aclprof_tx_pop(void)
{
    return p_pop ? p_pop() : ACLPROF_FAST_UNBOUND;
}

int aclprof_tx_mark(uintptr_t stamp)
{
    return p_mark ? p_mark((void *)stamp) : ACLPROF_FAST_UNBOUND;
}

int64_t aclprof_tx_range_start(uintptr_t stamp)
{
    uint32_t id = 0;
    int rc = p_range_start ? p_range_start((void *)stamp, &id) : ACLPROF_FAST_UNBOUND;
    return rc == 0 ? (int64_t)id : (int64_t)rc - ACLPROF_FAST_RANGE_ERROR_BIAS;
}

int aclprof_tx_range_stop(uint32_t range_id)
{
    return p_range_stop ? p_range_stop(range_id) : ACLPROF_FAST_UNBOUND;
}

/* ------------------------------------------------------------------------------------
 * Op record decoding. The library keeps op names and types in a side table that only its
 * getters can read (and each read frees the entry), so every record needs four calls
 * (TypeLen, Type, NameLen, Name). Doing them here instead of in Python is what makes the
 * reader fast; calling them on one-record slices keeps each call O(1), because the
 * library re-checks the signature of every record in the buffer it is given.
 * ------------------------------------------------------------------------------------ */
#define ACLPROF_REC_OK 0
#define ACLPROF_REC_CORRUPT 1
#define ACLPROF_REC_NO_TYPE 2
#define ACLPROF_REC_NO_NAME 4

typedef int (*len_fn)(const void *, size_t, uint32_t, size_t *);
typedef int (*str_fn)(const void *, size_t, uint32_t, char *, size_t);
static len_fn p_type_len, p_name_len;
static str_fn p_type, p_name;
static void crc_init(void);

int aclprof_fast_bind_ops(uintptr_t type_len, uintptr_t type, uintptr_t name_len, uintptr_t name)
{
    p_type_len = (len_fn)type_len;
    p_type = (str_fn)type;
    p_name_len = (len_fn)name_len;
    p_name = (str_fn)name;
    crc_init(); /* here, once, under the loader's lock: no lazy-init race later */
    return 0;
}

/* --- CRC-32C: SSE4.2 instruction when the CPU has it, a table otherwise. --- */
static uint32_t crc_table[256];
static int crc_hw = -1; /* -1 unknown, 0 table, 1 hardware */

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[i] = c;
    }
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    crc_hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
#else
    crc_hw = 0;
#endif
}

static uint32_t crc_sw(uint32_t s, const uint8_t *p, size_t n)
{
    while (n--)
        s = crc_table[(s ^ *p++) & 0xFF] ^ (s >> 8);
    return s;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("sse4.2"))) static uint32_t crc_sse(uint32_t s, const uint8_t *p, size_t n)
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
    while (n--)
        s = __builtin_ia32_crc32qi(s, *p++);
    return s;
}
#endif

uint32_t aclprof_signature(const uint8_t *rec, uint32_t rec_size)
{
    if (crc_hw < 0)
        crc_init();
    if (rec_size <= 4)
        return 0xFFFFFFFFu;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (crc_hw == 1)
        return crc_sse(0xFFFFFFFFu, rec + 4, rec_size - 4);
#endif
    return crc_sw(0xFFFFFFFFu, rec + 4, rec_size - 4);
}

/* --- interner: open addressing over dense entries --- */
typedef struct {
    char *bytes;
    uint32_t len;
    uint32_t hash;
} entry_t;

typedef struct aclprof_interner aclprof_interner;
struct aclprof_interner {
    entry_t *entries;   /* dense, id = index */
    uint32_t size, cap_entries, max_entries;
    uint32_t *slots;    /* id + 1, 0 = empty */
    uint32_t nslots;    /* power of two, kept under 50% full */
    uint64_t overflows;
};

static uint32_t fnv1a(const char *p, size_t n)
{
    uint32_t h = 2166136261u;
    while (n--)
        h = (h ^ (uint8_t)*p++) * 16777619u;
    return h;
}

static int interner_grow_slots(aclprof_interner *in)
{
    uint32_t n = in->nslots ? in->nslots * 2 : 1024;
    uint32_t *slots = calloc(n, sizeof *slots);
    if (!slots)
        return -1;
    for (uint32_t id = 0; id < in->size; id++) {
        uint32_t i = in->entries[id].hash & (n - 1);
        while (slots[i])
            i = (i + 1) & (n - 1);
        slots[i] = id + 1;
    }
    free(in->slots);
    in->slots = slots;
    in->nslots = n;
    return 0;
}

static uint32_t intern(aclprof_interner *in, const char *s, size_t len)
{
    uint32_t h = fnv1a(s, len);
    uint32_t mask = in->nslots - 1, i = h & mask;
    for (uint32_t id1; (id1 = in->slots[i]) != 0; i = (i + 1) & mask) {
        entry_t *e = &in->entries[id1 - 1];
        if (e->hash == h && e->len == len && memcmp(e->bytes, s, len) == 0)
            return id1 - 1;
    }
    if (in->size >= in->max_entries)
        goto full;
    if (in->size == in->cap_entries) {
        uint32_t cap = in->cap_entries * 2;
        entry_t *entries = realloc(in->entries, cap * sizeof *entries);
        if (!entries)
            goto full;
        in->entries = entries;
        in->cap_entries = cap;
    }
    char *copy = malloc(len + 1);
    if (!copy)
        goto full;
    memcpy(copy, s, len);
    copy[len] = '\0';
    uint32_t id = in->size++;
    in->entries[id] = (entry_t){copy, (uint32_t)len, h};
    in->slots[i] = id + 1;
    if ((uint64_t)in->size * 2 > in->nslots && interner_grow_slots(in) != 0) {
        /* The table still works, only slower; the next insert retries growing. */
    }
    return id;
full:
    in->overflows++;
    return 0;
}

void aclprof_interner_free(aclprof_interner *in);

aclprof_interner *aclprof_interner_new(uint32_t max_entries)
{
    aclprof_interner *in = calloc(1, sizeof *in);
    if (!in)
        return NULL;
    in->max_entries = max_entries < 2 ? 2 : max_entries;
    in->cap_entries = 256;
    in->entries = malloc(in->cap_entries * sizeof *in->entries);
    if (!in->entries || interner_grow_slots(in) != 0) {
        aclprof_interner_free(in);
        return NULL;
    }
    intern(in, "?", 1); /* id 0: unavailable */
    return in;
}

void aclprof_interner_free(aclprof_interner *in)
{
    if (!in)
        return;
    for (uint32_t id = 0; id < in->size; id++)
        free(in->entries[id].bytes);
    free(in->entries);
    free(in->slots);
    free(in);
}

uint32_t aclprof_interner_size(const aclprof_interner *in)
{
    return in->size;
}

uint64_t aclprof_interner_overflows(const aclprof_interner *in)
{
    return in->overflows;
}

const char *aclprof_interner_entry(const aclprof_interner *in, uint32_t id, size_t *len)
{
    if (id >= in->size) {
        *len = 0;
        return NULL;
    }
    *len = in->entries[id].len;
    return in->entries[id].bytes;
}

/* Fetch one string through a Len+Get pair; returns its id, or UINT32_MAX on failure. */
static uint32_t fetch(aclprof_interner *in, len_fn get_len, str_fn get, const uint8_t *rec,
                      uint32_t rec_size)
{
    size_t len = 0;
    if (!get_len || !get || get_len(rec, rec_size, 0, &len) != 0 || len == 0)
        return UINT32_MAX;
    char stackbuf[512];
    char *buf = len <= sizeof stackbuf ? stackbuf : malloc(len);
    if (!buf)
        return UINT32_MAX;
    memset(buf, 0, len); /* the library NUL-terminates only at [len-1] */
    uint32_t id = UINT32_MAX;
    if (get(rec, rec_size, 0, buf, len) == 0)
        id = intern(in, buf, len - 1);
    if (buf != stackbuf)
        free(buf);
    return id;
}

uint32_t aclprof_decode_names(aclprof_interner *in, const uint8_t *buf, uint32_t n,
                              uint32_t rec_size, int validate, uint32_t *type_ids,
                              uint32_t *name_ids, uint8_t *status)
{
    uint32_t good = 0;
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *rec = buf + (size_t)i * rec_size;
        type_ids[i] = name_ids[i] = 0;
        if (validate) {
            uint32_t sig;
            memcpy(&sig, rec, sizeof sig);
            if (sig != aclprof_signature(rec, rec_size)) {
                status[i] = ACLPROF_REC_CORRUPT;
                continue;
            }
        }
        uint8_t st = ACLPROF_REC_OK;
        /* Both are fetched even if one fails: each fetch frees its own table entry. */
        uint32_t t = fetch(in, p_type_len, p_type, rec, rec_size);
        uint32_t m = fetch(in, p_name_len, p_name, rec, rec_size);
        if (t == UINT32_MAX)
            st |= ACLPROF_REC_NO_TYPE;
        else
            type_ids[i] = t;
        if (m == UINT32_MAX)
            st |= ACLPROF_REC_NO_NAME;
        else
            name_ids[i] = m;
        status[i] = st;
        good++;
    }
    return good;
}
