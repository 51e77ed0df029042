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
#include "_unaligned.h"

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
#define NAME_SLOTS 1024 /* direct-mapped name cache per call (ids repeat: a model's ops) */
/* the longest fixed text of one line besides ts, head and the two names: the field names
 * (~120 bytes) and five u64 + four u32 numbers (~140) */
#define LINE_FIXED_MAX 320

static const char DIGITS2[201] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

/* Decimal digits of v at p, two at a time (the five u64 fields are most of a line's
 * digits); returns the end. */
static inline char *put_u64(char *p, uint64_t v)
{
    char tmp[20];
    char *t = tmp + sizeof tmp;
    while (v >= 100) {
        unsigned d = (unsigned)(v % 100) * 2;
        v /= 100;
        *--t = DIGITS2[d + 1];
        *--t = DIGITS2[d];
    }
    if (v >= 10) {
        *--t = DIGITS2[v * 2 + 1];
        *--t = DIGITS2[v * 2];
    } else {
        *--t = (char)('0' + v);
    }
    size_t len = (size_t)(tmp + sizeof tmp - t);
    memcpy(p, t, len);
    return p + len;
}

#define PUT_LIT(p, s) (memcpy((p), (s), sizeof(s) - 1), (p) + sizeof(s) - 1)

typedef struct {
    uint32_t id;
    PyObject *lit; /* a strong reference to the bytes literal, NULL when the slot is empty */
} Slot;

typedef struct {
    PyObject *names; /* dict: int id -> bytes (the JSON string literal) */
    PyObject *miss;  /* callable(id) -> bytes, for ids not in names */
    Slot slots[NAME_SLOTS];
} Names;

static void names_clear(Names *nm)
{
    for (int i = 0; i < NAME_SLOTS; i++)
        Py_CLEAR(nm->slots[i].lit);
}

/* The name cache kept from one call to the next for the same `names` dict (a strong
 * reference keeps it, so its address is not reused while it is the key): a STREAM pump
 * encodes each agent's batches with its connection's dict, so the literals of a model's
 * ops are looked up once, not once per call (~1000 dict lookups and int objects per
 * 1250-record call: ~40 % of the encoding, issue 21). Sound because a dict's literal for
 * an id never changes (aclprofd.records.NameJson: set once; a redefined id ends the
 * connection, and its next connection has a new dict). Used by one call at a time (the
 * GIL; `miss` could re-enter): a nested call gets a cache of its own, as before. */
static Names *g_names;
static PyObject *g_names_owner;
static int g_names_busy;

static Names *names_take(PyObject *names, PyObject *miss, int *kept)
{
    *kept = 0;
    if (!g_names_busy) {
        if (g_names == NULL)
            g_names = PyMem_Calloc(1, sizeof(Names));
        if (g_names != NULL) {
            if (g_names_owner != names) {
                names_clear(g_names);
                Py_INCREF(names);
                Py_XSETREF(g_names_owner, names);
            }
            g_names->names = names;
            g_names->miss = miss;
            g_names_busy = 1;
            *kept = 1;
            return g_names;
        }
    }
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
            Py_CLEAR(g_names_owner);
        }
        nm->miss = NULL;
        g_names_busy = 0;
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

PyDoc_STRVAR(encode_frames_doc,
"encode_frames(records, ts, head, names, miss, kind, max_records, target, max_payload) -> bytes\n\n"
"Wire records as whole JSON Lines frames of ``kind`` (header + payload each), concatenated.\n"
"records: a C-contiguous buffer of 56-byte RECORD_DTYPE records; ts: a float for all records,\n"
"or a buffer of float64, one per record; head: the JSON fragment '\"host\":...,\"pid\":...,\n"
"\"service\":...,'; names: dict id -> bytes JSON string literal, miss(id) -> bytes for an id\n"
"not in it. A frame ends after ``max_records`` lines or after the line that makes its payload\n"
"``target`` bytes or more; a payload beyond ``max_payload`` raises ValueError.");

static PyObject *encode_frames(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 9) {
        PyErr_Format(PyExc_TypeError, "encode_frames takes 9 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *records = args[0], *ts_obj = args[1], *head = args[2];
    Names *nm = NULL;
    int nm_kept = 0;
    Py_buffer rv = {0}, tv = {0};
    int have_rv = 0, have_tv = 0;
    Out o = {NULL, 0, 0, 0};
    int have_out = 0;
    PyObject *result = NULL;

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
    nm = names_take(args[3], args[4], &nm_kept);
    if (nm == NULL) {
        PyErr_NoMemory();
        goto done;
    }

    const char *hd = PyBytes_AS_STRING(head);
    Py_ssize_t hlen = PyBytes_GET_SIZE(head);
    char tsbuf[400];
    Py_ssize_t tslen = -1;
    uint64_t ts_bits = 0;
    if (!ts_arr) {
        tslen = format_ts(tsbuf, sizeof tsbuf, ts_one);
        if (tslen < 0) {
            PyErr_SetString(PyExc_ValueError, "encode_frames: ts does not format");
            goto done;
        }
    }

    out_take(&o);
    have_out = 1;

    Py_ssize_t frame_at = -1, in_frame = 0; /* the open frame's header offset, its lines */
    const char *rec = rv.buf;
    for (Py_ssize_t i = 0; i < n; i++, rec += REC_SIZE) {
        if (ts_arr) {
            uint64_t bits;
            memcpy(&bits, ts_arr + 8 * i, 8);
            if (tslen < 0 || bits != ts_bits) { /* runs of one receive time: formatted once */
                double t;
                memcpy(&t, &bits, 8);
                tslen = format_ts(tsbuf, sizeof tsbuf, t);
                if (tslen < 0) {
                    PyErr_SetString(PyExc_ValueError, "encode_frames: ts does not format");
                    goto done;
                }
                ts_bits = bits;
            }
        }
        PyObject *tlit = name_lit(nm, ld32(rec + AT(op_type)));
        if (tlit == NULL)
            goto done;
        Py_INCREF(tlit); /* the next lookup may evict it from its slot */
        PyObject *nlit = name_lit(nm, ld32(rec + AT(op_name)));
        if (nlit == NULL) {
            Py_DECREF(tlit);
            goto done;
        }
        Py_ssize_t tl = PyBytes_GET_SIZE(tlit), nl = PyBytes_GET_SIZE(nlit);
        if (out_reserve(&o, HEADER_SIZE + LINE_FIXED_MAX + tslen + hlen + tl + nl) < 0) {
            Py_DECREF(tlit);
            goto done;
        }
        if (frame_at < 0) {
            frame_at = o.pos;
            o.pos += HEADER_SIZE;
            in_frame = 0;
        }
        char *p = o.base + o.pos;
        p = PUT_LIT(p, "{\"ts\":");
        memcpy(p, tsbuf, tslen);
        p += tslen;
        *p++ = ',';
        memcpy(p, hd, hlen);
        p += hlen;
        p = PUT_LIT(p, "\"device\":");
        p = put_u64(p, ld32(rec + AT(device_id)));
        p = PUT_LIT(p, ",\"model\":");
        p = put_u64(p, ld32(rec + AT(model_id)));
        p = PUT_LIT(p, ",\"op_type\":");
        memcpy(p, PyBytes_AS_STRING(tlit), tl);
        p += tl;
        Py_DECREF(tlit);
        p = PUT_LIT(p, ",\"op_name\":");
        memcpy(p, PyBytes_AS_STRING(nlit), nl);
        p += nl;
        p = PUT_LIT(p, ",\"start\":");
        p = put_u64(p, ld64(rec + AT(start)));
        p = PUT_LIT(p, ",\"end\":");
        p = put_u64(p, ld64(rec + AT(end)));
        p = PUT_LIT(p, ",\"duration_ns\":");
        p = put_u64(p, ld64(rec + AT(duration)));
        uint32_t flag = ld32(rec + AT(flag));
        p = PUT_LIT(p, ",\"flag\":");
        p = put_u64(p, flag & ~FLAG_KEYPOINT);
        p = PUT_LIT(p, ",\"thread_id\":");
        p = put_u64(p, ld32(rec + AT(thread_id)));
        if (flag & FLAG_KEYPOINT)
            p = PUT_LIT(p, ",\"kind\":\"keypoint\"}\n");
        else
            p = PUT_LIT(p, ",\"kind\":\"op\"}\n");
        o.pos = p - o.base;
        in_frame++;
        Py_ssize_t plen = o.pos - frame_at - HEADER_SIZE;
        if (plen > max_payload) {
            PyErr_Format(PyExc_ValueError, "encode_frames: a frame payload of %zd bytes passes the limit of "
                                           "%zd (names longer than the wire limits?)", plen, max_payload);
            goto done;
        }
        if (in_frame >= max_records || plen >= target || i + 1 == n) {
            put_header(o.base + frame_at, (int)kind, (uint32_t)plen);
            frame_at = -1;
        }
    }
    result = PyBytes_FromStringAndSize(o.base, o.pos);
done:
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

static PyMethodDef methods[] = {
    {"encode_frames", (PyCFunction)(void (*)(void))encode_frames, METH_FASTCALL, encode_frames_doc},
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
