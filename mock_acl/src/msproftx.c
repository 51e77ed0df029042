/* msproftx (reference 3.6): the stamp pool, marks, push/pop, ranges, MarkEx, Str2Id,
 * RangePushEx/RangePop, and the per-session event log host/msproftx.jsonl.
 *
 * "Initialised" means: from the first Start whose config has ACL_PROF_MSPROFTX until
 * Finalize, as in the real library (set by session.c through mock_msproftx_session and
 * mock_msproftx_finalize). Events are written only while such a session runs; between Stop
 * and Finalize they succeed and are counted in txEventsUnrecorded (audit 3, R6).
 *
 * Events go to one FILE* with a 1 MiB buffer, written under g_mock_lock and flushed when
 * the session stops, at Finalize and at aclmockReset. A push/pop pair costs one lock, two
 * clock reads and one formatted line: well under a microsecond.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mock_internal.h"

#define STAMP_POOL_SIZE 100u     /* CURRENT_STAMP_SIZE */
#define STAMP_FIELD_LEN 127u     /* strncpy_s(message, MAX_MSG_LEN - 1, ...) */
#define STAMP_MSG_MAX 128u       /* SetStampTraceMessage: msgLen >= 128 fails */
#define MARKEX_MSG_MAX 155u      /* MAX_MESSAGE_LEN - 1 (audit #10; the docs say 127) */
#define MARKEX_MSG_MAX_2025 127u /* RT0 prof_common.h:721 MAX_MESSAGE_LEN 128 (audit 3, R11) */
#define PUSH_STACK_MIN_CAP 16u   /* the real stack is an unbounded std::vector */
#define PUSH_EX_LOGGED_TENSORS 8u /* at most ~140 B each: the line stays < LINE_MAX_LEN */
#define LOG_BUFFER_SIZE (1u << 20)
#define LINE_MAX_LEN 2048u       /* a line holds at most one escaped message (< 1000 B) */

typedef struct mock_stamp {
    uint32_t slot;               /* index in the pool = the range id */
    bool in_use;
    /* isEnable of the real stamp: set by RangeStart and cleared only when the pool is
     * (re)initialised, so RangeStop works any number of times (audit #9), even after
     * the stamp was destroyed. */
    bool range_enabled;
    uint32_t range_tid;          /* thread that called RangeStart */
    uint64_t start_ns;           /* shared by Push and RangeStart, as in the real stamp */
    char message[STAMP_FIELD_LEN + 1];
} mock_stamp;

/* ONE push/pop stack for the whole process (audit #3: ProfStampPool::singleTStack_):
 * Pop takes the top entry whichever thread pushed it. Guarded by g_mock_lock. */
static mock_stamp **g_stack;
static uint32_t g_depth, g_stack_cap;

/* RangePushEx keeps the caller's POINTER in one process-wide slot (audit #2): no copy,
 * no stack, not per thread. RangePop reads through it, and does not clear it. */
static aclprofEventAttributes *g_push_ex_attr;
static uint64_t g_push_ex_start_ns;

static mock_stamp g_pool[STAMP_POOL_SIZE];
static uint32_t g_free[STAMP_POOL_SIZE];  /* LIFO of free slots, like the real freelist */
static uint32_t g_free_count;
static bool g_pool_ready;

static bool g_enabled;                    /* msproftx initialised: first MSPROFTX Start .. Finalize */
static bool g_recording;                  /* the running session has MSPROFTX: events are logged */
static bool g_after_finalize;             /* Finalize ran since the last session start (R7) */
static uint64_t g_unrecorded;             /* aclmockStats.txEventsUnrecorded */
static char *g_log_dir;                   /* host dir of the running session, or NULL */
static FILE *g_log;
static char *g_log_buffer;
static bool g_log_failed;                 /* don't retry fopen on every event */
static uint64_t g_events;                 /* aclmockStats.txEvents */
static uint64_t g_mark_ex_id;

static bool era_2025(void)
{
    return mock_cann_era() == ACLMOCK_CANN_2025;
}

/* The real library would dereference a NULL pointer here; the mock stops with a message
 * instead of a bare SIGSEGV, which is no kinder (the process dies either way) but says why. */
static void tx_crash(const char *function, const char *what)
{
    fprintf(stderr, "aclmock: %s: %s; the real library dereferences it (a crash)\n",
            function, what);
    abort();
}

/* ---- pool ------------------------------------------------------------------------- */

/* Slot 0 is handed out first, then 1, ...; a destroyed stamp is reused first. */
static void pool_init(void)
{
    memset(g_pool, 0, sizeof g_pool);
    for (uint32_t i = 0; i < STAMP_POOL_SIZE; i++) {
        g_pool[i].slot = i;
        g_free[i] = STAMP_POOL_SIZE - 1 - i;
    }
    g_free_count = STAMP_POOL_SIZE;
    g_pool_ready = true;
}

/* Maps a caller's pointer to a live stamp without dereferencing anything outside the
 * pool; NULL for foreign pointers and destroyed stamps (the real library would use them). */
static mock_stamp *stamp_lookup(const void *p)
{
    uintptr_t u = (uintptr_t)p, base = (uintptr_t)g_pool;
    if (u < base || u >= base + sizeof g_pool || (u - base) % sizeof(mock_stamp) != 0)
        return NULL;
    mock_stamp *s = &g_pool[(u - base) / sizeof(mock_stamp)];
    return s->in_use ? s : NULL;
}

/* ---- event log ---------------------------------------------------------------------- */

static void log_close(void)
{
    if (g_log) {
        fclose(g_log);
        g_log = NULL;
    }
    free(g_log_buffer);
    g_log_buffer = NULL;
}

static FILE *log_file(void)
{
    if (g_log || g_log_failed || !g_log_dir)
        return g_log;
    size_t n = strlen(g_log_dir) + sizeof "/msproftx.jsonl";
    char *path = malloc(n);
    if (path) {
        snprintf(path, n, "%s/msproftx.jsonl", g_log_dir);
        g_log = fopen(path, "a");
    }
    if (!g_log) {
        fprintf(stderr, "aclmock: cannot open %s/msproftx.jsonl\n", g_log_dir);
        g_log_failed = true;
    } else if ((g_log_buffer = malloc(LOG_BUFFER_SIZE)) != NULL) {
        setvbuf(g_log, g_log_buffer, _IOFBF, LOG_BUFFER_SIZE);
    }
    free(path);
    return g_log;
}

/* A tiny line builder: snprintf is the slowest part of an event otherwise. */
typedef struct line {
    char buf[LINE_MAX_LEN];
    size_t n;
} line;

static void put_str(line *l, const char *s)
{
    size_t len = strlen(s);
    memcpy(l->buf + l->n, s, len);
    l->n += len;
}

static void put_u64(line *l, uint64_t v)
{
    char tmp[24];
    size_t i = sizeof tmp;
    do {
        tmp[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    memcpy(l->buf + l->n, tmp + i, sizeof tmp - i);
    l->n += sizeof tmp - i;
}

static void put_field(line *l, const char *key, uint64_t v)
{
    put_str(l, ",\"");
    put_str(l, key);
    put_str(l, "\":");
    put_u64(l, v);
}

/* {"kind":K[,"message":M],"tid":T,"start_ns":S,"end_ns":E ... (caller adds the rest) */
static void put_head(line *l, const char *kind, const char *msg, uint32_t tid,
                     uint64_t start, uint64_t end)
{
    l->n = 0;
    put_str(l, "{\"kind\":\"");
    put_str(l, kind);
    put_str(l, "\"");
    if (msg) {
        put_str(l, ",\"message\":");
        l->n += mock_json_escape(l->buf + l->n, sizeof l->buf - l->n, msg, strlen(msg));
    }
    put_field(l, "tid", tid);
    put_field(l, "start_ns", start);
    put_field(l, "end_ns", end);
}

/* `counts`: an msproftx event (not a step). Between Stop and Finalize (or during a session
 * without MSPROFTX) msproftx is still initialised and accepts events (audit 3, R6), but no
 * collection runs: they are counted in txEventsUnrecorded and written nowhere. */
static void emit(line *l, bool counts)
{
    if (counts && !g_recording) {
        g_unrecorded++;
        return;
    }
    put_str(l, "}\n");
    FILE *f = log_file();
    if (f)
        fwrite_unlocked(l->buf, 1, l->n, f);   /* g_mock_lock serialises all writers */
    if (counts)
        g_events++;
}

/* ---- hooks for session.c and stepinfo.c ----------------------------------------------- */

void mock_msproftx_session(bool enabled, const char *host_dir)
{
    log_close();
    free(g_log_dir);
    g_log_dir = host_dir ? strdup(host_dir) : NULL;
    g_log_failed = false;
    /* CANN initialises msproftx at the first MSPROFTX Start and uninitialises it only in
     * ProfAclFinalize (prof_acl_mgr.cpp:968): a Stop (host_dir NULL) keeps it (R6). */
    g_recording = enabled && g_log_dir != NULL;
    g_enabled = g_enabled || g_recording;
    if (g_log_dir)
        g_after_finalize = false;
    if (!g_pool_ready)
        pool_init();
    if (g_recording)
        log_file();   /* an msproftx session always has its (possibly empty) log */
}

/* The real UnInit frees the pool and its stack with it; the next Init starts clean. The
 * PushEx slot lives in another object (ProfTxPlugin) and survives Finalize. */
void mock_msproftx_finalize(void)
{
    mock_msproftx_session(false, NULL);
    g_enabled = false;
    g_after_finalize = true;
    g_depth = 0;
    for (uint32_t i = 0; i < STAMP_POOL_SIZE; i++)
        g_pool[i].range_enabled = false;
}

void mock_msproftx_log_step(uint64_t index_id, int tag, uint64_t ts_ns)
{
    if (!g_log_dir)
        return;
    line l;
    put_head(&l, "step", NULL, mock_tid(), ts_ns, ts_ns);
    put_field(&l, "index", index_id);
    put_str(&l, tag == ACL_STEP_START ? ",\"tag\":\"start\"" : ",\"tag\":\"end\"");
    emit(&l, false);
}

void mock_msproftx_reset(void)
{
    mock_msproftx_session(false, NULL);
    g_enabled = g_after_finalize = false;
    g_unrecorded = 0;
    pool_init();
    free(g_stack);
    g_stack = NULL;
    g_depth = g_stack_cap = 0;
    g_push_ex_attr = NULL;
    g_push_ex_start_ns = 0;
    g_events = 0;
    g_mark_ex_id = 0;
}

void mock_msproftx_stats(aclmockStats *out)
{
    out->stampsInUse = g_pool_ready ? STAMP_POOL_SIZE - g_free_count : 0;
    out->txEvents = g_events;
    out->txEventsUnrecorded = g_unrecorded;
}

/* ---- stamps ------------------------------------------------------------------------ */

MOCK_EXPORT void *aclprofCreateStamp(void)
{
    MOCK_FAULT_RETURN(NULL);
    mock_stamp *s = NULL;
    mock_lock();
    if (g_enabled && g_free_count > 0) {
        s = &g_pool[g_free[--g_free_count]];
        s->in_use = true;   /* range_enabled stays: the real CreateStamp keeps isEnable */
        s->start_ns = 0;
        s->message[0] = '\0';
    }
    mock_unlock();
    return s;
}

/* NULL, foreign and already destroyed pointers are ignored (the real one logs NULL and
 * corrupts its free list on the others). Works whether or not msproftx is initialised. */
MOCK_EXPORT void aclprofDestroyStamp(void *stamp)
{
    MOCK_FAULT_RETURN_VOID();
    if (stamp == NULL)
        return;
    mock_lock();
    mock_stamp *s = stamp_lookup(stamp);
    if (s) {
        s->in_use = false;
        g_free[g_free_count++] = s->slot;
    }
    mock_unlock();
}

/* Does not check initialisation, as the real one. */
MOCK_EXPORT aclError aclprofSetStampTraceMessage(void *stamp, const char *msg, uint32_t msgLen)
{
    MOCK_FAULT_RETURN_CODE();
    if (stamp == NULL || msg == NULL || msgLen >= STAMP_MSG_MAX)
        return -1;
    /* strncpy_s(field, 127, msg, msgLen) copies up to msgLen bytes or the NUL, and fails
     * when that leaves no room for the terminator: 127 bytes are rejected too. */
    size_t n = strnlen(msg, msgLen);
    if (n >= STAMP_FIELD_LEN)
        return -1;
    int ret = ACL_SUCCESS;
    mock_lock();
    mock_stamp *s = stamp_lookup(stamp);
    if (s) {
        memcpy(s->message, msg, n);
        s->message[n] = '\0';
    } else {
        ret = ACL_ERROR_INVALID_PARAM;
    }
    mock_unlock();
    return ret;
}

MOCK_EXPORT aclError aclprofMark(void *stamp)
{
    MOCK_FAULT_RETURN_CODE();
    int ret = -1;
    mock_lock();
    if (g_enabled && stamp != NULL) {
        mock_stamp *s = stamp_lookup(stamp);
        if (s) {
            uint64_t now = mock_now_ns();
            s->start_ns = now;
            line l;
            put_head(&l, "mark", s->message, mock_tid(), now, now);
            put_field(&l, "slot", s->slot);
            emit(&l, true);
            ret = ACL_SUCCESS;
        } else {
            ret = ACL_ERROR_INVALID_PARAM;
        }
    }
    mock_unlock();
    return ret;
}

/* ---- push / pop --------------------------------------------------------------------- */

static bool stack_grow(void)   /* g_mock_lock held */
{
    uint32_t cap = g_stack_cap ? g_stack_cap * 2 : PUSH_STACK_MIN_CAP;
    mock_stamp **grown = realloc(g_stack, cap * sizeof *grown);
    if (!grown)
        return false;
    g_stack = grown;
    g_stack_cap = cap;
    return true;
}

MOCK_EXPORT aclError aclprofPush(void *stamp)
{
    MOCK_FAULT_RETURN_CODE();
    if (stamp == NULL)   /* RT0 has no NULL -> 100000 step in its adaptor (audit 3, R8) */
        return era_2025() ? -1 : ACL_ERROR_INVALID_PARAM;
    int ret = -1;
    mock_lock();
    if (g_enabled) {
        mock_stamp *s = stamp_lookup(stamp);
        if (!s) {
            ret = ACL_ERROR_INVALID_PARAM;
        } else if (g_depth < g_stack_cap || stack_grow()) {
            /* The start lives in the stamp: pushing one stamp twice at once overwrites
             * the outer start, exactly like the real library. */
            s->start_ns = mock_now_ns();
            g_stack[g_depth++] = s;
            ret = ACL_SUCCESS;
        }
    }
    mock_unlock();
    return ret;
}

MOCK_EXPORT aclError aclprofPop(void)
{
    MOCK_FAULT_RETURN_CODE();
    int ret = -1;
    mock_lock();
    if (g_enabled && g_depth > 0) {
        mock_stamp *s = g_stack[--g_depth];
        line l;
        put_head(&l, "push_pop", s->message, mock_tid(), s->start_ns, mock_now_ns());
        put_field(&l, "slot", s->slot);
        emit(&l, true);
        ret = ACL_SUCCESS;
    }
    mock_unlock();
    return ret;
}

/* ---- ranges ------------------------------------------------------------------------- */

MOCK_EXPORT aclError aclprofRangeStart(void *stamp, uint32_t *rangeId)
{
    MOCK_FAULT_RETURN_CODE();
    if (!era_2025() && (stamp == NULL || rangeId == NULL))
        return ACL_ERROR_INVALID_PARAM;
    if (era_2025() && stamp == NULL)
        return -1;   /* RT0: no NULL -> 100000 step (audit 3, R8) */
    int ret = -1;
    mock_lock();
    if (g_enabled) {
        mock_stamp *s = stamp_lookup(stamp);
        if (s && rangeId == NULL)
            tx_crash("aclprofRangeStart", "rangeId is NULL; the 2025 library (RT0 "
                     "msprof_tx_manager.cpp:301-319) writes through it (audit 3, R9)");
        if (s) {
            s->start_ns = mock_now_ns();
            s->range_enabled = true;
            s->range_tid = mock_tid();
            *rangeId = s->slot;
            ret = ACL_SUCCESS;
        } else {
            ret = ACL_ERROR_INVALID_PARAM;
        }
    }
    mock_unlock();
    return ret;
}

/* May be called from another thread than RangeStart. Like the real GetStampById, it
 * checks only the slot's isEnable, not that the range is still open nor that the stamp
 * is still alive: a second stop succeeds and reports the range again (audit #9). */
MOCK_EXPORT aclError aclprofRangeStop(uint32_t rangeId)
{
    MOCK_FAULT_RETURN_CODE();
    int ret = -1;
    mock_lock();
    /* RT0's GetStampById has no isEnable check (added e3d86d692, 2026-01-31): a slot never
     * range-started stops with 0 and reports whatever its stamp holds (audit 3, R10). */
    if (g_enabled && rangeId < STAMP_POOL_SIZE && (g_pool[rangeId].range_enabled || era_2025())) {
        mock_stamp *s = &g_pool[rangeId];
        uint32_t tid = mock_tid();
        line l;
        put_head(&l, "range", s->message, tid, s->start_ns, mock_now_ns());
        put_field(&l, "slot", s->slot);
        put_field(&l, "start_tid", s->range_tid);
        put_field(&l, "end_tid", tid);
        emit(&l, true);
        ret = ACL_SUCCESS;
    }
    mock_unlock();
    return ret;
}

/* ---- MarkEx, Str2Id ----------------------------------------------------------------- */

MOCK_EXPORT aclError aclprofMarkEx(const char *msg, size_t msgLen, aclrtStream stream)
{
    MOCK_FAULT_RETURN_CODE();
    int ret = -1;
    mock_lock();
    size_t max_len = era_2025() ? MARKEX_MSG_MAX_2025 : MARKEX_MSG_MAX;
    if (g_enabled && msg != NULL && stream != NULL && msgLen >= 1 &&
        msgLen <= max_len && strnlen(msg, msgLen + 1) == msgLen) {
        uint64_t now = mock_now_ns();
        line l;
        put_head(&l, "mark_ex", msg, mock_tid(), now, now);
        put_field(&l, "mark_id", ++g_mark_ex_id);
        put_field(&l, "stream", (uint64_t)(uintptr_t)stream);
        emit(&l, true);
        ret = ACL_SUCCESS;
    }
    mock_unlock();
    return ret;
}

/* FNV-1a 64: stable across runs and processes, so ids can be compared offline. UINT64_MAX
 * is the documented failure value and is never returned for a string. */
MOCK_EXPORT uint64_t aclprofStr2Id(const char *message)
{
    MOCK_FAULT_RETURN(UINT64_MAX);
    if (message == NULL)
        return UINT64_MAX;
    uint64_t h = 0xcbf29ce484222325ULL;
    for (const unsigned char *p = (const unsigned char *)message; *p; p++) {
        h ^= *p;
        h *= 0x100000001b3ULL;
    }
    return h == UINT64_MAX ? UINT64_MAX - 1 : h;
}

/* ---- RangePushEx / RangePop --------------------------------------------------------- */

/* What the real code checks (prof_tx_plugin.cpp ProftxRangePushEx): attr != NULL
 * (100000) and the message type (-1). Nothing else: not the version, the size, the
 * tensor info, nor whether msproftx is initialised. It keeps `attr` itself. */
MOCK_EXPORT aclError aclprofRangePushEx(aclprofEventAttributes *attr)
{
    MOCK_FAULT_RETURN_CODE();
    if (attr == NULL)
        return ACL_ERROR_INVALID_PARAM;
    if (attr->messageType != ACL_PROF_MESSAGE_TYPE_TENSOR_INFO)
        return -1;
    mock_lock();
    g_push_ex_attr = attr;   /* a second PushEx before a Pop overwrites the first */
    g_push_ex_start_ns = mock_now_ns();
    mock_unlock();
    return ACL_SUCCESS;
}

static void push_ex_crash(const char *what)
{
    tx_crash("aclprofRangePop", what);
}

/* Reads the caller's attr/tensorInfo/tensors NOW, at Pop (so a buffer freed or reused
 * since PushEx shows up, in the log or under ASan), then reports. */
MOCK_EXPORT aclError aclprofRangePop(void)
{
    MOCK_FAULT_RETURN_CODE();
    mock_lock();
    const aclprofEventAttributes *attr = g_push_ex_attr;
    if (attr == NULL) {   /* no PushEx since load/reset: the only check Pop makes */
        mock_unlock();
        return ACL_ERROR_INVALID_PARAM;
    }
    uint64_t start = g_push_ex_start_ns, end = mock_now_ns();
    const aclprofTensorInfo *ti = attr->message.tensorInfo;
    if (ti == NULL)
        push_ex_crash("attr->message.tensorInfo is NULL");
    if (ti->tensorNum > 0 && ti->tensors == NULL)
        push_ex_crash("tensorInfo->tensors is NULL with tensorNum > 0");
    /* rtsStreamGetAttribute(tensorInfo->stream): a NULL stream means the calling
     * thread's current context's default stream; no context, or an unknown stream,
     * fails and Pop returns -1. */
    int ret = -1;
    if (mock_stream_resolves(ti->stream) && g_enabled) {
        line l;
        put_head(&l, "push_ex", NULL, mock_tid(), start, end);
        put_field(&l, "message_type", attr->messageType);
        put_field(&l, "tensor_num", ti->tensorNum);
        put_field(&l, "op_name_id", ti->opNameId);
        put_field(&l, "op_type_id", ti->opTypeId);
        put_field(&l, "stream", (uint64_t)(uintptr_t)ti->stream);
        /* Every tensor is read, as the real ReportCustomTensorInfo copies them all; the
         * log lists the first few (a line has a fixed size). */
        put_str(&l, ",\"tensors\":[");
        for (uint32_t i = 0; i < ti->tensorNum; i++) {
            const aclprofTensor t = ti->tensors[i];   /* a read of the whole tensor */
            uint32_t dims = t.shapeDim < 8 ? t.shapeDim : 8;   /* real: min(dim, 8) */
            if (i >= PUSH_EX_LOGGED_TENSORS)
                continue;
            put_str(&l, i ? ",[" : "[");
            put_u64(&l, t.type);
            put_str(&l, ",");
            put_u64(&l, t.format);
            put_str(&l, ",");
            put_u64(&l, t.dataType);
            put_str(&l, ",[");
            for (uint32_t j = 0; j < dims; j++) {
                if (j)
                    put_str(&l, ",");
                put_u64(&l, t.shape[j]);
            }
            put_str(&l, "]]");
        }
        put_str(&l, "]");
        emit(&l, true);
        ret = ACL_SUCCESS;
    } else if (!g_enabled && g_after_finalize && !era_2025()) {
        /* RT prof_tx_plugin.cpp:274: after Finalize the report goes to the uninitialised
         * report buffer, whose code is 6 (audit 3, R7). */
        ret = 6;
    }
    mock_unlock();
    return ret;
}
