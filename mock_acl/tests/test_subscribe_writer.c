/* The pipe writer thread: slow and non-blocking readers, reset mid-subscription and with
 * a stalled reader, EPIPE, a full queue, a reader that calls the mock while an unsubscribe
 * waits, fork() (src/subscribe_writer.c).
 */
#include <signal.h>
#include <sys/wait.h>

#include "test_subscribe_common.h"

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

/* The writer thread is named while it runs (benchmarks and top tell the library's writer
 * from the reader's threads by it) and is gone once the last subscription ended. */
TEST(writer_thread_named)
{
    uint32_t model = load_std_model(0);
    CHECK_EQ(threads_named("aclmock-writer"), 0);
    make_pipe(0);
    reader rd;
    reader_start(&rd, g_pipe[0][0], 80, 4096, false);
    aclprofSubscribeConfig *cfg = subscribe_std(model, 0);
    REQUIRE(cfg != NULL);
    execute_empty(model);
    CHECK_EQ(aclmockWaitWriterIdle(5000), ACL_SUCCESS);
    CHECK_EQ(threads_named("aclmock-writer"), 1);
    CHECK_EQ(aclprofModelUnSubscribe(model), ACL_SUCCESS);
    reader_join(&rd);
    CHECK_EQ(rd.len, 3 * 80);
    CHECK_EQ(threads_named_settled("aclmock-writer", 0), 0);
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

/* ---- ACLMOCK_PIPE_WRITER=cann (issue 22; CANN's PipeTransport, parser_transport.cpp:99-149) -- */

/* In a child: SIGPIPE's disposition `sig`, the CANN writer, a pipe whose read end is closed,
 * one execution (3 records). Exits 0 when all 3 were dropped and counted. */
static void closed_reader_child(void (*sig)(int), bool block)
{
    alarm(10);
    signal(SIGPIPE, sig);
    if (block) {   /* the subscribing thread blocks SIGPIPE: the writer inherits it */
        sigset_t p;
        sigemptyset(&p);
        sigaddset(&p, SIGPIPE);
        pthread_sigmask(SIG_BLOCK, &p, NULL);
    }
    setenv("ACLMOCK_PIPE_WRITER", "cann", 1);
    aclmockReset();
    uint32_t model = load_std_model(0);
    make_pipe(0);
    close(g_pipe[0][0]);
    aclprofSubscribeConfig *cfg = subscribe_std(model, 0);
    if (cfg == NULL)
        _exit(3);
    execute_empty(model);
    aclmockWaitWriterIdle(5000);
    aclmockStats s = stats();
    _exit(s.recordsDropped == 3 && s.recordsWritten == 0 ? 0 : 1);
}

static int run_child(void (*sig)(int), bool block)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0)
        closed_reader_child(sig, block);
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid)
        return -1;
    return status;
}

/* The CANN writer does not block SIGPIPE: a closed read end kills a process that keeps the
 * default disposition; one that ignores SIGPIPE, or whose subscribing thread blocked it,
 * gets EPIPE and the records are dropped. */
TEST(cann_writer_sigpipe)
{
    int status = run_child(SIG_DFL, false);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGPIPE);
    status = run_child(SIG_IGN, false);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    /* CANN's threads inherit the subscribing thread's mask: blocked there, EPIPE it is
     * (what the binding does around aclprofModelSubscribe). */
    status = run_child(SIG_DFL, true);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    /* The mock's own default (kind) writer blocks SIGPIPE: the process survives
     * (reader_gone_epipe above, in this process). */
}

/* A short write is not continued: with a 30-byte write chunk each record's first 30 bytes
 * reach the pipe and the rest is dropped, the record counted as dropped. */
TEST(cann_writer_short_write_not_continued)
{
    setenv("ACLMOCK_PIPE_WRITER", "cann", 1);
    aclmockReset();
    unsetenv("ACLMOCK_PIPE_WRITER");
    CHECK_EQ(aclmockSetWriteChunk(30), ACL_SUCCESS);
    uint32_t model = load_std_model(0);
    make_pipe(0);
    aclprofSubscribeConfig *cfg = subscribe_std(model, 0);
    REQUIRE(cfg != NULL);
    execute_empty(model);
    CHECK_EQ(aclmockWaitWriterIdle(5000), ACL_SUCCESS);
    CHECK_EQ(aclprofModelUnSubscribe(model), ACL_SUCCESS);
    unsigned char buf[512];
    size_t got = 0;
    for (ssize_t r; (r = read(g_pipe[0][0], buf + got, sizeof buf - got)) > 0;)
        got += (size_t)r;
    CHECK_EQ(got, 90);
    aclmockStats s = stats();
    CHECK_EQ(s.recordsDropped, 3);
    CHECK_EQ(s.recordsWritten, 0);
    CHECK_EQ(s.writeCalls, 3);
    aclprofDestroySubscribeConfig(cfg);
    close(g_pipe[0][0]);
}

int main(void)
{
    tmp_init();
    RUN(nonblocking_slow_reader);
    RUN(writer_thread_named);
    RUN(blocking_small_pipe_writer_delay);
    RUN(reset_mid_subscription);
    RUN(reset_with_stalled_reader);
    RUN(reader_gone_epipe);
    RUN(queue_full_drops);
    RUN(reader_calls_mock_during_unsubscribe);
    RUN(fork_with_subscription);
    RUN(cann_writer_sigpipe);
    RUN(cann_writer_short_write_not_continued);
    int rc = test_summary();
    tmp_cleanup();
    return rc;
}
