/* Model runtime: the model table and aclmdlLoadFromFile/Execute/Unload over a small text
 * "model description" (format in mock_acl/README.md, "Model runtime and subscription").
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
 * The file format is parsed in model_file.c, the dataset handles live in model_dataset.c.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model_internal.h"

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

/* fork(), in the child, with g_mock_lock held by the prepare handler (so g_models is
 * consistent): another thread of the parent may have been executing a model, holding its
 * exec_lock; that thread does not exist in the child, so the lock is made free again. */
void models_fork_child(void)
{
    for (size_t i = 0; i < g_nmodels; i++)
        pthread_mutex_init(&g_models[i]->exec_lock, NULL);
}

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

/* ---- public API ------------------------------------------------------------------------ */

MOCK_EXPORT aclError aclmdlLoadFromFile(const char *modelPath, uint32_t *modelId)
{
    MOCK_FAULT_RETURN_CODE();
    if (modelPath == NULL || modelId == NULL)
        return ACL_ERROR_INVALID_PARAM;

    /* Read and parse outside the lock: files may be large. */
    parsed p = { 0 };
    if (!model_file_load(modelPath, &p))
        return ACL_ERROR_INVALID_FILE;

    mock_model *m = calloc(1, sizeof *m);
    if (m == NULL) {
        model_parsed_free(&p);
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
    MOCK_FAULT_RETURN_CODE();
    /* GE's ModelExecute checks both datasets before anything else, the model id included
     * (api/acl/acl_model/model/model.cpp, ACL_REQUIRES_NOT_NULL_WITH_INPUT_REPORT). */
    if (input == NULL || output == NULL)
        return ACL_ERROR_INVALID_PARAM;
    mock_lock();
    bool empty = false;
    aclError ret = model_datasets_check(input, output, &empty);
    size_t i = ret == ACL_SUCCESS ? model_index(modelId) : SIZE_MAX;
    if (ret == ACL_SUCCESS && i == SIZE_MAX)
        ret = ACL_ERROR_GE_EXEC_MODEL_ID_INVALID;   /* ModelManager::ExecuteModel, passed through */
    else if (ret == ACL_SUCCESS && !empty)
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
    mock_lock();
    mock_session_note_ops(m->device, m->id, m->nops);   /* what an API session collects */
    mock_unlock();
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
    MOCK_FAULT_RETURN_CODE();
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

