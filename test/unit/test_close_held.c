/*
 * Closing while completions are held behind a cut (psc_req_run_held: a
 * receive that a transport reported after a send's completion waits for
 * the next round). Played with a fake transport whose progress op writes
 * what is queued and answers the first user message in the same call.
 * What must hold: nothing is sent after a close's EOF, nothing is posted
 * on a socket being closed, no close loops, callbacks never see a freed
 * connection or socket, and a connection retired by a handshake leaves
 * the cut alone.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "fake_transport.h"
#include "frames.h"

#define ANSWER_TAG 100

/* The fake transport: one connection at a time. */
static struct psc_con *fk;
static unsigned fk_batch;  /* writes only with this many frames queued */
static bool fk_answered;   /* the first user message was answered */
static bool fk_retire;     /* the next call also retires a handshake's
                            * connection, as a precon adopt or failure */
static bool fk_cts_after_eof; /* answer a rendezvous announcement with a
                               * clear-to-send right after our EOF */
static uint64_t fk_rndv_sender; /* the last announcement's sender id */
static bool fk_req_after_eof; /* the peer announces a rendezvous message
                               * right after our EOF */
static bool fk_hold_eof;      /* never write the EOF (a peer that stopped
                               * reading) */
static uint8_t written_types[16];
static unsigned nwritten;

static unsigned queued(struct psc_con *c)
{
    unsigned n = 0;
    struct psc_list *pos;
    psc_list_for_each(pos, &c->sendq) n++;
    return n;
}

static void push_cts(struct psc_con *c)
{
    struct psc_rndv_cts cts = {.sender_id = fk_rndv_sender, .receiver_id = 1};
    struct frame f;
    frame_make(&f, PSC_MSG_RNDV_CTS, &cts, sizeof(cts), NULL, 0, 0);
    assert_int_equal(pscom_plugin_rx_push(c, f.buf, f.len), 0);
}

static void push_rndv_req(struct psc_con *c)
{
    uint8_t x[4 + sizeof(struct psc_rndv_info)];
    uint32_t tag = 9;
    struct psc_rndv_info info = {.sender_id = 5, .data_len = 64};
    memcpy(x, &tag, 4);
    memcpy(x + 4, &info, sizeof(info));
    struct frame f;
    frame_make(&f, PSC_MSG_RNDV_REQ, x, sizeof(x), NULL, 0, 0);
    assert_int_equal(pscom_plugin_rx_push(c, f.buf, f.len), 0);
}

static int fk_progress(void)
{
    struct psc_con *c = fk;
    int did = 0;
    if (!c) return 0;
    if (fk_retire) {
        fk_retire = false;
        psc_con_retire(psc_con_create(c->sock));
    }
    if (!c->plugin_open || c->failed || queued(c) < fk_batch) return 0;
    struct iovec iov[4];
    size_t total;
    /* One frame at a time (a peek offers the whole queue). */
    while (!psc_list_empty(&c->sendq)) {
        size_t frame = psc_list_first(&c->sendq, struct psc_req, next)->tx_left;
        if (pscom_plugin_tx_peek(c, iov, 4, &total) <= 0) break;
        pscom_header_net_t h;
        memcpy(&h, iov[0].iov_base, sizeof(h));
        if (h.msg_type == PSC_MSG_EOF && fk_hold_eof) break;
        assert_true(nwritten < 16);
        written_types[nwritten++] = h.msg_type;
        did = 1;
        if (h.msg_type == PSC_MSG_RNDV_REQ) {
            struct psc_rndv_info info;
            memcpy(&info,
                   (char *)iov[0].iov_base + PSC_HDR_LEN + h.xheader_len -
                       sizeof(info),
                   sizeof(info));
            fk_rndv_sender = info.sender_id;
        }
        assert_int_equal(pscom_plugin_tx_done(c, frame), 0);
        if (h.msg_type == PSC_MSG_EOF && fk_cts_after_eof) push_cts(c);
        if (h.msg_type == PSC_MSG_EOF && fk_req_after_eof) push_rndv_req(c);
        if (h.msg_type == PSC_MSG_USER && !fk_answered) {
            fk_answered = true;
            struct frame f;
            frame_user(&f, ANSWER_TAG, "answer", 7);
            assert_int_equal(pscom_plugin_rx_push(c, f.buf, f.len), 0);
        }
    }
    return did;
}

static struct fake_transport fk_transport;

/* A connection of s that looks established on the fake transport. */
static pscom_connection_t *fake_con(pscom_socket_t *s, unsigned batch)
{
    fk = fake_transport_con(&fk_transport, s);
    assert_non_null(fk);
    fk_batch = batch;
    fk_answered = fk_retire = fk_cts_after_eof = fk_req_after_eof = false;
    fk_hold_eof = false;
    nwritten = 0;
    return &fk->pub;
}

static int setup(void **state)
{
    (void)state;
    assert_int_equal(pscom_init(PSCOM_VERSION), PSCOM_SUCCESS);
    fake_transport_init(&fk_transport, fk_progress);
    return 0;
}

/* Each test's connection is gone after it: the fake's progress op too. */
static int fake_off(void **state)
{
    (void)state;
    fk = NULL;
    fake_transport_off(&fk_transport);
    return 0;
}

static bool sock_kept(pscom_socket_t *s)
{
    struct psc_list *pos;
    psc_list_for_each(pos, &psc_ctx.closed_socks) {
        if (psc_list_entry(pos, struct psc_sock, next_sock) == sock_of(s))
            return true;
    }
    return false;
}

/* The callbacks that ran, in order. */
static const char *ran[8];
static unsigned nran;

static void note(const char *what)
{
    assert_true(nran < 8);
    ran[nran++] = what;
}

static void send_done(pscom_request_t *r)
{
    (void)r;
    note("send");
}

static void answer_done(pscom_request_t *r)
{
    (void)r;
    note("answer");
}

static pscom_request_t *post_send(pscom_connection_t *c, uint32_t tag,
                                  const char *text,
                                  void (*io_done)(pscom_request_t *))
{
    pscom_request_t *r = pscom_request_create(4, 0);
    pscom_req_prepare(r, c, (void *)text, strlen(text) + 1, &tag, 4);
    r->ops.io_done = io_done;
    pscom_post_send(r);
    return r;
}

static char rbuf[64];

/* A receive on c, or with c NULL on any connection of s. */
static pscom_request_t *post_recv(pscom_connection_t *c, pscom_socket_t *s,
                                  void (*io_done)(pscom_request_t *))
{
    pscom_request_t *r = pscom_request_create(4, 0);
    r->connection = c;
    r->socket = s;
    r->xheader_len = 4;
    r->data = rbuf;
    r->data_len = sizeof(rbuf);
    r->ops.io_done = io_done;
    pscom_post_recv(r);
    return r;
}

static void free_all(pscom_request_t **r, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        if (r[i]) pscom_request_free(r[i]);
}

/* The transport wrote one frame of the given type, then the EOF. */
static void written_then_eof(uint8_t first)
{
    assert_int_equal(nwritten, 2);
    assert_int_equal(written_types[0], first);
    assert_int_equal(written_types[1], PSC_MSG_EOF);
}

static void failed(pscom_request_t *r)
{
    assert_non_null(r);
    assert_true(pscom_req_is_done(r));
    assert_true(r->state & PSCOM_REQ_STATE_ERROR);
}

/* A close without waiting for what the transport never writes. */
static unsigned saved_timeout;

static void short_shutdown(void)
{
    saved_timeout = psc_settings.shutdown_timeout_ms;
    psc_settings.shutdown_timeout_ms = 1;
}

static void shutdown_back(void)
{
    psc_settings.shutdown_timeout_ms = saved_timeout;
}

/* The close's first flush writes the send and reads its answer in one
 * call (the answer is cut); its EOF goes out; the flush of the EOF runs
 * the answer's callback, which replies. The reply must fail, not follow
 * the EOF. */
static pscom_request_t *late;

static void answer_replies(pscom_request_t *r)
{
    note("answer");
    late = post_send(r->connection, 7, "late", NULL);
}

static void no_send_after_the_eof(void **state)
{
    (void)state;
    pscom_socket_t *s = pscom_open_socket(0, 0, 0, 0);
    pscom_connection_t *c = fake_con(s, 1);
    nran = 0;
    late = NULL;
    pscom_request_t *r[2] = {post_recv(c, NULL, answer_replies),
                             post_send(c, 1, "ask", send_done)};
    pscom_close_connection(c);
    assert_int_equal(nran, 2);
    assert_string_equal(ran[0], "send");
    assert_string_equal(ran[1], "answer");
    failed(late);
    written_then_eof(PSC_MSG_USER);
    pscom_request_free(late);
    free_all(r, 2);
    pscom_close_socket(s);
}

/* The socket's close writes the send with its EOF and reads the answer
 * (cut); the answer's callback posts the next receive on the socket, as a
 * server does. That receive fails: the socket is going. */
static pscom_socket_t *going;
static pscom_request_t *reposted;

static void answer_reposts(pscom_request_t *r)
{
    (void)r;
    note("answer");
    reposted = post_recv(NULL, going, NULL);
}

static void no_receive_on_a_closing_socket(void **state)
{
    (void)state;
    going = pscom_open_socket(0, 0, 0, 0);
    pscom_connection_t *c = fake_con(going, 2); /* the send with the EOF */
    nran = 0;
    reposted = NULL;
    short_shutdown();
    pscom_request_t *r[2] = {post_recv(c, NULL, answer_reposts),
                             post_send(c, 1, "ask", send_done)};
    pscom_close_socket(going);
    shutdown_back();
    assert_int_equal(nran, 2);
    assert_string_equal(ran[1], "answer");
    failed(reposted);
    assert_true(psc_list_empty(&psc_ctx.closed_socks));
    pscom_request_free(reposted);
    free_all(r, 2);
}

/* A receive failed by pscom_close_connection closes the whole socket from
 * its callback: both closes end. */
static pscom_socket_t *whole;

static void close_whole_socket(pscom_request_t *r)
{
    assert_true(r->state & PSCOM_REQ_STATE_ERROR);
    note("receive");
    pscom_close_socket(whole);
}

static void failed_receive_closes_its_socket(void **state)
{
    (void)state;
    whole = pscom_open_socket(0, 0, 0, 0);
    pscom_connection_t *c = pscom_open_connection(whole);
    assert_non_null(pscom_open_connection(whole));
    nran = 0;
    pscom_request_t *r = post_recv(c, NULL, close_whole_socket);
    watchdog_start(10);
    pscom_close_connection(c);
    watchdog_stop();
    assert_int_equal(nran, 1);
    /* The socket's close took the other connection too; both went at
     * the reap, and the socket after them. */
    assert_true(psc_list_empty(&psc_ctx.zombies));
    assert_true(psc_list_empty(&psc_ctx.closed_socks));
    pscom_request_free(r);
}

/* A send the transport never wrote fails when the plugin is closed, after
 * the socket's close: its callback still finds its connection's socket. */
static int rank_seen;
static bool socket_was_kept;

static void read_the_socket(pscom_request_t *r)
{
    assert_true(r->state & PSCOM_REQ_STATE_ERROR);
    socket_was_kept = sock_kept(r->connection->socket); /* no read */
    rank_seen = r->connection->socket->local_con_info.rank;
}

static void failed_send_sees_its_socket(void **state)
{
    (void)state;
    pscom_socket_t *s = pscom_open_socket(0, 0, 5, 0);
    pscom_connection_t *c = fake_con(s, 1000); /* writes nothing */
    rank_seen = -1;
    socket_was_kept = false;
    short_shutdown();
    pscom_request_t *r = post_send(c, 1, "never", read_the_socket);
    pscom_close_socket(s);
    shutdown_back();
    assert_true(socket_was_kept);
    assert_int_equal(rank_seen, 5);
    assert_true(psc_list_empty(&psc_ctx.closed_socks));
    pscom_request_free(r);
}

/* The application closes a socket while a held callback (a send failed
 * at its post) closes it too: one close, and the outer call reads
 * nothing freed. */
static pscom_socket_t *twice;
static unsigned closes_from_callback;

static bool closed_kept;

static void close_twice(pscom_request_t *r)
{
    (void)r;
    closes_from_callback++;
    pscom_close_socket(twice);
    closed_kept = sock_kept(twice); /* the outer close still reads it */
}

static void held_callback_closes_the_socket_too(void **state)
{
    (void)state;
    twice = pscom_open_socket(0, 0, 0, 0);
    pscom_connection_t *c = pscom_open_connection(twice);
    assert_int_equal(pscom_fail_connection(c, PSCOM_ERR_IOERROR),
                     PSCOM_SUCCESS);
    closes_from_callback = 0;
    closed_kept = false;
    pscom_request_t *r = post_send(c, 1, "x", close_twice); /* held */
    assert_false(pscom_req_is_done(r));
    pscom_close_socket(twice);
    assert_int_equal(closes_from_callback, 1);
    assert_true(closed_kept);
    assert_true(psc_list_empty(&psc_ctx.closed_socks));
    pscom_request_free(r);
}

/* In the round that writes a send and reads its answer, a handshake's
 * connection is retired: the answer still waits for the next round, and
 * the retired connection is freed. */
static void retired_handshake_keeps_the_cut(void **state)
{
    (void)state;
    /* A close with nothing to close leaves nothing behind either. */
    assert_true(psc_list_empty(&psc_ctx.sockets));
    pscom_close_socket(NULL);
    pscom_socket_t *s = pscom_open_socket(0, 0, 0, 0);
    pscom_connection_t *c = fake_con(s, 1);
    for (int retire = 0; retire < 2; retire++) {
        nran = 0;
        fk_answered = false;
        pscom_request_t *r[2] = {post_recv(c, NULL, answer_done), NULL};
        fk_retire = false; /* the post's own round writes nothing yet */
        fk_batch = 1;
        r[1] = post_send(c, 1, "ask", send_done);
        fk_retire = retire;
        pscom_test_any();
        assert_int_equal(nran, 1);
        assert_string_equal(ran[0], "send");
        pscom_test_any();
        assert_int_equal(nran, 2);
        assert_string_equal(ran[1], "answer");
        assert_true(psc_list_empty(&psc_ctx.zombies));
        free_all(r, 2);
    }
    pscom_close_socket(s);
}

/* The answer that the EOF's flush runs closes the connection (or its
 * socket) again: one EOF goes out, nothing after it. */
static pscom_socket_t *again_sock;

static void answer_closes_again(pscom_request_t *r)
{
    note("answer");
    if (again_sock)
        pscom_close_socket(again_sock);
    else
        pscom_close_connection(r->connection);
}

static void one_eof_when_a_callback_closes_again(void **state)
{
    (void)state;
    for (int sock_too = 0; sock_too < 2; sock_too++) {
        pscom_socket_t *s = pscom_open_socket(0, 0, 0, 0);
        pscom_connection_t *c = fake_con(s, 1);
        again_sock = sock_too ? s : NULL;
        nran = 0;
        pscom_request_t *r[2] = {post_recv(c, NULL, answer_closes_again),
                                 post_send(c, 1, "ask", send_done)};
        pscom_close_connection(c);
        assert_int_equal(nran, 2);
        written_then_eof(PSC_MSG_USER);
        free_all(r, 2);
        if (!sock_too) pscom_close_socket(s);
    }
}

/* The same with an EOF that never leaves and no PSP_SHUTDOWN_TIMEOUT:
 * the close from the callback waits for the EOF a bounded time only (it
 * used to wait for every send again, for ever), and both closes end. */
static void closing_again_waits_a_bounded_time(void **state)
{
    (void)state;
    pscom_socket_t *s = pscom_open_socket(0, 0, 0, 0);
    pscom_connection_t *c = fake_con(s, 1);
    fk_hold_eof = true;
    again_sock = NULL;
    nran = 0;
    saved_timeout = psc_settings.shutdown_timeout_ms;
    psc_settings.shutdown_timeout_ms = 0; /* wait for sends for ever */
    pscom_request_t *r[2] = {post_recv(c, NULL, answer_closes_again),
                             post_send(c, 1, "ask", send_done)};
    watchdog_start(30);
    pscom_close_connection(c);
    watchdog_stop();
    shutdown_back();
    assert_int_equal(nran, 2);
    assert_string_equal(ran[1], "answer");
    assert_int_equal(nwritten, 1); /* the question; the EOF stayed */
    assert_true(psc_list_empty(&psc_ctx.zombies)); /* closed and freed */
    free_all(r, 2);
    pscom_close_socket(s);
}

/* A rendezvous send whose clear-to-send comes after the close gave up
 * waiting and sent its EOF: the body does not follow the EOF, and the send
 * fails instead of looking sent. */
static void no_body_after_the_eof(void **state)
{
    (void)state;
    pscom_socket_t *s = pscom_open_socket(0, 0, 0, 0);
    pscom_connection_t *c = fake_con(s, 2); /* the announcement with the EOF */
    con_of(c)->rndv_threshold = 16;
    fk_cts_after_eof = true;
    static char body[64];
    uint32_t tag = 1;
    pscom_request_t *snd = pscom_request_create(4, 0);
    pscom_req_prepare(snd, c, body, sizeof(body), &tag, 4);
    short_shutdown();
    pscom_post_send(snd);
    pscom_close_connection(c);
    shutdown_back();
    failed(snd);
    written_then_eof(PSC_MSG_RNDV_REQ);
    pscom_request_free(snd);
    pscom_close_socket(s);
}

/* The peer announces a rendezvous message that a posted receive takes,
 * right after our EOF went out: no clear-to-send follows the EOF, and the
 * close fails the receive. */
static void no_answer_after_the_eof(void **state)
{
    (void)state;
    pscom_socket_t *s = pscom_open_socket(0, 0, 0, 0);
    pscom_connection_t *c = fake_con(s, 1);
    fk_req_after_eof = true;
    pscom_request_t *r = post_recv(c, NULL, NULL);
    pscom_close_connection(c);
    failed(r);
    assert_int_equal(nwritten, 1);
    assert_int_equal(written_types[0], PSC_MSG_EOF);
    pscom_request_free(r);
    pscom_close_socket(s);
}

/* A message of the peer is half in, with no receive for it, when the
 * application closes the connection; a receive that the close fails closes
 * the socket from its callback, and the socket's close releases what its
 * queues hold. The half message is released once, when the transport is
 * closed (it was also released by the socket's close, then read and
 * released again). */
static pscom_socket_t *halfway;

static int take_nothing(pscom_request_t *r, pscom_connection_t *c,
                        pscom_header_net_t *h)
{
    (void)r;
    (void)c;
    (void)h;
    return 0;
}

static void close_halfway(pscom_request_t *r)
{
    assert_true(r->state & PSCOM_REQ_STATE_ERROR);
    note("receive");
    pscom_close_socket(halfway);
}

/* Over a real tcp connection within this process: its plugin is open. */
static pscom_connection_t *accepted;

static void on_accept(pscom_connection_t *c)
{
    accepted = c;
}

static void half_message_outlives_its_socket(void **state)
{
    (void)state;
    pscom_socket_t *sa = pscom_open_socket(0, 0, 0, 0);
    halfway = pscom_open_socket(0, 0, 1, 0);
    halfway->ops.con_accept = on_accept;
    pscom_con_type_mask_only(sa, PSCOM_CON_TYPE_TCP);
    pscom_con_type_mask_only(halfway, PSCOM_CON_TYPE_TCP);
    assert_int_equal(pscom_listen(halfway, PSCOM_ANYPORT), PSCOM_SUCCESS);
    char *ep = NULL;
    assert_int_equal(pscom_socket_get_ep_str(halfway, &ep), PSCOM_SUCCESS);
    pscom_connection_t *c = pscom_open_connection(sa);
    accepted = NULL;
    assert_int_equal(pscom_connect(c, ep, 0, PSCOM_CON_FLAG_DIRECT),
                     PSCOM_SUCCESS);
    pscom_socket_free_ep_str(ep);
    watchdog_start(10);
    while (!accepted) pscom_test_any();
    watchdog_stop();
    nran = 0;
    static char body[100];
    struct frame f;
    uint32_t tag = 3;
    frame_make(&f, PSC_MSG_USER, &tag, 4, body, sizeof(body), 10);
    assert_int_equal(feed(accepted, &f), 0);
    pscom_request_t *r = pscom_request_create(4, 0);
    r->connection = accepted;
    r->xheader_len = 4;
    r->data = rbuf;
    r->data_len = sizeof(rbuf);
    r->ops.recv_accept = take_nothing;
    r->ops.io_done = close_halfway;
    pscom_post_recv(r);
    pscom_close_connection(accepted);
    assert_int_equal(nran, 1);
    pscom_request_free(r);
    /* Released twice, a request would be handed out twice. */
    pscom_request_t *n[8];
    for (unsigned i = 0; i < 8; i++) {
        n[i] = pscom_request_create(4, 0);
        for (unsigned j = 0; j < i; j++) assert_ptr_not_equal(n[i], n[j]);
    }
    free_all(n, 8);
    pscom_close_socket(sa);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(no_send_after_the_eof, fake_off),
        cmocka_unit_test_teardown(no_receive_on_a_closing_socket, fake_off),
        cmocka_unit_test_teardown(failed_receive_closes_its_socket, fake_off),
        cmocka_unit_test_teardown(failed_send_sees_its_socket, fake_off),
        cmocka_unit_test_teardown(held_callback_closes_the_socket_too,
                                  fake_off),
        cmocka_unit_test_teardown(retired_handshake_keeps_the_cut, fake_off),
        cmocka_unit_test_teardown(one_eof_when_a_callback_closes_again,
                                  fake_off),
        cmocka_unit_test_teardown(closing_again_waits_a_bounded_time,
                                  fake_off),
        cmocka_unit_test_teardown(no_body_after_the_eof, fake_off),
        cmocka_unit_test_teardown(no_answer_after_the_eof, fake_off),
        cmocka_unit_test(half_message_outlives_its_socket),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
