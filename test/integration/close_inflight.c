/*
 * Closing a connection with sends still in flight.
 *
 * The sender posts 50 sends of 100 KiB and at once calls
 * pscom_close_connection(). The receiver (which stops driving progress for
 * a moment after the 10th message, so that the close overtakes its reading)
 * must get all 50 messages intact, then con_error(op READ, PSCOM_ERR_EOF)
 * for that connection; a receive posted after that must end with
 * PSCOM_REQ_STATE_ERROR rather than hang.
 *
 * With CLOSE_FROM_CALLBACK=K the io_done callback of send K closes the
 * connection instead (a transport may complete a small send inside
 * pscom_post_send: then the close comes before the later sends, which are
 * not posted, the connection being gone): every send posted must succeed
 * and arrive. CLOSE_MSG_LEN sets the message length (default 100 KiB).
 */
#include "itest.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define N_MSGS    50
#define PAUSE_AT  10
#define DEADLINE  2.0

static size_t msg_len = 100 * 1024;
static bool closed; /* by the io_done callback */

static void close_from_callback(pscom_request_t *req)
{
    pscom_close_connection(req->connection);
    closed = true;
}

static long env_num(const char *name, long dflt)
{
    const char *v = getenv(name);
    return v && *v ? strtol(v, NULL, 10) : dflt;
}

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
    long close_at = env_num("CLOSE_FROM_CALLBACK", -1);
    int posted = 0; /* before the close */

    itest_pscom_init();
    sock = itest_open_socket("sender", 0);
    ep   = itest_link_recv_str(link);
    itest_step("connecting to %s", ep);
    con = itest_connect(sock, ep);
    free(ep);

    itest_step("posting %d sends of %zu bytes%s", N_MSGS, msg_len,
               close_at >= 0 ? itest_fmt(", the callback of send %ld closes",
                                         close_at)
                             : "");
    for (uint32_t i = 0; i < N_MSGS && !closed; i++) {
        bufs[i] = malloc(msg_len);
        ITEST_ASSERT(bufs[i] != NULL, "out of memory");
        itest_fill(bufs[i], msg_len, msg_seed(i));
        reqs[i] = itest_request(8);
        pscom_req_prepare(reqs[i], con, bufs[i], msg_len, &i, sizeof(i));
        if (i == close_at) reqs[i]->ops.io_done = close_from_callback;
        posted++;
        pscom_post_send(reqs[i]);
    }
    /* What was posted before the close is known now (a later close finds
     * every send posted); the receiver reads while the close waits. */
    itest_note("%d of %d sends were posted before the close", posted, N_MSGS);
    itest_link_send_str(link, itest_fmt("%d", posted));
    if (close_at < 0) {
        itest_step("pscom_close_connection() with the sends in flight");
        pscom_close_connection(con);
    }

    itest_step("waiting for the sends to finish after the close");
    for (int i = 0; i < posted; i++) {
        itest_substep("waiting for send %d after the close", i);
        ITEST_PROGRESS_UNTIL(pscom_req_is_done(reqs[i]));
        ITEST_ASSERT_REQ_OK(reqs[i], "send %d, posted before "
                                     "pscom_close_connection()", i);
        pscom_request_free(reqs[i]);
        free(bufs[i]);
    }
    ITEST_ASSERT(close_at < 0 || closed, "the callback of send %ld ran",
                 close_at);

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

    itest_step("receiving what the sender posted before it closed");
    char *count = itest_link_recv_str(link);
    int expected = atoi(count);
    free(count);
    req = itest_request(8);
    buf = itest_alloc_guarded(msg_len);
    for (uint32_t i = 0; i < (uint32_t)expected; i++) {
        uint32_t seq;
        itest_substep("receiving message %u of %d", i, expected);
        if (i == PAUSE_AT) itest_sleep_ms(300);
        memset(buf, 0, msg_len);
        req->connection  = con;
        req->socket      = sock;
        req->data        = buf;
        req->data_len    = msg_len;
        req->xheader_len = sizeof(seq);
        pscom_post_recv(req);
        pscom_wait(req);
        ITEST_ASSERT_REQ_OK(req, "message %u of %d (sender closed after "
                                 "posting them; con_error %s)",
                            i, expected,
                            itest_con_error_of(con) ? "was called" :
                                                      "not called");
        memcpy(&seq, &req->xheader.user, sizeof(seq));
        ITEST_ASSERT_EQ(seq, i, "message order");
        ITEST_ASSERT_EQ(req->header.data_len, msg_len, "message %u length", i);
        ITEST_ASSERT_PATTERN(buf, msg_len, msg_seed(i), "message %u", i);
        ITEST_ASSERT_GUARD(buf, msg_len, "message %u", i);
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
    int failed;

    itest_watchdog(ITEST_DEFAULT_TIMEOUT + 10);
    msg_len = (size_t)env_num("CLOSE_MSG_LEN", (long)msg_len);
    itest_note("transport %s", itest_transport_name());
    itest_spawn(&rcv, "receiver", receiver, NULL);
    itest_spawn(&snd, "sender", sender, NULL);
    itest_link_relay(&rcv.link, &snd.link); /* the endpoint */
    itest_link_relay(&snd.link, &rcv.link); /* sends before the close */
    itest_link_relay(&rcv.link, &snd.link); /* "done" */

    failed = itest_children_check((itest_child_t *[]){&rcv, &snd}, 2);
    itest_note("%s", failed ? "FAILED" : "passed");
    return failed ? 1 : 0;
}
