/* Op record decoding for aclprof.api.subscription: the name loop and the string interner
 * (see _fast.h).
 *
 * Why in C: the library keeps op names and types in a side table that only its getters can
 * read (and each read frees the entry), so every record needs at least two calls (Type,
 * Name; see fetch() for why the Len calls are skipped). Doing them here instead of in Python
 * is what makes the reader fast; calling them on one-record slices keeps each call O(1),
 * because the library re-checks the signature of every record in the buffer it is given.
 * Signatures are checked by _fast_crc.c. */
#define _POSIX_C_SOURCE 200809L /* poll, nanosleep, clock_gettime under -std=c11 */
#include "_fast_internal.h"

#include <errno.h>
#include <poll.h>
#include <time.h>
#include <unistd.h>

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

/* A name or type longer than this many bytes is cut to it (at a UTF-8 character boundary)
 * and counted (aclprof_interner_cut); fetch() reads names through a buffer of NAME_BUF
 * bytes, which is what makes one Get call per string exact up to this length. */
#define NAME_BUF (ACLPROF_NAME_LIMIT + 2)

struct aclprof_interner {
    entry_t *entries;   /* dense, id = index */
    uint32_t size, cap_entries, max_entries;
    uint32_t *slots;    /* id + 1, 0 = empty */
    uint32_t nslots;    /* power of two, kept under 50% full */
    uint64_t overflows;
    uint64_t cut;       /* names and types cut to ACLPROF_NAME_LIMIT bytes */
    char *namebuf;      /* NAME_BUF bytes, all zero between fetches */
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
    in->namebuf = calloc(1, NAME_BUF);
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

/* Fetch one string; returns its id, or UINT32_MAX when the library has none for rec.
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
 * pair, as before. Only the bytes a call wrote are zeroed again afterwards. */
static uint32_t fetch(aclprof_interner *in, len_fn get_len, str_fn get, const uint8_t *rec,
                      uint32_t rec_size)
{
    if (!get_len || !get)
        return UINT32_MAX;
    char *nb = in->namebuf;
    if (get(rec, rec_size, 0, nb, NAME_BUF) == 0) {
        size_t got = strnlen(nb, NAME_BUF);
        uint32_t id = keep(in, nb, got);
        memset(nb, 0, got < NAME_BUF ? got + 1 : NAME_BUF);
        return id;
    }
    memset(nb, 0, NAME_BUF); /* a refused Get may have written it (securec clears it) */
    size_t len = 0;
    if (get_len(rec, rec_size, 0, &len) != 0 || len == 0)
        return UINT32_MAX;
    char *buf = calloc(1, len); /* the library NUL-terminates only at [len-1] */
    if (!buf)
        return UINT32_MAX;
    uint32_t id = UINT32_MAX;
    if (get(rec, rec_size, 0, buf, len) == 0)
        id = keep(in, buf, len - 1);
    free(buf);
    return id;
}

/* --- the reader's GIL-free half (issue 12; see _fast.h) --- */
static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* One read of what is there; 0 with *flags |= EOF at end of stream. */
static int64_t read_some(int fd, uint8_t *buf, uint64_t room, int *flags)
{
    for (;;) {
        ssize_t n = read(fd, buf, room);
        if (n > 0)
            return n;
        if (n == 0) {
            *flags |= ACLPROF_READ_EOF;
            return 0;
        }
        if (errno != EINTR)
            return -errno;
    }
}

_Thread_local int64_t aclprof_read_first_ns;
_Thread_local int64_t aclprof_read_first_bytes;

int64_t aclprof_read_pipe(int fd, int wake_fd, uint8_t *buf, uint64_t cap, int64_t coalesce_ns,
                          int *flags)
{
    *flags = 0;
    if (cap == 0)
        return -EINVAL;
    struct pollfd fds[2] = {{.fd = fd, .events = POLLIN}, {.fd = wake_fd, .events = POLLIN}};
    for (;;) {
        int r = poll(fds, wake_fd >= 0 ? 2 : 1, -1);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (fds[0].revents)
            break; /* data, EOF (POLLHUP) or an error: read() tells which */
        if (wake_fd >= 0 && fds[1].revents) {
            *flags |= ACLPROF_READ_WOKEN;
            return 0;
        }
    }
    int64_t first = now_ns();
    int64_t got = read_some(fd, buf, cap, flags);
    aclprof_read_first_ns = now_ns(); /* every byte of this first read was written before now */
    aclprof_read_first_bytes = got;
    if (got <= 0 || (uint64_t)got >= cap / 2 || coalesce_ns <= 0)
        return got;
    /* A small read: let more records arrive before Python is woken for them. */
    int64_t deadline = first + coalesce_ns;
    while ((uint64_t)got < cap && !(*flags & ACLPROF_READ_EOF)) {
        int64_t left = deadline - now_ns();
        if (left > 0) {
            struct timespec ts = {(time_t)(left / 1000000000), (long)(left % 1000000000)};
            while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
                ;
        }
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int r;
        while ((r = poll(&p, 1, 0)) < 0 && errno == EINTR)
            ;
        if (r <= 0)
            break; /* nothing more yet (or poll failed: the next call reports it) */
        int64_t n = read_some(fd, buf + got, cap - (uint64_t)got, flags);
        if (n < 0)
            break; /* the next call reports it; what was read is returned */
        got += n;
        if (now_ns() >= deadline)
            break;
    }
    return got;
}

/* The id of an interned string, or UINT32_MAX if it was never interned. */
static uint32_t interner_find(const aclprof_interner *in, const char *s, size_t len)
{
    uint32_t h = fnv1a(s, len);
    uint32_t mask = in->nslots - 1;
    for (uint32_t i = h & mask, id1; (id1 = in->slots[i]) != 0; i = (i + 1) & mask) {
        const entry_t *e = &in->entries[id1 - 1];
        if (e->hash == h && e->len == len && memcmp(e->bytes, s, len) == 0)
            return id1 - 1;
    }
    return UINT32_MAX;
}

/* The two pipe record sizes: current CANN's, and older CANN's that ends before devId. */
#define DESC_SIZE ((uint32_t)sizeof(ProfOpDesc))
#define DESC_SIZE_OLD ((uint32_t)offsetof(ProfOpDesc, devId))
#define ROW_SIZE sizeof(aclprof_op_row)
/* Where a field of the row's record is (the record starts the packed row). */
#define ROW_AT(field) (offsetof(aclprof_op_row, rec) + offsetof(aclprof_record, field))

static int desc_size_ok(uint32_t rec_size)
{
    return rec_size == DESC_SIZE || rec_size == DESC_SIZE_OLD;
}

uint32_t aclprof_decode_ops(aclprof_interner *in, const uint8_t *buf, uint32_t n,
                            uint32_t rec_size, int validate, uint32_t default_device,
                            uint8_t *out, aclprof_decode_counts *counts)
{
    if (!desc_size_ok(rec_size))
        return UINT32_MAX;
    uint32_t good = 0;
    uint64_t missing = 0, max_end = counts->max_end;
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *rec = buf + (size_t)i * rec_size;
        if (validate) {
            uint32_t sig;
            memcpy(&sig, rec, sizeof sig);
            if (sig != aclprof_signature(rec, rec_size))
                continue;
        }
        /* Both are fetched even if one fails: each fetch frees its own table entry. */
        uint32_t t = fetch(in, p_type_len, p_type, rec, rec_size);
        uint32_t m = fetch(in, p_name_len, p_name, rec, rec_size);
        if (t == UINT32_MAX || m == UINT32_MAX)
            missing++;
        ProfOpDesc d; /* a copy: records in the buffer are not aligned */
        d.devId = 0;  /* a 72-byte record has none (and it is not read then) */
        memcpy(&d, rec, rec_size);
        uint32_t dev = rec_size == DESC_SIZE && d.devId != 0 ? d.devId : default_device;
        aclprof_op_row row = {
            .rec = {
                .model_id = d.modelId,
                .op_name = m == UINT32_MAX ? 0 : m,
                .op_type = t == UINT32_MAX ? 0 : t,
                .flag = d.flag,
                .thread_id = d.threadId,
                .device_id = dev,
                .start = d.start,
                .end = d.end,
                .duration = d.duration,
                .execution_time = d.executionTime,
            },
            .keypoint = 0,
        };
        memcpy(out + (size_t)good * ROW_SIZE, &row, ROW_SIZE);
        if (d.end > max_end)
            max_end = d.end;
        good++;
    }
    /* Keypoints: looked up after the loop, so a batch that brings the pair's first
     * occurrence is marked too. */
    uint32_t kp_name = interner_find(in, "keypoint_op", 11), kp_type = interner_find(in, "na", 2);
    uint64_t keypoints = 0;
    if (kp_name != UINT32_MAX && kp_type != UINT32_MAX) {
        for (uint32_t i = 0; i < good; i++) {
            uint8_t *row = out + (size_t)i * ROW_SIZE;
            uint32_t nm, ty;
            memcpy(&nm, row + ROW_AT(op_name), sizeof nm);
            memcpy(&ty, row + ROW_AT(op_type), sizeof ty);
            if (nm == kp_name && ty == kp_type) {
                row[offsetof(aclprof_op_row, keypoint)] = 1;
                keypoints++;
            }
        }
    }
    counts->corrupt += n - good;
    counts->missing_names += missing;
    counts->keypoints += keypoints;
    counts->max_end = max_end;
    return good;
}

int64_t aclprof_read_ops(aclprof_interner *in, int fd, int wake_fd, uint8_t *buf,
                         uint64_t filled, uint64_t cap, uint32_t rec_size, int64_t coalesce_ns,
                         int validate, uint32_t default_device, uint8_t *out,
                         aclprof_decode_counts *counts, int *flags)
{
    *flags = 0;
    if (!desc_size_ok(rec_size) || filled >= cap)
        return -EINVAL;
    int64_t got = aclprof_read_pipe(fd, wake_fd, buf + filled, cap - filled, coalesce_ns, flags);
    counts->whole = counts->rows = 0;
    counts->left = filled;
    if (got <= 0)
        return got;
    uint64_t total = filled + (uint64_t)got;
    uint32_t whole = (uint32_t)(total / rec_size);
    uint64_t used = (uint64_t)whole * rec_size;
    counts->whole = whole;
    counts->rows = whole ? aclprof_decode_ops(in, buf, whole, rec_size, validate, default_device,
                                           out, counts) : 0;
    if (used && total > used)
        memmove(buf, buf + used, total - used);
    counts->left = total - used;
    return got;
}
