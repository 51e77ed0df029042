/* AI Core exceptions (issue 24): injection, the callbacks' rules, aclmdlCreateAndGetOpDesc and
 * the tensor description getters, the records that reach a subscription. */
#include <pthread.h>
#include <sys/syscall.h>

#include "test_subscribe_common.h"

#define MODEL_TEXT                                                                        \
    "aclmock-model 1\n"                                                                   \
    "device 1\n"                                                                          \
    "op\tconv1\tConv2D\t1000\n"                                                           \
    "in\t1\t0\t1,3,224,224\n"                                                             \
    "in\t1\t4\t64,3,7,7\n"                                                                \
    "out\t1\t3\t1,4,112,112,16\n"                                                         \
    "op\trelu1\tRelu\t500\n"                                                              \
    "in\t0\t2\t\n"                                                                        \
    "out\t0\t2\t-1,8\n"                                                                   \
    "op\tnoio\tNoOp\t10\n"

static aclmdlDataset *g_in, *g_out;

static aclError execute(uint32_t id)
{
    if (g_in == NULL) {
        g_in = aclmdlCreateDataset();
        g_out = aclmdlCreateDataset();
    }
    return aclmdlExecute(id, g_in, g_out);
}

/* What a callback saw, copied during the call (the info dies with it). */
typedef struct seen {
    int calls;
    uint32_t task, stream, tid, device, code;
    pthread_t thread;
    char name[64];
    size_t nin, nout;
    int32_t dtype0, format0;
    size_t ndims0;
    int64_t dim0_1;
    aclError desc_ret;
} seen;

static seen g_seen, g_seen2;

static void record(seen *s, aclrtExceptionInfo *info)
{
    s->calls++;
    s->task = aclrtGetTaskIdFromExceptionInfo(info);
    s->stream = aclrtGetStreamIdFromExceptionInfo(info);
    s->tid = aclrtGetThreadIdFromExceptionInfo(info);
    s->device = aclrtGetDeviceIdFromExceptionInfo(info);
    s->code = aclrtGetErrorCodeFromExceptionInfo(info);
    s->thread = pthread_self();
    aclTensorDesc *in = NULL, *out = NULL;
    s->desc_ret = aclmdlCreateAndGetOpDesc(s->device, s->stream, s->task, s->name,
                                           sizeof s->name, &in, &s->nin, &out, &s->nout);
    if (s->desc_ret == ACL_SUCCESS) {
        aclTensorDesc *d = aclGetTensorDescByIndex(in, 0);
        s->dtype0 = aclGetTensorDescType(d);
        s->format0 = aclGetTensorDescFormat(d);
        s->ndims0 = aclGetTensorDescNumDims(d);
        if (s->ndims0 > 1)
            CHECK_EQ(aclGetTensorDescDimV2(d, 1, &s->dim0_1), ACL_SUCCESS);
        aclDestroyTensorDesc(in);
        aclDestroyTensorDesc(out);
    }
}

static void on_exception(aclrtExceptionInfo *info) { record(&g_seen, info); }
static void on_exception2(aclrtExceptionInfo *info) { record(&g_seen2, info); }

TEST(failure_reaches_the_callback_with_the_op_and_its_tensors)
{
    memset(&g_seen, 0, sizeof g_seen);
    REQUIRE(aclmockSetDeviceCount(2) == ACL_SUCCESS);
    uint32_t id;
    REQUIRE(load_text(MODEL_TEXT, &id) == ACL_SUCCESS);
    CHECK_EQ(aclrtSetExceptionInfoCallback(on_exception), ACL_SUCCESS);
    CHECK_EQ(aclmockInjectOpFailure(id, "conv1", 0, 0, 0, 0), 0);
    CHECK_EQ(execute(id), ACL_ERROR_GE_FAILURE);   /* GE's synchronous execute */
    CHECK_EQ(g_seen.calls, 1);
    CHECK_EQ(g_seen.task, 0);
    CHECK_EQ(g_seen.stream, id);
    CHECK_EQ(g_seen.device, 1);
    CHECK_EQ(g_seen.code, ACL_ERROR_RT_AICORE_EXCEPTION);
    CHECK_EQ(g_seen.tid, (uint32_t)syscall(SYS_gettid));   /* the submitting thread */
    CHECK(!pthread_equal(g_seen.thread, pthread_self()));   /* run on the report thread */
    CHECK_EQ(g_seen.desc_ret, ACL_SUCCESS);
    CHECK_STR_EQ(g_seen.name, "conv1");
    CHECK_EQ(g_seen.nin, 2);
    CHECK_EQ(g_seen.nout, 1);
    CHECK_EQ(g_seen.dtype0, ACL_FLOAT16);
    CHECK_EQ(g_seen.format0, ACL_FORMAT_NCHW);
    CHECK_EQ(g_seen.ndims0, 4);
    CHECK_EQ(g_seen.dim0_1, 3);
    aclmockStats s = stats();
    CHECK_EQ(s.opFailures, 1);
    CHECK_EQ(s.exceptionCallbacks, 1);
    CHECK_EQ(s.tensorDescsInUse, 0);
    /* Once: the next execution succeeds. */
    CHECK_EQ(execute(id), ACL_SUCCESS);
    CHECK_EQ(g_seen.calls, 1);
}

TEST(every_nth_execution_fails_and_clear_stops_it)
{
    memset(&g_seen, 0, sizeof g_seen);
    uint32_t id;
    REQUIRE(load_text(MODEL_TEXT, &id) == ACL_SUCCESS);
    CHECK_EQ(aclrtSetExceptionInfoCallback(on_exception), ACL_SUCCESS);
    CHECK_EQ(aclmockInjectOpFailure(id, NULL, 1, 3, ACL_ERROR_RT_AICORE_TIMEOUT, 507011), 0);
    int failed = 0;
    for (int i = 0; i < 9; i++)
        failed += execute(id) == ACL_ERROR_RT_MODEL_EXECUTE;
    CHECK_EQ(failed, 3);
    CHECK_EQ(g_seen.calls, 3);
    CHECK_EQ(g_seen.task, 1);
    CHECK_EQ(g_seen.code, ACL_ERROR_RT_AICORE_TIMEOUT);
    CHECK_STR_EQ(g_seen.name, "relu1");
    CHECK_EQ(g_seen.ndims0, 0);   /* a scalar input */
    CHECK_EQ(aclmockClearOpFailure(id), 0);
    for (int i = 0; i < 3; i++)
        CHECK_EQ(execute(id), ACL_SUCCESS);
    CHECK_EQ(g_seen.calls, 3);
    /* Unknown model or op: -1, nothing armed. */
    CHECK_EQ(aclmockInjectOpFailure(id + 100, NULL, 0, 0, 0, 0), -1);
    CHECK_EQ(aclmockInjectOpFailure(id, "nope", 0, 0, 0, 0), -1);
    CHECK_EQ(aclmockInjectOpFailure(id, NULL, 3, 0, 0, 0), -1);
    CHECK_EQ(execute(id), ACL_SUCCESS);
}

TEST(set_replaces_null_clears_register_adds)
{
    memset(&g_seen, 0, sizeof g_seen);
    memset(&g_seen2, 0, sizeof g_seen2);
    uint32_t id;
    REQUIRE(load_text(MODEL_TEXT, &id) == ACL_SUCCESS);
    /* No callback: the execution still fails, nothing is called. */
    CHECK_EQ(aclmockInjectOpFailure(id, "conv1", 0, 1, 0, 0), 0);
    CHECK_EQ(execute(id), ACL_ERROR_GE_FAILURE);
    CHECK_EQ(stats().exceptionCallbacks, 0);
    CHECK_EQ(stats().opFailures, 1);
    /* Set twice: the last wins. */
    CHECK_EQ(aclrtSetExceptionInfoCallback(on_exception), ACL_SUCCESS);
    CHECK_EQ(aclrtSetExceptionInfoCallback(on_exception2), ACL_SUCCESS);
    execute(id);
    CHECK_EQ(g_seen.calls, 0);
    CHECK_EQ(g_seen2.calls, 1);
    /* Register adds beside the Set slot; the same pointer twice is one entry. */
    CHECK_EQ(aclrtExceptionInfoCallbackRegister(on_exception), ACL_SUCCESS);
    CHECK_EQ(aclrtExceptionInfoCallbackRegister(on_exception), ACL_SUCCESS);
    execute(id);
    CHECK_EQ(g_seen.calls, 1);
    CHECK_EQ(g_seen2.calls, 2);
    /* NULL clears the Set slot; Unregister removes; unknown Unregister is fine. */
    CHECK_EQ(aclrtSetExceptionInfoCallback(NULL), ACL_SUCCESS);
    CHECK_EQ(aclrtExceptionInfoCallbackUnregister(on_exception), ACL_SUCCESS);
    CHECK_EQ(aclrtExceptionInfoCallbackUnregister(on_exception), ACL_SUCCESS);
    CHECK_EQ(aclrtExceptionInfoCallbackRegister(NULL), ACL_ERROR_RT_PARAM_INVALID);
    execute(id);
    CHECK_EQ(g_seen.calls, 1);
    CHECK_EQ(g_seen2.calls, 2);
    /* aclmockReset forgets every callback. */
    CHECK_EQ(aclrtSetExceptionInfoCallback(on_exception), ACL_SUCCESS);
    aclmockReset();
    REQUIRE(load_text(MODEL_TEXT, &id) == ACL_SUCCESS);
    CHECK_EQ(aclmockInjectOpFailure(id, "conv1", 0, 0, 0, 0), 0);
    execute(id);
    CHECK_EQ(g_seen.calls, 1);
}

TEST(caller_thread_mode_runs_the_callback_on_the_executing_thread)
{
    memset(&g_seen, 0, sizeof g_seen);
    uint32_t id;
    REQUIRE(load_text(MODEL_TEXT, &id) == ACL_SUCCESS);
    CHECK_EQ(aclmockSetExceptionThread(ACLMOCK_EXC_CALLER_THREAD), ACL_SUCCESS);
    CHECK_EQ(aclmockSetExceptionThread(7), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclrtSetExceptionInfoCallback(on_exception), ACL_SUCCESS);
    CHECK_EQ(aclmockInjectOpFailure(id, "conv1", 0, 0, 0, 0), 0);
    execute(id);
    CHECK_EQ(g_seen.calls, 1);
    CHECK(pthread_equal(g_seen.thread, pthread_self()));
}

TEST(op_desc_rules)
{
    enum { D = 1 };   /* the model's device */
    uint32_t id;
    REQUIRE(load_text(MODEL_TEXT, &id) == ACL_SUCCESS);
    char name[64];
    aclTensorDesc *in = NULL, *out = NULL;
    size_t nin = 0, nout = 0;
    /* Any op of a loaded model can be described, failed or not (GE's op list). */
    CHECK_EQ(aclmdlCreateAndGetOpDesc(D, id, 1, name, sizeof name, &in, &nin, &out, &nout),
             ACL_SUCCESS);
    CHECK_STR_EQ(name, "relu1");
    CHECK_EQ(nin, 1);
    CHECK_EQ(nout, 1);
    aclTensorDesc *o = aclGetTensorDescByIndex(out, 0);
    CHECK_EQ(aclGetTensorDescNumDims(o), 2);
    int64_t v = 0;
    CHECK_EQ(aclGetTensorDescDimV2(o, 0, &v), ACL_SUCCESS);
    CHECK_EQ(v, -1);
    CHECK_EQ(aclGetTensorDescDimV2(o, 2, &v), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclGetTensorDescDimV2(o, 0, NULL), ACL_ERROR_INVALID_PARAM);
    CHECK_NOT_NULL(aclGetTensorDescAddress(o));
    CHECK(aclGetTensorDescAddress(o) != aclGetTensorDescAddress(aclGetTensorDescByIndex(in, 0)));
    CHECK_EQ(stats().tensorDescsInUse, 2);
    aclDestroyTensorDesc(in);
    aclDestroyTensorDesc(out);
    CHECK_EQ(stats().tensorDescsInUse, 0);
    /* opNameLen must leave room for the NUL. */
    CHECK_EQ(aclmdlCreateAndGetOpDesc(D, id, 1, name, 5, &in, &nin, &out, &nout),
             ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclmdlCreateAndGetOpDesc(D, id, 1, name, 6, &in, &nin, &out, &nout), ACL_SUCCESS);
    aclDestroyTensorDesc(in);
    aclDestroyTensorDesc(out);
    /* An op without inputs/outputs, a wrong device, stream or task, NULL out-params. */
    CHECK_EQ(aclmdlCreateAndGetOpDesc(D, id, 2, name, sizeof name, &in, &nin, &out, &nout),
             ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclmdlCreateAndGetOpDesc(0, id, 1, name, sizeof name, &in, &nin, &out, &nout),
             ACL_ERROR_GE_FAILURE);
    CHECK_EQ(aclmdlCreateAndGetOpDesc(D, id + 1, 1, name, sizeof name, &in, &nin, &out, &nout),
             ACL_ERROR_GE_FAILURE);
    CHECK_EQ(aclmdlCreateAndGetOpDesc(D, id, 3, name, sizeof name, &in, &nin, &out, &nout),
             ACL_ERROR_GE_FAILURE);
    CHECK_EQ(aclmdlCreateAndGetOpDesc(D, id, 1, NULL, 9, &in, &nin, &out, &nout),
             ACL_ERROR_INVALID_PARAM);
    /* After unload the op is gone. */
    CHECK_EQ(aclmdlUnload(id), ACL_SUCCESS);
    CHECK_EQ(aclmdlCreateAndGetOpDesc(D, id, 1, name, sizeof name, &in, &nin, &out, &nout),
             ACL_ERROR_GE_FAILURE);
    /* NULL handling of the getters. */
    CHECK_EQ(aclrtGetTaskIdFromExceptionInfo(NULL), 0xFFFFFFFFu);
    CHECK_EQ(aclrtGetErrorCodeFromExceptionInfo(NULL), 0xFFFFFFFFu);
    CHECK_EQ(aclGetTensorDescType(NULL), ACL_DT_UNDEFINED);
    CHECK_EQ(aclGetTensorDescFormat(NULL), ACL_FORMAT_UNDEFINED);
    CHECK_EQ(aclGetTensorDescNumDims(NULL), 0);
    CHECK_NULL(aclGetTensorDescAddress(NULL));
    CHECK_NULL(aclGetTensorDescByIndex(NULL, 0));
    aclDestroyTensorDesc(NULL);
}

TEST(model_file_tensor_lines_are_checked)
{
    uint32_t id;
    static const char *const bad[] = {
        "aclmock-model 1\nin\t0\t0\t1\n",                       /* no op above */
        "aclmock-model 1\nop\ta\tA\t1\nin\t0\t0\n",             /* too few fields */
        "aclmock-model 1\nop\ta\tA\t1\nin\t0\t0\t1\t2\n",       /* too many */
        "aclmock-model 1\nop\ta\tA\t1\nin\tx\t0\t1\n",
        "aclmock-model 1\nop\ta\tA\t1\nin\t0\t0\t1,,2\n",       /* empty dim */
        "aclmock-model 1\nop\ta\tA\t1\nin\t0\t0\t-3\n",         /* below -2 */
        "aclmock-model 1\nop\ta\tA\t1\nin\t0\t0\t1,\n",
        "aclmock-model 1\nop\ta\tA\t1\nout\t4294967296\t0\t1\n",/* dtype > int32 */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        aclError r = load_text(bad[i], &id);
        if (r != ACL_ERROR_INVALID_FILE)
            fprintf(stderr, "bad model %zu loaded: %d\n", i, r);
        CHECK_EQ(r, ACL_ERROR_INVALID_FILE);
    }
    CHECK_EQ(load_text("aclmock-model 1\nop\ta\tA\t1\nin\t-1\t-1\t-2\nout\t27\t2\t"
                       "9223372036854775807\n", &id), ACL_SUCCESS);
}

/* Records of a subscribed model: the ops before the failure, not the failed op (default) nor
 * the ops after it; with ACLMOCK_FAILED_OP_RECORD=emit the failed op's record too. */
TEST(subscription_keeps_the_ops_before_the_failure)
{
    uint32_t id;
    REQUIRE(load_text(MODEL_TEXT, &id) == ACL_SUCCESS);
    int fds[2];
    REQUIRE(pipe(fds) == 0);
    aclprofSubscribeConfig *cfg = aclprofCreateSubscribeConfig(1, ACL_AICORE_NONE, &fds[1]);
    REQUIRE(cfg != NULL);
    REQUIRE(aclprofModelSubscribe(id, cfg) == ACL_SUCCESS);
    uint64_t before = stats().recordsEmitted;
    CHECK_EQ(aclmockInjectOpFailure(id, "relu1", 0, 0, 0, 0), 0);
    execute(id);
    CHECK_EQ(stats().recordsEmitted - before, 1);   /* conv1 only */
    CHECK_EQ(aclmockSetFailedOpRecord(1), ACL_SUCCESS);
    CHECK_EQ(aclmockInjectOpFailure(id, "relu1", 0, 0, 0, 0), 0);
    execute(id);
    CHECK_EQ(stats().recordsEmitted - before, 3);   /* conv1 and relu1 */
    execute(id);
    CHECK_EQ(stats().recordsEmitted - before, 6);   /* all three */
    CHECK_EQ(aclprofModelUnSubscribe(id), ACL_SUCCESS);
    aclprofDestroySubscribeConfig(cfg);
    close(fds[0]);
}

int main(void)
{
    tmp_init();
    RUN(failure_reaches_the_callback_with_the_op_and_its_tensors);
    RUN(every_nth_execution_fails_and_clear_stops_it);
    RUN(set_replaces_null_clears_register_adds);
    RUN(caller_thread_mode_runs_the_callback_on_the_executing_thread);
    RUN(op_desc_rules);
    RUN(model_file_tensor_lines_are_checked);
    RUN(subscription_keeps_the_ops_before_the_failure);
    tmp_cleanup();
    return test_summary();
}
