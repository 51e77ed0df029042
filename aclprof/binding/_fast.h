/* Hot-path helpers compiled in cffi API mode (see cdefs/build_ffi.py): this file is the
 * cdef cffi reads, and the C files (_fast_tx.c, _fast_ops.c, _fast_names.c, _fast_crc.c,
 * _fast_agent.c, _fast_aqueue.c, _fast_billtap.c, _fast_dl.c) include it, so the
 * compiler checks them against it. cffi's cdef parser takes plain declarations and integer
 * #defines only.
 * The loader binds the vendor library's function pointers once with aclprof_fast_bind_*();
 * until then every call returns ACLPROF_FAST_UNBOUND. */

#define ACLPROF_FAST_UNBOUND -1000

/* ---- msproftx: a stamp cache and per-thread push stacks in C ----
 * Python registers each distinct message once and gets a small id; a push, mark or range
 * then takes one call here, which checks a stamp out of the message's idle list (creating
 * one, or evicting an idle stamp of another message when the library's pool is full),
 * makes the library call, and records what to undo. A "push" here is a RangeStart kept
 * on this thread's stack and a "pop" its RangeStop: the library's aclprofPush/Pop stack
 * is shared by the whole process, ranges pair by id. id ACLPROF_TX_ONE_OFF means "not
 * cached": the stamp is created for this use with `text` and destroyed afterwards. */
#define ACLPROF_TX_ONE_OFF 4294967295
#define ACLPROF_TX_POOL_EXHAUSTED -1001  /* every stamp of the pool is in open use */
#define ACLPROF_TX_CREATE_FAILED -1002   /* aclprofCreateStamp returned NULL with stamps free */
#define ACLPROF_TX_TOO_DEEP -1003        /* more nested pushes on one thread than the stack holds */
#define ACLPROF_TX_NO_MEMORY -1004
#define ACLPROF_TX_EMPTY -1005           /* nothing open on this thread / no such open range */
#define ACLPROF_TX_STALE -1006           /* it belonged to a session that has ended */
#define ACLPROF_TX_UNKNOWN_ID -1007      /* a message id that was never registered */
#define ACLPROF_TX_RANGE_BIAS 1099511627776

int aclprof_fast_bind_tx(uintptr_t create, uintptr_t destroy, uintptr_t set_message,
                         uintptr_t push, uintptr_t pop, uintptr_t mark,
                         uintptr_t range_start, uintptr_t range_stop);
/* Returns the new message id (>= 0) or ACLPROF_TX_NO_MEMORY. */
int64_t aclprof_tx_register(const char *text, uint32_t len);
/* Starts a range (aclprofRangeStart) and keeps it on this thread's stack. */
int aclprof_tx_push(uint32_t id, const char *text, uint32_t len);
/* Stops this thread's innermost push (aclprofRangeStop): 0 or the library's code, EMPTY,
 * or STALE (the entry was from an ended session; nothing was stopped in the library). */
int aclprof_tx_pop(void);
/* The same over aclprofPush/aclprofPop with its own per-thread bookkeeping: correct only
 * while one thread pushes (the library's stack is process-wide). For the benchmark. */
int aclprof_tx_push_stamp(uint32_t id, const char *text, uint32_t len);
int aclprof_tx_pop_stamp(void);
int aclprof_tx_mark(uint32_t id, const char *text, uint32_t len);
/* Returns a handle (>= 0: generation << 32 | range id) or an error code minus RANGE_BIAS. */
int64_t aclprof_tx_range_start(uint32_t id, const char *text, uint32_t len);
/* Ends a range from any thread; a second end of the same handle returns EMPTY. */
int aclprof_tx_range_end(int64_t handle);
/* The session ended: destroy every stamp (idle or in use) and start a new generation. */
void aclprof_tx_reset(void);
/* Forget this thread's push stack (tests). */
void aclprof_tx_clear_thread(void);
uint32_t aclprof_tx_live_stamps(void);
uint32_t aclprof_tx_depth(void);

/* ---- op record decoding (operator subscription) ---- */
/* Binds aclprofGetOpTypeLen, aclprofGetOpType, aclprofGetOpNameLen, aclprofGetOpName. */
int aclprof_fast_bind_ops(uintptr_t type_len, uintptr_t type, uintptr_t name_len, uintptr_t name);

/* Interned byte strings: equal strings get equal ids, ids are dense from 0, and id 0 is the
 * reserved "?" given when a name could not be fetched or the table is full. */
typedef struct aclprof_interner aclprof_interner;
aclprof_interner *aclprof_interner_new(uint32_t max_entries);
void aclprof_interner_free(aclprof_interner *in);
uint32_t aclprof_interner_size(const aclprof_interner *in);
uint64_t aclprof_interner_overflows(const aclprof_interner *in);
/* Names and types longer than ACLPROF_NAME_LIMIT bytes: interned cut to that many bytes (at
 * a UTF-8 character boundary), counted here. */
#define ACLPROF_NAME_LIMIT 16384
uint64_t aclprof_interner_cut(const aclprof_interner *in);
/* Strings the decode loop named by predicting their id from the record before (the same op
 * as the last time that record's op was seen: model order), without hashing; the others
 * were looked up. Either way the id is the same (see _fast_names.c). */
uint64_t aclprof_interner_predicted(const aclprof_interner *in);
const char *aclprof_interner_entry(const aclprof_interner *in, uint32_t id, size_t *len);
/* Intern s (the getters' fallback decodes in Python and keeps this table aligned with its
 * own list); returns its id, 0 when the table is full (counted as an overflow). */
uint32_t aclprof_interner_add(aclprof_interner *in, const char *s, uint32_t len);

/* The record signature (CRC-32C, init ~0, no final xor, over bytes [4, rec_size)). */
uint32_t aclprof_signature(const uint8_t *rec, uint32_t rec_size);
/* Tests: force (1) or stop forcing (0) the table CRC on a CPU with SSE4.2; returns the
 * previous setting. aclprof_crc_hardware() is 1 while the SSE4.2 instruction is in use. */
int aclprof_crc_force_software(int force);
int aclprof_crc_hardware(void);

/* ---- the agent's record path (_fast_agent.c) ----
 * Op rows (aclprof_op_row, cdefs/aclprof_records.h: aclprof.api.records.OP_DTYPE; in_size
 * bytes apart) -> wire records (aclprof_record: aclprof.protocol.wire RECORD_DTYPE, the same
 * ten fields, little-endian), written at out. op_name and op_type go through map (the
 * subscription's name id -> the connection's id); a keypoint row gets ACLPROF_FLAG_KEYPOINT
 * in flag. One call per batch, without the GIL (cffi API mode releases it), instead of a
 * numpy copy, two takes and a masked or, each taking the GIL from the service's threads.
 * Returns -1 when all n records were converted; when some name id is >= map_len returns the
 * largest id in the batch instead (out then holds garbage: the caller extends map to it and
 * calls again). */
int64_t aclprof_agent_convert(uint8_t *out, const uint8_t *data, uint32_t n, uint32_t in_size,
                              const uint32_t *map, uint32_t map_len);

/* ---- the subscription reader's GIL-free half (issue 12) ----
 * The reader thread takes the GIL only to hand a finished batch to Python: waiting for and
 * reading the pipe (aclprof_read_pipe) and turning records into rows (aclprof_decode_ops)
 * both run here with the GIL released, so no per-record work and no wait holds it. */
#define ACLPROF_READ_EOF 1    /* the write end is closed (the bytes before it were read) */
#define ACLPROF_READ_WOKEN 2  /* wake_fd became readable with the pipe empty */

/* Waits until fd is readable (or wake_fd is, with fd empty), reads what is there into
 * buf[0, cap), then, if that is under cap / 2 and coalesce_ns > 0, waits until
 * coalesce_ns after the first byte and reads what has arrived since (never more than
 * cap): at 100 k records/s that makes ~one batch per coalesce interval instead of one per
 * write of the library. Returns the bytes read (>= 0) with *flags = ACLPROF_READ_* bits,
 * or -errno (EINTR is retried). Releases the GIL (cffi API mode does). */
int64_t aclprof_read_pipe(int fd, int wake_fd, uint8_t *buf, uint64_t cap, int64_t coalesce_ns,
                          int *flags);

/* What aclprof_decode_ops and aclprof_read_ops count (aclprof.binding.opdecode hands one to
 * them; aclprof.api.subscription.decoder reads the fields by name). */
typedef struct {
    uint64_t corrupt;       /* += records whose signature does not match (decode_ops) */
    uint64_t missing_names; /* += valid records missing a name or a type (decode_ops) */
    uint64_t keypoints;     /* += keypoint records (decode_ops) */
    uint64_t max_end;       /* = the largest end seen, this one included (decode_ops) */
    uint64_t whole;         /* = whole records decoded by the last read_ops */
    uint64_t rows;          /* = rows written by the last read_ops */
    uint64_t left;          /* = bytes of a partial record left at the start of buf (read_ops) */
} aclprof_decode_counts;

/* For the n records of rec_size bytes at buf, sizes 80 and 72 only (sizeof(ProfOpDesc) and
 * offsetof(ProfOpDesc, devId)): check each one's signature (if validate; a CORRUPT record
 * is not passed to the getters), fetch its type and name once each through the library
 * (the getters on a one-record slice, index 0, so the cost stays linear; one Get call per
 * string, the Len call only for a string the Get refused), intern them (cut to
 * ACLPROF_NAME_LIMIT bytes, counted, if longer), and
 * decode the numeric fields: each valid record of buf becomes one
 * aclprof_op_row of out (rows are packed: out gets the valid records only, in order).
 * device_id 0 (CANN's "not filled") and 72-byte records read default_device. keypoint is
 * set where name and type are "keypoint_op" / "na".
 * counts->corrupt += corrupt records, counts->missing_names += valid records missing a
 * name or a type, counts->keypoints += keypoints, counts->max_end = max(counts->max_end,
 * largest end). Returns the number of rows written, or UINT32_MAX for an unsupported
 * record size. Releases the GIL. */
uint32_t aclprof_decode_ops(aclprof_interner *in, const uint8_t *buf, uint32_t n,
                            uint32_t rec_size, int validate, uint32_t default_device,
                            uint8_t *out, aclprof_decode_counts *counts);

/* aclprof_read_pipe then aclprof_decode_ops in one call, so the reader takes the GIL once
 * per batch. buf holds `filled` leftover bytes (a partial record) and room for cap bytes in
 * all; the whole records after the read are decoded into out (rows for cap / rec_size
 * records) and the partial rest is moved to the start of buf. counts as for
 * aclprof_decode_ops, plus counts->whole = whole records decoded, counts->rows = rows
 * written, counts->left = bytes left in buf. Returns the bytes read (>= 0) with *flags, or -errno
 * (nothing decoded, buf unchanged), or -EINVAL for an unsupported record size. */
int64_t aclprof_read_ops(aclprof_interner *in, int fd, int wake_fd, uint8_t *buf,
                         uint64_t filled, uint64_t cap, uint32_t rec_size, int64_t coalesce_ns,
                         int validate, uint32_t default_device, uint8_t *out,
                         aclprof_decode_counts *counts, int *flags);

/* ---- the agent's record queue (_fast_aqueue.c, issue 21) ----
 * In agent mode a subscription's reader thread never takes the GIL per batch: one call
 * (aclprof_aq_run) waits for, reads, checks, decodes and names the pipe's records and
 * appends the rows to this queue, until EOF or a wake-up, all in C without the GIL. The
 * agent's sender takes them with one call per wake-up (aclprof_aq_take). The queue is
 * bounded: past `bound` records the oldest are dropped and counted (the newest are kept).
 * Positions are absolute sequence numbers (head: the oldest kept record, tail: the next
 * one), so the agent orders its control frames (WATCH, UNWATCH, TRACE_DONE) among the
 * records by the tail at the moment it queued them. Each record carries the slot (one per
 * watched subscription) it came from; each slot keeps its subscription's counters and a
 * copy of its interned names (the interner is the reader's alone: the sender reads the
 * copy, under the queue's lock). Every function is thread-safe (one mutex). */
typedef struct aclprof_agent_queue aclprof_agent_queue;

/* The whole queue's counters, read as one snapshot. */
typedef struct {
    uint64_t records_in; /* rows appended (by aclprof_aq_run and aclprof_aq_push) */
    uint64_t dropped;    /* rows dropped: the bound (oldest first) and aclprof_aq_discard */
    uint64_t head;       /* sequence number of the oldest row held */
    uint64_t tail;       /* sequence number of the next row appended */
    uint64_t taken;      /* rows taken by aclprof_aq_take */
} aclprof_aq_totals;

/* One slot's counters (what its reader read and delivered in C), one snapshot. */
typedef struct {
    uint64_t bytes_read;
    uint64_t records_read;  /* whole records read (= delivered + corrupt) */
    uint64_t delivered;     /* rows appended to the queue */
    uint64_t corrupt;
    uint64_t missing_names;
    uint64_t keypoints;
    uint64_t max_end;       /* the largest record end seen (library units) */
    int64_t lag_end;        /* the largest end in host ns (end * factor), 0 = none yet */
    int64_t lag_offset;     /* min(host arrival ns - end ns) over the reads */
    uint64_t names;         /* names copied out of the interner */
    uint64_t reads;         /* pipe reads that brought records (wake-ups of the loop) */
} aclprof_aq_slot_counts;

/* bound >= 1 rows; wake_fd: written (one byte) when the sender sleeps and enough rows are
 * held (aclprof_aq_arm), -1 for none. NULL when out of memory. */
aclprof_agent_queue *aclprof_aq_new(uint64_t bound, int wake_fd);
void aclprof_aq_free(aclprof_agent_queue *q);
void aclprof_aq_set_wake_fd(aclprof_agent_queue *q, int wake_fd);
/* A new slot (>= 0), or -1 (out of memory or 65535 slots). */
int aclprof_aq_add_slot(aclprof_agent_queue *q);
/* Append n rows (aclprof_op_row, packed) of slot: for rows decoded in Python (the first
 * batch, before the layout check; the getters' fallback). The interner's new names are
 * copied to the slot first (call on the interner's reader thread). The slot's counters are
 * not changed (Python counts those rows). Returns 0, or -1 for a bad slot. */
int aclprof_aq_push(aclprof_agent_queue *q, int slot, const aclprof_interner *in,
                    const uint8_t *rows, uint32_t n);
/* The reader loop: aclprof_read_ops into buf (filled leftover bytes, cap in all) and out
 * (rows for cap / rec_size records), the rows appended to the queue under slot, the
 * interner's new names copied to the slot, the slot's counters and lag clock
 * (lag_factor: host ns per library time unit) updated; again until EOF or a wake-up with
 * the pipe empty. Returns 0 with *flags (ACLPROF_READ_*) and counts->left (the bytes of
 * a partial record left in buf), or -errno (-EINVAL: bad size or slot). */
int64_t aclprof_aq_run(aclprof_agent_queue *q, int slot, aclprof_interner *in, int fd,
                       int wake_fd, uint8_t *buf, uint64_t filled, uint64_t cap,
                       uint32_t rec_size, int64_t coalesce_ns, int validate,
                       uint32_t default_device, int64_t lag_factor, uint8_t *out,
                       aclprof_decode_counts *counts, int *flags);
/* Take up to max rows, those before sequence `limit` only (UINT64_MAX: no limit), into
 * rows (packed aclprof_op_row) and their slots; returns how many; *head = the new head. */
uint32_t aclprof_aq_take(aclprof_agent_queue *q, uint32_t max, uint64_t limit, uint8_t *rows,
                         uint32_t *slots, uint64_t *head);
void aclprof_aq_totals_get(aclprof_agent_queue *q, aclprof_aq_totals *t);
/* -1 for a bad slot. */
int aclprof_aq_slot_counts_get(aclprof_agent_queue *q, int slot, aclprof_aq_slot_counts *c);
/* The slot's name `id` (NULL past the copied ones); the pointer stays valid until free. */
const char *aclprof_aq_name(aclprof_agent_queue *q, int slot, uint32_t id, size_t *len);
/* Names first.. of the slot, copied back to back into buf (cap bytes) with their lengths
 * in lens, as many as are copied and fit (at most max); returns how many (one lock). */
uint32_t aclprof_aq_names(aclprof_agent_queue *q, int slot, uint32_t first, uint32_t max, char *buf,
                          uint64_t cap, uint32_t *lens);
/* Drop every row held (counted in dropped); returns how many. */
uint64_t aclprof_aq_discard(aclprof_agent_queue *q);
/* Before the sender sleeps: 0 if wake_at rows are held already; else 1, and the next
 * append that brings the queue to wake_at rows writes wake_fd once. */
int aclprof_aq_arm(aclprof_agent_queue *q, uint64_t wake_at);
void aclprof_aq_disarm(aclprof_agent_queue *q);
/* The same, writing fd instead (the pump's own pipe: its wake-ups are told apart from
 * Python's); -2: the queue's wake_fd. */
int aclprof_aq_arm_to(aclprof_agent_queue *q, uint64_t wake_at, int fd);
/* Control items among the records: Python queues a WATCH, UNWATCH or TRACE_DONE at the
 * queue's tail (aclprof_aq_mark returns it) and no framing call passes the smallest such
 * sequence until Python, having handled the items, moves the barrier on
 * (aclprof_aq_set_barrier; UINT64_MAX: no item waits). Marking and reading the tail are one
 * step under the queue's lock, so no record queued after the item goes out before it while
 * the sender frames in C. */
uint64_t aclprof_aq_mark(aclprof_agent_queue *q);
void aclprof_aq_set_barrier(aclprof_agent_queue *q, uint64_t at);
/* Rows that may be framed now (held, before the barrier); *behind: rows wait behind the
 * barrier (Python has an item to send before them). */
uint64_t aclprof_aq_ready(aclprof_agent_queue *q, int *behind);

/* The sender's side in one call per pump (aclprof_aq_frame): take the held rows, those
 * before sequence `limit`, at most max, and write them as wire records at out (the open
 * BATCH frame's room), the names remapped through the slot's map for connection `gen` and
 * the keypoint byte folded into flag (as aclprof_agent_convert). It stops early, before the
 * row that needs Python: its slot is not announced on connection gen (NEED_WATCH), a name id
 * is beyond the slot's map for gen (NEED_NAMES, value = the larger id of the row), or the
 * slot learns its device from its records and the row names another one, below max_devices
 * and not 0 (DEVICE, value = that device). Python does what the code says, tells the queue
 * (aclprof_aq_set_slot / aclprof_aq_set_map) and calls again. */
#define ACLPROF_AQ_FRAMED 0
#define ACLPROF_AQ_NEED_WATCH 1
#define ACLPROF_AQ_NEED_NAMES 2
#define ACLPROF_AQ_DEVICE 3
typedef struct {
    uint64_t records; /* rows written at out (and taken) */
    uint64_t head;    /* the queue's head after the call */
    uint32_t slot;    /* the slot of the row that stopped the call (codes other than FRAMED) */
    uint32_t value;
} aclprof_aq_frame_result;

/* What the sender knows of a slot on the current connection: the generation its WATCH
 * was sent on (-1: none), its device, and whether it learns the device from its records. */
int aclprof_aq_set_slot(aclprof_agent_queue *q, int slot, int64_t announced_gen, uint32_t device,
                        int learn);
/* The slot's name map for connection gen (map[i]: connection id of the slot's id i),
 * copied. -1 for a bad slot or out of memory. */
int aclprof_aq_set_map(aclprof_agent_queue *q, int slot, int64_t gen, const uint32_t *map,
                       uint32_t len);
int aclprof_aq_frame(aclprof_agent_queue *q, int64_t gen, uint64_t limit, uint32_t max,
                     uint32_t max_devices, uint8_t *out, aclprof_aq_frame_result *res);

/* ---- the agent's sender in C (_fast_apump.c, issue 21) ----
 * Between Python's turns the sender thread sits in one call, without the GIL: it waits for
 * rows (coalescing: while records flow, until the window after the last frame ends on a grid of
 * coalesce_ns (aclprof_aq_window_end), or until
 * wake_rows are held; when idle, until the first row), frames them as BATCH frames into the
 * connection's buffer (aclprof_aq_frame) and writes them to the socket, waiting for room
 * when it is full. A chunk of frames (the pending bytes) is written whole before the next is
 * built, and what whole chunks carried is counted in sent_* for the connection's accounting.
 * It returns only when Python is needed: */
#define ACLPROF_PUMP_PYTHON 10    /* py_fd readable (control items, a stop), or the barrier reached */
#define ACLPROF_PUMP_INCOMING 11  /* the daemon sent something, or hung up */
#define ACLPROF_PUMP_TIMEOUT 12   /* until_ns passed (Python's periodic work) */
#define ACLPROF_PUMP_ERROR 13     /* send or poll failed: err */
/* ... or with aclprof_aq_frame's NEED_WATCH / NEED_NAMES / DEVICE stop (slot, value); the rows
 * framed before the stop are pending in buf, closed as a BATCH frame. */
typedef struct {
    int64_t gen;            /* the connection (aclprof_aq_frame's gen) */
    uint32_t max_devices;
    uint32_t max_rows;      /* records per BATCH frame at most */
    int sock;               /* the connected socket (non-blocking) */
    int py_fd;              /* Python's wake pipe (read end): never read here */
    int rows_r, rows_w;     /* the pump's own wake pipe: the queue writes rows_w, the pump drains rows_r */
    int64_t coalesce_ns;
    uint64_t wake_rows;
    int64_t until_ns;       /* CLOCK_MONOTONIC */
} aclprof_aq_pump_args;
typedef struct {
    /* in and out: the connection's buffer and its pending bytes [start, end), no BATCH
     * frame open, and what the pending bytes carry */
    uint8_t *buf;
    uint64_t cap, start, end;
    uint64_t records, loss, frames;
    int busy;               /* records flowed at the last frame (the coalescing state) */
    int64_t last_ns;        /* CLOCK_MONOTONIC of that frame (0: none): the coalescing window
                             * runs from it across calls, so returns to Python more often than
                             * coalesce_ns (a request bill's 0.1 s) cannot hold frames back */
    /* out: what the whole chunks written by the call carried, bytes written, a stop; the
     * sent_* are also read while the call runs (stored whole: _fast_apump.c) */
    uint64_t sent_bytes, sent_records, sent_loss, sent_frames;
    uint32_t slot, value;
    int err;
} aclprof_aq_pump_io;
int aclprof_aq_pump(aclprof_agent_queue *q, const aclprof_aq_pump_args *a, aclprof_aq_pump_io *io);
/* The end of the coalescing window that begins with a frame at last_ns: the first multiple of
 * coalesce_ns (on CLOCK_MONOTONIC, which every process of a host shares) at least
 * coalesce_ns / 2 after it, so 0.5-1.5 windows after it, and one window once the frames fall
 * on the grid (last_ns itself for a window <= 0). The pump's busy frames wait for it. */
int64_t aclprof_aq_window_end(int64_t last_ns, int64_t coalesce_ns);

/* ---- request bills: the agent's op tap (_fast_billtap.c, issue 25) ----
 * In agent mode op rows never reach Python; the subscription's reader (aclprof_aq_run,
 * aclprof_aq_push) also hands each read to the queue's tap (aclprof_aq_set_tap): per op the
 * columns request attribution needs, per read one clock note. The sender takes both with
 * one call per wake-up. Off (one relaxed load per read, nothing allocated) until a request
 * was marked in the process: aclprof_requests_note_marked(), which aclprof.request calls on
 * its first window. Bounded: past max_ops (max_notes) held, the newest are dropped, counted. */
typedef struct {
    uint64_t start;     /* device start, library units */
    uint64_t end;
    uint32_t thread_id; /* the record's threadId */
    uint32_t model_id;
    uint32_t op_type;   /* the slot's name ids (its subscription's interner) */
    uint32_t op_name;
    uint32_t slot;
    uint32_t reserved;
} aclprof_tap_op;

typedef struct {
    int64_t arrival;     /* host CLOCK_MONOTONIC ns when the read returned */
    uint64_t newest_end; /* the largest end of the read's records (library units) */
    uint64_t ops;        /* ops of the read the tap kept */
} aclprof_tap_note;

typedef struct {
    uint64_t ops_in;        /* ops fed (keypoints are not ops) */
    uint64_t dropped;       /* ops dropped: the tap was full (or out of memory) */
    uint64_t notes_dropped; /* clock notes dropped the same way */
    uint64_t taken;         /* ops taken by aclprof_tap_take */
    uint64_t held;          /* ops held now */
    uint64_t notes_held;    /* notes held now */
} aclprof_tap_counts;

typedef struct aclprof_bill_tap aclprof_bill_tap;
void aclprof_requests_note_marked(void);
int aclprof_requests_marked(void);
/* NULL when out of memory or a bound is 0. */
aclprof_bill_tap *aclprof_tap_new(uint32_t max_ops, uint32_t max_notes);
void aclprof_tap_free(aclprof_bill_tap *t);
/* Take up to max_ops ops and max_notes notes, oldest first; returns the ops taken,
 * *n_notes the notes. */
uint32_t aclprof_tap_take(aclprof_bill_tap *t, aclprof_tap_op *ops, uint32_t max_ops,
                          aclprof_tap_note *notes, uint32_t max_notes, uint32_t *n_notes);
void aclprof_tap_counts_get(aclprof_bill_tap *t, aclprof_tap_counts *c);
/* The tap the queue's readers feed (NULL: none). The tap must outlive the queue's use of it. */
void aclprof_aq_set_tap(aclprof_agent_queue *q, aclprof_bill_tap *t);

/* ---- the library set (_fast_dl.c) ----
 * The file (dladdr's dli_fname) that defines the function at `address`: its length, 0 when
 * unknown; copies at most cap-1 bytes and a NUL into `out`. */
size_t aclprof_fast_dl_file(uintptr_t address, char *out, size_t cap);
