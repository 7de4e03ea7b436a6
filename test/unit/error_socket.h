/*
 * Test fixture shared by unit tests that feed malformed frames: one socket
 * whose con_error counts the errors (errors, last_err), quiet logging, and
 * fresh() for a new transport-less connection. Include after cmocka.h.
 */
#ifndef TEST_ERROR_SOCKET_H
#define TEST_ERROR_SOCKET_H

#include "pscom.h"

static pscom_socket_t *sock;
static int errors;
static pscom_err_t last_err;

static void on_error(pscom_connection_t *c, pscom_op_t op, pscom_err_t err)
{
    (void)c;
    (void)op;
    errors++;
    last_err = err;
}

static int setup(void **state)
{
    (void)state;
    assert_int_equal(pscom_init(PSCOM_VERSION), PSCOM_SUCCESS);
    pscom_set_debug(0); /* the malformed input is on purpose */
    sock = pscom_open_socket(0, 0, 0, 0);
    sock->ops.con_error = on_error;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    pscom_close_socket(sock);
    return 0;
}

static pscom_connection_t *fresh(void)
{
    errors = 0;
    return pscom_open_connection(sock);
}

#endif
