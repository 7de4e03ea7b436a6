/*
 * The rendezvous protocol with an asynchronous transport: bodies taken out
 * of line (pscom_plugin_rx_defer) and finished in any order while later
 * messages go on, which bodies qualify, the peer's end arriving while
 * bodies are still out of line, and a clear-to-send that arrives before the
 * transport reported its announcement written; bodies the plugin pulls
 * (rndv_pull_start) and how the core confirms, refuses or fails them.
 *
 * Frames are fed into connections with no transport through the plugin
 * upcalls, and the send queue is read and completed through
 * pscom_plugin_tx_peek/_done as a plugin would.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "frames.h"

#include "error_socket.h"

static pscom_request_t *recv_req(pscom_connection_t *c, void *buf, size_t len)
{
    pscom_request_t *r = pscom_request_create(4, 0);
    r->connection = c;
    r->socket = sock;
    r->data = buf;
    r->data_len = len;
    r->xheader_len = 4;
    pscom_post_recv(r);
    return r;
}

/* A small message that arrives behind bodies still on their way is
 * received at once: its request, done. */
static pscom_request_t *message_behind_goes_on(pscom_connection_t *c)
{
    static char small[8];
    pscom_request_t *e = recv_req(c, small, sizeof(small));
    struct frame f;
    frame_user(&f, 99, "later", 6);
    assert_int_equal(feed(c, &f), 0);
    assert_true(pscom_req_successful(e));
    return e;
}

/* The peer announces a rendezvous message of len bytes. */
static void feed_rndv_req(pscom_connection_t *c, uint32_t tag, uint64_t id,
                          uint64_t len)
{
    struct {
        uint32_t tag;
        struct psc_rndv_info info;
    } __attribute__((packed)) x = {.tag = tag,
                                   .info = {.sender_id = id, .data_len = len}};
    struct frame f;
    frame_make(&f, PSC_MSG_RNDV_REQ, &x, sizeof(x), NULL, 0, 0);
    assert_int_equal(feed(c, &f), 0);
}

/* The receiver id of the clear-to-send for sender_id in c's send queue. */
static uint64_t cts_for(pscom_connection_t *c, uint64_t sender_id)
{
    struct psc_list *pos;
    psc_list_for_each(pos, &con_of(c)->sendq) {
        struct psc_req *q = psc_list_entry(pos, struct psc_req, next);
        const pscom_header_net_t *h = (const pscom_header_net_t *)q->ctrl;
        struct psc_rndv_cts cts;
        if (q->kind != PSC_REQ_CONTROL || h->msg_type != PSC_MSG_RNDV_CTS)
            continue;
        memcpy(&cts, q->ctrl + PSC_HDR_LEN, sizeof(cts));
        if (cts.sender_id == sender_id) return cts.receiver_id;
    }
    fail_msg("no clear-to-send for sender id %llu",
             (unsigned long long)sender_id);
    return 0;
}

/* The head of a RNDV_DATA message; its body follows separately. */
static void feed_data_head(pscom_connection_t *c, uint64_t receiver_id,
                           uint64_t len)
{
    struct psc_rndv_data_hdr dh = {.receiver_id = receiver_id};
    struct frame f;
    frame_make(&f, PSC_MSG_RNDV_DATA, &dh, sizeof(dh), NULL, len, 0);
    assert_int_equal(feed(c, &f), 0);
}

static void bodies_out_of_line_in_any_order(void **state)
{
    pscom_connection_t *c = fresh();
    static char out[3][300], body[3][300];
    pscom_request_t *r[3];
    void *h[3];

    for (int i = 0; i < 3; i++) {
        memset(body[i], 'a' + i, sizeof(body[i]));
        r[i] = recv_req(c, out[i], sizeof(out[i]));
        feed_rndv_req(c, 10 + i, 100 + i, 300);
    }
    for (int i = 0; i < 3; i++) {
        void *buf;
        size_t len;
        feed_data_head(c, cts_for(c, 100 + i), 300);
        h[i] = pscom_plugin_rx_defer(con_of(c), &buf, &len);
        assert_non_null(h[i]);
        assert_ptr_equal(buf, out[i]);
        assert_int_equal(len, 300);
        /* Taking it twice is not possible: the core expects the next
         * message. */
        assert_null(pscom_plugin_rx_defer(con_of(c), &buf, &len));
    }
    pscom_request_t *e = message_behind_goes_on(c);
    for (int i = 0; i < 3; i++) assert_false(pscom_req_is_done(r[i]));

    /* The transport finishes them out of order. */
    memcpy(out[1], body[1], 300);
    assert_int_equal(pscom_plugin_rx_defer_done(con_of(c), h[1], 0), 0);
    assert_true(pscom_req_successful(r[1]));
    assert_false(pscom_req_is_done(r[0]));
    memcpy(out[2], body[2], 300);
    assert_int_equal(pscom_plugin_rx_defer_done(con_of(c), h[2], 0), 0);
    assert_int_equal(pscom_plugin_rx_defer_done(con_of(c), h[0], -EIO), 0);
    assert_true(r[0]->state & PSCOM_REQ_STATE_ERROR);
    assert_true(pscom_req_successful(r[2]));
    assert_int_equal(r[2]->header.data_len, 300);
    assert_memory_equal(out[2], body[2], 300);
    assert_int_equal(errors, 0);
    for (int i = 0; i < 3; i++) pscom_request_free(r[i]);
    pscom_request_free(e);
    pscom_close_connection(c);
}

static void only_whole_bodies_of_matched_receives(void **state)
{
    pscom_connection_t *c = fresh();
    static char out[300], small_out[100], body[300];
    void *buf;
    size_t len;

    /* An eager message: its receive may be the core's own buffer. */
    char eo[300];
    pscom_request_t *e = recv_req(c, eo, sizeof(eo));
    struct frame f;
    frame_make(&f, PSC_MSG_USER, "tag!", 4, body, 300, 0);
    assert_int_equal(feed(c, &f), 0);
    assert_null(pscom_plugin_rx_defer(con_of(c), &buf, &len));
    assert_int_equal(pscom_plugin_rx_push(con_of(c), body, 300), 0);
    assert_true(pscom_req_successful(e));

    /* A truncated rendezvous body. */
    pscom_request_t *t = recv_req(c, small_out, sizeof(small_out));
    feed_rndv_req(c, 1, 7, 300);
    feed_data_head(c, cts_for(c, 7), 300);
    assert_null(pscom_plugin_rx_defer(con_of(c), &buf, &len));
    assert_int_equal(pscom_plugin_rx_push(con_of(c), body, 300), 0);
    assert_true(t->state & PSCOM_REQ_STATE_TRUNCATED);

    /* A body of which some bytes were delivered already. */
    pscom_request_t *p = recv_req(c, out, sizeof(out));
    feed_rndv_req(c, 2, 8, 300);
    feed_data_head(c, cts_for(c, 8), 300);
    assert_int_equal(pscom_plugin_rx_push(con_of(c), body, 10), 0);
    assert_null(pscom_plugin_rx_defer(con_of(c), &buf, &len));
    assert_int_equal(pscom_plugin_rx_push(con_of(c), body + 10, 290), 0);
    assert_true(pscom_req_successful(p));
    pscom_request_free(e);
    pscom_request_free(t);
    pscom_request_free(p);
    pscom_close_connection(c);
}

/* The peer's EOF comes while a body it sent before is still out of line:
 * the connection ends only after that body. Nothing may follow the EOF. */
static void eof_waits_for_bodies_out_of_line(void **state)
{
    pscom_connection_t *c = fresh();
    static char out[300];
    void *buf;
    size_t len;
    pscom_request_t *r = recv_req(c, out, sizeof(out));
    feed_rndv_req(c, 1, 5, 300);
    feed_data_head(c, cts_for(c, 5), 300);
    void *h = pscom_plugin_rx_defer(con_of(c), &buf, &len);
    assert_non_null(h);

    struct frame f;
    frame_make(&f, PSC_MSG_EOF, NULL, 0, NULL, 0, 0);
    assert_int_equal(feed(c, &f), 0);
    assert_int_equal(errors, 0);
    assert_false(pscom_req_is_done(r));

    assert_int_equal(pscom_plugin_rx_defer_done(con_of(c), h, 0), -1);
    assert_true(pscom_req_successful(r));
    assert_int_equal(errors, 1);
    assert_int_equal(last_err, PSCOM_ERR_EOF);
    pscom_request_free(r);
    pscom_close_connection(c);

    c = fresh();
    r = recv_req(c, out, sizeof(out));
    feed_rndv_req(c, 1, 6, 300);
    feed_data_head(c, cts_for(c, 6), 300);
    h = pscom_plugin_rx_defer(con_of(c), &buf, &len);
    assert_int_equal(feed(c, &f), 0);
    frame_user(&f, 3, "after", 6);
    assert_int_equal(feed(c, &f), -1);
    assert_int_equal(errors, 1);
    assert_int_equal(last_err, PSCOM_ERR_IOERROR);
    pscom_request_free(r);
    pscom_close_connection(c);
}

/* A message plugin reports frames written in queue order, so the answer to
 * an announcement can come before the announcement is reported written
 * (it was sent behind a large body that is still moving). */
static void clear_to_send_before_the_announcement_was_reported(void **state)
{
    pscom_connection_t *c = fresh();
    struct psc_con *pc = con_of(c);
    static char data[500];
    pc->rndv_threshold = 100;

    pscom_request_t *s = pscom_request_create(4, 0);
    pscom_req_prepare(s, c, data, sizeof(data), "tag!", 4);
    pscom_post_send(s);
    struct iovec iov[4];
    size_t total;
    assert_int_equal(pscom_plugin_tx_peek(pc, iov, 4, &total), 1);
    pscom_header_net_t h;
    memcpy(&h, iov[0].iov_base, sizeof(h));
    assert_int_equal(h.msg_type, PSC_MSG_RNDV_REQ);
    struct psc_rndv_info info;
    memcpy(&info, (char *)iov[0].iov_base + total - sizeof(info),
           sizeof(info));

    /* The answer arrives: the body is sent once the announcement is
     * reported written. */
    struct psc_rndv_cts cts = {.sender_id = info.sender_id, .receiver_id = 42};
    struct frame f;
    frame_make(&f, PSC_MSG_RNDV_CTS, &cts, sizeof(cts), NULL, 0, 0);
    assert_int_equal(feed(c, &f), 0);
    assert_int_equal(errors, 0);
    assert_int_equal(pscom_plugin_tx_done(pc, total), 0);
    assert_int_equal(pscom_plugin_tx_peek(pc, iov, 4, &total), 2);
    memcpy(&h, iov[0].iov_base, sizeof(h));
    assert_int_equal(h.msg_type, PSC_MSG_RNDV_DATA);
    struct psc_rndv_data_hdr dh;
    memcpy(&dh, (char *)iov[0].iov_base + sizeof(h), sizeof(dh));
    assert_int_equal(dh.receiver_id, 42);
    assert_ptr_equal(iov[1].iov_base, data);
    assert_int_equal(pscom_plugin_tx_done(pc, total), 0);
    assert_true(pscom_req_successful(s));

    /* An answer for an announcement never sent is still refused. */
    cts.sender_id += 1000;
    frame_make(&f, PSC_MSG_RNDV_CTS, &cts, sizeof(cts), NULL, 0, 0);
    assert_int_equal(feed(c, &f), -1);
    assert_int_equal(errors, 1);
    assert_int_equal(last_err, PSCOM_ERR_IOERROR);
    pscom_request_free(s);
    pscom_close_connection(c);
}

/* ---------------------------------------------------------------------- */
/* Pulled rendezvous (rndv_pull_start, plugin interface 1.5): the plugin   */
/* moves the body out of line once a receive matched the announcement; the */
/* core confirms to the sender (FIN) when the plugin says it is in.        */

static struct {
    int calls, result;
    uint8_t blob[16];
    size_t blob_len;
    void *dst;
    size_t len;
    void *handle;
} pull;

static int pull_start(pscom_plugin_con_t *con, void *priv, const void *blob,
                      size_t blob_len, void *dst, size_t len, void *handle)
{
    (void)con;
    (void)priv;
    pull.calls++;
    assert_true(blob_len <= sizeof(pull.blob));
    memcpy(pull.blob, blob, blob_len);
    pull.blob_len = blob_len;
    pull.dst = dst;
    pull.len = len;
    pull.handle = handle;
    return pull.result;
}

/* Control frames sent, as the plugin saw them: type and the first 16
 * bytes of the xheader (sender's id, receiver's id). */
static struct {
    uint8_t type;
    uint64_t ids[2];
} sent[16];
static int nsent;

/* Writes every queued frame at once, recording the control frames. */
static void pull_tx_kick(pscom_plugin_con_t *c, void *priv)
{
    (void)priv;
    struct iovec iov[8];
    size_t total;
    int n;
    while ((n = pscom_plugin_tx_peek(c, iov, 8, &total)) > 0) {
        pscom_header_net_t h;
        memcpy(&h, iov[0].iov_base, sizeof(h));
        if (h.msg_type != PSC_MSG_USER && nsent < 16) {
            sent[nsent].type = h.msg_type;
            memset(sent[nsent].ids, 0, sizeof(sent[nsent].ids));
            size_t x = h.xheader_len < 16 ? h.xheader_len : 16;
            memcpy(sent[nsent].ids, (char *)iov[0].iov_base + sizeof(h), x);
            nsent++;
        }
        pscom_plugin_tx_done(c, total);
    }
}

static void pull_close(pscom_plugin_con_t *c, void *priv)
{
    (void)c;
    (void)priv;
}

static const pscom_plugin_ops_t pull_ops = {
    .tx_kick = pull_tx_kick, .close = pull_close, .rndv_pull_start = pull_start};
static const pscom_plugin_t pull_desc = {
    .api_version = PSCOM_PLUGIN_API_VERSION, .name = "puller", .ops = &pull_ops};
/* The same operations in a descriptor of interface 1.4, which had none. */
static const pscom_plugin_t old_desc = {
    .api_version = 0x0104, .name = "old", .ops = &pull_ops};
static struct psc_plugin pull_plugin = {.desc = &pull_desc, .name = "puller"};
static struct psc_plugin old_plugin = {.desc = &old_desc, .name = "old"};

/* A connection that looks open on plugin p. */
static pscom_connection_t *con_on(struct psc_plugin *p)
{
    pscom_connection_t *c = fresh();
    struct psc_con *pc = con_of(c);
    pc->plugin = p;
    pc->plugin_open = true;
    p->open_cons++;
    memset(&pull, 0, sizeof(pull));
    nsent = 0;
    return c;
}

/* The peer announces len bytes with the plugin's blob "BLOB1234". */
static void feed_rndv_req_blob(pscom_connection_t *c, uint32_t tag,
                               uint64_t id, uint64_t len)
{
    struct {
        uint32_t tag;
        char blob[8];
        struct psc_rndv_info info;
    } __attribute__((packed)) x = {
        .tag = tag,
        .blob = {'B', 'L', 'O', 'B', '1', '2', '3', '4'},
        .info = {.sender_id = id, .data_len = len, .blob_len = 8}};
    struct frame f;
    frame_make(&f, PSC_MSG_RNDV_REQ, &x, sizeof(x), NULL, 0, 0);
    assert_int_equal(feed(c, &f), 0);
}

/* Control frames of this type sent for sender_id (the first id of CTS and
 * FIN); *second: the other id of the last one. */
static int sent_for(uint8_t type, uint64_t sender_id, uint64_t *second)
{
    int n = 0;
    for (int i = 0; i < nsent; i++)
        if (sent[i].type == type && sent[i].ids[0] == sender_id) {
            n++;
            if (second) *second = sent[i].ids[1];
        }
    return n;
}

static void pulled_body_is_confirmed_once_in(void **state)
{
    pscom_connection_t *c = con_on(&pull_plugin);
    static char out[300];
    pscom_request_t *r = recv_req(c, out, sizeof(out));
    feed_rndv_req_blob(c, 1, 21, 300);
    assert_int_equal(pull.calls, 1);
    assert_int_equal(pull.blob_len, 8);
    assert_memory_equal(pull.blob, "BLOB1234", 8);
    assert_ptr_equal(pull.dst, out);
    assert_int_equal(pull.len, 300);
    /* Under way: no answer, no confirmation, the receive waits; the
     * messages behind it go on. */
    assert_int_equal(sent_for(PSC_MSG_RNDV_CTS, 21, NULL), 0);
    assert_int_equal(sent_for(PSC_MSG_RNDV_FIN, 21, NULL), 0);
    assert_false(pscom_req_is_done(r));
    pscom_request_t *e = message_behind_goes_on(c);

    assert_int_equal(pscom_plugin_rx_defer_done(con_of(c), pull.handle, 0), 0);
    assert_true(pscom_req_successful(r));
    assert_int_equal(r->header.data_len, 300);
    assert_int_equal(sent_for(PSC_MSG_RNDV_FIN, 21, NULL), 1);
    assert_int_equal(errors, 0);
    pscom_request_free(r);
    pscom_request_free(e);
    pscom_close_connection(c);
}

static void unexpected_body_is_pulled_when_its_receive_comes(void **state)
{
    pscom_connection_t *c = con_on(&pull_plugin);
    static char out[300];
    feed_rndv_req_blob(c, 1, 22, 300);
    assert_int_equal(pull.calls, 0);
    pscom_request_t *r = recv_req(c, out, sizeof(out));
    assert_int_equal(pull.calls, 1);
    assert_ptr_equal(pull.dst, out);
    assert_false(pscom_req_is_done(r));
    assert_int_equal(pscom_plugin_rx_defer_done(con_of(c), pull.handle, 0), 0);
    assert_true(pscom_req_successful(r));
    assert_int_equal(sent_for(PSC_MSG_RNDV_FIN, 22, NULL), 1);
    pscom_request_free(r);
    pscom_close_connection(c);
}

/* A truncating receive is offered its part; a plugin that refuses leaves
 * the body to the core's rendezvous (clear-to-send), as does a plugin of
 * an older interface, whatever its descriptor holds beyond it. */
static void refused_pull_takes_the_core_s_way(void **state)
{
    pscom_connection_t *c = con_on(&pull_plugin);
    static char out[100];
    pull.result = -EMSGSIZE;
    pscom_request_t *r = recv_req(c, out, sizeof(out));
    feed_rndv_req_blob(c, 1, 23, 300);
    assert_int_equal(pull.calls, 1);
    assert_int_equal(pull.len, 100);
    assert_true(psc_list_empty(&con_of(c)->rx_deferq));
    uint64_t rid = 0;
    assert_int_equal(sent_for(PSC_MSG_RNDV_CTS, 23, &rid), 1);
    feed_data_head(c, rid, 300);
    static char body[300];
    assert_int_equal(pscom_plugin_rx_push(con_of(c), body, 300), 0);
    assert_true(r->state & PSCOM_REQ_STATE_TRUNCATED);
    assert_int_equal(sent_for(PSC_MSG_RNDV_FIN, 23, NULL), 0);
    pscom_request_free(r);
    pscom_close_connection(c);

    c = con_on(&old_plugin);
    static char out2[300];
    r = recv_req(c, out2, sizeof(out2));
    feed_rndv_req_blob(c, 1, 24, 300);
    assert_int_equal(pull.calls, 0);
    assert_int_equal(sent_for(PSC_MSG_RNDV_CTS, 24, NULL), 1);
    pscom_close_connection(c); /* fails the receive: it may be freed */
    assert_true(r->state & PSCOM_REQ_STATE_ERROR);
    pscom_request_free(r);
}

static void failed_pull_fails_the_receive_unconfirmed(void **state)
{
    pscom_connection_t *c = con_on(&pull_plugin);
    static char out[300];
    pscom_request_t *r = recv_req(c, out, sizeof(out));
    feed_rndv_req_blob(c, 1, 25, 300);
    assert_int_equal(pscom_plugin_rx_defer_done(con_of(c), pull.handle, -EIO),
                     0);
    assert_true(r->state & PSCOM_REQ_STATE_ERROR);
    assert_int_equal(sent_for(PSC_MSG_RNDV_FIN, 25, NULL), 0);

    /* A pull still under way when the connection closes fails with it. */
    pscom_request_t *r2 = recv_req(c, out, sizeof(out));
    feed_rndv_req_blob(c, 1, 26, 300);
    assert_false(pscom_req_is_done(r2));
    pscom_close_connection(c);
    assert_true(r2->state & PSCOM_REQ_STATE_ERROR);
    pscom_request_free(r);
    pscom_request_free(r2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(bodies_out_of_line_in_any_order),
        cmocka_unit_test(only_whole_bodies_of_matched_receives),
        cmocka_unit_test(eof_waits_for_bodies_out_of_line),
        cmocka_unit_test(clear_to_send_before_the_announcement_was_reported),
        cmocka_unit_test(pulled_body_is_confirmed_once_in),
        cmocka_unit_test(unexpected_body_is_pulled_when_its_receive_comes),
        cmocka_unit_test(refused_pull_takes_the_core_s_way),
        cmocka_unit_test(failed_pull_fails_the_receive_unconfirmed),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
