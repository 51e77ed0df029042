/* Injected AI Core exceptions (issue 24; mock_acl/README.md "AI Core exceptions"):
 * aclmockInjectOpFailure/aclmockClearOpFailure arm and disarm a failing op on a loaded model,
 * and model_failure_due() tells aclmdlExecute, for each execution, whether and where it fails.
 * The state lives on the model (model_internal.h), guarded by its exec_lock.
 */
#include <string.h>

#include "model_internal.h"

/* The model, with a reference the caller drops (model_release), or NULL if unknown. */
static mock_model *find_and_hold(uint32_t model_id)
{
    mock_lock();
    mock_model *m = model_table_find(model_id);
    if (m != NULL)
        atomic_fetch_add(&m->refs, 1);
    mock_unlock();
    return m;
}

MOCK_EXPORT int aclmockInjectOpFailure(uint32_t modelId, const char *opName, uint32_t opIndex,
                                       uint32_t everyNth, uint32_t retcode, int32_t executeCode)
{
    mock_model *m = find_and_hold(modelId);
    if (m == NULL)
        return -1;
    size_t pos = m->nops;
    if (opName != NULL) {
        for (size_t k = 0; k < m->nops; k++) {
            if (strcmp(m->ops[k].name, opName) == 0) {
                pos = k;   /* the first op of that name */
                break;
            }
        }
    } else if (opIndex < m->nops) {
        pos = opIndex;
    }
    int rc = -1;
    if (pos < m->nops) {
        pthread_mutex_lock(&m->exec_lock);
        m->fail_armed = true;
        m->fail_op = pos;
        m->fail_every = everyNth;
        m->fail_seen = 0;
        m->fail_retcode = retcode != 0 ? retcode : ACL_ERROR_RT_AICORE_EXCEPTION;
        m->fail_execute_code = executeCode != 0 ? executeCode : ACL_ERROR_GE_FAILURE;
        pthread_mutex_unlock(&m->exec_lock);
        rc = 0;
    }
    model_release(m);
    return rc;
}

MOCK_EXPORT int aclmockClearOpFailure(uint32_t modelId)
{
    mock_model *m = find_and_hold(modelId);
    if (m == NULL)
        return -1;
    pthread_mutex_lock(&m->exec_lock);
    m->fail_armed = false;
    pthread_mutex_unlock(&m->exec_lock);
    model_release(m);
    return 0;
}

bool model_failure_due(mock_model *m, size_t *op)
{
    if (!m->fail_armed)
        return false;
    uint64_t n = ++m->fail_seen;
    bool due;
    if (m->fail_every == 0) {
        due = true;
        m->fail_armed = false;   /* once */
    } else {
        due = n % m->fail_every == 0;
    }
    if (due)
        *op = m->fail_op;
    return due;
}
