/*
 * Receive matching: posting order across per-connection and any-source
 * receives, recv_accept selection, unexpected messages received later,
 * partially arrived messages, probe, cancel, truncation, default_recv, and
 * whole messages read in place against the general path.
 *
 * Messages are fed into connections with no transport through the plugin
 * receive upcall, so the real receive path runs without a network.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "frames.h"

static pscom_socket_t *sock;
static pscom_connection_t *con_a, *con_b;

static int setup(void **state)
{
    assert_int_equal(pscom_init(PSCOM_VERSION), PSCOM_SUCCESS);
    sock = pscom_open_socket(0, 0, 0, 0);
    con_a = pscom_open_connection(sock);
    con_b = pscom_open_connection(sock);
    assert_non_null(sock);
    assert_non_null(con_a);
    assert_non_null(con_b);
    return 0;
}

static int teardown(void **state)
{
    pscom_close_socket(sock);
    return 0;
}

static int accept_tag_value;
static unsigned accept_tag_calls;

static int accept_tag(pscom_request_t *r, pscom_connection_t *c,
                      pscom_header_net_t *h)
{
    uint32_t tag;
    accept_tag_calls++;
    memcpy(&tag, h->xheader, sizeof(tag));
    return h->xheader_len >= 4 && tag == (uint32_t)accept_tag_value;
}

/* A receive on c (NULL: any source on sock) with a 4-byte xheader, taking
 * what `accept` (NULL: anything) accepts. */
static pscom_request_t *
recv_req_accepting(pscom_connection_t *c, void *buf, size_t len,
                   int (*accept)(pscom_request_t *, pscom_connection_t *,
                                 pscom_header_net_t *))
{
    pscom_request_t *r = pscom_request_create(4, 0);
    r->connection = c;
    r->socket = c ? NULL : sock;
    r->data = buf;
    r->data_len = len;
    r->xheader_len = 4;
    r->ops.recv_accept = accept;
    pscom_post_recv(r);
    return r;
}

static pscom_request_t *recv_req(pscom_connection_t *c, void *buf, size_t len)
{
    return recv_req_accepting(c, buf, len, NULL);
}

static uint32_t tag_of(pscom_request_t *r)
{
    uint32_t t;
    memcpy(&t, &r->xheader, 4);
    return t;
}

static void per_con_before_any(void **state)
{
    char b1[8], b2[8];
    pscom_request_t *r1 = recv_req(con_a, b1, sizeof(b1));
    pscom_request_t *r2 = recv_req(NULL, b2, sizeof(b2));
    struct frame f;

    frame_user(&f, 1, "first", 6);
    assert_int_equal(feed(con_a, &f), 0);
    assert_true(pscom_req_successful(r1));
    assert_false(pscom_req_is_done(r2));
    assert_string_equal(b1, "first");

    frame_user(&f, 2, "second", 7);
    feed(con_a, &f);
    assert_true(pscom_req_successful(r2));
    assert_string_equal(b2, "second");
    assert_ptr_equal(r2->connection, con_a);
    assert_int_equal(tag_of(r2), 2);
    pscom_request_free(r1);
    pscom_request_free(r2);
}

static void any_before_per_con(void **state)
{
    char b1[8], b2[8];
    pscom_request_t *r1 = recv_req(NULL, b1, sizeof(b1));
    pscom_request_t *r2 = recv_req(con_a, b2, sizeof(b2));
    struct frame f;

    frame_user(&f, 1, "one", 4);
    feed(con_a, &f);
    assert_true(pscom_req_successful(r1));
    assert_false(pscom_req_is_done(r2));
    assert_ptr_equal(r1->connection, con_a);

    /* A message from B may not go to the receive posted on A. */
    frame_user(&f, 2, "two", 4);
    feed(con_b, &f);
    assert_false(pscom_req_is_done(r2));
    frame_user(&f, 3, "three", 6);
    feed(con_a, &f);
    assert_true(pscom_req_successful(r2));
    assert_string_equal(b2, "three");

    /* The message from B waits as unexpected for an any-source receive. */
    pscom_request_t *r3 = recv_req(NULL, b1, sizeof(b1));
    assert_true(pscom_req_successful(r3));
    assert_ptr_equal(r3->connection, con_b);
    assert_string_equal(b1, "two");
    pscom_request_free(r1);
    pscom_request_free(r2);
    pscom_request_free(r3);
}

static void recv_accept_selects(void **state)
{
    char b[8];
    accept_tag_value = 5;
    pscom_request_t *r = recv_req_accepting(con_a, b, sizeof(b), accept_tag);

    struct frame f;
    frame_user(&f, 3, "tag3", 5);
    feed(con_a, &f);
    assert_false(pscom_req_is_done(r));
    frame_user(&f, 5, "tag5", 5);
    feed(con_a, &f);
    assert_true(pscom_req_successful(r));
    assert_string_equal(b, "tag5");

    /* tag 3 is still there, unexpected */
    pscom_request_t *r3 = recv_req(con_a, b, sizeof(b));
    assert_true(pscom_req_successful(r3));
    assert_int_equal(tag_of(r3), 3);
    pscom_request_free(r);
    pscom_request_free(r3);
}

/* The first receive posted on a connection refuses the message
 * (recv_accept): a later one on the same connection takes it, and the
 * first is asked once and stays posted for the next. */
static void refused_by_the_first_taken_by_a_later(void **state)
{
    char b1[8], b2[8];
    accept_tag_value = 5;
    pscom_request_t *r1 =
        recv_req_accepting(con_a, b1, sizeof(b1), accept_tag);
    pscom_request_t *r2 = recv_req(con_a, b2, sizeof(b2));
    assert_false(pscom_req_is_done(r1));
    assert_false(pscom_req_is_done(r2));

    struct frame f;
    accept_tag_calls = 0;
    frame_user(&f, 3, "tag3", 5);
    feed(con_a, &f);
    assert_true(pscom_req_successful(r2));
    assert_string_equal(b2, "tag3");
    assert_false(pscom_req_is_done(r1));
    assert_int_equal(accept_tag_calls, 1);

    frame_user(&f, 5, "tag5", 5);
    feed(con_a, &f);
    assert_true(pscom_req_successful(r1));
    assert_string_equal(b1, "tag5");
    pscom_request_free(r1);
    pscom_request_free(r2);
}

static void unexpected_in_order_and_probe(void **state)
{
    struct frame f;
    for (uint32_t i = 0; i < 3; i++) {
        char msg[16];
        snprintf(msg, sizeof(msg), "msg%u", i);
        frame_user(&f, 10 + i, msg, strlen(msg) + 1);
        feed(con_b, &f);
    }

    pscom_request_t *p = pscom_request_create(4, 0);
    p->connection = con_b;
    p->xheader_len = 4;
    assert_int_equal(pscom_iprobe(p), 1);
    assert_int_equal(tag_of(p), 10);
    assert_int_equal(p->header.data_len, 5);
    /* Probing does not consume. */
    assert_int_equal(pscom_iprobe(p), 1);
    assert_int_equal(tag_of(p), 10);

    char b[16];
    for (uint32_t i = 0; i < 3; i++) {
        pscom_request_t *r = recv_req(con_b, b, sizeof(b));
        assert_true(pscom_req_successful(r));
        assert_int_equal(tag_of(r), 10 + i);
        assert_true(r->state & PSCOM_REQ_STATE_GRECV_MERGED);
        pscom_request_free(r);
    }
    p->connection = con_b;
    assert_int_equal(pscom_iprobe(p), 0);
    pscom_request_free(p);
}

static void partial_message_merged(void **state)
{
    static char big[20000], out[20000];
    for (size_t i = 0; i < sizeof(big); i++) big[i] = (char)(i * 7 + 1);
    struct frame f;
    frame_user(&f, 42, big, sizeof(big));

    /* Header and a third of the body arrive before the receive is posted. */
    size_t first = 8 + 4 + sizeof(big) / 3;
    assert_int_equal(pscom_plugin_rx_push(con_of(con_a), f.buf, first), 0);
    pscom_request_t *r = recv_req(con_a, out, sizeof(out));
    assert_false(pscom_req_is_done(r));
    assert_int_equal(pscom_plugin_rx_push(con_of(con_a), f.buf + first,
                                          f.len - first), 0);
    assert_true(pscom_req_successful(r));
    assert_memory_equal(out, big, sizeof(big));
    pscom_request_free(r);
}

static void cancel_unmatched(void **state)
{
    char b[8];
    pscom_request_t *r = recv_req(con_a, b, sizeof(b));
    assert_int_equal(pscom_cancel(r), 1);
    assert_true(r->state & PSCOM_REQ_STATE_CANCELED);
    assert_true(pscom_req_is_done(r));
    assert_false(pscom_req_successful(r));
    /* Cancelled receives get nothing; the message becomes unexpected. */
    struct frame f;
    frame_user(&f, 7, "x", 2);
    feed(con_a, &f);
    assert_int_equal(pscom_cancel(r), 0);
    pscom_request_t *r2 = recv_req(con_a, b, sizeof(b));
    assert_true(pscom_req_successful(r2));
    pscom_request_free(r);
    pscom_request_free(r2);
}

/* Unexpected messages stay receivable while their connection is only
 * failed; closing it drops them: an any-source receive posted after the
 * close must neither take them nor look at the freed connection. */
static void unexpected_of_closed_connection(void **state)
{
    char b[8];
    struct frame f;
    pscom_connection_t *c = pscom_open_connection(sock);
    frame_user(&f, 1, "kept", 5);
    assert_int_equal(feed(c, &f), 0);
    frame_user(&f, 2, "lost", 5);
    assert_int_equal(feed(c, &f), 0);
    assert_int_equal(pscom_fail_connection(c, PSCOM_ERR_EOF), PSCOM_SUCCESS);
    pscom_request_t *r = recv_req(NULL, b, sizeof(b));
    assert_true(pscom_req_successful(r));
    assert_ptr_equal(r->connection, c);
    assert_string_equal(b, "kept");
    pscom_request_free(r);

    pscom_close_connection(c);
    assert_true(psc_list_empty(&sock_of(sock)->genrecvq_any));
    r = recv_req(NULL, b, sizeof(b));
    assert_false(pscom_req_is_done(r));
    /* Nor does a message of another connection come after the dropped. */
    frame_user(&f, 3, "next", 5);
    assert_int_equal(feed(con_b, &f), 0);
    assert_true(pscom_req_successful(r));
    assert_ptr_equal(r->connection, con_b);
    assert_string_equal(b, "next");
    pscom_request_free(r);
}

static void truncation_keeps_stream(void **state)
{
    char small[10], next[32];
    static char body[100];
    memset(body, 'z', sizeof(body));
    pscom_request_t *r = recv_req(con_a, small, sizeof(small));
    pscom_request_t *r2 = recv_req(con_a, next, sizeof(next));
    struct frame f;
    frame_user(&f, 1, body, sizeof(body));
    feed(con_a, &f);
    frame_user(&f, 2, "after", 6);
    feed(con_a, &f);
    assert_true(r->state & PSCOM_REQ_STATE_TRUNCATED);
    assert_false(pscom_req_successful(r));
    assert_int_equal(r->header.data_len, 100);
    assert_memory_equal(small, body, sizeof(small));
    assert_true(pscom_req_successful(r2));
    assert_string_equal(next, "after");
    pscom_request_free(r);
    pscom_request_free(r2);
}

/* A whole user message pushed at once from an aligned buffer is read in
 * place, without the header buffer; pushed from an unaligned buffer or in
 * pieces it takes the general path. The receives end the same either way. */
enum push_how { WHOLE, UNALIGNED, BYTEWISE };

struct outcome {
    pscom_req_state_t state;
    uint64_t data_len;
    uint32_t tag;
    size_t received; /* body bytes the receive counted (kept or dropped) */
    char data[16];
};

static void push_as(pscom_connection_t *c, const struct frame *f,
                    enum push_how how)
{
    static uint64_t spare[(sizeof(f->buf) + 16) / 8];
    uint8_t *odd = (uint8_t *)spare + 1;
    switch (how) {
    case WHOLE:
        assert_int_equal(feed(c, f), 0);
        break;
    case UNALIGNED:
        memcpy(odd, f->buf, f->len);
        assert_int_equal(pscom_plugin_rx_push(con_of(c), odd, f->len), 0);
        break;
    case BYTEWISE:
        for (size_t i = 0; i < f->len; i++)
            assert_int_equal(pscom_plugin_rx_push(con_of(c), f->buf + i, 1), 0);
        break;
    }
}

static void receive_as(enum push_how how, size_t rlen, size_t mlen,
                       bool posted, struct outcome *o)
{
    static char body[40];
    for (size_t i = 0; i < sizeof(body); i++) body[i] = (char)('a' + i);
    pscom_connection_t *c = pscom_open_connection(sock);
    pscom_request_t *r = NULL;
    memset(o, 0, sizeof(*o));
    if (posted) r = recv_req(c, o->data, rlen);
    struct frame f;
    frame_user(&f, 11, body, mlen);
    uint8_t *hb = con_of(c)->rx.hinline;
    memset(hb, 0xa5, PSC_HDR_LEN);
    push_as(c, &f, how);
    /* The header went through the header buffer unless read in place. */
    bool untouched = true;
    for (size_t i = 0; i < PSC_HDR_LEN; i++) untouched &= hb[i] == 0xa5;
    assert_int_equal(untouched, how == WHOLE);
    if (!posted) r = recv_req(c, o->data, rlen);
    assert_true(pscom_req_is_done(r));
    o->state = r->state;
    o->data_len = r->header.data_len;
    o->tag = tag_of(r);
    o->received = req_of(r)->received;
    assert_memory_equal(o->data, body, mlen < rlen ? mlen : rlen);
    assert_int_equal(!!(o->state & PSCOM_REQ_STATE_TRUNCATED), mlen > rlen);
    pscom_request_free(r);

    /* The connection expects the next message, whichever way it comes. */
    char next[8];
    r = recv_req(c, next, sizeof(next));
    frame_user(&f, 12, "next", 5);
    push_as(c, &f, BYTEWISE);
    assert_true(pscom_req_successful(r));
    assert_string_equal(next, "next");
    pscom_request_free(r);
    pscom_close_connection(c);
}

static void whole_message_read_in_place(void **state)
{
    static const struct {
        size_t rlen, mlen;
        bool posted;
    } cases[] = {
        {16, 5, true},  {16, 16, true},  {4, 20, true}, {16, 0, true},
        {16, 5, false}, {4, 20, false}, {16, 0, false},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        struct outcome whole, odd, bytes;
        receive_as(WHOLE, cases[k].rlen, cases[k].mlen, cases[k].posted, &whole);
        receive_as(UNALIGNED, cases[k].rlen, cases[k].mlen, cases[k].posted,
                   &odd);
        receive_as(BYTEWISE, cases[k].rlen, cases[k].mlen, cases[k].posted,
                   &bytes);
        assert_int_equal(whole.tag, 11);
        assert_int_equal(whole.data_len, cases[k].mlen);
        assert_memory_equal(&whole, &odd, sizeof(whole));
        assert_memory_equal(&whole, &bytes, sizeof(whole));
    }
}

static pscom_request_t *default_req;
static char default_buf[16];

static pscom_request_t *take_tag9(pscom_connection_t *c, pscom_header_net_t *h)
{
    uint32_t tag;
    memcpy(&tag, h->xheader, 4);
    if (tag != 9) return NULL;
    default_req->data = default_buf;
    default_req->data_len = sizeof(default_buf);
    default_req->xheader_len = 4;
    return default_req;
}

static void default_recv_first(void **state)
{
    char b[16];
    default_req = pscom_request_create(4, 0);
    sock->ops.default_recv = take_tag9;
    pscom_request_t *r = recv_req(con_a, b, sizeof(b));
    struct frame f;
    frame_user(&f, 9, "nine", 5);
    feed(con_a, &f);
    /* default_recv is asked before posted receives. */
    assert_true(pscom_req_successful(default_req));
    assert_string_equal(default_buf, "nine");
    assert_false(pscom_req_is_done(r));
    frame_user(&f, 1, "one", 4);
    feed(con_a, &f);
    assert_true(pscom_req_successful(r));
    sock->ops.default_recv = NULL;
    pscom_request_free(r);
    pscom_request_free(default_req);
}

static void rendezvous_unexpected_sends_cts(void **state)
{
    struct {
        uint32_t tag;
        struct psc_rndv_info info;
    } __attribute__((packed)) x = {.tag = 77,
                                   .info = {.sender_id = 5, .data_len = 300}};
    struct frame f;
    frame_make(&f, PSC_MSG_RNDV_REQ, &x, sizeof(x), NULL, 0, 0);
    feed(con_b, &f);
    struct psc_con *cb = con_of(con_b);
    assert_true(psc_list_empty(&cb->sendq));

    static char out[300];
    pscom_request_t *r = recv_req(con_b, out, sizeof(out));
    assert_false(pscom_req_is_done(r));
    assert_int_equal(r->header.data_len, 300);
    assert_int_equal(tag_of(r), 77);
    /* The receive is matched: a clear-to-send is queued for the sender. */
    struct psc_req *cts = psc_list_first(&cb->sendq, struct psc_req, next);
    assert_non_null(cts);
    const pscom_header_net_t *h = (const pscom_header_net_t *)cts->ctrl;
    assert_int_equal(h->msg_type, PSC_MSG_RNDV_CTS);
    struct psc_rndv_cts c;
    memcpy(&c, cts->ctrl + 8, sizeof(c));
    assert_int_equal(c.sender_id, 5);

    /* The data for that receive id completes it. */
    static char body[300];
    memset(body, 'r', sizeof(body));
    struct psc_rndv_data_hdr dh = {.receiver_id = c.receiver_id};
    frame_make(&f, PSC_MSG_RNDV_DATA, &dh, sizeof(dh), body, 300, 300);
    assert_int_equal(feed(con_b, &f), 0);
    assert_true(pscom_req_successful(r));
    assert_memory_equal(out, body, 300);
    pscom_request_free(r);
}

/* ---------------------------------------------------------------------- */
/* A body arriving when the connection fails, on an asynchronous plugin:   */
/* the plugin may write into the buffer until its close(), so the request  */
/* ends (and an unexpected message's buffer is freed) only then.           */

static int closes;

static void fake_close(pscom_plugin_con_t *c, void *priv)
{
    (void)c;
    (void)priv;
    closes++;
}

static const pscom_plugin_ops_t fake_ops = {.close = fake_close};
static const pscom_plugin_t fake_desc = {.name = "fake", .ops = &fake_ops};
static struct psc_plugin fake_plugin = {.desc = &fake_desc, .name = "fake"};

/* A connection that looks open on an asynchronous plugin. */
static pscom_connection_t *async_con(void)
{
    pscom_connection_t *c = pscom_open_connection(sock);
    struct psc_con *pc = con_of(c);
    pc->plugin = &fake_plugin;
    pc->plugin_open = true;
    fake_plugin.open_cons++;
    closes = 0;
    return c;
}

/* Header and the first `part` bytes of a `len`-byte message tagged 7. */
static void feed_part(pscom_connection_t *c, const char *data, size_t len,
                      size_t part)
{
    struct frame f;
    frame_user(&f, 7, data, len);
    f.len -= len - part;
    assert_int_equal(feed(c, &f), 0);
}

static void body_fails_after_plugin_close(void **state)
{
    static char sent[1000], got[1000];
    pscom_connection_t *c = async_con();
    pscom_request_t *r = recv_req(c, got, sizeof(got));
    void *dst;

    memset(sent, 'x', sizeof(sent));
    feed_part(c, sent, sizeof(sent), 100);
    assert_int_equal(pscom_plugin_rx_direct(con_of(c), &dst), 900);
    assert_ptr_equal(dst, got + 100);

    pscom_plugin_con_error(con_of(c), PSCOM_OP_READ, PSCOM_ERR_IOERROR,
                           "test", 0);
    assert_false(pscom_req_is_done(r)); /* the plugin may still write */
    assert_int_equal(closes, 0);

    pscom_test_any(); /* the end of a progress round closes the plugin */
    assert_int_equal(closes, 1);
    assert_true(pscom_req_is_done(r));
    assert_true(r->state & PSCOM_REQ_STATE_ERROR);
    pscom_request_free(r);
    pscom_close_connection(c);
}

static void merged_body_fails_after_plugin_close(void **state)
{
    static char sent[1000], got[1000];
    pscom_connection_t *c = async_con();
    pscom_request_t *r;
    void *dst;

    memset(sent, 'y', sizeof(sent));
    feed_part(c, sent, sizeof(sent), 100); /* unexpected, still arriving */
    assert_int_equal(pscom_plugin_rx_direct(con_of(c), &dst), 900);
    r = recv_req(c, got, sizeof(got)); /* takes it over */
    assert_false(pscom_req_is_done(r));

    pscom_plugin_con_error(con_of(c), PSCOM_OP_READ, PSCOM_ERR_IOERROR,
                           "test", 0);
    assert_false(pscom_req_is_done(r));
    memset(dst, 'y', 900); /* the plugin's late write: into a live buffer */

    pscom_test_any();
    assert_int_equal(closes, 1);
    assert_true(r->state & PSCOM_REQ_STATE_ERROR);
    pscom_request_free(r);
    pscom_close_connection(c);
}

/* A connection closed from inside the library (a callback: depth > 0)
 * while its plugin was still moving an unexpected body: that message
 * leaves the queues at once, so an any-source receive posted before the
 * plugin is closed does not take it over (and fail with it). */
static void closed_partial_unexpected_not_taken(void **state)
{
    static char sent[1000], got[1000];
    pscom_connection_t *c = async_con();
    void *dst;

    memset(sent, 'z', sizeof(sent));
    feed_part(c, sent, sizeof(sent), 100); /* unexpected, still arriving */
    assert_int_equal(pscom_plugin_rx_direct(con_of(c), &dst), 900);
    pscom_plugin_con_error(con_of(c), PSCOM_OP_READ, PSCOM_ERR_IOERROR,
                           "test", 0);

    psc_enter(); /* as in a callback: the plugin's close waits */
    pscom_close_connection(c);
    pscom_request_t *r = recv_req(NULL, got, sizeof(got));
    assert_false(pscom_req_is_done(r));
    memset(dst, 'z', 900); /* the plugin's late write: into a live buffer */
    psc_leave(); /* the plugin is closed, the message freed */
    assert_int_equal(closes, 1);
    assert_false(pscom_req_is_done(r));
    assert_int_equal(pscom_cancel_recv(r), 1);
    pscom_request_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(per_con_before_any),
        cmocka_unit_test(any_before_per_con),
        cmocka_unit_test(recv_accept_selects),
        cmocka_unit_test(refused_by_the_first_taken_by_a_later),
        cmocka_unit_test(unexpected_in_order_and_probe),
        cmocka_unit_test(partial_message_merged),
        cmocka_unit_test(cancel_unmatched),
        cmocka_unit_test(unexpected_of_closed_connection),
        cmocka_unit_test(closed_partial_unexpected_not_taken),
        cmocka_unit_test(truncation_keeps_stream),
        cmocka_unit_test(whole_message_read_in_place),
        cmocka_unit_test(default_recv_first),
        cmocka_unit_test(rendezvous_unexpected_sends_cts),
        cmocka_unit_test(body_fails_after_plugin_close),
        cmocka_unit_test(merged_body_fails_after_plugin_close),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
