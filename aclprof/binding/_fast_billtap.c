/* The agent's request-bill tap (issue 25; see _fast.h "request bills").
 *
 * Why: in agent mode op rows go from the subscription's reader (C, no GIL) to the C queue and
 * out as wire records without ever reaching Python, so request attribution had nothing to
 * read. The reader hands each decoded read to this tap as well: the five columns attribution
 * needs (thread, model, device start/end, type and name id, slot) and one clock note
 * (host arrival, newest end) per read. The agent's sender takes them all in one call per
 * wake-up and attributes them vectorised (aclprof.agent.bills.BillBook.feed_columns).
 *
 * Off until a request is marked in the process (aclprof_requests_note_marked): before that a
 * feed is one relaxed atomic load, and no memory is allocated. Bounded: past max_ops held
 * ops (max_notes notes) the newest are dropped and counted. */
#include "_fast_internal.h"

#include <pthread.h>

static int requests_marked; /* set once, never cleared: read relaxed by every feed */

void aclprof_requests_note_marked(void)
{
    __atomic_store_n(&requests_marked, 1, __ATOMIC_RELAXED);
}

int aclprof_requests_marked(void)
{
    return __atomic_load_n(&requests_marked, __ATOMIC_RELAXED);
}

struct aclprof_bill_tap {
    pthread_mutex_t mu;
    uint32_t max_ops, max_notes;
    aclprof_tap_op *ops; /* allocated at the first feed after a request was marked */
    aclprof_tap_note *notes;
    uint32_t n_ops, n_notes;
    aclprof_tap_counts c;
};

aclprof_bill_tap *aclprof_tap_new(uint32_t max_ops, uint32_t max_notes)
{
    if (max_ops < 1 || max_notes < 1)
        return NULL;
    aclprof_bill_tap *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    if (pthread_mutex_init(&t->mu, NULL) != 0) {
        free(t);
        return NULL;
    }
    t->max_ops = max_ops;
    t->max_notes = max_notes;
    return t;
}

void aclprof_tap_free(aclprof_bill_tap *t)
{
    if (!t)
        return;
    free(t->ops);
    free(t->notes);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

/* Under mu: the buffers, allocated once. 0 when out of memory (the feed counts its ops). */
static int ready_locked(aclprof_bill_tap *t)
{
    if (!t->ops)
        t->ops = malloc((size_t)t->max_ops * sizeof *t->ops);
    if (!t->notes)
        t->notes = malloc((size_t)t->max_notes * sizeof *t->notes);
    return t->ops && t->notes;
}

void aclprof_tap_feed(aclprof_bill_tap *t, int slot, const uint8_t *rows, uint64_t n, int64_t arrival,
                      uint64_t note_rows, int64_t note_at)
{
    if (!t || !n || !aclprof_requests_marked())
        return;
    pthread_mutex_lock(&t->mu);
    if (!ready_locked(t)) {
        t->c.dropped += n; /* keypoints included: without memory they cannot be told apart */
        t->c.notes_dropped++;
        pthread_mutex_unlock(&t->mu);
        return;
    }
    if (note_rows == 0 || note_rows > n) {
        note_rows = n;
        note_at = arrival;
    }
    uint64_t newest = 0, kept = 0;
    for (uint64_t i = 0; i < n; i++) {
        const uint8_t *r = rows + i * sizeof(aclprof_op_row);
        uint64_t end = ld64(r + ACLPROF_ROW_AT(end));
        if (i < note_rows && end > newest)
            newest = end;
        if (r[offsetof(aclprof_op_row, keypoint)])
            continue; /* a step marker, not an op: it bills nothing (it still dates the read) */
        t->c.ops_in++;
        if (t->n_ops == t->max_ops) {
            t->c.dropped++;
            continue;
        }
        aclprof_tap_op *o = &t->ops[t->n_ops++];
        o->start = ld64(r + ACLPROF_ROW_AT(start));
        o->end = end;
        o->thread_id = ld32(r + ACLPROF_ROW_AT(thread_id));
        o->model_id = ld32(r + ACLPROF_ROW_AT(model_id));
        o->op_type = ld32(r + ACLPROF_ROW_AT(op_type));
        o->op_name = ld32(r + ACLPROF_ROW_AT(op_name));
        o->slot = (uint32_t)slot;
        o->reserved = 0;
        kept++;
    }
    if (newest) {
        if (t->n_notes == t->max_notes) {
            t->c.notes_dropped++;
        } else {
            aclprof_tap_note *nt = &t->notes[t->n_notes++];
            nt->arrival = note_at;
            nt->newest_end = newest;
            nt->ops = kept;
        }
    }
    pthread_mutex_unlock(&t->mu);
}

uint32_t aclprof_tap_take(aclprof_bill_tap *t, aclprof_tap_op *ops, uint32_t max_ops,
                          aclprof_tap_note *notes, uint32_t max_notes, uint32_t *n_notes)
{
    pthread_mutex_lock(&t->mu);
    uint32_t n = t->n_ops < max_ops ? t->n_ops : max_ops;
    uint32_t k = t->n_notes < max_notes ? t->n_notes : max_notes;
    if (n) {
        memcpy(ops, t->ops, (size_t)n * sizeof *ops);
        memmove(t->ops, t->ops + n, (size_t)(t->n_ops - n) * sizeof *ops);
        t->n_ops -= n;
    }
    if (k) {
        memcpy(notes, t->notes, (size_t)k * sizeof *notes);
        memmove(t->notes, t->notes + k, (size_t)(t->n_notes - k) * sizeof *notes);
        t->n_notes -= k;
    }
    t->c.taken += n;
    *n_notes = k;
    pthread_mutex_unlock(&t->mu);
    return n;
}

void aclprof_tap_counts_get(aclprof_bill_tap *t, aclprof_tap_counts *c)
{
    pthread_mutex_lock(&t->mu);
    *c = t->c;
    c->held = t->n_ops;
    c->notes_held = t->n_notes;
    pthread_mutex_unlock(&t->mu);
}
