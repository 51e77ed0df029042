/* What the op records mean (fidelity audit rows 11, 12, 13): the settings that decide the
 * clock of start/end, whether devId is filled, and the step keypoint records.
 *
 * Kept apart from common.c so that the area has one owner: the values are read from the
 * environment at load and again at aclmockReset (mock_records_reset), like the settings in
 * common.c, and changed by the aclmockSet* controls below.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mock_internal.h"

/* CANN stamps this model id on step keypoints: ProfCannPlugin::ProfSetStepInfo (and GE's
 * HandleCtrlSetStepInfo in older releases) pass MARKEX_MODEL_ID / ge::kInvalidModelId. */
#define KEYPOINT_MODEL_DEFAULT 0xFFFFFFFFu

static _Atomic int64_t g_clock_offset_ns;
/* Drift (issue 25): the device counter runs fast or slow by g_drift_ppb parts per 10^9
 * against the host clock, counted from g_drift_anchor_ns (host time of the last change). */
static _Atomic int64_t g_drift_ppb;
static _Atomic uint64_t g_drift_anchor_ns;
/* 1: a record's threadId is the kernel tid of the thread that executed the model (as the
 * host thread id CANN reports, UNVERIFIED on an NPU) instead of the model file's value. */
static atomic_int g_stamp_thread;
static atomic_int g_devid_zero;
static atomic_int g_keypoints = 1;
static atomic_uint g_keypoint_model = KEYPOINT_MODEL_DEFAULT;

/* A device time must stay a counter value (unsigned): the offset may not take the clock
 * below 0 now (and time only moves on). */
static bool offset_ok(int64_t off)
{
    return off >= 0 || (uint64_t)(-(off + 1)) < mock_now_ns();
}

static void warn_env(const char *name, const char *value)
{
    fprintf(stderr, "aclmock: ignoring %s=%s (invalid value)\n", name, value);
}

static bool parse_flag(const char *v, int *out)
{
    if (strcmp(v, "0") == 0 || strcmp(v, "1") == 0) {
        *out = v[0] - '0';
        return true;
    }
    return false;
}

static void load_env(void)
{
    atomic_store(&g_clock_offset_ns, 0);
    atomic_store(&g_drift_ppb, 0);
    atomic_store(&g_drift_anchor_ns, mock_now_ns());
    atomic_store(&g_stamp_thread, 0);
    atomic_store(&g_devid_zero, 0);
    atomic_store(&g_keypoints, 1);
    atomic_store(&g_keypoint_model, KEYPOINT_MODEL_DEFAULT);

    const char *v;
    if ((v = getenv("ACLMOCK_DEVICE_CLOCK_OFFSET_NS")) != NULL && *v) {
        errno = 0;
        char *end;
        long long off = strtoll(v, &end, 10);
        if (errno == 0 && *end == '\0' && offset_ok(off))
            atomic_store(&g_clock_offset_ns, (int64_t)off);
        else
            warn_env("ACLMOCK_DEVICE_CLOCK_OFFSET_NS", v);
    }
    if ((v = getenv("ACLMOCK_DEVICE_CLOCK_DRIFT_PPB")) != NULL && *v) {
        errno = 0;
        char *end;
        long long ppb = strtoll(v, &end, 10);
        if (errno == 0 && *end == '\0' && ppb >= -ACLMOCK_MAX_DRIFT_PPB && ppb <= ACLMOCK_MAX_DRIFT_PPB)
            atomic_store(&g_drift_ppb, (int64_t)ppb);
        else
            warn_env("ACLMOCK_DEVICE_CLOCK_DRIFT_PPB", v);
    }
    int flag;
    if ((v = getenv("ACLMOCK_STAMP_THREAD")) != NULL && *v) {
        if (parse_flag(v, &flag))
            atomic_store(&g_stamp_thread, flag);
        else
            warn_env("ACLMOCK_STAMP_THREAD", v);
    }
    if ((v = getenv("ACLMOCK_DEVID_ZERO")) != NULL && *v) {
        if (parse_flag(v, &flag))
            atomic_store(&g_devid_zero, flag);
        else
            warn_env("ACLMOCK_DEVID_ZERO", v);
    }
    if ((v = getenv("ACLMOCK_STEP_KEYPOINTS")) != NULL && *v) {
        if (parse_flag(v, &flag))
            atomic_store(&g_keypoints, flag);
        else
            warn_env("ACLMOCK_STEP_KEYPOINTS", v);
    }
    if ((v = getenv("ACLMOCK_STEP_KEYPOINT_MODEL")) != NULL && *v) {
        errno = 0;
        char *end;
        unsigned long long id = strtoull(v, &end, 10);
        if (v[0] >= '0' && v[0] <= '9' && errno == 0 && *end == '\0' && id <= UINT32_MAX)
            atomic_store(&g_keypoint_model, (unsigned)id);
        else
            warn_env("ACLMOCK_STEP_KEYPOINT_MODEL", v);
    }
}

__attribute__((constructor)) static void recordsettings_init(void)
{
    load_env();
}

void mock_records_reset(void)
{
    load_env();
}

uint64_t mock_device_time(uint64_t host_ns)
{
    /* Unsigned wrap-around adds a negative offset; offset_ok keeps the result >= 0. */
    uint64_t t = host_ns + (uint64_t)atomic_load(&g_clock_offset_ns);
    int64_t ppb = atomic_load(&g_drift_ppb);
    if (ppb != 0) {
        /* Drift accumulates from the anchor; |ppb| < 10^9 keeps the counter monotonic. */
        __int128 since = (__int128)host_ns - (__int128)atomic_load(&g_drift_anchor_ns);
        t += (uint64_t)(int64_t)(since * ppb / 1000000000);
    }
    return mock_time_unit() == ACLMOCK_TIME_US ? t / 1000 : t;
}

bool mock_devid_zero(void)
{
    return atomic_load(&g_devid_zero) != 0;
}

bool mock_step_keypoints(uint32_t *model_id)
{
    *model_id = atomic_load(&g_keypoint_model);
    return atomic_load(&g_keypoints) != 0;
}

MOCK_EXPORT int aclmockSetDeviceClockOffset(int64_t offsetNs)
{
    if (!offset_ok(offsetNs))
        return ACL_ERROR_INVALID_PARAM;
    atomic_store(&g_clock_offset_ns, offsetNs);
    return ACL_SUCCESS;
}

MOCK_EXPORT int aclmockSetDeviceClockDrift(int64_t ppb)
{
    if (ppb < -ACLMOCK_MAX_DRIFT_PPB || ppb > ACLMOCK_MAX_DRIFT_PPB)
        return ACL_ERROR_INVALID_PARAM;
    /* Fold the drift so far into the offset, so that the device clock does not jump. */
    uint64_t now = mock_now_ns();
    int64_t old = atomic_load(&g_drift_ppb);
    __int128 since = (__int128)now - (__int128)atomic_load(&g_drift_anchor_ns);
    atomic_fetch_add(&g_clock_offset_ns, (int64_t)(since * old / 1000000000));
    atomic_store(&g_drift_anchor_ns, now);
    atomic_store(&g_drift_ppb, ppb);
    return ACL_SUCCESS;
}

bool mock_stamp_thread(void)
{
    return atomic_load(&g_stamp_thread) != 0;
}

MOCK_EXPORT int aclmockSetStampThread(int enabled)
{
    if (enabled != 0 && enabled != 1)
        return ACL_ERROR_INVALID_PARAM;
    atomic_store(&g_stamp_thread, enabled);
    return ACL_SUCCESS;
}

MOCK_EXPORT int aclmockSetDevIdZero(int enabled)
{
    if (enabled != 0 && enabled != 1)
        return ACL_ERROR_INVALID_PARAM;
    atomic_store(&g_devid_zero, enabled);
    return ACL_SUCCESS;
}

MOCK_EXPORT int aclmockSetStepKeypoints(int enabled, uint32_t modelId)
{
    if (enabled != 0 && enabled != 1)
        return ACL_ERROR_INVALID_PARAM;
    atomic_store(&g_keypoints, enabled);
    atomic_store(&g_keypoint_model, modelId);
    return ACL_SUCCESS;
}
