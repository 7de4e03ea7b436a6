/*
 * The verbs plugin's glue (plugins/verbs/verbs_plugin.c) against the fake
 * HCA and a stand-in for the core's services: the descriptor, init without
 * a device (the "no RDMA device" path), device and port selection (iWARP
 * devices skipped, InfiniBand before RoCE, the RoCE v2 GID), the fork
 * policy, the handshake between two connections, a failing INIT->RTR that
 * makes hs_connect fail (so the core tries the next plugin), malformed
 * wire-up blobs from the network, one-sided operations, and that aborting
 * or destroying releases every verbs object.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "fake_core_common.h"
#include "fake_verbs.h"
#include "pscom_plugin.h"
#include "wireup.h"

extern const pscom_plugin_t pscom_plugin_verbs;
static const pscom_plugin_ops_t *ops;

/* ---------------------------------------------------------------------- */
/* The core's services, as far as init and the handshake use them         */
/* (configuration, logging and descriptors: test/fake_core)               */
/* ---------------------------------------------------------------------- */

static char rows_seen[2048];

static void see_row(const pscom_config_row_t *r)
{
    size_t off = strlen(rows_seen);
    snprintf(rows_seen + off, sizeof(rows_seen) - off, "%s(%s) ", r->name,
             r->parent ? r->parent : "");
}

const char *pscom_plugin_con_str(pscom_plugin_con_t *con)
{
    return "test <-> peer [verbs]";
}

int pscom_plugin_tx_peek(pscom_plugin_con_t *con, struct iovec *iov,
                         int iov_max, size_t *total)
{
    *total = 0;
    return 0;
}

int pscom_plugin_tx_done(pscom_plugin_con_t *con, size_t n)
{
    return 0;
}

int pscom_plugin_rx_push(pscom_plugin_con_t *con, const void *buf, size_t len)
{
    return 0;
}

static int errors_reported;

void pscom_plugin_con_error(pscom_plugin_con_t *con, pscom_op_t op,
                            pscom_err_t err, const char *what, int sys_errno)
{
    errors_reported++;
}

/* pscom_plugin_rma_done calls, with the connection errors reported before
 * each. */
static struct {
    void *token;
    int err;
    int errors_before;
} done[64];
static int ndone;

void pscom_plugin_rma_done(void *token, int err)
{
    assert_true(ndone < 64);
    done[ndone].token = token;
    done[ndone].err = err;
    done[ndone].errors_before = errors_reported;
    ndone++;
}

/* ---------------------------------------------------------------------- */

static int setup(void **state)
{
    fake_reset();
    fake_core_reset();
    fake_core_log_level = 6;
    fake_core_row_hook = see_row;
    rows_seen[0] = 0;
    errors_reported = 0;
    ndone = 0;
    unsetenv("PSP_VERBS_HCA");
    unsetenv("PSP_VERBS_RMA");
    unsetenv("PSP_VERBS_FORK");
    unsetenv("PSP_VERBS_CQ_SIZE");
    unsetenv("PSP_VERBS_MCACHE_SIZE");
    unsetenv("PSP_VERBS_GID_INDEX");
    ops = pscom_plugin_verbs.ops;
    return 0;
}

static void all_released(void)
{
    assert_int_equal(fake_stats.live_qp, 0);
    assert_int_equal(fake_stats.live_mr, 0);
    assert_int_equal(fake_stats.live_cq, 0);
    assert_int_equal(fake_stats.live_pd, 0);
    assert_int_equal(fake_stats.live_ctx, 0);
}

static void descriptor(void **state)
{
    const pscom_plugin_t *d = &pscom_plugin_verbs;
    assert_int_equal(d->api_version, PSCOM_PLUGIN_API_VERSION);
    assert_string_equal(d->name, "verbs");
    assert_string_equal(d->alias, "openib");
    assert_int_equal(d->con_type, PSCOM_CON_TYPE_OPENIB);
    assert_int_equal(d->priority, 50);
    assert_true(d->con_priv_size > 0);
    assert_non_null(d->rendezvous);
    assert_int_equal(d->fds_per_con, 1);
    assert_non_null(d->ops->hs_start);
    assert_non_null(d->ops->hs_connect);
    assert_non_null(d->ops->open);
    assert_non_null(d->ops->close);
    assert_non_null(d->ops->tx_kick);
    assert_non_null(d->ops->rndv_describe);
    assert_non_null(d->ops->rndv_pull);
}

static void no_device(void **state)
{
    fake_cfg.ndev = 0;
    assert_int_equal(ops->init(), -ENODEV);
    assert_non_null(strstr(fake_core_log, "verbs: no RDMA device found "
                                   "(ibv_get_device_list returned 0 devices)"));
    assert_string_equal(fake_core_reason, "no RDMA device found");
    /* The settings are registered even so (pscom_info -c lists them). */
    const char *rows[] = {"PSP_VERBS_HCA(", "PSP_VERBS_PORT(",
                          "PSP_VERBS_GID_INDEX(", "PSP_VERBS_MCACHE_SIZE(",
                          "PSP_VERBS_RENDEZVOUS(PSP_RENDEZVOUS)",
                          "PSP_VERBS_RECVQ_SIZE(", "PSP_VERBS_SENDQ_SIZE(",
                          "PSP_VERBS_FORK("};
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
        if (!strstr(rows_seen, rows[i])) fail_msg("row %s missing", rows[i]);
    all_released();
}

static void no_device_list(void **state)
{
    /* Without kernel support the list is NULL with errno set. */
    fake_cfg.ndev = 0;
    fake_cfg.list_errno = ENOSYS;
    assert_int_equal(ops->init(), -ENODEV);
    assert_non_null(strstr(fake_core_log, "verbs: no RDMA device found"));
    assert_non_null(strstr(fake_core_log, strerror(ENOSYS)));
    all_released();
}

static void named_device_missing(void **state)
{
    fake_cfg.ndev = 2;
    setenv("PSP_VERBS_HCA", "mlx5_9", 1);
    assert_int_equal(ops->init(), -ENODEV);
    assert_non_null(strstr(fake_core_log, "PSP_VERBS_HCA=mlx5_9"));
    assert_non_null(strstr(fake_core_log, "fake0, fake1"));
    unsetenv("PSP_VERBS_HCA");
    all_released();
}

static void named_device_chosen(void **state)
{
    fake_cfg.ndev = 2;
    setenv("PSP_VERBS_HCA", "fake1", 1);
    assert_int_equal(ops->init(), 0);
    assert_non_null(strstr(fake_core_log, "using fake1 port 1"));
    ops->destroy();
    unsetenv("PSP_VERBS_HCA");
    all_released();
}

static void port_down(void **state)
{
    fake_cfg.port_state = IBV_PORT_DOWN;
    assert_int_equal(ops->init(), -ENETDOWN);
    assert_non_null(strstr(fake_core_log, "no usable active port"));
    all_released();
}

static void iwarp_device_skipped(void **state)
{
    fake_cfg.ndev = 2;
    fake_cfg.dev_transport[0] = IBV_TRANSPORT_IWARP;
    assert_int_equal(ops->init(), 0);
    assert_non_null(strstr(fake_core_log, "using fake1 port 1"));
    assert_non_null(strstr(fake_core_log, "skipping fake0: its transport is "
                                          "iWARP"));
    ops->destroy();
    all_released();
}

static void only_iwarp_devices(void **state)
{
    fake_cfg.ndev = 2;
    fake_cfg.dev_transport[0] = IBV_TRANSPORT_IWARP;
    fake_cfg.dev_transport[1] = IBV_TRANSPORT_IWARP;
    assert_int_equal(ops->init(), -ENODEV);
    assert_string_equal(fake_core_reason, "no InfiniBand or RoCE device found "
                                          "(iWARP and other RDMA devices are "
                                          "not supported)");
    all_released();

    /* Named, too. */
    fake_reset();
    fake_core_reset();
    fake_cfg.ndev = 2;
    fake_cfg.dev_transport[1] = IBV_TRANSPORT_IWARP;
    setenv("PSP_VERBS_HCA", "fake1", 1);
    assert_int_equal(ops->init(), -ENODEV);
    assert_non_null(strstr(fake_core_log, "skipping fake1"));
    assert_non_null(strstr(fake_core_reason, "no InfiniBand or RoCE device"));
    unsetenv("PSP_VERBS_HCA");
    all_released();
}

static void infiniband_before_roce(void **state)
{
    /* A RoCE device listed first, an InfiniBand one second. */
    fake_cfg.ndev = 2;
    fake_cfg.dev_link_layer[0] = IBV_LINK_LAYER_ETHERNET;
    fake_cfg.dev_link_layer[1] = IBV_LINK_LAYER_INFINIBAND;
    assert_int_equal(ops->init(), 0);
    assert_non_null(strstr(fake_core_log, "using fake1 port 1 (InfiniBand"));
    ops->destroy();
    all_released();

    /* RoCE only: the first RoCE port. */
    fake_core_reset();
    fake_cfg.dev_link_layer[1] = IBV_LINK_LAYER_ETHERNET;
    assert_int_equal(ops->init(), 0);
    assert_non_null(strstr(fake_core_log, "using fake0 port 1 (Ethernet"));
    ops->destroy();
    all_released();
}

static void fork_policy(void **state)
{
    setenv("PSP_VERBS_FORK", "1", 1);
    assert_int_equal(ops->init(), 0);
    assert_int_equal(fake_stats.fork_init, 1);
    ops->destroy();

    /* Kernels with copy-on-fork need no ibv_fork_init. */
    fake_reset();
    fake_cfg.fork_status = IBV_FORK_UNNEEDED;
    assert_int_equal(ops->init(), 0);
    assert_int_equal(fake_stats.fork_init, 0);
    ops->destroy();

    /* Off by default. */
    unsetenv("PSP_VERBS_FORK");
    fake_reset();
    assert_int_equal(ops->init(), 0);
    assert_int_equal(fake_stats.fork_init, 0);
    ops->destroy();
    all_released();
}

/* Two connections of this process, handshaken against each other the way
 * precon.c does it: connector hs_start, acceptor hs_start + hs_connect,
 * connector hs_connect. */
struct pair {
    void *a, *b;
    uint8_t blob_a[4096], blob_b[4096];
    size_t len_a, len_b;
};

static int con_a, con_b; /* their addresses stand for core connections */

static void pair_start(struct pair *p)
{
    p->a = calloc(1, pscom_plugin_verbs.con_priv_size);
    p->b = calloc(1, pscom_plugin_verbs.con_priv_size);
    p->len_a = sizeof(p->blob_a);
    p->len_b = sizeof(p->blob_b);
    assert_int_equal(ops->hs_start((pscom_plugin_con_t *)&con_a, p->a,
                                   p->blob_a, &p->len_a), 0);
    assert_int_equal(p->len_a, VB_WIREUP_LEN);
    assert_int_equal(ops->hs_start((pscom_plugin_con_t *)&con_b, p->b,
                                   p->blob_b, &p->len_b), 0);
}

static void pair_abort(struct pair *p)
{
    ops->hs_abort((pscom_plugin_con_t *)&con_a, p->a);
    ops->hs_abort((pscom_plugin_con_t *)&con_b, p->b);
    free(p->a);
    free(p->b);
}

static void handshake(void **state)
{
    assert_int_equal(ops->init(), 0);
    struct pair p;
    pair_start(&p);
    assert_int_equal(ops->hs_connect((pscom_plugin_con_t *)&con_b, p.b,
                                     p.blob_a, p.len_a), 0);
    assert_int_equal(ops->hs_connect((pscom_plugin_con_t *)&con_a, p.a,
                                     p.blob_b, p.len_b), 0);
    /* Each QP: INIT at hs_start, RTR and RTS at hs_connect, each with
     * its full mask. */
    int inits = 0, rtrs = 0, rtss = 0;
    for (int i = 0; i < fake_stats.nmodify; i++) {
        const struct fake_modify *m = &fake_stats.modify[i];
        if (m->attr.qp_state == IBV_QPS_INIT) inits++;
        if (m->attr.qp_state == IBV_QPS_RTR) rtrs++;
        if (m->attr.qp_state == IBV_QPS_RTS) rtss++;
    }
    assert_int_equal(inits, 2);
    assert_int_equal(rtrs, 2);
    assert_int_equal(rtss, 2);
    assert_int_equal(fake_stats.bad_transition, 0);
    /* The two QPs point at each other. */
    vb_wireup_t wa, wb;
    assert_int_equal(vb_wireup_decode(p.blob_a, p.len_a, &wa), 0);
    assert_int_equal(vb_wireup_decode(p.blob_b, p.len_b, &wb), 0);
    for (int i = 0; i < fake_stats.nmodify; i++) {
        const struct fake_modify *m = &fake_stats.modify[i];
        if (m->attr.qp_state != IBV_QPS_RTR) continue;
        assert_int_equal(m->attr.dest_qp_num, m->qpn == wa.qpn ? wb.qpn : wa.qpn);
        assert_int_equal(m->attr.rq_psn, m->qpn == wa.qpn ? wb.psn : wa.psn);
    }
    pair_abort(&p);
    ops->destroy();
    all_released();
}

/* The GID index the queue pairs route by (INIT->RTR of a handshake), and
 * that the blob carries that entry's GID. */
static int routed_gid_index(void)
{
    assert_int_equal(ops->init(), 0);
    struct pair p;
    pair_start(&p);
    assert_int_equal(ops->hs_connect((pscom_plugin_con_t *)&con_b, p.b,
                                     p.blob_a, p.len_a), 0);
    int index = -1;
    for (int i = 0; i < fake_stats.nmodify; i++) {
        const struct fake_modify *m = &fake_stats.modify[i];
        if (m->attr.qp_state != IBV_QPS_RTR) continue;
        assert_true(m->attr.ah_attr.is_global);
        index = m->attr.ah_attr.grh.sgid_index;
    }
    vb_wireup_t w;
    assert_int_equal(vb_wireup_decode(p.blob_a, p.len_a, &w), 0);
    assert_in_range(index, 0, FAKE_GID_MAX - 1);
    assert_memory_equal(w.gid, fake_cfg.gid[index].raw, 16);
    pair_abort(&p);
    ops->destroy();
    all_released();
    fake_stats.nmodify = 0;
    return index;
}

static void set_gid(int i, const char *kind, int type)
{
    struct fake_gid *g = &fake_cfg.gid[i];
    memset(g, 0, sizeof(*g));
    if (!strcmp(kind, "ipv4")) { /* ::ffff:10.0.0.7 */
        g->raw[10] = g->raw[11] = 0xff;
        g->raw[12] = 10;
        g->raw[15] = 7;
    } else { /* fe80::7 */
        g->raw[0] = 0xfe;
        g->raw[1] = 0x80;
        g->raw[15] = 7;
    }
    g->type = type;
}

static void roce_v2_gid_chosen(void **state)
{
    /* The table of an mlx5 RoCE port: v1 and v2 of the link-local address,
     * then v1 and v2 of the IPv4 address. */
    fake_cfg.link_layer = IBV_LINK_LAYER_ETHERNET;
    fake_cfg.ngid = 4;
    set_gid(0, "ipv6", IBV_GID_TYPE_ROCE_V1);
    set_gid(1, "ipv6", IBV_GID_TYPE_ROCE_V2);
    set_gid(2, "ipv4", IBV_GID_TYPE_ROCE_V1);
    set_gid(3, "ipv4", IBV_GID_TYPE_ROCE_V2);
    assert_int_equal(routed_gid_index(), 3);
    assert_non_null(strstr(fake_core_log, "GID index 3 (RoCE v2, IPv4)"));

    /* No IPv4 entry: the first v2 one. */
    fake_cfg.ngid = 2;
    assert_int_equal(routed_gid_index(), 1);

    /* No v2 entry: 0. */
    fake_cfg.ngid = 1;
    assert_int_equal(routed_gid_index(), 0);

    /* An explicit index wins, 0 included. */
    fake_cfg.ngid = 4;
    setenv("PSP_VERBS_GID_INDEX", "2", 1);
    assert_int_equal(routed_gid_index(), 2);
    setenv("PSP_VERBS_GID_INDEX", "0", 1);
    assert_int_equal(routed_gid_index(), 0);
    unsetenv("PSP_VERBS_GID_INDEX");
}

static void rtr_failure_fails_hs_connect(void **state)
{
    assert_int_equal(ops->init(), 0);
    struct pair p;
    pair_start(&p);
    fake_cfg.fail_state = IBV_QPS_RTR;
    fake_cfg.fail_errno = EINVAL;
    int rc = ops->hs_connect((pscom_plugin_con_t *)&con_b, p.b, p.blob_a,
                             p.len_a);
    assert_int_equal(rc, -EINVAL);
    assert_non_null(strstr(fake_core_log, "INIT->RTR failed"));
    /* The core aborts both ends and tries the next plugin. */
    pair_abort(&p);
    ops->destroy();
    all_released();
}

static void malformed_blobs(void **state)
{
    assert_int_equal(ops->init(), 0);
    struct pair p;
    pair_start(&p);
    /* Every truncation. */
    for (size_t len = 0; len < p.len_a; len++) {
        uint8_t *blob = malloc(len ? len : 1);
        memcpy(blob, p.blob_a, len);
        assert_int_equal(ops->hs_connect((pscom_plugin_con_t *)&con_b, p.b,
                                         blob, len), -EPROTO);
        free(blob);
    }
    /* A newer version. */
    uint8_t v2[VB_WIREUP_LEN];
    memcpy(v2, p.blob_a, sizeof(v2));
    v2[2] = 2;
    assert_int_equal(ops->hs_connect((pscom_plugin_con_t *)&con_b, p.b, v2,
                                     sizeof(v2)), -EPROTO);
    /* Random bytes of every length up to 128. */
    uint32_t s = 99;
    for (int it = 0; it < 2000; it++) {
        size_t len = (size_t)(it % 129);
        uint8_t *blob = malloc(len ? len : 1);
        for (size_t i = 0; i < len; i++) {
            s = s * 1664525u + 1013904223u;
            blob[i] = (uint8_t)(s >> 24);
        }
        assert_int_equal(ops->hs_connect((pscom_plugin_con_t *)&con_b, p.b,
                                         blob, len), -EPROTO);
        free(blob);
    }
    assert_int_equal(fake_stats.bad_transition, 0);
    pair_abort(&p);
    ops->destroy();
    all_released();
}

static void cq_full_skips_plugin(void **state)
{
    /* 64 CQ entries: one connection with 16 + 16 + 12 fits, two do not. */
    setenv("PSP_VERBS_CQ_SIZE", "64", 1);
    assert_int_equal(ops->init(), 0);
    void *a = calloc(1, pscom_plugin_verbs.con_priv_size);
    void *b = calloc(1, pscom_plugin_verbs.con_priv_size);
    uint8_t blob[4096];
    size_t len = sizeof(blob);
    assert_int_equal(ops->hs_start((pscom_plugin_con_t *)&con_a, a, blob, &len), 0);
    len = sizeof(blob);
    assert_int_equal(ops->hs_start((pscom_plugin_con_t *)&con_b, b, blob, &len),
                     -ENOSPC);
    assert_non_null(strstr(fake_core_log, "PSP_VERBS_CQ_SIZE"));
    ops->hs_abort((pscom_plugin_con_t *)&con_a, a);
    /* Room again. */
    len = sizeof(blob);
    assert_int_equal(ops->hs_start((pscom_plugin_con_t *)&con_b, b, blob, &len), 0);
    ops->hs_abort((pscom_plugin_con_t *)&con_b, b);
    free(a);
    free(b);
    ops->destroy();
    unsetenv("PSP_VERBS_CQ_SIZE");
    all_released();
}

static void registration_failure_at_hs_start(void **state)
{
    assert_int_equal(ops->init(), 0);
    fake_cfg.fail_reg = ENOMEM;
    void *a = calloc(1, pscom_plugin_verbs.con_priv_size);
    uint8_t blob[4096];
    size_t len = sizeof(blob);
    assert_int_equal(ops->hs_start((pscom_plugin_con_t *)&con_a, a, blob, &len),
                     -ENOMEM);
    assert_non_null(strstr(fake_core_log, "ulimit -l"));
    /* hs_start cleaned up itself: the core frees priv without hs_abort. */
    free(a);
    ops->destroy();
    all_released();
}


/* ---------------------------------------------------------------------- */
/* One-sided operations                                                   */
/* ---------------------------------------------------------------------- */

/* Both ends of a pair connected and open (the core's order). */
static void pair_open(struct pair *p)
{
    pair_start(p);
    assert_int_equal(ops->hs_connect((pscom_plugin_con_t *)&con_b, p->b,
                                     p->blob_a, p->len_a), 0);
    assert_int_equal(ops->hs_connect((pscom_plugin_con_t *)&con_a, p->a,
                                     p->blob_b, p->len_b), 0);
    assert_int_equal(ops->open((pscom_plugin_con_t *)&con_a, p->a, -1), 1);
    assert_int_equal(ops->open((pscom_plugin_con_t *)&con_b, p->b, -1), 1);
}

static void pair_close(struct pair *p)
{
    ops->close((pscom_plugin_con_t *)&con_a, p->a);
    ops->close((pscom_plugin_con_t *)&con_b, p->b);
    free(p->a);
    free(p->b);
}

struct region {
    uint8_t key[PSCOM_PLUGIN_RKEY_MAX];
    size_t key_len;
    void *handle;
};

static void region_register(struct region *r, void *addr, size_t len)
{
    r->key_len = 0;
    assert_int_equal(ops->rma_register(NULL, addr, len, r->key, &r->key_len,
                                       &r->handle), 0);
    assert_int_equal(r->key_len, VB_RMAKEY_LEN);
}

static void *rkey_on_a(struct pair *p, struct region *r)
{
    void *prkey = NULL;
    assert_int_equal(ops->rma_rkey((pscom_plugin_con_t *)&con_a, p->a, r->key,
                                   r->key_len, &prkey), 0);
    return prkey;
}

/* What every queue pair lets its peer do (set at RESET->INIT). */
static void init_access_is(unsigned flags)
{
    int inits = 0;
    for (int i = 0; i < fake_stats.nmodify; i++)
        if (fake_stats.modify[i].attr.qp_state == IBV_QPS_INIT) {
            assert_int_equal(fake_stats.modify[i].attr.qp_access_flags, flags);
            inits++;
        }
    assert_int_equal(inits, 2);
}

static void progress_until(int n)
{
    for (int i = 0; i < 1000 && ndone < n; i++) ops->progress();
}

static void rma_put_and_get_move_bytes(void **state)
{
    /* Small messages per work request: a put is many RDMA writes, more
     * than fit the send queue at once. */
    fake_cfg.max_msg_sz = 4096;
    assert_int_equal(ops->init(), 0);
    struct pair p;
    pair_open(&p);
    /* The queue pairs let the peer write and read. */
    init_access_is(IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE);
    enum { LEN = 100000 };
    uint8_t *target = calloc(1, LEN + 64), *src = malloc(LEN), *dst = calloc(1, LEN);
    for (size_t i = 0; i < LEN; i++) src[i] = (uint8_t)(i * 13 + 1);
    struct region r;
    region_register(&r, target, LEN + 64);
    void *rk = rkey_on_a(&p, &r);
    int mrs = fake_stats.live_mr;

    int tput, tget;
    assert_int_equal(ops->rma_put((pscom_plugin_con_t *)&con_a, p.a, rk, src,
                                  (uintptr_t)target + 64, LEN, &tput), 1);
    assert_int_equal(ndone, 0); /* only from progress */
    assert_int_equal(fake_stats.writes, 8); /* the send queue's share */
    progress_until(1);
    assert_int_equal(ndone, 1);
    assert_ptr_equal(done[0].token, &tput);
    assert_int_equal(done[0].err, 0);
    assert_int_equal(fake_stats.writes, (LEN + 4095) / 4096);
    assert_memory_equal(target + 64, src, LEN);

    assert_int_equal(ops->rma_get((pscom_plugin_con_t *)&con_a, p.a, rk, dst,
                                  (uintptr_t)target + 64, LEN, &tget), 1);
    progress_until(2);
    assert_int_equal(ndone, 2);
    assert_ptr_equal(done[1].token, &tget);
    assert_int_equal(done[1].err, 0);
    assert_memory_equal(dst, src, LEN);
    for (int i = 0; i < 10; i++) ops->progress();
    assert_int_equal(ndone, 2); /* once each */
    /* The buffers' registrations went with their operations. */
    assert_int_equal(fake_stats.live_mr, mrs);

    /* Below PSP_VERBS_RMA, and outside the region: the core's path. */
    assert_int_equal(ops->rma_put((pscom_plugin_con_t *)&con_a, p.a, rk, src,
                                  (uintptr_t)target, 8191, &tput), -ENOTSUP);
    assert_int_equal(ops->rma_put((pscom_plugin_con_t *)&con_a, p.a, rk, src,
                                  (uintptr_t)target + 128, LEN, &tput), -ERANGE);
    assert_int_equal(ops->rma_get((pscom_plugin_con_t *)&con_a, p.a, rk, dst,
                                  (uintptr_t)target - 8, LEN, &tget), -ERANGE);
    assert_int_equal(fake_stats.bad_key, 0);
    assert_int_equal(fake_stats.rnr, 0);
    ops->rma_rkey_release((pscom_plugin_con_t *)&con_a, p.a, rk);
    ops->rma_deregister(NULL, r.handle);
    pair_close(&p);
    ops->destroy();
    all_released();
    free(target);
    free(src);
    free(dst);
}

static void rma_keys_are_checked(void **state)
{
    assert_int_equal(ops->init(), 0);
    struct pair p;
    pair_open(&p);
    static uint8_t target[8192];
    struct region r;
    region_register(&r, target, sizeof(target));
    void *prkey;
    /* Malformed. */
    assert_int_equal(ops->rma_rkey((pscom_plugin_con_t *)&con_a, p.a, r.key,
                                   r.key_len - 1, &prkey), -EPROTO);
    /* From a port other than the peer's. */
    uint8_t other[VB_RMAKEY_LEN];
    memcpy(other, r.key, sizeof(other));
    other[24 + 15] ^= 0x40; /* the GID */
    assert_int_equal(ops->rma_rkey((pscom_plugin_con_t *)&con_a, p.a, other,
                                   sizeof(other), &prkey), -EPERM);
    assert_non_null(strstr(fake_core_log, "another port"));
    ops->rma_deregister(NULL, r.handle);
    /* The whole address space: not with verbs. */
    uint8_t key[PSCOM_PLUGIN_RKEY_MAX];
    size_t key_len;
    void *h;
    assert_int_equal(ops->rma_register(NULL, NULL, 0, key, &key_len, &h),
                     -ENOTSUP);
    /* A registration the HCA refuses. */
    fake_cfg.fail_reg = ENOMEM;
    assert_int_equal(ops->rma_register(NULL, target, sizeof(target), key,
                                       &key_len, &h), -ENOMEM);
    fake_cfg.fail_reg = 0;
    pair_close(&p);
    ops->destroy();
    all_released();
}

/* A failed completion fails the connection, then its operation hears the
 * error as an errno (the core then fails it with the connection). */
static void rma_failed_completion(void **state)
{
    assert_int_equal(ops->init(), 0);
    static uint8_t target[16384], src[16384];
    struct pair p;
    pair_open(&p);
    struct region r;
    region_register(&r, target, sizeof(target));
    /* A key whose rkey the peer's HCA does not know. */
    uint8_t bad[VB_RMAKEY_LEN];
    memcpy(bad, r.key, sizeof(bad));
    bad[4] ^= 0xff;
    void *rk;
    assert_int_equal(ops->rma_rkey((pscom_plugin_con_t *)&con_a, p.a, bad,
                                   sizeof(bad), &rk), 0);
    int tok;
    assert_int_equal(ops->rma_put((pscom_plugin_con_t *)&con_a, p.a, rk, src,
                                  (uintptr_t)target, sizeof(src), &tok), 1);
    progress_until(1);
    assert_int_equal(ndone, 1);
    assert_int_equal(done[0].err, -EACCES);
    assert_int_equal(done[0].errors_before, 1);
    assert_int_equal(errors_reported, 1);
    assert_non_null(strstr(fake_core_log, "one-sided RDMA completion failed"));
    /* No more on a failed connection. */
    assert_int_equal(ops->rma_get((pscom_plugin_con_t *)&con_a, p.a, rk, src,
                                  (uintptr_t)target, sizeof(src), &tok),
                     -ENOTCONN);
    ops->rma_rkey_release((pscom_plugin_con_t *)&con_a, p.a, rk);

    /* The peer gone: transport retries exceeded. */
    struct pair q;
    pair_open(&q);
    errors_reported = 0;
    ndone = 0;
    rk = rkey_on_a(&q, &r);
    fake_break_all();
    assert_int_equal(ops->rma_get((pscom_plugin_con_t *)&con_a, q.a, rk, src,
                                  (uintptr_t)target, sizeof(src), &tok), 1);
    progress_until(1);
    assert_int_equal(ndone, 1);
    assert_int_equal(done[0].err, -ECONNRESET);
    assert_int_equal(done[0].errors_before, 1);
    ops->rma_rkey_release((pscom_plugin_con_t *)&con_a, q.a, rk);
    ops->rma_deregister(NULL, r.handle);
    pair_close(&p);
    pair_close(&q);
    ops->destroy();
    all_released();
}

/* Closing with operations still queued reports none of them, and destroy
 * releases regions the application left registered. */
static void rma_close_and_destroy(void **state)
{
    fake_cfg.max_msg_sz = 4096;
    assert_int_equal(ops->init(), 0);
    struct pair p;
    pair_open(&p);
    enum { LEN = 65536 };
    uint8_t *target = calloc(1, LEN), *src = calloc(1, LEN);
    struct region r;
    region_register(&r, target, LEN);
    void *rk = rkey_on_a(&p, &r);
    int tok;
    assert_int_equal(ops->rma_put((pscom_plugin_con_t *)&con_a, p.a, rk, src,
                                  (uintptr_t)target, LEN, &tok), 1);
    ops->rma_rkey_release((pscom_plugin_con_t *)&con_a, p.a, rk);
    pair_close(&p);
    for (int i = 0; i < 10; i++) ops->progress();
    assert_int_equal(ndone, 0);
    ops->destroy(); /* r still registered */
    all_released();
    free(target);
    free(src);
}

/* Queue pairs with read depth 0: gets take the core's path, puts do not
 * need reads. */
static void rma_get_without_rdma_read(void **state)
{
    fake_cfg.rd_atom = 0;
    assert_int_equal(ops->init(), 0);
    struct pair p;
    pair_open(&p);
    static uint8_t target[16384], buf[16384];
    struct region r;
    region_register(&r, target, sizeof(target));
    void *rk = rkey_on_a(&p, &r);
    int tok;
    assert_int_equal(ops->rma_get((pscom_plugin_con_t *)&con_a, p.a, rk, buf,
                                  (uintptr_t)target, sizeof(buf), &tok),
                     -ENOTSUP);
    memset(buf, 0x5a, sizeof(buf));
    assert_int_equal(ops->rma_put((pscom_plugin_con_t *)&con_a, p.a, rk, buf,
                                  (uintptr_t)target, sizeof(buf), &tok), 1);
    progress_until(1);
    assert_int_equal(ndone, 1);
    assert_int_equal(done[0].err, 0);
    assert_memory_equal(target, buf, sizeof(buf));
    assert_int_equal(fake_stats.reads, 0);
    assert_int_equal(fake_stats.bad_key, 0);
    assert_int_equal(errors_reported, 0);
    ops->rma_rkey_release((pscom_plugin_con_t *)&con_a, p.a, rk);
    ops->rma_deregister(NULL, r.handle);
    pair_close(&p);
    ops->destroy();
    all_released();
}

/* With the registration cache on, keys the peer was given stop working
 * when their registration's last user lets go: a deregistered region,
 * a rendezvous send buffer whose handle came back. */
static void peer_keys_revoked_with_cache(void **state)
{
    setenv("PSP_VERBS_MCACHE_SIZE", "8", 1);
    assert_int_equal(ops->init(), 0);
    struct pair p;
    pair_open(&p);
    static uint8_t target[16384], src[16384];
    memset(src, 'X', sizeof(src));
    struct region r;
    region_register(&r, target, sizeof(target));
    vb_rmakey_t k;
    assert_int_equal(vb_rmakey_decode(r.key, r.key_len, &k), 0);
    void *rk = rkey_on_a(&p, &r);
    ops->rma_deregister(NULL, r.handle);
    assert_false(fake_rkey_valid(k.rkey));
    int tok;
    assert_int_equal(ops->rma_put((pscom_plugin_con_t *)&con_a, p.a, rk, src,
                                  (uintptr_t)target, sizeof(src), &tok), 1);
    progress_until(1);
    assert_int_equal(ndone, 1);
    assert_int_equal(done[0].err, -EACCES);
    assert_int_equal(target[0], 0); /* nothing written */
    ops->rma_rkey_release((pscom_plugin_con_t *)&con_a, p.a, rk);
    pair_close(&p);

    /* Rendezvous: B lends src, A reads it and returns the handle. */
    pair_open(&p);
    static uint8_t dst[40000], big[40000];
    uint8_t blob[64];
    size_t blen = ops->rndv_describe((pscom_plugin_con_t *)&con_b, p.b, big,
                                     sizeof(big), blob);
    assert_true(blen > 0);
    vb_rndv_desc_t d;
    assert_int_equal(vb_rndv_decode(blob, blen, &d), 0);
    assert_true(fake_rkey_valid(d.rkey));
    assert_int_equal(ops->rndv_pull((pscom_plugin_con_t *)&con_a, p.a, blob,
                                    blen, dst, sizeof(dst)), 0);
    for (int i = 0; i < 10; i++) ops->progress();
    assert_false(fake_rkey_valid(d.rkey));
    assert_int_equal(errors_reported, 1); /* the first pair's put */
    pair_close(&p);
    ops->destroy();
    all_released();
}

static void rma_off(void **state)
{
    setenv("PSP_VERBS_RMA", "inf", 1);
    assert_int_equal(ops->init(), 0);
    struct pair p;
    pair_open(&p);
    init_access_is(IBV_ACCESS_REMOTE_READ);
    static uint8_t target[64];
    uint8_t key[PSCOM_PLUGIN_RKEY_MAX];
    size_t key_len;
    void *h;
    assert_int_equal(ops->rma_register(NULL, target, sizeof(target), key,
                                       &key_len, &h), -ENOTSUP);
    pair_close(&p);
    ops->destroy();
    unsetenv("PSP_VERBS_RMA");
    all_released();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(descriptor, setup),
        cmocka_unit_test_setup(no_device, setup),
        cmocka_unit_test_setup(no_device_list, setup),
        cmocka_unit_test_setup(named_device_missing, setup),
        cmocka_unit_test_setup(named_device_chosen, setup),
        cmocka_unit_test_setup(port_down, setup),
        cmocka_unit_test_setup(iwarp_device_skipped, setup),
        cmocka_unit_test_setup(only_iwarp_devices, setup),
        cmocka_unit_test_setup(infiniband_before_roce, setup),
        cmocka_unit_test_setup(roce_v2_gid_chosen, setup),
        cmocka_unit_test_setup(fork_policy, setup),
        cmocka_unit_test_setup(handshake, setup),
        cmocka_unit_test_setup(rtr_failure_fails_hs_connect, setup),
        cmocka_unit_test_setup(malformed_blobs, setup),
        cmocka_unit_test_setup(cq_full_skips_plugin, setup),
        cmocka_unit_test_setup(registration_failure_at_hs_start, setup),
        cmocka_unit_test_setup(rma_put_and_get_move_bytes, setup),
        cmocka_unit_test_setup(rma_keys_are_checked, setup),
        cmocka_unit_test_setup(rma_failed_completion, setup),
        cmocka_unit_test_setup(rma_close_and_destroy, setup),
        cmocka_unit_test_setup(rma_get_without_rdma_read, setup),
        cmocka_unit_test_setup(peer_keys_revoked_with_cache, setup),
        cmocka_unit_test_setup(rma_off, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
