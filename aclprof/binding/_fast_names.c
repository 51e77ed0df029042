/* Op names and types for the decode loop (_fast_ops.c): the string interner, and the fetch
 * of one record's type and name through the library's one-shot getters (see _fast.h).
 *
 * Why a prediction: ops repeat in model order every step, so the record after an op named X
 * is, nearly always, the same op as the last time X was seen. Each entry remembers the
 * (type, name) ids of the record that followed the last record it named; the fetched bytes
 * are compared with that guess (the 8-byte words holding its bytes and the zero after them:
 * guess_holds), and only a miss hashes and probes. A guess is only ever a shortcut to the id the
 * hash lookup would give for the same bytes (each string has one id), so hits and misses
 * decode identically; a model whose order changes, or two models in one pipe, just miss
 * more (counted: aclprof_interner_predicted). Issue 21: hashing and probing every string was
 * over half of our instructions per record (bench_decode.py). */
#include "_fast_internal.h"

/* Pointer types from the library's own prototypes (cdefs/acl_prof.h); the name getters
 * have the same types as the type getters. */
typedef __typeof__(aclprofGetOpTypeLen) *len_fn;
typedef __typeof__(aclprofGetOpType) *str_fn;
static len_fn p_type_len, p_name_len;
static str_fn p_type, p_name;

int aclprof_fast_bind_ops(uintptr_t type_len, uintptr_t type, uintptr_t name_len, uintptr_t name)
{
    p_type_len = (len_fn)type_len;
    p_type = (str_fn)type;
    p_name_len = (len_fn)name_len;
    p_name = (str_fn)name;
    aclprof_crc_init(); /* here, once, under the loader's lock: no lazy-init race later */
    return 0;
}

/* --- interner: open addressing over dense entries --- */
#define NONE UINT32_MAX

typedef struct {
    char *bytes;        /* len bytes, then zeros up to a multiple of 8 bytes past len (PADDED) */
    uint32_t len;
    uint32_t hash;
    uint32_t next_type; /* the record after the last one this entry named: its ids (NONE: */
    uint32_t next_name; /* none seen, or that string was missing) */
    int guessable;      /* no zero byte inside and len <= ACLPROF_NAME_LIMIT: see fetch() */
} entry_t;

/* A name or type longer than this many bytes is cut to it (at a UTF-8 character boundary)
 * and counted (aclprof_interner_cut); fetch() reads names through a buffer of NAME_BUF
 * bytes, which is what makes one Get call per string exact up to this length. */
#define NAME_BUF (ACLPROF_NAME_LIMIT + 2)
/* Bytes [0, len] (the string and its zero) rounded up to whole 8-byte words: what a guess
 * compares and what a hit zeroes, a word at a time. Entries and the name buffer are
 * allocated (zero-padded) to this, so those words are in bounds. */
#define PADDED(len) ((((size_t)(len) + 1) + 7) & ~(size_t)7)

struct aclprof_interner {
    entry_t *entries;   /* dense, id = index */
    uint32_t size, cap_entries, max_entries;
    uint32_t *slots;    /* id + 1, 0 = empty */
    uint32_t nslots;    /* power of two, kept under 50% full */
    uint64_t overflows;
    uint64_t cut;       /* names and types cut to ACLPROF_NAME_LIMIT bytes */
    uint64_t predicted; /* strings whose id the guess gave (no hash, no probe) */
    uint32_t prev_name; /* the name id of the last record named (NONE: none, or missing) */
    uint32_t kp_name, kp_type; /* the ids of "keypoint_op" and "na" once interned, else NONE */
    char *namebuf;      /* PADDED(NAME_BUF) bytes, all zero between fetches */
};

/* A word at a time (the names are tens of bytes: a byte loop was a third of the interning);
 * the tail is read as one zero-padded word. Any mix works: ids do not depend on it. */
static uint32_t hash_bytes(const char *p, size_t n)
{
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)n;
    for (; n >= 8; p += 8, n -= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
    }
    if (n) {
        uint64_t w = 0;
        memcpy(&w, p, n);
        h = (h ^ w) * 0xFF51AFD7ED558CCDull;
    }
    h ^= h >> 29;
    h *= 0xC4CEB9FE1A85EC53ull;
    return (uint32_t)(h ^ (h >> 32));
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
    uint32_t h = hash_bytes(s, len);
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
    char *copy = calloc(1, PADDED(len));
    if (!copy)
        goto full;
    memcpy(copy, s, len);
    uint32_t id = in->size++;
    in->entries[id] = (entry_t){copy, (uint32_t)len, h, NONE, NONE,
                                len <= ACLPROF_NAME_LIMIT && !memchr(s, 0, len)};
    in->slots[i] = id + 1;
    if (len == 11 && memcmp(s, "keypoint_op", 11) == 0)
        in->kp_name = id;
    else if (len == 2 && memcmp(s, "na", 2) == 0)
        in->kp_type = id;
    if ((uint64_t)in->size * 2 > in->nslots && interner_grow_slots(in) != 0) {
        /* The table still works, only slower; the next insert retries growing. */
    }
    return id;
full:
    in->overflows++;
    return 0;
}

aclprof_interner *aclprof_interner_new(uint32_t max_entries)
{
    aclprof_interner *in = calloc(1, sizeof *in);
    if (!in)
        return NULL;
    in->max_entries = max_entries < 2 ? 2 : max_entries;
    in->cap_entries = 256;
    in->prev_name = in->kp_name = in->kp_type = NONE;
    in->entries = malloc(in->cap_entries * sizeof *in->entries);
    in->namebuf = calloc(1, PADDED(NAME_BUF));
    if (!in->entries || !in->namebuf || interner_grow_slots(in) != 0) {
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
    free(in->namebuf);
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

uint64_t aclprof_interner_cut(const aclprof_interner *in)
{
    return in->cut;
}

uint64_t aclprof_interner_predicted(const aclprof_interner *in)
{
    return in->predicted;
}

uint32_t aclprof_interner_add(aclprof_interner *in, const char *s, uint32_t len)
{
    return intern(in, s, len);
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

/* Intern s[0, len), cut to ACLPROF_NAME_LIMIT bytes (counted) if longer: the cut backs off
 * to the start of a UTF-8 character it would split (at most 3 bytes). */
static uint32_t keep(aclprof_interner *in, const char *s, size_t len)
{
    if (len > ACLPROF_NAME_LIMIT) {
        len = ACLPROF_NAME_LIMIT;
        for (int k = 0; k < 3 && ((uint8_t)s[len] & 0xC0) == 0x80; k++)
            len--;
        in->cut++;
    }
    return intern(in, s, len);
}

/* Whether the zero-padded name buffer nb holds exactly the entry's bytes (len of them, no
 * zero among them) followed by a zero: the words of [0, PADDED(len)) are equal, the entry's
 * padding being zeros and the buffer's bytes past the string too (it is zero between
 * fetches, and the Get writes the string's bytes only). If so the words are zeroed again.
 * A buffer that differs anywhere in those words (a longer string, a stray byte after the
 * zero) is a miss and goes the exact way. Inline words: a memcmp and a memset call cost more
 * than the compare of a name of a few tens of bytes. */
static inline int guess_holds(char *nb, const char *bytes, uint32_t len)
{
    size_t words = PADDED(len) / 8;
    uint64_t diff = 0;
    for (size_t k = 0; k < words; k++) {
        uint64_t a, b;
        memcpy(&a, nb + 8 * k, 8);
        memcpy(&b, bytes + 8 * k, 8);
        diff |= a ^ b;
    }
    if (diff)
        return 0;
    memset(nb, 0, words * 8);
    return 1;
}

/* Fetch one string; returns its id, or NONE when the library has none for rec. guess: the
 * id it probably has (NONE: no guess).
 *
 * One Get call into the zeroed NAME_BUF-byte buffer, no Len call first: half the library
 * calls (each of which re-checks the record's CRC and takes the library's lock). The real
 * getter (op_desc_parser.cpp; reference section 3.4) copies strlen bytes with memcpy_s,
 * which refuses (entry kept) when strlen > bufLen, then writes buf[bufLen-1] = 0 and erases
 * the entry; CANN's docs instead say a short buffer truncates. Under either reading a string
 * of at most ACLPROF_NAME_LIMIT (= NAME_BUF - 2) bytes comes back whole, ended by a zero of
 * the buffer (exact, as the Len+Get pair gave it), and any longer one comes back as
 * NAME_BUF - 1 bytes or is refused: both are cut to the limit by keep(), so the result
 * does not depend on the reading. Refused (a long string, or none at all): the Len+Get
 * pair, as before. Only the bytes a call wrote are zeroed again afterwards.
 *
 * The guess holds when the buffer starts with the guessed entry's len bytes followed by a
 * zero (guess_holds): that is strnlen == len and the same bytes, so keep() would not cut
 * them (len <= the limit) and intern() would return that very id. An entry with a zero byte
 * inside (only aclprof_interner_add makes one) is never guessed. */
static inline __attribute__((always_inline)) uint32_t
fetch(aclprof_interner *in, len_fn get_len, str_fn get, const uint8_t *rec, uint32_t rec_size, uint32_t guess)
{
    if (!get_len || !get)
        return NONE;
    char *nb = in->namebuf;
    if (get(rec, rec_size, 0, nb, NAME_BUF) == 0) {
        if (guess < in->size && in->entries[guess].guessable &&
            guess_holds(nb, in->entries[guess].bytes, in->entries[guess].len)) {
            in->predicted++;
            return guess;
        }
        size_t got = strnlen(nb, NAME_BUF);
        uint32_t id = keep(in, nb, got);
        memset(nb, 0, got < NAME_BUF ? got + 1 : NAME_BUF);
        return id;
    }
    memset(nb, 0, NAME_BUF); /* a refused Get may have written it (securec clears it) */
    size_t len = 0;
    if (get_len(rec, rec_size, 0, &len) != 0 || len == 0)
        return NONE;
    char *buf = calloc(1, len); /* the library NUL-terminates only at [len-1] */
    if (!buf)
        return NONE;
    uint32_t id = NONE;
    if (get(rec, rec_size, 0, buf, len) == 0)
        id = keep(in, buf, len - 1);
    free(buf);
    return id;
}

int aclprof_names_fetch(aclprof_interner *in, const uint8_t *rec, uint32_t rec_size, uint32_t *type,
                        uint32_t *name)
{
    uint32_t guess_type = NONE, guess_name = NONE;
    entry_t *prev = in->prev_name < in->size ? &in->entries[in->prev_name] : NULL;
    if (prev) {
        guess_type = prev->next_type;
        guess_name = prev->next_name;
    }
    /* Both are fetched even if one fails: each fetch frees its own table entry. */
    uint32_t t = fetch(in, p_type_len, p_type, rec, rec_size, guess_type);
    uint32_t m = fetch(in, p_name_len, p_name, rec, rec_size, guess_name);
    if (prev) {
        prev = &in->entries[in->prev_name]; /* intern() may have moved the entries */
        prev->next_type = t;
        prev->next_name = m;
    }
    in->prev_name = m;
    *type = t;
    *name = m;
    return t != NONE && m != NONE && t == in->kp_type && m == in->kp_name;
}
