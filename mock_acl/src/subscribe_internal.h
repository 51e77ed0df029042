/* Internal interface of operator subscription, shared by the subscribe files only (the rest
 * of the mock sees it through mock_internal.h):
 *   subscribe.c         aclprofModelSubscribe/UnSubscribe, the per-device and host counts
 *                       and the deferred close of CANN, reset
 *   subscribe_config.c  aclprofCreateSubscribeConfig/DestroySubscribeConfig and their registry
 *   subscribe_queue.c   building, signing and queueing records (ops and step keypoints) in
 *                       the bounded ring, the counters of aclmockGetStats
 *   subscribe_writer.c  the pipe writer thread, draining, aclmockWaitWriterIdle, fork()
 *   subscribe_log.c     the emit log (aclmockSetEmitLog)
 *
 * Locks, in acquisition order: g_mock_lock -> g_sub_lock -> (g_names_lock | g_log_lock).
 *   - g_mock_lock guards the config registry and the mode, as in every public call.
 *   - g_sub_lock guards subscriptions, the ring, the counters and the writer's lifecycle.
 *   - The writer thread never takes g_mock_lock and holds g_sub_lock only to move a batch
 *     of records out of the ring or to publish counters; never while calling write().
 *   - Unsubscribing waits for the writer to drain the model's records WITHOUT g_mock_lock
 *     (mock_subscribe_finish_detach): the reader that must empty the pipe meanwhile may
 *     call into the mock.
 */
#ifndef ACLMOCK_SUBSCRIBE_INTERNAL_H
#define ACLMOCK_SUBSCRIBE_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "mock_internal.h"

#define UNSUB_STALL_MS 5000u     /* unsubscribe gives up after this long without progress */
#define RESET_STALL_MS 1000u     /* aclmockReset likewise */
#define MOCK_WRITER_THREAD "aclmock-writer" /* the writer thread's name (top, perf, /proc/<pid>/task/<tid>/comm) */

/* ---- types -------------------------------------------------------------------------- */

/* The real layout (ProfSubscribeConfig): timeInfo, metrics, and the caller's int*. */
struct aclprofSubscribeConfig {
    int8_t timeInfo;
    aclprofAicoreMetrics aicoreMetrics;
    void *fd;
};

typedef struct sub_entry sub_entry;
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
    bool half;              /* left by a subscribe refused with 100010 (audit 3, R4): on
                               its device, not on the host (its config is not the host's) */
    bool detached;          /* an unsubscribing thread owns it (finish_detach frees it) */
    bool kept;              /* unsubscribed, but its device's close is deferred: the entry
                               and its int* stay until the last subscription ends */
    bool routed;            /* kept, yet its model's records come to it again: the model was
                               re-subscribed while its device had no subscription (CANN's
                               insert keeps the old entry, see aclprofModelSubscribe) */
    uint64_t pending;       /* queued or being written; under g_sub_lock */
    atomic_uint_fast64_t progress;  /* records finished (written or dropped) */
    atomic_bool abort;      /* drop the rest instead of writing (stalled reader) */
    atomic_bool drop_at_unsub; /* unsubscribed under ACLMOCK_UNSUB_DROP: abort set at once */
};

typedef struct q_item {
    ProfOpDesc rec;
    sub_entry *sub;
    uint32_t size;          /* mock_op_desc_size() at emit time: 80 or 72 */
    bool corrupt;
} q_item;

/* ---- subscribe.c ------------------------------------------------------------------- */

extern pthread_mutex_t g_sub_lock;
extern sub_entry *g_entries;       /* live and closing subscriptions */
extern atomic_uint g_live_subs;    /* number of live entries: emit's lock-free fast path */

/* Caller holds g_sub_lock. Where the model's records go: its live entry, or its kept
 * entry when that is routed (CANN's GetSubscribeFdForModel ignores `subscribed`). */
sub_entry *sub_find_route(uint32_t model_id);

/* The two halves of an unsubscription. Split in two so that the slow half (waiting for the
 * writer to drain the model's queued records into a pipe that a reader may be slow to
 * empty) runs WITHOUT g_mock_lock: a reader thread may itself call a function that takes
 * the global lock.
 *
 * Caller holds g_mock_lock. Stops new records for `model_id` (its subscription leaves the
 * live set at once, so a concurrent re-subscribe is possible) and returns the entry to
 * pass to mock_subscribe_finish_detach, or NULL if the model is not subscribed. */
sub_entry *mock_subscribe_detach(uint32_t model_id);
/* Caller does NOT hold g_mock_lock. Waits until the writer has written (or dropped) every
 * record queued for the entry, closes the pipe fd as aclprofModelUnSubscribe does (unless
 * another subscription still uses that fd) and writes -1 into the caller's int, frees the
 * entry; sets the mode to OFF and stops the writer thread if nothing is subscribed any
 * more. */
void mock_subscribe_finish_detach(sub_entry *entry);

/* ---- subscribe_config.c ------------------------------------------------------------ */

/* Caller holds g_mock_lock: was `cfg` returned by aclprofCreateSubscribeConfig and not
 * destroyed? Compares pointers only. */
bool sub_config_live(const aclprofSubscribeConfig *cfg);
void sub_configs_reset(void);      /* takes g_mock_lock: frees every config */

/* ---- subscribe_queue.c: the ring and the counters, under g_sub_lock ----------------- */

extern q_item *g_q;
extern size_t g_qcap, g_qhead, g_qcount;
extern uint64_t g_pending;         /* queued + in the writer's current batch */
/* Counters (aclmockStats), under g_sub_lock. */
extern uint64_t st_dropped_unsub;   /* of st_dropped: by an unsubscribe under UNSUB_DROP */
extern uint64_t st_emitted, st_written, st_dropped, st_corrupted, st_bytes, st_calls,
    st_retries;
extern uint64_t st_kp_emitted, st_kp_unrouted;   /* step keypoint records */
/* Caller holds g_sub_lock: frees the ring, zeroes the counters. */
void sub_queue_reset(void);

/* ---- subscribe_writer.c ------------------------------------------------------------ */

extern pthread_cond_t g_work_cv;   /* writer: records queued or stop requested */
extern pthread_cond_t g_done_cv;   /* waiters: records finished */
extern bool g_writer_running;
extern bool g_writer_waiting;      /* writer sleeps on g_work_cv: emit must signal */
extern atomic_bool g_abort_all;    /* reset gave up on a stalled reader: drop everything */
extern atomic_uint g_fd_epoch;     /* bumped at every close: invalidates the poll budget */
extern atomic_uint_fast64_t g_progress;   /* records finished, all subscriptions */

/* Initialises the condition variables and the fork handlers once; call before using them. */
void sub_ensure_cv(void);
/* Caller holds g_sub_lock (released while waiting for a stopping writer to exit). */
bool sub_start_writer(void);
/* Caller holds g_sub_lock (released while joining). Called only when no subscription
 * remains (nothing can be queued) or at reset after draining. */
void sub_stop_writer(void);
/* Caller holds g_sub_lock. Waits until the entry (or, with e == NULL, everything) has no
 * queued records; after `stall_ms` without progress the rest is dropped. */
void sub_drain(sub_entry *e, uint32_t stall_ms);

/* ---- subscribe_log.c --------------------------------------------------------------- */

/* Guards the log file. The fork handlers (subscribe_writer.c) hold it across fork(). */
extern pthread_mutex_t g_log_lock;
/* Caller holds g_sub_lock (so lines come out in queue order). */
void sub_log_record(const ProfOpDesc *r, const mock_op *op, uint32_t device_id, bool corrupt);
/* Makes every line logged so far visible in the file. */
void sub_log_flush(void);

#endif
