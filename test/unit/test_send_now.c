/*
 * Sending without the queue (plugin interface 1.3, tx_now): a frame for a
 * connection with nothing queued goes to the plugin's tx_now and is done
 * as soon as the plugin takes it; a frame the plugin leaves, and every
 * frame behind a queued one, goes through the send queue and tx_kick, in
 * order; a plugin built for an older minor of the interface is never asked.
 *
 * The connections run on a fake plugin installed the way the core
 * establishes a real one (psc_con_established).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "frames.h"

static int now_calls, kicks;
static int now_takes = 1;  /* what fake_tx_now answers */
static int kick_writes;    /* fake_tx_kick writes the whole queue */
static uint8_t now_frame[256];
static size_t now_len;

static int fake_tx_now(pscom_plugin_con_t *c, void *priv,
                       const struct iovec *iov, int iovcnt)
{
    now_calls++;
    if (!now_takes) return 0;
    now_len = 0;
    for (int i = 0; i < iovcnt; i++) {
        assert_true(now_len + iov[i].iov_len <= sizeof(now_frame));
        memcpy(now_frame + now_len, iov[i].iov_base, iov[i].iov_len);
        now_len += iov[i].iov_len;
    }
    return 1;
}

static void fake_tx_kick(pscom_plugin_con_t *c, void *priv)
{
    kicks++;
    if (!kick_writes) return;
    struct iovec iov[8];
    size_t total;
    pscom_plugin_tx_peek(c, iov, 8, &total);
    if (total) pscom_plugin_tx_done(c, total);
}

static void fake_close(pscom_plugin_con_t *c, void *priv)
{
}

static const pscom_plugin_ops_t fake_ops = {
    .tx_kick = fake_tx_kick,
    .close = fake_close,
    .tx_now = fake_tx_now,
};
static const pscom_plugin_t desc_now = {
    .api_version = PSCOM_PLUGIN_API_VERSION, .name = "fake", .ops = &fake_ops};
static const pscom_plugin_t desc_1_2 = {
    .api_version = 0x0102, .name = "fake12", .ops = &fake_ops};
static struct psc_plugin plugin_now = {.desc = &desc_now, .name = "fake"};
static struct psc_plugin plugin_1_2 = {.desc = &desc_1_2, .name = "fake12"};

/* A plugin with zero-copy rendezvous: it takes the buffer when the send is
 * posted. */
static int describes;

static size_t fake_describe(pscom_plugin_con_t *c, void *priv,
                            const void *data, size_t len, void *blob)
{
    describes++;
    memset(blob, 0xab, 8);
    return 8;
}

static const pscom_plugin_ops_t rndv_ops = {
    .tx_kick = fake_tx_kick,
    .close = fake_close,
    .rndv_describe = fake_describe,
};
static const pscom_plugin_t desc_rndv = {
    .api_version = PSCOM_PLUGIN_API_VERSION, .name = "rndv", .ops = &rndv_ops};
static struct psc_plugin plugin_rndv = {.desc = &desc_rndv, .name = "rndv"};

/* A plugin whose close() lends the first frame still queued, as one whose
 * transport cannot withdraw a send (pscom_plugin_tx_lend). */
static void *lent_token;

static void lend_close(pscom_plugin_con_t *c, void *priv)
{
    struct iovec iov[2];
    size_t total;
    if (pscom_plugin_tx_peek(c, iov, 2, &total))
        lent_token = pscom_plugin_tx_lend(c, iov[0].iov_base);
}

static const pscom_plugin_ops_t lend_ops = {
    .tx_kick = fake_tx_kick,
    .close = lend_close,
};
static const pscom_plugin_t desc_lend = {
    .api_version = PSCOM_PLUGIN_API_VERSION, .name = "lend", .ops = &lend_ops};
static struct psc_plugin plugin_lend = {.desc = &desc_lend, .name = "lend"};

static pscom_socket_t *sock;

static int setup(void **state)
{
    assert_int_equal(pscom_init(PSCOM_VERSION), PSCOM_SUCCESS);
    sock = pscom_open_socket(0, 0, 0, 0);
    assert_non_null(sock);
    now_calls = kicks = 0;
    now_takes = 1;
    kick_writes = 0;
    return 0;
}

static pscom_connection_t *cur; /* the test's connection, until closed */

static int teardown(void **state)
{
    /* A failed test may leave frames queued, which closing waits for, or a
     * rendezvous send waiting for its answer: its connection fails. */
    kick_writes = 1;
    if (cur) {
        fake_tx_kick(con_of(cur), NULL);
        pscom_plugin_con_error(con_of(cur), PSCOM_OP_WRITE, PSCOM_ERR_IOERROR,
                               "test failed", 0);
    }
    cur = NULL;
    pscom_close_socket(sock);
    return 0;
}

static pscom_connection_t *open_on(struct psc_plugin *p)
{
    pscom_connection_t *c = pscom_open_connection(sock);
    assert_non_null(c);
    psc_con_established(con_of(c), p, NULL);
    cur = c;
    return c;
}

static void close_con(pscom_connection_t *c)
{
    kick_writes = 1; /* the EOF frame, if it is queued */
    cur = NULL;
    pscom_close_connection(c);
}

static pscom_request_t *send_req(pscom_connection_t *c, uint32_t tag,
                                 const char *data, size_t len)
{
    pscom_request_t *r = pscom_request_create(4, 0);
    r->connection = c;
    r->xheader_len = 4;
    memcpy(&r->xheader, &tag, 4);
    r->data = (void *)data;
    r->data_len = len;
    pscom_post_send(r);
    return r;
}

/* Write the first queued frame, as a plugin does. */
static void write_one(pscom_connection_t *c)
{
    struct iovec iov[2];
    size_t total;
    int n = pscom_plugin_tx_peek(con_of(c), iov, 2, &total);
    assert_true(n >= 1);
    size_t len = iov[0].iov_len;
    pscom_header_net_t h;
    memcpy(&h, iov[0].iov_base, sizeof(h));
    if (h.data_len) len += iov[1].iov_len;
    assert_int_equal(pscom_plugin_tx_done(con_of(c), len), 0);
}

static void taken_frame_is_done_at_once(void **state)
{
    pscom_connection_t *c = open_on(&plugin_now);
    pscom_request_t *r = send_req(c, 77, "hello", 5);
    assert_true(pscom_req_is_done(r));
    assert_true(pscom_req_successful(r));
    assert_int_equal(now_calls, 1);
    assert_int_equal(kicks, 0);
    assert_false(pscom_plugin_tx_pending(con_of(c)));

    /* The whole frame: header, xheader, body. */
    pscom_header_net_t h;
    uint32_t tag;
    assert_int_equal(now_len, sizeof(h) + 4 + 5);
    memcpy(&h, now_frame, sizeof(h));
    memcpy(&tag, now_frame + sizeof(h), 4);
    assert_int_equal(h.msg_type, PSC_MSG_USER);
    assert_int_equal(h.xheader_len, 4);
    assert_int_equal(h.data_len, 5);
    assert_int_equal(tag, 77);
    assert_memory_equal(now_frame + sizeof(h) + 4, "hello", 5);

    /* A frame without a body. */
    pscom_request_t *r0 = send_req(c, 78, NULL, 0);
    assert_true(pscom_req_successful(r0));
    assert_int_equal(now_len, sizeof(h) + 4);
    pscom_request_free(r0);
    pscom_request_free(r);
    close_con(c);
}

static void left_frame_and_those_behind_it_are_queued(void **state)
{
    pscom_connection_t *c = open_on(&plugin_now);
    now_takes = 0;
    pscom_request_t *r1 = send_req(c, 1, "one", 3);
    assert_int_equal(now_calls, 1);
    assert_int_equal(kicks, 1);
    assert_false(pscom_req_is_done(r1));
    assert_true(pscom_plugin_tx_pending(con_of(c)));

    /* Behind a queued frame the plugin is not asked: order. */
    now_takes = 1;
    pscom_request_t *r2 = send_req(c, 2, "two", 3);
    assert_int_equal(now_calls, 1);
    assert_int_equal(kicks, 2);
    assert_false(pscom_req_is_done(r2));

    write_one(c);
    assert_true(pscom_req_successful(r1));
    assert_false(pscom_req_is_done(r2));
    write_one(c);
    assert_true(pscom_req_successful(r2));

    /* The queue is empty again: the next one is taken at once. */
    pscom_request_t *r3 = send_req(c, 3, "three", 5);
    assert_int_equal(now_calls, 2);
    assert_true(pscom_req_successful(r3));
    pscom_request_free(r1);
    pscom_request_free(r2);
    pscom_request_free(r3);
    close_con(c);
}

static void older_plugin_is_not_asked(void **state)
{
    pscom_connection_t *c = open_on(&plugin_1_2);
    pscom_request_t *r = send_req(c, 5, "old", 3);
    assert_int_equal(now_calls, 0);
    assert_int_equal(kicks, 1);
    assert_false(pscom_req_is_done(r));
    write_one(c);
    assert_true(pscom_req_successful(r));
    pscom_request_free(r);
    close_con(c);
}

static void failed_connection_is_not_asked(void **state)
{
    pscom_connection_t *c = open_on(&plugin_now);
    pscom_plugin_con_error(con_of(c), PSCOM_OP_WRITE, PSCOM_ERR_IOERROR,
                           "test", 0);
    assert_null(con_of(c)->tx_now);
    pscom_request_t *r = send_req(c, 6, "late", 4);
    assert_true(pscom_req_is_done(r));
    assert_false(pscom_req_successful(r));
    assert_int_equal(now_calls, 0);
    pscom_request_free(r);
    close_con(c);
}

/* A peek that has no room left for a frame does not hand it out: that
 * frame can still be cancelled; the one handed out cannot. */
static void frame_not_handed_out_stays_cancellable(void **state)
{
    pscom_connection_t *c = open_on(&plugin_1_2);
    pscom_request_t *r1 = send_req(c, 1, "one", 3);
    pscom_request_t *r2 = send_req(c, 2, "two", 3);
    struct iovec iov[2];
    size_t total;
    assert_int_equal(pscom_plugin_tx_peek(con_of(c), iov, 2, &total), 2);
    assert_int_equal(total, sizeof(pscom_header_net_t) + 4 + 3);
    assert_true(r1->state & PSCOM_REQ_STATE_IO_STARTED);
    assert_false(r2->state & PSCOM_REQ_STATE_IO_STARTED);
    assert_int_equal(pscom_cancel_send(r1), 0);
    assert_int_equal(pscom_cancel_send(r2), 1);
    assert_true(r2->state & PSCOM_REQ_STATE_CANCELED);
    write_one(c);
    assert_true(pscom_req_successful(r1));
    assert_false(pscom_plugin_tx_pending(con_of(c)));
    pscom_request_free(r1);
    pscom_request_free(r2);
    close_con(c);
}

/* A queued rendezvous send can be cancelled unless a plugin has taken its
 * buffer (rndv_describe): the plugin cannot give it back, and the
 * application would free what the transport may still read. */
static void described_rendezvous_is_not_cancelled(void **state)
{
    static char big[64];
    struct psc_plugin *plugins[] = {&plugin_1_2, &plugin_rndv};
    for (int i = 0; i < 2; i++) {
        kick_writes = 0; /* the announcement stays queued */
        pscom_connection_t *c = open_on(plugins[i]);
        con_of(c)->rndv_threshold = 16;
        describes = 0;
        pscom_request_t *r = send_req(c, 1, big, sizeof(big));
        assert_true(r->state & PSCOM_REQ_STATE_RENDEZVOUS_REQUEST);
        assert_false(r->state & PSCOM_REQ_STATE_IO_STARTED);
        assert_int_equal(describes, i);
        assert_int_equal(pscom_cancel_send(r), i ? 0 : 1);
        if (i) {
            /* It ends with its connection. */
            pscom_plugin_con_error(con_of(c), PSCOM_OP_WRITE,
                                   PSCOM_ERR_IOERROR, "test", 0);
            close_con(c);
            assert_true(pscom_req_is_done(r));
            assert_false(pscom_req_successful(r));
            /* Posted again where nothing describes it: cancellable. */
            kick_writes = 0;
            c = open_on(&plugin_1_2);
            r->connection = c;
            pscom_post_send(r);
            assert_int_equal(pscom_cancel_send(r), 1);
            close_con(c);
        } else {
            assert_true(r->state & PSCOM_REQ_STATE_CANCELED);
            close_con(c);
        }
        pscom_request_free(r);
    }
}

/* A frame the plugin lends in its close() is not ended with the other
 * sends of the failed connection: its request stays undone (the
 * application must not write the buffer) until the plugin returns it. */
static void lent_frame_ends_when_returned(void **state)
{
    pscom_connection_t *c = open_on(&plugin_lend);
    pscom_request_t *r1 = send_req(c, 1, "one", 3);
    pscom_request_t *r2 = send_req(c, 2, "two", 3);
    lent_token = NULL;
    pscom_plugin_con_error(con_of(c), PSCOM_OP_WRITE, PSCOM_ERR_IOERROR,
                           "test", 0);
    close_con(c);
    assert_non_null(lent_token);
    assert_false(pscom_req_is_done(r1));
    assert_int_equal(pscom_cancel_send(r1), 0);
    assert_true(pscom_req_is_done(r2));
    assert_false(pscom_req_successful(r2));
    pscom_plugin_tx_returned(lent_token);
    assert_true(pscom_req_is_done(r1));
    assert_false(pscom_req_successful(r1));
    /* A head no frame has: nothing to lend. */
    c = open_on(&plugin_lend);
    assert_null(pscom_plugin_tx_lend(con_of(c), "no such head"));
    close_con(c);
    pscom_request_free(r1);
    pscom_request_free(r2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(taken_frame_is_done_at_once, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            left_frame_and_those_behind_it_are_queued, setup, teardown),
        cmocka_unit_test_setup_teardown(older_plugin_is_not_asked, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(frame_not_handed_out_stays_cancellable,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(described_rendezvous_is_not_cancelled,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(lent_frame_ends_when_returned, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(failed_connection_is_not_asked, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
