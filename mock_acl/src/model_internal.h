/* Internal interface of the model runtime, shared by its four files only (the rest of the
 * mock sees the model runtime through mock_internal.h):
 *   model.c          aclmdlLoadFromFile/Execute/Unload, the op clock
 *   model_table.c    the table of loaded models (and mock_model_exists/_device, the reset)
 *   model_file.c     reads and parses the text model description (README, "Model files")
 *   model_dataset.c  aclDataBuffer/aclmdlDataset handles and their registries
 */
#ifndef ACLMOCK_MODEL_INTERNAL_H
#define ACLMOCK_MODEL_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mock_internal.h"

/* ---- model_table.c ----------------------------------------------------------------- */

typedef struct mock_model {
    uint32_t id;
    uint32_t device;
    uint64_t seed;
    uint64_t gap_ns;
    size_t nops;
    mock_op *ops;
    atomic_uint refs;               /* the table's reference + one per running execution */
    pthread_mutex_t exec_lock;      /* serialises executions; guards cursor/exec_count */
    uint64_t cursor_ns;             /* end of the last simulated execution (+ gap) */
    uint64_t exec_count;
    /* An injected AI Core exception (aclmockInjectOpFailure); guarded by exec_lock. */
    bool fail_armed;
    size_t fail_op;                 /* position of the op that fails */
    uint32_t fail_every;            /* 0: the next execution only; N: every N-th execution */
    uint64_t fail_seen;             /* executions since the injection */
    uint32_t fail_retcode;          /* what the callbacks read */
    aclError fail_execute_code;     /* what aclmdlExecute returns */
} mock_model;

/* The stream a model's tasks run on (one model = one stream) and the task id of its op at
 * position k: fixed at load, as GE assigns them, so aclmdlCreateAndGetOpDesc can find the op
 * an exception names. */
#define MODEL_STREAM_ID(m) ((m)->id)
#define MODEL_TASK_ID(k) ((uint32_t)(k))

/* All with g_mock_lock held. */
mock_model *model_table_find(uint32_t id);     /* NULL if no model has that id */
/* Gives `m` the next id and adds it with the table's reference; ACL_ERROR_FAILURE when the
 * ids are exhausted, ACL_ERROR_BAD_ALLOC. On failure `m` is the caller's. */
aclError model_table_add(mock_model *m);
/* Takes the model out of the table (NULL if unknown); the table's reference goes to the
 * caller, who drops it with model_release (without the lock). */
mock_model *model_table_remove(uint32_t id);
/* Any thread: drops one reference; the last frees the model (its ops, its exec_lock). */
void model_release(mock_model *m);
void model_free(mock_model *m);               /* a model no table or execution holds */

/* ---- model_failure.c ----------------------------------------------------------------- */

/* With m->exec_lock held, once per execution: does this execution fail, and at which op? */
bool model_failure_due(mock_model *m, size_t *op);

/* ---- model_file.c ------------------------------------------------------------------ */

/* A model description file as parsed: its directives and its ops (owned). */
typedef struct parsed {
    uint32_t device;
    uint64_t seed, gap_ns;
    bool have_device, have_seed, have_gap;
    mock_op *ops;
    size_t nops, cap;
} parsed;

/* Reads and parses `path` into `*p` (zero-initialised by the caller). Runs without
 * g_mock_lock (files may be large). false (the caller's ACL_ERROR_INVALID_FILE) if the
 * file cannot be read or is malformed; `*p` then owns nothing. */
bool model_file_load(const char *path, parsed *p);
void model_parsed_free(parsed *p);
void mock_op_free(mock_op *op);               /* its strings and tensor descriptions */

/* ---- model_dataset.c --------------------------------------------------------------- */

/* What GE's ModelExecute checks of its two datasets before it looks the model up (caller
 * holds g_mock_lock; both non-NULL). On success `*empty` says whether both datasets are
 * empty, which the mock's models (no inputs, no outputs) need after the model lookup. */
aclError model_datasets_check(const aclmdlDataset *input, const aclmdlDataset *output,
                              bool *empty);

#endif
