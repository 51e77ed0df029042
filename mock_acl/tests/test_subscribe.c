/* Tests of the model runtime, operator subscription, the pipe writer and the op getters
 * (mock_acl/src/model.c, subscribe.c, opdesc.c).
 *
 * Records are checked against the reference (section 4) independently of the mock: field
 * offsets are spelled out here and the signature is recomputed with a bit-by-bit CRC-32C.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_common.h"

/* ---- independent reference implementations ------------------------------------------- */

/* Bitwise CRC-32C, reflected polynomial 0x82F63B78, init ~0, no final XOR. */
static uint32_t ref_crc_raw(const unsigned char *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    while (n--) {
        c ^= *p++;
        for (int k = 0; k < 8; k++)
            c = (c & 1u) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    }
    return c;
}

static uint32_t ref_signature(const unsigned char *rec, size_t size)
{
    return ref_crc_raw(rec + 4, size - 4);
}

/* ProfOpDesc offsets (reference section 4). */
enum { OFF_SIG = 0, OFF_MODEL = 4, OFF_FLAG = 8, OFF_TID = 12, OFF_INDEX = 16, OFF_DUR = 24,
       OFF_START = 32, OFF_END = 40, OFF_EXEC = 48, OFF_CUBE = 56, OFF_VEC = 64, OFF_DEV = 72 };

static uint32_t rd32(const unsigned char *r, size_t off)
{
    uint32_t v;
    memcpy(&v, r + off, 4);
    return v;
}

static uint64_t rd64(const unsigned char *r, size_t off)
{
    uint64_t v;
    memcpy(&v, r + off, 8);
    return v;
}

static void wr32(unsigned char *r, size_t off, uint32_t v)
{
    memcpy(r + off, &v, 4);
}

/* ---- temp files ------------------------------------------------------------------------ */

static char g_dir[64];

static void tmp_init(void)
{
    snprintf(g_dir, sizeof g_dir, "/tmp/aclmock_sub_XXXXXX");
    if (mkdtemp(g_dir) == NULL) {
        perror("mkdtemp");
        exit(2);
    }
}

static void tmp_cleanup(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", g_dir);
}

static const char *tmp_path(const char *name)
{
    static char p[256];
    snprintf(p, sizeof p, "%s/%s", g_dir, name);
    return p;
}

static void write_text(const char *path, const char *text, size_t len)
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
static aclError load_text(const char *text, uint32_t *id)
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
static char g_long_name[LONG_NAME_LEN + 1];
static const char *const k_names[3] = { "conv1", "", g_long_name };
static const char *const k_types[3] = { "Conv2D", "\xff\xfe", "Tab\tNew\nLine\\x" };
static const uint32_t k_flags[3] = { 0, 1, 2 };
static const uint32_t k_tids[3] = { 0, 0, 4242 };

static uint32_t load_std_model(uint32_t device)
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

static char *fetch_string(const unsigned char *rec, size_t size, bool name)
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

static void reader_decode_new(reader *rd)
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

static void *reader_main(void *arg)
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

static void reader_start(reader *rd, int fd, size_t rec_size, size_t read_size, bool decode)
{
    memset(rd, 0, sizeof *rd);
    rd->fd = fd;
    rd->rec_size = rec_size;
    rd->read_size = read_size;
    rd->decode = decode;
    pthread_create(&rd->thread, NULL, reader_main, rd);
}

static void reader_join(reader *rd)
{
    pthread_join(rd->thread, NULL);
}

static void reader_free(reader *rd)
{
    for (size_t i = 0; i < rd->ndecoded; i++) {
        free(rd->names[i]);
        free(rd->types[i]);
    }
    free(rd->names);
    free(rd->types);
    free(rd->buf);
}

static aclmockStats stats(void)
{
    aclmockStats s;
    aclmockGetStats(&s);
    return s;
}

/* A pipe whose write end lives in a static int, so an aclmockReset in a later test (which
 * writes -1 into it) never touches a dead stack frame. */
static int g_pipe[2][2];

static void make_pipe(int which)
{
    if (pipe(g_pipe[which]) != 0) {
        perror("pipe");
        exit(2);
    }
}

static aclprofSubscribeConfig *subscribe_std(uint32_t model, int which)
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

/* ---- tests: CRC ------------------------------------------------------------------------- */

TEST(crc_reference_vectors)
{
    /* Our reference CRC matches the published vectors... */
    CHECK_EQ_U64(ref_crc_raw((const unsigned char *)"123456789", 9) ^ 0xFFFFFFFFu, 0xE3069283u);
    uint32_t t1 = 1;
    for (int k = 0; k < 8; k++)
        t1 = (t1 & 1u) ? (t1 >> 1) ^ 0x82F63B78u : t1 >> 1;
    CHECK_EQ_U64(t1, 0xF26B8303u);   /* table[1] */

    /* ...and the mock's getters accept exactly the records signed that way. */
    unsigned char rec[80] = { 0 };
    wr32(rec, OFF_MODEL, 9);
    wr32(rec, OFF_SIG, ref_signature(rec, 80));
    uint32_t n = 0;
    CHECK_EQ(aclprofGetOpNum(rec, 80, &n), ACL_SUCCESS);
    CHECK_EQ(n, 1);
    CHECK_EQ(aclprofGetModelId(rec, 80, 0), 9);
    wr32(rec, OFF_SIG, ~ref_signature(rec, 80));   /* = crc32c_std: with the final XOR */
    CHECK_EQ(aclprofGetOpNum(rec, 80, &n), ACL_ERROR_INVALID_PARAM);
    /* The signature covers the tail padding after devId too. */
    wr32(rec, OFF_SIG, ref_signature(rec, 80));
    rec[79] = 1;
    CHECK_EQ(aclprofGetOpNum(rec, 80, &n), ACL_ERROR_INVALID_PARAM);
}

/* ---- tests: model files ----------------------------------------------------------------- */

TEST(load_errors)
{
    uint32_t id = 0;
    CHECK_EQ(aclmdlLoadFromFile(NULL, &id), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclmdlLoadFromFile(tmp_path("x"), NULL), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclmdlLoadFromFile(tmp_path("does-not-exist"), &id), ACL_ERROR_INVALID_FILE);
    CHECK_EQ(aclmdlLoadFromFile(g_dir, &id), ACL_ERROR_INVALID_FILE);   /* a directory */

    static const char *const bad[] = {
        "",                                                   /* empty */
        "aclmock-model 2\n",                                  /* version */
        "aclmock-model 1 \n",                                 /* trailing space */
        "# comment first\naclmock-model 1\n",                 /* magic must be line 1 */
        "aclmock-model 1\nop\ta\tb\n",                        /* no duration */
        "aclmock-model 1\nop\ta\tb\t1\t2\t3\t4\t5\n",         /* too many fields */
        "aclmock-model 1\nop\ta\tb\t-1\n",                    /* sign */
        "aclmock-model 1\nop\ta\tb\t1x\n",
        "aclmock-model 1\nop\ta\tb\t1000000000001\n",         /* > 1000 s */
        "aclmock-model 1\nop\ta\tb\t1\t1\t4294967296\n",      /* flag > uint32 */
        "aclmock-model 1\nop\ta\\q\tb\t1\n",                  /* unknown escape */
        "aclmock-model 1\nop\ta\\\tb\t1\n",                   /* backslash before TAB */
        "aclmock-model 1\nop\ta\\x0\tb\t1\n",                 /* short \x */
        "aclmock-model 1\nop\ta\\x00\tb\t1\n",                /* NUL in a name */
        "aclmock-model 1\nop\ta\\xg1\tb\t1\n",
        "aclmock-model 1\nop a b 1\n",                        /* spaces, not TABs */
        "aclmock-model 1\ndevice 8\n",                        /* default device count 8 */
        "aclmock-model 1\ndevice 1\ndevice 1\n",              /* repeated */
        "aclmock-model 1\ndevice\n",
        "aclmock-model 1\nbogus 1\n",
        "aclmock-model 1\ngap x\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        aclError r = load_text(bad[i], &id);
        if (r != ACL_ERROR_INVALID_FILE)
            fprintf(stderr, "bad model %zu loaded: %d\n", i, r);
        CHECK_EQ(r, ACL_ERROR_INVALID_FILE);
    }
    /* A raw NUL byte anywhere is refused too. */
    static const char nul[] = "aclmock-model 1\nop\ta\0b\tc\t1\n";
    write_text(tmp_path("nul.txt"), nul, sizeof nul - 1);
    CHECK_EQ(aclmdlLoadFromFile(tmp_path("nul.txt"), &id), ACL_ERROR_INVALID_FILE);

    /* device must be below the driver's device count at load time. */
    CHECK_EQ(aclmockSetDeviceCount(2), ACL_SUCCESS);
    CHECK_EQ(load_text("aclmock-model 1\ndevice 2\n", &id), ACL_ERROR_INVALID_FILE);
    CHECK_EQ(load_text("aclmock-model 1\ndevice 1\n", &id), ACL_SUCCESS);
}

TEST(load_accepts_and_ids)
{
    uint32_t a = 0, b = 0, c = 0, d = 0;
    /* CRLF, comments, blank lines, no ops, no trailing newline, raw non-UTF-8 bytes. */
    CHECK_EQ(load_text("aclmock-model 1\r\n# c\r\n\r\nop\t\xc3\x28\tT\t1\r\n", &a), ACL_SUCCESS);
    CHECK_EQ(load_text("aclmock-model 1", &b), ACL_SUCCESS);
    CHECK_EQ(a, 1);   /* ids start at 1 after aclmockReset */
    CHECK_EQ(b, 2);
    CHECK_EQ(aclmdlUnload(b), ACL_SUCCESS);
    CHECK_EQ(aclmdlUnload(b), ACL_ERROR_INVALID_MODEL_ID);
    CHECK_EQ(load_text("aclmock-model 1\n", &c), ACL_SUCCESS);
    CHECK_EQ(c, 3);   /* never reused */
    CHECK_EQ(execute_empty(b), ACL_ERROR_GE_EXEC_MODEL_ID_INVALID);
    CHECK_EQ(execute_empty(a), ACL_SUCCESS);
    CHECK_EQ(execute_empty(c), ACL_SUCCESS);   /* no ops: nothing happens */
    aclmockReset();
    CHECK_EQ(load_text("aclmock-model 1\n", &d), ACL_SUCCESS);
    CHECK_EQ(d, 1);
    CHECK_EQ(execute_empty(a + 1000), ACL_ERROR_GE_EXEC_MODEL_ID_INVALID);
}

/* ---- tests: the main flow ---------------------------------------------------------------- */

#define N_EXEC 50

TEST(subscribe_execute_read)
{
    uint32_t model = load_std_model(2);
    make_pipe(0);
    int rfd = g_pipe[0][0];
    reader rd;
    reader_start(&rd, rfd, 80, 80 * 10, true);
    aclprofSubscribeConfig *cfg = subscribe_std(model, 0);
    REQUIRE(cfg != NULL);
    CHECK_EQ(aclmockGetMode(), ACLMOCK_MODE_SUBSCRIBE);
    CHECK(g_pipe[0][1] >= 0);
    uint64_t t0 = 0;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    t0 = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    for (int i = 0; i < N_EXEC; i++)
        CHECK_EQ(execute_empty(model), ACL_SUCCESS);
    CHECK_EQ(aclprofModelUnSubscribe(model), ACL_SUCCESS);
    CHECK_EQ(g_pipe[0][1], -1);             /* closed by the library */
    CHECK_EQ(aclmockGetMode(), ACLMOCK_MODE_OFF);
    reader_join(&rd);
    CHECK(rd.eof);
    CHECK_EQ(rd.errors, 0);
    REQUIRE(rd.len == (size_t)N_EXEC * 3 * 80);
    REQUIRE(rd.ndecoded == (size_t)N_EXEC * 3);

    uint64_t prev_end = 0, prev_index = 0;
    for (size_t i = 0; i < rd.ndecoded; i++) {
        const unsigned char *r = rd.buf + i * 80;
        int k = (int)(i % 3);
        CHECK_EQ_U64(rd32(r, OFF_SIG), ref_signature(r, 80));
        CHECK_EQ(rd32(r, OFF_MODEL), model);
        CHECK_EQ(rd32(r, OFF_FLAG), k_flags[k]);
        CHECK_EQ(rd32(r, OFF_TID), k_tids[k]);
        CHECK_EQ(rd32(r, OFF_DEV), 2);
        CHECK_EQ(rd32(r, 76), 0);            /* padding */
        CHECK_EQ(rd64(r, OFF_CUBE), 0);
        CHECK_EQ(rd64(r, OFF_VEC), 0);
        uint64_t start = rd64(r, OFF_START), end = rd64(r, OFF_END), dur = rd64(r, OFF_DUR);
        CHECK_EQ_U64(dur, end - start);
        CHECK(start >= t0);
        CHECK(start >= prev_end + (i ? 100 : 0));   /* monotonic, gap 100 ns */
        prev_end = end;
        if (k == 0)
            CHECK(dur >= 4000 && dur <= 6000);       /* 5000 +- 1000 jitter */
        else
            CHECK_EQ(dur, k == 1 ? 2000 : 3000);
        uint64_t ex = rd64(r, OFF_EXEC);
        CHECK(ex * 100 + 100 > dur * 80 && ex * 100 <= dur * 95);   /* 80-95%, floored */
        uint64_t idx = rd64(r, OFF_INDEX);
        CHECK(idx > prev_index);                     /* opIndex counts up from 1 */
        prev_index = idx;
        CHECK_STR_EQ(rd.names[i], k_names[k]);
        CHECK_STR_EQ(rd.types[i], k_types[k]);
        /* Getters on a one-record slice. */
        CHECK_EQ(aclprofGetModelId(r, 80, 0), model);
        CHECK_EQ_U64(aclprofGetOpStart(r, 80, 0), start);
        CHECK_EQ_U64(aclprofGetOpEnd(r, 80, 0), end);
        CHECK_EQ_U64(aclprofGetOpDuration(r, 80, 0), dur);
        CHECK_EQ(aclprofGetOpFlag(r, 80, 0), k_flags[k]);
    }
    CHECK_EQ(rd64(rd.buf, OFF_INDEX), 1);
    /* Jitter varies between executions but is reproducible (seed 7): not all equal. */
    CHECK(rd64(rd.buf, OFF_DUR) != rd64(rd.buf + 3 * 80, OFF_DUR) ||
          rd64(rd.buf, OFF_DUR) != rd64(rd.buf + 6 * 80, OFF_DUR));

    aclmockStats s = stats();
    CHECK_EQ(s.recordsEmitted, N_EXEC * 3);
    CHECK_EQ(s.recordsWritten, N_EXEC * 3);
    CHECK_EQ(s.recordsDropped, 0);
    CHECK_EQ(s.recordsCorrupted, 0);
    CHECK_EQ(s.bytesWritten, N_EXEC * 3 * 80);
    CHECK_EQ(s.writeCalls, N_EXEC * 3);      /* one write() per record */
    CHECK_EQ(s.nameTableEntries, 0);         /* every string fetched */

    /* Whole-buffer getters work too (CheckData validates all records each time). */
    uint32_t n = 0;
    CHECK_EQ(aclprofGetOpNum(rd.buf, rd.len, &n), ACL_SUCCESS);
    CHECK_EQ(n, N_EXEC * 3);
    CHECK_EQ(aclprofGetModelId(rd.buf, rd.len, (uint32_t)n - 1), model);
    CHECK_EQ(aclprofGetModelId(rd.buf, rd.len, (uint32_t)n), ACL_ERROR_INVALID_PARAM);

    CHECK_EQ(aclprofDestroySubscribeConfig(cfg), ACL_SUCCESS);
    close(rfd);
    reader_free(&rd);
}

/* Collects records of one unread execution of the standard model (names still stored). */
static size_t collect(uint32_t model, int executions, unsigned char **out, size_t rec_size)
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

TEST(getter_rules)
{
    uint32_t model = load_std_model(0);
    unsigned char *buf = NULL;
    size_t len = collect(model, 1, &buf, 80);
    REQUIRE(len == 3 * 80);
    unsigned char *r0 = buf, *r2 = buf + 160;
    CHECK_EQ(stats().nameTableEntries, 3);

    size_t sz = 0;
    CHECK_EQ(aclprofGetOpDescSize(NULL), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclprofGetOpDescSize(&sz), ACL_SUCCESS);
    CHECK_EQ(sz, 80);

    uint32_t n = 7;
    CHECK_EQ(aclprofGetOpNum(NULL, 80, &n), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclprofGetOpNum(buf, 80, NULL), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclprofGetOpNum(buf, 79, &n), ACL_ERROR_INVALID_PARAM);   /* len % 80 != 0 */
    CHECK_EQ(aclprofGetOpNum(buf, 81, &n), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclprofGetOpNum(buf, 0, &n), ACL_SUCCESS);
    CHECK_EQ(n, 0);
    /* opInfoLen is narrowed to 32 bits, as in CANN. */
    CHECK_EQ(aclprofGetOpNum(buf, ((size_t)1 << 32) + 160, &n), ACL_SUCCESS);
    CHECK_EQ(n, 2);

    /* Len = strlen + 1; nothing erased by Len. */
    size_t l = 0;
    CHECK_EQ(aclprofGetOpNameLen(NULL, 80, 0, &l), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclprofGetOpNameLen(r0, 80, 0, NULL), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclprofGetOpNameLen(r0, 80, 0, &l), ACL_SUCCESS);
    CHECK_EQ(l, 6);
    CHECK_EQ(aclprofGetOpNameLen(r0, 80, 0, &l), ACL_SUCCESS);
    CHECK_EQ(aclprofGetOpNameLen(buf + 80, 80, 0, &l), ACL_SUCCESS);
    CHECK_EQ(l, 1);                                 /* empty name */
    CHECK_EQ(aclprofGetOpNameLen(r2, 80, 0, &l), ACL_SUCCESS);
    CHECK_EQ(l, LONG_NAME_LEN + 1);                 /* longer than ACL_PROF_MAX_OP_NAME_LEN */
    CHECK_EQ(aclprofGetOpNameLen(buf, len, 1, &l), ACL_SUCCESS);   /* index into a buffer */
    CHECK_EQ(l, 1);
    CHECK_EQ(aclprofGetOpNameLen(buf, len, 3, &l), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclprofGetOpNameLen(buf, len, UINT32_MAX, &l), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclprofGetOpTypeLen(r0, 80, 0, &l), ACL_SUCCESS);
    CHECK_EQ(l, 7);

    /* Copy rules. */
    char b[8];
    CHECK_EQ(aclprofGetOpName(r0, 80, 0, NULL, 8), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclprofGetOpName(r0, 80, 0, b, 0), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclprofGetOpName(r0, 80, 0, b, (size_t)1 << 32), ACL_ERROR_INVALID_PARAM); /* -> 0 */
    memset(b, 'Z', sizeof b);
    CHECK_EQ(aclprofGetOpName(r0, 80, 0, b, 4), ACL_ERROR_INVALID_PARAM);  /* strlen 5 > 4 */
    CHECK_EQ(b[0], 0);                              /* securec clears the destination */
    CHECK_EQ(b[3], 0);
    CHECK_EQ(b[4], 'Z');                            /* ... only bufLen bytes of it */
    CHECK_EQ(aclprofGetOpNameLen(r0, 80, 0, &l), ACL_SUCCESS);  /* entry kept */
    memset(b, 'Z', sizeof b);
    CHECK_EQ(aclprofGetOpName(r0, 80, 0, b, 5), ACL_SUCCESS);   /* == strlen: truncated */
    CHECK_STR_EQ(b, "conv");
    CHECK_EQ(aclprofGetOpName(r0, 80, 0, b, 8), ACL_ERROR_INVALID_PARAM);   /* one-shot */
    CHECK_EQ(aclprofGetOpNameLen(r0, 80, 0, &l), ACL_ERROR_INVALID_PARAM);
    /* The type is a separate entry: still there after the name went. */
    memset(b, 'Z', sizeof b);
    CHECK_EQ(aclprofGetOpType(r0, 80, 0, b, 8), ACL_SUCCESS);   /* bufLen > strlen+1 */
    CHECK_EQ(memcmp(b, "Conv2D", 6), 0);
    CHECK_EQ(b[6], 'Z');                            /* NUL only at bufLen-1 */
    CHECK_EQ(b[7], 0);
    CHECK_EQ(aclprofGetOpType(r0, 80, 0, b, 8), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(stats().nameTableEntries, 2);

    /* Empty name: any bufLen >= 1 works. */
    CHECK_EQ(aclprofGetOpName(buf + 80, 80, 0, b, 1), ACL_SUCCESS);
    CHECK_EQ(b[0], 0);

    /* Times and ids: 0 / 100000 on error. */
    CHECK_EQ_U64(aclprofGetOpStart(NULL, 80, 0), 0);
    CHECK_EQ_U64(aclprofGetOpStart(r0, 79, 0), 0);
    CHECK_EQ_U64(aclprofGetOpEnd(r0, 80, 1), 0);
    CHECK_EQ_U64(aclprofGetOpDuration(r0, 80, 1), 0);
    CHECK(aclprofGetOpStart(r0, 80, 0) != 0);
    CHECK_EQ(aclprofGetModelId(NULL, 80, 0), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclprofGetModelId(r0, 80, 1), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclprofGetModelId(r0, 81, 0), ACL_ERROR_INVALID_PARAM);

    /* Flag and thread id attribute. */
    CHECK_EQ(aclprofGetOpFlag(NULL, 80, 0), ACL_SUBSCRIBE_NONE);
    CHECK_EQ(aclprofGetOpFlag(r2, 80, 1), 0);         /* bad index: 0 */
    CHECK_EQ(aclprofGetOpFlag(r2, 80, 0), ACL_SUBSCRIBE_OP_THREAD);
    CHECK_EQ(aclprofGetOpFlag(buf, len, 1), ACL_SUBSCRIBE_SUBGRAPH);
    CHECK_NULL(aclprofGetOpAttriValue(NULL, 80, 0, ACL_SUBSCRIBE_ATTRI_THREADID));
    CHECK_NULL(aclprofGetOpAttriValue(r2, 80, 1, ACL_SUBSCRIBE_ATTRI_THREADID));
    CHECK_NULL(aclprofGetOpAttriValue(r0, 80, 0, ACL_SUBSCRIBE_ATTRI_THREADID));  /* flag 0 */
    CHECK_NULL(aclprofGetOpAttriValue(r2, 80, 0, ACL_SUBSCRIBE_ATTRI_NONE));
    CHECK_STR_EQ(aclprofGetOpAttriValue(r2, 80, 0, ACL_SUBSCRIBE_ATTRI_THREADID), "4242");

    /* One bad record anywhere fails CheckData for the whole buffer... */
    unsigned char *copy = malloc(len);
    REQUIRE(copy != NULL);
    memcpy(copy, buf, len);
    copy[160 + OFF_START] ^= 1;
    CHECK_EQ(aclprofGetOpNum(copy, len, &n), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclprofGetOpTypeLen(copy, len, 1, &l), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ_U64(aclprofGetOpStart(copy, len, 0), 0);
    CHECK_EQ(aclprofGetOpTypeLen(copy, 160, 1, &l), ACL_SUCCESS);   /* ...not outside it */
    /* ...but GetOpFlag/GetOpAttriValue do not check signatures. */
    CHECK_EQ(aclprofGetOpFlag(copy, len, 2), ACL_SUBSCRIBE_OP_THREAD);
    CHECK_STR_EQ(aclprofGetOpAttriValue(copy, len, 2, ACL_SUBSCRIBE_ATTRI_THREADID), "4242");
    free(copy);

    /* Unaligned buffers are fine. */
    unsigned char *un = malloc(len + 1);
    REQUIRE(un != NULL);
    memcpy(un + 1, buf, len);
    CHECK_EQ(aclprofGetOpNum(un + 1, len, &n), ACL_SUCCESS);
    CHECK_EQ(aclprofGetModelId(un + 1, len, 2), model);
    free(un);
    free(buf);
}

TEST(corrupt_every)
{
    uint32_t model = load_std_model(0);
    CHECK_EQ(aclmockSetCorruptEvery(4), ACL_SUCCESS);
    make_pipe(0);
    reader rd;
    reader_start(&rd, g_pipe[0][0], 80, 800, true);
    aclprofSubscribeConfig *cfg = subscribe_std(model, 0);
    REQUIRE(cfg != NULL);
    for (int i = 0; i < 20; i++)
        execute_empty(model);
    CHECK_EQ(aclprofModelUnSubscribe(model), ACL_SUCCESS);
    reader_join(&rd);
    REQUIRE(rd.ndecoded == 60);
    int bad = 0;
    for (size_t i = 0; i < rd.ndecoded; i++) {
        const unsigned char *r = rd.buf + i * 80;
        bool ok = rd32(r, OFF_SIG) == ref_signature(r, 80);
        CHECK_EQ(ok, (i + 1) % 4 != 0);   /* the 4th, 8th, ... record */
        if (!ok) {
            bad++;
            uint32_t n;
            CHECK_EQ(aclprofGetOpNum(r, 80, &n), ACL_ERROR_INVALID_PARAM);
            CHECK(rd64(r, OFF_INDEX) != 0);
        }
    }
    CHECK_EQ(bad, 15);
    CHECK_EQ(rd.errors, 0);
    aclmockStats s = stats();
    CHECK_EQ(s.recordsCorrupted, 15);
    CHECK_EQ(s.recordsWritten, 60);
    CHECK_EQ(s.nameTableEntries, 0);   /* corrupt records never stored strings */
    aclprofDestroySubscribeConfig(cfg);
    close(g_pipe[0][0]);
    reader_free(&rd);
}

TEST(chunked_writes)
{
    uint32_t model = load_std_model(0);
    CHECK_EQ(aclmockSetWriteChunk(7), ACL_SUCCESS);
    make_pipe(0);
    reader rd;
    reader_start(&rd, g_pipe[0][0], 80, 13, true);   /* odd read size: reassembly */
    aclprofSubscribeConfig *cfg = subscribe_std(model, 0);
    REQUIRE(cfg != NULL);
    for (int i = 0; i < 10; i++)
        execute_empty(model);
    CHECK_EQ(aclprofModelUnSubscribe(model), ACL_SUCCESS);
    reader_join(&rd);
    CHECK_EQ(rd.ndecoded, 30);
    CHECK_EQ(rd.errors, 0);
    for (size_t i = 0; i < rd.ndecoded; i++)
        CHECK_STR_EQ(rd.names[i], k_names[i % 3]);
    aclmockStats s = stats();
    CHECK_EQ(s.writeCalls, 30 * 12);   /* ceil(80 / 7) */
    CHECK_EQ(s.bytesWritten, 30 * 80);
    aclprofDestroySubscribeConfig(cfg);
    close(g_pipe[0][0]);
    reader_free(&rd);
}

TEST(size_72)
{
    CHECK_EQ(aclmockSetOpDescSize(72), ACL_SUCCESS);
    size_t sz = 0;
    CHECK_EQ(aclprofGetOpDescSize(&sz), ACL_SUCCESS);
    CHECK_EQ(sz, 72);
    uint32_t model = load_std_model(3);
    make_pipe(0);
    reader rd;
    reader_start(&rd, g_pipe[0][0], 72, 72 * 5, true);
    aclprofSubscribeConfig *cfg = subscribe_std(model, 0);
    REQUIRE(cfg != NULL);
    for (int i = 0; i < 5; i++)
        execute_empty(model);
    CHECK_EQ(aclprofModelUnSubscribe(model), ACL_SUCCESS);
    reader_join(&rd);
    REQUIRE(rd.len == 15 * 72);
    CHECK_EQ(rd.errors, 0);
    for (size_t i = 0; i < 15; i++) {
        const unsigned char *r = rd.buf + i * 72;
        CHECK_EQ_U64(rd32(r, OFF_SIG), ref_signature(r, 72));
        CHECK_STR_EQ(rd.types[i], k_types[i % 3]);
        CHECK_EQ_U64(aclprofGetOpDuration(r, 72, 0), rd64(r, OFF_END) - rd64(r, OFF_START));
    }
    uint32_t n = 0;
    CHECK_EQ(aclprofGetOpNum(rd.buf, 80, &n), ACL_ERROR_INVALID_PARAM);   /* 80 % 72 */
    CHECK_EQ(aclprofGetOpNum(rd.buf, 144, &n), ACL_SUCCESS);
    CHECK_EQ(n, 2);
    CHECK_EQ(stats().bytesWritten, 15 * 72);
    aclprofDestroySubscribeConfig(cfg);
    close(g_pipe[0][0]);
    reader_free(&rd);
}

/* A non-blocking write end, a one-page pipe and a reader that naps: the writer must take
 * the EAGAIN path (sleep 1 ms, retry) and still deliver every record intact. */
TEST(nonblocking_slow_reader)
{
    uint32_t model = load_std_model(0);
    make_pipe(0);
    CHECK(fcntl(g_pipe[0][1], F_SETPIPE_SZ, 4096) >= 0);
    CHECK_EQ(fcntl(g_pipe[0][1], F_SETFL, O_NONBLOCK), 0);
    reader rd;
    memset(&rd, 0, sizeof rd);
    rd.fd = g_pipe[0][0];
    rd.rec_size = 80;
    rd.read_size = 160;
    rd.sleep_us = 200;
    rd.decode = true;
    aclprofSubscribeConfig *cfg = subscribe_std(model, 0);
    REQUIRE(cfg != NULL);
    for (int i = 0; i < 200; i++)   /* 600 records = 48000 bytes >> 4096 */
        execute_empty(model);
    pthread_create(&rd.thread, NULL, reader_main, &rd);
    CHECK_EQ(aclprofModelUnSubscribe(model), ACL_SUCCESS);
    reader_join(&rd);
    CHECK(rd.eof);
    CHECK_EQ(rd.ndecoded, 600);
    CHECK_EQ(rd.errors, 0);
    aclmockStats s = stats();
    CHECK(s.writeRetries > 0);
    CHECK_EQ(s.recordsWritten, 600);
    CHECK_EQ(s.recordsDropped, 0);
    CHECK_EQ(s.nameTableEntries, 0);
    aclprofDestroySubscribeConfig(cfg);
    close(g_pipe[0][0]);
    reader_free(&rd);
}

/* Blocking pipe, small, slow writer and slow reader: nothing lost, no retries. */
TEST(blocking_small_pipe_writer_delay)
{
    uint32_t model = load_std_model(0);
    CHECK_EQ(aclmockSetWriterDelayUs(50), ACL_SUCCESS);
    make_pipe(0);
    CHECK(fcntl(g_pipe[0][1], F_SETPIPE_SZ, 4096) >= 0);
    reader rd;
    memset(&rd, 0, sizeof rd);
    rd.fd = g_pipe[0][0];
    rd.rec_size = 80;
    rd.read_size = 800;
    rd.sleep_us = 1000;
    rd.decode = true;
    aclprofSubscribeConfig *cfg = subscribe_std(model, 0);
    REQUIRE(cfg != NULL);
    for (int i = 0; i < 100; i++)
        execute_empty(model);
    pthread_create(&rd.thread, NULL, reader_main, &rd);
    CHECK_EQ(aclprofModelUnSubscribe(model), ACL_SUCCESS);
    reader_join(&rd);
    CHECK_EQ(rd.ndecoded, 300);
    CHECK_EQ(rd.errors, 0);
    CHECK_EQ(stats().writeRetries, 0);
    aclprofDestroySubscribeConfig(cfg);
    close(g_pipe[0][0]);
    reader_free(&rd);
}

/* ---- tests: error codes and modes ------------------------------------------------------- */

TEST(subscribe_config)
{
    static int fd = 5;
    CHECK_NULL(aclprofCreateSubscribeConfig(1, ACL_AICORE_NONE, NULL));
    CHECK_NULL(aclprofCreateSubscribeConfig(2, ACL_AICORE_NONE, &fd));
    CHECK_NULL(aclprofCreateSubscribeConfig(-1, ACL_AICORE_NONE, &fd));
    aclprofSubscribeConfig *a = aclprofCreateSubscribeConfig(0, ACL_AICORE_NONE, &fd);
    aclprofSubscribeConfig *b = aclprofCreateSubscribeConfig(1, (aclprofAicoreMetrics)77, &fd);
    CHECK_NOT_NULL(a);   /* metrics unchecked at creation */
    CHECK_NOT_NULL(b);
    CHECK_EQ(aclprofDestroySubscribeConfig(NULL), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclprofDestroySubscribeConfig(a), ACL_SUCCESS);
    CHECK_EQ(aclprofDestroySubscribeConfig(a), ACL_ERROR_INVALID_PARAM);   /* twice */
    CHECK_EQ(aclprofDestroySubscribeConfig((aclprofSubscribeConfig *)&fd), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclprofDestroySubscribeConfig(b), ACL_SUCCESS);
}

TEST(subscribe_error_codes)
{
    uint32_t m1 = load_std_model(0), m2 = load_std_model(0), m3 = load_std_model(1);
    make_pipe(0);
    aclprofSubscribeConfig *cfg = aclprofCreateSubscribeConfig(1, ACL_AICORE_NONE, &g_pipe[0][1]);
    aclprofSubscribeConfig *other = aclprofCreateSubscribeConfig(1, ACL_AICORE_PIPE_UTILIZATION,
                                                                 &g_pipe[0][1]);
    aclprofSubscribeConfig *empty = aclprofCreateSubscribeConfig(0, ACL_AICORE_NONE, &g_pipe[0][1]);
    REQUIRE(cfg && other && empty);

    /* Unknown model first, even with a NULL config. */
    CHECK_EQ(aclprofModelSubscribe(999, NULL), ACL_ERROR_INVALID_MODEL_ID);
    CHECK_EQ(aclprofModelSubscribe(999, cfg), ACL_ERROR_INVALID_MODEL_ID);
    CHECK_EQ(aclprofModelSubscribe(m1, NULL), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclprofModelSubscribe(m1, empty), ACL_ERROR_INVALID_PARAM);  /* timeInfo 0, NONE */
    CHECK_EQ(aclprofModelUnSubscribe(999), ACL_ERROR_INVALID_MODEL_ID);
    CHECK_EQ(aclprofModelUnSubscribe(m1), ACL_ERROR_INVALID_MODEL_ID);    /* not subscribed */

    /* API_CTRL conflicts both ways. */
    char path[256];
    snprintf(path, sizeof path, "%s", tmp_path("prof"));
    CHECK_EQ(aclprofInit(path, strlen(path)), ACL_SUCCESS);
    CHECK_EQ(aclmockGetMode(), ACLMOCK_MODE_API_CTRL);
    CHECK_EQ(aclprofModelSubscribe(m1, cfg), ACL_ERROR_PROF_API_CONFLICT);
    CHECK_EQ(aclprofModelSubscribe(999, cfg), ACL_ERROR_INVALID_MODEL_ID);
    CHECK_EQ(aclprofModelUnSubscribe(m1), ACL_ERROR_PROF_API_CONFLICT);
    CHECK_EQ(aclprofFinalize(), ACL_SUCCESS);

    CHECK_EQ(aclprofModelSubscribe(m1, cfg), ACL_SUCCESS);
    CHECK_EQ(aclmockGetMode(), ACLMOCK_MODE_SUBSCRIBE);
    CHECK_EQ(aclprofInit(path, strlen(path)), ACL_ERROR_PROF_API_CONFLICT);
    CHECK_EQ(aclprofModelSubscribe(m1, cfg), ACL_ERROR_PROF_REPEAT_SUBSCRIBE);
    CHECK_EQ(aclprofModelSubscribe(m1, other), ACL_ERROR_PROF_REPEAT_SUBSCRIBE);  /* repeat first */
    /* Another config on the same device, or (host pseudo-device 64) on any device. */
    CHECK_EQ(aclprofModelSubscribe(m2, other), ACL_ERROR_INVALID_PROFILING_CONFIG);
    CHECK_EQ(aclprofModelSubscribe(m3, other), ACL_ERROR_INVALID_PROFILING_CONFIG);
    CHECK_EQ(aclprofModelSubscribe(m2, cfg), ACL_SUCCESS);   /* same config: fine */
    CHECK_EQ(aclprofModelSubscribe(m3, cfg), ACL_SUCCESS);

    /* Three models share one fd: only the last unsubscribe closes it. */
    int w = g_pipe[0][1];
    CHECK_EQ(aclprofModelUnSubscribe(m1), ACL_SUCCESS);
    CHECK_EQ(g_pipe[0][1], w);
    CHECK(fcntl(w, F_GETFD) >= 0);
    CHECK_EQ(aclprofModelUnSubscribe(m1), ACL_ERROR_INVALID_MODEL_ID);
    CHECK_EQ(aclprofModelUnSubscribe(m2), ACL_SUCCESS);
    CHECK_EQ(aclmockGetMode(), ACLMOCK_MODE_SUBSCRIBE);
    CHECK_EQ(aclprofModelUnSubscribe(m3), ACL_SUCCESS);
    CHECK_EQ(g_pipe[0][1], -1);
    CHECK(fcntl(w, F_GETFD) < 0 && errno == EBADF);
    CHECK_EQ(aclmockGetMode(), ACLMOCK_MODE_OFF);
    /* After the last unsubscribe a different config is fine again. */
    make_pipe(1);
    aclprofSubscribeConfig *other2 = aclprofCreateSubscribeConfig(1, ACL_AICORE_PIPE_UTILIZATION,
                                                                  &g_pipe[1][1]);
    CHECK_EQ(aclprofModelSubscribe(m2, other2), ACL_SUCCESS);
    CHECK_EQ(aclprofModelUnSubscribe(m2), ACL_SUCCESS);
    CHECK_EQ(g_pipe[1][1], -1);

    /* Destroying a config does not affect a subscription made with it. */
    CHECK_EQ(aclprofDestroySubscribeConfig(cfg), ACL_SUCCESS);
    CHECK_EQ(aclprofModelSubscribe(m1, cfg), ACL_ERROR_INVALID_PARAM);   /* destroyed */
    aclprofDestroySubscribeConfig(other);
    aclprofDestroySubscribeConfig(other2);
    aclprofDestroySubscribeConfig(empty);
    close(g_pipe[0][0]);
    close(g_pipe[1][0]);
}

TEST(time_info_off)
{
    uint32_t model = load_std_model(0);
    make_pipe(0);
    reader rd;
    reader_start(&rd, g_pipe[0][0], 80, 800, true);
    aclprofSubscribeConfig *cfg = aclprofCreateSubscribeConfig(0, ACL_AICORE_ARITHMETIC_UTILIZATION,
                                                               &g_pipe[0][1]);
    CHECK_EQ(aclprofModelSubscribe(model, cfg), ACL_SUCCESS);
    execute_empty(model);
    CHECK_EQ(aclprofModelUnSubscribe(model), ACL_SUCCESS);
    reader_join(&rd);
    REQUIRE(rd.ndecoded == 3);
    for (size_t i = 0; i < 3; i++) {
        const unsigned char *r = rd.buf + i * 80;
        CHECK_EQ_U64(rd64(r, OFF_START), 0);
        CHECK_EQ_U64(rd64(r, OFF_END), 0);
        CHECK_EQ_U64(rd64(r, OFF_DUR), 0);
        CHECK_EQ_U64(rd64(r, OFF_EXEC), 0);
        CHECK_STR_EQ(rd.names[i], k_names[i]);
    }
    aclprofDestroySubscribeConfig(cfg);
    close(g_pipe[0][0]);
    reader_free(&rd);
}

TEST(microseconds_and_realtime)
{
    CHECK_EQ(aclmockSetTimeUnit(ACLMOCK_TIME_US), ACL_SUCCESS);
    CHECK_EQ(aclmockSetRealtime(1), ACL_SUCCESS);
    uint32_t model = 0;
    CHECK_EQ(load_text("aclmock-model 1\nop\ta\tA\t4000000\nop\tb\tB\t6000000\n", &model),
             ACL_SUCCESS);
    make_pipe(0);
    reader rd;
    reader_start(&rd, g_pipe[0][0], 80, 800, true);
    aclprofSubscribeConfig *cfg = subscribe_std(model, 0);
    REQUIRE(cfg != NULL);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    CHECK_EQ(execute_empty(model), ACL_SUCCESS);
    CHECK_EQ(execute_empty(model), ACL_SUCCESS);
    clock_gettime(CLOCK_MONOTONIC, &b);
    uint64_t a_us = (uint64_t)a.tv_sec * 1000000u + (uint64_t)a.tv_nsec / 1000u;
    uint64_t b_us = (uint64_t)b.tv_sec * 1000000u + (uint64_t)b.tv_nsec / 1000u;
    CHECK(b_us - a_us >= 20000);   /* 2 x (4 ms + 6 ms) slept */
    CHECK_EQ(aclprofModelUnSubscribe(model), ACL_SUCCESS);
    reader_join(&rd);
    REQUIRE(rd.ndecoded == 4);
    uint64_t prev = 0;
    for (size_t i = 0; i < 4; i++) {
        const unsigned char *r = rd.buf + i * 80;
        uint64_t s = rd64(r, OFF_START), e = rd64(r, OFF_END);
        CHECK(s >= a_us && e <= b_us + 1);
        CHECK(s >= prev);
        prev = e;
        CHECK_EQ_U64(rd64(r, OFF_DUR), e - s);
        uint64_t want = i % 2 ? 6000 : 4000;
        CHECK(e - s + 1 >= want && e - s <= want + 1);   /* us, +-1 from truncation */
    }
    aclprofDestroySubscribeConfig(cfg);
    close(g_pipe[0][0]);
    reader_free(&rd);
}

/* ---- tests: unload, log, faults, reset ---------------------------------------------------- */

TEST(unload_subscribed_model)
{
    uint32_t model = load_std_model(0);
    make_pipe(0);
    reader rd;
    reader_start(&rd, g_pipe[0][0], 80, 800, true);
    aclprofSubscribeConfig *cfg = subscribe_std(model, 0);
    REQUIRE(cfg != NULL);
    for (int i = 0; i < 10; i++)
        execute_empty(model);
    CHECK_EQ(aclmockWaitWriterIdle(10000), ACL_SUCCESS);
    /* As in CANN (GE's unload path never tells the profiler): the subscription outlives
     * the model, the library keeps the fd, and it can no longer be unsubscribed. */
    CHECK_EQ(aclmdlUnload(model), ACL_SUCCESS);
    CHECK(g_pipe[0][1] >= 0);
    CHECK_EQ(aclmockGetMode(), ACLMOCK_MODE_SUBSCRIBE);
    CHECK_EQ(aclprofModelUnSubscribe(model), ACL_ERROR_INVALID_MODEL_ID);
    CHECK_EQ(aclprofModelSubscribe(model, cfg), ACL_ERROR_INVALID_MODEL_ID);
    CHECK_EQ(aclprofInit("/tmp", 4), ACL_ERROR_PROF_API_CONFLICT);   /* still subscribed */
    CHECK(g_pipe[0][1] >= 0);
    /* Only the reset (the process's end) releases it: the reader then sees EOF. */
    aclmockReset();
    CHECK_EQ(g_pipe[0][1], -1);
    reader_join(&rd);
    CHECK(rd.eof);
    CHECK_EQ(rd.ndecoded, 30);
    aclprofDestroySubscribeConfig(cfg);
    close(g_pipe[0][0]);
    reader_free(&rd);
}

static void hex(char *out, const char *s)
{
    static const char h[] = "0123456789abcdef";
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        *out++ = h[*p >> 4];
        *out++ = h[*p & 15];
    }
    *out = 0;
}

TEST(emit_log)
{
    char log[256];
    snprintf(log, sizeof log, "%s", tmp_path("emit.log"));
    remove(log);
    CHECK_EQ(aclmockSetEmitLog(tmp_path("no/such/dir/log")), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclmockSetEmitLog(log), ACL_SUCCESS);
    CHECK_EQ(aclmockSetCorruptEvery(5), ACL_SUCCESS);
    uint32_t model = load_std_model(4);
    make_pipe(0);
    reader rd;
    reader_start(&rd, g_pipe[0][0], 80, 800, true);
    aclprofSubscribeConfig *cfg = subscribe_std(model, 0);
    REQUIRE(cfg != NULL);
    for (int i = 0; i < 4; i++)
        execute_empty(model);
    CHECK_EQ(aclmockWaitWriterIdle(5000), ACL_SUCCESS);
    CHECK_EQ(aclprofModelUnSubscribe(model), ACL_SUCCESS);
    reader_join(&rd);
    REQUIRE(rd.ndecoded == 12);

    FILE *f = fopen(log, "r");
    REQUIRE(f != NULL);
    char line[2048], want[2048], hn[700], ht[700];
    size_t i = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        REQUIRE(i < 12);
        const unsigned char *r = rd.buf + i * 80;
        hex(hn, k_names[i % 3]);
        hex(ht, k_types[i % 3]);
        snprintf(want, sizeof want,
                 "%u\t%llu\t%s\t%s\t%llu\t%llu\t%llu\t%u\t%u\t%u\t%d\n", model,
                 (unsigned long long)rd64(r, OFF_INDEX), hn, ht,
                 (unsigned long long)rd64(r, OFF_START), (unsigned long long)rd64(r, OFF_END),
                 (unsigned long long)rd64(r, OFF_DUR), k_flags[i % 3], k_tids[i % 3], 4u,
                 (i + 1) % 5 == 0);
        CHECK_STR_EQ(line, want);
        i++;
    }
    fclose(f);
    CHECK_EQ(i, 12);
    CHECK_EQ(aclmockSetEmitLog(NULL), ACL_SUCCESS);
    aclprofDestroySubscribeConfig(cfg);
    close(g_pipe[0][0]);
    reader_free(&rd);
}

TEST(fault_injection)
{
    uint32_t model = load_std_model(0);
    make_pipe(0);
    CHECK_EQ(aclmockFailNext("aclprofCreateSubscribeConfig", 1, ACL_ERROR_FAILURE), ACL_SUCCESS);
    CHECK_NULL(aclprofCreateSubscribeConfig(1, ACL_AICORE_NONE, &g_pipe[0][1]));
    aclprofSubscribeConfig *cfg = aclprofCreateSubscribeConfig(1, ACL_AICORE_NONE, &g_pipe[0][1]);
    REQUIRE(cfg != NULL);
    CHECK_EQ(aclmockFailNext("aclprofModelSubscribe", 2, ACL_ERROR_PROFILING_FAILURE), ACL_SUCCESS);
    CHECK_EQ(aclprofModelSubscribe(model, cfg), ACL_ERROR_PROFILING_FAILURE);
    CHECK_EQ(aclprofModelSubscribe(9999, cfg), ACL_ERROR_PROFILING_FAILURE);   /* before checks */
    CHECK_EQ(aclmockGetMode(), ACLMOCK_MODE_OFF);
    CHECK_EQ(aclprofModelSubscribe(model, cfg), ACL_SUCCESS);
    CHECK_EQ(aclmockFailNext("aclmdlExecute", 1, 507011), ACL_SUCCESS);
    CHECK_EQ(execute_empty(model), 507011);
    CHECK_EQ(stats().recordsEmitted, 0);
    CHECK_EQ(aclmockFailNext("aclprofModelUnSubscribe", 1, ACL_ERROR_FAILURE), ACL_SUCCESS);
    CHECK_EQ(aclprofModelUnSubscribe(model), ACL_ERROR_FAILURE);
    CHECK(g_pipe[0][1] >= 0);   /* still subscribed */
    CHECK_EQ(aclprofModelUnSubscribe(model), ACL_SUCCESS);
    CHECK_EQ(g_pipe[0][1], -1);

    unsigned char rec[80] = { 0 };
    wr32(rec, OFF_SIG, ref_signature(rec, 80));
    uint32_t n = 0;
    CHECK_EQ(aclmockFailNext("aclprofGetOpNum", 1, ACL_ERROR_INVALID_PARAM), ACL_SUCCESS);
    CHECK_EQ(aclprofGetOpNum(rec, 80, &n), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclprofGetOpNum(rec, 80, &n), ACL_SUCCESS);
    CHECK_EQ(aclmockFailNext("aclprofGetOpAttriValue", 1, 1), ACL_SUCCESS);
    CHECK_NULL(aclprofGetOpAttriValue(rec, 80, 0, ACL_SUBSCRIBE_ATTRI_THREADID));
    CHECK_EQ(aclmockFailNext("aclmdlLoadFromFile", 1, ACL_ERROR_BAD_ALLOC), ACL_SUCCESS);
    uint32_t id;
    CHECK_EQ(load_text("aclmock-model 1\n", &id), ACL_ERROR_BAD_ALLOC);
    aclprofDestroySubscribeConfig(cfg);
    close(g_pipe[0][0]);
}

/* aclmockReset with subscriptions open: everything is flushed, the fds closed (-1 written),
 * the writer joined; the sanitizer run checks that nothing leaks. */
TEST(reset_mid_subscription)
{
    uint32_t m1 = load_std_model(0), m2 = load_std_model(1);
    make_pipe(0);
    make_pipe(1);
    reader r0, r1;
    reader_start(&r0, g_pipe[0][0], 80, 800, true);
    reader_start(&r1, g_pipe[1][0], 80, 800, false);
    REQUIRE(subscribe_std(m1, 0) != NULL);   /* configs are freed by the reset */
    REQUIRE(subscribe_std(m2, 1) != NULL);
    for (int i = 0; i < 30; i++) {
        execute_empty(m1);
        execute_empty(m2);
    }
    aclmockReset();
    CHECK_EQ(g_pipe[0][1], -1);
    CHECK_EQ(g_pipe[1][1], -1);
    CHECK_EQ(aclmockGetMode(), ACLMOCK_MODE_OFF);
    reader_join(&r0);
    reader_join(&r1);
    CHECK(r0.eof && r1.eof);
    CHECK_EQ(r0.ndecoded, 90);   /* flushed before closing */
    CHECK_EQ(r1.len, 90 * 80);
    aclmockStats s = stats();
    CHECK_EQ(s.recordsEmitted, 0);
    CHECK_EQ(s.nameTableEntries, 0);
    CHECK_EQ(execute_empty(m1), ACL_ERROR_GE_EXEC_MODEL_ID_INVALID);
    close(g_pipe[0][0]);
    close(g_pipe[1][0]);
    reader_free(&r0);
    reader_free(&r1);
}

/* Reset while nobody reads a full blocking pipe: must not hang (gives up after ~1 s without
 * progress) and must not block in write(). */
TEST(reset_with_stalled_reader)
{
    uint32_t model = load_std_model(0);
    make_pipe(0);
    REQUIRE(subscribe_std(model, 0) != NULL);
    for (int i = 0; i < 1000; i++)   /* 3000 records = 240 kB > 64 kB pipe */
        execute_empty(model);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    aclmockReset();
    clock_gettime(CLOCK_MONOTONIC, &b);
    CHECK(b.tv_sec - a.tv_sec < 10);
    CHECK_EQ(g_pipe[0][1], -1);
    /* The read end still holds what fitted; then EOF. */
    char buf[4096];
    size_t total = 0;
    ssize_t n;
    while ((n = read(g_pipe[0][0], buf, sizeof buf)) > 0)
        total += (size_t)n;
    CHECK(total > 0 && total < 3000 * 80);
    CHECK_EQ(total % 80, 0);
    close(g_pipe[0][0]);
}

/* A closed read end gives EPIPE (SIGPIPE is blocked in the writer): records are dropped
 * and counted, the process survives. */
TEST(reader_gone_epipe)
{
    uint32_t model = load_std_model(0);
    make_pipe(0);
    close(g_pipe[0][0]);
    aclprofSubscribeConfig *cfg = subscribe_std(model, 0);
    REQUIRE(cfg != NULL);
    for (int i = 0; i < 10; i++)
        execute_empty(model);
    CHECK_EQ(aclmockWaitWriterIdle(5000), ACL_SUCCESS);
    aclmockStats s = stats();
    CHECK_EQ(s.recordsEmitted, 30);
    CHECK_EQ(s.recordsDropped, 30);
    CHECK_EQ(s.recordsWritten, 0);
    CHECK_EQ(s.nameTableEntries, 30);   /* registered at emit, never read: as in CANN */
    CHECK_EQ(aclprofModelUnSubscribe(model), ACL_SUCCESS);
    aclprofDestroySubscribeConfig(cfg);
}

/* Queue overflow: a writer slowed to ~1 record/ms cannot keep up with 250000 records, the
 * ring holds 200000, the rest is dropped and counted. */
TEST(queue_full_drops)
{
    CHECK_EQ(aclmockSetWriterDelayUs(1000), ACL_SUCCESS);
    char *text = malloc(250000 * 16 + 64);
    REQUIRE(text != NULL);
    size_t o = (size_t)sprintf(text, "aclmock-model 1\n");
    for (int i = 0; i < 250000; i++)
        o += (size_t)sprintf(text + o, "op\tn%d\tT\t10\n", i % 1000);
    uint32_t model = 0;
    aclError ret = load_text(text, &model);
    free(text);
    REQUIRE(ret == ACL_SUCCESS);
    make_pipe(0);
    aclprofSubscribeConfig *cfg = subscribe_std(model, 0);
    REQUIRE(cfg != NULL);
    CHECK_EQ(execute_empty(model), ACL_SUCCESS);
    aclmockStats s = stats();
    CHECK_EQ(s.recordsEmitted, 250000);
    CHECK(s.recordsDropped >= 40000);
    CHECK(s.nameTableEntries >= 190000);   /* 100k+ live entries in the side table */
    CHECK_EQ(aclmockSetWriterDelayUs(0), ACL_SUCCESS);
    reader rd;
    reader_start(&rd, g_pipe[0][0], 80, 80 * 512, true);
    CHECK_EQ(aclprofModelUnSubscribe(model), ACL_SUCCESS);
    reader_join(&rd);
    CHECK_EQ(rd.errors, 0);
    s = stats();
    CHECK_EQ(s.recordsWritten + s.recordsDropped, 250000);
    CHECK_EQ(rd.ndecoded, s.recordsWritten);
    CHECK_EQ(s.nameTableEntries, 0);
    aclprofDestroySubscribeConfig(cfg);
    close(g_pipe[0][0]);
    reader_free(&rd);
}

/* The reader calls into the mock (a function that takes g_mock_lock) while the main thread
 * sits in aclprofModelUnSubscribe waiting for the pipe to drain: unsubscribe must not hold
 * the global lock while it waits, or this deadlocks until the stall timeout. */
TEST(reader_calls_mock_during_unsubscribe)
{
    uint32_t model = load_std_model(0);
    make_pipe(0);
    CHECK(fcntl(g_pipe[0][1], F_SETPIPE_SZ, 4096) >= 0);
    aclprofSubscribeConfig *cfg = subscribe_std(model, 0);
    REQUIRE(cfg != NULL);
    for (int i = 0; i < 300; i++)
        execute_empty(model);
    reader rd;
    memset(&rd, 0, sizeof rd);
    rd.fd = g_pipe[0][0];
    rd.rec_size = 80;
    rd.read_size = 80;
    rd.decode = true;
    rd.call_mock = true;
    pthread_create(&rd.thread, NULL, reader_main, &rd);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    CHECK_EQ(aclprofModelUnSubscribe(model), ACL_SUCCESS);
    clock_gettime(CLOCK_MONOTONIC, &b);
    reader_join(&rd);
    CHECK(b.tv_sec - a.tv_sec < 3);
    CHECK_EQ(rd.ndecoded, 900);
    CHECK_EQ(rd.errors, 0);
    CHECK_EQ(stats().recordsDropped, 0);
    aclprofDestroySubscribeConfig(cfg);
    close(g_pipe[0][0]);
    reader_free(&rd);
}

/* fork() with a live subscription: the child has no writer thread; unsubscribing and
 * resetting there must not wait for one, and must not disturb the parent's stream. */
TEST(fork_with_subscription)
{
    uint32_t model = load_std_model(0);
    make_pipe(0);
    reader rd;
    reader_start(&rd, g_pipe[0][0], 80, 800, true);
    aclprofSubscribeConfig *cfg = subscribe_std(model, 0);
    REQUIRE(cfg != NULL);
    for (int i = 0; i < 10; i++)
        execute_empty(model);
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        alarm(10);   /* a hang kills the child: the parent sees a signal */
        for (int i = 0; i < 5; i++)
            execute_empty(model);
        int ok = aclprofModelUnSubscribe(model) == ACL_SUCCESS && g_pipe[0][1] == -1;
        aclmockReset();
        _exit(ok ? 0 : 1);
    }
    for (int i = 0; i < 10; i++)
        execute_empty(model);
    int status = 0;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_EQ(aclprofModelUnSubscribe(model), ACL_SUCCESS);
    reader_join(&rd);
    CHECK_EQ(rd.ndecoded, 60);   /* the parent's 20 executions, nothing from the child */
    CHECK_EQ(rd.errors, 0);
    aclprofDestroySubscribeConfig(cfg);
    close(g_pipe[0][0]);
    reader_free(&rd);
}

/* ---- concurrency and throughput ------------------------------------------------------------ */

typedef struct exec_arg {
    uint32_t model;
    int times;
} exec_arg;

static void *exec_main(void *p)
{
    exec_arg *a = p;
    for (int i = 0; i < a->times; i++)
        execute_empty(a->model);
    return NULL;
}

TEST(concurrent_models_one_pipe)
{
    enum { NM = 4, TIMES = 200 };
    uint32_t models[NM];
    for (int i = 0; i < NM; i++)
        models[i] = load_std_model((uint32_t)i);
    make_pipe(0);
    reader rd;
    reader_start(&rd, g_pipe[0][0], 80, 80 * 64, true);
    aclprofSubscribeConfig *cfg = aclprofCreateSubscribeConfig(1, ACL_AICORE_NONE, &g_pipe[0][1]);
    for (int i = 0; i < NM; i++)
        CHECK_EQ(aclprofModelSubscribe(models[i], cfg), ACL_SUCCESS);
    pthread_t t[NM];
    exec_arg args[NM];
    for (int i = 0; i < NM; i++) {
        args[i] = (exec_arg){ models[i], TIMES };
        pthread_create(&t[i], NULL, exec_main, &args[i]);
    }
    for (int i = 0; i < NM; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < NM; i++)
        CHECK_EQ(aclprofModelUnSubscribe(models[i]), ACL_SUCCESS);
    reader_join(&rd);
    CHECK_EQ(rd.ndecoded, NM * TIMES * 3);
    CHECK_EQ(rd.errors, 0);
    uint64_t last_end[NM] = { 0 };
    for (size_t i = 0; i < rd.ndecoded; i++) {
        const unsigned char *r = rd.buf + i * 80;
        uint32_t m = rd32(r, OFF_MODEL);
        REQUIRE(m >= models[0] && m <= models[NM - 1]);
        size_t k = m - models[0];
        CHECK_EQ(rd32(r, OFF_DEV), k);
        CHECK(rd64(r, OFF_START) >= last_end[k]);   /* per model: monotonic, in order */
        last_end[k] = rd64(r, OFF_END);
    }
    CHECK_EQ(stats().nameTableEntries, 0);
    aclprofDestroySubscribeConfig(cfg);
    close(g_pipe[0][0]);
    reader_free(&rd);
}

/* ---- tests: fd lifetime across devices (CANN ProfStopAclSubscribe, audit row 1) ----- */

static int g_dpipe[3][2];   /* static: the mock keeps pointers to the write-end ints */

static void make_dpipe(int which)
{
    if (pipe2(g_dpipe[which], O_CLOEXEC) != 0) {
        perror("pipe2");
        exit(2);
    }
}

static aclprofSubscribeConfig *subscribe_dpipe(uint32_t model, int which)
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
static long drain_now(int rfd, bool *eof)
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

static bool fd_open(int fd)
{
    return fcntl(fd, F_GETFD) >= 0;
}

TEST(deferred_close_two_devices)
{
    uint32_t m0 = load_std_model(0), m1 = load_std_model(1);
    make_dpipe(0);
    make_dpipe(1);
    int w0 = g_dpipe[0][1], w1 = g_dpipe[1][1];
    aclprofSubscribeConfig *c0 = subscribe_dpipe(m0, 0), *c1 = subscribe_dpipe(m1, 1);
    REQUIRE(c0 != NULL && c1 != NULL);
    for (int i = 0; i < 10; i++) {
        (void)execute_empty(m0);
        (void)execute_empty(m1);
    }
    /* dev0's count reaches 0 but the host's does not: the close is only queued. */
    CHECK_EQ(aclprofModelUnSubscribe(m0), ACL_SUCCESS);
    CHECK_EQ(g_dpipe[0][1], w0);
    CHECK(fd_open(w0));
    bool eof;
    CHECK_EQ(drain_now(g_dpipe[0][0], &eof), 30);   /* every record flushed before return */
    CHECK(!eof);                                      /* ...but no EOF: a C reader waits */
    CHECK_EQ(aclmockGetMode(), ACLMOCK_MODE_SUBSCRIBE);
    CHECK_EQ(aclprofModelUnSubscribe(m0), ACL_ERROR_INVALID_MODEL_ID);   /* not subscribed */
    uint64_t emitted = stats().recordsEmitted;
    (void)execute_empty(m0);
    CHECK_EQ_U64(stats().recordsEmitted, emitted);   /* unsubscribed: nothing new */

    /* The last subscription of the process: both fds closed through the kept int*s. */
    CHECK_EQ(aclprofModelUnSubscribe(m1), ACL_SUCCESS);
    CHECK_EQ(g_dpipe[0][1], -1);
    CHECK_EQ(g_dpipe[1][1], -1);
    CHECK(!fd_open(w0) && !fd_open(w1));
    CHECK_EQ(drain_now(g_dpipe[0][0], &eof), 0);
    CHECK(eof);
    CHECK_EQ(drain_now(g_dpipe[1][0], &eof), 30);
    CHECK(eof);
    CHECK_EQ(aclmockGetMode(), ACLMOCK_MODE_OFF);
    aclprofDestroySubscribeConfig(c0);
    aclprofDestroySubscribeConfig(c1);
    close(g_dpipe[0][0]);
    close(g_dpipe[1][0]);
}

TEST(deferred_close_device_still_busy_closes_at_once)
{
    /* m1 and m2 on dev1, m0 on dev0. Unsubscribing m2 leaves dev1 with a count of 1: its
     * fd is closed at once. m0 is then deferred until m1, the last, goes. */
    uint32_t m0 = load_std_model(0), m1 = load_std_model(1), m2 = load_std_model(1);
    for (int i = 0; i < 3; i++)
        make_dpipe(i);
    int w[3] = { g_dpipe[0][1], g_dpipe[1][1], g_dpipe[2][1] };
    aclprofSubscribeConfig *c[3] = { subscribe_dpipe(m0, 0), subscribe_dpipe(m1, 1),
                                     subscribe_dpipe(m2, 2) };
    REQUIRE(c[0] && c[1] && c[2]);
    CHECK_EQ(aclprofModelUnSubscribe(m2), ACL_SUCCESS);
    CHECK_EQ(g_dpipe[2][1], -1);
    CHECK(!fd_open(w[2]));
    CHECK_EQ(aclprofModelUnSubscribe(m0), ACL_SUCCESS);
    CHECK_EQ(g_dpipe[0][1], w[0]);
    CHECK(fd_open(w[0]));
    CHECK_EQ(aclprofModelUnSubscribe(m1), ACL_SUCCESS);
    CHECK_EQ(g_dpipe[0][1], -1);
    CHECK_EQ(g_dpipe[1][1], -1);
    CHECK(!fd_open(w[0]) && !fd_open(w[1]));
    for (int i = 0; i < 3; i++) {
        aclprofDestroySubscribeConfig(c[i]);
        close(g_dpipe[i][0]);
    }
}

TEST(one_device_closes_at_once)
{
    uint32_t m0 = load_std_model(0), m1 = load_std_model(0);
    make_dpipe(0);
    make_dpipe(1);
    int w0 = g_dpipe[0][1], w1 = g_dpipe[1][1];
    aclprofSubscribeConfig *c0 = subscribe_dpipe(m0, 0), *c1 = subscribe_dpipe(m1, 1);
    REQUIRE(c0 != NULL && c1 != NULL);
    CHECK_EQ(aclprofModelUnSubscribe(m0), ACL_SUCCESS);   /* dev0 still has m1 */
    CHECK_EQ(g_dpipe[0][1], -1);
    CHECK(!fd_open(w0));
    CHECK_EQ(aclprofModelUnSubscribe(m1), ACL_SUCCESS);   /* dev0 and host reach 0 */
    CHECK_EQ(g_dpipe[1][1], -1);
    CHECK(!fd_open(w1));
    aclprofDestroySubscribeConfig(c0);
    aclprofDestroySubscribeConfig(c1);
    close(g_dpipe[0][0]);
    close(g_dpipe[1][0]);
}

TEST(deferred_close_same_fd_two_ints)
{
    /* Two ints holding the same fd, on two devices: at the last unsubscribe, dev0's pass
     * sees dev1's entry still holding that value and skips it (no close, no -1); dev1's
     * pass closes it. So the first int keeps a stale number, as in CANN. */
    uint32_t m0 = load_std_model(0), m1 = load_std_model(1);
    make_dpipe(0);
    g_dpipe[1][1] = g_dpipe[0][1];
    g_dpipe[1][0] = -1;
    int w = g_dpipe[0][1];
    aclprofSubscribeConfig *c0 = subscribe_dpipe(m0, 0), *c1 = subscribe_dpipe(m1, 1);
    REQUIRE(c0 != NULL && c1 != NULL);
    CHECK_EQ(aclprofModelUnSubscribe(m0), ACL_SUCCESS);
    CHECK_EQ(aclprofModelUnSubscribe(m1), ACL_SUCCESS);
    CHECK_EQ(g_dpipe[0][1], w);
    CHECK_EQ(g_dpipe[1][1], -1);
    CHECK(!fd_open(w));
    g_dpipe[0][1] = -1;
    aclprofDestroySubscribeConfig(c0);
    aclprofDestroySubscribeConfig(c1);
    close(g_dpipe[0][0]);
}

TEST(writer_reads_fd_through_kept_pointer)
{
    /* CANN looks the fd up through the int* for every record: changing the int while
     * subscribed redirects the records; a negative value drops them. */
    uint32_t m0 = load_std_model(0);
    make_dpipe(0);
    make_dpipe(1);
    int w0 = g_dpipe[0][1];
    aclprofSubscribeConfig *c0 = subscribe_dpipe(m0, 0);
    REQUIRE(c0 != NULL);
    (void)execute_empty(m0);
    CHECK_EQ(aclmockWaitWriterIdle(5000), ACL_SUCCESS);
    g_dpipe[0][1] = g_dpipe[1][1];
    (void)execute_empty(m0);
    CHECK_EQ(aclmockWaitWriterIdle(5000), ACL_SUCCESS);
    g_dpipe[0][1] = -7;
    (void)execute_empty(m0);
    CHECK_EQ(aclmockWaitWriterIdle(5000), ACL_SUCCESS);
    bool eof;
    CHECK_EQ(drain_now(g_dpipe[0][0], &eof), 3);
    CHECK_EQ(drain_now(g_dpipe[1][0], &eof), 3);
    CHECK_EQ_U64(stats().recordsDropped, 3);
    g_dpipe[0][1] = w0;
    CHECK_EQ(aclprofModelUnSubscribe(m0), ACL_SUCCESS);
    CHECK_EQ(g_dpipe[0][1], -1);
    CHECK(!fd_open(w0));
    aclprofDestroySubscribeConfig(c0);
    close(g_dpipe[1][1]);
    close(g_dpipe[0][0]);
    close(g_dpipe[1][0]);
}

TEST(shuffled_layout_getters_follow)
{
    /* Audit row 14: same size, modelId/threadId swapped, times rotated; the getters (the
     * library's) read the shuffled offsets, a reader using the standard ones reads junk. */
    CHECK_EQ(aclmockSetOpDescLayout(2), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclmockSetOpDescLayout(ACLMOCK_OPDESC_SHUFFLED), ACL_SUCCESS);
    uint32_t m0 = load_std_model(0);
    make_dpipe(0);
    aclprofSubscribeConfig *c0 = subscribe_dpipe(m0, 0);
    REQUIRE(c0 != NULL);
    (void)execute_empty(m0);
    CHECK_EQ(aclprofModelUnSubscribe(m0), ACL_SUCCESS);
    unsigned char recs[3 * 80];
    CHECK_EQ(read(g_dpipe[0][0], recs, sizeof recs), (ssize_t)sizeof recs);
    for (int i = 0; i < 3; i++) {
        const unsigned char *r = recs + i * 80;
        CHECK_EQ(rd32(r, OFF_SIG), ref_signature(r, 80));
        CHECK_EQ(rd32(r, OFF_TID), m0);                  /* modelId moved */
        CHECK_EQ(rd32(r, OFF_MODEL), k_tids[i]);         /* threadId moved */
        uint64_t start = rd64(r, OFF_DUR), end = rd64(r, OFF_START), dur = rd64(r, OFF_END);
        CHECK(start > 0 && end > start && dur == end - start);
        CHECK_EQ_U64(aclprofGetOpStart(r, 80, 0), start);
        CHECK_EQ_U64(aclprofGetOpEnd(r, 80, 0), end);
        CHECK_EQ_U64(aclprofGetOpDuration(r, 80, 0), dur);
        CHECK_EQ_U64(aclprofGetModelId(r, 80, 0), m0);
    }
    aclmockReset();   /* restores the standard layout */
    CHECK_EQ_U64(aclprofGetModelId(recs, 80, 0), k_tids[0]);
    aclprofDestroySubscribeConfig(c0);
    close(g_dpipe[0][0]);
}

TEST(resubscribe_deferred_model_keeps_old_entry)
{
    /* CANN: re-subscribing a model whose close is deferred, while its device has no
     * subscription, keeps the OLD entry (map insert): records go to the old int, the new
     * one gets nothing, and the model cannot be unsubscribed any more. */
    uint32_t m0 = load_std_model(0), m1 = load_std_model(1);
    for (int i = 0; i < 3; i++)
        make_dpipe(i);
    int w0 = g_dpipe[0][1], w1 = g_dpipe[1][1], w2 = g_dpipe[2][1];
    aclprofSubscribeConfig *c0 = subscribe_dpipe(m0, 0), *c1 = subscribe_dpipe(m1, 1);
    REQUIRE(c0 != NULL && c1 != NULL);
    CHECK_EQ(aclprofModelUnSubscribe(m0), ACL_SUCCESS);   /* deferred */
    aclprofSubscribeConfig *c2 = subscribe_dpipe(m0, 2);
    REQUIRE(c2 != NULL);                                  /* succeeds... */
    (void)execute_empty(m0);
    CHECK_EQ(aclmockWaitWriterIdle(5000), ACL_SUCCESS);
    bool eof;
    CHECK_EQ(drain_now(g_dpipe[0][0], &eof), 3);          /* ...but writes to the old int */
    CHECK_EQ(drain_now(g_dpipe[2][0], &eof), 0);
    CHECK_EQ(aclprofModelUnSubscribe(m0), ACL_ERROR_INVALID_MODEL_ID);
    /* dev0's phantom count keeps the host count above 0: m1's close is deferred forever. */
    CHECK_EQ(aclprofModelUnSubscribe(m1), ACL_SUCCESS);
    CHECK_EQ(g_dpipe[1][1], w1);
    CHECK(fd_open(w1) && fd_open(w0) && fd_open(w2));
    CHECK_EQ(aclmockGetMode(), ACLMOCK_MODE_SUBSCRIBE);
    aclmockReset();   /* ends everything: closes through the kept pointers */
    CHECK_EQ(g_dpipe[0][1], -1);
    CHECK_EQ(g_dpipe[1][1], -1);
    CHECK(!fd_open(w0) && !fd_open(w1));
    close(w2);
    for (int i = 0; i < 3; i++)
        close(g_dpipe[i][0]);
}

TEST(resubscribe_deferred_model_device_busy_takes_new_fd)
{
    /* If the device has a subscription again, CANN's UpdateSubscribeInfo re-subscribes the
     * old entry with the new int*: the old int is then never closed by the library. */
    uint32_t m0 = load_std_model(0), m1 = load_std_model(1), m2 = load_std_model(0);
    for (int i = 0; i < 3; i++)
        make_dpipe(i);
    int w0 = g_dpipe[0][1], w2 = g_dpipe[2][1];
    aclprofSubscribeConfig *c0 = subscribe_dpipe(m0, 0), *c1 = subscribe_dpipe(m1, 1);
    REQUIRE(c0 != NULL && c1 != NULL);
    CHECK_EQ(aclprofModelUnSubscribe(m0), ACL_SUCCESS);   /* deferred */
    aclprofSubscribeConfig *cfg_m2 = aclprofCreateSubscribeConfig(1, ACL_AICORE_NONE, &g_pipe[0][1]);
    make_pipe(0);
    CHECK_EQ(aclprofModelSubscribe(m2, cfg_m2), ACL_SUCCESS);   /* dev0 busy again */
    aclprofSubscribeConfig *c2 = subscribe_dpipe(m0, 2);
    REQUIRE(c2 != NULL);
    (void)execute_empty(m0);
    CHECK_EQ(aclprofModelUnSubscribe(m0), ACL_SUCCESS);   /* dev0 still has m2: at once */
    bool eof;
    CHECK_EQ(drain_now(g_dpipe[2][0], &eof), 3);
    CHECK(eof);
    CHECK_EQ(g_dpipe[2][1], -1);
    CHECK(!fd_open(w2));
    CHECK_EQ(aclprofModelUnSubscribe(m2), ACL_SUCCESS);
    CHECK_EQ(aclprofModelUnSubscribe(m1), ACL_SUCCESS);   /* the last one */
    CHECK_EQ(g_dpipe[1][1], -1);
    CHECK_EQ(g_pipe[0][1], -1);
    CHECK_EQ(g_dpipe[0][1], w0);                          /* forgotten by the library */
    CHECK(fd_open(w0));
    close(w0);
    g_dpipe[0][1] = -1;
    aclprofDestroySubscribeConfig(c0);
    aclprofDestroySubscribeConfig(c1);
    aclprofDestroySubscribeConfig(c2);
    aclprofDestroySubscribeConfig(cfg_m2);
    for (int i = 0; i < 3; i++)
        close(g_dpipe[i][0]);
    close(g_pipe[0][0]);
}

/* Not a pass/fail benchmark: prints the writer's rate to a fast reader. */
TEST(throughput)
{
    char *text = malloc(1000 * 20 + 32);
    REQUIRE(text != NULL);
    size_t o = (size_t)sprintf(text, "aclmock-model 1\n");
    for (int i = 0; i < 1000; i++)
        o += (size_t)sprintf(text + o, "op\top%d\tMatMul\t100\n", i);
    uint32_t model = 0;
    aclError ret = load_text(text, &model);
    free(text);
    REQUIRE(ret == ACL_SUCCESS);
    make_pipe(0);
    fcntl(g_pipe[0][1], F_SETPIPE_SZ, 1 << 20);
    reader rd;
    reader_start(&rd, g_pipe[0][0], 80, 80 * 4096, false);
    aclprofSubscribeConfig *cfg = subscribe_std(model, 0);
    REQUIRE(cfg != NULL);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < 150; i++)   /* 150000 records: below the 200000-record ring */
        execute_empty(model);
    CHECK_EQ(aclprofModelUnSubscribe(model), ACL_SUCCESS);
    reader_join(&rd);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double secs = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
    CHECK_EQ(rd.len, 150000 * 80);
    aclmockStats s = stats();
    printf("throughput: %.0f records/s (%llu records, %llu dropped, %.3f s)\n",
           (double)s.recordsWritten / secs, (unsigned long long)s.recordsWritten,
           (unsigned long long)s.recordsDropped, secs);
    aclprofDestroySubscribeConfig(cfg);
    close(g_pipe[0][0]);
    reader_free(&rd);
    /* 150000 unread names: the next aclmockReset frees them. */
}

/* ---- tests: datasets and aclmdlExecute's argument checks (audit row 15) -------------------- */

TEST(execute_needs_datasets)
{
    uint32_t model = 0;
    REQUIRE(load_text("aclmock-model 1\nop\ta\tA\t100\nop\tb\tB\t200\n", &model) == ACL_SUCCESS);
    make_pipe(0);
    aclprofSubscribeConfig *cfg = subscribe_std(model, 0);
    REQUIRE(cfg != NULL);
    aclmdlDataset *in = aclmdlCreateDataset(), *out = aclmdlCreateDataset();
    REQUIRE(in != NULL && out != NULL);
    CHECK_EQ(aclmdlGetDatasetNumBuffers(in), 0);
    CHECK_EQ(stats().datasetsInUse, 2);

    /* NULL datasets are rejected before the model id is looked at, as GE does. */
    CHECK_EQ(aclmdlExecute(model, NULL, NULL), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclmdlExecute(model, in, NULL), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclmdlExecute(model, NULL, out), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclmdlExecute(model + 1000, NULL, NULL), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclmdlExecute(model + 1000, in, out), ACL_ERROR_GE_EXEC_MODEL_ID_INVALID);
    CHECK_EQ(stats().recordsEmitted, 0);   /* none of them ran the model */

    CHECK_EQ(aclmdlExecute(model, in, out), ACL_SUCCESS);
    CHECK_EQ(stats().recordsEmitted, 2);

    /* The models have no inputs or outputs: any buffer is a count mismatch (GE 145000),
     * found after the model id. */
    static char host[16];
    aclDataBuffer *b = aclCreateDataBuffer(host, sizeof host);
    REQUIRE(b != NULL);
    CHECK_EQ(stats().dataBuffersInUse, 1);
    CHECK_EQ(aclmdlAddDatasetBuffer(NULL, b), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclmdlAddDatasetBuffer(in, NULL), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclmdlAddDatasetBuffer(in, b), ACL_SUCCESS);
    CHECK_EQ(aclmdlGetDatasetNumBuffers(in), 1);
    CHECK_EQ(aclmdlGetDatasetNumBuffers(NULL), 0);
    CHECK_EQ(aclmdlExecute(model, in, out), ACL_ERROR_GE_PARAM_INVALID);
    CHECK_EQ(aclmdlExecute(model + 1000, in, out), ACL_ERROR_GE_EXEC_MODEL_ID_INVALID);
    CHECK_EQ(stats().recordsEmitted, 2);

    /* An output buffer without memory makes a synchronous execute ask the model for that
     * output's size: 100000 here, before the model id. */
    aclmdlDataset *empty = aclmdlCreateDataset(), *out2 = aclmdlCreateDataset();
    aclDataBuffer *nodata = aclCreateDataBuffer(NULL, 0);
    REQUIRE(empty != NULL && out2 != NULL && nodata != NULL);
    CHECK_EQ(aclmdlAddDatasetBuffer(out2, nodata), ACL_SUCCESS);
    CHECK_EQ(aclmdlExecute(model, empty, out2), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclmdlExecute(model + 1000, empty, out2), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(stats().recordsEmitted, 2);

    /* Destroying a dataset leaves its buffers to the caller; destroyed or foreign handles
     * are rejected (the mock's handle registries). */
    CHECK_EQ(aclmdlDestroyDataset(in), ACL_SUCCESS);
    CHECK_EQ(stats().datasetsInUse, 3);
    CHECK_EQ(stats().dataBuffersInUse, 2);
    CHECK_EQ(aclmdlDestroyDataset(in), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclmdlDestroyDataset(NULL), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclmdlExecute(model, in, out), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclmdlGetDatasetNumBuffers(in), 0);
    CHECK_EQ(aclmdlAddDatasetBuffer((aclmdlDataset *)host, b), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclDestroyDataBuffer(b), ACL_SUCCESS);
    CHECK_EQ(aclDestroyDataBuffer(b), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclDestroyDataBuffer(NULL), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclmdlAddDatasetBuffer(out, b), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclmdlDestroyDataset(out2), ACL_SUCCESS);
    CHECK_EQ(aclDestroyDataBuffer(nodata), ACL_SUCCESS);

    /* Fault injection covers the new functions; aclmockReset leaves the caller's objects. */
    CHECK_EQ(aclmockFailNext("aclmdlCreateDataset", 1, 500001), ACL_SUCCESS);
    CHECK(aclmdlCreateDataset() == NULL);
    CHECK_EQ(aclmockFailNext("aclmdlAddDatasetBuffer", 1, 500001), ACL_SUCCESS);
    CHECK_EQ(aclmdlAddDatasetBuffer(out, b), 500001);
    CHECK_EQ(aclprofModelUnSubscribe(model), ACL_SUCCESS);
    CHECK_EQ(aclprofDestroySubscribeConfig(cfg), ACL_SUCCESS);
    close(g_pipe[0][0]);
    aclmockReset();
    CHECK_EQ(stats().datasetsInUse, 2);
    CHECK_EQ(aclmdlDestroyDataset(out), ACL_SUCCESS);
    CHECK_EQ(aclmdlDestroyDataset(empty), ACL_SUCCESS);
    CHECK_EQ(stats().datasetsInUse, 0);
}

/* Audit section 4 item 4: on a helper host every profiling call answers 200006, and the
 * u64 getters return it as their VALUE. */
TEST(helper_host)
{
    uint32_t model = 0;
    REQUIRE(load_text("aclmock-model 1\nop\ta\tA\t100\n", &model) == ACL_SUCCESS);
    CHECK_EQ(aclmockSetHelperHost(2), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclmockSetHelperHost(1), ACL_SUCCESS);
    unsigned char rec[80] = { 0 };
    size_t size = 0;
    CHECK_EQ(aclprofGetOpDescSize(&size), ACL_ERROR_FEATURE_UNSUPPORTED);
    CHECK_EQ(size, 0);
    CHECK_EQ_U64(aclprofGetOpStart(rec, sizeof rec, 0), 200006);
    CHECK_EQ_U64(aclprofGetOpEnd(rec, sizeof rec, 0), 200006);
    CHECK_EQ_U64(aclprofGetOpDuration(rec, sizeof rec, 0), 200006);
    CHECK_EQ(aclprofGetModelId(rec, sizeof rec, 0), 200006);
    CHECK(aclprofGetOpAttriValue(rec, sizeof rec, 0, ACL_SUBSCRIBE_ATTRI_THREADID) == NULL);
    CHECK_EQ(aclprofInit("/tmp", 4), ACL_ERROR_FEATURE_UNSUPPORTED);
    CHECK(aclprofCreateStamp() == NULL);
    CHECK(aclprofCreateSubscribeConfig(1, ACL_AICORE_NONE, &g_pipe[0][1]) == NULL);
    CHECK_EQ(aclprofModelSubscribe(model, NULL), ACL_ERROR_FEATURE_UNSUPPORTED);
    /* An injected fault still wins; the runtime and model calls are not profiling calls. */
    CHECK_EQ(aclmockFailNext("aclprofPop", 1, 500005), ACL_SUCCESS);
    CHECK_EQ(aclprofPop(), 500005);
    CHECK_EQ(aclprofPop(), ACL_ERROR_FEATURE_UNSUPPORTED);
    CHECK_EQ(execute_empty(model), ACL_SUCCESS);
    /* aclmockReset restores the default, and the environment sets it. */
    aclmockReset();
    CHECK_EQ(aclprofGetOpDescSize(&size), ACL_SUCCESS);
    CHECK_EQ(size, 80);
    setenv("ACLMOCK_HELPER_HOST", "1", 1);
    aclmockReset();
    CHECK_EQ(aclprofGetOpDescSize(&size), ACL_ERROR_FEATURE_UNSUPPORTED);
    unsetenv("ACLMOCK_HELPER_HOST");
    aclmockReset();
    CHECK_EQ(aclprofGetOpDescSize(&size), ACL_SUCCESS);
}

/* ---- what the records mean: step keypoints, device clock, devId (audit rows 11-13) ---- */

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* One step (START then END) on a fresh step info. */
static void record_step(void)
{
    aclprofStepInfo *si = aclprofCreateStepInfo();
    CHECK_NOT_NULL(si);
    CHECK_EQ(aclprofGetStepTimestamp(si, ACL_STEP_START, NULL), ACL_SUCCESS);
    usleep(1000);
    CHECK_EQ(aclprofGetStepTimestamp(si, ACL_STEP_END, NULL), ACL_SUCCESS);
    aclprofDestroyStepInfo(si);
}

/* Default: CANN stamps model id 0xFFFFFFFF on step keypoints, no subscription has it, so
 * the record never reaches a pipe; its name entry stays in the table (registered before
 * routing). An END without START, or a step without any subscription, makes nothing. */
TEST(keypoints_default_unrouted)
{
    record_step();   /* nothing subscribed: the analyzer does not run */
    CHECK_EQ(stats().keypointsUnrouted, 0);
    CHECK_EQ(stats().nameTableEntries, 0);

    uint32_t model = load_std_model(2);
    make_pipe(0);
    reader rd;
    reader_start(&rd, g_pipe[0][0], 80, 80 * 4, true);
    aclprofSubscribeConfig *cfg = subscribe_std(model, 0);
    REQUIRE(cfg != NULL);
    record_step();
    aclprofStepInfo *si = aclprofCreateStepInfo();
    CHECK_EQ(aclprofGetStepTimestamp(si, ACL_STEP_END, NULL), ACL_SUCCESS);   /* no start */
    aclprofDestroyStepInfo(si);
    CHECK_EQ(aclprofModelUnSubscribe(model), ACL_SUCCESS);
    reader_join(&rd);
    CHECK(rd.eof);
    CHECK_EQ(rd.len, 0);
    aclmockStats st = stats();
    CHECK_EQ(st.keypointsUnrouted, 1);
    CHECK_EQ(st.keypointsEmitted, 0);
    CHECK_EQ(st.recordsEmitted, 0);
    CHECK_EQ(st.nameTableEntries, 1);
    aclprofDestroySubscribeConfig(cfg);
    close(g_pipe[0][0]);
    reader_free(&rd);
}

/* Routed to a subscribed model: the keypoint record sits between the ops in emission
 * order and carries what Analyzer::ConstructAndUploadData puts in it. */
TEST(keypoints_routed_to_model)
{
    uint32_t model = load_std_model(2);
    CHECK_EQ(aclmockSetStepKeypoints(2, model), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclmockSetStepKeypoints(1, model), ACL_SUCCESS);
    make_pipe(0);
    reader rd;
    reader_start(&rd, g_pipe[0][0], 80, 80 * 4, true);
    aclprofSubscribeConfig *cfg = subscribe_std(model, 0);
    REQUIRE(cfg != NULL);
    uint64_t t0 = mono_ns();
    aclprofStepInfo *si = aclprofCreateStepInfo();
    CHECK_EQ(aclprofGetStepTimestamp(si, ACL_STEP_START, NULL), ACL_SUCCESS);
    CHECK_EQ(execute_empty(model), ACL_SUCCESS);
    usleep(1000);
    CHECK_EQ(aclprofGetStepTimestamp(si, ACL_STEP_END, NULL), ACL_SUCCESS);
    uint64_t t1 = mono_ns();
    aclprofDestroyStepInfo(si);
    CHECK_EQ(aclmockSetStepKeypoints(0, model), ACL_SUCCESS);
    record_step();   /* switched off: no record */
    CHECK_EQ(aclprofModelUnSubscribe(model), ACL_SUCCESS);
    reader_join(&rd);
    CHECK_EQ(rd.errors, 0);
    REQUIRE(rd.ndecoded == 4);
    CHECK_STR_EQ(rd.names[0], "conv1");   /* the model's three ops come first */
    CHECK_STR_EQ(rd.types[1], "\xff\xFE");
    const unsigned char *r = rd.buf + 3 * 80;
    CHECK_STR_EQ(rd.names[3], "keypoint_op");
    CHECK_STR_EQ(rd.types[3], "na");
    CHECK_EQ(rd32(r, OFF_MODEL), model);
    CHECK_EQ(rd32(r, OFF_FLAG), ACL_SUBSCRIBE_OP);
    CHECK_EQ(rd32(r, OFF_TID), 0);
    CHECK_EQ(rd32(r, OFF_DEV), 0);                 /* never set on this path */
    CHECK_EQ(rd64(r, OFF_EXEC), 0);
    uint64_t start = rd64(r, OFF_START), end = rd64(r, OFF_END);
    CHECK(t0 <= start && start + 1000000 <= end && end <= t1);
    CHECK_EQ_U64(rd64(r, OFF_DUR), end - start);
    aclmockStats st = stats();
    CHECK_EQ(st.keypointsEmitted, 1);
    CHECK_EQ(st.keypointsUnrouted, 0);
    CHECK_EQ(st.recordsEmitted, 4);
    CHECK_EQ(st.nameTableEntries, 0);   /* the reader fetched every name */
    aclprofDestroySubscribeConfig(cfg);
    close(g_pipe[0][0]);
    reader_free(&rd);
}

/* A device clock 1 h ahead of the host's, and devId left 0; reset restores both. */
TEST(device_clock_offset_and_devid_zero)
{
    const int64_t hour = 3600LL * 1000000000LL;
    CHECK_EQ(aclmockSetDeviceClockOffset(INT64_MIN), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclmockSetDeviceClockOffset(-(int64_t)mono_ns() - hour), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclmockSetDevIdZero(2), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclmockSetDeviceClockOffset(hour), ACL_SUCCESS);
    CHECK_EQ(aclmockSetDevIdZero(1), ACL_SUCCESS);
    uint32_t model = load_std_model(3);
    make_pipe(0);
    reader rd;
    reader_start(&rd, g_pipe[0][0], 80, 80 * 4, true);
    aclprofSubscribeConfig *cfg = subscribe_std(model, 0);
    REQUIRE(cfg != NULL);
    uint64_t t0 = mono_ns();
    CHECK_EQ(execute_empty(model), ACL_SUCCESS);
    CHECK_EQ(aclprofModelUnSubscribe(model), ACL_SUCCESS);
    reader_join(&rd);
    REQUIRE(rd.ndecoded == 3);
    for (size_t i = 0; i < 3; i++) {
        const unsigned char *r = rd.buf + i * 80;
        CHECK(rd64(r, OFF_START) >= t0 + (uint64_t)hour);
        CHECK(rd64(r, OFF_START) < mono_ns() + (uint64_t)hour + 1000000000u);
        CHECK_EQ(rd32(r, OFF_DEV), 0);
    }
    aclprofDestroySubscribeConfig(cfg);
    close(g_pipe[0][0]);
    reader_free(&rd);

    aclmockReset();   /* back to the host clock and filled devId */
    model = load_std_model(3);
    make_pipe(0);
    reader_start(&rd, g_pipe[0][0], 80, 80 * 4, true);
    cfg = subscribe_std(model, 0);
    REQUIRE(cfg != NULL);
    CHECK_EQ(execute_empty(model), ACL_SUCCESS);
    CHECK_EQ(aclprofModelUnSubscribe(model), ACL_SUCCESS);
    reader_join(&rd);
    REQUIRE(rd.ndecoded == 3);
    CHECK(rd64(rd.buf, OFF_START) < mono_ns() + 1000000000u);
    CHECK_EQ(rd32(rd.buf, OFF_DEV), 3);
    aclprofDestroySubscribeConfig(cfg);
    close(g_pipe[0][0]);
    reader_free(&rd);
}

/* The ACLMOCK_* defaults of this area are read at aclmockReset (and at load); an invalid
 * value keeps the default. */
TEST(record_settings_from_env)
{
    setenv("ACLMOCK_DEVICE_CLOCK_OFFSET_NS", "3600000000000", 1);
    setenv("ACLMOCK_DEVID_ZERO", "1", 1);
    setenv("ACLMOCK_STEP_KEYPOINT_MODEL", "1", 1);   /* model ids restart at 1 */
    setenv("ACLMOCK_STEP_KEYPOINTS", "yes", 1);      /* invalid: stays on */
    aclmockReset();
    uint32_t model = load_std_model(4);
    CHECK_EQ(model, 1);
    make_pipe(0);
    reader rd;
    reader_start(&rd, g_pipe[0][0], 80, 80 * 4, true);
    aclprofSubscribeConfig *cfg = subscribe_std(model, 0);
    REQUIRE(cfg != NULL);
    uint64_t t0 = mono_ns();
    aclprofStepInfo *si = aclprofCreateStepInfo();
    CHECK_EQ(aclprofGetStepTimestamp(si, ACL_STEP_START, NULL), ACL_SUCCESS);
    CHECK_EQ(execute_empty(model), ACL_SUCCESS);
    usleep(1000);
    CHECK_EQ(aclprofGetStepTimestamp(si, ACL_STEP_END, NULL), ACL_SUCCESS);
    aclprofDestroyStepInfo(si);
    CHECK_EQ(aclprofModelUnSubscribe(model), ACL_SUCCESS);
    reader_join(&rd);
    REQUIRE(rd.ndecoded == 4);
    CHECK_STR_EQ(rd.names[3], "keypoint_op");
    for (size_t i = 0; i < 4; i++) {
        CHECK_EQ(rd32(rd.buf + i * 80, OFF_DEV), 0);
        CHECK(rd64(rd.buf + i * 80, OFF_START) >= t0 + 3600000000000ull);
    }
    aclprofDestroySubscribeConfig(cfg);
    close(g_pipe[0][0]);
    reader_free(&rd);
    unsetenv("ACLMOCK_DEVICE_CLOCK_OFFSET_NS");
    unsetenv("ACLMOCK_DEVID_ZERO");
    unsetenv("ACLMOCK_STEP_KEYPOINT_MODEL");
    unsetenv("ACLMOCK_STEP_KEYPOINTS");
    aclmockReset();
}

int main(void)
{
    tmp_init();
    RUN(crc_reference_vectors);
    RUN(load_errors);
    RUN(load_accepts_and_ids);
    RUN(subscribe_execute_read);
    RUN(getter_rules);
    RUN(corrupt_every);
    RUN(chunked_writes);
    RUN(size_72);
    RUN(nonblocking_slow_reader);
    RUN(blocking_small_pipe_writer_delay);
    RUN(subscribe_config);
    RUN(subscribe_error_codes);
    RUN(time_info_off);
    RUN(microseconds_and_realtime);
    RUN(unload_subscribed_model);
    RUN(emit_log);
    RUN(fault_injection);
    RUN(reset_mid_subscription);
    RUN(reset_with_stalled_reader);
    RUN(reader_gone_epipe);
    RUN(queue_full_drops);
    RUN(reader_calls_mock_during_unsubscribe);
    RUN(fork_with_subscription);
    RUN(concurrent_models_one_pipe);
    RUN(deferred_close_two_devices);
    RUN(deferred_close_device_still_busy_closes_at_once);
    RUN(one_device_closes_at_once);
    RUN(deferred_close_same_fd_two_ints);
    RUN(writer_reads_fd_through_kept_pointer);
    RUN(shuffled_layout_getters_follow);
    RUN(resubscribe_deferred_model_keeps_old_entry);
    RUN(resubscribe_deferred_model_device_busy_takes_new_fd);
    RUN(throughput);
    RUN(execute_needs_datasets);
    RUN(helper_host);
    RUN(keypoints_default_unrouted);
    RUN(keypoints_routed_to_model);
    RUN(device_clock_offset_and_devid_zero);
    RUN(record_settings_from_env);
    int rc = test_summary();
    tmp_cleanup();
    return rc;
}
