/*
 * Connections between sockets of one process, for unit tests that run
 * messages over real transports: listen, connect, wait for the accept.
 */
#ifndef TEST_CON_PAIR_H
#define TEST_CON_PAIR_H

#include "pscom.h"

/* The connection the last accept produced (con_accept = on_accept). */
static pscom_connection_t *accepted;

static void on_accept(pscom_connection_t *c)
{
    accepted = c;
}

/* Listen on any port; the endpoint string (pscom_socket_free_ep_str). */
static char *listen_ep(pscom_socket_t *s)
{
    char *ep = NULL;
    assert_int_equal(pscom_listen(s, PSCOM_ANYPORT), PSCOM_SUCCESS);
    assert_int_equal(pscom_socket_get_ep_str(s, &ep), PSCOM_SUCCESS);
    return ep;
}

/* Connect a new connection of `s` to ep (rank `rank`) and wait until the
 * listening side has accepted it; it must run on `type`. */
static pscom_connection_t *connect_to(pscom_socket_t *s, const char *ep,
                                      int rank, pscom_con_type_t type)
{
    pscom_connection_t *c = pscom_open_connection(s);
    accepted = NULL;
    assert_int_equal(pscom_connect(c, ep, rank, PSCOM_CON_FLAG_DIRECT),
                     PSCOM_SUCCESS);
    while (!accepted) pscom_test_any();
    assert_int_equal(c->type, type);
    return c;
}

#endif
