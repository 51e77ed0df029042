/* Internal interface of the profiling sessions, shared by the session files only (the rest
 * of the mock sees them through mock_internal.h):
 *   session.c         the state machine: aclprofInit/Finalize/Start/Stop, the mode
 *                     prechecks, the start/stop rules of each CANN era, reset
 *   session_config.c  aclprofConfig objects (create, destroy, validate, expand the bits)
 *                     and aclprofSetConfig with its value rules
 *   session_output.c  paths, the PROF_* directory, its JSON description files, and the
 *                     bookkeeping of which devices run
 * Everything here is called with g_mock_lock held.
 */
#ifndef ACLMOCK_SESSION_INTERNAL_H
#define ACLMOCK_SESSION_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "mock_internal.h"

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

/* Ops a session collected per (device, model): written at its end as
 * device_<id>/mock_ops.json (the real library writes binary task data instead). */
#define SESSION_OP_KEYS 256
typedef struct session_op_count {
    uint32_t device;
    uint32_t model;
    uint64_t ops;
} session_op_count;

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
    session_op_count op_counts[SESSION_OP_KEYS];
    uint32_t n_op_counts;
    uint64_t ops_unkeyed[MOCK_MAX_DEVICES];   /* beyond SESSION_OP_KEYS pairs: by device only */
} running_session;

static inline bool era_2026(void)
{
    return mock_cann_era() == ACLMOCK_CANN_2026;
}

/* ---- session.c --------------------------------------------------------------------- */

extern char *g_init_path;        /* absolute; NULL while not initialised */
extern running_session g_run;    /* the running session, if g_run.active */

/* ---- session_config.c -------------------------------------------------------------- */

/* aclprofSetConfig values by type; g_option_set says which were given. */
extern char g_options[ACL_PROF_ARGS_MAX][SETCONFIG_MAX_LEN + 1];
extern bool g_option_set[ACL_PROF_ARGS_MAX];

/* Was `cfg` returned by aclprofCreateConfig and not destroyed? Compares pointers only. */
bool config_is_live(const aclprofConfig *cfg);
/* Device ids of a config without the host; returns how many. */
uint32_t config_devices(const aclprofConfig *cfg, uint32_t *ids);
/* What aclprofStart(NULL) runs (2026): CANN's platform default on the opened devices (maybe
 * none), no host. */
void default_config(aclprofConfig *cfg);
/* The preCheck shared by Start and Stop (on the config, before the mode). */
int config_precheck(const aclprofConfig *cfg);
bool aicore_metrics_valid(const aclprofConfig *cfg);
/* Every device of the config still exists (the count may have shrunk since). */
bool devices_online(const aclprofConfig *cfg);
/* aclmockReset: frees every config, forgets the SetConfig options. */
void session_configs_reset(void);

/* ---- session_output.c -------------------------------------------------------------- */

/* Lexical absolute path (cwd prefixed, ".", ".." and "//" folded, no symlinks resolved);
 * `check_chars` refuses CANN's invalid characters (2026). ACL_SUCCESS and a malloc'd
 * `*out`, or ACL_ERROR_INVALID_FILE / ACL_ERROR_BAD_ALLOC. */
int absolute_path(const char *path, bool check_chars, char **out);
bool make_dirs(const char *path);   /* mkdir -p; an existing directory is fine */
/* Creates device_<id>/mock_config.json for the devices of run->cfg. */
bool populate_devices(const running_session *run);
/* Marks the devices of `cfg` (and the host) as running with its dataTypeConfig. */
void run_mark(running_session *run, const aclprofConfig *cfg);
bool run_any_running(const running_session *run);
/* Creates the PROF_* directory of a new session in g_init_path and makes it g_run;
 * ACL_ERROR_INVALID_FILE (nothing left behind) when it cannot. */
int session_begin(const aclprofConfig *cfg);
/* Stops the running session (if any): the stop time goes into host/mock_session.json. */
void session_end(void);
/* aclmockReset: forgets the running session and the PROF_<nnnnnn> counter. */
void session_output_reset(void);

#endif
