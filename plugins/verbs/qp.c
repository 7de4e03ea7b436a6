/*
 * Queue pair transitions (see qp.h).
 */
#include <errno.h>
#include <string.h>

#include "qp.h"

static int modify(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
    int rc = vb_modify_qp(qp, attr, mask);
    if (rc > 0) return -rc;
    return rc < 0 ? rc : 0;
}

static bool gid_zero(const uint8_t *gid)
{
    for (int i = 0; i < 16; i++)
        if (gid[i]) return false;
    return true;
}

int vb_qp_path(const vb_qp_local_t *local, const vb_wireup_t *remote,
               vb_qp_path_t *path, const char **why)
{
    if (local->link_layer && remote->link_layer &&
        local->link_layer != remote->link_layer) {
        *why = "the ports have different link layers (InfiniBand and "
               "Ethernet)";
        return -ENETUNREACH;
    }
    bool remote_gid = (remote->flags & VB_WIREUP_GID_VALID) &&
                      !gid_zero(remote->gid);
    bool grh = local->link_layer == IBV_LINK_LAYER_ETHERNET ||
               remote->link_layer == IBV_LINK_LAYER_ETHERNET ||
               remote->lid == 0;
    /* Another subnet (other GID prefix) is reached through a router. */
    if (!grh && remote_gid && local->gid_valid &&
        memcmp(local->gid, remote->gid, 8) != 0)
        grh = true;
    if (grh && (!remote_gid || !local->gid_valid)) {
        *why = remote_gid ? "the peer must be reached by GID, but our port has "
                            "no GID at PSP_VERBS_GID_INDEX"
                          : "the peer must be reached by GID (RoCE, or no "
                            "LID) but sent none";
        return -ENETUNREACH;
    }
    *path = (vb_qp_path_t){
        .port = local->port,
        .dest_qpn = remote->qpn,
        .rq_psn = remote->psn,
        .mtu = local->mtu < remote->mtu ? local->mtu : remote->mtu,
        .dlid = remote->lid,
        .sl = local->sl,
        .grh = grh,
        .sgid_index = local->gid_index,
        .hop_limit = 64,
        .rd_atom = local->rd_atom < remote->rd_atom ? local->rd_atom
                                                    : remote->rd_atom,
        .min_rnr_timer = 12, /* 0.64 ms */
    };
    if (grh) memcpy(path->dgid, remote->gid, 16);
    return 0;
}

int vb_qp_to_init(struct ibv_qp *qp, uint8_t port, uint16_t pkey_index,
                  unsigned access)
{
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = pkey_index;
    a.port_num = port;
    a.qp_access_flags = access;
    return modify(qp, &a, VB_QP_INIT_MASK);
}

int vb_qp_to_rtr(struct ibv_qp *qp, const vb_qp_path_t *path)
{
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = (enum ibv_mtu)path->mtu;
    a.dest_qp_num = path->dest_qpn;
    a.rq_psn = path->rq_psn;
    a.max_dest_rd_atomic = path->rd_atom;
    a.min_rnr_timer = path->min_rnr_timer;
    a.ah_attr.dlid = path->dlid;
    a.ah_attr.sl = path->sl;
    a.ah_attr.src_path_bits = 0;
    a.ah_attr.port_num = path->port;
    if (path->grh) {
        a.ah_attr.is_global = 1;
        memcpy(a.ah_attr.grh.dgid.raw, path->dgid, 16);
        a.ah_attr.grh.sgid_index = path->sgid_index;
        a.ah_attr.grh.hop_limit = path->hop_limit;
        a.ah_attr.grh.flow_label = 0;
        a.ah_attr.grh.traffic_class = 0;
    }
    return modify(qp, &a, VB_QP_RTR_MASK);
}

int vb_qp_to_rts(struct ibv_qp *qp, const vb_qp_rts_t *rts)
{
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.timeout = rts->timeout;
    a.retry_cnt = rts->retry_cnt;
    a.rnr_retry = rts->rnr_retry;
    a.sq_psn = rts->sq_psn;
    a.max_rd_atomic = rts->rd_atom;
    return modify(qp, &a, VB_QP_RTS_MASK);
}

int vb_qp_to_err(struct ibv_qp *qp)
{
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_ERR;
    return modify(qp, &a, IBV_QP_STATE);
}
