/*
 * A fake HCA implementing verbs_wrap.h in process (see fake_verbs.h).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_verbs.h"

struct fake_cfg fake_cfg;
struct fake_stats fake_stats;

struct rq_entry {
    uint64_t wr_id;
    uint64_t addr;
    uint32_t length;
    uint32_t lkey;
};

struct fake_cq {
    struct ibv_cq cq;
    struct ibv_wc *q;
    int head, count, cap;
};

struct fake_qp {
    struct ibv_qp qp;
    unsigned access;          /* qp_access_flags (INIT) */
    uint32_t dest;            /* dest_qp_num (RTR) */
    uint8_t max_dest_rd, max_rd;
    struct rq_entry *rq;      /* posted receives, FIFO */
    int rq_head, rq_count, rq_cap;
    int sq_cap, sq_out;       /* send queue depth and WRs not yet polled */
    bool broken;
    struct fake_qp *next;
};

struct fake_mr {
    struct ibv_mr mr;
    int access;
    struct fake_mr *next;
};

/* A posted work request waiting to be executed (fake_cfg.send_lag). */
struct pending {
    struct fake_qp *q;
    struct ibv_send_wr wr;
    struct ibv_sge sge;       /* wr.sg_list points here */
    int polls;                /* vb_poll_cq calls since it was posted */
    struct pending *next;     /* the `pending` list, oldest first */
};

static bool configured;
static struct ibv_device devs[FAKE_DEV_MAX];
static struct pending *pending;
static void run_pending(void);
static void flush_pending(struct fake_qp *q, bool with_completions);
static struct fake_qp *qps;
static struct fake_mr *mrs;
static uint32_t next_qpn = 0x100, next_key = 0x1000;

static int env_int(const char *name, int def)
{
    const char *v = getenv(name);
    return v && *v ? atoi(v) : def;
}

void fake_reset(void)
{
    fake_cfg = (struct fake_cfg){
        .ndev = env_int("FAKE_VERBS_NDEV", 1),
        .port_state = IBV_PORT_ACTIVE,
        .link_layer = IBV_LINK_LAYER_INFINIBAND,
        .lid = 7,
        .rd_atom = env_int("FAKE_VERBS_RD_ATOM", 16),
        .fail_state = env_int("FAKE_VERBS_FAIL_STATE", 0),
        .fail_errno = EINVAL,
        .fork_status = IBV_FORK_DISABLED,
        .max_msg_sz = (uint32_t)env_int("FAKE_VERBS_MAX_MSG", 0),
        .send_lag = env_int("FAKE_VERBS_SEND_LAG", 0),
    };
    memset(&fake_stats, 0, sizeof(fake_stats));
    configured = true;
}

static void configure_once(void)
{
    if (!configured) fake_reset();
}

int fake_rkey_valid(uint32_t rkey)
{
    for (struct fake_mr *m = mrs; m; m = m->next)
        if (m->mr.rkey == rkey) return 1;
    return 0;
}

void fake_break_all(void)
{
    for (struct fake_qp *q = qps; q; q = q->next) q->broken = true;
}

static struct fake_qp *qp_of(struct ibv_qp *qp)
{
    return (struct fake_qp *)qp;
}

static struct fake_qp *find_qp(uint32_t qpn)
{
    for (struct fake_qp *q = qps; q; q = q->next)
        if (q->qp.qp_num == qpn) return q;
    return NULL;
}

static struct fake_mr *find_mr(uint32_t key, uint64_t addr, uint64_t len,
                               int need)
{
    for (struct fake_mr *m = mrs; m; m = m->next) {
        if (m->mr.lkey != key) continue;
        uint64_t s = (uintptr_t)m->mr.addr;
        if (addr < s || addr + len > s + m->mr.length) return NULL;
        if ((m->access & need) != need) return NULL;
        return m;
    }
    return NULL;
}

static void cq_push(struct ibv_cq *cq, const struct ibv_wc *wc)
{
    struct fake_cq *c = (struct fake_cq *)cq;
    if (c->count == c->cq.cqe) fake_stats.bad_transition++; /* overrun */
    if (c->count == c->cap) {
        int cap = c->cap ? c->cap * 2 : 64;
        struct ibv_wc *q = malloc(cap * sizeof(*q));
        for (int i = 0; i < c->count; i++) q[i] = c->q[(c->head + i) % c->cap];
        free(c->q);
        c->q = q;
        c->cap = cap;
        c->head = 0;
    }
    c->q[(c->head + c->count) % c->cap] = *wc;
    c->count++;
}

/* ---------------------------------------------------------------------- */

struct ibv_device **vb_get_device_list(int *num_devices)
{
    configure_once();
    if (fake_cfg.ndev <= 0) {
        if (num_devices) *num_devices = 0;
        if (fake_cfg.list_errno) {
            errno = fake_cfg.list_errno;
            return NULL;
        }
        return calloc(1, sizeof(struct ibv_device *));
    }
    int n = fake_cfg.ndev > FAKE_DEV_MAX ? FAKE_DEV_MAX : fake_cfg.ndev;
    struct ibv_device **l = calloc(n + 1, sizeof(*l));
    for (int i = 0; i < n; i++) {
        snprintf(devs[i].name, sizeof(devs[i].name), "fake%d", i);
        devs[i].transport_type =
            (enum ibv_transport_type)fake_cfg.dev_transport[i];
        devs[i].node_type = devs[i].transport_type == IBV_TRANSPORT_IWARP
                                ? IBV_NODE_RNIC
                                : IBV_NODE_CA;
        l[i] = &devs[i];
    }
    if (num_devices) *num_devices = n;
    return l;
}

void vb_free_device_list(struct ibv_device **list)
{
    free(list);
}

const char *vb_get_device_name(struct ibv_device *device)
{
    return device->name;
}

struct ibv_context *vb_open_device(struct ibv_device *device)
{
    struct ibv_context *c = calloc(1, sizeof(*c));
    c->device = device;
    fake_stats.live_ctx++;
    return c;
}

int vb_close_device(struct ibv_context *context)
{
    free(context);
    fake_stats.live_ctx--;
    return 0;
}

int vb_query_device(struct ibv_context *context, struct ibv_device_attr *attr)
{
    memset(attr, 0, sizeof(*attr));
    attr->phys_port_cnt = 2;
    attr->max_qp_rd_atom = fake_cfg.rd_atom;
    attr->max_qp_init_rd_atom = fake_cfg.rd_atom;
    attr->max_cqe = 1 << 20;
    attr->max_qp_wr = 1 << 15;
    return 0;
}

static int link_layer_of(struct ibv_context *context)
{
    long i = context->device - devs;
    if (i >= 0 && i < FAKE_DEV_MAX && fake_cfg.dev_link_layer[i])
        return fake_cfg.dev_link_layer[i];
    return fake_cfg.link_layer;
}

int vb_query_port(struct ibv_context *context, uint8_t port,
                  struct ibv_port_attr *attr)
{
    if (port < 1 || port > 2) return EINVAL;
    memset(attr, 0, sizeof(*attr));
    attr->state = fake_cfg.port_state;
    attr->active_mtu = IBV_MTU_4096;
    attr->max_mtu = IBV_MTU_4096;
    attr->lid = fake_cfg.lid;
    attr->link_layer = (uint8_t)link_layer_of(context);
    attr->max_msg_sz = fake_cfg.max_msg_sz ? fake_cfg.max_msg_sz : 1u << 31;
    attr->gid_tbl_len = fake_cfg.ngid ? fake_cfg.ngid : 1;
    return 0;
}

/* Entry `index` of the GID table of the port; false when there is none. */
static bool gid_entry(struct ibv_context *context, uint8_t port, int index,
                      struct fake_gid *g)
{
    if (port < 1 || port > 2 || index < 0) return false;
    if (fake_cfg.ngid) {
        if (index >= fake_cfg.ngid || index >= FAKE_GID_MAX) return false;
        *g = fake_cfg.gid[index];
        return true;
    }
    if (index != 0) return false;
    memset(g, 0, sizeof(*g));
    g->raw[0] = 0xfe;
    g->raw[1] = 0x80;
    g->raw[15] = port;
    g->type = link_layer_of(context) == IBV_LINK_LAYER_ETHERNET
                  ? IBV_GID_TYPE_ROCE_V1
                  : IBV_GID_TYPE_IB;
    return true;
}

int vb_query_gid(struct ibv_context *context, uint8_t port, int index,
                 union ibv_gid *gid)
{
    struct fake_gid g;
    if (!gid_entry(context, port, index, &g)) return EINVAL;
    memcpy(gid->raw, g.raw, 16);
    return 0;
}

int vb_query_gid_ex(struct ibv_context *context, uint32_t port,
                    uint32_t index, struct ibv_gid_entry *entry)
{
    struct fake_gid g;
    if (port > 255 || index > 255 ||
        !gid_entry(context, (uint8_t)port, (int)index, &g))
        return ENODATA;
    memset(entry, 0, sizeof(*entry));
    memcpy(entry->gid.raw, g.raw, 16);
    entry->gid_index = index;
    entry->port_num = port;
    entry->gid_type = (uint32_t)g.type;
    return 0;
}

struct ibv_pd *vb_alloc_pd(struct ibv_context *context)
{
    struct ibv_pd *pd = calloc(1, sizeof(*pd));
    pd->context = context;
    fake_stats.live_pd++;
    return pd;
}

int vb_dealloc_pd(struct ibv_pd *pd)
{
    free(pd);
    fake_stats.live_pd--;
    return 0;
}

struct ibv_mr *vb_reg_mr(struct ibv_pd *pd, void *addr, size_t length,
                         int access)
{
    if (fake_cfg.fail_reg) {
        errno = fake_cfg.fail_reg;
        return NULL;
    }
    if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
        !(access & IBV_ACCESS_LOCAL_WRITE)) {
        errno = EINVAL;
        return NULL;
    }
    struct fake_mr *m = calloc(1, sizeof(*m));
    m->mr.context = pd->context;
    m->mr.pd = pd;
    m->mr.addr = addr;
    m->mr.length = length;
    m->mr.lkey = m->mr.rkey = next_key++;
    m->access = access;
    m->next = mrs;
    mrs = m;
    fake_stats.live_mr++;
    fake_stats.reg_calls++;
    return &m->mr;
}

int vb_dereg_mr(struct ibv_mr *mr)
{
    for (struct fake_mr **p = &mrs; *p; p = &(*p)->next) {
        if (&(*p)->mr != mr) continue;
        struct fake_mr *m = *p;
        *p = m->next;
        free(m);
        fake_stats.live_mr--;
        return 0;
    }
    return EINVAL;
}

struct ibv_cq *vb_create_cq(struct ibv_context *context, int cqe)
{
    struct fake_cq *c = calloc(1, sizeof(*c));
    c->cq.context = context;
    c->cq.cqe = cqe;
    fake_stats.live_cq++;
    return &c->cq;
}

int vb_destroy_cq(struct ibv_cq *cq)
{
    struct fake_cq *c = (struct fake_cq *)cq;
    free(c->q);
    free(c);
    fake_stats.live_cq--;
    return 0;
}

int vb_poll_cq(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc)
{
    struct fake_cq *c = (struct fake_cq *)cq;
    int n = 0;
    fake_stats.polls++;
    run_pending();
    while (n < num_entries && c->count) {
        wc[n] = c->q[c->head];
        c->head = (c->head + 1) % c->cap;
        c->count--;
        if (wc[n].opcode == IBV_WC_SEND || wc[n].opcode == IBV_WC_RDMA_READ ||
            wc[n].opcode == IBV_WC_RDMA_WRITE) {
            struct fake_qp *q = find_qp(wc[n].qp_num);
            if (q && q->sq_out) q->sq_out--;
        }
        n++;
    }
    return n;
}

struct ibv_qp *vb_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
    if (attr->qp_type != IBV_QPT_RC || !attr->send_cq || !attr->recv_cq) {
        errno = EINVAL;
        return NULL;
    }
    struct fake_qp *q = calloc(1, sizeof(*q));
    q->qp.context = pd->context;
    q->qp.pd = pd;
    q->qp.send_cq = attr->send_cq;
    q->qp.recv_cq = attr->recv_cq;
    q->qp.qp_num = next_qpn++;
    q->qp.state = IBV_QPS_RESET;
    q->qp.qp_type = IBV_QPT_RC;
    q->rq_cap = (int)attr->cap.max_recv_wr;
    q->rq = calloc(q->rq_cap ? q->rq_cap : 1, sizeof(*q->rq));
    q->sq_cap = (int)attr->cap.max_send_wr;
    q->next = qps;
    qps = q;
    fake_stats.live_qp++;
    return &q->qp;
}

static const int required[] = {
    [IBV_QPS_INIT] = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                     IBV_QP_ACCESS_FLAGS,
    [IBV_QPS_RTR] = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                    IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                    IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
    [IBV_QPS_RTS] = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                    IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC,
};

int vb_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask)
{
    struct fake_qp *q = qp_of(qp);
    if (fake_stats.nmodify < FAKE_MODIFY_MAX) {
        struct fake_modify *m = &fake_stats.modify[fake_stats.nmodify++];
        m->qpn = qp->qp_num;
        m->mask = attr_mask;
        m->attr = *attr;
    }
    if (!(attr_mask & IBV_QP_STATE)) return 0;
    enum ibv_qp_state to = attr->qp_state, from = qp->state;
    if (fake_cfg.fail_state && (int)to == fake_cfg.fail_state) {
        if (fake_cfg.fail_skip <= 0) return fake_cfg.fail_errno;
        fake_cfg.fail_skip--;
    }
    bool legal = to == IBV_QPS_ERR || to == IBV_QPS_RESET ||
                 (from == IBV_QPS_RESET && to == IBV_QPS_INIT) ||
                 (from == IBV_QPS_INIT && to == IBV_QPS_RTR) ||
                 (from == IBV_QPS_RTR && to == IBV_QPS_RTS);
    if (!legal) {
        fake_stats.bad_transition++;
        return EINVAL;
    }
    if (to <= IBV_QPS_RTS && to >= IBV_QPS_INIT &&
        (attr_mask & required[to]) != required[to]) {
        fake_stats.bad_transition++;
        return EINVAL;
    }
    switch (to) {
    case IBV_QPS_INIT:
        if (attr->port_num < 1 || attr->port_num > 2) return EINVAL;
        q->access = attr->qp_access_flags;
        break;
    case IBV_QPS_RTR:
        if (attr->path_mtu < IBV_MTU_256 || attr->path_mtu > IBV_MTU_4096 ||
            (!attr->ah_attr.is_global && !attr->ah_attr.dlid) ||
            !attr->ah_attr.port_num || attr->dest_qp_num >= (1u << 24) ||
            attr->rq_psn >= (1u << 24)) {
            fake_stats.bad_transition++;
            return EINVAL;
        }
        q->dest = attr->dest_qp_num;
        q->max_dest_rd = attr->max_dest_rd_atomic;
        break;
    case IBV_QPS_RTS:
        if (attr->sq_psn >= (1u << 24) || attr->retry_cnt > 7 ||
            attr->rnr_retry > 7 || !attr->timeout) {
            fake_stats.bad_transition++;
            return EINVAL;
        }
        q->max_rd = attr->max_rd_atomic;
        break;
    case IBV_QPS_ERR:
        /* A real HCA flushes the work requests not yet executed and the
         * posted receives. */
        flush_pending(q, true);
        while (q->rq_count) {
            struct ibv_wc wc = {
                .wr_id = q->rq[q->rq_head].wr_id,
                .status = IBV_WC_WR_FLUSH_ERR,
                .opcode = IBV_WC_RECV,
                .qp_num = qp->qp_num,
            };
            q->rq_head = (q->rq_head + 1) % q->rq_cap;
            q->rq_count--;
            cq_push(qp->recv_cq, &wc);
        }
        break;
    default:
        break;
    }
    qp->state = to;
    return 0;
}

int vb_destroy_qp(struct ibv_qp *qp)
{
    for (struct fake_qp **p = &qps; *p; p = &(*p)->next) {
        if (&(*p)->qp != qp) continue;
        struct fake_qp *q = *p;
        flush_pending(q, false);
        *p = q->next;
        free(q->rq);
        free(q);
        fake_stats.live_qp--;
        return 0;
    }
    return EINVAL;
}

static void complete(struct fake_qp *q, const struct ibv_send_wr *wr,
                     enum ibv_wc_status st, enum ibv_wc_opcode op,
                     uint32_t len)
{
    q->sq_out++;
    if (!(wr->send_flags & IBV_SEND_SIGNALED) && st == IBV_WC_SUCCESS) {
        q->sq_out--;
        return;
    }
    struct ibv_wc wc = {
        .wr_id = wr->wr_id,
        .status = st,
        .opcode = op,
        .byte_len = len,
        .qp_num = q->qp.qp_num,
    };
    cq_push(q->qp.send_cq, &wc);
}

/* A SEND of len bytes at buf arriving at q, which has a receive posted:
 * into the oldest one, with its completion. false when it does not fit
 * (a completion with IBV_WC_LOC_LEN_ERR, nothing copied). */
static bool receive(struct fake_qp *q, const void *buf, uint32_t len)
{
    struct rq_entry *r = &q->rq[q->rq_head];
    q->rq_head = (q->rq_head + 1) % q->rq_cap;
    q->rq_count--;
    struct ibv_wc wc = {
        .wr_id = r->wr_id,
        .opcode = IBV_WC_RECV,
        .byte_len = len,
        .qp_num = q->qp.qp_num,
    };
    bool fits = len <= r->length;
    if (fits) memcpy((void *)(uintptr_t)r->addr, buf, len);
    else wc.status = IBV_WC_LOC_LEN_ERR;
    cq_push(q->qp.recv_cq, &wc);
    return fits;
}

/* Carry out a posted work request (sq_out counts it once it completes). */
static int execute(struct fake_qp *q, struct ibv_send_wr *wr)
{
    enum ibv_wc_opcode op = wr->opcode == IBV_WR_RDMA_READ    ? IBV_WC_RDMA_READ
                            : wr->opcode == IBV_WR_RDMA_WRITE ? IBV_WC_RDMA_WRITE
                                                              : IBV_WC_SEND;
    if (q->qp.state == IBV_QPS_ERR || q->broken) {
        q->qp.state = IBV_QPS_ERR;
        complete(q, wr,
                 q->broken ? IBV_WC_RETRY_EXC_ERR : IBV_WC_WR_FLUSH_ERR, op, 0);
        q->broken = false; /* later ones are flushed */
        return 0;
    }
    if (wr->num_sge != 1) return EINVAL;
    struct ibv_sge *sge = wr->sg_list;
    struct fake_qp *peer = find_qp(q->dest);
    if (!peer || peer->qp.state < IBV_QPS_RTR || peer->qp.state > IBV_QPS_RTS) {
        q->qp.state = IBV_QPS_ERR;
        complete(q, wr, IBV_WC_RETRY_EXC_ERR, op, 0);
        return 0;
    }
    if (wr->opcode == IBV_WR_SEND) {
        if (!find_mr(sge->lkey, sge->addr, sge->length, 0)) {
            fake_stats.bad_key++;
            complete(q, wr, IBV_WC_LOC_PROT_ERR, op, 0);
            return 0;
        }
        if (!peer->rq_count) {
            fake_stats.rnr++;
            q->qp.state = IBV_QPS_ERR;
            complete(q, wr, IBV_WC_RNR_RETRY_EXC_ERR, op, 0);
            return 0;
        }
        if (!receive(peer, (void *)(uintptr_t)sge->addr, sge->length)) {
            complete(q, wr, IBV_WC_REM_INV_REQ_ERR, op, 0);
            return 0;
        }
        fake_stats.sends++;
        complete(q, wr, IBV_WC_SUCCESS, op, sge->length);
        return 0;
    }
    if (wr->opcode == IBV_WR_RDMA_READ || wr->opcode == IBV_WR_RDMA_WRITE) {
        bool read = wr->opcode == IBV_WR_RDMA_READ;
        int remote = read ? IBV_ACCESS_REMOTE_READ : IBV_ACCESS_REMOTE_WRITE;
        if (!find_mr(sge->lkey, sge->addr, sge->length,
                     read ? IBV_ACCESS_LOCAL_WRITE : 0)) {
            fake_stats.bad_key++;
            complete(q, wr, IBV_WC_LOC_PROT_ERR, op, 0);
            return 0;
        }
        uint64_t raddr = wr->wr.rdma.remote_addr;
        if ((read && (!q->max_rd || !peer->max_dest_rd)) ||
            !(peer->access & remote) ||
            !find_mr(wr->wr.rdma.rkey, raddr, sge->length, remote)) {
            fake_stats.bad_key++;
            q->qp.state = IBV_QPS_ERR;
            complete(q, wr, IBV_WC_REM_ACCESS_ERR, op, 0);
            return 0;
        }
        void *l = (void *)(uintptr_t)sge->addr, *r = (void *)(uintptr_t)raddr;
        /* (both ends are in this process: a made-up key may name the
         * other buffer of the pair) */
        memmove(read ? l : r, read ? r : l, sge->length);
        if (read) fake_stats.reads++;
        else fake_stats.writes++;
        complete(q, wr, IBV_WC_SUCCESS, op, sge->length);
        return 0;
    }
    return EINVAL;
}

static int post_one(struct fake_qp *q, struct ibv_send_wr *wr)
{
    if (q->qp.state != IBV_QPS_RTS && q->qp.state != IBV_QPS_ERR)
        return EINVAL;
    if (q->sq_out >= q->sq_cap) return ENOMEM; /* send queue full */
    if (fake_cfg.send_lag <= 0 || q->qp.state != IBV_QPS_RTS || q->broken)
        return execute(q, wr);
    if (wr->num_sge != 1 ||
        (wr->opcode != IBV_WR_SEND && wr->opcode != IBV_WR_RDMA_READ &&
         wr->opcode != IBV_WR_RDMA_WRITE))
        return EINVAL;
    struct pending *p = calloc(1, sizeof(*p));
    p->q = q;
    p->wr = *wr;
    p->wr.next = NULL;
    p->sge = *wr->sg_list;
    p->wr.sg_list = &p->sge;
    struct pending **tail = &pending;
    while (*tail) tail = &(*tail)->next;
    *tail = p;
    q->sq_out++;
    return 0;
}

/* Execute the work requests that have waited send_lag polls, in order. */
static void run_pending(void)
{
    for (struct pending *p = pending; p; p = p->next) p->polls++;
    while (pending && pending->polls >= fake_cfg.send_lag) {
        struct pending *p = pending;
        pending = p->next;
        p->q->sq_out--; /* complete() counts it again */
        execute(p->q, &p->wr);
        free(p);
    }
}

/* The work requests of q that have not executed: flushed with an error
 * completion (queue pair to ERR), or dropped (queue pair destroyed). */
static void flush_pending(struct fake_qp *q, bool with_completions)
{
    struct pending **pp = &pending;
    while (*pp) {
        struct pending *p = *pp;
        if (p->q != q) {
            pp = &p->next;
            continue;
        }
        *pp = p->next;
        fake_stats.flushed++;
        q->sq_out--;
        if (with_completions) {
            enum ibv_wc_opcode op =
                p->wr.opcode == IBV_WR_RDMA_READ    ? IBV_WC_RDMA_READ
                : p->wr.opcode == IBV_WR_RDMA_WRITE ? IBV_WC_RDMA_WRITE
                                                    : IBV_WC_SEND;
            complete(q, &p->wr, IBV_WC_WR_FLUSH_ERR, op, 0);
        }
        free(p);
    }
}

int fake_deliver(uint32_t qpn, const void *buf, uint32_t len)
{
    struct fake_qp *q = find_qp(qpn);
    if (!q || q->qp.state < IBV_QPS_RTR || q->qp.state > IBV_QPS_RTS ||
        !q->rq_count)
        return -1;
    receive(q, buf, len);
    return 0;
}

int vb_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
                 struct ibv_send_wr **bad_wr)
{
    for (; wr; wr = wr->next) {
        int rc = post_one(qp_of(qp), wr);
        if (rc) {
            if (bad_wr) *bad_wr = wr;
            return rc;
        }
    }
    return 0;
}

int vb_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
                 struct ibv_recv_wr **bad_wr)
{
    struct fake_qp *q = qp_of(qp);
    for (; wr; wr = wr->next) {
        if (q->qp.state == IBV_QPS_RESET || q->rq_count == q->rq_cap ||
            wr->num_sge != 1) {
            if (bad_wr) *bad_wr = wr;
            return ENOMEM;
        }
        if (!find_mr(wr->sg_list->lkey, wr->sg_list->addr, wr->sg_list->length,
                     IBV_ACCESS_LOCAL_WRITE)) {
            fake_stats.bad_key++;
            if (bad_wr) *bad_wr = wr;
            return EINVAL;
        }
        struct rq_entry *r = &q->rq[(q->rq_head + q->rq_count) % q->rq_cap];
        r->wr_id = wr->wr_id;
        r->addr = wr->sg_list->addr;
        r->length = wr->sg_list->length;
        r->lkey = wr->sg_list->lkey;
        q->rq_count++;
    }
    return 0;
}

int vb_fork_init(void)
{
    fake_stats.fork_init++;
    return 0;
}

enum ibv_fork_status vb_is_fork_initialized(void)
{
    configure_once();
    return (enum ibv_fork_status)fake_cfg.fork_status;
}

const char *vb_wc_status_str(enum ibv_wc_status status)
{
    switch (status) {
    case IBV_WC_SUCCESS: return "success";
    case IBV_WC_RETRY_EXC_ERR: return "transport retry counter exceeded";
    case IBV_WC_RNR_RETRY_EXC_ERR: return "RNR retry counter exceeded";
    case IBV_WC_WR_FLUSH_ERR: return "Work Request Flushed Error";
    case IBV_WC_REM_ACCESS_ERR: return "remote access error";
    case IBV_WC_LOC_PROT_ERR: return "local protection error";
    default: return "other error";
    }
}
