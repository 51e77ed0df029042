/* The table of loaded models: what aclmdlLoadFromFile adds and aclmdlUnload removes (model.c),
 * what aclprofModelSubscribe looks up (mock_model_exists/_device), and its reset and fork
 * hooks (control.c). A file of its own so that the subscription, which asks whether a model
 * is loaded, and the model runtime, which hands its records to the subscription, do not
 * depend on each other.
 *
 * Under g_mock_lock. Ids start at 1 and are never reused until aclmockReset. A model is
 * reference counted (the table's reference + one per running execution), so an aclmdlUnload
 * (or aclmockReset) during an execution frees it when the execution ends.
 */
#include <stdlib.h>
#include <string.h>

#include "model_internal.h"

static mock_model **g_models;
static size_t g_nmodels, g_modelcap;
static uint32_t g_next_id = 1;

/* fork(), in the child, with g_mock_lock held by the prepare handler (so g_models is
 * consistent): another thread of the parent may have been executing a model, holding its
 * exec_lock; that thread does not exist in the child, so the lock is made free again. */
void models_fork_child(void)
{
    for (size_t i = 0; i < g_nmodels; i++)
        pthread_mutex_init(&g_models[i]->exec_lock, NULL);
}

void model_free(mock_model *m)
{
    for (size_t i = 0; i < m->nops; i++)
        mock_op_free(&m->ops[i]);
    free(m->ops);
    pthread_mutex_destroy(&m->exec_lock);
    free(m);
}

void model_release(mock_model *m)
{
    if (atomic_fetch_sub(&m->refs, 1) == 1)
        model_free(m);
}

static size_t model_index(uint32_t id)
{
    for (size_t i = 0; i < g_nmodels; i++) {
        if (g_models[i]->id == id)
            return i;
    }
    return SIZE_MAX;
}

mock_model *model_table_find(uint32_t id)
{
    size_t i = model_index(id);
    return i == SIZE_MAX ? NULL : g_models[i];
}

aclError model_table_add(mock_model *m)
{
    if (g_next_id == UINT32_MAX)
        return ACL_ERROR_FAILURE;   /* ids exhausted: never reuse one */
    if (g_nmodels == g_modelcap) {
        size_t ncap = g_modelcap ? g_modelcap * 2 : 16;
        mock_model **n = realloc(g_models, ncap * sizeof *n);
        if (n == NULL)
            return ACL_ERROR_BAD_ALLOC;
        g_models = n;
        g_modelcap = ncap;
    }
    m->id = g_next_id++;
    g_models[g_nmodels++] = m;
    return ACL_SUCCESS;
}

mock_model *model_table_remove(uint32_t id)
{
    size_t i = model_index(id);
    if (i == SIZE_MAX)
        return NULL;
    mock_model *m = g_models[i];
    memmove(&g_models[i], &g_models[i + 1], (g_nmodels - i - 1) * sizeof *g_models);
    g_nmodels--;
    return m;
}

bool mock_model_exists(uint32_t model_id)
{
    return model_index(model_id) != SIZE_MAX;
}

uint32_t mock_model_device(uint32_t model_id)
{
    size_t i = model_index(model_id);
    return i == SIZE_MAX ? 0 : g_models[i]->device;
}

void mock_model_reset(void)
{
    for (size_t i = 0; i < g_nmodels; i++)
        model_release(g_models[i]);
    free(g_models);
    g_models = NULL;
    g_nmodels = g_modelcap = 0;
    g_next_id = 1;
}
