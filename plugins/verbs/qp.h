/*
 * The state machine of an RC queue pair: RESET -> INIT -> RTR -> RTS, and
 * ERR on the way out, each transition one vb_modify_qp() call with exactly
 * the attributes the verbs specification requires for it (ibv_modify_qp(3)):
 *
 *   RESET -> INIT  STATE | PKEY_INDEX | PORT | ACCESS_FLAGS
 *   INIT  -> RTR   STATE | AV | PATH_MTU | DEST_QPN | RQ_PSN |
 *                  MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER
 *   RTR   -> RTS   STATE | TIMEOUT | RETRY_CNT | RNR_RETRY | SQ_PSN |
 *                  MAX_QP_RD_ATOMIC
 *   any   -> ERR   STATE
 *
 * vb_qp_path() turns our port's properties and the peer's wire-up blob into
 * the INIT -> RTR attributes (address vector, MTU, RDMA read depth) or says
 * why the two ends cannot talk.
 */
#ifndef VB_QP_H
#define VB_QP_H

#include <stdbool.h>
#include <stdint.h>

#include "verbs_wrap.h"
#include "wireup.h"

/* Our end: what the plugin found out about its port. */
typedef struct vb_qp_local {
    uint8_t port;       /* port number */
    uint8_t mtu;        /* active MTU (enum ibv_mtu) */
    uint16_t lid;
    uint8_t link_layer; /* IBV_LINK_LAYER_* */
    bool gid_valid;
    uint8_t gid[16];
    uint8_t gid_index;  /* index of gid in the port's table (an address
                         * vector holds 8 bits: PSP_VERBS_GID_INDEX is
                         * limited to 255) */
    uint8_t rd_atom;    /* RDMA read depth this HCA allows (0: none) */
    uint8_t sl;         /* service level */
} vb_qp_local_t;

/* The INIT -> RTR attributes. */
typedef struct vb_qp_path {
    uint8_t port;
    uint32_t dest_qpn;
    uint32_t rq_psn;
    uint8_t mtu;
    uint16_t dlid;
    uint8_t sl;
    bool grh;            /* route by GID (RoCE, LID 0, other subnet) */
    uint8_t dgid[16];
    uint8_t sgid_index;
    uint8_t hop_limit;
    uint8_t rd_atom;     /* max_dest_rd_atomic and max_rd_atomic */
    uint8_t min_rnr_timer;
} vb_qp_path_t;

/* The RTR -> RTS attributes. */
typedef struct vb_qp_rts {
    uint32_t sq_psn;
    uint8_t timeout;     /* ACK timeout: 4.096 us * 2^timeout */
    uint8_t retry_cnt;   /* 0..7 */
    uint8_t rnr_retry;   /* 0..7, 7 = retry for ever */
    uint8_t rd_atom;     /* max_rd_atomic */
} vb_qp_rts_t;

/* Work out the path to the peer. 0, or -ENETUNREACH with *why set when the
 * ends cannot be connected (InfiniBand against Ethernet; routing by GID
 * needed without a GID). */
int vb_qp_path(const vb_qp_local_t *local, const vb_wireup_t *remote,
               vb_qp_path_t *path, const char **why);

/* The transitions; each returns 0 or a negative errno (the error of
 * ibv_modify_qp). */
int vb_qp_to_init(struct ibv_qp *qp, uint8_t port, uint16_t pkey_index,
                  unsigned access);
int vb_qp_to_rtr(struct ibv_qp *qp, const vb_qp_path_t *path);
int vb_qp_to_rts(struct ibv_qp *qp, const vb_qp_rts_t *rts);
int vb_qp_to_err(struct ibv_qp *qp);

/* The masks of the transitions (for the tests and the log). */
#define VB_QP_INIT_MASK                                                        \
    (IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)
#define VB_QP_RTR_MASK                                                         \
    (IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |            \
     IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)
#define VB_QP_RTS_MASK                                                         \
    (IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |     \
     IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)

#endif
