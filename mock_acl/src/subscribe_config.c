/* Subscribe configs: aclprofCreateSubscribeConfig/DestroySubscribeConfig. Live configs are
 * kept in a registry (under g_mock_lock) so that a destroyed or foreign pointer is rejected
 * by aclprofModelSubscribe and aclprofDestroySubscribeConfig (README "Deviations and
 * choices (subscription)").
 */
#include <stdlib.h>

#include "subscribe_internal.h"

/* Config registry, under g_mock_lock: lets Destroy reject pointers it never returned. */
static aclprofSubscribeConfig **g_cfgs;
static size_t g_ncfgs, g_cfgcap;

MOCK_EXPORT aclprofSubscribeConfig *aclprofCreateSubscribeConfig(int8_t timeInfoSwitch,
                                                                 aclprofAicoreMetrics aicoreMetrics,
                                                                 void *fd)
{
    MOCK_FAULT_RETURN(NULL);
    if (fd == NULL || (timeInfoSwitch != 0 && timeInfoSwitch != 1))
        return NULL;   /* metrics are not checked here, as in CANN */
    aclprofSubscribeConfig *cfg = malloc(sizeof *cfg);
    if (cfg == NULL)
        return NULL;
    cfg->timeInfo = timeInfoSwitch;
    cfg->aicoreMetrics = aicoreMetrics;
    cfg->fd = fd;
    mock_lock();
    if (g_ncfgs == g_cfgcap) {
        size_t ncap = g_cfgcap ? g_cfgcap * 2 : 16;
        aclprofSubscribeConfig **n = realloc(g_cfgs, ncap * sizeof *n);
        if (n == NULL) {
            mock_unlock();
            free(cfg);
            return NULL;
        }
        g_cfgs = n;
        g_cfgcap = ncap;
    }
    g_cfgs[g_ncfgs++] = cfg;
    mock_unlock();
    return cfg;
}

/* Caller holds g_mock_lock. */
static size_t cfg_find(const aclprofSubscribeConfig *cfg)
{
    for (size_t i = 0; i < g_ncfgs; i++) {
        if (g_cfgs[i] == cfg)
            return i;
    }
    return SIZE_MAX;
}

/* Deviation: CANN deletes whatever it is given (a second destroy is a double free); the
 * mock rejects pointers it did not return, or already destroyed, with INVALID_PARAM. */
MOCK_EXPORT aclError aclprofDestroySubscribeConfig(const aclprofSubscribeConfig *cfg)
{
    MOCK_FAULT_RETURN_CODE();
    if (cfg == NULL)
        return ACL_ERROR_INVALID_PARAM;
    mock_lock();
    size_t i = cfg_find(cfg);
    if (i == SIZE_MAX) {
        mock_unlock();
        return ACL_ERROR_INVALID_PARAM;
    }
    free(g_cfgs[i]);
    g_cfgs[i] = g_cfgs[--g_ncfgs];
    mock_unlock();
    return ACL_SUCCESS;
}

bool sub_config_live(const aclprofSubscribeConfig *cfg)
{
    return cfg_find(cfg) != SIZE_MAX;
}

void sub_configs_reset(void)
{
    mock_lock();
    for (size_t i = 0; i < g_ncfgs; i++)
        free(g_cfgs[i]);
    free(g_cfgs);
    g_cfgs = NULL;
    g_ncfgs = g_cfgcap = 0;
    mock_unlock();
}
