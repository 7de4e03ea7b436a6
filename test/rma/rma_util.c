/*
 * Helpers of the one-sided and group tests (rma_util.h).
 */
#include "rma_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------- */
/* Meshes                                                                 */
/* ---------------------------------------------------------------------- */

bool rt_loop_mode(void)
{
    return strcmp(itest_transport_name(), "loop") == 0;
}

void rt_init(void)
{
    static bool done;
    if (done) return;
    done = true;
    if (rt_loop_mode()) {
        pscom_err_t rc = pscom_init(PSCOM_VERSION);
        if (rc != PSCOM_SUCCESS)
            ITEST_FAIL("pscom_init returned %s", pscom_err_str(rc));
        return;
    }
    itest_pscom_init();
}

/* Every mesh member of this process, newest last (a socket of a closed
 * mesh may share the address of a newer one). */
#define MAX_MESHES 64
static rt_mesh_t *meshes[MAX_MESHES];
static int n_meshes;

static void on_accept(pscom_connection_t *con)
{
    for (int i = n_meshes - 1; i >= 0; i--) {
        rt_mesh_t *m = meshes[i];
        if (m->sock != con->socket) continue;
        int r = con->remote_con_info.rank;
        if (r < 0 || r >= m->n || r == m->me || m->con[r])
            ITEST_FAIL("accepted a connection from unexpected rank %d", r);
        m->con[r] = con;
        return;
    }
    ITEST_FAIL("accepted a connection on an unknown socket");
}

static void open_member(rt_mesh_t *m, int n, int me)
{
    char name[8];
    memset(m, 0, sizeof(*m));
    m->n = n;
    m->me = me;
    m->sock = pscom_open_socket(0, 0, me, 0);
    ITEST_ASSERT(m->sock, "pscom_open_socket");
    snprintf(name, sizeof(name), "r%d", me);
    pscom_socket_set_name(m->sock, name);
    if (!rt_loop_mode()) itest_apply_transport(m->sock);
    m->sock->ops.con_accept = on_accept;
    m->sock->ops.con_error = itest_on_con_error;
    ITEST_ASSERT_EQ(pscom_listen(m->sock, PSCOM_ANYPORT), PSCOM_SUCCESS,
                    "listen");
    ITEST_ASSERT(n_meshes < MAX_MESHES, "too many meshes");
    meshes[n_meshes++] = m;
}

static void connect_lower(rt_mesh_t *m, char **eps)
{
    for (int i = 0; i < m->me; i++) {
        pscom_connection_t *c = pscom_open_connection(m->sock);
        ITEST_ASSERT(c, "pscom_open_connection");
        pscom_err_t rc = pscom_connect(c, eps[i], i, PSCOM_CON_FLAG_DIRECT);
        ITEST_ASSERT_EQ(rc, PSCOM_SUCCESS, "connect r%d -> r%d", m->me, i);
        m->con[i] = c;
    }
}

static bool mesh_complete(rt_mesh_t *m)
{
    for (int i = 0; i < m->n; i++)
        if (i != m->me && !m->con[i]) return false;
    return true;
}

static void check_types(rt_mesh_t *m)
{
    static const struct {
        const char *name;
        pscom_con_type_t type;
    } types[] = {
        {"tcp", PSCOM_CON_TYPE_TCP},     {"shm", PSCOM_CON_TYPE_SHM},
        {"loop", PSCOM_CON_TYPE_LOOP},   {"ucx", PSCOM_CON_TYPE_UCP},
        {"ucp", PSCOM_CON_TYPE_UCP},     {"ofi", PSCOM_CON_TYPE_OFI},
        {"ofed", PSCOM_CON_TYPE_OFI},    {"verbs", PSCOM_CON_TYPE_OPENIB},
        {"openib", PSCOM_CON_TYPE_OPENIB},
    };
    pscom_con_type_t want = PSCOM_CON_TYPE_NONE;
    const char *t = itest_transport_name();
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
        if (!strcmp(t, types[i].name)) want = types[i].type;
    if (want == PSCOM_CON_TYPE_NONE) return; /* "any" */
    for (int i = 0; i < m->n; i++) {
        if (i == m->me) continue;
        ITEST_ASSERT(m->con[i]->type == want,
                     "r%d -> r%d runs on %s, expected %s", m->me, i,
                     pscom_con_type_str(m->con[i]->type),
                     pscom_con_type_str(want));
    }
}

void rt_mesh_join(rt_mesh_t *m, itest_link_t *link, int n, int me)
{
    char *eps[RT_MAX_PROCS];
    rt_init();
    open_member(m, n, me);
    char *ep = itest_ep_str(m->sock);
    itest_link_send_str(link, ep);
    free(ep);
    for (int i = 0; i < n; i++) eps[i] = itest_link_recv_str(link);
    itest_step("connecting the mesh of %d", n);
    connect_lower(m, eps);
    ITEST_PROGRESS_UNTIL(mesh_complete(m));
    check_types(m);
    for (int i = 0; i < n; i++) free(eps[i]);
    /* Everybody is connected before anybody starts. */
    itest_link_send_u64(link, 1);
    itest_link_recv_u64(link);
}

void rt_mesh_wire(itest_child_t *kids, int n)
{
    char *eps[RT_MAX_PROCS];
    for (int i = 0; i < n; i++) eps[i] = itest_link_recv_str(&kids[i].link);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) itest_link_send_str(&kids[i].link, eps[j]);
    for (int i = 0; i < n; i++) itest_link_recv_u64(&kids[i].link);
    for (int i = 0; i < n; i++) itest_link_send_u64(&kids[i].link, 1);
    for (int i = 0; i < n; i++) free(eps[i]);
}

void rt_mesh_local(rt_mesh_t *m, int n)
{
    char *eps[RT_MAX_PROCS];
    rt_init();
    for (int i = 0; i < n; i++) {
        open_member(&m[i], n, i);
        eps[i] = itest_ep_str(m[i].sock);
    }
    for (int i = 0; i < n; i++) connect_lower(&m[i], eps);
    for (int i = 0; i < n; i++) {
        ITEST_PROGRESS_UNTIL(mesh_complete(&m[i]));
        check_types(&m[i]);
    }
    for (int i = 0; i < n; i++) free(eps[i]);
}

/* ---------------------------------------------------------------------- */
/* Arithmetic                                                             */
/* ---------------------------------------------------------------------- */

static const size_t dsize[RT_DTYPE_COUNT] = {1, 2, 4, 8, 1, 2, 4, 8, 4, 8};
static const char *const dname[RT_DTYPE_COUNT] = {
    "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
    "uint64", "float", "double"};
static const char *const oname[RT_OP_COUNT] = {
    "SUM", "PROD", "MIN", "MAX", "BAND", "BOR", "BXOR", "LAND", "LOR",
    "LXOR", "REPLACE", "NO_OP"};

size_t rt_dtype_size(unsigned dtype)
{
    return dtype < RT_DTYPE_COUNT ? dsize[dtype] : 0;
}

const char *rt_dtype_name(unsigned dtype)
{
    return dtype < RT_DTYPE_COUNT ? dname[dtype] : "?";
}

const char *rt_op_name(unsigned op)
{
    return op < RT_OP_COUNT ? oname[op] : "?";
}

bool rt_op_valid(unsigned op, unsigned dtype)
{
    bool fp = dtype == RT_F32 || dtype == RT_F64;
    return !(fp && (op == RT_BAND || op == RT_BOR || op == RT_BXOR));
}

#define APPLY_ARITH(T)                                                         \
    do {                                                                       \
        T *d = dst;                                                            \
        const T *s = src;                                                      \
        for (size_t i = 0; i < count; i++) {                                   \
            switch (op) {                                                      \
            case RT_SUM: d[i] = (T)(d[i] + s[i]); break;                       \
            case RT_PROD: d[i] = (T)(d[i] * s[i]); break;                      \
            case RT_MIN: d[i] = s[i] < d[i] ? s[i] : d[i]; break;              \
            case RT_MAX: d[i] = s[i] > d[i] ? s[i] : d[i]; break;              \
            case RT_LAND: d[i] = (T)(d[i] && s[i]); break;                     \
            case RT_LOR: d[i] = (T)(d[i] || s[i]); break;                      \
            case RT_LXOR: d[i] = (T)(!d[i] != !s[i]); break;                   \
            case RT_REPLACE: d[i] = s[i]; break;                               \
            case RT_NO_OP: break;                                              \
            default: BITS(T);                                                  \
            }                                                                  \
        }                                                                      \
    } while (0)

#define BITS_INT(T)                                                            \
    do {                                                                       \
        if (op == RT_BAND) d[i] = (T)(d[i] & s[i]);                            \
        if (op == RT_BOR) d[i] = (T)(d[i] | s[i]);                             \
        if (op == RT_BXOR) d[i] = (T)(d[i] ^ s[i]);                            \
    } while (0)
#define BITS_NONE(T)                                                           \
    do {                                                                       \
    } while (0)

void rt_apply(unsigned op, unsigned dtype, void *dst, const void *src,
              size_t count)
{
#define BITS BITS_INT
    switch (dtype) {
    case RT_I8: APPLY_ARITH(int8_t); return;
    case RT_I16: APPLY_ARITH(int16_t); return;
    case RT_I32: APPLY_ARITH(int32_t); return;
    case RT_I64: APPLY_ARITH(int64_t); return;
    case RT_U8: APPLY_ARITH(uint8_t); return;
    case RT_U16: APPLY_ARITH(uint16_t); return;
    case RT_U32: APPLY_ARITH(uint32_t); return;
    case RT_U64: APPLY_ARITH(uint64_t); return;
    }
#undef BITS
#define BITS BITS_NONE
    switch (dtype) {
    case RT_F32: APPLY_ARITH(float); return;
    case RT_F64: APPLY_ARITH(double); return;
    }
#undef BITS
}

void rt_values(unsigned dtype, void *buf, size_t count, unsigned seed)
{
    for (size_t i = 0; i < count; i++) {
        /* 0..5: products of a few stay small; some zeros for LAND/LOR. */
        int v = (int)((i * 7 + seed * 13 + 3) % 6);
        switch (dtype) {
        case RT_I8: ((int8_t *)buf)[i] = (int8_t)(v - 2); break;
        case RT_I16: ((int16_t *)buf)[i] = (int16_t)(v - 2); break;
        case RT_I32: ((int32_t *)buf)[i] = v - 2; break;
        case RT_I64: ((int64_t *)buf)[i] = v - 2; break;
        case RT_U8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
        case RT_U16: ((uint16_t *)buf)[i] = (uint16_t)v; break;
        case RT_U32: ((uint32_t *)buf)[i] = (uint32_t)v; break;
        case RT_U64: ((uint64_t *)buf)[i] = (uint64_t)v; break;
        case RT_F32: ((float *)buf)[i] = (float)v * 0.5f; break;
        case RT_F64: ((double *)buf)[i] = (double)v * 0.25; break;
        }
    }
}

/* ---------------------------------------------------------------------- */
/* Target callbacks                                                       */
/* ---------------------------------------------------------------------- */

/* The callbacks find their counters through the region handle. */
#define RT_MAX_REGIONS 16
static struct {
    pscom_memh_t memh;
    rt_counts_t *counts;
} regions[RT_MAX_REGIONS];

static rt_counts_t *counts_of(pscom_memh_t memh)
{
    for (int i = 0; i < RT_MAX_REGIONS; i++)
        if (regions[i].memh == memh) return regions[i].counts;
    return NULL;
}

/* What every target request must look like. */
static rt_counts_t *target_check(pscom_request_t *req, pscom_rma_op_t kind,
                                 void *memh)
{
    rt_counts_t *c = counts_of(memh);
    if (!c) {
        itest_note("target callback %d with an unknown region handle %p",
                   (int)kind, memh);
        abort();
    }
    if (!(req->state & PSCOM_REQ_STATE_PASSIVE_SIDE) || !req->connection)
        c->bad++;
    c->n[kind]++;
    return c;
}

static void cb_put(pscom_request_t *req)
{
    target_check(req, PSCOM_RMA_PUT, req->xheader.rma_put.common.memh);
}

static void cb_get(pscom_request_t *req)
{
    target_check(req, PSCOM_RMA_GET, req->xheader.rma_get.common.memh);
}

static void cb_acc(pscom_request_t *req)
{
    rt_counts_t *c = target_check(req, PSCOM_RMA_ACCUMULATE,
                                  req->xheader.rma_accumulate.common.memh);
    struct rt_user *u = &req->xheader.rma_accumulate.user;
    size_t es = rt_dtype_size(u->dtype);
    if (!es || req->data_len % es) {
        c->bad++;
        return;
    }
    rt_apply(u->op, u->dtype, req->xheader.rma_accumulate.common.dest,
             req->data, req->data_len / es);
}

static void cb_gacc(pscom_request_t *req)
{
    rt_counts_t *c = target_check(req, PSCOM_RMA_GET_ACCUMULATE,
                                  req->xheader.rma_get_accumulate.common.memh);
    struct rt_user *u = &req->xheader.rma_get_accumulate.user;
    size_t es = rt_dtype_size(u->dtype);
    if (!es || req->data_len % es) {
        c->bad++;
        return;
    }
    rt_apply(u->op, u->dtype, req->xheader.rma_get_accumulate.common.src,
             req->data, req->data_len / es);
}

static void cb_fop(pscom_request_t *req)
{
    rt_counts_t *c = target_check(req, PSCOM_RMA_FETCH_AND_OP,
                                  req->xheader.rma_fetch_op.common.memh);
    struct rt_user *u = &req->xheader.rma_fetch_op.user;
    size_t es = rt_dtype_size(u->dtype);
    if (!es || req->data_len != es) {
        c->bad++;
        return;
    }
    rt_apply(u->op, u->dtype, req->xheader.rma_fetch_op.common.src, req->data,
             1);
}

static void cb_cas(pscom_request_t *req)
{
    target_check(req, PSCOM_RMA_COMPARE_AND_SWAP,
                 req->xheader.rma_compare_swap.common.memh);
}

void rt_register_callbacks(pscom_memh_t memh, rt_counts_t *counts)
{
    int i = 0;
    while (i < RT_MAX_REGIONS && regions[i].memh && regions[i].memh != memh) i++;
    ITEST_ASSERT(i < RT_MAX_REGIONS, "too many regions");
    regions[i].memh = memh;
    regions[i].counts = counts;
    *counts = (rt_counts_t){0};
    pscom_register_rma_callbacks(cb_put, memh, PSCOM_RMA_PUT);
    pscom_register_rma_callbacks(cb_get, memh, PSCOM_RMA_GET);
    pscom_register_rma_callbacks(cb_acc, memh, PSCOM_RMA_ACCUMULATE);
    pscom_register_rma_callbacks(cb_gacc, memh, PSCOM_RMA_GET_ACCUMULATE);
    pscom_register_rma_callbacks(cb_fop, memh, PSCOM_RMA_FETCH_AND_OP);
    pscom_register_rma_callbacks(cb_cas, memh, PSCOM_RMA_COMPARE_AND_SWAP);
}

/* ---------------------------------------------------------------------- */
/* Origin                                                                 */
/* ---------------------------------------------------------------------- */

pscom_request_t *rt_post(const rt_op_args_t *a,
                         void (*done)(pscom_request_t *req))
{
    pscom_request_t *r;
    struct rt_user u = {.op = a->op, .dtype = a->dtype,
                        .origin = a->origin_rank};
    switch (a->kind) {
    case PSCOM_RMA_PUT:
        r = pscom_request_create(sizeof(pscom_xheader_rma_put_t), 0);
        r->xheader.rma_put.user = u;
        break;
    case PSCOM_RMA_GET:
        r = pscom_request_create(sizeof(pscom_xheader_rma_get_t), 0);
        r->xheader.rma_get.user = u;
        break;
    case PSCOM_RMA_ACCUMULATE:
        r = pscom_request_create(sizeof(pscom_xheader_rma_accumulate_t), 0);
        r->xheader.rma_accumulate.user = u;
        break;
    case PSCOM_RMA_GET_ACCUMULATE:
        r = pscom_request_create(sizeof(pscom_xheader_rma_get_accumulate_t),
                                 0);
        r->xheader.rma_get_accumulate.user = u;
        break;
    case PSCOM_RMA_FETCH_AND_OP:
        r = pscom_request_create(sizeof(pscom_xheader_rma_fetch_op_t), 0);
        r->xheader.rma_fetch_op.user = u;
        break;
    default:
        r = pscom_request_create(sizeof(pscom_xheader_rma_compare_swap_t), 0);
        r->xheader.rma_compare_swap.user = u;
        break;
    }
    ITEST_ASSERT(r, "pscom_request_create");
    /* As ParaStation MPI: xheader_len stays as pscom_request_create left it. */
    r->connection = a->con;
    r->data_len = a->len;
    r->rma.rkey = a->rkey;
    r->rma.target_addr = a->target;
    r->rma.origin_addr = a->origin;
    r->rma.result_addr = a->result;
    r->rma.compare_addr = a->compare;
    r->ops.io_done = done;
    switch (a->kind) {
    case PSCOM_RMA_PUT: pscom_post_rma_put(r); break;
    case PSCOM_RMA_GET: pscom_post_rma_get(r); break;
    case PSCOM_RMA_ACCUMULATE: pscom_post_rma_accumulate(r); break;
    case PSCOM_RMA_GET_ACCUMULATE: pscom_post_rma_get_accumulate(r); break;
    case PSCOM_RMA_FETCH_AND_OP: pscom_post_rma_fetch_op(r); break;
    default: pscom_post_rma_compare_swap(r); break;
    }
    return r;
}

static void noop_done(pscom_request_t *req)
{
    (void)req;
}

pscom_req_state_t rt_do(const rt_op_args_t *a)
{
    pscom_request_t *r = rt_post(a, noop_done);
    pscom_wait(r);
    pscom_req_state_t st = r->state;
    pscom_request_free(r);
    return st;
}

struct ctl {
    uint32_t cmd;
    uint32_t pad;
    uint64_t arg;
};

void rt_ctl_send(pscom_connection_t *con, uint32_t cmd, uint64_t arg)
{
    struct ctl c = {.cmd = cmd, .arg = arg};
    pscom_send(con, &c, sizeof(c), NULL, 0);
}

void rt_ctl_recv(pscom_connection_t *con, uint32_t *cmd, uint64_t *arg)
{
    struct ctl c;
    pscom_err_t rc = pscom_recv_from(con, &c, sizeof(c), NULL, 0);
    ITEST_ASSERT_EQ(rc, PSCOM_SUCCESS, "control message");
    *cmd = c.cmd;
    *arg = c.arg;
}

struct keymsg {
    uint64_t base;
    uint64_t len;
};

void rt_key_send(pscom_connection_t *con, pscom_memh_t memh, void *base)
{
    void *buf = NULL;
    size_t len = 0;
    pscom_err_t rc = pscom_rkey_buffer_pack(&buf, &len, memh);
    ITEST_ASSERT_EQ(rc, PSCOM_SUCCESS, "pscom_rkey_buffer_pack");
    ITEST_ASSERT(buf && len, "a packed key");
    struct keymsg k = {.base = (uint64_t)(uintptr_t)base, .len = len};
    pscom_send(con, &k, sizeof(k), buf, len);
    pscom_rkey_buffer_release(buf);
}

pscom_rkey_t rt_key_recv(pscom_connection_t *con, void **target_base)
{
    char buf[1024];
    struct keymsg k;
    pscom_request_t *r = itest_request(sizeof(k));
    r->connection = con;
    r->xheader_len = sizeof(k);
    r->data = buf;
    r->data_len = sizeof(buf);
    pscom_post_recv(r);
    pscom_wait(r);
    ITEST_ASSERT_REQ_OK(r, "packed key");
    memcpy(&k, &r->xheader.user, sizeof(k));
    ITEST_ASSERT_EQ(r->header.data_len, k.len, "packed key length");
    pscom_request_free(r);
    pscom_rkey_t key = NULL;
    pscom_err_t rc = pscom_rkey_generate(con, buf, k.len, &key);
    ITEST_ASSERT_EQ(rc, PSCOM_SUCCESS, "pscom_rkey_generate");
    ITEST_ASSERT(key, "a remote key");
    if (target_base) *target_base = (void *)(uintptr_t)k.base;
    return key;
}
