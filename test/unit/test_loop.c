/*
 * In-process connections: a socket connected to itself and two sockets of
 * one process use the loop transport and deliver every byte in order; with
 * the loop transport masked out, the same connection falls back to tcp.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "pscom.h"

static pscom_connection_t *accepted;

static void on_accept(pscom_connection_t *c)
{
    accepted = c;
}

static char *listen_ep(pscom_socket_t *s)
{
    char *ep = NULL;
    assert_int_equal(pscom_listen(s, PSCOM_ANYPORT), PSCOM_SUCCESS);
    assert_int_equal(pscom_socket_get_ep_str(s, &ep), PSCOM_SUCCESS);
    return ep;
}

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
    pscom_connection_t *c = pscom_open_connection(s);
    accepted = NULL;
    assert_int_equal(pscom_connect(c, ep, 0, PSCOM_CON_FLAG_DIRECT),
                     PSCOM_SUCCESS);
    while (!accepted) pscom_test_any();
    assert_int_equal(c->type, PSCOM_CON_TYPE_LOOP);
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

    pscom_connection_t *c = pscom_open_connection(a);
    accepted = NULL;
    assert_int_equal(pscom_connect(c, ep, 1, PSCOM_CON_FLAG_DIRECT),
                     PSCOM_SUCCESS);
    while (!accepted) pscom_test_any();
    assert_int_equal(c->type, PSCOM_CON_TYPE_LOOP);
    exchange(c, accepted, 12345, 3);

    /* Without the loop (and shared memory) transport the pair talks tcp. */
    pscom_con_type_mask_del(a, PSCOM_CON_TYPE_LOOP);
    pscom_con_type_mask_del(a, PSCOM_CON_TYPE_SHM);
    pscom_connection_t *c2 = pscom_open_connection(a);
    accepted = NULL;
    assert_int_equal(pscom_connect(c2, ep, 1, PSCOM_CON_FLAG_DIRECT),
                     PSCOM_SUCCESS);
    while (!accepted) pscom_test_any();
    assert_int_equal(c2->type, PSCOM_CON_TYPE_TCP);
    exchange(accepted, c2, 54321, 4);

    /* Closing one end is seen by the other. */
    pscom_close_connection(c);
    pscom_socket_free_ep_str(ep);
    pscom_close_socket(a);
    pscom_close_socket(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(self_connection),
        cmocka_unit_test(two_sockets_and_fallback),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
