/* aclmdlCreateAndGetOpDesc and the tensor description getters (issue 24; mock_acl/README.md
 * "AI Core exceptions"), as GE has them (api/acl/acl_model/model/model.cpp
 * aclmdlCreateAndGetOpDesc, types/tensor_desc_internal_om2.cpp):
 * - the op is found by (device, stream, task) among the loaded models (GE: its exception
 *   dumper's op list; here a model's stream is its id and an op's task id its position);
 * - opName needs room for the name and its NUL (opNameLen <= strlen: 100000);
 * - an op without inputs or without outputs gives 100000 (ACL_REQUIRES_POSITIVE);
 * - the two arrays are the caller's: one aclDestroyTensorDesc each (GE: delete[]).
 * aclGetTensorDescByIndex does no bounds check in GE (&desc[index]); neither does the mock.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_internal.h"

struct aclTensorDesc {
    int32_t dtype;
    int32_t format;
    size_t ndims;
    int64_t *dims;       /* the block's copy; NULL for a scalar */
    void *address;       /* a made-up device address: never dereferenced */
};

/* An array handed out, with what it takes to free it. A registry of live arrays lets a
 * destroy of anything else abort loudly (CANN: delete[] of a foreign pointer, undefined). */
typedef struct desc_block {
    struct desc_block *next;
    size_t n;
    aclTensorDesc descs[];
} desc_block;

static pthread_mutex_t g_desc_lock = PTHREAD_MUTEX_INITIALIZER;
static desc_block *g_blocks;
static uint64_t g_blocks_live;

static desc_block *block_new(const mock_tensor *t, size_t n, uint64_t base_address)
{
    desc_block *b = calloc(1, sizeof *b + n * sizeof(aclTensorDesc));
    if (b == NULL)
        return NULL;
    b->n = n;
    for (size_t i = 0; i < n; i++) {
        aclTensorDesc *d = &b->descs[i];
        d->dtype = t[i].dtype;
        d->format = t[i].format;
        d->ndims = t[i].ndims;
        d->address = (void *)(uintptr_t)(base_address + i * 0x1000u);
        if (t[i].ndims > 0) {
            d->dims = malloc(t[i].ndims * sizeof *d->dims);
            if (d->dims == NULL) {
                for (size_t k = 0; k < i; k++)
                    free(b->descs[k].dims);
                free(b);
                return NULL;
            }
            memcpy(d->dims, t[i].dims, t[i].ndims * sizeof *d->dims);
        }
    }
    pthread_mutex_lock(&g_desc_lock);
    b->next = g_blocks;
    g_blocks = b;
    g_blocks_live++;
    pthread_mutex_unlock(&g_desc_lock);
    return b;
}

MOCK_EXPORT void aclDestroyTensorDesc(const aclTensorDesc *desc)
{
    MOCK_FAULT_RETURN_VOID();
    if (desc == NULL)
        return;
    pthread_mutex_lock(&g_desc_lock);
    desc_block **link = &g_blocks;
    while (*link != NULL && (*link)->descs != desc)
        link = &(*link)->next;
    desc_block *b = *link;
    if (b != NULL) {
        *link = b->next;
        g_blocks_live--;
    }
    pthread_mutex_unlock(&g_desc_lock);
    if (b == NULL) {
        fprintf(stderr, "aclmock: aclDestroyTensorDesc(%p): not an array that "
                        "aclmdlCreateAndGetOpDesc returned, or destroyed twice (CANN: delete[] of "
                        "it, undefined behaviour)\n", (const void *)desc);
        abort();
    }
    for (size_t i = 0; i < b->n; i++)
        free(b->descs[i].dims);
    free(b);
}

MOCK_EXPORT aclError aclmdlCreateAndGetOpDesc(uint32_t deviceId, uint32_t streamId,
                                              uint32_t taskId, char *opName, size_t opNameLen,
                                              aclTensorDesc **inputDesc, size_t *numInputs,
                                              aclTensorDesc **outputDesc, size_t *numOutputs)
{
    MOCK_FAULT_RETURN_CODE();
    if (opName == NULL || inputDesc == NULL || outputDesc == NULL || numInputs == NULL ||
        numOutputs == NULL)
        return ACL_ERROR_INVALID_PARAM;
    mock_lock();
    mock_model *m = model_table_find(streamId);
    if (m == NULL || m->device != deviceId || taskId >= m->nops) {
        mock_unlock();
        return ACL_ERROR_GE_FAILURE;   /* GE finds no op info (README: UNCERTAIN code) */
    }
    const mock_op *op = &m->ops[taskId];
    aclError ret = ACL_SUCCESS;
    desc_block *in = NULL, *out = NULL;
    if (opNameLen <= strlen(op->name) || op->ninputs == 0 || op->noutputs == 0) {
        ret = ACL_ERROR_INVALID_PARAM;
    } else {
        /* Made-up device addresses, distinct per model, op and tensor. */
        uint64_t base = 0x100000000000ull + ((uint64_t)m->id << 32) + ((uint64_t)taskId << 20);
        in = block_new(op->inputs, op->ninputs, base);
        out = in != NULL ? block_new(op->outputs, op->noutputs, base + 0x80000u) : NULL;
        if (out == NULL) {
            if (in != NULL)
                aclDestroyTensorDesc(in->descs);
            ret = ACL_ERROR_BAD_ALLOC;
        } else {
            memcpy(opName, op->name, strlen(op->name) + 1);
            *inputDesc = in->descs;
            *numInputs = in->n;
            *outputDesc = out->descs;
            *numOutputs = out->n;
        }
    }
    mock_unlock();
    return ret;
}

MOCK_EXPORT aclTensorDesc *aclGetTensorDescByIndex(aclTensorDesc *desc, size_t index)
{
    MOCK_FAULT_RETURN(NULL);
    return desc == NULL ? NULL : &desc[index];   /* unchecked, as in GE */
}

MOCK_EXPORT void *aclGetTensorDescAddress(const aclTensorDesc *desc)
{
    MOCK_FAULT_RETURN(NULL);
    return desc == NULL ? NULL : desc->address;
}

MOCK_EXPORT aclDataType aclGetTensorDescType(const aclTensorDesc *desc)
{
    MOCK_FAULT_RETURN(ACL_DT_UNDEFINED);
    return desc == NULL ? ACL_DT_UNDEFINED : (aclDataType)desc->dtype;
}

MOCK_EXPORT aclFormat aclGetTensorDescFormat(const aclTensorDesc *desc)
{
    MOCK_FAULT_RETURN(ACL_FORMAT_UNDEFINED);
    return desc == NULL ? ACL_FORMAT_UNDEFINED : (aclFormat)desc->format;
}

MOCK_EXPORT size_t aclGetTensorDescNumDims(const aclTensorDesc *desc)
{
    MOCK_FAULT_RETURN(0);
    if (desc == NULL)
        return 0;
    if (desc->ndims > 0 && desc->dims[0] == -2)
        return (size_t)-2;   /* ACL_UNKNOWN_RANK: an unknown-rank tensor */
    return desc->ndims;
}

MOCK_EXPORT aclError aclGetTensorDescDimV2(const aclTensorDesc *desc, size_t index,
                                           int64_t *dimSize)
{
    MOCK_FAULT_RETURN_CODE();
    if (desc == NULL || dimSize == NULL || index >= desc->ndims)
        return ACL_ERROR_INVALID_PARAM;
    *dimSize = desc->dims[index];
    return ACL_SUCCESS;
}

void mock_tensordesc_stats(aclmockStats *out)
{
    pthread_mutex_lock(&g_desc_lock);
    out->tensorDescsInUse = g_blocks_live;
    pthread_mutex_unlock(&g_desc_lock);
}
