/*
 * The end of an shm peer (plugins/shm/shm.c: its pre-connection socket
 * ended) against a stand-in core (fake_core_stream.h), with both ends of
 * the connection in this process: what the peer wrote is delivered, one
 * ring of it at most, and then the connection fails. A broken peer that
 * goes on writing after its end is not waited for.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <cmocka.h>

#include "fake_core_stream.h"

extern const pscom_plugin_t pscom_plugin_shm;
static const pscom_plugin_ops_t *ops;

#define SLOTS "16" /* PSP_SHM_SLOTS: the ring's slots */
/* More than a slot holds inline: each message goes to the data area, whose
 * room the receiver gives back after every such message. */
#define MSG_LEN 200

static struct fake_con A, B; /* A writes, B receives */
static int slots;

/* Each message B receives makes A write another, up to 64 rings of them:
 * A has room all the time. */
static void peer_writes_on(struct fake_con *k)
{
    static const char msg[MSG_LEN];
    if (k->pushes >= 64 * slots) return;
    fake_con_queue(&A, msg, sizeof(msg));
    ops->tx_kick(fake_con_handle(&A), A.priv);
}

/* A and B connect the way precon.c does and are opened with the two ends
 * of a socketpair as their pre-connection sockets. */
static void connect_pair(int sv[2])
{
    uint8_t blob_a[128], blob_b[128];
    size_t len_a = sizeof(blob_a), len_b = sizeof(blob_b);
    pscom_plugin_con_t *a = fake_con_handle(&A), *b = fake_con_handle(&B);
    fake_con_init(&A, pscom_plugin_shm.con_priv_size);
    fake_con_init(&B, pscom_plugin_shm.con_priv_size);
    assert_int_equal(ops->hs_start(a, A.priv, blob_a, &len_a), 0);
    assert_int_equal(ops->hs_start(b, B.priv, blob_b, &len_b), 0);
    assert_int_equal(ops->hs_connect(b, B.priv, blob_a, len_a), 0);
    assert_int_equal(ops->hs_connect(a, A.priv, blob_b, len_b), 0);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    assert_int_equal(ops->open(a, A.priv, sv[0]), 1);
    assert_int_equal(ops->open(b, B.priv, sv[1]), 1);
}

/* B's socket says that A is gone (its callback, called here) while A
 * writes on: B gets at most one ring's worth, then the connection fails
 * with EOF. */
static void end_of_peer_drains_one_ring_at_most(void **state)
{
    setenv("PSP_SHM_SLOTS", SLOTS, 1);
    slots = atoi(SLOTS);
    ops = pscom_plugin_shm.ops;
    assert_int_equal(ops->init(), 0);
    int sv[2];
    connect_pair(sv);
    B.on_push = peer_writes_on;
    peer_writes_on(&B);

    void *arg;
    pscom_plugin_fd_cb_t on_fd = fake_core_fd_cb(sv[1], &arg);
    assert_non_null(on_fd);
    on_fd(sv[1], EPOLLIN | EPOLLRDHUP, arg);
    assert_in_range(B.pushes, 1, slots);
    assert_int_equal(B.errors, 1);
    assert_int_equal(B.err, PSCOM_ERR_EOF);

    /* Failed: nothing more is delivered. */
    int pushes = B.pushes;
    ops->progress();
    assert_int_equal(B.pushes, pushes);

    ops->close(fake_con_handle(&A), A.priv);
    ops->close(fake_con_handle(&B), B.priv);
    fake_con_free(&A);
    fake_con_free(&B);
    ops->destroy();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(end_of_peer_drains_one_ring_at_most),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
