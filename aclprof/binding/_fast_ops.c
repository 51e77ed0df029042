/* Op record decoding for aclprof.api.subscription: the name loop and the string interner
 * (see _fast.h).
 *
 * Why in C: the library keeps op names and types in a side table that only its getters can
 * read (and each read frees the entry), so every record needs four calls (TypeLen, Type,
 * NameLen, Name). Doing them here instead of in Python is what makes the reader fast; calling
 * them on one-record slices keeps each call O(1), because the library re-checks the signature
 * of every record in the buffer it is given. Signatures are checked by _fast_crc.c. */
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
typedef struct {
    char *bytes;
    uint32_t len;
    uint32_t hash;
} entry_t;

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
