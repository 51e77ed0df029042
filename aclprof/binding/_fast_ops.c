/* Op record decoding for aclprof.api.subscription: the pipe read and the decode loop
 * (see _fast.h).
 *
 * Why in C: the library keeps op names and types in a side table that only its getters can
 * read (and each read frees the entry), so every record needs at least two calls (Type,
 * Name; _fast_names.c makes them and interns the strings). Doing them here instead of in
 * Python is what makes the reader fast; calling them on one-record slices keeps each call
 * O(1), because the library re-checks the signature of every record in the buffer it is
 * given. Signatures are checked by _fast_crc.c. */
#define _POSIX_C_SOURCE 200809L /* poll, nanosleep, clock_gettime under -std=c11 */
#include "_fast_internal.h"

#include <errno.h>
#include <poll.h>
#include <time.h>
#include <unistd.h>

/* --- the reader's GIL-free half (issue 12; see _fast.h) --- */
int64_t aclprof_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* One read of what is there; 0 with *flags |= EOF at end of stream. */
static int64_t read_some(int fd, uint8_t *buf, uint64_t room, int *flags)
{
    for (;;) {
        ssize_t n = read(fd, buf, room);
        if (n > 0)
            return n;
        if (n == 0) {
            *flags |= ACLPROF_READ_EOF;
            return 0;
        }
        if (errno != EINTR)
            return -errno;
    }
}

_Thread_local int64_t aclprof_read_first_ns;
_Thread_local int64_t aclprof_read_first_bytes;

int64_t aclprof_read_pipe(int fd, int wake_fd, uint8_t *buf, uint64_t cap, int64_t coalesce_ns,
                          int *flags)
{
    *flags = 0;
    if (cap == 0)
        return -EINVAL;
    struct pollfd fds[2] = {{.fd = fd, .events = POLLIN}, {.fd = wake_fd, .events = POLLIN}};
    for (;;) {
        int r = poll(fds, wake_fd >= 0 ? 2 : 1, -1);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (fds[0].revents)
            break; /* data, EOF (POLLHUP) or an error: read() tells which */
        if (wake_fd >= 0 && fds[1].revents) {
            *flags |= ACLPROF_READ_WOKEN;
            return 0;
        }
    }
    int64_t first = aclprof_mono_ns();
    int64_t got = read_some(fd, buf, cap, flags);
    aclprof_read_first_ns = aclprof_mono_ns(); /* every byte of this first read was written before now */
    aclprof_read_first_bytes = got;
    if (got <= 0 || (uint64_t)got >= cap / 2 || coalesce_ns <= 0)
        return got;
    /* A small read: let more records arrive before Python is woken for them. */
    int64_t deadline = first + coalesce_ns;
    while ((uint64_t)got < cap && !(*flags & ACLPROF_READ_EOF)) {
        int64_t left = deadline - aclprof_mono_ns();
        if (left > 0) {
            struct timespec ts = {(time_t)(left / 1000000000), (long)(left % 1000000000)};
            while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
                ;
        }
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int r;
        while ((r = poll(&p, 1, 0)) < 0 && errno == EINTR)
            ;
        if (r <= 0)
            break; /* nothing more yet (or poll failed: the next call reports it) */
        int64_t n = read_some(fd, buf + got, cap - (uint64_t)got, flags);
        if (n < 0)
            break; /* the next call reports it; what was read is returned */
        got += n;
        if (aclprof_mono_ns() >= deadline)
            break;
    }
    return got;
}

/* The two pipe record sizes: current CANN's, and older CANN's that ends before devId. */
#define DESC_SIZE ((uint32_t)sizeof(ProfOpDesc))
#define DESC_SIZE_OLD ((uint32_t)offsetof(ProfOpDesc, devId))
#define ROW_SIZE sizeof(aclprof_op_row)

static int desc_size_ok(uint32_t rec_size)
{
    return rec_size == DESC_SIZE || rec_size == DESC_SIZE_OLD;
}

uint32_t aclprof_decode_ops(aclprof_interner *in, const uint8_t *buf, uint32_t n,
                            uint32_t rec_size, int validate, uint32_t default_device,
                            uint8_t *out, aclprof_decode_counts *counts)
{
    if (!desc_size_ok(rec_size))
        return UINT32_MAX;
    uint32_t good = 0;
    uint64_t missing = 0, keypoints = 0, max_end = counts->max_end;
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *rec = buf + (size_t)i * rec_size;
        if (validate && ld32(rec + offsetof(ProfOpDesc, signature)) != aclprof_signature(rec, rec_size))
            continue;
        uint32_t t, m;
        /* keypoint: name and type are "keypoint_op" / "na" (ids known once interned, so the
         * batch that brings the pair's first occurrence is marked too) */
        int keypoint = aclprof_names_fetch(in, rec, rec_size, &t, &m);
        if (t == UINT32_MAX || m == UINT32_MAX)
            missing++;
        keypoints += (uint64_t)keypoint;
        /* a 72-byte record has no devId; 0 is CANN's "not filled" */
        uint32_t dev = rec_size == DESC_SIZE ? ld32(rec + offsetof(ProfOpDesc, devId)) : 0;
        uint64_t end = ld64(rec + offsetof(ProfOpDesc, end));
        aclprof_op_row row = {
            .rec = {
                .model_id = ld32(rec + offsetof(ProfOpDesc, modelId)),
                .op_name = m == UINT32_MAX ? 0 : m,
                .op_type = t == UINT32_MAX ? 0 : t,
                .flag = ld32(rec + offsetof(ProfOpDesc, flag)),
                .thread_id = ld32(rec + offsetof(ProfOpDesc, threadId)),
                .device_id = dev != 0 ? dev : default_device,
                .start = ld64(rec + offsetof(ProfOpDesc, start)),
                .end = end,
                .duration = ld64(rec + offsetof(ProfOpDesc, duration)),
                .execution_time = ld64(rec + offsetof(ProfOpDesc, executionTime)),
            },
            .keypoint = keypoint != 0,
        };
        memcpy(out + (size_t)good * ROW_SIZE, &row, ROW_SIZE);
        if (end > max_end)
            max_end = end;
        good++;
    }
    counts->corrupt += n - good;
    counts->missing_names += missing;
    counts->keypoints += keypoints;
    counts->max_end = max_end;
    return good;
}

int64_t aclprof_read_ops(aclprof_interner *in, int fd, int wake_fd, uint8_t *buf,
                         uint64_t filled, uint64_t cap, uint32_t rec_size, int64_t coalesce_ns,
                         int validate, uint32_t default_device, uint8_t *out,
                         aclprof_decode_counts *counts, int *flags)
{
    *flags = 0;
    if (!desc_size_ok(rec_size) || filled >= cap)
        return -EINVAL;
    int64_t got = aclprof_read_pipe(fd, wake_fd, buf + filled, cap - filled, coalesce_ns, flags);
    counts->whole = counts->rows = 0;
    counts->left = filled;
    if (got <= 0)
        return got;
    uint64_t total = filled + (uint64_t)got;
    uint32_t whole = (uint32_t)(total / rec_size);
    uint64_t used = (uint64_t)whole * rec_size;
    counts->whole = whole;
    counts->rows = whole ? aclprof_decode_ops(in, buf, whole, rec_size, validate, default_device,
                                           out, counts) : 0;
    if (used && total > used)
        memmove(buf, buf + used, total - used);
    counts->left = total - used;
    return got;
}
