/* Datasets and data buffers: aclCreateDataBuffer/aclDestroyDataBuffer,
 * aclmdlCreateDataset/DestroyDataset/AddDatasetBuffer/GetDatasetNumBuffers, and the
 * datasetsInUse/dataBuffersInUse counters.
 *
 * The real aclmdlDataset is a vector of (aclDataBuffer *, tensor desc) pairs; it keeps the
 * buffer pointers it is given and reads them at every aclmdlExecute, and destroying it does
 * not destroy the buffers (GE model_om2.cpp). The mock does the same: a dataset stores the
 * caller's aclDataBuffer pointers and aclmdlExecute reads each buffer's fields, so a buffer
 * destroyed while still in a dataset is a use-after-free here too (visible under ASan).
 * Both kinds of object are kept in registries (under g_mock_lock) only to reject foreign or
 * destroyed handles at the API with 100000, as the mock does for every other handle, and to
 * count them for aclmockGetStats. They are the caller's objects, so aclmockReset leaves
 * them alone.
 *
 * aclmdlExecute takes two aclmdlDataset handles, as in CANN (NULL is rejected); the models
 * have no inputs or outputs, so the datasets must be empty (README, "Datasets and
 * aclmdlExecute"): model_datasets_check.
 */
#include <stdlib.h>

#include "model_internal.h"

struct aclDataBuffer {
    void *data;                  /* device memory in CANN; never dereferenced */
    size_t length;
    struct aclDataBuffer *next;  /* registry */
};

struct aclmdlDataset {
    aclDataBuffer **bufs;        /* the caller's pointers, in the order added */
    size_t n, cap;
    struct aclmdlDataset *next;  /* registry */
};

static aclDataBuffer *g_buffers;
static aclmdlDataset *g_datasets;
static uint64_t g_nbuffers, g_ndatasets;

/* Caller holds g_mock_lock. */
static bool buffer_live(const aclDataBuffer *b)
{
    for (const aclDataBuffer *p = g_buffers; p != NULL; p = p->next) {
        if (p == b)
            return true;
    }
    return false;
}

/* Caller holds g_mock_lock. */
static bool dataset_live(const aclmdlDataset *d)
{
    for (const aclmdlDataset *p = g_datasets; p != NULL; p = p->next) {
        if (p == d)
            return true;
    }
    return false;
}

/* What GE's ModelExecute checks before it looks the model up. It walks every buffer of
 * both datasets (reading the kept pointers: a destroyed buffer is read after free, as in
 * CANN), and a synchronous execution with an output buffer whose data is NULL asks the
 * model for that output's size: these models have no outputs, so that is 100000 (GE:
 * "outputDesc size mismatch with blobs size"). Caller holds g_mock_lock. */
aclError model_datasets_check(const aclmdlDataset *input, const aclmdlDataset *output,
                              bool *empty)
{
    if (!dataset_live(input) || !dataset_live(output))
        return ACL_ERROR_INVALID_PARAM;   /* deviation: CANN would dereference it */
    size_t total = 0;
    for (size_t k = 0; k < input->n; k++)
        total += input->bufs[k]->length;
    bool need_alloc = false;
    for (size_t k = 0; k < output->n; k++) {
        total += output->bufs[k]->length;
        need_alloc |= output->bufs[k]->data == NULL;
    }
    volatile size_t sink = total;   /* the reads above are the point: keep them */
    (void)sink;
    *empty = input->n == 0 && output->n == 0;
    return need_alloc ? ACL_ERROR_INVALID_PARAM : ACL_SUCCESS;
}

MOCK_EXPORT aclDataBuffer *aclCreateDataBuffer(void *data, size_t size)
{
    MOCK_FAULT_RETURN(NULL);
    aclDataBuffer *b = calloc(1, sizeof *b);
    if (b == NULL)
        return NULL;
    b->data = data;
    b->length = size;
    mock_lock();
    b->next = g_buffers;
    g_buffers = b;
    g_nbuffers++;
    mock_unlock();
    return b;
}

MOCK_EXPORT aclError aclDestroyDataBuffer(const aclDataBuffer *dataBuffer)
{
    MOCK_FAULT_RETURN_CODE();
    if (dataBuffer == NULL)
        return ACL_ERROR_INVALID_PARAM;
    mock_lock();
    for (aclDataBuffer **pp = &g_buffers; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == dataBuffer) {
            aclDataBuffer *b = *pp;
            *pp = b->next;
            g_nbuffers--;
            mock_unlock();
            free(b);   /* datasets that still hold it keep a dangling pointer, as in CANN */
            return ACL_SUCCESS;
        }
    }
    mock_unlock();
    return ACL_ERROR_INVALID_PARAM;   /* deviation: a double destroy is a double free in CANN */
}

/* CANN declares it `()`; a definition needs the (void). */
MOCK_EXPORT aclmdlDataset *aclmdlCreateDataset(void)
{
    MOCK_FAULT_RETURN(NULL);
    aclmdlDataset *d = calloc(1, sizeof *d);
    if (d == NULL)
        return NULL;
    mock_lock();
    d->next = g_datasets;
    g_datasets = d;
    g_ndatasets++;
    mock_unlock();
    return d;
}

MOCK_EXPORT aclError aclmdlDestroyDataset(const aclmdlDataset *dataset)
{
    MOCK_FAULT_RETURN_CODE();
    if (dataset == NULL)
        return ACL_ERROR_INVALID_PARAM;
    mock_lock();
    for (aclmdlDataset **pp = &g_datasets; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == dataset) {
            aclmdlDataset *d = *pp;
            *pp = d->next;
            g_ndatasets--;
            mock_unlock();
            free(d->bufs);   /* the buffers themselves stay the caller's */
            free(d);
            return ACL_SUCCESS;
        }
    }
    mock_unlock();
    return ACL_ERROR_INVALID_PARAM;   /* deviation: a double destroy is a double free in CANN */
}

MOCK_EXPORT aclError aclmdlAddDatasetBuffer(aclmdlDataset *dataset, aclDataBuffer *dataBuffer)
{
    MOCK_FAULT_RETURN_CODE();
    if (dataset == NULL || dataBuffer == NULL)
        return ACL_ERROR_INVALID_PARAM;
    aclError ret = ACL_SUCCESS;
    mock_lock();
    if (!dataset_live(dataset) || !buffer_live(dataBuffer)) {
        ret = ACL_ERROR_INVALID_PARAM;   /* deviation: CANN stores whatever it is given */
    } else if (dataset->n == dataset->cap) {
        size_t ncap = dataset->cap ? dataset->cap * 2 : 4;
        aclDataBuffer **n = realloc(dataset->bufs, ncap * sizeof *n);
        if (n == NULL) {
            ret = ACL_ERROR_BAD_ALLOC;
        } else {
            dataset->bufs = n;
            dataset->cap = ncap;
        }
    }
    if (ret == ACL_SUCCESS)
        dataset->bufs[dataset->n++] = dataBuffer;   /* the same buffer may be added twice */
    mock_unlock();
    return ret;
}

MOCK_EXPORT size_t aclmdlGetDatasetNumBuffers(const aclmdlDataset *dataset)
{
    MOCK_FAULT_RETURN(0);
    if (dataset == NULL)
        return 0;
    mock_lock();
    size_t n = dataset_live(dataset) ? dataset->n : 0;
    mock_unlock();
    return n;
}

void mock_model_stats(aclmockStats *out)
{
    out->datasetsInUse = g_ndatasets;
    out->dataBuffersInUse = g_nbuffers;
}
