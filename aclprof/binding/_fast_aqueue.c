/* The agent's record queue and the reader loop that fills it (issue 21; see _fast.h).
 *
 * Why: in agent mode the subscription's reader used to take the GIL for every batch (wrap it
 * in numpy, run the agent's callback), ~500 times a second per model. On a busy host a thread
 * holding the GIL can be descheduled with it, and the service's step thread waits. Here the
 * reader stays in C from its first decoded batch to EOF: no Python per batch at all; the
 * sender takes what gathered with one call per wake-up. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime under -std=c11 */
#include "_fast_internal.h"

#include <errno.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#define ROW sizeof(aclprof_op_row)
#define MAX_SLOTS 65535
#define INITIAL_ROWS 8192

typedef struct {
    aclprof_aq_slot_counts c;
    /* the sender's view (aclprof_aq_set_slot / aclprof_aq_set_map) */
    int64_t announced_gen, map_gen;
    uint32_t *map, map_len, device;
    int learn;
    char **names; /* copies of the interner's entries, id = index; each stays until free */
    uint32_t *lens;
    uint64_t cap_names;
} slot_t;

struct aclprof_agent_queue {
    pthread_mutex_t mu;
    uint64_t bound;     /* the most rows held */
    uint64_t cap;       /* rows allocated: grows (doubling) up to bound as rows are held, so an
                         * agent whose daemon keeps up holds a few hundred KiB, not bound rows */
    uint64_t first;     /* where the head row is: seq s lives at (first + s - head) % cap */
    uint8_t *rows;
    uint32_t *slot_of;  /* the slot of each row */
    aclprof_aq_totals t;
    slot_t *slots;
    int nslots, cap_slots;
    int wake_fd, sleeping;
    int wake_to;        /* the fd the armed wake-up goes to: wake_fd, or the pump's own pipe */
    uint64_t wake_at;
    uint64_t barrier;   /* rows from this sequence on wait for a Python control item queued at it
                         * (aclprof_aq_mark): no framing call passes it; UINT64_MAX: none */
    aclprof_bill_tap *tap; /* request bills (_fast_billtap.c): fed each read, NULL: none */
};

aclprof_agent_queue *aclprof_aq_new(uint64_t bound, int wake_fd)
{
    if (bound < 1 || bound > ((uint64_t)1 << 32))
        return NULL;
    aclprof_agent_queue *q = calloc(1, sizeof *q);
    if (!q)
        return NULL;
    q->bound = bound;
    q->cap = bound < INITIAL_ROWS ? bound : INITIAL_ROWS;
    q->rows = malloc(q->cap * ROW);
    q->slot_of = malloc(q->cap * sizeof *q->slot_of);
    if (!q->rows || !q->slot_of || pthread_mutex_init(&q->mu, NULL) != 0) {
        free(q->rows);
        free(q->slot_of);
        free(q);
        return NULL;
    }
    q->wake_fd = q->wake_to = wake_fd;
    q->barrier = UINT64_MAX;
    return q;
}

void aclprof_aq_free(aclprof_agent_queue *q)
{
    if (!q)
        return;
    for (int s = 0; s < q->nslots; s++) {
        for (uint64_t i = 0; i < q->slots[s].c.names; i++)
            free(q->slots[s].names[i]);
        free(q->slots[s].names);
        free(q->slots[s].lens);
        free(q->slots[s].map);
    }
    free(q->slots);
    free(q->rows);
    free(q->slot_of);
    pthread_mutex_destroy(&q->mu);
    free(q);
}

void aclprof_aq_set_wake_fd(aclprof_agent_queue *q, int wake_fd)
{
    pthread_mutex_lock(&q->mu);
    q->wake_fd = q->wake_to = wake_fd; /* -1 at close: no write to a pipe about to close */
    q->sleeping = 0;
    pthread_mutex_unlock(&q->mu);
}

void aclprof_aq_set_tap(aclprof_agent_queue *q, aclprof_bill_tap *t)
{
    pthread_mutex_lock(&q->mu);
    q->tap = t;
    pthread_mutex_unlock(&q->mu);
}

int aclprof_aq_add_slot(aclprof_agent_queue *q)
{
    int id = -1;
    pthread_mutex_lock(&q->mu);
    if (q->nslots < MAX_SLOTS) {
        if (q->nslots == q->cap_slots) {
            int cap = q->cap_slots ? q->cap_slots * 2 : 8;
            slot_t *s = realloc(q->slots, (size_t)cap * sizeof *s);
            if (!s)
                goto out;
            q->slots = s;
            q->cap_slots = cap;
        }
        id = q->nslots++;
        memset(&q->slots[id], 0, sizeof q->slots[id]);
        q->slots[id].announced_gen = q->slots[id].map_gen = -1;
    }
out:
    pthread_mutex_unlock(&q->mu);
    return id;
}

/* Under mu: drop the k oldest rows held (counted). */
static void drop_locked(aclprof_agent_queue *q, uint64_t k)
{
    q->t.head += k;
    q->t.dropped += k;
    q->first = (q->first + k) % q->cap;
}

/* Under mu: room for `need` rows (<= bound), the held ones moved to the start in order.
 * Out of memory: the capacity stays (the caller drops to fit it, counted). */
static void grow_locked(aclprof_agent_queue *q, uint64_t need)
{
    uint64_t cap = q->cap * 2 > need ? q->cap * 2 : need;
    if (cap > q->bound)
        cap = q->bound;
    uint8_t *rows = malloc(cap * ROW);
    uint32_t *slot_of = malloc(cap * sizeof *slot_of);
    if (!rows || !slot_of) {
        free(rows);
        free(slot_of);
        return;
    }
    uint64_t held = q->t.tail - q->t.head;
    for (uint64_t done = 0; done < held;) {
        uint64_t at = (q->first + done) % q->cap;
        uint64_t run = q->cap - at;
        if (run > held - done)
            run = held - done;
        memcpy(rows + done * ROW, q->rows + at * ROW, run * ROW);
        memcpy(slot_of + done, q->slot_of + at, run * sizeof *slot_of);
        done += run;
    }
    free(q->rows);
    free(q->slot_of);
    q->rows = rows;
    q->slot_of = slot_of;
    q->cap = cap;
    q->first = 0;
}

/* Under mu: append n rows of slot, dropping the oldest (counted) past the bound, and wake
 * a sleeping sender once wake_at rows are held. */
static void append_locked(aclprof_agent_queue *q, int slot, const uint8_t *rows, uint64_t n)
{
    if (n > q->bound) { /* more than the whole queue: only the newest bound rows can stay */
        uint64_t skip = n - q->bound;
        q->t.dropped += q->t.tail - q->t.head + skip; /* all held rows, and the skipped */
        q->t.records_in += skip;
        q->t.tail += skip;
        q->t.head = q->t.tail;
        q->first = 0;
        rows += skip * ROW;
        n = q->bound;
    }
    uint64_t held = q->t.tail - q->t.head;
    if (held + n > q->bound) {
        drop_locked(q, held + n - q->bound);
        held = q->bound - n;
    }
    if (held + n > q->cap) {
        grow_locked(q, held + n);
        if (n > q->cap) { /* out of memory with little room: only the newest cap rows */
            uint64_t skip = n - q->cap;
            drop_locked(q, held);
            q->t.records_in += skip;
            q->t.dropped += skip;
            q->t.tail += skip;
            q->t.head = q->t.tail;
            q->first = 0;
            rows += skip * ROW;
            n = q->cap;
            held = 0;
        } else if (held + n > q->cap) {
            drop_locked(q, held + n - q->cap);
            held = q->cap - n;
        }
    }
    for (uint64_t done = 0; done < n;) {
        uint64_t at = (q->first + held + done) % q->cap;
        uint64_t run = q->cap - at;
        if (run > n - done)
            run = n - done;
        memcpy(q->rows + at * ROW, rows + done * ROW, run * ROW);
        for (uint64_t i = 0; i < run; i++)
            q->slot_of[at + i] = (uint32_t)slot;
        done += run;
    }
    q->t.tail += n;
    q->t.records_in += n;
    if (q->sleeping && q->t.tail - q->t.head >= q->wake_at && q->wake_to >= 0) {
        q->sleeping = 0;
        char b = 'q';
        ssize_t w = write(q->wake_to, &b, 1); /* full pipe: a wake-up is pending anyway */
        (void)w;
    }
}

static void copy_names_locked(slot_t *s, const aclprof_interner *in);

int aclprof_aq_push(aclprof_agent_queue *q, int slot, const aclprof_interner *in,
                    const uint8_t *rows, uint32_t n)
{
    pthread_mutex_lock(&q->mu);
    int ok = slot >= 0 && slot < q->nslots;
    if (ok && in)
        copy_names_locked(&q->slots[slot], in);
    if (ok && n)
        append_locked(q, slot, rows, n);
    aclprof_bill_tap *tap = ok ? q->tap : NULL;
    pthread_mutex_unlock(&q->mu);
    aclprof_tap_feed(tap, slot, rows, n, aclprof_mono_ns(), 0, 0);
    return ok ? 0 : -1;
}

/* Under mu: copy the interner's entries the slot has not got yet. Only the reader thread
 * writes the interner, and this runs on it: reading it needs no lock. On out of memory the
 * copy stops short; the sender then names those ids "?" (aclprof_aq_name returns NULL). */
static void copy_names_locked(slot_t *s, const aclprof_interner *in)
{
    uint32_t size = aclprof_interner_size(in);
    while (s->c.names < size) {
        if (s->c.names == s->cap_names) {
            uint64_t cap = s->cap_names ? s->cap_names * 2 : 256;
            char **names = realloc(s->names, cap * sizeof *names);
            if (!names)
                return;
            s->names = names;
            uint32_t *lens = realloc(s->lens, cap * sizeof *lens);
            if (!lens)
                return;
            s->lens = lens;
            s->cap_names = cap;
        }
        size_t len;
        const char *e = aclprof_interner_entry(in, (uint32_t)s->c.names, &len);
        char *copy = malloc(len + 1);
        if (!copy)
            return;
        memcpy(copy, e, len);
        copy[len] = '\0';
        s->names[s->c.names] = copy;
        s->lens[s->c.names] = (uint32_t)len;
        s->c.names++;
    }
}

int64_t aclprof_aq_run(aclprof_agent_queue *q, int slot, aclprof_interner *in, int fd,
                       int wake_fd, uint8_t *buf, uint64_t filled, uint64_t cap,
                       uint32_t rec_size, int64_t coalesce_ns, int validate,
                       uint32_t default_device, int64_t lag_factor, uint8_t *out,
                       aclprof_decode_counts *counts, int *flags)
{
    *flags = 0;
    counts->left = filled;
    pthread_mutex_lock(&q->mu);
    int ok = slot >= 0 && slot < q->nslots;
    pthread_mutex_unlock(&q->mu);
    if (!ok)
        return -EINVAL;
    for (;;) {
        counts->corrupt = counts->missing_names = counts->keypoints = 0;
        uint64_t had = filled; /* a partial record's bytes before this read */
        int64_t got = aclprof_read_ops(in, fd, wake_fd, buf, filled, cap, rec_size, coalesce_ns,
                                       validate, default_device, out, counts, flags);
        if (got < 0)
            return got;
        int64_t arrival = aclprof_mono_ns();
        /* the rows whose bytes came with the read's first read(): a tighter clock note (with a
         * corrupt record left out, row i may not be record i: then none) */
        uint64_t first_rows = counts->corrupt ? 0 : (had + (uint64_t)aclprof_read_first_bytes) / rec_size;
        filled = counts->left;
        if (got > 0) {
            pthread_mutex_lock(&q->mu);
            slot_t *s = &q->slots[slot];
            copy_names_locked(s, in);
            if (counts->rows)
                append_locked(q, slot, out, counts->rows);
            s->c.bytes_read += (uint64_t)got;
            s->c.records_read += counts->whole;
            s->c.delivered += counts->rows;
            s->c.corrupt += counts->corrupt;
            s->c.missing_names += counts->missing_names;
            s->c.keypoints += counts->keypoints;
            s->c.max_end = counts->max_end;
            if (counts->rows)
                s->c.reads++;
            int64_t end = (int64_t)counts->max_end * lag_factor;
            if (counts->rows && end != 0) { /* the reader-lag clock (stats.LagClock) */
                if (s->c.lag_end == 0) {
                    s->c.lag_end = end;
                    s->c.lag_offset = arrival - end;
                } else {
                    if (end > s->c.lag_end)
                        s->c.lag_end = end;
                    if (arrival - end < s->c.lag_offset)
                        s->c.lag_offset = arrival - end;
                }
            }
            aclprof_bill_tap *tap = q->tap;
            pthread_mutex_unlock(&q->mu);
            aclprof_tap_feed(tap, slot, out, counts->rows, arrival, first_rows, aclprof_read_first_ns);
        }
        if (*flags & (ACLPROF_READ_EOF | ACLPROF_READ_WOKEN))
            return 0;
    }
}

uint32_t aclprof_aq_take(aclprof_agent_queue *q, uint32_t max, uint64_t limit, uint8_t *rows,
                         uint32_t *slots, uint64_t *head)
{
    pthread_mutex_lock(&q->mu);
    uint64_t end = q->t.tail < limit ? q->t.tail : limit;
    uint64_t n = end > q->t.head ? end - q->t.head : 0;
    if (n > max)
        n = max;
    for (uint64_t done = 0; done < n;) {
        uint64_t at = (q->first + done) % q->cap;
        uint64_t run = q->cap - at;
        if (run > n - done)
            run = n - done;
        memcpy(rows + done * ROW, q->rows + at * ROW, run * ROW);
        memcpy(slots + done, q->slot_of + at, run * sizeof *slots);
        done += run;
    }
    q->first = n ? (q->first + n) % q->cap : q->first;
    q->t.head += n;
    q->t.taken += n;
    *head = q->t.head;
    pthread_mutex_unlock(&q->mu);
    return (uint32_t)n;
}

void aclprof_aq_totals_get(aclprof_agent_queue *q, aclprof_aq_totals *t)
{
    pthread_mutex_lock(&q->mu);
    *t = q->t;
    pthread_mutex_unlock(&q->mu);
}

int aclprof_aq_slot_counts_get(aclprof_agent_queue *q, int slot, aclprof_aq_slot_counts *c)
{
    pthread_mutex_lock(&q->mu);
    int ok = slot >= 0 && slot < q->nslots;
    if (ok)
        *c = q->slots[slot].c;
    pthread_mutex_unlock(&q->mu);
    return ok ? 0 : -1;
}

const char *aclprof_aq_name(aclprof_agent_queue *q, int slot, uint32_t id, size_t *len)
{
    const char *p = NULL;
    *len = 0;
    pthread_mutex_lock(&q->mu);
    if (slot >= 0 && slot < q->nslots && id < q->slots[slot].c.names) {
        p = q->slots[slot].names[id];
        *len = q->slots[slot].lens[id];
    }
    pthread_mutex_unlock(&q->mu);
    return p;
}

uint32_t aclprof_aq_names(aclprof_agent_queue *q, int slot, uint32_t first, uint32_t max, char *buf,
                          uint64_t cap, uint32_t *lens)
{
    uint32_t n = 0;
    uint64_t used = 0;
    pthread_mutex_lock(&q->mu);
    if (slot >= 0 && slot < q->nslots) {
        const slot_t *s = &q->slots[slot];
        for (uint64_t id = first; n < max && id < s->c.names; id++, n++) {
            uint32_t len = s->lens[id];
            if (len > cap - used)
                break;
            memcpy(buf + used, s->names[id], len);
            used += len;
            lens[n] = len;
        }
    }
    pthread_mutex_unlock(&q->mu);
    return n;
}

uint64_t aclprof_aq_discard(aclprof_agent_queue *q)
{
    pthread_mutex_lock(&q->mu);
    uint64_t n = q->t.tail - q->t.head;
    q->t.dropped += n;
    q->t.head = q->t.tail;
    q->first = 0;
    pthread_mutex_unlock(&q->mu);
    return n;
}

int aclprof_aq_arm(aclprof_agent_queue *q, uint64_t wake_at)
{
    return aclprof_aq_arm_to(q, wake_at, -2);
}

int aclprof_aq_arm_to(aclprof_agent_queue *q, uint64_t wake_at, int fd)
{
    pthread_mutex_lock(&q->mu);
    int sleep = q->t.tail - q->t.head < wake_at;
    if (sleep) {
        q->wake_at = wake_at;
        q->wake_to = fd == -2 ? q->wake_fd : fd;
        q->sleeping = 1;
    }
    pthread_mutex_unlock(&q->mu);
    return sleep;
}

uint64_t aclprof_aq_mark(aclprof_agent_queue *q)
{
    pthread_mutex_lock(&q->mu);
    uint64_t at = q->t.tail;
    if (at < q->barrier)
        q->barrier = at;
    pthread_mutex_unlock(&q->mu);
    return at;
}

void aclprof_aq_set_barrier(aclprof_agent_queue *q, uint64_t at)
{
    pthread_mutex_lock(&q->mu);
    q->barrier = at;
    pthread_mutex_unlock(&q->mu);
}

uint64_t aclprof_aq_ready(aclprof_agent_queue *q, int *behind)
{
    pthread_mutex_lock(&q->mu);
    uint64_t end = q->t.tail < q->barrier ? q->t.tail : q->barrier;
    uint64_t n = end > q->t.head ? end - q->t.head : 0;
    *behind = q->t.tail > (end > q->t.head ? end : q->t.head);
    pthread_mutex_unlock(&q->mu);
    return n;
}

void aclprof_aq_disarm(aclprof_agent_queue *q)
{
    pthread_mutex_lock(&q->mu);
    q->sleeping = 0;
    pthread_mutex_unlock(&q->mu);
}

/* ---- the sender's side: rows -> wire records in the open BATCH frame ---- */
int aclprof_aq_set_slot(aclprof_agent_queue *q, int slot, int64_t announced_gen, uint32_t device,
                        int learn)
{
    pthread_mutex_lock(&q->mu);
    int ok = slot >= 0 && slot < q->nslots;
    if (ok) {
        slot_t *s = &q->slots[slot];
        s->announced_gen = announced_gen;
        s->device = device;
        s->learn = learn;
    }
    pthread_mutex_unlock(&q->mu);
    return ok ? 0 : -1;
}

int aclprof_aq_set_map(aclprof_agent_queue *q, int slot, int64_t gen, const uint32_t *map,
                       uint32_t len)
{
    uint32_t *copy = len ? malloc((size_t)len * sizeof *copy) : NULL;
    if (len && !copy)
        return -1;
    if (len)
        memcpy(copy, map, (size_t)len * sizeof *copy);
    pthread_mutex_lock(&q->mu);
    int ok = slot >= 0 && slot < q->nslots;
    if (ok) {
        slot_t *s = &q->slots[slot];
        free(s->map);
        s->map = copy;
        s->map_len = len;
        s->map_gen = gen;
    }
    pthread_mutex_unlock(&q->mu);
    if (!ok)
        free(copy);
    return ok ? 0 : -1;
}

int aclprof_aq_frame(aclprof_agent_queue *q, int64_t gen, uint64_t limit, uint32_t max,
                     uint32_t max_devices, uint8_t *out, aclprof_aq_frame_result *res)
{
    int code = ACLPROF_AQ_FRAMED;
    uint64_t n = 0;
    pthread_mutex_lock(&q->mu);
    if (q->barrier < limit)
        limit = q->barrier;
    uint64_t end = q->t.tail < limit ? q->t.tail : limit;
    int cur = -1; /* the slot whose checks passed last (runs of one slot are the rule) */
    const slot_t *s = NULL;
    while (q->t.head + n < end && n < max) {
        uint64_t at = (q->first + n) % q->cap;
        const uint8_t *src = q->rows + at * ROW;
        int slot = (int)q->slot_of[at];
        if (slot != cur) {
            s = &q->slots[slot];
            if (s->announced_gen != gen) {
                code = ACLPROF_AQ_NEED_WATCH;
                res->slot = (uint32_t)slot;
                res->value = 0;
                break;
            }
            cur = slot;
        }
        uint32_t name = ld32(src + ACLPROF_ROW_AT(op_name)), type = ld32(src + ACLPROF_ROW_AT(op_type));
        uint32_t hi = name > type ? name : type;
        uint32_t map_len = s->map_gen == gen ? s->map_len : 0;
        if (hi >= map_len) {
            code = ACLPROF_AQ_NEED_NAMES;
            res->slot = (uint32_t)slot;
            res->value = hi;
            break;
        }
        uint32_t dev = ld32(src + ACLPROF_ROW_AT(device_id));
        if (s->learn && dev != 0 && dev < max_devices && dev != s->device) {
            code = ACLPROF_AQ_DEVICE;
            res->slot = (uint32_t)slot;
            res->value = dev;
            break;
        }
        uint8_t *dst = out + n * sizeof(aclprof_record);
        memcpy(dst, src + offsetof(aclprof_op_row, rec), sizeof(aclprof_record));
        uint32_t flag = ld32(src + ACLPROF_ROW_AT(flag));
        if (src[offsetof(aclprof_op_row, keypoint)])
            flag |= (uint32_t)ACLPROF_FLAG_KEYPOINT;
        st32(dst + offsetof(aclprof_record, op_name), s->map[name]);
        st32(dst + offsetof(aclprof_record, op_type), s->map[type]);
        st32(dst + offsetof(aclprof_record, flag), flag);
        n++;
    }
    q->first = (q->first + n) % q->cap;
    q->t.head += n;
    q->t.taken += n;
    res->records = n;
    res->head = q->t.head;
    pthread_mutex_unlock(&q->mu);
    return code;
}
