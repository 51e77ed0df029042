/* The fd lifetime across devices (CANN ProfStopAclSubscribe, audit row 1): deferred close,
 * shared fds, the kept int*, re-subscribing a deferred model (src/subscribe.c).
 */
#include "test_subscribe_common.h"

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

int main(void)
{
    tmp_init();
    RUN(deferred_close_two_devices);
    RUN(deferred_close_device_still_busy_closes_at_once);
    RUN(one_device_closes_at_once);
    RUN(deferred_close_same_fd_two_ints);
    RUN(writer_reads_fd_through_kept_pointer);
    RUN(resubscribe_deferred_model_keeps_old_entry);
    RUN(resubscribe_deferred_model_device_busy_takes_new_fd);
    int rc = test_summary();
    tmp_cleanup();
    return rc;
}
