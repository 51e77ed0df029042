/* Model runtime: aclmdlLoadFromFile/Execute/Unload over a small text "model description"
 * (format in mock_acl/README.md, "Model runtime and subscription").
 *
 * A model is a list of ops with a duration and a jitter. aclmdlExecute simulates them back
 * to back on a per-model clock cursor and hands each op to mock_subscribe_emit(), which
 * queues a ProfOpDesc record if the model is subscribed.
 *
 * Time. Each execution starts at max(now, end of the previous execution of this model), so
 * timestamps never go backwards for a model, even when executions are simulated faster
 * than real time (realtime off: aclmdlExecute returns at once and the cursor runs ahead of
 * the clock). With realtime on, the execution sleeps until each op's simulated end before
 * emitting it, so records appear while the "device" runs and the call takes the
 * simulated time.
 *
 * Concurrency. g_mock_lock guards the model table and is held only to look a model up.
 * Executions of one model are serialised by that model's exec_lock (one model = one
 * stream); different models execute concurrently. A model is reference counted, so an
 * aclmdlUnload (or aclmockReset) during an execution frees it when the execution ends.
 *
 * Datasets. aclmdlExecute takes two aclmdlDataset handles, as in CANN (NULL is rejected);
 * the models have no inputs or outputs, so the datasets must be empty (README, "Datasets
 * and aclmdlExecute").
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mock_internal.h"

#define MODEL_MAGIC "aclmock-model 1"
#define MAX_FILE_BYTES (256u << 20)       /* refuse absurd files instead of exhausting memory */
#define MAX_OP_NS 1000000000000ull        /* 1000 s per op: keeps all time sums far from 2^64 */

typedef struct mock_model {
    uint32_t id;
    uint32_t device;
    uint64_t seed;
    uint64_t gap_ns;
    size_t nops;
    mock_op *ops;
    atomic_uint refs;               /* the table's reference + one per running execution */
    pthread_mutex_t exec_lock;      /* serialises executions; guards cursor/exec_count */
    uint64_t cursor_ns;             /* end of the last simulated execution (+ gap) */
    uint64_t exec_count;
} mock_model;

/* Under g_mock_lock. Ids start at 1 and are never reused until aclmockReset. */
static mock_model **g_models;
static size_t g_nmodels, g_modelcap;
static uint32_t g_next_id = 1;

static void model_free(mock_model *m)
{
    for (size_t i = 0; i < m->nops; i++) {
        free(m->ops[i].name);
        free(m->ops[i].type);
    }
    free(m->ops);
    pthread_mutex_destroy(&m->exec_lock);
    free(m);
}

static void model_release(mock_model *m)
{
    if (atomic_fetch_sub(&m->refs, 1) == 1)
        model_free(m);
}

/* Caller holds g_mock_lock. */
static size_t model_index(uint32_t id)
{
    for (size_t i = 0; i < g_nmodels; i++) {
        if (g_models[i]->id == id)
            return i;
    }
    return SIZE_MAX;
}

bool mock_model_exists(uint32_t model_id)
{
    return model_index(model_id) != SIZE_MAX;
}

uint32_t mock_model_device(uint32_t model_id)
{
    size_t i = model_index(model_id);
    return i == SIZE_MAX ? 0 : g_models[i]->device;
}

/* ---- parser ----------------------------------------------------------------------------- */

static bool parse_u64(const char *s, size_t n, uint64_t max, uint64_t *out)
{
    if (n == 0 || n > 20)
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    if (v > max)
        return false;
    *out = v;
    return true;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Decodes a name/type field: \\ \t \n \r and \xNN (any byte but 00, since the API hands
 * names out as C strings). Everything else is taken byte for byte, so UTF-8 or any other
 * bytes may also appear raw. Returns a malloc'd string, or NULL if malformed. */
static char *unescape(const char *s, size_t n)
{
    char *out = malloc(n + 1);
    if (out == NULL)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\') {
            out[o++] = s[i];
            continue;
        }
        if (++i == n)
            goto bad;
        switch (s[i]) {
        case '\\': out[o++] = '\\'; break;
        case 't': out[o++] = '\t'; break;
        case 'n': out[o++] = '\n'; break;
        case 'r': out[o++] = '\r'; break;
        case 'x': {
            if (n - i < 3)   /* two hex digits must follow */
                goto bad;
            int hi = hexval(s[i + 1]), lo = hexval(s[i + 2]);
            if (hi < 0 || lo < 0 || (hi == 0 && lo == 0))
                goto bad;
            out[o++] = (char)(hi << 4 | lo);
            i += 2;
            break;
        }
        default:
            goto bad;
        }
    }
    out[o] = '\0';
    return out;
bad:
    free(out);
    return NULL;
}

typedef struct parsed {
    uint32_t device;
    uint64_t seed, gap_ns;
    bool have_device, have_seed, have_gap;
    mock_op *ops;
    size_t nops, cap;
} parsed;

static void parsed_free(parsed *p)
{
    for (size_t i = 0; i < p->nops; i++) {
        free(p->ops[i].name);
        free(p->ops[i].type);
    }
    free(p->ops);
}

/* `op<TAB>name<TAB>type<TAB>duration_ns[<TAB>jitter_ns[<TAB>flag[<TAB>thread_id]]]` */
static bool parse_op(parsed *p, const char *line, size_t len)
{
    const char *f[8];
    size_t fl[8];
    size_t nf = 0;
    const char *start = line;
    for (size_t i = 0; i <= len; i++) {
        if (i == len || line[i] == '\t') {
            if (nf == 8)
                return false;
            f[nf] = start;
            fl[nf] = (size_t)(line + i - start);
            nf++;
            start = line + i + 1;
        }
    }
    if (nf < 4 || nf > 7)
        return false;
    mock_op op = { 0 };
    uint64_t v;
    if (!parse_u64(f[3], fl[3], MAX_OP_NS, &op.duration_ns))
        return false;
    if (nf > 4 && !parse_u64(f[4], fl[4], MAX_OP_NS, &op.jitter_ns))
        return false;
    if (nf > 5) {
        if (!parse_u64(f[5], fl[5], UINT32_MAX, &v))
            return false;
        op.flag = (uint32_t)v;
    }
    if (nf > 6) {
        if (!parse_u64(f[6], fl[6], UINT32_MAX, &v))
            return false;
        op.thread_id = (uint32_t)v;
    }
    if (p->nops == p->cap) {
        size_t ncap = p->cap ? p->cap * 2 : 16;
        mock_op *n = realloc(p->ops, ncap * sizeof *n);
        if (n == NULL)
            return false;
        p->ops = n;
        p->cap = ncap;
    }
    op.name = unescape(f[1], fl[1]);
    op.type = unescape(f[2], fl[2]);
    if (op.name == NULL || op.type == NULL) {
        free(op.name);
        free(op.type);
        return false;
    }
    p->ops[p->nops++] = op;
    return true;
}

/* `device <id>`, `seed <n>`, `gap <ns>`: keyword, spaces or tabs, a decimal number. */
static bool parse_directive(parsed *p, const char *line, size_t len)
{
    size_t k = 0;
    while (k < len && line[k] != ' ' && line[k] != '\t')
        k++;
    size_t v = k;
    while (v < len && (line[v] == ' ' || line[v] == '\t'))
        v++;
    size_t e = len;
    while (e > v && (line[e - 1] == ' ' || line[e - 1] == '\t'))
        e--;
    if (v == k)
        return false;
    uint64_t num;
    if (k == 6 && memcmp(line, "device", 6) == 0) {
        if (p->have_device || !parse_u64(line + v, e - v, UINT32_MAX, &num) ||
            num >= mock_device_count())
            return false;
        p->device = (uint32_t)num;
        p->have_device = true;
    } else if (k == 4 && memcmp(line, "seed", 4) == 0) {
        if (p->have_seed || !parse_u64(line + v, e - v, UINT64_MAX, &num))
            return false;
        p->seed = num;
        p->have_seed = true;
    } else if (k == 3 && memcmp(line, "gap", 3) == 0) {
        if (p->have_gap || !parse_u64(line + v, e - v, MAX_OP_NS, &num))
            return false;
        p->gap_ns = num;
        p->have_gap = true;
    } else {
        return false;
    }
    return true;
}

static bool parse_model(const char *buf, size_t n, parsed *p)
{
    if (memchr(buf, '\0', n) != NULL)
        return false;   /* names are C strings: a raw NUL could only truncate silently */
    size_t pos = 0;
    bool first = true;
    while (pos < n) {
        const char *line = buf + pos;
        const char *nl = memchr(line, '\n', n - pos);
        size_t len = nl ? (size_t)(nl - line) : n - pos;
        pos += len + (nl ? 1 : 0);
        if (len > 0 && line[len - 1] == '\r')
            len--;   /* tolerate CRLF files; a CR inside a name must be written \r */
        if (first) {
            if (len != strlen(MODEL_MAGIC) || memcmp(line, MODEL_MAGIC, len) != 0)
                return false;
            first = false;
            continue;
        }
        if (len == 0 || line[0] == '#')
            continue;
        bool ok = (len >= 3 && memcmp(line, "op\t", 3) == 0) ? parse_op(p, line, len)
                                                             : parse_directive(p, line, len);
        if (!ok)
            return false;
    }
    return !first;
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf != NULL) {
        if (n == cap) {
            if (cap >= MAX_FILE_BYTES) {
                free(buf);
                buf = NULL;
                break;
            }
            char *nb = realloc(buf, cap * 2);
            if (nb == NULL) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) {
            if (ferror(f)) {   /* e.g. the path is a directory: EISDIR */
                free(buf);
                buf = NULL;
            }
            break;
        }
    }
    fclose(f);
    *len = n;
    return buf;
}

/* ---- datasets and data buffers --------------------------------------------------------
 *
 * The real aclmdlDataset is a vector of (aclDataBuffer *, tensor desc) pairs; it keeps the
 * buffer pointers it is given and reads them at every aclmdlExecute, and destroying it does
 * not destroy the buffers (GE model_om2.cpp). The mock does the same: a dataset stores the
 * caller's aclDataBuffer pointers and aclmdlExecute reads each buffer's fields, so a buffer
 * destroyed while still in a dataset is a use-after-free here too (visible under ASan).
 * Both kinds of object are kept in registries (under g_mock_lock) only to reject foreign or
 * destroyed handles at the API with 100000, as the mock does for every other handle, and to
 * count them for aclmockGetStats. They are the caller's objects, so aclmockReset leaves
 * them alone. */

struct aclDataBuffer {
    void *data;                  /* device memory in CANN; never dereferenced */
    size_t length;
    struct aclDataBuffer *next;  /* registry */
};

struct aclmdlDataset {
    aclDataBuffer **bufs;        /* the caller's pointers, in the order added */
    size_t n, cap;
    struct aclmdlDataset *next;  /* registry */
};

static aclDataBuffer *g_buffers;
static aclmdlDataset *g_datasets;
static uint64_t g_nbuffers, g_ndatasets;

/* Caller holds g_mock_lock. */
static bool buffer_live(const aclDataBuffer *b)
{
    for (const aclDataBuffer *p = g_buffers; p != NULL; p = p->next) {
        if (p == b)
            return true;
    }
    return false;
}

/* Caller holds g_mock_lock. */
static bool dataset_live(const aclmdlDataset *d)
{
    for (const aclmdlDataset *p = g_datasets; p != NULL; p = p->next) {
        if (p == d)
            return true;
    }
    return false;
}

/* What GE's ModelExecute checks before it looks the model up. It walks every buffer of
 * both datasets (reading the kept pointers: a destroyed buffer is read after free, as in
 * CANN), and a synchronous execution with an output buffer whose data is NULL asks the
 * model for that output's size: these models have no outputs, so that is 100000 (GE:
 * "outputDesc size mismatch with blobs size"). Caller holds g_mock_lock. */
static aclError datasets_check_for_execute(const aclmdlDataset *input, const aclmdlDataset *output)
{
    if (!dataset_live(input) || !dataset_live(output))
        return ACL_ERROR_INVALID_PARAM;   /* deviation: CANN would dereference it */
    size_t total = 0;
    for (size_t k = 0; k < input->n; k++)
        total += input->bufs[k]->length;
    bool need_alloc = false;
    for (size_t k = 0; k < output->n; k++) {
        total += output->bufs[k]->length;
        need_alloc |= output->bufs[k]->data == NULL;
    }
    volatile size_t sink = total;   /* the reads above are the point: keep them */
    (void)sink;
    return need_alloc ? ACL_ERROR_INVALID_PARAM : ACL_SUCCESS;
}

MOCK_EXPORT aclDataBuffer *aclCreateDataBuffer(void *data, size_t size)
{
    MOCK_FAULT_RETURN(NULL);
    aclDataBuffer *b = calloc(1, sizeof *b);
    if (b == NULL)
        return NULL;
    b->data = data;
    b->length = size;
    mock_lock();
    b->next = g_buffers;
    g_buffers = b;
    g_nbuffers++;
    mock_unlock();
    return b;
}

MOCK_EXPORT aclError aclDestroyDataBuffer(const aclDataBuffer *dataBuffer)
{
    MOCK_FAULT_RETURN_CODE();
    if (dataBuffer == NULL)
        return ACL_ERROR_INVALID_PARAM;
    mock_lock();
    for (aclDataBuffer **pp = &g_buffers; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == dataBuffer) {
            aclDataBuffer *b = *pp;
            *pp = b->next;
            g_nbuffers--;
            mock_unlock();
            free(b);   /* datasets that still hold it keep a dangling pointer, as in CANN */
            return ACL_SUCCESS;
        }
    }
    mock_unlock();
    return ACL_ERROR_INVALID_PARAM;   /* deviation: a double destroy is a double free in CANN */
}

/* CANN declares it `()`; a definition needs the (void). */
MOCK_EXPORT aclmdlDataset *aclmdlCreateDataset(void)
{
    MOCK_FAULT_RETURN(NULL);
    aclmdlDataset *d = calloc(1, sizeof *d);
    if (d == NULL)
        return NULL;
    mock_lock();
    d->next = g_datasets;
    g_datasets = d;
    g_ndatasets++;
    mock_unlock();
    return d;
}

MOCK_EXPORT aclError aclmdlDestroyDataset(const aclmdlDataset *dataset)
{
    MOCK_FAULT_RETURN_CODE();
    if (dataset == NULL)
        return ACL_ERROR_INVALID_PARAM;
    mock_lock();
    for (aclmdlDataset **pp = &g_datasets; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == dataset) {
            aclmdlDataset *d = *pp;
            *pp = d->next;
            g_ndatasets--;
            mock_unlock();
            free(d->bufs);   /* the buffers themselves stay the caller's */
            free(d);
            return ACL_SUCCESS;
        }
    }
    mock_unlock();
    return ACL_ERROR_INVALID_PARAM;   /* deviation: a double destroy is a double free in CANN */
}

MOCK_EXPORT aclError aclmdlAddDatasetBuffer(aclmdlDataset *dataset, aclDataBuffer *dataBuffer)
{
    MOCK_FAULT_RETURN_CODE();
    if (dataset == NULL || dataBuffer == NULL)
        return ACL_ERROR_INVALID_PARAM;
    aclError ret = ACL_SUCCESS;
    mock_lock();
    if (!dataset_live(dataset) || !buffer_live(dataBuffer)) {
        ret = ACL_ERROR_INVALID_PARAM;   /* deviation: CANN stores whatever it is given */
    } else if (dataset->n == dataset->cap) {
        size_t ncap = dataset->cap ? dataset->cap * 2 : 4;
        aclDataBuffer **n = realloc(dataset->bufs, ncap * sizeof *n);
        if (n == NULL) {
            ret = ACL_ERROR_BAD_ALLOC;
        } else {
            dataset->bufs = n;
            dataset->cap = ncap;
        }
    }
    if (ret == ACL_SUCCESS)
        dataset->bufs[dataset->n++] = dataBuffer;   /* the same buffer may be added twice */
    mock_unlock();
    return ret;
}

MOCK_EXPORT size_t aclmdlGetDatasetNumBuffers(const aclmdlDataset *dataset)
{
    MOCK_FAULT_RETURN(0);
    if (dataset == NULL)
        return 0;
    mock_lock();
    size_t n = dataset_live(dataset) ? dataset->n : 0;
    mock_unlock();
    return n;
}

void mock_model_stats(aclmockStats *out)
{
    out->datasetsInUse = g_ndatasets;
    out->dataBuffersInUse = g_nbuffers;
}

/* ---- public API ------------------------------------------------------------------------ */

MOCK_EXPORT aclError aclmdlLoadFromFile(const char *modelPath, uint32_t *modelId)
{
    int32_t code;
    if (mock_fault(__func__, &code))
        return code;
    if (modelPath == NULL || modelId == NULL)
        return ACL_ERROR_INVALID_PARAM;

    /* Read and parse outside the lock: files may be large. */
    size_t len;
    char *buf = read_file(modelPath, &len);
    if (buf == NULL)
        return ACL_ERROR_INVALID_FILE;
    parsed p = { 0 };
    bool ok = parse_model(buf, len, &p);
    free(buf);
    if (!ok) {
        parsed_free(&p);
        return ACL_ERROR_INVALID_FILE;
    }

    mock_model *m = calloc(1, sizeof *m);
    if (m == NULL) {
        parsed_free(&p);
        return ACL_ERROR_BAD_ALLOC;
    }
    m->device = p.device;
    m->gap_ns = p.gap_ns;
    m->ops = p.ops;
    m->nops = p.nops;
    atomic_init(&m->refs, 1);
    pthread_mutex_init(&m->exec_lock, NULL);

    mock_lock();
    aclError ret = ACL_SUCCESS;
    if (m->device >= mock_device_count()) {
        ret = ACL_ERROR_INVALID_FILE;   /* the device count may have shrunk meanwhile */
    } else if (g_next_id == UINT32_MAX) {
        ret = ACL_ERROR_FAILURE;        /* ids exhausted: never reuse one */
    } else if (g_nmodels == g_modelcap) {
        size_t ncap = g_modelcap ? g_modelcap * 2 : 16;
        mock_model **n = realloc(g_models, ncap * sizeof *n);
        if (n == NULL) {
            ret = ACL_ERROR_BAD_ALLOC;
        } else {
            g_models = n;
            g_modelcap = ncap;
        }
    }
    if (ret != ACL_SUCCESS) {
        mock_unlock();
        model_free(m);
        return ret;
    }
    m->id = g_next_id++;
    /* Default seed: the id, so a fresh process replays the same jitter for the same
     * load order; `seed` makes it independent of the id. */
    m->seed = p.have_seed ? p.seed : m->id;
    g_models[g_nmodels++] = m;
    *modelId = m->id;
    mock_unlock();
    return ACL_SUCCESS;
}

static uint64_t mix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* duration_ns + uniform jitter in [-jitter, +jitter], at least 1 ns; deterministic in
 * (seed, execution number, op position), so concurrent executions need no shared PRNG. */
static uint64_t op_duration(const mock_model *m, uint64_t exec_no, size_t i)
{
    const mock_op *op = &m->ops[i];
    uint64_t d = op->duration_ns;
    if (op->jitter_ns != 0) {
        uint64_t r = mix64(m->seed ^ mix64(exec_no ^ mix64((uint64_t)i)));
        uint64_t span = 2 * op->jitter_ns + 1;          /* <= 2e12 + 1: no overflow */
        uint64_t off = r % span;                        /* d - jitter + off */
        d = d + off > op->jitter_ns ? d + off - op->jitter_ns : 0;
    }
    return d == 0 ? 1 : d;
}

static uint64_t sat_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static void sleep_until_ns(uint64_t t)
{
    struct timespec ts = { .tv_sec = (time_t)(t / 1000000000u),
                           .tv_nsec = (long)(t % 1000000000u) };
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

MOCK_EXPORT aclError aclmdlExecute(uint32_t modelId, const aclmdlDataset *input,
                                   aclmdlDataset *output)
{
    int32_t code;
    if (mock_fault(__func__, &code))
        return code;
    /* GE's ModelExecute checks both datasets before anything else, the model id included
     * (api/acl/acl_model/model/model.cpp, ACL_REQUIRES_NOT_NULL_WITH_INPUT_REPORT). */
    if (input == NULL || output == NULL)
        return ACL_ERROR_INVALID_PARAM;
    mock_lock();
    aclError ret = datasets_check_for_execute(input, output);
    size_t i = ret == ACL_SUCCESS ? model_index(modelId) : SIZE_MAX;
    if (ret == ACL_SUCCESS && i == SIZE_MAX)
        ret = ACL_ERROR_GE_EXEC_MODEL_ID_INVALID;   /* ModelManager::ExecuteModel, passed through */
    else if (ret == ACL_SUCCESS && (input->n != 0 || output->n != 0))
        ret = ACL_ERROR_GE_PARAM_INVALID;   /* these models have no inputs or outputs */
    if (ret != ACL_SUCCESS) {
        mock_unlock();
        return ret;
    }
    mock_model *m = g_models[i];
    atomic_fetch_add(&m->refs, 1);
    mock_unlock();

    bool realtime = mock_realtime() != 0;
    pthread_mutex_lock(&m->exec_lock);
    uint64_t exec_no = m->exec_count++;
    uint64_t now = mock_now_ns();
    uint64_t t = now > m->cursor_ns ? now : m->cursor_ns;
    for (size_t k = 0; k < m->nops; k++) {
        uint64_t start = t;
        uint64_t end = sat_add(start, op_duration(m, exec_no, k));
        if (realtime && end > mock_now_ns())
            sleep_until_ns(end);
        /* The device clock (offset, unit) is derived from the nanosecond cursor, so it
         * is monotonic too and duration = end - start holds exactly in either unit. */
        mock_subscribe_emit(m->id, m->device, &m->ops[k], mock_device_time(start),
                            mock_device_time(end));
        t = sat_add(end, m->gap_ns);
    }
    m->cursor_ns = t;
    pthread_mutex_unlock(&m->exec_lock);
    model_release(m);
    return ACL_SUCCESS;
}

/* Unloading a subscribed model does NOT unsubscribe it, as in CANN: GE's unload path
 * (GeExecutor::UnloadModel -> ModelManager::Unload) only deletes the model and erases the
 * model -> device map (MsprofUnsetDeviceIdByGeModelIdx); nothing tells the profiler. The
 * subscription stays: the library keeps the caller's fd open, the mode stays SUBSCRIBE,
 * and aclprofModelUnSubscribe(id) now fails with 100011 because the id is no longer known
 * (ProfCheckModelLoaded). Only aclmockReset (in CANN: the end of the process) releases
 * it. Unsubscribe before unloading. */
MOCK_EXPORT aclError aclmdlUnload(uint32_t modelId)
{
    int32_t code;
    if (mock_fault(__func__, &code))
        return code;
    mock_lock();
    size_t i = model_index(modelId);
    if (i == SIZE_MAX) {
        mock_unlock();
        return ACL_ERROR_INVALID_MODEL_ID;
    }
    mock_model *m = g_models[i];
    memmove(&g_models[i], &g_models[i + 1], (g_nmodels - i - 1) * sizeof *g_models);
    g_nmodels--;
    mock_unlock();
    model_release(m);
    return ACL_SUCCESS;
}

void mock_model_reset(void)
{
    for (size_t i = 0; i < g_nmodels; i++)
        model_release(g_models[i]);
    free(g_models);
    g_models = NULL;
    g_nmodels = g_modelcap = 0;
    g_next_id = 1;
}
