/* The record queue: aclmdlExecute (model.c) calls mock_subscribe_emit() once per simulated
 * op, without g_mock_lock. If the model is subscribed, emit registers the op's name/type in
 * the side table (opdesc.c), builds the signed record and appends it to one bounded ring
 * (200000 records, the size of CANN's uploader queue; when full the record is dropped and
 * counted, as the real uploader drops). Step keypoints (stepinfo.c) take the same path.
 * The writer thread (subscribe_writer.c) drains the ring. Also the counters of
 * aclmockGetStats.
 */
#include <stdlib.h>
#include <string.h>

#include "subscribe_internal.h"

#define QUEUE_MAX 200000u        /* CANN's uploader queue capacity */
#define QUEUE_MIN_CAP 1024u

q_item *g_q;
size_t g_qcap, g_qhead, g_qcount;
uint64_t g_pending;

/* Counters (aclmockStats), under g_sub_lock. */
uint64_t st_emitted, st_written, st_dropped, st_corrupted, st_bytes, st_calls, st_retries;
uint64_t st_dropped_unsub;
uint64_t st_kp_emitted, st_kp_unrouted;

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

    sub_log_record(r, op, device_id, corrupt);
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
    sub_entry *e = sub_find_route(model_id);
    if (e == NULL) {
        pthread_mutex_unlock(&g_sub_lock);
        return;
    }
    ProfOpDesc r;
    memset(&r, 0, sizeof r);   /* padding and cubeFops/vectorFops stay 0, as in CANN */
    r.modelId = model_id;
    r.flag = op->flag;
    r.threadId = mock_stamp_thread() ? mock_tid() : op->thread_id;
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
    sub_entry *e = sub_find_route(model_id);
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

void sub_queue_reset(void)
{
    free(g_q);
    g_q = NULL;
    g_qcap = g_qhead = g_qcount = 0;
    g_pending = 0;
    st_emitted = st_written = st_dropped = st_corrupted = st_bytes = st_calls = st_retries = 0;
    st_dropped_unsub = 0;
    st_kp_emitted = st_kp_unrouted = 0;
}

void mock_subscribe_stats(aclmockStats *out)
{
    pthread_mutex_lock(&g_sub_lock);
    out->recordsEmitted = st_emitted;
    out->recordsWritten = st_written;
    out->recordsDropped = st_dropped;
    out->recordsDroppedAtUnsubscribe = st_dropped_unsub;
    out->recordsCorrupted = st_corrupted;
    out->bytesWritten = st_bytes;
    out->writeCalls = st_calls;
    out->writeRetries = st_retries;
    out->keypointsEmitted = st_kp_emitted;
    out->keypointsUnrouted = st_kp_unrouted;
    pthread_mutex_unlock(&g_sub_lock);
}
