/*
 * Receiving from inside a transport's callback (pscom_plugin_rx_now, plugin
 * interface 1.4): a whole user message that a posted receive takes is
 * matched and copied at once, but the receive's callbacks (and its DONE)
 * wait, as those of every request a plugin completes, until the core's
 * call into the plugin returned, so that no application code runs inside
 * the transport; everything else is refused and left to
 * pscom_plugin_rx_push, with nothing changed. A receive completed in
 * such a call after a send's completion waits for the next round.
 *
 * Messages are fed into connections with no transport, as in test_match.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "frames.h"

static pscom_socket_t *sock;
static pscom_connection_t *con_a;

static int setup(void **state)
{
    assert_int_equal(pscom_init(PSCOM_VERSION), PSCOM_SUCCESS);
    sock = pscom_open_socket(0, 0, 0, 0);
    assert_non_null(sock);
    con_a = pscom_open_connection(sock);
    assert_non_null(con_a);
    return 0;
}

static int teardown(void **state)
{
    pscom_close_socket(sock);
    return 0;
}

/* The order in which io_done callbacks ran (their tags), and whether each
 * request looked done to its own callback. */
static uint32_t done_order[8];
static int ndone;
static bool done_flag_seen;

static uint32_t tag_of(pscom_request_t *r)
{
    uint32_t t;
    memcpy(&t, &r->xheader, 4);
    return t;
}

static void record_done(pscom_request_t *r)
{
    assert_true(ndone < 8);
    done_order[ndone++] = tag_of(r);
    done_flag_seen = pscom_req_is_done(r);
}

static pscom_request_t *recv_on(pscom_connection_t *c, void *buf, size_t len,
                                void (*io_done)(pscom_request_t *))
{
    pscom_request_t *r = pscom_request_create(4, 0);
    r->connection = c;
    r->data = buf;
    r->data_len = len;
    r->xheader_len = 4;
    r->ops.io_done = io_done;
    pscom_post_recv(r);
    return r;
}

static pscom_request_t *recv_req(void *buf, size_t len,
                                 void (*io_done)(pscom_request_t *))
{
    return recv_on(con_a, buf, len, io_done);
}

/* The frame offered as head (header and xheader) and body. */
static int now(const struct frame *f)
{
    size_t hl = PSC_HDR_LEN + ((const pscom_header_net_t *)f->buf)->xheader_len;
    return pscom_plugin_rx_now(con_of(con_a), f->buf, hl, f->buf + hl,
                               f->len - hl);
}

static void taken_for_a_posted_receive(void **state)
{
    char b[16] = {0};
    pscom_request_t *r = recv_req(b, sizeof(b), NULL);
    struct frame f;
    frame_user(&f, 7, "seven", 6);
    assert_int_equal(now(&f), 1);
    /* No callback: done at once, as from rx_push. */
    assert_true(pscom_req_successful(r));
    assert_string_equal(b, "seven");
    assert_int_equal(tag_of(r), 7);
    assert_int_equal(r->header.data_len, 6);
    assert_ptr_equal(r->connection, con_a);
    pscom_request_free(r);

    /* Head and body apart (a transport's header and data). */
    r = recv_req(b, sizeof(b), NULL);
    frame_user(&f, 10, "apart", 6);
    static char body[6];
    memcpy(body, f.buf + PSC_HDR_LEN + 4, 6);
    memset(f.buf + PSC_HDR_LEN + 4, 0, 6);
    assert_int_equal(pscom_plugin_rx_now(con_of(con_a), f.buf, PSC_HDR_LEN + 4,
                                         body, 6),
                     1);
    assert_true(pscom_req_successful(r));
    assert_string_equal(b, "apart");
    pscom_request_free(r);

    /* Too long for the receive: taken, truncated, the rest dropped. */
    char small[4] = {0};
    r = recv_req(small, sizeof(small), NULL);
    frame_user(&f, 8, "truncated", 10);
    assert_int_equal(now(&f), 1);
    assert_true(pscom_req_is_done(r));
    assert_true(r->state & PSCOM_REQ_STATE_TRUNCATED);
    assert_memory_equal(small, "trun", 4);
    pscom_request_free(r);

    /* The connection goes on with the next message. */
    r = recv_req(b, sizeof(b), NULL);
    frame_user(&f, 9, "next", 5);
    assert_int_equal(feed(con_a, &f), 0);
    assert_true(pscom_req_successful(r));
    assert_string_equal(b, "next");
    pscom_request_free(r);
}

static void callbacks_wait_for_the_end_of_the_call(void **state)
{
    char b1[8], b2[8], b3[8];
    ndone = 0;
    pscom_request_t *r1 = recv_req(b1, sizeof(b1), record_done);
    pscom_request_t *r2 = recv_req(b2, sizeof(b2), record_done);
    pscom_request_t *r3 = recv_req(b3, sizeof(b3), record_done);
    struct frame f;
    /* As inside a plugin's progress op. */
    psc_enter();
    psc_hold();
    frame_user(&f, 1, "one", 4);
    assert_int_equal(now(&f), 1);
    frame_user(&f, 2, "two", 4);
    assert_int_equal(now(&f), 1);
    /* Copied, but no callback ran, and no receive is done yet: its owner
     * must keep off it until the callback ran. */
    assert_string_equal(b1, "one");
    assert_string_equal(b2, "two");
    assert_int_equal(ndone, 0);
    assert_false(pscom_req_is_done(r1));
    assert_false(pscom_req_is_done(r2));
    /* Not cancellable either: the message is in. */
    assert_int_equal(pscom_cancel_recv(r1), 0);
    /* A message pushed by the same call: held behind them. */
    frame_user(&f, 3, "three", 6);
    assert_int_equal(feed(con_a, &f), 0);
    assert_int_equal(ndone, 0);
    assert_false(pscom_req_is_done(r3));

    /* The call returns: all callbacks run, in arrival order. */
    psc_unhold();
    psc_leave();
    assert_int_equal(ndone, 3);
    assert_int_equal(done_order[0], 1);
    assert_int_equal(done_order[1], 2);
    assert_int_equal(done_order[2], 3);
    assert_true(done_flag_seen);
    assert_true(pscom_req_successful(r1));
    assert_true(pscom_req_successful(r2));
    assert_true(pscom_req_successful(r3));
    pscom_request_free(r1);
    pscom_request_free(r2);
    pscom_request_free(r3);
}

static void callbacks_run_when_the_round_ends(void **state)
{
    char b[8];
    ndone = 0;
    pscom_request_t *r = recv_req(b, sizeof(b), record_done);
    struct frame f;
    /* Called by a plugin outside the core's call into it (no plugin
     * does): the callback waits for the next such call to end. */
    frame_user(&f, 4, "four", 5);
    assert_int_equal(now(&f), 1);
    assert_int_equal(ndone, 0);
    psc_progress();
    assert_int_equal(ndone, 1);
    assert_true(pscom_req_successful(r));
    pscom_request_free(r);

    /* Outside any call into a plugin (as pscom_post_recv taking an
     * unexpected message), a push runs the callback at once. */
    ndone = 0;
    r = recv_req(b, sizeof(b), record_done);
    frame_user(&f, 5, "five", 5);
    assert_int_equal(feed(con_a, &f), 0);
    assert_int_equal(ndone, 1);
    assert_true(pscom_req_successful(r));
    pscom_request_free(r);
}

static void record_con_error(pscom_connection_t *c, pscom_op_t op,
                             pscom_err_t err)
{
    assert_true(ndone < 8);
    done_order[ndone++] = 1000; /* "the connection failed" */
}

static void con_error_after_the_callbacks_before_it(void **state)
{
    char b[8];
    ndone = 0;
    pscom_connection_t *c = pscom_open_connection(sock);
    pscom_request_t *r = recv_on(c, b, sizeof(b), record_done);
    sock->ops.con_error = record_con_error;
    struct frame f;
    frame_user(&f, 6, "six", 4);

    /* Inside a plugin: a message completes the receive, then the
     * connection fails. */
    psc_enter();
    psc_hold();
    assert_int_equal(pscom_plugin_rx_push(con_of(c), f.buf, f.len), 0);
    pscom_plugin_con_error(con_of(c), PSCOM_OP_READ, PSCOM_ERR_EOF, "test", 0);
    assert_int_equal(ndone, 0);
    psc_unhold();
    psc_leave();
    /* The application hears of them in that order. */
    assert_int_equal(ndone, 2);
    assert_int_equal(done_order[0], 6);
    assert_int_equal(done_order[1], 1000);
    assert_true(pscom_req_successful(r));
    sock->ops.con_error = NULL;
    pscom_request_free(r);
    pscom_close_connection(c);
}

/* A send on con_a with a 4-byte tag, queued (the connection has no
 * transport): the test plays the transport that writes it. */
static pscom_request_t *send_req(uint32_t tag, const char *text)
{
    pscom_request_t *r = pscom_request_create(4, 0);
    pscom_req_prepare(r, con_a, (void *)text, strlen(text) + 1, &tag, 4);
    r->ops.io_done = record_done;
    pscom_post_send(r);
    return r;
}

/* The transport reports the queued frame written. */
static void written(void)
{
    struct iovec iov[4];
    size_t total = 0;
    assert_true(pscom_plugin_tx_peek(con_of(con_a), iov, 4, &total) > 0);
    assert_int_equal(pscom_plugin_tx_done(con_of(con_a), total), 0);
}

/* One step of a transport on con_a: a message from the peer (tag, text),
 * or with tag 0 the queued frames reported written. */
struct step {
    uint32_t tag;
    const char *text;
};

/* The steps in one call into the transport, as the core makes it; `later`:
 * the call ends as a post does, leaving what completed held for the next
 * round (psc_unhold_later). */
static void one_call(const struct step *st, unsigned n, bool later)
{
    psc_enter();
    psc_hold();
    for (unsigned i = 0; i < n; i++) {
        if (!st[i].tag) {
            written();
            continue;
        }
        struct frame f;
        frame_user(&f, st[i].tag, st[i].text, strlen(st[i].text) + 1);
        assert_int_equal(feed(con_a, &f), 0);
    }
    if (later)
        psc_unhold_later();
    else
        psc_unhold();
    psc_leave();
}

/* One call into the transport reports a send written and then the peer's
 * answer (ofi: one batch of its completion queue). */
static void send_then_answer_in_one_call(pscom_request_t **s,
                                         pscom_request_t **r, char *b,
                                         bool later)
{
    ndone = 0;
    *r = recv_req(b, 8, record_done);
    *s = send_req(11, "ask");
    psc_progress(); /* the post's own round */
    assert_int_equal(ndone, 0);
    one_call((const struct step[]){{0, NULL}, {12, "answer"}}, 2, later);
}

/* ParaStation MPI's partitioned sender must see its round's sends done
 * before the callback of the receiver's next clear-to-send message runs:
 * the answer waits for the next round of progress. */
static void answer_after_a_send_waits_for_a_round(void **state)
{
    char b[8];
    pscom_request_t *s, *r;
    send_then_answer_in_one_call(&s, &r, b, false);
    assert_int_equal(ndone, 1);
    assert_int_equal(done_order[0], 11);
    assert_true(pscom_req_successful(s));
    assert_false(pscom_req_is_done(r));
    /* Not in another call into a plugin of the same round either. */
    one_call(NULL, 0, false);
    assert_int_equal(ndone, 1);
    /* The next round runs it, and only it (a round of its own). */
    assert_int_equal(psc_progress(), 1);
    assert_int_equal(ndone, 2);
    assert_int_equal(done_order[1], 12);
    assert_true(pscom_req_successful(r));
    assert_string_equal(b, "answer");
    pscom_request_free(s);
    pscom_request_free(r);

    /* A message that came before the send's completion is not cut. */
    ndone = 0;
    r = recv_req(b, sizeof(b), record_done);
    s = send_req(13, "ask");
    psc_progress();
    one_call((const struct step[]){{14, "before"}, {0, NULL}}, 2, false);
    assert_int_equal(ndone, 2);
    assert_int_equal(done_order[0], 14);
    assert_int_equal(done_order[1], 13);
    pscom_request_free(s);
    pscom_request_free(r);
}

/* Closing runs everything held before it frees anything, with no cut:
 * what was cut off, and a send with its answer both still held. */
static void close_runs_what_waits_after_a_send(void **state)
{
    char b[8];
    pscom_request_t *s, *r;
    for (int later = 0; later < 2; later++) {
        send_then_answer_in_one_call(&s, &r, b, later);
        assert_int_equal(ndone, later ? 0 : 1);
        pscom_connection_t *other = pscom_open_connection(sock);
        pscom_close_connection(other);
        assert_int_equal(ndone, 2);
        assert_int_equal(done_order[0], 11);
        assert_int_equal(done_order[1], 12);
        assert_true(pscom_req_successful(r));
        pscom_request_free(s);
        pscom_request_free(r);
    }
}

/* A callback that drives progress itself (as a callback that waits). */
static void record_and_test(pscom_request_t *r)
{
    record_done(r);
    pscom_test_any();
}

/* Held in one call on con_a: a receive (tag base + 1) whose callback runs
 * a round of progress itself, a send (base + 2), a receive (base + 3);
 * the call ends as a progress op does, or (later) as a post does. */
static void recv_send_recv_held(uint32_t base, bool later, char *b1,
                                char *b3, pscom_request_t **r)
{
    ndone = 0;
    r[0] = recv_req(b1, 8, record_and_test);
    r[1] = send_req(base + 2, "ask");
    r[2] = recv_req(b3, 8, record_done);
    psc_progress();
    one_call((const struct step[]){{base + 1, "first"}, {0, NULL},
                                   {base + 3, "third"}},
             3, later);
}

/* Held in one call: a receive whose callback runs a round of progress
 * itself, a send, a receive. The nested round runs the send; the receive
 * behind it still waits for a round after the outer run, and nothing stays
 * cut once everything ran. */
static void cut_made_in_a_nested_run_holds(void **state)
{
    char b1[8], b3[8];
    pscom_request_t *r[3];
    recv_send_recv_held(20, false, b1, b3, r);
    pscom_request_t *r1 = r[0], *s2 = r[1], *r3 = r[2];
    assert_int_equal(ndone, 2);
    assert_int_equal(done_order[0], 21);
    assert_int_equal(done_order[1], 22);
    assert_false(pscom_req_is_done(r3));
    assert_true(psc_ctx.held_cut);

    /* Meanwhile a message completes another receive: it queues behind
     * the one cut off, however it came (here outside any plugin). */
    char b4[8];
    pscom_request_t *r4 = recv_req(b4, sizeof(b4), record_done);
    struct frame f;
    frame_user(&f, 24, "fourth", 7);
    assert_int_equal(feed(con_a, &f), 0);
    assert_int_equal(ndone, 2);
    assert_false(pscom_req_is_done(r4));

    assert_int_equal(psc_progress(), 1);
    assert_int_equal(ndone, 4);
    assert_int_equal(done_order[2], 23);
    assert_int_equal(done_order[3], 24);
    assert_false(psc_ctx.held_cut);
    pscom_request_free(r1);
    pscom_request_free(s2);
    pscom_request_free(r3);
    pscom_request_free(r4);
}

/* A transport that writes nothing until `cut_tx_go`, then everything,
 * and answers the first user message at once (in the same call, so that
 * the answer is cut off behind the send's completion). */
static bool cut_tx_go, cut_answered;

static void cut_tx_kick(pscom_plugin_con_t *c, void *priv)
{
    (void)priv;
    struct iovec iov[4];
    size_t total;
    while (cut_tx_go && pscom_plugin_tx_peek(c, iov, 4, &total) > 0) {
        pscom_header_net_t h;
        memcpy(&h, iov[0].iov_base, sizeof(h));
        assert_int_equal(pscom_plugin_tx_done(c, total), 0);
        if (h.msg_type == PSC_MSG_USER && !cut_answered) {
            struct frame f;
            frame_user(&f, 32, "answer", 7);
            cut_answered = true;
            assert_int_equal(pscom_plugin_rx_push(c, f.buf, f.len), 0);
        }
    }
}

static void cut_close(pscom_plugin_con_t *c, void *priv)
{
    (void)c;
    (void)priv;
}

static const pscom_plugin_ops_t cut_ops = {.tx_kick = cut_tx_kick,
                                           .close = cut_close};
static const pscom_plugin_t cut_desc = {
    .api_version = PSCOM_PLUGIN_API_VERSION, .name = "cutter", .ops = &cut_ops};
static struct psc_plugin cut_plugin = {.desc = &cut_desc, .name = "cutter"};

/* The close's own progress writes the last send and gets its answer in
 * the same call: the answer, cut off, still runs before the close frees
 * the connection it names. */
/* A connection that looks open on the cutter, with a send of tag 31
 * posted and not written. */
static pscom_connection_t *cut_con(pscom_request_t **s)
{
    pscom_connection_t *c = pscom_open_connection(sock);
    struct psc_con *pc = con_of(c);
    pc->plugin = &cut_plugin;
    pc->plugin_open = true;
    cut_plugin.open_cons++;
    cut_tx_go = cut_answered = false;
    *s = pscom_request_create(4, 0);
    uint32_t tag = 31;
    pscom_req_prepare(*s, c, "ask", 4, &tag, 4);
    (*s)->ops.io_done = record_done;
    pscom_post_send(*s);
    return c;
}

/* The answer's callback sends again on its connection, as MPI would. */
static pscom_request_t *late;
static void record_and_send(pscom_request_t *r)
{
    record_done(r);
    late = pscom_request_create(4, 0);
    uint32_t tag = 33;
    pscom_req_prepare(late, r->connection, "more", 5, &tag, 4);
    pscom_post_send(late);
}

static void close_runs_what_its_own_progress_cut(void **state)
{
    ndone = 0;
    char b[8];
    pscom_request_t *s;
    pscom_connection_t *c = cut_con(&s);
    pscom_request_t *r = recv_on(c, b, sizeof(b), record_and_send);
    psc_progress();
    assert_int_equal(ndone, 0);

    /* The close waits 1 ms for the send, then queues its EOF: the kick
     * writes both. */
    unsigned timeout = psc_settings.shutdown_timeout_ms;
    psc_settings.shutdown_timeout_ms = 1;
    cut_tx_go = true;
    pscom_close_connection(c);
    psc_settings.shutdown_timeout_ms = timeout;
    assert_true(cut_answered);
    assert_int_equal(ndone, 2);
    assert_int_equal(done_order[0], 31);
    assert_int_equal(done_order[1], 32);
    assert_true(pscom_req_successful(r));
    assert_string_equal(b, "answer");
    /* Its EOF went before: a send after it is refused, not lost. */
    assert_true(pscom_req_is_done(late));
    assert_true(late->state & PSCOM_REQ_STATE_ERROR);
    pscom_request_free(late);
    pscom_request_free(s);
    pscom_request_free(r);
}

/* Completions that wait behind a cut, among them those of a connection
 * closed in the meantime (its sends fail when the round ends): they run
 * before that connection is freed. */
static void reap_runs_what_names_the_connection(void **state)
{
    ndone = 0;
    pscom_request_t *s;
    pscom_connection_t *c = cut_con(&s);
    unsigned timeout = psc_settings.shutdown_timeout_ms;
    psc_settings.shutdown_timeout_ms = 1;
    psc_enter(); /* one round: c is freed when it ends */
    pscom_close_connection(c); /* the send still waits (written never) */
    psc_settings.shutdown_timeout_ms = timeout;
    assert_false(pscom_req_is_done(s));
    /* Meanwhile, on con_a: a send and its answer in one call, cut. */
    char b[8];
    pscom_request_t *r = recv_req(b, sizeof(b), record_done);
    pscom_request_t *s2 = send_req(34, "ask");
    one_call((const struct step[]){{0, NULL}, {35, "answer"}}, 2, false);
    assert_true(psc_ctx.held_cut);
    psc_leave();
    /* c's send failed and its callback ran, before c went. */
    assert_true(pscom_req_is_done(s));
    assert_true(s->state & PSCOM_REQ_STATE_ERROR);
    assert_int_equal(ndone, 3);
    assert_int_equal(done_order[0], 34);
    pscom_request_free(s);
    pscom_request_free(s2);
    pscom_request_free(r);
}

/* A run of everything (a close) whose callback drives progress, which
 * cuts: the run goes on to the end. */
static void close_after_a_nested_cut_ends(void **state)
{
    char b1[8], b3[8];
    pscom_request_t *r[3];
    recv_send_recv_held(40, true, b1, b3, r); /* all three wait */
    pscom_request_t *r1 = r[0], *s2 = r[1], *r3 = r[2];
    assert_int_equal(ndone, 0);
    pscom_connection_t *other = pscom_open_connection(sock);
    pscom_close_connection(other);
    assert_int_equal(ndone, 3);
    assert_false(psc_ctx.held_cut);
    assert_true(pscom_req_successful(r3));
    pscom_request_free(r1);
    pscom_request_free(s2);
    pscom_request_free(r3);
}

/* A receive's callback closes the socket that is being closed (its
 * failing any-source receive runs it): the socket is closed once. */
static pscom_socket_t *closing_sock;
static int close_again_calls;
static void close_again(pscom_request_t *r)
{
    close_again_calls++;
    pscom_close_socket(closing_sock);
}

static void socket_closed_again_from_its_callback(void **state)
{
    closing_sock = pscom_open_socket(0, 0, 0, 0);
    assert_non_null(closing_sock);
    char b[8];
    pscom_request_t *r = pscom_request_create(0, 0);
    r->socket = closing_sock;
    r->data = b;
    r->data_len = sizeof(b);
    r->ops.io_done = close_again;
    pscom_post_recv(r);
    close_again_calls = 0;
    pscom_close_socket(closing_sock);
    assert_int_equal(close_again_calls, 1);
    assert_true(r->state & PSCOM_REQ_STATE_ERROR);
    pscom_request_free(r);
}

static pscom_request_t *never(pscom_connection_t *c, pscom_header_net_t *h)
{
    return NULL;
}

static int reject_all(pscom_request_t *r, pscom_connection_t *c,
                      pscom_header_net_t *h)
{
    return 0;
}

static void refused_and_left_for_the_push(void **state)
{
    struct frame f;
    frame_user(&f, 6, "six", 4);

    /* No receive posted: refused; the push keeps it as unexpected. */
    assert_int_equal(now(&f), 0);
    assert_int_equal(feed(con_a, &f), 0);
    char b[8];
    pscom_request_t *r = recv_req(b, sizeof(b), NULL);
    assert_true(pscom_req_successful(r));
    assert_string_equal(b, "six");
    pscom_request_free(r);

    /* The only receive does not accept it. */
    r = recv_req(b, sizeof(b), NULL);
    r->ops.recv_accept = reject_all;
    assert_int_equal(now(&f), 0);
    assert_false(pscom_req_is_done(r));
    assert_int_equal(pscom_cancel_recv(r), 1);
    pscom_request_free(r);

    r = recv_req(b, sizeof(b), NULL);
    /* A socket with default_recv (application code decides). */
    sock->ops.default_recv = never;
    assert_int_equal(now(&f), 0);
    sock->ops.default_recv = NULL;

    /* Not a user message. */
    struct frame c;
    struct psc_rndv_cts cts = {.sender_id = 1, .receiver_id = 2};
    frame_make(&c, PSC_MSG_RNDV_CTS, &cts, sizeof(cts), NULL, 0, 0);
    assert_int_equal(now(&c), 0);

    /* Not one whole message: body shorter, longer; head cut; unaligned. */
    struct frame part = f;
    part.len--;
    assert_int_equal(now(&part), 0);
    struct frame more = f;
    more.len++;
    assert_int_equal(now(&more), 0);
    size_t hl = PSC_HDR_LEN + 4;
    assert_int_equal(pscom_plugin_rx_now(con_of(con_a), f.buf, hl - 1,
                                         f.buf + hl, f.len - hl),
                     0);
    static uint8_t odd[sizeof(f.buf) + 1] __attribute__((aligned(8)));
    memcpy(odd + 1, f.buf, f.len);
    assert_int_equal(pscom_plugin_rx_now(con_of(con_a), odd + 1, hl,
                                         odd + 1 + hl, f.len - hl),
                     0);

    /* The connection is inside a message (part of a header pushed). */
    assert_int_equal(pscom_plugin_rx_push(con_of(con_a), f.buf, 3), 0);
    assert_int_equal(now(&f), 0);
    assert_false(pscom_req_is_done(r));
    /* ... which the push completes; the receive took nothing before. */
    assert_int_equal(pscom_plugin_rx_push(con_of(con_a), f.buf + 3, f.len - 3),
                     0);
    assert_true(pscom_req_successful(r));
    assert_string_equal(b, "six");
    pscom_request_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(taken_for_a_posted_receive),
        cmocka_unit_test(callbacks_wait_for_the_end_of_the_call),
        cmocka_unit_test(callbacks_run_when_the_round_ends),
        cmocka_unit_test(con_error_after_the_callbacks_before_it),
        cmocka_unit_test(answer_after_a_send_waits_for_a_round),
        cmocka_unit_test(close_runs_what_waits_after_a_send),
        cmocka_unit_test(cut_made_in_a_nested_run_holds),
        cmocka_unit_test(close_runs_what_its_own_progress_cut),
        cmocka_unit_test(reap_runs_what_names_the_connection),
        cmocka_unit_test(close_after_a_nested_cut_ends),
        cmocka_unit_test(socket_closed_again_from_its_callback),
        cmocka_unit_test(refused_and_left_for_the_push),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
