/* Hot-path helpers for aclprof; see _fast.h. Kept free of any vendor header: the
 * prototypes of the few functions called are spelled out here and must match cdefs/. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ACLPROF_FAST_UNBOUND -1000

/* ------------------------------------------------------------------------------------
 * msproftx stamp cache (see _fast.h). Why in C: a marker must cost about one library
 * call, and in Python the checkout, the bookkeeping and the per-thread stack cost more
 * than the library call itself.
 *
 * A stamp is checked out while it is pushed or its range is open: the library stores the
 * start time in the stamp and a range id is the stamp's pool slot, so two open uses of one
 * stamp would corrupt each other. The library's pool holds 100 stamps; when it is full,
 * idle stamps of other messages are destroyed to make room.
 * ------------------------------------------------------------------------------------ */
#include <pthread.h>

#define ACLPROF_TX_ONE_OFF UINT32_MAX
#define ACLPROF_TX_POOL_EXHAUSTED -1001
#define ACLPROF_TX_CREATE_FAILED -1002
#define ACLPROF_TX_TOO_DEEP -1003
#define ACLPROF_TX_NO_MEMORY -1004
#define ACLPROF_TX_EMPTY -1005
#define ACLPROF_TX_STALE -1006
#define ACLPROF_TX_UNKNOWN_ID -1007
#define ACLPROF_TX_RANGE_BIAS 1099511627776LL
#define TX_POOL_SIZE 100      /* CURRENT_STAMP_SIZE in CANN */
#define TX_STACK_DEPTH 128    /* > the pool: a deeper push cannot get a stamp anyway */

typedef void *(*create_fn)(void);
typedef void (*destroy_fn)(void *);
typedef int (*set_message_fn)(void *, const char *, uint32_t);
typedef int (*stamp_fn)(void *);
typedef int (*void_fn)(void);
typedef int (*range_start_fn)(void *, uint32_t *);
typedef int (*range_stop_fn)(uint32_t);

static create_fn p_create;
static destroy_fn p_destroy;
static set_message_fn p_set_message;
static stamp_fn p_push, p_mark;
static void_fn p_pop;
static range_start_fn p_range_start;
static range_stop_fn p_range_stop;

typedef struct {
    char *text;
    uint32_t len;
    uint32_t nidle, cap;
    void **idle;
} tx_message;

typedef struct {
    void *stamp;
    uint32_t id;
    uint32_t gen;
} tx_entry;

typedef struct {
    uint32_t range_id;
    tx_entry use;
} tx_range;

static pthread_mutex_t tx_lock = PTHREAD_MUTEX_INITIALIZER;
static tx_message *tx_messages;            /* indexed by message id; guarded by tx_lock */
static uint32_t tx_nmessages, tx_capmessages;
static void *tx_live[TX_POOL_SIZE * 4];    /* every stamp we created and not destroyed */
static uint32_t tx_nlive;
static tx_range tx_ranges[TX_POOL_SIZE * 4];
static uint32_t tx_nranges;
static uint32_t tx_gen;                    /* read without the lock with __atomic */

/* This thread's open push()es and annotations. They are ranges in the library
 * (RangeStart/RangeStop, which pair by id) because the library's own Push/Pop stack is ONE
 * stack for the whole process (audit #3): with two threads, aclprofPop would close
 * whichever push is on top, so the pairing (and the durations) would be wrong. */
typedef struct {
    tx_entry use;
    uint32_t range_id;
} tx_open;

static _Thread_local tx_open t_stack[TX_STACK_DEPTH];
static _Thread_local uint32_t t_depth;
/* The pre-#3 path over aclprofPush/Pop, kept only for the benchmark's comparison. */
static _Thread_local tx_entry t_stamp_stack[TX_STACK_DEPTH];
static _Thread_local uint32_t t_stamp_depth;

int aclprof_fast_bind_tx(uintptr_t create, uintptr_t destroy, uintptr_t set_message,
                         uintptr_t push, uintptr_t pop, uintptr_t mark,
                         uintptr_t range_start, uintptr_t range_stop)
{
    p_create = (create_fn)create;
    p_destroy = (destroy_fn)destroy;
    p_set_message = (set_message_fn)set_message;
    p_push = (stamp_fn)push;
    p_pop = (void_fn)pop;
    p_mark = (stamp_fn)mark;
    p_range_start = (range_start_fn)range_start;
    p_range_stop = (range_stop_fn)range_stop;
    return 0;
}

static uint32_t current_gen(void)
{
    return __atomic_load_n(&tx_gen, __ATOMIC_ACQUIRE);
}

int64_t aclprof_tx_register(const char *text, uint32_t len)
{
    char *copy = malloc((size_t)len + 1);
    if (!copy)
        return ACLPROF_TX_NO_MEMORY;
    memcpy(copy, text, len);
    copy[len] = '\0';
    pthread_mutex_lock(&tx_lock);
    if (tx_nmessages == tx_capmessages) {
        uint32_t cap = tx_capmessages ? tx_capmessages * 2 : 64;
        tx_message *grown = realloc(tx_messages, cap * sizeof *grown);
        if (!grown) {
            pthread_mutex_unlock(&tx_lock);
            free(copy);
            return ACLPROF_TX_NO_MEMORY;
        }
        tx_messages = grown;
        tx_capmessages = cap;
    }
    uint32_t id = tx_nmessages++;
    tx_messages[id] = (tx_message){copy, len, 0, 0, NULL};
    pthread_mutex_unlock(&tx_lock);
    return id;
}

static void forget_live(void *stamp)  /* tx_lock held */
{
    for (uint32_t i = 0; i < tx_nlive; i++) {
        if (tx_live[i] == stamp) {
            tx_live[i] = tx_live[--tx_nlive];
            return;
        }
    }
}

static int evict_one(void)  /* tx_lock held; destroys one idle stamp of any message */
{
    for (uint32_t id = 0; id < tx_nmessages; id++) {
        tx_message *m = &tx_messages[id];
        if (m->nidle) {
            void *stamp = m->idle[--m->nidle];
            forget_live(stamp);
            p_destroy(stamp);
            return 1;
        }
    }
    return 0;
}

/* Check a stamp out for message `id` (or a one-off stamp for `text`). */
static int acquire(uint32_t id, const char *text, uint32_t len, tx_entry *out)
{
    if (!p_create || !p_set_message || !p_destroy)
        return ACLPROF_FAST_UNBOUND;
    pthread_mutex_lock(&tx_lock);
    out->id = id;
    out->gen = tx_gen;
    if (id != ACLPROF_TX_ONE_OFF) {
        if (id >= tx_nmessages) {
            pthread_mutex_unlock(&tx_lock);
            return ACLPROF_TX_UNKNOWN_ID;
        }
        tx_message *m = &tx_messages[id];
        if (m->nidle) {
            out->stamp = m->idle[--m->nidle];
            pthread_mutex_unlock(&tx_lock);
            return 0;
        }
        text = m->text;
        len = m->len;
    }
    int rc = 0;
    if (tx_nlive == sizeof tx_live / sizeof tx_live[0]) {
        rc = ACLPROF_TX_POOL_EXHAUSTED;
        goto out;
    }
    void *stamp = p_create();
    while (!stamp && evict_one())
        stamp = p_create();
    if (!stamp) {
        rc = tx_nlive >= TX_POOL_SIZE ? ACLPROF_TX_POOL_EXHAUSTED : ACLPROF_TX_CREATE_FAILED;
        goto out;
    }
    rc = p_set_message(stamp, text, len);
    if (rc != 0) {
        p_destroy(stamp);
        goto out;
    }
    tx_live[tx_nlive++] = stamp;
    out->stamp = stamp;
out:
    pthread_mutex_unlock(&tx_lock);
    return rc;
}

/* Return a stamp after use: idle again, or destroyed if one-off or from an ended session. */
static void release(const tx_entry *use)
{
    pthread_mutex_lock(&tx_lock);
    if (use->gen != tx_gen) {
        /* reset() already destroyed it */
    } else if (use->id == ACLPROF_TX_ONE_OFF) {
        forget_live(use->stamp);
        p_destroy(use->stamp);
    } else {
        tx_message *m = &tx_messages[use->id];
        if (m->nidle == m->cap) {
            uint32_t cap = m->cap ? m->cap * 2 : 4;
            void **grown = realloc(m->idle, cap * sizeof *grown);
            if (!grown) {  /* cannot cache it: give it back to the library */
                forget_live(use->stamp);
                p_destroy(use->stamp);
                pthread_mutex_unlock(&tx_lock);
                return;
            }
            m->idle = grown;
            m->cap = cap;
        }
        m->idle[m->nidle++] = use->stamp;
    }
    pthread_mutex_unlock(&tx_lock);
}

int aclprof_tx_push(uint32_t id, const char *text, uint32_t len)
{
    /* Entries of ended sessions left on top (a session stopped inside an annotation whose
     * exit then saw no session) are dropped here, so they cannot pile up. */
    uint32_t gen = current_gen();
    while (t_depth && t_stack[t_depth - 1].use.gen != gen)
        t_depth--;
    if (t_depth == TX_STACK_DEPTH)
        return ACLPROF_TX_TOO_DEEP;
    if (!p_range_start)
        return ACLPROF_FAST_UNBOUND;
    tx_open open;
    int rc = acquire(id, text, len, &open.use);
    if (rc != 0)
        return rc;
    rc = p_range_start(open.use.stamp, &open.range_id);
    if (rc != 0) {
        release(&open.use);
        return rc;
    }
    t_stack[t_depth++] = open;
    return 0;
}

int aclprof_tx_pop(void)
{
    if (t_depth == 0)
        return ACLPROF_TX_EMPTY;
    tx_open open = t_stack[--t_depth];
    if (open.use.gen != current_gen())
        return ACLPROF_TX_STALE;
    if (!p_range_stop)
        return ACLPROF_FAST_UNBOUND;
    /* Stopped exactly once: the library would accept (and report) a second stop of the
     * id, and the stamp goes back to the cache right after. */
    int rc = p_range_stop(open.range_id);
    release(&open.use);
    return rc;
}

int aclprof_tx_push_stamp(uint32_t id, const char *text, uint32_t len)
{
    uint32_t gen = current_gen();
    while (t_stamp_depth && t_stamp_stack[t_stamp_depth - 1].gen != gen)
        t_stamp_depth--;
    if (t_stamp_depth == TX_STACK_DEPTH)
        return ACLPROF_TX_TOO_DEEP;
    if (!p_push)
        return ACLPROF_FAST_UNBOUND;
    tx_entry use;
    int rc = acquire(id, text, len, &use);
    if (rc != 0)
        return rc;
    rc = p_push(use.stamp);
    if (rc != 0) {
        release(&use);
        return rc;
    }
    t_stamp_stack[t_stamp_depth++] = use;
    return 0;
}

int aclprof_tx_pop_stamp(void)
{
    if (t_stamp_depth == 0)
        return ACLPROF_TX_EMPTY;
    tx_entry use = t_stamp_stack[--t_stamp_depth];
    if (use.gen != current_gen())
        return ACLPROF_TX_STALE;
    if (!p_pop)
        return ACLPROF_FAST_UNBOUND;
    int rc = p_pop();
    release(&use);
    return rc;
}

int aclprof_tx_mark(uint32_t id, const char *text, uint32_t len)
{
    if (!p_mark)
        return ACLPROF_FAST_UNBOUND;
    tx_entry use;
    int rc = acquire(id, text, len, &use);
    if (rc != 0)
        return rc;
    rc = p_mark(use.stamp);
    release(&use);
    return rc;
}

int64_t aclprof_tx_range_start(uint32_t id, const char *text, uint32_t len)
{
    if (!p_range_start)
        return (int64_t)ACLPROF_FAST_UNBOUND - ACLPROF_TX_RANGE_BIAS;
    tx_entry use;
    int rc = acquire(id, text, len, &use);
    if (rc != 0)
        return (int64_t)rc - ACLPROF_TX_RANGE_BIAS;
    uint32_t range_id = 0;
    rc = p_range_start(use.stamp, &range_id);
    if (rc != 0) {
        release(&use);
        return (int64_t)rc - ACLPROF_TX_RANGE_BIAS;
    }
    pthread_mutex_lock(&tx_lock);
    /* tx_ranges cannot overflow: each open range holds one of at most
     * sizeof tx_live / sizeof tx_live[0] live stamps. */
    tx_ranges[tx_nranges++] = (tx_range){range_id, use};
    pthread_mutex_unlock(&tx_lock);
    return (int64_t)(use.gen & 0x7FFFFFFFu) << 32 | range_id;
}

int aclprof_tx_range_end(int64_t handle)
{
    if (handle < 0)
        return ACLPROF_TX_EMPTY;
    uint32_t range_id = (uint32_t)handle, gen = (uint32_t)(handle >> 32);
    tx_entry use = {0};
    int found = 0;
    pthread_mutex_lock(&tx_lock);
    for (uint32_t i = 0; i < tx_nranges; i++) {
        if (tx_ranges[i].range_id == range_id && (tx_ranges[i].use.gen & 0x7FFFFFFFu) == gen) {
            use = tx_ranges[i].use;
            tx_ranges[i] = tx_ranges[--tx_nranges];
            found = 1;
            break;
        }
    }
    int stale = !found && gen != (tx_gen & 0x7FFFFFFFu);
    pthread_mutex_unlock(&tx_lock);
    if (!found)
        return stale ? ACLPROF_TX_STALE : ACLPROF_TX_EMPTY;
    if (!p_range_stop)
        return ACLPROF_FAST_UNBOUND;
    int rc = p_range_stop(range_id);
    release(&use);
    return rc;
}

void aclprof_tx_reset(void)
{
    pthread_mutex_lock(&tx_lock);
    for (uint32_t i = 0; i < tx_nlive && p_destroy; i++)
        p_destroy(tx_live[i]);
    tx_nlive = 0;
    for (uint32_t id = 0; id < tx_nmessages; id++)
        tx_messages[id].nidle = 0;
    tx_nranges = 0;
    __atomic_store_n(&tx_gen, tx_gen + 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&tx_lock);
}

void aclprof_tx_clear_thread(void)
{
    t_depth = 0;
    t_stamp_depth = 0;
}

uint32_t aclprof_tx_live_stamps(void)
{
    pthread_mutex_lock(&tx_lock);
    uint32_t n = tx_nlive;
    pthread_mutex_unlock(&tx_lock);
    return n;
}

uint32_t aclprof_tx_depth(void)
{
    return t_depth;
}

/* ------------------------------------------------------------------------------------
 * Op record decoding. The library keeps op names and types in a side table that only its
 * getters can read (and each read frees the entry), so every record needs four calls
 * (TypeLen, Type, NameLen, Name). Doing them here instead of in Python is what makes the
 * reader fast; calling them on one-record slices keeps each call O(1), because the
 * library re-checks the signature of every record in the buffer it is given.
 * ------------------------------------------------------------------------------------ */
#define ACLPROF_REC_OK 0
#define ACLPROF_REC_CORRUPT 1
#define ACLPROF_REC_NO_TYPE 2
#define ACLPROF_REC_NO_NAME 4

typedef int (*len_fn)(const void *, size_t, uint32_t, size_t *);
typedef int (*str_fn)(const void *, size_t, uint32_t, char *, size_t);
static len_fn p_type_len, p_name_len;
static str_fn p_type, p_name;
static void crc_init(void);

int aclprof_fast_bind_ops(uintptr_t type_len, uintptr_t type, uintptr_t name_len, uintptr_t name)
{
    p_type_len = (len_fn)type_len;
    p_type = (str_fn)type;
    p_name_len = (len_fn)name_len;
    p_name = (str_fn)name;
    crc_init(); /* here, once, under the loader's lock: no lazy-init race later */
    return 0;
}

/* --- CRC-32C: SSE4.2 instruction when the CPU has it, a table otherwise. --- */
static uint32_t crc_table[256];
static int crc_hw = -1; /* -1 unknown, 0 table, 1 hardware */

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[i] = c;
    }
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    crc_hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
#else
    crc_hw = 0;
#endif
}

static uint32_t crc_sw(uint32_t s, const uint8_t *p, size_t n)
{
    while (n--)
        s = crc_table[(s ^ *p++) & 0xFF] ^ (s >> 8);
    return s;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("sse4.2"))) static uint32_t crc_sse(uint32_t s, const uint8_t *p, size_t n)
{
    uint64_t s64 = s;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        s64 = __builtin_ia32_crc32di(s64, v);
        p += 8;
        n -= 8;
    }
    s = (uint32_t)s64;
    while (n--)
        s = __builtin_ia32_crc32qi(s, *p++);
    return s;
}
#endif

uint32_t aclprof_signature(const uint8_t *rec, uint32_t rec_size)
{
    if (crc_hw < 0)
        crc_init();
    if (rec_size <= 4)
        return 0xFFFFFFFFu;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (crc_hw == 1)
        return crc_sse(0xFFFFFFFFu, rec + 4, rec_size - 4);
#endif
    return crc_sw(0xFFFFFFFFu, rec + 4, rec_size - 4);
}

/* --- interner: open addressing over dense entries --- */
typedef struct {
    char *bytes;
    uint32_t len;
    uint32_t hash;
} entry_t;

typedef struct aclprof_interner aclprof_interner;
struct aclprof_interner {
    entry_t *entries;   /* dense, id = index */
    uint32_t size, cap_entries, max_entries;
    uint32_t *slots;    /* id + 1, 0 = empty */
    uint32_t nslots;    /* power of two, kept under 50% full */
    uint64_t overflows;
};

static uint32_t fnv1a(const char *p, size_t n)
{
    uint32_t h = 2166136261u;
    while (n--)
        h = (h ^ (uint8_t)*p++) * 16777619u;
    return h;
}

static int interner_grow_slots(aclprof_interner *in)
{
    uint32_t n = in->nslots ? in->nslots * 2 : 1024;
    uint32_t *slots = calloc(n, sizeof *slots);
    if (!slots)
        return -1;
    for (uint32_t id = 0; id < in->size; id++) {
        uint32_t i = in->entries[id].hash & (n - 1);
        while (slots[i])
            i = (i + 1) & (n - 1);
        slots[i] = id + 1;
    }
    free(in->slots);
    in->slots = slots;
    in->nslots = n;
    return 0;
}

static uint32_t intern(aclprof_interner *in, const char *s, size_t len)
{
    uint32_t h = fnv1a(s, len);
    uint32_t mask = in->nslots - 1, i = h & mask;
    for (uint32_t id1; (id1 = in->slots[i]) != 0; i = (i + 1) & mask) {
        entry_t *e = &in->entries[id1 - 1];
        if (e->hash == h && e->len == len && memcmp(e->bytes, s, len) == 0)
            return id1 - 1;
    }
    if (in->size >= in->max_entries)
        goto full;
    if (in->size == in->cap_entries) {
        uint32_t cap = in->cap_entries * 2;
        entry_t *entries = realloc(in->entries, cap * sizeof *entries);
        if (!entries)
            goto full;
        in->entries = entries;
        in->cap_entries = cap;
    }
    char *copy = malloc(len + 1);
    if (!copy)
        goto full;
    memcpy(copy, s, len);
    copy[len] = '\0';
    uint32_t id = in->size++;
    in->entries[id] = (entry_t){copy, (uint32_t)len, h};
    in->slots[i] = id + 1;
    if ((uint64_t)in->size * 2 > in->nslots && interner_grow_slots(in) != 0) {
        /* The table still works, only slower; the next insert retries growing. */
    }
    return id;
full:
    in->overflows++;
    return 0;
}

void aclprof_interner_free(aclprof_interner *in);

aclprof_interner *aclprof_interner_new(uint32_t max_entries)
{
    aclprof_interner *in = calloc(1, sizeof *in);
    if (!in)
        return NULL;
    in->max_entries = max_entries < 2 ? 2 : max_entries;
    in->cap_entries = 256;
    in->entries = malloc(in->cap_entries * sizeof *in->entries);
    if (!in->entries || interner_grow_slots(in) != 0) {
        aclprof_interner_free(in);
        return NULL;
    }
    intern(in, "?", 1); /* id 0: unavailable */
    return in;
}

void aclprof_interner_free(aclprof_interner *in)
{
    if (!in)
        return;
    for (uint32_t id = 0; id < in->size; id++)
        free(in->entries[id].bytes);
    free(in->entries);
    free(in->slots);
    free(in);
}

uint32_t aclprof_interner_size(const aclprof_interner *in)
{
    return in->size;
}

uint64_t aclprof_interner_overflows(const aclprof_interner *in)
{
    return in->overflows;
}

const char *aclprof_interner_entry(const aclprof_interner *in, uint32_t id, size_t *len)
{
    if (id >= in->size) {
        *len = 0;
        return NULL;
    }
    *len = in->entries[id].len;
    return in->entries[id].bytes;
}

/* Fetch one string through a Len+Get pair; returns its id, or UINT32_MAX on failure. */
static uint32_t fetch(aclprof_interner *in, len_fn get_len, str_fn get, const uint8_t *rec,
                      uint32_t rec_size)
{
    size_t len = 0;
    if (!get_len || !get || get_len(rec, rec_size, 0, &len) != 0 || len == 0)
        return UINT32_MAX;
    char stackbuf[512];
    char *buf = len <= sizeof stackbuf ? stackbuf : malloc(len);
    if (!buf)
        return UINT32_MAX;
    memset(buf, 0, len); /* the library NUL-terminates only at [len-1] */
    uint32_t id = UINT32_MAX;
    if (get(rec, rec_size, 0, buf, len) == 0)
        id = intern(in, buf, len - 1);
    if (buf != stackbuf)
        free(buf);
    return id;
}

uint32_t aclprof_decode_names(aclprof_interner *in, const uint8_t *buf, uint32_t n,
                              uint32_t rec_size, int validate, uint32_t *type_ids,
                              uint32_t *name_ids, uint8_t *status)
{
    uint32_t good = 0;
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *rec = buf + (size_t)i * rec_size;
        type_ids[i] = name_ids[i] = 0;
        if (validate) {
            uint32_t sig;
            memcpy(&sig, rec, sizeof sig);
            if (sig != aclprof_signature(rec, rec_size)) {
                status[i] = ACLPROF_REC_CORRUPT;
                continue;
            }
        }
        uint8_t st = ACLPROF_REC_OK;
        /* Both are fetched even if one fails: each fetch frees its own table entry. */
        uint32_t t = fetch(in, p_type_len, p_type, rec, rec_size);
        uint32_t m = fetch(in, p_name_len, p_name, rec, rec_size);
        if (t == UINT32_MAX)
            st |= ACLPROF_REC_NO_TYPE;
        else
            type_ids[i] = t;
        if (m == UINT32_MAX)
            st |= ACLPROF_REC_NO_NAME;
        else
            name_ids[i] = m;
        status[i] = st;
        good++;
    }
    return good;
}
