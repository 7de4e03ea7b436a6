/*
 * Queue pair transitions of the verbs plugin (plugins/verbs/qp.c) against
 * the fake HCA, which records every vb_modify_qp call: the exact attribute
 * mask and the values of each transition, path selection (LID or GID
 * routing, MTU, RDMA read depth), and errors passed up.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "fake_verbs.h"
#include "qp.h"

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;

static int setup(void **state)
{
    fake_reset();
    int n;
    struct ibv_device **l = vb_get_device_list(&n);
    ctx = vb_open_device(l[0]);
    vb_free_device_list(l);
    pd = vb_alloc_pd(ctx);
    cq = vb_create_cq(ctx, 64);
    return 0;
}

static int teardown(void **state)
{
    vb_destroy_cq(cq);
    vb_dealloc_pd(pd);
    vb_close_device(ctx);
    assert_int_equal(fake_stats.live_qp, 0);
    return 0;
}

static struct ibv_qp *new_qp(void)
{
    struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq,
                                  .qp_type = IBV_QPT_RC,
                                  .cap = {.max_send_wr = 4, .max_recv_wr = 4,
                                          .max_send_sge = 1, .max_recv_sge = 1}};
    return vb_create_qp(pd, &ia);
}

static vb_qp_local_t ib_local(void)
{
    vb_qp_local_t l = {.port = 1, .mtu = IBV_MTU_4096, .lid = 5,
                       .link_layer = IBV_LINK_LAYER_INFINIBAND,
                       .gid_valid = true, .gid_index = 0, .rd_atom = 16,
                       .sl = 3};
    l.gid[0] = 0xfe;
    l.gid[1] = 0x80;
    l.gid[15] = 1;
    return l;
}

static vb_wireup_t ib_remote(void)
{
    vb_wireup_t w = {.flags = VB_WIREUP_GID_VALID, .mtu = IBV_MTU_2048,
                     .rd_atom = 4, .qpn = 0x4242, .psn = 0x777, .lid = 9,
                     .port = 2, .link_layer = IBV_LINK_LAYER_INFINIBAND,
                     .ring = 16, .slot_size = 4096};
    w.gid[0] = 0xfe;
    w.gid[1] = 0x80;
    w.gid[15] = 2;
    return w;
}

static void transitions_masks_and_values(void **state)
{
    struct ibv_qp *qp = new_qp();
    vb_qp_local_t l = ib_local();
    vb_wireup_t w = ib_remote();
    vb_qp_path_t path;
    const char *why = NULL;
    assert_int_equal(vb_qp_path(&l, &w, &path, &why), 0);

    assert_int_equal(vb_qp_to_init(qp, 1, 0, IBV_ACCESS_REMOTE_READ), 0);
    assert_int_equal(vb_qp_to_rtr(qp, &path), 0);
    vb_qp_rts_t rts = {.sq_psn = 0x999, .timeout = 14, .retry_cnt = 7,
                       .rnr_retry = 7, .rd_atom = path.rd_atom};
    assert_int_equal(vb_qp_to_rts(qp, &rts), 0);
    assert_int_equal(qp->state, IBV_QPS_RTS);
    assert_int_equal(vb_qp_to_err(qp), 0);
    assert_int_equal(fake_stats.bad_transition, 0);
    assert_int_equal(fake_stats.nmodify, 4);

    const struct fake_modify *m = fake_stats.modify;
    assert_int_equal(m[0].mask, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
                                    IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
    assert_int_equal(m[0].attr.qp_state, IBV_QPS_INIT);
    assert_int_equal(m[0].attr.port_num, 1);
    assert_int_equal(m[0].attr.pkey_index, 0);
    assert_int_equal(m[0].attr.qp_access_flags, IBV_ACCESS_REMOTE_READ);

    assert_int_equal(m[1].mask, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                                    IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                    IBV_QP_MAX_DEST_RD_ATOMIC |
                                    IBV_QP_MIN_RNR_TIMER);
    assert_int_equal(m[1].attr.qp_state, IBV_QPS_RTR);
    assert_int_equal(m[1].attr.path_mtu, IBV_MTU_2048); /* the smaller */
    assert_int_equal(m[1].attr.dest_qp_num, 0x4242);
    assert_int_equal(m[1].attr.rq_psn, 0x777);
    assert_int_equal(m[1].attr.max_dest_rd_atomic, 4); /* the smaller */
    assert_true(m[1].attr.min_rnr_timer > 0);
    assert_int_equal(m[1].attr.ah_attr.dlid, 9);
    assert_int_equal(m[1].attr.ah_attr.sl, 3);
    assert_int_equal(m[1].attr.ah_attr.port_num, 1);
    assert_int_equal(m[1].attr.ah_attr.is_global, 0); /* same subnet */

    assert_int_equal(m[2].mask, IBV_QP_STATE | IBV_QP_TIMEOUT |
                                    IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                    IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
    assert_int_equal(m[2].attr.qp_state, IBV_QPS_RTS);
    assert_int_equal(m[2].attr.sq_psn, 0x999);
    assert_int_equal(m[2].attr.timeout, 14);
    assert_int_equal(m[2].attr.retry_cnt, 7);
    assert_int_equal(m[2].attr.rnr_retry, 7);
    assert_int_equal(m[2].attr.max_rd_atomic, 4);

    assert_int_equal(m[3].mask, IBV_QP_STATE);
    assert_int_equal(m[3].attr.qp_state, IBV_QPS_ERR);
    vb_destroy_qp(qp);
}

static void wrong_order_refused(void **state)
{
    struct ibv_qp *qp = new_qp();
    vb_qp_local_t l = ib_local();
    vb_wireup_t w = ib_remote();
    vb_qp_path_t path;
    const char *why;
    assert_int_equal(vb_qp_path(&l, &w, &path, &why), 0);
    /* RESET -> RTR is not a transition: the fake HCA refuses it like a
     * real one, and the error comes back negative. */
    assert_int_equal(vb_qp_to_rtr(qp, &path), -EINVAL);
    vb_destroy_qp(qp);
}

static void error_at_rtr_passed_up(void **state)
{
    struct ibv_qp *qp = new_qp();
    vb_qp_local_t l = ib_local();
    vb_wireup_t w = ib_remote();
    vb_qp_path_t path;
    const char *why;
    assert_int_equal(vb_qp_path(&l, &w, &path, &why), 0);
    fake_cfg.fail_state = IBV_QPS_RTR;
    fake_cfg.fail_errno = ETIMEDOUT;
    assert_int_equal(vb_qp_to_init(qp, 1, 0, IBV_ACCESS_REMOTE_READ), 0);
    assert_int_equal(vb_qp_to_rtr(qp, &path), -ETIMEDOUT);
    assert_int_equal(qp->state, IBV_QPS_INIT);
    vb_destroy_qp(qp);
}

static void path_roce_uses_grh(void **state)
{
    vb_qp_local_t l = ib_local();
    l.link_layer = IBV_LINK_LAYER_ETHERNET;
    l.lid = 0;
    l.gid_index = 3;
    vb_wireup_t w = ib_remote();
    w.link_layer = IBV_LINK_LAYER_ETHERNET;
    w.lid = 0;
    vb_qp_path_t path;
    const char *why;
    assert_int_equal(vb_qp_path(&l, &w, &path, &why), 0);
    assert_true(path.grh);
    assert_memory_equal(path.dgid, w.gid, 16);
    assert_int_equal(path.sgid_index, 3);

    struct ibv_qp *qp = new_qp();
    assert_int_equal(vb_qp_to_init(qp, 1, 0, 0), 0);
    assert_int_equal(vb_qp_to_rtr(qp, &path), 0);
    const struct fake_modify *m = &fake_stats.modify[fake_stats.nmodify - 1];
    assert_int_equal(m->attr.ah_attr.is_global, 1);
    assert_int_equal(m->attr.ah_attr.grh.sgid_index, 3);
    assert_true(m->attr.ah_attr.grh.hop_limit > 0);
    assert_memory_equal(m->attr.ah_attr.grh.dgid.raw, w.gid, 16);
    vb_destroy_qp(qp);
}

static void path_choices(void **state)
{
    vb_qp_local_t l = ib_local();
    vb_wireup_t w = ib_remote();
    vb_qp_path_t path;
    const char *why = NULL;

    /* Another subnet prefix: routed by GID. */
    w.gid[7] = 1;
    assert_int_equal(vb_qp_path(&l, &w, &path, &why), 0);
    assert_true(path.grh);

    /* LID 0 without a GID: unreachable. */
    w = ib_remote();
    w.lid = 0;
    w.flags = 0;
    assert_int_equal(vb_qp_path(&l, &w, &path, &why), -ENETUNREACH);
    assert_non_null(why);

    /* InfiniBand against Ethernet. */
    w = ib_remote();
    w.link_layer = IBV_LINK_LAYER_ETHERNET;
    assert_int_equal(vb_qp_path(&l, &w, &path, &why), -ENETUNREACH);

    /* RoCE here, but our port has no GID. */
    l.link_layer = IBV_LINK_LAYER_ETHERNET;
    l.gid_valid = false;
    assert_int_equal(vb_qp_path(&l, &w, &path, &why), -ENETUNREACH);

    /* No RDMA read on one side: depth 0. */
    l = ib_local();
    w = ib_remote();
    w.rd_atom = 0;
    assert_int_equal(vb_qp_path(&l, &w, &path, &why), 0);
    assert_int_equal(path.rd_atom, 0);
    assert_int_equal(path.mtu, IBV_MTU_2048);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(transitions_masks_and_values, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(wrong_order_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(error_at_rtr_passed_up, setup, teardown),
        cmocka_unit_test_setup_teardown(path_roce_uses_grh, setup, teardown),
        cmocka_unit_test_setup_teardown(path_choices, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
