/* What the session test files share (test_session.c, test_session_config.c,
 * test_session_output.c, test_controls.c): a per-test output root, config shortcuts, PROF_*
 * directory readers, and run_in_each_era(), which runs a file's tests once per CANN era.
 * Helpers are `static inline` so that a file that does not use one gets no warning.
 */
#ifndef ACLMOCK_TEST_SESSION_COMMON_H
#define ACLMOCK_TEST_SESSION_COMMON_H

#include <dirent.h>
#include <limits.h>
#include <pthread.h>
#include <sys/stat.h>

#include "test_common.h"

#define PROF_AICPU_MODEL 0x4000000000000000ULL

/* per-test output root, removed by the test's end */
static char g_tmp[1024] __attribute__((unused));
/* run_in_each_era() sets it (and ACLMOCK_CANN, read by each RUN's reset). */
static int g_era __attribute__((unused));
#define ERA_2026 (g_era == ACLMOCK_CANN_2026)

static inline bool tmp_begin(void)
{
    return tc_make_tmpdir(g_tmp, sizeof g_tmp);
}

static inline void tmp_end(void)
{
    aclmockReset();   /* closes files before removing them */
    tc_rm_rf(g_tmp);
}

static inline aclError init_tmp(void)
{
    return aclprofInit(g_tmp, strlen(g_tmp));
}

static inline aclprofConfig *config2(uint32_t a, uint32_t b, uint64_t types)
{
    uint32_t ids[2] = {a, b};
    return aclprofCreateConfig(ids, 2, ACL_AICORE_NONE, NULL, types);
}

static inline aclprofConfig *config1(uint32_t a, uint64_t types)
{
    return aclprofCreateConfig(&a, 1, ACL_AICORE_NONE, NULL, types);
}

/* Names of the PROF_* entries of `dir`, sorted; returns how many (at most `max`). */
static inline int prof_dirs(const char *dir, char names[][256], int max)
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

static inline bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Reads <g_tmp>/<prof>/<sub>/<file>. */
static inline char *read_prof_file(const char *prof, const char *sub, const char *file)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s/%s/%s", g_tmp, prof, sub, file);
    return tc_read_file(path);
}

/* PROF_<6 digits>_<17 digits>_<8 digits><8 letters A-R> */
static inline bool prof_name_valid(const char *name, unsigned counter)
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

/* Is <g_tmp>/<prof>/device_<id> there? */
static inline bool device_dir(const char *prof, uint32_t id)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s/device_%u", g_tmp, prof, id);
    return is_dir(path);
}

/* Reads dataTypeConfigStored of a one-device session started with `types`. */
static inline uint64_t stored_types(uint64_t types)
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

static inline aclError set(int type, const char *value)
{
    return aclprofSetConfig((aclprofConfigType)type, value, strlen(value));
}

/* Runs `tests` (a function of RUN()s) once per CANN era, 2025 first. */
static inline void run_in_each_era(void (*tests)(void))
{
    static const int eras[] = {ACLMOCK_CANN_2025, ACLMOCK_CANN_2026};
    for (size_t e = 0; e < 2; e++) {
        g_era = eras[e];
        setenv("ACLMOCK_CANN", g_era == ACLMOCK_CANN_2026 ? "2026" : "2025", 1);
        fprintf(stderr, "-- CANN era %d\n", g_era);
        tests();
    }
    unsetenv("ACLMOCK_CANN");
}

#endif
