/*
 * The verbs plugin: connections over InfiniBand/RoCE reliable-connected
 * queue pairs (libibverbs), loaded as libpscom4verbs.so.
 *
 * Wire-up: hs_start creates the QP, brings it to INIT and posts the receive
 * ring; the blob (wireup.h) carries QP number, PSN, LID, GID, MTU, RDMA
 * read depth and the ring's geometry; hs_connect takes the QP through RTR to
 * RTS (qp.h). open() keeps the pre-connection's TCP socket only to notice a
 * peer that went away.
 *
 * Eager path: each side posts `PSP_VERBS_RECVQ_SIZE` receive slots of
 * `PSP_VERBS_BUFSIZE` bytes. The sender copies the core's frame stream into
 * a registered send slot (any number of frames, or a piece of one) behind an
 * 8-byte header and posts it as one SEND; copying ends the core's interest
 * in the bytes (pscom_plugin_tx_done). Credits (credits.h) make sure every
 * SEND finds a posted receive; they come back in the header of every
 * message, or in a credit-only message.
 *
 * Rendezvous: rndv_describe registers the send buffer (through the
 * registration cache, mcache.h) and hands the peer address, length, rkey and
 * a handle; rndv_pull registers the receive buffer and RDMA-reads into it,
 * polling the completion queue until the read is done, then returns the
 * handle to the sender in the next message header so that it can drop its
 * registration.
 *
 * One completion queue serves all connections. A work request id carries
 * the connection's key (table index and generation) so that completions of
 * closed connections are recognised and dropped. Completions seen while
 * rndv_pull or close() wait for their own are queued and handled by the
 * next progress call, in order; those of a connection not yet open() are
 * kept with it until it is.
 *
 * Design notes, settings and the fork and registration-cache policies are
 * in doc/plugins/verbs.md.
 */
#include <errno.h>
#include <malloc.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "pscom_plugin.h"

#include "credits.h"
#include "mcache.h"
#include "qp.h"
#include "verbs_wrap.h"
#include "wireup.h"

#define IOV_BATCH 32
#define CQ_BATCH 32
#define RD_WR_MAX 4            /* RDMA reads in flight per connection */
#define CLOSE_DRAIN_MS 2000    /* close() waits this long for sends */
#define LENT_MAX 65536         /* rendezvous buffers lent per connection */
#define RMA_WR_MAX 8           /* one-sided RDMA writes/reads in flight per
                                * connection (send queue entries) */
#define RMA_OPS_MAX 64         /* one-sided operations under way per connection */

#define LOG_ERR 1
#define LOG_WARN 2
#define LOG_INFO 3
#define LOG_DEBUG 4
#define LOG_VERBOSE 5

/* wr_id: connection key in the high 32 bits, kind and slot below. */
enum wr_kind { WR_RECV = 1, WR_SEND = 2, WR_READ = 3, WR_RMA = 4 };
#define WR_ID(key, kind, slot)                                                 \
    (((uint64_t)(key) << 32) | ((uint64_t)(kind) << 24) | (uint64_t)(slot))
#define WR_KEY(id) ((uint32_t)((id) >> 32))
#define WR_KIND(id) ((unsigned)((id) >> 24) & 0xff)
#define WR_SLOT(id) ((uint32_t)(id) & 0xffffff)

/* Key = generation (12 bits) above the table index (20 bits). */
#define KEY_IDX_BITS 20
#define KEY_IDX_MAX (1u << KEY_IDX_BITS)

static char *cfg_hca;
static unsigned cfg_port, cfg_sl, cfg_mcache_size;
static int cfg_gid_index; /* -1: chosen per port (pick_gid_index) */
static unsigned cfg_recvq, cfg_sendq, cfg_cq_size, cfg_timeout, cfg_retry;
static size_t cfg_bufsize, cfg_rendezvous, cfg_rma;
static int cfg_fork;

static const pscom_config_row_t vb_rows[] = {
    {"PSP_VERBS_HCA", PSCOM_CONFIG_STR, NULL,
     "RDMA device to use (e.g. mlx5_0); unset: the first with an active "
     "InfiniBand port, else the first with an active RoCE port",
     "verbs", NULL, &cfg_hca},
    {"PSP_VERBS_PORT", PSCOM_CONFIG_UINT, "0",
     "port of the RDMA device; 0: the first active port (InfiniBand before "
     "RoCE)", "verbs", NULL, &cfg_port},
    {"PSP_VERBS_GID_INDEX", PSCOM_CONFIG_INT, "-1",
     "index of the port's GID used for routing by GID; -1: 0 on InfiniBand, "
     "on RoCE the first RoCE v2 entry with an IPv4 address, else the first "
     "RoCE v2 entry, else 0", "verbs", NULL, &cfg_gid_index},
    {"PSP_VERBS_SL", PSCOM_CONFIG_UINT, "0",
     "InfiniBand service level of verbs connections", "verbs", NULL, &cfg_sl},
    {"PSP_VERBS_MCACHE_SIZE", PSCOM_CONFIG_UINT, "0",
     "memory registrations kept for reuse by rendezvous; 0 turns the cache "
     "off (see doc/plugins/verbs.md before raising it)", "verbs", NULL,
     &cfg_mcache_size},
    {"PSP_VERBS_RENDEZVOUS", PSCOM_CONFIG_SIZE, "32768",
     "rendezvous threshold on verbs connections: bodies of at least this "
     "size are fetched by RDMA read", "verbs", "PSP_RENDEZVOUS",
     &cfg_rendezvous},
    {"PSP_VERBS_RECVQ_SIZE", PSCOM_CONFIG_UINT, "16",
     "receive slots per verbs connection (the peer's send credits)", "verbs",
     NULL, &cfg_recvq},
    {"PSP_VERBS_SENDQ_SIZE", PSCOM_CONFIG_UINT, "16",
     "send slots per verbs connection", "verbs", NULL, &cfg_sendq},
    {"PSP_VERBS_BUFSIZE", PSCOM_CONFIG_SIZE, "16384",
     "bytes per send and receive slot of verbs connections, header "
     "included", "verbs", NULL, &cfg_bufsize},
    {"PSP_VERBS_CQ_SIZE", PSCOM_CONFIG_UINT, "16384",
     "entries of the completion queue shared by all verbs connections; a "
     "connection needs RECVQ_SIZE + SENDQ_SIZE + 12", "verbs", NULL,
     &cfg_cq_size},
    {"PSP_VERBS_TIMEOUT", PSCOM_CONFIG_UINT, "14",
     "ACK timeout of verbs queue pairs: 4.096 us * 2^value", "verbs",
     NULL, &cfg_timeout},
    {"PSP_VERBS_RETRY", PSCOM_CONFIG_UINT, "7",
     "transport retries before a verbs connection fails", "verbs",
     NULL, &cfg_retry},
    {"PSP_VERBS_FORK", PSCOM_CONFIG_BOOL, "0",
     "call ibv_fork_init() so that fork() is safe with registered memory "
     "(not needed on kernels with copy-on-fork support)", "verbs", NULL,
     &cfg_fork},
    {"PSP_VERBS_RMA", PSCOM_CONFIG_SIZE, "8k",
     "one-sided put and get of at least this many bytes move by RDMA write "
     "and read on the connection's queue pair instead of messages through "
     "the core; inf: never (queue pairs then allow no remote write)",
     "verbs", NULL, &cfg_rma},
};
/* What the queue pair attributes and the credit ring can hold. */
static const pscom_config_range_t vb_ranges[] = {
    {"PSP_VERBS_RECVQ_SIZE", VB_CREDIT_RING_MIN, VB_CREDIT_RING_MAX},
    {"PSP_VERBS_SENDQ_SIZE", 1, VB_CREDIT_RING_MAX},
    {"PSP_VERBS_BUFSIZE", VB_SLOT_MIN, VB_SLOT_MAX},
    {"PSP_VERBS_CQ_SIZE", 64, UINT32_MAX},
    {"PSP_VERBS_TIMEOUT", 1, 31},
    {"PSP_VERBS_RETRY", 0, 7},
    {"PSP_VERBS_SL", 0, 15},
    {"PSP_VERBS_PORT", 0, 255},
    /* An address vector names the source GID with 8 bits. */
    {"PSP_VERBS_GID_INDEX", -1, 255},
};


/* A buffer lent to the peer by rndv_describe. */
struct lent {
    vb_mentry_t *e;  /* NULL: free */
    uint16_t gen;    /* changes with every use, so stale handles fail */
};

struct vb_con {
    pscom_plugin_con_t *con;
    uint32_t key;               /* in the connection table; 0: not keyed */
    bool open;                  /* open() succeeded */
    bool dead;                  /* failed, or the core said it is closing:
                                 * no more upcalls */
    bool failed;                /* the transport failed: close() need not
                                 * wait for posted sends */
    bool err_pending;           /* a failure waits to be reported */
    const char *err_what;
    int err_errno;
    int fd;                     /* the pre-connection socket, or -1 */

    struct ibv_qp *qp;
    uint32_t psn;
    unsigned cq_reserved;       /* entries of vb.cq this connection may use */

    uint8_t *rx_buf;            /* receive slots */
    struct ibv_mr *rx_mr;
    uint32_t rx_slots, rx_slot_size;

    uint8_t *tx_buf;            /* send slots */
    struct ibv_mr *tx_mr;
    vb_ring_t tx;
    uint32_t tx_slot_size;
    uint32_t tx_cap;            /* bytes per message: min(ours, the peer's slot) */

    vb_credit_t cr;

    bool read_ok;               /* both HCAs do RDMA read (rendezvous, get) */
    unsigned reads_out;         /* RDMA reads in flight */
    int read_status;            /* first failed read (IBV_WC_*), 0: none */

    struct lent *lent;          /* buffers lent to the peer */
    uint32_t lent_cap;
    uint32_t *rel;              /* handles to return to the peer, in order */
    uint32_t rel_count, rel_cap;

    /* Completions that came before open(), and those that come while
     * they are replayed (they queue behind them): early[early_next ..
     * early_count) are still to be handled. */
    struct ibv_wc *early;
    uint32_t early_next, early_count, early_cap;

    uint16_t peer_lid;          /* the peer's port, to check its keys */
    uint8_t peer_gid[16];
    bool peer_gid_valid;
    struct vb_rma **rma_tab;    /* one-sided operations by slot (malloc) */
    struct vb_rma *rma_wait;    /* vb_rma.next_wait: chunks left to post */
    struct vb_rma **rma_wait_tail;
    unsigned rma_out;           /* their work requests in flight */
    bool rma_finished;          /* some of them wait to be reported */

    bool dirty;
    struct vb_con *dirty_next;  /* vb.dirty: to flush at the end of progress */
    bool replay;
    struct vb_con *replay_next; /* vb.replay: open, with early completions
                                 * to replay */
    struct vb_con *next;        /* vb.cons: open connections */
    struct vb_con **pprev;
};

struct table_slot {
    struct vb_con *vc;
    uint32_t gen;
};

/* The plugin's context: one device, port, protection domain and CQ. */
static struct {
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_cq *cq;
    char dev_name[64];
    vb_qp_local_t local;
    uint32_t max_msg_sz;      /* largest single RDMA read */
    unsigned cq_size, cq_used;
    vb_mcache_t *mc;

    struct table_slot *table; /* connections by key */
    uint32_t table_cap;

    struct ibv_wc *dq;        /* deferred completions (FIFO) */
    uint32_t dq_head, dq_count, dq_cap;
    /* Completions taken and not yet handled, shared by nested vb_progress
     * calls: an upcall's callback may wait for completions that its outer
     * call has taken already (closing a connection waits for its sends). */
    struct ibv_wc wc[CQ_BATCH];
    int wc_next, wc_n;

    struct vb_con *dirty;
    struct vb_con *replay;
    struct vb_con *cons;
    bool warned_reg;          /* a registration failure was reported */
} vb;

static int vb_progress(void);

/* ---------------------------------------------------------------------- */
/* Small helpers                                                          */
/* ---------------------------------------------------------------------- */

static const char *con_str(const struct vb_con *vc)
{
    return vc->con ? pscom_plugin_con_str(vc->con) : "(handshake)";
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static uint32_t random_psn(void)
{
    static uint32_t fallback;
    uint32_t v;
    if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != (ssize_t)sizeof(v)) {
        fallback = fallback * 1103515245u + 12345u +
                   (uint32_t)getpid() + (uint32_t)now_ms();
        v = fallback;
    }
    return v & 0xffffff;
}

static const char *mtu_str(uint8_t mtu)
{
    static const char *const s[] = {"?", "256", "512", "1024", "2048", "4096"};
    return mtu <= 5 ? s[mtu] : "?";
}

/* Report a failure from a context where the core may be called. */
static void con_fail(struct vb_con *vc, pscom_op_t op, pscom_err_t err,
                     const char *what, int sys_errno)
{
    vc->failed = true;
    if (vc->dead) return;
    vc->dead = true;
    if (vc->open) pscom_plugin_con_error(vc->con, op, err, what, sys_errno);
}

/* Report a failure later, from progress (we are inside a core call). */
static void con_fail_later(struct vb_con *vc, const char *what, int sys_errno);

/* ---------------------------------------------------------------------- */
/* The connection table                                                   */
/* ---------------------------------------------------------------------- */

static int table_add(struct vb_con *vc)
{
    uint32_t i;
    for (i = 0; i < vb.table_cap; i++)
        if (!vb.table[i].vc) break;
    if (i == vb.table_cap) {
        if (vb.table_cap >= KEY_IDX_MAX) return -ENOSPC;
        uint32_t cap = vb.table_cap ? vb.table_cap * 2 : 64;
        struct table_slot *t = realloc(vb.table, cap * sizeof(*t));
        if (!t) return -ENOMEM;
        memset(t + vb.table_cap, 0, (cap - vb.table_cap) * sizeof(*t));
        vb.table = t;
        vb.table_cap = cap;
    }
    vb.table[i].vc = vc;
    vb.table[i].gen = (vb.table[i].gen + 1) & 0xfff;
    if (!vb.table[i].gen) vb.table[i].gen = 1; /* key 0 means "none" */
    vc->key = (vb.table[i].gen << KEY_IDX_BITS) | i;
    return 0;
}

static struct vb_con *table_get(uint32_t key)
{
    uint32_t i = key & (KEY_IDX_MAX - 1);
    if (i >= vb.table_cap || !vb.table[i].vc) return NULL;
    if (vb.table[i].gen != key >> KEY_IDX_BITS) return NULL;
    return vb.table[i].vc;
}

static void table_del(struct vb_con *vc)
{
    if (!vc->key) return;
    uint32_t i = vc->key & (KEY_IDX_MAX - 1);
    if (i < vb.table_cap && vb.table[i].vc == vc) vb.table[i].vc = NULL;
    vc->key = 0;
}

/* ---------------------------------------------------------------------- */
/* Deferred completions                                                   */
/* ---------------------------------------------------------------------- */

static int dq_push(const struct ibv_wc *wc)
{
    if (vb.dq_count == vb.dq_cap) {
        uint32_t cap = vb.dq_cap ? vb.dq_cap * 2 : 256;
        struct ibv_wc *q = malloc(cap * sizeof(*q));
        if (!q) return -ENOMEM;
        for (uint32_t i = 0; i < vb.dq_count; i++)
            q[i] = vb.dq[(vb.dq_head + i) % vb.dq_cap];
        free(vb.dq);
        vb.dq = q;
        vb.dq_cap = cap;
        vb.dq_head = 0;
    }
    vb.dq[(vb.dq_head + vb.dq_count) % vb.dq_cap] = *wc;
    vb.dq_count++;
    return 0;
}

static int dq_take(struct ibv_wc *wc, int max)
{
    int n = 0;
    while (n < max && vb.dq_count) {
        wc[n++] = vb.dq[vb.dq_head];
        vb.dq_head = (vb.dq_head + 1) % vb.dq_cap;
        vb.dq_count--;
    }
    return n;
}

static void mark_dirty(struct vb_con *vc)
{
    if (vc->dirty) return;
    vc->dirty = true;
    vc->dirty_next = vb.dirty;
    vb.dirty = vc;
}

static void unlink_lists(struct vb_con *vc)
{
    for (struct vb_con **p = &vb.dirty; *p; p = &(*p)->dirty_next)
        if (*p == vc) {
            *p = vc->dirty_next;
            break;
        }
    vc->dirty = false;
    for (struct vb_con **p = &vb.replay; *p; p = &(*p)->replay_next)
        if (*p == vc) {
            *p = vc->replay_next;
            break;
        }
    vc->replay = false;
}

static void con_fail_later(struct vb_con *vc, const char *what, int sys_errno)
{
    vc->failed = true;
    if (vc->dead || vc->err_pending) return;
    vc->err_pending = true;
    vc->err_what = what;
    vc->err_errno = sys_errno;
    mark_dirty(vc);
}

/* ---------------------------------------------------------------------- */
/* Memory registration                                                    */
/* ---------------------------------------------------------------------- */

static int mc_reg(void *arg, vb_mreg_t *r)
{
    errno = 0;
    struct ibv_mr *mr = vb_reg_mr(vb.pd, r->addr, r->len, r->access);
    if (!mr) return errno ? -errno : -ENOMEM;
    r->lkey = mr->lkey;
    r->rkey = mr->rkey;
    r->handle = mr;
    return 0;
}

static void mc_dereg(void *arg, vb_mreg_t *r)
{
    int rc = vb_dereg_mr(r->handle);
    if (rc)
        pscom_plugin_log(LOG_WARN, "verbs: ibv_dereg_mr of %zu bytes at %p "
                         "failed: %s", r->len, r->addr, strerror(rc));
}

static const vb_mcache_ops_t mc_ops = {.reg = mc_reg, .dereg = mc_dereg};

/* What the peer may touch is registered to the byte (mcache.h). */
#define PEER_ACCESS                                                            \
    (IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)

static void warn_reg(const char *what, size_t len, int rc)
{
    if (vb.warned_reg) return;
    vb.warned_reg = true;
    pscom_plugin_log(LOG_WARN, "verbs: cannot register %zu bytes for %s: %s; "
                     "such messages use the copying rendezvous (check "
                     "'ulimit -l', the locked-memory limit)", len, what,
                     strerror(-rc));
}

/* ---------------------------------------------------------------------- */
/* Init and destroy                                                       */
/* ---------------------------------------------------------------------- */

/* Must run before any other verbs call (ibv_fork_init(3)). */
static void fork_policy(void)
{
    enum ibv_fork_status st = vb_is_fork_initialized();
    if (st == IBV_FORK_UNNEEDED) {
        pscom_plugin_log(LOG_DEBUG, "verbs: the kernel keeps registered "
                         "memory intact across fork(); PSP_VERBS_FORK is not "
                         "needed");
        return;
    }
    if (st == IBV_FORK_ENABLED) {
        pscom_plugin_log(LOG_DEBUG, "verbs: fork support already enabled "
                         "(RDMAV_FORK_SAFE)");
        return;
    }
    if (!cfg_fork) return;
    int rc = vb_fork_init();
    if (rc)
        pscom_plugin_log(LOG_WARN, "verbs: PSP_VERBS_FORK=1, but "
                         "ibv_fork_init failed: %s; a child process must not "
                         "touch buffers used for communication", strerror(rc));
    else
        pscom_plugin_log(LOG_DEBUG, "verbs: fork support enabled "
                         "(ibv_fork_init)");
}

/* An active port the device search found. */
struct port_pick {
    struct ibv_context *ctx;   /* open; NULL: none found */
    char name[64];
    uint8_t port;
    struct ibv_device_attr da;
    struct ibv_port_attr pa;
    union ibv_gid gid;
    bool gid_valid;
    uint8_t gid_index;
};

static const char *transport_str(enum ibv_transport_type t)
{
    switch (t) {
    case IBV_TRANSPORT_IB: return "InfiniBand";
    case IBV_TRANSPORT_IWARP: return "iWARP";
    case IBV_TRANSPORT_USNIC:
    case IBV_TRANSPORT_USNIC_UDP: return "usNIC";
    default: return "unknown";
    }
}

static bool gid_zero(const uint8_t *raw)
{
    for (int i = 0; i < 16; i++)
        if (raw[i]) return false;
    return true;
}

/* ::ffff:a.b.c.d, the form of a RoCE v2 GID of an IPv4 address. */
static bool gid_ipv4(const uint8_t *raw)
{
    for (int i = 0; i < 10; i++)
        if (raw[i]) return false;
    return raw[10] == 0xff && raw[11] == 0xff;
}

/* The GID index to route by: PSP_VERBS_GID_INDEX when it is given; else 0
 * on InfiniBand, and on Ethernet the first RoCE v2 entry with an IPv4
 * address, else the first RoCE v2 entry, else 0. Index 0 of a RoCE port is
 * its RoCE v1 link-local entry on most HCAs, which a fabric routing
 * RoCE v2 only does not carry: connections would fail after the handshake
 * with retries exceeded. IPv4 is preferred because that is how most RoCE
 * fabrics are addressed, and a link-local IPv6 entry does not leave its
 * subnet. */
static int pick_gid_index(struct ibv_context *ctx, const char *name,
                          uint8_t port, const struct ibv_port_attr *pa)
{
    if (cfg_gid_index >= 0) return cfg_gid_index;
    if (pa->link_layer != IBV_LINK_LAYER_ETHERNET) return 0;
    int n = pa->gid_tbl_len < 256 ? pa->gid_tbl_len : 256;
    int first_v2 = -1;
    for (int i = 0; i < n; i++) {
        struct ibv_gid_entry e;
        memset(&e, 0, sizeof(e));
        if (vb_query_gid_ex(ctx, port, (uint32_t)i, &e)) continue;
        if (e.gid_type != IBV_GID_TYPE_ROCE_V2 || gid_zero(e.gid.raw))
            continue;
        if (gid_ipv4(e.gid.raw)) {
            pscom_plugin_log(LOG_DEBUG, "verbs: %s port %u: GID index %d "
                             "(RoCE v2, IPv4) chosen; PSP_VERBS_GID_INDEX "
                             "overrides", name, port, i);
            return i;
        }
        if (first_v2 < 0) first_v2 = i;
    }
    if (first_v2 >= 0) {
        pscom_plugin_log(LOG_DEBUG, "verbs: %s port %u: GID index %d (RoCE "
                         "v2, IPv6) chosen; PSP_VERBS_GID_INDEX overrides",
                         name, port, first_v2);
        return first_v2;
    }
    pscom_plugin_log(LOG_DEBUG, "verbs: %s port %u: no RoCE v2 GID found; "
                     "using GID index 0 (RoCE v1)", name, port);
    return 0;
}

/* Look at the active ports of dev (PSP_VERBS_PORT, or all): the first
 * InfiniBand port goes to *ib, the first Ethernet (RoCE) port to *eth
 * unless it holds one already; the search stops at an InfiniBand port.
 * The device stays open while a pick holds it. 0 when a port was picked,
 * else a negative errno. */
static int search_device(struct ibv_device *dev, struct port_pick *ib,
                         struct port_pick *eth)
{
    const char *name = vb_get_device_name(dev);
    if (!name) name = "?";
    struct ibv_context *ctx = vb_open_device(dev);
    if (!ctx) {
        int e = errno ? errno : ENODEV;
        pscom_plugin_log(LOG_DEBUG, "verbs: cannot open %s: %s", name,
                         strerror(e));
        return -e;
    }
    struct ibv_device_attr da;
    int rc = vb_query_device(ctx, &da);
    if (rc) {
        pscom_plugin_log(LOG_DEBUG, "verbs: ibv_query_device(%s) failed: %s",
                         name, strerror(rc));
        vb_close_device(ctx);
        return -rc;
    }
    bool picked = false;
    unsigned first = cfg_port ? cfg_port : 1;
    unsigned last = cfg_port ? cfg_port : da.phys_port_cnt;
    for (unsigned p = first; p <= last && p <= 255 && !ib->ctx; p++) {
        struct ibv_port_attr pa;
        if (vb_query_port(ctx, (uint8_t)p, &pa)) continue;
        if (pa.state != IBV_PORT_ACTIVE) {
            pscom_plugin_log(LOG_DEBUG, "verbs: %s port %u is not active",
                             name, p);
            continue;
        }
        bool ethernet = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
        struct port_pick *pick = ethernet ? eth : ib;
        if (pick->ctx) continue; /* a RoCE port was found before */
        int gid_index = pick_gid_index(ctx, name, (uint8_t)p, &pa);
        union ibv_gid gid;
        memset(&gid, 0, sizeof(gid));
        bool gid_valid = !vb_query_gid(ctx, (uint8_t)p, gid_index, &gid) &&
                         !gid_zero(gid.raw);
        if (ethernet && !gid_valid) {
            pscom_plugin_log(LOG_DEBUG, "verbs: %s port %u is Ethernet (RoCE) "
                             "but has no GID at index %d", name, p, gid_index);
            continue;
        }
        *pick = (struct port_pick){
            .ctx = ctx,
            .port = (uint8_t)p,
            .da = da,
            .pa = pa,
            .gid = gid,
            .gid_valid = gid_valid,
            .gid_index = (uint8_t)gid_index,
        };
        snprintf(pick->name, sizeof(pick->name), "%s", name);
        picked = true;
    }
    if (!picked) {
        vb_close_device(ctx);
        return -ENETDOWN;
    }
    return 0;
}

/* Make pick the plugin's device and port. */
static void use_port(const struct port_pick *pick)
{
    const struct ibv_device_attr *da = &pick->da;
    const struct ibv_port_attr *pa = &pick->pa;
    unsigned rd = da->max_qp_rd_atom < da->max_qp_init_rd_atom
                      ? (unsigned)da->max_qp_rd_atom
                      : (unsigned)da->max_qp_init_rd_atom;
    if (rd > 16) rd = 16;
    vb.ctx = pick->ctx;
    snprintf(vb.dev_name, sizeof(vb.dev_name), "%s", pick->name);
    vb.local = (vb_qp_local_t){
        .port = pick->port,
        .mtu = (uint8_t)pa->active_mtu,
        .lid = pa->lid,
        .link_layer = pa->link_layer,
        .gid_valid = pick->gid_valid,
        .gid_index = pick->gid_index,
        .rd_atom = (uint8_t)rd,
        .sl = (uint8_t)cfg_sl,
    };
    memcpy(vb.local.gid, pick->gid.raw, 16);
    vb.max_msg_sz = pa->max_msg_sz ? pa->max_msg_sz : (1u << 30);
    if (vb.max_msg_sz > (1u << 30)) vb.max_msg_sz = 1u << 30;
    vb.cq_size = cfg_cq_size;
    if (da->max_cqe > 0 && (unsigned)da->max_cqe < vb.cq_size)
        vb.cq_size = (unsigned)da->max_cqe;
}

/* Devices the plugin may use: PSP_VERBS_HCA's (or all), and of those only
 * the ones speaking the InfiniBand transport (InfiniBand and RoCE): an
 * iWARP device has no RC queue pairs of this kind, and every connection
 * over it would fail. */
static bool device_wanted(struct ibv_device *dev, bool *named_found)
{
    const char *name = vb_get_device_name(dev);
    if (cfg_hca && cfg_hca[0]) {
        if (!name || strcmp(name, cfg_hca)) return false;
        *named_found = true;
    }
    if (dev->transport_type != IBV_TRANSPORT_IB) {
        pscom_plugin_log(LOG_DEBUG, "verbs: skipping %s: its transport is %s; "
                         "the plugin needs InfiniBand or RoCE",
                         name ? name : "?",
                         transport_str(dev->transport_type));
        return false;
    }
    return true;
}

static int vb_init(void)
{
    pscom_plugin_config_ranges(vb_ranges,
                               sizeof(vb_ranges) / sizeof(vb_ranges[0]));
    pscom_plugin_config_register(vb_rows, sizeof(vb_rows) / sizeof(vb_rows[0]));
    fork_policy();

    int n = 0;
    errno = 0;
    struct ibv_device **list = vb_get_device_list(&n);
    int list_errno = errno;
    if (!list || n <= 0) {
        pscom_plugin_log(LOG_DEBUG, "verbs: no RDMA device found "
                         "(ibv_get_device_list returned 0 devices)");
        pscom_plugin_set_reason("no RDMA device found");
        if (!list && list_errno)
            pscom_plugin_log(LOG_DEBUG, "verbs: ibv_get_device_list: %s (no "
                             "RDMA hardware, or the kernel's ib_uverbs "
                             "module is not loaded)", strerror(list_errno));
        if (list) vb_free_device_list(list);
        return -ENODEV;
    }

    int rc = -ENODEV;
    bool named_found = false;
    int wanted = 0;
    struct port_pick ib = {0}, eth = {0};
    for (int i = 0; i < n && !ib.ctx; i++) {
        if (!device_wanted(list[i], &named_found)) continue;
        wanted++;
        rc = search_device(list[i], &ib, &eth);
    }
    /* InfiniBand first: RoCE only when no InfiniBand port is active. */
    if (ib.ctx) {
        if (eth.ctx && eth.ctx != ib.ctx) vb_close_device(eth.ctx);
        use_port(&ib);
    } else if (eth.ctx) {
        use_port(&eth);
    }
    if (!vb.ctx) {
        if (cfg_hca && cfg_hca[0] && !named_found) {
            char names[256] = "";
            size_t off = 0;
            for (int i = 0; i < n && off < sizeof(names); i++) {
                const char *name = vb_get_device_name(list[i]);
                off += snprintf(names + off, sizeof(names) - off, "%s%s",
                                i ? ", " : "", name ? name : "?");
            }
            pscom_plugin_log(LOG_WARN, "verbs: PSP_VERBS_HCA=%s: no such RDMA "
                             "device (found: %s)", cfg_hca, names);
            rc = -ENODEV;
        } else if (!wanted) {
            pscom_plugin_log(LOG_DEBUG, "verbs: no InfiniBand or RoCE device "
                             "among the %d RDMA devices found", n);
            pscom_plugin_set_reason("no InfiniBand or RoCE device found "
                                    "(iWARP and other RDMA devices are not "
                                    "supported)");
            rc = -ENODEV;
        } else {
            pscom_plugin_log(LOG_DEBUG, "verbs: no usable active port on %s "
                             "(PSP_VERBS_PORT=%u, 0: any)",
                             cfg_hca && cfg_hca[0] ? cfg_hca : "any RDMA device",
                             cfg_port);
            if (rc == -ENODEV) rc = -ENETDOWN;
        }
        vb_free_device_list(list);
        return rc;
    }
    vb_free_device_list(list);

    vb.pd = vb_alloc_pd(vb.ctx);
    if (!vb.pd) {
        rc = errno ? -errno : -ENOMEM;
        pscom_plugin_log(LOG_WARN, "verbs: ibv_alloc_pd on %s failed: %s",
                         vb.dev_name, strerror(-rc));
        goto close_device;
    }
    vb.cq = vb_create_cq(vb.ctx, (int)vb.cq_size);
    if (!vb.cq) {
        rc = errno ? -errno : -ENOMEM;
        pscom_plugin_log(LOG_WARN, "verbs: ibv_create_cq(%u entries) on %s "
                         "failed: %s; try a smaller PSP_VERBS_CQ_SIZE",
                         vb.cq_size, vb.dev_name, strerror(-rc));
        goto dealloc_pd;
    }
    vb.mc = vb_mcache_create(cfg_mcache_size, PEER_ACCESS, &mc_ops, NULL);
    if (!vb.mc) {
        rc = -ENOMEM;
        goto destroy_cq;
    }
    if (cfg_mcache_size) {
        /* Keep heap memory mapped, so that a cached registration of a freed
         * and reallocated heap buffer still covers the same pages. */
        mallopt(M_MMAP_MAX, 0);
        mallopt(M_TRIM_THRESHOLD, -1);
        pscom_plugin_log(LOG_INFO, "verbs: registration cache of %u entries; "
                         "heap memory is no longer returned to the system "
                         "(see doc/plugins/verbs.md)", cfg_mcache_size);
    }
    pscom_plugin_log(LOG_DEBUG, "verbs: using %s port %u (%s, LID %u, GID "
                     "index %u, MTU %s, RDMA read depth %u)", vb.dev_name,
                     vb.local.port,
                     vb.local.link_layer == IBV_LINK_LAYER_ETHERNET
                         ? "Ethernet/RoCE"
                         : "InfiniBand",
                     vb.local.lid, vb.local.gid_index, mtu_str(vb.local.mtu),
                     vb.local.rd_atom);
    return 0;

destroy_cq:
    vb_destroy_cq(vb.cq);
    vb.cq = NULL;
dealloc_pd:
    vb_dealloc_pd(vb.pd);
    vb.pd = NULL;
close_device:
    vb_close_device(vb.ctx);
    vb.ctx = NULL;
    return rc;
}

static void rma_regions_free(void);

static void vb_destroy(void)
{
    rma_regions_free();
    vb_mcache_destroy(vb.mc);
    if (vb.cq) vb_destroy_cq(vb.cq);
    if (vb.pd) vb_dealloc_pd(vb.pd);
    if (vb.ctx) vb_close_device(vb.ctx);
    free(vb.table);
    free(vb.dq);
    memset(&vb, 0, sizeof(vb));
}

/* ---------------------------------------------------------------------- */
/* Connection setup and teardown                                          */
/* ---------------------------------------------------------------------- */

static void lent_put_all(struct vb_con *vc)
{
    for (uint32_t i = 0; i < vc->lent_cap; i++)
        if (vc->lent[i].e) vb_mcache_put(vb.mc, vc->lent[i].e);
    free(vc->lent);
    vc->lent = NULL;
    vc->lent_cap = 0;
}

/* Take what the CQ holds: completions of `key` (a destroyed QP, flushed)
 * are dropped, the others kept in order for progress. The CQ entries the
 * connection reserved are then really free for the next one. */
static void drain_stale(uint32_t key)
{
    struct ibv_wc wc[CQ_BATCH];
    int n;
    while ((n = vb_poll_cq(vb.cq, CQ_BATCH, wc)) > 0) {
        for (int i = 0; i < n; i++)
            if (WR_KEY(wc[i].wr_id) != key && dq_push(&wc[i]))
                pscom_plugin_log(LOG_ERR, "verbs: out of memory keeping a "
                                 "completion; a connection may stall");
    }
}

static void rma_free_all(struct vb_con *vc);

/* Undo everything of hs_start (and hs_connect). */
static void teardown(struct vb_con *vc)
{
    uint32_t key = vc->key;
    unlink_lists(vc);
    table_del(vc);
    if (vc->qp) {
        vb_qp_to_err(vc->qp);
        int rc = vb_destroy_qp(vc->qp);
        if (rc)
            pscom_plugin_log(LOG_WARN, "verbs: %s: ibv_destroy_qp failed: %s",
                             con_str(vc), strerror(rc));
        vc->qp = NULL;
        if (key) drain_stale(key);
    }
    rma_free_all(vc); /* the HCA no longer touches their buffers */
    if (vc->rx_mr) vb_dereg_mr(vc->rx_mr);
    if (vc->tx_mr) vb_dereg_mr(vc->tx_mr);
    vc->rx_mr = vc->tx_mr = NULL;
    free(vc->rx_buf);
    free(vc->tx_buf);
    vc->rx_buf = vc->tx_buf = NULL;
    lent_put_all(vc);
    free(vc->rel);
    vc->rel = NULL;
    vc->rel_count = vc->rel_cap = 0;
    free(vc->early);
    vc->early = NULL;
    vc->early_next = vc->early_count = vc->early_cap = 0;
    vb.cq_used -= vc->cq_reserved;
    vc->cq_reserved = 0;
}

static int post_recv_slot(struct vb_con *vc, uint32_t slot)
{
    struct ibv_sge sge = {
        .addr = (uintptr_t)(vc->rx_buf + (size_t)slot * vc->rx_slot_size),
        .length = vc->rx_slot_size,
        .lkey = vc->rx_mr->lkey,
    };
    struct ibv_recv_wr wr = {
        .wr_id = WR_ID(vc->key, WR_RECV, slot),
        .sg_list = &sge,
        .num_sge = 1,
    };
    struct ibv_recv_wr *bad = NULL;
    return vb_post_recv(vc->qp, &wr, &bad);
}

static void *alloc_ring(size_t bytes)
{
    void *p = NULL;
    long page = sysconf(_SC_PAGESIZE);
    if (posix_memalign(&p, page > 0 ? (size_t)page : 4096, bytes)) return NULL;
    memset(p, 0, bytes);
    return p;
}

static int vb_hs_start(pscom_plugin_con_t *con, void *priv, void *blob,
                       size_t *len)
{
    struct vb_con *vc = priv;
    int rc;

    vc->con = con;
    vc->fd = -1;
    vc->rma_wait_tail = &vc->rma_wait;
    vc->rx_slots = cfg_recvq;
    vc->rx_slot_size = (uint32_t)cfg_bufsize;
    vc->tx_slot_size = (uint32_t)cfg_bufsize;
    vb_ring_init(&vc->tx, cfg_sendq);

    unsigned need = cfg_recvq + cfg_sendq + RD_WR_MAX + RMA_WR_MAX;
    if (vb.cq_used + need > vb.cq_size) {
        pscom_plugin_log(LOG_INFO, "verbs: %s: the completion queue is "
                         "full (%u of %u entries in use); raise "
                         "PSP_VERBS_CQ_SIZE for more verbs connections",
                         con_str(vc), vb.cq_used, vb.cq_size);
        return -ENOSPC;
    }
    vb.cq_used += need;
    vc->cq_reserved = need;

    size_t rx_bytes = (size_t)vc->rx_slots * vc->rx_slot_size;
    size_t tx_bytes = (size_t)cfg_sendq * vc->tx_slot_size;
    vc->rx_buf = alloc_ring(rx_bytes);
    vc->tx_buf = alloc_ring(tx_bytes);
    /* Every completion of the connection not yet handled has a posted
     * receive or a send slot of its own. */
    vc->early_cap = vc->rx_slots + cfg_sendq;
    vc->early = calloc(vc->early_cap, sizeof(*vc->early));
    if (!vc->rx_buf || !vc->tx_buf || !vc->early) {
        rc = -ENOMEM;
        goto fail;
    }
    errno = 0;
    vc->rx_mr = vb_reg_mr(vb.pd, vc->rx_buf, rx_bytes, IBV_ACCESS_LOCAL_WRITE);
    if (!vc->rx_mr) {
        rc = errno ? -errno : -ENOMEM;
        pscom_plugin_log(LOG_WARN, "verbs: %s: cannot register the receive "
                         "ring (%zu bytes): %s; check 'ulimit -l' or lower "
                         "PSP_VERBS_RECVQ_SIZE/PSP_VERBS_BUFSIZE", con_str(vc),
                         rx_bytes, strerror(-rc));
        goto fail;
    }
    errno = 0;
    vc->tx_mr = vb_reg_mr(vb.pd, vc->tx_buf, tx_bytes, 0);
    if (!vc->tx_mr) {
        rc = errno ? -errno : -ENOMEM;
        pscom_plugin_log(LOG_WARN, "verbs: %s: cannot register the send "
                         "ring (%zu bytes): %s; check 'ulimit -l'",
                         con_str(vc), tx_bytes, strerror(-rc));
        goto fail;
    }

    struct ibv_qp_init_attr ia;
    memset(&ia, 0, sizeof(ia));
    ia.send_cq = vb.cq;
    ia.recv_cq = vb.cq;
    ia.qp_type = IBV_QPT_RC;
    ia.sq_sig_all = 0;
    ia.cap.max_send_wr = cfg_sendq + RD_WR_MAX + RMA_WR_MAX;
    ia.cap.max_recv_wr = vc->rx_slots;
    ia.cap.max_send_sge = 1;
    ia.cap.max_recv_sge = 1;
    errno = 0;
    vc->qp = vb_create_qp(vb.pd, &ia);
    if (!vc->qp) {
        rc = errno ? -errno : -ENOMEM;
        pscom_plugin_log(LOG_WARN, "verbs: %s: ibv_create_qp failed: %s",
                         con_str(vc), strerror(-rc));
        goto fail;
    }
    /* Rendezvous reads our buffers; one-sided puts write our regions. */
    rc = vb_qp_to_init(vc->qp, vb.local.port, 0,
                       IBV_ACCESS_REMOTE_READ |
                           (cfg_rma != SIZE_MAX ? IBV_ACCESS_REMOTE_WRITE : 0));
    if (rc) {
        pscom_plugin_log(LOG_WARN, "verbs: %s: queue pair RESET->INIT failed: "
                         "%s", con_str(vc), strerror(-rc));
        goto fail;
    }
    rc = table_add(vc);
    if (rc) goto fail;
    for (uint32_t i = 0; i < vc->rx_slots; i++) {
        int e = post_recv_slot(vc, i);
        if (e) {
            rc = -e;
            pscom_plugin_log(LOG_WARN, "verbs: %s: ibv_post_recv failed: %s",
                             con_str(vc), strerror(e));
            goto fail;
        }
    }

    vc->psn = random_psn();
    vb_wireup_t w = {
        .flags = vb.local.gid_valid ? VB_WIREUP_GID_VALID : 0,
        .mtu = vb.local.mtu,
        .rd_atom = vb.local.rd_atom,
        .qpn = vc->qp->qp_num,
        .psn = vc->psn,
        .lid = vb.local.lid,
        .port = vb.local.port,
        .link_layer = vb.local.link_layer,
        .ring = (uint16_t)vc->rx_slots,
        .slot_size = vc->rx_slot_size,
    };
    memcpy(w.gid, vb.local.gid, 16);
    rc = vb_wireup_encode(&w, blob, *len);
    if (rc < 0) {
        pscom_plugin_log(LOG_WARN, "verbs: %s: cannot describe our end: %s",
                         con_str(vc), strerror(-rc));
        goto fail;
    }
    *len = (size_t)rc;
    return 0;

fail:
    teardown(vc);
    return rc;
}

static int vb_hs_connect(pscom_plugin_con_t *con, void *priv, const void *blob,
                         size_t len)
{
    struct vb_con *vc = priv;
    vb_wireup_t w;
    if (vb_wireup_decode(blob, len, &w)) {
        pscom_plugin_log(LOG_DEBUG, "verbs: %s: the peer's wire-up data is "
                         "malformed or of another version (%zu bytes); not "
                         "using verbs", con_str(vc), len);
        pscom_plugin_set_reason("the peer's wire-up data is malformed or of "
                                "another version");
        return -EPROTO;
    }
    vb_qp_path_t path;
    const char *why = "";
    int rc = vb_qp_path(&vb.local, &w, &path, &why);
    if (rc) {
        pscom_plugin_log(LOG_DEBUG, "verbs: %s: cannot reach the peer's port "
                         "(LID %u, port %u): %s", con_str(vc), w.lid, w.port,
                         why);
        char reason[160];
        snprintf(reason, sizeof(reason), "cannot reach the peer's port (LID "
                 "%u, port %u): %s", w.lid, w.port, why);
        pscom_plugin_set_reason(reason);
        return rc;
    }
    rc = vb_qp_to_rtr(vc->qp, &path);
    if (rc) {
        pscom_plugin_log(LOG_INFO, "verbs: %s: queue pair INIT->RTR failed "
                         "(peer QP %u, LID %u, MTU %s%s): %s; not using verbs",
                         con_str(vc), w.qpn, w.lid, mtu_str(path.mtu),
                         path.grh ? ", routed by GID" : "", strerror(-rc));
        char reason[128];
        snprintf(reason, sizeof(reason), "queue pair INIT->RTR failed: %s",
                 strerror(-rc));
        pscom_plugin_set_reason(reason);
        return rc;
    }
    vb_qp_rts_t rts = {
        .sq_psn = vc->psn,
        .timeout = (uint8_t)cfg_timeout,
        .retry_cnt = (uint8_t)cfg_retry,
        .rnr_retry = 7,
        .rd_atom = path.rd_atom,
    };
    rc = vb_qp_to_rts(vc->qp, &rts);
    if (rc) {
        pscom_plugin_log(LOG_INFO, "verbs: %s: queue pair RTR->RTS failed: %s; "
                         "not using verbs", con_str(vc), strerror(-rc));
        return rc;
    }
    rc = vb_credit_init(&vc->cr, vc->rx_slots, w.ring, 0);
    if (rc) return -EPROTO;
    vc->tx_cap = vc->tx_slot_size < w.slot_size ? vc->tx_slot_size : w.slot_size;
    vc->read_ok = path.rd_atom > 0;
    vc->peer_lid = w.lid;
    vc->peer_gid_valid = w.flags & VB_WIREUP_GID_VALID;
    memcpy(vc->peer_gid, w.gid, 16);
    return 0;
}

static void vb_hs_abort(pscom_plugin_con_t *con, void *priv)
{
    teardown(priv);
}

static void on_fd(int fd, uint32_t events, void *arg);

static int vb_open(pscom_plugin_con_t *con, void *priv, int fd)
{
    struct vb_con *vc = priv;
    vc->con = con;
    if (pscom_plugin_fd_add(fd, EPOLLIN | EPOLLRDHUP, 0, on_fd, vc)) {
        pscom_plugin_log(LOG_WARN, "verbs: %s: cannot watch the control "
                         "socket", con_str(vc));
        teardown(vc);
        return -EIO;
    }
    vc->fd = fd;
    vc->open = true;
    vc->next = vb.cons;
    vc->pprev = &vb.cons;
    if (vb.cons) vb.cons->pprev = &vc->next;
    vb.cons = vc;
    if (vc->early_count) {
        pscom_plugin_log(LOG_VERBOSE, "verbs: %s: %u completions arrived "
                         "before the connection was open", con_str(vc),
                         vc->early_count);
        vc->replay = true;
        vc->replay_next = vb.replay;
        vb.replay = vc;
    }
    pscom_plugin_log(LOG_DEBUG, "verbs: %s: QP %u on %s port %u, %u receive "
                     "slots of %u bytes, peer has %u", con_str(vc),
                     vc->qp->qp_num, vb.dev_name, vb.local.port, vc->rx_slots,
                     vc->rx_slot_size, vc->cr.peer_ring);
    return 1; /* keep the socket: its EOF tells that the peer is gone */
}

/* A completion of vc of the kind wait_own() waits for. 1 when the wait
 * should end (a failed send). */
static int own_done(struct vb_con *vc, const struct ibv_wc *wc)
{
    if (WR_KIND(wc->wr_id) == WR_READ) {
        if (vc->reads_out) vc->reads_out--;
        if (wc->status != IBV_WC_SUCCESS && !vc->read_status)
            vc->read_status = (int)wc->status;
        return 0;
    }
    if (!vb_ring_empty(&vc->tx)) vb_ring_pop(&vc->tx);
    return wc->status != IBV_WC_SUCCESS;
}

/* Handle vc's completions of `kind` among q[first, *end) and close the
 * gaps, keeping the others in order. 1 when the wait should end. */
static int take_own(struct vb_con *vc, unsigned kind, struct ibv_wc *q,
                    uint32_t first, uint32_t *end)
{
    uint32_t keep = first;
    int stop = 0;
    for (uint32_t i = first; i < *end; i++) {
        if (WR_KEY(q[i].wr_id) == vc->key && WR_KIND(q[i].wr_id) == kind)
            stop |= own_done(vc, &q[i]);
        else
            q[keep++] = q[i];
    }
    *end = keep;
    return stop;
}

/* Wait for this connection's completions of `kind` (WR_READ or WR_SEND)
 * until done(vc) or the deadline (0: none). Other completions are deferred,
 * in order. Own ones taken already are handled first: those deferred by an
 * earlier wait, and those an outer progress call took and has not handled
 * yet (we may be inside one of its upcalls). */
static void wait_own(struct vb_con *vc, unsigned kind,
                     bool (*done)(struct vb_con *), uint64_t deadline)
{
    uint32_t keep = 0;
    int stop = 0;
    for (uint32_t i = 0; i < vb.dq_count; i++) {
        struct ibv_wc *w = &vb.dq[(vb.dq_head + i) % vb.dq_cap];
        if (WR_KEY(w->wr_id) == vc->key && WR_KIND(w->wr_id) == kind) {
            stop |= own_done(vc, w);
            continue;
        }
        vb.dq[(vb.dq_head + keep++) % vb.dq_cap] = *w;
    }
    vb.dq_count = keep;
    uint32_t wc_end = (uint32_t)vb.wc_n;
    stop |= take_own(vc, kind, vb.wc, (uint32_t)vb.wc_next, &wc_end);
    vb.wc_n = (int)wc_end;

    struct ibv_wc wc[CQ_BATCH];
    while (!stop && !done(vc)) {
        if (deadline && now_ms() > deadline) return;
        int n = vb_poll_cq(vb.cq, CQ_BATCH, wc);
        if (n < 0) {
            pscom_plugin_log(LOG_ERR, "verbs: ibv_poll_cq failed (%d)", n);
            return;
        }
        for (int i = 0; i < n; i++) {
            uint64_t id = wc[i].wr_id;
            if (WR_KEY(id) == vc->key && WR_KIND(id) == kind) {
                stop |= own_done(vc, &wc[i]);
            } else if (dq_push(&wc[i])) {
                pscom_plugin_log(LOG_ERR, "verbs: out of memory keeping a "
                                 "completion; a connection may stall");
            }
        }
    }
}

static bool sends_done(struct vb_con *vc)
{
    return vb_ring_empty(&vc->tx);
}

/* Has the peer closed its end of the control socket (or is it broken)? */
static bool control_socket_ended(int fd)
{
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_DONTWAIT | MSG_PEEK);
    return n == 0 ||
           (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

static void vb_close(pscom_plugin_con_t *con, void *priv)
{
    struct vb_con *vc = priv;
    if (vc->open) {
        *vc->pprev = vc->next;
        if (vc->next) vc->next->pprev = vc->pprev;
        vc->open = false;
    }
    if (vc->fd >= 0) {
        pscom_plugin_fd_del(vc->fd);
        /* A peer whose control socket ended is gone or closing: what we
         * posted can no longer complete, or is not waited for. */
        if (control_socket_ended(vc->fd)) vc->failed = true;
    }
    /* What was posted (the EOF message, at least) must reach the peer
     * before the queue pair goes, also when the core said it is closing;
     * only a failed transport delivers nothing more. The socket closes
     * after that: its end makes the peer fail the connection, which must
     * not overtake the last messages. */
    if (!vc->failed && vc->qp)
        wait_own(vc, WR_SEND, sends_done, now_ms() + CLOSE_DRAIN_MS);
    if (vc->fd >= 0) {
        close(vc->fd);
        vc->fd = -1;
    }
    vc->dead = true;
    teardown(vc);
}

/* ---------------------------------------------------------------------- */
/* Sending                                                                */
/* ---------------------------------------------------------------------- */

static size_t copy_iov(uint8_t *dst, size_t room, const struct iovec *iov,
                       int cnt)
{
    size_t done = 0;
    for (int i = 0; i < cnt && done < room; i++) {
        size_t n = iov[i].iov_len < room - done ? iov[i].iov_len : room - done;
        memcpy(dst + done, iov[i].iov_base, n);
        done += n;
    }
    return done;
}

/* Send what credits and free send slots allow: queued frames with the
 * release handles and owed credits, or a credit-only message. */
static void tx_flush(struct vb_con *vc)
{
    while (!vc->dead && vc->open && !vb_ring_full(&vc->tx)) {
        struct iovec iov[IOV_BATCH];
        size_t total = 0;
        int cnt = pscom_plugin_tx_peek(vc->con, iov, IOV_BATCH, &total);
        bool data = (cnt > 0 && total > 0) || vc->rel_count;
        if (data && !vb_credit_can_send(&vc->cr)) data = false;
        if (!data && !vb_credit_want_update(&vc->cr)) return;

        uint32_t slot = vb_ring_push(&vc->tx);
        uint8_t *buf = vc->tx_buf + (size_t)slot * vc->tx_slot_size;
        vb_msg_hdr_t h = {.credits = (uint16_t)vb_credit_take(&vc->cr)};
        size_t room = vc->tx_cap - VB_MSG_HDR_LEN;
        if (data) {
            uint32_t nrel = vc->rel_count;
            if (nrel > 255) nrel = 255;
            if (nrel > room / 4) nrel = (uint32_t)(room / 4);
            if (nrel) {
                for (uint32_t i = 0; i < nrel; i++)
                    vb_msg_put_handle(buf, i, vc->rel[i]);
                memmove(vc->rel, vc->rel + nrel,
                        (vc->rel_count - nrel) * sizeof(*vc->rel));
                vc->rel_count -= nrel;
            }
            h.nrel = (uint8_t)nrel;
            room -= 4 * (size_t)nrel;
            if (cnt > 0)
                h.len = (uint32_t)copy_iov(buf + VB_MSG_HDR_LEN + 4 * nrel,
                                           room, iov, cnt);
        }
        vb_msg_encode(&h, buf);
        struct ibv_sge sge = {
            .addr = (uintptr_t)buf,
            .length = VB_MSG_HDR_LEN + 4 * (uint32_t)h.nrel + h.len,
            .lkey = vc->tx_mr->lkey,
        };
        struct ibv_send_wr wr = {
            .wr_id = WR_ID(vc->key, WR_SEND, slot),
            .sg_list = &sge,
            .num_sge = 1,
            .opcode = IBV_WR_SEND,
            .send_flags = IBV_SEND_SIGNALED,
        };
        struct ibv_send_wr *bad = NULL;
        int rc = vb_post_send(vc->qp, &wr, &bad);
        if (rc) {
            con_fail(vc, PSCOM_OP_WRITE, PSCOM_ERR_IOERROR, "ibv_post_send",
                     rc);
            return;
        }
        if (h.len && pscom_plugin_tx_done(vc->con, h.len)) {
            vc->dead = true; /* closing: close() comes */
            return;
        }
    }
}

static void vb_tx_kick(pscom_plugin_con_t *con, void *priv)
{
    tx_flush(priv);
}

/* ---------------------------------------------------------------------- */
/* Receiving                                                              */
/* ---------------------------------------------------------------------- */

static int release_lent(struct vb_con *vc, uint32_t handle)
{
    uint32_t i = handle & 0xffff;
    if (i >= vc->lent_cap || !vc->lent[i].e ||
        vc->lent[i].gen != (uint16_t)(handle >> 16))
        return -EPROTO;
    vb_mcache_put(vb.mc, vc->lent[i].e);
    vc->lent[i].e = NULL;
    vc->lent[i].gen++;
    return 0;
}

static void protocol_error(struct vb_con *vc, const char *what)
{
    pscom_plugin_log(LOG_ERR, "verbs: %s: %s from the peer; closing the "
                     "connection", con_str(vc), what);
    con_fail(vc, PSCOM_OP_READ, PSCOM_ERR_IOERROR, what, EPROTO);
}

static void on_recv(struct vb_con *vc, uint32_t slot, uint32_t byte_len)
{
    if (slot >= vc->rx_slots || byte_len > vc->rx_slot_size) {
        protocol_error(vc, "a message larger than a receive slot");
        return;
    }
    const uint8_t *buf = vc->rx_buf + (size_t)slot * vc->rx_slot_size;
    vb_msg_hdr_t h;
    if (vb_msg_decode(buf, byte_len, &h)) {
        protocol_error(vc, "a malformed message header");
        return;
    }
    if (vb_credit_returned(&vc->cr, h.credits)) {
        protocol_error(vc, "more credits than slots");
        return;
    }
    for (unsigned i = 0; i < h.nrel; i++) {
        if (release_lent(vc, vb_msg_handle(buf, i))) {
            protocol_error(vc, "an unknown rendezvous handle");
            return;
        }
    }
    /* The push may run callbacks that wait for later messages: meanwhile
     * the slot counts as consumed for credit updates. */
    vb_credit_hold(&vc->cr);
    int pushed = h.len ? pscom_plugin_rx_push(vc->con, vb_msg_payload(buf, &h),
                                              h.len)
                       : 0;
    vb_credit_unhold(&vc->cr);
    if (pushed) {
        vc->dead = true; /* failed or closing: close() comes */
        return;
    }
    int rc = post_recv_slot(vc, slot);
    if (rc) {
        con_fail(vc, PSCOM_OP_READ, PSCOM_ERR_IOERROR, "ibv_post_recv", rc);
        return;
    }
    if (vb_credit_consumed(&vc->cr)) {
        protocol_error(vc, "more messages than receive slots");
        return;
    }
    mark_dirty(vc);
}

static void on_wc_error(struct vb_con *vc, const struct ibv_wc *wc)
{
    vc->failed = true;
    if (vc->dead) return;
    const char *what;
    switch (WR_KIND(wc->wr_id)) {
    case WR_RECV: what = "receive completion"; break;
    case WR_SEND: what = "send completion"; break;
    case WR_RMA: what = "one-sided RDMA completion"; break;
    default: what = "RDMA read completion"; break;
    }
    pscom_plugin_log(LOG_WARN, "verbs: %s: %s failed: %s (status %d, vendor "
                     "error 0x%x)%s", con_str(vc), what,
                     vb_wc_status_str(wc->status), (int)wc->status,
                     wc->vendor_err,
                     wc->status == IBV_WC_RETRY_EXC_ERR
                         ? "; the peer is unreachable or gone"
                         : "");
    con_fail(vc, WR_KIND(wc->wr_id) == WR_RECV ? PSCOM_OP_READ : PSCOM_OP_WRITE,
             PSCOM_ERR_IOERROR, vb_wc_status_str(wc->status), 0);
}

static void keep_early(struct vb_con *vc, const struct ibv_wc *wc)
{
    if (vc->early_count == vc->early_cap && vc->early_next) {
        /* Those replayed already make room. */
        memmove(vc->early, vc->early + vc->early_next,
                (vc->early_count - vc->early_next) * sizeof(*vc->early));
        vc->early_count -= vc->early_next;
        vc->early_next = 0;
    }
    if (vc->early_count == vc->early_cap) {
        /* More than the connection has work requests posted. */
        con_fail_later(vc, "completions before the connection was open", EPROTO);
        return;
    }
    vc->early[vc->early_count++] = *wc;
}

static void rma_completion(struct vb_con *vc, const struct ibv_wc *wc);

static void dispatch(const struct ibv_wc *wc, bool replaying)
{
    struct vb_con *vc = table_get(WR_KEY(wc->wr_id));
    if (!vc) return; /* a connection closed since */
    unsigned kind = WR_KIND(wc->wr_id);
    if (kind == WR_READ) {
        /* rndv_pull waits for its reads; one seen here was left over. */
        if (vc->reads_out) vc->reads_out--;
        return;
    }
    if (kind == WR_RMA) {
        rma_completion(vc, wc);
        return;
    }
    if (!replaying && (!vc->open || vc->early_count)) {
        keep_early(vc, wc);
        return;
    }
    /* Also on a closing connection: close() waits for the ring to empty. */
    if (kind == WR_SEND && !vb_ring_empty(&vc->tx)) vb_ring_pop(&vc->tx);
    if (vc->dead) return;
    if (wc->status != IBV_WC_SUCCESS) {
        on_wc_error(vc, wc);
        return;
    }
    if (kind == WR_RECV)
        on_recv(vc, WR_SLOT(wc->wr_id), wc->byte_len);
    else if (kind == WR_SEND)
        mark_dirty(vc);
}

/* Handle the kept completions of connections opened since, in order.
 * Each leaves the queue as it is handled, and the queue stays non-empty
 * until the last one has: a completion that comes meanwhile (an upcall
 * waiting in a nested progress call) queues behind the kept ones, and the
 * nested call goes on with the replay where this one is. */
static void replay_early(void)
{
    struct vb_con *vc;
    while ((vc = vb.replay)) {
        if (vc->early_next < vc->early_count) {
            /* A copy: closing the connection frees the queue. */
            struct ibv_wc wc = vc->early[vc->early_next++];
            dispatch(&wc, true);
            continue;
        }
        vb.replay = vc->replay_next;
        vc->replay = false;
        vc->early_next = vc->early_count = 0;
    }
}

static void rma_report(struct vb_con *vc);

static void flush_dirty(void)
{
    while (vb.dirty) {
        struct vb_con *vc = vb.dirty;
        vb.dirty = vc->dirty_next;
        vc->dirty = false;
        if (vc->rma_finished) rma_report(vc);
        if (vc->err_pending) {
            vc->err_pending = false;
            con_fail(vc, PSCOM_OP_READ, PSCOM_ERR_IOERROR, vc->err_what,
                     vc->err_errno);
        }
        tx_flush(vc);
    }
}

/* Handle the completions taken and not yet handled; 1 when there were. */
static int handle_wcs(void)
{
    int did = vb.wc_next < vb.wc_n;
    while (vb.wc_next < vb.wc_n) {
        /* A copy: a nested call may refill the array. */
        struct ibv_wc wc = vb.wc[vb.wc_next++];
        dispatch(&wc, false);
    }
    return did;
}

static int vb_progress(void)
{
    int did = 0;
    if (!vb.cq) return 0;
    if (vb.replay) {
        replay_early();
        did = 1;
    }
    did |= handle_wcs(); /* what an outer call took */
    for (;;) {
        int n;
        bool from_cq = !vb.dq_count;
        if (from_cq) {
            n = vb_poll_cq(vb.cq, CQ_BATCH, vb.wc);
            if (n < 0) {
                pscom_plugin_log(LOG_ERR, "verbs: ibv_poll_cq failed (%d)", n);
                break;
            }
        } else {
            n = dq_take(vb.wc, CQ_BATCH);
        }
        if (n == 0) break;
        vb.wc_next = 0;
        vb.wc_n = n;
        did |= handle_wcs();
        if (from_cq && n < CQ_BATCH && !vb.dq_count) break;
    }
    flush_dirty();
    return did;
}

/* The pre-connection socket: EOF means the peer process is gone. */
static void on_fd(int fd, uint32_t events, void *arg)
{
    struct vb_con *vc = arg;
    char buf[64];
    ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0) {
        pscom_plugin_log(LOG_DEBUG, "verbs: %s: %zd unexpected bytes on the "
                         "control socket; ignored", con_str(vc), n);
        return;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    int e = n < 0 ? errno : 0;
    pscom_plugin_fd_mod(fd, 0);
    /* Nothing we post from now on completes (also when the core is
     * closing the connection already: close() need not wait). */
    vc->failed = true;
    /* Deliver what the peer sent before it went: its EOF message, maybe. */
    vb_progress();
    if (vc->dead) return;
    con_fail(vc, PSCOM_OP_READ, e ? PSCOM_ERR_IOERROR : PSCOM_ERR_EOF,
             "the control socket", e);
}

/* ---------------------------------------------------------------------- */
/* Rendezvous                                                             */
/* ---------------------------------------------------------------------- */

static int lent_alloc(struct vb_con *vc)
{
    for (uint32_t i = 0; i < vc->lent_cap; i++)
        if (!vc->lent[i].e) return (int)i;
    if (vc->lent_cap >= LENT_MAX) return -1;
    uint32_t cap = vc->lent_cap ? vc->lent_cap * 2 : 16;
    struct lent *l = realloc(vc->lent, cap * sizeof(*l));
    if (!l) return -1;
    memset(l + vc->lent_cap, 0, (cap - vc->lent_cap) * sizeof(*l));
    int i = (int)vc->lent_cap;
    vc->lent = l;
    vc->lent_cap = cap;
    return i;
}

static size_t vb_rndv_describe(pscom_plugin_con_t *con, void *priv,
                               const void *data, size_t len, void *blob)
{
    struct vb_con *vc = priv;
    if (!vc->read_ok || vc->dead || !len) return 0;
    int i = lent_alloc(vc);
    if (i < 0) return 0;
    vb_mentry_t *e;
    int rc = vb_mcache_get(vb.mc, data, len, IBV_ACCESS_REMOTE_READ, &e);
    if (rc) {
        warn_reg("sending", len, rc);
        return 0;
    }
    vc->lent[i].e = e;
    vb_rndv_desc_t d = {
        .rkey = e->reg.rkey,
        .addr = (uintptr_t)data,
        .len = len,
        .handle = (uint32_t)i | ((uint32_t)vc->lent[i].gen << 16),
    };
    rc = vb_rndv_encode(&d, blob, 64);
    if (rc < 0) {
        vb_mcache_put(vb.mc, e);
        vc->lent[i].e = NULL;
        return 0;
    }
    return (size_t)rc;
}

static void queue_release(struct vb_con *vc, uint32_t handle)
{
    if (vc->rel_count == vc->rel_cap) {
        uint32_t cap = vc->rel_cap ? vc->rel_cap * 2 : 16;
        uint32_t *r = realloc(vc->rel, cap * sizeof(*r));
        if (!r) return; /* the peer keeps the registration until close */
        vc->rel = r;
        vc->rel_cap = cap;
    }
    vc->rel[vc->rel_count++] = handle;
    mark_dirty(vc);
}

static bool reads_done(struct vb_con *vc)
{
    return vc->reads_out == 0;
}

static int vb_rndv_pull(pscom_plugin_con_t *con, void *priv, const void *blob,
                        size_t blob_len, void *dst, size_t len)
{
    struct vb_con *vc = priv;
    vb_rndv_desc_t d;
    if (vc->dead || !vc->open) return -ENOTCONN;
    if (vb_rndv_decode(blob, blob_len, &d)) return -EPROTO;
    if (!vc->read_ok) {
        queue_release(vc, d.handle);
        return -EOPNOTSUPP;
    }
    if (len > d.len) {
        queue_release(vc, d.handle);
        return -EPROTO;
    }
    if (!len) {
        queue_release(vc, d.handle);
        return 0;
    }
    vb_mentry_t *e;
    int rc = vb_mcache_get(vb.mc, dst, len, IBV_ACCESS_LOCAL_WRITE, &e);
    if (rc) {
        warn_reg("receiving", len, rc);
        queue_release(vc, d.handle);
        return rc;
    }

    size_t off = 0;
    vc->read_status = 0;
    while (off < len && !vc->read_status) {
        while (off < len && vc->reads_out < RD_WR_MAX) {
            size_t chunk = len - off < vb.max_msg_sz ? len - off : vb.max_msg_sz;
            struct ibv_sge sge = {
                .addr = (uintptr_t)dst + off,
                .length = (uint32_t)chunk,
                .lkey = e->reg.lkey,
            };
            struct ibv_send_wr wr = {
                .wr_id = WR_ID(vc->key, WR_READ, 0),
                .sg_list = &sge,
                .num_sge = 1,
                .opcode = IBV_WR_RDMA_READ,
                .send_flags = IBV_SEND_SIGNALED,
            };
            wr.wr.rdma.remote_addr = d.addr + off;
            wr.wr.rdma.rkey = d.rkey;
            struct ibv_send_wr *bad = NULL;
            int prc = vb_post_send(vc->qp, &wr, &bad);
            if (prc) {
                vc->read_status = -1;
                con_fail_later(vc, "ibv_post_send (RDMA read)", prc);
                break;
            }
            vc->reads_out++;
            off += chunk;
        }
        /* Let the reads finish before the buffer is released, also after
         * a failed post. */
        wait_own(vc, WR_READ, reads_done, 0);
    }
    vb_mcache_put(vb.mc, e);
    queue_release(vc, d.handle);
    if (vc->read_status) {
        if (vc->read_status > 0) {
            pscom_plugin_log(LOG_WARN, "verbs: %s: RDMA read of %zu bytes "
                             "failed: %s", con_str(vc), len,
                             vb_wc_status_str((enum ibv_wc_status)vc->read_status));
            con_fail_later(vc, "RDMA read", EIO);
        }
        return -EIO;
    }
    return 0;
}

/* ---------------------------------------------------------------------- */
/* One-sided operations (plugin interface 1.1)                            */
/* ---------------------------------------------------------------------- */

/* A region is registered (through the registration cache) for remote read
 * and write; its key (wireup.h) carries rkey, range and our port. A put is
 * RDMA writes on the connection's queue pair, a get RDMA reads, all
 * signalled, at most RMA_WR_MAX in flight per connection (the send queue
 * has room for them besides the eager sends and rendezvous reads); what
 * does not fit waits and is posted as completions come back.
 * pscom_plugin_rma_done follows from progress once every chunk completed.
 * Ordering: the write's completion means the peer's HCA has acknowledged
 * the bytes, and the core sends its notice afterwards on the same RC queue
 * pair, whose requests the peer executes in order: the notice arrives after
 * the bytes are in place. */

struct vb_rma {
    void *token;              /* NULL once reported */
    uint32_t slot;            /* in vb_con.rma_tab and the wr_id */
    bool put;
    uint8_t *local;
    uint64_t raddr;
    uint32_t rkey;
    size_t len, posted;
    unsigned out;             /* work requests in flight */
    int status;               /* the first failed completion (IBV_WC_*) */
    vb_mentry_t *e;           /* the registration of local */
    struct vb_rma *next_wait; /* vb_con.rma_wait */
};

/* A peer's region (rma_rkey's prkey). */
struct vb_rkey {
    uint32_t rkey;
    uint64_t addr, len;
};

/* A region of ours (rma_register's handle). */
struct vb_region {
    vb_mentry_t *e;
    struct vb_region *next, **pprev; /* vb_regions */
};

static struct vb_region *vb_regions;

static int vb_rma_register(pscom_socket_t *socket, void *addr, size_t len,
                           void *rkey, size_t *rkey_len, void **handle)
{
    (void)socket; /* one protection domain for every socket */
    if (cfg_rma == SIZE_MAX || !vb.pd || !addr || !len) return -ENOTSUP;
    struct vb_region *r = calloc(1, sizeof(*r));
    if (!r) return -ENOMEM;
    int rc = vb_mcache_get(vb.mc, addr, len,
                           IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                               IBV_ACCESS_REMOTE_READ,
                           &r->e);
    if (rc) {
        pscom_plugin_log(LOG_INFO, "verbs: cannot register %zu bytes at %p "
                         "for one-sided access: %s; its puts and gets go "
                         "through the core (check 'ulimit -l')", len, addr,
                         strerror(-rc));
        free(r);
        return rc;
    }
    vb_rmakey_t k = {
        .flags = vb.local.gid_valid ? VB_WIREUP_GID_VALID : 0,
        .lid = vb.local.lid,
        .rkey = r->e->reg.rkey,
        .addr = (uintptr_t)addr,
        .len = len,
    };
    memcpy(k.gid, vb.local.gid, 16);
    rc = vb_rmakey_encode(&k, rkey, PSCOM_PLUGIN_RKEY_MAX);
    if (rc < 0) {
        vb_mcache_put(vb.mc, r->e);
        free(r);
        return rc;
    }
    *rkey_len = (size_t)rc;
    r->next = vb_regions;
    r->pprev = &vb_regions;
    if (vb_regions) vb_regions->pprev = &r->next;
    vb_regions = r;
    *handle = r;
    return 0;
}

static void vb_rma_deregister(pscom_socket_t *socket, void *handle)
{
    struct vb_region *r = handle;
    (void)socket;
    *r->pprev = r->next;
    if (r->next) r->next->pprev = r->pprev;
    vb_mcache_put(vb.mc, r->e);
    free(r);
}

/* destroy: the core deregisters nothing after it. */
static void rma_regions_free(void)
{
    while (vb_regions) vb_rma_deregister(NULL, vb_regions);
}

static int vb_rma_rkey(pscom_plugin_con_t *con, void *priv, const void *rkey,
                       size_t len, void **prkey)
{
    struct vb_con *vc = priv;
    vb_rmakey_t k;
    (void)con;
    if (vc->dead || !vc->open) return -ENOTCONN;
    if (vb_rmakey_decode(rkey, len, &k)) return -EPROTO;
    bool same = (k.flags & VB_WIREUP_GID_VALID) && vc->peer_gid_valid
                    ? !memcmp(k.gid, vc->peer_gid, 16)
                    : k.lid == vc->peer_lid;
    if (!same) {
        pscom_plugin_log(LOG_WARN, "verbs: %s: a remote key of a process on "
                         "another port (LID %u) was used on this connection "
                         "(pscom_rkey_generate with the wrong connection?); "
                         "its operations go through the core", con_str(vc),
                         k.lid);
        return -EPERM;
    }
    struct vb_rkey *r = malloc(sizeof(*r));
    if (!r) return -ENOMEM;
    *r = (struct vb_rkey){.rkey = k.rkey, .addr = k.addr, .len = k.len};
    *prkey = r;
    return 0;
}

static void vb_rma_rkey_release(pscom_plugin_con_t *con, void *priv,
                                void *prkey)
{
    (void)con;
    (void)priv;
    free(prkey); /* operations under way copied what they need */
}

/* Post what the send queue has room for, oldest operation first. */
static void rma_post(struct vb_con *vc)
{
    while (vc->rma_wait && vc->rma_out < RMA_WR_MAX && !vc->dead &&
           !vc->err_pending) {
        struct vb_rma *op = vc->rma_wait;
        size_t chunk = op->len - op->posted;
        if (chunk > vb.max_msg_sz) chunk = vb.max_msg_sz;
        struct ibv_sge sge = {
            .addr = (uintptr_t)op->local + op->posted,
            .length = (uint32_t)chunk,
            .lkey = op->e->reg.lkey,
        };
        struct ibv_send_wr wr = {
            .wr_id = WR_ID(vc->key, WR_RMA, op->slot),
            .sg_list = &sge,
            .num_sge = 1,
            .opcode = op->put ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ,
            .send_flags = IBV_SEND_SIGNALED,
        };
        wr.wr.rdma.remote_addr = op->raddr + op->posted;
        wr.wr.rdma.rkey = op->rkey;
        struct ibv_send_wr *bad = NULL;
        int rc = vb_post_send(vc->qp, &wr, &bad);
        if (rc) {
            con_fail_later(vc, "ibv_post_send (one-sided)", rc);
            return;
        }
        op->posted += chunk;
        op->out++;
        vc->rma_out++;
        if (op->posted == op->len) {
            vc->rma_wait = op->next_wait;
            if (!vc->rma_wait) vc->rma_wait_tail = &vc->rma_wait;
        }
    }
}

static int rma_start(struct vb_con *vc, struct vb_rkey *rk, bool put,
                     void *local, uint64_t raddr, size_t len, void *token)
{
    if (len < cfg_rma) return -ENOTSUP;
    /* A queue pair with read depth 0 breaks at its first RDMA read: the
     * core carries gets on such a connection. */
    if (!put && !vc->read_ok) return -ENOTSUP;
    if (vc->dead || !vc->open || vc->err_pending) return -ENOTCONN;
    if (raddr < rk->addr || len > rk->len || raddr - rk->addr > rk->len - len)
        return -ERANGE;
    if (!vc->rma_tab) {
        vc->rma_tab = calloc(RMA_OPS_MAX, sizeof(*vc->rma_tab));
        if (!vc->rma_tab) return -ENOMEM;
    }
    uint32_t slot = 0;
    while (slot < RMA_OPS_MAX && vc->rma_tab[slot]) slot++;
    if (slot == RMA_OPS_MAX) return -EAGAIN; /* the core carries this one */
    struct vb_rma *op = calloc(1, sizeof(*op));
    if (!op) return -ENOMEM;
    int rc = vb_mcache_get(vb.mc, local, len,
                           put ? 0 : IBV_ACCESS_LOCAL_WRITE, &op->e);
    if (rc) {
        pscom_plugin_log(LOG_DEBUG, "verbs: %s: cannot register the %zu-byte "
                         "buffer of a one-sided %s: %s", con_str(vc), len,
                         put ? "put" : "get", strerror(-rc));
        free(op);
        return rc;
    }
    op->token = token;
    op->slot = slot;
    op->put = put;
    op->local = local;
    op->raddr = raddr;
    op->rkey = rk->rkey;
    op->len = len;
    vc->rma_tab[slot] = op;
    *vc->rma_wait_tail = op;
    vc->rma_wait_tail = &op->next_wait;
    rma_post(vc);
    return 1;
}

static int vb_rma_put(pscom_plugin_con_t *con, void *priv, void *prkey,
                      const void *src, uint64_t raddr, size_t len, void *token)
{
    (void)con;
    return rma_start(priv, prkey, true, (void *)src, raddr, len, token);
}

static int vb_rma_get(pscom_plugin_con_t *con, void *priv, void *prkey,
                      void *dst, uint64_t raddr, size_t len, void *token)
{
    (void)con;
    return rma_start(priv, prkey, false, dst, raddr, len, token);
}

/* What a failed completion tells the core. */
static int wc_errno(enum ibv_wc_status st)
{
    switch (st) {
    case IBV_WC_REM_ACCESS_ERR: return -EACCES; /* key, range or rights */
    case IBV_WC_LOC_PROT_ERR: return -EFAULT;
    case IBV_WC_RETRY_EXC_ERR:
    case IBV_WC_RNR_RETRY_EXC_ERR: return -ECONNRESET; /* the peer is gone */
    case IBV_WC_WR_FLUSH_ERR: return -ECANCELED;
    case IBV_WC_REM_INV_REQ_ERR: return -EINVAL;
    default: return -EIO;
    }
}

static void rma_completion(struct vb_con *vc, const struct ibv_wc *wc)
{
    uint32_t slot = WR_SLOT(wc->wr_id);
    struct vb_rma *op =
        vc->rma_tab && slot < RMA_OPS_MAX ? vc->rma_tab[slot] : NULL;
    if (!op || !op->out) return;
    op->out--;
    vc->rma_out--;
    if (wc->status != IBV_WC_SUCCESS) {
        /* The queue pair is broken: the connection fails first, so that the
         * core does not carry the operation again on it (an eager copy
         * would complete it), and fails it with the others after close.
         * The operation stays until teardown. */
        if (!op->status) op->status = (int)wc->status;
        void *token = op->token;
        bool was_dead = vc->dead;
        op->token = NULL;
        on_wc_error(vc, wc);
        if (token && !was_dead)
            pscom_plugin_rma_done(token, wc_errno(wc->status));
        return;
    }
    if (!op->out && op->posted == op->len && !op->status) {
        vc->rma_finished = true;
        mark_dirty(vc);
    }
    rma_post(vc);
}

/* From flush_dirty: tell the core of the finished operations. */
static void rma_report(struct vb_con *vc)
{
    vc->rma_finished = false;
    for (uint32_t i = 0; i < RMA_OPS_MAX && !vc->dead; i++) {
        struct vb_rma *op = vc->rma_tab[i];
        if (!op || op->out || op->posted != op->len || op->status) continue;
        vc->rma_tab[i] = NULL;
        void *token = op->token;
        vb_mcache_put(vb.mc, op->e);
        free(op);
        if (token) pscom_plugin_rma_done(token, 0);
    }
}

/* teardown, after the queue pair is gone. */
static void rma_free_all(struct vb_con *vc)
{
    for (uint32_t i = 0; vc->rma_tab && i < RMA_OPS_MAX; i++) {
        struct vb_rma *op = vc->rma_tab[i];
        if (!op) continue;
        vb_mcache_put(vb.mc, op->e);
        free(op);
    }
    free(vc->rma_tab);
    vc->rma_tab = NULL;
    vc->rma_wait = NULL;
    vc->rma_wait_tail = &vc->rma_wait;
    vc->rma_out = 0;
    vc->rma_finished = false;
}

/* ---------------------------------------------------------------------- */
/* The descriptor                                                         */
/* ---------------------------------------------------------------------- */

static const pscom_plugin_ops_t vb_ops = {
    .init = vb_init,
    .destroy = vb_destroy,
    .hs_start = vb_hs_start,
    .hs_connect = vb_hs_connect,
    .hs_abort = vb_hs_abort,
    .open = vb_open,
    .close = vb_close,
    .tx_kick = vb_tx_kick,
    .progress = vb_progress,
    .rndv_describe = vb_rndv_describe,
    .rndv_pull = vb_rndv_pull,
    .rma_register = vb_rma_register,
    .rma_deregister = vb_rma_deregister,
    .rma_rkey = vb_rma_rkey,
    .rma_rkey_release = vb_rma_rkey_release,
    .rma_put = vb_rma_put,
    .rma_get = vb_rma_get,
};

PSCOM_PLUGIN_EXPORT const pscom_plugin_t pscom_plugin_verbs = {
    .api_version = PSCOM_PLUGIN_API_VERSION,
    .name = "verbs",
    .alias = "openib",
    .con_type = PSCOM_CON_TYPE_OPENIB,
    .priority = 50,
    .con_priv_size = sizeof(struct vb_con),
    .rendezvous = &cfg_rendezvous,
    .fds_per_con = 1,
    .ops = &vb_ops,
};
