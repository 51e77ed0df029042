/* The base every area of the mock calls: the global lock, fault injection (the check and
 * its aclmockFailNext/ClearFaults table), clock, thread ids, settings (environment defaults and
 * their aclmockSet* setters), the global mode and JSON escaping. It calls no other file: the
 * control API that calls every area's reset, stats and fork hooks is control.c.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "mock_internal.h"

/* ---- lock ------------------------------------------------------------------------- */

/* Recursive so that an exported function may call another exported function. */
pthread_mutex_t g_mock_lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;

void mock_lock(void)
{
    pthread_mutex_lock(&g_mock_lock);
}

void mock_unlock(void)
{
    pthread_mutex_unlock(&g_mock_lock);
}

/* ---- fault injection ---------------------------------------------------------------- */

#define FAULT_SLOTS 32
#define FAULT_NAME_MAX 64

typedef struct fault {
    char function[FAULT_NAME_MAX];
    uint32_t remaining;   /* 0: slot free */
    int32_t code;
} fault;

/* Separate from g_mock_lock: mock_fault() runs first in every function, before (and in
 * some functions instead of) taking the global lock. */
static pthread_mutex_t g_fault_lock = PTHREAD_MUTEX_INITIALIZER;
static fault g_faults[FAULT_SLOTS];
/* Number of slots with remaining > 0. Checked without any lock so that an unarmed mock
 * pays a single relaxed load per call. */
static atomic_uint g_faults_armed;

/* Every function a fault may be armed for: catches typos in tests, which would otherwise
 * arm a fault that never fires. Must list every exported acl* function of cdefs/. */
static const char *const k_fault_functions[] = {
    "aclprofInit", "aclprofFinalize", "aclprofStart", "aclprofStop", "aclprofCreateConfig",
    "aclprofDestroyConfig", "aclprofSetConfig", "aclprofModelSubscribe",
    "aclprofModelUnSubscribe", "aclprofCreateSubscribeConfig",
    "aclprofDestroySubscribeConfig", "aclprofGetOpDescSize", "aclprofGetOpNum",
    "aclprofGetOpTypeLen", "aclprofGetOpType", "aclprofGetOpNameLen", "aclprofGetOpName",
    "aclprofGetOpStart", "aclprofGetOpEnd", "aclprofGetOpDuration", "aclprofGetModelId",
    "aclprofGetOpFlag", "aclprofGetOpAttriValue", "aclprofGetStepTimestamp",
    "aclprofCreateStepInfo", "aclprofDestroyStepInfo", "aclprofCreateStamp",
    "aclprofDestroyStamp", "aclprofPush", "aclprofPop", "aclprofRangeStart",
    "aclprofRangeStop", "aclprofSetStampTraceMessage", "aclprofMark", "aclprofMarkEx",
    "aclprofStr2Id", "aclprofRangePushEx", "aclprofRangePop",
    "aclInit", "aclFinalize", "aclrtSetDevice", "aclrtResetDevice", "aclrtGetDevice",
    "aclrtGetDeviceCount", "aclrtCreateContext", "aclrtDestroyContext",
    "aclrtSetCurrentContext", "aclrtGetCurrentContext", "aclrtCreateStream",
    "aclrtDestroyStream", "aclrtSynchronizeStream", "aclrtSynchronizeDevice",
    "aclmdlLoadFromFile", "aclmdlExecute", "aclmdlUnload",
    "aclCreateDataBuffer", "aclDestroyDataBuffer", "aclmdlCreateDataset",
    "aclmdlDestroyDataset", "aclmdlAddDatasetBuffer", "aclmdlGetDatasetNumBuffers",
    "aclrtSetExceptionInfoCallback", "aclrtExceptionInfoCallbackRegister",
    "aclrtExceptionInfoCallbackUnregister", "aclrtGetTaskIdFromExceptionInfo",
    "aclrtGetStreamIdFromExceptionInfo", "aclrtGetThreadIdFromExceptionInfo",
    "aclrtGetDeviceIdFromExceptionInfo", "aclrtGetErrorCodeFromExceptionInfo",
    "aclmdlCreateAndGetOpDesc", "aclGetTensorDescByIndex", "aclGetTensorDescAddress",
    "aclGetTensorDescType", "aclGetTensorDescFormat", "aclGetTensorDescNumDims",
    "aclGetTensorDescDimV2", "aclDestroyTensorDesc",
};

static bool fault_function_known(const char *function)
{
    for (size_t i = 0; i < sizeof k_fault_functions / sizeof k_fault_functions[0]; i++) {
        if (strcmp(k_fault_functions[i], function) == 0)
            return true;
    }
    return false;
}

/* Caller holds g_fault_lock. */
static fault *fault_find(const char *function)
{
    for (size_t i = 0; i < FAULT_SLOTS; i++) {
        if (g_faults[i].remaining > 0 && strcmp(g_faults[i].function, function) == 0)
            return &g_faults[i];
    }
    return NULL;
}

/* Caller holds g_fault_lock. */
static void fault_disarm(fault *f)
{
    f->remaining = 0;
    atomic_fetch_sub_explicit(&g_faults_armed, 1, memory_order_relaxed);
}

static atomic_int g_helper_host;   /* aclmockSetHelperHost; a setting, reset with the others */

bool mock_helper_host(void)
{
    return atomic_load_explicit(&g_helper_host, memory_order_relaxed) != 0;
}

/* Audit row 20: CANN checks PlatformIsHelperHostSide only in some functions
 * (msprofiler_acl_api.cpp:129, 177, 306, 526, 686, 767, 796, 817 and the msproftx adaptor).
 * These never check it (the compiled RT: RangePushEx 0, RangePop its own 100000, Str2Id an
 * id, GetOpDescSize 0/80, the step-info calls work); aclprofStop and aclprofSetConfig check
 * it after their argument checks, so they call mock_helper_host() themselves. */
static const char *const k_helper_host_unchecked[] = {
    "aclprofRangePushEx", "aclprofRangePop", "aclprofStr2Id", "aclprofGetOpDescSize",
    "aclprofCreateStepInfo", "aclprofGetStepTimestamp", "aclprofDestroyStepInfo",
    "aclprofStop", "aclprofSetConfig",
};

/* Does `function` answer 200006 first thing on a helper host? */
static bool helper_host_refuses(const char *function)
{
    if (!mock_helper_host() || strncmp(function, "aclprof", 7) != 0)
        return false;
    for (size_t i = 0; i < sizeof k_helper_host_unchecked / sizeof k_helper_host_unchecked[0];
         i++) {
        if (strcmp(function, k_helper_host_unchecked[i]) == 0)
            return false;
    }
    return true;
}

bool mock_fault(const char *function, int32_t *code)
{
    /* On a helper host most profiling entry points answer FEATURE_UNSUPPORTED before any
     * other check (audit row 20), which is exactly the shape of an injected fault; an
     * injected fault still wins so that tests can aim at one function. */
    if (atomic_load_explicit(&g_faults_armed, memory_order_relaxed) == 0) {
        if (helper_host_refuses(function)) {
            *code = ACL_ERROR_FEATURE_UNSUPPORTED;
            return true;
        }
        return false;
    }
    bool hit = false;
    pthread_mutex_lock(&g_fault_lock);
    fault *f = fault_find(function);
    if (f) {
        hit = true;
        *code = f->code;
        if (f->remaining == 1)
            fault_disarm(f);
        else
            f->remaining--;
    }
    pthread_mutex_unlock(&g_fault_lock);
    if (!hit && helper_host_refuses(function)) {
        *code = ACL_ERROR_FEATURE_UNSUPPORTED;
        hit = true;
    }
    return hit;
}

MOCK_EXPORT int aclmockFailNext(const char *function, uint32_t times, int32_t code)
{
    if (function == NULL || !fault_function_known(function))
        return ACL_ERROR_INVALID_PARAM;
    int ret = ACL_SUCCESS;
    pthread_mutex_lock(&g_fault_lock);
    fault *f = fault_find(function);
    if (times == 0) {
        if (f)
            fault_disarm(f);
    } else if (f) {
        f->remaining = times;   /* re-arming replaces the previous count and code */
        f->code = code;
    } else {
        ret = ACL_ERROR_INVALID_PARAM;   /* table full */
        for (size_t i = 0; i < FAULT_SLOTS; i++) {
            if (g_faults[i].remaining == 0) {
                snprintf(g_faults[i].function, sizeof g_faults[i].function, "%s", function);
                g_faults[i].remaining = times;
                g_faults[i].code = code;
                atomic_fetch_add_explicit(&g_faults_armed, 1, memory_order_relaxed);
                ret = ACL_SUCCESS;
                break;
            }
        }
    }
    pthread_mutex_unlock(&g_fault_lock);
    return ret;
}

MOCK_EXPORT void aclmockClearFaults(void)
{
    pthread_mutex_lock(&g_fault_lock);
    for (size_t i = 0; i < FAULT_SLOTS; i++) {
        if (g_faults[i].remaining > 0)
            fault_disarm(&g_faults[i]);
    }
    pthread_mutex_unlock(&g_fault_lock);
}

/* ---- clock and thread ids ------------------------------------------------------------ */

uint64_t mock_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* gettid is a real syscall (not vDSO); msproftx records a tid per event, so cache it. */
static __thread uint32_t t_tid;

uint32_t mock_tid(void)
{
    if (t_tid == 0)
        t_tid = (uint32_t)syscall(SYS_gettid);
    return t_tid;
}

/* ---- fork (called by control.c's handlers; the order is explained there) ------------- */

void mock_base_fork_prepare(void)
{
    pthread_mutex_lock(&g_fault_lock);
}

void mock_base_fork_parent(void)
{
    pthread_mutex_unlock(&g_fault_lock);
}

/* Re-initialised rather than unlocked: a recursive mutex still names the parent's thread as
 * its owner (the child's thread has a new tid, so unlock fails with EPERM). */
void mock_base_fork_child(void)
{
    t_tid = 0;   /* the child's only thread is the one that forked: the cached tid is the parent's */
    pthread_mutex_init(&g_fault_lock, NULL);
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&g_mock_lock, &a);
    pthread_mutexattr_destroy(&a);
}

/* ---- JSON ------------------------------------------------------------------------- */

size_t mock_json_escape(char *dst, size_t cap, const char *src, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    if (cap < 6 * len + 3)
        return 0;
    size_t o = 0;
    dst[o++] = '"';
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)src[i];
        if (c == '"' || c == '\\') {
            dst[o++] = '\\';
            dst[o++] = (char)c;
        } else if (c < 0x20 || c == 0x7f) {
            dst[o++] = '\\';
            dst[o++] = 'u';
            dst[o++] = '0';
            dst[o++] = '0';
            dst[o++] = hex[c >> 4];
            dst[o++] = hex[c & 0xf];
        } else {
            dst[o++] = (char)c;   /* >= 0x80 raw: the file is bytes, not validated UTF-8 */
        }
    }
    dst[o++] = '"';
    dst[o] = '\0';
    return o;
}

/* ---- settings ---------------------------------------------------------------------- */

#define DEFAULT_DEVICE_COUNT 8u
#define DEFAULT_OP_DESC_SIZE ((unsigned)sizeof(ProfOpDesc))

/* Atomics: the subscription writer thread reads some of them without g_mock_lock. */
static atomic_uint g_device_count = DEFAULT_DEVICE_COUNT;
static atomic_int g_cann_era = ACLMOCK_CANN_2026;
static atomic_uint g_op_desc_size = DEFAULT_OP_DESC_SIZE;
static atomic_int g_time_unit = ACLMOCK_TIME_NS;
static atomic_int g_realtime;
static atomic_uint g_write_chunk;
static atomic_uint g_corrupt_every;
static atomic_uint g_writer_delay_us;
static atomic_int g_opdesc_layout = ACLMOCK_OPDESC_STANDARD;
static atomic_int g_chip = ACLMOCK_CHIP_910B;
static atomic_int g_unsub_policy = ACLMOCK_UNSUB_DRAIN;
static atomic_int g_pipe_writer_cann;
static atomic_int g_threads_cann;
static atomic_int g_signature_cann;
static atomic_uint g_response_wait_ms = MOCK_RESPONSE_WAIT_MS;

uint32_t mock_device_count(void) { return atomic_load(&g_device_count); }
int mock_cann_era(void) { return atomic_load(&g_cann_era); }
uint32_t mock_op_desc_size(void) { return atomic_load(&g_op_desc_size); }
int mock_time_unit(void) { return atomic_load(&g_time_unit); }
int mock_realtime(void) { return atomic_load(&g_realtime); }
uint32_t mock_write_chunk(void) { return atomic_load(&g_write_chunk); }
uint32_t mock_corrupt_every(void) { return atomic_load(&g_corrupt_every); }
uint32_t mock_writer_delay_us(void) { return atomic_load(&g_writer_delay_us); }
int mock_opdesc_layout(void) { return atomic_load(&g_opdesc_layout); }
int mock_chip(void) { return atomic_load(&g_chip); }
int mock_unsub_policy(void) { return atomic_load(&g_unsub_policy); }
int mock_pipe_writer_cann(void) { return atomic_load(&g_pipe_writer_cann); }
int mock_threads_cann(void) { return atomic_load(&g_threads_cann); }
int mock_signature_cann(void) { return atomic_load(&g_signature_cann); }
uint32_t mock_response_wait_ms(void) { return atomic_load(&g_response_wait_ms); }

/* Unset or unparsable variables leave the default; a warning names bad values so that a
 * typo in a CI job does not silently test the wrong behaviour. */
static void env_warn(const char *name, const char *value)
{
    fprintf(stderr, "aclmock: ignoring %s=%s (invalid value)\n", name, value);
}

static bool parse_u32(const char *s, uint32_t lo, uint32_t hi, uint32_t *out)
{
    if (*s < '0' || *s > '9')
        return false;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end != '\0' || v < lo || v > hi)
        return false;
    *out = (uint32_t)v;
    return true;
}

/* A variable of two spellings: `a` stores va, `b` stores vb, anything else warns. */
static void env_choice(const char *name, atomic_int *out, const char *a, int va, const char *b, int vb)
{
    const char *v = getenv(name);
    if (v == NULL || !*v)
        return;
    if (strcmp(v, a) == 0)
        atomic_store(out, va);
    else if (strcmp(v, b) == 0)
        atomic_store(out, vb);
    else
        env_warn(name, v);
}

void mock_settings_load(void)
{
    atomic_store(&g_device_count, DEFAULT_DEVICE_COUNT);
    atomic_store(&g_cann_era, ACLMOCK_CANN_2026);
    atomic_store(&g_op_desc_size, DEFAULT_OP_DESC_SIZE);
    atomic_store(&g_time_unit, ACLMOCK_TIME_NS);
    atomic_store(&g_realtime, 0);
    atomic_store(&g_write_chunk, 0);
    atomic_store(&g_corrupt_every, 0);
    atomic_store(&g_writer_delay_us, 0);
    atomic_store(&g_helper_host, 0);
    atomic_store(&g_opdesc_layout, ACLMOCK_OPDESC_STANDARD);
    atomic_store(&g_chip, ACLMOCK_CHIP_910B);
    atomic_store(&g_unsub_policy, ACLMOCK_UNSUB_DRAIN);
    atomic_store(&g_pipe_writer_cann, 0);
    atomic_store(&g_threads_cann, 0);
    atomic_store(&g_signature_cann, 0);
    atomic_store(&g_response_wait_ms, MOCK_RESPONSE_WAIT_MS);

    const char *v;
    env_choice("ACLMOCK_CANN", &g_cann_era, "2025", ACLMOCK_CANN_2025, "2026", ACLMOCK_CANN_2026);
    env_choice("ACLMOCK_TIME_UNIT", &g_time_unit, "ns", ACLMOCK_TIME_NS, "us", ACLMOCK_TIME_US);
    if ((v = getenv("ACLMOCK_DEVICE_COUNT")) != NULL && *v) {
        uint32_t n;
        if (parse_u32(v, 1, MOCK_MAX_DEVICES, &n))
            atomic_store(&g_device_count, n);
        else
            env_warn("ACLMOCK_DEVICE_COUNT", v);
    }
    if ((v = getenv("ACLMOCK_REALTIME")) != NULL && *v) {
        uint32_t n;
        if (parse_u32(v, 0, 1, &n))
            atomic_store(&g_realtime, (int)n);
        else
            env_warn("ACLMOCK_REALTIME", v);
    }
    if ((v = getenv("ACLMOCK_HELPER_HOST")) != NULL && *v) {
        uint32_t n;
        if (parse_u32(v, 0, 1, &n))
            atomic_store(&g_helper_host, (int)n);
        else
            env_warn("ACLMOCK_HELPER_HOST", v);
    }
    env_choice("ACLMOCK_OPDESC_LAYOUT", &g_opdesc_layout, "standard", ACLMOCK_OPDESC_STANDARD, "shuffled",
               ACLMOCK_OPDESC_SHUFFLED);
    env_choice("ACLMOCK_CHIP", &g_chip, "910b", ACLMOCK_CHIP_910B, "any", ACLMOCK_CHIP_ANY);
    env_choice("ACLMOCK_UNSUBSCRIBE", &g_unsub_policy, "drain", ACLMOCK_UNSUB_DRAIN, "drop", ACLMOCK_UNSUB_DROP);
    /* Issue 22: CANN's PipeTransport (mock_acl/README.md "The writer thread"). */
    env_choice("ACLMOCK_PIPE_WRITER", &g_pipe_writer_cann, "kind", 0, "cann", 1);
    /* Issue 22: CANN's uploader and response threads (README "Threads"). */
    env_choice("ACLMOCK_THREADS", &g_threads_cann, "one", 0, "cann", 1);
    /* Issue 21: CANN's signature cost (README "Deviations and choices (subscription)"). */
    env_choice("ACLMOCK_SIGNATURE", &g_signature_cann, "kind", 0, "cann", 1);
    if ((v = getenv("ACLMOCK_RESPONSE_WAIT_MS")) != NULL && *v) {
        uint32_t n;
        if (parse_u32(v, 0, 600000, &n))
            atomic_store(&g_response_wait_ms, n);
        else
            env_warn("ACLMOCK_RESPONSE_WAIT_MS", v);
    }
}

/* ---- mode ------------------------------------------------------------------------- */

static int g_mode = ACLMOCK_MODE_OFF;

int mock_mode(void)
{
    return g_mode;
}

void mock_set_mode(int mode)
{
    g_mode = mode;
}

/* ---- aclmockSet*: the settings above (never subject to fault injection) -------------- */

MOCK_EXPORT int aclmockSetDeviceCount(uint32_t count)
{
    if (count < 1 || count > MOCK_MAX_DEVICES)
        return ACL_ERROR_INVALID_PARAM;
    atomic_store(&g_device_count, count);
    return ACL_SUCCESS;
}

MOCK_EXPORT int aclmockSetCannEra(int era)
{
    if (era != ACLMOCK_CANN_2025 && era != ACLMOCK_CANN_2026)
        return ACL_ERROR_INVALID_PARAM;
    atomic_store(&g_cann_era, era);
    return ACL_SUCCESS;
}

MOCK_EXPORT int aclmockSetOpDescSize(uint32_t size)
{
    /* the two layouts: the whole record, or older CANN's, which ends before devId */
    if (size != sizeof(ProfOpDesc) && size != offsetof(ProfOpDesc, devId))
        return ACL_ERROR_INVALID_PARAM;
    atomic_store(&g_op_desc_size, size);
    return ACL_SUCCESS;
}

MOCK_EXPORT int aclmockSetTimeUnit(int unit)
{
    if (unit != ACLMOCK_TIME_NS && unit != ACLMOCK_TIME_US)
        return ACL_ERROR_INVALID_PARAM;
    atomic_store(&g_time_unit, unit);
    return ACL_SUCCESS;
}

MOCK_EXPORT int aclmockSetRealtime(int enabled)
{
    if (enabled != 0 && enabled != 1)
        return ACL_ERROR_INVALID_PARAM;
    atomic_store(&g_realtime, enabled);
    return ACL_SUCCESS;
}

MOCK_EXPORT int aclmockSetWriteChunk(uint32_t bytes)
{
    atomic_store(&g_write_chunk, bytes);
    return ACL_SUCCESS;
}

MOCK_EXPORT int aclmockSetCorruptEvery(uint32_t k)
{
    atomic_store(&g_corrupt_every, k);
    return ACL_SUCCESS;
}

/* Capped at 10 s per record: a larger value is certainly a unit mistake and would make
 * aclmockReset (which joins the writer) hang. */
MOCK_EXPORT int aclmockSetWriterDelayUs(uint32_t us)
{
    if (us > 10u * 1000u * 1000u)
        return ACL_ERROR_INVALID_PARAM;
    atomic_store(&g_writer_delay_us, us);
    return ACL_SUCCESS;
}

MOCK_EXPORT int aclmockSetHelperHost(int enabled)
{
    if (enabled != 0 && enabled != 1)
        return ACL_ERROR_INVALID_PARAM;
    atomic_store(&g_helper_host, enabled);
    return ACL_SUCCESS;
}

/* Audit row 14: the ProfOpDesc layout is internal to CANN. SHUFFLED keeps the size but
 * moves modelId and the three times (see opdesc.c), and the getters follow it, as the
 * library's own getters would follow a new layout. */
MOCK_EXPORT int aclmockSetOpDescLayout(int layout)
{
    if (layout != ACLMOCK_OPDESC_STANDARD && layout != ACLMOCK_OPDESC_SHUFFLED)
        return ACL_ERROR_INVALID_PARAM;
    atomic_store(&g_opdesc_layout, layout);
    return ACL_SUCCESS;
}

/* Audit row 7b: which aclprofSetConfig types the chip supports (see session_config.c). */
MOCK_EXPORT int aclmockSetChip(int chip)
{
    if (chip != ACLMOCK_CHIP_910B && chip != ACLMOCK_CHIP_ANY)
        return ACL_ERROR_INVALID_PARAM;
    atomic_store(&g_chip, chip);
    return ACL_SUCCESS;
}

/* Audit row 1b: what aclprofModelUnSubscribe does with records still queued for the fd. */
MOCK_EXPORT int aclmockSetUnsubscribePolicy(int policy)
{
    if (policy != ACLMOCK_UNSUB_DRAIN && policy != ACLMOCK_UNSUB_DROP)
        return ACL_ERROR_INVALID_PARAM;
    atomic_store(&g_unsub_policy, policy);
    return ACL_SUCCESS;
}
