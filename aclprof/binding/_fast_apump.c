/* The agent's sender between Python's turns (issue 21; see _fast.h, aclprof_aq_pump).
 *
 * Why: the sender woke 20-40 times a second into Python (pump, frame, send, arm, sleep),
 * each wake-up a dozen GIL acquisitions; on a busy host a thread holding the GIL can be
 * descheduled with it, and the service's step thread, which needs the GIL to return from
 * aclmdlExecute, waits. Here the steady state (wait, frame, write, wait for room) runs in C
 * without the GIL, and Python runs only for what needs it: control items, new names,
 * a connection's events and its periodic work (a heartbeat or a request bill due).
 *
 * What the call has sent so far is read while it runs (Pump.sent_now, for agent.stats()):
 * returning to Python just to publish counters would take the GIL from the service. This
 * thread is the only writer of the sent_* fields while the call runs; each is stored whole
 * (relaxed atomic stores), so a reader sees an old or a new value, never a torn one. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, poll under -std=c11 */
#include "_fast_internal.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* The wire's frame header (aclprof.protocol.wire.HEADER, "<4sBBHI"): magic, version, kind,
 * reserved, payload length. */
#define HDR 12
#define WIRE_VERSION 1
#define KIND_BATCH 13
#define REC sizeof(aclprof_record)

static void put_header(uint8_t *p, uint32_t length)
{
    memcpy(p, "ACLP", 4);
    p[4] = WIRE_VERSION;
    p[5] = KIND_BATCH;
    p[6] = p[7] = 0;
    for (int i = 0; i < 4; i++) /* little-endian, whatever the host */
        p[8 + i] = (uint8_t)(length >> (8 * i));
}

/* io's sent_* counters: read live by another thread (see the top), written here only */
static inline void add_live(uint64_t *counter, uint64_t v)
{
    __atomic_store_n(counter, *counter + v, __ATOMIC_RELAXED);
}

/* Write what the socket takes now; 0, or -errno when the connection broke. A chunk that is
 * now written whole is counted and the buffer starts over. */
static int send_pending(int sock, aclprof_aq_pump_io *io)
{
    while (io->start < io->end) {
        ssize_t n = send(sock, io->buf + io->start, io->end - io->start, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            io->start += (uint64_t)n;
            add_live(&io->sent_bytes, (uint64_t)n);
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        return n < 0 ? -errno : -EPIPE;
    }
    add_live(&io->sent_records, io->records);
    add_live(&io->sent_loss, io->loss);
    add_live(&io->sent_frames, io->frames);
    io->records = io->loss = io->frames = 0;
    io->start = io->end = 0;
    return 0;
}

static void drain(int fd)
{
    char sink[64];
    while (read(fd, sink, sizeof sink) > 0)
        ;
}

/* (_fast.h) Why a grid: the agents of one host then send within the same moment each
 * interval, and the daemon handles their frames in one wake-up, the first with its caches
 * cold, the others warm (a frame costs it ~4x more after its loop slept: issue 21); with
 * windows from each agent's own last frame, their frames came spread over the interval, one
 * cold wake-up each (4 agents at 100 k ops/s in all: 0.24-0.25 us of daemon CPU per record
 * against 0.28-0.39). */
int64_t aclprof_aq_window_end(int64_t last_ns, int64_t coalesce_ns)
{
    if (coalesce_ns <= 0 || last_ns < 0)
        return last_ns;
    int64_t from = last_ns + coalesce_ns / 2;
    return (from / coalesce_ns + (from % coalesce_ns != 0)) * coalesce_ns;
}

/* Wait for `want` on the socket (POLLOUT: room; always POLLIN: the daemon speaks), Python's
 * pipe, the pump's rows pipe, at most until `deadline_ns`. Returns 0 to go on (room, rows,
 * the deadline when it is not until_ns) or the code to return. */
static int wait_for(const aclprof_aq_pump_args *a, aclprof_aq_pump_io *io, short want, int64_t deadline_ns)
{
    struct pollfd fds[3] = {
        {.fd = a->sock, .events = (short)(POLLIN | want)},
        {.fd = a->py_fd, .events = POLLIN},
        {.fd = a->rows_r, .events = POLLIN},
    };
    int64_t left = deadline_ns - aclprof_mono_ns();
    int ms = left <= 0 ? 0 : (int)((left + 999999) / 1000000);
    int r = poll(fds, 3, ms);
    if (r < 0) {
        if (errno == EINTR)
            return 0;
        io->err = errno;
        return ACLPROF_PUMP_ERROR;
    }
    if (fds[2].revents)
        drain(a->rows_r);
    if (fds[1].revents)
        return ACLPROF_PUMP_PYTHON;
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL))
        return ACLPROF_PUMP_INCOMING;
    if (aclprof_mono_ns() >= a->until_ns)
        return ACLPROF_PUMP_TIMEOUT;
    return 0;
}

int aclprof_aq_pump(aclprof_agent_queue *q, const aclprof_aq_pump_args *a, aclprof_aq_pump_io *io)
{
    /* zero already when Python took the last call's (Pump.run); stored whole all the same */
    __atomic_store_n(&io->sent_bytes, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&io->sent_records, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&io->sent_loss, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&io->sent_frames, 0, __ATOMIC_RELAXED);
    io->err = 0;
    uint64_t room = io->cap > HDR ? (io->cap - HDR) / REC : 0;
    uint32_t max_rows = a->max_rows < room ? a->max_rows : (uint32_t)room;
    if (max_rows == 0 || io->start > io->end || io->end > io->cap) {
        io->err = EINVAL;
        return ACLPROF_PUMP_ERROR;
    }
    /* while busy, the next frame waits until the window after the last frame ends
     * (aclprof_aq_window_end); last is the last frame's time, kept between calls:
     * restarting the window at each call let a caller that returns every coalesce_ns or
     * sooner (the bill feed's 0.1 s against a 0.1 s window) starve the frames while records
     * flowed */
    int64_t last = io->last_ns > 0 ? io->last_ns : aclprof_mono_ns();
    int64_t end = aclprof_aq_window_end(last, a->coalesce_ns);
    for (;;) {
        /* what is pending goes first: a chunk is written whole (and counted) before the
         * next is built */
        int r = send_pending(a->sock, io);
        if (r < 0) {
            io->err = -r;
            return ACLPROF_PUMP_ERROR;
        }
        if (io->start < io->end) {
            int code = wait_for(a, io, POLLOUT, a->until_ns);
            if (code)
                return code;
            continue;
        }
        int64_t now = aclprof_mono_ns();
        if (now >= a->until_ns)
            return ACLPROF_PUMP_TIMEOUT;
        int behind = 0;
        uint64_t ready = aclprof_aq_ready(q, &behind);
        if (behind && ready == 0)
            return ACLPROF_PUMP_PYTHON; /* an item goes before the next rows: Python sends it */
        /* As the Python loop does: while records flow, gather them until the window ends or
         * wake_rows are held (fewer, larger frames); a window with nothing in it makes the
         * pump idle, and when idle the first row goes at once. */
        if (ready == 0 && io->busy && now >= end)
            io->busy = 0;
        /* rows behind a barrier: the ones before it go now, and Python sends the item */
        int go = ready > 0 && (!io->busy || behind || ready >= a->wake_rows || now >= end);
        if (!go) {
            uint64_t want = io->busy ? a->wake_rows : 1;
            int64_t deadline = io->busy && end < a->until_ns ? end : a->until_ns;
            if (!aclprof_aq_arm_to(q, want, a->rows_w))
                continue; /* they came meanwhile */
            int code = wait_for(a, io, 0, deadline);
            aclprof_aq_disarm(q);
            if (code)
                return code;
            continue;
        }
        aclprof_aq_frame_result res;
        int code = aclprof_aq_frame(q, a->gen, UINT64_MAX, max_rows, a->max_devices, io->buf + HDR, &res);
        if (res.records) {
            put_header(io->buf, (uint32_t)(res.records * REC));
            io->end = HDR + res.records * REC;
            io->records += res.records;
            io->frames += 1;
            io->busy = 1;
            io->last_ns = last = now;
            end = aclprof_aq_window_end(last, a->coalesce_ns);
        }
        if (code != ACLPROF_AQ_FRAMED) {
            io->slot = res.slot;
            io->value = res.value;
            return code;
        }
    }
}
