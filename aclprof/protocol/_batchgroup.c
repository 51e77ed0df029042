/* The daemon's per-batch grouping of wire records (RECORD_DTYPE: aclprof_record of
 * cdefs/aclprof_records.h, 56 bytes, little-endian), in one pass:
 *
 *   group(records, upper, out_dm, out_code, out_count, out_total, out_min, out_max,
 *         out_inv, out_bin) -> (ops, groups)
 *
 * Step keypoint records (ACLPROF_FLAG_KEYPOINT) are left out. The other records ("ops", in
 * their order) are grouped by (dm = model << 32 | device, code = op_name << 32 | op_type),
 * groups in the order of their first record; per group: dm, code, count, the sum, min and
 * max of the durations (as int64, like the aggregator's numpy path); per op: its group
 * (out_inv) and the histogram bin of its duration (out_bin): the first b with
 * duration <= upper[b] (upper = aclprof.protocol.quantshift.BIN_UPPER_NS, passed in: one
 * table), the last bin past it, bin 0 for a duration <= 0 as int64. The out_* buffers
 * are writable int64/uint64 buffers of at least one element per record.
 *
 * Why C: the aggregator did this with ~15 numpy calls per batch (a sort, runs, three
 * reduceats, the float bin estimate and its exact re-check): ~150 us per batch whatever
 * its size, most of the daemon's CPU at 10 k ops/s (agents send every 10 ms while a tail
 * client watches: 100 frames a second of ~100 records) and ~130 ns a record at 1000.
 * Why a plain CPython extension in aclprof.protocol: the daemon imports aclprof.protocol
 * only and must not load cffi (tests/test_layers.py), like _jsonl.c. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "aclprof.protocol._batchgroup reads little-endian wire records in place: port the loads"
#endif

#include "aclprof_records.h"
#include "aclprof_crc32c.h"
#include "aclprof_unaligned.h"

#define REC_SIZE ((Py_ssize_t)sizeof(aclprof_record))
#define AT(field) offsetof(aclprof_record, field)

/* A (device/model, name/type) pair's 64-bit hash: what a sender's key cache is sorted and
 * indexed by (aclprofd.aggregate.keys.pair_hash computes the same in numpy). */
static inline uint64_t pair_hash(uint64_t dm, uint64_t code)
{
    return (dm * 0x9E3779B97F4A7C15ull) ^ code;
}

static inline uint64_t mix(uint64_t dm, uint64_t code)
{
    uint64_t h = pair_hash(dm, code);
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    return h ^ (h >> 32);
}

/* The first b with d <= upper[b] (upper ascending), nb (the overflow bin, index nb) past the
 * last. The search starts from the octave of d (the table has 8 bins per power of two:
 * upper[8k] is about 2**k), a hint only: it is used when the bin before it is below d (so no
 * earlier bin can be the answer) and then a few steps up find the answer; otherwise a
 * binary search of the table does, as it did for every op (~9 unpredictable branches: most
 * of `group`'s time, issue 21). */
static inline int64_t bin_of(int64_t d, const int64_t *upper, Py_ssize_t nb)
{
    if (d <= 0)
        return 0;
    Py_ssize_t lo = 8 * (Py_ssize_t)(63 - __builtin_clzll((uint64_t)d)) - 1, hi = nb; /* answer in [lo, hi] */
    if (lo > nb)
        lo = nb;
    if (lo > 0 && d > upper[lo - 1]) {
        for (int k = 0; k < 12 && lo < nb; k++, lo++)
            if (d <= upper[lo])
                return lo;
    } else {
        lo = 0;
    }
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (d <= upper[mid])
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* `obj`'s buffer of whole RECORD_DTYPE records into `rv` (released on an error, which names
 * `fn`); the number of records, or -1. */
static Py_ssize_t get_records(const char *fn, PyObject *obj, Py_buffer *rv)
{
    if (PyObject_GetBuffer(obj, rv, PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    if (rv->len % REC_SIZE) {
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes of records is not a whole number of %zd-byte records", fn,
                     rv->len, REC_SIZE);
        PyBuffer_Release(rv);
        return -1;
    }
    return rv->len / REC_SIZE;
}

static int get_out(PyObject *obj, Py_buffer *b, Py_ssize_t n, const char *name)
{
    if (PyObject_GetBuffer(obj, b, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    if (b->len < n * 8) {
        PyErr_Format(PyExc_ValueError, "group: %s has %zd bytes, needs %zd (8 per record)", name, b->len,
                     n * 8);
        PyBuffer_Release(b);
        return -1;
    }
    return 0;
}

/* The groups of a batch being built (group, ingest_frame): per group its pair and the
 * count, sum (int64 wrap, like numpy's), min and max of its durations; `slots`, an
 * open-addressing table of group index + 1 (0: empty) over `mask` + 1 entries. */
typedef struct {
    uint32_t *slots;
    size_t mask;
    uint64_t *dm, *code;
    int64_t *count, *total, *min, *max;
    Py_ssize_t n;
} groups_t;

/* The group of (dm, code), created if new (*added set then), with duration d added. */
static inline Py_ssize_t group_add(groups_t *t, uint64_t dm, uint64_t code, int64_t d, int *added)
{
    size_t at = (size_t)mix(dm, code) & t->mask;
    Py_ssize_t g;
    *added = 0;
    for (;;) {
        uint32_t s = t->slots[at];
        if (s == 0) {
            g = t->n++;
            t->slots[at] = (uint32_t)(g + 1);
            t->dm[g] = dm;
            t->code[g] = code;
            t->count[g] = 0;
            t->total[g] = 0;
            t->min[g] = d;
            t->max[g] = d;
            *added = 1;
            break;
        }
        if (t->dm[s - 1] == dm && t->code[s - 1] == code) {
            g = s - 1;
            break;
        }
        at = (at + 1) & t->mask;
    }
    t->count[g] += 1;
    t->total[g] = (int64_t)((uint64_t)t->total[g] + (uint64_t)d);
    if (d < t->min[g])
        t->min[g] = d;
    if (d > t->max[g])
        t->max[g] = d;
    return g;
}

#define NOUT 8

static PyObject *group(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    static const char *const names[NOUT] = {"out_dm", "out_code", "out_count", "out_total",
                                            "out_min", "out_max", "out_inv", "out_bin"};
    if (nargs != 2 + NOUT) {
        PyErr_Format(PyExc_TypeError, "group takes %d arguments (%zd given)", 2 + NOUT, nargs);
        return NULL;
    }
    Py_buffer rv = {0}, uv = {0}, ov[NOUT];
    int have_rv = 0, have_uv = 0, nout = 0;
    uint32_t *slots = NULL;
    PyObject *result = NULL;
    Py_ssize_t n = get_records("group", args[0], &rv);
    if (n < 0)
        return NULL;
    have_rv = 1;
    if (PyObject_GetBuffer(args[1], &uv, PyBUF_C_CONTIGUOUS) < 0)
        goto done;
    have_uv = 1;
    if (uv.len % 8 || uv.len < 8) {
        PyErr_SetString(PyExc_ValueError, "group: upper must be int64 bin bounds");
        goto done;
    }
    for (; nout < NOUT; nout++)
        if (get_out(args[2 + nout], &ov[nout], n, names[nout]) < 0)
            goto done;
    uint64_t *gdm = ov[0].buf, *gcode = ov[1].buf;
    int64_t *gcount = ov[2].buf, *gtotal = ov[3].buf, *gmin = ov[4].buf, *gmax = ov[5].buf;
    int64_t *inv = ov[6].buf, *bins = ov[7].buf;
    const int64_t *upper = uv.buf;
    Py_ssize_t nb = uv.len / 8;

    size_t cap = 16;
    while (cap < (size_t)n * 2)
        cap <<= 1;
    slots = malloc(cap * sizeof *slots); /* group index + 1; 0: empty */
    if (slots == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    memset(slots, 0, cap * sizeof *slots);
    groups_t t = {slots, cap - 1, gdm, gcode, gcount, gtotal, gmin, gmax, 0};
    Py_ssize_t ops = 0;
    const char *rec = rv.buf;
    for (Py_ssize_t i = 0; i < n; i++, rec += REC_SIZE) {
        if (ld32(rec + AT(flag)) & (uint32_t)ACLPROF_FLAG_KEYPOINT)
            continue;
        uint64_t dm = ((uint64_t)ld32(rec + AT(model_id)) << 32) | ld32(rec + AT(device_id));
        uint64_t code = ((uint64_t)ld32(rec + AT(op_name)) << 32) | ld32(rec + AT(op_type));
        int64_t d = (int64_t)ld64(rec + AT(duration));
        int added;
        Py_ssize_t g = group_add(&t, dm, code, d, &added);
        inv[ops] = g;
        bins[ops] = bin_of(d, upper, nb);
        ops++;
    }
    result = Py_BuildValue("(nn)", ops, t.n);
done:
    free(slots);
    for (int k = 0; k < nout; k++)
        PyBuffer_Release(&ov[k]);
    if (have_uv)
        PyBuffer_Release(&uv);
    if (have_rv)
        PyBuffer_Release(&rv);
    return result;
}

/* count_bad(records, max_duration) -> how many records no op can have: duration above
 * max_duration, end before start, or a model or device id of 0xFFFFFFFF (the C API's "no
 * id"). The daemon refuses those (aclprofd.ingest.Ingest.rejects); this pass lets the
 * usual batch, with none, skip the ten numpy calls that find and count them by reason. */
static PyObject *count_bad(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "count_bad takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    unsigned long long max_duration = PyLong_AsUnsignedLongLong(args[1]);
    if (max_duration == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    Py_buffer rv;
    Py_ssize_t n = get_records("count_bad", args[0], &rv), bad = 0;
    if (n < 0)
        return NULL;
    const char *rec = rv.buf;
    for (Py_ssize_t i = 0; i < n; i++, rec += REC_SIZE) {
        bad += ld64(rec + AT(duration)) > max_duration || ld64(rec + AT(end)) < ld64(rec + AT(start))
               || ld32(rec + AT(model_id)) == UINT32_MAX || ld32(rec + AT(device_id)) == UINT32_MAX;
    }
    PyBuffer_Release(&rv);
    return PyLong_FromSsize_t(bad);
}

/* batch_facts(records) -> (keypoints, device, max_end): how many records are step keypoints
 * (ACLPROF_FLAG_KEYPOINT), the device id every record has (-1 when they differ) and the
 * largest end (0 for none). aclprofd.ingest reads these of every batch (the steps count
 * and the lag clock): one pass instead of the ~8 numpy calls over strided fields (~60 us a
 * batch of 2,600 records, issue 21). */
static PyObject *batch_facts(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 1) {
        PyErr_Format(PyExc_TypeError, "batch_facts takes 1 argument (%zd given)", nargs);
        return NULL;
    }
    Py_buffer rv;
    Py_ssize_t n = get_records("batch_facts", args[0], &rv), keypoints = 0;
    if (n < 0)
        return NULL;
    const char *rec = rv.buf;
    uint32_t dev = n ? ld32(rec + AT(device_id)) : 0;
    int same = 1;
    uint64_t max_end = 0;
    for (Py_ssize_t i = 0; i < n; i++, rec += REC_SIZE) {
        keypoints += (ld32(rec + AT(flag)) & (uint32_t)ACLPROF_FLAG_KEYPOINT) != 0;
        same &= ld32(rec + AT(device_id)) == dev;
        uint64_t end = ld64(rec + AT(end));
        if (end > max_end)
            max_end = end;
    }
    PyBuffer_Release(&rv);
    return Py_BuildValue("(nLK)", keypoints, same ? (long long)dev : -1LL, (unsigned long long)max_end);
}

/* A TypeError naming `fn` unless it was given `want` arguments. */
static int check_nargs(const char *fn, Py_ssize_t nargs, int want)
{
    if (nargs == want)
        return 0;
    PyErr_Format(PyExc_TypeError, "%s takes %d arguments (%zd given)", fn, want, nargs);
    return -1;
}

/* Releases b[i] for each bit i of `take` below `narg` (what take_arrays acquired). */
static void release_arrays(Py_buffer *b, int narg, unsigned take)
{
    for (int i = 0; i < narg; i++)
        if (take >> i & 1u)
            PyBuffer_Release(&b[i]);
}

/* The buffers of a function's array arguments: args[i] for each bit i of `take` (C-contiguous,
 * a whole number of 64-bit items; writable where `writable` has bit i). On an error (named
 * with `fn` and the argument's position) nothing stays acquired and -1 is returned. */
static int take_arrays(const char *fn, PyObject *const *args, int narg, unsigned take, unsigned writable,
                       Py_buffer *b)
{
    for (int i = 0; i < narg; i++) {
        if (!(take >> i & 1u))
            continue;
        int flags = PyBUF_C_CONTIGUOUS | (writable >> i & 1u ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(args[i], &b[i], flags) < 0) {
            release_arrays(b, i, take);
            return -1;
        }
        if (b[i].len % 8) {
            PyErr_Format(PyExc_ValueError, "%s: argument %d is not an array of 64-bit integers", fn, i + 1);
            release_arrays(b, i + 1, take);
            return -1;
        }
    }
    return 0;
}

/* The checks and additions fold, fold_buckets and fold_batch share (one copy of each). */

/* A ValueError naming `fn` unless every keys[i] (i < g) is a row of `cap` rows. */
static int check_keys(const char *fn, Py_ssize_t g, const int64_t *keys, Py_ssize_t cap)
{
    for (Py_ssize_t i = 0; i < g; i++)
        if (keys[i] < 0 || keys[i] >= cap) {
            PyErr_Format(PyExc_ValueError, "%s: key %lld outside the %zd rows", fn, (long long)keys[i], cap);
            return -1;
        }
    return 0;
}

/* A ValueError naming `fn` unless every (key * nbins + bin) code hc[i] (i < h) is in the
 * table: key below `cap`, and the bin's bucket of_bin[bin] below `nb`. */
static int check_codes(const char *fn, Py_ssize_t h, const int64_t *hc, Py_ssize_t cap, Py_ssize_t nbins,
                       const int64_t *of_bin, Py_ssize_t nb)
{
    for (Py_ssize_t i = 0; i < h; i++)
        if (hc[i] < 0 || hc[i] >= cap * nbins || of_bin[hc[i] % nbins] < 0 || of_bin[hc[i] % nbins] >= nb) {
            PyErr_Format(PyExc_ValueError, "%s: histogram code %lld outside the table", fn, (long long)hc[i]);
            return -1;
        }
    return 0;
}

static inline void add_to(int64_t *p, int64_t v)
{
    *p = (int64_t)((uint64_t)*p + (uint64_t)v); /* int64 wrap, like numpy */
}

/* Per group i < g: acount/atotal/amin/amax of row keys[i] take its count, total, min, max. */
static void fold_groups(Py_ssize_t g, const int64_t *keys, const int64_t *cnt, const int64_t *tot,
                        const int64_t *mn, const int64_t *mx, int64_t *acount, int64_t *atotal, int64_t *amin,
                        int64_t *amax)
{
    for (Py_ssize_t i = 0; i < g; i++) {
        int64_t k = keys[i];
        add_to(&acount[k], cnt[i]);
        add_to(&atotal[k], tot[i]);
        if (mn[i] < amin[k])
            amin[k] = mn[i];
        if (mx[i] > amax[k])
            amax[k] = mx[i];
    }
}

/* asum[keys[i]] += tot[i] for i < g. */
static void add_sums(Py_ssize_t g, const int64_t *keys, const int64_t *tot, int64_t *asum)
{
    for (Py_ssize_t i = 0; i < g; i++)
        add_to(&asum[keys[i]], tot[i]);
}

/* Per code i < h: its count hn[i] to acc[key * nb + of_bin[bin]], and to ahist[code] unless
 * ahist is NULL. */
static void add_buckets(Py_ssize_t h, const int64_t *hc, const int64_t *hn, Py_ssize_t nbins, int64_t *ahist,
                        int64_t *acc, Py_ssize_t nb, const int64_t *of_bin)
{
    for (Py_ssize_t i = 0; i < h; i++) {
        if (ahist != NULL)
            add_to(&ahist[hc[i]], hn[i]);
        add_to(&acc[hc[i] / nbins * nb + of_bin[hc[i] % nbins]], hn[i]);
    }
}

/* fold(keys, count, total, mn, mx, hcodes, hcount, acc_count, acc_total, acc_min, acc_max,
 *      acc_hist, acc_prom, acc_prom_sum, prom_of_bin) -> None
 *
 * Adds one batch's figures to the aggregator's since-start arrays, in place: per group g
 * (keys[g] may repeat: the "other" key) count, total, min, max and the Prometheus sum; per
 * (key * nbins + bin) code its count to the histogram and to the key's Prometheus bucket
 * prom_of_bin[bin] (nbins = len(prom_of_bin), nprom = len(acc_prom) / len(acc_count)).
 * What seven numpy ufunc.at calls, a divmod and the bucket map did, in one pass. Every index
 * is checked before anything is written: a bad one is a ValueError and nothing changes. */
static PyObject *fold(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    enum { NIN = 7, NACC = 7, NARG = NIN + NACC + 1 };
    const unsigned all = (1u << NARG) - 1, accs = ((1u << NACC) - 1) << NIN;
    Py_buffer b[NARG];
    PyObject *result = NULL;
    if (check_nargs("fold", nargs, NARG) < 0 || take_arrays("fold", args, NARG, all, accs, b) < 0)
        return NULL;
    Py_ssize_t g = b[0].len / 8, h = b[5].len / 8, cap = b[7].len / 8, nbins = b[14].len / 8;
    if (b[1].len / 8 != g || b[2].len / 8 != g || b[3].len / 8 != g || b[4].len / 8 != g || b[6].len / 8 != h) {
        PyErr_SetString(PyExc_ValueError, "fold: the group columns (and the code columns) differ in length");
        goto done;
    }
    if (cap == 0 || nbins == 0 || b[8].len / 8 != cap || b[9].len / 8 != cap || b[10].len / 8 != cap
        || b[13].len / 8 != cap || b[11].len / 8 != cap * nbins || b[12].len / 8 % cap) {
        PyErr_SetString(PyExc_ValueError, "fold: the accumulators do not have one row per key");
        goto done;
    }
    Py_ssize_t nprom = b[12].len / 8 / cap;
    const int64_t *keys = b[0].buf, *cnt = b[1].buf, *tot = b[2].buf, *mn = b[3].buf, *mx = b[4].buf;
    const int64_t *hc = b[5].buf, *hn = b[6].buf, *pob = b[14].buf;
    if (check_keys("fold", g, keys, cap) < 0 || check_codes("fold", h, hc, cap, nbins, pob, nprom) < 0)
        goto done;
    fold_groups(g, keys, cnt, tot, mn, mx, b[7].buf, b[8].buf, b[9].buf, b[10].buf);
    add_sums(g, keys, tot, b[13].buf);
    add_buckets(h, hc, hn, nbins, b[11].buf, b[12].buf, nprom, pob);
    Py_INCREF(Py_None);
    result = Py_None;
done:
    release_arrays(b, NARG, all);
    return result;
}

/* sum_codes(codes, counts, out_codes, out_sums) -> m
 *
 * Equal codes combined: out_codes[:m] the distinct codes, ascending, out_sums[:m] the sum of
 * their counts (int64, wrapping like numpy's; counts None: each code counts 1). codes and
 * counts are int64 buffers of one length n, the outputs writable int64 buffers of at least n
 * elements (out_codes may be codes itself: it is read before it is written).
 *
 * Why: the aggregator's per-batch histogram codes, the detector's pending deltas and the
 * sliding windows' slot compaction did this with np.unique(return_inverse/counts) and a
 * float bincount, an O(n log n) argsort of every row: ~2.5 ms of loop CPU per 37 k rows of
 * which 5 k are distinct (the detector's merge, every 32 k rows: ~0.15 us per record at
 * 100 k ops/s, issue 21). Here: one hash pass over the rows, then an LSD radix sort of the
 * distinct codes only (11-bit digits over the bits their range needs). */
typedef struct {
    uint64_t key; /* the code, sign bit flipped: unsigned order = signed order */
    int64_t sum;
} code_sum;

static int radix_sort(code_sum *a, Py_ssize_t m)
{
    if (m < 2)
        return 0;
    uint64_t lo = a[0].key, hi = a[0].key;
    for (Py_ssize_t i = 1; i < m; i++) {
        if (a[i].key < lo)
            lo = a[i].key;
        if (a[i].key > hi)
            hi = a[i].key;
    }
    uint64_t span = hi - lo;
    int bits = 0;
    while (bits < 64 && (span >> bits) != 0)
        bits++;
    if (bits == 0)
        return 0; /* one distinct code (cannot happen: they are distinct) */
    code_sum *tmp = malloc((size_t)m * sizeof *tmp);
    if (tmp == NULL)
        return -1;
    enum { DIGIT = 11, NB = 1 << DIGIT };
    Py_ssize_t count[NB];
    code_sum *src = a, *dst = tmp;
    for (int shift = 0; shift < bits; shift += DIGIT) {
        memset(count, 0, sizeof count);
        for (Py_ssize_t i = 0; i < m; i++)
            count[((src[i].key - lo) >> shift) & (NB - 1)]++;
        Py_ssize_t at = 0;
        for (int d = 0; d < NB; d++) {
            Py_ssize_t c = count[d];
            count[d] = at;
            at += c;
        }
        for (Py_ssize_t i = 0; i < m; i++)
            dst[count[((src[i].key - lo) >> shift) & (NB - 1)]++] = src[i];
        code_sum *t = src;
        src = dst;
        dst = t;
    }
    if (src != a)
        memcpy(a, src, (size_t)m * sizeof *a);
    free(tmp);
    return 0;
}

/* The distinct 64-bit keys of up to n rows (sum_rows, merge_stats): an open-addressing table
 * whose slots hold a distinct index + 1 (0: empty), u[j].key the j-th distinct key in order
 * of first appearance (u[j].sum is the caller's). */
typedef struct {
    uint32_t *slots;
    code_sum *u;
    size_t mask;
    Py_ssize_t m;
} distinct_table;

/* 0, or -1 with MemoryError set (nothing to close then). */
static int table_open(distinct_table *t, Py_ssize_t n)
{
    size_t cap = 16;
    while (cap < (size_t)n * 2)
        cap <<= 1;
    t->slots = calloc(cap, sizeof *t->slots);
    t->u = malloc((size_t)(n ? n : 1) * sizeof *t->u);
    t->mask = cap - 1;
    t->m = 0;
    if (t->slots == NULL || t->u == NULL) {
        free(t->slots);
        free(t->u);
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void table_close(distinct_table *t)
{
    free(t->slots);
    free(t->u);
}

/* The distinct index of `key`; a new key is added (*added set to 1, its sum left unset). */
static inline Py_ssize_t table_find(distinct_table *t, uint64_t key, int *added)
{
    size_t at = (size_t)mix(key, 0) & t->mask;
    for (;;) {
        uint32_t s = t->slots[at];
        if (s == 0) {
            t->slots[at] = (uint32_t)(t->m + 1);
            t->u[t->m].key = key;
            *added = 1;
            return t->m++;
        }
        if (t->u[s - 1].key == key) {
            *added = 0;
            return s - 1;
        }
        at = (at + 1) & t->mask;
    }
}

/* The distinct codes of n rows, ascending, into ocodes[:m] and the sums of their counts
 * (counts NULL: 1 each) into osums[:m]; returns m, or -1 with MemoryError set. The code of
 * row i is codes[i], or, with codes NULL, keys[inv[i]] * nbins + bins[i] (fold_batch: a
 * batch's histogram codes, never made into an array). The outputs may be the inputs: they
 * are written after every row was read. */
static Py_ssize_t sum_rows(Py_ssize_t n, const int64_t *codes, const int64_t *counts, const int64_t *keys,
                           const int64_t *inv, const int64_t *bins, int64_t nbins, int64_t *ocodes, int64_t *osums)
{
    distinct_table t;
    if (table_open(&t, n) < 0)
        return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t code = codes != NULL ? codes[i] : keys[inv[i]] * nbins + bins[i];
        uint64_t c = counts ? (uint64_t)counts[i] : 1u;
        int added;
        Py_ssize_t j = table_find(&t, (uint64_t)code ^ 0x8000000000000000ull, &added);
        t.u[j].sum = added ? (int64_t)c : (int64_t)((uint64_t)t.u[j].sum + c);
    }
    Py_ssize_t m = t.m;
    if (radix_sort(t.u, m) < 0) {
        table_close(&t);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < m; i++) {
        ocodes[i] = (int64_t)(t.u[i].key ^ 0x8000000000000000ull);
        osums[i] = t.u[i].sum;
    }
    table_close(&t);
    return m;
}

static PyObject *sum_codes(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 4) {
        PyErr_Format(PyExc_TypeError, "sum_codes takes 4 arguments (%zd given)", nargs);
        return NULL;
    }
    Py_buffer cv = {0}, nv = {0}, oc = {0}, os = {0};
    int have_cv = 0, have_nv = 0, have_oc = 0, have_os = 0;
    PyObject *result = NULL;
    if (PyObject_GetBuffer(args[0], &cv, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    have_cv = 1;
    if (cv.len % 8) {
        PyErr_SetString(PyExc_ValueError, "sum_codes: codes must be int64");
        goto done;
    }
    Py_ssize_t n = cv.len / 8;
    if (args[1] != Py_None) {
        if (PyObject_GetBuffer(args[1], &nv, PyBUF_C_CONTIGUOUS) < 0)
            goto done;
        have_nv = 1;
        if (nv.len != cv.len) {
            PyErr_Format(PyExc_ValueError, "sum_codes: %zd codes but %zd bytes of int64 counts", n, nv.len);
            goto done;
        }
    }
    if (PyObject_GetBuffer(args[2], &oc, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
        goto done;
    have_oc = 1;
    if (PyObject_GetBuffer(args[3], &os, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
        goto done;
    have_os = 1;
    if (oc.len < cv.len || os.len < cv.len) {
        PyErr_Format(PyExc_ValueError, "sum_codes: the outputs need room for %zd int64 values", n);
        goto done;
    }
    if (n > (Py_ssize_t)UINT32_MAX - 1) {
        PyErr_Format(PyExc_ValueError, "sum_codes: %zd codes is more than one call takes", n);
        goto done;
    }
    Py_ssize_t m = sum_rows(n, cv.buf, have_nv ? nv.buf : NULL, NULL, NULL, NULL, 0, oc.buf, os.buf);
    if (m < 0)
        goto done;
    result = PyLong_FromSsize_t(m);
done:
    if (have_os)
        PyBuffer_Release(&os);
    if (have_oc)
        PyBuffer_Release(&oc);
    if (have_nv)
        PyBuffer_Release(&nv);
    if (have_cv)
        PyBuffer_Release(&cv);
    return result;
}

PyDoc_STRVAR(sum_codes_doc, "sum_codes(codes, counts, out_codes, out_sums) -> m\n\nThe distinct int64 codes, "
                            "ascending, into out_codes[:m] and the sums of their counts (None: 1 each) into "
                            "out_sums[:m].");

/* merge_stats(keys, count, total, min, max, out_keys, out_count, out_total, out_min, out_max) -> m
 *
 * The rows with equal keys combined (count and total summed with int64 wrap, the least min,
 * the largest max), the distinct keys ascending into out_*[:m]: what a stable argsort, five
 * gathers, a flatnonzero and four reduceat calls did (aclprofd.aggregate.quantiles.group_stats,
 * a window slot's merge of its batches: ~40 parts of ~1000 keys a second per agent, issue
 * 21). The same hash table and radix sort as sum_codes; the outputs may not be the inputs. */
static PyObject *merge_stats(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    enum { NARG = 10 };
    const unsigned all = (1u << NARG) - 1, outs = all & ~((1u << 5) - 1);
    Py_buffer b[NARG];
    if (check_nargs("merge_stats", nargs, NARG) < 0 || take_arrays("merge_stats", args, NARG, all, outs, b) < 0)
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = b[0].len / 8, m = 0;
    distinct_table t;
    int opened = 0;
    for (int i = 1; i < NARG; i++)
        if (i < 5 ? b[i].len != b[0].len : b[i].len < b[0].len) {
            PyErr_Format(PyExc_ValueError, "merge_stats: argument %d does not hold %zd int64 values", i + 1, n);
            goto done;
        }
    if (n > (Py_ssize_t)UINT32_MAX - 1) {
        PyErr_Format(PyExc_ValueError, "merge_stats: %zd rows is more than one call takes", n);
        goto done;
    }
    const int64_t *keys = b[0].buf, *cnt = b[1].buf, *tot = b[2].buf, *mn = b[3].buf, *mx = b[4].buf;
    int64_t *okeys = b[5].buf, *ocnt = b[6].buf, *otot = b[7].buf, *omin = b[8].buf, *omax = b[9].buf;
    if (table_open(&t, n) < 0)
        goto done;
    opened = 1;
    /* the figures combined at each key's distinct index (first appearance first), then put
     * in key order */
    for (Py_ssize_t i = 0; i < n; i++) {
        int added;
        Py_ssize_t j = table_find(&t, (uint64_t)keys[i] ^ 0x8000000000000000ull, &added);
        if (added) {
            t.u[j].sum = j; /* where its figures are */
            ocnt[j] = cnt[i];
            otot[j] = tot[i];
            omin[j] = mn[i];
            omax[j] = mx[i];
            continue;
        }
        add_to(&ocnt[j], cnt[i]);
        add_to(&otot[j], tot[i]);
        if (mn[i] < omin[j])
            omin[j] = mn[i];
        if (mx[i] > omax[j])
            omax[j] = mx[i];
    }
    m = t.m;
    if (radix_sort(t.u, m) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    /* the sorted order applied to each figure array through one row of m values (the
     * table's slots: 2n >= m uint32 pairs), then the keys */
    int64_t *tmp = (int64_t *)t.slots;
    int64_t *figs[4] = {ocnt, otot, omin, omax};
    for (int f = 0; f < 4; f++) {
        for (Py_ssize_t i = 0; i < m; i++)
            tmp[i] = figs[f][t.u[i].sum];
        memcpy(figs[f], tmp, (size_t)m * sizeof *tmp);
    }
    for (Py_ssize_t i = 0; i < m; i++)
        okeys[i] = (int64_t)(t.u[i].key ^ 0x8000000000000000ull);
    result = PyLong_FromSsize_t(m);
done:
    if (opened)
        table_close(&t);
    release_arrays(b, NARG, all);
    return result;
}

PyDoc_STRVAR(merge_stats_doc,
             "merge_stats(keys, count, total, min, max, out_keys, out_count, out_total, out_min, out_max) -> m\n\n"
             "Rows with equal int64 keys combined (sums, min, max), the distinct keys ascending, into out_*[:m].");

/* The index of hash h in the ascending, duplicate-free hashes[:m], or -1. */
static inline Py_ssize_t find_hash(const uint64_t *hashes, Py_ssize_t m, uint64_t h)
{
    Py_ssize_t lo = 0, hi = m;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (hashes[mid] < h)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < m && hashes[lo] == h ? lo : -1;
}

/* cache_lookup(hashes, dms, codes, keys, dm, code, out_hash, out_key, out_miss) -> nmiss
 *
 * A sender's key cache (aclprofd.aggregate.keys.KeySource: hashes ascending, one entry per
 * hash, with its pair (dms, codes) and key) searched for each pair (dm[i], code[i]) of a
 * batch: out_hash[i] = keys.pair_hash = dm * 0x9E3779B97F4A7C15 ^ code (uint64, wrapping);
 * a hit (the first entry of that hash, as np.searchsorted finds it, holds the same pair)
 * sets out_key[i], a miss puts i in out_miss (ascending) and leaves out_key[i] as it was.
 * What pair_hash, a searchsorted, three gathers and compares and a flatnonzero did (~10
 * numpy calls a batch: ~160 us of loop CPU per batch of 1000 distinct ops, issue 21). */
static PyObject *cache_lookup(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    enum { NARG = 9 };
    const unsigned all = (1u << NARG) - 1, outs = all & ~((1u << 6) - 1);
    Py_buffer b[NARG];
    PyObject *result = NULL;
    if (check_nargs("cache_lookup", nargs, NARG) < 0 || take_arrays("cache_lookup", args, NARG, all, outs, b) < 0)
        return NULL;
    Py_ssize_t m = b[0].len / 8, n = b[4].len / 8;
    if (b[1].len / 8 != m || b[2].len / 8 != m || b[3].len / 8 != m) {
        PyErr_SetString(PyExc_ValueError, "cache_lookup: the cache's columns differ in length");
        goto done;
    }
    if (b[5].len / 8 != n || b[6].len / 8 < n || b[7].len / 8 < n || b[8].len / 8 < n) {
        PyErr_SetString(PyExc_ValueError, "cache_lookup: dm and code differ in length, or an output is short");
        goto done;
    }
    const uint64_t *hashes = b[0].buf, *dms = b[1].buf, *codes = b[2].buf, *dm = b[4].buf, *code = b[5].buf;
    const int64_t *keys = b[3].buf;
    uint64_t *out_hash = b[6].buf;
    int64_t *out_key = b[7].buf, *out_miss = b[8].buf;
    Py_ssize_t nmiss = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t h = pair_hash(dm[i], code[i]);
        out_hash[i] = h;
        Py_ssize_t at = find_hash(hashes, m, h); /* the cache holds one entry per hash */
        if (at >= 0 && dms[at] == dm[i] && codes[at] == code[i])
            out_key[i] = keys[at];
        else
            out_miss[nmiss++] = i;
    }
    result = PyLong_FromSsize_t(nmiss);
done:
    release_arrays(b, NARG, all);
    return result;
}

PyDoc_STRVAR(cache_lookup_doc, "cache_lookup(hashes, dms, codes, keys, dm, code, out_hash, out_key, out_miss) "
                               "-> nmiss\n\nSearch a sender's sorted key cache for a batch's pairs (see the "
                               "module's source).");

/* fold_buckets(keys, total, hcodes, hcount, acc, acc_sum, of_bin) -> None
 *
 * One more set of bucketed counters folded in place, like fold's Prometheus part: per
 * group g acc_sum[keys[g]] += total[g]; per (key * nbins + bin) code acc[key * nb +
 * of_bin[bin]] += its count (nbins = len(of_bin), nb = len(acc) / len(acc_sum)). The
 * aggregator's fine buckets (issue 23) did it with a divmod, the bucket map and two
 * ufunc.at calls (~90 us a batch of 1000 distinct ops, issue 21). Every index is checked
 * before anything is written: a bad one is a ValueError and nothing changes. */
static PyObject *fold_buckets(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    enum { NARG = 7 };
    const unsigned all = (1u << NARG) - 1, accs = 1u << 4 | 1u << 5;
    Py_buffer b[NARG];
    PyObject *result = NULL;
    if (check_nargs("fold_buckets", nargs, NARG) < 0 || take_arrays("fold_buckets", args, NARG, all, accs, b) < 0)
        return NULL;
    Py_ssize_t g = b[0].len / 8, h = b[2].len / 8, cap = b[5].len / 8, nbins = b[6].len / 8;
    if (b[1].len / 8 != g || b[3].len / 8 != h) {
        PyErr_SetString(PyExc_ValueError, "fold_buckets: keys and total (or hcodes and hcount) differ in length");
        goto done;
    }
    if (cap == 0 || nbins == 0 || b[4].len / 8 % cap) {
        PyErr_SetString(PyExc_ValueError, "fold_buckets: acc does not have one row per key of acc_sum");
        goto done;
    }
    Py_ssize_t nb = b[4].len / 8 / cap;
    const int64_t *keys = b[0].buf, *hc = b[2].buf, *ob = b[6].buf;
    if (check_keys("fold_buckets", g, keys, cap) < 0 || check_codes("fold_buckets", h, hc, cap, nbins, ob, nb) < 0)
        goto done;
    add_sums(g, keys, b[1].buf, b[5].buf);
    add_buckets(h, hc, b[3].buf, nbins, NULL, b[4].buf, nb, ob);
    Py_INCREF(Py_None);
    result = Py_None;
done:
    release_arrays(b, NARG, all);
    return result;
}

PyDoc_STRVAR(fold_buckets_doc, "fold_buckets(keys, total, hcodes, hcount, acc, acc_sum, of_bin) -> None\n\n"
                               "Add a batch's bucket counts and sums in place (see the module's source).");

/* The since-start accumulators fold_batch and ingest_frame take at the same positions
 * (b[7] acc_count .. b[18] last_fed, b[14] prom_of_bin, b[17] fine_of_bin): one row per key
 * of acc_count's `cap` rows, `nbins` entries in each bin table, every bin's bucket inside its
 * table; the bucket counts per key into *nprom / *nfine. 0, or -1 with a ValueError naming
 * `fn`. */
static int check_accumulators(const char *fn, const Py_buffer *b, Py_ssize_t nbins, Py_ssize_t *nprom,
                              Py_ssize_t *nfine)
{
    Py_ssize_t cap = b[7].len / 8;
    if (cap == 0 || nbins == 0 || b[14].len / 8 != nbins || b[17].len / 8 != nbins || b[8].len / 8 != cap
        || b[9].len / 8 != cap || b[10].len / 8 != cap || b[13].len / 8 != cap || b[16].len / 8 != cap
        || b[18].len / 8 != cap || b[11].len / 8 != cap * nbins || b[12].len / 8 % cap || b[15].len / 8 % cap) {
        PyErr_Format(PyExc_ValueError, "%s: the accumulators do not have one row per key (or the bin tables "
                                       "do not have one entry per bin)", fn);
        return -1;
    }
    *nprom = b[12].len / 8 / cap;
    *nfine = b[15].len / 8 / cap;
    const int64_t *pob = b[14].buf, *fob = b[17].buf;
    for (Py_ssize_t i = 0; i < nbins; i++)
        if (pob[i] < 0 || pob[i] >= *nprom || fob[i] < 0 || fob[i] >= *nfine) {
            PyErr_Format(PyExc_ValueError, "%s: bin %zd has no bucket in the table", fn, i);
            return -1;
        }
    return 0;
}

/* The float `now` and int `other` of fold_batch's and ingest_frame's arguments; 0 or -1. */
static int now_and_other(PyObject *const *args, int at_now, int at_other, double *now, long long *other)
{
    *now = PyFloat_AsDouble(args[at_now]);
    if (*now == -1.0 && PyErr_Occurred())
        return -1;
    *other = PyLong_AsLongLong(args[at_other]);
    return *other == -1 && PyErr_Occurred() ? -1 : 0;
}

/* fold_batch(keys, inv, bins, count, total, mn, mx, acc_count, acc_total, acc_min, acc_max,
 *            acc_hist, acc_prom, acc_prom_sum, prom_of_bin, acc_fine, acc_fine_sum, fine_of_bin,
 *            last_fed, now, other, out_codes, out_counts) -> (m, other_records)
 *
 * The aggregator's whole per-batch step after `group` and the key lookup
 * (aclprofd.aggregate.aggregator.Aggregator.ingest), in place and in one call: per op i its
 * histogram code keys[inv[i]] * nbins + bins[i] (nbins = len(prom_of_bin) = len(fine_of_bin)),
 * the distinct codes ascending with their counts into out_codes[:m] / out_counts[:m] (what
 * sum_codes gives); then fold's and fold_buckets' additions of those codes and of the groups
 * (count, total, min, max; keys[g] may repeat: the "other" key), last_fed[keys[g]] = now
 * (float64), and other_records, the count of the groups whose key is `other`. What a gather,
 * a multiply-add, sum_codes, fold, fold_buckets, a fancy assignment and a masked sum did
 * (seven numpy and C calls and four temporaries a batch, issue 21). Every index (keys, inv,
 * bins, the bucket tables) is checked before anything is written: a bad one is a
 * ValueError and nothing changes. */
static PyObject *fold_batch(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    enum { NARG = 23, NOW = 19, OTHER = 20 };
    const unsigned arrays = ((1u << NARG) - 1) & ~(1u << NOW | 1u << OTHER);
    const unsigned outs = (0x7Fu << 7) | 1u << 15 | 1u << 16 | 1u << 18 | 1u << 21 | 1u << 22;
    double now;
    long long other;
    if (check_nargs("fold_batch", nargs, NARG) < 0 || now_and_other(args, NOW, OTHER, &now, &other) < 0)
        return NULL;
    Py_buffer b[NARG];
    PyObject *result = NULL;
    if (take_arrays("fold_batch", args, NARG, arrays, outs & ~(1u << 14 | 1u << 17), b) < 0)
        return NULL;
    Py_ssize_t g = b[0].len / 8, n = b[1].len / 8, cap = b[7].len / 8, nbins = b[14].len / 8;
    if (b[2].len / 8 != n || b[3].len / 8 != g || b[4].len / 8 != g || b[5].len / 8 != g || b[6].len / 8 != g
        || b[21].len / 8 < n || b[22].len / 8 < n) {
        PyErr_SetString(PyExc_ValueError, "fold_batch: the group columns (or inv and bins) differ in length, or "
                                          "an output is short");
        goto done;
    }
    Py_ssize_t nprom, nfine;
    if (check_accumulators("fold_batch", b, nbins, &nprom, &nfine) < 0)
        goto done;
    const int64_t *keys = b[0].buf, *inv = b[1].buf, *bins = b[2].buf, *cnt = b[3].buf, *tot = b[4].buf;
    const int64_t *pob = b[14].buf, *fob = b[17].buf;
    if (check_keys("fold_batch", g, keys, cap) < 0)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++)
        if (inv[i] < 0 || inv[i] >= g || bins[i] < 0 || bins[i] >= nbins) {
            PyErr_Format(PyExc_ValueError, "fold_batch: op %zd has group %lld and bin %lld, outside the batch's "
                                           "%zd groups and %zd bins", i, (long long)inv[i], (long long)bins[i], g,
                         nbins);
            goto done;
        }
    int64_t *hc = b[21].buf, *hn = b[22].buf;
    Py_ssize_t m = sum_rows(n, NULL, NULL, keys, inv, bins, nbins, hc, hn);
    if (m < 0)
        goto done;
    fold_groups(g, keys, cnt, tot, b[5].buf, b[6].buf, b[7].buf, b[8].buf, b[9].buf, b[10].buf);
    add_sums(g, keys, tot, b[13].buf);
    add_buckets(m, hc, hn, nbins, b[11].buf, b[12].buf, nprom, pob);
    add_sums(g, keys, tot, b[16].buf);
    add_buckets(m, hc, hn, nbins, NULL, b[15].buf, nfine, fob);
    double *last = b[18].buf;
    uint64_t others = 0;
    for (Py_ssize_t i = 0; i < g; i++) {
        last[keys[i]] = now;
        if (keys[i] == other)
            others += (uint64_t)cnt[i];
    }
    result = Py_BuildValue("(nL)", m, (long long)others);
done:
    release_arrays(b, NARG, arrays);
    return result;
}

/* map_cells(hcodes, hcount, key_cell, nbins, out_codes, out_counts) -> (m, untracked)
 *
 * The detector's per-batch step (aclprofd.detector.state.CellStore.observe): each
 * (key * nbins + bin) code of a batch becomes (cell * nbins + bin) with cell =
 * key_cell[key]; rows whose cell is negative below -1 (not judged, or refused for want of
 * room) are left out and their counts summed into `untracked`; the others go to
 * out_codes[:m] / out_counts[:m] in order. m is -1 (nothing written, untracked 0) if a key
 * is past key_cell or still unknown (-1): the caller registers it, once per key in the
 * daemon's life, and calls again. What ~12 numpy calls a batch did (issue 21). */
static PyObject *map_cells(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    enum { NARG = 6 };
    if (check_nargs("map_cells", nargs, NARG) < 0)
        return NULL;
    long long nbins = PyLong_AsLongLong(args[3]);
    if (nbins == -1 && PyErr_Occurred())
        return NULL;
    if (nbins < 1) {
        PyErr_SetString(PyExc_ValueError, "map_cells: nbins must be positive");
        return NULL;
    }
    const unsigned arrays = (1u << NARG) - 1 - (1u << 3), outs = 1u << 4 | 1u << 5; /* args[3] is nbins */
    Py_buffer b[NARG];
    PyObject *result = NULL;
    if (take_arrays("map_cells", args, NARG, arrays, outs, b) < 0)
        return NULL;
    Py_ssize_t n = b[0].len / 8, nkeys = b[2].len / 8;
    if (b[1].len != b[0].len || b[4].len < b[0].len || b[5].len < b[0].len) {
        PyErr_SetString(PyExc_ValueError, "map_cells: hcodes and hcount differ in length, or an output is short");
        goto done;
    }
    const int64_t *hc = b[0].buf, *hn = b[1].buf, *kc = b[2].buf;
    int64_t *oc = b[4].buf, *on = b[5].buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (hc[i] < 0) {
            PyErr_Format(PyExc_ValueError, "map_cells: negative histogram code %lld", (long long)hc[i]);
            goto done;
        }
        int64_t key = hc[i] / nbins;
        if (key >= nkeys || kc[key] == -1) {
            result = Py_BuildValue("(ni)", (Py_ssize_t)-1, 0);
            goto done;
        }
    }
    Py_ssize_t m = 0;
    uint64_t untracked = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t cell = kc[hc[i] / nbins];
        if (cell < 0) {
            untracked += (uint64_t)hn[i];
            continue;
        }
        oc[m] = cell * nbins + hc[i] % nbins;
        on[m] = hn[i];
        m++;
    }
    result = Py_BuildValue("(nL)", m, (long long)untracked);
done:
    release_arrays(b, NARG, arrays);
    return result;
}

/* ingest_frame(records, max_duration, upper, hashes, dms, codes, keys,
 *              acc_count, acc_total, acc_min, acc_max, acc_hist, acc_prom, acc_prom_sum, prom_of_bin,
 *              acc_fine, acc_fine_sum, fine_of_bin, last_fed, now, other,
 *              slot_groups, gfill, slot_codes, hfill, key_cell, cell_buf, cfill, index)
 *   -> (status, ops, groups, m, other_records, untracked, mc, keypoints, device, max_end)
 *
 * One agent BATCH frame's whole aggregate step (aclprofd.aggregate.aggregator.Aggregator.
 * ingest_frame) in one call, for the usual frame: count_bad's check, batch_facts, group, the
 * sender's key cache (cache_lookup), fold_batch, the newest window slot's rows and the
 * detector's cells (map_cells). The daemon paid ~15 Python and numpy steps a frame for
 * these, each 2-5x slower after the loop slept in select (issue 21).
 *
 * Every check comes before any write: when a frame needs the Python path, `status` says
 * why and nothing was written (the Python steps, the reference, then handle the frame):
 *   1  the payload is not whole records, or a record no op can have (Ingest.rejects);
 *   2  a (model/device, name/type) pair not in the cache (KeyRegistry.resolve: new keys,
 *      undefined name ids);
 *   3  a key the detector has not looked up (key_cell -1 or past its end);
 *   4  slot_groups / slot_codes have no room for the frame's rows (the caller merges them);
 *   5  cell_buf has no room (the caller merges the detector's pending rows).
 * status 0: done. Per group (its key keys[...] from the cache) since-start figures as in
 * fold_batch (now, other, the bucket tables: the same), and the group's key, count, total,
 * min, max appended as columns gfill.. of slot_groups (5 rows of int64, row-major); the
 * distinct (key * nbins + bin) codes, ascending, and their counts as columns hfill.. of
 * slot_codes (2 rows), m of them; with key_cell (not None) each code's cell code (cell *
 * nbins + bin, map_cells: cells below -1 are untracked, their counts summed) in order as
 * columns cfill.. of cell_buf (2 rows), mc of them. keypoints, device (-1: mixed) and
 * max_end as batch_facts gives them, of every record. `index`: the cache's hash index
 * (cache_index; None: a binary search of the hashes). */
enum { FRAME_DONE, FRAME_REFUSE, FRAME_MISS, FRAME_CELL, FRAME_SLOT_FULL, FRAME_CELLS_FULL };

/* per-call scratch of ingest_frame, kept between calls (the loop calls it ~40-100 times a
 * second: a malloc of ~300 KB a frame would be an mmap and page faults each time); given
 * back when a large frame grew it past SCRATCH_KEEP */
static char *scratch;
static size_t scratch_cap;
#define SCRATCH_KEEP ((size_t)4 << 20)

static void *scratch_get(size_t need)
{
    if (need > scratch_cap) {
        free(scratch);
        scratch = malloc(need);
        scratch_cap = scratch ? need : 0;
    }
    return scratch;
}

static void scratch_trim(void)
{
    if (scratch_cap > SCRATCH_KEEP) {
        free(scratch);
        scratch = NULL;
        scratch_cap = 0;
    }
}

/* A key cache's hash index (cache_index, ingest_frame): open addressing over a power-of-two
 * table of int32, each slot 0 (empty) or a position in the cache's hashes + 1; the slot of
 * hash h is searched from index_home (pair_hash's low bits are the op type's: few values):
 * the builder, the search and ingest_frame's prefetch start there. */
static inline size_t index_home(uint64_t h, size_t mask)
{
    return (size_t)mix(h, 0) & mask;
}

static inline Py_ssize_t index_find(const int32_t *index, size_t mask, const uint64_t *hashes, Py_ssize_t m,
                                    uint64_t h)
{
    for (size_t at = index_home(h, mask);; at = (at + 1) & mask) {
        int32_t s = index[at];
        if (s <= 0 || s > m)
            return -1; /* empty (or an index of other hashes: a miss, never a wrong hit) */
        if (hashes[s - 1] == h)
            return s - 1;
    }
}

/* cache_index(hashes, out_index) -> None
 *
 * Fills out_index (int32, a power of two of at least twice len(hashes) slots) with the
 * index of the distinct uint64 hashes: what ingest_frame searches a sender's cache with
 * (aclprofd.aggregate.keys.KeySource.hash_index) in one or two probes where a binary search
 * of ~1000 hashes took ten unpredictable steps per group of a frame (issue 21). */
static PyObject *cache_index(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    Py_buffer hv, iv;
    if (check_nargs("cache_index", nargs, 2) < 0 || PyObject_GetBuffer(args[0], &hv, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[1], &iv, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&hv);
        return NULL;
    }
    PyObject *result = NULL;
    Py_ssize_t m = hv.len / 8, size = iv.len / 4;
    if (hv.len % 8 || iv.len % 4 || size < 2 * m || size < 1 || (size & (size - 1)) || m >= INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "cache_index: hashes must be uint64 and out_index a power of two of "
                                          "at least twice as many int32 slots");
        goto done;
    }
    const uint64_t *h = hv.buf;
    int32_t *index = iv.buf;
    size_t mask = (size_t)size - 1;
    memset(index, 0, (size_t)size * 4);
    for (Py_ssize_t i = 0; i < m; i++) {
        size_t at = index_home(h[i], mask);
        while (index[at] != 0)
            at = (at + 1) & mask;
        index[at] = (int32_t)(i + 1);
    }
    Py_INCREF(Py_None);
    result = Py_None;
done:
    PyBuffer_Release(&iv);
    PyBuffer_Release(&hv);
    return result;
}

PyDoc_STRVAR(cache_index_doc, "cache_index(hashes, out_index) -> None\n\nThe open-addressing index of a key "
                              "cache's hashes that ingest_frame searches (see the module's source).");

/* How many groups ahead ingest_frame asks for the cache lines it will touch. Its groups'
 * rows are scattered over megabytes (a key's histogram row alone is NBINS x 8 bytes), and
 * the daemon calls it after sleeping in select, when none of them is cached: every row was
 * a miss waited for in turn (~0.2 us per group, 205 of the 365 us of a 2,500-record frame of
 * 1,000 ops). Asked for ahead, the misses overlap (issue 21, tests/bench/bench_ingest_frame.py
 * --gap-ms 25). A hint only: the values written are the same. */
#define PREFETCH_AHEAD 8
#if defined(__GNUC__) || defined(__clang__)
#define PREFETCH_W(p) __builtin_prefetch((p), 1, 3)
#define PREFETCH_R(p) __builtin_prefetch((p), 0, 3)
#else
#define PREFETCH_W(p) ((void)(p))
#define PREFETCH_R(p) ((void)(p))
#endif

static PyObject *frame_result(int status, Py_ssize_t ops, Py_ssize_t groups, Py_ssize_t m, uint64_t others,
                              uint64_t untracked, Py_ssize_t mc, Py_ssize_t keypoints, long long device,
                              uint64_t max_end)
{
    return Py_BuildValue("(innnLLnnLK)", status, ops, groups, m, (long long)others, (long long)untracked, mc,
                         keypoints, device, (unsigned long long)max_end);
}

static PyObject *ingest_frame(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    enum { NARG = 29, MAXD = 1, NOW = 19, OTHER = 20, GFILL = 22, HFILL = 24, KC = 25, CBUF = 26, CFILL = 27,
           INDEX = 28 };
    double now;
    long long other;
    if (check_nargs("ingest_frame", nargs, NARG) < 0 || now_and_other(args, NOW, OTHER, &now, &other) < 0)
        return NULL;
    unsigned long long max_duration = PyLong_AsUnsignedLongLong(args[MAXD]);
    if (max_duration == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t gfill = PyLong_AsSsize_t(args[GFILL]), hfill = PyLong_AsSsize_t(args[HFILL]);
    Py_ssize_t cfill = PyLong_AsSsize_t(args[CFILL]);
    if ((gfill == -1 || hfill == -1 || cfill == -1) && PyErr_Occurred())
        return NULL;
    int cells = args[KC] != Py_None;
    if (cells != (args[CBUF] != Py_None)) {
        PyErr_SetString(PyExc_TypeError, "ingest_frame: key_cell and cell_buf are both None or both arrays");
        return NULL;
    }
    /* the arrays: 2..18, 21, 23 and, with the detector, 25 and 26 (args[0] is bytes-like) */
    unsigned arrays = ((1u << 19) - 1) & ~(1u << 0 | 1u << MAXD);
    arrays |= 1u << 21 | 1u << 23;
    if (cells)
        arrays |= 1u << KC | 1u << CBUF;
    const unsigned writable = (0x7Fu << 7) | 1u << 15 | 1u << 16 | 1u << 18 | 1u << 21 | 1u << 23 | 1u << CBUF;
    Py_buffer rv, b[NARG], iv;
    int have_index = args[INDEX] != Py_None;
    if (have_index) {
        if (PyObject_GetBuffer(args[INDEX], &iv, PyBUF_C_CONTIGUOUS) < 0)
            return NULL;
        Py_ssize_t size = iv.len / 4;
        if (iv.len % 4 || size < 1 || (size & (size - 1))) {
            PyBuffer_Release(&iv);
            PyErr_SetString(PyExc_ValueError, "ingest_frame: the cache's index is not a power of two of int32");
            return NULL;
        }
    }
    Py_ssize_t n = get_records("ingest_frame", args[0], &rv);
    if (n < 0 && PyErr_ExceptionMatches(PyExc_ValueError)) {
        PyErr_Clear(); /* not whole records: the Python path names the error */
        if (have_index)
            PyBuffer_Release(&iv);
        return frame_result(FRAME_REFUSE, 0, 0, 0, 0, 0, 0, 0, -1, 0);
    }
    if (n < 0) {
        if (have_index)
            PyBuffer_Release(&iv);
        return NULL;
    }
    PyObject *result = NULL;
    if (take_arrays("ingest_frame", args, NARG, arrays, writable & arrays, b) < 0) {
        PyBuffer_Release(&rv);
        if (have_index)
            PyBuffer_Release(&iv);
        return NULL;
    }
    Py_ssize_t nb = b[2].len / 8, ncache = b[3].len / 8, cap = b[7].len / 8, nbins = b[14].len / 8;
    Py_ssize_t gcap = b[21].len / 8 / 5, hcap = b[23].len / 8 / 2, nkc = cells ? b[KC].len / 8 : 0;
    Py_ssize_t ccap = cells ? b[CBUF].len / 8 / 2 : 0;
    if (nb < 1 || b[4].len / 8 != ncache || b[5].len / 8 != ncache || b[6].len / 8 != ncache) {
        PyErr_SetString(PyExc_ValueError, "ingest_frame: no bin bounds, or the cache's columns differ in length");
        goto done;
    }
    Py_ssize_t nprom, nfine;
    if (check_accumulators("ingest_frame", b, nbins, &nprom, &nfine) < 0)
        goto done;
    if (nbins != nb + 1) {
        PyErr_SetString(PyExc_ValueError, "ingest_frame: the bin tables do not have one entry per bin of upper");
        goto done;
    }
    if (b[21].len != gcap * 5 * 8 || b[23].len != hcap * 2 * 8 || (cells && b[CBUF].len != ccap * 2 * 8)
        || gfill < 0 || gfill > gcap || hfill < 0 || hfill > hcap || cfill < 0 || cfill > ccap) {
        PyErr_SetString(PyExc_ValueError, "ingest_frame: a row buffer is not 5 (slot_groups) or 2 (slot_codes, "
                                          "cell_buf) rows, or its fill is outside it");
        goto done;
    }
    const int64_t *pob = b[14].buf, *fob = b[17].buf;
    if (n > (Py_ssize_t)UINT32_MAX / 4) {
        result = frame_result(FRAME_REFUSE, 0, 0, 0, 0, 0, 0, 0, -1, 0); /* not a frame: the Python path */
        goto done;
    }

    /* 1. one pass over the records: the bad ones (count_bad), the facts (batch_facts) and,
     * for the ops, their groups (as `group`) and per group a list of its distinct bins with
     * their counts (entries: an op's group has a few bins, so finding its bin is a short walk
     * where sum_rows hashed every op's code, then divided every code by nbins) */
    size_t hslots = 16;
    while (hslots < (size_t)n * 2)
        hslots <<= 1;
    /* scratch: 8 int64 columns of n (per group: dm, code, count, total, min, max, key; per
     * entry: count), 4 int32 columns of n (per group: first entry, entries; per entry: bin,
     * next), one count per bin (a run of groups sharing a key) and the hash slots */
    char *mem = scratch_get((size_t)(n * (8 * 8 + 4 * 4) + nbins * 8) + hslots * sizeof(uint32_t));
    if (mem == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    uint64_t *gdm = (uint64_t *)mem, *gcode = gdm + n;
    int64_t *gcount = (int64_t *)(gcode + n), *gtotal = gcount + n, *gmin = gtotal + n, *gmax = gmin + n;
    int64_t *gkeys = gmax + n, *ecount = gkeys + n;
    int32_t *ghead = (int32_t *)(ecount + n), *gents = ghead + n, *ebin = gents + n, *enext = ebin + n;
    int64_t *dense = (int64_t *)(enext + n); /* n int32 pairs above: 8-byte aligned */
    memset(dense, 0, (size_t)nbins * 8);
    uint32_t *slots = (uint32_t *)(dense + nbins);
    memset(slots, 0, hslots * sizeof *slots);
    groups_t t = {slots, hslots - 1, gdm, gcode, gcount, gtotal, gmin, gmax, 0};
    const int64_t *upper = b[2].buf;
    const char *rec = rv.buf;
    Py_ssize_t keypoints = 0, ops = 0, ents = 0;
    uint32_t dev = n ? ld32(rec + AT(device_id)) : 0;
    int same = 1, bad = 0;
    uint64_t max_end = 0;
    for (Py_ssize_t i = 0; i < n; i++, rec += REC_SIZE) {
        uint64_t end = ld64(rec + AT(end)), dur = ld64(rec + AT(duration));
        uint32_t dv = ld32(rec + AT(device_id)), model = ld32(rec + AT(model_id));
        bad |= (dur > max_duration) | (end < ld64(rec + AT(start))) | (model == UINT32_MAX) | (dv == UINT32_MAX);
        same &= dv == dev;
        if (end > max_end)
            max_end = end;
        if (ld32(rec + AT(flag)) & (uint32_t)ACLPROF_FLAG_KEYPOINT) {
            keypoints++;
            continue;
        }
        uint64_t dm = ((uint64_t)model << 32) | dv;
        uint64_t code = ((uint64_t)ld32(rec + AT(op_name)) << 32) | ld32(rec + AT(op_type));
        int64_t d = (int64_t)dur;
        int added;
        Py_ssize_t g = group_add(&t, dm, code, d, &added);
        if (added) {
            ghead[g] = -1;
            gents[g] = 0;
        }
        int32_t bin = (int32_t)bin_of(d, upper, nb), e = ghead[g];
        while (e >= 0 && ebin[e] != bin)
            e = enext[e];
        if (e < 0) {
            e = (int32_t)ents++;
            ebin[e] = bin;
            ecount[e] = 0;
            enext[e] = ghead[g];
            ghead[g] = e;
            gents[g]++;
        }
        ecount[e]++;
        ops++;
    }
    Py_ssize_t groups = t.n;
    long long device = same ? (long long)dev : -1LL;
    if (bad) {
        result = frame_result(FRAME_REFUSE, 0, 0, 0, 0, 0, 0, keypoints, device, max_end);
        goto done;
    }
    if (ops == 0) { /* keypoints only: nothing to aggregate */
        result = frame_result(FRAME_DONE, 0, 0, 0, 0, 0, 0, keypoints, device, max_end);
        goto done;
    }

    /* 2. the sender's cache: every pair must be there; and the detector's cell of each key */
    const uint64_t *hashes = b[3].buf, *cdms = b[4].buf, *ccodes = b[5].buf;
    const int64_t *ckeys = b[6].buf;
    const int32_t *index = have_index ? iv.buf : NULL;
    size_t imask = have_index ? (size_t)(iv.len / 4) - 1 : 0;
    for (Py_ssize_t g = 0; g < groups; g++) {
        if (index != NULL && g + PREFETCH_AHEAD < groups) {
            PREFETCH_R(&index[index_home(pair_hash(gdm[g + PREFETCH_AHEAD], gcode[g + PREFETCH_AHEAD]), imask)]);
        }
        uint64_t h = pair_hash(gdm[g], gcode[g]);
        Py_ssize_t at = index ? index_find(index, imask, hashes, ncache, h) : find_hash(hashes, ncache, h);
        if (at < 0 || cdms[at] != gdm[g] || ccodes[at] != gcode[g]) {
            result = frame_result(FRAME_MISS, ops, groups, 0, 0, 0, 0, keypoints, device, max_end);
            goto done;
        }
        gkeys[g] = ckeys[at];
    }
    if (check_keys("ingest_frame", groups, gkeys, cap) < 0)
        goto done;
    const int64_t *kc = cells ? b[KC].buf : NULL;
    if (cells)
        for (Py_ssize_t g = 0; g < groups; g++)
            if (gkeys[g] >= nkc || kc[gkeys[g]] == -1) {
                result = frame_result(FRAME_CELL, ops, groups, 0, 0, 0, 0, keypoints, device, max_end);
                goto done;
            }
    /* room: the distinct codes are at most the entries (fewer when groups share a key) */
    if (groups > gcap - gfill || ents > hcap - hfill) {
        result = frame_result(FRAME_SLOT_FULL, ops, groups, ents, 0, 0, 0, keypoints, device, max_end);
        goto done;
    }
    if (cells && ents > ccap - cfill) {
        result = frame_result(FRAME_CELLS_FULL, ops, groups, ents, 0, 0, 0, keypoints, device, max_end);
        goto done;
    }

    /* 3. the groups in key order (a radix sort: the codes come out ascending, as sum_rows
     * gives them) */
    code_sum *order = malloc((size_t)groups * sizeof *order);
    if (order == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t g = 0; g < groups; g++) {
        order[g].key = (uint64_t)gkeys[g] ^ 0x8000000000000000ull;
        order[g].sum = g;
    }
    if (radix_sort(order, groups) < 0) {
        free(order);
        PyErr_NoMemory();
        goto done;
    }

    /* 4. the writes: since-start figures, the slot's rows, the detector's rows */
    fold_groups(groups, gkeys, gcount, gtotal, gmin, gmax, b[7].buf, b[8].buf, b[9].buf, b[10].buf);
    add_sums(groups, gkeys, gtotal, b[13].buf);
    add_sums(groups, gkeys, gtotal, b[16].buf);
    double *last = b[18].buf;
    uint64_t others = 0;
    for (Py_ssize_t g = 0; g < groups; g++) {
        last[gkeys[g]] = now;
        if (gkeys[g] == other)
            others += (uint64_t)gcount[g];
    }
    int64_t *sg = b[21].buf, *sh = b[23].buf, *cb = cells ? b[CBUF].buf : NULL;
    const int64_t *cols[5] = {gkeys, gcount, gtotal, gmin, gmax};
    for (int r = 0; r < 5; r++)
        memcpy(sg + r * gcap + gfill, cols[r], (size_t)groups * 8);
    int64_t *hist = b[11].buf, *prom = b[12].buf, *fine = b[15].buf;
    int64_t *oc = sh + hfill, *on = sh + hcap + hfill;
    Py_ssize_t m = 0, mc = 0;
    uint64_t untracked = 0;
    int64_t bincnt[64]; /* a short run's bins, sorted by insertion */
    int32_t binof[64];
    for (Py_ssize_t i = 0; i < groups;) {
        if (i + PREFETCH_AHEAD < groups) {
            /* the rows a group ahead will write: its first bin's histogram, Prometheus and
             * fine buckets (a group has a few bins, mostly on these lines) */
            Py_ssize_t pg = order[i + PREFETCH_AHEAD].sum;
            int64_t pk = (int64_t)(order[i + PREFETCH_AHEAD].key ^ 0x8000000000000000ull);
            int32_t pb = ebin[ghead[pg]];
            PREFETCH_W(&hist[pk * nbins + pb]);
            PREFETCH_W(&prom[pk * nprom + pob[pb]]);
            PREFETCH_W(&fine[pk * nfine + fob[pb]]);
        }
        Py_ssize_t j = i + 1;
        while (j < groups && order[j].key == order[i].key)
            j++;
        int64_t key = (int64_t)(order[i].key ^ 0x8000000000000000ull), cell = cells ? kc[key] : -1;
        Py_ssize_t k = 0, g0 = order[i].sum;
        if (j - i == 1 && gents[g0] <= 64) {
            for (int32_t e = ghead[g0]; e >= 0; e = enext[e]) {
                Py_ssize_t at = k++;
                while (at > 0 && binof[at - 1] > ebin[e]) {
                    binof[at] = binof[at - 1];
                    bincnt[at] = bincnt[at - 1];
                    at--;
                }
                binof[at] = ebin[e];
                bincnt[at] = ecount[e];
            }
        }
        Py_ssize_t m0 = m;
        if (k) {
            for (Py_ssize_t q = 0; q < k; q++) {
                oc[m] = key * nbins + binof[q];
                on[m++] = bincnt[q];
            }
        } else {
            /* groups sharing a key (the "other" key) or an op of many bins: the run's counts
             * per bin in `dense` (all zero between runs), then its bins in order */
            for (Py_ssize_t r = i; r < j; r++)
                for (int32_t e = ghead[order[r].sum]; e >= 0; e = enext[e])
                    add_to(&dense[ebin[e]], ecount[e]);
            for (Py_ssize_t bin = 0; bin < nbins; bin++)
                if (dense[bin]) { /* counts are positive: a bin of the run is never 0 */
                    oc[m] = key * nbins + bin;
                    on[m++] = dense[bin];
                    dense[bin] = 0;
                }
        }
        for (Py_ssize_t q = m0; q < m; q++) {
            int64_t bin = oc[q] - key * nbins, c = on[q];
            add_to(&hist[oc[q]], c);
            add_to(&prom[key * nprom + pob[bin]], c);
            add_to(&fine[key * nfine + fob[bin]], c);
            if (!cells)
                continue;
            if (cell < 0) {
                untracked += (uint64_t)c;
                continue;
            }
            cb[cfill + mc] = cell * nbins + bin;
            cb[ccap + cfill + mc++] = c;
        }
        i = j;
    }
    free(order);
    result = frame_result(FRAME_DONE, ops, groups, m, others, untracked, mc, keypoints, device, max_end);
done:
    scratch_trim();
    release_arrays(b, NARG, arrays);
    PyBuffer_Release(&rv);
    if (have_index)
        PyBuffer_Release(&iv);
    return result;
}

PyDoc_STRVAR(ingest_frame_doc,
             "ingest_frame(records, max_duration, upper, hashes, dms, codes, keys, acc_count, acc_total, acc_min, "
             "acc_max, acc_hist, acc_prom, acc_prom_sum, prom_of_bin, acc_fine, acc_fine_sum, fine_of_bin, "
             "last_fed, now, other, slot_groups, gfill, slot_codes, hfill, key_cell, cell_buf, cfill, index) -> (status, "
             "ops, groups, m, other_records, untracked, mc, keypoints, device, max_end)\n\nOne BATCH frame's "
             "aggregate step in one call, or a status saying why the Python path must take it (see the "
             "module's source).");

/* crc32c(data, crc=0) -> int; crc32c_fast() -> bool
 *
 * CRC-32C (Castagnoli, reflected polynomial 0x82F63B78, the iSCSI/ext4 CRC), continued from
 * `crc` (the CRC of the bytes before `data`). The daemon's segment chunks carry it
 * (aclprofd.storage, chunk magic "ACK2") where the CPU computes it in hardware
 * (crc32c_fast(): x86-64 with SSE4.2): ~6-10 GB/s where zlib's CRC-32 ran at ~1.7 GB/s,
 * 80 us of the loop per 140 KB agent frame at 100 k ops/s (issue 21). Without the
 * instruction it is a byte-wise table (readers only: the daemon then writes zlib's CRC-32,
 * chunk magic "ACK1"). crc32c's third argument False takes the table (the tests compare). */
static uint32_t crc32c_table[256];

static void crc32c_init(void)
{
    aclprof_crc32c_table_fill(crc32c_table);
}

static uint32_t crc32c_soft(uint32_t crc, const unsigned char *p, size_t n)
{
    return ~aclprof_crc32c_table_update(crc32c_table, ~crc, p, n);
}

static uint32_t crc32c_hw(uint32_t crc, const unsigned char *p, size_t n)
{
#if ACLPROF_CRC32C_HW
    return ~aclprof_crc32c_hw_update(~crc, p, n);
#else
    return crc32c_soft(crc, p, n);
#endif
}

static int crc32c_has_hw(void)
{
    return aclprof_crc32c_cpu_has_hw();
}

static int crc32c_hw_ok;

static PyObject *crc32c(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs < 1 || nargs > 3) {
        PyErr_Format(PyExc_TypeError, "crc32c takes 1 to 3 arguments (%zd given)", nargs);
        return NULL;
    }
    unsigned long crc = 0;
    int hw = crc32c_hw_ok;
    if (nargs == 3) {
        int want = PyObject_IsTrue(args[2]);
        if (want < 0)
            return NULL;
        hw &= want;
    }
    if (nargs >= 2) {
        crc = PyLong_AsUnsignedLong(args[1]);
        if (crc == (unsigned long)-1 && PyErr_Occurred())
            return NULL;
        if (crc > 0xFFFFFFFFul) {
            PyErr_SetString(PyExc_ValueError, "crc32c: crc must be a 32-bit value");
            return NULL;
        }
    }
    Py_buffer v;
    if (PyObject_GetBuffer(args[0], &v, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    uint32_t out = hw ? crc32c_hw((uint32_t)crc, v.buf, (size_t)v.len)
                                : crc32c_soft((uint32_t)crc, v.buf, (size_t)v.len);
    PyBuffer_Release(&v);
    return PyLong_FromUnsignedLong(out);
}

static PyObject *crc32c_fast(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return PyBool_FromLong(crc32c_hw_ok);
}

PyDoc_STRVAR(crc32c_doc, "crc32c(data, crc=0, hardware=True) -> int\n\nCRC-32C (Castagnoli) of data, continued "
                         "from crc (hardware=False: the table, as without the CPU's instruction).");
PyDoc_STRVAR(crc32c_fast_doc, "crc32c_fast() -> bool\n\nWhether crc32c runs on the CPU's CRC instruction.");

PyDoc_STRVAR(map_cells_doc, "map_cells(hcodes, hcount, key_cell, nbins, out_codes, out_counts) -> (m, untracked)\n\n"
                            "A batch's key histogram codes as the detector's cell codes (see the module's "
                            "source).");

PyDoc_STRVAR(fold_batch_doc, "fold_batch(keys, inv, bins, count, total, mn, mx, acc_count, acc_total, acc_min, "
                             "acc_max, acc_hist, acc_prom, acc_prom_sum, prom_of_bin, acc_fine, acc_fine_sum, "
                             "fine_of_bin, last_fed, now, other, out_codes, out_counts) -> (m, other_records)\n\n"
                             "A batch's histogram codes and all its since-start additions in one call (see the "
                             "module's source).");

PyDoc_STRVAR(fold_doc, "fold(keys, count, total, mn, mx, hcodes, hcount, acc_count, acc_total, acc_min, acc_max, "
                       "acc_hist, acc_prom, acc_prom_sum, prom_of_bin) -> None\n\nAdd a batch's figures "
                       "to the since-start accumulators in place (see the module's source).");

PyDoc_STRVAR(count_bad_doc, "count_bad(records, max_duration) -> int\n\nHow many wire records have a "
                            "duration above max_duration, an end before their start, or a model or "
                            "device id of 0xFFFFFFFF.");

PyDoc_STRVAR(batch_facts_doc, "batch_facts(records) -> (keypoints, device, max_end)\n\nHow many wire "
                              "records are step keypoints, the device id they all have (-1 if they differ) "
                              "and the largest end (0 for none).");

PyDoc_STRVAR(group_doc,
             "group(records, upper, out_dm, out_code, out_count, out_total, out_min, out_max, out_inv, out_bin)"
             " -> (ops, groups)\n\nGroup a batch's non-keypoint wire records by (model/device, name/type); "
             "see the module's source for the outputs.");

static PyMethodDef methods[] = {
    {"group", (PyCFunction)(void (*)(void))group, METH_FASTCALL, group_doc},
    {"count_bad", (PyCFunction)(void (*)(void))count_bad, METH_FASTCALL, count_bad_doc},
    {"batch_facts", (PyCFunction)(void (*)(void))batch_facts, METH_FASTCALL, batch_facts_doc},
    {"fold", (PyCFunction)(void (*)(void))fold, METH_FASTCALL, fold_doc},
    {"cache_lookup", (PyCFunction)(void (*)(void))cache_lookup, METH_FASTCALL, cache_lookup_doc},
    {"fold_buckets", (PyCFunction)(void (*)(void))fold_buckets, METH_FASTCALL, fold_buckets_doc},
    {"fold_batch", (PyCFunction)(void (*)(void))fold_batch, METH_FASTCALL, fold_batch_doc},
    {"map_cells", (PyCFunction)(void (*)(void))map_cells, METH_FASTCALL, map_cells_doc},
    {"sum_codes", (PyCFunction)(void (*)(void))sum_codes, METH_FASTCALL, sum_codes_doc},
    {"merge_stats", (PyCFunction)(void (*)(void))merge_stats, METH_FASTCALL, merge_stats_doc},
    {"ingest_frame", (PyCFunction)(void (*)(void))ingest_frame, METH_FASTCALL, ingest_frame_doc},
    {"cache_index", (PyCFunction)(void (*)(void))cache_index, METH_FASTCALL, cache_index_doc},
    {"crc32c", (PyCFunction)(void (*)(void))crc32c, METH_FASTCALL, crc32c_doc},
    {"crc32c_fast", crc32c_fast, METH_NOARGS, crc32c_fast_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "aclprof.protocol._batchgroup",
    "The daemon's per-batch grouping of wire records (C); see aclprofd.aggregate.aggregator.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__batchgroup(void)
{
    crc32c_init();
    crc32c_hw_ok = crc32c_has_hw();
    return PyModule_Create(&module);
}
