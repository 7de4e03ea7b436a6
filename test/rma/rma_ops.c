/*
 * Every one-sided operation between an origin and a target, checked by
 * value:
 *  - keys: registration, packing, sending the packed key over pscom,
 *    generating the remote key; the error answers of these calls;
 *  - put and get (small, 1 MiB, empty), in order on one connection;
 *  - accumulate and get-accumulate for every datatype and operation of
 *    rt_apply, fetch-and-op for every one on one element, compare-and-swap
 *    of 1, 2, 4 and 8 bytes that swaps and that does not;
 *  - pscom_post_rma_write and pscom_post_rma_read (also truncated);
 *  - errors: a range outside the region, no key, and a region the target
 *    deregistered (puts are dropped there, get-like requests fail);
 *  - a region "everything" (NULL, 0) and its own callbacks;
 *  - the target callbacks ran exactly once per operation that reached
 *    them, with the request a callback expects.
 * Two processes over tcp or shm; with PSCOM_TEST_TRANSPORT=loop both sides
 * are sockets of one process.
 */
#include "rma_util.h"

#include <stdlib.h>
#include <string.h>

#define REGION    (4u << 20)
#define OFF_BIG   65536u
#define BIG       (1u << 20)
#define OFF_ACC   (2u << 20)
#define OFF_GACC  (OFF_ACC + 65536u)
#define OFF_FOP   (OFF_ACC + 2 * 65536u)
#define OFF_CAS   (3u << 20)
#define OFF_WRITE (OFF_CAS + 65536u)
#define OFF_ANY   (OFF_CAS + 2 * 65536u)
#define GONE_LEN  4096u
#define ACC_COUNT 16

enum { CMD_DEREGISTER = 1, CMD_COUNTS, CMD_DONE };

struct target {
    char *buf;
    pscom_memh_t memh, memh_any, memh_gone;
    rt_counts_t counts, counts_any, counts_gone;
};

/* How the origin reaches the target's control side. */
struct peer {
    pscom_connection_t *con;
    struct target *local; /* loop mode: the target object itself */
};

/* ---------------------------------------------------------------------- */
/* Target                                                                 */
/* ---------------------------------------------------------------------- */

static void target_setup(struct target *t, pscom_socket_t *sock)
{
    memset(t, 0, sizeof(*t));
    t->buf = aligned_alloc(4096, REGION);
    ITEST_ASSERT(t->buf, "out of memory");
    memset(t->buf, 0, REGION);
    ITEST_ASSERT_EQ(pscom_mem_register(sock, t->buf, REGION, &t->memh),
                    PSCOM_SUCCESS, "register the region");
    ITEST_ASSERT_EQ(pscom_mem_register(sock, NULL, 0, &t->memh_any),
                    PSCOM_SUCCESS, "register everything");
    ITEST_ASSERT_EQ(pscom_mem_register(NULL, t->buf, GONE_LEN, &t->memh_gone),
                    PSCOM_SUCCESS, "register the region to be dropped");
    rt_register_callbacks(t->memh, &t->counts);
    rt_register_callbacks(t->memh_any, &t->counts_any);
    rt_register_callbacks(t->memh_gone, &t->counts_gone);
}

static void target_send_keys(struct target *t, pscom_connection_t *con)
{
    rt_key_send(con, t->memh, t->buf);
    rt_key_send(con, t->memh_any, NULL);
    rt_key_send(con, t->memh_gone, t->buf);
}

static void target_deregister(struct target *t)
{
    ITEST_ASSERT_EQ(pscom_mem_deregister(t->memh_gone), PSCOM_SUCCESS,
                    "deregister");
    t->memh_gone = NULL;
}

/* Serve the origin's control messages until it is done. */
static void target_serve(struct target *t, pscom_connection_t *con)
{
    for (;;) {
        uint32_t cmd;
        uint64_t arg;
        itest_substep("waiting for a command");
        rt_ctl_recv(con, &cmd, &arg);
        switch (cmd) {
        case CMD_DEREGISTER:
            target_deregister(t);
            rt_ctl_send(con, CMD_DEREGISTER, 0);
            break;
        case CMD_COUNTS:
            for (int i = 0; i < PSCOM_RMA_OP_COUNT; i++) {
                rt_ctl_send(con, CMD_COUNTS, t->counts.n[i]);
                rt_ctl_send(con, CMD_COUNTS, t->counts_any.n[i]);
                rt_ctl_send(con, CMD_COUNTS, t->counts_gone.n[i]);
            }
            rt_ctl_send(con, CMD_COUNTS, t->counts.bad + t->counts_any.bad +
                                             t->counts_gone.bad);
            break;
        case CMD_DONE:
            return;
        default:
            ITEST_FAIL("unknown command %u", cmd);
        }
    }
}

/* ---------------------------------------------------------------------- */
/* Origin                                                                 */
/* ---------------------------------------------------------------------- */

struct origin {
    struct peer peer;
    pscom_connection_t *con;
    pscom_rkey_t key, key_any, key_gone;
    char *base; /* the region at the target */
    /* Operations that reached each region's callbacks. */
    unsigned long want[PSCOM_RMA_OP_COUNT], want_any[PSCOM_RMA_OP_COUNT];
};

static void peer_deregister(struct origin *o)
{
    if (o->peer.local) {
        target_deregister(o->peer.local);
        return;
    }
    uint32_t cmd;
    uint64_t arg;
    rt_ctl_send(o->con, CMD_DEREGISTER, 0);
    rt_ctl_recv(o->con, &cmd, &arg);
}

static void check_counts(struct origin *o)
{
    unsigned long n[PSCOM_RMA_OP_COUNT][3], bad;
    if (o->peer.local) {
        struct target *t = o->peer.local;
        for (int i = 0; i < PSCOM_RMA_OP_COUNT; i++) {
            n[i][0] = t->counts.n[i];
            n[i][1] = t->counts_any.n[i];
            n[i][2] = t->counts_gone.n[i];
        }
        bad = t->counts.bad + t->counts_any.bad + t->counts_gone.bad;
    } else {
        uint32_t cmd;
        uint64_t v;
        rt_ctl_send(o->con, CMD_COUNTS, 0);
        for (int i = 0; i < PSCOM_RMA_OP_COUNT; i++)
            for (int j = 0; j < 3; j++) {
                rt_ctl_recv(o->con, &cmd, &v);
                n[i][j] = v;
            }
        rt_ctl_recv(o->con, &cmd, &v);
        bad = v;
    }
    ITEST_ASSERT_EQ(bad, 0, "target callbacks that saw a malformed request");
    for (int i = 0; i < PSCOM_RMA_OP_COUNT; i++) {
        ITEST_ASSERT_EQ(n[i][0], o->want[i], "callbacks of operation %d", i);
        ITEST_ASSERT_EQ(n[i][1], o->want_any[i],
                        "callbacks of operation %d on region 'everything'", i);
        ITEST_ASSERT_EQ(n[i][2], 0,
                        "callbacks of operation %d on the dropped region", i);
    }
}

static rt_op_args_t args(struct origin *o, pscom_rma_op_t kind, size_t off,
                         void *origin, size_t len)
{
    return (rt_op_args_t){.kind = kind, .con = o->con, .rkey = o->key,
                          .target = o->base + off, .origin = origin,
                          .len = len};
}

/* One operation that must succeed. */
static void ok(struct origin *o, const rt_op_args_t *a, const char *what)
{
    pscom_req_state_t st = rt_do(a);
    if (!pscom_req_state_successful(st))
        ITEST_FAIL("%s: state %s", what, pscom_req_state_str(st));
    if (a->rkey == o->key_any)
        o->want_any[a->kind]++;
    else
        o->want[a->kind]++;
}

static void put(struct origin *o, size_t off, void *src, size_t len)
{
    rt_op_args_t a = args(o, PSCOM_RMA_PUT, off, src, len);
    ok(o, &a, "put");
}

static void get(struct origin *o, size_t off, void *dst, size_t len)
{
    rt_op_args_t a = args(o, PSCOM_RMA_GET, off, dst, len);
    ok(o, &a, "get");
}

static void reuse_done(pscom_request_t *req)
{
    (void)req;
}

static void test_put_get(struct origin *o)
{
    char small[100], back[100];
    itest_step("put and get");
    /* A put that frees itself (no io_done), then a get behind it on the
     * same connection must see its bytes. */
    itest_fill(small, sizeof(small), 1);
    rt_op_args_t a = args(o, PSCOM_RMA_PUT, 0, small, sizeof(small));
    rt_post(&a, NULL);
    o->want[PSCOM_RMA_PUT]++;
    get(o, 0, back, sizeof(back));
    ITEST_ASSERT_PATTERN(back, sizeof(back), 1, "small put read back");

    char *big = malloc(BIG), *bigback = itest_alloc_guarded(BIG);
    itest_fill(big, BIG, 2);
    put(o, OFF_BIG, big, BIG);
    get(o, OFF_BIG, bigback, BIG);
    ITEST_ASSERT_PATTERN(bigback, BIG, 2, "1 MiB put read back");
    ITEST_ASSERT_GUARD(bigback, BIG, "1 MiB get");
    free(big);
    free(bigback);

    put(o, 200, NULL, 0);
    get(o, 200, NULL, 0);

    /* One request posted again once done. */
    pscom_request_t *r = pscom_request_create(sizeof(pscom_xheader_rma_put_t), 0);
    r->connection = o->con;
    r->data_len = sizeof(small);
    r->rma.rkey = o->key;
    r->rma.origin_addr = small;
    r->rma.target_addr = o->base + 300;
    r->ops.io_done = reuse_done;
    for (int i = 0; i < 3; i++) {
        pscom_post_rma_put(r);
        pscom_wait(r);
        ITEST_ASSERT_REQ_OK(r, "put number %d of one request", i);
        o->want[PSCOM_RMA_PUT]++;
    }
    pscom_request_free(r);
    get(o, 300, back, sizeof(back));
    ITEST_ASSERT_PATTERN(back, sizeof(back), 1, "put of a reused request");
}

/* Wait until the target has handled every operation posted before: a
 * fetch-and-op (no-op) is answered in order after all of them. */
static void sync_target(struct origin *o, size_t off)
{
    uint64_t zero = 0, res;
    rt_op_args_t a = args(o, PSCOM_RMA_FETCH_AND_OP, off, &zero, 8);
    a.op = RT_NO_OP;
    a.dtype = RT_U64;
    a.result = &res;
    ok(o, &a, "fetch-and-op (no-op)");
}

/* Accumulate and get-accumulate of every type and operation, all in
 * flight at once; each slot: put a, operation with b; then get them all.
 * A plugin may move a get's bytes as soon as it is posted, before
 * accumulates still on their way have been applied (MPI leaves that
 * undefined too), so the gets wait for the target to have handled them. */
static void test_accumulate(struct origin *o, pscom_rma_op_t kind)
{
    enum { N = RT_DTYPE_COUNT * RT_OP_COUNT };
    static char a[N][ACC_COUNT * 8], b[N][ACC_COUNT * 8], res[N][ACC_COUNT * 8],
        back[N][ACC_COUNT * 8];
    size_t base = kind == PSCOM_RMA_ACCUMULATE ? OFF_ACC : OFF_GACC;

    itest_step("%s of every type and operation",
               kind == PSCOM_RMA_ACCUMULATE ? "accumulate" : "get-accumulate");
    for (unsigned d = 0; d < RT_DTYPE_COUNT; d++)
        for (unsigned op = 0; op < RT_OP_COUNT; op++) {
            if (!rt_op_valid(op, d)) continue;
            unsigned i = d * RT_OP_COUNT + op;
            size_t len = ACC_COUNT * rt_dtype_size(d), off = base + i * 256;
            rt_values(d, a[i], ACC_COUNT, i);
            rt_values(d, b[i], ACC_COUNT, i + 1);
            memset(res[i], 0x77, sizeof(res[i]));
            rt_op_args_t p = args(o, PSCOM_RMA_PUT, off, a[i], len);
            rt_op_args_t x = args(o, kind, off, b[i], len);
            x.result = res[i];
            x.op = op;
            x.dtype = d;
            rt_post(&p, NULL);
            rt_post(&x, NULL);
            o->want[PSCOM_RMA_PUT]++;
            o->want[kind]++;
        }
    /* The requests free themselves (no io_done). Answers come in order:
     * once the no-op is answered, every get-accumulate is. */
    sync_target(o, base);
    static pscom_request_t *gr[N];
    for (unsigned d = 0; d < RT_DTYPE_COUNT; d++)
        for (unsigned op = 0; op < RT_OP_COUNT; op++) {
            if (!rt_op_valid(op, d)) continue;
            unsigned i = d * RT_OP_COUNT + op;
            size_t len = ACC_COUNT * rt_dtype_size(d), off = base + i * 256;
            rt_op_args_t g = args(o, PSCOM_RMA_GET, off, back[i], len);
            gr[i] = rt_post(&g, reuse_done);
            o->want[PSCOM_RMA_GET]++;
        }
    for (unsigned i = 0; i < N; i++) {
        if (!gr[i]) continue;
        pscom_wait(gr[i]);
        ITEST_ASSERT_REQ_OK(gr[i], "get of slot %u", i);
        pscom_request_free(gr[i]);
        gr[i] = NULL;
    }

    for (unsigned d = 0; d < RT_DTYPE_COUNT; d++)
        for (unsigned op = 0; op < RT_OP_COUNT; op++) {
            if (!rt_op_valid(op, d)) continue;
            unsigned i = d * RT_OP_COUNT + op;
            size_t len = ACC_COUNT * rt_dtype_size(d);
            char want[ACC_COUNT * 8];
            memcpy(want, a[i], len);
            rt_apply(op, d, want, b[i], ACC_COUNT);
            ITEST_ASSERT(!memcmp(back[i], want, len), "%s %s %s: target "
                         "holds another result",
                         kind == PSCOM_RMA_ACCUMULATE ? "accumulate"
                                                      : "get-accumulate",
                         rt_dtype_name(d), rt_op_name(op));
            if (kind == PSCOM_RMA_GET_ACCUMULATE)
                ITEST_ASSERT(!memcmp(res[i], a[i], len),
                             "get-accumulate %s %s: the result is not the "
                             "old value", rt_dtype_name(d), rt_op_name(op));
        }
}

static void test_fetch_op(struct origin *o)
{
    itest_step("fetch-and-op of every type and operation");
    for (unsigned d = 0; d < RT_DTYPE_COUNT; d++)
        for (unsigned op = 0; op < RT_OP_COUNT; op++) {
            if (!rt_op_valid(op, d)) continue;
            unsigned i = d * RT_OP_COUNT + op;
            size_t es = rt_dtype_size(d), off = OFF_FOP + i * 16;
            char a[8], b[8], res[8], back[8], want[8];
            rt_values(d, a, 1, i + 5);
            rt_values(d, b, 1, i + 2);
            put(o, off, a, es);
            rt_op_args_t x = args(o, PSCOM_RMA_FETCH_AND_OP, off, b, es);
            x.result = res;
            x.op = op;
            x.dtype = d;
            ok(o, &x, "fetch-and-op");
            get(o, off, back, es);
            memcpy(want, a, es);
            rt_apply(op, d, want, b, 1);
            ITEST_ASSERT(!memcmp(res, a, es), "fetch-and-op %s %s: result",
                         rt_dtype_name(d), rt_op_name(op));
            ITEST_ASSERT(!memcmp(back, want, es), "fetch-and-op %s %s: target",
                         rt_dtype_name(d), rt_op_name(op));
        }
}

static void test_compare_swap(struct origin *o)
{
    itest_step("compare-and-swap");
    for (size_t es = 1; es <= 8; es *= 2) {
        size_t off = OFF_CAS + es * 64;
        uint64_t v = 0x1122334455667788ull, w = 0x99aabbccddeeff00ull,
                 z = 0x0102030405060708ull, res = 0, back = 0;
        put(o, off, &v, es);
        rt_op_args_t x = args(o, PSCOM_RMA_COMPARE_AND_SWAP, off, &w, es);
        x.compare = &v;
        x.result = &res;
        ok(o, &x, "compare-and-swap that swaps");
        ITEST_ASSERT(!memcmp(&res, &v, es), "%zu bytes: result is the old "
                     "value", es);
        get(o, off, &back, es);
        ITEST_ASSERT(!memcmp(&back, &w, es), "%zu bytes: swapped", es);

        res = 0;
        x.origin = &z; /* compare with v again: the target holds w now */
        ok(o, &x, "compare-and-swap that does not swap");
        ITEST_ASSERT(!memcmp(&res, &w, es), "%zu bytes: result", es);
        get(o, off, &back, es);
        ITEST_ASSERT(!memcmp(&back, &w, es), "%zu bytes: not swapped", es);
    }
}

static void test_write_read(struct origin *o)
{
    enum { LEN = 5000 };
    char out[LEN], in[LEN], part[100];
    itest_step("rma_write and rma_read");
    itest_fill(out, LEN, 9);

    pscom_request_t *w = itest_request(0);
    w->connection = o->con;
    w->xheader.rma_write.dest = o->base + OFF_WRITE;
    w->data = out;
    w->data_len = LEN;
    pscom_post_rma_write(w);
    pscom_wait(w);
    ITEST_ASSERT_REQ_OK(w, "rma_write");
    ITEST_ASSERT(w->state & PSCOM_REQ_STATE_RMA_WRITE_REQUEST, "write state");
    pscom_request_free(w);

    pscom_request_t *r = itest_request(0);
    r->connection = o->con;
    r->xheader.rma_read.src = o->base + OFF_WRITE;
    r->xheader.rma_read.src_len = LEN;
    r->data = in;
    r->data_len = LEN;
    pscom_post_rma_read(r);
    pscom_wait(r);
    ITEST_ASSERT_REQ_OK(r, "rma_read");
    ITEST_ASSERT(r->state & PSCOM_REQ_STATE_RMA_READ_REQUEST, "read state");
    ITEST_ASSERT_PATTERN(in, LEN, 9, "rma_read");

    r->data = part;
    r->data_len = sizeof(part);
    pscom_post_rma_read(r);
    pscom_wait(r);
    ITEST_ASSERT_REQ_STATE(r, PSCOM_REQ_STATE_TRUNCATED, "short rma_read");
    ITEST_ASSERT_PATTERN(part, sizeof(part), 9, "short rma_read");
    pscom_request_free(r);

    /* rma_write has no region and no callback: nothing to count. */
}

static void expect_error(struct origin *o, const rt_op_args_t *a,
                         const char *what)
{
    pscom_req_state_t st = rt_do(a);
    ITEST_ASSERT((st & PSCOM_REQ_STATE_ERROR) && (st & PSCOM_REQ_STATE_DONE),
                 "%s: state %s, expected an error", what,
                 pscom_req_state_str(st));
}

static void test_errors(struct origin *o)
{
    char buf[256];
    uint64_t v = 1, res;
    itest_step("errors");
    memset(buf, 0, sizeof(buf));

    rt_op_args_t a = args(o, PSCOM_RMA_PUT, REGION - 10, buf, 100);
    expect_error(o, &a, "put reaching past the region");
    a.kind = PSCOM_RMA_GET;
    expect_error(o, &a, "get reaching past the region");
    a = args(o, PSCOM_RMA_PUT, 0, buf, 10);
    a.rkey = NULL;
    expect_error(o, &a, "put without a key");

    /* The target drops a region: puts into it vanish, get-like requests
     * fail. The region 'everything' and the main one still work. (64-byte
     * operations: below the shm fast path's threshold in every run of this
     * test. A plugin that copies straight into the target's memory cannot
     * be refused while that memory stays mapped; doc/rma.md.) */
    peer_deregister(o);
    char before[GONE_LEN], after[GONE_LEN], junk[64];
    get(o, 0, before, GONE_LEN);
    memset(junk, 0xee, sizeof(junk));
    a = args(o, PSCOM_RMA_PUT, 0, junk, sizeof(junk));
    a.rkey = o->key_gone;
    ITEST_ASSERT(pscom_req_state_successful(rt_do(&a)),
                 "a put is complete once written, also when the target "
                 "drops it");
    a.kind = PSCOM_RMA_ACCUMULATE;
    ITEST_ASSERT(pscom_req_state_successful(rt_do(&a)), "accumulate");
    a.kind = PSCOM_RMA_GET;
    expect_error(o, &a, "get from a deregistered region");
    a.kind = PSCOM_RMA_GET_ACCUMULATE;
    a.result = junk;
    expect_error(o, &a, "get-accumulate on a deregistered region");
    a = args(o, PSCOM_RMA_FETCH_AND_OP, 0, &v, 8);
    a.rkey = o->key_gone;
    a.result = &res;
    a.dtype = RT_U64;
    expect_error(o, &a, "fetch-and-op on a deregistered region");
    a.kind = PSCOM_RMA_COMPARE_AND_SWAP;
    a.compare = &v;
    expect_error(o, &a, "compare-and-swap on a deregistered region");
    get(o, 0, after, GONE_LEN);
    ITEST_ASSERT(!memcmp(before, after, GONE_LEN),
                 "the dropped operations changed nothing");

    /* Keys and registration. */
    pscom_rkey_t k = (pscom_rkey_t)1;
    ITEST_ASSERT_EQ(pscom_rkey_generate(o->con, NULL, 0, &k), PSCOM_SUCCESS,
                    "a peer without memory");
    ITEST_ASSERT(k == NULL, "its key is NULL");
    memset(buf, 0x42, sizeof(buf));
    ITEST_ASSERT_EQ(pscom_rkey_generate(o->con, buf, 40, &k),
                    PSCOM_ERR_INVALID, "a buffer that is no packed key");
    ITEST_ASSERT_EQ(pscom_rkey_destroy(NULL), PSCOM_SUCCESS, "destroy NULL");
    pscom_memh_t m = (pscom_memh_t)1;
    ITEST_ASSERT_EQ(pscom_mem_register(NULL, NULL, 10, &m), PSCOM_ERR_INVALID,
                    "register 10 bytes at NULL");
    ITEST_ASSERT(m == NULL, "no handle");
    ITEST_ASSERT_EQ(pscom_mem_deregister(NULL), PSCOM_SUCCESS,
                    "deregister NULL");
    void *pk = (void *)1;
    size_t pklen = 1;
    ITEST_ASSERT_EQ(pscom_rkey_buffer_pack(&pk, &pklen, NULL),
                    PSCOM_ERR_INVALID, "pack NULL");
    pscom_rkey_buffer_release(NULL);
    pscom_register_rma_callbacks(NULL, NULL, PSCOM_RMA_PUT);
}

static void test_region_everything(struct origin *o)
{
    char out[64], in[64];
    itest_step("the region 'everything'");
    itest_fill(out, sizeof(out), 11);
    rt_op_args_t a = args(o, PSCOM_RMA_PUT, OFF_ANY, out, sizeof(out));
    a.rkey = o->key_any;
    ok(o, &a, "put through 'everything'");
    get(o, OFF_ANY, in, sizeof(in));
    ITEST_ASSERT_PATTERN(in, sizeof(in), 11, "put through 'everything'");
}

static void origin_run(struct origin *o)
{
    void *b;
    o->key = rt_key_recv(o->con, &b);
    o->base = b;
    o->key_any = rt_key_recv(o->con, NULL);
    o->key_gone = rt_key_recv(o->con, NULL);

    test_put_get(o);
    test_accumulate(o, PSCOM_RMA_ACCUMULATE);
    test_accumulate(o, PSCOM_RMA_GET_ACCUMULATE);
    test_fetch_op(o);
    test_compare_swap(o);
    test_write_read(o);
    test_region_everything(o);
    test_errors(o);
    itest_step("callback counts");
    check_counts(o);

    ITEST_ASSERT_EQ(pscom_rkey_destroy(o->key), PSCOM_SUCCESS, "destroy");
    ITEST_ASSERT_EQ(pscom_rkey_destroy(o->key_any), PSCOM_SUCCESS, "destroy");
    ITEST_ASSERT_EQ(pscom_rkey_destroy(o->key_gone), PSCOM_SUCCESS, "destroy");
}

/* ---------------------------------------------------------------------- */
/* Processes                                                              */
/* ---------------------------------------------------------------------- */

static int target_main(itest_link_t *link, void *arg)
{
    rt_mesh_t m;
    struct target t;
    rt_mesh_join(&m, link, 2, 0);
    target_setup(&t, m.sock);
    target_send_keys(&t, m.con[1]);
    target_serve(&t, m.con[1]);
    itest_step("done");
    pscom_mem_deregister(t.memh);
    pscom_mem_deregister(t.memh_any);
    pscom_close_socket(NULL);
    free(t.buf);
    return 0;
}

static int origin_main(itest_link_t *link, void *arg)
{
    rt_mesh_t m;
    struct origin o = {0};
    rt_mesh_join(&m, link, 2, 1);
    o.con = m.con[0];
    o.peer.con = o.con;
    origin_run(&o);
    rt_ctl_send(o.con, CMD_DONE, 0);
    pscom_close_socket(NULL);
    return 0;
}

static int loop_main(itest_link_t *link, void *arg)
{
    rt_mesh_t m[2];
    struct target t;
    struct origin o = {0};
    rt_mesh_local(m, 2);
    target_setup(&t, m[0].sock);
    target_send_keys(&t, m[0].con[1]);
    o.con = m[1].con[0];
    o.peer.local = &t;
    origin_run(&o);
    pscom_close_socket(NULL);
    return 0;
}

int main(void)
{
    itest_set_role("main");
    if (rt_loop_mode()) {
        itest_child_t c;
        itest_spawn(&c, "loop", loop_main, NULL);
        return itest_child_check(&c);
    }
    itest_child_t kids[2];
    itest_spawn(&kids[0], "target", target_main, NULL);
    itest_spawn(&kids[1], "origin", origin_main, NULL);
    rt_mesh_wire(kids, 2);
    itest_child_t *list[2] = {&kids[0], &kids[1]};
    return itest_children_check(list, 2);
}
