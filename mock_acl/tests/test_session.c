/* Sessions: aclprofInit/Finalize/Start/Stop, configs, aclprofSetConfig, output
 * directories, no-init behaviours, fault injection and the aclmock controls. */
#include <dirent.h>
#include <limits.h>
#include <pthread.h>
#include <sys/stat.h>

#include "test_common.h"

#define PROF_AICPU_MODEL 0x4000000000000000ULL

static char g_tmp[1024];   /* per-test output root, removed by the test's end */
/* main() runs every test once per CANN era (ACLMOCK_CANN, read by each RUN's reset). */
static int g_era;
#define ERA_2026 (g_era == ACLMOCK_CANN_2026)

static bool tmp_begin(void)
{
    return tc_make_tmpdir(g_tmp, sizeof g_tmp);
}

static void tmp_end(void)
{
    aclmockReset();   /* closes files before removing them */
    tc_rm_rf(g_tmp);
}

static aclError init_tmp(void)
{
    return aclprofInit(g_tmp, strlen(g_tmp));
}

static aclprofConfig *config2(uint32_t a, uint32_t b, uint64_t types)
{
    uint32_t ids[2] = {a, b};
    return aclprofCreateConfig(ids, 2, ACL_AICORE_NONE, NULL, types);
}

static aclprofConfig *config1(uint32_t a, uint64_t types)
{
    return aclprofCreateConfig(&a, 1, ACL_AICORE_NONE, NULL, types);
}

/* Names of the PROF_* entries of `dir`, sorted; returns how many (at most `max`). */
static int prof_dirs(const char *dir, char names[][256], int max)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "PROF_", 5) == 0 && n < max)
            snprintf(names[n++], 256, "%s", e->d_name);
    }
    closedir(d);
    for (int i = 1; i < n; i++) {   /* insertion sort: the counter makes the order */
        for (int j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
            char t[256];
            memcpy(t, names[j], 256);
            memcpy(names[j], names[j - 1], 256);
            memcpy(names[j - 1], t, 256);
        }
    }
    return n;
}

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Reads <g_tmp>/<prof>/<sub>/<file>. */
static char *read_prof_file(const char *prof, const char *sub, const char *file)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s/%s/%s", g_tmp, prof, sub, file);
    return tc_read_file(path);
}

/* PROF_<6 digits>_<17 digits>_<8 digits><8 letters A-R> */
static bool prof_name_valid(const char *name, unsigned counter)
{
    char want[16];
    snprintf(want, sizeof want, "PROF_%06u_", counter);
    if (strlen(name) != 5 + 7 + 18 + 16 || strncmp(name, want, 12) != 0)
        return false;
    const char *p = name + 12;
    for (int i = 0; i < 17; i++)
        if (p[i] < '0' || p[i] > '9')
            return false;
    if (p[17] != '_')
        return false;
    p += 18;
    char pid[16];
    snprintf(pid, sizeof pid, "%08d", (int)getpid());
    if (strncmp(p, pid, 8) != 0)
        return false;
    for (int i = 8; i < 16; i++)
        if (p[i] < 'A' || p[i] > 'R')
            return false;
    return true;
}

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
    /* A destroyed config is refused by Start and Stop too. */
    CHECK_EQ(aclprofStart(cfg), ACL_ERROR_INVALID_PARAM);
    /* 2026 Stop returns 0 before looking at the config when not initialised. */
    CHECK_EQ(aclprofStop(cfg), ERA_2026 ? ACL_SUCCESS : ACL_ERROR_INVALID_PARAM);
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

/* Is <g_tmp>/<prof>/device_<id> there? */
static bool device_dir(const char *prof, uint32_t id)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s/device_%u", g_tmp, prof, id);
    return is_dir(path);
}

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
    CHECK_EQ(aclprofStart(NULL), ACL_SUCCESS);         /* default types == d01's */
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

TEST(default_config_covers_every_device)
{
    REQUIRE(tmp_begin());
    aclmockSetCannEra(ACLMOCK_CANN_2026);   /* Start(NULL) is 2026 only */
    aclmockSetDeviceCount(3);
    CHECK_EQ(init_tmp(), ACL_SUCCESS);
    CHECK_EQ(aclprofStart(NULL), ACL_SUCCESS);
    char names[4][256];
    REQUIRE(prof_dirs(g_tmp, names, 4) == 1);
    char *dev = read_prof_file(names[0], "device_2", "mock_config.json");
    REQUIRE(dev != NULL);
    CHECK(strstr(dev, "\"devices\": [0, 1, 2]") != NULL);
    CHECK_EQ(tc_json_u64(dev, "dataTypeConfig", 0), ACL_PROF_ACL_API | ACL_PROF_TASK_TIME);
    free(dev);
    CHECK_EQ(aclprofStop(NULL), ACL_SUCCESS);
    CHECK_EQ(aclprofFinalize(), ACL_SUCCESS);
    tmp_end();
}

/* Reads dataTypeConfigStored of a one-device session started with `types`. */
static uint64_t stored_types(uint64_t types)
{
    aclprofConfig *cfg = config1(0, types);
    uint64_t v = 0;
    if (cfg && aclprofStart(cfg) == ACL_SUCCESS) {
        char names[64][256];
        int n = prof_dirs(g_tmp, names, 64);
        char *dev = n ? read_prof_file(names[n - 1], "device_0", "mock_config.json") : NULL;
        v = tc_json_u64(dev, "dataTypeConfigStored", 0);
        free(dev);
        aclprofStop(cfg);
    }
    aclprofDestroyConfig(cfg);
    return v;
}

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

/* ---- aclprofSetConfig ---------------------------------------------------------------- */

static aclError set(int type, const char *value)
{
    return aclprofSetConfig((aclprofConfigType)type, value, strlen(value));
}

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

int main(void)
{
    static const int eras[] = {ACLMOCK_CANN_2025, ACLMOCK_CANN_2026};
    for (size_t e = 0; e < 2; e++) {
    g_era = eras[e];
    setenv("ACLMOCK_CANN", g_era == ACLMOCK_CANN_2026 ? "2026" : "2025", 1);
    fprintf(stderr, "-- CANN era %d\n", g_era);
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
    RUN(create_config_rejections);
    RUN(create_config_accepts);
    RUN(destroy_config);
    RUN(start_validation);
    RUN(every_public_bit_is_accepted);
    RUN(start_stop_device_rules_2026);
    RUN(start_stop_device_rules_2025);
    RUN(repeat_flag_survives_failed_start_and_finalize_2026);
    RUN(equal_stored_types_count_as_same_config);
    RUN(device_count_shrinks_after_create);
    RUN(output_directory_layout);
    RUN(default_config_covers_every_device);
    RUN(stored_bits_expansion);
    RUN(uncreatable_directory);
    RUN(set_config_arguments);
    RUN(set_config_values);
    RUN(set_config_path_after_init);
    RUN(fault_injection);
    RUN(fault_table_capacity);
    RUN(reset_restores_fresh_state);
    RUN(device_count_from_environment);
    RUN(controls);
    RUN(concurrent_sessions_do_not_corrupt_state);
    }
    unsetenv("ACLMOCK_CANN");
    return test_summary();
}
