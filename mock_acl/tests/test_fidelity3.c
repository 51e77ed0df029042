/* The third fidelity audit's MISLEAD rows (fidelity-audit-3.md section 4): where the mock
 * was kinder than CANN's compiled sources. Each test names its audit row; each failed on the
 * mock before the fix. The era is set per test (aclmockSetCannEra), not by run_in_each_era.
 */
#include "test_session_common.h"
#include "test_subscribe_common.h"

/* ---- row 7b: SetConfig types by chip -------------------------------------------------- */

/* The compiled RT on a 910B (CHIP_CLOUD_V2): types 11, 13, 14 -> 100010 and 15 -> 100000
 * whatever the value, before it; the same values pass on a chip that supports them. */
TEST(chip_910b_refuses_types_by_default)
{
    for (int era = ACLMOCK_CANN_2025; era <= ACLMOCK_CANN_2026; era++) {
        aclmockReset();
        aclmockSetCannEra(era);
        REQUIRE(tmp_begin());
        CHECK_EQ(init_tmp(), ACL_SUCCESS);   /* 2025 needs it */
        CHECK_EQ(set(ACL_PROF_LOW_POWER_FREQ, "10"), ACL_ERROR_INVALID_PROFILING_CONFIG);
        CHECK_EQ(set(ACL_PROF_SYS_CPU_FREQ, "10"), ACL_ERROR_INVALID_PROFILING_CONFIG);
        CHECK_EQ(set(14, era == ACLMOCK_CANN_2026 ? "MatMul" : "opType:MatMul"),
                 ACL_ERROR_INVALID_PROFILING_CONFIG);
        CHECK_EQ(set(ACL_PROF_NTS_METRICS, "PipeUtilization"), ACL_ERROR_INVALID_PARAM);
        CHECK_EQ(set(ACL_PROF_DVPP_FREQ, "10"), ACL_SUCCESS);   /* a type the 910B has */
        CHECK_EQ(aclmockSetChip(7), ACL_ERROR_INVALID_PARAM);
        CHECK_EQ(aclmockSetChip(ACLMOCK_CHIP_ANY), ACL_SUCCESS);
        CHECK_EQ(set(ACL_PROF_LOW_POWER_FREQ, "10"), ACL_SUCCESS);
        CHECK_EQ(set(ACL_PROF_SYS_CPU_FREQ, "10"), ACL_SUCCESS);
        CHECK_EQ(set(14, era == ACLMOCK_CANN_2026 ? "MatMul" : "opType:MatMul"), ACL_SUCCESS);
        CHECK_EQ(set(ACL_PROF_NTS_METRICS, "PipeUtilization"),
                 era == ACLMOCK_CANN_2026 ? ACL_SUCCESS : ACL_ERROR_INVALID_PARAM);
        CHECK_EQ(set(ACL_PROF_LOW_POWER_FREQ, "0"), ACL_ERROR_INVALID_PROFILING_CONFIG);
        CHECK_EQ(aclprofFinalize(), ACL_SUCCESS);
        tmp_end();
    }
    /* The environment picks the chip, and aclmockReset re-reads it. */
    setenv("ACLMOCK_CHIP", "any", 1);
    aclmockReset();
    CHECK_EQ(set(ACL_PROF_SYS_CPU_FREQ, "10"), ACL_SUCCESS);
    setenv("ACLMOCK_CHIP", "910b", 1);
    aclmockReset();
    CHECK_EQ(set(ACL_PROF_SYS_CPU_FREQ, "10"), ACL_ERROR_INVALID_PROFILING_CONFIG);
    unsetenv("ACLMOCK_CHIP");
    aclmockReset();
}

/* ---- row 6b (R1): a refused Start before Init leaves CANN initialised ------------------ */

TEST(refused_start_before_init_initialises_2026)
{
    REQUIRE(tmp_begin());
    aclmockSetCannEra(ACLMOCK_CANN_2026);
    CHECK_EQ(aclprofSetConfig(ACL_PROF_PATH, g_tmp, strlen(g_tmp)), ACL_SUCCESS);
    aclprofConfig *bad = config1(0, 1ULL << 40);   /* a bit outside PROF_SWITCH_SUPPORT */
    REQUIRE(bad != NULL);
    CHECK_EQ(aclprofStart(bad), ACL_ERROR_PROF_MODULES_UNSUPPORTED);
    CHECK_EQ(aclmockGetMode(), ACLMOCK_MODE_API_CTRL);
    CHECK_EQ(init_tmp(), ACL_ERROR_REPEAT_INITIALIZE);
    uint32_t id = 0;
    REQUIRE(load_text("aclmock-model 1\nop\tconv\tConv2D\t1000\n", &id) == ACL_SUCCESS);
    make_pipe(0);
    aclprofSubscribeConfig *sub = aclprofCreateSubscribeConfig(1, ACL_AICORE_NONE,
                                                               &g_pipe[0][1]);
    REQUIRE(sub != NULL);
    CHECK_EQ(aclprofModelSubscribe(id, sub), ACL_ERROR_PROF_API_CONFLICT);
    CHECK_EQ(aclprofFinalize(), ACL_SUCCESS);
    aclprofDestroySubscribeConfig(sub);
    aclprofDestroyConfig(bad);
    close(g_pipe[0][0]);
    close(g_pipe[0][1]);
    /* 2025 has no auto-init: the same Start leaves it OFF. */
    aclmockSetCannEra(ACLMOCK_CANN_2025);
    bad = config1(0, 1ULL << 40);
    CHECK_EQ(aclprofStart(bad), ACL_ERROR_PROF_MODULES_UNSUPPORTED);
    CHECK_EQ(aclmockGetMode(), ACLMOCK_MODE_OFF);
    aclprofDestroyConfig(bad);
    tmp_end();
}

/* ---- row 6c (R2, R5): Start(NULL) is CANN's platform default ---------------------------- */

TEST(start_null_mixed_with_explicit_configs_2026)
{
    REQUIRE(tmp_begin());
    aclmockSetCannEra(ACLMOCK_CANN_2026);
    CHECK_EQ(aclrtSetDevice(0), ACL_SUCCESS);
    CHECK_EQ(aclrtSetDevice(1), ACL_SUCCESS);
    CHECK_EQ(init_tmp(), ACL_SUCCESS);
    aclprofConfig *a = config1(0, ACL_PROF_ACL_API | ACL_PROF_TASK_TIME);
    aclprofConfig *stats_cfg = config1(0, ACL_PROF_API_STATS);
    /* SA SN: 100010 (the mock's old default was ACL_API|TASK_TIME: 0) */
    CHECK_EQ(aclprofStart(a), ACL_SUCCESS);
    CHECK_EQ(aclprofStart(NULL), ACL_ERROR_INVALID_PROFILING_CONFIG);
    CHECK_EQ(aclprofStop(a), ACL_SUCCESS);
    /* SN SA and SN TA (Stop A): 100010 */
    CHECK_EQ(aclprofStart(NULL), ACL_SUCCESS);
    CHECK_EQ(aclprofStart(a), ACL_ERROR_INVALID_PROFILING_CONFIG);
    CHECK_EQ(aclprofStop(a), ACL_ERROR_INVALID_PROFILING_CONFIG);
    CHECK_EQ(aclprofStop(NULL), ACL_SUCCESS);
    /* R5: Start(API_STATS) then Start(NULL): 0 (the default has no host entry, and
     * API_STATS starts no device task) */
    CHECK_EQ(aclprofStart(stats_cfg), ACL_SUCCESS);
    CHECK_EQ(aclprofStart(NULL), ACL_SUCCESS);
    CHECK_EQ(aclprofStop(stats_cfg), ACL_SUCCESS);
    CHECK_EQ(aclprofFinalize(), ACL_SUCCESS);
    aclprofDestroyConfig(a);
    aclprofDestroyConfig(stats_cfg);
    tmp_end();
}

/* ---- row 7c (R3): SetConfig while only subscriptions exist ------------------------------ */

TEST(set_config_while_subscribed)
{
    for (int era = ACLMOCK_CANN_2025; era <= ACLMOCK_CANN_2026; era++) {
        aclmockReset();
        aclmockSetCannEra(era);
        uint32_t id = 0;
        REQUIRE(load_text("aclmock-model 1\nop\tconv\tConv2D\t1000\n", &id) == ACL_SUCCESS);
        make_pipe(0);
        aclprofSubscribeConfig *sub = subscribe_std(id, 0);
        REQUIRE(sub != NULL);
        CHECK_EQ(aclmockGetMode(), ACLMOCK_MODE_SUBSCRIBE);
        CHECK_EQ(set(ACL_PROF_DVPP_FREQ, "10"), ACL_ERROR_INVALID_PROFILING_CONFIG);
        CHECK_EQ(set(ACL_PROF_STORAGE_LIMIT, "500MB"), ACL_ERROR_INVALID_PROFILING_CONFIG);
        CHECK_EQ(aclprofSetConfig(ACL_PROF_DVPP_FREQ, NULL, 0), ACL_ERROR_INVALID_PARAM);
        CHECK_EQ(aclprofModelUnSubscribe(id), ACL_SUCCESS);
        aclprofDestroySubscribeConfig(sub);
        close(g_pipe[0][0]);
    }
}

int main(void)
{
    tmp_init();
    RUN(chip_910b_refuses_types_by_default);
    RUN(refused_start_before_init_initialises_2026);
    RUN(start_null_mixed_with_explicit_configs_2026);
    RUN(set_config_while_subscribed);
    tmp_cleanup();
    return tc_summary(__FILE__);
}
