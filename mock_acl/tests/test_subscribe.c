/* Operator subscription: the main flow (subscribe, execute, read, decode), error codes
 * and modes, unload, faults, a helper host, concurrency and throughput (src/subscribe.c).
 */
#include "test_subscribe_common.h"

TEST(subscribe_execute_read)
{
    uint32_t model = load_std_model(2);
    make_pipe(0);
    int rfd = g_pipe[0][0];
    reader rd;
    reader_start(&rd, rfd, 80, 80 * 10, true);
    aclprofSubscribeConfig *cfg = subscribe_std(model, 0);
    REQUIRE(cfg != NULL);
    CHECK_EQ(aclmockGetMode(), ACLMOCK_MODE_SUBSCRIBE);
    CHECK(g_pipe[0][1] >= 0);
    uint64_t t0 = 0;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    t0 = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    for (int i = 0; i < N_EXEC; i++)
        CHECK_EQ(execute_empty(model), ACL_SUCCESS);
    CHECK_EQ(aclprofModelUnSubscribe(model), ACL_SUCCESS);
    CHECK_EQ(g_pipe[0][1], -1);             /* closed by the library */
    CHECK_EQ(aclmockGetMode(), ACLMOCK_MODE_OFF);
    reader_join(&rd);
    CHECK(rd.eof);
    CHECK_EQ(rd.errors, 0);
    REQUIRE(rd.len == (size_t)N_EXEC * 3 * 80);
    REQUIRE(rd.ndecoded == (size_t)N_EXEC * 3);

    uint64_t prev_end = 0, prev_index = 0;
    for (size_t i = 0; i < rd.ndecoded; i++) {
        const unsigned char *r = rd.buf + i * 80;
        int k = (int)(i % 3);
        CHECK_EQ_U64(rd32(r, OFF_SIG), ref_signature(r, 80));
        CHECK_EQ(rd32(r, OFF_MODEL), model);
        CHECK_EQ(rd32(r, OFF_FLAG), k_flags[k]);
        CHECK_EQ(rd32(r, OFF_TID), k_tids[k]);
        CHECK_EQ(rd32(r, OFF_DEV), 2);
        CHECK_EQ(rd32(r, 76), 0);            /* padding */
        CHECK_EQ(rd64(r, OFF_CUBE), 0);
        CHECK_EQ(rd64(r, OFF_VEC), 0);
        uint64_t start = rd64(r, OFF_START), end = rd64(r, OFF_END), dur = rd64(r, OFF_DUR);
        CHECK_EQ_U64(dur, end - start);
        CHECK(start >= t0);
        CHECK(start >= prev_end + (i ? 100 : 0));   /* monotonic, gap 100 ns */
        prev_end = end;
        if (k == 0)
            CHECK(dur >= 4000 && dur <= 6000);       /* 5000 +- 1000 jitter */
        else
            CHECK_EQ(dur, k == 1 ? 2000 : 3000);
        uint64_t ex = rd64(r, OFF_EXEC);
        CHECK(ex * 100 + 100 > dur * 80 && ex * 100 <= dur * 95);   /* 80-95%, floored */
        uint64_t idx = rd64(r, OFF_INDEX);
        CHECK(idx > prev_index);                     /* opIndex counts up from 1 */
        prev_index = idx;
        CHECK_STR_EQ(rd.names[i], k_names[k]);
        CHECK_STR_EQ(rd.types[i], k_types[k]);
        /* Getters on a one-record slice. */
        CHECK_EQ(aclprofGetModelId(r, 80, 0), model);
        CHECK_EQ_U64(aclprofGetOpStart(r, 80, 0), start);
        CHECK_EQ_U64(aclprofGetOpEnd(r, 80, 0), end);
        CHECK_EQ_U64(aclprofGetOpDuration(r, 80, 0), dur);
        CHECK_EQ(aclprofGetOpFlag(r, 80, 0), k_flags[k]);
    }
    CHECK_EQ(rd64(rd.buf, OFF_INDEX), 1);
    /* Jitter varies between executions but is reproducible (seed 7): not all equal. */
    CHECK(rd64(rd.buf, OFF_DUR) != rd64(rd.buf + 3 * 80, OFF_DUR) ||
          rd64(rd.buf, OFF_DUR) != rd64(rd.buf + 6 * 80, OFF_DUR));

    aclmockStats s = stats();
    CHECK_EQ(s.recordsEmitted, N_EXEC * 3);
    CHECK_EQ(s.recordsWritten, N_EXEC * 3);
    CHECK_EQ(s.recordsDropped, 0);
    CHECK_EQ(s.recordsCorrupted, 0);
    CHECK_EQ(s.bytesWritten, N_EXEC * 3 * 80);
    CHECK_EQ(s.writeCalls, N_EXEC * 3);      /* one write() per record */
    CHECK_EQ(s.nameTableEntries, 0);         /* every string fetched */

    /* Whole-buffer getters work too (CheckData validates all records each time). */
    uint32_t n = 0;
    CHECK_EQ(aclprofGetOpNum(rd.buf, rd.len, &n), ACL_SUCCESS);
    CHECK_EQ(n, N_EXEC * 3);
    CHECK_EQ(aclprofGetModelId(rd.buf, rd.len, (uint32_t)n - 1), model);
    CHECK_EQ(aclprofGetModelId(rd.buf, rd.len, (uint32_t)n), ACL_ERROR_INVALID_PARAM);

    CHECK_EQ(aclprofDestroySubscribeConfig(cfg), ACL_SUCCESS);
    close(rfd);
    reader_free(&rd);
}

TEST(subscribe_config)
{
    static int fd = 5;
    CHECK_NULL(aclprofCreateSubscribeConfig(1, ACL_AICORE_NONE, NULL));
    CHECK_NULL(aclprofCreateSubscribeConfig(2, ACL_AICORE_NONE, &fd));
    CHECK_NULL(aclprofCreateSubscribeConfig(-1, ACL_AICORE_NONE, &fd));
    aclprofSubscribeConfig *a = aclprofCreateSubscribeConfig(0, ACL_AICORE_NONE, &fd);
    aclprofSubscribeConfig *b = aclprofCreateSubscribeConfig(1, (aclprofAicoreMetrics)77, &fd);
    CHECK_NOT_NULL(a);   /* metrics unchecked at creation */
    CHECK_NOT_NULL(b);
    CHECK_EQ(aclprofDestroySubscribeConfig(NULL), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclprofDestroySubscribeConfig(a), ACL_SUCCESS);
    CHECK_EQ(aclprofDestroySubscribeConfig(a), ACL_ERROR_INVALID_PARAM);   /* twice */
    CHECK_EQ(aclprofDestroySubscribeConfig((aclprofSubscribeConfig *)&fd), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclprofDestroySubscribeConfig(b), ACL_SUCCESS);
}

TEST(subscribe_error_codes)
{
    uint32_t m1 = load_std_model(0), m2 = load_std_model(0), m3 = load_std_model(1);
    make_pipe(0);
    aclprofSubscribeConfig *cfg = aclprofCreateSubscribeConfig(1, ACL_AICORE_NONE, &g_pipe[0][1]);
    aclprofSubscribeConfig *other = aclprofCreateSubscribeConfig(1, ACL_AICORE_PIPE_UTILIZATION,
                                                                 &g_pipe[0][1]);
    aclprofSubscribeConfig *empty = aclprofCreateSubscribeConfig(0, ACL_AICORE_NONE, &g_pipe[0][1]);
    REQUIRE(cfg && other && empty);

    /* Unknown model first, even with a NULL config. */
    CHECK_EQ(aclprofModelSubscribe(999, NULL), ACL_ERROR_INVALID_MODEL_ID);
    CHECK_EQ(aclprofModelSubscribe(999, cfg), ACL_ERROR_INVALID_MODEL_ID);
    CHECK_EQ(aclprofModelSubscribe(m1, NULL), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclprofModelSubscribe(m1, empty), ACL_ERROR_INVALID_PARAM);  /* timeInfo 0, NONE */
    CHECK_EQ(aclprofModelUnSubscribe(999), ACL_ERROR_INVALID_MODEL_ID);
    CHECK_EQ(aclprofModelUnSubscribe(m1), ACL_ERROR_INVALID_MODEL_ID);    /* not subscribed */

    /* API_CTRL conflicts both ways. */
    char path[256];
    snprintf(path, sizeof path, "%s", tmp_path("prof"));
    CHECK_EQ(aclprofInit(path, strlen(path)), ACL_SUCCESS);
    CHECK_EQ(aclmockGetMode(), ACLMOCK_MODE_API_CTRL);
    CHECK_EQ(aclprofModelSubscribe(m1, cfg), ACL_ERROR_PROF_API_CONFLICT);
    CHECK_EQ(aclprofModelSubscribe(999, cfg), ACL_ERROR_INVALID_MODEL_ID);
    CHECK_EQ(aclprofModelUnSubscribe(m1), ACL_ERROR_PROF_API_CONFLICT);
    CHECK_EQ(aclprofFinalize(), ACL_SUCCESS);

    CHECK_EQ(aclprofModelSubscribe(m1, cfg), ACL_SUCCESS);
    CHECK_EQ(aclmockGetMode(), ACLMOCK_MODE_SUBSCRIBE);
    CHECK_EQ(aclprofInit(path, strlen(path)), ACL_ERROR_PROF_API_CONFLICT);
    CHECK_EQ(aclprofModelSubscribe(m1, cfg), ACL_ERROR_PROF_REPEAT_SUBSCRIBE);
    CHECK_EQ(aclprofModelSubscribe(m1, other), ACL_ERROR_PROF_REPEAT_SUBSCRIBE);  /* repeat first */
    /* Another config on the same device, or (host pseudo-device 64) on any device. */
    CHECK_EQ(aclprofModelSubscribe(m2, other), ACL_ERROR_INVALID_PROFILING_CONFIG);
    /* m3's device was idle: CANN started it and kept m3 subscribed before the host refused
     * the config (audit 3, R4): a half subscription, so a retry is a repeat. */
    CHECK_EQ(aclprofModelSubscribe(m3, other), ACL_ERROR_INVALID_PROFILING_CONFIG);
    CHECK_EQ(aclprofModelSubscribe(m2, cfg), ACL_SUCCESS);   /* same config: fine */
    CHECK_EQ(aclprofModelSubscribe(m3, cfg), ACL_ERROR_PROF_REPEAT_SUBSCRIBE);

    /* Three models share one fd: only the last unsubscribe closes it. */
    int w = g_pipe[0][1];
    CHECK_EQ(aclprofModelUnSubscribe(m1), ACL_SUCCESS);
    CHECK_EQ(g_pipe[0][1], w);
    CHECK(fcntl(w, F_GETFD) >= 0);
    CHECK_EQ(aclprofModelUnSubscribe(m1), ACL_ERROR_INVALID_MODEL_ID);
    CHECK_EQ(aclprofModelUnSubscribe(m2), ACL_SUCCESS);
    CHECK_EQ(aclmockGetMode(), ACLMOCK_MODE_SUBSCRIBE);
    CHECK_EQ(aclprofModelUnSubscribe(m3), ACL_SUCCESS);
    CHECK_EQ(g_pipe[0][1], -1);
    CHECK(fcntl(w, F_GETFD) < 0 && errno == EBADF);
    CHECK_EQ(aclmockGetMode(), ACLMOCK_MODE_OFF);
    /* After the last unsubscribe a different config is fine again. */
    make_pipe(1);
    aclprofSubscribeConfig *other2 = aclprofCreateSubscribeConfig(1, ACL_AICORE_PIPE_UTILIZATION,
                                                                  &g_pipe[1][1]);
    CHECK_EQ(aclprofModelSubscribe(m2, other2), ACL_SUCCESS);
    CHECK_EQ(aclprofModelUnSubscribe(m2), ACL_SUCCESS);
    CHECK_EQ(g_pipe[1][1], -1);

    /* Destroying a config does not affect a subscription made with it. */
    CHECK_EQ(aclprofDestroySubscribeConfig(cfg), ACL_SUCCESS);
    CHECK_EQ(aclprofModelSubscribe(m1, cfg), ACL_ERROR_INVALID_PARAM);   /* destroyed */
    aclprofDestroySubscribeConfig(other);
    aclprofDestroySubscribeConfig(other2);
    aclprofDestroySubscribeConfig(empty);
    close(g_pipe[0][0]);
    close(g_pipe[1][0]);
}

TEST(time_info_off)
{
    uint32_t model = load_std_model(0);
    make_pipe(0);
    reader rd;
    reader_start(&rd, g_pipe[0][0], 80, 800, true);
    aclprofSubscribeConfig *cfg = aclprofCreateSubscribeConfig(0, ACL_AICORE_ARITHMETIC_UTILIZATION,
                                                               &g_pipe[0][1]);
    CHECK_EQ(aclprofModelSubscribe(model, cfg), ACL_SUCCESS);
    execute_empty(model);
    CHECK_EQ(aclprofModelUnSubscribe(model), ACL_SUCCESS);
    reader_join(&rd);
    REQUIRE(rd.ndecoded == 3);
    for (size_t i = 0; i < 3; i++) {
        const unsigned char *r = rd.buf + i * 80;
        CHECK_EQ_U64(rd64(r, OFF_START), 0);
        CHECK_EQ_U64(rd64(r, OFF_END), 0);
        CHECK_EQ_U64(rd64(r, OFF_DUR), 0);
        CHECK_EQ_U64(rd64(r, OFF_EXEC), 0);
        CHECK_STR_EQ(rd.names[i], k_names[i]);
    }
    aclprofDestroySubscribeConfig(cfg);
    close(g_pipe[0][0]);
    reader_free(&rd);
}

TEST(microseconds_and_realtime)
{
    CHECK_EQ(aclmockSetTimeUnit(ACLMOCK_TIME_US), ACL_SUCCESS);
    CHECK_EQ(aclmockSetRealtime(1), ACL_SUCCESS);
    uint32_t model = 0;
    CHECK_EQ(load_text("aclmock-model 1\nop\ta\tA\t4000000\nop\tb\tB\t6000000\n", &model),
             ACL_SUCCESS);
    make_pipe(0);
    reader rd;
    reader_start(&rd, g_pipe[0][0], 80, 800, true);
    aclprofSubscribeConfig *cfg = subscribe_std(model, 0);
    REQUIRE(cfg != NULL);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    CHECK_EQ(execute_empty(model), ACL_SUCCESS);
    CHECK_EQ(execute_empty(model), ACL_SUCCESS);
    clock_gettime(CLOCK_MONOTONIC, &b);
    uint64_t a_us = (uint64_t)a.tv_sec * 1000000u + (uint64_t)a.tv_nsec / 1000u;
    uint64_t b_us = (uint64_t)b.tv_sec * 1000000u + (uint64_t)b.tv_nsec / 1000u;
    CHECK(b_us - a_us >= 20000);   /* 2 x (4 ms + 6 ms) slept */
    CHECK_EQ(aclprofModelUnSubscribe(model), ACL_SUCCESS);
    reader_join(&rd);
    REQUIRE(rd.ndecoded == 4);
    uint64_t prev = 0;
    for (size_t i = 0; i < 4; i++) {
        const unsigned char *r = rd.buf + i * 80;
        uint64_t s = rd64(r, OFF_START), e = rd64(r, OFF_END);
        CHECK(s >= a_us && e <= b_us + 1);
        CHECK(s >= prev);
        prev = e;
        CHECK_EQ_U64(rd64(r, OFF_DUR), e - s);
        uint64_t want = i % 2 ? 6000 : 4000;
        CHECK(e - s + 1 >= want && e - s <= want + 1);   /* us, +-1 from truncation */
    }
    aclprofDestroySubscribeConfig(cfg);
    close(g_pipe[0][0]);
    reader_free(&rd);
}

TEST(unload_subscribed_model)
{
    uint32_t model = load_std_model(0);
    make_pipe(0);
    reader rd;
    reader_start(&rd, g_pipe[0][0], 80, 800, true);
    aclprofSubscribeConfig *cfg = subscribe_std(model, 0);
    REQUIRE(cfg != NULL);
    for (int i = 0; i < 10; i++)
        execute_empty(model);
    CHECK_EQ(aclmockWaitWriterIdle(10000), ACL_SUCCESS);
    /* As in CANN (GE's unload path never tells the profiler): the subscription outlives
     * the model, the library keeps the fd, and it can no longer be unsubscribed. */
    CHECK_EQ(aclmdlUnload(model), ACL_SUCCESS);
    CHECK(g_pipe[0][1] >= 0);
    CHECK_EQ(aclmockGetMode(), ACLMOCK_MODE_SUBSCRIBE);
    CHECK_EQ(aclprofModelUnSubscribe(model), ACL_ERROR_INVALID_MODEL_ID);
    CHECK_EQ(aclprofModelSubscribe(model, cfg), ACL_ERROR_INVALID_MODEL_ID);
    CHECK_EQ(aclprofInit("/tmp", 4), ACL_ERROR_PROF_API_CONFLICT);   /* still subscribed */
    CHECK(g_pipe[0][1] >= 0);
    /* Only the reset (the process's end) releases it: the reader then sees EOF. */
    aclmockReset();
    CHECK_EQ(g_pipe[0][1], -1);
    reader_join(&rd);
    CHECK(rd.eof);
    CHECK_EQ(rd.ndecoded, 30);
    aclprofDestroySubscribeConfig(cfg);
    close(g_pipe[0][0]);
    reader_free(&rd);
}

TEST(fault_injection)
{
    uint32_t model = load_std_model(0);
    make_pipe(0);
    CHECK_EQ(aclmockFailNext("aclprofCreateSubscribeConfig", 1, ACL_ERROR_FAILURE), ACL_SUCCESS);
    CHECK_NULL(aclprofCreateSubscribeConfig(1, ACL_AICORE_NONE, &g_pipe[0][1]));
    aclprofSubscribeConfig *cfg = aclprofCreateSubscribeConfig(1, ACL_AICORE_NONE, &g_pipe[0][1]);
    REQUIRE(cfg != NULL);
    CHECK_EQ(aclmockFailNext("aclprofModelSubscribe", 2, ACL_ERROR_PROFILING_FAILURE), ACL_SUCCESS);
    CHECK_EQ(aclprofModelSubscribe(model, cfg), ACL_ERROR_PROFILING_FAILURE);
    CHECK_EQ(aclprofModelSubscribe(9999, cfg), ACL_ERROR_PROFILING_FAILURE);   /* before checks */
    CHECK_EQ(aclmockGetMode(), ACLMOCK_MODE_OFF);
    CHECK_EQ(aclprofModelSubscribe(model, cfg), ACL_SUCCESS);
    CHECK_EQ(aclmockFailNext("aclmdlExecute", 1, 507011), ACL_SUCCESS);
    CHECK_EQ(execute_empty(model), 507011);
    CHECK_EQ(stats().recordsEmitted, 0);
    CHECK_EQ(aclmockFailNext("aclprofModelUnSubscribe", 1, ACL_ERROR_FAILURE), ACL_SUCCESS);
    CHECK_EQ(aclprofModelUnSubscribe(model), ACL_ERROR_FAILURE);
    CHECK(g_pipe[0][1] >= 0);   /* still subscribed */
    CHECK_EQ(aclprofModelUnSubscribe(model), ACL_SUCCESS);
    CHECK_EQ(g_pipe[0][1], -1);

    unsigned char rec[80] = { 0 };
    wr32(rec, OFF_SIG, ref_signature(rec, 80));
    uint32_t n = 0;
    CHECK_EQ(aclmockFailNext("aclprofGetOpNum", 1, ACL_ERROR_INVALID_PARAM), ACL_SUCCESS);
    CHECK_EQ(aclprofGetOpNum(rec, 80, &n), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclprofGetOpNum(rec, 80, &n), ACL_SUCCESS);
    CHECK_EQ(aclmockFailNext("aclprofGetOpAttriValue", 1, 1), ACL_SUCCESS);
    CHECK_NULL(aclprofGetOpAttriValue(rec, 80, 0, ACL_SUBSCRIBE_ATTRI_THREADID));
    CHECK_EQ(aclmockFailNext("aclmdlLoadFromFile", 1, ACL_ERROR_BAD_ALLOC), ACL_SUCCESS);
    uint32_t id;
    CHECK_EQ(load_text("aclmock-model 1\n", &id), ACL_ERROR_BAD_ALLOC);
    /* Unload and DestroySubscribeConfig: the fault comes first and leaves the object. */
    CHECK_EQ(aclmockFailNext("aclmdlUnload", 1, ACL_ERROR_FAILURE), ACL_SUCCESS);
    CHECK_EQ(aclmdlUnload(9999), ACL_ERROR_FAILURE);   /* before the id check */
    CHECK_EQ(aclmockFailNext("aclmdlUnload", 1, ACL_ERROR_FAILURE), ACL_SUCCESS);
    CHECK_EQ(aclmdlUnload(model), ACL_ERROR_FAILURE);
    CHECK_EQ(execute_empty(model), ACL_SUCCESS);   /* still loaded */
    CHECK_EQ(aclmockFailNext("aclprofDestroySubscribeConfig", 1, ACL_ERROR_FAILURE), ACL_SUCCESS);
    CHECK_EQ(aclprofDestroySubscribeConfig(NULL), ACL_ERROR_FAILURE);   /* before the NULL check */
    CHECK_EQ(aclmockFailNext("aclprofDestroySubscribeConfig", 1, ACL_ERROR_FAILURE), ACL_SUCCESS);
    CHECK_EQ(aclprofDestroySubscribeConfig(cfg), ACL_ERROR_FAILURE);
    aclprofDestroySubscribeConfig(cfg);
    close(g_pipe[0][0]);
}

TEST(concurrent_models_one_pipe)
{
    enum { NM = 4, TIMES = 200 };
    uint32_t models[NM];
    for (int i = 0; i < NM; i++)
        models[i] = load_std_model((uint32_t)i);
    make_pipe(0);
    reader rd;
    reader_start(&rd, g_pipe[0][0], 80, 80 * 64, true);
    aclprofSubscribeConfig *cfg = aclprofCreateSubscribeConfig(1, ACL_AICORE_NONE, &g_pipe[0][1]);
    for (int i = 0; i < NM; i++)
        CHECK_EQ(aclprofModelSubscribe(models[i], cfg), ACL_SUCCESS);
    pthread_t t[NM];
    exec_arg args[NM];
    for (int i = 0; i < NM; i++) {
        args[i] = (exec_arg){ models[i], TIMES };
        pthread_create(&t[i], NULL, exec_main, &args[i]);
    }
    for (int i = 0; i < NM; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < NM; i++)
        CHECK_EQ(aclprofModelUnSubscribe(models[i]), ACL_SUCCESS);
    reader_join(&rd);
    CHECK_EQ(rd.ndecoded, NM * TIMES * 3);
    CHECK_EQ(rd.errors, 0);
    uint64_t last_end[NM] = { 0 };
    for (size_t i = 0; i < rd.ndecoded; i++) {
        const unsigned char *r = rd.buf + i * 80;
        uint32_t m = rd32(r, OFF_MODEL);
        REQUIRE(m >= models[0] && m <= models[NM - 1]);
        size_t k = m - models[0];
        CHECK_EQ(rd32(r, OFF_DEV), k);
        CHECK(rd64(r, OFF_START) >= last_end[k]);   /* per model: monotonic, in order */
        last_end[k] = rd64(r, OFF_END);
    }
    CHECK_EQ(stats().nameTableEntries, 0);
    aclprofDestroySubscribeConfig(cfg);
    close(g_pipe[0][0]);
    reader_free(&rd);
}

/* Not a pass/fail benchmark: prints the writer's rate to a fast reader. */
TEST(throughput)
{
    char *text = malloc(1000 * 20 + 32);
    REQUIRE(text != NULL);
    size_t o = (size_t)sprintf(text, "aclmock-model 1\n");
    for (int i = 0; i < 1000; i++)
        o += (size_t)sprintf(text + o, "op\top%d\tMatMul\t100\n", i);
    uint32_t model = 0;
    aclError ret = load_text(text, &model);
    free(text);
    REQUIRE(ret == ACL_SUCCESS);
    make_pipe(0);
    fcntl(g_pipe[0][1], F_SETPIPE_SZ, 1 << 20);
    reader rd;
    reader_start(&rd, g_pipe[0][0], 80, 80 * 4096, false);
    aclprofSubscribeConfig *cfg = subscribe_std(model, 0);
    REQUIRE(cfg != NULL);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < 150; i++)   /* 150000 records: below the 200000-record ring */
        execute_empty(model);
    CHECK_EQ(aclprofModelUnSubscribe(model), ACL_SUCCESS);
    reader_join(&rd);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double secs = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
    CHECK_EQ(rd.len, 150000 * 80);
    aclmockStats s = stats();
    printf("throughput: %.0f records/s (%llu records, %llu dropped, %.3f s)\n",
           (double)s.recordsWritten / secs, (unsigned long long)s.recordsWritten,
           (unsigned long long)s.recordsDropped, secs);
    aclprofDestroySubscribeConfig(cfg);
    close(g_pipe[0][0]);
    reader_free(&rd);
    /* 150000 unread names: the next aclmockReset frees them. */
}

/* Audit row 20: on a helper host most profiling calls answer 200006 first, and the u64
 * getters return it as their VALUE; the calls CANN does not check work as on any host. */
TEST(helper_host)
{
    uint32_t model = 0;
    REQUIRE(load_text("aclmock-model 1\nop\ta\tA\t100\n", &model) == ACL_SUCCESS);
    CHECK_EQ(aclmockSetHelperHost(2), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclmockSetHelperHost(1), ACL_SUCCESS);
    unsigned char rec[80] = { 0 };
    CHECK_EQ_U64(aclprofGetOpStart(rec, sizeof rec, 0), 200006);
    CHECK_EQ_U64(aclprofGetOpEnd(rec, sizeof rec, 0), 200006);
    CHECK_EQ_U64(aclprofGetOpDuration(rec, sizeof rec, 0), 200006);
    CHECK_EQ(aclprofGetModelId(rec, sizeof rec, 0), 200006);
    CHECK(aclprofGetOpAttriValue(rec, sizeof rec, 0, ACL_SUBSCRIBE_ATTRI_THREADID) == NULL);
    CHECK_EQ(aclprofInit("/tmp", 4), ACL_ERROR_FEATURE_UNSUPPORTED);
    CHECK(aclprofCreateStamp() == NULL);
    CHECK(aclprofCreateSubscribeConfig(1, ACL_AICORE_NONE, &g_pipe[0][1]) == NULL);
    CHECK_EQ(aclprofModelSubscribe(model, NULL), ACL_ERROR_FEATURE_UNSUPPORTED);
    /* Not checked by CANN (compiled RT): */
    size_t size = 0;
    CHECK_EQ(aclprofGetOpDescSize(&size), ACL_SUCCESS);
    CHECK_EQ(size, 80);
    CHECK(aclprofStr2Id("x") != UINT64_MAX);
    CHECK_EQ(aclprofRangePop(), ACL_ERROR_INVALID_PARAM);   /* its own check: nothing pushed */
    aclprofTensorInfo ti = { 0 };
    aclprofEventAttributes attr = { 0 };
    attr.messageType = ACL_PROF_MESSAGE_TYPE_TENSOR_INFO;
    attr.message.tensorInfo = &ti;
    CHECK_EQ(aclprofRangePushEx(&attr), ACL_SUCCESS);
    aclprofStepInfo *si = aclprofCreateStepInfo();
    CHECK(si != NULL);
    CHECK_EQ(aclprofGetStepTimestamp(si, ACL_STEP_START, NULL), ACL_SUCCESS);
    aclprofDestroyStepInfo(si);
    /* Stop: not initialised and NULL give 0 before the check; SetConfig's input errors
     * come first (L512 vs L526). */
    CHECK_EQ(aclprofStop(NULL), ACL_SUCCESS);
    CHECK_EQ(aclprofSetConfig(ACL_PROF_DVPP_FREQ, NULL, 0), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclprofSetConfig(ACL_PROF_DVPP_FREQ, "10", 2), ACL_ERROR_FEATURE_UNSUPPORTED);
    /* An injected fault still wins; the runtime and model calls are not profiling calls. */
    CHECK_EQ(aclmockFailNext("aclprofPop", 1, 500005), ACL_SUCCESS);
    CHECK_EQ(aclprofPop(), 500005);
    CHECK_EQ(aclprofPop(), ACL_ERROR_FEATURE_UNSUPPORTED);
    CHECK_EQ(execute_empty(model), ACL_SUCCESS);
    /* aclmockReset restores the default, and the environment sets it. */
    aclmockReset();
    CHECK_EQ(aclprofPop(), -1);
    setenv("ACLMOCK_HELPER_HOST", "1", 1);
    aclmockReset();
    CHECK_EQ(aclprofPop(), ACL_ERROR_FEATURE_UNSUPPORTED);
    unsetenv("ACLMOCK_HELPER_HOST");
    aclmockReset();
    CHECK_EQ(aclprofPop(), -1);
}

int main(void)
{
    tmp_init();
    RUN(subscribe_execute_read);
    RUN(subscribe_config);
    RUN(subscribe_error_codes);
    RUN(time_info_off);
    RUN(microseconds_and_realtime);
    RUN(unload_subscribed_model);
    RUN(fault_injection);
    RUN(concurrent_models_one_pipe);
    RUN(throughput);
    RUN(helper_host);
    int rc = test_summary();
    tmp_cleanup();
    return rc;
}
