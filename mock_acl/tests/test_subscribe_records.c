/* The records: CRC-32C signature, the op getters, corrupt/chunked/72-byte records, the
 * shuffled layout, the emit log, step keypoints, device clock and devId (src/opdesc.c,
 * subscribe_queue.c, subscribe_log.c, recordsettings.c).
 */
#include <sys/syscall.h>
#include <unistd.h>

#include "test_subscribe_common.h"

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

/* ACLMOCK_SIGNATURE=cann: the CRC one byte a step, as CANN's (issue 21: CANN's cost). The
 * values must not change: the writer signs with it, the getters check with it, records signed
 * by the reference CRC pass and any other signature fails; a bad value warns and keeps the
 * 8-bytes-a-step default. */
TEST(signature_cann_same_values)
{
    for (int round = 0; round < 2; round++) {
        setenv("ACLMOCK_SIGNATURE", round ? "bytes" : "cann", 1);   /* "bytes": invalid, default */
        aclmockReset();
        unsigned char rec[80];
        for (int i = 0; i < 80; i++)
            rec[i] = (unsigned char)(i * 37 + round);
        wr32(rec, OFF_SIG, ref_signature(rec, 80));
        uint32_t n = 0;
        CHECK_EQ(aclprofGetOpNum(rec, 80, &n), ACL_SUCCESS);
        CHECK_EQ(n, 1);
        wr32(rec, OFF_SIG, ref_signature(rec, 80) ^ 0x100u);
        CHECK_EQ(aclprofGetOpNum(rec, 80, &n), ACL_ERROR_INVALID_PARAM);
        wr32(rec, OFF_SIG, ref_signature(rec, 80));
        rec[79] ^= 1;   /* the last byte (a tail no 8-byte step reaches) is covered */
        CHECK_EQ(aclprofGetOpNum(rec, 80, &n), ACL_ERROR_INVALID_PARAM);

        uint32_t model = load_std_model(0);
        unsigned char *buf = NULL;
        size_t len = collect(model, 2, &buf, 80);
        REQUIRE(len == 6 * 80);
        for (size_t i = 0; i < len / 80; i++) {
            const unsigned char *r = buf + i * 80;
            CHECK_EQ_U64(rd32(r, OFF_SIG), ref_signature(r, 80));   /* signed as CANN signs */
            size_t l = 0;
            CHECK_EQ(aclprofGetOpTypeLen(r, 80, 0, &l), ACL_SUCCESS);   /* accepted by the getters */
        }
        char b[16];
        memset(b, 0, sizeof b);   /* the getter ends the string only at b[15] (as CANN) */
        CHECK_EQ(aclprofGetOpType(buf, 80, 0, b, sizeof b), ACL_SUCCESS);
        CHECK_STR_EQ(b, "Conv2D");
        free(buf);
    }
    unsetenv("ACLMOCK_SIGNATURE");
    aclmockReset();
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

/* Issue 25: the executing thread's tid as threadId, and a drifting device clock that
 * stretches durations by the drift (1000 ppm: a 1000 ns op lasts 1001 ns, +-1 rounding). */
TEST(stamp_thread_and_clock_drift)
{
    CHECK_EQ(aclmockSetStampThread(2), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclmockSetDeviceClockDrift(1000001), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclmockSetDeviceClockDrift(-1000001), ACL_ERROR_INVALID_PARAM);
    CHECK_EQ(aclmockSetStampThread(1), ACL_SUCCESS);
    CHECK_EQ(aclmockSetDeviceClockDrift(1000000), ACL_SUCCESS);
    uint32_t model = load_std_model(3);
    make_pipe(0);
    reader rd;
    reader_start(&rd, g_pipe[0][0], 80, 80 * 4, true);
    aclprofSubscribeConfig *cfg = subscribe_std(model, 0);
    REQUIRE(cfg != NULL);
    CHECK_EQ(execute_empty(model), ACL_SUCCESS);
    CHECK_EQ(aclprofModelUnSubscribe(model), ACL_SUCCESS);
    reader_join(&rd);
    REQUIRE(rd.ndecoded == 3);
    for (size_t i = 0; i < 3; i++) {
        const unsigned char *r = rd.buf + i * 80;
        CHECK_EQ(rd32(r, OFF_TID), (uint32_t)syscall(SYS_gettid));
        uint64_t dur = rd64(r, OFF_DUR);
        CHECK(dur >= 1 && dur == rd64(r, OFF_END) - rd64(r, OFF_START));
    }
    aclprofDestroySubscribeConfig(cfg);
    close(g_pipe[0][0]);
    reader_free(&rd);
    aclmockReset();
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
    RUN(signature_cann_same_values);
    RUN(getter_rules);
    RUN(corrupt_every);
    RUN(chunked_writes);
    RUN(size_72);
    RUN(emit_log);
    RUN(shuffled_layout_getters_follow);
    RUN(keypoints_default_unrouted);
    RUN(keypoints_routed_to_model);
    RUN(device_clock_offset_and_devid_zero);
    RUN(stamp_thread_and_clock_drift);
    RUN(record_settings_from_env);
    int rc = test_summary();
    tmp_cleanup();
    return rc;
}
