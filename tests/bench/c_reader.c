/* C-only subscription reader: the practical limit for bench_subscribe.py.
 *
 * Built by the benchmark at run time (never committed as a binary):
 *   cc -O2 -I cdefs c_reader.c <mock libascendcl.so> -Wl,-rpath,<its dir> -lpthread
 *
 * Usage: c_reader MODEL_FILE ITERATIONS READ_RECORDS [raw]
 *
 * Loads the model, then runs one untimed warm-up subscription and one timed one, each: subscribe
 * with a pipe (1 MiB, as aclprof's reader uses), start a reader thread that reads
 * READ_RECORDS records at a time, reassembles partial records and, for every record, makes
 * the same library calls aclprof's compiled loop makes (GetOpTypeLen, GetOpType,
 * GetOpNameLen, GetOpName on a one-record slice) and reads the numeric fields; execute the
 * model ITERATIONS times (realtime off), wait for the mock's writer to go idle, unsubscribe
 * (the library closes the write end) and join the reader at EOF. Prints one line:
 * "records=<n> seconds=<s> rate=<records/s> ...", timed from the first execute to the last
 * record decoded.
 *
 * With "raw" the reader only reads and counts records, calling nothing (the name table
 * keeps every entry, harmless in this short-lived process). It is not faster: a reader that
 * is always waiting is woken by each of the writer's one-record write() calls.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "acl_base.h"
#include "acl_prof.h"
#include "acl_runtime.h"
#include "aclmock.h"

/* Field offsets of the 80-byte ProfOpDesc (reference section 4). */
enum { OFF_MODEL = 4, OFF_FLAG = 8, OFF_THREAD = 12, OFF_INDEX = 16, OFF_DURATION = 24,
       OFF_START = 32, OFF_END = 40, OFF_EXEC = 48, OFF_DEV = 72 };

typedef struct {
    int fd;
    size_t rec_size;
    size_t read_records;
    int raw;
    uint64_t records;
    uint64_t failures;
    uint64_t checksum;
} reader_t;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t u64_at(const unsigned char *p, size_t off)
{
    uint64_t v;
    memcpy(&v, p + off, sizeof v);
    return v;
}

static uint32_t u32_at(const unsigned char *p, size_t off)
{
    uint32_t v;
    memcpy(&v, p + off, sizeof v);
    return v;
}

/* One string through a Len + Get pair; returns its length without the NUL, or -1. */
static long fetch(aclError (*get_len)(const void *, size_t, uint32_t, size_t *),
                  aclError (*get)(const void *, size_t, uint32_t, char *, size_t),
                  const unsigned char *rec, size_t size, char *buf, size_t cap)
{
    size_t len = 0;
    if (get_len(rec, size, 0, &len) != ACL_SUCCESS || len == 0 || len > cap)
        return -1;
    if (get(rec, size, 0, buf, len) != ACL_SUCCESS)
        return -1;
    return (long)strlen(buf);
}

static void *reader_main(void *arg)
{
    reader_t *r = arg;
    size_t cap = r->rec_size * r->read_records;
    unsigned char *buf = malloc(cap);
    size_t filled = 0;
    char name[1024], type[1024];
    for (;;) {
        ssize_t n = read(r->fd, buf + filled, cap - filled);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        filled += (size_t)n;
        size_t whole = filled / r->rec_size;
        if (r->raw)
            r->records += whole;   /* counted, not decoded */
        for (size_t i = 0; !r->raw && i < whole; i++) {
            const unsigned char *rec = buf + i * r->rec_size;
            long t = fetch(aclprofGetOpTypeLen, aclprofGetOpType, rec, r->rec_size, type,
                           sizeof type);
            long m = fetch(aclprofGetOpNameLen, aclprofGetOpName, rec, r->rec_size, name,
                           sizeof name);
            if (t < 0 || m < 0)
                r->failures++;
            /* The numeric fields, as a decoder would store them. */
            r->checksum += u32_at(rec, OFF_MODEL) + u32_at(rec, OFF_FLAG) +
                           u32_at(rec, OFF_THREAD) + u64_at(rec, OFF_START) +
                           u64_at(rec, OFF_END) + u64_at(rec, OFF_DURATION) +
                           u64_at(rec, OFF_EXEC) + (uint64_t)(t + m);
            if (r->rec_size >= OFF_DEV + 4)
                r->checksum += u32_at(rec, OFF_DEV);
            r->records++;
        }
        size_t used = whole * r->rec_size;
        memmove(buf, buf + used, filled - used);
        filled -= used;
    }
    free(buf);
    return NULL;
}

/* One whole subscription: subscribe, start the reader, execute, drain, unsubscribe, join.
 * Returns 0 and fills *out and *seconds (first execute to last record decoded). */
static int run_once(uint32_t model_id, long iterations, reader_t *out, double *seconds)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0)
        return 1;
    fcntl(fds[1], F_SETPIPE_SZ, 1 << 20);   /* as aclprof does; ignored if capped */
    static int write_fd;                    /* the library keeps a pointer to it */
    write_fd = fds[1];
    aclError rc = ACL_SUCCESS;
    aclprofSubscribeConfig *cfg = aclprofCreateSubscribeConfig(1, ACL_AICORE_NONE, &write_fd);
    if (cfg == NULL || (rc = aclprofModelSubscribe(model_id, cfg)) != ACL_SUCCESS) {
        fprintf(stderr, "subscribe failed: %d\n", rc);
        return 1;
    }
    out->fd = fds[0];
    pthread_t thread;
    pthread_create(&thread, NULL, reader_main, out);

    /* Empty datasets: CANN rejects NULL ones, and the mock's models have no tensors. */
    aclmdlDataset *in = aclmdlCreateDataset(), *no_out = aclmdlCreateDataset();
    if (in == NULL || no_out == NULL) {
        fprintf(stderr, "aclmdlCreateDataset failed\n");
        return 1;
    }
    uint64_t t0 = now_ns();
    for (long i = 0; i < iterations; i++) {
        if ((rc = aclmdlExecute(model_id, in, no_out)) != ACL_SUCCESS) {
            fprintf(stderr, "aclmdlExecute failed: %d\n", rc);
            return 1;
        }
    }
    aclmockWaitWriterIdle(600000);
    aclprofModelUnSubscribe(model_id);   /* flushes, closes write_fd: the reader sees EOF */
    pthread_join(thread, NULL);
    *seconds = (double)(now_ns() - t0) / 1e9;
    close(fds[0]);
    aclprofDestroySubscribeConfig(cfg);
    aclmdlDestroyDataset(in);
    aclmdlDestroyDataset(no_out);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 4 && !(argc == 5 && strcmp(argv[4], "raw") == 0)) {
        fprintf(stderr, "usage: %s MODEL_FILE ITERATIONS READ_RECORDS [raw]\n", argv[0]);
        return 2;
    }
    long iterations = strtol(argv[2], NULL, 10);
    long read_records = strtol(argv[3], NULL, 10);
    if (iterations <= 0 || read_records <= 0)
        return 2;
    aclmockSetRealtime(0);
    uint32_t model_id = 0;
    aclError rc = aclmdlLoadFromFile(argv[1], &model_id);
    if (rc != ACL_SUCCESS) {
        fprintf(stderr, "aclmdlLoadFromFile: %d\n", rc);
        return 1;
    }
    size_t rec_size = 0;
    aclprofGetOpDescSize(&rec_size);

    /* A warm-up run first, untimed, as the Python variants get one: it grows the mock's
     * record ring and name table (and faults their pages in) once. The decoding work
     * is done in both runs; with "raw" the name table keeps the warm-up's entries. */
    reader_t warm = { .rec_size = rec_size, .read_records = (size_t)read_records,
                      .raw = argc == 5 };
    double seconds = 0;
    if (run_once(model_id, iterations, &warm, &seconds) != 0)
        return 1;
    aclmockStats st0;
    aclmockGetStats(&st0);

    reader_t r = { .rec_size = rec_size, .read_records = (size_t)read_records,
                   .raw = argc == 5 };
    if (run_once(model_id, iterations, &r, &seconds) != 0)
        return 1;
    aclmockStats st;
    aclmockGetStats(&st);
    uint64_t emitted = st.recordsEmitted - st0.recordsEmitted;
    uint64_t dropped = st.recordsDropped - st0.recordsDropped;
    printf("records=%llu seconds=%.6f rate=%.0f emitted=%llu dropped=%llu failures=%llu "
           "checksum=%llu\n", (unsigned long long)r.records, seconds, (double)r.records / seconds,
           (unsigned long long)emitted, (unsigned long long)dropped,
           (unsigned long long)r.failures, (unsigned long long)r.checksum);
    aclmdlUnload(model_id);
    return r.records == emitted && r.failures == 0 && warm.failures == 0 ? 0 : 3;
}
