/*
 * In-process connections: a socket connected to itself and two sockets of
 * one process use the loop transport and deliver every byte in order; with
 * the loop transport masked out, the same connection falls back to tcp.
 * The longest extended header a message can carry arrives whole over
 * either; a longer one is not sent.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "pscom.h"

#include "con_pair.h"

static void exchange(pscom_connection_t *from, pscom_connection_t *to,
                     size_t len, unsigned seed)
{
    char *out = malloc(len + 1), *in = malloc(len + 1);
    for (size_t i = 0; i < len; i++) out[i] = (char)(i * 31 + seed);
    pscom_request_t *r = pscom_request_create(0, 0);
    r->connection = to;
    r->data = in;
    r->data_len = len;
    pscom_post_recv(r);
    pscom_send(from, NULL, 0, out, len);
    pscom_wait(r);
    assert_true(pscom_req_successful(r));
    assert_int_equal(r->header.data_len, len);
    assert_memory_equal(in, out, len);
    pscom_request_free(r);
    free(out);
    free(in);
}

static void self_connection(void **state)
{
    assert_int_equal(pscom_init(PSCOM_VERSION), PSCOM_SUCCESS);
    pscom_socket_t *s = pscom_open_socket(0, 0, 0, 0);
    s->ops.con_accept = on_accept;
    char *ep = listen_ep(s);
    pscom_connection_t *c = connect_to(s, ep, 0, PSCOM_CON_TYPE_LOOP);
    assert_int_equal(accepted->type, PSCOM_CON_TYPE_LOOP);

    size_t sizes[] = {0, 1, 100, 70000, 3 << 20};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        exchange(c, accepted, sizes[i], (unsigned)i);
        exchange(accepted, c, sizes[i], (unsigned)i + 7);
    }
    pscom_socket_free_ep_str(ep);
    pscom_close_socket(s);
}

static void two_sockets_and_fallback(void **state)
{
    pscom_socket_t *a = pscom_open_socket(0, 0, 0, 0);
    pscom_socket_t *b = pscom_open_socket(0, 0, 1, 0);
    b->ops.con_accept = on_accept;
    char *ep = listen_ep(b);

    pscom_connection_t *c = connect_to(a, ep, 1, PSCOM_CON_TYPE_LOOP);
    exchange(c, accepted, 12345, 3);

    /* Without the loop (and shared memory) transport the pair talks tcp. */
    pscom_con_type_mask_del(a, PSCOM_CON_TYPE_LOOP);
    pscom_con_type_mask_del(a, PSCOM_CON_TYPE_SHM);
    pscom_connection_t *c2 = connect_to(a, ep, 1, PSCOM_CON_TYPE_TCP);
    exchange(accepted, c2, 54321, 4);

    /* Closing one end is seen by the other. */
    pscom_close_connection(c);
    pscom_socket_free_ep_str(ep);
    pscom_close_socket(a);
    pscom_close_socket(b);
}

static pscom_req_state_t inplace_state;

static void inplace_done(pscom_req_state_t state, void *priv)
{
    (void)priv;
    inplace_state = state;
}

/* Receive one message on `to` into a request with room for `xmax` bytes of
 * xheader; check it is `xlen` bytes of x and 64 bytes of data. */
static void receive_checked(pscom_connection_t *to, size_t xmax,
                            const char *x, size_t xlen, const char *data)
{
    char in[64];
    pscom_request_t *r = pscom_request_create(xmax, 0);
    assert_non_null(r);
    r->connection = to;
    r->xheader_len = xmax;
    r->data = in;
    r->data_len = sizeof(in);
    pscom_post_recv(r);
    pscom_wait(r);
    assert_true(pscom_req_successful(r));
    assert_int_equal(r->header.xheader_len, xlen);
    assert_int_equal(r->header.data_len, sizeof(in));
    assert_memory_equal(&r->xheader, x, xlen);
    assert_memory_equal(in, data, sizeof(in));
    pscom_request_free(r);
}

/* The header's xheader length has 16 bits and also counts the library's
 * trailer (88 bytes): the longest xheader arrives whole, and a longer one
 * given to pscom_send or pscom_send_inplace is not sent. It was: its
 * length wrapped, and the peer took part of the xheader for the body
 * (a successful receive of the wrong bytes). Over tcp, the real wire. */
static void xheader_limit(void **state)
{
    const size_t max = 65535 - 88;
    pscom_socket_t *a = pscom_open_socket(0, 0, 0, 0);
    pscom_socket_t *b = pscom_open_socket(0, 0, 1, 0);
    b->ops.con_accept = on_accept;
    char *ep = listen_ep(b);
    pscom_con_type_mask_del(a, PSCOM_CON_TYPE_LOOP);
    pscom_con_type_mask_del(a, PSCOM_CON_TYPE_SHM);
    pscom_connection_t *c = connect_to(a, ep, 1, PSCOM_CON_TYPE_TCP);

    assert_null(pscom_request_create(max + 1, 0));
    char *x = malloc(max + 64);
    char data[64];
    assert_non_null(x);
    for (size_t i = 0; i < max + 64; i++) x[i] = (char)(i * 7 + 1);
    memset(data, 'D', sizeof(data));

    pscom_send(c, x, max, data, sizeof(data));
    receive_checked(accepted, max, x, max, data);

    /* Too long, copied or in place: nothing goes out, the next message
     * is the next one received. */
    pscom_send(c, x, max + 1, data, sizeof(data));
    inplace_state = 0;
    pscom_send_inplace(c, x, max + 64, data, sizeof(data), inplace_done,
                       NULL);
    assert_true(inplace_state & PSCOM_REQ_STATE_DONE);
    assert_true(inplace_state & PSCOM_REQ_STATE_ERROR);
    pscom_send(c, x + 1, 8, data, sizeof(data));
    receive_checked(accepted, max, x + 1, 8, data);

    free(x);
    pscom_socket_free_ep_str(ep);
    pscom_close_socket(a);
    pscom_close_socket(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(self_connection),
        cmocka_unit_test(two_sockets_and_fallback),
        cmocka_unit_test(xheader_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
