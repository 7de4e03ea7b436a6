/*
 * The verbs plugin end to end, without RDMA hardware: the real libpscom
 * loads a libpscom4verbs.so built from the plugin's sources with the fake
 * HCA (fake_verbs.c) in place of verbs_wrap.c, and two sockets of this
 * process talk over it. Covers the wire-up through precon, eager messages
 * through the receive rings (credits under floods both ways), rendezvous by
 * RDMA read (expected and unexpected, truncated), a failing INIT->RTR
 * falling back to tcp, a peer whose queue pair breaks, and closing. One-sided
 * put and get through the core's fast path: RDMA writes and reads move the
 * bytes (1 B to 4 MiB, below and above PSP_VERBS_RMA), the target's callback
 * runs once per operation, and a completion error fails the request and
 * the connection.
 *
 * The fake HCA counts what a real one would refuse (a SEND without a posted
 * receive, a wrong key); those counters must stay 0.
 */
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "fake_verbs.h"
#include "pscom.h"
#include "pscom_plugin.h"

static struct fake_stats *st;
static struct fake_cfg *cfg;
static void (*break_all)(void);

static pscom_connection_t *accepted;
static int errors, last_error;

static void on_accept(pscom_connection_t *c)
{
    accepted = c;
}

static void on_error(pscom_connection_t *c, pscom_op_t op, pscom_err_t err)
{
    errors++;
    last_error = err;
}

static pscom_socket_t *open_sock(int rank, pscom_con_type_t only)
{
    pscom_socket_t *s = pscom_open_socket(0, 0, rank, 0);
    assert_non_null(s);
    s->ops.con_accept = on_accept;
    s->ops.con_error = on_error;
    pscom_con_type_mask_only(s, only);
    return s;
}

/* Connect a to b; returns a's end, *b_end gets b's. */
static pscom_connection_t *connect_pair(pscom_socket_t *a, pscom_socket_t *b,
                                        pscom_connection_t **b_end)
{
    char *ep = NULL;
    if (pscom_listen(b, PSCOM_ANYPORT) != PSCOM_SUCCESS) {
        /* already listening */
    }
    assert_int_equal(pscom_socket_get_ep_str(b, &ep), PSCOM_SUCCESS);
    pscom_connection_t *c = pscom_open_connection(a);
    accepted = NULL;
    assert_int_equal(pscom_connect(c, ep, 1, PSCOM_CON_FLAG_DIRECT),
                     PSCOM_SUCCESS);
    while (!accepted) pscom_test_any();
    pscom_socket_free_ep_str(ep);
    *b_end = accepted;
    return c;
}

static void fill(char *p, size_t len, unsigned seed)
{
    for (size_t i = 0; i < len; i++) p[i] = (char)(i * 131 + seed * 7 + (i >> 12));
}

static void exchange(pscom_connection_t *from, pscom_connection_t *to,
                     size_t len, unsigned seed, int recv_first)
{
    char *out = malloc(len + 1), *in = malloc(len + 1);
    fill(out, len, seed);
    memset(in, 0, len + 1);
    pscom_request_t *r = pscom_request_create(0, 0);
    r->connection = to;
    r->data = in;
    r->data_len = len;
    pscom_request_t *s = pscom_request_create(0, 0);
    s->connection = from;
    s->data = out;
    s->data_len = len;
    if (recv_first) pscom_post_recv(r);
    pscom_post_send(s);
    if (!recv_first) {
        /* Let the announcement arrive unexpected first. */
        for (int i = 0; i < 100; i++) pscom_test_any();
        pscom_post_recv(r);
    }
    pscom_wait(r);
    pscom_wait(s);
    assert_true(pscom_req_successful(s));
    assert_true(pscom_req_successful(r));
    assert_int_equal(r->header.data_len, len);
    assert_memory_equal(in, out, len);
    pscom_request_free(r);
    pscom_request_free(s);
    free(out);
    free(in);
}

static void hardware_rules_kept(void)
{
    assert_int_equal(st->rnr, 0);
    assert_int_equal(st->bad_key, 0);
    assert_int_equal(st->bad_transition, 0);
}

static int setup_group(void **state)
{
    assert_int_equal(pscom_init(PSCOM_VERSION), PSCOM_SUCCESS);
    const char *why = NULL;
    if (!pscom_plugin_available("verbs", &why)) {
        fprintf(stderr, "verbs plugin (fake HCA) not usable: %s\n", why);
        return -1;
    }
    char path[1024];
    snprintf(path, sizeof(path), "%s/libpscom4verbs.so",
             getenv("PSP_PLUGINDIR") ? getenv("PSP_PLUGINDIR") : ".");
    void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (!h) {
        fprintf(stderr, "%s is not loaded: %s\n", path, dlerror());
        return -1;
    }
    st = dlsym(h, "fake_stats");
    cfg = dlsym(h, "fake_cfg");
    *(void **)&break_all = dlsym(h, "fake_break_all");
    return st && cfg && break_all ? 0 : -1;
}

static void eager_and_rendezvous(void **state)
{
    pscom_socket_t *a = open_sock(0, PSCOM_CON_TYPE_OPENIB);
    pscom_socket_t *b = open_sock(1, PSCOM_CON_TYPE_OPENIB);
    pscom_connection_t *cb, *ca = connect_pair(a, b, &cb);
    assert_int_equal(ca->type, PSCOM_CON_TYPE_OPENIB);
    assert_int_equal(cb->type, PSCOM_CON_TYPE_OPENIB);

    int reads = st->reads;
    size_t sizes[] = {0, 1, 100, 8000, 16376, 16377, 32767, 32768, 100000,
                      1 << 20, 5 << 20};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        exchange(ca, cb, sizes[i], (unsigned)i, 1);
        exchange(cb, ca, sizes[i], (unsigned)i + 50, 1);
        exchange(ca, cb, sizes[i], (unsigned)i + 100, 0);
    }
    /* The four sizes of 32 KiB and more went by RDMA read, three times
     * each. */
    assert_true(st->reads - reads >= 3 * 4);
    hardware_rules_kept();
    pscom_close_connection(ca);
    while (!errors) pscom_test_any();
    assert_int_equal(last_error, PSCOM_ERR_EOF);
    errors = 0;
    pscom_close_socket(a);
    pscom_close_socket(b);
    assert_int_equal(st->live_qp, 0);
}

#define FLOOD 3000

static void floods_both_ways(void **state)
{
    pscom_socket_t *a = open_sock(0, PSCOM_CON_TYPE_OPENIB);
    pscom_socket_t *b = open_sock(1, PSCOM_CON_TYPE_OPENIB);
    pscom_connection_t *cb, *ca = connect_pair(a, b, &cb);
    pscom_connection_t *ends[2] = {ca, cb};

    /* Both sides send everything before either posts a receive: the rings
     * (16 slots) fill, credits run out on both sides at once. */
    static pscom_request_t *sends[2][FLOOD], *recvs[2][FLOOD];
    static char out[2][FLOOD][64], in[2][FLOOD][64];
    for (int i = 0; i < FLOOD; i++) {
        for (int d = 0; d < 2; d++) {
            size_t len = (size_t)(i * 7 + d) % 64;
            fill(out[d][i], len, (unsigned)(i + d));
            pscom_request_t *s = pscom_request_create(0, 0);
            s->connection = ends[d];
            s->data = out[d][i];
            s->data_len = len;
            pscom_post_send(s);
            sends[d][i] = s;
        }
    }
    for (int i = 0; i < FLOOD; i++) {
        for (int d = 0; d < 2; d++) {
            pscom_request_t *r = pscom_request_create(0, 0);
            r->connection = ends[1 - d];
            r->data = in[d][i];
            r->data_len = 64;
            pscom_post_recv(r);
            recvs[d][i] = r;
        }
    }
    for (int i = 0; i < FLOOD; i++) {
        for (int d = 0; d < 2; d++) {
            pscom_wait(recvs[d][i]);
            pscom_wait(sends[d][i]);
            size_t len = (size_t)(i * 7 + d) % 64;
            assert_true(pscom_req_successful(recvs[d][i]));
            assert_int_equal(recvs[d][i]->header.data_len, len);
            assert_memory_equal(in[d][i], out[d][i], len); /* in order */
            pscom_request_free(recvs[d][i]);
            pscom_request_free(sends[d][i]);
        }
    }
    hardware_rules_kept();
    pscom_close_socket(a);
    pscom_close_socket(b);
    errors = 0;
    assert_int_equal(st->live_qp, 0);
}

static void rendezvous_truncated_and_reused(void **state)
{
    pscom_socket_t *a = open_sock(0, PSCOM_CON_TYPE_OPENIB);
    pscom_socket_t *b = open_sock(1, PSCOM_CON_TYPE_OPENIB);
    pscom_connection_t *cb, *ca = connect_pair(a, b, &cb);
    size_t len = 300000;
    char *out = malloc(len), *in = malloc(len);
    fill(out, len, 9);

    /* A receive buffer smaller than the message: truncated, the part that
     * fits arrives. */
    pscom_request_t *r = pscom_request_create(0, 0);
    r->connection = cb;
    r->data = in;
    r->data_len = len / 2;
    pscom_post_recv(r);
    pscom_send(ca, NULL, 0, out, len);
    pscom_wait(r);
    assert_true(r->state & PSCOM_REQ_STATE_TRUNCATED);
    assert_memory_equal(in, out, len / 2);
    pscom_request_free(r);

    /* The same buffers again and again (sent in place: pscom_send would
     * copy to a new buffer each time): with the registration cache on, the
     * receive buffer is registered once; the send buffer every time, as
     * the peer's right to read it ends with each message. */
    int regs = st->reg_calls;
    for (int i = 0; i < 10; i++) {
        r = pscom_request_create(0, 0);
        r->connection = cb;
        r->data = in;
        r->data_len = len;
        pscom_post_recv(r);
        pscom_request_t *s = pscom_request_create(0, 0);
        s->connection = ca;
        s->data = out;
        s->data_len = len;
        pscom_post_send(s);
        pscom_wait(r);
        pscom_wait(s);
        assert_true(pscom_req_successful(r));
        assert_true(pscom_req_successful(s));
        assert_memory_equal(in, out, len);
        pscom_request_free(r);
        pscom_request_free(s);
    }
    const char *mc = getenv("PSP_VERBS_MCACHE_SIZE");
    if (mc && atoi(mc) > 0)
        assert_int_equal(st->reg_calls - regs, 1 + 10);
    else
        assert_true(st->reg_calls - regs >= 20);  /* both sides, every time */
    hardware_rules_kept();
    pscom_close_socket(a);
    pscom_close_socket(b);
    errors = 0;
    free(out);
    free(in);
    assert_int_equal(st->live_qp, 0);
}

/* Two sockets that may use verbs, else tcp. */
static void open_verbs_or_tcp(pscom_socket_t **a, pscom_socket_t **b)
{
    *a = open_sock(0, PSCOM_CON_TYPE_OPENIB);
    *b = open_sock(1, PSCOM_CON_TYPE_OPENIB);
    pscom_con_type_mask_add(*a, PSCOM_CON_TYPE_TCP);
    pscom_con_type_mask_add(*b, PSCOM_CON_TYPE_TCP);
}

/* The pair fell back to tcp, works, and the aborted verbs attempt left
 * nothing behind. */
static void check_tcp_fallback(pscom_socket_t *a, pscom_socket_t *b,
                               pscom_connection_t *ca, pscom_connection_t *cb)
{
    assert_int_equal(ca->type, PSCOM_CON_TYPE_TCP);
    assert_int_equal(cb->type, PSCOM_CON_TYPE_TCP);
    exchange(ca, cb, 1000, 1, 1);
    pscom_close_socket(a);
    pscom_close_socket(b);
    errors = 0;
    assert_int_equal(st->live_qp, 0);
}

static void rtr_failure_falls_back_to_tcp(void **state)
{
    pscom_socket_t *a, *b;
    open_verbs_or_tcp(&a, &b);
    cfg->fail_state = IBV_QPS_RTR;
    pscom_connection_t *cb, *ca = connect_pair(a, b, &cb);
    cfg->fail_state = 0;
    check_tcp_fallback(a, b, ca, cb);
}

/* The connector's end fails after the acceptor's succeeded: FAILED, with
 * the reason, which the acceptor's debug line gives; then tcp. */
static void connector_failure_reason_reaches_acceptor(void **state)
{
    pscom_socket_t *a, *b;
    open_verbs_or_tcp(&a, &b);
    cfg->fail_state = IBV_QPS_RTR;
    cfg->fail_skip = 1; /* the acceptor's queue pair reaches RTR */
    /* Both sides' debug lines into a file (this process is both). */
    char path[] = "/tmp/verbs_e2e_log_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    pscom_set_debug(4);
    pscom_connection_t *cb, *ca = connect_pair(a, b, &cb);
    pscom_set_debug(0);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    cfg->fail_state = 0;
    cfg->fail_skip = 0;
    char log[16384] = "";
    ssize_t n = pread(fd, log, sizeof(log) - 1, 0);
    close(fd);
    unlink(path);
    assert_true(n > 0);
    log[n] = 0;
    if (!strstr(log, "verbs failed at the peer (queue pair INIT->RTR "
                     "failed: Invalid argument)"))
        fail_msg("the acceptor's debug line lacks the connector's reason:\n%s",
                 log);
    check_tcp_fallback(a, b, ca, cb);
}

static void broken_queue_pair_fails_connection(void **state)
{
    pscom_socket_t *a = open_sock(0, PSCOM_CON_TYPE_OPENIB);
    pscom_socket_t *b = open_sock(1, PSCOM_CON_TYPE_OPENIB);
    pscom_connection_t *cb, *ca = connect_pair(a, b, &cb);
    exchange(ca, cb, 10, 1, 1);
    errors = 0;
    break_all(); /* the peer "dies": sends end in a retry error */
    char buf[100] = {0};
    pscom_request_t *s = pscom_request_create(0, 0);
    s->connection = ca;
    s->data = buf;
    s->data_len = sizeof(buf);
    pscom_post_send(s);
    /* The copy into the send ring completes the send; the completion
     * error then fails the connection. */
    while (!errors) pscom_test_any();
    assert_int_equal(last_error, PSCOM_ERR_IOERROR);
    assert_int_equal(ca->state, PSCOM_CON_STATE_CLOSED);
    pscom_wait(s);
    pscom_request_free(s);
    /* A send posted now fails at once. */
    s = pscom_request_create(0, 0);
    s->connection = ca;
    s->data = buf;
    s->data_len = sizeof(buf);
    pscom_post_send(s);
    pscom_wait(s);
    assert_true(s->state & PSCOM_REQ_STATE_ERROR);
    pscom_request_free(s);
    pscom_close_socket(a);
    pscom_close_socket(b);
    errors = 0;
    assert_int_equal(st->live_qp, 0);
}

static void send_before_accept(void **state)
{
    /* The connector may send as soon as its side is open, before the
     * acceptor has switched its end: those completions wait for open(). */
    pscom_socket_t *a = open_sock(0, PSCOM_CON_TYPE_OPENIB);
    pscom_socket_t *b = open_sock(1, PSCOM_CON_TYPE_OPENIB);
    char *ep = NULL;
    assert_int_equal(pscom_listen(b, PSCOM_ANYPORT), PSCOM_SUCCESS);
    assert_int_equal(pscom_socket_get_ep_str(b, &ep), PSCOM_SUCCESS);
    /* One open verbs connection, so that progress polls the CQ while the
     * second one is being set up. */
    pscom_connection_t *warm_b, *warm = connect_pair(a, b, &warm_b);
    (void)warm;
    enum { N = 8 };
    size_t len[N] = {1, 100, 20000, 40000, 7, 300000, 16, 5};
    char *out[N];
    pscom_request_t *s[N];
    pscom_connection_t *c = pscom_open_connection(a);
    accepted = NULL;
    assert_int_equal(pscom_connect(c, ep, 1, PSCOM_CON_FLAG_DIRECT),
                     PSCOM_SUCCESS);
    for (int i = 0; i < N; i++) {
        out[i] = malloc(len[i]);
        fill(out[i], len[i], (unsigned)i);
        s[i] = pscom_request_create(0, 0);
        s[i]->connection = c;
        s[i]->data = out[i];
        s[i]->data_len = len[i];
        pscom_post_send(s[i]);
    }
    while (!accepted) pscom_test_any();
    pscom_connection_t *cb = accepted;
    for (int i = 0; i < N; i++) {
        char *in = malloc(len[i]);
        pscom_request_t *r = pscom_request_create(0, 0);
        r->connection = cb;
        r->data = in;
        r->data_len = len[i];
        pscom_post_recv(r);
        pscom_wait(r);
        assert_true(pscom_req_successful(r));
        assert_memory_equal(in, out[i], len[i]);
        pscom_request_free(r);
        free(in);
        pscom_wait(s[i]);
        pscom_request_free(s[i]);
        free(out[i]);
    }
    hardware_rules_kept();
    pscom_socket_free_ep_str(ep);
    pscom_close_socket(a);
    pscom_close_socket(b);
    errors = 0;
    assert_int_equal(st->live_qp, 0);
}

static void many_connections(void **state)
{
    /* More pairs than fit one table growth step, opened and closed in a
     * mixed order: keys and generations stay straight. */
    enum { N = 40 };
    pscom_socket_t *a = open_sock(0, PSCOM_CON_TYPE_OPENIB);
    pscom_socket_t *b = open_sock(1, PSCOM_CON_TYPE_OPENIB);
    pscom_connection_t *ca[N], *cb[N];
    for (int i = 0; i < N; i++) ca[i] = connect_pair(a, b, &cb[i]);
    for (int i = 0; i < N; i += 2) pscom_close_connection(ca[i]);
    for (int i = 1; i < N; i += 2) exchange(ca[i], cb[i], 50000, (unsigned)i, 1);
    for (int i = 0; i < N; i += 2) ca[i] = connect_pair(a, b, &cb[i]);
    for (int i = 0; i < N; i++) exchange(cb[i], ca[i], 100, (unsigned)i, 1);
    hardware_rules_kept();
    pscom_close_socket(a);
    pscom_close_socket(b);
    errors = 0;
    assert_int_equal(st->live_qp, 0);
}


/* ---------------------------------------------------------------------- */
/* One-sided operations                                                   */
/* ---------------------------------------------------------------------- */

static int cb_puts, cb_gets;

static void on_put(pscom_request_t *req)
{
    cb_puts++;
}

static void on_get(pscom_request_t *req)
{
    cb_gets++;
}

static void rma_noop(pscom_request_t *req)
{
}

/* A put or get of len bytes at target through con with rkey; returns the
 * final state. */
static pscom_req_state_t rma_do(pscom_connection_t *con, pscom_rkey_t rkey,
                                bool put, void *local, void *target,
                                size_t len)
{
    pscom_request_t *r = pscom_request_create(
        put ? sizeof(pscom_xheader_rma_put_t) : sizeof(pscom_xheader_rma_get_t),
        0);
    r->connection = con;
    r->data_len = len;
    r->rma.origin_addr = local;
    r->rma.target_addr = target;
    r->rma.rkey = rkey;
    r->ops.io_done = rma_noop;
    if (put)
        pscom_post_rma_put(r);
    else
        pscom_post_rma_get(r);
    pscom_wait(r);
    pscom_req_state_t state = r->state;
    pscom_request_free(r);
    return state;
}

/* b exposes a region of len bytes; a gets its key on ca. */
static pscom_rkey_t expose(pscom_socket_t *b, pscom_connection_t *ca,
                           void *region, size_t len, pscom_memh_t *memh)
{
    assert_int_equal(pscom_mem_register(b, region, len, memh), PSCOM_SUCCESS);
    pscom_register_rma_callbacks(on_put, *memh, PSCOM_RMA_PUT);
    pscom_register_rma_callbacks(on_get, *memh, PSCOM_RMA_GET);
    void *buf;
    size_t buf_len;
    assert_int_equal(pscom_rkey_buffer_pack(&buf, &buf_len, *memh),
                     PSCOM_SUCCESS);
    pscom_rkey_t rkey;
    assert_int_equal(pscom_rkey_generate(ca, buf, buf_len, &rkey),
                     PSCOM_SUCCESS);
    pscom_rkey_buffer_release(buf);
    return rkey;
}

static void one_sided_fast_path(void **state)
{
    pscom_socket_t *a = open_sock(0, PSCOM_CON_TYPE_OPENIB);
    pscom_socket_t *b = open_sock(1, PSCOM_CON_TYPE_OPENIB);
    pscom_connection_t *cb, *ca = connect_pair(a, b, &cb);
    enum { REGION = 5 << 20 };
    char *region = calloc(1, REGION), *src = malloc(REGION),
         *dst = malloc(REGION + 64);
    pscom_memh_t memh;
    pscom_rkey_t rkey = expose(b, ca, region, REGION, &memh);
    size_t sizes[] = {1, 100, 8191, 8192, 100000, 1 << 20, 4 << 20};
    cb_puts = cb_gets = 0;
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        size_t len = sizes[i];
        bool fast = len >= 8192; /* PSP_VERBS_RMA */
        fill(src, len, (unsigned)i + 1);
        int writes = st->writes, reads = st->reads;
        pscom_req_state_t rs = rma_do(ca, rkey, true, src, region + 7, len);
        assert_true(pscom_req_state_successful(rs));
        assert_int_equal(st->writes > writes, fast);
        /* The bytes are in place by the time the notice is handled. */
        while (cb_puts < (int)i + 1) pscom_test_any();
        assert_int_equal(cb_puts, i + 1);
        assert_memory_equal(region + 7, src, len);

        memset(dst, 0x5a, len + 64);
        fill(region + 64, len, (unsigned)i + 50);
        rs = rma_do(ca, rkey, false, dst, region + 64, len);
        assert_true(pscom_req_state_successful(rs));
        assert_int_equal(st->reads > reads, fast);
        assert_memory_equal(dst, region + 64, len);
        for (int k = 0; k < 64; k++) assert_int_equal(dst[len + k], 0x5a);
        while (cb_gets < (int)i + 1) pscom_test_any();
    }
    for (int k = 0; k < 100; k++) pscom_test_any();
    assert_int_equal(cb_puts, sizeof(sizes) / sizeof(sizes[0])); /* once each */
    assert_int_equal(cb_gets, sizeof(sizes) / sizeof(sizes[0]));
    hardware_rules_kept();

    /* The queue pair breaks under a put: the request and the connection
     * fail, nothing hangs. */
    errors = 0;
    break_all();
    pscom_req_state_t rs = rma_do(ca, rkey, true, src, region, 100000);
    assert_true(rs & PSCOM_REQ_STATE_ERROR);
    while (!errors) pscom_test_any();
    assert_int_equal(ca->state, PSCOM_CON_STATE_CLOSED);

    assert_int_equal(pscom_rkey_destroy(rkey), PSCOM_SUCCESS);
    assert_int_equal(pscom_mem_deregister(memh), PSCOM_SUCCESS);
    pscom_close_socket(a);
    pscom_close_socket(b);
    errors = 0;
    assert_int_equal(st->live_qp, 0);
    free(region);
    free(src);
    free(dst);
}

/* The callback of one send closes the connection: closing waits for the
 * sends behind it, in a nested progress call, which must find their
 * completions even when the outer call has taken them from the queue
 * already, and get their acknowledgements although the message whose
 * upcall it runs in still holds a receive slot (the small-queues run has
 * 3 slots). */
#define CB_SENDS 12
#define CB_LEN (64 * 1024) /* rendezvous: done when the peer has read it */

static void close_own_connection(pscom_request_t *req)
{
    pscom_close_connection(req->connection);
}

static void close_from_send_callback(void **state)
{
    pscom_socket_t *a = open_sock(0, PSCOM_CON_TYPE_OPENIB);
    pscom_socket_t *b = open_sock(1, PSCOM_CON_TYPE_OPENIB);
    pscom_connection_t *cb, *ca = connect_pair(a, b, &cb);
    assert_int_equal(ca->type, PSCOM_CON_TYPE_OPENIB);
    char *out = malloc(CB_SENDS * CB_LEN), *in = malloc(CB_SENDS * CB_LEN);
    fill(out, CB_SENDS * CB_LEN, 9);
    pscom_request_t *s[CB_SENDS], *r[CB_SENDS];
    for (int i = 0; i < CB_SENDS; i++) {
        r[i] = pscom_request_create(0, 0);
        r[i]->connection = cb;
        r[i]->data = in + (size_t)i * CB_LEN;
        r[i]->data_len = CB_LEN;
        pscom_post_recv(r[i]);
    }
    for (int i = 0; i < CB_SENDS; i++) {
        s[i] = pscom_request_create(0, 0);
        s[i]->connection = ca;
        s[i]->data = out + (size_t)i * CB_LEN;
        s[i]->data_len = CB_LEN;
        if (i == 2) s[i]->ops.io_done = close_own_connection;
        pscom_post_send(s[i]);
    }
    for (int i = 0; i < CB_SENDS; i++) {
        pscom_wait(r[i]);
        assert_true(pscom_req_successful(r[i]));
    }
    for (int i = 0; i < CB_SENDS; i++) {
        while (!pscom_req_is_done(s[i])) pscom_test_any();
        assert_true(pscom_req_successful(s[i]));
        pscom_request_free(s[i]);
        pscom_request_free(r[i]);
    }
    assert_memory_equal(in, out, CB_SENDS * CB_LEN);
    while (!errors) pscom_test_any(); /* b sees the close */
    assert_int_equal(last_error, PSCOM_ERR_EOF);
    errors = 0;
    hardware_rules_kept();
    pscom_close_socket(a);
    pscom_close_socket(b);
    assert_int_equal(st->live_qp, 0);
    free(out);
    free(in);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(eager_and_rendezvous),
        cmocka_unit_test(floods_both_ways),
        cmocka_unit_test(rendezvous_truncated_and_reused),
        cmocka_unit_test(rtr_failure_falls_back_to_tcp),
        cmocka_unit_test(connector_failure_reason_reaches_acceptor),
        cmocka_unit_test(broken_queue_pair_fails_connection),
        cmocka_unit_test(send_before_accept),
        cmocka_unit_test(many_connections),
        cmocka_unit_test(one_sided_fast_path),
        cmocka_unit_test(close_from_send_callback),
    };
    return cmocka_run_group_tests(tests, setup_group, NULL);
}
