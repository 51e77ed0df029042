/* What the subscription test files share (test_subscribe*.c, test_model.c): independent
 * reference implementations of the record layout and signature, temp files and model
 * files, a pipe reader thread, pipes and subscribe shortcuts, step helpers.
 *
 * Records are checked against the reference (section 4) independently of the mock: field
 * offsets are spelled out here and the signature is recomputed with a bit-by-bit CRC-32C.
 * Helpers are `static inline` (variables `unused`) so that a file that does not use one
 * gets no warning. main() of each file calls tmp_init() first and tmp_cleanup() last.
 */
#ifndef ACLMOCK_TEST_SUBSCRIBE_COMMON_H
#define ACLMOCK_TEST_SUBSCRIBE_COMMON_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_common.h"

/* ---- independent reference implementations ------------------------------------------- */

/* Threads of this process whose name (/proc/self/task/<tid>/comm) starts with `prefix`;
 * -1 without /proc. */
static inline int threads_named(const char *prefix)
{
    char path[300], comm[32];
    int n = 0;
    DIR *d = opendir("/proc/self/task");
    if (d == NULL)
        return -1;
    for (struct dirent *de; (de = readdir(d)) != NULL;) {
        if (de->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", de->d_name);
        FILE *f = fopen(path, "r");
        if (f == NULL)
            continue;
        if (fgets(comm, sizeof comm, f) && strncmp(comm, prefix, strlen(prefix)) == 0)
            n++;
        fclose(f);
    }
    closedir(d);
    return n;
}

/* threads_named() once the threads that were joined have left /proc: pthread_join returns
 * when the kernel clears the thread's tid (mm_release, early in its exit), and the task is
 * unlisted from /proc/self/task only later, in release_task; a check right after the join
 * saw the old count once in CI (stop 40, test_fidelity3) after passing in earlier runs. Polls every 1 ms until the count is
 * `expected` or 2 s have passed, and returns the last count: a thread that really stays is
 * still reported. */
static inline int threads_named_settled(const char *prefix, int expected)
{
    int n = threads_named(prefix);
    for (int waited_ms = 0; n != expected && waited_ms < 2000; waited_ms++) {
        nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
        n = threads_named(prefix);
    }
    return n;
}

/* Bitwise CRC-32C, reflected polynomial 0x82F63B78, init ~0, no final XOR. */
static inline uint32_t ref_crc_raw(const unsigned char *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    while (n--) {
        c ^= *p++;
        for (int k = 0; k < 8; k++)
            c = (c & 1u) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    }
    return c;
}

static inline uint32_t ref_signature(const unsigned char *rec, size_t size)
{
    return ref_crc_raw(rec + 4, size - 4);
}

/* ProfOpDesc offsets (reference section 4). */
enum { OFF_SIG = 0, OFF_MODEL = 4, OFF_FLAG = 8, OFF_TID = 12, OFF_INDEX = 16, OFF_DUR = 24,
       OFF_START = 32, OFF_END = 40, OFF_EXEC = 48, OFF_CUBE = 56, OFF_VEC = 64, OFF_DEV = 72 };

static inline uint32_t rd32(const unsigned char *r, size_t off)
{
    uint32_t v;
    memcpy(&v, r + off, 4);
    return v;
}

static inline uint64_t rd64(const unsigned char *r, size_t off)
{
    uint64_t v;
    memcpy(&v, r + off, 8);
    return v;
}

static inline void wr32(unsigned char *r, size_t off, uint32_t v)
{
    memcpy(r + off, &v, 4);
}

/* ---- temp files ------------------------------------------------------------------------ */

static char g_dir[64] __attribute__((unused));

static inline void tmp_init(void)
{
    snprintf(g_dir, sizeof g_dir, "/tmp/aclmock_sub_XXXXXX");
    if (mkdtemp(g_dir) == NULL) {
        perror("mkdtemp");
        exit(2);
    }
}

static inline void tmp_cleanup(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", g_dir);
}

static inline const char *tmp_path(const char *name)
{
    static char p[256];
    snprintf(p, sizeof p, "%s/%s", g_dir, name);
    return p;
}

static inline void write_text(const char *path, const char *text, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL) {
        perror(path);
        exit(2);
    }
    fwrite(text, 1, len, f);
    fclose(f);
}

/* Loads `text` as a model file; returns the aclError, model id in *id. */
static inline aclError load_text(const char *text, uint32_t *id)
{
    static int n;
    char name[32];
    snprintf(name, sizeof name, "model%d.txt", n++);
    const char *p = tmp_path(name);
    write_text(p, text, strlen(text));
    return aclmdlLoadFromFile(p, id);
}

/* The model of most tests: tricky names (empty, > 257 bytes, not UTF-8, escapes). */
#define LONG_NAME_LEN 300
static char g_long_name[LONG_NAME_LEN + 1] __attribute__((unused));
static const char *const k_names[3] __attribute__((unused)) = { "conv1", "", g_long_name };
static const char *const k_types[3] __attribute__((unused)) = {
    "Conv2D", "\xff\xfe", "Tab\tNew\nLine\\x" };
static const uint32_t k_flags[3] __attribute__((unused)) = { 0, 1, 2 };
static const uint32_t k_tids[3] __attribute__((unused)) = { 0, 0, 4242 };

static inline uint32_t load_std_model(uint32_t device)
{
    for (int i = 0; i < LONG_NAME_LEN; i++)
        g_long_name[i] = (char)('a' + i % 26);
    char text[2048];
    snprintf(text, sizeof text,
             "aclmock-model 1\n"
             "# three ops\n"
             "device %u\n"
             "seed 7\n"
             "gap 100\n"
             "\n"
             "op\tconv1\tConv2D\t5000\t1000\n"
             "op\t\t\\xff\\xFE\t2000\t0\t1\n"
             "op\t%s\tTab\\tNew\\nLine\\\\x\t3000\t0\t2\t4242\n",
             device, g_long_name);
    uint32_t id = 0;
    aclError ret = load_text(text, &id);
    if (ret != ACL_SUCCESS) {
        fprintf(stderr, "load_std_model: %d\n", ret);
        exit(2);
    }
    return id;
}

/* ---- pipe reader thread ------------------------------------------------------------------ */

typedef struct reader {
    int fd;
    size_t read_size;     /* bytes per read() */
    unsigned sleep_us;    /* pause between reads (slow reader) */
    size_t rec_size;
    bool decode;          /* fetch names/types with the getters as records arrive */
    unsigned char *buf;
    size_t len, cap;
    char **names, **types; /* per record, when decode */
    size_t ndecoded, scap;
    int errors;           /* getter failures while decoding */
    bool eof;
    bool call_mock;       /* call aclmockGetStats after every read (takes g_mock_lock) */
    pthread_t thread;
} reader;

static inline char *fetch_string(const unsigned char *rec, size_t size, bool name)
{
    size_t n = 0;
    aclError r = name ? aclprofGetOpNameLen(rec, size, 0, &n) : aclprofGetOpTypeLen(rec, size, 0, &n);
    if (r != ACL_SUCCESS || n == 0)
        return NULL;
    char *s = calloc(1, n);
    if (s == NULL)
        return NULL;
    r = name ? aclprofGetOpName(rec, size, 0, s, n) : aclprofGetOpType(rec, size, 0, s, n);
    if (r != ACL_SUCCESS) {
        free(s);
        return NULL;
    }
    return s;
}

static inline void reader_decode_new(reader *rd)
{
    while ((rd->ndecoded + 1) * rd->rec_size <= rd->len) {
        const unsigned char *rec = rd->buf + rd->ndecoded * rd->rec_size;
        if (rd->ndecoded == rd->scap) {   /* geometric growth: ASan's realloc always copies */
            size_t ncap = rd->scap ? rd->scap * 2 : 1024;
            char **nn = realloc(rd->names, ncap * sizeof *nn);
            if (nn) rd->names = nn;
            char **tt = realloc(rd->types, ncap * sizeof *tt);
            if (tt) rd->types = tt;
            if (!nn || !tt) {
                rd->errors++;
                return;
            }
            rd->scap = ncap;
        }
        size_t i = rd->ndecoded++;
        if (rd32(rec, OFF_SIG) != ref_signature(rec, rd->rec_size)) {
            rd->names[i] = rd->types[i] = NULL;   /* corrupt on purpose: nothing to fetch */
            continue;
        }
        rd->names[i] = fetch_string(rec, rd->rec_size, true);
        rd->types[i] = fetch_string(rec, rd->rec_size, false);
        if (!rd->names[i] || !rd->types[i])
            rd->errors++;
    }
}

static inline void *reader_main(void *arg)
{
    reader *rd = arg;
    for (;;) {
        if (rd->cap - rd->len < rd->read_size) {
            size_t ncap = rd->cap ? rd->cap * 2 : 65536;
            while (ncap - rd->len < rd->read_size)
                ncap *= 2;
            unsigned char *nb = realloc(rd->buf, ncap);
            if (nb == NULL)
                break;
            rd->buf = nb;
            rd->cap = ncap;
        }
        ssize_t n = read(rd->fd, rd->buf + rd->len, rd->read_size);
        if (n == 0) {
            rd->eof = true;
            break;
        }
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            break;
        }
        rd->len += (size_t)n;
        if (rd->decode)
            reader_decode_new(rd);
        if (rd->call_mock) {
            aclmockStats st;
            aclmockGetStats(&st);
        }
        if (rd->sleep_us)
            usleep(rd->sleep_us);
    }
    return NULL;
}

static inline void reader_start(reader *rd, int fd, size_t rec_size, size_t read_size, bool decode)
{
    memset(rd, 0, sizeof *rd);
    rd->fd = fd;
    rd->rec_size = rec_size;
    rd->read_size = read_size;
    rd->decode = decode;
    pthread_create(&rd->thread, NULL, reader_main, rd);
}

static inline void reader_join(reader *rd)
{
    pthread_join(rd->thread, NULL);
}

static inline void reader_free(reader *rd)
{
    for (size_t i = 0; i < rd->ndecoded; i++) {
        free(rd->names[i]);
        free(rd->types[i]);
    }
    free(rd->names);
    free(rd->types);
    free(rd->buf);
}

static inline aclmockStats stats(void)
{
    aclmockStats s;
    aclmockGetStats(&s);
    return s;
}

/* A pipe whose write end lives in a static int, so an aclmockReset in a later test (which
 * writes -1 into it) never touches a dead stack frame. */
static int g_pipe[2][2] __attribute__((unused));

static inline void make_pipe(int which)
{
    if (pipe(g_pipe[which]) != 0) {
        perror("pipe");
        exit(2);
    }
}

static inline aclprofSubscribeConfig *subscribe_std(uint32_t model, int which)
{
    aclprofSubscribeConfig *cfg = aclprofCreateSubscribeConfig(1, ACL_AICORE_NONE, &g_pipe[which][1]);
    if (cfg == NULL)
        return NULL;
    if (aclprofModelSubscribe(model, cfg) != ACL_SUCCESS) {
        aclprofDestroySubscribeConfig(cfg);
        return NULL;
    }
    return cfg;
}

#define N_EXEC 50

/* Collects records of one unread execution of the standard model (names still stored). */
static inline size_t collect(uint32_t model, int executions, unsigned char **out, size_t rec_size)
{
    make_pipe(0);
    int rfd = g_pipe[0][0];
    reader rd;
    reader_start(&rd, rfd, rec_size, 4096, false);
    aclprofSubscribeConfig *cfg = subscribe_std(model, 0);
    for (int i = 0; i < executions; i++)
        execute_empty(model);
    aclprofModelUnSubscribe(model);
    reader_join(&rd);
    aclprofDestroySubscribeConfig(cfg);
    close(rfd);
    *out = rd.buf;
    return rd.len;
}

static inline void hex(char *out, const char *s)
{
    static const char h[] = "0123456789abcdef";
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        *out++ = h[*p >> 4];
        *out++ = h[*p & 15];
    }
    *out = 0;
}

typedef struct exec_arg {
    uint32_t model;
    int times;
} exec_arg;

static inline void *exec_main(void *p)
{
    exec_arg *a = p;
    for (int i = 0; i < a->times; i++)
        execute_empty(a->model);
    return NULL;
}

/* static: the mock keeps pointers to the write-end ints */
static int g_dpipe[3][2] __attribute__((unused));

static inline void make_dpipe(int which)
{
    if (pipe2(g_dpipe[which], O_CLOEXEC) != 0) {
        perror("pipe2");
        exit(2);
    }
}

static inline aclprofSubscribeConfig *subscribe_dpipe(uint32_t model, int which)
{
    aclprofSubscribeConfig *cfg = aclprofCreateSubscribeConfig(1, ACL_AICORE_NONE,
                                                               &g_dpipe[which][1]);
    if (cfg != NULL && aclprofModelSubscribe(model, cfg) != ACL_SUCCESS) {
        aclprofDestroySubscribeConfig(cfg);
        cfg = NULL;
    }
    return cfg;
}

/* Reads what the pipe holds now without blocking: the record count, -1 on EOF first.
 * *eof tells whether the write end is closed (read() returned 0 after the data). */
static inline long drain_now(int rfd, bool *eof)
{
    int fl = fcntl(rfd, F_GETFL);
    fcntl(rfd, F_SETFL, fl | O_NONBLOCK);
    unsigned char buf[4096];
    long bytes = 0;
    *eof = false;
    for (;;) {
        ssize_t n = read(rfd, buf, sizeof buf);
        if (n > 0) {
            bytes += n;
            continue;
        }
        if (n == 0)
            *eof = true;
        break;   /* EOF, or EAGAIN: empty but the write end is still open */
    }
    fcntl(rfd, F_SETFL, fl);
    return bytes / 80;
}

static inline bool fd_open(int fd)
{
    return fcntl(fd, F_GETFD) >= 0;
}

static inline uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* One step (START then END) on a fresh step info. */
static inline void record_step(void)
{
    aclprofStepInfo *si = aclprofCreateStepInfo();
    CHECK_NOT_NULL(si);
    CHECK_EQ(aclprofGetStepTimestamp(si, ACL_STEP_START, NULL), ACL_SUCCESS);
    usleep(1000);
    CHECK_EQ(aclprofGetStepTimestamp(si, ACL_STEP_END, NULL), ACL_SUCCESS);
    aclprofDestroyStepInfo(si);
}

#endif
