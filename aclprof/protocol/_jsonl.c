/* The daemon's record encoder: wire records (RECORD_DTYPE: aclprof_record of
 * cdefs/aclprof_records.h, 56 bytes, little-endian) ->
 * whole JSON Lines frames (STREAM_RECORDS / EXPORT_RECORDS: 12-byte header + payload), in
 * one pass and one output buffer.
 *
 * Why C: JSON encoding was the daemon's largest per-record cost (~1.35 us per
 * record in Python, most of the CPU `aclprof tail --json` costs at 250 k records/s). Why a
 * plain CPython extension in aclprof.protocol and not the cffi helper in aclprof.binding:
 * the daemon imports aclprof.protocol only and must not load cffi (tests/test_layers.py,
 * tests/test_packaging.py).
 *
 * The text is byte for byte what aclprofd.records.encode_records_py writes (the reference
 * the tests compare against): names and the identity head come in as ready JSON literals
 * (json.dumps, ASCII), numbers are written here, ts as "%.6f" (C and Python both round the
 * exact binary value correctly, half to even), a non-finite ts as null.
 *
 * The module also gives aclprof.protocol.wire the record layout (RECORD_FIELDS,
 * FLAG_KEYPOINT) it builds RECORD_DTYPE from, read from the same header through
 * offsetof/sizeof: the daemon's dtype and this encoder cannot disagree, without cffi. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "aclprof.protocol._jsonl reads little-endian wire records in place: port the loads"
#endif

#include "aclprof_records.h"
#include "aclprof_unaligned.h"

/* Protocol 1's BATCH record is 56 bytes (daemon/PROTOCOL.md): a field added to
 * aclprof_record is a new protocol version, not a silent change of the bytes. */
#define REC_SIZE ((Py_ssize_t)sizeof(aclprof_record))
_Static_assert(sizeof(aclprof_record) == 56, "aclprof_record is protocol 1's 56-byte BATCH record: "
                                             "a new field needs a new protocol version");
#define AT(field) offsetof(aclprof_record, field)
#define FLAG_KEYPOINT ((uint32_t)ACLPROF_FLAG_KEYPOINT)

/* Every field of aclprof_record, in order, for RECORD_FIELDS. The sum of their sizes must
 * be the struct's size: a field added to the header and not here fails to compile. */
#define RECORD_FIELD_LIST(X) \
    X(model_id) X(op_name) X(op_type) X(flag) X(thread_id) X(device_id) \
    X(start) X(end) X(duration) X(execution_time)
#define FIELD_SIZE(f) sizeof(((aclprof_record *)0)->f)
#define PLUS_SIZE(f) +FIELD_SIZE(f)
_Static_assert(0 RECORD_FIELD_LIST(PLUS_SIZE) == sizeof(aclprof_record),
               "RECORD_FIELD_LIST must name every field of aclprof_record (and it has no padding)");
#define HEADER_SIZE 12
#define NAME_SLOTS 1024 /* direct-mapped name literal cache (ids repeat: a model's ops) */
#define OP_SLOTS 1024   /* direct-mapped op text cache, by op name id */
/* Every padded copy (copy_text) may read up to COPY_PAD bytes past its source's text and
 * write as far past its end: each source is allocated with that much room after the text,
 * each line's reservation has it after the line. */
#define COPY_PAD 32
/* the bytes of a line besides its ts-and-identity text and its op text: three u64 numbers
 * (20 digits each), ",\"end\":" and ",\"duration_ns\":" (21), the tail text (at most 61) */
#define LINE_REST_MAX (3 * 20 + 21 + TAIL_MAX)
#define TAIL_MAX 64
/* op texts one cache keeps at most, in bytes: very long names (4 KB, escaped up to 6x)
 * cannot make it hold megabytes; passing it empties it and it fills again */
#define OP_BYTES_MAX (1 << 20)
#define NAMES_KEEP 4 /* name caches kept between calls (LRU): one per agent a pump alternates between */

/* The eight ASCII digits of v < 10**8 (leading zeros included) as a little-endian word,
 * the most significant digit in its first byte: each step splits every lane of the word
 * in two (10**4, then 100 with a multiply-shift, then 10), no table and no loop; checked
 * against "%08u" for every v < 10**8. */
static inline uint64_t digits8(uint32_t v)
{
    uint64_t merged = (uint64_t)(v / 10000) | ((uint64_t)(v % 10000) << 32);
    uint64_t top = ((merged * 10486ULL) >> 20) & ((0x7FULL << 32) | 0x7FULL); /* lane / 100 */
    uint64_t bot = merged - 100ULL * top;
    uint64_t hundreds = (bot << 16) + top;
    uint64_t tens = ((hundreds * 103ULL) >> 10) & 0x000F000F000F000FULL; /* lane / 10 */
    tens += (hundreds - 10ULL * tens) << 8;
    return tens + 0x3030303030303030ULL;
}

static const uint32_t POW10[10] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000, 1000000000};

/* The number of decimal digits of v (1 for 0): log2 times log10(2), then one compare. */
static inline unsigned digits_u32(uint32_t v)
{
    unsigned t = ((32 - (unsigned)__builtin_clz(v | 1)) * 1233) >> 12;
    return t + ((v | 1) >= POW10[t]);
}

/* The digits of v < 10**8 at p, without leading zeros; writes 8 bytes (p must have room
 * for them), returns the end of the number. */
static inline char *put_upto8(char *p, uint32_t v)
{
    unsigned n = digits_u32(v);
    uint64_t w = digits8(v) >> (8 * (8 - n));
    memcpy(p, &w, 8);
    return p + n;
}

static inline char *put_8(char *p, uint32_t v)
{
    uint64_t w = digits8(v);
    memcpy(p, &w, 8);
    return p + 8;
}

/* Decimal digits of v at p; returns the end, and may write up to 7 bytes past it (every
 * destination has COPY_PAD bytes of room after its text). */
static inline char *put_u32(char *p, uint32_t v)
{
    if (v < 100000000)
        return put_upto8(p, v);
    return put_8(put_upto8(p, v / 100000000), v % 100000000);
}

/* Decimal digits of v at p (the same room rule). A line's u64 fields are ns times (16-19
 * digits): eight digits at a time, each in a few multiplies, rather than a division by 100
 * per pair of digits. */
static inline char *put_u64(char *p, uint64_t v)
{
    if (v < 100000000)
        return put_upto8(p, (uint32_t)v);
    if (v < 10000000000000000ULL) /* 9 to 16 digits */
        return put_8(put_upto8(p, (uint32_t)(v / 100000000)), (uint32_t)(v % 100000000));
    uint64_t hi = v / 100000000; /* >= 10**8, < 1.85 * 10**11 */
    p = put_upto8(p, (uint32_t)(hi / 100000000));
    p = put_8(p, (uint32_t)(hi % 100000000));
    return put_8(p, (uint32_t)(v % 100000000));
}

/* A ns time's digits above its last eight (its 0.1 s), formatted once per call for all the
 * times that share them: a batch's start and end times (19 digits) span a few ms, so they
 * nearly all do, and each is then one 16-byte copy and eight digits. */
typedef struct {
    uint64_t hi; /* v / 10**8 of the text; UINT64_MAX: none yet (hi < 1.85 * 10**11) */
    Py_ssize_t len;
    char text[24]; /* at most 12 digits, the 7 bytes a put may write past them, the copy's 16 */
} HiDigits;

static inline char *put_time(char *p, uint64_t v, HiDigits *c)
{
    if (v < 100000000)
        return put_upto8(p, (uint32_t)v);
    uint64_t hi = v / 100000000;
    if (hi != c->hi) {
        c->len = put_u64(c->text, hi) - c->text;
        c->hi = hi;
    }
    memcpy(p, c->text, 16);
    return put_8(p + c->len, (uint32_t)(v % 100000000));
}

#define PUT_LIT(p, s) (memcpy((p), (s), sizeof(s) - 1), (p) + sizeof(s) - 1)

/* len bytes of src at dst, in 32-byte moves the compiler inlines (a line is four copies of
 * 20-130 bytes: a libc memcpy call each was a third of the encoding); src has COPY_PAD
 * readable bytes after its text and dst as many writable ones after len. */
static inline char *copy_text(char *dst, const char *src, Py_ssize_t len)
{
    if (len <= 4 * COPY_PAD) {
        for (Py_ssize_t i = 0; i < len; i += COPY_PAD)
            memcpy(dst + i, src + i, COPY_PAD);
    } else {
        memcpy(dst, src, (size_t)len);
    }
    return dst + len;
}

typedef struct {
    uint32_t id;
    PyObject *lit; /* a strong reference to the bytes literal, NULL when the slot is empty */
} Slot;

/* The text of a line from its device to its "start" key, which depends on the record's op
 * name, op type, device and model only: `D,"model":M,"op_type":T,"op_name":N,"start":`.
 * Kept in the slot itself when it fits (most do), so that the texts of a model's ops, whose
 * ids it numbers in the order it runs them, lie in id order in one array: read back to back,
 * the prefetcher has them in cache. Texts in blocks of their own, wherever malloc put them,
 * missed the cache at almost every record in the daemon, where other work evicts them between
 * batches (~70 % of the encoder's samples on that one load). */
#define OP_INLINE 200
typedef struct {
    uint32_t name, type, device, model;
    int valid;
    Py_ssize_t len;
    const char *text; /* inl, or heap for a longer text */
    char *heap;       /* PyMem_RawMalloc'd, heap_cap bytes, or NULL */
    Py_ssize_t heap_cap;
    char inl[OP_INLINE];
} OpText;
_Static_assert(sizeof(OpText) == 256, "an op text slot is four cache lines");

typedef struct {
    PyObject *owner; /* kept caches: the `names` dict they belong to (a strong reference) */
    PyObject *names; /* dict: int id -> bytes (the JSON string literal) */
    PyObject *miss;  /* callable(id) -> bytes, for ids not in names */
    uint64_t used;   /* kept caches: when last taken (LRU) */
    int busy;        /* kept caches: taken by a call now */
    Py_ssize_t op_bytes; /* bytes allocated for op texts outside their slots */
    Slot slots[NAME_SLOTS];
    OpText ops[OP_SLOTS];
} Names;

static void ops_clear(Names *nm)
{
    for (int i = 0; i < OP_SLOTS; i++) {
        OpText *e = &nm->ops[i];
        PyMem_RawFree(e->heap);
        e->heap = NULL;
        e->heap_cap = 0;
        e->valid = 0;
    }
    nm->op_bytes = 0;
}

static void names_clear(Names *nm)
{
    for (int i = 0; i < NAME_SLOTS; i++)
        Py_CLEAR(nm->slots[i].lit);
    ops_clear(nm);
}

/* The name caches kept from one call to the next, each for one `names` dict (a strong
 * reference keeps it, so its address is not reused while it is the key): a STREAM pump
 * encodes each agent's batches with its connection's dict, so the literals and op texts of
 * a model's ops are made once, not once per call (~1000 dict lookups and int objects per
 * 1250-record call were ~40 % of the encoding, issue 21), and NAMES_KEEP of them let a pump
 * alternate between agents without starting over each time. Sound because a dict's literal
 * for an id never changes (aclprofd.records.NameJson: set once; a redefined id ends the
 * connection, and its next connection has a new dict). A cache is used by one call at a
 * time (the GIL; `miss` could re-enter): a nested call for the same dict gets a cache of
 * its own, as do calls when allocation fails. */
static Names *g_names[NAMES_KEEP];
static uint64_t g_names_clock;

static Names *names_take(PyObject *names, PyObject *miss, int *kept)
{
    *kept = 0;
    Names *pick = NULL;
    for (int i = 0; i < NAMES_KEEP; i++) {
        Names *c = g_names[i];
        if (c != NULL && c->owner == names) {
            pick = c->busy ? NULL : c;
            if (pick == NULL)
                goto own; /* re-entered for the same dict */
            break;
        }
    }
    if (pick == NULL) { /* an empty place, else the least recently used cache not in use */
        int at = -1;
        for (int i = 0; i < NAMES_KEEP; i++) {
            if (g_names[i] == NULL) {
                at = i;
                break;
            }
            if (!g_names[i]->busy && (at < 0 || g_names[i]->used < g_names[at]->used))
                at = i;
        }
        if (at < 0)
            goto own;
        if (g_names[at] == NULL && (g_names[at] = PyMem_Calloc(1, sizeof(Names))) == NULL)
            goto own;
        pick = g_names[at];
        names_clear(pick);
        Py_INCREF(names);
        Py_XSETREF(pick->owner, names);
    }
    pick->names = names;
    pick->miss = miss;
    pick->busy = 1;
    pick->used = ++g_names_clock;
    *kept = 1;
    return pick;
own:;
    Names *nm = PyMem_Calloc(1, sizeof(Names));
    if (nm != NULL) {
        nm->names = names;
        nm->miss = miss;
    }
    return nm;
}

static void names_release(Names *nm, int kept, int failed)
{
    if (kept) {
        if (failed) { /* a miss that raised: start again next time */
            names_clear(nm);
            Py_CLEAR(nm->owner);
        }
        nm->miss = NULL;
        nm->busy = 0;
        return;
    }
    names_clear(nm);
    PyMem_Free(nm);
}

/* The JSON literal of name id `id` (borrowed from the cache); NULL with an exception set. */
static PyObject *name_lit(Names *nm, uint32_t id)
{
    Slot *s = &nm->slots[id & (NAME_SLOTS - 1)];
    if (s->lit != NULL && s->id == id)
        return s->lit;
    PyObject *key = PyLong_FromUnsignedLong(id);
    if (key == NULL)
        return NULL;
    PyObject *lit = PyDict_GetItemWithError(nm->names, key); /* borrowed */
    if (lit != NULL) {
        Py_INCREF(lit);
    } else if (PyErr_Occurred()) {
        Py_DECREF(key);
        return NULL;
    } else {
        lit = PyObject_CallOneArg(nm->miss, key); /* new reference */
        if (lit == NULL) {
            Py_DECREF(key);
            return NULL;
        }
    }
    Py_DECREF(key);
    if (!PyBytes_Check(lit)) {
        PyErr_Format(PyExc_TypeError, "encode_frames: the literal of name id %lu is %.50s, not bytes",
                     (unsigned long)id, Py_TYPE(lit)->tp_name);
        Py_DECREF(lit);
        return NULL;
    }
    Py_XSETREF(s->lit, lit);
    s->id = id;
    return lit;
}

/* The op text of record `rec` (valid until the next call); NULL with an exception set. */
static OpText *op_text(Names *nm, const char *rec)
{
    uint32_t name = ld32(rec + AT(op_name)), type = ld32(rec + AT(op_type));
    uint32_t device = ld32(rec + AT(device_id)), model = ld32(rec + AT(model_id));
    OpText *e = &nm->ops[name & (OP_SLOTS - 1)];
    if (e->valid && e->name == name && e->type == type && e->device == device && e->model == model)
        return e;
    e->valid = 0;
    PyObject *tlit = name_lit(nm, type);
    if (tlit == NULL)
        return NULL;
    Py_INCREF(tlit); /* the next lookup may evict it from its slot */
    PyObject *nlit = name_lit(nm, name);
    if (nlit == NULL) {
        Py_DECREF(tlit);
        return NULL;
    }
    Py_ssize_t tl = PyBytes_GET_SIZE(tlit), nl = PyBytes_GET_SIZE(nlit);
    Py_ssize_t need = 10 + 10 + tl + nl + 64 + COPY_PAD; /* two u32, the keys (50 bytes) */
    char *text = e->inl;
    if (need > OP_INLINE) {
        if (e->heap_cap < need) {
            Py_ssize_t cap = (need + 63) & ~(Py_ssize_t)63;
            if (nm->op_bytes - e->heap_cap + cap > OP_BYTES_MAX)
                ops_clear(nm); /* e's block is gone now too */
            char *t = PyMem_RawRealloc(e->heap, (size_t)cap);
            if (t == NULL) {
                Py_DECREF(tlit);
                PyErr_NoMemory();
                return NULL;
            }
            nm->op_bytes += cap - e->heap_cap;
            e->heap = t;
            e->heap_cap = cap;
        }
        text = e->heap;
    }
    char *p = text;
    p = put_u32(p, device);
    p = PUT_LIT(p, ",\"model\":");
    p = put_u32(p, model);
    p = PUT_LIT(p, ",\"op_type\":");
    memcpy(p, PyBytes_AS_STRING(tlit), (size_t)tl);
    p += tl;
    Py_DECREF(tlit);
    p = PUT_LIT(p, ",\"op_name\":");
    memcpy(p, PyBytes_AS_STRING(nlit), (size_t)nl);
    p += nl;
    p = PUT_LIT(p, ",\"start\":");
    e->len = p - text;
    e->text = text;
    e->name = name;
    e->type = type;
    e->device = device;
    e->model = model;
    e->valid = 1;
    return e;
}

/* The end of a line after duration_ns: `,"flag":F,"thread_id":T,"kind":"op"}\n` (or
 * "keypoint"), which depends on the record's flag and thread only: a call makes each once
 * (a process has a few threads). */
#define TAIL_SLOTS 8
typedef struct {
    uint32_t flag, thread;
    int valid;
    Py_ssize_t len;
    char text[TAIL_MAX + COPY_PAD];
} Tail;

static const Tail *tail_text(Tail *tails, uint32_t flag, uint32_t thread)
{
    Tail *t = &tails[((thread * 0x9E3779B1u) ^ flag) >> (32 - 3)];
    if (t->valid && t->flag == flag && t->thread == thread)
        return t;
    char *p = t->text;
    p = PUT_LIT(p, ",\"flag\":");
    p = put_u32(p, flag & ~FLAG_KEYPOINT);
    p = PUT_LIT(p, ",\"thread_id\":");
    p = put_u32(p, thread);
    if (flag & FLAG_KEYPOINT)
        p = PUT_LIT(p, ",\"kind\":\"keypoint\"}\n");
    else
        p = PUT_LIT(p, ",\"kind\":\"op\"}\n");
    t->len = p - t->text;
    t->flag = flag;
    t->thread = thread;
    t->valid = 1;
    return t;
}
_Static_assert(TAIL_SLOTS == 1 << 3, "tail_text's slot is the top 3 bits of a hash");
_Static_assert(sizeof(",\"flag\":") - 1 + 10 + sizeof(",\"thread_id\":") - 1 + 10
               + sizeof(",\"kind\":\"keypoint\"}\n") - 1 <= TAIL_MAX, "a tail text fits TAIL_MAX");

/* "%.6f" of t into buf (size >= 400), or "null" for a non-finite t; returns the length. */
static Py_ssize_t format_ts(char *buf, size_t size, double t)
{
    if (!isfinite(t)) {
        memcpy(buf, "null", 4);
        return 4;
    }
    int n = snprintf(buf, size, "%.6f", t);
    return n < 0 || (size_t)n >= size ? -1 : n;
}

/* The text is formatted into one scratch buffer kept between calls, then copied once into
 * the result: a fresh ~0.5 MB output buffer per call was mmap'd, page-faulted and unmapped
 * every time (glibc's dynamic mmap threshold never settled, the estimate being larger than
 * any result), which cost more than the formatting. The name callback runs Python, which
 * may switch threads: a call that finds the scratch buffer taken (another thread, or a
 * callback that encodes) formats into a buffer of its own. A scratch buffer grown beyond
 * SCRATCH_KEEP (very long names) is freed after the call. */
#define SCRATCH_KEEP (8 << 20)
static char *g_scratch;
static Py_ssize_t g_scratch_cap;
static int g_scratch_busy;

typedef struct {
    char *base;
    Py_ssize_t pos, cap;
    int shared; /* base is the scratch buffer */
} Out;

static int out_reserve(Out *o, Py_ssize_t more)
{
    if (o->cap - o->pos >= more)
        return 0;
    Py_ssize_t cap = o->cap * 2;
    if (cap < o->pos + more)
        cap = o->pos + more;
    char *p = PyMem_RawRealloc(o->base, (size_t)cap);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    o->base = p;
    o->cap = cap;
    return 0;
}

static void out_take(Out *o)
{
    o->pos = 0;
    o->shared = !g_scratch_busy;
    if (o->shared) {
        g_scratch_busy = 1;
        o->base = g_scratch;
        o->cap = g_scratch_cap;
    } else {
        o->base = NULL;
        o->cap = 0;
    }
}

static void out_release(Out *o)
{
    if (!o->shared) {
        PyMem_RawFree(o->base);
        return;
    }
    if (o->cap > SCRATCH_KEEP) {
        PyMem_RawFree(o->base);
        o->base = NULL;
        o->cap = 0;
    }
    g_scratch = o->base;
    g_scratch_cap = o->cap;
    g_scratch_busy = 0;
}

static void put_header(char *p, int kind, uint32_t length)
{
    memcpy(p, "ACLP", 4);
    p[4] = 1; /* wire.VERSION */
    p[5] = (char)kind;
    p[6] = p[7] = 0;
    memcpy(p + 8, &length, 4); /* little-endian host (checked above) */
}

/* `{"ts":<ts>,<head>"device":` of a run of records received at one time: the start of each
 * of their lines. buf has room for the text and COPY_PAD. */
static Py_ssize_t ts_head_text(char *buf, double t, const char *head, Py_ssize_t hlen)
{
    char *p = PUT_LIT(buf, "{\"ts\":");
    Py_ssize_t n = format_ts(p, 400, t);
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "encode_frames: ts does not format");
        return -1;
    }
    p += n;
    *p++ = ',';
    memcpy(p, head, (size_t)hlen);
    p += hlen;
    p = PUT_LIT(p, "\"device\":");
    return p - buf;
}
#define TS_HEAD_ROOM(hlen) (6 + 400 + 1 + (hlen) + 9 + COPY_PAD)

PyDoc_STRVAR(encode_frames_doc,
"encode_frames(records, ts, head, names, miss, kind, max_records, target, max_payload) -> bytes\n\n"
"Wire records as whole JSON Lines frames of ``kind`` (header + payload each), concatenated.\n"
"records: a C-contiguous buffer of 56-byte RECORD_DTYPE records; ts: a float for all records,\n"
"or a buffer of float64, one per record; head: the JSON fragment '\"host\":...,\"pid\":...,\n"
"\"service\":...,'; names: dict id -> bytes JSON string literal, miss(id) -> bytes for an id\n"
"not in it. A frame ends after ``max_records`` lines or after the line that makes its payload\n"
"``target`` bytes or more; a payload beyond ``max_payload`` raises ValueError.");

/* The one encoding loop of encode_frames and encode_lines_into. Without `into`: whole frames
 * (header + payload, split at max_records lines or target bytes) in a new bytes object; with
 * `into` (a writable buffer): the bare lines that fit in it, written there, and (records done,
 * bytes written) returned. */
static PyObject *encode_common(PyObject *const *args, long kind, Py_ssize_t max_records,
                               Py_ssize_t target, Py_ssize_t max_payload, Py_buffer *into)
{
    const int framed = into == NULL;
    PyObject *records = args[0], *ts_obj = args[1], *head = args[2];
    Names *nm = NULL;
    int nm_kept = 0;
    Py_buffer rv = {0}, tv = {0};
    int have_rv = 0, have_tv = 0;
    Out o = {NULL, 0, 0, 0};
    int have_out = 0;
    char *tshead = NULL;
    PyObject *result = NULL;

    if (!PyBytes_Check(head)) {
        PyErr_SetString(PyExc_TypeError, "encode_frames: head must be bytes");
        return NULL;
    }
    if (!PyDict_Check(args[3]) || !PyCallable_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError, "encode_frames: names must be a dict and miss a callable");
        return NULL;
    }
    if (PyObject_GetBuffer(records, &rv, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    have_rv = 1;
    if (rv.len % REC_SIZE) {
        PyErr_Format(PyExc_ValueError, "encode_frames: %zd bytes of records is not a whole number of "
                                       "%zd-byte records", rv.len, REC_SIZE);
        goto done;
    }
    Py_ssize_t n = rv.len / REC_SIZE;
    double ts_one = 0.0;
    const char *ts_arr = NULL;
    if (PyFloat_Check(ts_obj) || PyLong_Check(ts_obj)) {
        ts_one = PyFloat_AsDouble(ts_obj);
        if (ts_one == -1.0 && PyErr_Occurred())
            goto done;
    } else {
        if (PyObject_GetBuffer(ts_obj, &tv, PyBUF_C_CONTIGUOUS) < 0)
            goto done;
        have_tv = 1;
        if (tv.len != n * 8) {
            PyErr_Format(PyExc_ValueError, "encode_frames: ts has %zd bytes, want %zd float64 values "
                                           "(one per record)", tv.len, n);
            goto done;
        }
        ts_arr = tv.buf;
    }
    if (n == 0) {
        result = into != NULL ? Py_BuildValue("(nn)", (Py_ssize_t)0, (Py_ssize_t)0) : PyBytes_FromStringAndSize(NULL, 0);
        goto done;
    }
    nm = names_take(args[3], args[4], &nm_kept);
    if (nm == NULL) {
        PyErr_NoMemory();
        goto done;
    }

    const char *hd = PyBytes_AS_STRING(head);
    Py_ssize_t hlen = PyBytes_GET_SIZE(head);
    tshead = PyMem_RawMalloc((size_t)TS_HEAD_ROOM(hlen));
    if (tshead == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t thlen = -1;
    uint64_t ts_bits = 0;
    if (!ts_arr && (thlen = ts_head_text(tshead, ts_one, hd, hlen)) < 0)
        goto done;
    Tail tails[TAIL_SLOTS];
    for (int k = 0; k < TAIL_SLOTS; k++)
        tails[k].valid = 0;
    HiDigits hi_digits = {.hi = UINT64_MAX};

    if (into != NULL) { /* the caller's buffer: never grown, the loop stops when a line may not fit */
        o.base = into->buf;
        o.cap = into->len;
    } else {
        out_take(&o);
        have_out = 1;
    }

    Py_ssize_t frame_at = -1, in_frame = 0; /* the open frame's header offset, its lines */
    const char *rec = rv.buf;
    for (Py_ssize_t i = 0; i < n; i++, rec += REC_SIZE) {
        if (ts_arr) {
            uint64_t bits;
            memcpy(&bits, ts_arr + 8 * i, 8);
            if (thlen < 0 || bits != ts_bits) { /* runs of one receive time: formatted once */
                double t;
                memcpy(&t, &bits, 8);
                if ((thlen = ts_head_text(tshead, t, hd, hlen)) < 0)
                    goto done;
                ts_bits = bits;
            }
        }
        const OpText *op = op_text(nm, rec); /* may run Python (miss): before the buffer is touched */
        if (op == NULL)
            goto done;
        uint32_t flag = ld32(rec + AT(flag));
        const Tail *tail = tail_text(tails, flag, ld32(rec + AT(thread_id)));
        /* one check per line: every write below stays within it */
        Py_ssize_t need = HEADER_SIZE + thlen + op->len + LINE_REST_MAX + COPY_PAD;
        if (into != NULL && o.cap - o.pos < need) {
            if (i == 0) {
                PyErr_Format(PyExc_ValueError, "encode_lines_into: a buffer of %zd bytes is too small for a "
                                               "line (give it at least %zd)", o.cap, need);
                goto done;
            }
            n = i; /* the rest in the next call */
            break;
        }
        if (into == NULL && out_reserve(&o, need) < 0)
            goto done;
        if (frame_at < 0) {
            frame_at = o.pos;
            o.pos += framed ? HEADER_SIZE : 0;
            in_frame = 0;
        }
        char *p = o.base + o.pos;
        p = copy_text(p, tshead, thlen);
        p = copy_text(p, op->text, op->len);
        p = put_time(p, ld64(rec + AT(start)), &hi_digits);
        p = PUT_LIT(p, ",\"end\":");
        p = put_time(p, ld64(rec + AT(end)), &hi_digits);
        p = PUT_LIT(p, ",\"duration_ns\":");
        p = put_u64(p, ld64(rec + AT(duration)));
        p = copy_text(p, tail->text, tail->len);
        o.pos = p - o.base;
        in_frame++;
        Py_ssize_t plen = o.pos - frame_at - (framed ? HEADER_SIZE : 0);
        if (plen > max_payload) {
            PyErr_Format(PyExc_ValueError, "encode_frames: a frame payload of %zd bytes passes the limit of "
                                           "%zd (names longer than the wire limits?)", plen, max_payload);
            goto done;
        }
        if (!framed)
            continue;
        if (in_frame >= max_records || plen >= target || i + 1 == n) {
            put_header(o.base + frame_at, (int)kind, (uint32_t)plen);
            frame_at = -1;
        }
    }
    result = into != NULL ? Py_BuildValue("(nn)", n, o.pos) : PyBytes_FromStringAndSize(o.base, o.pos);
done:
    PyMem_RawFree(tshead);
    if (have_out)
        out_release(&o);
    if (nm != NULL)
        names_release(nm, nm_kept, result == NULL);
    if (have_tv)
        PyBuffer_Release(&tv);
    if (have_rv)
        PyBuffer_Release(&rv);
    return result;
}

static PyObject *encode_frames(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 9) {
        PyErr_Format(PyExc_TypeError, "encode_frames takes 9 arguments (%zd given)", nargs);
        return NULL;
    }
    long kind = PyLong_AsLong(args[5]);
    Py_ssize_t max_records = PyLong_AsSsize_t(args[6]);
    Py_ssize_t target = PyLong_AsSsize_t(args[7]);
    Py_ssize_t max_payload = PyLong_AsSsize_t(args[8]);
    if (PyErr_Occurred())
        return NULL;
    if (kind < 0 || kind > 255 || max_records < 1 || target < 1 || max_payload < 1 || max_payload > UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "encode_frames: kind must be 0..255, max_records, target and "
                                          "max_payload positive (max_payload < 2**32)");
        return NULL;
    }
    return encode_common(args, kind, max_records, target, max_payload, NULL);
}

PyDoc_STRVAR(encode_lines_into_doc,
"encode_lines_into(buffer, records, ts, head, names, miss) -> (records_done, bytes_written)\n\n"
"The JSON Lines text of encode_frames' payloads without frame headers (a client rendering\n"
"binary STREAM records, aclprof.protocol.streambin), written into a writable ``buffer`` the\n"
"caller keeps, as many whole lines as fit in it (a client rendering batch after batch writes\n"
"them from one warm buffer: no allocation and no copy of the text per call); the caller passes\n"
"the records not done again. The buffer must hold at least one line and some slack\n"
"(ValueError otherwise).");

static PyObject *encode_lines_into(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 6) {
        PyErr_Format(PyExc_TypeError, "encode_lines_into takes 6 arguments (%zd given)", nargs);
        return NULL;
    }
    Py_buffer into;
    if (PyObject_GetBuffer(args[0], &into, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    PyObject *result = encode_common(args + 1, 0, PY_SSIZE_T_MAX, PY_SSIZE_T_MAX, PY_SSIZE_T_MAX, &into);
    PyBuffer_Release(&into);
    return result;
}

static PyMethodDef methods[] = {
    {"encode_frames", (PyCFunction)(void (*)(void))encode_frames, METH_FASTCALL, encode_frames_doc},
    {"encode_lines_into", (PyCFunction)(void (*)(void))encode_lines_into, METH_FASTCALL, encode_lines_into_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "aclprof.protocol._jsonl",
    "The daemon's JSON Lines record encoder (C); see aclprofd.records.", -1, methods,
    NULL, NULL, NULL, NULL,
};

/* RECORD_FIELDS: ((name, offset, size), ...) of aclprof_record, in order. */
static PyObject *record_fields(void)
{
#define FIELD_ITEM(f) Py_BuildValue("(snn)", #f, (Py_ssize_t)AT(f), (Py_ssize_t)FIELD_SIZE(f)),
    PyObject *items[] = {RECORD_FIELD_LIST(FIELD_ITEM)};
#undef FIELD_ITEM
    Py_ssize_t n = (Py_ssize_t)(sizeof items / sizeof items[0]);
    PyObject *out = PyTuple_New(n);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (out == NULL || items[i] == NULL) {
            Py_XDECREF(items[i]);
            continue; /* release the rest too */
        }
        PyTuple_SET_ITEM(out, i, items[i]); /* steals the reference */
    }
    if (out != NULL && PyErr_Occurred())
        Py_CLEAR(out);
    return out;
}

PyMODINIT_FUNC PyInit__jsonl(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    PyObject *fields = record_fields();
    if (fields == NULL || PyModule_AddObject(m, "RECORD_FIELDS", fields) < 0) {
        Py_XDECREF(fields);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "RECORD_SIZE", (long)sizeof(aclprof_record)) < 0
        || PyModule_AddIntConstant(m, "FLAG_KEYPOINT", (long)FLAG_KEYPOINT) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
