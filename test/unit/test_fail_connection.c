/*
 * pscom_fail_connection: a pointer that is no open connection is never read
 * through, and the messages a transport still holds for the connection
 * (its peer sent them before it died) are read first and stay receivable.
 *
 * A fake transport plays the peer: its progress op delivers one queued
 * message per call, as a shared-memory ring does, and may then report the
 * end of the stream, or never run dry.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "fake_transport.h"
#include "frames.h"

#define MSG_LEN 32

/* The fake transport: one connection at a time. */
static struct psc_con *fk;
static unsigned fk_queued;   /* messages the peer sent that are not read yet */
static unsigned fk_next_tag; /* the tag of the next one */
static bool fk_eof_after;    /* the end of the stream follows the last one */
static bool fk_endless;      /* the peer never stops sending */
static unsigned fk_polls;

static void message(uint32_t tag, char out[MSG_LEN])
{
    memset(out, 0, MSG_LEN);
    snprintf(out, MSG_LEN, "message %u", (unsigned)tag);
}

static int fk_progress(void)
{
    struct psc_con *c = fk;
    fk_polls++;
    if (!c || !c->plugin_open || c->failed) return 0;
    if (!fk_queued && !fk_endless) {
        if (!fk_eof_after) return 0;
        fk_eof_after = false;
        pscom_plugin_con_error(c, PSCOM_OP_READ, PSCOM_ERR_EOF, "read", 0);
        return 1;
    }
    char body[MSG_LEN];
    struct frame f;
    message(fk_next_tag, body);
    frame_user(&f, fk_next_tag++, body, MSG_LEN);
    if (fk_queued) fk_queued--;
    assert_int_equal(pscom_plugin_rx_push(c, f.buf, f.len), 0);
    return 1;
}

static struct fake_transport fk_transport;

/* What the socket's con_error saw. */
static unsigned nerrors;
static pscom_err_t last_error;
static pscom_connection_t *last_error_con;

static void on_con_error(pscom_connection_t *c, pscom_op_t op,
                         pscom_err_t err)
{
    (void)op;
    nerrors++;
    last_error = err;
    last_error_con = c;
}

/* A connection of s that looks established on the fake transport, whose
 * peer has sent `queued` messages that nobody has read yet. */
static pscom_connection_t *fake_con(pscom_socket_t *s, unsigned queued)
{
    fk = fake_transport_con(&fk_transport, s);
    assert_non_null(fk);
    fk_queued = queued;
    fk_next_tag = 0;
    fk_eof_after = fk_endless = false;
    fk_polls = 0;
    nerrors = 0;
    last_error = 0;
    last_error_con = NULL;
    return &fk->pub;
}

static pscom_socket_t *open_sock(void)
{
    pscom_socket_t *s = pscom_open_socket(0, 0, 0, 0);
    assert_non_null(s);
    s->ops.con_error = on_con_error;
    return s;
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

/* A receive of one message on c, posted now. */
static pscom_request_t *recv_now(pscom_connection_t *c, char buf[MSG_LEN])
{
    pscom_request_t *r = pscom_request_create(4, 0);
    assert_non_null(r);
    pscom_req_prepare(r, c, buf, MSG_LEN, NULL, 4);
    pscom_post_recv(r);
    return r;
}

/* Receive message `tag` from c, which must be there already. */
static void expect_message(pscom_connection_t *c, uint32_t tag)
{
    char buf[MSG_LEN], want[MSG_LEN];
    pscom_request_t *r = recv_now(c, buf);
    assert_true(pscom_req_successful(r));
    uint32_t got;
    memcpy(&got, &r->xheader.user, sizeof(got));
    assert_int_equal(got, tag);
    message(tag, want);
    assert_memory_equal(buf, want, MSG_LEN);
    pscom_request_free(r);
}

/* A receive posted now fails at once: nothing more is there. */
static void expect_nothing_more(pscom_connection_t *c)
{
    char buf[MSG_LEN];
    pscom_request_t *r = recv_now(c, buf);
    assert_true(pscom_req_is_done(r));
    assert_true(r->state & PSCOM_REQ_STATE_ERROR);
    pscom_request_free(r);
}

/* The peer's transport holds five messages and no end of stream (a peer
 * that hangs, or a node that is gone): they are read before the failure,
 * and received after it, in order. Without the drain none was. */
static void unread_messages_stay_receivable(void **state)
{
    (void)state;
    pscom_socket_t *s = open_sock();
    pscom_connection_t *c = fake_con(s, 5);
    assert_int_equal(pscom_fail_connection(c, PSCOM_ERR_IOERROR),
                     PSCOM_SUCCESS);
    assert_int_equal(c->state, PSCOM_CON_STATE_CLOSED);
    assert_int_equal(nerrors, 1);
    assert_int_equal(last_error, PSCOM_ERR_IOERROR);
    assert_ptr_equal(last_error_con, c);
    for (uint32_t tag = 0; tag < 5; tag++) expect_message(c, tag);
    expect_nothing_more(c);
    pscom_close_socket(s);
    assert_int_equal(nerrors, 1);
}

/* The transport reads the end of the stream after the messages: that end
 * stands (con_error once, with the transport's error), and the call says
 * the connection had ended already. */
static void end_of_stream_while_reading_stands(void **state)
{
    (void)state;
    pscom_socket_t *s = open_sock();
    pscom_connection_t *c = fake_con(s, 3);
    fk_eof_after = true;
    assert_int_equal(pscom_fail_connection(c, PSCOM_ERR_IOERROR),
                     PSCOM_ERR_ALREADY);
    assert_int_equal(nerrors, 1);
    assert_int_equal(last_error, PSCOM_ERR_EOF);
    for (uint32_t tag = 0; tag < 3; tag++) expect_message(c, tag);
    expect_nothing_more(c);
    assert_int_equal(pscom_fail_connection(c, PSCOM_ERR_IOERROR),
                     PSCOM_ERR_ALREADY);
    assert_int_equal(nerrors, 1);
    pscom_close_socket(s);
}

/* A peer that never stops sending does not keep the call: it reads for a
 * bounded number of rounds, then fails the connection; what it read stays
 * receivable. */
static void endless_peer_does_not_hold_the_call(void **state)
{
    (void)state;
    pscom_socket_t *s = open_sock();
    pscom_connection_t *c = fake_con(s, 0);
    fk_endless = true;
    watchdog_start(20);
    assert_int_equal(pscom_fail_connection(c, PSCOM_ERR_IOERROR),
                     PSCOM_SUCCESS);
    watchdog_stop();
    assert_int_equal(nerrors, 1);
    unsigned read = fk_next_tag;
    assert_true(read > 0 && read < 100000);
    for (uint32_t tag = 0; tag < read; tag++) expect_message(c, tag);
    expect_nothing_more(c);
    pscom_close_socket(s);
}

/* Called from a descriptor's callback (callbacks held) while a cut waits
 * for the caller's next round (psc_ctx.held_cut): the rounds of the drain
 * cannot run it, and must not count it as work; the drain ends at the
 * first round that read nothing, not after its bound. */
static void pending_cut_does_not_make_rounds_count(void **state)
{
    (void)state;
    pscom_socket_t *s = open_sock();
    pscom_connection_t *c = fake_con(s, 2);
    psc_hold();
    psc_ctx.held_cut = true;
    assert_int_equal(pscom_fail_connection(c, PSCOM_ERR_IOERROR),
                     PSCOM_SUCCESS);
    psc_ctx.held_cut = false;
    psc_unhold();
    /* Two messages, then one round that found nothing. */
    assert_int_equal(fk_polls, 3);
    assert_int_equal(nerrors, 1);
    for (uint32_t tag = 0; tag < 2; tag++) expect_message(c, tag);
    expect_nothing_more(c);
    pscom_close_socket(s);
}

/* A receive's callback closes the connection while the failure reads:
 * the call leaves the closed connection alone (it says it is closing). */
static pscom_connection_t *closed_in_callback;

static void close_it(pscom_request_t *r)
{
    (void)r;
    pscom_close_connection(closed_in_callback);
}

static void closed_by_a_callback_while_reading(void **state)
{
    (void)state;
    char buf[MSG_LEN];
    /* The close's wait for its EOF frame, which the fake never writes. */
    unsigned saved_timeout = psc_settings.shutdown_timeout_ms;
    psc_settings.shutdown_timeout_ms = 1;
    pscom_socket_t *s = open_sock();
    pscom_connection_t *c = fake_con(s, 4);
    closed_in_callback = c;
    pscom_request_t *r = pscom_request_create(4, 0);
    pscom_req_prepare(r, c, buf, MSG_LEN, NULL, 4);
    r->ops.io_done = close_it;
    pscom_post_recv(r);
    assert_int_equal(pscom_fail_connection(c, PSCOM_ERR_IOERROR),
                     PSCOM_ERR_ALREADY);
    assert_true(pscom_req_successful(r));
    assert_int_equal(nerrors, 0);
    pscom_request_free(r);
    pscom_close_socket(s);
    psc_settings.shutdown_timeout_ms = saved_timeout;
}

/* A connection that is not established (on demand, or never connected)
 * has nothing to read: it fails at once. */
static void unconnected_fails_at_once(void **state)
{
    (void)state;
    pscom_socket_t *s = open_sock();
    pscom_connection_t *c = pscom_open_connection(s);
    /* The fake counts the rounds of progress, if there are any. */
    psc_active.n = 1;
    psc_active.progress[0] = fk_progress;
    fk_polls = 0;
    nerrors = 0;
    assert_int_equal(pscom_fail_connection(c, PSCOM_ERR_EOF), PSCOM_SUCCESS);
    assert_int_equal(fk_polls, 0);
    assert_int_equal(nerrors, 1);
    assert_int_equal(last_error, PSCOM_ERR_EOF);
    pscom_close_socket(s);
}

/* A pointer that is none of the open connections is not read through:
 * here a connection object that no socket lists, whose memory looks like
 * a connection's as a freed one may, and a connection closed already.
 * Taken at its word (the magic number), the first was failed. */
static void no_open_connection_is_left_alone(void **state)
{
    (void)state;
    pscom_socket_t *s = open_sock();
    nerrors = 0;
    struct psc_con *loose = psc_con_create(sock_of(s));
    assert_non_null(loose);
    assert_int_equal(pscom_fail_connection(&loose->pub, PSCOM_ERR_IOERROR),
                     PSCOM_ERR_INVALID);
    assert_false(loose->failed);
    assert_int_equal(loose->pub.state, PSCOM_CON_STATE_NO_RW);
    free(loose);

    pscom_connection_t *c = pscom_open_connection(s);
    pscom_close_connection(c);
    assert_int_equal(pscom_fail_connection(c, PSCOM_ERR_IOERROR),
                     PSCOM_ERR_INVALID);
    assert_int_equal(nerrors, 0);
    assert_int_equal(pscom_fail_connection(NULL, PSCOM_ERR_IOERROR),
                     PSCOM_ERR_INVALID);
    pscom_close_socket(s);
    /* Nor one of a socket that was closed. */
    pscom_socket_t *gone = open_sock();
    c = pscom_open_connection(gone);
    pscom_close_socket(gone);
    assert_int_equal(pscom_fail_connection(c, PSCOM_ERR_IOERROR),
                     PSCOM_ERR_INVALID);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(unread_messages_stay_receivable, fake_off),
        cmocka_unit_test_teardown(end_of_stream_while_reading_stands, fake_off),
        cmocka_unit_test_teardown(endless_peer_does_not_hold_the_call,
                                  fake_off),
        cmocka_unit_test_teardown(pending_cut_does_not_make_rounds_count,
                                  fake_off),
        cmocka_unit_test_teardown(closed_by_a_callback_while_reading,
                                  fake_off),
        cmocka_unit_test_teardown(unconnected_fails_at_once, fake_off),
        cmocka_unit_test_teardown(no_open_connection_is_left_alone, fake_off),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
