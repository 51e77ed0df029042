/* Step info (reference 3.5): aclprofCreateStepInfo / GetStepTimestamp / DestroyStepInfo.
 *
 * Each object takes its indexId from a global counter starting at 1 and may record each
 * tag once. A recorded step goes to the running session's event log (host/msproftx.jsonl)
 * as {"kind":"step",...}; without a running session it is accepted and not recorded.
 * A step whose end is recorded after its start, while a model is subscribed, also becomes
 * a keypoint record in the subscription pipe (subscribe_queue.c, mock_subscribe_emit_keypoint).
 */
#include <stdlib.h>

#include "mock_internal.h"

struct aclprofStepInfo {
    bool startFlag;
    bool endFlag;
    uint64_t indexId;
    uint64_t start_ns;              /* host time of ACL_STEP_START, for the keypoint */
    struct aclprofStepInfo *next;   /* registry of live objects */
};

static aclprofStepInfo *g_steps;
static uint64_t g_last_index;

/* Pointer comparison only: an unknown pointer is rejected, never dereferenced. */
static aclprofStepInfo **step_find(const aclprofStepInfo *si)
{
    for (aclprofStepInfo **pp = &g_steps; *pp; pp = &(*pp)->next) {
        if (*pp == si)
            return pp;
    }
    return NULL;
}

MOCK_EXPORT aclprofStepInfo *aclprofCreateStepInfo(void)
{
    MOCK_FAULT_RETURN(NULL);
    aclprofStepInfo *si = calloc(1, sizeof *si);
    if (!si)
        return NULL;
    mock_lock();
    si->indexId = ++g_last_index;
    si->next = g_steps;
    g_steps = si;
    mock_unlock();
    return si;
}

/* NULL only logs in the real library; an unknown or destroyed pointer is ignored here
 * (a double free in the real one). */
MOCK_EXPORT void aclprofDestroyStepInfo(aclprofStepInfo *stepinfo)
{
    MOCK_FAULT_RETURN_VOID();
    if (stepinfo == NULL)
        return;
    mock_lock();
    aclprofStepInfo **pp = step_find(stepinfo);
    if (pp)
        *pp = stepinfo->next;
    mock_unlock();
    if (pp)
        free(stepinfo);
}

/* `stream` is not used: the mock has no device timeline, NULL (default stream) is fine. */
MOCK_EXPORT aclError aclprofGetStepTimestamp(aclprofStepInfo *stepInfo, aclprofStepTag tag,
                                             aclrtStream stream)
{
    MOCK_FAULT_RETURN_CODE();
    (void)stream;
    if (stepInfo == NULL)
        return ACL_ERROR_INVALID_PARAM;
    int ret = ACL_ERROR_INVALID_PARAM;
    mock_lock();
    if (step_find(stepInfo)) {
        /* prof_acl_core.cpp:57-69 (audit row 17): every tag but START sets the END flag, but
         * only ACL_STEP_END itself is refused a second time; any other value always passes
         * (the real one hands the raw tag on; the mock's event log records an END). */
        bool *flag = tag == ACL_STEP_START ? &stepInfo->startFlag : &stepInfo->endFlag;
        bool repeat = *flag && (tag == ACL_STEP_START || tag == ACL_STEP_END);
        if (!repeat) {
            *flag = true;
            uint64_t now = mock_now_ns();
            mock_msproftx_log_step(stepInfo->indexId, (int)tag, now);
            if (tag == ACL_STEP_START)
                stepInfo->start_ns = now;
            else if (stepInfo->startFlag)   /* an end without a start makes no keypoint */
                mock_subscribe_emit_keypoint(stepInfo->start_ns, now);
            ret = ACL_SUCCESS;
        }
    }
    mock_unlock();
    return ret;
}

void mock_stepinfo_reset(void)
{
    while (g_steps) {
        aclprofStepInfo *next = g_steps->next;
        free(g_steps);
        g_steps = next;
    }
    g_last_index = 0;
}
