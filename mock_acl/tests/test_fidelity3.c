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

/* ---- row 18b (R4): what a refused subscribe leaves behind -------------------------------- */

/* Static: the library writes -1 into them (a later test's reset must not hit a dead frame). */
static int g_fa[2], g_fb[2], g_fc[2];

static uint32_t load_on(uint32_t device)
{
    char text[128];
    snprintf(text, sizeof text, "aclmock-model 1\ndevice %u\nop\tconv\tConv2D\t1000\n",
             device);
    uint32_t id = 0;
    return load_text(text, &id) == ACL_SUCCESS ? id : UINT32_MAX;
}

TEST(refused_subscribe_on_an_idle_device_is_half_done)
{
    for (int era = ACLMOCK_CANN_2025; era <= ACLMOCK_CANN_2026; era++) {
        aclmockReset();
        aclmockSetCannEra(era);
        uint32_t a = load_on(0), b = load_on(1), c = load_on(2);
        REQUIRE(a != UINT32_MAX && b != UINT32_MAX && c != UINT32_MAX);
        REQUIRE(pipe(g_fa) == 0 && pipe(g_fb) == 0 && pipe(g_fc) == 0);
        int ra = g_fa[0], rb = g_fb[0], rc = g_fc[0], wa = g_fa[1], wb = g_fb[1];
        aclprofSubscribeConfig *ca = aclprofCreateSubscribeConfig(1, ACL_AICORE_NONE, &g_fa[1]);
        aclprofSubscribeConfig *cb = aclprofCreateSubscribeConfig(
            1, ACL_AICORE_PIPE_UTILIZATION, &g_fb[1]);
        aclprofSubscribeConfig *cc = aclprofCreateSubscribeConfig(1, ACL_AICORE_NONE, &g_fc[1]);
        REQUIRE(ca && cb && cc);
        CHECK_EQ(aclprofModelSubscribe(a, ca), ACL_SUCCESS);
        CHECK_EQ(aclprofModelSubscribe(c, cc), ACL_SUCCESS);
        CHECK_EQ(aclprofModelUnSubscribe(a), ACL_SUCCESS);   /* device 0's close deferred */
        CHECK_EQ(g_fa[1], wa);
        /* b's device is idle: started, b kept subscribed with the caller's int*, 100010 */
        CHECK_EQ(aclprofModelSubscribe(b, cb), ACL_ERROR_INVALID_PROFILING_CONFIG);
        CHECK_EQ(aclprofModelSubscribe(b, cb), ACL_ERROR_PROF_REPEAT_SUBSCRIBE);
        CHECK_EQ(execute_empty(b), ACL_SUCCESS);
        CHECK_EQ(aclmockWaitWriterIdle(5000), ACL_SUCCESS);
        unsigned char rec[80];
        CHECK_EQ(read(rb, rec, sizeof rec), 80);   /* its records reach the caller's fd */
        /* Its unsubscribe returns 0 and takes the host count to 0: device 0's deferred fd is
         * closed now, while c is still subscribed. */
        CHECK_EQ(aclprofModelUnSubscribe(b), ACL_SUCCESS);
        CHECK_EQ(g_fb[1], -1);
        CHECK_EQ(g_fa[1], -1);
        CHECK(fcntl(wa, F_GETFD) < 0);
        CHECK(fcntl(wb, F_GETFD) < 0);
        CHECK_EQ(aclmockGetMode(), ACLMOCK_MODE_SUBSCRIBE);
        CHECK_EQ(aclprofModelUnSubscribe(c), ACL_SUCCESS);
        CHECK_EQ(g_fc[1], -1);
        CHECK_EQ(aclmockGetMode(), ACLMOCK_MODE_OFF);
        aclprofDestroySubscribeConfig(ca);
        aclprofDestroySubscribeConfig(cb);
        aclprofDestroySubscribeConfig(cc);
        close(ra);
        close(rb);
        close(rc);
    }
}

/* ---- row 1b: records still queued at unsubscribe -------------------------------------- */

/* Subscribes a one-op model, runs it `n` times with a slow writer, unsubscribes at once and
 * reads the pipe to EOF; returns the bytes read. */
static size_t run_and_unsubscribe(int n)
{
    uint32_t m = load_on(0);
    make_pipe(0);
    int rfd = g_pipe[0][0];
    reader rd;
    reader_start(&rd, rfd, 80, 4096, false);
    aclprofSubscribeConfig *cfg = subscribe_std(m, 0);
    if (cfg == NULL)
        return 0;
    aclmockSetWriterDelayUs(1000);   /* 0.1 s for 100: the unsubscribe comes first */
    for (int i = 0; i < n; i++)
        execute_empty(m);
    aclprofModelUnSubscribe(m);
    reader_join(&rd);
    size_t got = rd.len;
    reader_free(&rd);
    aclprofDestroySubscribeConfig(cfg);
    close(rfd);
    return got;
}

TEST(unsubscribe_drops_queued_records_when_asked)
{
    /* Default: DRAIN, every record reaches the pipe. */
    size_t got = run_and_unsubscribe(100);
    aclmockStats st = stats();
    CHECK_EQ(st.recordsEmitted, 100);
    CHECK_EQ(st.recordsWritten, 100);
    CHECK_EQ(got, 100 * 80);
    CHECK_EQ(st.recordsDroppedAtUnsubscribe, 0);
    /* DROP, as CANN: what was still queued is lost, counted, and the counts reconcile. */
    aclmockReset();
    CHECK_EQ(aclmockSetUnsubscribePolicy(2), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclmockSetUnsubscribePolicy(ACLMOCK_UNSUB_DROP), ACL_SUCCESS);
    got = run_and_unsubscribe(100);
    st = stats();
    CHECK_EQ(st.recordsEmitted, 100);
    CHECK(st.recordsDroppedAtUnsubscribe > 0);
    CHECK_EQ(st.recordsDropped, st.recordsDroppedAtUnsubscribe);
    CHECK_EQ(st.recordsWritten + st.recordsDropped, st.recordsEmitted);
    CHECK_EQ(got, st.recordsWritten * 80);
    /* The environment sets it; aclmockReset re-reads it. */
    setenv("ACLMOCK_UNSUBSCRIBE", "drop", 1);
    aclmockReset();
    got = run_and_unsubscribe(50);
    CHECK(stats().recordsDroppedAtUnsubscribe > 0);
    unsetenv("ACLMOCK_UNSUBSCRIBE");
    aclmockReset();
}

/* ---- issue 22: CANN's thread shape (ACLMOCK_THREADS=cann; audit 3 section 1.3) ------------ */

TEST(cann_thread_shape)
{
    setenv("ACLMOCK_THREADS", "cann", 1);
    setenv("ACLMOCK_RESPONSE_WAIT_MS", "60000", 1);
    aclmockReset();
    unsetenv("ACLMOCK_THREADS");
    unsetenv("ACLMOCK_RESPONSE_WAIT_MS");
    uint32_t a = load_on(0), b = load_on(0), c = load_on(1);
    REQUIRE(a != UINT32_MAX && b != UINT32_MAX && c != UINT32_MAX);
    REQUIRE(pipe(g_fa) == 0 && pipe(g_fb) == 0 && pipe(g_fc) == 0);
    aclprofSubscribeConfig *ca = aclprofCreateSubscribeConfig(1, ACL_AICORE_NONE, &g_fa[1]);
    aclprofSubscribeConfig *cb = aclprofCreateSubscribeConfig(1, ACL_AICORE_NONE, &g_fb[1]);
    aclprofSubscribeConfig *cc = aclprofCreateSubscribeConfig(1, ACL_AICORE_NONE, &g_fc[1]);
    REQUIRE(ca && cb && cc);
    CHECK_EQ(threads_named("MSVP_Upld"), 0);
    /* device 0: its pair and the host's (64) */
    CHECK_EQ(aclprofModelSubscribe(a, ca), ACL_SUCCESS);
    CHECK_EQ(threads_named("MSVP_Upld_0"), 1);
    CHECK_EQ(threads_named("MSVP_Upld_64"), 1);
    CHECK_EQ(threads_named("MSVP_Upld_Pipe"), 2);
    CHECK_EQ(aclprofModelSubscribe(b, cb), ACL_SUCCESS);   /* same device: no new thread */
    CHECK_EQ(threads_named("MSVP_Upld"), 4);
    CHECK_EQ(aclprofModelSubscribe(c, cc), ACL_SUCCESS);   /* device 1: two more */
    CHECK_EQ(threads_named("MSVP_Upld_1"), 1);
    CHECK_EQ(threads_named("MSVP_Upld"), 6);
    CHECK_EQ(aclprofModelUnSubscribe(c), ACL_SUCCESS);     /* device 1's count 0: its pair ends */
    CHECK_EQ(threads_named_settled("MSVP_Upld_1", 0), 0);
    CHECK_EQ(threads_named_settled("MSVP_Upld", 4), 4);
    CHECK_EQ(aclprofModelUnSubscribe(a), ACL_SUCCESS);
    CHECK_EQ(aclprofModelUnSubscribe(b), ACL_SUCCESS);     /* the last: device 0 and host end */
    CHECK_EQ(threads_named_settled("MSVP_Upld", 0), 0);
    aclprofDestroySubscribeConfig(ca);
    aclprofDestroySubscribeConfig(cb);
    aclprofDestroySubscribeConfig(cc);
    close(g_fa[0]);
    close(g_fb[0]);
    close(g_fc[0]);
    /* Every Start has a response thread waiting for the device; Finalize ends them. */
    aclprofConfig *cfg = config1(0, ACL_PROF_ACL_API);
    REQUIRE(cfg != NULL);
    CHECK_EQ(aclprofInit(g_tmp, strlen(g_tmp)), ACL_SUCCESS);
    CHECK_EQ(aclprofStart(cfg), ACL_SUCCESS);
    CHECK_EQ(threads_named("DevRespHandler"), 1);
    CHECK_EQ(aclprofStop(cfg), ACL_SUCCESS);
    CHECK_EQ(threads_named("DevRespHandler"), 1);   /* still waiting: no device answers */
    CHECK_EQ(aclprofFinalize(), ACL_SUCCESS);
    CHECK_EQ(threads_named_settled("DevRespHandler", 0), 0);
    aclprofDestroyConfig(cfg);
    /* ACLMOCK_THREADS unset: none of them */
    aclmockReset();
    uint32_t d = load_on(0);
    REQUIRE(d != UINT32_MAX && pipe(g_fa) == 0);
    ca = aclprofCreateSubscribeConfig(1, ACL_AICORE_NONE, &g_fa[1]);
    CHECK_EQ(aclprofModelSubscribe(d, ca), ACL_SUCCESS);
    CHECK_EQ(threads_named("MSVP_Upld"), 0);
    CHECK_EQ(aclprofModelUnSubscribe(d), ACL_SUCCESS);
    aclprofDestroySubscribeConfig(ca);
    close(g_fa[0]);
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
    RUN(refused_subscribe_on_an_idle_device_is_half_done);
    RUN(unsubscribe_drops_queued_records_when_asked);
    RUN(cann_thread_shape);
    tmp_cleanup();
    return tc_summary(__FILE__);
}
