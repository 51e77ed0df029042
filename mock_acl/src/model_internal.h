/* Internal interface of the model runtime, shared by its three files only (the rest of the
 * mock sees the model runtime through mock_internal.h):
 *   model.c          the model table, aclmdlLoadFromFile/Execute/Unload, the op clock
 *   model_file.c     reads and parses the text model description (README, "Model files")
 *   model_dataset.c  aclDataBuffer/aclmdlDataset handles and their registries
 */
#ifndef ACLMOCK_MODEL_INTERNAL_H
#define ACLMOCK_MODEL_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mock_internal.h"

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

/* ---- model_dataset.c --------------------------------------------------------------- */

/* What GE's ModelExecute checks of its two datasets before it looks the model up (caller
 * holds g_mock_lock; both non-NULL). On success `*empty` says whether both datasets are
 * empty, which the mock's models (no inputs, no outputs) need after the model lookup. */
aclError model_datasets_check(const aclmdlDataset *input, const aclmdlDataset *output,
                              bool *empty);

#endif
