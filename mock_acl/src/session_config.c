/* Profiling configs: aclprofCreateConfig/DestroyConfig (a registry of live configs, so a
 * destroyed or foreign pointer is rejected), the dataTypeConfig bits CANN stores and accepts
 * (reference 1.2, 3.2), and aclprofSetConfig with the value rules of each option type
 * (ProfParamsAdapter / ParamValidation in CANN; README "Sessions").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "session_internal.h"

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

/* What aclprofStart(NULL) runs (audit row 6c, R2): CANN's platform default
 * (platform_interface.cpp:223-230) ACL_API|TASK_TIME_L1|TASK_TIME|AICORE_METRICS|AICPU_MODEL
 * (CANN's internal names: L1 is ACL_PROF_TASK_TIME 0x2, TASK_TIME is 0x800) with
 * PIPE_UTILIZATION, stored as is (not expanded as aclprofCreateConfig would). */
#define DEFAULT_DATA_TYPES                                                               \
    (ACL_PROF_ACL_API | ACL_PROF_TASK_TIME | PROF_TASK_TIME_INTERNAL |                   \
     ACL_PROF_AICORE_METRICS | PROF_AICPU_MODEL)

static aclprofConfig *g_configs;                 /* live configs, for pointer validation */
char g_options[ACL_PROF_ARGS_MAX][SETCONFIG_MAX_LEN + 1];
bool g_option_set[ACL_PROF_ARGS_MAX];

/* ---- config registry ---------------------------------------------------------------- */

/* Only compares pointers, never dereferences `cfg`: a destroyed or garbage pointer is
 * rejected instead of crashing (the real library has undefined behaviour there). */
bool config_is_live(const aclprofConfig *cfg)
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
uint32_t config_devices(const aclprofConfig *cfg, uint32_t *ids)
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

/* aclprofStart(NULL) (msprofiler_acl_api.cpp:466-483): the devices the process opened
 * (aclrtSetDevice, CANN's MsprofNotifySetDevice), and NO host entry, so CheckConfigConsistency
 * never compares the host with it. No device opened: no device at all, which Start refuses
 * after its mode checks (100000; what CANN does then was not run, UNVERIFIED). */
void default_config(aclprofConfig *cfg)
{
    uint32_t ids[MOCK_MAX_DEVICES];
    uint32_t n = 0, count = mock_device_count();
    for (uint32_t i = 0; i < count; i++) {
        if (mock_device_opened(i))
            ids[n++] = i;
    }
    config_fill(cfg, ids, n, ACL_AICORE_PIPE_UTILIZATION, DEFAULT_DATA_TYPES);
    cfg->devNums = n;   /* drop the host config_fill appended */
    cfg->dataTypeConfig = DEFAULT_DATA_TYPES;
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
    MOCK_FAULT_RETURN(NULL);
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

/* The preCheck shared by Start and Stop (on the config, before the mode). */
int config_precheck(const aclprofConfig *cfg)
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

bool aicore_metrics_valid(const aclprofConfig *cfg)
{
    if (!(cfg->userDataTypeConfig & ACL_PROF_AICORE_METRICS) ||
        cfg->aicoreMetrics == ACL_AICORE_NONE)
        return true;
    return cfg->aicoreMetrics <= ACL_AICORE_MEMORY_ACCESS;
}

/* The device count may have shrunk (aclmockSetDeviceCount) since the config was made. */
bool devices_online(const aclprofConfig *cfg)
{
    uint32_t count = mock_device_count();
    for (uint32_t i = 0; i < cfg->devNums; i++) {
        if (cfg->devIdList[i] != MOCK_HOST_DEVICE_ID && cfg->devIdList[i] >= count)
            return false;
    }
    return true;
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

/* CheckApiConfigSupport (prof_params_adapter.cpp:212-250) on the chip of the profile (audit
 * row 7b, compiled): a 910B (CHIP_CLOUD_V2) supports neither LOW_POWER_FREQ, SYS_CPU_FREQ nor
 * 14 (OPTYPE, which needs TASK_SCALE; RT0's SCALE) -> 100010, nor NTS_METRICS (TASK_NTS) ->
 * 100000 (ProfSetConfig maps an NTS failure to INVALID_PARAM). Checked before the value. */
static int chip_supports(int type)
{
    if (mock_chip() != ACLMOCK_CHIP_910B)
        return ACL_SUCCESS;
    switch (type) {
    case ACL_PROF_LOW_POWER_FREQ:
    case ACL_PROF_SYS_CPU_FREQ:
    case 14:
        return ACL_ERROR_INVALID_PROFILING_CONFIG;
    case ACL_PROF_NTS_METRICS:
        return ACL_ERROR_INVALID_PARAM;
    default:
        return ACL_SUCCESS;
    }
}

/* The value rules of ProfParamsAdapter::CheckApiConfigIsValid/Two/Three (RT
 * prof_params_adapter.cpp:294-440) for the mock's platform (no PLATFORM_SYS_DEVICE_US);
 * which types the chip supports at all is chip_supports(). ACL_SUCCESS, or the code for a bad value of `type`. */
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
    if (mock_helper_host())
        return ACL_ERROR_FEATURE_UNSUPPORTED;   /* after the input checks (L512 vs L526) */
    mock_lock();
    int ret = ACL_SUCCESS;
    if (!era_2026() && mock_mode() == ACLMOCK_MODE_OFF)
        ret = ACL_ERROR_UNINITIALIZE;   /* RT0 ProfSetConfigPrecheck; 2026 inits its params */
    if (ret == ACL_SUCCESS)
        ret = chip_supports(type);
    /* Audit row 7c (R3, both eras): in SUBSCRIBE mode the precheck passes (mode != OFF), so
     * InitParams is skipped, params_ is null and CheckApiConfigIsValid fails
     * (prof_acl_mgr.cpp:568-574, prof_params_adapter.cpp:294-297), whatever the value. */
    if (ret == ACL_SUCCESS && mock_mode() == ACLMOCK_MODE_SUBSCRIBE)
        ret = ACL_ERROR_INVALID_PROFILING_CONFIG;
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

void session_configs_reset(void)
{
    while (g_configs) {
        aclprofConfig *next = g_configs->next;
        free(g_configs);
        g_configs = next;
    }
    memset(g_options, 0, sizeof g_options);
    memset(g_option_set, 0, sizeof g_option_set);
}
