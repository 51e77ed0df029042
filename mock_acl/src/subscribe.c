/* Operator subscription: aclprofModelSubscribe/UnSubscribe (reference sections 3.1, 3.3),
 * the per-device and host pseudo-device counts with CANN's deferred fd close, and the reset
 * of the whole subscription area.
 *
 * Data flow. aclmdlExecute (model.c) calls mock_subscribe_emit() once per simulated op,
 * without g_mock_lock (subscribe_queue.c); if the model is subscribed the signed record is
 * queued in one bounded ring, and one writer thread (subscribe_writer.c) writes each record
 * to its subscription's fd. Configs are in subscribe_config.c, the emit log in
 * subscribe_log.c; the locks and what the files share are in subscribe_internal.h.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "subscribe_internal.h"

pthread_mutex_t g_sub_lock = PTHREAD_MUTEX_INITIALIZER;
sub_entry *g_entries;
atomic_uint g_live_subs;

/* CANN's devTasks_[dev].count and devTasks_[64].count: each subscription counts once on
 * its model's device and once on the host pseudo-device. Devices whose count reached 0
 * while the host's did not wait in g_close_q (fdCloseInfos_) for the host count to reach
 * 0. All under g_sub_lock. */
static uint32_t g_dev_subs[MOCK_MAX_DEVICES];
static uint32_t g_host_subs;
static uint32_t g_close_q[MOCK_MAX_DEVICES];
static size_t g_close_n;

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

sub_entry *sub_find_route(uint32_t model_id)
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
        mock_threads_device_down(dev);
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
        mock_threads_device_down(MOCK_MAX_DEVICES);
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
    sub_ensure_cv();
    pthread_mutex_lock(&g_sub_lock);
    if (mock_unsub_policy() == ACLMOCK_UNSUB_DROP) {
        /* Audit 3 row 1b: CANN closes the fd in this call without flushing its pipe
         * uploader (prof_acl_mgr.cpp:3434-3449); records still queued then find *fd < 0 and
         * are dropped (parser_transport.cpp:121-130). The writer drops this entry's rest;
         * sub_drain still waits for it to have done so, so the counts are final on return. */
        atomic_store(&e->drop_at_unsub, true);
        atomic_store(&e->abort, true);
    }
    sub_drain(e, UNSUB_STALL_MS);
    unsubscribe_entry(e);
    pthread_cond_broadcast(&g_done_cv);   /* a concurrent reset waits for detached entries */
    pthread_mutex_unlock(&g_sub_lock);
    sub_log_flush();

    /* g_mock_lock orders this against a concurrent subscribe (which may start the writer
     * or need the mode). The writer stops only when no entry exists at all: then nothing
     * can be queued and nobody waits for it. */
    mock_lock();
    pthread_mutex_lock(&g_sub_lock);
    if (atomic_load(&g_live_subs) == 0 && mock_mode() == ACLMOCK_MODE_SUBSCRIBE)
        mock_set_mode(ACLMOCK_MODE_OFF);
    if (g_entries == NULL)
        sub_stop_writer();
    pthread_mutex_unlock(&g_sub_lock);
    mock_unlock();
}

/* ---- public API --------------------------------------------------------------------- */

MOCK_EXPORT aclError aclprofModelSubscribe(uint32_t modelId,
                                           const aclprofSubscribeConfig *cfg)
{
    MOCK_FAULT_RETURN_CODE();
    sub_ensure_cv();
    mock_lock();
    aclError ret = ACL_SUCCESS;
    if (!mock_model_exists(modelId)) {
        ret = ACL_ERROR_INVALID_MODEL_ID;   /* checked before the config, as in CANN */
    } else if (cfg == NULL || !sub_config_live(cfg)) {
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
        uint32_t model_dev = mock_model_device(modelId);
        for (sub_entry *o = g_entries; o; o = o->next) {
            /* a half subscription (R4) runs on its device only: the host kept its config */
            if (o->live && (!o->half || o->device_id == model_dev) &&
                (o->time_info != cfg->timeInfo || o->metrics != (uint32_t)cfg->aicoreMetrics))
                ret = ACL_ERROR_INVALID_PROFILING_CONFIG;
        }
    }
    uint32_t device = mock_model_device(modelId);
    uint32_t dev = device < MOCK_MAX_DEVICES ? device : MOCK_MAX_DEVICES - 1;
    bool half = false;
    if (ret == ACL_ERROR_INVALID_PROFILING_CONFIG && g_dev_subs[dev] == 0 &&
        find_kept(modelId) == NULL) {
        /* Audit 3 row 18b (R4, both eras): ProfStartAclSubscribe (prof_acl_mgr.cpp:3324-3374)
         * first runs StartDeviceSubscribeTask for an idle device, which starts it and
         * inserts the model as subscribed with the caller's int* (L1687-1754); only then
         * does the host's UpdateSubscribeInfo refuse the config, before counting
         * (L1631-1661). So the 100010 leaves a half subscription: the model is subscribed
         * (records go to the caller's fd, a retry gives 148046), its device counts it, the
         * host does not; its unsubscribe returns 0 and takes one from the host count all
         * the same, which can close other devices' deferred fds too early. */
        half = true;
    }
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
        if (!sub_start_writer()) {
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
            mock_threads_device_up(dev);
            mock_threads_device_up(MOCK_MAX_DEVICES);
            pthread_mutex_unlock(&g_sub_lock);
            mock_set_mode(ACLMOCK_MODE_SUBSCRIBE);
            mock_unlock();
            return ACL_SUCCESS;
        }
    }
    sub_entry *e = NULL;
    if (ret == ACL_SUCCESS || half) {
        e = calloc(1, sizeof *e);
        if (e == NULL)
            ret = ACL_ERROR_BAD_ALLOC;
        else if (!sub_start_writer())
            ret = ACL_ERROR_PROFILING_FAILURE;
        else if (half)
            ret = ACL_SUCCESS;   /* the entry is made below; 100010 is returned after it */
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
    e->half = half;
    g_dev_subs[dev]++;
    mock_threads_device_up(dev);
    if (!half) {
        g_host_subs++;
        mock_threads_device_up(MOCK_MAX_DEVICES);
    }
    atomic_init(&e->progress, 0);
    atomic_init(&e->abort, false);
    atomic_init(&e->drop_at_unsub, false);
    e->next = g_entries;
    g_entries = e;
    atomic_fetch_add(&g_live_subs, 1);
    pthread_mutex_unlock(&g_sub_lock);
    mock_set_mode(ACLMOCK_MODE_SUBSCRIBE);
    mock_unlock();
    return half ? ACL_ERROR_INVALID_PROFILING_CONFIG : ACL_SUCCESS;
}

MOCK_EXPORT aclError aclprofModelUnSubscribe(uint32_t modelId)
{
    MOCK_FAULT_RETURN_CODE();
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

/* ---- reset --------------------------------------------------------------------------- */

void mock_subscribe_reset(void)
{
    sub_ensure_cv();
    pthread_mutex_lock(&g_sub_lock);
    /* Unsubscribe everything as aclprofModelUnSubscribe would: no new records, flush the
     * queued ones (bounded by RESET_STALL_MS without progress), close the fds, write -1. */
    for (sub_entry *e = g_entries; e; e = e->next)
        e->live = false;
    atomic_store(&g_live_subs, 0);
    sub_drain(NULL, RESET_STALL_MS);
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
    sub_stop_writer();   /* drops what a stalled reader left, since g_abort_all may be set */
    atomic_store(&g_abort_all, false);
    /* Kept (deferred) entries too: reset ends every subscription, like the last one. */
    while (g_entries != NULL)
        close_entry(g_entries);
    memset(g_dev_subs, 0, sizeof g_dev_subs);
    g_host_subs = 0;
    mock_threads_reset();
    g_close_n = 0;
    sub_queue_reset();
    atomic_store(&g_progress, 0);
    pthread_mutex_unlock(&g_sub_lock);

    sub_configs_reset();

    (void)aclmockSetEmitLog(NULL);
}

