/* Step info: aclprofCreateStepInfo / GetStepTimestamp / DestroyStepInfo. */
#include <dirent.h>

#include "test_common.h"

static char g_tmp[1024];

/* The event log of the only session in g_tmp. */
static char *read_log(void)
{
    DIR *d = opendir(g_tmp);
    if (!d)
        return NULL;
    char name[256] = "";
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "PROF_", 5) == 0)
            snprintf(name, sizeof name, "%s", e->d_name);
    }
    closedir(d);
    char path[2048];
    snprintf(path, sizeof path, "%s/%s/host/msproftx.jsonl", g_tmp, name);
    return tc_read_file(path);
}

TEST(index_counts_from_one)
{
    aclprofStepInfo *a = aclprofCreateStepInfo();
    aclprofStepInfo *b = aclprofCreateStepInfo();
    REQUIRE(a && b);
    CHECK(a != b);
    aclprofDestroyStepInfo(a);
    aclprofDestroyStepInfo(b);
    /* The index is visible in the event log: see steps_are_logged. */
}

TEST(each_tag_once)
{
    aclprofStepInfo *si = aclprofCreateStepInfo();
    REQUIRE(si != NULL);
    CHECK_EQ(aclprofGetStepTimestamp(NULL, ACL_STEP_START, NULL), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclprofGetStepTimestamp(si, ACL_STEP_END, NULL), ACL_SUCCESS);  /* any order */
    CHECK_EQ(aclprofGetStepTimestamp(si, ACL_STEP_END, NULL), ACL_ERROR_INVALID_PARAM);
    /* prof_acl_core.cpp:57-69 (audit row 17): another tag counts as END but is never
     * refused; it sets the END flag, so a real END after it is refused. */
    aclprofStepInfo *odd = aclprofCreateStepInfo();
    REQUIRE(odd != NULL);
    CHECK_EQ(aclprofGetStepTimestamp(odd, (aclprofStepTag)2, NULL), ACL_SUCCESS);
    CHECK_EQ(aclprofGetStepTimestamp(odd, (aclprofStepTag)2, NULL), ACL_SUCCESS);
    CHECK_EQ(aclprofGetStepTimestamp(odd, (aclprofStepTag)-1, NULL), ACL_SUCCESS);
    CHECK_EQ(aclprofGetStepTimestamp(odd, ACL_STEP_END, NULL), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclprofGetStepTimestamp(odd, ACL_STEP_START, NULL), ACL_SUCCESS);
    aclprofDestroyStepInfo(odd);
    CHECK_EQ(aclprofGetStepTimestamp(si, ACL_STEP_START, NULL), ACL_SUCCESS);
    CHECK_EQ(aclprofGetStepTimestamp(si, ACL_STEP_START, NULL), ACL_ERROR_INVALID_PARAM);
    int stream_token;
    aclprofStepInfo *other = aclprofCreateStepInfo();
    CHECK_EQ(aclprofGetStepTimestamp(other, ACL_STEP_START, &stream_token), ACL_SUCCESS);
    aclprofDestroyStepInfo(si);
    aclprofDestroyStepInfo(other);
}

TEST(unknown_and_destroyed_objects)
{
    aclprofStepInfo *si = aclprofCreateStepInfo();
    REQUIRE(si != NULL);
    aclprofDestroyStepInfo(si);
    CHECK_EQ(aclprofGetStepTimestamp(si, ACL_STEP_START, NULL), ACL_ERROR_INVALID_PARAM);
    aclprofDestroyStepInfo(si);     /* double destroy: ignored */
    aclprofDestroyStepInfo(NULL);   /* logged only in the real library */
    int garbage;
    CHECK_EQ(aclprofGetStepTimestamp((aclprofStepInfo *)&garbage, ACL_STEP_START, NULL),
             ACL_ERROR_INVALID_PARAM);
    aclprofDestroyStepInfo((aclprofStepInfo *)&garbage);
}

TEST(steps_are_logged)
{
    REQUIRE(tc_make_tmpdir(g_tmp, sizeof g_tmp));
    /* Outside a session: accepted, not recorded anywhere. */
    aclprofStepInfo *early = aclprofCreateStepInfo();   /* index 1 */
    CHECK_EQ(aclprofGetStepTimestamp(early, ACL_STEP_START, NULL), ACL_SUCCESS);
    CHECK_EQ(aclprofInit(g_tmp, strlen(g_tmp)), ACL_SUCCESS);
    uint32_t dev = 0;
    /* Any running session records steps, with or without MSPROFTX. */
    aclprofConfig *cfg = aclprofCreateConfig(&dev, 1, ACL_AICORE_NONE, NULL,
                                             ACL_PROF_TRAINING_TRACE);
    CHECK_EQ(aclprofStart(cfg), ACL_SUCCESS);
    aclprofStepInfo *si = aclprofCreateStepInfo();      /* index 2 */
    CHECK_EQ(aclprofGetStepTimestamp(si, ACL_STEP_START, NULL), ACL_SUCCESS);
    CHECK_EQ(aclprofGetStepTimestamp(si, ACL_STEP_END, NULL), ACL_SUCCESS);
    CHECK_EQ(aclprofGetStepTimestamp(early, ACL_STEP_END, NULL), ACL_SUCCESS);
    CHECK_EQ(aclprofStop(cfg), ACL_SUCCESS);
    aclprofStepInfo *late = aclprofCreateStepInfo();
    CHECK_EQ(aclprofGetStepTimestamp(late, ACL_STEP_START, NULL), ACL_SUCCESS);

    char *log = read_log();
    REQUIRE(log != NULL);
    CHECK_EQ(tc_count_lines(log), 3);
    CHECK(strncmp(log, "{\"kind\":\"step\",\"tid\":", 21) == 0);
    CHECK_EQ(tc_json_u64(log, "index", 0), 2);
    CHECK(strstr(log, "\"tag\":\"start\"") != NULL);
    const char *second = strchr(log, '\n') + 1;
    CHECK_EQ(tc_json_u64(second, "index", 0), 2);
    CHECK(strncmp(strstr(second, "\"tag\""), "\"tag\":\"end\"", 11) == 0);
    CHECK(tc_json_u64(second, "start_ns", 0) >= tc_json_u64(log, "start_ns", UINT64_MAX));
    const char *third = strchr(second, '\n') + 1;
    CHECK_EQ(tc_json_u64(third, "index", 0), 1);
    CHECK_EQ(tc_json_u64(third, "tid", 0), (uint32_t)gettid());
    free(log);
    /* Steps are not msproftx events. */
    aclmockStats st;
    aclmockGetStats(&st);
    CHECK_EQ(st.txEvents, 0);
    aclprofDestroyConfig(cfg);
    aclprofDestroyStepInfo(early);
    aclprofDestroyStepInfo(si);
    aclprofDestroyStepInfo(late);
    aclmockReset();
    tc_rm_rf(g_tmp);
}

TEST(reset_restarts_the_counter)
{
    REQUIRE(tc_make_tmpdir(g_tmp, sizeof g_tmp));
    aclprofCreateStepInfo();
    aclprofCreateStepInfo();
    aclmockReset();   /* frees them */
    CHECK_EQ(aclprofInit(g_tmp, strlen(g_tmp)), ACL_SUCCESS);
    CHECK_EQ(aclrtSetDevice(0), ACL_SUCCESS);   /* Start(NULL) runs the opened devices */
    CHECK_EQ(aclprofStart(NULL), ACL_SUCCESS);
    aclprofStepInfo *si = aclprofCreateStepInfo();
    CHECK_EQ(aclprofGetStepTimestamp(si, ACL_STEP_START, NULL), ACL_SUCCESS);
    CHECK_EQ(aclprofFinalize(), ACL_SUCCESS);
    char *log = read_log();
    CHECK_EQ(tc_json_u64(log, "index", 0), 1);
    free(log);
    aclmockReset();
    tc_rm_rf(g_tmp);
}

TEST(fault_injection)
{
    CHECK_EQ(aclmockFailNext("aclprofCreateStepInfo", 1, 0), ACL_SUCCESS);
    CHECK_NULL(aclprofCreateStepInfo());
    aclprofStepInfo *si = aclprofCreateStepInfo();
    REQUIRE(si != NULL);
    CHECK_EQ(aclmockFailNext("aclprofGetStepTimestamp", 1, ACL_ERROR_GE_FAILURE), ACL_SUCCESS);
    CHECK_EQ(aclprofGetStepTimestamp(si, ACL_STEP_START, NULL), ACL_ERROR_GE_FAILURE);
    CHECK_EQ(aclprofGetStepTimestamp(si, ACL_STEP_START, NULL), ACL_SUCCESS);  /* not set */
    CHECK_EQ(aclmockFailNext("aclprofDestroyStepInfo", 1, 0), ACL_SUCCESS);
    aclprofDestroyStepInfo(si);   /* swallowed by the fault: still alive */
    CHECK_EQ(aclprofGetStepTimestamp(si, ACL_STEP_END, NULL), ACL_SUCCESS);
    aclprofDestroyStepInfo(si);
}

int main(void)
{
    RUN(index_counts_from_one);
    RUN(each_tag_once);
    RUN(unknown_and_destroyed_objects);
    RUN(steps_are_logged);
    RUN(reset_restarts_the_counter);
    RUN(fault_injection);
    return test_summary();
}
