/* The small part of the ACL runtime that profiling code needs: aclInit/aclFinalize,
 * devices, contexts and streams.
 *
 * A device opened with aclrtSetDevice gets a default context, current on the calling
 * thread; aclrtCreateContext makes a new one current. Each thread has its own current
 * context. Handles are heap objects kept in registries, so a destroyed or foreign handle
 * is rejected with ACL_ERROR_INVALID_PARAM instead of crashing. Nothing here requires
 * aclInit: neither do the profiling calls of the mock (see README, deviations).
 */
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mock_internal.h"

/* Runtime error "context is null" (ACL_ERROR_RT_CONTEXT_NULL in acl_base_rt.h): returned
 * when a call needs a current device/context and the thread has none. Not in cdefs/, as
 * the profiling API never returns it. */
#define MOCK_ERROR_RT_CONTEXT_NULL 107002

typedef struct mock_ctx {
    int32_t device;
    uint64_t serial;            /* unique per context instance, see t_current */
    struct mock_ctx *next;      /* registry; unused for default contexts */
} mock_ctx;

typedef struct mock_stream {
    const mock_ctx *ctx;
    struct mock_stream *next;
} mock_stream;

static bool g_acl_initialised;
static uint32_t g_device_refs[MOCK_MAX_DEVICES];   /* aclrtSetDevice minus ResetDevice */
static mock_ctx g_default_ctx[MOCK_MAX_DEVICES];   /* valid while the device is set */
static mock_ctx *g_contexts;
static mock_stream *g_streams;
static uint64_t g_next_serial = 1;

/* The calling thread's current context. The serial guards against a destroyed context
 * whose address is reused by a new one (or a default context released by the last
 * aclrtResetDevice and set up again): the thread must not silently inherit it. */
static __thread struct {
    const mock_ctx *ctx;
    uint64_t serial;
} t_current;

/* ---- helpers (g_mock_lock held) ---------------------------------------------------- */

bool mock_device_opened(uint32_t id)
{
    return id < MOCK_MAX_DEVICES && g_device_refs[id] > 0;
}

static bool device_valid(int32_t id)
{
    return id >= 0 && (uint32_t)id < mock_device_count();
}

static bool ctx_live(const mock_ctx *ctx)
{
    if (ctx == NULL)
        return false;
    for (int i = 0; i < MOCK_MAX_DEVICES; i++) {
        if (ctx == &g_default_ctx[i])
            return g_device_refs[i] > 0;
    }
    for (const mock_ctx *c = g_contexts; c; c = c->next) {
        if (c == ctx)
            return true;
    }
    return false;
}

static const mock_ctx *current_ctx(void)
{
    if (!ctx_live(t_current.ctx) || t_current.ctx->serial != t_current.serial)
        return NULL;
    return t_current.ctx;
}

static void set_current(const mock_ctx *ctx)
{
    t_current.ctx = ctx;
    t_current.serial = ctx ? ctx->serial : 0;
}

/* Frees every stream of `ctx` (NULL: every stream). */
static void destroy_streams_of(const mock_ctx *ctx)
{
    for (mock_stream **pp = &g_streams; *pp;) {
        mock_stream *s = *pp;
        if (ctx == NULL || s->ctx == ctx) {
            *pp = s->next;
            free(s);
        } else {
            pp = &s->next;
        }
    }
}

static mock_stream **stream_find(const void *stream)
{
    for (mock_stream **pp = &g_streams; *pp; pp = &(*pp)->next) {
        if (*pp == stream)
            return pp;
    }
    return NULL;
}

static mock_ctx **context_find(const void *ctx)
{
    for (mock_ctx **pp = &g_contexts; *pp; pp = &(*pp)->next) {
        if (*pp == ctx)
            return pp;
    }
    return NULL;
}

/* For msproftx.c (g_mock_lock held): would rtsStreamGetAttribute accept `stream`? NULL
 * stands for the default stream of the calling thread's current context. */
bool mock_stream_resolves(const void *stream)
{
    return stream == NULL ? current_ctx() != NULL : stream_find(stream) != NULL;
}

/* ---- aclInit / aclFinalize --------------------------------------------------------- */

/* configPath: NULL or "" means no configuration; otherwise a readable regular file. The
 * mock does not parse it (acl.json profiling options are not simulated). */
MOCK_EXPORT aclError aclInit(const char *configPath)
{
    MOCK_FAULT_RETURN_CODE();
    int ret = ACL_SUCCESS;
    mock_lock();
    if (g_acl_initialised) {
        ret = ACL_ERROR_REPEAT_INITIALIZE;
    } else if (configPath != NULL && configPath[0] != '\0') {
        struct stat st;
        if (stat(configPath, &st) != 0 || !S_ISREG(st.st_mode) || access(configPath, R_OK) != 0)
            ret = ACL_ERROR_INVALID_FILE;
    }
    if (ret == ACL_SUCCESS)
        g_acl_initialised = true;
    mock_unlock();
    return ret;
}

MOCK_EXPORT aclError aclFinalize(void)
{
    MOCK_FAULT_RETURN_CODE();
    mock_lock();
    int ret = g_acl_initialised ? ACL_SUCCESS : ACL_ERROR_REPEAT_FINALIZE;
    g_acl_initialised = false;
    mock_unlock();
    return ret;
}

/* ---- devices ----------------------------------------------------------------------- */

MOCK_EXPORT aclError aclrtSetDevice(int32_t deviceId)
{
    MOCK_FAULT_RETURN_CODE();
    int ret = ACL_ERROR_INVALID_PARAM;
    mock_lock();
    if (device_valid(deviceId)) {
        if (g_device_refs[deviceId]++ == 0) {   /* a new default context */
            g_default_ctx[deviceId].device = deviceId;
            g_default_ctx[deviceId].serial = g_next_serial++;
        }
        set_current(&g_default_ctx[deviceId]);
        ret = ACL_SUCCESS;
    }
    mock_unlock();
    return ret;
}

/* Each SetDevice needs a ResetDevice; the last one releases the default context and its
 * streams. Resetting a device that is not set succeeds, as in the real runtime. */
MOCK_EXPORT aclError aclrtResetDevice(int32_t deviceId)
{
    MOCK_FAULT_RETURN_CODE();
    int ret = ACL_ERROR_INVALID_PARAM;
    mock_lock();
    if (device_valid(deviceId)) {
        if (g_device_refs[deviceId] > 0 && --g_device_refs[deviceId] == 0)
            destroy_streams_of(&g_default_ctx[deviceId]);
        ret = ACL_SUCCESS;
    }
    mock_unlock();
    return ret;
}

MOCK_EXPORT aclError aclrtGetDevice(int32_t *deviceId)
{
    MOCK_FAULT_RETURN_CODE();
    if (deviceId == NULL)
        return ACL_ERROR_INVALID_PARAM;
    int ret = MOCK_ERROR_RT_CONTEXT_NULL;
    mock_lock();
    const mock_ctx *ctx = current_ctx();
    if (ctx) {
        *deviceId = ctx->device;
        ret = ACL_SUCCESS;
    }
    mock_unlock();
    return ret;
}

MOCK_EXPORT aclError aclrtGetDeviceCount(uint32_t *count)
{
    MOCK_FAULT_RETURN_CODE();
    if (count == NULL)
        return ACL_ERROR_INVALID_PARAM;
    *count = mock_device_count();
    return ACL_SUCCESS;
}

/* ---- contexts ---------------------------------------------------------------------- */

MOCK_EXPORT aclError aclrtCreateContext(aclrtContext *context, int32_t deviceId)
{
    MOCK_FAULT_RETURN_CODE();
    if (context == NULL)
        return ACL_ERROR_INVALID_PARAM;
    int ret = ACL_ERROR_INVALID_PARAM;
    mock_lock();
    if (device_valid(deviceId)) {
        mock_ctx *ctx = malloc(sizeof *ctx);
        if (ctx) {
            ctx->device = deviceId;
            ctx->serial = g_next_serial++;
            ctx->next = g_contexts;
            g_contexts = ctx;
            set_current(ctx);
            *context = ctx;
            ret = ACL_SUCCESS;
        } else {
            ret = ACL_ERROR_BAD_ALLOC;
        }
    }
    mock_unlock();
    return ret;
}

/* Only contexts made by aclrtCreateContext; default contexts go with aclrtResetDevice. */
MOCK_EXPORT aclError aclrtDestroyContext(aclrtContext context)
{
    MOCK_FAULT_RETURN_CODE();
    int ret = ACL_ERROR_INVALID_PARAM;
    mock_lock();
    mock_ctx **pp = context ? context_find(context) : NULL;
    if (pp) {
        mock_ctx *ctx = *pp;
        *pp = ctx->next;
        destroy_streams_of(ctx);
        if (t_current.ctx == ctx)
            set_current(NULL);
        free(ctx);
        ret = ACL_SUCCESS;
    }
    mock_unlock();
    return ret;
}

MOCK_EXPORT aclError aclrtSetCurrentContext(aclrtContext context)
{
    MOCK_FAULT_RETURN_CODE();
    int ret = ACL_ERROR_INVALID_PARAM;
    mock_lock();
    if (ctx_live(context)) {
        set_current(context);
        ret = ACL_SUCCESS;
    }
    mock_unlock();
    return ret;
}

MOCK_EXPORT aclError aclrtGetCurrentContext(aclrtContext *context)
{
    MOCK_FAULT_RETURN_CODE();
    if (context == NULL)
        return ACL_ERROR_INVALID_PARAM;
    int ret = MOCK_ERROR_RT_CONTEXT_NULL;
    mock_lock();
    const mock_ctx *ctx = current_ctx();
    if (ctx) {
        *context = (aclrtContext)ctx;
        ret = ACL_SUCCESS;
    }
    mock_unlock();
    return ret;
}

/* ---- streams ----------------------------------------------------------------------- */

MOCK_EXPORT aclError aclrtCreateStream(aclrtStream *stream)
{
    MOCK_FAULT_RETURN_CODE();
    if (stream == NULL)
        return ACL_ERROR_INVALID_PARAM;
    int ret = MOCK_ERROR_RT_CONTEXT_NULL;
    mock_lock();
    const mock_ctx *ctx = current_ctx();
    if (ctx) {
        mock_stream *s = malloc(sizeof *s);
        if (s) {
            s->ctx = ctx;
            s->next = g_streams;
            g_streams = s;
            *stream = s;
            ret = ACL_SUCCESS;
        } else {
            ret = ACL_ERROR_BAD_ALLOC;
        }
    }
    mock_unlock();
    return ret;
}

MOCK_EXPORT aclError aclrtDestroyStream(aclrtStream stream)
{
    MOCK_FAULT_RETURN_CODE();
    int ret = ACL_ERROR_INVALID_PARAM;
    mock_lock();
    mock_stream **pp = stream ? stream_find(stream) : NULL;
    if (pp) {
        mock_stream *s = *pp;
        *pp = s->next;
        free(s);
        ret = ACL_SUCCESS;
    }
    mock_unlock();
    return ret;
}

/* NULL is the default stream of the current context. Nothing runs asynchronously in the
 * mock, so synchronising only validates. */
MOCK_EXPORT aclError aclrtSynchronizeStream(aclrtStream stream)
{
    MOCK_FAULT_RETURN_CODE();
    int ret;
    mock_lock();
    if (stream == NULL)
        ret = current_ctx() ? ACL_SUCCESS : MOCK_ERROR_RT_CONTEXT_NULL;
    else
        ret = stream_find(stream) ? ACL_SUCCESS : ACL_ERROR_INVALID_PARAM;
    mock_unlock();
    return ret;
}

MOCK_EXPORT aclError aclrtSynchronizeDevice(void)
{
    MOCK_FAULT_RETURN_CODE();
    mock_lock();
    int ret = current_ctx() ? ACL_SUCCESS : MOCK_ERROR_RT_CONTEXT_NULL;
    mock_unlock();
    return ret;
}

void mock_runtime_reset(void)
{
    destroy_streams_of(NULL);
    while (g_contexts) {
        mock_ctx *next = g_contexts->next;
        free(g_contexts);
        g_contexts = next;
    }
    for (int i = 0; i < MOCK_MAX_DEVICES; i++)
        g_device_refs[i] = 0;
    g_acl_initialised = false;
    /* Serials keep counting: a thread's stale context never matches a later one. */
}
