/* The output of a session: absolute paths, the PROF_<nnnnnn>_<time>_<pid><letters>
 * directory (utils.cpp CreateProfDir), its host/mock_session.json and
 * device_<id>/mock_config.json descriptions (README "Output directory"), written atomically,
 * and the bookkeeping of which devices run with which dataTypeConfig (CANN's devTasks_).
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

#include "session_internal.h"

static uint64_t g_start_index;                   /* PROF_<nnnnnn> counter */
static uint64_t g_rand_state;

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
int absolute_path(const char *path, bool check_chars, char **out)
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
bool make_dirs(const char *path)
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
bool populate_devices(const running_session *run)
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
void run_mark(running_session *run, const aclprofConfig *cfg)
{
    /* ACL_PROF_API_STATS collects on the host only: its devices get no task whose types a
     * later Start is compared with. Inferred from the compiled RT (audit R5: Start(API_STATS)
     * then Start(NULL) gives 0, which a device task started with API_STATS types would make
     * 100010); the code path itself was not traced. */
    bool host_only = (cfg->dataTypeConfig & ACL_PROF_API_STATS) != 0;
    for (uint32_t i = 0; i < cfg->devNums; i++) {
        uint32_t id = cfg->devIdList[i];
        if (host_only && id != MOCK_HOST_DEVICE_ID)
            continue;
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

bool run_any_running(const running_session *run)
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
int session_begin(const aclprofConfig *cfg)
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

#define TASK_TIME_BITS (ACL_PROF_TASK_TIME | ACL_PROF_TASK_TIME_L0 | ACL_PROF_TASK_TIME_L2 | \
                        ACL_PROF_TASK_TIME_L3)

void mock_session_note_ops(uint32_t device, uint32_t model_id, uint64_t n)
{
    if (!g_run.active || device >= MOCK_MAX_DEVICES || !g_run.running[device] ||
        !(g_run.types[device] & TASK_TIME_BITS) || n == 0)
        return;
    for (uint32_t i = 0; i < g_run.n_op_counts; i++) {
        session_op_count *c = &g_run.op_counts[i];
        if (c->device == device && c->model == model_id) {
            c->ops += n;
            return;
        }
    }
    if (g_run.n_op_counts < SESSION_OP_KEYS)
        g_run.op_counts[g_run.n_op_counts++] = (session_op_count){device, model_id, n};
    else
        g_run.ops_unkeyed[device] += n;
}

static void ops_body(FILE *f, const running_session *run, const void *arg)
{
    uint32_t dev = *(const uint32_t *)arg;
    uint64_t total = run->ops_unkeyed[dev];
    fprintf(f, "  \"deviceId\": %u,\n  \"opsByModel\": {", dev);
    const char *sep = "";
    for (uint32_t i = 0; i < run->n_op_counts; i++) {
        if (run->op_counts[i].device != dev)
            continue;
        fprintf(f, "%s\"%u\": %llu", sep, run->op_counts[i].model,
                (unsigned long long)run->op_counts[i].ops);
        total += run->op_counts[i].ops;
        sep = ", ";
    }
    fprintf(f, "},\n  \"opsUnattributed\": %llu,\n  \"ops\": %llu",
            (unsigned long long)run->ops_unkeyed[dev], (unsigned long long)total);
}

/* device_<id>/mock_ops.json for each device that collected task time in this session. */
static void write_op_counts(const running_session *run)
{
    for (uint32_t id = 0; id < MOCK_MAX_DEVICES; id++) {
        if (!(run->types[id] & TASK_TIME_BITS))
            continue;
        char name[32];
        snprintf(name, sizeof name, "device_%u", id);
        char *dev_dir = path_join(run->prof_dir, name);
        if (!dev_dir || !write_json(dev_dir, "mock_ops.json", ops_body, run, &id))
            fprintf(stderr, "aclmock: cannot write %s/mock_ops.json\n", dev_dir ? dev_dir : name);
        free(dev_dir);
    }
}

/* Stops the running session: records the stop time in host/mock_session.json. */
void session_end(void)
{
    if (!g_run.active)
        return;
    mock_msproftx_session(false, NULL);
    write_op_counts(&g_run);
    uint64_t stop[2] = {mock_now_ns(), realtime_ns()};
    if (!write_json(g_run.host_dir, "mock_session.json", session_body, &g_run, stop))
        fprintf(stderr, "aclmock: cannot update %s/mock_session.json\n", g_run.host_dir);
    running_clear();
}

void session_output_reset(void)
{
    running_clear();
    g_start_index = 0;
}
