/* The third fidelity audit's MISLEAD rows (fidelity-audit-3.md section 4): where the mock
 * was kinder than CANN's compiled sources. Each test names its audit row; each failed on the
 * mock before the fix. The era is set per test (aclmockSetCannEra), not by run_in_each_era.
 */
#include "test_session_common.h"
#include "test_subscribe_common.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>

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

/* ---- rows 9, 10, 23 (R8-R11): msproftx rules of the 2025 era --------------------------- */

static aclprofConfig *tx_start(int era)
{
    aclmockSetCannEra(era);
    if (!tmp_begin() || init_tmp() != ACL_SUCCESS)
        return NULL;
    aclprofConfig *cfg = config1(0, ACL_PROF_MSPROFTX);
    if (cfg == NULL || aclprofStart(cfg) != ACL_SUCCESS)
        return NULL;
    return cfg;
}

TEST(msproftx_2025_rules)
{
    aclprofConfig *cfg = tx_start(ACLMOCK_CANN_2025);
    REQUIRE(cfg != NULL);
    void *s = aclprofCreateStamp();
    REQUIRE(s != NULL);
    uint32_t id = 0;
    CHECK_EQ(aclprofPush(NULL), -1);               /* R8 (2026: 100000) */
    CHECK_EQ(aclprofRangeStart(NULL, &id), -1);    /* R8 */
    CHECK_EQ(aclprofRangeStop(42), ACL_SUCCESS);   /* R10: never range-started */
    char msg[160];
    memset(msg, 'x', sizeof msg);
    msg[128] = '\0';
    CHECK_EQ(aclprofMarkEx(msg, 128, (aclrtStream)&id), -1);   /* R11: 1..127 */
    msg[127] = '\0';
    CHECK_EQ(aclprofMarkEx(msg, 127, (aclrtStream)&id), ACL_SUCCESS);
    /* R9: RangeStart(stamp, NULL) crashes the 2025 library; the mock aborts, saying why. */
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0)
            dup2(devnull, 2);
        aclprofRangeStart(s, NULL);
        _exit(0);
    }
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
    aclprofDestroyStamp(s);
    aclprofStop(cfg);
    aclprofFinalize();
    aclprofDestroyConfig(cfg);
    tmp_end();
    /* The 2026 rules stay as they were. */
    cfg = tx_start(ACLMOCK_CANN_2026);
    REQUIRE(cfg != NULL);
    s = aclprofCreateStamp();
    REQUIRE(s != NULL);
    CHECK_EQ(aclprofPush(NULL), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclprofRangeStart(NULL, &id), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclprofRangeStart(s, NULL), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclprofRangeStop(42), -1);
    memset(msg, 'x', sizeof msg);
    msg[155] = '\0';
    CHECK_EQ(aclprofMarkEx(msg, 155, (aclrtStream)&id), ACL_SUCCESS);
    aclprofDestroyStamp(s);
    aclprofStop(cfg);
    aclprofFinalize();
    aclprofDestroyConfig(cfg);
    tmp_end();
}

/* ---- rows 2, 22 (R6, R7): msproftx after Stop and after Finalize ------------------------- */

TEST(msproftx_after_stop_and_finalize_2026)
{
    aclprofConfig *cfg = tx_start(ACLMOCK_CANN_2026);
    REQUIRE(cfg != NULL);
    aclrtStream stream = NULL;
    CHECK_EQ(aclrtSetDevice(0), ACL_SUCCESS);
    aclprofTensorInfo ti = { 0 };
    aclprofEventAttributes attr = { 0 };
    attr.messageType = ACL_PROF_MESSAGE_TYPE_TENSOR_INFO;
    attr.message.tensorInfo = &ti;
    ti.stream = stream;   /* the default stream of the current context */
    CHECK_EQ(aclprofRangePushEx(&attr), ACL_SUCCESS);
    CHECK_EQ(aclprofStop(cfg), ACL_SUCCESS);
    /* R6: still initialised until Finalize */
    void *s = aclprofCreateStamp();
    CHECK(s != NULL);
    CHECK_EQ(aclprofMark(s), ACL_SUCCESS);
    CHECK_EQ(aclprofPush(s), ACL_SUCCESS);
    CHECK_EQ(aclprofPop(), ACL_SUCCESS);
    CHECK_EQ(aclprofRangePop(), ACL_SUCCESS);
    aclmockStats st;
    aclmockGetStats(&st);
    CHECK_EQ(st.txEventsUnrecorded, 3);   /* mark, push/pop, RangePop: collected nowhere */
    CHECK_EQ(aclprofFinalize(), ACL_SUCCESS);
    /* R7: RangePop after Finalize returns the report buffer's 6; the others -1 / NULL */
    CHECK_EQ(aclprofRangePop(), 6);
    CHECK_EQ(aclprofMark(s), -1);
    CHECK(aclprofCreateStamp() == NULL);
    aclprofDestroyStamp(s);
    aclprofDestroyConfig(cfg);
    aclrtResetDevice(0);
    tmp_end();
}

int main(void)
{
    tmp_init();
    RUN(chip_910b_refuses_types_by_default);
    RUN(refused_start_before_init_initialises_2026);
    RUN(start_null_mixed_with_explicit_configs_2026);
    RUN(set_config_while_subscribed);
    RUN(msproftx_2025_rules);
    RUN(msproftx_after_stop_and_finalize_2026);
    tmp_cleanup();
    return tc_summary(__FILE__);
}
