/*
 * A fake HCA for the verbs plugin's tests: an in-process implementation of
 * plugins/verbs/verbs_wrap.h. Queue pairs of one process connect to each
 * other by QP number; SEND lands in the peer's posted receive, RDMA READ
 * copies from a registered buffer after checking rkey, range and access,
 * and completions go to the CQs at once (with send_lag, a work request is
 * executed a few polls after it was posted). It checks what real hardware
 * would refuse (a SEND without a posted receive, a wrong lkey, a QP state
 * transition without its required attributes) and counts it. RDMA WRITE
 * copies into a registered buffer of the peer after checking rkey, range,
 * the registration's and the peer QP's remote-write rights.
 *
 * Configuration: the fields of `fake_cfg` (set before the plugin's init),
 * or, for the copy built into a loadable module, the environment:
 *   FAKE_VERBS_NDEV=N          devices (default 1)
 *   FAKE_VERBS_FAIL_STATE=S    modify_qp to state S fails (3 = RTR)
 *   FAKE_VERBS_RD_ATOM=N       RDMA read depth of the device (default 16)
 *   FAKE_VERBS_MAX_MSG=N       largest message of a work request (default
 *                              2 GiB)
 *   FAKE_VERBS_SEND_LAG=N      work requests wait N polls (see send_lag)
 */
#ifndef FAKE_VERBS_H
#define FAKE_VERBS_H

#include <stdint.h>

#include "verbs_wrap.h"

#define FAKE_DEV_MAX 4
#define FAKE_GID_MAX 8

/* An entry of every port's GID table. */
struct fake_gid {
    uint8_t raw[16];
    int type;                /* IBV_GID_TYPE_* */
};

struct fake_cfg {
    int ndev;                /* devices listed; 0: none */
    int list_errno;          /* with ndev 0: return NULL and this errno */
    int port_state;          /* IBV_PORT_* of every port */
    int link_layer;          /* IBV_LINK_LAYER_* */
    uint16_t lid;            /* LID of the port */
    int rd_atom;             /* max_qp_rd_atom / max_qp_init_rd_atom */
    int fail_state;          /* modify_qp to this state fails (0: none) */
    int fail_skip;           /* ... after this many such calls succeeded */
    int fail_errno;          /* ... with this error */
    int fail_reg;            /* reg_mr fails with this errno (0: never) */
    int fork_status;         /* what ibv_is_fork_initialized says */
    uint32_t max_msg_sz;     /* of the ports; 0: 2 GiB */
    /* Per device: its transport (IBV_TRANSPORT_*; 0 is InfiniBand), and
     * the link layer of its ports (0: link_layer). */
    int dev_transport[FAKE_DEV_MAX];
    int dev_link_layer[FAKE_DEV_MAX];
    /* The GID table of every port; ngid 0: one entry, fe80::<port>, of
     * type IB (RoCE v1 on Ethernet). */
    int ngid;
    struct fake_gid gid[FAKE_GID_MAX];
    /* 0: a posted work request is executed at once (its data lands in the
     * peer's memory during vb_post_send). N: it waits until the N-th
     * vb_poll_cq after it, as on an HCA, where the wire takes its time;
     * moving its queue pair to ERR flushes it (nothing arrives). */
    int send_lag;
};

extern struct fake_cfg fake_cfg;

/* One recorded vb_modify_qp call. */
struct fake_modify {
    uint32_t qpn;
    int mask;
    struct ibv_qp_attr attr;
};

#define FAKE_MODIFY_MAX 256

struct fake_stats {
    int live_ctx, live_pd, live_cq, live_qp, live_mr; /* objects now */
    int rnr;            /* SENDs that found no posted receive */
    int bad_key;        /* local or remote key checks that failed */
    int bad_transition; /* modify_qp calls a real HCA would refuse */
    int sends, reads;   /* completed operations */
    int writes;         /* completed RDMA writes */
    int reg_calls;      /* successful vb_reg_mr calls */
    int polls;          /* vb_poll_cq calls */
    int flushed;        /* work requests flushed before they executed */
    int fork_init;      /* calls of vb_fork_init */
    int nmodify;        /* entries in `modify` */
    struct fake_modify modify[FAKE_MODIFY_MAX];
};

extern struct fake_stats fake_stats;

/* Defaults; also reads the FAKE_VERBS_* environment. Clears the stats. */
void fake_reset(void);

/* Whether a registration with this rkey exists (a peer's key works). */
int fake_rkey_valid(uint32_t rkey);

/* Break every queue pair (as if the peer died): further sends complete
 * with IBV_WC_RETRY_EXC_ERR. */
void fake_break_all(void);

/* A SEND of len bytes at buf from the network, arriving at the queue pair
 * qpn, as the peer's HCA would deliver it: into its oldest posted receive,
 * with a receive completion (IBV_WC_LOC_LEN_ERR, and nothing copied, when
 * it does not fit). 0; -1 when no such queue pair is ready to receive or
 * none of its receives is posted (the sender's HCA would report RNR). */
int fake_deliver(uint32_t qpn, const void *buf, uint32_t len);

#endif
