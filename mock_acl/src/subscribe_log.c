/* The emit log (aclmockSetEmitLog; README "Emit log"): one TAB-separated line per emitted
 * record, written when the record is queued, so that tests can compare what a reader got
 * with what the mock produced. The writer flushes it before each batch.
 */
#include <inttypes.h>
#include <stdio.h>

#include "subscribe_internal.h"

pthread_mutex_t g_log_lock = PTHREAD_MUTEX_INITIALIZER;
static FILE *g_log;
static atomic_bool g_log_dirty;

static void log_hex(FILE *f, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    char buf[256];
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        buf[o++] = hex[*p >> 4];
        buf[o++] = hex[*p & 0xf];
        if (o == sizeof buf) {
            fwrite(buf, 1, o, f);
            o = 0;
        }
    }
    fwrite(buf, 1, o, f);
}

void sub_log_record(const ProfOpDesc *r, const mock_op *op, uint32_t device_id,
                       bool corrupt)
{
    pthread_mutex_lock(&g_log_lock);
    if (g_log != NULL) {
        fprintf(g_log, "%" PRIu32 "\t%" PRIu64 "\t", r->modelId, r->opIndex);
        log_hex(g_log, op->name);
        fputc('\t', g_log);
        log_hex(g_log, op->type);
        fprintf(g_log, "\t%" PRIu64 "\t%" PRIu64 "\t%" PRIu64 "\t%" PRIu32 "\t%" PRIu32
                "\t%" PRIu32 "\t%d\n", r->start, r->end, r->duration, r->flag, r->threadId,
                device_id, corrupt ? 1 : 0);
        atomic_store_explicit(&g_log_dirty, true, memory_order_relaxed);
    }
    pthread_mutex_unlock(&g_log_lock);
}

/* Makes every line logged so far visible in the file. The writer calls it before each
 * batch, so a record a reader got from the pipe is always already in the log. */
void sub_log_flush(void)
{
    if (!atomic_load_explicit(&g_log_dirty, memory_order_relaxed))
        return;
    pthread_mutex_lock(&g_log_lock);
    if (g_log != NULL)
        fflush(g_log);
    atomic_store_explicit(&g_log_dirty, false, memory_order_relaxed);
    pthread_mutex_unlock(&g_log_lock);
}

MOCK_EXPORT int aclmockSetEmitLog(const char *path)
{
    int ret = ACL_SUCCESS;
    pthread_mutex_lock(&g_log_lock);
    if (g_log != NULL)
        fclose(g_log);
    g_log = NULL;
    atomic_store(&g_log_dirty, false);
    if (path != NULL) {
        g_log = fopen(path, "a");
        if (g_log == NULL)
            ret = ACL_ERROR_INVALID_PARAM;
    }
    pthread_mutex_unlock(&g_log_lock);
    return ret;
}
