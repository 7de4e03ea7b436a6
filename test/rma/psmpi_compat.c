/*
 * Behaviour ParaStation MPI relies on, found when running its test suite on
 * this library (each case hung MPI programs). COMPAT_CASE selects one:
 *
 * wait_any_eof: the peer sends one last message and closes at once. A
 *   receiver that waits the way ParaStation MPI does,
 *   `while (!done) pscom_wait_any();`, must see its receive complete:
 *   pscom_wait_any() returns after a round in which a request completed,
 *   also when the round ended with the connection's EOF. (MPI_Finalize's
 *   barrier hung in 7 of 8 runs.)
 *
 * loopback: pscom_connect() to the socket's own endpoint makes one
 *   connection that delivers to itself; con_accept is called for that same
 *   connection object (ParaStation MPI checks `old_connection ==
 *   req->connection` and closes any second connection to itself).
 *
 * loop_reentrant: two sockets of one process (loop transport) play
 *   ping-pong from their receive callbacks: each arriving message's io_done
 *   sends the next one on the same connection, so sending re-enters the
 *   transport while it is still delivering. Every message arrives once, in
 *   order (ParaStation MPI's self messages: "the transport reports more
 *   bytes written than were queued", duplicated frames).
 *
 * accept_wait_any: a listener waits for its next connection the way
 *   ParaStation MPI's MPI_Comm_accept does, `while (!(c =
 *   pscom_get_next_connection(s, NULL))) pscom_wait_any();`, while the
 *   peer connects only after a pause and sends only after another (so
 *   the wait rests: over tcp it sleeps on the descriptors; meson sets
 *   PSP_WAIT_SPIN=0). pscom_wait_any must return once the connection is
 *   there, also when it was accepted, or its message read, while the wait
 *   slept.
 *   (spawn/disconnect_reconnect, spawnmanyarg and spawnminfo1 hung over
 *   tcp.)
 *
 * send_done_after_post: a send's io_done runs in a later round of
 *   progress, never inside pscom_post_send, also when the transport takes
 *   the message at once; and a send posted from a receive's io_done
 *   completes after that callback returned. ParaStation MPI's partitioned
 *   communication posts a sub-request's send and only then tells it which
 *   counter its completion decrements (in the receive callback of the
 *   clear-to-send message); a completion inside the post missed the
 *   counter and MPI_Start/MPI_Pready tests hung or crashed (its part
 *   tests, 34 of 35). Closing at once after posting runs the held
 *   callbacks first: after sends, and, over tcp, after a send that a
 *   reset connection failed (its con_error report names the connection
 *   the close frees; a use after free before). What a post completed
 *   makes a round of progress of its own, before anything new is read
 *   (round_origin).
 *
 * ondemand_suspend, ondemand_stop: both sides connect on demand, then
 *   suspend (ParaStation MPI's connection setup) or stop listening (its
 *   spawn and connect/accept). The first send must still connect: pending
 *   on-demand connections keep the listener accepting.
 */
#include "itest.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *test_case(void)
{
    const char *c = getenv("COMPAT_CASE");
    return c ? c : "";
}

/* ---------------------------------------------------------------------- */

static int eof_sender(itest_link_t *link, void *arg)
{
    itest_pscom_init();
    pscom_socket_t *s = itest_open_socket("snd", 0);
    char *ep = itest_link_recv_str(link);
    pscom_connection_t *c = itest_connect(s, ep);
    free(ep);
    itest_link_recv_u64(link); /* the receiver has posted */
    char byte = 42;
    pscom_send(c, NULL, 0, &byte, 1);
    pscom_close_connection(c);
    itest_link_send_u64(link, 1);
    pscom_close_socket(s);
    return 0;
}

static int eof_receiver(itest_link_t *link, void *arg)
{
    pscom_socket_t *s;
    pscom_connection_t *c = itest_accept_peer(link, "rcv", &s);
    char byte = 0;
    pscom_request_t *r = itest_request(0);
    r->connection = c;
    r->data = &byte;
    r->data_len = 1;
    pscom_post_recv(r);
    itest_link_send_u64(link, 1);
    /* Both the message and the EOF are there before we look. */
    itest_link_recv_u64(link);
    itest_sleep_ms(200);
    itest_step("waiting with pscom_wait_any");
    itest_watchdog(20);
    while (!pscom_req_is_done(r)) pscom_wait_any();
    ITEST_ASSERT_REQ_OK(r, "the last message");
    ITEST_ASSERT_EQ(byte, 42, "its byte");
    pscom_request_free(r);
    pscom_close_socket(s);
    return 0;
}

/* A listener and a connector: the listener's endpoint goes to the
 * connector, then one word each way between them (each tells the other it
 * is ready); both must succeed. */
static int run_pair(const char *lname, itest_child_fn_t lfn,
                    const char *cname, itest_child_fn_t cfn)
{
    itest_child_t lst, con;
    itest_spawn(&lst, lname, lfn, NULL);
    itest_spawn(&con, cname, cfn, NULL);
    itest_link_relay(&lst.link, &con.link); /* the endpoint */
    itest_link_send_u64(&con.link, itest_link_recv_u64(&lst.link));
    itest_link_send_u64(&lst.link, itest_link_recv_u64(&con.link));
    itest_child_t *list[2] = {&lst, &con};
    return itest_children_check(list, 2);
}

static int case_wait_any_eof(void)
{
    return run_pair("receiver", eof_receiver, "sender", eof_sender);
}

/* ---------------------------------------------------------------------- */

static int accept_listener(itest_link_t *link, void *arg)
{
    itest_pscom_init();
    pscom_socket_t *s = itest_open_socket("listener", 1);
    char *ep = itest_ep_str(s);
    itest_link_send_str(link, ep);
    free(ep);
    itest_step("waiting for a connection with pscom_wait_any");
    itest_watchdog(20);
    pscom_connection_t *c;
    while (!(c = pscom_get_next_connection(s, NULL))) pscom_wait_any();
    int in = 0;
    ITEST_ASSERT_EQ(pscom_recv_from(c, NULL, 0, &in, sizeof(in)),
                    PSCOM_SUCCESS, "receive");
    ITEST_ASSERT_EQ(in, 17, "the message");
    pscom_close_socket(s);
    return 0;
}

static int accept_connector(itest_link_t *link, void *arg)
{
    itest_pscom_init();
    char *ep = itest_link_recv_str(link);
    pscom_socket_t *s = itest_open_socket("connector", 0);
    itest_sleep_ms(300);
    pscom_connection_t *c = itest_connect(s, ep);
    free(ep);
    itest_sleep_ms(300); /* the listener rests again meanwhile */
    int out = 17;
    pscom_send(c, NULL, 0, &out, sizeof(out));
    pscom_flush(c);
    itest_link_send_u64(link, 1);
    itest_link_recv_u64(link);
    pscom_close_socket(s);
    return 0;
}

static int case_accept_wait_any(void)
{
    itest_child_t lst, con;
    itest_spawn(&lst, "listener", accept_listener, NULL);
    itest_spawn(&con, "connector", accept_connector, NULL);
    itest_link_relay(&lst.link, &con.link); /* the endpoint */
    itest_link_recv_u64(&con.link);
    int failed = itest_child_check(&lst);
    itest_link_send_u64(&con.link, 1);
    return itest_child_check(&con) || failed;
}

/* ---------------------------------------------------------------------- */

static int loopback_main(itest_link_t *link, void *arg)
{
    itest_pscom_init();
    pscom_socket_t *s = pscom_open_socket(0, 0, 0, 0);
    s->ops.con_accept = itest_on_con_accept;
    ITEST_ASSERT_EQ(pscom_listen(s, PSCOM_ANYPORT), PSCOM_SUCCESS, "listen");
    char *ep = itest_ep_str(s);
    pscom_connection_t *c = pscom_open_connection(s);
    itest_step("connecting to our own endpoint %s", ep);
    ITEST_ASSERT_EQ(pscom_connect(c, ep, 0, PSCOM_CON_FLAG_DIRECT),
                    PSCOM_SUCCESS, "connect");
    free(ep);
    itest_progress_ms(100);
    ITEST_ASSERT_EQ(itest_accept_count(), 1, "con_accept calls");
    ITEST_ASSERT(itest_accepted(0) == c,
                 "con_accept got another connection object than the one "
                 "connected");
    int n = 0;
    for (pscom_connection_t *x = pscom_get_next_connection(s, NULL); x;
         x = pscom_get_next_connection(s, x))
        n++;
    ITEST_ASSERT_EQ(n, 1, "connections of the socket");

    int out = 7, in = 0;
    pscom_send(c, NULL, 0, &out, sizeof(out));
    ITEST_ASSERT_EQ(pscom_recv_from(c, NULL, 0, &in, sizeof(in)),
                    PSCOM_SUCCESS, "receive on the same connection");
    ITEST_ASSERT_EQ(in, 7, "the message");
    pscom_close_connection(c);
    pscom_close_socket(s);
    return 0;
}

/* ---------------------------------------------------------------------- */

#define PINGS 200

struct pinger {
    pscom_connection_t *con;
    pscom_request_t *req;
    uint32_t expect;
    uint32_t got;
};

static void on_ping(pscom_request_t *r)
{
    struct pinger *p = *(struct pinger **)r->user;
    uint32_t seq;
    ITEST_ASSERT_REQ_OK(r, "ping %u", p->expect);
    memcpy(&seq, &r->xheader.user, sizeof(seq));
    ITEST_ASSERT_EQ(seq, p->expect, "ping sequence number");
    p->got++;
    p->expect += 2;
    if (seq + 2 < PINGS) pscom_post_recv(r); /* repost from io_done */
    if (seq + 1 >= PINGS) return;
    uint32_t next = seq + 1;
    pscom_send(p->con, &next, sizeof(next), NULL, 0);
}

static void arm(struct pinger *p, pscom_connection_t *con, uint32_t first)
{
    p->con = con;
    p->expect = first;
    p->req = pscom_request_create(sizeof(uint32_t), sizeof(p));
    memcpy(p->req->user, &p, sizeof(p));
    p->req->connection = con;
    p->req->xheader_len = sizeof(uint32_t);
    p->req->ops.io_done = on_ping;
    pscom_post_recv(p->req);
}

/* Two sockets of this process, connected (the loop transport): *ca on the
 * first, *cb the second's accepted end. */
static void loop_pair(pscom_connection_t **ca, pscom_connection_t **cb)
{
    pscom_socket_t *a = pscom_open_socket(0, 0, 0, 0);
    pscom_socket_t *b = pscom_open_socket(0, 0, 1, 0);
    b->ops.con_accept = itest_on_con_accept;
    ITEST_ASSERT_EQ(pscom_listen(b, PSCOM_ANYPORT), PSCOM_SUCCESS, "listen");
    char *ep = itest_ep_str(b);
    *ca = pscom_open_connection(a);
    ITEST_ASSERT_EQ(pscom_connect(*ca, ep, 1, PSCOM_CON_FLAG_DIRECT),
                    PSCOM_SUCCESS, "connect");
    free(ep);
    *cb = itest_wait_accept(1);
}

static int reentrant_main(itest_link_t *link, void *arg)
{
    itest_pscom_init();
    pscom_connection_t *ca, *cb;
    loop_pair(&ca, &cb);
    ITEST_ASSERT(ca->type == PSCOM_CON_TYPE_LOOP, "on loop, not %s",
                 pscom_con_type_str(ca->type));
    static struct pinger pa, pb;
    arm(&pa, ca, 1); /* a gets the odd numbers */
    arm(&pb, cb, 0);
    uint32_t zero = 0;
    itest_step("ping-pong from callbacks");
    pscom_send(ca, &zero, sizeof(zero), NULL, 0);
    ITEST_PROGRESS_UNTIL(pa.got + pb.got == PINGS);
    itest_progress_ms(50);
    ITEST_ASSERT_EQ(pa.got + pb.got, PINGS, "pings delivered");
    pscom_close_socket(NULL);
    return 0;
}

/* ---------------------------------------------------------------------- */

/* A send whose completion counter is named after the post, as ParaStation
 * MPI names a sub-request's (completion_notification). */
struct late_send {
    pscom_request_t *req;
    int *counter; /* set after pscom_post_send returned */
    int missed;   /* completions that found no counter yet */
    bool fails;   /* the send is to fail (a reset connection) */
};

static void late_send_done(pscom_request_t *r)
{
    struct late_send *ls = *(struct late_send **)r->user;
    if (ls->fails)
        ITEST_ASSERT(r->state & PSCOM_REQ_STATE_ERROR, "the send did not "
                     "fail (state %s)", pscom_req_state_str(r->state));
    else
        ITEST_ASSERT_REQ_OK(r, "late send");
    if (ls->counter)
        (*ls->counter)++;
    else
        ls->missed++;
}

static void late_send_post(struct late_send *ls, pscom_connection_t *con,
                           int *counter, bool fails)
{
    ls->fails = fails;
    ls->missed = 0;
    ls->req = pscom_request_create(0, sizeof(ls));
    memcpy(ls->req->user, &ls, sizeof(ls));
    ls->req->connection = con;
    ls->req->data = "partition";
    ls->req->data_len = 10;
    ls->req->ops.io_done = late_send_done;
    ls->counter = NULL;
    pscom_post_send(ls->req);
    ITEST_ASSERT(!(ls->req->state & PSCOM_REQ_STATE_DONE),
                 "the send is done before pscom_post_send returned");
    ls->counter = counter; /* as mpid_part.c, after the post */
}

static struct late_send from_cb;
static int from_cb_count;

/* The receive callback of a clear-to-send message: send the partition. */
static void on_cts(pscom_request_t *r)
{
    ITEST_ASSERT_REQ_OK(r, "clear to send");
    late_send_post(&from_cb, r->connection, &from_cb_count, false);
}

static int late_main(itest_link_t *link, void *arg)
{
    itest_pscom_init();
    pscom_connection_t *ca, *cb;
    loop_pair(&ca, &cb);
    char buf[16];

    itest_step("a send posted by the program");
    pscom_request_t *rb = itest_request(0);
    rb->connection = cb;
    rb->data = buf;
    rb->data_len = sizeof(buf);
    pscom_post_recv(rb);
    int count = 0;
    struct late_send top;
    late_send_post(&top, ca, &count, false);
    /* The loop transport took it: too late to cancel, though not DONE. */
    ITEST_ASSERT_EQ(pscom_cancel(top.req), 0, "cancelling a sent message");
    ITEST_PROGRESS_UNTIL(pscom_req_is_done(top.req) &&
                         pscom_req_is_done(rb));
    ITEST_ASSERT_EQ(top.missed, 0, "completions before the counter was set");
    ITEST_ASSERT_EQ(count, 1, "completions counted");
    pscom_request_free(top.req);

    itest_step("a send posted from a receive's io_done");
    pscom_request_t *cts = itest_request(0);
    cts->connection = cb;
    cts->ops.io_done = on_cts;
    pscom_post_recv(cts);
    rb->connection = ca;
    pscom_post_recv(rb);
    pscom_send(ca, NULL, 0, NULL, 0); /* the clear-to-send message */
    ITEST_PROGRESS_UNTIL(from_cb.req && pscom_req_is_done(from_cb.req) &&
                         pscom_req_is_done(rb));
    ITEST_ASSERT_EQ(from_cb.missed, 0,
                    "completions before the callback set the counter");
    ITEST_ASSERT_EQ(from_cb_count, 1, "completions counted");
    ITEST_ASSERT_EQ(memcmp(buf, "partition", 10), 0, "the partition");
    pscom_request_free(from_cb.req);
    pscom_request_free(cts);
    pscom_request_free(rb);
    pscom_close_socket(NULL);
    return 0;
}

/* The same between two processes, over shm or tcp, whose plugins take a
 * small message at once (tx_now): the request is then finished inside the
 * post, and only the held list keeps its callback, and a cancel, off. */
static int late_peer(itest_link_t *link, void *arg)
{
    pscom_socket_t *s;
    pscom_connection_t *c = itest_accept_peer(link, "peer", &s);
    char buf[16] = "";
    ITEST_ASSERT_EQ(pscom_recv_from(c, NULL, 0, buf, sizeof(buf)),
                    PSCOM_SUCCESS, "receive");
    ITEST_ASSERT_EQ(memcmp(buf, "partition", 10), 0, "the partition");
    itest_link_send_u64(link, 1);
    itest_link_recv_u64(link);
    pscom_close_socket(s);
    return 0;
}

static void on_inplace_done(pscom_req_state_t state, void *priv)
{
    ITEST_ASSERT(pscom_req_state_successful(state), "send_inplace failed");
    (*(int *)priv)++;
}

static int late_origin(itest_link_t *link, void *arg)
{
    pscom_socket_t *s;
    pscom_connection_t *c = itest_connect_to_peer(link, "origin", &s);
    itest_step("a send over %s", pscom_con_type_str(c->type));
    int count = 0;
    struct late_send ls;
    late_send_post(&ls, c, &count, false);
    ITEST_ASSERT_EQ(pscom_cancel(ls.req), 0, "cancelling a sent message");
    ITEST_PROGRESS_UNTIL(pscom_req_is_done(ls.req));
    ITEST_ASSERT_EQ(ls.missed, 0, "completions before the counter was set");
    ITEST_ASSERT_EQ(count, 1, "completions counted");
    ITEST_ASSERT(!(ls.req->state & PSCOM_REQ_STATE_CANCELED), "cancelled");
    pscom_request_free(ls.req);

    itest_step("sends, then close at once");
    late_send_post(&ls, c, &count, false);
    int inplace_calls = 0;
    pscom_send_inplace(c, NULL, 0, "x", 1, on_inplace_done, &inplace_calls);
    pscom_close_connection(c); /* frees c: the callbacks run before */
    ITEST_ASSERT(pscom_req_is_done(ls.req), "the send is not done after "
                 "its connection was closed");
    ITEST_ASSERT_EQ(ls.missed, 0, "completions before the counter was set");
    ITEST_ASSERT_EQ(count, 2, "completions counted");
    ITEST_ASSERT_EQ(inplace_calls, 1, "pscom_send_inplace callbacks");
    pscom_request_free(ls.req);
    itest_link_send_u64(link, 1);
    itest_link_recv_u64(link);
    pscom_close_socket(s);
    return 0;
}

/* What a post completed makes a round of progress of its own: the peer's
 * message is already here when the origin posts a send that its transport
 * takes at once; the next round runs the send's io_done and returns before
 * it reads that message. ParaStation MPI's MPI_Test looks at the request
 * before it calls pscom: a partitioned send's next clear-to-send message,
 * handled in the round that ran the sends ending the current round, found
 * no MPI_Start for it (its part tests crashed over tcp;ofi_rxm). */
static int round_peer(itest_link_t *link, void *arg)
{
    pscom_socket_t *s;
    pscom_connection_t *c = itest_accept_peer(link, "peer", &s);
    pscom_send(c, NULL, 0, "clear", 6);
    itest_link_send_u64(link, 1); /* it is on its way */
    char buf[16] = "";
    ITEST_ASSERT_EQ(pscom_recv_from(c, NULL, 0, buf, sizeof(buf)),
                    PSCOM_SUCCESS, "receive");
    pscom_send(c, NULL, 0, "stop", 5);
    do /* the origin's loop, up to its "end" */
        ITEST_ASSERT_EQ(pscom_recv_from(c, NULL, 0, buf, sizeof(buf)),
                        PSCOM_SUCCESS, "receive");
    while (memcmp(buf, "end", 4) != 0);
    itest_link_recv_u64(link);
    pscom_close_socket(s);
    return 0;
}

#define STARVE_MAX 200

static int round_origin(itest_link_t *link, void *arg)
{
    pscom_socket_t *s;
    pscom_connection_t *c = itest_connect_to_peer(link, "origin", &s);
    char buf[16] = "";
    pscom_request_t *r = itest_request(0);
    r->connection = c;
    r->data = buf;
    r->data_len = sizeof(buf);
    pscom_post_recv(r);
    itest_link_recv_u64(link);
    itest_sleep_ms(50); /* the peer's message has arrived, unread */
    itest_step("a send while a message waits, over %s",
               pscom_con_type_str(c->type));
    int count = 0;
    struct late_send ls;
    late_send_post(&ls, c, &count, false);
    pscom_test_any();
    ITEST_ASSERT_EQ(count, 1, "send completions after one round");
    ITEST_ASSERT(!pscom_req_is_done(r), "the round that completed the send "
                 "also received the peer's message");
    ITEST_PROGRESS_UNTIL(pscom_req_is_done(r));
    ITEST_ASSERT_REQ_OK(r, "the peer's message");
    ITEST_ASSERT_EQ(memcmp(buf, "clear", 6), 0, "the peer's message");
    pscom_request_free(ls.req);

    /* Those rounds must not starve the rest: a loop that posts a send
     * before every test still gets the peer's message read. */
    itest_step("a send before every test while a message waits");
    r->data_len = sizeof(buf);
    pscom_post_recv(r);
    itest_sleep_ms(50); /* the peer's "stop" is here, unread */
    static struct late_send flood[STARVE_MAX];
    int n = 0, flood_count = 0;
    while (n < STARVE_MAX && !pscom_req_is_done(r)) {
        late_send_post(&flood[n++], c, &flood_count, false);
        pscom_test_any();
    }
    ITEST_ASSERT(pscom_req_is_done(r), "the peer's message was not read in "
                 "%d rounds that each followed a send", n);
    ITEST_ASSERT(n <= 32, "the peer's message took %d rounds", n);
    ITEST_ASSERT_EQ(memcmp(buf, "stop", 5), 0, "the peer's message");
    pscom_send(c, NULL, 0, "end", 4);
    ITEST_PROGRESS_UNTIL(flood_count == n);
    for (int i = 0; i < n; i++) pscom_request_free(flood[i].req);
    pscom_request_free(r);
    itest_link_send_u64(link, 1);
    pscom_close_socket(s);
    return 0;
}

/* Over tcp: a peer that ends with our message unread resets the
 * connection, so the next post fails it inside the call; the report of
 * the failure and the send's io_done are held. Closing the connection at
 * once must run them before it frees the connection they name. */
static int reset_peer(itest_link_t *link, void *arg)
{
    pscom_socket_t *s;
    itest_accept_peer(link, "peer", &s);
    itest_link_send_u64(link, 1);
    itest_link_recv_u64(link); /* the origin's message is here, unread */
    itest_sleep_ms(100);
    _exit(0); /* unread data: the kernel answers with a reset */
}

static int reset_origin(itest_link_t *link, void *arg)
{
    pscom_socket_t *s;
    pscom_connection_t *c = itest_connect_to_peer(link, "origin", &s);
    if (c->type != PSCOM_CON_TYPE_TCP) { /* a reset is a tcp thing */
        itest_link_recv_u64(link);
        itest_link_send_u64(link, 1);
        itest_link_recv_u64(link);
        pscom_close_socket(s);
        return 0;
    }
    s->ops.con_error = itest_on_con_error;
    static char msg[1000];
    itest_link_recv_u64(link);
    pscom_send(c, NULL, 0, msg, sizeof(msg));
    pscom_flush(c);
    itest_link_send_u64(link, 1);
    itest_link_recv_u64(link); /* the peer has ended */
    itest_sleep_ms(100);
    itest_step("a send on a reset connection, then close at once");
    int count = 0;
    struct late_send ls;
    late_send_post(&ls, c, &count, true);
    pscom_close_connection(c); /* ASan: no use of the freed connection */
    ITEST_ASSERT(pscom_req_is_done(ls.req), "the send is not done");
    ITEST_ASSERT_EQ(count, 1, "completions counted");
    ITEST_ASSERT_EQ(ls.missed, 0, "completions before the counter was set");
    pscom_request_free(ls.req);
    itest_progress_ms(10);
    pscom_close_socket(s);
    return 0;
}

static int case_send_done_after_post(void)
{
    itest_child_t loop, peer, origin;
    itest_spawn(&loop, "late", late_main, NULL);
    if (itest_child_check(&loop)) return 1;
    if (run_pair("peer", late_peer, "origin", late_origin)) return 1;
    if (run_pair("peer", round_peer, "origin", round_origin)) return 1;

    itest_spawn(&peer, "reset peer", reset_peer, NULL);
    itest_spawn(&origin, "reset origin", reset_origin, NULL);
    itest_link_relay(&peer.link, &origin.link); /* the endpoint */
    itest_link_send_u64(&origin.link, itest_link_recv_u64(&peer.link));
    itest_link_recv_u64(&origin.link); /* the message was sent */
    itest_link_send_u64(&peer.link, 1);
    itest_child_wait(&peer);
    itest_link_send_u64(&origin.link, 1);
    return itest_child_check(&origin);
}

/* ---------------------------------------------------------------------- */

static int od_main(itest_link_t *link, void *arg)
{
    int me = (int)(intptr_t)arg;
    itest_pscom_init();
    pscom_socket_t *s = pscom_open_socket(0, 0, me, 0);
    itest_apply_transport(s);
    ITEST_ASSERT_EQ(pscom_listen(s, PSCOM_ANYPORT), PSCOM_SUCCESS, "listen");
    char *mine = itest_ep_str(s);
    itest_link_send_str(link, mine);
    free(mine);
    char *ep = itest_link_recv_str(link);
    pscom_connection_t *c = pscom_open_connection(s);
    ITEST_ASSERT_EQ(pscom_connect(c, ep, 1 - me, PSCOM_CON_FLAG_ONDEMAND),
                    PSCOM_SUCCESS, "on-demand connect");
    free(ep);
    if (getenv("COMPAT_STOP"))
        pscom_stop_listen(s);
    else
        pscom_suspend_listen(s);
    itest_link_send_u64(link, 1);
    itest_link_recv_u64(link);

    itest_step("exchanging over the on-demand connection");
    itest_watchdog(20);
    int out = me + 100, in = -1;
    pscom_send(c, NULL, 0, &out, sizeof(out));
    ITEST_ASSERT_EQ(pscom_recv_from(c, NULL, 0, &in, sizeof(in)),
                    PSCOM_SUCCESS, "receive");
    ITEST_ASSERT_EQ(in, 101 - me, "the peer's message");
    itest_link_send_u64(link, 1);
    itest_link_recv_u64(link);
    pscom_close_socket(s);
    return 0;
}

static int case_ondemand_suspend(void)
{
    itest_child_t k[2];
    itest_spawn(&k[0], "side 0", od_main, (void *)(intptr_t)0);
    itest_spawn(&k[1], "side 1", od_main, (void *)(intptr_t)1);
    char *ep0 = itest_link_recv_str(&k[0].link);
    char *ep1 = itest_link_recv_str(&k[1].link);
    itest_link_send_str(&k[0].link, ep1);
    itest_link_send_str(&k[1].link, ep0);
    free(ep0);
    free(ep1);
    for (int round = 0; round < 2; round++) {
        itest_link_recv_u64(&k[0].link);
        itest_link_recv_u64(&k[1].link);
        itest_link_send_u64(&k[0].link, 1);
        itest_link_send_u64(&k[1].link, 1);
    }
    itest_child_t *list[2] = {&k[0], &k[1]};
    return itest_children_check(list, 2);
}

int main(void)
{
    itest_set_role("main");
    const char *c = test_case();
    if (!strcmp(c, "wait_any_eof")) return case_wait_any_eof();
    if (!strcmp(c, "accept_wait_any")) return case_accept_wait_any();
    if (!strcmp(c, "ondemand_suspend")) return case_ondemand_suspend();
    if (!strcmp(c, "ondemand_stop")) {
        setenv("COMPAT_STOP", "1", 1);
        return case_ondemand_suspend();
    }
    if (!strcmp(c, "loop_reentrant")) {
        itest_child_t k;
        itest_spawn(&k, "loop", reentrant_main, NULL);
        return itest_child_check(&k);
    }
    if (!strcmp(c, "send_done_after_post")) return case_send_done_after_post();
    if (!strcmp(c, "loopback")) {
        itest_child_t k;
        itest_spawn(&k, "loopback", loopback_main, NULL);
        return itest_child_check(&k);
    }
    fprintf(stderr, "COMPAT_CASE must be wait_any_eof, accept_wait_any, "
                    "loopback, loop_reentrant, send_done_after_post, "
                    "ondemand_suspend or ondemand_stop\n");
    return 1;
}
