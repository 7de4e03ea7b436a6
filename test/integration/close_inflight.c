/*
 * Closing a connection with sends still in flight.
 *
 * The sender posts 50 sends of 100 KiB and at once calls
 * pscom_close_connection(). The receiver (which stops driving progress for
 * a moment after the 10th message, so that the close overtakes its reading)
 * must get all 50 messages intact, then con_error(op READ, PSCOM_ERR_EOF)
 * for that connection; a receive posted after that must end with
 * PSCOM_REQ_STATE_ERROR rather than hang.
 */
#include "itest.h"

#include <stdlib.h>
#include <string.h>

#define N_MSGS    50
#define MSG_LEN   (100 * 1024)
#define PAUSE_AT  10
#define DEADLINE  2.0

static uint32_t msg_seed(uint32_t seq)
{
    return 0xc105e000u + seq;
}

static int sender(itest_link_t *link, void *arg)
{
    pscom_socket_t *sock;
    pscom_connection_t *con;
    pscom_request_t *reqs[N_MSGS];
    void *bufs[N_MSGS];
    char *ep;

    itest_pscom_init();
    sock = itest_open_socket("sender", 0);
    ep   = itest_link_recv_str(link);
    itest_step("connecting to %s", ep);
    con = itest_connect(sock, ep);
    free(ep);

    itest_step("posting %d sends of %d bytes", N_MSGS, MSG_LEN);
    for (uint32_t i = 0; i < N_MSGS; i++) {
        bufs[i] = malloc(MSG_LEN);
        ITEST_ASSERT(bufs[i] != NULL, "out of memory");
        itest_fill(bufs[i], MSG_LEN, msg_seed(i));
        reqs[i] = itest_request(8);
        pscom_req_prepare(reqs[i], con, bufs[i], MSG_LEN, &i, sizeof(i));
        pscom_post_send(reqs[i]);
    }
    itest_step("pscom_close_connection() with the sends in flight");
    pscom_close_connection(con);

    itest_step("waiting for the sends to finish after the close");
    for (int i = 0; i < N_MSGS; i++) {
        itest_substep("waiting for send %d after the close", i);
        ITEST_PROGRESS_UNTIL(pscom_req_is_done(reqs[i]));
        ITEST_ASSERT_REQ_OK(reqs[i], "send %d, posted before "
                                     "pscom_close_connection()", i);
        pscom_request_free(reqs[i]);
        free(bufs[i]);
    }
    itest_link_send_str(link, "closed");

    /* Keep driving progress (a close may finish in the background) until
     * the receiver has everything. */
    itest_step("waiting for the receiver to finish");
    while (!itest_link_ready(link, 0)) itest_progress_once();
    free(itest_link_recv_str(link));
    itest_step("closing the socket");
    pscom_close_socket(sock);
    return 0;
}

static int receiver(itest_link_t *link, void *arg)
{
    pscom_socket_t *sock;
    pscom_connection_t *con;
    pscom_request_t *req, *late;
    const itest_con_event_t *ev;
    void *buf;
    char *ep, small[64];
    int eof_seen_at = -1;

    itest_pscom_init();
    sock = itest_open_socket("receiver", 1);
    ep   = itest_ep_str(sock);
    itest_link_send_str(link, ep);
    free(ep);
    itest_step("waiting for the sender to connect");
    con = itest_wait_accept(1);

    itest_step("receiving %d messages", N_MSGS);
    req = itest_request(8);
    buf = itest_alloc_guarded(MSG_LEN);
    for (uint32_t i = 0; i < N_MSGS; i++) {
        uint32_t seq;
        itest_substep("receiving message %u", i);
        if (i == PAUSE_AT) itest_sleep_ms(300);
        memset(buf, 0, MSG_LEN);
        req->connection  = con;
        req->socket      = sock;
        req->data        = buf;
        req->data_len    = MSG_LEN;
        req->xheader_len = sizeof(seq);
        pscom_post_recv(req);
        pscom_wait(req);
        ITEST_ASSERT_REQ_OK(req, "message %u of %d (sender closed after "
                                 "posting them; con_error %s)",
                            i, N_MSGS,
                            itest_con_error_of(con) ? "was called" :
                                                      "not called");
        memcpy(&seq, &req->xheader.user, sizeof(seq));
        ITEST_ASSERT_EQ(seq, i, "message order");
        ITEST_ASSERT_EQ(req->header.data_len, MSG_LEN, "message %u length", i);
        ITEST_ASSERT_PATTERN(buf, MSG_LEN, msg_seed(i), "message %u", i);
        ITEST_ASSERT_GUARD(buf, MSG_LEN, "message %u", i);
        if (eof_seen_at < 0 && itest_con_error_of(con)) eof_seen_at = (int)i;
    }
    pscom_request_free(req);
    free(buf);

    itest_step("waiting for con_error(READ, EOF)");
    ITEST_PROGRESS_UNTIL(itest_con_error_of(con) != NULL);
    ev = itest_con_error_of(con);
    itest_note("con_error(op %s, %s) %s", pscom_op_str(ev->op),
               pscom_err_str(ev->err),
               eof_seen_at < 0 ?
                   "after the last message" :
                   itest_fmt("already when message %d was received",
                             eof_seen_at));
    ITEST_ASSERT_EQ(ev->op, PSCOM_OP_READ, "con_error operation (%s)",
                    pscom_op_str(ev->op));
    ITEST_ASSERT_EQ(ev->err, PSCOM_ERR_EOF, "con_error error (%s)",
                    pscom_err_str(ev->err));

    itest_step("a receive posted after the EOF fails");
    late = itest_request(8);
    late->connection  = con;
    late->socket      = sock;
    late->data        = small;
    late->data_len    = sizeof(small);
    late->xheader_len = 0;
    {
        double t0 = itest_now();
        pscom_post_recv(late);
        while (!pscom_req_is_done(late) && itest_now() - t0 < DEADLINE)
            itest_progress_once();
        ITEST_ASSERT_REQ_STATE(late, PSCOM_REQ_STATE_ERROR,
                               "receive posted on a connection closed by the "
                               "peer (waited %.1f s)",
                               DEADLINE);
    }
    pscom_request_free(late);
    ITEST_ASSERT_EQ(itest_con_error_count(), 1, "con_error calls in all");

    itest_link_send_str(link, "done");
    itest_step("closing");
    pscom_close_socket(sock);
    return 0;
}

int main(void)
{
    itest_child_t rcv, snd;
    char *ep, *note;
    int failed;

    itest_watchdog(ITEST_DEFAULT_TIMEOUT + 10);
    itest_note("transport %s", itest_transport_name());
    itest_spawn(&rcv, "receiver", receiver, NULL);
    ep = itest_link_recv_str(&rcv.link);
    itest_spawn(&snd, "sender", sender, NULL);
    itest_link_send_str(&snd.link, ep);
    free(ep);

    note = itest_link_recv_str(&rcv.link); /* "done" */
    itest_link_send_str(&snd.link, note);
    free(note);
    note = itest_link_recv_str(&snd.link); /* "closed" */
    free(note);

    failed = itest_children_check((itest_child_t *[]){&rcv, &snd}, 2);
    itest_note("%s", failed ? "FAILED" : "passed");
    return failed ? 1 : 0;
}
