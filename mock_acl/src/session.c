/* Profiling sessions: aclprofInit/Finalize/Start/Stop, aclprofConfig objects,
 * aclprofSetConfig options and the PROF_* output directories (reference 3.1, 3.2, 6).
 *
 * State machine (reference 3.1): the global mode is OFF, API_CTRL (after aclprofInit) or
 * SUBSCRIBE (owned by subscribe.c). The real library has a fourth mode, CMD (msprof command
 * line, acl.json or GE option profiling), which the mock never enters: nothing in the
 * mock starts command-line profiling, so ACL_ERROR_PROF_ALREADY_RUN from the CMD column
 * is unreachable.
 *
 * One configuration runs at a time (see start_conflict()). While it runs, the session
 * keeps a copy of its config, so destroying the aclprofConfig object does not matter.
 */
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "mock_internal.h"

/* Internal dataTypeConfig bits (prof_data_config.h) that CreateConfig adds. */
#define PROF_AICPU_MODEL 0x4000000000000000ULL
#define PROF_TASK_TIME_INTERNAL ACL_PROF_TASK_TIME_L0   /* 0x800 */

/* PROF_SWITCH_SUPPORT: what aclprofStart accepts (reference 1.2). */
#define ACCEPTED_BITS                                                                      \
    (ACL_PROF_ACL_API | ACL_PROF_TASK_TIME | ACL_PROF_AICORE_METRICS | ACL_PROF_AICPU |    \
     ACL_PROF_L2CACHE | ACL_PROF_HCCL_TRACE | ACL_PROF_TRAINING_TRACE | ACL_PROF_MSPROFTX | \
     ACL_PROF_RUNTIME_API | ACL_PROF_GE_API_L0 | ACL_PROF_TASK_TIME_L0 |                   \
     ACL_PROF_TASK_MEMORY | ACL_PROF_TASK_TIME_L2 | ACL_PROF_OP_ATTR |                     \
     ACL_PROF_TASK_TIME_L3 | ACL_PROF_GE_API_L1 | ACL_PROF_API_STATS |                     \
     ACL_PROF_AICORE_SHAPE | PROF_AICPU_MODEL)

/* The 2025 library (d8beaaf09 prof_api_common.h) predates these two bits: Start -> 200007. */
#define BITS_ADDED_2026 (ACL_PROF_API_STATS | ACL_PROF_AICORE_SHAPE)

/* What aclprofStart(NULL) runs: "all active devices, the platform's default metrics and
 * data types"; the mock's platform default is ACL_API|TASK_TIME without AI Core metrics. */
#define DEFAULT_DATA_TYPES (ACL_PROF_ACL_API | ACL_PROF_TASK_TIME)

#define INIT_PATH_MAX 4096      /* aclprofInit: length < 4096 (2026), <= 4096 (2025) */
#define SETCONFIG_MAX_LEN 256

struct aclprofConfig {
    uint32_t devNums;                            /* including the appended host id 64 */
    uint32_t devIdList[MOCK_MAX_DEVICES + 1];
    uint32_t aicoreMetrics;
    uint64_t dataTypeConfig;                     /* as stored: expanded (see expand_bits) */
    uint64_t userDataTypeConfig;                 /* as given to aclprofCreateConfig */
    struct aclprofConfig *next;                  /* registry of live configs */
};

/* ---- state ------------------------------------------------------------------------ */

typedef struct running_session {
    bool active;
    aclprofConfig cfg;        /* a copy: the caller may destroy its object while running */
    char *prof_dir;           /* <init path>/PROF_... */
    char *host_dir;           /* <prof_dir>/host */
    uint64_t start_mono_ns;
    uint64_t start_real_ns;
    /* The real ProfAclMgr::devTasks_: which devices (index 64: the host) run, and the
     * dataTypeConfig each was started with. The host task is shared; host_count counts
     * the Starts that use it (2025 CheckDeviceTask increments it instead of failing). */
    bool running[MOCK_MAX_DEVICES + 1];
    uint64_t types[MOCK_MAX_DEVICES + 1];
    uint32_t host_count;
} running_session;

static aclprofConfig *g_configs;                 /* live configs, for pointer validation */
static char *g_init_path;                        /* absolute; NULL while not initialised */
static char g_options[ACL_PROF_ARGS_MAX][SETCONFIG_MAX_LEN + 1];
static bool g_option_set[ACL_PROF_ARGS_MAX];
static uint64_t g_start_index;                   /* PROF_<nnnnnn> counter */
static uint64_t g_rand_state;
static running_session g_run;
/* 2026 g_isRepeatInvoking (msprofiler_acl_api.cpp): set by the first Start that passes the
 * mode check, cleared only by a Stop that gets through. Not cleared by a failed Start nor by
 * Finalize, so a later Start only compares configs and starts nothing; the mock copies that. */
static bool g_repeat_start;

static bool era_2026(void)
{
    return mock_cann_era() == ACLMOCK_CANN_2026;
}

static const char *const k_option_names[ACL_PROF_ARGS_MAX] = {
    [ACL_PROF_STORAGE_LIMIT] = "ACL_PROF_STORAGE_LIMIT",
    [2] = "ACL_PROF_AIV_METRICS",
    [ACL_PROF_SYS_HARDWARE_MEM_FREQ] = "ACL_PROF_SYS_HARDWARE_MEM_FREQ",
    [ACL_PROF_LLC_MODE] = "ACL_PROF_LLC_MODE",
    [ACL_PROF_SYS_IO_FREQ] = "ACL_PROF_SYS_IO_FREQ",
    [ACL_PROF_SYS_INTERCONNECTION_FREQ] = "ACL_PROF_SYS_INTERCONNECTION_FREQ",
    [ACL_PROF_DVPP_FREQ] = "ACL_PROF_DVPP_FREQ",
    [ACL_PROF_HOST_SYS] = "ACL_PROF_HOST_SYS",
    [ACL_PROF_HOST_SYS_USAGE] = "ACL_PROF_HOST_SYS_USAGE",
    [ACL_PROF_HOST_SYS_USAGE_FREQ] = "ACL_PROF_HOST_SYS_USAGE_FREQ",
    [ACL_PROF_LOW_POWER_FREQ] = "ACL_PROF_LOW_POWER_FREQ",
    [ACL_PROF_SYS_MEM_SERVICEFLOW] = "ACL_PROF_SYS_MEM_SERVICEFLOW",
    [ACL_PROF_SYS_CPU_FREQ] = "ACL_PROF_SYS_CPU_FREQ",
    [ACL_PROF_OPTYPE] = "ACL_PROF_OPTYPE",
    [ACL_PROF_NTS_METRICS] = "ACL_PROF_NTS_METRICS",
    [ACL_PROF_PATH] = "ACL_PROF_PATH",
};

/* ---- config registry ---------------------------------------------------------------- */

/* Only compares pointers, never dereferences `cfg`: a destroyed or garbage pointer is
 * rejected instead of crashing (the real library has undefined behaviour there). */
static bool config_is_live(const aclprofConfig *cfg)
{
    for (const aclprofConfig *c = g_configs; c; c = c->next) {
        if (c == cfg)
            return true;
    }
    return false;
}

static void config_unlink(const aclprofConfig *cfg)
{
    for (aclprofConfig **pp = &g_configs; *pp; pp = &(*pp)->next) {
        if (*pp == cfg) {
            *pp = cfg->next;
            return;
        }
    }
}

/* What aclprofCreateConfig stores (reference 3.2). */
static uint64_t expand_bits(uint64_t given)
{
    if (given & ACL_PROF_API_STATS)
        return ACL_PROF_ACL_API | ACL_PROF_API_STATS;   /* "the other bits become useless" */
    uint64_t v = given | PROF_AICPU_MODEL;
    if (v & ACL_PROF_TASK_TIME)
        v |= PROF_TASK_TIME_INTERNAL;
    if (v & (ACL_PROF_TASK_TIME_L2 | ACL_PROF_OP_ATTR))
        v |= PROF_TASK_TIME_INTERNAL | ACL_PROF_TASK_TIME;
    if (v & ACL_PROF_TASK_TIME_L3)
        v |= PROF_TASK_TIME_INTERNAL | ACL_PROF_TASK_TIME | ACL_PROF_TASK_TIME_L2;
    if (v & PROF_TASK_TIME_INTERNAL)
        v |= ACL_PROF_TRAINING_TRACE;
    return v;
}

/* Device ids of a config without the host. */
static uint32_t config_devices(const aclprofConfig *cfg, uint32_t *ids)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < cfg->devNums; i++) {
        if (cfg->devIdList[i] != MOCK_HOST_DEVICE_ID)
            ids[n++] = cfg->devIdList[i];
    }
    return n;
}

static void config_fill(aclprofConfig *cfg, const uint32_t *ids, uint32_t n,
                        uint32_t metrics, uint64_t data_types)
{
    memset(cfg, 0, sizeof *cfg);
    for (uint32_t i = 0; i < n; i++)
        cfg->devIdList[i] = ids[i];
    cfg->devIdList[n] = MOCK_HOST_DEVICE_ID;
    cfg->devNums = n + 1;
    cfg->aicoreMetrics = metrics;
    cfg->userDataTypeConfig = data_types;
    cfg->dataTypeConfig = expand_bits(data_types);
}

/* aclprofStart(NULL): every device of the mock driver. */
static void default_config(aclprofConfig *cfg)
{
    uint32_t ids[MOCK_MAX_DEVICES];
    uint32_t n = mock_device_count();
    for (uint32_t i = 0; i < n; i++)
        ids[i] = i;
    config_fill(cfg, ids, n, ACL_AICORE_NONE, DEFAULT_DATA_TYPES);
}

/* ---- paths and files ------------------------------------------------------------------ */

/* Utils::CheckPathWithInvalidChar (utils.cpp:1625-1638, audit row 8): these bytes anywhere
 * in the absolute path give ACL_ERROR_INVALID_FILE; every other byte (other control bytes
 * included) is allowed. The real check runs on the absolute path, so the cwd counts too. */
static bool path_has_invalid_char(const char *path)
{
    return strpbrk(path, "\n\f\r\b\t\v\x7f\"'\\%><|&$;`") != NULL;
}

/* Lexical absolute path: prefixes the cwd, folds "//", "." and "..". No symlink
 * resolution, because the directory need not exist yet (2026 creates it at Start).
 * `check_chars`: refuse the invalid characters (2026 only; RT0 has no such check). */
static int absolute_path(const char *path, bool check_chars, char **out)
{
    char cwd[PATH_MAX];
    if (path[0] != '/' && getcwd(cwd, sizeof cwd) == NULL)
        return ACL_ERROR_INVALID_FILE;
    size_t cap = strlen(path) + (path[0] == '/' ? 0 : strlen(cwd) + 1) + 2;
    char *joined = malloc(cap);
    char *norm = malloc(cap);
    if (!joined || !norm) {
        free(joined);
        free(norm);
        return ACL_ERROR_BAD_ALLOC;
    }
    snprintf(joined, cap, "%s%s%s", path[0] == '/' ? "" : cwd, path[0] == '/' ? "" : "/",
             path);
    size_t n = 0;   /* norm[0..n) holds "/a/b" with no trailing slash ("" for the root) */
    for (char *save = NULL, *seg = strtok_r(joined, "/", &save); seg;
         seg = strtok_r(NULL, "/", &save)) {
        if (strcmp(seg, ".") == 0)
            continue;
        if (strcmp(seg, "..") == 0) {
            while (n > 0 && norm[--n] != '/')
                ;
            continue;
        }
        n += (size_t)sprintf(norm + n, "/%s", seg);
    }
    if (n == 0)
        norm[n++] = '/';
    norm[n] = '\0';
    free(joined);
    if (n >= PATH_MAX || (check_chars && path_has_invalid_char(norm))) {
        free(norm);
        return ACL_ERROR_INVALID_FILE;
    }
    *out = norm;
    return ACL_SUCCESS;
}

/* mkdir -p; an existing directory is fine. */
static bool make_dirs(const char *path)
{
    if (strcmp(path, "/") == 0)
        return true;
    char *buf = strdup(path);
    if (!buf)
        return false;
    bool ok = true;
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char saved = *p;
            *p = '\0';
            struct stat st;
            if (mkdir(buf, 0750) != 0 &&
                (errno != EEXIST || stat(buf, &st) != 0 || !S_ISDIR(st.st_mode))) {
                ok = false;
                break;
            }
            *p = saved;
            if (saved == '\0')
                break;
        }
    }
    free(buf);
    return ok;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

/* Undo a half-created PROF_* directory. */
static void remove_tree(const char *path)
{
    nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static char *path_join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* Writes `text` to `path` through a temporary file and rename(), so that a reader never
 * sees a half-written file. */
static bool write_file_atomic(const char *path, const char *text, size_t len)
{
    size_t n = strlen(path) + 5;
    char *tmp = malloc(n);
    if (!tmp)
        return false;
    snprintf(tmp, n, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    bool ok = f != NULL;
    if (ok) {
        ok = fwrite(text, 1, len, f) == len;
        ok = (fclose(f) == 0) && ok;
        ok = ok && rename(tmp, path) == 0;
        if (!ok)
            remove(tmp);
    }
    free(tmp);
    return ok;
}

static void json_string(FILE *f, const char *s)
{
    size_t len = strlen(s);
    size_t cap = 6 * len + 3;
    char *buf = malloc(cap);
    if (buf && mock_json_escape(buf, cap, s, len) > 0)
        fputs(buf, f);
    else
        fputs("\"\"", f);
    free(buf);
}

static uint64_t realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- PROF_* directory ---------------------------------------------------------------- */

static uint32_t next_random(void)
{
    if (g_rand_state == 0)
        g_rand_state = (mock_now_ns() ^ ((uint64_t)getpid() << 32)) | 1;
    /* xorshift64: only needs to make directory names unlikely to collide */
    g_rand_state ^= g_rand_state << 13;
    g_rand_state ^= g_rand_state >> 7;
    g_rand_state ^= g_rand_state << 17;
    return (uint32_t)(g_rand_state >> 32);
}

/* PROF_<nnnnnn>_<YYYYMMDDhhmmssmmm>_<pid %08d><8 letters A-R> (utils.cpp CreateProfDir). */
static void prof_dir_name(char *out, size_t cap, uint64_t real_ns)
{
    time_t secs = (time_t)(real_ns / 1000000000u);
    struct tm tm;
    localtime_r(&secs, &tm);
    char stamp[32];
    strftime(stamp, sizeof stamp, "%Y%m%d%H%M%S", &tm);
    char letters[9];
    for (int i = 0; i < 8; i++)
        letters[i] = (char)('A' + next_random() % 18);
    letters[8] = '\0';
    unsigned counter = (unsigned)(g_start_index % 999999u) + 1;
    snprintf(out, cap, "PROF_%06u_%s%03u_%08d%s", counter, stamp,
             (unsigned)(real_ns / 1000000u % 1000u), (int)getpid(), letters);
}

static void json_devices(FILE *f, const aclprofConfig *cfg)
{
    uint32_t ids[MOCK_MAX_DEVICES + 1];
    uint32_t n = config_devices(cfg, ids);
    fputc('[', f);
    for (uint32_t i = 0; i < n; i++)
        fprintf(f, "%s%u", i ? ", " : "", ids[i]);
    fputc(']', f);
}

static void json_options(FILE *f)
{
    fputc('{', f);
    bool first = true;
    for (int t = 0; t < ACL_PROF_ARGS_MAX; t++) {
        if (!g_option_set[t])
            continue;
        const char *name = t == 14 && !era_2026() ? "ACL_PROF_SCALE" : k_option_names[t];
        fprintf(f, "%s\"%s\": ", first ? "" : ", ", name);
        json_string(f, g_options[t]);
        first = false;
    }
    fputc('}', f);
}

/* The fields common to mock_config.json and mock_session.json. */
static void json_config_fields(FILE *f, const running_session *run)
{
    fputs("  \"devices\": ", f);
    json_devices(f, &run->cfg);
    fprintf(f, ",\n  \"dataTypeConfig\": %llu,\n  \"dataTypeConfigStored\": %llu,\n"
               "  \"aicoreMetrics\": %u,\n  \"options\": ",
            (unsigned long long)run->cfg.userDataTypeConfig,
            (unsigned long long)run->cfg.dataTypeConfig, run->cfg.aicoreMetrics);
    json_options(f);
    fprintf(f, ",\n  \"startMonotonicNs\": %llu,\n  \"startRealtimeNs\": %llu",
            (unsigned long long)run->start_mono_ns, (unsigned long long)run->start_real_ns);
}

/* Builds a JSON document with `body` and writes it atomically to dir/name. */
static bool write_json(const char *dir, const char *name,
                       void (*body)(FILE *, const running_session *, const void *),
                       const running_session *run, const void *arg)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return false;
    fputs("{\n", f);
    body(f, run, arg);
    fputs("\n}\n", f);
    bool ok = fclose(f) == 0;
    char *path = path_join(dir, name);
    ok = ok && path && write_file_atomic(path, text, len);
    free(path);
    free(text);
    return ok;
}

static void device_config_body(FILE *f, const running_session *run, const void *arg)
{
    fprintf(f, "  \"deviceId\": %u,\n", *(const uint32_t *)arg);
    json_config_fields(f, run);
}

/* `arg` is NULL at start, or points to {stop_mono_ns, stop_real_ns} at stop. */
static void session_body(FILE *f, const running_session *run, const void *arg)
{
    const uint64_t *stop = arg;
    fprintf(f, "  \"pid\": %d,\n  \"initPath\": ", (int)getpid());
    json_string(f, g_init_path ? g_init_path : "");
    fputs(",\n  \"profDir\": ", f);
    json_string(f, run->prof_dir);
    fprintf(f, ",\n  \"msproftx\": %s,\n",
            (run->cfg.dataTypeConfig & ACL_PROF_MSPROFTX) ? "true" : "false");
    json_config_fields(f, run);
    if (stop)
        fprintf(f, ",\n  \"stopMonotonicNs\": %llu,\n  \"stopRealtimeNs\": %llu",
                (unsigned long long)stop[0], (unsigned long long)stop[1]);
    else
        fputs(",\n  \"stopMonotonicNs\": null,\n  \"stopRealtimeNs\": null", f);
}

/* Creates device_<id>/mock_config.json for the devices of run->cfg. */
static bool populate_devices(const running_session *run)
{
    uint32_t ids[MOCK_MAX_DEVICES + 1];
    uint32_t n = config_devices(&run->cfg, ids);
    for (uint32_t i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof name, "device_%u", ids[i]);
        char *dev_dir = path_join(run->prof_dir, name);
        /* EEXIST: a 2025 Start restarting a device that ran earlier in this session. */
        bool ok = dev_dir && (mkdir(dev_dir, 0750) == 0 || errno == EEXIST) &&
                  write_json(dev_dir, "mock_config.json", device_config_body, run, &ids[i]);
        free(dev_dir);
        if (!ok)
            return false;
    }
    return true;
}

/* Creates <prof_dir>/host and device_<id>/ with their description files. */
static bool populate_prof_dir(running_session *run)
{
    if (mkdir(run->host_dir, 0750) != 0)
        return false;
    if (!write_json(run->host_dir, "mock_session.json", session_body, run, NULL))
        return false;
    return populate_devices(run);
}

/* Marks the devices of `cfg` (and the host) as running with its dataTypeConfig. */
static void run_mark(running_session *run, const aclprofConfig *cfg)
{
    for (uint32_t i = 0; i < cfg->devNums; i++) {
        uint32_t id = cfg->devIdList[i];
        if (id == MOCK_HOST_DEVICE_ID && run->running[id]) {
            run->host_count++;
            continue;
        }
        if (id == MOCK_HOST_DEVICE_ID)
            run->host_count = 1;
        run->running[id] = true;
        run->types[id] = cfg->dataTypeConfig;
    }
}

static bool run_any_running(const running_session *run)
{
    for (uint32_t id = 0; id <= MOCK_MAX_DEVICES; id++) {
        if (run->running[id])
            return true;
    }
    return false;
}

static void running_clear(void)
{
    free(g_run.prof_dir);
    free(g_run.host_dir);
    memset(&g_run, 0, sizeof g_run);
}

/* Materialises the output of a new session (the real MaterializeResultPath creates the
 * result directory only when data starts). ACL_ERROR_INVALID_FILE when it cannot. */
static int session_begin(const aclprofConfig *cfg)
{
    running_session run = {.cfg = *cfg};
    run.cfg.next = NULL;
    run.start_mono_ns = mock_now_ns();
    run.start_real_ns = realtime_ns();
    if (!make_dirs(g_init_path))
        return ACL_ERROR_INVALID_FILE;
    for (int attempt = 0; attempt < 8 && !run.prof_dir; attempt++) {
        char name[96];
        prof_dir_name(name, sizeof name, run.start_real_ns);
        char *dir = path_join(g_init_path, name);
        if (!dir)
            return ACL_ERROR_BAD_ALLOC;
        if (mkdir(dir, 0750) == 0)
            run.prof_dir = dir;
        else
            free(dir);   /* EEXIST: another letter draw; anything else fails 8 times */
    }
    if (!run.prof_dir)
        return ACL_ERROR_INVALID_FILE;
    run.host_dir = path_join(run.prof_dir, "host");
    if (!run.host_dir || !populate_prof_dir(&run)) {
        remove_tree(run.prof_dir);
        free(run.prof_dir);
        free(run.host_dir);
        return ACL_ERROR_INVALID_FILE;
    }
    g_start_index++;
    run.active = true;
    run_mark(&run, cfg);
    g_run = run;
    mock_msproftx_session((cfg->dataTypeConfig & ACL_PROF_MSPROFTX) != 0, g_run.host_dir);
    return ACL_SUCCESS;
}

/* Stops the running session: records the stop time in host/mock_session.json. */
static void session_end(void)
{
    if (!g_run.active)
        return;
    mock_msproftx_session(false, NULL);
    uint64_t stop[2] = {mock_now_ns(), realtime_ns()};
    if (!write_json(g_run.host_dir, "mock_session.json", session_body, &g_run, stop))
        fprintf(stderr, "aclmock: cannot update %s/mock_session.json\n", g_run.host_dir);
    running_clear();
}

/* ---- init / finalize ------------------------------------------------------------------- */

/* aclprofInit after its argument checks, and the MODERN auto-initialisation. */
static int init_with_path(const char *path)
{
    switch (mock_mode()) {
    case ACLMOCK_MODE_OFF:
        break;
    case ACLMOCK_MODE_API_CTRL:
        return ACL_ERROR_REPEAT_INITIALIZE;
    default:
        return ACL_ERROR_PROF_API_CONFLICT;
    }
    char *abs = NULL;
    int ret = absolute_path(path, era_2026(), &abs);
    if (ret != ACL_SUCCESS)
        return ret;
    if (!era_2026()) {
        /* RT0 ProfAclInit creates the directory at once (100003 if it cannot) and keeps its
         * canonical path; 2026 defers both to Start (MaterializeResultPath). */
        char *canon = make_dirs(abs) ? realpath(abs, NULL) : NULL;
        free(abs);
        if (!canon)
            return ACL_ERROR_INVALID_FILE;
        abs = canon;
    }
    free(g_init_path);
    g_init_path = abs;
    mock_set_mode(ACLMOCK_MODE_API_CTRL);
    return ACL_SUCCESS;
}

MOCK_EXPORT aclError aclprofInit(const char *profilerResultPath, size_t length)
{
    MOCK_FAULT_RETURN_CODE();
    size_t max_len = era_2026() ? INIT_PATH_MAX - 1 : INIT_PATH_MAX;
    if (profilerResultPath == NULL || length == 0 || length > max_len ||
        strnlen(profilerResultPath, length + 1) != length)
        return ACL_ERROR_INVALID_PARAM;
    mock_lock();
    int ret = init_with_path(profilerResultPath);
    mock_unlock();
    return ret;
}

/* ProfStartPrecheck (also the Stop and Finalize precheck). */
static int mode_precheck(void)
{
    switch (mock_mode()) {
    case ACLMOCK_MODE_API_CTRL:
        return ACL_SUCCESS;
    case ACLMOCK_MODE_OFF:
        return ACL_ERROR_PROF_NOT_RUN;
    default:
        return ACL_ERROR_PROF_API_CONFLICT;
    }
}

/* 2026: not initialised -> SUCCESS, nothing done (ProfFinalize's IsInited()); 2025: the
 * precheck's 100043. g_init_path (the real resultPath_) survives: the 2026 auto-init of a
 * later Start reuses it (ProfAclMgr::GetResultPath prefers it to ACL_PROF_PATH). */
MOCK_EXPORT aclError aclprofFinalize(void)
{
    MOCK_FAULT_RETURN_CODE();
    mock_lock();
    int ret = ACL_SUCCESS;
    if (!(era_2026() && mock_mode() == ACLMOCK_MODE_OFF)) {
        ret = mode_precheck();
        if (ret == ACL_SUCCESS) {
            session_end();   /* the real one finalises every device task */
            mock_msproftx_finalize();
            mock_set_mode(ACLMOCK_MODE_OFF);
        }
    }
    mock_unlock();
    return ret;
}

/* ---- configs ------------------------------------------------------------------------ */

static bool device_list_valid(const uint32_t *ids, uint32_t n)
{
    uint32_t count = mock_device_count();
    if (n > MOCK_MAX_DEVICES || n > count)
        return false;
    bool seen[MOCK_MAX_DEVICES] = {false};
    for (uint32_t i = 0; i < n; i++) {
        if (ids[i] >= count || seen[ids[i]])
            return false;
        seen[ids[i]] = true;
    }
    return true;
}

MOCK_EXPORT aclprofConfig *aclprofCreateConfig(uint32_t *deviceIdList, uint32_t deviceNums,
                                               aclprofAicoreMetrics aicoreMetrics,
                                               const aclprofAicoreEvents *aicoreEvents,
                                               uint64_t dataTypeConfig)
{
    int32_t c;
    if (mock_fault("aclprofCreateConfig", &c))
        return NULL;
    if ((deviceNums != 0 && deviceIdList == NULL) || aicoreEvents != NULL)
        return NULL;
    if (deviceNums == 0 && (dataTypeConfig & ACL_PROF_MSPROFTX) == 0)
        return NULL;   /* only msproftx may run without a device */
    if (!device_list_valid(deviceIdList, deviceNums))
        return NULL;
    aclprofConfig *cfg = malloc(sizeof *cfg);
    if (!cfg)
        return NULL;
    config_fill(cfg, deviceIdList, deviceNums, (uint32_t)aicoreMetrics, dataTypeConfig);
    mock_lock();
    cfg->next = g_configs;
    g_configs = cfg;
    mock_unlock();
    return cfg;
}

MOCK_EXPORT aclError aclprofDestroyConfig(const aclprofConfig *profilerConfig)
{
    MOCK_FAULT_RETURN_CODE();
    if (profilerConfig == NULL)
        return ACL_ERROR_INVALID_PARAM;
    mock_lock();
    bool live = config_is_live(profilerConfig);
    if (live)
        config_unlink(profilerConfig);
    mock_unlock();
    if (!live)
        return ACL_ERROR_INVALID_PARAM;   /* double destroy: UB in the real library */
    free((aclprofConfig *)profilerConfig);
    return ACL_SUCCESS;
}

/* ---- start / stop ------------------------------------------------------------------- */

/* The preCheck shared by Start and Stop (on the config, before the mode). */
static int config_precheck(const aclprofConfig *cfg)
{
    if (cfg->userDataTypeConfig == 0)
        return ACL_ERROR_INVALID_PARAM;
    uint64_t accepted = era_2026() ? ACCEPTED_BITS : ACCEPTED_BITS & ~BITS_ADDED_2026;
    if (cfg->userDataTypeConfig & ~accepted)
        return ACL_ERROR_PROF_MODULES_UNSUPPORTED;
    if (cfg->devNums > MOCK_MAX_DEVICES + 1)
        return ACL_ERROR_INVALID_PARAM;
    return ACL_SUCCESS;
}

static bool aicore_metrics_valid(const aclprofConfig *cfg)
{
    if (!(cfg->userDataTypeConfig & ACL_PROF_AICORE_METRICS) ||
        cfg->aicoreMetrics == ACL_AICORE_NONE)
        return true;
    return cfg->aicoreMetrics <= ACL_AICORE_MEMORY_ACCESS;
}

/* The device count may have shrunk (aclmockSetDeviceCount) since the config was made. */
static bool devices_online(const aclprofConfig *cfg)
{
    uint32_t count = mock_device_count();
    for (uint32_t i = 0; i < cfg->devNums; i++) {
        if (cfg->devIdList[i] != MOCK_HOST_DEVICE_ID && cfg->devIdList[i] >= count)
            return false;
    }
    return true;
}

/* CheckConfigConsistency (RT prof_acl_mgr.cpp:3270-3298; the same loop in RT0's
 * PrepareStopAclApi): only devices that run (host 64 included) are compared, each with the
 * dataTypeConfig it was started with; devices that do not run are skipped (audit rows 4, 5). */
static int config_consistency(const aclprofConfig *cfg)
{
    if (!g_run.active)
        return ACL_SUCCESS;
    for (uint32_t i = 0; i < cfg->devNums; i++) {
        uint32_t id = cfg->devIdList[i];
        if (g_run.running[id] && g_run.types[id] != cfg->dataTypeConfig)
            return ACL_ERROR_INVALID_PROFILING_CONFIG;
    }
    return ACL_SUCCESS;
}

/* 2025 CheckDeviceTask (RT0 prof_acl_mgr.cpp:1495-1517): a running device -> ALREADY_RUN;
 * the host is skipped (its count goes up when the Start goes through, run_mark). */
static int device_task_check(const aclprofConfig *cfg)
{
    for (uint32_t i = 0; i < cfg->devNums; i++) {
        uint32_t id = cfg->devIdList[i];
        if (id != MOCK_HOST_DEVICE_ID && g_run.active && g_run.running[id])
            return ACL_ERROR_PROF_ALREADY_RUN;
    }
    return ACL_SUCCESS;
}

/* 2025: a Start whose devices are all free while a session runs starts them. The real
 * library creates a second PROF_ directory for them; the mock adds their device_<id>/
 * directories to the running one (README "Sessions and configs"). */
static int session_extend(const aclprofConfig *cfg)
{
    running_session view = g_run;   /* shares the pointers: only read */
    view.cfg = *cfg;
    if (!populate_devices(&view))
        return ACL_ERROR_INVALID_FILE;
    run_mark(&g_run, cfg);
    return ACL_SUCCESS;
}

/* Without aclprofInit: 2025 fails (100043); 2026 initialises (AutoInitForStartIfNeeded)
 * with GetResultPath(): the last result path of this process, else ACL_PROF_PATH, else "./". */
static int start_mode_check(void)
{
    if (mock_mode() != ACLMOCK_MODE_OFF || !era_2026())
        return mode_precheck();
    const char *path = "./";
    if (g_init_path)
        path = g_init_path;
    else if (g_option_set[ACL_PROF_PATH] && g_options[ACL_PROF_PATH][0] != '\0')
        path = g_options[ACL_PROF_PATH];
    return init_with_path(path);
}

static int start_locked(const aclprofConfig *profilerConfig)
{
    aclprofConfig cfg;
    if (profilerConfig == NULL) {
        if (!era_2026())
            return ACL_ERROR_INVALID_PARAM;   /* RT0 preCheckProfConfig */
        default_config(&cfg);
    } else {
        if (!config_is_live(profilerConfig))
            return ACL_ERROR_INVALID_PARAM;
        cfg = *profilerConfig;
    }
    int ret = config_precheck(&cfg);
    if (ret == ACL_SUCCESS)
        ret = start_mode_check();
    if (ret != ACL_SUCCESS)
        return ret;
    if (era_2026()) {
        /* A repeated Start never starts anything: 0 or 100010, new devices stay off. */
        if (g_repeat_start || g_run.active)
            return config_consistency(&cfg);
        g_repeat_start = true;
    } else {
        ret = device_task_check(&cfg);
        if (ret != ACL_SUCCESS)
            return ret;
    }
    if (!aicore_metrics_valid(&cfg) || !devices_online(&cfg))
        return ACL_ERROR_INVALID_PARAM;
    if (g_run.active)
        return session_extend(&cfg);
    return session_begin(&cfg);
}

MOCK_EXPORT aclError aclprofStart(const aclprofConfig *profilerConfig)
{
    MOCK_FAULT_RETURN_CODE();
    mock_lock();
    int ret = start_locked(profilerConfig);
    mock_unlock();
    return ret;
}

/* 2026 (ProfStop, PrepareStopAclApi, ProfStopCommon): not initialised -> 0 before anything
 * else; NULL stops whatever runs (0 if nothing does); after the checks EVERY running device
 * stops, whatever the config lists. */
static int stop_2026(const aclprofConfig *profilerConfig)
{
    if (mock_mode() == ACLMOCK_MODE_OFF)
        return ACL_SUCCESS;
    if (profilerConfig == NULL) {
        /* In SUBSCRIBE mode the subscription's device tasks run: the precheck fails. */
        if (mock_mode() == ACLMOCK_MODE_API_CTRL && !g_run.active)
            return ACL_SUCCESS;   /* "No running devices left", flag kept */
    } else {
        if (!config_is_live(profilerConfig))
            return ACL_ERROR_INVALID_PARAM;
        int ret = config_precheck(profilerConfig);
        if (ret != ACL_SUCCESS)
            return ret;
    }
    int ret = mode_precheck();
    if (ret == ACL_SUCCESS && profilerConfig != NULL)
        ret = config_consistency(profilerConfig);
    if (ret != ACL_SUCCESS)
        return ret;
    session_end();
    g_repeat_start = false;
    return ACL_SUCCESS;
}

/* 2025 (RT0 ProfStop, PrepareStopAclApi, ProfStopCommon): NULL -> 100000, not initialised
 * -> 100043; only the config's devices stop (the shared host when its last user stops). */
static int stop_2025(const aclprofConfig *profilerConfig)
{
    if (profilerConfig == NULL || !config_is_live(profilerConfig))
        return ACL_ERROR_INVALID_PARAM;
    int ret = config_precheck(profilerConfig);
    if (ret == ACL_SUCCESS)
        ret = mode_precheck();
    if (ret == ACL_SUCCESS)
        ret = config_consistency(profilerConfig);
    if (ret != ACL_SUCCESS || !g_run.active)
        return ret;
    for (uint32_t i = 0; i < profilerConfig->devNums; i++) {
        uint32_t id = profilerConfig->devIdList[i];
        if (id == MOCK_HOST_DEVICE_ID && g_run.running[id] && g_run.host_count > 1)
            g_run.host_count--;
        else
            g_run.running[id] = false;
    }
    if (!run_any_running(&g_run))
        session_end();
    return ACL_SUCCESS;
}

MOCK_EXPORT aclError aclprofStop(const aclprofConfig *profilerConfig)
{
    MOCK_FAULT_RETURN_CODE();
    mock_lock();
    int ret = era_2026() ? stop_2026(profilerConfig) : stop_2025(profilerConfig);
    mock_unlock();
    return ret;
}

/* ---- aclprofSetConfig --------------------------------------------------------------- */

/* ParamValidation::CheckArgRange (param_validation.cpp:1054-1067): digits only, no longer
 * than the decimal form of `hi` (so "050" fails for hi = 50), value in [lo, hi]. */
static bool arg_range(const char *s, size_t len, uint32_t lo, uint32_t hi)
{
    char hi_text[16];
    size_t hi_len = (size_t)snprintf(hi_text, sizeof hi_text, "%u", hi);
    if (len == 0 || len > hi_len)
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    return v >= lo && v <= hi;
}

/* Utils::Split(s, false, "", ","): "" gives no item; otherwise every item, empty ones
 * included ("a,,b" -> a, "", b). Each item must be one of `allowed` (NULL: any non-empty
 * item). Duplicates are accepted (the real code keeps or skips them). */
static bool list_valid(const char *s, const char *const *allowed, size_t n_allowed)
{
    if (*s == '\0')
        return true;
    for (const char *p = s;;) {
        size_t n = strcspn(p, ",");
        bool ok = allowed == NULL && n > 0;
        for (size_t i = 0; i < n_allowed && !ok; i++)
            ok = strlen(allowed[i]) == n && strncmp(p, allowed[i], n) == 0;
        if (!ok)
            return false;
        if (p[n] == '\0')
            return true;
        p += n + 1;
    }
}

/* CheckStorageLimitInner (param_validation.cpp:966-1017): "" is accepted; else <digits>MB,
 * at most 10 digits, in [200, UINT32_MAX]. */
static bool storage_limit_valid(const char *s, size_t len)
{
    if (len == 0)
        return true;
    if (len <= 2 || strcmp(s + len - 2, "MB") != 0 || len - 2 > 10)
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < len - 2; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    return v >= 200 && v <= UINT32_MAX;
}

/* 2025 ACL_PROF_SCALE (= 14; RT0 ParamValidation::CheckScaleIsValid): ';'-separated items
 * "opType:<a,b>" / "opName:<a,b>", each prefix at most once, each with a non-empty list.
 * "" is accepted. (Approximation: the real GetScaleInfo drops empty list items.) */
static bool scale_valid(const char *s)
{
    if (*s == '\0')
        return true;
    int seen_type = 0, seen_name = 0;
    for (const char *p = s;;) {
        size_t n = strcspn(p, ";");
        size_t pre = 7;   /* strlen("opType:") == strlen("opName:") */
        if (n < pre + 1)
            return false;
        if (strncmp(p, "opType:", pre) == 0)
            seen_type++;
        else if (strncmp(p, "opName:", pre) == 0)
            seen_name++;
        else
            return false;
        if (seen_type > 1 || seen_name > 1 || strspn(p + pre, ",") == n - pre)
            return false;
        if (p[n] == '\0')
            return true;
        p += n + 1;
    }
}

/* The value rules of ProfParamsAdapter::CheckApiConfigIsValid/Two/Three (RT
 * prof_params_adapter.cpp:294-440) for the mock's platform (README: every type supported,
 * no PLATFORM_SYS_DEVICE_US). ACL_SUCCESS, or the code for a bad value of `type`. */
static int option_value_check(int type, const char *s, size_t len)
{
    static const char *const host_sys[] = {"cpu", "mem", "disk", "network", "osrt", "numa"};
    static const char *const host_usage[] = {"cpu", "mem"};
    bool ok;
    switch (type) {
    case ACL_PROF_STORAGE_LIMIT: ok = storage_limit_valid(s, len); break;
    case ACL_PROF_SYS_HARDWARE_MEM_FREQ:   /* 10000 only on PLATFORM_SYS_DEVICE_US chips */
    case ACL_PROF_SYS_IO_FREQ:
    case ACL_PROF_DVPP_FREQ:
    case ACL_PROF_LOW_POWER_FREQ: ok = arg_range(s, len, 1, 100); break;
    case ACL_PROF_SYS_CPU_FREQ:
    case ACL_PROF_SYS_INTERCONNECTION_FREQ:
    case ACL_PROF_HOST_SYS_USAGE_FREQ: ok = arg_range(s, len, 1, 50); break;
    case ACL_PROF_LLC_MODE: ok = strcmp(s, "read") == 0 || strcmp(s, "write") == 0; break;
    case ACL_PROF_HOST_SYS:   /* "numa" came after RT0 */
        ok = list_valid(s, host_sys, era_2026() ? 6 : 5);
        break;
    case ACL_PROF_HOST_SYS_USAGE: ok = list_valid(s, host_usage, 2); break;
    case ACL_PROF_SYS_MEM_SERVICEFLOW: ok = len > 0; break;
    case 14:   /* ACL_PROF_OPTYPE (2026) / ACL_PROF_SCALE (2025) */
        ok = era_2026() ? len > 0 && list_valid(s, NULL, 0) : scale_valid(s);
        break;
    case ACL_PROF_NTS_METRICS:   /* ProfSetConfig maps an NTS failure to INVALID_PARAM */
        return strcmp(s, "PipeUtilization") == 0 ? ACL_SUCCESS : ACL_ERROR_INVALID_PARAM;
    case ACL_PROF_PATH: ok = true; break;   /* "" too; applied below */
    default: ok = false; break;   /* 2: the retired ACL_PROF_AIV_METRICS, not supported */
    }
    return ok ? ACL_SUCCESS : ACL_ERROR_INVALID_PROFILING_CONFIG;
}

MOCK_EXPORT aclError aclprofSetConfig(aclprofConfigType configType, const char *config,
                                      size_t configLength)
{
    MOCK_FAULT_RETURN_CODE();
    int type = (int)configType;
    int args_max = era_2026() ? ACL_PROF_ARGS_MAX : 15;   /* RT0 header: SCALE = 14, MAX = 15 */
    if (type <= ACL_PROF_ARGS_MIN || type >= args_max || configLength > SETCONFIG_MAX_LEN ||
        config == NULL || strnlen(config, configLength + 1) != configLength)
        return ACL_ERROR_INVALID_PARAM;
    mock_lock();
    int ret = ACL_SUCCESS;
    if (!era_2026() && mock_mode() == ACLMOCK_MODE_OFF)
        ret = ACL_ERROR_UNINITIALIZE;   /* RT0 ProfSetConfigPrecheck; 2026 inits its params */
    if (ret == ACL_SUCCESS)
        ret = option_value_check(type, config, configLength);
    /* 2026 MsprofSetConfig (prof_acl_mgr.cpp:2879-2887): a non-empty ACL_PROF_PATH after
     * init replaces the result path of later Starts (a running session keeps its dir). */
    if (ret == ACL_SUCCESS && type == ACL_PROF_PATH && configLength > 0 &&
        mock_mode() == ACLMOCK_MODE_API_CTRL) {
        char *abs = NULL;
        if (absolute_path(config, true, &abs) != ACL_SUCCESS) {
            ret = ACL_ERROR_INVALID_PROFILING_CONFIG;
        } else {
            free(g_init_path);
            g_init_path = abs;
        }
    }
    if (ret == ACL_SUCCESS) {
        memcpy(g_options[type], config, configLength + 1);
        g_option_set[type] = true;
    }
    mock_unlock();
    return ret;
}

/* ---- reset -------------------------------------------------------------------------- */

void mock_session_reset(void)
{
    while (g_configs) {
        aclprofConfig *next = g_configs->next;
        free(g_configs);
        g_configs = next;
    }
    running_clear();
    g_repeat_start = false;
    free(g_init_path);
    g_init_path = NULL;
    memset(g_options, 0, sizeof g_options);
    memset(g_option_set, 0, sizeof g_option_set);
    g_start_index = 0;
}
