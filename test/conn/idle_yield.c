/*
 * A process that waits for a message that is slow to come gives the CPU
 * away: with more processes than cores the peer it waits for may need that
 * core (MPI libraries call pscom_wait_any in their progress loop, and a
 * loop that never yields made their collectives crawl on an oversubscribed
 * node).
 *
 * The program is linked with the static core and -Wl,--wrap=sched_yield so
 * that it counts the library's calls. PSP_SCHED_YIELD is 0 (meson sets it):
 * yielding must come from the idle rule, not from the setting. The sender
 * sleeps for a while without calling pscom, then sends; the receiver waits
 * for the first message with pscom_wait_any and for the second with
 * pscom_wait. Both waits must have called sched_yield, and both messages
 * must arrive intact. The waits are on the transport PSCOM_TEST_TRANSPORT.
 */
#include "itest.h"

#include <sched.h>
#include <stdlib.h>

int __real_sched_yield(void);
int __wrap_sched_yield(void);

static unsigned long yields;

int __wrap_sched_yield(void)
{
    yields++;
    return __real_sched_yield();
}

#define MSG_LEN 4096
#define PAUSE_MS 300

static void send_after_pause(pscom_connection_t *con, uint32_t seed)
{
    char buf[MSG_LEN];
    itest_sleep_ms(PAUSE_MS);
    itest_fill(buf, sizeof(buf), seed);
    pscom_request_t *req = itest_request(0);
    pscom_req_prepare(req, con, buf, sizeof(buf), NULL, 0);
    pscom_post_send(req);
    pscom_wait(req);
    ITEST_ASSERT_REQ_OK(req, "send %u", seed);
    pscom_request_free(req);
}

/* Post a receive and wait for it with pscom_wait_any (any = 1) or
 * pscom_wait; the number of sched_yield calls during the wait. */
static unsigned long recv_counting(pscom_connection_t *con, uint32_t seed,
                                   int any)
{
    char *buf = itest_alloc_guarded(MSG_LEN);
    pscom_request_t *req = itest_request(0);
    pscom_req_prepare(req, con, buf, MSG_LEN, NULL, 0);
    pscom_post_recv(req);
    yields = 0;
    if (any)
        while (!pscom_req_is_done(req)) pscom_wait_any();
    else
        pscom_wait(req);
    unsigned long n = yields;
    ITEST_ASSERT_REQ_OK(req, "receive %u", seed);
    ITEST_ASSERT_EQ(req->header.data_len, MSG_LEN, "length of message %u",
                    seed);
    ITEST_ASSERT_PATTERN(buf, MSG_LEN, seed, "message %u", seed);
    ITEST_ASSERT_GUARD(buf, MSG_LEN, "message %u", seed);
    pscom_request_free(req);
    free(buf);
    return n;
}

static int receiver(itest_link_t *link, void *arg)
{
    itest_pscom_init();
    pscom_socket_t *sock = itest_open_socket("receiver", 1);
    char *ep = itest_ep_str(sock);
    itest_link_send_str(link, ep);
    free(ep);
    pscom_connection_t *con = itest_wait_accept(1);

    itest_step("waiting with pscom_wait_any for a message %d ms away",
               PAUSE_MS);
    unsigned long any = recv_counting(con, 1, 1);
    itest_note("pscom_wait_any called sched_yield %lu times", any);
    ITEST_ASSERT(any > 0, "pscom_wait_any busy-polled %d ms without "
                          "yielding the CPU", PAUSE_MS);

    itest_step("waiting with pscom_wait for a message %d ms away", PAUSE_MS);
    unsigned long one = recv_counting(con, 2, 0);
    itest_note("pscom_wait called sched_yield %lu times", one);
    ITEST_ASSERT(one > 0, "pscom_wait busy-polled %d ms without yielding "
                          "the CPU", PAUSE_MS);

    itest_link_send_u64(link, 0);
    itest_link_recv_u64(link);
    pscom_close_socket(sock);
    return 0;
}

static int sender(itest_link_t *link, void *arg)
{
    itest_pscom_init();
    char *ep = itest_link_recv_str(link);
    pscom_socket_t *sock = itest_open_socket("sender", 0);
    pscom_connection_t *con = itest_connect(sock, ep);
    free(ep);
    itest_step("sending two messages, each after a pause");
    send_after_pause(con, 1);
    send_after_pause(con, 2);
    itest_link_send_u64(link, 0);
    itest_link_recv_u64(link);
    pscom_close_socket(sock);
    return 0;
}

int main(void)
{
    itest_child_t rcv, snd;

    itest_watchdog(ITEST_DEFAULT_TIMEOUT + 10);
    itest_spawn(&rcv, "receiver", receiver, NULL);
    char *ep = itest_link_recv_str(&rcv.link);
    itest_spawn(&snd, "sender", sender, NULL);
    itest_link_send_str(&snd.link, ep);
    free(ep);
    itest_link_recv_u64(&rcv.link);
    itest_link_recv_u64(&snd.link);
    itest_link_send_u64(&rcv.link, 0);
    itest_link_send_u64(&snd.link, 0);
    return itest_children_check((itest_child_t *[]){&rcv, &snd}, 2);
}
