/*
 * The verbs plugin's stream path (plugins/verbs/verbs_plugin.c) between two
 * connections of this process, over the fake HCA, with a stand-in core
 * that keeps each connection's outgoing bytes and logs what it receives:
 * the order of messages that arrived before open() when an upcall waits in
 * a nested progress call, close() delivering what was posted after the
 * core said the connection is closing, close() from inside an upcall
 * finding the send completions its outer progress call had taken, and
 * close() ending the control socket only after its last messages went
 * (close, wrapped).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "fake_core_common.h"
#include "fake_verbs.h"
#include "pscom_plugin.h"

extern const pscom_plugin_t pscom_plugin_verbs;
static const pscom_plugin_ops_t *ops;

/* A core connection as the stand-in sees it. */
struct con {
    const char *name;
    void *priv;
    char out[1024];  /* bytes queued for sending */
    size_t out_len;
    char in[1024];   /* bytes received, each push followed by '|' */
    size_t in_len;
    int pushes;      /* rx_push calls */
    int nest;        /* pushes that still call progress (a waiting upcall) */
    bool closing;    /* tx_done and rx_push answer "closing" */
    int close_at;    /* this push closes the connection (0: none) */
    int close_polls; /* CQ polls during that close */
    int errors;
};

static struct con A = {.name = "A"}, B = {.name = "B"};

static struct con *con_of(pscom_plugin_con_t *c)
{
    return (struct con *)c;
}

const char *pscom_plugin_con_str(pscom_plugin_con_t *c)
{
    return con_of(c)->name;
}

int pscom_plugin_tx_peek(pscom_plugin_con_t *c, struct iovec *iov,
                         int iov_max, size_t *total)
{
    struct con *k = con_of(c);
    *total = k->out_len;
    if (!k->out_len || iov_max < 1) return 0;
    iov[0].iov_base = k->out;
    iov[0].iov_len = k->out_len;
    return 1;
}

int pscom_plugin_tx_done(pscom_plugin_con_t *c, size_t n)
{
    struct con *k = con_of(c);
    memmove(k->out, k->out + n, k->out_len - n);
    k->out_len -= n;
    return k->closing ? -1 : 0;
}

int pscom_plugin_rx_push(pscom_plugin_con_t *c, const void *buf, size_t len)
{
    struct con *k = con_of(c);
    assert_true(k->in_len + len + 1 <= sizeof(k->in));
    memcpy(k->in + k->in_len, buf, len);
    k->in_len += len;
    k->in[k->in_len++] = '|';
    k->pushes++;
    if (k->nest) {
        k->nest--;
        ops->progress();
    }
    if (k->pushes == k->close_at) {
        k->closing = true;
        int polls = fake_stats.polls;
        ops->close(c, k->priv);
        k->close_polls = fake_stats.polls - polls;
    }
    return k->closing ? -1 : 0;
}

void pscom_plugin_con_error(pscom_plugin_con_t *c, pscom_op_t op,
                            pscom_err_t err, const char *what, int sys_errno)
{
    con_of(c)->errors++;
}

void pscom_plugin_rma_done(void *token, int err)
{
    fail_msg("no one-sided operations here");
}

/* The plugin's close() of the descriptor watched_fd (-Wl,--wrap=close):
 * how many SENDs the fake HCA had executed by then. */
static int watched_fd = -1;
static int sends_at_close = -1;
int __real_close(int fd);
int __wrap_close(int fd);
int __wrap_close(int fd)
{
    if (fd >= 0 && fd == watched_fd) sends_at_close = fake_stats.sends;
    return __real_close(fd);
}

/* ---------------------------------------------------------------------- */

/* close() polls the completion queue a few times after destroying the
 * queue pair, to drop its flushed receives. Waiting for a send that it
 * does not find would poll until its deadline: thousands of times. */
#define CLOSE_POLLS_MAX 4

static int setup(void **state)
{
    fake_reset();
    fake_core_reset();
    ops = pscom_plugin_verbs.ops;
    assert_int_equal(ops->init(), 0);
    return 0;
}

/* The control sockets connect_pair opens A and B with (-1: none). */
static int fd_a = -1, fd_b = -1;

/* A connects to B the way precon.c does; A is opened, B only if open_b. */
static void connect_pair(bool open_b)
{
    A = (struct con){.name = "A"};
    B = (struct con){.name = "B"};
    uint8_t blob_a[128], blob_b[128];
    size_t len_a = sizeof(blob_a), len_b = sizeof(blob_b);
    A.priv = calloc(1, pscom_plugin_verbs.con_priv_size);
    B.priv = calloc(1, pscom_plugin_verbs.con_priv_size);
    pscom_plugin_con_t *a = (pscom_plugin_con_t *)&A;
    pscom_plugin_con_t *b = (pscom_plugin_con_t *)&B;
    assert_int_equal(ops->hs_start(a, A.priv, blob_a, &len_a), 0);
    assert_int_equal(ops->hs_start(b, B.priv, blob_b, &len_b), 0);
    assert_int_equal(ops->hs_connect(b, B.priv, blob_a, len_a), 0);
    assert_int_equal(ops->hs_connect(a, A.priv, blob_b, len_b), 0);
    assert_int_equal(ops->open(a, A.priv, fd_a), 1);
    if (open_b) assert_int_equal(ops->open(b, B.priv, fd_b), 1);
}

static void send_str(struct con *k, const char *s)
{
    memcpy(k->out + k->out_len, s, strlen(s));
    k->out_len += strlen(s);
    ops->tx_kick((pscom_plugin_con_t *)k, k->priv);
}

static void received_is(struct con *k, const char *expected)
{
    k->in[k->in_len] = 0;
    assert_string_equal(k->in, expected);
}

static void close_both(void)
{
    ops->close((pscom_plugin_con_t *)&A, A.priv);
    ops->close((pscom_plugin_con_t *)&B, B.priv);
    free(A.priv);
    free(B.priv);
    ops->destroy();
    assert_int_equal(fake_stats.live_qp, 0);
    assert_int_equal(fake_stats.live_mr, 0);
}

/* m1..m3 reach B before its open(), m4 after it; the upcall of m1 waits in
 * a nested progress call, which takes m4 from the completion queue. B's
 * core gets them in the order they were sent. */
static void early_messages_keep_their_order(void **state)
{
    connect_pair(false);
    send_str(&A, "m1");
    send_str(&A, "m2");
    send_str(&A, "m3");
    ops->progress(); /* kept: B is not open */
    received_is(&B, "");
    assert_int_equal(ops->open((pscom_plugin_con_t *)&B, B.priv, -1), 1);
    send_str(&A, "m4");
    B.nest = 1;
    for (int i = 0; i < 5; i++) ops->progress();
    received_is(&B, "m1|m2|m3|m4|");
    /* Later messages go straight through again. */
    send_str(&A, "m5");
    ops->progress();
    received_is(&B, "m1|m2|m3|m4|m5|");
    assert_int_equal(A.errors + B.errors, 0);
    assert_int_equal(fake_stats.rnr, 0);
    close_both();
}

/* The core says "closing" when A's last bytes are handed over (tx_done):
 * close() still waits until the HCA has sent them, so that B gets them. */
static void close_delivers_what_the_core_handed_over(void **state)
{
    fake_cfg.send_lag = 1; /* a SEND executes at the next poll */
    connect_pair(true);
    A.closing = true;
    send_str(&A, "tail");
    received_is(&B, ""); /* posted, not executed yet */
    ops->close((pscom_plugin_con_t *)&A, A.priv);
    for (int i = 0; i < 5; i++) ops->progress();
    received_is(&B, "tail|");
    assert_int_equal(fake_stats.flushed, 0);

    /* Its completion handled by progress on the closing connection: close()
     * knows that it went and does not wait for it. */
    assert_int_equal(A.errors + B.errors, 0);
    ops->close((pscom_plugin_con_t *)&B, B.priv);
    free(A.priv);
    free(B.priv);
    fake_cfg.send_lag = 0;
    connect_pair(true);
    A.closing = true;
    send_str(&A, "tail");
    ops->progress();
    received_is(&B, "tail|");
    int polls = fake_stats.polls;
    ops->close((pscom_plugin_con_t *)&A, A.priv);
    assert_in_range(fake_stats.polls - polls, 0, CLOSE_POLLS_MAX);
    ops->close((pscom_plugin_con_t *)&B, B.priv);
    free(A.priv);
    free(B.priv);
    ops->destroy();
    assert_int_equal(fake_stats.live_qp, 0);
}

/* B sends b1, then A sends a1: one progress call takes A's receive and,
 * behind it, A's send completion. The upcall of b1 closes A, which waits
 * for its send: it finds the completion its outer call took without
 * polling the completion queue. */
static void close_in_upcall_finds_taken_completions(void **state)
{
    connect_pair(true);
    send_str(&B, "b1");
    send_str(&A, "a1");
    A.close_at = 1;
    ops->progress();
    received_is(&A, "b1|");
    assert_in_range(A.close_polls, 0, CLOSE_POLLS_MAX);
    for (int i = 0; i < 3; i++) ops->progress();
    received_is(&B, "a1|");
    ops->close((pscom_plugin_con_t *)&B, B.priv);
    free(A.priv);
    free(B.priv);
    ops->destroy();
    assert_int_equal(fake_stats.live_qp, 0);
    assert_int_equal(fake_stats.live_mr, 0);
}

/* B's process is gone (its end of the control socket closed) while A has
 * a send posted that will not complete: A's close() does not wait for it
 * (it used to poll until its 2 s deadline). */
static void close_after_the_peer_ended_does_not_wait(void **state)
{
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    fd_a = sv[0];
    fd_b = -1;
    fake_cfg.send_lag = 1000000; /* posted sends stay pending */
    connect_pair(true);
    send_str(&A, "tail");
    close(sv[1]);
    int polls = fake_stats.polls;
    ops->close((pscom_plugin_con_t *)&A, A.priv);
    assert_in_range(fake_stats.polls - polls, 0, CLOSE_POLLS_MAX);
    fake_cfg.send_lag = 0;
    ops->close((pscom_plugin_con_t *)&B, B.priv);
    free(A.priv);
    free(B.priv);
    fd_a = -1;
    ops->destroy();
    assert_int_equal(fake_stats.live_qp, 0);
}

/* The end of A's control socket makes B fail the connection: A's close()
 * ends it only after the HCA has executed A's last SEND (still on the wire
 * when close() begins), so that B has the message by then. */
static void control_socket_closes_after_the_last_send(void **state)
{
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    fd_a = watched_fd = sv[0];
    fake_cfg.send_lag = 1;
    connect_pair(true);
    send_str(&A, "tail");
    int sends = fake_stats.sends;
    ops->close((pscom_plugin_con_t *)&A, A.priv);
    assert_int_equal(sends_at_close, sends + 1);
    for (int i = 0; i < 5; i++) ops->progress();
    received_is(&B, "tail|");
    assert_int_equal(A.errors + B.errors, 0);
    ops->close((pscom_plugin_con_t *)&B, B.priv);
    free(A.priv);
    free(B.priv);
    close(sv[1]);
    fd_a = watched_fd = -1;
    ops->destroy();
    assert_int_equal(fake_stats.live_qp, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(early_messages_keep_their_order, setup),
        cmocka_unit_test_setup(close_delivers_what_the_core_handed_over, setup),
        cmocka_unit_test_setup(close_in_upcall_finds_taken_completions, setup),
        cmocka_unit_test_setup(close_after_the_peer_ended_does_not_wait,
                               setup),
        cmocka_unit_test_setup(control_socket_closes_after_the_last_send,
                               setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
