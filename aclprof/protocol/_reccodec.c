/* The daemon's compact record codec (issue 21): wire records (RECORD_DTYPE: aclprof_record
 * of cdefs/aclprof_records.h, 56 bytes, little-endian) <-> a byte string of about a seventh
 * of their size, decoded back byte for byte. aclprofd.storage writes chunks of it ("ACK3").
 *
 * Why: at 100 k ops/s the daemon wrote ~5.6 MB/s of raw records, and the kernel's copy of
 * those bytes into the page cache was ~39 % of the daemon's CPU samples (its cost is
 * proportional to the bytes written); fewer bytes per record also mean more retention under
 * the same disk cap. Why C: ~10 ns per record each way, where numpy's column arithmetic and
 * varint packing took ~10x that. Why a module of its own: it shares nothing with the
 * aggregator's _batchgroup but the record layout.
 *
 * Format (daemon/README.md "Storage format"): the records in order, each a tag byte and
 * then LEB128 varints (7 bits a byte, low group first, high bit = more follows; the shortest
 * form only). A record's fields are written against the previous record of the same chunk
 * (all zero before the first):
 *
 *   model_id, flag, thread_id, device_id   tag bit set: the same as the previous record's,
 *                                          else zigzag(value - previous) (mod 2^32)
 *   op_name                                zigzag(value - previous op_name) (mod 2^32):
 *                                          an op sequence's names are defined in order
 *   op_type                                tag bit set: the type the last record with this
 *                                          op_name had (a 4096-slot table by op_name's low
 *                                          bits, rebuilt by the reader as it goes), else
 *                                          the value (plain: type ids are small)
 *   start                                  zigzag(start - previous start), or with the tag
 *                                          bit zigzag(start - previous end): back-to-back
 *                                          ops on one stream start where the last ended
 *   end                                    end - start (mod 2^64)
 *   duration                               tag bit set: end - start, else
 *                                          zigzag(duration - (end - start))
 *   execution_time                         with the tag bit the value, else duration - value
 *                                          (mod 2^64): execution time is most of the duration
 *
 * The encoder picks the smaller of the two start forms and of the two execution_time forms.
 * All arithmetic is modulo 2^32 / 2^64, so every bit pattern round-trips (start > end, the
 * keypoint flag bit, values near 2^64). The reader checks every byte: a truncated or hostile
 * string is a ValueError naming the record, the field and the byte, never a read past the end. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "aclprof.protocol._reccodec reads and writes little-endian wire records in place: port the loads"
#endif

#include "aclprof_records.h"
#include "aclprof_unaligned.h"

#define REC_SIZE ((Py_ssize_t)sizeof(aclprof_record))
_Static_assert(sizeof(aclprof_record) == 56, "the codec writes every field of the 56-byte wire record: "
                                             "a new field needs a new codec version (and chunk magic)");
#define AT(field) offsetof(aclprof_record, field)

/* The format's version: aclprofd.storage's chunk magic "ACK3" names this one. */
#define CODEC_VERSION 1

enum {
    T_MODEL = 1u << 0,     /* model_id as the previous record's */
    T_FLAG = 1u << 1,      /* flag as the previous record's */
    T_THREAD = 1u << 2,    /* thread_id as the previous record's */
    T_DEVICE = 1u << 3,    /* device_id as the previous record's */
    T_DUR = 1u << 4,       /* duration == end - start */
    T_TYPE = 1u << 5,      /* op_type as the type slot of op_name holds */
    T_EXEC_PLAIN = 1u << 6, /* execution_time as is (else duration - execution_time) */
    T_START_END = 1u << 7, /* start against the previous end (else the previous start) */
};

#define TYPE_SLOTS 4096 /* by op_name's low bits: a model's names are dense ids */
/* a record's most bytes: the tag, six 32-bit varints (5 bytes), four 64-bit ones (10) */
#define MAX_REC_BYTES (1 + 6 * 5 + 4 * 10)
/* a record's fewest: the tag, op_name, start, end and execution_time one byte each */
#define MIN_REC_BYTES 5

typedef struct {
    uint32_t model, name, type, flag, thread, device;
    uint64_t start, end;
} State;

typedef struct {
    uint64_t key; /* op_name + 1; 0: empty */
    uint32_t type;
} TypeSlot;

static inline uint32_t zz32(uint32_t d)
{
    return (d << 1) ^ (0u - (d >> 31));
}

static inline uint64_t zz64(uint64_t d)
{
    return (d << 1) ^ (0u - (d >> 63));
}

static inline uint32_t unzz32(uint32_t z)
{
    return (z >> 1) ^ (0u - (z & 1u));
}

static inline uint64_t unzz64(uint64_t z)
{
    return (z >> 1) ^ ((uint64_t)0 - (z & 1u));
}

static inline uint8_t *put(uint8_t *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

/* A 32-bit field that repeats: its tag bit, else zigzag(value - previous). */
static inline uint8_t *same_or_delta(uint8_t *p, uint32_t v, uint32_t prev, unsigned bit, unsigned *tag)
{
    if (v == prev) {
        *tag |= bit;
        return p;
    }
    return put(p, zz32(v - prev));
}

/* One record at p (MAX_REC_BYTES bytes of room); returns the end of what it wrote. */
static inline uint8_t *encode_one(const uint8_t *r, uint8_t *p, State *s, TypeSlot *slots)
{
    uint32_t model = ld32(r + AT(model_id)), name = ld32(r + AT(op_name)), type = ld32(r + AT(op_type));
    uint32_t flag = ld32(r + AT(flag)), thread = ld32(r + AT(thread_id)), device = ld32(r + AT(device_id));
    uint64_t start = ld64(r + AT(start)), end = ld64(r + AT(end));
    uint64_t dur = ld64(r + AT(duration)), ex = ld64(r + AT(execution_time));
    uint8_t *tagp = p++;
    unsigned tag = 0;
    p = same_or_delta(p, model, s->model, T_MODEL, &tag);
    p = same_or_delta(p, flag, s->flag, T_FLAG, &tag);
    p = same_or_delta(p, thread, s->thread, T_THREAD, &tag);
    p = same_or_delta(p, device, s->device, T_DEVICE, &tag);
    p = put(p, zz32(name - s->name));
    TypeSlot *slot = &slots[name & (TYPE_SLOTS - 1)];
    if (slot->key == (uint64_t)name + 1 && slot->type == type) {
        tag |= T_TYPE;
    } else {
        p = put(p, type);
        slot->key = (uint64_t)name + 1;
        slot->type = type;
    }
    uint64_t from_start = zz64(start - s->start), from_end = zz64(start - s->end);
    if (from_end < from_start) {
        tag |= T_START_END;
        p = put(p, from_end);
    } else {
        p = put(p, from_start);
    }
    uint64_t span = end - start;
    p = put(p, span);
    if (dur == span)
        tag |= T_DUR;
    else
        p = put(p, zz64(dur - span));
    uint64_t rest = dur - ex;
    if (ex <= rest) {
        tag |= T_EXEC_PLAIN;
        p = put(p, ex);
    } else {
        p = put(p, rest);
    }
    *tagp = (uint8_t)tag;
    *s = (State){model, name, type, flag, thread, device, start, end};
    return p;
}

static PyObject *encode_into(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "encode_into takes 2 arguments (out, parts), %zd given", nargs);
        return NULL;
    }
    PyObject *seq = PySequence_Fast(args[1], "encode_into: parts must be a sequence of buffers");
    if (seq == NULL)
        return NULL;
    Py_ssize_t nparts = PySequence_Fast_GET_SIZE(seq);
    Py_buffer out;
    if (PyObject_GetBuffer(args[0], &out, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
        Py_DECREF(seq);
        return NULL;
    }
    TypeSlot *slots = PyMem_Calloc(TYPE_SLOTS, sizeof *slots);
    if (slots == NULL) {
        PyBuffer_Release(&out);
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    State st = {0};
    uint8_t *o = out.buf, *oend = o + out.len;
    int full = 0;
    for (Py_ssize_t k = 0; k < nparts && !full; k++) {
        Py_buffer in;
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(seq, k), &in, PyBUF_C_CONTIGUOUS) < 0)
            goto fail;
        if (in.len % REC_SIZE) {
            PyErr_Format(PyExc_ValueError, "encode_into: part %zd is %zd bytes, not a whole number of %zd-byte "
                         "records", k, in.len, REC_SIZE);
            PyBuffer_Release(&in);
            goto fail;
        }
        const uint8_t *r = in.buf, *rend = r + in.len;
        Py_BEGIN_ALLOW_THREADS
        for (; r < rend; r += REC_SIZE) {
            if (oend - o >= MAX_REC_BYTES) {
                o = encode_one(r, o, &st, slots);
                continue;
            }
            uint8_t tmp[MAX_REC_BYTES]; /* near the end: write aside, keep it if it fits */
            size_t len = (size_t)(encode_one(r, tmp, &st, slots) - tmp);
            if (len > (size_t)(oend - o)) {
                full = 1;
                break;
            }
            memcpy(o, tmp, len);
            o += len;
        }
        Py_END_ALLOW_THREADS
        PyBuffer_Release(&in);
    }
    PyMem_Free(slots);
    Py_ssize_t written = o - (uint8_t *)out.buf;
    PyBuffer_Release(&out);
    Py_DECREF(seq);
    return PyLong_FromSsize_t(full ? -1 : written);
fail:
    PyMem_Free(slots);
    PyBuffer_Release(&out);
    Py_DECREF(seq);
    return NULL;
}

/* ---- decoding ---------------------------------------------------------------------------- */

enum { E_OK, E_END, E_OVERLONG, E_WIDE, E_NO_TYPE };

typedef struct {
    int err;
    Py_ssize_t rec;    /* the record it is in */
    const char *field; /* the field being read */
    Py_ssize_t at;     /* the byte offset where that field began */
    uint32_t name;     /* E_NO_TYPE: the op_name */
} DecodeError;

/* A varint of at most `bits` (32 or 64) bits in its shortest form. */
static inline int get(const uint8_t **pp, const uint8_t *end, int bits, uint64_t *out)
{
    const uint8_t *p = *pp;
    if (p < end && *p < 0x80) { /* most fields are one byte */
        *out = *p;
        *pp = p + 1;
        return E_OK;
    }
    uint64_t v = 0;
    int shift = 0;
    for (;;) {
        if (p >= end)
            return E_END;
        uint8_t b = *p++;
        if (shift == (bits == 32 ? 28 : 63)) { /* the last byte the width allows */
            if (b & 0x80)
                return E_OVERLONG;
            if (b >> (bits - shift))
                return E_WIDE;
        }
        v |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            if (b == 0) /* a zero high group (shift > 0 here): not the shortest form */
                return E_OVERLONG;
            *out = v;
            *pp = p;
            return E_OK;
        }
        shift += 7;
    }
}

#define GET(bits, field_name, dst)                                    \
    do {                                                              \
        const uint8_t *at_ = p;                                       \
        int e_ = get(&p, end, bits, &(dst));                          \
        if (e_ != E_OK) {                                             \
            *err = (DecodeError){e_, i, field_name, at_ - base, 0};   \
            return -1;                                                \
        }                                                             \
    } while (0)

/* The reading of same_or_delta: with the tag bit the previous value stays, else a zigzag
 * delta is added to it. */
#define SAME_OR_DELTA(bit, field_name, prev)                          \
    do {                                                              \
        if (!(tag & (bit))) {                                         \
            GET(32, field_name, v);                                   \
            (prev) += unzz32((uint32_t)v);                            \
        }                                                             \
    } while (0)

/* n records from [base, end) into out; the bytes used, or -1 with *err set. */
static Py_ssize_t decode_records(const uint8_t *base, const uint8_t *end, Py_ssize_t n, uint8_t *out,
                                 TypeSlot *slots, DecodeError *err)
{
    const uint8_t *p = base;
    State s = {0};
    uint64_t v;
    for (Py_ssize_t i = 0; i < n; i++, out += REC_SIZE) {
        if (p >= end) {
            *err = (DecodeError){E_END, i, "tag", p - base, 0};
            return -1;
        }
        unsigned tag = *p++;
        SAME_OR_DELTA(T_MODEL, "model_id", s.model);
        SAME_OR_DELTA(T_FLAG, "flag", s.flag);
        SAME_OR_DELTA(T_THREAD, "thread_id", s.thread);
        SAME_OR_DELTA(T_DEVICE, "device_id", s.device);
        GET(32, "op_name", v);
        s.name += unzz32((uint32_t)v);
        TypeSlot *slot = &slots[s.name & (TYPE_SLOTS - 1)];
        if (tag & T_TYPE) {
            if (slot->key != (uint64_t)s.name + 1) {
                *err = (DecodeError){E_NO_TYPE, i, "op_type", p - base, s.name};
                return -1;
            }
            s.type = slot->type;
        } else {
            GET(32, "op_type", v);
            s.type = (uint32_t)v;
            slot->key = (uint64_t)s.name + 1;
            slot->type = s.type;
        }
        GET(64, "start", v);
        uint64_t start = ((tag & T_START_END) ? s.end : s.start) + unzz64(v);
        uint64_t span;
        GET(64, "end", span);
        uint64_t dur = span;
        if (!(tag & T_DUR)) {
            GET(64, "duration", v);
            dur += unzz64(v);
        }
        GET(64, "execution_time", v);
        uint64_t ex = (tag & T_EXEC_PLAIN) ? v : dur - v;
        s.start = start;
        s.end = start + span;
        aclprof_record rec = {s.model, s.name, s.type, s.flag, s.thread, s.device, s.start, s.end, dur, ex};
        memcpy(out, &rec, sizeof rec);
    }
    return p - base;
}

static PyObject *decode(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "decode takes 2 arguments (data, count), %zd given", nargs);
        return NULL;
    }
    Py_ssize_t n = PyNumber_AsSsize_t(args[1], PyExc_OverflowError);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    Py_buffer in;
    if (PyObject_GetBuffer(args[0], &in, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    PyObject *res = NULL;
    TypeSlot *slots = NULL;
    if (n < 0) {
        PyErr_Format(PyExc_ValueError, "records codec: a count of %zd records", n);
        goto done;
    }
    if (n > in.len / MIN_REC_BYTES) { /* before allocating n records: a hostile count asks for anything */
        PyErr_Format(PyExc_ValueError, "records codec: %zd records need at least %d bytes each, the data is "
                     "%zd bytes", n, MIN_REC_BYTES, in.len);
        goto done;
    }
    res = PyBytes_FromStringAndSize(NULL, n * REC_SIZE);
    slots = PyMem_Calloc(TYPE_SLOTS, sizeof *slots);
    if (res == NULL || slots == NULL) {
        Py_CLEAR(res);
        if (slots == NULL)
            PyErr_NoMemory();
        goto done;
    }
    DecodeError err = {0};
    Py_ssize_t used;
    const uint8_t *base = in.buf;
    uint8_t *dst = (uint8_t *)PyBytes_AS_STRING(res);
    Py_BEGIN_ALLOW_THREADS
    used = decode_records(base, base + in.len, n, dst, slots, &err);
    Py_END_ALLOW_THREADS
    if (used < 0) {
        static const char *const what[] = {
            [E_END] = "the data ends", [E_OVERLONG] = "an overlong varint",
            [E_WIDE] = "a varint wider than the field",
        };
        if (err.err == E_NO_TYPE)
            PyErr_Format(PyExc_ValueError, "records codec: record %zd of %zd: op_type from the table, which "
                         "has none for op_name %u (byte %zd of %zd)", err.rec, n, (unsigned)err.name, err.at,
                         in.len);
        else
            PyErr_Format(PyExc_ValueError, "records codec: record %zd of %zd: %s: %s (byte %zd of %zd)", err.rec,
                         n, err.field, what[err.err], err.at, in.len);
        Py_CLEAR(res);
    } else if (used != in.len) {
        PyErr_Format(PyExc_ValueError, "records codec: %zd bytes after the last of %zd records (byte %zd of %zd)",
                     in.len - used, n, used, in.len);
        Py_CLEAR(res);
    }
done:
    PyMem_Free(slots);
    PyBuffer_Release(&in);
    return res;
}

PyDoc_STRVAR(encode_into_doc,
             "encode_into(out, parts) -> int\n\nEncode the wire records of the buffers in parts (each a whole "
             "number of records), in order, into the writable buffer out; the bytes written, or -1 if they "
             "do not fit in out (nothing of out is meaningful then).");
PyDoc_STRVAR(decode_doc, "decode(data, count) -> bytes\n\nThe count wire records encode_into wrote as data; "
                         "ValueError naming the record, field and byte if data is not exactly that.");

static PyMethodDef methods[] = {
    {"encode_into", (PyCFunction)(void (*)(void))encode_into, METH_FASTCALL, encode_into_doc},
    {"decode", (PyCFunction)(void (*)(void))decode, METH_FASTCALL, decode_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "aclprof.protocol._reccodec",
    "The storage's compact wire-record codec (C); see aclprofd.storage and the module's source.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__reccodec(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "CODEC_VERSION", CODEC_VERSION) < 0 ||
        PyModule_AddIntConstant(m, "RECORD_MAX_BYTES", MAX_REC_BYTES) < 0 ||
        PyModule_AddIntConstant(m, "RECORD_MIN_BYTES", MIN_REC_BYTES) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
