/* The mock's control API that reaches into every area: aclmockReset, aclmockGetStats,
 * aclmockGetMode, aclmockVersion, and the process's fork() handlers. It calls each area's
 * reset, stats and fork hooks (declared in mock_internal.h); no file calls it. The controls
 * that only change one setting live beside that setting (common.c, recordsettings.c,
 * subscribe_log.c, subscribe_writer.c).
 *
 * The controls are never subject to fault injection: a test must always be able to inspect
 * and restore the mock.
 */
#include <string.h>

#include "mock_internal.h"

/* ---- fork ------------------------------------------------------------------------- */

/* Every lock of the mock is held across fork() (prepare, in the lock order), so that the
 * child's copy of what it guards is consistent; the child then re-initialises locks and
 * condition variables rather than unlocking them: a recursive mutex still names the
 * parent's thread as its owner (the child's thread has a new tid, so unlock fails with
 * EPERM), and a condition variable copied while another thread waited on it keeps that
 * phantom waiter, so signals to it are lost (issue 9: children that subscribed and
 * executed hung). One registration for the whole library, because the order in which
 * separate registrations' prepare handlers run depends on when each file registered. */
static void fork_prepare(void)
{
    mock_lock();
    mock_exception_fork_prepare();
    sub_fork_prepare();
    mock_threads_fork_prepare();   /* after g_sub_lock, as device_up/down take it */
    names_fork_prepare();
    mock_base_fork_prepare();   /* g_fault_lock, a leaf: last */
}

static void fork_parent(void)
{
    mock_base_fork_parent();
    names_fork_release();
    mock_threads_fork_parent();
    sub_fork_parent();
    mock_exception_fork_parent();
    mock_unlock();
}

/* The areas' child hooks do not take g_mock_lock, so re-initialising it first (in
 * mock_base_fork_child) is the same as last. */
static void fork_child(void)
{
    mock_base_fork_child();
    names_fork_release();
    models_fork_child();
    mock_threads_fork_child();
    sub_fork_child();
    mock_exception_fork_child();
}

/* At load: the settings from the environment, then the fork handlers. */
__attribute__((constructor)) static void control_init(void)
{
    mock_settings_load();
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

/* ---- control API ------------------------------------------------------------------- */

MOCK_EXPORT int aclmockVersion(void)
{
    return ACLMOCK_API_VERSION;
}

MOCK_EXPORT void aclmockReset(void)
{
    mock_subscribe_reset();   /* first and unlocked: it joins the writer thread */
    mock_lock();
    mock_model_reset();
    mock_opdesc_reset();
    mock_msproftx_reset();
    mock_stepinfo_reset();
    mock_session_reset();
    mock_runtime_reset();
    mock_set_mode(ACLMOCK_MODE_OFF);
    aclmockClearFaults();
    mock_settings_load();
    mock_records_reset();
    mock_exception_reset();
    mock_unlock();
}

MOCK_EXPORT int aclmockGetMode(void)
{
    mock_lock();
    int mode = mock_mode();
    mock_unlock();
    return mode;
}

MOCK_EXPORT int aclmockGetStats(aclmockStats *out)
{
    if (out == NULL)
        return ACL_ERROR_INVALID_PARAM;
    memset(out, 0, sizeof *out);
    mock_lock();
    mock_msproftx_stats(out);
    mock_subscribe_stats(out);
    mock_opdesc_stats(out);
    mock_model_stats(out);
    mock_exception_stats(out);
    mock_tensordesc_stats(out);
    mock_unlock();
    return ACL_SUCCESS;
}
