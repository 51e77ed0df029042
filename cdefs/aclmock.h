/* Control API of the mock libascendcl (mock_acl/). Exported only by the mock.
 *
 * Same rules as acl_base.h. Every function is prefixed `aclmock` so that it can never clash
 * with a CANN symbol; the binding detects the mock by the presence of aclmockVersion().
 * Functions returning int return 0 on success and ACL_ERROR_INVALID_PARAM on bad input.
 */

#define ACLMOCK_API_VERSION 1

/* Global profiling mode, as kept by the real ProfAclMgr. */
#define ACLMOCK_MODE_OFF 0
#define ACLMOCK_MODE_API_CTRL 1
#define ACLMOCK_MODE_SUBSCRIBE 2

/* Op timestamp unit (reference 3.4 is UNCERTAIN). Env ACLMOCK_TIME_UNIT=ns|us. */
#define ACLMOCK_TIME_NS 0
#define ACLMOCK_TIME_US 1

typedef struct aclmockStats {
    uint64_t recordsEmitted;    /* op records produced by aclmdlExecute for subscribed models */
    uint64_t recordsWritten;    /* records whose last byte reached a pipe */
    uint64_t recordsDropped;    /* records lost inside the mock (write error, queue full) */
    uint64_t recordsCorrupted;  /* records written with a deliberately bad signature */
    uint64_t bytesWritten;
    uint64_t writeCalls;        /* write(2) calls that wrote at least one byte */
    uint64_t writeRetries;      /* EAGAIN retries */
    uint64_t nameTableEntries;  /* live entries of the op name/type side table */
    uint64_t stampsInUse;       /* msproftx pool slots in use (0..100) */
    uint64_t txEvents;          /* msproftx events recorded (marks, push/pop pairs, ranges) */
    uint64_t datasetsInUse;     /* aclmdlCreateDataset minus aclmdlDestroyDataset */
    uint64_t dataBuffersInUse;  /* aclCreateDataBuffer minus aclDestroyDataBuffer */
    uint64_t keypointsEmitted;  /* step keypoint records queued for a pipe (also in recordsEmitted) */
    uint64_t keypointsUnrouted; /* step keypoint records no subscription matched (CANN drops them) */
    uint64_t recordsDroppedAtUnsubscribe; /* of recordsDropped: still queued when an unsubscribe
                                   closed the fd under ACLMOCK_UNSUB_DROP (as CANN) */
    uint64_t txEventsUnrecorded;/* msproftx events accepted while no MSPROFTX session ran (after
                                   Stop, before Finalize: CANN accepts them, nothing collects) */
    uint64_t opFailures;        /* AI Core exceptions raised by injected failures */
    uint64_t exceptionCallbacks;/* exception callback invocations (one per callback per failure) */
    uint64_t tensorDescsInUse;  /* aclmdlCreateAndGetOpDesc arrays not yet destroyed */
} aclmockStats;

int aclmockVersion(void);
/* Back to the state of a freshly loaded library: mode OFF, no configs, no models, no
 * subscriptions, stamp pool free, injected faults cleared, settings from the environment. */
void aclmockReset(void);
int aclmockGetMode(void);
int aclmockGetStats(aclmockStats *out);

/* Fault injection: the next `times` calls of `function` (exact C name, e.g. "aclprofStart")
 * fail with `code`, before any other check. A pointer-returning function returns NULL, a
 * void function does nothing. times == 0 clears the fault for that function. */
int aclmockFailNext(const char *function, uint32_t times, int32_t code);
void aclmockClearFaults(void);

/* Driver settings. */
int aclmockSetDeviceCount(uint32_t count);     /* 1..64; default 8 */

/* Model runtime and subscription settings (operator subscription). */
int aclmockSetOpDescSize(uint32_t size);       /* 80 (default, current CANN) or 72 (older) */
int aclmockSetTimeUnit(int unit);              /* ACLMOCK_TIME_*; default ns */
int aclmockSetRealtime(int enabled);           /* 1: aclmdlExecute sleeps the simulated time */
int aclmockSetWriteChunk(uint32_t bytes);      /* 0: one record per write (real); else split
                                                  each record into writes of this many bytes */
int aclmockSetCorruptEvery(uint32_t k);        /* 0: never; k: every k-th record gets a bad
                                                  signature (counted in recordsCorrupted) */
int aclmockSetWriterDelayUs(uint32_t us);      /* writer sleeps this long before each record */
/* Append one line per emitted record to `path` (NULL stops): the mock's own account of
 * what it emitted, for tests to compare with what a reader delivered. Format in
 * mock_acl/README.md. */
int aclmockSetEmitLog(const char *path);
/* Block until every record queued so far has been written or dropped, or timeoutMs passes.
 * Returns 0 when drained, ACL_ERROR_FAILURE on timeout. */
int aclmockWaitWriterIdle(uint32_t timeoutMs);

/* Helper host (audit section 4 item 4): 1 makes every aclprof* function fail as CANN does on
 * a helper host: 200006 ACL_ERROR_FEATURE_UNSUPPORTED, returned as the VALUE by
 * aclprofGetOpStart/End/Duration and aclprofGetModelId, NULL from the pointer-returning ones.
 * Env ACLMOCK_HELPER_HOST=1 sets the default; 0 (default) is a normal host. */
int aclmockSetHelperHost(int enabled);
/* What the op records mean (audit rows 11-13; mock_acl/README.md "Op records").
 * Device clock: record times are host CLOCK_MONOTONIC + offsetNs, as a device counter that
 * does not line up with the host's clock; default 0; env ACLMOCK_DEVICE_CLOCK_OFFSET_NS.
 * Rejected if it would make the current device time negative. */
int aclmockSetDeviceClockOffset(int64_t offsetNs);
/* Device clock drift (issue 25): the counter gains ppb ns per 10^9 host ns (negative: loses),
 * |ppb| <= 10^6 (1000 ppm), from the moment of the call (no jump). Default 0; env
 * ACLMOCK_DEVICE_CLOCK_DRIFT_PPB. */
int aclmockSetDeviceClockDrift(int64_t ppb);
/* 1: op records carry the kernel tid (gettid) of the thread that executed the model as
 * threadId, for request attribution (issue 25); 0 (default): the model file's thread_id.
 * Env ACLMOCK_STAMP_THREAD=0|1. */
int aclmockSetStampThread(int enabled);
/* 1: op records carry devId 0, as on CANN's Analyzer::ConstructAndUploadData path; 0 (the
 * default): the model's device. Env ACLMOCK_DEVID_ZERO=0|1. */
int aclmockSetDevIdZero(int enabled);
/* Step keypoint records ("keypoint_op"/"na"), one per step whose end aclprofGetStepTimestamp
 * records during a subscription. enabled: 1 (default, as CANN) or 0. modelId: the model id
 * they carry and are routed by; CANN stamps 0xFFFFFFFF (the default), which no subscription
 * matches, so they are dropped (keypointsUnrouted). Env ACLMOCK_STEP_KEYPOINTS=0|1,
 * ACLMOCK_STEP_KEYPOINT_MODEL=<uint32>. */
int aclmockSetStepKeypoints(int enabled, uint32_t modelId);
/* ProfOpDesc layout (audit row 14). STANDARD is CANN's. SHUFFLED keeps the record size but
 * swaps modelId with threadId and rotates duration/start/end (start at duration's offset,
 * end at start's, duration at end's); the getters (aclprofGetOpStart/End/Duration,
 * aclprofGetModelId, the thread id attribute) follow it. For testing a reader that decodes
 * by offset. Env ACLMOCK_OPDESC_LAYOUT=standard|shuffled. */
#define ACLMOCK_OPDESC_STANDARD 0
#define ACLMOCK_OPDESC_SHUFFLED 1
int aclmockSetOpDescLayout(int layout);
/* CANN era the session calls follow (fidelity audit rows 4-8, 19; mock_acl/README.md):
 * 2025 is hicann/runtime d8beaaf09 (Start/Stop/Finalize need aclprofInit, NULL configs are
 * rejected, a second Start fails on a running device), 2026 is 681ef7610 (auto-init, NULL
 * configs, a second Start only checks the config). Env ACLMOCK_CANN=2025|2026 sets the
 * default (2026). */
#define ACLMOCK_CANN_2025 2025
#define ACLMOCK_CANN_2026 2026
int aclmockSetCannEra(int era);                /* ACLMOCK_CANN_* */
/* Chip profile (fidelity audit 3, row 7b): which aclprofSetConfig types the platform
 * supports. 910B (the default; CHIP_CLOUD_V2) refuses LOW_POWER_FREQ (11), SYS_CPU_FREQ (13)
 * and 14 (OPTYPE / 2025 SCALE) with 100010 and NTS_METRICS (15) with 100000, whatever the
 * value. ANY supports every type (no real chip does: CLOUD_V4 has 11/13/14, MDC_V2 has 15).
 * Env ACLMOCK_CHIP=910b|any. */
#define ACLMOCK_CHIP_910B 0
#define ACLMOCK_CHIP_ANY 1
int aclmockSetChip(int chip);
/* Records still queued for a subscription's fd when aclprofModelUnSubscribe closes it
 * (fidelity audit 3, row 1b). DRAIN (the default; a documented choice): written before the
 * close. DROP: as CANN, which closes the fd without flushing its pipe uploader: they are
 * dropped, counted in recordsDroppedAtUnsubscribe (and recordsDropped), and the unsubscribe
 * returns once the counts are final. Env ACLMOCK_UNSUBSCRIBE=drain|drop. */
#define ACLMOCK_UNSUB_DRAIN 0
#define ACLMOCK_UNSUB_DROP 1
int aclmockSetUnsubscribePolicy(int policy);

/* AI Core exceptions (issue 24; mock_acl/README.md "AI Core exceptions"). The op of model
 * `modelId` named `opName` (or, when opName is NULL, at position `opIndex`) fails in the
 * executions to come: once (everyNth 0) or in every everyNth-th one (1: every execution).
 * The callbacks get `retcode` (0: 507015 ACL_ERROR_RT_AICORE_EXCEPTION); aclmdlExecute returns
 * `executeCode` (0: 500002 ACL_ERROR_GE_FAILURE, what GE's synchronous execute makes of a
 * failed stream). 0, or -1 for an unknown model or op. Cleared by aclmockClearOpFailure and
 * aclmockReset. */
int aclmockInjectOpFailure(uint32_t modelId, const char *opName, uint32_t opIndex,
                           uint32_t everyNth, uint32_t retcode, int32_t executeCode);
int aclmockClearOpFailure(uint32_t modelId);
/* Which thread runs the exception callbacks (UNCERTAIN in the sources' reading: CANN runs them
 * on its task-report path, not on the caller's thread). Env ACLMOCK_EXCEPTION_THREAD=report|caller. */
#define ACLMOCK_EXC_REPORT_THREAD 0
#define ACLMOCK_EXC_CALLER_THREAD 1
int aclmockSetExceptionThread(int which);
/* Whether the failed op's own record reaches a subscription (UNCERTAIN; default: dropped, the
 * task never reports an end). Env ACLMOCK_FAILED_OP_RECORD=drop|emit. */
int aclmockSetFailedOpRecord(int emit);
