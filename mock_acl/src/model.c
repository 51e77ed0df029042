/* Model runtime: aclmdlLoadFromFile/Execute/Unload over a small text
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
 * The file format is parsed in model_file.c, the dataset handles live in model_dataset.c,
 * the table of loaded models in model_table.c.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model_internal.h"

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
    aclError ret = m->device >= mock_device_count()
                       ? ACL_ERROR_INVALID_FILE   /* the device count may have shrunk meanwhile */
                       : model_table_add(m);
    if (ret != ACL_SUCCESS) {
        mock_unlock();
        model_free(m);
        return ret;
    }
    /* Default seed: the id, so a fresh process replays the same jitter for the same
     * load order; `seed` makes it independent of the id. */
    m->seed = p.have_seed ? p.seed : m->id;
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
    mock_model *m = ret == ACL_SUCCESS ? model_table_find(modelId) : NULL;
    if (ret == ACL_SUCCESS && m == NULL)
        ret = ACL_ERROR_GE_EXEC_MODEL_ID_INVALID;   /* ModelManager::ExecuteModel, passed through */
    else if (ret == ACL_SUCCESS && !empty)
        ret = ACL_ERROR_GE_PARAM_INVALID;   /* these models have no inputs or outputs */
    if (ret != ACL_SUCCESS) {
        mock_unlock();
        return ret;
    }
    atomic_fetch_add(&m->refs, 1);
    mock_unlock();

    bool realtime = mock_realtime() != 0;
    pthread_mutex_lock(&m->exec_lock);
    uint64_t exec_no = m->exec_count++;
    size_t fail_at = m->nops;   /* none */
    bool fails = model_failure_due(m, &fail_at);
    uint64_t now = mock_now_ns();
    uint64_t t = now > m->cursor_ns ? now : m->cursor_ns;
    size_t ran = 0;
    for (size_t k = 0; k < m->nops; k++) {
        uint64_t start = t;
        uint64_t end = sat_add(start, op_duration(m, exec_no, k));
        if (realtime && end > mock_now_ns())
            sleep_until_ns(end);
        t = sat_add(end, m->gap_ns);
        if (fails && k == fail_at && !mock_failed_op_record())
            break;   /* the failed task reports no end: no record (README, UNCERTAIN) */
        /* The device clock (offset, unit) is derived from the nanosecond cursor, so it
         * is monotonic too and duration = end - start holds exactly in either unit. */
        mock_subscribe_emit(m->id, m->device, &m->ops[k], mock_device_time(start),
                            mock_device_time(end));
        ran++;
        if (fails && k == fail_at)
            break;   /* the stream stops at the exception: later ops never run */
    }
    m->cursor_ns = t;
    mock_failure failure = { .device = m->device, .stream = MODEL_STREAM_ID(m),
                             .task = MODEL_TASK_ID(fail_at), .tid = mock_tid(),
                             .retcode = m->fail_retcode };
    aclError exec_ret = fails ? m->fail_execute_code : ACL_SUCCESS;
    pthread_mutex_unlock(&m->exec_lock);
    mock_lock();
    mock_session_note_ops(m->device, m->id, ran);   /* what an API session collects */
    mock_unlock();
    /* The model stays referenced while the callbacks run, so aclmdlCreateAndGetOpDesc
     * finds it even if another thread unloads it meanwhile. */
    if (fails)
        mock_exception_raise(&failure);
    model_release(m);
    return exec_ret;
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
    mock_model *m = model_table_remove(modelId);
    mock_unlock();
    if (m == NULL)
        return ACL_ERROR_INVALID_MODEL_ID;
    model_release(m);
    return ACL_SUCCESS;
}
