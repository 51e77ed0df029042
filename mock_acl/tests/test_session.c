/* Sessions: aclprofInit/Finalize/Start/Stop, the precheck table, no-init behaviours and the
 * start/stop device rules of each CANN era (src/session.c). Every test runs in both eras.
 */
#include "test_session_common.h"

/* ---- aclprofInit ------------------------------------------------------------------ */

TEST(init_argument_checks)
{
    REQUIRE(tmp_begin());
    size_t n = strlen(g_tmp);
    CHECK_EQ(aclprofInit(NULL, 5), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclprofInit(g_tmp, 0), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclprofInit(g_tmp, 4096), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclprofInit(g_tmp, n + 1), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclprofInit(g_tmp, n - 1), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclmockGetMode(), ACLMOCK_MODE_OFF);
    CHECK_EQ(aclprofInit(g_tmp, n), ACL_SUCCESS);
    CHECK_EQ(aclmockGetMode(), ACLMOCK_MODE_API_CTRL);
    CHECK_EQ(aclprofInit(g_tmp, n), ACL_ERROR_REPEAT_INITIALIZE);
    CHECK_EQ(aclprofFinalize(), ACL_SUCCESS);
    CHECK_EQ(aclmockGetMode(), ACLMOCK_MODE_OFF);
    /* 2026 Init creates nothing: the directory appears when data starts; RT0 creates it. */
    char sub[PATH_MAX];
    snprintf(sub, sizeof sub, "%s/later/deeper", g_tmp);
    CHECK_EQ(aclprofInit(sub, strlen(sub)), ACL_SUCCESS);
    CHECK(is_dir(sub) == !ERA_2026);
    aclprofConfig *cfg = config1(0, ACL_PROF_ACL_API);
    CHECK_EQ(aclprofStart(cfg), ACL_SUCCESS);
    CHECK(is_dir(sub));
    CHECK_EQ(aclprofFinalize(), ACL_SUCCESS);
    CHECK_EQ(aclprofDestroyConfig(cfg), ACL_SUCCESS);
    tmp_end();
}

TEST(init_invalid_path)
{
    REQUIRE(tmp_begin());
    /* Utils::CheckPathWithInvalidChar's list (audit row 8), and nothing else, in 2026. RT0
     * (2025) has no such check: it creates the directory at Init. */
    const char *const invalid[] = {"\n", "\f", "\r", "\b", "\t", "\v", "\x7f", "\"", "'",
                                   "\\", "%", ">", "<", "|", "&", "$", ";", "`"};
    for (size_t i = 0; i < sizeof invalid / sizeof invalid[0]; i++) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/x%sy", g_tmp, invalid[i]);
        if (ERA_2026) {
            CHECK_EQ(aclprofInit(path, strlen(path)), ACL_ERROR_INVALID_FILE);
            CHECK_EQ(aclmockGetMode(), ACLMOCK_MODE_OFF);
            CHECK(!is_dir(path));
        } else {
            CHECK_EQ(aclprofInit(path, strlen(path)), ACL_SUCCESS);
            CHECK(is_dir(path));
            CHECK_EQ(aclprofFinalize(), ACL_SUCCESS);
        }
    }
    /* Other control bytes, shell characters outside the list and UTF-8 pass. */
    char ok[PATH_MAX];
    snprintf(ok, sizeof ok, "%s/\x01\x1b(){}*?#!~=+@^,\xc3\xa9", g_tmp);
    CHECK_EQ(aclprofInit(ok, strlen(ok)), ACL_SUCCESS);
    CHECK_EQ(aclprofFinalize(), ACL_SUCCESS);
    tmp_end();
}

TEST(init_relative_path_is_made_absolute)
{
    REQUIRE(tmp_begin());
    char cwd[PATH_MAX];
    REQUIRE(getcwd(cwd, sizeof cwd) != NULL);
    REQUIRE(chdir(g_tmp) == 0);
    char base[PATH_MAX];   /* g_tmp with any symlink resolved, as getcwd reports it */
    REQUIRE(getcwd(base, sizeof base) != NULL);
    const char rel[] = "./out/../out2//x/.";
    CHECK_EQ(aclprofInit(rel, strlen(rel)), ACL_SUCCESS);
    aclprofConfig *cfg = config1(1, ACL_PROF_ACL_API);
    CHECK_EQ(aclprofStart(cfg), ACL_SUCCESS);
    CHECK_EQ(aclprofStop(cfg), ACL_SUCCESS);
    REQUIRE(chdir(cwd) == 0);
    char out[PATH_MAX + 16];
    snprintf(out, sizeof out, "%s/out2/x", base);
    CHECK(is_dir(out));
    char names[4][256];
    REQUIRE(prof_dirs(out, names, 4) == 1);
    char path[PATH_MAX * 2];
    snprintf(path, sizeof path, "%s/%s/host/mock_session.json", out, names[0]);
    char *json = tc_read_file(path);
    REQUIRE(json != NULL);
    char want[PATH_MAX + 32];
    snprintf(want, sizeof want, "\"initPath\": \"%s\"", out);
    CHECK(strstr(json, want) != NULL);
    free(json);
    aclprofDestroyConfig(cfg);
    tmp_end();
}

/* ---- the precheck table (reference 3.1) ---------------------------------------------- */

/* The OFF column; 2026 is tested further in noinit_2026. */
TEST(precheck_off)
{
    aclprofConfig *cfg = config1(0, ACL_PROF_ACL_API);
    REQUIRE(cfg != NULL);
    if (!ERA_2026) {
        CHECK_EQ(aclprofStart(cfg), ACL_ERROR_PROF_NOT_RUN);
        CHECK_EQ(aclprofStart(NULL), ACL_ERROR_INVALID_PARAM);   /* preCheckProfConfig */
        CHECK_EQ(aclprofStop(cfg), ACL_ERROR_PROF_NOT_RUN);
        CHECK_EQ(aclprofStop(NULL), ACL_ERROR_INVALID_PARAM);
        CHECK_EQ(aclprofFinalize(), ACL_ERROR_PROF_NOT_RUN);
    } else {
        CHECK_EQ(aclprofStop(cfg), ACL_SUCCESS);
        CHECK_EQ(aclprofStop(NULL), ACL_SUCCESS);
        CHECK_EQ(aclprofFinalize(), ACL_SUCCESS);
    }
    CHECK_EQ(aclmockGetMode(), ACLMOCK_MODE_OFF);
    /* The config preCheck runs before the mode check. */
    aclprofConfig *zero = config1(0, 0);
    REQUIRE(zero != NULL);
    CHECK_EQ(aclprofStart(zero), ACL_ERROR_INVALID_PARAM);
    aclprofDestroyConfig(zero);
    aclprofDestroyConfig(cfg);
}

TEST(precheck_api_ctrl)
{
    REQUIRE(tmp_begin());
    CHECK_EQ(init_tmp(), ACL_SUCCESS);
    CHECK_EQ(init_tmp(), ACL_ERROR_REPEAT_INITIALIZE);
    aclprofConfig *cfg = config1(0, ACL_PROF_ACL_API);
    CHECK_EQ(aclprofStop(cfg), ACL_SUCCESS);     /* nothing running */
    CHECK_EQ(aclprofStart(cfg), ACL_SUCCESS);
    CHECK_EQ(aclprofStop(cfg), ACL_SUCCESS);
    CHECK_EQ(aclprofFinalize(), ACL_SUCCESS);
    CHECK_EQ(aclprofFinalize(), ERA_2026 ? ACL_SUCCESS : ACL_ERROR_PROF_NOT_RUN);
    aclprofDestroyConfig(cfg);
    tmp_end();
}

/* SUBSCRIBE column: a subscribed model puts the mock in SUBSCRIBE mode. */
TEST(precheck_subscribe)
{
    REQUIRE(tmp_begin());
    char model[PATH_MAX];
    snprintf(model, sizeof model, "%s/model.txt", g_tmp);
    FILE *f = fopen(model, "w");
    REQUIRE(f != NULL);
    fputs("aclmock-model 1\nop\tconv\tConv2D\t1000\n", f);
    fclose(f);
    uint32_t id = 0;
    REQUIRE(aclmdlLoadFromFile(model, &id) == ACL_SUCCESS);
    int fds[2];
    REQUIRE(pipe(fds) == 0);
    aclprofSubscribeConfig *sub = aclprofCreateSubscribeConfig(1, ACL_AICORE_NONE, &fds[1]);
    REQUIRE(sub != NULL);
    REQUIRE(aclprofModelSubscribe(id, sub) == ACL_SUCCESS);
    CHECK_EQ(aclmockGetMode(), ACLMOCK_MODE_SUBSCRIBE);

    aclprofConfig *cfg = config1(0, ACL_PROF_ACL_API);
    for (int era = ACLMOCK_CANN_2025; era <= ACLMOCK_CANN_2026; era++) {
        aclmockSetCannEra(era);
        int null_code = era == ACLMOCK_CANN_2026 ? ACL_ERROR_PROF_API_CONFLICT
                                                 : ACL_ERROR_INVALID_PARAM;
        CHECK_EQ(init_tmp(), ACL_ERROR_PROF_API_CONFLICT);
        CHECK_EQ(aclprofStart(cfg), ACL_ERROR_PROF_API_CONFLICT);
        CHECK_EQ(aclprofStart(NULL), null_code);
        CHECK_EQ(aclprofStop(cfg), ACL_ERROR_PROF_API_CONFLICT);
        CHECK_EQ(aclprofStop(NULL), null_code);
        CHECK_EQ(aclprofFinalize(), ACL_ERROR_PROF_API_CONFLICT);
        CHECK_EQ(aclmockGetMode(), ACLMOCK_MODE_SUBSCRIBE);
    }
    CHECK_EQ(aclprofModelUnSubscribe(id), ACL_SUCCESS);   /* closes fds[1] */
    CHECK_EQ(aclmockGetMode(), ACLMOCK_MODE_OFF);
    CHECK_EQ(init_tmp(), ACL_SUCCESS);
    CHECK_EQ(aclprofFinalize(), ACL_SUCCESS);
    close(fds[0]);
    aclprofDestroySubscribeConfig(sub);
    aclprofDestroyConfig(cfg);
    aclmdlUnload(id);
    tmp_end();
}

TEST(noinit_2026)
{
    REQUIRE(tmp_begin());
    CHECK_EQ(aclmockSetCannEra(ACLMOCK_CANN_2026), ACL_SUCCESS);
    aclprofConfig *cfg = config1(2, ACL_PROF_ACL_API);
    CHECK_EQ(aclprofStop(cfg), ACL_SUCCESS);
    CHECK_EQ(aclprofStop(NULL), ACL_SUCCESS);
    CHECK_EQ(aclprofFinalize(), ACL_SUCCESS);
    CHECK_EQ(aclmockGetMode(), ACLMOCK_MODE_OFF);
    /* Start initialises with ACL_PROF_PATH. */
    CHECK_EQ(aclprofSetConfig(ACL_PROF_PATH, g_tmp, strlen(g_tmp)), ACL_SUCCESS);
    CHECK_EQ(aclprofStart(cfg), ACL_SUCCESS);
    CHECK_EQ(aclmockGetMode(), ACLMOCK_MODE_API_CTRL);
    CHECK_EQ(init_tmp(), ACL_ERROR_REPEAT_INITIALIZE);
    char names[4][256];
    CHECK_EQ(prof_dirs(g_tmp, names, 4), 1);
    CHECK_EQ(aclprofStop(cfg), ACL_SUCCESS);
    CHECK_EQ(aclprofFinalize(), ACL_SUCCESS);
    CHECK_EQ(aclprofDestroyConfig(cfg), ACL_SUCCESS);
    tmp_end();
}

TEST(noinit_2026_default_path_is_cwd)
{
    REQUIRE(tmp_begin());
    char cwd[PATH_MAX];
    REQUIRE(getcwd(cwd, sizeof cwd) != NULL);
    REQUIRE(chdir(g_tmp) == 0);
    aclmockSetCannEra(ACLMOCK_CANN_2026);
    CHECK_EQ(aclrtSetDevice(0), ACL_SUCCESS);   /* Start(NULL) runs the opened devices */
    CHECK_EQ(aclprofStart(NULL), ACL_SUCCESS);
    CHECK_EQ(aclprofFinalize(), ACL_SUCCESS);
    REQUIRE(chdir(cwd) == 0);
    char names[4][256];
    CHECK_EQ(prof_dirs(g_tmp, names, 4), 1);
    tmp_end();
}

TEST(cann_era_from_environment)
{
    char saved[16];
    snprintf(saved, sizeof saved, "%s", getenv("ACLMOCK_CANN") ? getenv("ACLMOCK_CANN") : "");
    setenv("ACLMOCK_CANN", "2026", 1);
    aclmockReset();
    CHECK_EQ(aclprofFinalize(), ACL_SUCCESS);
    setenv("ACLMOCK_CANN", "2025", 1);
    aclmockReset();
    CHECK_EQ(aclprofFinalize(), ACL_ERROR_PROF_NOT_RUN);
    setenv("ACLMOCK_CANN", "1999", 1);   /* invalid: warning, default (2026) */
    aclmockReset();
    CHECK_EQ(aclprofFinalize(), ACL_SUCCESS);
    unsetenv("ACLMOCK_CANN");
    aclmockReset();
    CHECK_EQ(aclprofFinalize(), ACL_SUCCESS);
    CHECK_EQ(aclmockSetCannEra(7), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclmockSetCannEra(2024), ACL_ERROR_INVALID_PARAM);
    setenv("ACLMOCK_CANN", saved, 1);
}

/* ---- aclprofStart validation ----------------------------------------------------------- */

TEST(start_validation)
{
    REQUIRE(tmp_begin());
    CHECK_EQ(init_tmp(), ACL_SUCCESS);
    aclprofConfig *zero = config1(0, 0);
    aclprofConfig *unknown = config1(0, ACL_PROF_ACL_API | (1ULL << 40));
    aclprofConfig *tsfw = config1(0, 0x400);   /* internal PROF_TASK_TSFW, not public */
    aclprofConfig *aicpu_model = config1(0, PROF_AICPU_MODEL);
    aclprofConfig *bad_metrics = aclprofCreateConfig((uint32_t[]){0}, 1,
                                                     (aclprofAicoreMetrics)9, NULL,
                                                     ACL_PROF_AICORE_METRICS);
    aclprofConfig *metrics_unused = aclprofCreateConfig((uint32_t[]){0}, 1,
                                                        (aclprofAicoreMetrics)9, NULL,
                                                        ACL_PROF_ACL_API);
    aclprofConfig *metrics_none = aclprofCreateConfig((uint32_t[]){0}, 1, ACL_AICORE_NONE,
                                                      NULL, ACL_PROF_AICORE_METRICS);
    aclprofConfig *metrics_max = aclprofCreateConfig((uint32_t[]){0}, 1,
                                                     ACL_AICORE_MEMORY_ACCESS, NULL,
                                                     ACL_PROF_AICORE_METRICS);
    CHECK_EQ(aclprofStart(zero), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclprofStart(unknown), ACL_ERROR_PROF_MODULES_UNSUPPORTED);
    CHECK_EQ(aclprofStart(tsfw), ACL_ERROR_PROF_MODULES_UNSUPPORTED);
    CHECK_EQ(aclprofStart(bad_metrics), ACL_ERROR_INVALID_PARAM);
    char names[8][256];
    CHECK_EQ(prof_dirs(g_tmp, names, 8), 0);   /* nothing started */
    CHECK_EQ(aclprofStart(aicpu_model), ACL_SUCCESS);
    CHECK_EQ(aclprofStop(aicpu_model), ACL_SUCCESS);
    CHECK_EQ(aclprofStart(metrics_unused), ACL_SUCCESS);
    CHECK_EQ(aclprofStop(metrics_unused), ACL_SUCCESS);
    CHECK_EQ(aclprofStart(metrics_none), ACL_SUCCESS);
    CHECK_EQ(aclprofStop(metrics_none), ACL_SUCCESS);
    CHECK_EQ(aclprofStart(metrics_max), ACL_SUCCESS);
    CHECK_EQ(aclprofStop(metrics_max), ACL_SUCCESS);
    /* Stop runs the same preCheck. */
    CHECK_EQ(aclprofStop(zero), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclprofStop(unknown), ACL_ERROR_PROF_MODULES_UNSUPPORTED);
    CHECK_EQ(aclprofFinalize(), ACL_SUCCESS);
    tmp_end();
}

TEST(every_public_bit_is_accepted)
{
    REQUIRE(tmp_begin());
    CHECK_EQ(init_tmp(), ACL_SUCCESS);
    const uint64_t bits[] = {
        ACL_PROF_ACL_API, ACL_PROF_TASK_TIME, ACL_PROF_AICORE_METRICS, ACL_PROF_AICPU,
        ACL_PROF_L2CACHE, ACL_PROF_HCCL_TRACE, ACL_PROF_TRAINING_TRACE, ACL_PROF_MSPROFTX,
        ACL_PROF_RUNTIME_API, ACL_PROF_GE_API_L0, ACL_PROF_TASK_TIME_L0,
        ACL_PROF_TASK_MEMORY, ACL_PROF_TASK_TIME_L2, ACL_PROF_OP_ATTR, ACL_PROF_TASK_TIME_L3,
        ACL_PROF_GE_API_L1, ACL_PROF_API_STATS, ACL_PROF_AICORE_SHAPE,
    };
    for (size_t i = 0; i < sizeof bits / sizeof bits[0]; i++) {
        aclprofConfig *cfg = config1(0, bits[i]);
        REQUIRE(cfg != NULL);
        /* The last two bits are newer than the 2025 PROF_SWITCH_SUPPORT (audit row 19). */
        bool newer = bits[i] == ACL_PROF_API_STATS || bits[i] == ACL_PROF_AICORE_SHAPE;
        int want = newer && !ERA_2026 ? ACL_ERROR_PROF_MODULES_UNSUPPORTED : ACL_SUCCESS;
        CHECK_EQ(aclprofStart(cfg), want);
        CHECK_EQ(aclprofStop(cfg), want);
        aclprofDestroyConfig(cfg);
    }
    CHECK_EQ(aclprofFinalize(), ACL_SUCCESS);
    tmp_end();
}

/* ---- start / stop device rules --------------------------------------------------------- */

/* 2026 (audit rows 4, 5): a second Start only runs CheckConfigConsistency over the devices
 * that run (host 64 included): same stored types -> 0 and nothing new starts, other types ->
 * 100010. Stop compares the same way, then stops every running device. */
TEST(start_stop_device_rules_2026)
{
    REQUIRE(tmp_begin());
    aclmockSetCannEra(ACLMOCK_CANN_2026);
    CHECK_EQ(init_tmp(), ACL_SUCCESS);
    aclprofConfig *d01 = config2(0, 1, ACL_PROF_ACL_API | ACL_PROF_TASK_TIME);
    aclprofConfig *d10 = config2(1, 0, ACL_PROF_ACL_API | ACL_PROF_TASK_TIME);
    aclprofConfig *d01_other = config2(0, 1, ACL_PROF_ACL_API);
    aclprofConfig *d12 = config2(1, 2, ACL_PROF_ACL_API | ACL_PROF_TASK_TIME);
    aclprofConfig *d23 = config2(2, 3, ACL_PROF_ACL_API | ACL_PROF_TASK_TIME);
    aclprofConfig *d23_other = config2(2, 3, ACL_PROF_ACL_API);
    char names[8][256];

    CHECK_EQ(aclprofStart(d01), ACL_SUCCESS);
    CHECK_EQ(aclprofStart(d01), ACL_SUCCESS);          /* same config: starts nothing */
    CHECK_EQ(aclprofStart(d10), ACL_SUCCESS);
    CHECK_EQ(aclprofStart(d01_other), ACL_ERROR_INVALID_PROFILING_CONFIG);
    CHECK_EQ(aclprofStart(d12), ACL_SUCCESS);          /* device 2 is NOT started */
    CHECK_EQ(aclprofStart(d23), ACL_SUCCESS);          /* only the host is compared */
    CHECK_EQ(aclprofStart(d23_other), ACL_ERROR_INVALID_PROFILING_CONFIG);   /* the host */
    CHECK_EQ(aclprofStart(NULL), ACL_SUCCESS);         /* no device opened: nothing compared */
    CHECK_EQ(aclrtSetDevice(0), ACL_SUCCESS);
    /* CANN's default types (audit R2) differ from every aclprofCreateConfig's */
    CHECK_EQ(aclprofStart(NULL), ACL_ERROR_INVALID_PROFILING_CONFIG);
    REQUIRE(prof_dirs(g_tmp, names, 8) == 1);
    CHECK(device_dir(names[0], 0) && device_dir(names[0], 1));
    CHECK(!device_dir(names[0], 2) && !device_dir(names[0], 3));
    CHECK_EQ(aclprofStop(d01_other), ACL_ERROR_INVALID_PROFILING_CONFIG);
    CHECK_EQ(aclprofStop(d23_other), ACL_ERROR_INVALID_PROFILING_CONFIG);   /* the host */
    CHECK_EQ(aclprofStop(d23), ACL_SUCCESS);           /* other devices, same types: stops all */
    CHECK_EQ(aclprofStop(d01), ACL_SUCCESS);           /* nothing running */
    CHECK_EQ(aclprofStart(d12), ACL_SUCCESS);          /* Start(d0,d1) Stop Start(d1,d2) */
    CHECK_EQ(prof_dirs(g_tmp, names, 8), 2);
    CHECK_EQ(aclprofStop(NULL), ACL_SUCCESS);          /* NULL: the running config */
    CHECK_EQ(aclprofStop(NULL), ACL_SUCCESS);
    /* A running config may be destroyed; its session keeps a copy. */
    CHECK_EQ(aclprofStart(d23), ACL_SUCCESS);
    CHECK_EQ(aclprofDestroyConfig(d23), ACL_SUCCESS);
    CHECK_EQ(aclprofStop(NULL), ACL_SUCCESS);
    CHECK_EQ(prof_dirs(g_tmp, names, 8), 3);
    CHECK_EQ(aclprofFinalize(), ACL_SUCCESS);
    aclprofDestroyConfig(d01);
    aclprofDestroyConfig(d10);
    aclprofDestroyConfig(d01_other);
    aclprofDestroyConfig(d12);
    aclprofDestroyConfig(d23_other);
    tmp_end();
}

/* 2025 (RT0 CheckDeviceTask, audit row 4): any running device -> 100042; the host is
 * skipped, so a disjoint set starts its devices. Stop stops only the config's devices. */
TEST(start_stop_device_rules_2025)
{
    REQUIRE(tmp_begin());
    aclmockSetCannEra(ACLMOCK_CANN_2025);
    CHECK_EQ(init_tmp(), ACL_SUCCESS);
    aclprofConfig *d01 = config2(0, 1, ACL_PROF_ACL_API | ACL_PROF_TASK_TIME);
    aclprofConfig *d10 = config2(1, 0, ACL_PROF_ACL_API | ACL_PROF_TASK_TIME);
    aclprofConfig *d01_other = config2(0, 1, ACL_PROF_ACL_API);
    aclprofConfig *d12 = config2(1, 2, ACL_PROF_ACL_API | ACL_PROF_TASK_TIME);
    aclprofConfig *d23 = config2(2, 3, ACL_PROF_ACL_API | ACL_PROF_TASK_TIME);
    aclprofConfig *tx = aclprofCreateConfig(NULL, 0, ACL_AICORE_NONE, NULL, ACL_PROF_MSPROFTX);
    REQUIRE(tx != NULL);
    char names[8][256];

    CHECK_EQ(aclprofStart(d01), ACL_SUCCESS);
    CHECK_EQ(aclprofStart(d01), ACL_ERROR_PROF_ALREADY_RUN);
    CHECK_EQ(aclprofStart(d10), ACL_ERROR_PROF_ALREADY_RUN);
    CHECK_EQ(aclprofStart(d01_other), ACL_ERROR_PROF_ALREADY_RUN);
    CHECK_EQ(aclprofStart(d12), ACL_ERROR_PROF_ALREADY_RUN);   /* device 1 runs */
    CHECK_EQ(aclprofStart(NULL), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclprofStart(d23), ACL_SUCCESS);                  /* disjoint: starts 2, 3 */
    CHECK_EQ(aclprofStart(tx), ACL_SUCCESS);                   /* host only: skipped */
    REQUIRE(prof_dirs(g_tmp, names, 8) == 1);
    CHECK(device_dir(names[0], 2) && device_dir(names[0], 3));
    CHECK_EQ(aclprofStop(NULL), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclprofStop(d01_other), ACL_ERROR_INVALID_PROFILING_CONFIG);
    CHECK_EQ(aclprofStop(d01), ACL_SUCCESS);                   /* 0 and 1 stop, 2 and 3 run */
    CHECK_EQ(aclprofStart(d23), ACL_ERROR_PROF_ALREADY_RUN);
    CHECK_EQ(aclprofStart(d01), ACL_SUCCESS);                  /* free again */
    CHECK_EQ(aclprofStop(d23), ACL_SUCCESS);
    /* The host task runs with d01's types: comparing it refuses the msproftx config. */
    CHECK_EQ(aclprofStop(tx), ACL_ERROR_INVALID_PROFILING_CONFIG);
    CHECK_EQ(aclprofStop(d10), ACL_SUCCESS);                   /* host count 2 -> 1 */
    CHECK_EQ(aclprofStart(d12), ACL_SUCCESS);                  /* same session */
    CHECK_EQ(prof_dirs(g_tmp, names, 8), 1);
    CHECK_EQ(aclprofStop(d12), ACL_SUCCESS);
    CHECK_EQ(aclprofStop(d10), ACL_SUCCESS);                   /* the host stops: it ends */
    CHECK_EQ(aclprofStart(d12), ACL_SUCCESS);
    CHECK_EQ(prof_dirs(g_tmp, names, 8), 2);
    CHECK_EQ(aclprofStop(d12), ACL_SUCCESS);
    CHECK_EQ(aclprofFinalize(), ACL_SUCCESS);
    aclprofDestroyConfig(d01);
    aclprofDestroyConfig(d10);
    aclprofDestroyConfig(d01_other);
    aclprofDestroyConfig(d12);
    aclprofDestroyConfig(d23);
    aclprofDestroyConfig(tx);
    tmp_end();
}

/* 2026 g_isRepeatInvoking: a Start that fails after the mode check, or a Finalize without
 * Stop, leaves it set; the next Start returns 0 and starts nothing until a Stop. */
TEST(repeat_flag_survives_failed_start_and_finalize_2026)
{
    REQUIRE(tmp_begin());
    aclmockSetCannEra(ACLMOCK_CANN_2026);
    CHECK_EQ(init_tmp(), ACL_SUCCESS);
    aclprofConfig *bad = aclprofCreateConfig((uint32_t[]){0}, 1, (aclprofAicoreMetrics)9, NULL,
                                             ACL_PROF_AICORE_METRICS);
    aclprofConfig *cfg = config1(0, ACL_PROF_ACL_API);
    char names[8][256];
    CHECK_EQ(aclprofStart(bad), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclprofStart(cfg), ACL_SUCCESS);
    CHECK_EQ(prof_dirs(g_tmp, names, 8), 0);   /* nothing started */
    CHECK_EQ(aclprofStop(cfg), ACL_SUCCESS);   /* clears the flag */
    CHECK_EQ(aclprofStart(cfg), ACL_SUCCESS);
    CHECK_EQ(prof_dirs(g_tmp, names, 8), 1);
    CHECK_EQ(aclprofFinalize(), ACL_SUCCESS);  /* without Stop */
    CHECK_EQ(init_tmp(), ACL_SUCCESS);
    CHECK_EQ(aclprofStart(cfg), ACL_SUCCESS);
    CHECK_EQ(prof_dirs(g_tmp, names, 8), 1);   /* nothing started */
    CHECK_EQ(aclprofStop(NULL), ACL_SUCCESS);  /* nothing runs: returns early, flag kept */
    CHECK_EQ(aclprofStart(cfg), ACL_SUCCESS);
    CHECK_EQ(prof_dirs(g_tmp, names, 8), 1);
    CHECK_EQ(aclprofStop(cfg), ACL_SUCCESS);
    CHECK_EQ(aclprofStart(cfg), ACL_SUCCESS);
    CHECK_EQ(prof_dirs(g_tmp, names, 8), 2);
    CHECK_EQ(aclprofFinalize(), ACL_SUCCESS);
    aclprofDestroyConfig(bad);
    aclprofDestroyConfig(cfg);
    tmp_end();
}

/* 2026 auto-init takes ProfAclMgr::GetResultPath(): the last result path of the process
 * (kept across Finalize) before ACL_PROF_PATH. */
TEST(noinit_2026_auto_init_path_order)
{
    REQUIRE(tmp_begin());
    aclmockSetCannEra(ACLMOCK_CANN_2026);
    char a[PATH_MAX], b[PATH_MAX];
    snprintf(a, sizeof a, "%s/a", g_tmp);
    snprintf(b, sizeof b, "%s/b", g_tmp);
    aclprofConfig *cfg = config1(0, ACL_PROF_ACL_API);
    char names[4][256];
    CHECK_EQ(aclprofSetConfig(ACL_PROF_PATH, a, strlen(a)), ACL_SUCCESS);
    CHECK_EQ(aclprofStart(cfg), ACL_SUCCESS);
    CHECK_EQ(aclprofStop(cfg), ACL_SUCCESS);
    CHECK_EQ(aclprofFinalize(), ACL_SUCCESS);
    CHECK_EQ(aclprofSetConfig(ACL_PROF_PATH, b, strlen(b)), ACL_SUCCESS);   /* OFF: kept aside */
    CHECK_EQ(aclprofStart(cfg), ACL_SUCCESS);
    CHECK_EQ(aclprofStop(cfg), ACL_SUCCESS);
    CHECK_EQ(aclprofFinalize(), ACL_SUCCESS);
    CHECK_EQ(prof_dirs(a, names, 4), 2);
    CHECK(!is_dir(b));
    aclprofDestroyConfig(cfg);
    tmp_end();
}

/* aclprofInit length: RT0 rejects > 4096, RT rejects >= 4096. A 4096-byte path then fails
 * in the mock's path handling (PATH_MAX) in 2025. Nothing is created at Init. */
TEST(init_length_limit_by_era)
{
    /* aclprofInit length: RT0 rejects > 4096, RT rejects >= 4096. Under g_tmp, in segments
     * of 127 bytes, so that RT0's mkdir at Init stays inside the test directory. */
    REQUIRE(tmp_begin());
    char path[4097];
    size_t n = (size_t)snprintf(path, sizeof path, "%s", g_tmp);
    while (n < 4096) {
        path[n] = (n - strlen(g_tmp)) % 128 == 0 ? '/' : 'a';
        n++;
    }
    path[4096] = '\0';
    /* 4096 passes RT0's length check, then exceeds the mock's PATH_MAX (100003). */
    CHECK_EQ(aclprofInit(path, 4096), ERA_2026 ? ACL_ERROR_INVALID_PARAM : ACL_ERROR_INVALID_FILE);
    CHECK_EQ(aclprofInit(path, 4095), ACL_ERROR_INVALID_PARAM);   /* strlen differs */
    CHECK_EQ(aclmockGetMode(), ACLMOCK_MODE_OFF);
    tmp_end();
}

TEST(equal_stored_types_count_as_same_config)
{
    REQUIRE(tmp_begin());
    CHECK_EQ(init_tmp(), ACL_SUCCESS);
    /* TASK_TIME is stored with 0x800 (and 0x40) added, so both store the same value. */
    aclprofConfig *a = config1(0, ACL_PROF_TASK_TIME);
    aclprofConfig *b = config1(0, ACL_PROF_TASK_TIME | ACL_PROF_TASK_TIME_L0);
    CHECK_EQ(aclprofStart(a), ACL_SUCCESS);
    /* 2025 refuses any second Start on a running device. */
    CHECK_EQ(aclprofStart(b), ERA_2026 ? ACL_SUCCESS : ACL_ERROR_PROF_ALREADY_RUN);
    CHECK_EQ(aclprofStop(b), ACL_SUCCESS);
    CHECK_EQ(aclprofFinalize(), ACL_SUCCESS);
    aclprofDestroyConfig(a);
    aclprofDestroyConfig(b);
    tmp_end();
}

TEST(device_count_shrinks_after_create)
{
    REQUIRE(tmp_begin());
    CHECK_EQ(init_tmp(), ACL_SUCCESS);
    aclprofConfig *cfg = config1(5, ACL_PROF_ACL_API);
    REQUIRE(cfg != NULL);
    CHECK_EQ(aclmockSetDeviceCount(4), ACL_SUCCESS);
    CHECK_EQ(aclprofStart(cfg), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclmockSetDeviceCount(0), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclmockSetDeviceCount(65), ACL_ERROR_INVALID_PARAM);
    CHECK_NULL(config1(4, ACL_PROF_ACL_API));
    aclprofDestroyConfig(cfg);
    tmp_end();
}

static void all_tests(void)
{
    RUN(init_argument_checks);
    RUN(init_invalid_path);
    RUN(init_relative_path_is_made_absolute);
    RUN(precheck_off);
    RUN(precheck_api_ctrl);
    RUN(precheck_subscribe);
    RUN(noinit_2026);
    RUN(noinit_2026_default_path_is_cwd);
    RUN(noinit_2026_auto_init_path_order);
    RUN(cann_era_from_environment);
    RUN(init_length_limit_by_era);
    RUN(start_validation);
    RUN(every_public_bit_is_accepted);
    RUN(start_stop_device_rules_2026);
    RUN(start_stop_device_rules_2025);
    RUN(repeat_flag_survives_failed_start_and_finalize_2026);
    RUN(equal_stored_types_count_as_same_config);
    RUN(device_count_shrinks_after_create);
}

int main(void)
{
    run_in_each_era(all_tests);
    return test_summary();
}
