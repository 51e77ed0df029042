/* The pipe writer thread: one per process, started at the first subscribe, joined when the
 * last subscription ends or at reset. It drains the ring (subscribe_queue.c) and writes each
 * record to its subscription's fd with ONE write() (or in mock_write_chunk() pieces),
 * retrying EAGAIN after 1 ms like PipeTransport, so non-blocking pipes work.
 *
 * A blocking write() into a pipe whose reader stopped reading would block the writer
 * forever and with it aclmockReset. For blocking fds the writer therefore poll()s for
 * POLLOUT before writing, once per PIPE_BUF bytes: on Linux POLLOUT on a pipe means a free
 * page slot, so up to PIPE_BUF bytes of small writes cannot block. Non-blocking fds are
 * written directly and take the EAGAIN path. Waits are bounded by stall timeouts (no
 * progress for UNSUB_STALL_MS / RESET_STALL_MS, sub_drain), after which the remaining
 * records of the subscription are dropped and counted: the real library would wait forever.
 *
 * ACLMOCK_PIPE_WRITER=cann (issue 22) takes away the two kindnesses left: a short write is
 * not continued (PipeTransport::SendBuffer writes once, Uploader::Run only logs the
 * shortfall: the record is dropped, its first bytes already in the pipe), and SIGPIPE is
 * not blocked in the writer thread, so a write to a pipe whose read end is closed kills a
 * process that does not ignore SIGPIPE (with SIG_IGN it gets EPIPE and drops the record).
 * With a write chunk set (aclmockSetWriteChunk) every record is a short write of that size.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "subscribe_internal.h"

#define WRITER_BATCH 512u
#define EAGAIN_SLEEP_NS 1000000L /* PipeTransport sleeps 1 ms on EAGAIN */
#define POLL_SLICE_MS 50

pthread_cond_t g_work_cv;
pthread_cond_t g_done_cv;
static pthread_once_t g_cv_once = PTHREAD_ONCE_INIT;

static pthread_t g_writer;
bool g_writer_running;
static bool g_writer_stop;         /* finish the ring, then exit */
bool g_writer_waiting;
static unsigned g_writer_joining;  /* sub_stop_writer calls waiting in pthread_join */
atomic_bool g_abort_all;
atomic_uint g_fd_epoch;
atomic_uint_fast64_t g_progress;

static void cv_init_now(void)
{
    /* CLOCK_MONOTONIC: timed waits must not jump with the wall clock. */
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&g_work_cv, &a);
    pthread_cond_init(&g_done_cv, &a);
    pthread_condattr_destroy(&a);
}

void sub_ensure_cv(void)
{
    pthread_once(&g_cv_once, cv_init_now);
}

/* At load, so that no fork() can copy a pthread_once still in progress. */
__attribute__((constructor)) static void cv_ctor(void)
{
    sub_ensure_cv();
}

/* fork() (called by common.c's handlers): the child has no writer thread. Holding both
 * locks across fork() keeps the child's copies consistent; the child then forgets the
 * writer, so nothing waits for it (its queued records are never written, as CANN's
 * uploader threads do not survive fork either), and re-initialises the condition
 * variables: copied while the parent's writer (or a drain) waited on them, they would keep
 * those phantom waiters and the child's signals would be lost (issue 9). */
void sub_fork_prepare(void)
{
    pthread_mutex_lock(&g_sub_lock);
    pthread_mutex_lock(&g_log_lock);
}

void sub_fork_parent(void)
{
    pthread_mutex_unlock(&g_log_lock);
    pthread_mutex_unlock(&g_sub_lock);
}

void sub_fork_child(void)
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
    cv_init_now();
    pthread_mutex_init(&g_log_lock, NULL);
    pthread_mutex_init(&g_sub_lock, NULL);
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

/* ---- writer thread ---------------------------------------------------------------- */

/* Writer-local: bytes that can be written to `fd` without blocking. */
typedef struct write_budget {
    int fd;
    unsigned epoch;
    size_t bytes;
} write_budget;

typedef struct write_stats {
    uint64_t written, dropped, dropped_unsub, corrupted, bytes, calls, retries;
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

/* Whether the thread that started the writer (the first subscribe's caller) had SIGPIPE
 * blocked: CANN's uploader threads are created inside aclprofModelSubscribe and inherit
 * that thread's signal mask. */
static bool g_creator_blocks_sigpipe;

/* The writer thread blocks every signal (start_writer); in the CANN writer mode SIGPIPE is
 * unblocked for the write unless the creator had it blocked, as CANN's uploader threads
 * would have it. Tracked per thread: one pthread_sigmask call per change, not per record. */
static void sigpipe_as_cann(bool cann)
{
    static __thread int unblocked = 0;
    int want = cann && !g_creator_blocks_sigpipe;
    if (want == unblocked)
        return;
    cann = want;
    sigset_t pipe_only;
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    pthread_sigmask(cann ? SIG_UNBLOCK : SIG_BLOCK, &pipe_only, NULL);
    unblocked = cann;
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
    bool cann = mock_pipe_writer_cann() != 0;
    sigpipe_as_cann(cann);
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
            if (cann && left > 0)
                return false;   /* CANN: a short write is not continued; the record is lost */
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

        sub_log_flush();
        write_stats ws = { 0 };
        for (size_t i = 0; i < n; i++) {
            if (write_record(&items[i], &budget, &ws)) {
                ws.written++;
                if (items[i].corrupt)
                    ws.corrupted++;
            } else {
                ws.dropped++;
                if (atomic_load_explicit(&items[i].sub->drop_at_unsub, memory_order_relaxed))
                    ws.dropped_unsub++;
            }
            atomic_fetch_add_explicit(&items[i].sub->progress, 1, memory_order_relaxed);
            atomic_fetch_add_explicit(&g_progress, 1, memory_order_relaxed);
        }

        pthread_mutex_lock(&g_sub_lock);
        st_written += ws.written;
        st_dropped += ws.dropped;
        st_dropped_unsub += ws.dropped_unsub;
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

bool sub_start_writer(void)
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
    g_creator_blocks_sigpipe = sigismember(&old, SIGPIPE) == 1;
    g_writer_stop = false;
    int rc = pthread_create(&g_writer, NULL, writer_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0)
        return false;
    /* named, so that top, perf and the benchmarks tell the library's writer from the
     * reader's threads (one write() per record is the costliest thread of a subscribed
     * process: 13-18 % of a core at 100 k records/s here; issue 21) */
    pthread_setname_np(g_writer, MOCK_WRITER_THREAD);
    g_writer_running = true;
    return true;
}

void sub_stop_writer(void)
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


void sub_drain(sub_entry *e, uint32_t stall_ms)
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

MOCK_EXPORT int aclmockWaitWriterIdle(uint32_t timeoutMs)
{
    sub_ensure_cv();
    struct timespec ts = deadline_after_ns((uint64_t)timeoutMs * 1000000u);
    pthread_mutex_lock(&g_sub_lock);
    while (g_pending > 0 && g_writer_running) {
        if (pthread_cond_timedwait(&g_done_cv, &g_sub_lock, &ts) == ETIMEDOUT)
            break;
    }
    bool idle = g_pending == 0;
    pthread_mutex_unlock(&g_sub_lock);
    sub_log_flush();
    return idle ? ACL_SUCCESS : ACL_ERROR_FAILURE;
}

