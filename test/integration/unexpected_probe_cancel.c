/*
 * Unexpected messages, probing, selection by recv_accept, and cancel.
 *
 * The sender sends messages with tags 1..5 before the receiver posts
 * anything. The receiver then: probes message 1 twice without consuming it
 * (on the connection and any-source), probes for tag 3 and for a tag that
 * is not there, takes tag 3 first with a recv_accept callback, then 1, 2, 4,
 * 5 in order, and finds nothing left. It cancels a receive that matches
 * nothing (pscom_cancel returns 1, state DONE|CANCELED, io_done once) and
 * checks that the next message goes to a new receive, not the cancelled one.
 * The sender checks that cancelling an already-sent request returns 0.
 */
#include "itest.h"

#include <stdlib.h>
#include <string.h>

#define N_EARLY  5
#define LATE_TAG 6

struct tag_xh {
    uint32_t tag;
    uint32_t len;
};

static size_t tag_len(uint32_t tag)
{
    return tag == LATE_TAG ? 2000 : tag * 1000;
}

static uint32_t tag_seed(uint32_t tag)
{
    return 0x7a900u + tag;
}

/* ---------------------------------------------------------------------- */

static int sender(itest_link_t *link, void *arg)
{
    pscom_socket_t *sock;
    pscom_connection_t *con;
    pscom_request_t *reqs[N_EARLY], *late, *ack;
    void *bufs[N_EARLY], *late_buf;
    char *ep, *note;

    itest_pscom_init();
    sock = itest_open_socket("sender", 0);
    ep   = itest_link_recv_str(link);
    itest_step("connecting to %s", ep);
    con = itest_connect(sock, ep);
    free(ep);

    itest_step("sending tags 1..%d", N_EARLY);
    for (uint32_t t = 1; t <= N_EARLY; t++) {
        struct tag_xh xh = {.tag = t, .len = (uint32_t)tag_len(t)};
        bufs[t - 1] = malloc(tag_len(t));
        ITEST_ASSERT(bufs[t - 1] != NULL, "out of memory");
        itest_fill(bufs[t - 1], tag_len(t), tag_seed(t));
        reqs[t - 1] = itest_request(sizeof(xh));
        pscom_req_prepare(reqs[t - 1], con, bufs[t - 1], tag_len(t), &xh,
                          sizeof(xh));
        pscom_post_send(reqs[t - 1]);
    }
    /* Eager sends are done once written; drive them out before telling the
     * receiver. (Were they rendezvous, they would finish only later.) */
    itest_progress_ms(100);
    itest_link_send_str(link, "sent");
    for (int i = 0; i < N_EARLY; i++) {
        itest_substep("waiting for send of tag %d", i + 1);
        pscom_wait(reqs[i]);
        ITEST_ASSERT_REQ_OK(reqs[i], "send of tag %d", i + 1);
        pscom_request_free(reqs[i]);
        free(bufs[i]);
    }

    itest_step("waiting until the receiver has cancelled its receive");
    note = itest_link_recv_str(link);
    free(note);
    itest_step("sending tag %d and cancelling it after it is sent", LATE_TAG);
    {
        struct tag_xh xh = {.tag = LATE_TAG, .len = (uint32_t)tag_len(LATE_TAG)};
        late_buf = malloc(tag_len(LATE_TAG));
        ITEST_ASSERT(late_buf != NULL, "out of memory");
        itest_fill(late_buf, tag_len(LATE_TAG), tag_seed(LATE_TAG));
        late = itest_request(sizeof(xh));
        pscom_req_prepare(late, con, late_buf, tag_len(LATE_TAG), &xh,
                          sizeof(xh));
        pscom_post_send(late);
        pscom_wait(late);
        ITEST_ASSERT_REQ_OK(late, "send of tag %d", LATE_TAG);
        ITEST_ASSERT_EQ(pscom_cancel(late), 0,
                        "pscom_cancel() of a send that is done must return 0");
        ITEST_ASSERT_REQ_OK(late, "state after the refused cancel");
        pscom_request_free(late);
        free(late_buf);
    }

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

static pscom_connection_t *the_con;
static uint32_t wanted_tag; /* accept_tag() takes this tag, 0: none */
static int accept_calls;
static int io_done_calls;

static uint32_t header_tag(pscom_header_net_t *h)
{
    struct tag_xh xh;
    if (h->xheader_len < sizeof(xh)) return 0;
    memcpy(&xh, h->xheader, sizeof(xh));
    return xh.tag;
}

static int accept_tag(pscom_request_t *req, pscom_connection_t *con,
                      pscom_header_net_t *header_net)
{
    accept_calls++;
    ITEST_ASSERT(header_net != NULL, "recv_accept got no header");
    ITEST_ASSERT(con == the_con,
                 "recv_accept called with connection %p, the only one is %p",
                 (void *)con, (void *)the_con);
    return header_tag(header_net) == wanted_tag;
}

static void count_io_done(pscom_request_t *req)
{
    io_done_calls++;
}

static pscom_request_t *probe_req(pscom_connection_t *con, pscom_socket_t *sock,
                                  int select)
{
    pscom_request_t *req = itest_request(sizeof(struct tag_xh));
    req->connection      = con;
    req->socket          = sock;
    req->xheader_len     = sizeof(struct tag_xh);
    req->ops.recv_accept = select ? accept_tag : NULL;
    return req;
}

static void check_probed(pscom_request_t *req, uint32_t tag, const char *what)
{
    ITEST_ASSERT_EQ(header_tag(&req->header), tag,
                    "tag in the probed xheader (%s)", what);
    ITEST_ASSERT_EQ(req->header.data_len, tag_len(tag),
                    "probed header.data_len (%s)", what);
    ITEST_ASSERT_EQ(req->header.xheader_len, sizeof(struct tag_xh),
                    "probed header.xheader_len (%s)", what);
    {
        struct tag_xh xh;
        memcpy(&xh, &req->xheader.user, sizeof(xh));
        ITEST_ASSERT_EQ(xh.tag, tag, "tag in req->xheader (%s)", what);
        ITEST_ASSERT_EQ(xh.len, tag_len(tag), "length in req->xheader (%s)",
                        what);
    }
}

static void recv_tag(pscom_connection_t *con, uint32_t tag, int select)
{
    pscom_request_t *req = itest_request(sizeof(struct tag_xh));
    void *buf            = itest_alloc_guarded(tag_len(tag));

    itest_substep("receiving tag %u%s", tag, select ? " by recv_accept" : "");
    req->connection      = con;
    req->socket          = con->socket;
    req->data            = buf;
    req->data_len        = tag_len(tag);
    req->xheader_len     = sizeof(struct tag_xh);
    req->ops.recv_accept = select ? accept_tag : NULL;
    wanted_tag           = tag;
    pscom_post_recv(req);
    pscom_wait(req);
    ITEST_ASSERT_REQ_OK(req, "receive of tag %u", tag);
    ITEST_ASSERT_EQ(header_tag(&req->header), tag,
                    "tag of the message received (receives taken out of "
                    "order or by the wrong request)");
    ITEST_ASSERT_EQ(req->header.data_len, tag_len(tag), "header.data_len");
    ITEST_ASSERT_PATTERN(buf, tag_len(tag), tag_seed(tag), "message tag %u",
                         tag);
    ITEST_ASSERT_GUARD(buf, tag_len(tag), "message tag %u", tag);
    pscom_request_free(req);
    free(buf);
}

/* recv_accept of the cancelled receives: takes nothing while `armed` is 0,
 * everything after. They are armed once cancelled, so a library that kept
 * a cancelled receive in its queue would hand it the next message. */
static int armed;

static int accept_if_armed(pscom_request_t *req, pscom_connection_t *con,
                           pscom_header_net_t *header_net)
{
    return armed;
}

static pscom_request_t *cancel_unmatched(pscom_connection_t *con,
                                         pscom_socket_t *sock,
                                         const char *what)
{
    pscom_request_t *req = itest_request(sizeof(struct tag_xh));
    static char small[2][16];
    static int n;
    int rc;

    itest_step("cancelling a %s receive that matches nothing", what);
    req->connection      = con;
    req->socket          = sock;
    req->data            = small[n++ % 2];
    req->data_len        = sizeof(small[0]);
    memset(req->data, 0xcc, req->data_len);
    req->xheader_len     = sizeof(struct tag_xh);
    req->ops.recv_accept = accept_if_armed;
    req->ops.io_done     = count_io_done;
    armed                = 0;
    io_done_calls        = 0;
    pscom_post_recv(req);
    itest_progress_ms(50);
    ITEST_ASSERT(!pscom_req_is_done(req),
                 "a receive that accepts nothing completed (state %s)",
                 pscom_req_state_str(req->state));
    rc = pscom_cancel(req);
    ITEST_ASSERT_EQ(rc, 1, "pscom_cancel() of a posted, unmatched %s receive",
                    what);
    ITEST_ASSERT_REQ_STATE(req, PSCOM_REQ_STATE_DONE | PSCOM_REQ_STATE_CANCELED,
                           "cancelled %s receive", what);
    ITEST_ASSERT(!pscom_req_successful(req),
                 "a cancelled receive counts as successful");
    itest_progress_ms(20);
    ITEST_ASSERT_EQ(io_done_calls, 1,
                    "io_done calls for the cancelled %s receive", what);
    ITEST_ASSERT_EQ(pscom_cancel(req), 0,
                    "a second pscom_cancel() of the same %s receive", what);
    return req;
}

static void check_still_cancelled(pscom_request_t *req, const char *what)
{
    const uint8_t *b = req->data;
    ITEST_ASSERT(!(req->state & (PSCOM_REQ_STATE_IO_STARTED |
                                 PSCOM_REQ_STATE_TRUNCATED)),
                 "the cancelled %s receive was used for a message later "
                 "(state %s)",
                 what, pscom_req_state_str(req->state));
    ITEST_ASSERT_REQ_STATE(req, PSCOM_REQ_STATE_DONE | PSCOM_REQ_STATE_CANCELED,
                           "cancelled %s receive, later", what);
    for (size_t i = 0; i < req->data_len; i++) {
        ITEST_ASSERT(b[i] == 0xcc,
                     "the buffer of the cancelled %s receive was written "
                     "after the cancel (byte %zu)",
                     what, i);
    }
}

static int receiver(itest_link_t *link, void *arg)
{
    pscom_socket_t *sock;
    pscom_request_t *p, *ack, *c1, *c2;
    char *ep, *note;

    itest_pscom_init();
    sock = itest_open_socket("receiver", 1);
    ep   = itest_ep_str(sock);
    itest_link_send_str(link, ep);
    free(ep);
    itest_step("waiting for the sender to connect");
    the_con = itest_wait_accept(1);

    itest_step("waiting until the sender sent tags 1..%d", N_EARLY);
    note = itest_link_recv_str(link);
    free(note);
    /* Let them all come in as unexpected messages. */
    itest_progress_ms(200);
    /* On a loaded machine 200 ms may not be enough: wait until the last one
     * is visible (order is kept, so then all are). */
    p          = probe_req(the_con, sock, 1);
    wanted_tag = N_EARLY;
    {
        double t0 = itest_now();
        while (!pscom_iprobe(p)) {
            ITEST_ASSERT(itest_now() - t0 < 10.0,
                         "tag %d, sent before, not visible to iprobe after "
                         "10 s",
                         N_EARLY);
            itest_progress_once();
        }
    }
    pscom_request_free(p);

    itest_step("iprobe on the connection sees tag 1");
    p = probe_req(the_con, sock, 0);
    ITEST_ASSERT_EQ(pscom_iprobe(p), 1, "iprobe with 5 messages waiting");
    check_probed(p, 1, "first iprobe");
    pscom_request_free(p);

    itest_step("a second iprobe sees tag 1 again (not consumed)");
    p = probe_req(the_con, sock, 0);
    ITEST_ASSERT_EQ(pscom_iprobe(p), 1, "second iprobe");
    check_probed(p, 1, "second iprobe");
    pscom_request_free(p);

    itest_step("any-source iprobe sees tag 1");
    p = probe_req(NULL, sock, 0);
    ITEST_ASSERT_EQ(pscom_iprobe(p), 1, "any-source iprobe");
    check_probed(p, 1, "any-source iprobe");
    pscom_request_free(p);

    itest_step("iprobe with recv_accept for tag 3");
    p          = probe_req(the_con, sock, 1);
    wanted_tag = 3;
    ITEST_ASSERT_EQ(pscom_iprobe(p), 1, "iprobe selecting tag 3");
    check_probed(p, 3, "iprobe selecting tag 3");
    pscom_request_free(p);

    itest_step("iprobe with recv_accept for a tag nobody sent");
    p            = probe_req(the_con, sock, 1);
    wanted_tag   = 42;
    accept_calls = 0;
    ITEST_ASSERT_EQ(pscom_iprobe(p), 0, "iprobe selecting tag 42");
    ITEST_ASSERT(accept_calls >= N_EARLY,
                 "recv_accept was called %d times for %d waiting messages",
                 accept_calls, N_EARLY);
    pscom_request_free(p);

    itest_step("probe (blocking) for tag 5");
    p          = probe_req(NULL, sock, 1);
    wanted_tag = 5;
    pscom_probe(p);
    check_probed(p, 5, "probe selecting tag 5");
    pscom_request_free(p);

    itest_step("receiving tag 3 first, selected by recv_accept");
    recv_tag(the_con, 3, 1);

    itest_step("iprobe after taking tag 3 still sees tag 1");
    p = probe_req(the_con, sock, 0);
    ITEST_ASSERT_EQ(pscom_iprobe(p), 1, "iprobe after taking tag 3");
    check_probed(p, 1, "iprobe after taking tag 3");
    pscom_request_free(p);

    itest_step("receiving tags 1, 2, 4, 5 in order");
    recv_tag(the_con, 1, 0);
    recv_tag(the_con, 2, 0);
    recv_tag(the_con, 4, 0);
    recv_tag(the_con, 5, 0);

    itest_step("iprobe finds nothing left");
    p = probe_req(the_con, sock, 0);
    ITEST_ASSERT_EQ(pscom_iprobe(p), 0, "iprobe after all were received");
    pscom_request_free(p);
    p = probe_req(NULL, sock, 0);
    ITEST_ASSERT_EQ(pscom_iprobe(p), 0,
                    "any-source iprobe after all were received");
    pscom_request_free(p);

    c1 = cancel_unmatched(the_con, sock, "connection");
    c2 = cancel_unmatched(NULL, sock, "any-source");

    itest_step("the next message goes to a new receive, not a cancelled one");
    armed = 1;
    io_done_calls = 0;
    itest_link_send_str(link, "cancelled");
    itest_watchdog(10); /* a cancelled receive that took the message */
    recv_tag(the_con, LATE_TAG, 0);
    itest_watchdog(ITEST_DEFAULT_TIMEOUT);
    ITEST_ASSERT_EQ(io_done_calls, 0,
                    "io_done calls of the cancelled receives after the cancel");
    check_still_cancelled(c1, "connection");
    check_still_cancelled(c2, "any-source");
    pscom_request_free(c1);
    pscom_request_free(c2);

    itest_step("sending the ack");
    ack = itest_request(0);
    pscom_req_prepare(ack, the_con, NULL, 0, NULL, 0);
    pscom_post_send(ack);
    pscom_wait(ack);
    ITEST_ASSERT_REQ_OK(ack, "ack");
    pscom_request_free(ack);
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

    /* Relay "sent" (sender -> receiver), then "cancelled" (back). */
    note = itest_link_recv_str(&snd.link);
    itest_link_send_str(&rcv.link, note);
    free(note);
    note = itest_link_recv_str(&rcv.link);
    itest_link_send_str(&snd.link, note);
    free(note);

    failed = itest_children_check((itest_child_t *[]){&rcv, &snd}, 2);
    itest_note("%s", failed ? "FAILED" : "passed");
    return failed ? 1 : 0;
}
