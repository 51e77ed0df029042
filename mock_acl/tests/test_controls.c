/* The aclmock controls (src/control.c, src/common.c): fault injection, reset, settings from the
 * environment, and concurrent sessions. Every test runs in both eras.
 */
#include "test_session_common.h"

/* ---- fault injection and controls -------------------------------------------------------- */

TEST(fault_injection)
{
    REQUIRE(tmp_begin());
    aclmockSetCannEra(ACLMOCK_CANN_2026);   /* SetConfig before Init is 2026 only */
    CHECK_EQ(aclmockFailNext("aclprofInit", 2, ACL_ERROR_PROFILING_FAILURE), ACL_SUCCESS);
    CHECK_EQ(init_tmp(), ACL_ERROR_PROFILING_FAILURE);
    CHECK_EQ(init_tmp(), ACL_ERROR_PROFILING_FAILURE);
    CHECK_EQ(init_tmp(), ACL_SUCCESS);
    /* Before any other check, even argument checks. */
    CHECK_EQ(aclmockFailNext("aclprofStop", 1, 42), ACL_SUCCESS);
    int garbage;
    CHECK_EQ(aclprofStop((const aclprofConfig *)&garbage), 42);
    CHECK_EQ(aclprofStop((const aclprofConfig *)&garbage), ACL_ERROR_INVALID_PARAM);
    /* Pointer functions return NULL. */
    CHECK_EQ(aclmockFailNext("aclprofCreateConfig", 1, 1), ACL_SUCCESS);
    CHECK_NULL(config1(0, ACL_PROF_ACL_API));
    aclprofConfig *cfg = config1(0, ACL_PROF_ACL_API);
    CHECK_NOT_NULL(cfg);
    /* times == 0 disarms; re-arming replaces. */
    CHECK_EQ(aclmockFailNext("aclprofStart", 5, 1), ACL_SUCCESS);
    CHECK_EQ(aclmockFailNext("aclprofStart", 1, 2), ACL_SUCCESS);
    CHECK_EQ(aclprofStart(cfg), 2);
    CHECK_EQ(aclmockFailNext("aclprofStart", 3, 1), ACL_SUCCESS);
    CHECK_EQ(aclmockFailNext("aclprofStart", 0, 0), ACL_SUCCESS);
    CHECK_EQ(aclprofStart(cfg), ACL_SUCCESS);
    CHECK_EQ(aclmockFailNext("aclprofFinalize", 1, 9), ACL_SUCCESS);
    aclmockClearFaults();
    CHECK_EQ(aclprofFinalize(), ACL_SUCCESS);
    /* Unknown names are refused (a typo would never fire). */
    CHECK_EQ(aclmockFailNext("aclprofStrat", 1, 1), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclmockFailNext(NULL, 1, 1), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclmockFailNext("aclmockReset", 1, 1), ACL_ERROR_INVALID_PARAM);
    /* aclmockReset clears armed faults. */
    CHECK_EQ(aclmockFailNext("aclprofSetConfig", 1, 7), ACL_SUCCESS);
    aclmockReset();
    CHECK_EQ(set(ACL_PROF_DVPP_FREQ, "5"), ERA_2026 ? ACL_SUCCESS : ACL_ERROR_UNINITIALIZE);
    tmp_end();
}

TEST(fault_table_capacity)
{
    const char *names[] = {"aclprofInit", "aclprofFinalize", "aclprofStart", "aclprofStop",
                           "aclprofCreateConfig", "aclprofDestroyConfig", "aclprofSetConfig",
                           "aclprofModelSubscribe", "aclprofModelUnSubscribe",
                           "aclprofCreateSubscribeConfig", "aclprofDestroySubscribeConfig",
                           "aclprofGetOpDescSize", "aclprofGetOpNum", "aclprofGetOpTypeLen",
                           "aclprofGetOpType", "aclprofGetOpNameLen", "aclprofGetOpName",
                           "aclprofGetOpStart", "aclprofGetOpEnd", "aclprofGetOpDuration",
                           "aclprofGetModelId", "aclprofGetOpFlag", "aclprofGetOpAttriValue",
                           "aclprofGetStepTimestamp", "aclprofCreateStepInfo",
                           "aclprofDestroyStepInfo", "aclprofCreateStamp",
                           "aclprofDestroyStamp", "aclprofPush", "aclprofPop",
                           "aclprofRangeStart", "aclprofRangeStop", "aclprofMark"};
    size_t n = sizeof names / sizeof names[0];
    for (size_t i = 0; i < 32; i++)
        CHECK_EQ(aclmockFailNext(names[i], 1, 1), ACL_SUCCESS);
    CHECK_EQ(aclmockFailNext(names[n - 1], 1, 1), ACL_ERROR_INVALID_PARAM);   /* full */
    aclmockClearFaults();
    CHECK_EQ(aclmockFailNext(names[n - 1], 1, 1), ACL_SUCCESS);
}

TEST(reset_restores_fresh_state)
{
    REQUIRE(tmp_begin());
    CHECK_EQ(init_tmp(), ACL_SUCCESS);
    aclprofConfig *cfg = config1(0, ACL_PROF_ACL_API);
    CHECK_EQ(aclprofStart(cfg), ACL_SUCCESS);
    aclmockSetDeviceCount(2);
    aclmockSetCannEra(ERA_2026 ? ACLMOCK_CANN_2025 : ACLMOCK_CANN_2026);
    aclmockReset();
    CHECK_EQ(aclmockGetMode(), ACLMOCK_MODE_OFF);
    CHECK_EQ(aclprofDestroyConfig(cfg), ACL_ERROR_INVALID_PARAM);   /* forgotten */
    /* The era is the environment's again. */
    CHECK_EQ(aclprofFinalize(), ERA_2026 ? ACL_SUCCESS : ACL_ERROR_PROF_NOT_RUN);
    uint32_t count = 0;
    CHECK_EQ(aclrtGetDeviceCount(&count), ACL_SUCCESS);
    CHECK_EQ(count, 8);
    /* The PROF_ counter starts over. */
    CHECK_EQ(init_tmp(), ACL_SUCCESS);
    cfg = config1(1, ACL_PROF_ACL_API);
    CHECK_EQ(aclprofStart(cfg), ACL_SUCCESS);
    char names[4][256];
    REQUIRE(prof_dirs(g_tmp, names, 4) == 2);
    CHECK(strncmp(names[0], "PROF_000001_", 12) == 0);
    CHECK(strncmp(names[1], "PROF_000001_", 12) == 0);
    aclprofDestroyConfig(cfg);
    tmp_end();
}

TEST(device_count_from_environment)
{
    setenv("ACLMOCK_DEVICE_COUNT", "2", 1);
    aclmockReset();
    CHECK_NULL(config1(2, ACL_PROF_ACL_API));
    aclprofConfig *cfg = config1(1, ACL_PROF_ACL_API);
    CHECK_NOT_NULL(cfg);
    aclprofDestroyConfig(cfg);
    setenv("ACLMOCK_DEVICE_COUNT", "0", 1);   /* invalid: warning, default */
    aclmockReset();
    uint32_t count = 0;
    aclrtGetDeviceCount(&count);
    CHECK_EQ(count, 8);
    unsetenv("ACLMOCK_DEVICE_COUNT");
    aclmockReset();
}

TEST(controls)
{
    CHECK_EQ(aclmockVersion(), ACLMOCK_API_VERSION);
    CHECK_EQ(aclmockGetStats(NULL), ACL_ERROR_INVALID_PARAM);
    aclmockStats st;
    memset(&st, 0xff, sizeof st);
    CHECK_EQ(aclmockGetStats(&st), ACL_SUCCESS);
    CHECK_EQ(st.stampsInUse, 0);
    CHECK_EQ(st.txEvents, 0);
    CHECK_EQ(aclmockSetOpDescSize(72), ACL_SUCCESS);
    CHECK_EQ(aclmockSetOpDescSize(80), ACL_SUCCESS);
    CHECK_EQ(aclmockSetOpDescSize(64), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclmockSetTimeUnit(ACLMOCK_TIME_US), ACL_SUCCESS);
    CHECK_EQ(aclmockSetTimeUnit(2), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclmockSetRealtime(1), ACL_SUCCESS);
    CHECK_EQ(aclmockSetRealtime(2), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclmockSetWriteChunk(7), ACL_SUCCESS);
    CHECK_EQ(aclmockSetCorruptEvery(3), ACL_SUCCESS);
    CHECK_EQ(aclmockSetWriterDelayUs(100), ACL_SUCCESS);
    CHECK_EQ(aclmockSetWriterDelayUs(20000000), ACL_ERROR_INVALID_PARAM);
    aclmockSetWriterDelayUs(0);
    aclmockSetWriteChunk(0);
    aclmockSetCorruptEvery(0);
    aclmockSetRealtime(0);
}

/* ---- concurrency ------------------------------------------------------------------- */

static void *start_stop_worker(void *arg)
{
    uint32_t dev = (uint32_t)(uintptr_t)arg;
    for (int i = 0; i < 200; i++) {
        aclprofConfig *cfg = config1(dev, ACL_PROF_ACL_API);
        aclError r = aclprofStart(cfg);
        if (r == ACL_SUCCESS)
            aclprofStop(cfg);
        aclprofDestroyConfig(cfg);
    }
    return NULL;
}

TEST(concurrent_sessions_do_not_corrupt_state)
{
    REQUIRE(tmp_begin());
    CHECK_EQ(init_tmp(), ACL_SUCCESS);
    pthread_t th[4];
    for (uintptr_t i = 0; i < 4; i++)
        pthread_create(&th[i], NULL, start_stop_worker, (void *)i);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    CHECK_EQ(aclprofStop(NULL), ERA_2026 ? ACL_SUCCESS : ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclprofFinalize(), ACL_SUCCESS);
    tmp_end();
}

static void all_tests(void)
{
    RUN(fault_injection);
    RUN(fault_table_capacity);
    RUN(reset_restores_fresh_state);
    RUN(device_count_from_environment);
    RUN(controls);
    RUN(concurrent_sessions_do_not_corrupt_state);
}

int main(void)
{
    run_in_each_era(all_tests);
    return test_summary();
}
