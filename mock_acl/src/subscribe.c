/* Operator subscription: subscribe configs, aclprofModelSubscribe/UnSubscribe, the record
 * queue and the pipe writer thread, the emit log (reference sections 3.1, 3.3, 4).
 *
 * Data flow. aclmdlExecute (model.c) calls mock_subscribe_emit() once per simulated op,
 * without g_mock_lock. If the model is subscribed, emit registers the op's name/type in the
 * side table (opdesc.c), builds the signed record and appends it to one bounded ring
 * (200000 records, the size of CANN's uploader queue; when full the record is dropped and
 * counted, as the real uploader drops). One writer thread drains the ring and writes each
 * record to its subscription's fd with ONE write() (or in mock_write_chunk() pieces),
 * retrying EAGAIN after 1 ms like PipeTransport, so non-blocking pipes work.
 *
 * Locks, in acquisition order: g_mock_lock -> g_sub_lock -> (g_names_lock | g_log_lock).
 *   - g_mock_lock guards the config registry and the mode, as in every public call.
 *   - g_sub_lock guards subscriptions, the ring, the counters and the writer's lifecycle.
 *   - The writer thread never takes g_mock_lock and holds g_sub_lock only to move a batch
 *     of records out of the ring or to publish counters; never while calling write().
 *   - Unsubscribing waits for the writer to drain the model's records WITHOUT g_mock_lock
 *     (see subscribe_private.h): the reader that must empty the pipe meanwhile may call
 *     into the mock.
 *
 * A blocking write() into a pipe whose reader stopped reading would block the writer
 * forever and with it aclmockReset. For blocking fds the writer therefore poll()s for
 * POLLOUT before writing, once per PIPE_BUF bytes: on Linux POLLOUT on a pipe means a free
 * page slot, so up to PIPE_BUF bytes of small writes cannot block. Non-blocking fds are
 * written directly and take the EAGAIN path. Waits are bounded by stall timeouts (no
 * progress for UNSUB_STALL_MS / RESET_STALL_MS), after which the remaining records of the
 * subscription are dropped and counted: the real library would wait forever.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mock_internal.h"
#include "subscribe_private.h"

#define QUEUE_MAX 200000u        /* CANN's uploader queue capacity */
#define QUEUE_MIN_CAP 1024u
#define WRITER_BATCH 512u
#define EAGAIN_SLEEP_NS 1000000L /* PipeTransport sleeps 1 ms on EAGAIN */
#define POLL_SLICE_MS 50
#define UNSUB_STALL_MS 5000u     /* unsubscribe gives up after this long without progress */
#define RESET_STALL_MS 1000u     /* aclmockReset likewise */

/* ---- types -------------------------------------------------------------------------- */

/* The real layout (ProfSubscribeConfig): timeInfo, metrics, and the caller's int*. */
struct aclprofSubscribeConfig {
    int8_t timeInfo;
    aclprofAicoreMetrics aicoreMetrics;
    void *fd;
};

struct sub_entry {
    sub_entry *next;
    uint32_t model_id;
    uint32_t device_id;
    int8_t time_info;
    uint32_t metrics;
    int *fdp;               /* the caller's int, kept as CANN keeps it: read before every
                               record (GetSubscribeFdForModel), closed and set to -1 when
                               the subscription's fd is closed (see close_device) */
    bool live;              /* false once unsubscribe started: no new records */
    bool detached;          /* an unsubscribing thread owns it (finish_detach frees it) */
    bool kept;              /* unsubscribed, but its device's close is deferred: the entry
                               and its int* stay until the last subscription ends */
    bool routed;            /* kept, yet its model's records come to it again: the model was
                               re-subscribed while its device had no subscription (CANN's
                               insert keeps the old entry, see aclprofModelSubscribe) */
    uint64_t pending;       /* queued or being written; under g_sub_lock */
    atomic_uint_fast64_t progress;  /* records finished (written or dropped) */
    atomic_bool abort;      /* drop the rest instead of writing (stalled reader) */
};

typedef struct q_item {
    ProfOpDesc rec;
    sub_entry *sub;
    uint32_t size;          /* mock_op_desc_size() at emit time: 80 or 72 */
    bool corrupt;
} q_item;

/* ---- state -------------------------------------------------------------------------- */

static pthread_mutex_t g_sub_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_work_cv;   /* writer: records queued or stop requested */
static pthread_cond_t g_done_cv;   /* waiters: records finished */
static pthread_once_t g_cv_once = PTHREAD_ONCE_INIT;

static sub_entry *g_entries;       /* live and closing subscriptions */
static atomic_uint g_live_subs;    /* number of live entries: emit's lock-free fast path */

static q_item *g_q;
static size_t g_qcap, g_qhead, g_qcount;
static uint64_t g_pending;         /* queued + in the writer's current batch */

static pthread_t g_writer;
static bool g_writer_running;
static bool g_writer_stop;         /* finish the ring, then exit */
static bool g_writer_waiting;      /* writer sleeps on g_work_cv: emit must signal */
static unsigned g_writer_joining;  /* stop_writer calls waiting in pthread_join */
static atomic_bool g_abort_all;    /* reset gave up on a stalled reader: drop everything */
static atomic_uint g_fd_epoch;     /* bumped at every close: invalidates the poll budget */
static atomic_uint_fast64_t g_progress;   /* records finished, all subscriptions */

/* CANN's devTasks_[dev].count and devTasks_[64].count: each subscription counts once on
 * its model's device and once on the host pseudo-device. Devices whose count reached 0
 * while the host's did not wait in g_close_q (fdCloseInfos_) for the host count to reach
 * 0. All under g_sub_lock. */
static uint32_t g_dev_subs[MOCK_MAX_DEVICES];
static uint32_t g_host_subs;
static uint32_t g_close_q[MOCK_MAX_DEVICES];
static size_t g_close_n;

/* Counters (aclmockStats), under g_sub_lock. */
static uint64_t st_emitted, st_written, st_dropped, st_corrupted, st_bytes, st_calls,
    st_retries;
static uint64_t st_kp_emitted, st_kp_unrouted;   /* step keypoint records */

/* Config registry, under g_mock_lock: lets Destroy reject pointers it never returned. */
static aclprofSubscribeConfig **g_cfgs;
static size_t g_ncfgs, g_cfgcap;

/* Emit log. */
static pthread_mutex_t g_log_lock = PTHREAD_MUTEX_INITIALIZER;
static FILE *g_log;
static atomic_bool g_log_dirty;

/* fork(): the child has no writer thread. Holding both locks across fork() keeps the
 * child's copies consistent; the child then forgets the writer, so nothing waits for it
 * (its queued records are never written, as CANN's uploader threads do not survive fork
 * either). Registered after opdesc.c's handlers (those run at load), so these prepare
 * handlers run first and take g_sub_lock before g_names_lock, the usual order. */
static void fork_prepare(void)
{
    pthread_mutex_lock(&g_sub_lock);
    pthread_mutex_lock(&g_log_lock);
}

static void fork_parent(void)
{
    pthread_mutex_unlock(&g_log_lock);
    pthread_mutex_unlock(&g_sub_lock);
}

static void fork_child(void)
{
    /* Records queued in the parent are the parent's to write. */
    for (sub_entry *e = g_entries; e; e = e->next)
        e->pending = 0;
    g_qhead = g_qcount = 0;
    g_pending = 0;
    g_writer_running = false;
    g_writer_waiting = false;
    g_writer_joining = 0;
    g_writer_stop = false;
    pthread_mutex_unlock(&g_log_lock);
    pthread_mutex_unlock(&g_sub_lock);
}

static void cv_init(void)
{
    /* CLOCK_MONOTONIC: timed waits must not jump with the wall clock. */
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&g_work_cv, &a);
    pthread_cond_init(&g_done_cv, &a);
    pthread_condattr_destroy(&a);
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

static void ensure_cv(void)
{
    pthread_once(&g_cv_once, cv_init);
}

static struct timespec deadline_after_ns(uint64_t ns)
{
    uint64_t t = mock_now_ns() + ns;
    return (struct timespec){ .tv_sec = (time_t)(t / 1000000000u),
                              .tv_nsec = (long)(t % 1000000000u) };
}

static void sleep_ns(uint64_t ns)
{
    struct timespec ts = { .tv_sec = (time_t)(ns / 1000000000u),
                           .tv_nsec = (long)(ns % 1000000000u) };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* ---- emit log ----------------------------------------------------------------------- */

static void log_hex(FILE *f, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    char buf[256];
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        buf[o++] = hex[*p >> 4];
        buf[o++] = hex[*p & 0xf];
        if (o == sizeof buf) {
            fwrite(buf, 1, o, f);
            o = 0;
        }
    }
    fwrite(buf, 1, o, f);
}

/* Caller holds g_sub_lock (so lines come out in queue order). */
static void log_record(const ProfOpDesc *r, const mock_op *op, uint32_t device_id,
                       bool corrupt)
{
    pthread_mutex_lock(&g_log_lock);
    if (g_log != NULL) {
        fprintf(g_log, "%" PRIu32 "\t%" PRIu64 "\t", r->modelId, r->opIndex);
        log_hex(g_log, op->name);
        fputc('\t', g_log);
        log_hex(g_log, op->type);
        fprintf(g_log, "\t%" PRIu64 "\t%" PRIu64 "\t%" PRIu64 "\t%" PRIu32 "\t%" PRIu32
                "\t%" PRIu32 "\t%d\n", r->start, r->end, r->duration, r->flag, r->threadId,
                device_id, corrupt ? 1 : 0);
        atomic_store_explicit(&g_log_dirty, true, memory_order_relaxed);
    }
    pthread_mutex_unlock(&g_log_lock);
}

/* Makes every line logged so far visible in the file. The writer calls it before each
 * batch, so a record a reader got from the pipe is always already in the log. */
static void log_flush(void)
{
    if (!atomic_load_explicit(&g_log_dirty, memory_order_relaxed))
        return;
    pthread_mutex_lock(&g_log_lock);
    if (g_log != NULL)
        fflush(g_log);
    atomic_store_explicit(&g_log_dirty, false, memory_order_relaxed);
    pthread_mutex_unlock(&g_log_lock);
}

MOCK_EXPORT int aclmockSetEmitLog(const char *path)
{
    int ret = ACL_SUCCESS;
    pthread_mutex_lock(&g_log_lock);
    if (g_log != NULL)
        fclose(g_log);
    g_log = NULL;
    atomic_store(&g_log_dirty, false);
    if (path != NULL) {
        g_log = fopen(path, "a");
        if (g_log == NULL)
            ret = ACL_ERROR_INVALID_PARAM;
    }
    pthread_mutex_unlock(&g_log_lock);
    return ret;
}

/* ---- writer thread ---------------------------------------------------------------- */

/* Writer-local: bytes that can be written to `fd` without blocking. */
typedef struct write_budget {
    int fd;
    unsigned epoch;
    size_t bytes;
} write_budget;

typedef struct write_stats {
    uint64_t written, dropped, corrupted, bytes, calls, retries;
} write_stats;

static bool aborted(const sub_entry *e)
{
    return atomic_load_explicit(&e->abort, memory_order_relaxed) ||
           atomic_load_explicit(&g_abort_all, memory_order_relaxed);
}

/* 0: `n` bytes may be written; -1: fd unusable (drop); 1: subscription aborted (drop). */
static int ensure_writable(write_budget *b, const sub_entry *e, int fd, size_t n)
{
    unsigned epoch = atomic_load_explicit(&g_fd_epoch, memory_order_relaxed);
    if (b->fd == fd && b->epoch == epoch && b->bytes >= n)
        return 0;
    b->fd = fd;
    b->epoch = epoch;
    b->bytes = 0;
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0)
        return -1;
    if (fl & O_NONBLOCK) {
        /* write() cannot block: let it report EAGAIN. Re-check the flag now and then in
         * case the owner makes the fd blocking. */
        b->bytes = (size_t)1 << 20;
        return 0;
    }
    for (;;) {
        struct pollfd p = { .fd = fd, .events = POLLOUT };
        int r = poll(&p, 1, POLL_SLICE_MS);
        if (r > 0) {
            if (p.revents & POLLNVAL)
                return -1;
            /* POLLERR/POLLHUP: the read end is gone; write() reports EPIPE. */
            b->bytes = PIPE_BUF;
            return 0;
        }
        if (r < 0 && errno != EINTR)
            return -1;
        if (aborted(e))
            return 1;
    }
}

/* Writes one record; returns true if its last byte reached the fd. */
static bool write_record(const q_item *it, write_budget *b, write_stats *ws)
{
    const sub_entry *e = it->sub;
    uint32_t delay_us = mock_writer_delay_us();
    /* Sleep in slices so that an abort is noticed even with a long delay. */
    for (uint64_t left = (uint64_t)delay_us * 1000u; left > 0 && !aborted(e);) {
        uint64_t slice = left < POLL_SLICE_MS * 1000000ull ? left : POLL_SLICE_MS * 1000000ull;
        sleep_ns(slice);
        left -= slice;
    }
    if (aborted(e))
        return false;

    /* CANN's PipeTransport::SendBuffer looks the fd up through the kept int* for every
     * record (GetSubscribeFdForModel) and drops the record when it reads a negative value.
     * Reading it here too (not once at subscribe) makes a caller that frees or rewrites
     * its int while subscribed fail in tests (and under ASan) as it would on an NPU. The
     * relaxed atomic load stands for CANN's read under its own lock. */
    int fd = __atomic_load_n(e->fdp, __ATOMIC_RELAXED);
    if (fd < 0)
        return false;
    const unsigned char *p = (const unsigned char *)&it->rec;
    size_t left = it->size;
    uint32_t chunk = mock_write_chunk();
    while (left > 0) {
        size_t n = (chunk != 0 && chunk < left) ? chunk : left;
        int w = ensure_writable(b, e, fd, n);
        if (w != 0)
            return false;
        ssize_t r = write(fd, p, n);
        if (r > 0) {
            ws->calls++;
            ws->bytes += (uint64_t)r;
            p += r;
            left -= (size_t)r;
            b->bytes = b->bytes > (size_t)r ? b->bytes - (size_t)r : 0;
            continue;
        }
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            ws->retries++;
            if (aborted(e))
                return false;
            sleep_ns(EAGAIN_SLEEP_NS);
            continue;
        }
        return false;   /* EPIPE (reader closed), EBADF, ...: the record is lost */
    }
    return true;
}

static void *writer_main(void *arg)
{
    (void)arg;
    /* Created with every signal blocked (see start_writer), SIGPIPE included: a closed
     * read end gives EPIPE here instead of killing the process. */
    q_item *batch = malloc(WRITER_BATCH * sizeof *batch);
    write_budget budget = { .fd = -1 };

    pthread_mutex_lock(&g_sub_lock);
    for (;;) {
        while (g_qcount == 0 && !g_writer_stop) {
            g_writer_waiting = true;
            pthread_cond_wait(&g_work_cv, &g_sub_lock);
            g_writer_waiting = false;
        }
        if (g_qcount == 0)
            break;   /* stop requested and nothing left */

        size_t n = g_qcount < WRITER_BATCH ? g_qcount : WRITER_BATCH;
        if (batch == NULL)
            n = 1;   /* out of memory at start: write in place, one at a time */
        q_item one;
        q_item *items = batch ? batch : &one;
        size_t first = g_qcap - g_qhead < n ? g_qcap - g_qhead : n;
        memcpy(items, g_q + g_qhead, first * sizeof *items);
        memcpy(items + first, g_q, (n - first) * sizeof *items);
        g_qhead = (g_qhead + n) % g_qcap;
        g_qcount -= n;
        pthread_mutex_unlock(&g_sub_lock);

        log_flush();
        write_stats ws = { 0 };
        for (size_t i = 0; i < n; i++) {
            if (write_record(&items[i], &budget, &ws)) {
                ws.written++;
                if (items[i].corrupt)
                    ws.corrupted++;
            } else {
                ws.dropped++;
            }
            atomic_fetch_add_explicit(&items[i].sub->progress, 1, memory_order_relaxed);
            atomic_fetch_add_explicit(&g_progress, 1, memory_order_relaxed);
        }

        pthread_mutex_lock(&g_sub_lock);
        st_written += ws.written;
        st_dropped += ws.dropped;
        st_corrupted += ws.corrupted;
        st_bytes += ws.bytes;
        st_calls += ws.calls;
        st_retries += ws.retries;
        for (size_t i = 0; i < n; i++)
            items[i].sub->pending--;
        g_pending -= n;
        pthread_cond_broadcast(&g_done_cv);
    }
    pthread_mutex_unlock(&g_sub_lock);
    free(batch);
    return NULL;
}

/* Caller holds g_sub_lock (released while waiting for a stopping writer to exit). */
static bool start_writer(void)
{
    /* A writer being joined still reads g_writer_stop: wait until it is gone before
     * clearing the flag for a new one. (aclmockReset stops the writer without
     * g_mock_lock, so it may race with a subscribe.) */
    while (g_writer_joining > 0)
        pthread_cond_wait(&g_done_cv, &g_sub_lock);
    if (g_writer_running)
        return true;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);   /* the thread inherits this mask */
    g_writer_stop = false;
    int rc = pthread_create(&g_writer, NULL, writer_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0)
        return false;
    g_writer_running = true;
    return true;
}

/* Caller holds g_sub_lock (released while joining). Called only when no subscription
 * remains (nothing can be queued) or at reset after draining. */
static void stop_writer(void)
{
    if (!g_writer_running)
        return;
    g_writer_stop = true;
    pthread_cond_signal(&g_work_cv);
    pthread_t t = g_writer;
    g_writer_running = false;
    g_writer_joining++;
    pthread_mutex_unlock(&g_sub_lock);
    pthread_join(t, NULL);
    pthread_mutex_lock(&g_sub_lock);
    g_writer_joining--;
    pthread_cond_broadcast(&g_done_cv);
}

/* ---- subscriptions ------------------------------------------------------------------ */

/* Caller holds g_sub_lock. */
static sub_entry *find_live(uint32_t model_id)
{
    for (sub_entry *e = g_entries; e; e = e->next) {
        if (e->live && e->model_id == model_id)
            return e;
    }
    return NULL;
}

/* Caller holds g_sub_lock. The kept entry of a model whose close is deferred, if any:
 * CANN's subscribeInfos_ has one entry per model id, subscribed or not. */
static sub_entry *find_kept(uint32_t model_id)
{
    for (sub_entry *e = g_entries; e; e = e->next) {
        if (e->kept && e->model_id == model_id)
            return e;
    }
    return NULL;
}

/* Caller holds g_sub_lock. Where the model's records go: its live entry, or its kept
 * entry when that is routed (CANN's GetSubscribeFdForModel ignores `subscribed`). */
static sub_entry *find_route(uint32_t model_id)
{
    sub_entry *e = find_live(model_id);
    if (e == NULL) {
        e = find_kept(model_id);
        if (e != NULL && !e->routed)
            e = NULL;
    }
    return e;
}

bool mock_model_subscribed(uint32_t model_id)
{
    pthread_mutex_lock(&g_sub_lock);
    bool r = find_live(model_id) != NULL;
    pthread_mutex_unlock(&g_sub_lock);
    return r;
}

/* Caller holds g_sub_lock. Grows the ring if needed; false if the record must be dropped. */
static bool ring_reserve(void)
{
    if (g_qcount < g_qcap)
        return true;
    if (g_qcap >= QUEUE_MAX)
        return false;
    size_t ncap = g_qcap ? g_qcap * 2 : QUEUE_MIN_CAP;
    if (ncap > QUEUE_MAX)
        ncap = QUEUE_MAX;
    q_item *nq = malloc(ncap * sizeof *nq);
    if (nq == NULL)
        return false;
    size_t first = g_qcap - g_qhead < g_qcount ? g_qcap - g_qhead : g_qcount;
    if (g_qcount > 0) {
        memcpy(nq, g_q + g_qhead, first * sizeof *nq);
        memcpy(nq + first, g_q, (g_qcount - first) * sizeof *nq);
    }
    free(g_q);
    g_q = nq;
    g_qcap = ncap;
    g_qhead = 0;
    return true;
}

static uint64_t mix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Caller holds g_sub_lock. Signs `r` (whose other fields are set), logs it and queues it
 * for `e`'s fd: the tail shared by op records and keypoint records. `device_id` is the
 * model's device for the emit log, whatever the record's devId says. */
static void enqueue_locked(sub_entry *e, ProfOpDesc *r, const mock_op *op, uint32_t device_id)
{
    uint32_t size = mock_op_desc_size();
    uint32_t every = mock_corrupt_every();
    uint64_t seq = ++st_emitted;
    bool corrupt = every != 0 && seq % every == 0;
    bool queued = ring_reserve();
    if (queued) {
        /* Corrupt records get an index but no strings: no reader can fetch them (the
         * getters reject the record), so storing them would only leak table entries. */
        r->opIndex = corrupt ? mock_opdesc_register(NULL, NULL)
                             : mock_opdesc_register(op->name, op->type);
    }
    ProfOpDesc wire;   /* the bytes in the pipe: the layout may differ (audit row 14) */
    mock_opdesc_to_wire(r, &wire);
    wire.signature = mock_crc32c_signature(&wire, size);
    if (corrupt)
        wire.signature = ~wire.signature;

    log_record(r, op, device_id, corrupt);
    if (!queued) {
        st_dropped++;   /* queue full: CANN's uploader drops too */
        return;
    }
    q_item *it = &g_q[(g_qhead + g_qcount) % g_qcap];
    memcpy(&it->rec, &wire, sizeof wire);   /* memcpy: struct assignment may skip the
                                               padding, which the signature covers */
    it->sub = e;
    it->size = size;
    it->corrupt = corrupt;
    g_qcount++;
    g_pending++;
    e->pending++;
    if (g_writer_waiting)
        pthread_cond_signal(&g_work_cv);
}

void mock_subscribe_emit(uint32_t model_id, uint32_t device_id, const mock_op *op,
                         uint64_t start, uint64_t end)
{
    if (atomic_load_explicit(&g_live_subs, memory_order_relaxed) == 0)
        return;   /* nothing subscribed: the common case costs one load */
    uint32_t size = mock_op_desc_size();

    pthread_mutex_lock(&g_sub_lock);
    sub_entry *e = find_route(model_id);
    if (e == NULL) {
        pthread_mutex_unlock(&g_sub_lock);
        return;
    }
    ProfOpDesc r;
    memset(&r, 0, sizeof r);   /* padding and cubeFops/vectorFops stay 0, as in CANN */
    r.modelId = model_id;
    r.flag = op->flag;
    r.threadId = op->thread_id;
    if (e->time_info) {
        r.start = start;
        r.end = end;
        r.duration = end - start;
        /* "AI Core execution time": a deterministic 80-95% of the duration. */
        r.executionTime = r.duration * (80 + mix64(start ^ (end << 1)) % 16) / 100;
    }
    /* The 72-byte layout of older CANN ends before devId. With the devId-zero switch the
     * record looks like one from Analyzer::ConstructAndUploadData, which never sets it. */
    if (size >= offsetof(ProfOpDesc, devId) + sizeof r.devId && !mock_devid_zero())
        r.devId = device_id;
    enqueue_locked(e, &r, op, device_id);
    pthread_mutex_unlock(&g_sub_lock);
}

/* CANN's analyzer turns each completed step keypoint into a record of its own
 * (Analyzer::UploadKeypointOp -> ConstructAndUploadData with an empty op id): name
 * "keypoint_op", type "na" (config.h KEYPOINT_OP_NAME/TYPE), modelId = the keypoint's model
 * id, start/end = the step's start and end, duration = end - start, flag ACL_SUBSCRIBE_OP,
 * threadId, executionTime and devId 0. PipeTransport::SendBuffer routes it like any record:
 * to the subscription of that model id, else to a thread subscription of (devId 0, thread
 * 0), else it drops it. The name is registered in the side table BEFORE routing, so a
 * dropped keypoint leaves an entry nobody will fetch, as in CANN. */
void mock_subscribe_emit_keypoint(uint64_t start_host_ns, uint64_t end_host_ns)
{
    uint32_t model_id;
    if (!mock_step_keypoints(&model_id) ||
        atomic_load_explicit(&g_live_subs, memory_order_relaxed) == 0)
        return;   /* the analyzer only runs while something is subscribed */
    static const mock_op keypoint = { .name = "keypoint_op", .type = "na" };
    uint64_t start = mock_device_time(start_host_ns);
    uint64_t end = mock_device_time(end_host_ns);
    if (end <= start)
        return;   /* AnalyzerTs::ParseTsKeypointData rejects an end not after the start */

    pthread_mutex_lock(&g_sub_lock);
    sub_entry *e = find_route(model_id);
    if (e == NULL) {
        st_kp_unrouted++;
        (void)mock_opdesc_register(keypoint.name, keypoint.type);
        pthread_mutex_unlock(&g_sub_lock);
        return;
    }
    ProfOpDesc r;
    memset(&r, 0, sizeof r);
    r.modelId = model_id;
    r.flag = ACL_SUBSCRIBE_OP;
    /* UNVERIFIED: whether timeInfoSwitch 0 also empties keypoint times; treated like ops. */
    if (e->time_info) {
        r.start = start;
        r.end = end;
        r.duration = end - start;
    }
    st_kp_emitted++;
    enqueue_locked(e, &r, &keypoint, e->device_id);
    pthread_mutex_unlock(&g_sub_lock);
}

/* Caller holds g_sub_lock. Waits until the entry (or, with e == NULL, everything) has no
 * queued records; after `stall_ms` without progress the rest is dropped. */
static void drain(sub_entry *e, uint32_t stall_ms)
{
    uint64_t stall_ns = ((uint64_t)stall_ms + mock_writer_delay_us() / 1000u) * 1000000u;
    atomic_uint_fast64_t *prog = e ? &e->progress : &g_progress;
    uint64_t last = atomic_load(prog);
    uint64_t last_t = mock_now_ns();
    for (;;) {
        uint64_t pending = e ? e->pending : g_pending;
        if (pending == 0 || !g_writer_running)
            break;
        struct timespec ts = deadline_after_ns(20000000u);
        pthread_cond_timedwait(&g_done_cv, &g_sub_lock, &ts);
        uint64_t p = atomic_load(prog);
        uint64_t now = mock_now_ns();
        if (p != last) {
            last = p;
            last_t = now;
        } else if (now - last_t > stall_ns) {
            if (e)
                atomic_store(&e->abort, true);
            else
                atomic_store(&g_abort_all, true);
        }
    }
}

/* Caller holds g_sub_lock. */
static void unlink_entry(sub_entry *e)
{
    for (sub_entry **pp = &g_entries; *pp; pp = &(*pp)->next) {
        if (*pp == e) {
            *pp = e->next;
            return;
        }
    }
}

/* Caller holds g_sub_lock. Closes `*fdp` unless a subscription still in the list has the
 * same fd value, as CANN's CloseSubscribeFd does, and then writes -1 through the pointer.
 * (CANN calls close() even on a negative value and gets EBADF; skipping it is the same.) */
static void close_fd_unless_used(int *fdp)
{
    int fd = *fdp;
    for (sub_entry *o = g_entries; o; o = o->next) {
        if (*o->fdp == fd)
            return;   /* shared: neither closed nor set to -1 */
    }
    if (fd >= 0)
        close(fd);
    *fdp = -1;
    atomic_fetch_add(&g_fd_epoch, 1);
}

/* Caller holds g_sub_lock. Unlinks the entry, closes its fd (unless shared), frees it:
 * CANN's CloseSubscribeFd(devId, key), the close at unsubscribe while the device still
 * has other subscriptions (prof_acl_mgr.cpp L2788-2817), and the close at reset. */
static void close_entry(sub_entry *e)
{
    unlink_entry(e);
    close_fd_unless_used(e->fdp);
    free(e);
}

/* Caller holds g_sub_lock. CANN's CloseSubscribeFd(devId) (L2759-2786), run for every
 * queued device when the host count reaches 0: every entry of the device leaves the list
 * first, then each distinct int* is closed unless an entry of ANOTHER device still has
 * the same fd value (so one fd shared by models on two devices is closed, and set to -1,
 * only through the last device's pointer). */
static void close_device(uint32_t device_id)
{
    sub_entry *doomed = NULL;
    for (sub_entry **pp = &g_entries; *pp;) {
        sub_entry *e = *pp;
        if (e->device_id == device_id) {
            *pp = e->next;
            e->next = doomed;
            doomed = e;
        } else {
            pp = &e->next;
        }
    }
    for (sub_entry *d = doomed; d; d = d->next) {
        bool seen = false;   /* CANN collects the pointers in a std::set */
        for (sub_entry *x = doomed; x != d; x = x->next)
            seen |= x->fdp == d->fdp;
        if (!seen)
            close_fd_unless_used(d->fdp);
    }
    while (doomed != NULL) {
        sub_entry *next = doomed->next;
        free(doomed);
        doomed = next;
    }
}

/* Caller holds g_sub_lock. The second half of CANN's ProfStopAclSubscribe (L3415-3462)
 * for a drained entry: the model's device and then the host pseudo-device 64 lose one
 * subscription each.
 *   - Device count still > 0: the entry's fd is closed at once (unless shared).
 *   - Device count 0: the device is only queued (CloseSubscribeFdIfHostId, L1123-1132);
 *     the entry stays in the list, unsubscribed, with its int*.
 *   - Host count 0 (the last subscription of the process): every queued device is
 *     closed now, through the kept pointers.
 * So with models on two devices, unsubscribing the first leaves its fd open and its int
 * untouched until the second is unsubscribed. */
static void unsubscribe_entry(sub_entry *e)
{
    uint32_t dev = e->device_id < MOCK_MAX_DEVICES ? e->device_id : MOCK_MAX_DEVICES - 1;
    if (g_dev_subs[dev] > 0)
        g_dev_subs[dev]--;
    if (g_dev_subs[dev] == 0) {
        bool queued = false;   /* CANN may queue a device twice; the second pass is empty */
        for (size_t i = 0; i < g_close_n; i++)
            queued |= g_close_q[i] == dev;
        if (!queued)
            g_close_q[g_close_n++] = dev;
        e->detached = false;
        e->kept = true;
    } else {
        close_entry(e);
    }
    if (g_host_subs > 0)
        g_host_subs--;
    if (g_host_subs == 0) {
        for (size_t i = 0; i < g_close_n; i++)
            close_device(g_close_q[i]);
        g_close_n = 0;
    }
}

sub_entry *mock_subscribe_detach(uint32_t model_id)
{
    pthread_mutex_lock(&g_sub_lock);
    sub_entry *e = find_live(model_id);
    if (e != NULL) {
        e->live = false;
        e->detached = true;
        atomic_fetch_sub(&g_live_subs, 1);
    }
    pthread_mutex_unlock(&g_sub_lock);
    return e;
}

void mock_subscribe_finish_detach(sub_entry *e)
{
    ensure_cv();
    pthread_mutex_lock(&g_sub_lock);
    drain(e, UNSUB_STALL_MS);
    unsubscribe_entry(e);
    pthread_cond_broadcast(&g_done_cv);   /* a concurrent reset waits for detached entries */
    pthread_mutex_unlock(&g_sub_lock);
    log_flush();

    /* g_mock_lock orders this against a concurrent subscribe (which may start the writer
     * or need the mode). The writer stops only when no entry exists at all: then nothing
     * can be queued and nobody waits for it. */
    mock_lock();
    pthread_mutex_lock(&g_sub_lock);
    if (atomic_load(&g_live_subs) == 0 && mock_mode() == ACLMOCK_MODE_SUBSCRIBE)
        mock_set_mode(ACLMOCK_MODE_OFF);
    if (g_entries == NULL)
        stop_writer();
    pthread_mutex_unlock(&g_sub_lock);
    mock_unlock();
}

/* ---- public API --------------------------------------------------------------------- */

MOCK_EXPORT aclprofSubscribeConfig *aclprofCreateSubscribeConfig(int8_t timeInfoSwitch,
                                                                 aclprofAicoreMetrics aicoreMetrics,
                                                                 void *fd)
{
    int32_t code;
    if (mock_fault(__func__, &code))
        return NULL;
    if (fd == NULL || (timeInfoSwitch != 0 && timeInfoSwitch != 1))
        return NULL;   /* metrics are not checked here, as in CANN */
    aclprofSubscribeConfig *cfg = malloc(sizeof *cfg);
    if (cfg == NULL)
        return NULL;
    cfg->timeInfo = timeInfoSwitch;
    cfg->aicoreMetrics = aicoreMetrics;
    cfg->fd = fd;
    mock_lock();
    if (g_ncfgs == g_cfgcap) {
        size_t ncap = g_cfgcap ? g_cfgcap * 2 : 16;
        aclprofSubscribeConfig **n = realloc(g_cfgs, ncap * sizeof *n);
        if (n == NULL) {
            mock_unlock();
            free(cfg);
            return NULL;
        }
        g_cfgs = n;
        g_cfgcap = ncap;
    }
    g_cfgs[g_ncfgs++] = cfg;
    mock_unlock();
    return cfg;
}

/* Caller holds g_mock_lock. */
static size_t cfg_find(const aclprofSubscribeConfig *cfg)
{
    for (size_t i = 0; i < g_ncfgs; i++) {
        if (g_cfgs[i] == cfg)
            return i;
    }
    return SIZE_MAX;
}

/* Deviation: CANN deletes whatever it is given (a second destroy is a double free); the
 * mock rejects pointers it did not return, or already destroyed, with INVALID_PARAM. */
MOCK_EXPORT aclError aclprofDestroySubscribeConfig(const aclprofSubscribeConfig *cfg)
{
    int32_t code;
    if (mock_fault(__func__, &code))
        return code;
    if (cfg == NULL)
        return ACL_ERROR_INVALID_PARAM;
    mock_lock();
    size_t i = cfg_find(cfg);
    if (i == SIZE_MAX) {
        mock_unlock();
        return ACL_ERROR_INVALID_PARAM;
    }
    free(g_cfgs[i]);
    g_cfgs[i] = g_cfgs[--g_ncfgs];
    mock_unlock();
    return ACL_SUCCESS;
}

MOCK_EXPORT aclError aclprofModelSubscribe(uint32_t modelId,
                                           const aclprofSubscribeConfig *cfg)
{
    int32_t code;
    if (mock_fault(__func__, &code))
        return code;
    ensure_cv();
    mock_lock();
    aclError ret = ACL_SUCCESS;
    if (!mock_model_exists(modelId)) {
        ret = ACL_ERROR_INVALID_MODEL_ID;   /* checked before the config, as in CANN */
    } else if (cfg == NULL || cfg_find(cfg) == SIZE_MAX) {
        ret = ACL_ERROR_INVALID_PARAM;
    } else if (mock_mode() == ACLMOCK_MODE_API_CTRL) {
        ret = ACL_ERROR_PROF_API_CONFLICT;  /* ProfSubscribePrecheck */
    } else if (cfg->timeInfo == 0 && cfg->aicoreMetrics == ACL_AICORE_NONE) {
        ret = ACL_ERROR_INVALID_PARAM;      /* CheckSubscribeConfig: nothing to collect */
    }
    if (ret != ACL_SUCCESS) {
        mock_unlock();
        return ret;
    }

    pthread_mutex_lock(&g_sub_lock);
    if (find_live(modelId) != NULL) {
        ret = ACL_ERROR_PROF_REPEAT_SUBSCRIBE;
    } else {
        /* Every subscription also starts (or joins) the host pseudo-device 64 in CANN, and
         * joining checks the config against that device's: so ANY live subscription with
         * another timeInfo or metrics makes this one fail, whatever its device. */
        for (sub_entry *o = g_entries; o; o = o->next) {
            if (o->live && (o->time_info != cfg->timeInfo ||
                            o->metrics != (uint32_t)cfg->aicoreMetrics))
                ret = ACL_ERROR_INVALID_PROFILING_CONFIG;
        }
    }
    uint32_t device = mock_model_device(modelId);
    uint32_t dev = device < MOCK_MAX_DEVICES ? device : MOCK_MAX_DEVICES - 1;
    sub_entry *kept = ret == ACL_SUCCESS ? find_kept(modelId) : NULL;
    if (kept != NULL) {
        /* The model's previous subscription was unsubscribed with its close deferred, so
         * CANN still has its entry (subscribed=false, the old int*).
         *   - Its device has subscriptions again: UpdateSubscribeInfo (prof_acl_mgr.cpp
         *     L1673-1679) re-subscribes that entry with the new int*.
         *   - It has none: StartDeviceSubscribeTask restarts the device and its
         *     subscribeInfos_.insert (L1738-1742) keeps the OLD entry. The call succeeds,
         *     both counts go up, the model's records go to the old int*, and a later
         *     unsubscribe finds the model "not subscribed" (100011): nothing brings the
         *     counts down again until aclmockReset. */
        if (!start_writer()) {
            ret = ACL_ERROR_PROFILING_FAILURE;
        } else {
            bool was_routed = kept->routed;
            if (g_dev_subs[dev] > 0) {
                kept->kept = false;
                kept->routed = false;
                kept->live = true;
                kept->fdp = (int *)cfg->fd;
                kept->time_info = cfg->timeInfo;
                kept->metrics = (uint32_t)cfg->aicoreMetrics;
            } else {
                kept->routed = true;
            }
            if (!was_routed)
                atomic_fetch_add(&g_live_subs, 1);   /* emit must look for it again */
            g_dev_subs[dev]++;
            g_host_subs++;
            pthread_mutex_unlock(&g_sub_lock);
            mock_set_mode(ACLMOCK_MODE_SUBSCRIBE);
            mock_unlock();
            return ACL_SUCCESS;
        }
    }
    sub_entry *e = NULL;
    if (ret == ACL_SUCCESS) {
        e = calloc(1, sizeof *e);
        if (e == NULL)
            ret = ACL_ERROR_BAD_ALLOC;
        else if (!start_writer())
            ret = ACL_ERROR_PROFILING_FAILURE;
    }
    if (ret != ACL_SUCCESS) {
        free(e);
        pthread_mutex_unlock(&g_sub_lock);
        mock_unlock();
        return ret;
    }
    e->model_id = modelId;
    e->device_id = device;
    e->time_info = cfg->timeInfo;
    e->metrics = (uint32_t)cfg->aicoreMetrics;
    e->fdp = (int *)cfg->fd;
    e->live = true;
    g_dev_subs[dev]++;
    g_host_subs++;
    atomic_init(&e->progress, 0);
    atomic_init(&e->abort, false);
    e->next = g_entries;
    g_entries = e;
    atomic_fetch_add(&g_live_subs, 1);
    pthread_mutex_unlock(&g_sub_lock);
    mock_set_mode(ACLMOCK_MODE_SUBSCRIBE);
    mock_unlock();
    return ACL_SUCCESS;
}

MOCK_EXPORT aclError aclprofModelUnSubscribe(uint32_t modelId)
{
    int32_t code;
    if (mock_fault(__func__, &code))
        return code;
    mock_lock();
    if (!mock_model_exists(modelId)) {
        mock_unlock();
        return ACL_ERROR_INVALID_MODEL_ID;
    }
    if (mock_mode() == ACLMOCK_MODE_API_CTRL) {
        mock_unlock();
        return ACL_ERROR_PROF_API_CONFLICT;
    }
    sub_entry *e = mock_subscribe_detach(modelId);
    mock_unlock();
    if (e == NULL)
        return ACL_ERROR_INVALID_MODEL_ID;   /* loaded but not subscribed */
    mock_subscribe_finish_detach(e);
    return ACL_SUCCESS;
}

MOCK_EXPORT int aclmockWaitWriterIdle(uint32_t timeoutMs)
{
    ensure_cv();
    struct timespec ts = deadline_after_ns((uint64_t)timeoutMs * 1000000u);
    pthread_mutex_lock(&g_sub_lock);
    while (g_pending > 0 && g_writer_running) {
        if (pthread_cond_timedwait(&g_done_cv, &g_sub_lock, &ts) == ETIMEDOUT)
            break;
    }
    bool idle = g_pending == 0;
    pthread_mutex_unlock(&g_sub_lock);
    log_flush();
    return idle ? ACL_SUCCESS : ACL_ERROR_FAILURE;
}

/* ---- reset and stats ------------------------------------------------------------------ */

void mock_subscribe_reset(void)
{
    ensure_cv();
    pthread_mutex_lock(&g_sub_lock);
    /* Unsubscribe everything as aclprofModelUnSubscribe would: no new records, flush the
     * queued ones (bounded by RESET_STALL_MS without progress), close the fds, write -1. */
    for (sub_entry *e = g_entries; e; e = e->next)
        e->live = false;
    atomic_store(&g_live_subs, 0);
    drain(NULL, RESET_STALL_MS);
    /* An aclprofModelUnSubscribe/aclmdlUnload in progress on another thread owns its entry:
     * let it finish (its drain is over, or will be soon, since ours is) rather than free
     * the entry under it. */
    for (;;) {
        bool busy = false;
        for (sub_entry *e = g_entries; e; e = e->next)
            busy |= e->detached;
        if (!busy)
            break;
        pthread_cond_wait(&g_done_cv, &g_sub_lock);
    }
    stop_writer();   /* drops what a stalled reader left, since g_abort_all may be set */
    atomic_store(&g_abort_all, false);
    /* Kept (deferred) entries too: reset ends every subscription, like the last one. */
    while (g_entries != NULL)
        close_entry(g_entries);
    memset(g_dev_subs, 0, sizeof g_dev_subs);
    g_host_subs = 0;
    g_close_n = 0;
    free(g_q);
    g_q = NULL;
    g_qcap = g_qhead = g_qcount = 0;
    g_pending = 0;
    st_emitted = st_written = st_dropped = st_corrupted = st_bytes = st_calls = st_retries = 0;
    st_kp_emitted = st_kp_unrouted = 0;
    atomic_store(&g_progress, 0);
    pthread_mutex_unlock(&g_sub_lock);

    mock_lock();
    for (size_t i = 0; i < g_ncfgs; i++)
        free(g_cfgs[i]);
    free(g_cfgs);
    g_cfgs = NULL;
    g_ncfgs = g_cfgcap = 0;
    mock_unlock();

    (void)aclmockSetEmitLog(NULL);
}

void mock_subscribe_stats(aclmockStats *out)
{
    pthread_mutex_lock(&g_sub_lock);
    out->recordsEmitted = st_emitted;
    out->recordsWritten = st_written;
    out->recordsDropped = st_dropped;
    out->recordsCorrupted = st_corrupted;
    out->bytesWritten = st_bytes;
    out->writeCalls = st_calls;
    out->writeRetries = st_retries;
    out->keypointsEmitted = st_kp_emitted;
    out->keypointsUnrouted = st_kp_unrouted;
    pthread_mutex_unlock(&g_sub_lock);
}
