/* CANN's thread shape, switched on by ACLMOCK_THREADS=cann (issue 22; fidelity audit 3
 * section 1.3, the census of Thread::Start in hicann/runtime 681ef7610):
 *   - each subscribed device starts two uploader threads (MSVP_Upld_<dev> and
 *     MSVP_Upld_Pipe), and so does the host pseudo-device 64 with the first subscription of
 *     the process; they are deleted when the device's (the host's) count reaches 0
 *     (prof_acl_mgr.cpp:3458-3461);
 *   - every aclprofStart starts a DeviceResponseHandler that waits up to 30 s for the
 *     device's answer (prof_acl_mgr.cpp:478-485). The mock has no device to answer: the
 *     thread waits ACLMOCK_RESPONSE_WAIT_MS (default 30000) or until Finalize / reset.
 * Shape and timing only: the records are still written by the one writer thread of
 * subscribe_writer.c. The threads block every signal and take no lock but g_thr_lock, so
 * they can be joined with g_sub_lock held. Default (ACLMOCK_THREADS=one): none of them.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "mock_internal.h"

#define HOST_SLOT MOCK_MAX_DEVICES   /* CANN's host pseudo-device 64 */

typedef struct uploader_pair {
    pthread_t t[2];
    bool running;
    bool stop;
} uploader_pair;

static pthread_mutex_t g_thr_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_thr_cv;
static pthread_once_t g_thr_once = PTHREAD_ONCE_INIT;
static uploader_pair g_upl[MOCK_MAX_DEVICES + 1];
static unsigned g_resp_gen;    /* Finalize and reset end the waiting response threads */
static unsigned g_resp_live;

/* The response threads are joinable, so that Finalize returns once their code has ended (a
 * detached thread could still be running after it signalled its end; a joined one can still
 * be listed in /proc/self/task for a moment, until the kernel reaps it). One that timed out
 * by itself is joined by the next Start (or by Finalize / reset). */
typedef struct resp_thread {
    pthread_t t;
    unsigned gen;
    bool done;
    struct resp_thread *next;
} resp_thread;
static resp_thread *g_resp;    /* guarded by g_thr_lock */

/* Joins and frees a list taken off g_resp (without g_thr_lock: the threads take it). */
static void resp_join(resp_thread *r)
{
    while (r != NULL) {
        resp_thread *next = r->next;
        pthread_join(r->t, NULL);
        free(r);
        r = next;
    }
}

static void cv_init(void)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&g_thr_cv, &a);
    pthread_condattr_destroy(&a);
}

__attribute__((constructor)) static void thr_ctor(void)
{
    pthread_once(&g_thr_once, cv_init);
}

static void *uploader_main(void *arg)
{
    uploader_pair *p = arg;
    pthread_mutex_lock(&g_thr_lock);
    while (!p->stop)
        pthread_cond_wait(&g_thr_cv, &g_thr_lock);
    pthread_mutex_unlock(&g_thr_lock);
    return NULL;
}

static void *response_main(void *arg)
{
    resp_thread *self = arg;
    unsigned gen = self->gen;
    uint64_t wait_ns = (uint64_t)mock_response_wait_ms() * 1000000u;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    uint64_t t = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec + wait_ns;
    struct timespec until = { .tv_sec = (time_t)(t / 1000000000u), .tv_nsec = (long)(t % 1000000000u) };
    pthread_mutex_lock(&g_thr_lock);
    while (g_resp_gen == gen) {
        if (pthread_cond_timedwait(&g_thr_cv, &g_thr_lock, &until) == ETIMEDOUT)
            break;
    }
    g_resp_live--;
    self->done = true;
    pthread_cond_broadcast(&g_thr_cv);
    pthread_mutex_unlock(&g_thr_lock);
    return NULL;
}

/* Created with every signal blocked (the thread inherits the mask). */
static bool spawn(pthread_t *t, void *(*fn)(void *), void *arg, const char *name)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(t, NULL, fn, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0)
        return false;
    pthread_setname_np(*t, name);
    return true;
}

static uploader_pair *slot(uint32_t dev)
{
    return &g_upl[dev < HOST_SLOT ? dev : HOST_SLOT];
}

void mock_threads_device_up(uint32_t dev)
{
    if (!mock_threads_cann())
        return;
    uploader_pair *p = slot(dev);
    pthread_mutex_lock(&g_thr_lock);
    bool start = !p->running;
    p->running = true;
    p->stop = false;
    pthread_mutex_unlock(&g_thr_lock);
    if (!start)
        return;
    char name[16];
    snprintf(name, sizeof name, "MSVP_Upld_%u", dev < HOST_SLOT ? dev : 64u);
    /* A thread that cannot be created is only a shape that differs: the mock works alike. */
    if (!spawn(&p->t[0], uploader_main, p, name))
        p->t[0] = 0;
    if (!spawn(&p->t[1], uploader_main, p, "MSVP_Upld_Pipe"))
        p->t[1] = 0;
}

void mock_threads_device_down(uint32_t dev)
{
    uploader_pair *p = slot(dev);
    pthread_mutex_lock(&g_thr_lock);
    if (!p->running) {
        pthread_mutex_unlock(&g_thr_lock);
        return;
    }
    p->stop = true;
    p->running = false;
    pthread_cond_broadcast(&g_thr_cv);
    pthread_t t0 = p->t[0], t1 = p->t[1];
    pthread_mutex_unlock(&g_thr_lock);
    if (t0)
        pthread_join(t0, NULL);
    if (t1)
        pthread_join(t1, NULL);
}

void mock_threads_response_start(void)
{
    if (!mock_threads_cann())
        return;
    resp_thread *r = calloc(1, sizeof *r), *ended = NULL;
    pthread_mutex_lock(&g_thr_lock);
    for (resp_thread **pp = &g_resp; *pp != NULL;) {   /* the ones that timed out by themselves */
        resp_thread *q = *pp;
        if (q->done) {
            *pp = q->next;
            q->next = ended;
            ended = q;
        } else {
            pp = &q->next;
        }
    }
    if (r != NULL) {
        r->gen = g_resp_gen;
        g_resp_live++;
    }
    pthread_mutex_unlock(&g_thr_lock);
    resp_join(ended);
    if (r == NULL)
        return;
    /* Listed before it runs (under the lock), so that Finalize joins it. */
    pthread_mutex_lock(&g_thr_lock);
    if (spawn(&r->t, response_main, r, "DevRespHandler")) {
        r->next = g_resp;
        g_resp = r;
        r = NULL;
    } else {
        g_resp_live--;
    }
    pthread_mutex_unlock(&g_thr_lock);
    free(r);
}

/* Finalize and reset: the waiting response threads end (and are gone on return). */
void mock_threads_response_end(void)
{
    pthread_mutex_lock(&g_thr_lock);
    g_resp_gen++;
    pthread_cond_broadcast(&g_thr_cv);
    while (g_resp_live > 0)
        pthread_cond_wait(&g_thr_cv, &g_thr_lock);
    resp_thread *all = g_resp;
    g_resp = NULL;
    pthread_mutex_unlock(&g_thr_lock);
    resp_join(all);
}

void mock_threads_reset(void)
{
    for (uint32_t d = 0; d <= HOST_SLOT; d++)
        mock_threads_device_down(d);
    mock_threads_response_end();
}

void mock_threads_fork_prepare(void)
{
    pthread_mutex_lock(&g_thr_lock);
}

void mock_threads_fork_parent(void)
{
    pthread_mutex_unlock(&g_thr_lock);
}

/* The child has none of the parent's threads. */
void mock_threads_fork_child(void)
{
    for (uint32_t d = 0; d <= HOST_SLOT; d++)
        g_upl[d] = (uploader_pair){ 0 };
    g_resp_live = 0;
    g_resp_gen++;
    g_resp = NULL;   /* the parent's threads: not joinable here (their nodes are left) */
    pthread_mutex_init(&g_thr_lock, NULL);
    cv_init();
}
