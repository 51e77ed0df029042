/* Profiling sessions: the state machine of aclprofInit/Finalize/Start/Stop (reference 3.1,
 * 3.2; README "Sessions").
 *
 * State machine (reference 3.1): the global mode is OFF, API_CTRL (after aclprofInit) or
 * SUBSCRIBE (owned by subscribe.c). The real library has a fourth mode, CMD (msprof command
 * line, acl.json or GE option profiling), which the mock never enters: nothing in the
 * mock starts command-line profiling, so ACL_ERROR_PROF_ALREADY_RUN from the CMD column
 * is unreachable.
 *
 * One configuration runs at a time. While it runs, the session keeps a copy of its config,
 * so destroying the aclprofConfig object does not matter.
 *
 * This file is the state machine and the start/stop rules of each CANN era; configs and
 * aclprofSetConfig are in session_config.c, the PROF_* output in session_output.c
 * (session_internal.h between them).
 */
#include <stdlib.h>
#include <string.h>

#include "session_internal.h"

#define INIT_PATH_MAX 4096      /* aclprofInit: length < 4096 (2026), <= 4096 (2025) */

/* ---- state ------------------------------------------------------------------------ */

char *g_init_path;
running_session g_run;
/* 2026 g_isRepeatInvoking (msprofiler_acl_api.cpp): set by the first Start that passes the
 * mode check, cleared only by a Stop that gets through. Not cleared by a failed Start nor by
 * Finalize, so a later Start only compares configs and starts nothing; the mock copies that. */
static bool g_repeat_start;

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
            mock_threads_response_end();
            mock_set_mode(ACLMOCK_MODE_OFF);
        }
    }
    mock_unlock();
    return ret;
}

/* ---- start / stop ------------------------------------------------------------------- */

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
    /* Audit row 6b (R1): in 2026 the profapi layer auto-initialises BEFORE the
     * implementation's preCheck (prof_acl_inner_api.cpp:35-59, then
     * msprofiler_acl_api.cpp:364-374), so a Start refused for its config still leaves the
     * library initialised: a later Init gives 100002, a subscribe 148047. */
    if (era_2026() && mock_mode() == ACLMOCK_MODE_OFF) {
        int ret = start_mode_check();
        if (ret != ACL_SUCCESS)
            return ret;
    }
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
    if (!aicore_metrics_valid(&cfg) || !devices_online(&cfg) || cfg.devNums == 0)
        return ACL_ERROR_INVALID_PARAM;   /* 0: Start(NULL) with no device opened */
    if (g_run.active)
        return session_extend(&cfg);
    return session_begin(&cfg);
}

MOCK_EXPORT aclError aclprofStart(const aclprofConfig *profilerConfig)
{
    MOCK_FAULT_RETURN_CODE();
    mock_lock();
    int ret = start_locked(profilerConfig);
    if (ret == ACL_SUCCESS)
        mock_threads_response_start();
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
    /* Audit row 20: the helper-host check follows IsInited() and the NULL case. */
    if (mock_helper_host())
        return profilerConfig == NULL ? ACL_SUCCESS : ACL_ERROR_FEATURE_UNSUPPORTED;
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
    if (mock_helper_host())
        return ACL_ERROR_FEATURE_UNSUPPORTED;   /* 2025: after the arguments (UNVERIFIED) */
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

/* ---- reset -------------------------------------------------------------------------- */

void mock_session_reset(void)
{
    session_configs_reset();
    session_output_reset();
    g_repeat_start = false;
    free(g_init_path);
    g_init_path = NULL;
}
