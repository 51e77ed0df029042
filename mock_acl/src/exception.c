/* AI Core exceptions (issue 24; mock_acl/README.md "AI Core exceptions"): the exception
 * callbacks (aclrtSetExceptionInfoCallback's one slot, aclrtExceptionInfoCallbackRegister's
 * set), the getters of the info object, and the report thread that runs the callbacks when an
 * injected failure (model_failure.c) stops an execution.
 *
 * CANN (runtime src/runtime/core/src/task/task_info/task_manager.cc TaskFailCallBack,
 * src/runtime/core/src/common/task_fail_callback_data_manager.cc Notify): the runtime builds
 * the rtExceptionInfo on its stack in the task-report path and calls every registered callback
 * synchronously, having copied the set first (so no lock is held during the calls). The info is
 * valid only during the call. Here it is a heap object freed after the last callback, so a
 * pointer kept past the call is a use after free (ASan reports it), never a kindness.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mock_internal.h"

struct rtExceptionInfo {
    uint32_t taskid, streamid, tid, deviceid, retcode;
};

#define INVALID_EXCEPTION_INFO 0xFFFFFFFFu
#define MAX_REGISTERED 64     /* Register'ed callbacks; CANN's map is unbounded (deviation) */

static pthread_mutex_t g_exc_lock = PTHREAD_MUTEX_INITIALIZER;   /* the callback set */
static aclrtExceptionInfoCallback g_set_callback;                 /* SetExceptionInfoCallback */
static aclrtExceptionInfoCallback g_registered[MAX_REGISTERED];
static size_t g_nregistered;

static atomic_int g_thread_mode = ACLMOCK_EXC_REPORT_THREAD;
static atomic_int g_failed_record;   /* 0: the failed op's record is dropped */
static _Atomic uint64_t g_failures, g_invocations;

/* The report thread: one failure at a time, posted by mock_exception_raise. */
static pthread_mutex_t g_rep_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_rep_posted = PTHREAD_COND_INITIALIZER;
static pthread_cond_t g_rep_done = PTHREAD_COND_INITIALIZER;
static bool g_rep_started;
static pthread_t g_rep_thread;
static bool g_rep_busy;               /* a failure is posted and not yet reported */
static mock_failure g_rep_failure;
static uint64_t g_rep_posted_n, g_rep_done_n;

/* ---- callbacks --------------------------------------------------------------------- */

static void notify(const mock_failure *f)
{
    aclrtExceptionInfoCallback calls[MAX_REGISTERED + 1];
    size_t n = 0;
    pthread_mutex_lock(&g_exc_lock);
    if (g_set_callback != NULL)
        calls[n++] = g_set_callback;
    for (size_t i = 0; i < g_nregistered; i++)
        calls[n++] = g_registered[i];
    pthread_mutex_unlock(&g_exc_lock);
    atomic_fetch_add(&g_failures, 1);
    if (n == 0)
        return;   /* no callback: CANN only logs the failure */
    struct rtExceptionInfo *info = malloc(sizeof *info);
    if (info == NULL)
        return;
    *info = (struct rtExceptionInfo){ .taskid = f->task, .streamid = f->stream, .tid = f->tid,
                                      .deviceid = f->device, .retcode = f->retcode };
    for (size_t i = 0; i < n; i++) {
        calls[i](info);
        atomic_fetch_add(&g_invocations, 1);
    }
    free(info);
}

MOCK_EXPORT aclError aclrtSetExceptionInfoCallback(aclrtExceptionInfoCallback callback)
{
    MOCK_FAULT_RETURN_CODE();
    pthread_mutex_lock(&g_exc_lock);
    g_set_callback = callback;   /* the last call wins; NULL clears (callback.cpp:45) */
    pthread_mutex_unlock(&g_exc_lock);
    return ACL_SUCCESS;
}

MOCK_EXPORT aclError aclrtExceptionInfoCallbackRegister(aclrtExceptionInfoCallback callback)
{
    MOCK_FAULT_RETURN_CODE();
    if (callback == NULL)
        return ACL_ERROR_RT_PARAM_INVALID;
    aclError ret = ACL_SUCCESS;
    pthread_mutex_lock(&g_exc_lock);
    size_t i = 0;
    while (i < g_nregistered && g_registered[i] != callback)
        i++;
    if (i == g_nregistered) {   /* the same pointer twice is one entry */
        if (g_nregistered == MAX_REGISTERED)
            ret = ACL_ERROR_RT_PARAM_INVALID;
        else
            g_registered[g_nregistered++] = callback;
    }
    pthread_mutex_unlock(&g_exc_lock);
    return ret;
}

MOCK_EXPORT aclError aclrtExceptionInfoCallbackUnregister(aclrtExceptionInfoCallback callback)
{
    MOCK_FAULT_RETURN_CODE();
    if (callback == NULL)
        return ACL_ERROR_RT_PARAM_INVALID;
    pthread_mutex_lock(&g_exc_lock);
    for (size_t i = 0; i < g_nregistered; i++) {
        if (g_registered[i] == callback) {
            memmove(&g_registered[i], &g_registered[i + 1],
                    (g_nregistered - i - 1) * sizeof g_registered[0]);
            g_nregistered--;
            break;
        }
    }
    pthread_mutex_unlock(&g_exc_lock);
    return ACL_SUCCESS;   /* an unknown callback is not an error; in-flight calls are not awaited */
}

MOCK_EXPORT uint32_t aclrtGetTaskIdFromExceptionInfo(const aclrtExceptionInfo *info)
{
    MOCK_FAULT_RETURN((uint32_t)fault_code_);
    return info == NULL ? INVALID_EXCEPTION_INFO : info->taskid;
}

MOCK_EXPORT uint32_t aclrtGetStreamIdFromExceptionInfo(const aclrtExceptionInfo *info)
{
    MOCK_FAULT_RETURN((uint32_t)fault_code_);
    return info == NULL ? INVALID_EXCEPTION_INFO : info->streamid;
}

MOCK_EXPORT uint32_t aclrtGetThreadIdFromExceptionInfo(const aclrtExceptionInfo *info)
{
    MOCK_FAULT_RETURN((uint32_t)fault_code_);
    return info == NULL ? INVALID_EXCEPTION_INFO : info->tid;
}

MOCK_EXPORT uint32_t aclrtGetDeviceIdFromExceptionInfo(const aclrtExceptionInfo *info)
{
    MOCK_FAULT_RETURN((uint32_t)fault_code_);
    return info == NULL ? INVALID_EXCEPTION_INFO : info->deviceid;
}

MOCK_EXPORT uint32_t aclrtGetErrorCodeFromExceptionInfo(const aclrtExceptionInfo *info)
{
    MOCK_FAULT_RETURN((uint32_t)fault_code_);
    return info == NULL ? INVALID_EXCEPTION_INFO : info->retcode;
}

/* ---- the report thread -------------------------------------------------------------- */

static void *report_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&g_rep_lock);
    for (;;) {
        while (g_rep_done_n == g_rep_posted_n)
            pthread_cond_wait(&g_rep_posted, &g_rep_lock);
        mock_failure f = g_rep_failure;
        pthread_mutex_unlock(&g_rep_lock);
        notify(&f);
        pthread_mutex_lock(&g_rep_lock);
        g_rep_done_n++;
        g_rep_busy = false;
        pthread_cond_broadcast(&g_rep_done);
    }
    return NULL;
}

void mock_exception_raise(const mock_failure *f)
{
    if (atomic_load(&g_thread_mode) == ACLMOCK_EXC_CALLER_THREAD) {
        notify(f);
        return;
    }
    pthread_mutex_lock(&g_rep_lock);
    if (g_rep_started && pthread_equal(pthread_self(), g_rep_thread)) {
        /* A callback made another execution fail: report it here rather than wait for
         * ourselves (CANN's docs warn that such calls may deadlock; the mock does not). */
        pthread_mutex_unlock(&g_rep_lock);
        notify(f);
        return;
    }
    if (!g_rep_started) {
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&g_rep_thread, &attr, report_main, NULL) != 0) {
            pthread_attr_destroy(&attr);
            pthread_mutex_unlock(&g_rep_lock);
            notify(f);   /* no thread to be had: report on the caller's */
            return;
        }
        pthread_attr_destroy(&attr);
        g_rep_started = true;
    }
    while (g_rep_busy)   /* one failure at a time, in the order they were raised */
        pthread_cond_wait(&g_rep_done, &g_rep_lock);
    g_rep_busy = true;
    g_rep_failure = *f;
    uint64_t ticket = ++g_rep_posted_n;
    pthread_cond_signal(&g_rep_posted);
    while (g_rep_done_n < ticket)
        pthread_cond_wait(&g_rep_done, &g_rep_lock);
    pthread_mutex_unlock(&g_rep_lock);
}

/* ---- settings, reset, stats, fork --------------------------------------------------- */

MOCK_EXPORT int aclmockSetExceptionThread(int which)
{
    if (which != ACLMOCK_EXC_REPORT_THREAD && which != ACLMOCK_EXC_CALLER_THREAD)
        return ACL_ERROR_INVALID_PARAM;
    atomic_store(&g_thread_mode, which);
    return ACL_SUCCESS;
}

MOCK_EXPORT int aclmockSetFailedOpRecord(int emit)
{
    if (emit != 0 && emit != 1)
        return ACL_ERROR_INVALID_PARAM;
    atomic_store(&g_failed_record, emit);
    return ACL_SUCCESS;
}

bool mock_failed_op_record(void)
{
    return atomic_load(&g_failed_record) != 0;
}

static void load_env(void)
{
    const char *v = getenv("ACLMOCK_EXCEPTION_THREAD");
    int mode = ACLMOCK_EXC_REPORT_THREAD;
    if (v != NULL && *v) {
        if (strcmp(v, "caller") == 0)
            mode = ACLMOCK_EXC_CALLER_THREAD;
        else if (strcmp(v, "report") != 0)
            fprintf(stderr, "aclmock: ignoring ACLMOCK_EXCEPTION_THREAD=%s (report|caller)\n", v);
    }
    atomic_store(&g_thread_mode, mode);
    v = getenv("ACLMOCK_FAILED_OP_RECORD");
    int emit = 0;
    if (v != NULL && *v) {
        if (strcmp(v, "emit") == 0)
            emit = 1;
        else if (strcmp(v, "drop") != 0)
            fprintf(stderr, "aclmock: ignoring ACLMOCK_FAILED_OP_RECORD=%s (drop|emit)\n", v);
    }
    atomic_store(&g_failed_record, emit);
}

__attribute__((constructor)) static void exception_init(void)
{
    load_env();
}

void mock_exception_reset(void)
{
    pthread_mutex_lock(&g_exc_lock);
    g_set_callback = NULL;
    g_nregistered = 0;
    pthread_mutex_unlock(&g_exc_lock);
    atomic_store(&g_failures, 0);
    atomic_store(&g_invocations, 0);
    load_env();
}

void mock_exception_stats(aclmockStats *out)
{
    out->opFailures = atomic_load(&g_failures);
    out->exceptionCallbacks = atomic_load(&g_invocations);
}

void mock_exception_fork_prepare(void)
{
    pthread_mutex_lock(&g_rep_lock);
    pthread_mutex_lock(&g_exc_lock);
}

void mock_exception_fork_parent(void)
{
    pthread_mutex_unlock(&g_exc_lock);
    pthread_mutex_unlock(&g_rep_lock);
}

/* The report thread does not exist in the child: the next failure starts a new one. A
 * failure the parent was reporting is the parent's (its raiser does not exist here either). */
void mock_exception_fork_child(void)
{
    g_exc_lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    g_rep_lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    g_rep_posted = (pthread_cond_t)PTHREAD_COND_INITIALIZER;
    g_rep_done = (pthread_cond_t)PTHREAD_COND_INITIALIZER;
    g_rep_started = false;
    g_rep_busy = false;
    g_rep_done_n = g_rep_posted_n;
}
