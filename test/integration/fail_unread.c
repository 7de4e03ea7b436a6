/*
 * pscom_fail_connection on a connection whose peer sent messages that are
 * still unread in this process's socket buffer: a layer that learns of the
 * peer's end by other means (libpscom_pmix, from a PMIx event) fails the
 * connection before pscom ever read them. They must stay receivable, as
 * they would have been without the call: the transport delivers what it
 * holds before it reports the end of the stream.
 *
 * Part 1: the sender sends its messages (each done: the kernel has it),
 * tells the orchestrator, and is killed; the receiver, which made no pscom
 * call meanwhile, fails the connection and then receives every message
 * intact. con_error comes once (the end of stream the drain met, or the
 * failure), a receive after the last message fails.
 *
 * Part 2: the same with a sender that stays alive and silent (a hung peer,
 * a node whose kernel is gone): no end of stream comes, the connection is
 * failed with the caller's error, and the messages are still there.
 *
 * Without reading first, the failure dropped every unread byte: 0 of the
 * messages arrived.
 */
#include "itest.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NMSG    50
#define MSG_LEN 8192

static uint32_t seed_of(uint32_t i)
{
    return 0xfa170000u + i;
}

static int sender(itest_link_t *link, void *arg)
{
    (void)arg;
    pscom_socket_t *s;
    pscom_connection_t *con = itest_connect_to_peer(link, "sender", &s);
    char *buf = malloc(MSG_LEN);
    ITEST_ASSERT(buf, "allocation");
    pscom_request_t *r = itest_request(4);
    for (uint32_t i = 0; i < NMSG; i++) {
        itest_substep("sending message %u", i);
        itest_fill(buf, MSG_LEN, seed_of(i));
        pscom_req_prepare(r, con, buf, MSG_LEN, &i, sizeof(i));
        pscom_post_send(r);
        pscom_wait(r);
        ITEST_ASSERT_REQ_OK(r, "message %u", i);
    }
    itest_step("sent %d messages of %d bytes; waiting to be killed", NMSG,
               MSG_LEN);
    itest_link_send_str(link, "sent");
    for (;;) pause();
    return 0;
}

static int receiver(itest_link_t *link, void *arg)
{
    int killed = arg != NULL;
    pscom_socket_t *s;
    pscom_connection_t *con = itest_accept_peer(link, "receiver", &s);

    itest_step("waiting, without pscom, until the sender %s",
               killed ? "was killed" : "has sent everything");
    if (killed)
        itest_kill_time(link, -1.0, 1);
    else
        itest_link_wait_note(link);
    itest_sleep_ms(100);

    itest_step("failing the connection with its messages unread");
    pscom_err_t rc = pscom_fail_connection(con, PSCOM_ERR_IOERROR);
    ITEST_ASSERT_EQ(con->state, PSCOM_CON_STATE_CLOSED, "connection state");
    ITEST_ASSERT_EQ(itest_con_error_count(), 1, "con_error calls");
    const itest_con_event_t *e = itest_con_error_of(con);
    ITEST_ASSERT(e != NULL, "con_error named another connection");
    if (killed) {
        /* The drain may meet the end of the stream: that end stands. */
        ITEST_ASSERT(rc == PSCOM_SUCCESS || rc == PSCOM_ERR_ALREADY,
                     "pscom_fail_connection: %s", pscom_err_str(rc));
        ITEST_ASSERT((rc == PSCOM_SUCCESS) == (e->err == PSCOM_ERR_IOERROR),
                     "returned %s, con_error said %s", pscom_err_str(rc),
                     pscom_err_str(e->err));
    } else {
        ITEST_ASSERT_EQ(rc, PSCOM_SUCCESS, "pscom_fail_connection: %s",
                        pscom_err_str(rc));
        ITEST_ASSERT_EQ(e->err, PSCOM_ERR_IOERROR, "con_error's error");
    }

    char *buf = malloc(MSG_LEN);
    ITEST_ASSERT(buf, "allocation");
    pscom_request_t *r = itest_request(4);
    for (uint32_t i = 0; i < NMSG; i++) {
        itest_substep("receiving message %u", i);
        pscom_req_prepare(r, con, buf, MSG_LEN, NULL, 4);
        pscom_post_recv(r);
        pscom_wait(r);
        ITEST_ASSERT_REQ_OK(r, "message %u of %d, sent before the failure", i,
                            NMSG);
        uint32_t tag;
        memcpy(&tag, &r->xheader.user, sizeof(tag));
        ITEST_ASSERT_EQ(tag, i, "message order");
        ITEST_ASSERT_PATTERN(buf, MSG_LEN, seed_of(i), "message %u", i);
    }
    itest_step("a receive after the last message fails");
    pscom_req_prepare(r, con, buf, MSG_LEN, NULL, 4);
    pscom_post_recv(r);
    pscom_wait(r);
    ITEST_ASSERT_REQ_STATE(r, PSCOM_REQ_STATE_ERROR, "receive after the last");
    ITEST_ASSERT_EQ(itest_con_error_count(), 1, "con_error calls");
    itest_note("%d messages received after the failure (%s)", NMSG,
               pscom_err_str(rc));
    pscom_request_free(r);
    free(buf);
    pscom_close_socket(s);
    if (!killed) itest_link_send_str(link, "done");
    return 0;
}

static int part(int killed)
{
    itest_child_t rcv, snd;
    int failed;

    itest_note("part %d: the sender %s", killed ? 1 : 2,
               killed ? "is killed" : "stays alive and silent");
    itest_spawn(&rcv, "receiver", receiver, killed ? (void *)1 : NULL);
    itest_spawn(&snd, "sender", sender, NULL);
    itest_link_relay(&rcv.link, &snd.link); /* the endpoint */
    itest_step("waiting until the sender has sent everything");
    itest_link_wait_note(&snd.link);
    if (killed) {
        failed = itest_kill_peer(&snd, &rcv.link);
        failed |= itest_child_check(&rcv);
    } else {
        itest_link_write(&rcv.link, "", 0);
        itest_step("waiting for the receiver");
        itest_link_wait_note(&rcv.link);
        failed = itest_child_check(&rcv);
        failed |= itest_kill_peer(&snd, NULL);
    }
    return failed;
}

static int part1(void)
{
    return part(1);
}

static int part2(void)
{
    return part(0);
}

int main(void)
{
    setenv("PSCOM_TEST_TRANSPORT", "tcp", 1);
    return itest_run_parts((const itest_part_fn_t[]){part1, part2}, 2);
}
