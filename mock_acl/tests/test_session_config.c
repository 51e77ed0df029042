/* Configs (aclprofCreateConfig/DestroyConfig, the stored bits) and aclprofSetConfig
 * (src/session_config.c). Every test runs in both eras.
 */
#include "test_session_common.h"

/* ---- aclprofCreateConfig / DestroyConfig (reference 3.2) ------------------------------ */

TEST(create_config_rejections)
{
    uint32_t ids[65];
    for (uint32_t i = 0; i < 65; i++)
        ids[i] = i;
    int events = 0;
    const aclprofAicoreEvents *ev = (const aclprofAicoreEvents *)&events;
    CHECK_NULL(aclprofCreateConfig(NULL, 1, ACL_AICORE_NONE, NULL, ACL_PROF_ACL_API));
    CHECK_NULL(aclprofCreateConfig(ids, 1, ACL_AICORE_NONE, ev, ACL_PROF_ACL_API));
    aclmockSetDeviceCount(64);
    CHECK_NULL(aclprofCreateConfig(ids, 65, ACL_AICORE_NONE, NULL, ACL_PROF_ACL_API));
    aclmockSetDeviceCount(8);
    CHECK_NULL(aclprofCreateConfig(ids, 9, ACL_AICORE_NONE, NULL, ACL_PROF_ACL_API));
    uint32_t high[1] = {8};
    CHECK_NULL(aclprofCreateConfig(high, 1, ACL_AICORE_NONE, NULL, ACL_PROF_ACL_API));
    uint32_t host[1] = {64};
    CHECK_NULL(aclprofCreateConfig(host, 1, ACL_AICORE_NONE, NULL, ACL_PROF_ACL_API));
    uint32_t dup[3] = {1, 2, 1};
    CHECK_NULL(aclprofCreateConfig(dup, 3, ACL_AICORE_NONE, NULL, ACL_PROF_ACL_API));
    CHECK_NULL(aclprofCreateConfig(ids, 0, ACL_AICORE_NONE, NULL, ACL_PROF_ACL_API));
    CHECK_NULL(aclprofCreateConfig(NULL, 0, ACL_AICORE_NONE, NULL, ACL_PROF_ACL_API));
}

TEST(create_config_accepts)
{
    uint32_t ids[8] = {7, 0, 3, 1, 2, 4, 5, 6};
    aclprofConfig *all = aclprofCreateConfig(ids, 8, ACL_AICORE_NONE, NULL, ACL_PROF_ACL_API);
    CHECK_NOT_NULL(all);
    /* No device: only with MSPROFTX (the list may then be NULL). */
    aclprofConfig *tx = aclprofCreateConfig(NULL, 0, ACL_AICORE_NONE, NULL, ACL_PROF_MSPROFTX);
    CHECK_NOT_NULL(tx);
    /* Bits and metrics are not checked here but at Start. */
    aclprofConfig *odd = aclprofCreateConfig(ids, 1, (aclprofAicoreMetrics)77, NULL,
                                             1ULL << 50);
    CHECK_NOT_NULL(odd);
    aclmockSetDeviceCount(64);
    uint32_t many[64];
    for (uint32_t i = 0; i < 64; i++)
        many[i] = 63 - i;
    aclprofConfig *big = aclprofCreateConfig(many, 64, ACL_AICORE_NONE, NULL, ACL_PROF_ACL_API);
    CHECK_NOT_NULL(big);
    CHECK_EQ(aclprofDestroyConfig(all), ACL_SUCCESS);
    CHECK_EQ(aclprofDestroyConfig(tx), ACL_SUCCESS);
    CHECK_EQ(aclprofDestroyConfig(odd), ACL_SUCCESS);
    CHECK_EQ(aclprofDestroyConfig(big), ACL_SUCCESS);
}

TEST(destroy_config)
{
    CHECK_EQ(aclprofDestroyConfig(NULL), ACL_ERROR_INVALID_PARAM);
    aclprofConfig *cfg = config1(0, ACL_PROF_ACL_API);
    REQUIRE(cfg != NULL);
    CHECK_EQ(aclprofDestroyConfig(cfg), ACL_SUCCESS);
    CHECK_EQ(aclprofDestroyConfig(cfg), ACL_ERROR_INVALID_PARAM);   /* UB in the real one */
    int garbage = 0;
    CHECK_EQ(aclprofDestroyConfig((const aclprofConfig *)&garbage), ACL_ERROR_INVALID_PARAM);
    /* 2026 Stop returns 0 before looking at the config when not initialised. */
    CHECK_EQ(aclprofStop(cfg), ERA_2026 ? ACL_SUCCESS : ACL_ERROR_INVALID_PARAM);
    /* A destroyed config is refused by Start and Stop too; the 2026 Start auto-initialises
     * before it looks at the config (audit R1), so the Stop after it looks too. */
    CHECK_EQ(aclprofStart(cfg), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclprofStop(cfg), ACL_ERROR_INVALID_PARAM);
}

/* ---- stored bits -------------------------------------------------------------------- */

TEST(stored_bits_expansion)
{
    REQUIRE(tmp_begin());
    aclmockSetCannEra(ACLMOCK_CANN_2026);   /* API_STATS is 2026 only */
    CHECK_EQ(init_tmp(), ACL_SUCCESS);
    const uint64_t M = PROF_AICPU_MODEL;
    CHECK_EQ_U64(stored_types(ACL_PROF_ACL_API), ACL_PROF_ACL_API | M);
    CHECK_EQ_U64(stored_types(ACL_PROF_TASK_TIME), 0x2 | 0x800 | 0x40 | M);
    CHECK_EQ_U64(stored_types(ACL_PROF_TASK_TIME_L0), 0x800 | 0x40 | M);
    CHECK_EQ_U64(stored_types(ACL_PROF_TASK_TIME_L2), 0x2000 | 0x800 | 0x2 | 0x40 | M);
    CHECK_EQ_U64(stored_types(ACL_PROF_OP_ATTR), 0x4000 | 0x800 | 0x2 | 0x40 | M);
    CHECK_EQ_U64(stored_types(ACL_PROF_TASK_TIME_L3),
                 0x8000 | 0x2000 | 0x800 | 0x2 | 0x40 | M);
    CHECK_EQ_U64(stored_types(ACL_PROF_API_STATS | ACL_PROF_AICPU | ACL_PROF_TASK_TIME),
                 ACL_PROF_ACL_API | ACL_PROF_API_STATS);
    CHECK_EQ_U64(stored_types(ACL_PROF_MSPROFTX), ACL_PROF_MSPROFTX | M);
    CHECK_EQ(aclprofFinalize(), ACL_SUCCESS);
    tmp_end();
}

/* ---- aclprofSetConfig ---------------------------------------------------------------- */

TEST(set_config_arguments)
{
    CHECK_EQ(set(0, "1"), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(set(17, "1"), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(set(-1, "1"), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclprofSetConfig(ACL_PROF_PATH, NULL, 0), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclprofSetConfig(ACL_PROF_DVPP_FREQ, "10", 1), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclprofSetConfig(ACL_PROF_DVPP_FREQ, "10", 3), ACL_ERROR_INVALID_PARAM);
    char longv[300];
    memset(longv, 'a', sizeof longv);
    longv[257] = '\0';
    CHECK_EQ(set(ACL_PROF_SYS_MEM_SERVICEFLOW, longv), ACL_ERROR_INVALID_PARAM);   /* 257 */
    longv[256] = '\0';
    if (ERA_2026) {
        /* Without aclprofInit, any number of times; 15 and 16 exist. */
        CHECK_EQ(set(ACL_PROF_SYS_MEM_SERVICEFLOW, longv), ACL_SUCCESS);   /* 256: the limit */
        CHECK_EQ(set(ACL_PROF_DVPP_FREQ, "10"), ACL_SUCCESS);
        CHECK_EQ(set(ACL_PROF_DVPP_FREQ, "20"), ACL_SUCCESS);
        CHECK_EQ(set(ACL_PROF_PATH, "x"), ACL_SUCCESS);
    } else {
        /* RT0: the header ends at ACL_PROF_SCALE = 14, and SetConfig needs aclprofInit
         * (checked after the arguments). */
        CHECK_EQ(set(15, "PipeUtilization"), ACL_ERROR_INVALID_PARAM);
        CHECK_EQ(set(16, "x"), ACL_ERROR_INVALID_PARAM);
        CHECK_EQ(set(ACL_PROF_DVPP_FREQ, "10"), ACL_ERROR_UNINITIALIZE);
        CHECK_EQ(set(ACL_PROF_DVPP_FREQ, "0"), ACL_ERROR_UNINITIALIZE);
        REQUIRE(tmp_begin());
        CHECK_EQ(init_tmp(), ACL_SUCCESS);
        CHECK_EQ(set(ACL_PROF_SYS_MEM_SERVICEFLOW, longv), ACL_SUCCESS);
        CHECK_EQ(set(ACL_PROF_DVPP_FREQ, "10"), ACL_SUCCESS);
        CHECK_EQ(aclprofFinalize(), ACL_SUCCESS);
        CHECK_EQ(set(ACL_PROF_DVPP_FREQ, "10"), ACL_ERROR_UNINITIALIZE);
        tmp_end();
    }
}

/* The rules of ProfParamsAdapter::CheckApiConfigIsValid* and ParamValidation (audit row 7). */
TEST(set_config_values)
{
    REQUIRE(tmp_begin());
    CHECK_EQ(aclmockSetChip(ACLMOCK_CHIP_ANY), ACL_SUCCESS);   /* types 11, 13, 14, 15 too */
    CHECK_EQ(init_tmp(), ACL_SUCCESS);   /* 2025 needs it */
    const int BAD = ACL_ERROR_INVALID_PROFILING_CONFIG;
    CHECK_EQ(set(ACL_PROF_STORAGE_LIMIT, "200MB"), ACL_SUCCESS);
    CHECK_EQ(set(ACL_PROF_STORAGE_LIMIT, "4294967295MB"), ACL_SUCCESS);
    CHECK_EQ(set(ACL_PROF_STORAGE_LIMIT, "0000000250MB"), ACL_SUCCESS);   /* 10 digits */
    CHECK_EQ(set(ACL_PROF_STORAGE_LIMIT, ""), ACL_SUCCESS);               /* "no limit" */
    CHECK_EQ(set(ACL_PROF_STORAGE_LIMIT, "00000000250MB"), BAD);          /* 11 digits */
    CHECK_EQ(set(ACL_PROF_STORAGE_LIMIT, "250"), BAD);                    /* no unit */
    CHECK_EQ(set(ACL_PROF_STORAGE_LIMIT, "199MB"), BAD);
    CHECK_EQ(set(ACL_PROF_STORAGE_LIMIT, "4294967296MB"), BAD);
    CHECK_EQ(set(ACL_PROF_STORAGE_LIMIT, "300GB"), BAD);
    CHECK_EQ(set(ACL_PROF_STORAGE_LIMIT, "300mb"), BAD);
    CHECK_EQ(set(ACL_PROF_STORAGE_LIMIT, "MB"), BAD);
    CHECK_EQ(set(ACL_PROF_STORAGE_LIMIT, "-300MB"), BAD);

    const int freq100[] = {ACL_PROF_SYS_HARDWARE_MEM_FREQ, ACL_PROF_SYS_IO_FREQ,
                           ACL_PROF_DVPP_FREQ, ACL_PROF_LOW_POWER_FREQ};
    for (size_t i = 0; i < sizeof freq100 / sizeof freq100[0]; i++) {
        CHECK_EQ(set(freq100[i], "1"), ACL_SUCCESS);
        CHECK_EQ(set(freq100[i], "100"), ACL_SUCCESS);
        CHECK_EQ(set(freq100[i], "010"), ACL_SUCCESS);   /* 3 digits: fits "100" */
        CHECK_EQ(set(freq100[i], "0100"), BAD);          /* longer than "100" */
        CHECK_EQ(set(freq100[i], "0"), BAD);
        CHECK_EQ(set(freq100[i], "101"), BAD);
        CHECK_EQ(set(freq100[i], "1x"), BAD);
        CHECK_EQ(set(freq100[i], " 5"), BAD);
        CHECK_EQ(set(freq100[i], ""), BAD);
    }
    CHECK_EQ(set(ACL_PROF_SYS_HARDWARE_MEM_FREQ, "10000"), BAD);   /* no SYS_DEVICE_US */
    const int freq50[] = {ACL_PROF_SYS_INTERCONNECTION_FREQ, ACL_PROF_HOST_SYS_USAGE_FREQ,
                          ACL_PROF_SYS_CPU_FREQ};
    for (size_t i = 0; i < sizeof freq50 / sizeof freq50[0]; i++) {
        CHECK_EQ(set(freq50[i], "50"), ACL_SUCCESS);
        CHECK_EQ(set(freq50[i], "05"), ACL_SUCCESS);
        CHECK_EQ(set(freq50[i], "050"), BAD);
        CHECK_EQ(set(freq50[i], "51"), BAD);
        CHECK_EQ(set(freq50[i], "80"), BAD);
        CHECK_EQ(set(freq50[i], "0"), BAD);
    }
    CHECK_EQ(set(ACL_PROF_LLC_MODE, "read"), ACL_SUCCESS);
    CHECK_EQ(set(ACL_PROF_LLC_MODE, "write"), ACL_SUCCESS);
    CHECK_EQ(set(ACL_PROF_LLC_MODE, "READ"), BAD);
    CHECK_EQ(set(ACL_PROF_LLC_MODE, "read,write"), BAD);

    CHECK_EQ(set(ACL_PROF_HOST_SYS, "cpu"), ACL_SUCCESS);
    CHECK_EQ(set(ACL_PROF_HOST_SYS, "cpu,mem"), ACL_SUCCESS);
    CHECK_EQ(set(ACL_PROF_HOST_SYS, "mem,cpu,network,disk,osrt"), ACL_SUCCESS);
    CHECK_EQ(set(ACL_PROF_HOST_SYS, "cpu,cpu"), ACL_SUCCESS);   /* duplicates pass */
    CHECK_EQ(set(ACL_PROF_HOST_SYS, ""), ACL_SUCCESS);          /* Split("") is empty */
    CHECK_EQ(set(ACL_PROF_HOST_SYS, "numa"), ERA_2026 ? ACL_SUCCESS : BAD);
    CHECK_EQ(set(ACL_PROF_HOST_SYS, "cpu,,mem"), BAD);
    CHECK_EQ(set(ACL_PROF_HOST_SYS, "cpu,"), BAD);
    CHECK_EQ(set(ACL_PROF_HOST_SYS, ",cpu"), BAD);
    CHECK_EQ(set(ACL_PROF_HOST_SYS, "gpu"), BAD);
    CHECK_EQ(set(ACL_PROF_HOST_SYS, "cpu "), BAD);
    CHECK_EQ(set(ACL_PROF_HOST_SYS_USAGE, "mem,cpu"), ACL_SUCCESS);
    CHECK_EQ(set(ACL_PROF_HOST_SYS_USAGE, ""), ACL_SUCCESS);
    CHECK_EQ(set(ACL_PROF_HOST_SYS_USAGE, "network"), BAD);

    CHECK_EQ(set(ACL_PROF_SYS_MEM_SERVICEFLOW, "aaa,bbb"), ACL_SUCCESS);
    CHECK_EQ(set(ACL_PROF_SYS_MEM_SERVICEFLOW, "a b"), ACL_SUCCESS);   /* any non-empty text */
    CHECK_EQ(set(ACL_PROF_SYS_MEM_SERVICEFLOW, ""), BAD);
    if (ERA_2026) {
        CHECK_EQ(set(ACL_PROF_OPTYPE, "MatMul,Conv2D"), ACL_SUCCESS);
        CHECK_EQ(set(ACL_PROF_OPTYPE, "MatMul,MatMul"), ACL_SUCCESS);   /* skipped */
        CHECK_EQ(set(ACL_PROF_OPTYPE, ""), BAD);
        CHECK_EQ(set(ACL_PROF_OPTYPE, "MatMul,,Conv2D"), BAD);
        CHECK_EQ(set(ACL_PROF_NTS_METRICS, "PipeUtilization"), ACL_SUCCESS);
        CHECK_EQ(set(ACL_PROF_NTS_METRICS, "Memory"), ACL_ERROR_INVALID_PARAM);
        CHECK_EQ(set(ACL_PROF_PATH, "relative/dir"), ACL_SUCCESS);
        CHECK_EQ(set(ACL_PROF_PATH, ""), ACL_SUCCESS);
    } else {
        /* 14 is ACL_PROF_SCALE in the 2025 header. */
        CHECK_EQ(set(14, "opType:MatMul,Conv2D"), ACL_SUCCESS);
        CHECK_EQ(set(14, "opType:MatMul;opName:conv1"), ACL_SUCCESS);
        CHECK_EQ(set(14, ""), ACL_SUCCESS);
        CHECK_EQ(set(14, "MatMul,Conv2D"), BAD);
        CHECK_EQ(set(14, "opType:"), BAD);
        CHECK_EQ(set(14, "opType:a;opType:b"), BAD);
    }
    CHECK_EQ(set(2, "1"), BAD);   /* the retired ACL_PROF_AIV_METRICS slot */
    CHECK_EQ(aclprofFinalize(), ACL_SUCCESS);
    tmp_end();
}

/* 2026 MsprofSetConfig: ACL_PROF_PATH after init moves the output of the next Start; ""
 * changes nothing; a path with an invalid character is refused (audit row 7). */
TEST(set_config_path_after_init)
{
    REQUIRE(tmp_begin());
    aclmockSetCannEra(ACLMOCK_CANN_2026);
    char a[PATH_MAX], b[PATH_MAX];
    snprintf(a, sizeof a, "%s/a", g_tmp);
    snprintf(b, sizeof b, "%s/b", g_tmp);
    CHECK_EQ(aclprofInit(a, strlen(a)), ACL_SUCCESS);
    aclprofConfig *cfg = config1(0, ACL_PROF_ACL_API);
    CHECK_EQ(aclprofStart(cfg), ACL_SUCCESS);
    CHECK_EQ(aclprofSetConfig(ACL_PROF_PATH, b, strlen(b)), ACL_SUCCESS);
    CHECK_EQ(aclprofStop(cfg), ACL_SUCCESS);   /* the running session kept its directory */
    CHECK_EQ(set(ACL_PROF_PATH, ""), ACL_SUCCESS);
    CHECK_EQ(set(ACL_PROF_PATH, "/tmp/x|y"), ACL_ERROR_INVALID_PROFILING_CONFIG);
    CHECK_EQ(aclprofStart(cfg), ACL_SUCCESS);
    CHECK_EQ(aclprofStop(cfg), ACL_SUCCESS);
    char names[4][256];
    CHECK_EQ(prof_dirs(a, names, 4), 1);
    CHECK_EQ(prof_dirs(b, names, 4), 1);
    char path[PATH_MAX * 2];
    snprintf(path, sizeof path, "%s/%s/host/mock_session.json", b, names[0]);
    char *json = tc_read_file(path);
    REQUIRE(json != NULL);
    char want[PATH_MAX + 32];
    snprintf(want, sizeof want, "\"initPath\": \"%s\"", b);
    CHECK(strstr(json, want) != NULL);
    free(json);
    CHECK_EQ(aclprofFinalize(), ACL_SUCCESS);
    aclprofDestroyConfig(cfg);
    tmp_end();
}

static void all_tests(void)
{
    RUN(create_config_rejections);
    RUN(create_config_accepts);
    RUN(destroy_config);
    RUN(stored_bits_expansion);
    RUN(set_config_arguments);
    RUN(set_config_values);
    RUN(set_config_path_after_init);
}

int main(void)
{
    run_in_each_era(all_tests);
    return test_summary();
}
