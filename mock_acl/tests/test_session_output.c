/* The output of a session: the PROF_* directory, its JSON files, an uncreatable result
 * path (src/session_output.c). Every test runs in both eras.
 */
#include "test_session_common.h"

/* ---- output directory and files (reference 6) ------------------------------------------ */

TEST(output_directory_layout)
{
    REQUIRE(tmp_begin());
    CHECK_EQ(init_tmp(), ACL_SUCCESS);
    CHECK_EQ(aclprofSetConfig(ACL_PROF_STORAGE_LIMIT, "500MB", 5), ACL_SUCCESS);
    CHECK_EQ(aclprofSetConfig(ACL_PROF_HOST_SYS, "cpu,mem", 7), ACL_SUCCESS);
    uint64_t types = ACL_PROF_ACL_API | ACL_PROF_TASK_TIME;
    aclprofConfig *cfg = config2(3, 0, types);
    CHECK_EQ(aclprofStart(cfg), ACL_SUCCESS);

    char names[4][256];
    REQUIRE(prof_dirs(g_tmp, names, 4) == 1);
    CHECK(prof_name_valid(names[0], 1));
    char path[PATH_MAX * 2];
    const char *subs[] = {"host", "device_0", "device_3"};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s/%s", g_tmp, names[0], subs[i]);
        CHECK(is_dir(path));
    }
    snprintf(path, sizeof path, "%s/%s/device_64", g_tmp, names[0]);
    CHECK(!is_dir(path));
    snprintf(path, sizeof path, "%s/%s/device_1", g_tmp, names[0]);
    CHECK(!is_dir(path));

    char *dev = read_prof_file(names[0], "device_3", "mock_config.json");
    REQUIRE(dev != NULL);
    CHECK_EQ(tc_json_u64(dev, "deviceId", 999), 3);
    CHECK(strstr(dev, "\"devices\": [3, 0]") != NULL);
    CHECK_EQ_U64(tc_json_u64(dev, "dataTypeConfig", 0), types);
    CHECK_EQ_U64(tc_json_u64(dev, "dataTypeConfigStored", 0),
                 types | 0x800 | 0x40 | PROF_AICPU_MODEL);
    CHECK_EQ(tc_json_u64(dev, "aicoreMetrics", 0), ACL_AICORE_NONE);
    CHECK(strstr(dev, "\"ACL_PROF_STORAGE_LIMIT\": \"500MB\"") != NULL);
    CHECK(strstr(dev, "\"ACL_PROF_HOST_SYS\": \"cpu,mem\"") != NULL);
    CHECK(tc_json_u64(dev, "startMonotonicNs", 0) > 0);
    free(dev);

    char *ses = read_prof_file(names[0], "host", "mock_session.json");
    REQUIRE(ses != NULL);
    CHECK_EQ(tc_json_u64(ses, "pid", 0), getpid());
    CHECK(strstr(ses, "\"stopMonotonicNs\": null") != NULL);
    CHECK(strstr(ses, "\"msproftx\": false") != NULL);
    uint64_t start = tc_json_u64(ses, "startMonotonicNs", 0);
    free(ses);

    CHECK_EQ(aclprofStop(cfg), ACL_SUCCESS);
    ses = read_prof_file(names[0], "host", "mock_session.json");
    REQUIRE(ses != NULL);
    CHECK(tc_json_u64(ses, "stopMonotonicNs", 0) >= start);
    CHECK(tc_json_u64(ses, "stopRealtimeNs", 0) > 0);
    CHECK_EQ(tc_json_u64(ses, "startMonotonicNs", 1), start);
    free(ses);

    /* The counter goes on; a second session has its own directory. */
    CHECK_EQ(aclprofStart(cfg), ACL_SUCCESS);
    CHECK_EQ(aclprofFinalize(), ACL_SUCCESS);   /* Finalize stops it */
    REQUIRE(prof_dirs(g_tmp, names, 4) == 2);
    CHECK(prof_name_valid(names[1], 2));
    ses = read_prof_file(names[1], "host", "mock_session.json");
    REQUIRE(ses != NULL);
    CHECK(tc_json_u64(ses, "stopMonotonicNs", 0) > 0);
    free(ses);
    aclprofDestroyConfig(cfg);
    tmp_end();
}

/* Audit row 6c (R2): Start(NULL) runs CANN's platform default (msprofiler_acl_api.cpp:466-483,
 * platform_interface.cpp:223-230) on the devices the process opened, with no host entry. */
TEST(default_config_runs_opened_devices)
{
    REQUIRE(tmp_begin());
    aclmockSetCannEra(ACLMOCK_CANN_2026);   /* Start(NULL) is 2026 only */
    aclmockSetDeviceCount(3);
    CHECK_EQ(init_tmp(), ACL_SUCCESS);
    CHECK_EQ(aclprofStart(NULL), ACL_ERROR_INVALID_PARAM);   /* no device opened */
    aclmockReset();   /* the failed Start kept the 2026 start flag (see Sessions) */
    aclmockSetCannEra(ACLMOCK_CANN_2026);
    aclmockSetDeviceCount(3);
    CHECK_EQ(init_tmp(), ACL_SUCCESS);
    CHECK_EQ(aclrtSetDevice(0), ACL_SUCCESS);
    CHECK_EQ(aclrtSetDevice(2), ACL_SUCCESS);
    CHECK_EQ(aclprofStart(NULL), ACL_SUCCESS);
    char names[4][256];
    REQUIRE(prof_dirs(g_tmp, names, 4) == 1);
    char *dev = read_prof_file(names[0], "device_2", "mock_config.json");
    REQUIRE(dev != NULL);
    CHECK(strstr(dev, "\"devices\": [0, 2]") != NULL);   /* no host, no device 1 */
    const uint64_t cann_default = ACL_PROF_ACL_API | ACL_PROF_TASK_TIME | ACL_PROF_TASK_TIME_L0 |
                                  ACL_PROF_AICORE_METRICS | PROF_AICPU_MODEL;
    CHECK_EQ_U64(tc_json_u64(dev, "dataTypeConfigStored", 0), cann_default);
    CHECK_EQ(tc_json_u64(dev, "aicoreMetrics", 99), ACL_AICORE_PIPE_UTILIZATION);
    free(dev);
    CHECK(read_prof_file(names[0], "device_1", "mock_config.json") == NULL);
    CHECK_EQ(aclprofStop(NULL), ACL_SUCCESS);
    CHECK_EQ(aclprofFinalize(), ACL_SUCCESS);
    tmp_end();
}

TEST(uncreatable_directory)
{
    REQUIRE(tmp_begin());
    char file[PATH_MAX];
    snprintf(file, sizeof file, "%s/plainfile", g_tmp);
    FILE *f = fopen(file, "w");
    REQUIRE(f != NULL);
    fclose(f);
    char below[PATH_MAX + 8];
    snprintf(below, sizeof below, "%s/sub", file);
    if (!ERA_2026) {   /* RT0 creates the directory at Init */
        CHECK_EQ(aclprofInit(below, strlen(below)), ACL_ERROR_INVALID_FILE);
        CHECK_EQ(aclmockGetMode(), ACLMOCK_MODE_OFF);
        tmp_end();
        return;
    }
    CHECK_EQ(aclprofInit(below, strlen(below)), ACL_SUCCESS);   /* checked at Start */
    aclprofConfig *cfg = config1(0, ACL_PROF_ACL_API);
    CHECK_EQ(aclprofStart(cfg), ACL_ERROR_INVALID_FILE);
    CHECK_EQ(aclmockGetMode(), ACLMOCK_MODE_API_CTRL);
    CHECK_EQ(aclprofStop(cfg), ACL_SUCCESS);                    /* nothing started */
    CHECK_EQ(aclprofFinalize(), ACL_SUCCESS);
    aclprofDestroyConfig(cfg);
    tmp_end();
}

/* A model file of `nops` ops on `device` in g_tmp; its id. */
static uint32_t load_ops_model(uint32_t device, int nops)
{
    char path[PATH_MAX * 2], text[512];
    static int n;
    snprintf(path, sizeof path, "%s/m%d.txt", g_tmp, n++);
    int len = snprintf(text, sizeof text, "aclmock-model 1\ndevice %u\n", device);
    for (int i = 0; i < nops; i++)
        len += snprintf(text + len, sizeof text - (size_t)len, "op\top%d\tRelu\t1000\t0\n", i);
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        perror(path);
        exit(2);
    }
    fputs(text, f);
    fclose(f);
    uint32_t id = UINT32_MAX;
    CHECK_EQ(aclmdlLoadFromFile(path, &id), ACL_SUCCESS);
    return id;
}

/* What a session collected: the ops executed on its task-time devices while it ran, per
 * model, in device_<id>/mock_ops.json at its end (nothing before, after, or elsewhere). */
TEST(ops_collected_are_counted)
{
    REQUIRE(tmp_begin());
    uint32_t a = load_ops_model(0, 3), b = load_ops_model(0, 2), c = load_ops_model(1, 4);
    CHECK_EQ(execute_empty(a), ACL_SUCCESS);   /* before the session: not collected */
    CHECK_EQ(init_tmp(), ACL_SUCCESS);
    aclprofConfig *cfg = config1(0, ACL_PROF_ACL_API | ACL_PROF_TASK_TIME);
    CHECK_EQ(aclprofStart(cfg), ACL_SUCCESS);
    for (int i = 0; i < 5; i++)
        CHECK_EQ(execute_empty(a), ACL_SUCCESS);
    CHECK_EQ(execute_empty(b), ACL_SUCCESS);
    CHECK_EQ(execute_empty(c), ACL_SUCCESS);   /* device 1 is not profiled */
    char names[4][256];
    REQUIRE(prof_dirs(g_tmp, names, 4) == 1);
    CHECK(read_prof_file(names[0], "device_0", "mock_ops.json") == NULL);   /* written at the end */
    CHECK_EQ(aclprofStop(cfg), ACL_SUCCESS);
    CHECK_EQ(execute_empty(a), ACL_SUCCESS);   /* after: not collected */
    char *ops = read_prof_file(names[0], "device_0", "mock_ops.json");
    REQUIRE(ops != NULL);
    CHECK_EQ(tc_json_u64(ops, "deviceId", 99), 0);
    CHECK_EQ(tc_json_u64(ops, "ops", 0), 17);
    char want[64];
    snprintf(want, sizeof want, "\"%u\": 15", a);
    CHECK(strstr(ops, want) != NULL);
    snprintf(want, sizeof want, "\"%u\": 2", b);
    CHECK(strstr(ops, want) != NULL);
    free(ops);
    CHECK(read_prof_file(names[0], "device_1", "mock_ops.json") == NULL);
    CHECK_EQ(aclprofFinalize(), ACL_SUCCESS);
    aclprofDestroyConfig(cfg);

    /* without task time nothing is collected, and no file claims otherwise */
    CHECK_EQ(init_tmp(), ACL_SUCCESS);
    cfg = config1(0, ACL_PROF_ACL_API);
    CHECK_EQ(aclprofStart(cfg), ACL_SUCCESS);
    CHECK_EQ(execute_empty(a), ACL_SUCCESS);
    CHECK_EQ(aclprofStop(cfg), ACL_SUCCESS);
    REQUIRE(prof_dirs(g_tmp, names, 4) == 2);
    CHECK(read_prof_file(names[1], "device_0", "mock_ops.json") == NULL);
    CHECK_EQ(aclprofFinalize(), ACL_SUCCESS);
    aclprofDestroyConfig(cfg);
    tmp_end();
}

static void all_tests(void)
{
    RUN(output_directory_layout);
    RUN(default_config_runs_opened_devices);
    RUN(uncreatable_directory);
    RUN(ops_collected_are_counted);
}

int main(void)
{
    run_in_each_era(all_tests);
    return test_summary();
}
