/* Internal interface shared by the mock's translation units.
 *
 * The public declarations come from ../../cdefs (compiled with -I cdefs), so a prototype in
 * the mock that disagrees with what the cffi binding reads is a compile error.
 *
 * Ownership of files:
 *   common.c    the base every area calls: the global lock, fault injection, clock, settings
 *               and their aclmockSet*, the mode; it calls no other file
 *   control.c   aclmockReset/GetStats/GetMode/Version and the fork() handlers: the one file
 *               that calls every area's reset, stats and fork hooks; no file calls it
 *   session.c   aclprofInit/Finalize/Start/Stop and the era rules (session_internal.h:
 *               session_config.c configs and aclprofSetConfig, session_output.c PROF_* dirs)
 *   msproftx.c  stamps, mark, push/pop, ranges, MarkEx, Str2Id, RangePushEx/RangePop
 *   stepinfo.c  aclprofCreateStepInfo/GetStepTimestamp/DestroyStepInfo
 *   runtime.c   aclInit/aclFinalize and the aclrt* device/context/stream calls
 *   model.c     aclmdlLoadFromFile/Execute/Unload (model_internal.h: model_table.c the
 *               table of loaded models, model_file.c parses model files, model_dataset.c
 *               the dataset handles)
 *   subscribe.c aclprofModelSubscribe/UnSubscribe, device counts, deferred close (see
 *               subscribe_internal.h: subscribe_config.c, _queue.c, _writer.c, _log.c)
 *   opdesc.c    the ProfOpDesc record, CRC-32C signature, name/type side table, op getters
 *   recordsettings.c  device clock offset, devId zero, step keypoint settings
 */
#ifndef ACLMOCK_INTERNAL_H
#define ACLMOCK_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "acl_base.h"
#include "acl_prof.h"
#include "acl_runtime.h"
#include "aclprof_records.h"
#include "aclmock.h"

/* Built with -fvisibility=hidden: only what carries this is exported. */
#define MOCK_EXPORT __attribute__((visibility("default")))

/* PROF_MAX_DEV_NUM in CANN; the host is appended as device id 64 inside a config. */
#define MOCK_MAX_DEVICES 64
#define MOCK_HOST_DEVICE_ID 64

/* ---- common.c ---------------------------------------------------------------------- */

/* The one global mutex: every public profiling call takes it, as the real ProfAclMgr does.
 * Recursive, so that a public call may call another public helper while holding it. The
 * pipe writer thread never holds it while blocked in write(). */
extern pthread_mutex_t g_mock_lock;
void mock_lock(void);
void mock_unlock(void);

/* The first statement of every exported acl* function (never of the aclmock* controls): if a
 * fault is armed for this function (aclmockFailNext), or the helper host is on and this is an
 * aclprof* function, return `value` before anything else. `value` may use `fault_code_`, the
 * armed code. The one place the check is written (mock_acl/tools/check_faults.py enforces it):
 *   MOCK_FAULT_RETURN_CODE()   aclError functions: the code as is
 *   MOCK_FAULT_RETURN(NULL)    pointer functions; other values: the code converted, e.g.
 *                              MOCK_FAULT_RETURN((uint64_t)(int64_t)fault_code_)
 *   MOCK_FAULT_RETURN_VOID()   void functions: nothing happens */
#define MOCK_FAULT_RETURN(value)                                                     \
    do {                                                                             \
        int32_t fault_code_;                                                         \
        if (mock_fault(__func__, &fault_code_))                                      \
            return value;                                                            \
    } while (0)
#define MOCK_FAULT_RETURN_CODE() MOCK_FAULT_RETURN(fault_code_)
#define MOCK_FAULT_RETURN_VOID() MOCK_FAULT_RETURN()

/* Returns true (and stores the code) if a fault was injected for `function` and consumes
 * one use of it. Thread-safe; cheap (one relaxed atomic load) when no fault is armed. */
bool mock_fault(const char *function, int32_t *code);

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t mock_now_ns(void);

/* The kernel thread id of the caller (gettid), cached per thread; fork-safe. */
uint32_t mock_tid(void);

/* fork(): control.c registers the mock's only pthread_atfork handlers, at load, and they
 * call these in the lock order (g_mock_lock -> g_sub_lock -> g_log_lock -> g_names_lock ->
 * g_attr_lock; g_fault_lock is a leaf). One registration, because the order in which
 * separate registrations' prepare handlers run depends on when each file registered. */
void mock_base_fork_prepare(void);  /* common.c: takes g_fault_lock */
void mock_base_fork_parent(void);
void mock_base_fork_child(void);    /* forgets the cached tid, re-initialises g_fault_lock, g_mock_lock */
void sub_fork_prepare(void);     /* subscribe_writer.c: takes g_sub_lock, g_log_lock */
void sub_fork_parent(void);
void sub_fork_child(void);       /* forgets the writer, re-initialises locks and condvars */
void names_fork_prepare(void);   /* opdesc.c: takes g_names_lock, g_attr_lock */
void names_fork_release(void);
void models_fork_child(void);    /* model_table.c: re-initialises every model's exec_lock */

/* Writes `src[0..len)` as a JSON string literal (with the quotes) into dst, NUL-terminated.
 * Escapes '"', '\\' and control bytes (\u00XX); bytes >= 0x80 are copied raw. Needs
 * cap >= 6 * len + 3; returns the length written (without the NUL), or 0 if cap is short. */
size_t mock_json_escape(char *dst, size_t cap, const char *src, size_t len);

/* Settings (read from the environment at load and at aclmockReset, changed by aclmock*). */
void mock_settings_load(void);     /* back to the defaults, then the ACLMOCK_* variables */
uint32_t mock_device_count(void);
int mock_cann_era(void);           /* ACLMOCK_CANN_2025 or _2026 */
uint32_t mock_op_desc_size(void);
int mock_time_unit(void);
int mock_realtime(void);
uint32_t mock_write_chunk(void);
uint32_t mock_corrupt_every(void);
uint32_t mock_writer_delay_us(void);
int mock_chip(void);               /* ACLMOCK_CHIP_*: SetConfig types the platform supports */
int mock_unsub_policy(void);       /* ACLMOCK_UNSUB_*: queued records at unsubscribe */
int mock_pipe_writer_cann(void);   /* ACLMOCK_PIPE_WRITER=cann: short writes, SIGPIPE as CANN */
int mock_signature_cann(void);     /* ACLMOCK_SIGNATURE=cann: the CRC one byte a step, as CANN */
int mock_threads_cann(void);       /* ACLMOCK_THREADS=cann: CANN's uploader/response threads */
#define MOCK_RESPONSE_WAIT_MS 30000u /* DeviceResponseHandler's wait (prof_acl_mgr.cpp:478-485) */
uint32_t mock_response_wait_ms(void); /* ACLMOCK_RESPONSE_WAIT_MS */

/* cann_threads.c: CANN's uploader and response threads under ACLMOCK_THREADS=cann (issue 22).
 * device_up/down: the device's (device >= MOCK_MAX_DEVICES: the host's) subscription count
 * left / reached 0; called with g_sub_lock held (the threads take only their own lock). */
void mock_threads_device_up(uint32_t device);
void mock_threads_device_down(uint32_t device);
void mock_threads_response_start(void);   /* a successful aclprofStart */
void mock_threads_response_end(void);     /* Finalize */
void mock_threads_reset(void);
void mock_threads_fork_prepare(void);
void mock_threads_fork_parent(void);
void mock_threads_fork_child(void);
/* aclmockSetHelperHost is on. mock_fault() already refuses the functions that check it
 * first; aclprofStop and aclprofSetConfig check it after their argument checks. */
bool mock_helper_host(void);

/* The global profiling mode (ACLMOCK_MODE_*); caller holds g_mock_lock. */
int mock_mode(void);
void mock_set_mode(int mode);

/* ---- per-area reset and stats hooks, called by control.c (aclmockReset/GetStats) ----
 * aclmockReset calls mock_subscribe_reset() first and WITHOUT g_mock_lock (so it may join
 * the writer thread even if that thread takes the lock), then every other reset hook with
 * g_mock_lock held. The stats hooks are called with g_mock_lock held. */
void mock_session_reset(void);
void mock_msproftx_reset(void);
void mock_stepinfo_reset(void);
void mock_runtime_reset(void);
void mock_model_reset(void);
void mock_subscribe_reset(void);   /* stops the writer thread, forgets subscriptions */
void mock_opdesc_reset(void);      /* empties the name/type table */

void mock_msproftx_stats(aclmockStats *out);
void mock_subscribe_stats(aclmockStats *out);
void mock_opdesc_stats(aclmockStats *out);

/* model.c -> session_output.c (lock held): aclmdlExecute ran `n` ops of `model_id` on
 * `device`; a running session that collects task time there counts them (mock_ops.json). */
void mock_session_note_ops(uint32_t device, uint32_t model_id, uint64_t n);

/* ---- session.c -> msproftx.c ------------------------------------------------------ */
/* Called by aclprofStart/aclprofStop (lock held) so msproftx knows whether it may record,
 * and where its events go: `host_dir` is the host/ subdirectory of the running PROF_ directory,
 * NULL at stop. Every Start passes its host dir; `enabled` is whether the config has the
 * MSPROFTX bit (without it, only step events go to that session's event log). */
void mock_msproftx_session(bool enabled, const char *host_dir);
/* aclprofFinalize (lock held): msproftx is uninitialised, push stacks and open ranges are
 * dropped; stamps still in use survive, as in the real pool. */
void mock_msproftx_finalize(void);
/* stepinfo.c -> msproftx.c (lock held): records a step event in the running session's
 * event log (host/msproftx.jsonl); does nothing when no session runs. */
void mock_msproftx_log_step(uint64_t index_id, int tag, uint64_t ts_ns);

/* ---- model.c <-> subscribe.c, subscribe_queue.c ------------------------------------- */
/* A tensor description of an op's input or output (model files' `in`/`out` lines), what
 * aclmdlCreateAndGetOpDesc hands out after an AI Core exception. */
typedef struct mock_tensor {
    int32_t dtype;         /* aclDataType value, unchecked */
    int32_t format;        /* aclFormat value, unchecked */
    size_t ndims;
    int64_t *dims;         /* ndims values; NULL when ndims is 0 (a scalar) */
} mock_tensor;

typedef struct mock_op {
    char *name;            /* may be empty; bytes, not necessarily UTF-8 */
    char *type;
    uint64_t duration_ns;
    uint64_t jitter_ns;    /* uniform in [-jitter, +jitter], clamped at 1 ns */
    uint32_t flag;         /* aclprofSubscribeOpFlag */
    uint32_t thread_id;
    mock_tensor *inputs;   /* owned; NULL when the model file gives none */
    size_t ninputs;
    mock_tensor *outputs;
    size_t noutputs;
} mock_op;

/* model_table.c (lock held): is the model loaded, and its device (0 if unknown). */
bool mock_model_exists(uint32_t model_id);
uint32_t mock_model_device(uint32_t model_id);

/* Called by aclmdlExecute (lock NOT held) for each op it simulates. Returns quickly:
 * the record is queued for the writer thread if the model is subscribed, else ignored. */
void mock_subscribe_emit(uint32_t model_id, uint32_t device_id, const mock_op *op,
                         uint64_t start, uint64_t end);
bool mock_model_subscribed(uint32_t model_id);

/* ---- exception.c: AI Core exceptions (issue 24) -------------------------------------- */
/* What CANN's runtime puts in the rtExceptionInfo it hands to the callbacks. */
typedef struct mock_failure {
    uint32_t device, stream, task, tid, retcode;
} mock_failure;
/* Called by aclmdlExecute (lock NOT held) when an op fails: runs every registered callback
 * with a fresh info object (heap, freed after the callbacks: a kept pointer is a use after
 * free, as CANN's stack object is), on the report thread or the caller's (setting), and
 * returns once they all returned. */
void mock_exception_raise(const mock_failure *f);
bool mock_failed_op_record(void);      /* the failed op's record reaches a subscription */
void mock_exception_reset(void);       /* lock held: no callbacks, settings from the env */
void mock_exception_stats(aclmockStats *out);
void mock_exception_fork_prepare(void);/* holds the callback and report locks */
void mock_exception_fork_parent(void);
void mock_exception_fork_child(void);  /* the report thread is gone in the child */
void mock_tensordesc_stats(aclmockStats *out);   /* model_opdesc.c */

/* ---- opdesc.c --------------------------------------------------------------------- */
/* The record, ProfOpDesc, is cdefs/aclprof_records.h's (shared with aclprof's decoder). */
uint32_t mock_crc32c_signature(const void *data, size_t len);  /* ~crc over [4, len) */
/* Stores name and type in the side table and returns the new opIndex (>= 1). */
uint64_t mock_opdesc_register(const char *name, const char *type);

/* ---- model_dataset.c ------------------------------------------------------------- */
void mock_model_stats(aclmockStats *out);   /* lock held: datasets and data buffers in use */

/* ---- recordsettings.c: what the op records mean (audit rows 11-13) ----------------- */
/* Re-reads ACLMOCK_DEVICE_CLOCK_OFFSET_NS, _DEVID_ZERO, _STEP_KEYPOINTS(_MODEL); called by
 * aclmockReset with g_mock_lock held. */
void mock_records_reset(void);
/* A host CLOCK_MONOTONIC time as the device reports it: plus the device clock offset, in
 * the record time unit (ns or us). */
uint64_t mock_device_time(uint64_t host_ns);
bool mock_devid_zero(void);                  /* op records carry devId 0 */
bool mock_stamp_thread(void);                /* threadId = the executing thread's tid */
#define ACLMOCK_MAX_DRIFT_PPB 1000000         /* 1000 ppm */
bool mock_step_keypoints(uint32_t *model_id);/* keypoints on? and the model id they carry */
/* stepinfo.c -> subscribe_queue.c (g_mock_lock held): one step ended during a subscription;
 * host CLOCK_MONOTONIC times of its start and end. */
void mock_subscribe_emit_keypoint(uint64_t start_host_ns, uint64_t end_host_ns);

/* runtime.c, for aclprofStart(NULL) (g_mock_lock held): is the device set
 * (aclrtSetDevice more often than aclrtResetDevice)? */
bool mock_device_opened(uint32_t id);

/* runtime.c, for RangePop (g_mock_lock held): does rtsStreamGetAttribute accept the
 * stream (NULL = the current context's default stream)? */
bool mock_stream_resolves(const void *stream);

/* ACLMOCK_OPDESC_* (audit row 14), and the record as written to the pipe in that layout:
 * `wire` gets the fields of the logical record `r` at the current layout's offsets. */
int mock_opdesc_layout(void);
void mock_opdesc_to_wire(const ProfOpDesc *r, ProfOpDesc *wire);

#endif
