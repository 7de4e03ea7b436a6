/*
 * A message larger than its receive buffer: the receive ends TRUNCATED (not
 * successful) with the first bytes right, nothing written behind the buffer,
 * and header.data_len the sent length; the next message on the same
 * connection arrives intact.
 *
 * The sender sends 1000 B into 100 B, then 64 KiB, then 1 MiB into 100 B,
 * then 64 KiB; once with the receives posted before the messages come and
 * once with the messages waiting before the receives are posted. meson runs
 * it again with PSP_RENDEZVOUS=4096, which makes the 1 MiB message (and the
 * 64 KiB ones) go by rendezvous.
 */
#include "itest.h"

#include <stdlib.h>
#include <string.h>

struct trunc_msg {
    size_t send_len;
    size_t recv_len;
};

static const struct trunc_msg msgs[] = {
    {1000, 100},
    {64 * 1024, 64 * 1024},
    {1024 * 1024, 100},
    {64 * 1024, 64 * 1024},
};
#define N_MSGS ((int)(sizeof(msgs) / sizeof(msgs[0])))

struct trunc_xh {
    uint32_t round;
    uint32_t idx;
};

static uint32_t seed_of(int round, int idx)
{
    return 0x7700u + (uint32_t)round * 16u + (uint32_t)idx;
}

static const char *round_name(int round)
{
    return round == 0 ? "receives posted first" : "messages arrive first";
}

/* ---------------------------------------------------------------------- */

static void post_sends(pscom_connection_t *con, int round,
                       pscom_request_t **reqs, void **bufs)
{
    for (int i = 0; i < N_MSGS; i++) {
        struct trunc_xh xh = {.round = (uint32_t)round, .idx = (uint32_t)i};
        bufs[i] = malloc(msgs[i].send_len);
        ITEST_ASSERT(bufs[i] != NULL, "out of memory");
        itest_fill(bufs[i], msgs[i].send_len, seed_of(round, i));
        reqs[i] = itest_request(sizeof(xh));
        pscom_req_prepare(reqs[i], con, bufs[i], msgs[i].send_len, &xh,
                          sizeof(xh));
        pscom_post_send(reqs[i]);
    }
}

static void wait_sends(int round, pscom_request_t **reqs, void **bufs)
{
    for (int i = 0; i < N_MSGS; i++) {
        itest_substep("round %d: waiting for send %d (%zu bytes)", round, i,
                      msgs[i].send_len);
        pscom_wait(reqs[i]);
        /* The receiver's buffer being small is not the sender's failure. */
        ITEST_ASSERT_REQ_OK(reqs[i], "send %d of %zu bytes (%s)", i,
                            msgs[i].send_len, round_name(round));
        pscom_request_free(reqs[i]);
        free(bufs[i]);
    }
}

static int sender(itest_link_t *link, void *arg)
{
    pscom_socket_t *sock;
    pscom_connection_t *con;
    pscom_request_t *reqs[N_MSGS], *ack;
    void *bufs[N_MSGS];
    char *ep, *note;

    itest_pscom_init();
    sock = itest_open_socket("sender", 0);
    ep   = itest_link_recv_str(link);
    itest_step("connecting to %s", ep);
    con = itest_connect(sock, ep);
    free(ep);

    itest_step("round 0: waiting until the receives are posted");
    note = itest_link_recv_str(link);
    free(note);
    itest_step("round 0: sending");
    post_sends(con, 0, reqs, bufs);
    wait_sends(0, reqs, bufs);

    itest_step("round 1: sending before the receives are posted");
    post_sends(con, 1, reqs, bufs);
    /* Make sure the eager messages are on their way before the receiver
     * looks; the rendezvous ones cannot finish before it posts. */
    itest_progress_ms(50);
    itest_link_send_str(link, "sent");
    wait_sends(1, reqs, bufs);

    itest_step("waiting for the receiver's ack");
    ack = itest_request(0);
    ack->connection = con;
    ack->socket     = sock;
    pscom_post_recv(ack);
    pscom_wait(ack);
    ITEST_ASSERT_REQ_OK(ack, "ack");
    pscom_request_free(ack);
    itest_step("closing");
    pscom_close_socket(sock);
    return 0;
}

/* ---------------------------------------------------------------------- */

static pscom_request_t *post_recv(pscom_connection_t *con, int i, void **buf)
{
    pscom_request_t *req = itest_request(sizeof(struct trunc_xh));
    *buf = itest_alloc_guarded(msgs[i].recv_len);
    req->connection  = con;
    req->socket      = con->socket;
    req->data        = *buf;
    req->data_len    = msgs[i].recv_len;
    req->xheader_len = sizeof(struct trunc_xh);
    pscom_post_recv(req);
    return req;
}

static void check_recv(pscom_request_t *req, void *buf, int round, int i)
{
    const struct trunc_msg *m = &msgs[i];
    struct trunc_xh xh;
    const char *what = round_name(round);

    itest_substep("round %d: waiting for receive %d (%zu into %zu bytes)",
                  round, i, m->send_len, m->recv_len);
    pscom_wait(req);
    if (m->recv_len < m->send_len) {
        ITEST_ASSERT(pscom_req_is_done(req), "receive %d is done", i);
        ITEST_ASSERT(req->state & PSCOM_REQ_STATE_TRUNCATED,
                     "receive %d: %zu bytes into %zu must end TRUNCATED, "
                     "state %s (%s)",
                     i, m->send_len, m->recv_len,
                     pscom_req_state_str(req->state), what);
        ITEST_ASSERT(!pscom_req_successful(req),
                     "receive %d: a truncated receive must not count as "
                     "successful, state %s",
                     i, pscom_req_state_str(req->state));
        ITEST_ASSERT(!(req->state & PSCOM_REQ_STATE_CANCELED),
                     "receive %d: truncated receive is marked CANCELED", i);
        ITEST_ASSERT(!(req->state & PSCOM_REQ_STATE_ERROR),
                     "receive %d: %zu bytes into %zu failed, state %s (%s)", i,
                     m->send_len, m->recv_len,
                     pscom_req_state_str(req->state), what);
    } else {
        ITEST_ASSERT_REQ_OK(req, "receive %d of %zu bytes after a truncated "
                                 "one (%s)", i, m->send_len, what);
    }
    ITEST_ASSERT_EQ(req->header.data_len, m->send_len,
                    "receive %d: header.data_len must be the sent length (%s)",
                    i, what);
    ITEST_ASSERT_EQ(req->header.xheader_len, sizeof(xh),
                    "receive %d: xheader length", i);
    memcpy(&xh, &req->xheader.user, sizeof(xh));
    ITEST_ASSERT(xh.round == (uint32_t)round && xh.idx == (uint32_t)i,
                 "receive %d of round %d got message %u of round %u", i, round,
                 xh.idx, xh.round);
    ITEST_ASSERT_PATTERN(buf, m->recv_len, seed_of(round, i),
                         "receive %d, %zu of %zu bytes (%s)", i, m->recv_len,
                         m->send_len, what);
    ITEST_ASSERT_GUARD(buf, m->recv_len, "receive %d (%s)", i, what);
    pscom_request_free(req);
    free(buf);
}

static int receiver(itest_link_t *link, void *arg)
{
    pscom_socket_t *sock;
    pscom_connection_t *con;
    pscom_request_t *reqs[N_MSGS], *ack;
    void *bufs[N_MSGS];
    char *ep, *note;

    itest_pscom_init();
    sock = itest_open_socket("receiver", 1);
    ep   = itest_ep_str(sock);
    itest_link_send_str(link, ep);
    free(ep);
    itest_step("waiting for the sender to connect");
    con = itest_wait_accept(1);

    itest_step("round 0: %s", round_name(0));
    for (int i = 0; i < N_MSGS; i++) reqs[i] = post_recv(con, i, &bufs[i]);
    itest_link_send_str(link, "posted");
    for (int i = 0; i < N_MSGS; i++) check_recv(reqs[i], bufs[i], 0, i);

    itest_step("round 1: %s", round_name(1));
    note = itest_link_recv_str(link);
    free(note);
    itest_progress_ms(200);
    for (int i = 0; i < N_MSGS; i++) {
        void *buf;
        pscom_request_t *req = post_recv(con, i, &buf);
        check_recv(req, buf, 1, i);
    }

    itest_step("sending the ack");
    ack = itest_request(0);
    pscom_req_prepare(ack, con, NULL, 0, NULL, 0);
    pscom_post_send(ack);
    pscom_wait(ack);
    ITEST_ASSERT_REQ_OK(ack, "ack");
    pscom_request_free(ack);
    ITEST_ASSERT_EQ(itest_con_error_count(), 0,
                    "con_error calls before the end (truncation must not "
                    "break the connection)");
    itest_step("closing");
    pscom_close_socket(sock);
    return 0;
}

int main(void)
{
    itest_child_t rcv, snd;
    char *ep, *note;
    int failed;
    const char *rdv = getenv("PSP_RENDEZVOUS");

    itest_watchdog(ITEST_DEFAULT_TIMEOUT + 10);
    itest_note("transport %s, PSP_RENDEZVOUS=%s", itest_transport_name(),
               rdv ? rdv : "(default)");
    itest_spawn(&rcv, "receiver", receiver, NULL);
    ep = itest_link_recv_str(&rcv.link);
    itest_spawn(&snd, "sender", sender, NULL);
    itest_link_send_str(&snd.link, ep);
    free(ep);

    /* Relay "posted" (receiver -> sender) and "sent" (sender -> receiver). */
    note = itest_link_recv_str(&rcv.link);
    itest_link_send_str(&snd.link, note);
    free(note);
    note = itest_link_recv_str(&snd.link);
    itest_link_send_str(&rcv.link, note);
    free(note);

    failed = itest_children_check((itest_child_t *[]){&rcv, &snd}, 2);
    itest_note("%s", failed ? "FAILED" : "passed");
    return failed ? 1 : 0;
}
