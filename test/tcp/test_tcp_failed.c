/*
 * A failed tcp connection (plugins/tcp/tcp.c) against a stand-in core
 * (fake_core_stream.h), over a socketpair whose other end is the test's
 * peer. The core closes a failed connection only later, and progress and
 * tx_kick may come to it meanwhile: the plugin reports the failure once
 * and neither reads nor writes the socket any more.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "fake_core_stream.h"

extern const pscom_plugin_t pscom_plugin_tcp;
static const pscom_plugin_ops_t *ops;
static struct fake_con con;
static int peer = -1; /* the test's end of the socketpair */

static int setup(void **state)
{
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    peer = sv[1];
    ops = pscom_plugin_tcp.ops;
    assert_int_equal(ops->init(), 0);
    fake_con_init(&con, pscom_plugin_tcp.con_priv_size);
    assert_int_equal(ops->open(fake_con_handle(&con), con.priv, sv[0]), 1);
    return 0;
}

static int teardown(void **state)
{
    ops->close(fake_con_handle(&con), con.priv);
    fake_con_free(&con);
    close(peer);
    return 0;
}

static void progress(int rounds)
{
    for (int i = 0; i < rounds; i++) ops->progress();
}

/* What the peer sent before its end is delivered; the end is reported
 * once, though progress comes round again. */
static void end_of_peer_is_reported_once(void **state)
{
    assert_int_equal(send(peer, "abc", 3, 0), 3);
    assert_int_equal(shutdown(peer, SHUT_WR), 0);
    progress(3);
    assert_int_equal(con.in_len, 3);
    assert_int_equal(con.errors, 1);
    assert_int_equal(con.err, PSCOM_ERR_EOF);
}

/* The core said stop (rx_push answered "closing"): what the peer sends
 * after that stays unread. */
static void stopped_connection_is_not_read(void **state)
{
    con.closing = true;
    assert_int_equal(send(peer, "abc", 3, 0), 3);
    progress(1);
    assert_int_equal(con.pushes, 1);
    assert_int_equal(send(peer, "def", 3, 0), 3);
    progress(3);
    assert_int_equal(con.pushes, 1);
    assert_int_equal(con.errors, 0);
}

/* A frame the core queues after the failure (a callback's reply, say) is
 * not written: it stays queued and nothing reaches the peer, which could
 * still read. */
static void failed_connection_writes_nothing(void **state)
{
    assert_int_equal(shutdown(peer, SHUT_WR), 0);
    progress(1);
    assert_int_equal(con.errors, 1);
    fake_con_queue(&con, "late", 4);
    ops->tx_kick(fake_con_handle(&con), con.priv);
    assert_int_equal(con.out_len, 4);
    char buf[8];
    assert_int_equal(recv(peer, buf, sizeof(buf), MSG_DONTWAIT), -1);
    assert_int_equal(errno, EAGAIN);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(end_of_peer_is_reported_once, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(stopped_connection_is_not_read, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(failed_connection_writes_nothing,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
