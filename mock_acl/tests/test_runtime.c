/* aclInit/aclFinalize and the aclrt* device, context and stream calls. */
#include <limits.h>
#include <pthread.h>

#include "test_common.h"

#define RT_CONTEXT_NULL 107002   /* ACL_ERROR_RT_CONTEXT_NULL */

TEST(init_finalize)
{
    CHECK_EQ(aclFinalize(), ACL_ERROR_REPEAT_FINALIZE);
    CHECK_EQ(aclInit(NULL), ACL_SUCCESS);
    CHECK_EQ(aclInit(NULL), ACL_ERROR_REPEAT_INITIALIZE);
    CHECK_EQ(aclFinalize(), ACL_SUCCESS);
    CHECK_EQ(aclFinalize(), ACL_ERROR_REPEAT_FINALIZE);
    CHECK_EQ(aclInit(""), ACL_SUCCESS);   /* empty: no configuration */
    CHECK_EQ(aclFinalize(), ACL_SUCCESS);
}

TEST(init_config_file)
{
    char dir[1024];
    REQUIRE(tc_make_tmpdir(dir, sizeof dir));
    char file[1100];
    snprintf(file, sizeof file, "%s/acl.json", dir);
    CHECK_EQ(aclInit(file), ACL_ERROR_INVALID_FILE);   /* missing */
    CHECK_EQ(aclInit(dir), ACL_ERROR_INVALID_FILE);    /* a directory */
    FILE *f = fopen(file, "w");
    REQUIRE(f != NULL);
    fputs("{}\n", f);
    fclose(f);
    CHECK_EQ(aclInit(file), ACL_SUCCESS);
    CHECK_EQ(aclInit(file), ACL_ERROR_REPEAT_INITIALIZE);
    CHECK_EQ(aclFinalize(), ACL_SUCCESS);
    tc_rm_rf(dir);
}

TEST(profiling_does_not_need_acl_init)
{
    uint32_t dev = 0;
    aclprofConfig *cfg = aclprofCreateConfig(&dev, 1, ACL_AICORE_NONE, NULL, ACL_PROF_ACL_API);
    CHECK_NOT_NULL(cfg);
    CHECK_EQ(aclprofDestroyConfig(cfg), ACL_SUCCESS);
}

TEST(devices)
{
    uint32_t count = 0;
    CHECK_EQ(aclrtGetDeviceCount(NULL), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclrtGetDeviceCount(&count), ACL_SUCCESS);
    CHECK_EQ(count, 8);
    int32_t id = -5;
    CHECK_EQ(aclrtGetDevice(NULL), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclrtGetDevice(&id), RT_CONTEXT_NULL);
    CHECK_EQ(id, -5);
    CHECK_EQ(aclrtSetDevice(-1), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclrtSetDevice(8), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclrtSetDevice(3), ACL_SUCCESS);
    CHECK_EQ(aclrtGetDevice(&id), ACL_SUCCESS);
    CHECK_EQ(id, 3);
    CHECK_EQ(aclrtSetDevice(3), ACL_SUCCESS);   /* reference counted */
    CHECK_EQ(aclrtResetDevice(3), ACL_SUCCESS);
    CHECK_EQ(aclrtGetDevice(&id), ACL_SUCCESS);
    CHECK_EQ(aclrtResetDevice(3), ACL_SUCCESS);
    CHECK_EQ(aclrtGetDevice(&id), RT_CONTEXT_NULL);
    CHECK_EQ(aclrtResetDevice(3), ACL_SUCCESS);   /* not set: fine */
    CHECK_EQ(aclrtResetDevice(99), ACL_ERROR_INVALID_PARAM);
    /* The range follows the mock driver. */
    aclmockSetDeviceCount(16);
    CHECK_EQ(aclrtGetDeviceCount(&count), ACL_SUCCESS);
    CHECK_EQ(count, 16);
    CHECK_EQ(aclrtSetDevice(15), ACL_SUCCESS);
    CHECK_EQ(aclrtResetDevice(15), ACL_SUCCESS);
}

TEST(contexts)
{
    aclrtContext ctx = NULL, cur = NULL;
    CHECK_EQ(aclrtCreateContext(NULL, 0), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclrtCreateContext(&ctx, 8), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclrtGetCurrentContext(NULL), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclrtGetCurrentContext(&cur), RT_CONTEXT_NULL);
    CHECK_EQ(aclrtCreateContext(&ctx, 2), ACL_SUCCESS);
    REQUIRE(ctx != NULL);
    CHECK_EQ(aclrtGetCurrentContext(&cur), ACL_SUCCESS);
    CHECK(cur == ctx);
    int32_t id = -1;
    CHECK_EQ(aclrtGetDevice(&id), ACL_SUCCESS);
    CHECK_EQ(id, 2);
    /* SetDevice switches to the device's default context; SetCurrentContext back. */
    CHECK_EQ(aclrtSetDevice(5), ACL_SUCCESS);
    CHECK_EQ(aclrtGetCurrentContext(&cur), ACL_SUCCESS);
    CHECK(cur != ctx);
    aclrtContext dflt = cur;
    CHECK_EQ(aclrtSetCurrentContext(ctx), ACL_SUCCESS);
    CHECK_EQ(aclrtGetDevice(&id), ACL_SUCCESS);
    CHECK_EQ(id, 2);
    CHECK_EQ(aclrtDestroyContext(dflt), ACL_ERROR_INVALID_PARAM);   /* default: ResetDevice */
    CHECK_EQ(aclrtDestroyContext(ctx), ACL_SUCCESS);
    CHECK_EQ(aclrtGetCurrentContext(&cur), RT_CONTEXT_NULL);
    CHECK_EQ(aclrtDestroyContext(ctx), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclrtDestroyContext(NULL), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclrtSetCurrentContext(ctx), ACL_ERROR_INVALID_PARAM);
    int garbage;
    CHECK_EQ(aclrtSetCurrentContext(&garbage), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclrtSetCurrentContext(NULL), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclrtSetCurrentContext(dflt), ACL_SUCCESS);
    CHECK_EQ(aclrtResetDevice(5), ACL_SUCCESS);
    CHECK_EQ(aclrtSetCurrentContext(dflt), ACL_ERROR_INVALID_PARAM);   /* device released */
    CHECK_EQ(aclrtGetCurrentContext(&cur), RT_CONTEXT_NULL);
}

typedef struct thread_probe {
    aclrtContext ctx;
    aclError before;
    aclError set;
    aclError after;
    int32_t device;
} thread_probe;

static void *probe_thread(void *p)
{
    thread_probe *t = p;
    aclrtContext cur;
    t->before = aclrtGetCurrentContext(&cur);
    t->set = aclrtSetCurrentContext(t->ctx);
    t->after = aclrtGetDevice(&t->device);
    return NULL;
}

TEST(current_context_is_per_thread)
{
    aclrtContext ctx;
    CHECK_EQ(aclrtCreateContext(&ctx, 6), ACL_SUCCESS);
    thread_probe t = {.ctx = ctx, .device = -1};
    pthread_t th;
    pthread_create(&th, NULL, probe_thread, &t);
    pthread_join(th, NULL);
    CHECK_EQ(t.before, RT_CONTEXT_NULL);   /* a new thread has no context */
    CHECK_EQ(t.set, ACL_SUCCESS);
    CHECK_EQ(t.after, ACL_SUCCESS);
    CHECK_EQ(t.device, 6);
    CHECK_EQ(aclrtDestroyContext(ctx), ACL_SUCCESS);
}

typedef struct stale_probe {
    pthread_barrier_t *barrier;
    aclError first;
    aclError second;
} stale_probe;

static void *stale_thread(void *p)
{
    stale_probe *t = p;
    int32_t id;
    aclrtSetDevice(1);
    t->first = aclrtGetDevice(&id);
    pthread_barrier_wait(t->barrier);   /* main: ResetDevice(1) then SetDevice(1) */
    pthread_barrier_wait(t->barrier);
    t->second = aclrtGetDevice(&id);
    return NULL;
}

/* A default context released by the last ResetDevice and set up again is a new context:
 * a thread that had the old one current must not inherit the new one. */
TEST(released_context_is_not_inherited)
{
    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, 2);
    stale_probe t = {.barrier = &barrier};
    pthread_t th;
    pthread_create(&th, NULL, stale_thread, &t);
    pthread_barrier_wait(&barrier);
    CHECK_EQ(aclrtResetDevice(1), ACL_SUCCESS);
    CHECK_EQ(aclrtSetDevice(1), ACL_SUCCESS);
    pthread_barrier_wait(&barrier);
    pthread_join(th, NULL);
    pthread_barrier_destroy(&barrier);
    CHECK_EQ(t.first, ACL_SUCCESS);
    CHECK_EQ(t.second, RT_CONTEXT_NULL);
    int32_t id = -1;
    CHECK_EQ(aclrtGetDevice(&id), ACL_SUCCESS);
    CHECK_EQ(id, 1);
}

TEST(streams)
{
    aclrtStream s = NULL;
    CHECK_EQ(aclrtCreateStream(NULL), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclrtCreateStream(&s), RT_CONTEXT_NULL);   /* needs a device/context */
    CHECK_EQ(aclrtSynchronizeStream(NULL), RT_CONTEXT_NULL);
    CHECK_EQ(aclrtSynchronizeDevice(), RT_CONTEXT_NULL);
    CHECK_EQ(aclrtSetDevice(0), ACL_SUCCESS);
    CHECK_EQ(aclrtCreateStream(&s), ACL_SUCCESS);
    REQUIRE(s != NULL);
    CHECK_EQ(aclrtSynchronizeStream(s), ACL_SUCCESS);
    CHECK_EQ(aclrtSynchronizeStream(NULL), ACL_SUCCESS);   /* default stream */
    CHECK_EQ(aclrtSynchronizeDevice(), ACL_SUCCESS);
    CHECK_EQ(aclrtDestroyStream(s), ACL_SUCCESS);
    CHECK_EQ(aclrtDestroyStream(s), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclrtSynchronizeStream(s), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclrtDestroyStream(NULL), ACL_ERROR_INVALID_PARAM);
    /* Streams go with their context. */
    aclrtContext ctx;
    CHECK_EQ(aclrtCreateContext(&ctx, 1), ACL_SUCCESS);
    aclrtStream s2;
    CHECK_EQ(aclrtCreateStream(&s2), ACL_SUCCESS);
    CHECK_EQ(aclrtDestroyContext(ctx), ACL_SUCCESS);
    CHECK_EQ(aclrtDestroyStream(s2), ACL_ERROR_INVALID_PARAM);
    /* ... and with the last ResetDevice of a default context. */
    CHECK_EQ(aclrtSetDevice(0), ACL_SUCCESS);   /* second reference to device 0 */
    CHECK_EQ(aclrtCreateStream(&s), ACL_SUCCESS);
    CHECK_EQ(aclrtResetDevice(0), ACL_SUCCESS);
    CHECK_EQ(aclrtSynchronizeStream(s), ACL_SUCCESS);
    CHECK_EQ(aclrtResetDevice(0), ACL_SUCCESS);
    CHECK_EQ(aclrtSynchronizeStream(s), ACL_ERROR_INVALID_PARAM);
}

TEST(fault_injection_and_reset)
{
    CHECK_EQ(aclmockFailNext("aclrtSetDevice", 1, 507033), ACL_SUCCESS);
    CHECK_EQ(aclrtSetDevice(0), 507033);
    CHECK_EQ(aclrtSetDevice(0), ACL_SUCCESS);
    CHECK_EQ(aclInit(NULL), ACL_SUCCESS);
    aclrtStream s;
    CHECK_EQ(aclrtCreateStream(&s), ACL_SUCCESS);
    aclmockReset();   /* everything released, this thread has no context any more */
    int32_t id;
    CHECK_EQ(aclrtGetDevice(&id), RT_CONTEXT_NULL);
    CHECK_EQ(aclrtDestroyStream(s), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclInit(NULL), ACL_SUCCESS);
    CHECK_EQ(aclFinalize(), ACL_SUCCESS);
}

int main(void)
{
    RUN(init_finalize);
    RUN(init_config_file);
    RUN(profiling_does_not_need_acl_init);
    RUN(devices);
    RUN(contexts);
    RUN(current_context_is_per_thread);
    RUN(released_context_is_not_inherited);
    RUN(streams);
    RUN(fault_injection_and_reset);
    return test_summary();
}
