/*
 * The ucx plugin: connections over UCX (UCP active messages), the loadable
 * module libpscom4ucx.so. UCX picks the wire underneath (shared memory, tcp,
 * InfiniBand, ...) from its own UCX_* settings.
 *
 * Objects. One UCP context and worker per pscom socket (struct ux_sock),
 * created with the socket's first connection and destroyed with its last.
 * Each connection (struct ux_con, the core's per-connection block) has a
 * UCP endpoint to the peer's worker, created from the worker address that
 * came in the handshake blob (ucx_blob.h), in UCX's peer error-handling
 * mode: a dead peer becomes a connection error.
 *
 * Which connection an active message is for: every AM header starts with
 * the receiver's connection key (slot and generation in the socket's table),
 * which the receiver announced in its blob. A key whose slot was freed or
 * reused does not match and its message is dropped.
 *
 * Sending: each frame of the core's send queue (head = header + xheader,
 * then the body) is one active message. An eager frame goes whole as
 * data, its head rebuilt as a short prefix (UXW_AM_FRAME_PACKED; a small
 * one copied into one piece, a larger one as two pieces, prefix and
 * body): UCX puts an AM header after the data, and reading it there would
 * wait for the message's last cache line before its first. Other frames
 * (rendezvous bodies, xheaders longer than a prefix announces) have their
 * head in the AM header and the body as data, a head longer than UCX's
 * largest AM header at the start of the data (UXW_AM_FRAME_LONG). Bodies
 * below the core's rendezvous threshold (user messages) go with UCX's
 * eager protocol; larger ones are rendezvous bodies (RNDV_DATA, sent
 * after the receiver matched them) and UCX chooses, normally its own
 * zero-copy rendezvous. A frame UCX takes at once while
 * none is with UCX is done for the core at once; others wait in a FIFO
 * (ux_con.txq) and the core learns of them (pscom_plugin_tx_done) strictly
 * in queue order, once UCX no longer needs their buffers.
 *
 * Receiving: a packed message for a connection with nothing waiting to be
 * handed over goes to the core from the AM callback when a posted receive
 * takes it (pscom_plugin_rx_now, deliver_now). Otherwise the callback only
 * records the message (ux_con.rxq: the head copied; data of a few KiB
 * copied; larger eager data and rendezvous descriptors kept by UCX). After
 * ucp_worker_progress returned, the messages are handed to the core in
 * order. A rendezvous body is received
 * with ucp_am_recv_data_nbx: out of line when the core lets it go
 * (pscom_plugin_rx_defer: a body for a matched receive, into its buffer),
 * so that several move at once while the messages behind them go on (each
 * reported when done, in any order: ux_con.deferred); otherwise in line,
 * into the user's buffer (pscom_plugin_rx_direct, bodies that are
 * rendezvous bodies by size) or a temporary buffer that is then pushed,
 * and the messages behind it wait.
 *
 * Upcalls into the core (tx_done, rx_push, con_error) happen only from the
 * progress op, never from a UCX callback (pscom_plugin_rx_now, which runs
 * no application code, excepted) and never from tx_kick. The core runs the
 * callbacks of what they complete after the progress op returned, so those
 * may post, wait or close freely; a connection's con_error callback runs
 * inside, and no connection is freed under our feet (the core frees
 * connections at progress depth 0).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "pscom_plugin.h"

#include "../copy_small.h"
#include "ucx_blob.h"
#include "ucx_wrap.h"

#define KEY_LEN       8    /* connection key in front of every AM header */
#define PREFIX_LEN    8    /* key and header of a packed frame (pack_prefix) */
#define XHEADER_PACKED 255 /* the longest xheader a prefix announces */
#define PREFIX_MAX    (PREFIX_LEN + XHEADER_PACKED)
#define HDR_INLINE    88   /* frames packed into one piece, or AM heads, up
                            * to this long live in the entry */
/* Arrivals up to this long are copied into pooled entries (4 KiB each).
 * Keeping UCX's descriptor instead costs more up to a few KiB: UCX then
 * replaces the descriptor of its receive FIFO (1 KiB ping-pong over posix:
 * 0.85 us copied, 0.90 us kept; 2 KiB: 1.07 against 1.18 us). */
#define RX_INLINE     4048
#define PEEK_IOV      128  /* so at most 64 frames per connection in UCX */
#define CLOSE_WAIT_MS 2000 /* longest wait for UCX to let go of buffers */
#define POOL_MAX      256  /* free entries kept for reuse */
#define HUP_GRACE_MS  100  /* from the peer's end of the pre-connection socket
                            * to the connection error: time for its last
                            * messages, which travel another way */

/* ---------------------------------------------------------------------- */
/* Settings                                                               */
/* ---------------------------------------------------------------------- */

static size_t cfg_rendezvous;
static int cfg_pull;
static int cfg_peer_errors;
static size_t cfg_rma; /* one-sided fast path from this size; SIZE_MAX: off */

static const pscom_config_row_t ux_rows[] = {
    {"PSP_UCX_RENDEZVOUS", PSCOM_CONFIG_SIZE, "64k",
     "rendezvous threshold on ucx connections: larger messages wait for "
     "their receive, then UCX moves them into the receive buffer",
     "ucx", "PSP_RENDEZVOUS", &cfg_rendezvous},
    {"PSP_UCX_PULL", PSCOM_CONFIG_BOOL, "1",
     "rendezvous bodies wait at the sender in UCX's rendezvous, announced "
     "with the message, and the receiver pulls them once a receive matches "
     "(0: the receiver asks for the body first, one round trip more)",
     "ucx", NULL, &cfg_pull},
    {"PSP_UCX_PEER_ERRORS", PSCOM_CONFIG_BOOL, "1",
     "UCX peer error-handling mode: a broken endpoint is a connection error "
     "at once; UCX 1.13 then moves large messages over tcp and cma without "
     "zero-copy (0: faster, a dead peer is still noticed by its closed "
     "pre-connection socket)", "ucx", NULL, &cfg_peer_errors},
    {"PSP_UCX_RMA", PSCOM_CONFIG_SIZE, "64k",
     "one-sided put and get of at least this many bytes move with UCX RMA "
     "(put + flush, get) instead of messages through the core; inf: never "
     "(UCX contexts then have no RMA)", "ucx", NULL, &cfg_rma},
};

/* ---------------------------------------------------------------------- */
/* Objects                                                                */
/* ---------------------------------------------------------------------- */

struct ux_sock;
struct ux_con;
struct ux_rma;
struct ux_rkey;
struct ux_region;

/* A frame handed to UCX. */
struct ux_txe {
    struct ux_txe *next; /* ux_con.txq (oldest first), or txe_pool */
    struct ux_con *uc;   /* NULL once its connection closed (orphan) */
    struct ux_sock *us;  /* counts it in inflight; NULL for an orphan */
    const void *base;    /* the frame's head in the core's send queue */
    size_t len;          /* head + body bytes */
    bool done;           /* UCX no longer needs the buffers */
    bool borrows;        /* UCX reads the core's buffers (a body, a long
                          * head), not only hdr */
    void *token;         /* an orphan's frame lent (pscom_plugin_tx_lend) */
    struct ux_sock *lent_us;     /* then: its worker */
    struct ux_txe *lent_next;    /* lent_txes */
    int status;          /* how the send ended */
    uxw_op_t op;         /* tx_cb(this) */
    struct iovec iov[2]; /* the data, which UCX may read until done */
    uint8_t *hdr;        /* what UCX reads until done: the AM header, or the
                          * packed prefix or frame (hinline or malloc'ed) */
    uint8_t hinline[PREFIX_MAX];
};

enum rx_kind {
    RX_COPY, /* the data is in buf, after the head */
    RX_KEPT, /* UCX keeps the data for us (uxw_am_release) */
    RX_RNDV, /* data is a rendezvous descriptor (uxw_am_recv) */
};

/* An active message not yet given to the core. */
struct ux_rx {
    struct ux_rx *next; /* ux_con.rxq, or rx_pool */
    uint8_t kind;       /* enum rx_kind */
    bool long_head;     /* the frame head is part of the data */
    size_t head_len;    /* bytes of frame head at buf */
    void *data;
    size_t data_off;    /* RX_KEPT: bytes of UCX's data before data */
    size_t len;
    size_t cap; /* bytes at buf */
    uint8_t buf[];
};

/* A message body UCX is receiving (its rendezvous, uxw_am_recv). */
struct ux_rop {
    struct ux_rop *next; /* ux_con.deferred */
    struct ux_con *uc;   /* NULL once its connection closed (orphan) */
    struct ux_sock *us;  /* counts it in inflight; NULL for an orphan */
    void *buf;           /* the receive buffer (direct) or our own */
    size_t len;
    void *handle;        /* the core's handle of a deferred body, or NULL */
    bool direct;
    bool done;
    int status;
    uxw_op_t op;         /* rop_cb(this) */
};

/* A rendezvous body handed to UCX by rndv_describe: UCX's rendezvous holds
 * it at the sender until the receiver pulls it or lets it go. */
#define BODY_HDR_LEN (KEY_LEN + 8) /* key, then the body's id */
struct ux_bsend {
    struct ux_bsend *next; /* ux_con.bsends, or ux_sock.bsends_left */
    struct ux_con *uc;     /* NULL once its connection closed (orphan) */
    struct ux_sock *us;
    uxw_op_t op;           /* bsend_cb(this) */
    const void *data;      /* the body UCX reads */
    void *token;           /* an orphan's send lent (pscom_plugin_tx_lend) */
    uint8_t hdr[BODY_HDR_LEN]; /* read by UCX until done */
};

/* A body announced by the peer (UXW_AM_BODY) whose message has not been
 * received yet: UCX keeps its rendezvous descriptor. */
struct ux_body {
    struct ux_body *next; /* ux_con.bodies, newest first */
    uint64_t id;
    void *desc;
    size_t len;
};

struct ux_con {
    pscom_plugin_con_t *con;
    struct ux_sock *us; /* NULL: nothing to release */
    uxw_ep_t *ep;
    uint32_t slot, gen;           /* our key, announced in our blob */
    uint32_t peer_slot, peer_gen; /* the peer's key */
    uint64_t peer_rndv;           /* the peer's rendezvous threshold */
    bool open;
    bool rx_busy;        /* between a message's head and body push */
    bool pending;        /* on ux_sock.pending */
    bool nested_only;    /* ... only by mark_nested */
    struct ux_con *next_pending;
    bool err;            /* failed: report once from dispatch, then stop */
    bool err_reported;
    pscom_op_t err_op;
    pscom_err_t err_code;
    char err_what[128];  /* what failed, for the log line */
    bool ep_failed;      /* UCX reported the endpoint broken */
    int fd;              /* the pre-connection socket, watched; -1: none */
    bool hup;            /* the peer's end of it closed ... */
    uint64_t hup_at;     /* ... at this time (ms) */
    struct ux_txe *txq, **txq_tail;
    struct ux_rx *rxq, **rxq_tail;
    /* The body being received in line: the messages behind it wait. */
    struct ux_rop *rop;
    /* Bodies received out of line (pscom_plugin_rx_defer, pulls), any
     * order. */
    struct ux_rop *deferred;
    /* Pulled rendezvous: our bodies with UCX (sender), the peer's bodies
     * not pulled yet (receiver), the last id we gave out, and the highest
     * id a pull asked for (a body at or below it that arrives later is
     * let go). */
    struct ux_bsend *bsends;
    struct ux_body *bodies;
    uint64_t body_seq, body_floor;
    uint64_t peer_fp;      /* fingerprint of the peer's worker address */
    struct ux_rma *rmaq;   /* one-sided operations not yet reported */
    struct ux_rkey *rkeys; /* the peer's regions unpacked on our endpoint */
};

struct ux_sock {
    struct ux_sock *next; /* socks */
    pscom_socket_t *key;
    uxw_worker_t *w;
    size_t max_head;     /* longest frame head sent in the AM header */
    unsigned refs;       /* connections from hs_start to close/hs_abort */
    bool unused;         /* refs dropped to 0 during progress: destroy after */
    unsigned closing;    /* endpoint closes under way */
    uxw_op_t closed_op;  /* ep_closed_cb(this) */
    struct ux_con **slots;
    uint32_t *gens;
    uint32_t *free_slots;
    uint32_t nslots, nfree;
    struct ux_con *pending; /* connections with work for dispatch */
    /* Sends and rendezvous receives UCX is working on: while there are
     * any, progress counts as made (data moves even in rounds in which UCX
     * completes nothing), so that the core does not start to yield the
     * CPU in the middle of a transfer. */
    unsigned inflight;
    struct ux_region *regions; /* mapped for peers; each holds a ref */
    struct ux_rkey *rkeys_left; /* of closed connections, still in use by
                                 * their operations: destroyed with us */
    /* Bodies of closed connections UCX has not ended (it does not end all
     * of an endpoint to a dead peer): freed with the worker. */
    struct ux_bsend *bsends_left;
};

static struct ux_sock *socks;
static uxw_context_t *spare_ctx; /* made by init, taken by the first socket */
static struct ux_txe *txe_pool;
/* Orphaned sends whose frames the core lent us (their buffers are read by
 * UCX after their connection closed): returned by tx_cb, or when their
 * worker is destroyed. */
static struct ux_txe *lent_txes;
static struct ux_rx *rx_pool;
static unsigned txe_pool_n, rx_pool_n;
static bool warned_cancel;
static unsigned progress_depth; /* nesting of dispatch_pending (upcalls) */
static bool polling;            /* in ux_progress's UCX poll: am_cb may hand
                                 * a message to the core at once */
static bool socks_unused;       /* some ux_sock.unused: destroy after */

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static uxw_config_t ucx_settings(void)
{
    return (uxw_config_t){.shm_error_handling = 1, .rma = cfg_rma != SIZE_MAX};
}

/* ---------------------------------------------------------------------- */
/* Entry pools                                                            */
/* ---------------------------------------------------------------------- */

static struct ux_txe *txe_get(void)
{
    struct ux_txe *e = txe_pool;
    if (e) {
        txe_pool = e->next;
        txe_pool_n--;
    } else {
        e = malloc(sizeof(*e));
        if (!e) return NULL;
    }
    e->next = NULL;
    e->done = false;
    e->status = 0;
    e->token = NULL;
    e->hdr = e->hinline;
    return e;
}

static void txe_put(struct ux_txe *e)
{
    if (e->hdr != e->hinline) free(e->hdr);
    if (txe_pool_n >= POOL_MAX) {
        free(e);
        return;
    }
    e->next = txe_pool;
    txe_pool = e;
    txe_pool_n++;
}

static struct ux_rx *rx_get(size_t bytes)
{
    struct ux_rx *rx;
    if (bytes <= RX_INLINE && rx_pool) {
        rx = rx_pool;
        rx_pool = rx->next;
        rx_pool_n--;
    } else {
        size_t cap = bytes <= RX_INLINE ? RX_INLINE : bytes;
        rx = malloc(sizeof(*rx) + cap);
        if (!rx) return NULL;
        rx->cap = cap;
    }
    rx->next = NULL;
    rx->long_head = false;
    rx->data_off = 0;
    return rx;
}

static void rx_put(struct ux_rx *rx)
{
    if (rx->cap != RX_INLINE || rx_pool_n >= POOL_MAX) {
        free(rx);
        return;
    }
    rx->next = rx_pool;
    rx_pool = rx;
    rx_pool_n++;
}

static void pools_free(void)
{
    while (txe_pool) {
        struct ux_txe *e = txe_pool;
        txe_pool = e->next;
        free(e);
    }
    while (rx_pool) {
        struct ux_rx *rx = rx_pool;
        rx_pool = rx->next;
        free(rx);
    }
    txe_pool_n = rx_pool_n = 0;
}

/* ---------------------------------------------------------------------- */
/* Keys                                                                   */
/* ---------------------------------------------------------------------- */

static void key_put(uint8_t *p, uint32_t slot, uint32_t gen)
{
    memcpy(p, &slot, 4);
    memcpy(p + 4, &gen, 4);
}

/* The connection in slot whose generation, in the bits of gen_mask, is
 * gen; NULL for a freed or reused slot. */
static struct ux_con *slot_con(struct ux_sock *us, uint32_t slot,
                               uint32_t gen, uint32_t gen_mask)
{
    if (slot >= us->nslots || (us->gens[slot] & gen_mask) != gen) return NULL;
    return us->slots[slot];
}

static struct ux_con *key_lookup(struct ux_sock *us, const uint8_t *p)
{
    uint32_t slot, gen;
    memcpy(&slot, p, 4);
    memcpy(&gen, p + 4, 4);
    return slot_con(us, slot, gen, UINT32_MAX);
}

/* The key of a packed frame: the slot and the low 16 bits of the
 * generation (a slot reused 65536 times while an old message was still on
 * its way would take it: not in practice). */
static struct ux_con *key_lookup_packed(struct ux_sock *us, const uint8_t *p)
{
    uint32_t slot;
    uint16_t gen;
    memcpy(&slot, p, 4);
    memcpy(&gen, p + 4, 2);
    return slot_con(us, slot, gen, UINT16_MAX);
}

static int slot_alloc(struct ux_sock *us, struct ux_con *uc)
{
    if (!us->nfree) {
        uint32_t n = us->nslots ? us->nslots * 2 : 16;
        struct ux_con **s = realloc(us->slots, n * sizeof(*s));
        if (!s) return -ENOMEM;
        us->slots = s;
        uint32_t *g = realloc(us->gens, n * sizeof(*g));
        if (!g) return -ENOMEM;
        us->gens = g;
        uint32_t *f = realloc(us->free_slots, n * sizeof(*f));
        if (!f) return -ENOMEM;
        us->free_slots = f;
        for (uint32_t i = n; i > us->nslots; i--) {
            us->slots[i - 1] = NULL;
            us->gens[i - 1] = 1;
            us->free_slots[us->nfree++] = i - 1;
        }
        us->nslots = n;
    }
    uint32_t slot = us->free_slots[--us->nfree];
    us->slots[slot] = uc;
    uc->slot = slot;
    uc->gen = us->gens[slot];
    return 0;
}

static void slot_free(struct ux_sock *us, struct ux_con *uc)
{
    us->slots[uc->slot] = NULL;
    us->gens[uc->slot]++;
    us->free_slots[us->nfree++] = uc->slot;
}

/* ---------------------------------------------------------------------- */
/* Pending work                                                           */
/* ---------------------------------------------------------------------- */

/* Dispatch this open connection on the next round of progress. */
static void mark_pending(struct ux_con *uc)
{
    uc->nested_only = false;
    if (uc->pending || !uc->open) return;
    uc->pending = true;
    uc->next_pending = uc->us->pending;
    uc->us->pending = uc;
}

/* Before an upcall with more work of uc behind it (see dispatch): on the
 * list for a nested round, without counting as progress by itself. */
static void mark_nested(struct ux_con *uc)
{
    if (uc->pending) return;
    mark_pending(uc);
    uc->nested_only = true;
}

static void unmark_pending(struct ux_con *uc)
{
    if (!uc->pending) return;
    for (struct ux_con **pp = &uc->us->pending; *pp; pp = &(*pp)->next_pending)
        if (*pp == uc) {
            *pp = uc->next_pending;
            break;
        }
    uc->pending = false;
}

/* Record the first failure of uc; dispatch reports it once what arrived
 * before was delivered. */
__attribute__((format(printf, 4, 5)))
static void set_error(struct ux_con *uc, pscom_op_t op, pscom_err_t code,
                      const char *fmt, ...)
{
    if (!uc->err) {
        va_list ap;
        uc->err = true;
        uc->err_op = op;
        uc->err_code = code;
        va_start(ap, fmt);
        vsnprintf(uc->err_what, sizeof(uc->err_what), fmt, ap);
        va_end(ap);
    }
    mark_pending(uc);
}

static void set_ucx_error(struct ux_con *uc, pscom_op_t op, const char *what,
                          int status)
{
    set_error(uc, op,
              uxw_status_is_peer_gone(status) ? PSCOM_ERR_EOF
                                              : PSCOM_ERR_IOERROR,
              "%s (%s)", what, uxw_status_str(status));
}

/* ---------------------------------------------------------------------- */
/* UCX callbacks: they only record                                       */
/* ---------------------------------------------------------------------- */

/* An orphan's lent frame goes back to the core. */
static void txe_return(struct ux_txe *e)
{
    for (struct ux_txe **pp = &lent_txes; *pp; pp = &(*pp)->lent_next)
        if (*pp == e) {
            *pp = e->lent_next;
            break;
        }
    void *token = e->token;
    e->token = NULL;
    pscom_plugin_tx_returned(token);
}

static void tx_cb(void *user, int status)
{
    struct ux_txe *e = user;
    if (e->us) e->us->inflight--;
    e->done = true;
    e->status = status;
    if (!e->uc) {
        if (e->token) txe_return(e);
        txe_put(e);
        return;
    }
    mark_pending(e->uc);
}

static void rop_free(struct ux_rop *rop)
{
    if (!rop->direct) free(rop->buf);
    free(rop);
}

static void rop_cb(void *user, int status, size_t len)
{
    struct ux_rop *rop = user;
    (void)len;
    if (rop->us) rop->us->inflight--;
    rop->done = true;
    rop->status = status;
    if (!rop->uc) {
        rop_free(rop);
        return;
    }
    mark_pending(rop->uc);
}

static void ep_closed_cb(void *user, int status)
{
    struct ux_sock *us = user;
    (void)status;
    us->closing--;
}

static void ep_dropped_cb(void *user, int status)
{
    (void)user;
    (void)status;
}

static void ep_err_cb(void *arg, uxw_ep_t *ep, int status)
{
    struct ux_sock *us = arg;
    for (uint32_t i = 0; i < us->nslots; i++) {
        struct ux_con *uc = us->slots[i];
        if (!uc || uc->ep != ep) continue;
        pscom_plugin_log(4, "ucx: %s: UCX reports the endpoint failed: %s",
                         pscom_plugin_con_str(uc->con), uxw_status_str(status));
        uc->ep_failed = true;
        set_ucx_error(uc, PSCOM_OP_READ, "UCX endpoint", status);
        return;
    }
}

/* Check what the peer put in front of a message. 0 and *h, the header
 * as checked (of a FRAME), or a reason. */
static const char *check_am(unsigned id, size_t head_len, size_t len,
                            const uint8_t *head, pscom_header_net_t *h)
{
    if (id == UXW_AM_FRAME_LONG)
        return head_len || len < sizeof(pscom_header_net_t)
                   ? "long-head message without its head"
                   : NULL;
    if (id != UXW_AM_FRAME) return "unknown message kind";
    if (head_len < sizeof(*h)) return "message head shorter than a header";
    memcpy(h, head, sizeof(*h));
    if (sizeof(*h) + h->xheader_len != head_len)
        return "extended header length does not match the message head";
    if (h->data_len != len) return "body length does not match the header";
    return NULL;
}

/* A packed message (its head, then its body) straight to the core from
 * the AM callback (pscom_plugin_rx_now: only if a posted receive takes it;
 * its callbacks run when ux_progress returns). Only while nothing of its
 * connection waits for the dispatch — no message queued, no finished send,
 * body or error to report (all of which put it on the pending list) — so
 * that the core sees everything in order; the core itself refuses while a
 * message is half delivered (a body moving in line). true: taken. */
static bool deliver_now(struct ux_con *uc, const uint8_t *head,
                        size_t head_len, const void *body, size_t body_len)
{
    if (!polling || !uc->open || uc->pending || uc->rxq) return false;
    return pscom_plugin_rx_now(uc->con, head, head_len, body, body_len) == 1;
}

/* Room for a packed frame's head rebuilt: header and xheader. */
#define HEAD_WORDS ((PREFIX_MAX + 7) / 8)

/* The head of a packed frame (p[0..len), at least PREFIX_LEN bytes; see
 * pack_prefix) rebuilt, aligned, in out: its header, then its xheader; its
 * length. An xheader longer than the frame is cut: the header then
 * disagrees with the head, which check_am reports. */
static size_t unpack_head(const uint8_t *p, size_t len,
                           uint64_t out[HEAD_WORDS])
{
    /* Each byte read once: over shared memory the data lies in UCX's
     * receive queue, which the peer writes. */
    uint8_t announced = p[7];
    size_t xl = announced;
    if (xl > len - PREFIX_LEN) xl = len - PREFIX_LEN;
    pscom_header_net_t h = {.xheader_len = announced, .msg_type = p[6],
                            .data_len = len - PREFIX_LEN - xl};
    memcpy(out, &h, sizeof(h));
    copy_small((uint8_t *)out + sizeof(h), p + PREFIX_LEN, xl);
    return sizeof(h) + xl;
}

static int body_arrived(struct ux_sock *us, const void *hdr, size_t hdr_len,
                        void *desc, size_t len, unsigned flags);

static int am_cb(void *arg, unsigned id, const void *hdr, size_t hdr_len,
                 void *data, size_t len, unsigned flags)
{
    struct ux_sock *us = arg;
    struct ux_con *uc;
    const uint8_t *head;
    size_t head_len;
    /* A packed frame comes whole as data: its head rebuilt, then to the
     * core at once if it can (which checks that it is one whole message),
     * else on as the others. */
    bool packed = id == UXW_AM_FRAME_PACKED;
    size_t used = 0; /* bytes of the data before the body */
    uint64_t rebuilt[HEAD_WORDS];
    if (packed) {
        const uint8_t *p = data;
        if (hdr_len || (flags & UXW_AM_RNDV) || len < PREFIX_LEN) {
            pscom_plugin_log(5, "ucx: malformed packed message of %zu bytes "
                             "dropped", len);
            return UXW_AM_DONE;
        }
        head = (const uint8_t *)rebuilt;
        head_len = unpack_head(p, len, rebuilt);
        /* the prefix and the xheader: the body follows */
        used = PREFIX_LEN + head_len - sizeof(pscom_header_net_t);
        data = (uint8_t *)data + used;
        len -= used;
        /* A cut head goes on to check_am. */
        const pscom_header_net_t *rh = (const pscom_header_net_t *)head;
        bool whole = head_len == sizeof(*rh) + rh->xheader_len;
        uc = key_lookup_packed(us, p);
        if (uc && !uc->err && whole &&
            deliver_now(uc, head, head_len, data, len))
            return UXW_AM_DONE;
        id = UXW_AM_FRAME;
    } else if (id == UXW_AM_BODY) {
        return body_arrived(us, hdr, hdr_len, data, len, flags);
    } else if (hdr_len < KEY_LEN) {
        pscom_plugin_log(5, "ucx: message of %zu bytes without a connection "
                         "key (%zu header bytes) dropped", len, hdr_len);
        return UXW_AM_DONE;
    } else {
        uc = key_lookup(us, hdr);
        head = (const uint8_t *)hdr + KEY_LEN;
        head_len = hdr_len - KEY_LEN;
    }
    if (!uc || uc->err) {
        pscom_plugin_log(5, "ucx: message of %zu bytes for a closed or "
                         "unknown connection dropped", len);
        return UXW_AM_DONE;
    }
    pscom_header_net_t checked = {0};
    const char *bad = check_am(id, head_len, len, head, &checked);
    if (bad) {
        pscom_plugin_log(1, "ucx: %s: malformed message from the peer (%s); "
                         "closing the connection",
                         pscom_plugin_con_str(uc->con), bad);
        set_error(uc, PSCOM_OP_READ, PSCOM_ERR_IOERROR,
                  "receive (malformed message: %s)", bad);
        return UXW_AM_DONE;
    }

    int ret = UXW_AM_DONE;
    struct ux_rx *rx;
    if (flags & UXW_AM_RNDV) {
        rx = rx_get(head_len);
        if (rx) {
            rx->kind = RX_RNDV;
            rx->data = data;
            ret = UXW_AM_KEEP;
        }
    } else if (len && (flags & UXW_AM_KEEPABLE) &&
               head_len + len > RX_INLINE) {
        rx = rx_get(head_len);
        if (rx) {
            rx->kind = RX_KEPT;
            rx->data = data;
            rx->data_off = used;
            ret = UXW_AM_KEEP;
        }
    } else {
        rx = rx_get(head_len + len);
        if (rx) {
            rx->kind = RX_COPY;
            rx->data = rx->buf + head_len;
            if (len <= HDR_INLINE) copy_small(rx->data, data, len);
            else memcpy(rx->data, data, len);
        }
    }
    if (!rx) {
        pscom_plugin_log(1, "ucx: %s: out of memory for an arriving message "
                         "of %zu bytes; closing the connection",
                         pscom_plugin_con_str(uc->con), len);
        set_error(uc, PSCOM_OP_READ, PSCOM_ERR_STDERROR,
                  "receive (out of memory)");
        return UXW_AM_DONE;
    }
    rx->long_head = id == UXW_AM_FRAME_LONG;
    rx->head_len = head_len;
    rx->len = len;
    memcpy(rx->buf, head, head_len);
    /* The header as checked: over shared memory the head lies where the
     * peer writes, and may have changed since. */
    if (id == UXW_AM_FRAME) memcpy(rx->buf, &checked, sizeof(checked));
    *uc->rxq_tail = rx;
    uc->rxq_tail = &rx->next;
    mark_pending(uc);
    return ret;
}

/* ---------------------------------------------------------------------- */
/* Sending                                                                */
/* ---------------------------------------------------------------------- */

/* A packed frame (FRAME_PACKED) is all data: instead of the key and the
 * header (16 bytes), an 8-byte prefix — slot (4 bytes), the low 16 bits of
 * the generation, the message type and the xheader's length; the body is
 * the rest — then the xheader and the body. The head comes first, in the
 * line the receiver reads first; eight bytes less keep more messages
 * within the first cache line of UCX's shared-memory FIFO element
 * (doc/plugins/ucx.md). The prefix and xheader of a frame
 * (head[0..hl), then bl bytes of body) at dst (PREFIX_MAX bytes); their
 * length, or 0 when the header says what a prefix cannot: the xheader not
 * all in the head (or too long), the body not all of the rest. */
static size_t pack_prefix(uint8_t *dst, const struct ux_con *uc,
                          const void *head, size_t hl, size_t bl)
{
    pscom_header_net_t h;
    if (hl < sizeof(h)) return 0;
    memcpy(&h, head, sizeof(h));
    if (h.xheader_len != hl - sizeof(h) || h.data_len != bl ||
        h.xheader_len > XHEADER_PACKED)
        return 0;
    uint16_t gen = (uint16_t)uc->peer_gen;
    memcpy(dst, &uc->peer_slot, 4);
    memcpy(dst + 4, &gen, 2);
    dst[6] = h.msg_type;
    dst[7] = (uint8_t)h.xheader_len;
    size_t xl = hl - sizeof(h);
    copy_small(dst + PREFIX_LEN, (const uint8_t *)head + sizeof(h), xl);
    return PREFIX_LEN + xl;
}

/* A small frame (hl + bl at most HDR_INLINE) packed into one piece at
 * dst: its length, or 0 when it cannot be packed. */
static size_t pack_frame(uint8_t *dst, const struct ux_con *uc,
                         const void *head, size_t hl, const void *body,
                         size_t bl)
{
    size_t pl = pack_prefix(dst, uc, head, hl, bl);
    if (pl) copy_small(dst + pl, body, bl);
    return pl ? pl + bl : 0;
}

/* Hand one frame to UCX. 0 when it is under way (or failed: reported
 * from progress); 1 when UCX took it at once and nothing older waits in
 * txq, so the caller may tell the core now; -1 after recording a failure. */
static int send_frame(struct ux_con *uc, const struct iovec *head,
                      const struct iovec *body)
{
    struct ux_sock *us = uc->us;
    struct ux_txe *e = txe_get();
    if (!e) {
        set_error(uc, PSCOM_OP_WRITE, PSCOM_ERR_STDERROR,
                  "send (out of memory)");
        return -1;
    }
    size_t blen = body ? body->iov_len : 0;
    e->uc = uc;
    e->us = us;
    e->base = head->iov_base;
    e->len = head->iov_len + blen;

    /* Bodies below our threshold are user messages: eager, so that the
     * receiver has them at once. Larger ones are rendezvous bodies whose
     * receive is posted: UCX's rendezvous can put them in place. */
    int eager = blen < cfg_rendezvous;
    struct iovec *data = e->iov;
    int dcnt = 0;
    unsigned id;
    size_t hlen;
    /* Packed: a small frame in one piece, which UCX sends by its shortest
     * path; a larger eager one as the prefix, then the body. */
    bool small = e->len <= HDR_INLINE;
    size_t plen = 0;
    if (small)
        plen = pack_frame(e->hdr, uc, head->iov_base, head->iov_len,
                          blen ? body->iov_base : NULL, blen);
    else if (eager)
        plen = pack_prefix(e->hdr, uc, head->iov_base, head->iov_len, blen);
    e->borrows = !small && (blen || head->iov_len > us->max_head);
    if (plen) {
        id = UXW_AM_FRAME_PACKED;
        hlen = 0;
        data[dcnt++] = (struct iovec){e->hdr, plen};
        if (!small && blen) data[dcnt++] = *body;
    } else if (head->iov_len <= us->max_head) {
        id = UXW_AM_FRAME;
        hlen = KEY_LEN + head->iov_len;
        if (hlen > sizeof(e->hinline)) {
            e->hdr = malloc(hlen);
            if (!e->hdr) {
                e->hdr = e->hinline;
                txe_put(e);
                set_error(uc, PSCOM_OP_WRITE, PSCOM_ERR_STDERROR,
                  "send (out of memory)");
                return -1;
            }
        }
        memcpy(e->hdr + KEY_LEN, head->iov_base, head->iov_len);
        if (body) data[dcnt++] = *body;
    } else {
        id = UXW_AM_FRAME_LONG;
        hlen = KEY_LEN;
        data[dcnt++] = *head;
        if (body) data[dcnt++] = *body;
    }
    if (hlen) key_put(e->hdr, uc->peer_slot, uc->peer_gen);

    *uc->txq_tail = e;
    uc->txq_tail = &e->next;
    e->op = (uxw_op_t){.cb.done = tx_cb, .user = e};
    us->inflight++; /* first: UCX may call tx_cb inside the call */
    int rc = uxw_am_send(uc->ep, id, hlen ? e->hdr : NULL, hlen, data, dcnt,
                         eager ? UXW_SEND_EAGER : UXW_SEND_ANY, &e->op);
    if (rc == UXW_PENDING) return 0;
    if (rc == UXW_OK && uc->txq == e) {
        uc->txq = NULL;
        uc->txq_tail = &uc->txq;
        us->inflight--;
        txe_put(e);
        return 1;
    }
    if (!e->done) tx_cb(e, rc);
    return rc ? -1 : 0;
}

/* Hand the frames of one peek to UCX. The bytes of the first ones, which
 * UCX took at once, go to *done (the caller tells the core); -1 when the
 * connection failed. */
static int send_peeked(struct ux_con *uc, const struct iovec *iov, int n,
                       size_t *done)
{
    pscom_plugin_con_t *con = uc->con;
    struct ux_txe *h = uc->txq;
    for (int i = 0; i < n;) {
        pscom_header_net_t hdr;
        if (iov[i].iov_len < sizeof(hdr)) {
            pscom_plugin_log(1, "ucx: %s: internal error: a queued frame "
                             "starts with %zu bytes, less than a header",
                             pscom_plugin_con_str(con), iov[i].iov_len);
            set_error(uc, PSCOM_OP_WRITE, PSCOM_ERR_IOERROR,
                      "send (internal error)");
            return -1;
        }
        memcpy(&hdr, iov[i].iov_base, sizeof(hdr));
        int cnt = hdr.data_len ? 2 : 1;
        if (i + cnt > n) break; /* its body is beyond this peek */
        if (cnt == 2 && iov[i + 1].iov_len != hdr.data_len) {
            pscom_plugin_log(1, "ucx: %s: internal error: a queued frame "
                             "announces %llu body bytes, the queue has %zu",
                             pscom_plugin_con_str(con),
                             (unsigned long long)hdr.data_len,
                             iov[i + 1].iov_len);
            set_error(uc, PSCOM_OP_WRITE, PSCOM_ERR_IOERROR,
                      "send (internal error)");
            return -1;
        }
        /* Frames UCX has already are matched in order; entries whose frame
         * left the queue (cancelled) are passed over. */
        while (h && h->base != iov[i].iov_base) h = h->next;
        if (h) {
            h = h->next;
        } else {
            size_t len = iov[i].iov_len + (cnt == 2 ? iov[i + 1].iov_len : 0);
            int rc = send_frame(uc, &iov[i], cnt == 2 ? &iov[i + 1] : NULL);
            if (rc < 0) return -1;
            if (rc == 1) *done += len;
        }
        i += cnt;
    }
    return 0;
}

/* Frames UCX takes at once (eager ones, normally) are done for the core at
 * once, as with shm: the sender's completion is off the path of the reply. */
static void ux_tx_kick(pscom_plugin_con_t *con, void *priv)
{
    struct ux_con *uc = priv;
    for (;;) {
        if (!uc->open || uc->err) return;
        struct iovec iov[PEEK_IOV];
        size_t total, done = 0;
        int n = pscom_plugin_tx_peek(con, iov, PEEK_IOV, &total);
        int rc = send_peeked(uc, iov, n, &done);
        /* Completions may run callbacks that queue (and kick) more. */
        if (done && pscom_plugin_tx_done(con, done)) return;
        /* A full peek may have left frames behind. */
        if (rc || !done || n < PEEK_IOV) return;
    }
}

/* A frame with nothing before it. A small one is packed on the stack and
 * sent only if UCX copies it at once; 1 then, it counts as sent. Else 0:
 * it goes through the queue (send_frame), where UCX may keep it. */
static int ux_tx_now(pscom_plugin_con_t *con, void *priv,
                     const struct iovec *iov, int iovcnt)
{
    struct ux_con *uc = priv;
    size_t hlen = iov[0].iov_len, blen = iovcnt > 1 ? iov[1].iov_len : 0;
    uint8_t buf[HDR_INLINE]; /* pack_frame's most */
    if (!uc->open || uc->err || uc->txq) return 0;
    if (hlen + blen <= HDR_INLINE) {
        size_t len = pack_frame(buf, uc, iov[0].iov_base, hlen,
                                blen ? iov[1].iov_base : NULL, blen);
        return len && uxw_am_send_now(uc->us->w, uc->ep, UXW_AM_FRAME_PACKED,
                                      buf, len) == UXW_OK;
    }
    /* A larger one as tx_kick sends it, now: done (1) when UCX copied it
     * at once. Else UCX keeps it, or the send failed (reported from
     * progress), and 0 puts it in the core's queue, where tx_kick finds it
     * at the head of txq and does not send it again. */
    pscom_header_net_t h;
    if (hlen < sizeof(h)) return 0;
    memcpy(&h, iov[0].iov_base, sizeof(h));
    if (h.data_len != blen) return 0; /* tx_kick reports it */
    return send_frame(uc, &iov[0], iovcnt > 1 ? &iov[1] : NULL) == 1;
}

/* Report the frames UCX is done with, in queue order. 0, or -1 when the
 * connection is closing. */
static int flush_tx(struct ux_con *uc)
{
    pscom_plugin_con_t *con = uc->con;
    bool flushed = false;
    struct ux_txe *e;
    while ((e = uc->txq) && e->done) {
        if (e->status) {
            set_ucx_error(uc, PSCOM_OP_WRITE, "UCX send", e->status);
            return 0;
        }
        uc->txq = e->next;
        if (!uc->txq) uc->txq_tail = &uc->txq;
        struct iovec iov;
        size_t total;
        int n = pscom_plugin_tx_peek(con, &iov, 1, &total);
        bool there = n == 1 && iov.iov_base == e->base;
        size_t len = e->len;
        txe_put(e);
        if (!there) {
            if (!warned_cancel)
                pscom_plugin_log(2, "ucx: %s: a send was cancelled after it "
                                 "was handed to UCX; the peer receives it "
                                 "anyway", pscom_plugin_con_str(con));
            warned_cancel = true;
            continue;
        }
        if (uc->txq && uc->txq->done) mark_nested(uc);
        if (pscom_plugin_tx_done(con, len)) return -1;
        flushed = true;
    }
    /* Frames beyond the last peek may wait for room. */
    if (flushed && !uc->err && pscom_plugin_tx_pending(con))
        ux_tx_kick(con, uc);
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Receiving                                                              */
/* ---------------------------------------------------------------------- */

/* Start receiving the body of desc (len bytes) into rop->buf: out of line
 * (ux_con.deferred) when rop has the core's handle, else in line. */
static void rop_begin(struct ux_con *uc, struct ux_rop *rop, void *desc,
                      size_t len)
{
    struct ux_sock *us = uc->us;
    rop->uc = uc;
    rop->us = us;
    rop->len = len;
    if (rop->handle) {
        rop->next = uc->deferred;
        uc->deferred = rop;
    } else {
        uc->rop = rop;
    }
    rop->op = (uxw_op_t){.cb.recv = rop_cb, .user = rop};
    us->inflight++; /* first: UCX may call rop_cb inside the call */
    int rc = uxw_am_recv(us->w, desc, rop->buf, len, &rop->op);
    if (rc != UXW_PENDING && !rop->done) rop_cb(rop, rc, 0);
}

/* Receive a rendezvous body. Out of line when the core lets us
 * (pscom_plugin_rx_defer: a body for a matched receive, whose buffer stays
 * ours until we say it is full): then the messages behind it go on at once.
 * Else in line, while the messages behind it wait: into the user's buffer
 * when the core offers one for all of it and the body is, by its size, a
 * rendezvous body of the core (rx_direct may offer the core's own buffer
 * of an unexpected message, which must not be written asynchronously);
 * otherwise into a buffer of ours that is pushed afterwards. */
static int start_rop(struct ux_con *uc, void *desc, size_t len, bool may_direct)
{
    struct ux_sock *us = uc->us;
    struct ux_rop *rop = calloc(1, sizeof(*rop));
    if (rop && may_direct) {
        size_t blen;
        rop->handle = pscom_plugin_rx_defer(uc->con, &rop->buf, &blen);
        if (rop->handle && blen != len) {
            /* The head we pushed announced len: the core disagrees. */
            pscom_plugin_rx_defer_done(uc->con, rop->handle, -EPROTO);
            free(rop);
            uxw_am_release(us->w, desc);
            set_error(uc, PSCOM_OP_READ, PSCOM_ERR_IOERROR,
                      "receive (internal error: body of %zu bytes, the "
                      "core expects %zu)", len, blen);
            return -1;
        }
        void *dst;
        if (rop->handle) {
            rop->direct = true;
        } else if (len >= uc->peer_rndv &&
                   pscom_plugin_rx_direct(uc->con, &dst) == len) {
            rop->buf = dst;
            rop->direct = true;
        }
    }
    if (rop && !rop->direct) rop->buf = malloc(len);
    if (!rop || !rop->buf) {
        free(rop);
        uxw_am_release(us->w, desc);
        pscom_plugin_log(1, "ucx: %s: out of memory for a body of %zu bytes; "
                         "closing the connection",
                         pscom_plugin_con_str(uc->con), len);
        set_error(uc, PSCOM_OP_READ, PSCOM_ERR_STDERROR,
                  "receive (out of memory)");
        return -1;
    }
    rop_begin(uc, rop, desc, len);
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Pulled rendezvous (plugin interface 1.5)                               */
/* ---------------------------------------------------------------------- */

/* The core announces a rendezvous send (RNDV_REQ) and would wait for the
 * receiver's answer before it sends the body. Instead, rndv_describe hands
 * the body to UCX's rendezvous at once, as an active message of its own
 * (UXW_AM_BODY: the key and an id of the connection), ahead of the
 * announcement, and puts the id in the announcement's blob. UCX sends only
 * its request to send; the body stays with the sender. At the receiver
 * the body's descriptor waits (ux_con.bodies) until a receive matches the
 * announcement; then rndv_pull_start has UCX move the body into the
 * receive buffer, out of line, and the core confirms to the sender (FIN)
 * when it is in. One round trip less than the answer, and an unexpected
 * large message is never copied. A body whose receive cannot take it
 * whole (truncation), or that is not there, is let go (UCX ends the send)
 * and the core's own rendezvous moves it. */

static void bsend_unlink(struct ux_bsend **list, struct ux_bsend *b)
{
    for (struct ux_bsend **pp = list; *pp; pp = &(*pp)->next)
        if (*pp == b) {
            *pp = b->next;
            return;
        }
}

/* UCX is done with a body: the receiver pulled it or let it go, or the
 * send failed. */
static void bsend_cb(void *user, int status)
{
    struct ux_bsend *b = user;
    struct ux_con *uc = b->uc;
    bsend_unlink(uc ? &uc->bsends : &b->us->bsends_left, b);
    if (uc && status) set_ucx_error(uc, PSCOM_OP_WRITE, "UCX send", status);
    if (b->token) pscom_plugin_tx_returned(b->token);
    free(b);
}

static size_t ux_rndv_describe(pscom_plugin_con_t *con, void *priv,
                               const void *data, size_t len, void *blob)
{
    struct ux_con *uc = priv;
    (void)con;
    if (!cfg_pull || !uc->open || uc->err) return 0;
    struct ux_bsend *b = malloc(sizeof(*b));
    if (!b) return 0;
    uint64_t id = ++uc->body_seq;
    b->data = data;
    b->token = NULL;
    key_put(b->hdr, uc->peer_slot, uc->peer_gen);
    memcpy(b->hdr + KEY_LEN, &id, sizeof(id));
    b->uc = uc;
    b->us = uc->us;
    b->op = (uxw_op_t){.cb.done = bsend_cb, .user = b};
    b->next = uc->bsends; /* first: UCX may call bsend_cb inside the call */
    uc->bsends = b;
    struct iovec iov = {(void *)data, len};
    int rc = uxw_am_send(uc->ep, UXW_AM_BODY, b->hdr, BODY_HDR_LEN, &iov, 1,
                         UXW_SEND_RNDV, &b->op);
    if (rc != UXW_PENDING) { /* bsend_cb does not run */
        bsend_unlink(&uc->bsends, b);
        free(b);
        if (rc != UXW_OK) return 0;
    }
    memcpy(blob, &id, sizeof(id));
    return sizeof(id);
}

/* The AM callback's part for UXW_AM_BODY: keep the descriptor for its
 * pull (UXW_AM_KEEP), or let the body go. */
static int body_arrived(struct ux_sock *us, const void *hdr, size_t hdr_len,
                        void *desc, size_t len, unsigned flags)
{
    struct ux_con *uc = hdr_len == BODY_HDR_LEN ? key_lookup(us, hdr) : NULL;
    if (!uc || uc->err) {
        pscom_plugin_log(5, "ucx: rendezvous body of %zu bytes for a closed "
                         "or unknown connection dropped", len);
        return UXW_AM_DONE;
    }
    if (!(flags & UXW_AM_RNDV)) {
        pscom_plugin_log(1, "ucx: %s: malformed message from the peer (a "
                         "rendezvous body sent eagerly); closing the "
                         "connection", pscom_plugin_con_str(uc->con));
        set_error(uc, PSCOM_OP_READ, PSCOM_ERR_IOERROR,
                  "receive (malformed message: a rendezvous body sent "
                  "eagerly)");
        return UXW_AM_DONE;
    }
    uint64_t id;
    memcpy(&id, (const uint8_t *)hdr + KEY_LEN, sizeof(id));
    struct ux_body *b = id > uc->body_floor ? malloc(sizeof(*b)) : NULL;
    if (!b) return UXW_AM_DONE; /* its pull finds none: the core's way */
    *b = (struct ux_body){.next = uc->bodies, .id = id, .desc = desc,
                          .len = len};
    uc->bodies = b;
    return UXW_AM_KEEP;
}

/* Take the body with this id off the list; NULL when there is none. */
static struct ux_body *body_take(struct ux_con *uc, uint64_t id)
{
    for (struct ux_body **pp = &uc->bodies; *pp; pp = &(*pp)->next)
        if ((*pp)->id == id) {
            struct ux_body *b = *pp;
            *pp = b->next;
            return b;
        }
    return NULL;
}

static int ux_rndv_pull_start(pscom_plugin_con_t *con, void *priv,
                              const void *blob, size_t blob_len, void *dst,
                              size_t len, void *handle)
{
    struct ux_con *uc = priv;
    uint64_t id;
    if (blob_len != sizeof(id) || !uc->open || uc->err) return -EINVAL;
    memcpy(&id, blob, sizeof(id));
    if (id > uc->body_floor) uc->body_floor = id;
    struct ux_body *b = body_take(uc, id);
    if (!b) {
        pscom_plugin_log(3, "ucx: %s: rendezvous body %llu has not arrived; "
                         "the core's rendezvous moves it instead",
                         pscom_plugin_con_str(con), (unsigned long long)id);
        return -ENOENT;
    }
    void *desc = b->desc;
    bool whole = b->len == len; /* UCX moves a body whole */
    free(b);
    struct ux_rop *rop = whole ? calloc(1, sizeof(*rop)) : NULL;
    if (!rop) {
        uxw_am_release(uc->us->w, desc); /* UCX ends the sender's send */
        return whole ? -ENOMEM : -EMSGSIZE;
    }
    rop->handle = handle;
    rop->buf = dst;
    rop->direct = true;
    rop_begin(uc, rop, desc, len);
    return 0;
}

/* Let every body go that was not pulled (the connection closes). */
static void bodies_release(struct ux_con *uc)
{
    while (uc->bodies) {
        struct ux_body *b = uc->bodies;
        uc->bodies = b->next;
        uxw_am_release(uc->us->w, b->desc);
        free(b);
    }
}

/* The in-line body arrived: give it to the core. */
static int finish_rop(struct ux_con *uc)
{
    struct ux_rop *rop = uc->rop;
    uc->rop = NULL;
    int rc;
    if (rop->status) {
        set_ucx_error(uc, PSCOM_OP_READ, "UCX receive", rop->status);
        rc = -1;
    } else if (rop->direct) {
        rc = pscom_plugin_rx_direct_done(uc->con, rop->len);
    } else {
        rc = pscom_plugin_rx_push(uc->con, rop->buf, rop->len);
    }
    rop_free(rop);
    return rc;
}

/* Tell the core of the out-of-line bodies that arrived, in any order. 0, or
 * -1 when the connection is closing. */
static int finish_deferred(struct ux_con *uc)
{
    struct ux_rop **pp = &uc->deferred;
    while (*pp) {
        struct ux_rop *rop = *pp;
        if (!rop->done) {
            pp = &rop->next;
            continue;
        }
        *pp = rop->next;
        int err = 0;
        if (rop->status) {
            set_ucx_error(uc, PSCOM_OP_READ, "UCX receive", rop->status);
            err = -EIO;
        }
        if (uc->deferred) mark_nested(uc);
        int rc = pscom_plugin_rx_defer_done(uc->con, rop->handle, err);
        rop_free(rop);
        if (rc) return -1;
    }
    return 0;
}

static void rx_release(struct ux_sock *us, struct ux_rx *rx)
{
    if (rx->kind != RX_COPY && rx->data)
        uxw_am_release(us->w, (uint8_t *)rx->data - rx->data_off);
    rx_put(rx);
}

/* One message to the core. 0, or -1 when the connection is closing.
 * Between the head and the body, callbacks of the core (recv_accept) must
 * not see this connection deliver its next message: rx_busy. */
static int deliver(struct ux_con *uc, struct ux_rx *rx)
{
    pscom_plugin_con_t *con = uc->con;
    int rc = 0;
    if (rx->kind == RX_COPY) {
        /* Head and body are one piece: one push. */
        rc = pscom_plugin_rx_push(con, rx->buf, rx->head_len + rx->len);
        rx_release(uc->us, rx);
        return rc;
    }
    if (rx->head_len) {
        uc->rx_busy = rx->len != 0;
        rc = pscom_plugin_rx_push(con, rx->buf, rx->head_len);
        uc->rx_busy = false;
    }
    if (rc || !rx->len) {
        /* closing, or no body */
    } else if (rx->kind == RX_RNDV) {
        void *desc = rx->data;
        rx->data = NULL; /* start_rop consumes the descriptor */
        rc = start_rop(uc, desc, rx->len, !rx->long_head);
    } else {
        rc = pscom_plugin_rx_push(con, rx->data, rx->len);
    }
    rx_release(uc->us, rx);
    return rc;
}

static int deliver_rx(struct ux_con *uc)
{
    if (uc->rx_busy) {
        mark_pending(uc);
        return 0;
    }
    for (;;) {
        if (uc->rxq && (uc->rop || uc->rxq->next)) mark_nested(uc);
        if (uc->rop) {
            if (!uc->rop->done) return 0;
            if (finish_rop(uc)) return -1;
            continue;
        }
        struct ux_rx *rx = uc->rxq;
        if (!rx) return 0;
        uc->rxq = rx->next;
        if (!uc->rxq) uc->rxq_tail = &uc->rxq;
        if (deliver(uc, rx)) return -1;
    }
}

/* ---------------------------------------------------------------------- */
/* Dispatch and progress                                                  */
/* ---------------------------------------------------------------------- */

static void flush_rma(struct ux_con *uc);

static void report_error(struct ux_con *uc)
{
    uc->err_reported = true;
    pscom_plugin_con_error(uc->con, uc->err_op, uc->err_code, uc->err_what, 0);
}

/* The peer's end of the pre-connection socket closed: it closed the
 * connection or its process ended. Its last messages may still be on their
 * way through UCX; after HUP_GRACE_MS the connection fails. */
static void check_hup(struct ux_con *uc)
{
    if (!uc->hup || uc->err) return;
    if (now_ms() - uc->hup_at < HUP_GRACE_MS) {
        mark_pending(uc);
        return;
    }
    set_error(uc, PSCOM_OP_READ, PSCOM_ERR_EOF,
              "the peer's pre-connection socket closed (its process ended)");
}

/* Give the core what UCX finished for this connection: sent frames first
 * (a reply may depend on them), then arrived messages, then a failure.
 * The connection is off the pending list while this runs, and an upcall's
 * callback may wait (nested progress) for work this call would do after it
 * returns; so before an upcall with more work behind it, the connection
 * goes back on the list (mark_nested), and a nested round goes on with it. */
static void dispatch(struct ux_con *uc)
{
    if (!uc->open || uc->err_reported) return;
    /* Bodies that arrived out of line came before what is queued now. */
    if ((uc->txq && flush_tx(uc)) || (uc->deferred && finish_deferred(uc)) ||
        deliver_rx(uc) || (uc->deferred && finish_deferred(uc)))
        return;
    if (uc->rmaq) flush_rma(uc);
    if (uc->hup) check_hup(uc);
    if (uc->err && !uc->err_reported && !uc->rx_busy) report_error(uc);
}

/* Out of line: an idle round of ux_progress stays a short loop. */
static __attribute__((noinline)) int dispatch_pending(struct ux_sock *us)
{
    struct ux_con *list = us->pending;
    us->pending = NULL;
    int did = 0;
    progress_depth++;
    while (list) {
        struct ux_con *uc = list;
        list = uc->next_pending;
        uc->pending = false;
        did |= !uc->nested_only;
        uc->nested_only = false;
        dispatch(uc);
    }
    progress_depth--;
    return did;
}

static void sock_destroy(struct ux_sock *us);

static __attribute__((noinline)) void destroy_unused_socks(void)
{
    socks_unused = false;
    struct ux_sock *us = socks;
    while (us) {
        struct ux_sock *next = us->next;
        if (us->unused && !us->refs) sock_destroy(us);
        us = next;
    }
}

/* Upcalls (only from dispatch_pending: UCX's callbacks record) may nest
 * progress (an application callback that waits) and run handshakes that
 * release sockets: sockets are destroyed only once the outermost round is
 * over. An idle round is a UCX poll per socket and two tests. */
static int ux_progress(void)
{
    int did = 0;
    for (struct ux_sock *us = socks; us; us = us->next) {
        polling = true;
        did |= uxw_worker_progress(us->w) != 0 || us->inflight;
        polling = false;
        if (us->pending) did |= dispatch_pending(us);
    }
    if (socks_unused && !progress_depth) destroy_unused_socks();
    return did;
}

/* Progress us (recording only, no upcalls) until done(arg) or the
 * deadline. */
static bool wait_for(struct ux_sock *us, bool (*done)(void *), void *arg,
                     unsigned ms)
{
    uint64_t deadline = now_ms() + ms;
    unsigned n = 0;
    while (!done(arg)) {
        uxw_worker_progress(us->w);
        if ((++n & 63) == 0 && now_ms() > deadline) return done(arg);
    }
    return true;
}

/* ---------------------------------------------------------------------- */
/* Sockets                                                                */
/* ---------------------------------------------------------------------- */

static struct ux_sock *sock_get(pscom_socket_t *key, char *why, size_t why_len)
{
    for (struct ux_sock *us = socks; us; us = us->next)
        if (us->key == key) {
            us->unused = false;
            return us;
        }

    uxw_context_t *ctx = spare_ctx;
    spare_ctx = NULL;
    if (!ctx) {
        uxw_config_t cfg = ucx_settings();
        if (uxw_context_create(&cfg, &ctx, why, why_len)) return NULL;
    }
    struct ux_sock *us = calloc(1, sizeof(*us));
    if (!us) {
        uxw_context_destroy(ctx);
        snprintf(why, why_len, "out of memory");
        return NULL;
    }
    if (uxw_worker_create(ctx, am_cb, us, &us->w, why, why_len)) {
        free(us);
        return NULL;
    }
    size_t max = uxw_worker_max_am_header(us->w);
    us->max_head = max > KEY_LEN ? max - KEY_LEN : 0;
    us->key = key;
    us->closed_op = (uxw_op_t){.cb.done = ep_closed_cb, .user = us};
    us->next = socks;
    socks = us;
    return us;
}

static bool no_closing(void *arg)
{
    return ((struct ux_sock *)arg)->closing == 0;
}

static void sock_put(struct ux_sock *us)
{
    if (--us->refs) return;
    if (progress_depth) {
        us->unused = true;
        socks_unused = true;
        return;
    }
    sock_destroy(us);
}

static void rma_rkeys_left_free(struct ux_sock *us);
static void rma_rkeys_left_drop(struct ux_sock *us);

static void sock_destroy(struct ux_sock *us)
{
    /* UCX aborts when a worker is destroyed under a close it has not
     * finished; a flush that needs the peer (UCX's software RMA waits for
     * its acknowledgement) stays unfinished while the peer does not make
     * progress. Such a worker is left behind, unused. */
    bool closed = wait_for(us, no_closing, us, CLOSE_WAIT_MS);
    if (!closed)
        pscom_plugin_log(2, "ucx: %u UCX endpoint(s) still closing after %u "
                         "ms (the peer is busy or gone); their worker is "
                         "left as it is", us->closing, CLOSE_WAIT_MS);
    rma_rkeys_left_free(us);
    for (struct ux_sock **pp = &socks; *pp; pp = &(*pp)->next)
        if (*pp == us) {
            *pp = us->next;
            break;
        }
    if (closed) {
        uxw_worker_destroy(us->w);
        rma_rkeys_left_drop(us);
        /* UCX calls back no more, nor reads the buffers of lent sends. */
        while (us->bsends_left) {
            struct ux_bsend *b = us->bsends_left;
            us->bsends_left = b->next;
            if (b->token) pscom_plugin_tx_returned(b->token);
            free(b);
        }
        for (struct ux_txe **pp = &lent_txes; *pp;) {
            struct ux_txe *e = *pp;
            if (e->lent_us != us) {
                pp = &e->lent_next;
                continue;
            }
            *pp = e->lent_next;
            void *token = e->token;
            e->token = NULL; /* the entry is left to tx_cb, as any orphan */
            pscom_plugin_tx_returned(token);
        }
    }
    free(us->slots);
    free(us->gens);
    free(us->free_slots);
    free(us);
}

/* ---------------------------------------------------------------------- */
/* Connections                                                            */
/* ---------------------------------------------------------------------- */

/* Does UCX still read the core's buffers for a send of uc? */
static bool sends_lent(const struct ux_con *uc)
{
    for (const struct ux_txe *e = uc->txq; e; e = e->next)
        if (!e->done && e->borrows) return true;
    return false;
}

/* UCX is done with every receive buffer of the core it had for uc. */
static bool bodies_done(void *arg)
{
    struct ux_con *uc = arg;
    if (uc->rop && uc->rop->direct && !uc->rop->done) return false;
    for (struct ux_rop *rop = uc->deferred; rop; rop = rop->next)
        if (!rop->done) return false;
    return true;
}

/* Forget rop: free it, or leave it to rop_cb when UCX still has it. */
static void rop_drop(struct ux_sock *us, struct ux_rop *rop)
{
    if (rop->done) {
        rop_free(rop);
        return;
    }
    rop->uc = NULL; /* rop_cb frees it; it no longer counts */
    rop->us = NULL;
    us->inflight--;
}

static void rma_con_release(struct ux_con *uc);

/* Undo everything of uc: after hs_abort, close, or a failed handshake. */
static void con_release(struct ux_con *uc)
{
    struct ux_sock *us = uc->us;
    if (!us) return;
    unmark_pending(uc);
    uc->open = false;
    slot_free(us, uc);
    if (uc->fd >= 0) {
        pscom_plugin_fd_del(uc->fd);
        close(uc->fd);
        uc->fd = -1;
    }

    while (uc->rxq) {
        struct ux_rx *rx = uc->rxq;
        uc->rxq = rx->next;
        rx_release(us, rx);
    }
    uc->rxq_tail = &uc->rxq;
    bodies_release(uc); /* the senders' UCX ends their sends */
    bool bodies_waiting = uc->bsends != NULL;
    rma_con_release(uc); /* before the endpoint goes, as UCX wants */
    /* A connection that failed (its peer gone, say) has nobody left to
     * read what its sends still hold; one closed by the core may. */
    bool peer_reads = !(uc->ep_failed || uc->err || uc->hup);
    while (uc->bsends) { /* bsend_cb frees them, or sock_destroy */
        struct ux_bsend *b = uc->bsends;
        uc->bsends = b->next;
        /* Until UCX ends it, the peer may still pull the body. */
        if (peer_reads) b->token = pscom_plugin_tx_lend(uc->con, b->data);
        b->uc = NULL;
        b->next = us->bsends_left;
        us->bsends_left = b;
    }

    /* A broken connection (or a dead peer) is dropped. Otherwise UCX
     * flushes what it has (the EOF message): the socket's last connection
     * waits for that before the worker goes. A body still waiting for its
     * pull, or a send UCX still reads from the core's buffers, belongs to
     * a send the core gave up (PSP_SHUTDOWN_TIMEOUT) and fails after this:
     * the endpoint is dropped too, which ends them, so that UCX does not
     * read the buffers once the application has them back. */
    bool lent = peer_reads && sends_lent(uc);
    bool broken = uc->ep_failed || uc->err || uc->hup || bodies_waiting || lent;
    if (uc->ep) {
        uxw_ep_t *ep = uc->ep;
        uc->ep = NULL;
        static const uxw_op_t dropped_op = {.cb.done = ep_dropped_cb};
        if (broken) {
            uxw_ep_close(us->w, ep, 1, &dropped_op);
        } else {
            us->closing++; /* first: ep_closed_cb may run inside the call */
            if (uxw_ep_close(us->w, ep, 0, &us->closed_op) != UXW_PENDING)
                us->closing--;
        }
    }
    /* Bodies on their way into receive buffers: the core hands the
     * buffers back once we return, so UCX must be done with them first (a
     * live peer sends them; for a dropped endpoint UCX ends them). Sends
     * still reading the core's buffers are lent below: the core ends them
     * when tx_cb comes (at once for a dropped endpoint in peer
     * error-handling mode). */
    if (!wait_for(us, bodies_done, uc, CLOSE_WAIT_MS))
        pscom_plugin_log(1, "ucx: %s: UCX was still receiving message bodies "
                         "%u ms after the connection closed; their receives "
                         "fail, and UCX may still write their buffers",
                         pscom_plugin_con_str(uc->con), CLOSE_WAIT_MS);
    while (uc->txq) {
        struct ux_txe *e = uc->txq;
        uc->txq = e->next;
        if (e->done) {
            txe_put(e);
        } else { /* tx_cb frees it; it no longer counts */
            /* The core must not give back buffers UCX still reads. */
            if (e->borrows && peer_reads)
                e->token = pscom_plugin_tx_lend(uc->con, e->base);
            if (e->token) {
                e->lent_us = us;
                e->lent_next = lent_txes;
                lent_txes = e;
            }
            e->uc = NULL;
            e->us = NULL;
            us->inflight--;
        }
    }
    uc->txq_tail = &uc->txq;
    if (uc->rop) rop_drop(us, uc->rop);
    uc->rop = NULL;
    while (uc->deferred) {
        struct ux_rop *rop = uc->deferred;
        uc->deferred = rop->next;
        rop_drop(us, rop);
    }
    uc->us = NULL;
    sock_put(us);
}

static int ux_hs_start(pscom_plugin_con_t *con, void *priv, void *blob,
                       size_t *len)
{
    struct ux_con *uc = priv;
    char why[256] = "";
    struct ux_sock *us = sock_get(pscom_plugin_con_socket(con), why, sizeof(why));
    if (!us) {
        pscom_plugin_log(4, "ucx: %s: no UCX worker: %s",
                         pscom_plugin_con_str(con), why);
        return -ENODEV;
    }
    uc->con = con;
    uc->fd = -1;
    uc->txq_tail = &uc->txq;
    uc->rxq_tail = &uc->rxq;
    us->refs++;
    if (slot_alloc(us, uc)) {
        sock_put(us);
        return -ENOMEM;
    }
    uc->us = us;

    ux_blob_t b = {.flags = cfg_peer_errors ? UX_BLOB_F_PEER_ERRORS : 0,
                   .slot = uc->slot, .gen = uc->gen,
                   .rndv = cfg_rendezvous == SIZE_MAX ? UINT64_MAX
                                                      : (uint64_t)cfg_rendezvous};
    uxw_worker_address(us->w, &b.addr, &b.addr_len);
    int rc = ux_blob_encode(&b, blob, len);
    if (rc) {
        pscom_plugin_log(4, "ucx: %s: the UCX worker address (%zu bytes) does "
                         "not fit in the handshake (%zu bytes)",
                         pscom_plugin_con_str(con), b.addr_len, *len);
        con_release(uc);
        return rc;
    }
    return 0;
}

static uint64_t fingerprint(const void *addr, size_t len);

static int ux_hs_connect(pscom_plugin_con_t *con, void *priv, const void *blob,
                         size_t len)
{
    struct ux_con *uc = priv;
    ux_blob_t b;
    const char *why;
    if (!uc->us) return -EINVAL;
    if (ux_blob_decode(blob, len, &b, &why)) {
        pscom_plugin_log(2, "ucx: %s: bad handshake data from the peer: %s",
                         pscom_plugin_con_str(con), why);
        char reason[160];
        snprintf(reason, sizeof(reason), "bad handshake data: %s", why);
        pscom_plugin_set_reason(reason);
        return -EPROTO;
    }
    uc->peer_slot = b.slot;
    uc->peer_gen = b.gen;
    uc->peer_rndv = b.rndv;
    uc->peer_fp = fingerprint(b.addr, b.addr_len);
    /* Both ends use peer error-handling mode when either wants it. */
    int peer_errors = cfg_peer_errors || (b.flags & UX_BLOB_F_PEER_ERRORS);
    int st = uxw_ep_create(uc->us->w, b.addr, b.addr_len, peer_errors,
                           ep_err_cb, uc->us, &uc->ep);
    if (st) {
        char reason[128];
        snprintf(reason, sizeof(reason), "cannot reach the peer's UCX worker: %s",
                 uxw_status_str(st));
        pscom_plugin_log(4, "ucx: %s: %s", pscom_plugin_con_str(con), reason);
        pscom_plugin_set_reason(reason);
        uc->ep = NULL;
        return -EHOSTUNREACH;
    }
    return 0;
}

static void ux_hs_abort(pscom_plugin_con_t *con, void *priv)
{
    con_release(priv);
}

/* The pre-connection socket carries nothing after the handshake: readable
 * means the peer's end closed. */
static void on_precon_fd(int fd, uint32_t events, void *arg)
{
    struct ux_con *uc = arg;
    char buf[64];
    ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EINTR))) return;
    pscom_plugin_fd_mod(fd, 0);
    if (!uc->hup) {
        uc->hup = true;
        uc->hup_at = now_ms();
    }
    mark_pending(uc);
}

static int ux_open(pscom_plugin_con_t *con, void *priv, int precon_fd)
{
    struct ux_con *uc = priv;
    if (!uc->us || !uc->ep) {
        con_release(uc);
        return -EINVAL;
    }
    /* UCX notices a dead peer late or not at all on some transports (shared
     * memory with a full queue); the kernel closes the dead process's
     * pre-connection socket at once. Watched cold: checked now and then. */
    if (precon_fd >= 0 &&
        !pscom_plugin_fd_add(precon_fd, EPOLLIN | EPOLLRDHUP, 0, on_precon_fd,
                             uc))
        uc->fd = precon_fd;
    uc->open = true;
    /* Messages that came before, or a failure: dispatch them. */
    if (uc->rxq || uc->err) mark_pending(uc);
    return uc->fd >= 0; /* 1: the socket is ours to close */
}

static void ux_close(pscom_plugin_con_t *con, void *priv)
{
    con_release(priv);
}

/* ---------------------------------------------------------------------- */
/* One-sided operations (plugin interface 1.1)                            */
/* ---------------------------------------------------------------------- */

/* Regions are mapped (ucp_mem_map) on the UCP context of the socket that
 * registers them, the one whose worker the socket's connections use, so a
 * region may create the socket's context and worker before its first
 * connection and keeps them (a reference) until it is deregistered.
 *
 * Our part of a packed key: "pcur", the fingerprint of our worker address,
 * then UCX's packed rkey. The peer checks the fingerprint against the
 * worker address of its connection: a key of another process used on this
 * connection would let UCX write into the wrong process (cma addresses the
 * endpoint's peer with the key's addresses). A put is ucp_put_nbx followed
 * by ucp_ep_flush_nbx, so that it is done only when the bytes are in the
 * target's memory (UCX does not order RMA before later active messages); a
 * get is ucp_get_nbx. Completions are reported from dispatch, like every
 * other upcall. */

#define RKEY_MAGIC  0x72756370u /* "pcur" */
#define RKEY_HDR    12          /* magic (4) + fingerprint (8) */
#define RKEY_UNPACK 512         /* zero-padded copy handed to UCX */

/* A region of this process (rma_register's handle). */
struct ux_region {
    struct ux_region *next; /* ux_sock.regions */
    struct ux_sock *us;     /* holds a reference */
    uxw_mem_t *mem;
};

/* A peer's region on one connection (rma_rkey's prkey). */
struct ux_rkey {
    struct ux_rkey *next; /* ux_con.rkeys */
    uxw_rkey_t *k;
    unsigned ops;  /* operations under way that use it */
    bool released; /* the core is done with it: destroy after the last op */
};

/* A put or get handed to UCX. */
struct ux_rma {
    struct ux_rma *next; /* ux_con.rmaq */
    struct ux_con *uc;   /* NULL once its connection closed (orphan) */
    struct ux_sock *us;
    struct ux_rkey *rk;  /* counts it in ops */
    void *token;         /* NULL once the core knows how it ended */
    unsigned left;       /* UCX operations not finished (put + flush, get) */
    int status;          /* the first failure */
    uxw_op_t op;         /* rma_cb(this) */
};

/* FNV-1a: enough to tell the workers of two processes apart. */
static uint64_t fingerprint(const void *addr, size_t len)
{
    const uint8_t *p = addr;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static int ux_rma_register(pscom_socket_t *socket, void *addr, size_t len,
                           void *rkey, size_t *rkey_len, void **handle)
{
    /* UCX maps no whole address space, and without a socket there is no
     * context the peers' endpoints reach. */
    if (cfg_rma == SIZE_MAX || !socket || !addr || !len) return -ENOTSUP;
    char why[256] = "";
    struct ux_sock *us = sock_get(socket, why, sizeof(why));
    if (!us) {
        pscom_plugin_log(4, "ucx: no UCX worker to map a region of %zu bytes "
                         "for one-sided access: %s", len, why);
        return -ENODEV;
    }
    us->refs++;
    struct ux_region *r = calloc(1, sizeof(*r));
    if (!r) {
        sock_put(us);
        return -ENOMEM;
    }
    uint8_t *key = rkey;
    size_t klen = PSCOM_PLUGIN_RKEY_MAX - RKEY_HDR;
    int st = uxw_mem_map(us->w, addr, len, key + RKEY_HDR, &klen, &r->mem);
    if (st) {
        if (st == UXW_ERR_KEY_TOO_LONG)
            pscom_plugin_log(3, "ucx: the UCX key of a region is %zu bytes, "
                             "more than the %d a packed key has room for; "
                             "its puts and gets go through the core",
                             klen, PSCOM_PLUGIN_RKEY_MAX - RKEY_HDR);
        else
            pscom_plugin_log(4, "ucx: ucp_mem_map of %zu bytes at %p: %s; its "
                             "puts and gets go through the core", len, addr,
                             uxw_status_str(st));
        free(r);
        sock_put(us);
        return st == UXW_ERR_KEY_TOO_LONG ? -ENOSPC : uxw_status_errno(st);
    }
    const void *waddr;
    size_t wlen;
    uxw_worker_address(us->w, &waddr, &wlen);
    uint32_t magic = RKEY_MAGIC;
    uint64_t fp = fingerprint(waddr, wlen);
    memcpy(key, &magic, 4);
    memcpy(key + 4, &fp, 8);
    *rkey_len = RKEY_HDR + klen;
    r->us = us;
    r->next = us->regions;
    us->regions = r;
    *handle = r;
    return 0;
}

static void region_unlink(struct ux_region *r)
{
    for (struct ux_region **pp = &r->us->regions; *pp; pp = &(*pp)->next)
        if (*pp == r) {
            *pp = r->next;
            break;
        }
}

static void ux_rma_deregister(pscom_socket_t *socket, void *handle)
{
    struct ux_region *r = handle;
    (void)socket;
    region_unlink(r);
    uxw_mem_unmap(r->us->w, r->mem);
    sock_put(r->us);
    free(r);
}

/* Library teardown: regions the application never deregistered go with
 * their sockets (the core deregisters nothing after destroy). */
static void rma_regions_free(void)
{
    struct ux_sock *us = socks;
    while (us) {
        struct ux_sock *next = us->next;
        while (us->regions) {
            struct ux_region *r = us->regions;
            us->regions = r->next;
            uxw_mem_unmap(us->w, r->mem);
            free(r);
            us->refs--;
        }
        if (!us->refs) sock_destroy(us);
        us = next;
    }
}

static int ux_rma_rkey(pscom_plugin_con_t *con, void *priv, const void *rkey,
                       size_t len, void **prkey)
{
    struct ux_con *uc = priv;
    if (!uc->open || uc->err || !uc->ep) return -ENOTCONN;
    uint32_t magic;
    uint64_t fp;
    if (len <= RKEY_HDR || len > PSCOM_PLUGIN_RKEY_MAX) return -EPROTO;
    memcpy(&magic, rkey, 4);
    memcpy(&fp, (const uint8_t *)rkey + 4, 8);
    if (magic != RKEY_MAGIC) return -EPROTO;
    if (fp != uc->peer_fp) {
        pscom_plugin_log(2, "ucx: %s: a remote key of another process was "
                         "used on this connection (pscom_rkey_generate with "
                         "the wrong connection?); its operations go through "
                         "the core", pscom_plugin_con_str(con));
        return -EPERM;
    }
    /* UCX reads the key without a length: give it a zero-padded copy. */
    uint8_t buf[RKEY_UNPACK] = {0};
    memcpy(buf, (const uint8_t *)rkey + RKEY_HDR, len - RKEY_HDR);
    struct ux_rkey *rk = calloc(1, sizeof(*rk));
    if (!rk) return -ENOMEM;
    int st = uxw_rkey_unpack(uc->ep, buf, &rk->k);
    if (st) {
        pscom_plugin_log(4, "ucx: %s: ucp_ep_rkey_unpack: %s",
                         pscom_plugin_con_str(con), uxw_status_str(st));
        free(rk);
        return uxw_status_errno(st);
    }
    rk->next = uc->rkeys;
    uc->rkeys = rk;
    *prkey = rk;
    return 0;
}

static void rkey_free_if_unused(struct ux_con *uc, struct ux_rkey *rk)
{
    if (rk->ops || !rk->released) return;
    for (struct ux_rkey **pp = &uc->rkeys; *pp; pp = &(*pp)->next)
        if (*pp == rk) {
            *pp = rk->next;
            break;
        }
    uxw_rkey_destroy(rk->k);
    free(rk);
}

static void ux_rma_rkey_release(pscom_plugin_con_t *con, void *priv,
                                void *prkey)
{
    struct ux_rkey *rk = prkey;
    (void)con;
    rk->released = true;
    rkey_free_if_unused(priv, rk);
}

static void rma_cb(void *user, int status)
{
    struct ux_rma *op = user;
    if (status && !op->status) op->status = status;
    if (--op->left) return;
    if (!op->uc) { /* orphan: nobody waits for it */
        op->rk->ops--;
        free(op);
        return;
    }
    op->us->inflight--;
    mark_pending(op->uc);
}

/* One UCX step of op: it no longer counts unless under way (never the
 * last count: rma_start holds one). */
static void rma_step(struct ux_rma *op, int rc)
{
    if (rc == UXW_PENDING) return;
    op->left--;
    if (rc && !op->status) op->status = rc;
}

/* Start a put (get: false) of len bytes. 0 when done now, 1 when started,
 * -errno to leave it to the core. */
static int rma_start(struct ux_con *uc, struct ux_rkey *rk, bool put,
                     void *buf, uint64_t raddr, size_t len, void *token)
{
    if (len < cfg_rma) return -ENOTSUP;
    if (!uc->open || uc->err || uc->hup) return -ENOTCONN;
    struct ux_rma *op = calloc(1, sizeof(*op));
    if (!op) return -ENOMEM;
    op->uc = uc;
    op->us = uc->us;
    op->rk = rk;
    op->token = token;
    op->op = (uxw_op_t){.cb.done = rma_cb, .user = op};
    /* The steps, and one count of ours while they start: UCX may end a step
     * inside the call that starts it (rma_cb), the last one only after. */
    op->left = (put ? 2 : 1) + 1;
    if (put) {
        rma_step(op, uxw_put(uc->ep, buf, len, raddr, rk->k, &op->op));
        /* A put that failed to start needs no flush. */
        if (!op->status)
            rma_step(op, uxw_ep_flush(uc->ep, &op->op));
        else
            op->left--;
    } else {
        rma_step(op, uxw_get(uc->ep, buf, len, raddr, rk->k, &op->op));
    }
    if (!--op->left) {
        int st = op->status;
        free(op);
        return st ? uxw_status_errno(st) : 0;
    }
    rk->ops++;
    uc->us->inflight++;
    op->next = uc->rmaq;
    uc->rmaq = op;
    return 1;
}

static int ux_rma_put(pscom_plugin_con_t *con, void *priv, void *prkey,
                      const void *src, uint64_t raddr, size_t len, void *token)
{
    (void)con;
    return rma_start(priv, prkey, true, (void *)src, raddr, len, token);
}

static int ux_rma_get(pscom_plugin_con_t *con, void *priv, void *prkey,
                      void *dst, uint64_t raddr, size_t len, void *token)
{
    (void)con;
    return rma_start(priv, prkey, false, dst, raddr, len, token);
}

/* Take the finished operations off uc's queue (in start order). */
/* Take one finished operation off uc->rmaq, or NULL. */
static struct ux_rma *rma_take_finished(struct ux_con *uc)
{
    for (struct ux_rma **pp = &uc->rmaq; *pp; pp = &(*pp)->next) {
        struct ux_rma *op = *pp;
        if (op->left) continue;
        *pp = op->next;
        return op;
    }
    return NULL;
}

/* Tell the core how finished operations ended. Its callbacks may start,
 * release keys or close: each operation is taken before its upcall. */
static void flush_rma(struct ux_con *uc)
{
    struct ux_rma *op;
    while ((op = rma_take_finished(uc))) {
        if (uc->rmaq) mark_nested(uc);
        void *token = op->token;
        int err = op->status ? uxw_status_errno(op->status) : 0;
        op->rk->ops--;
        rkey_free_if_unused(uc, op->rk);
        free(op);
        if (token) pscom_plugin_rma_done(token, err);
    }
}

static bool rma_idle(void *arg)
{
    struct ux_con *uc = arg;
    for (struct ux_rma *op = uc->rmaq; op; op = op->next)
        if (op->left) return false;
    return true;
}

/* Before the endpoint closes. The core gives the buffers of operations
 * still under way back to the application when close returns, so they
 * must end first: wait for them while the peer may finish them (a dead
 * peer cannot; dropping the endpoint cancels them). UCX wants the keys
 * destroyed after their operations and before their endpoint: a key still
 * used by an operation that did not end is left to UCX. */
static void rma_con_release(struct ux_con *uc)
{
    struct ux_sock *us = uc->us;
    bool peer_alive = !uc->ep_failed && !uc->hup;
    if (uc->rmaq && peer_alive && !wait_for(us, rma_idle, uc, CLOSE_WAIT_MS))
        pscom_plugin_log(2, "ucx: %s: one-sided operations still under way "
                         "%u ms after the connection closed; cancelled",
                         pscom_plugin_con_str(uc->con), CLOSE_WAIT_MS);
    while (uc->rmaq) {
        struct ux_rma *op = uc->rmaq;
        uc->rmaq = op->next;
        if (op->left) { /* rma_cb frees it; it no longer counts */
            op->uc = NULL;
            us->inflight--;
        } else {
            op->rk->ops--;
            free(op);
        }
    }
    while (uc->rkeys) {
        struct ux_rkey *rk = uc->rkeys;
        uc->rkeys = rk->next;
        if (rk->ops) { /* its orphans end when the endpoint is dropped */
            rk->next = us->rkeys_left;
            us->rkeys_left = rk;
            continue;
        }
        uxw_rkey_destroy(rk->k);
        free(rk);
    }
}

/* Before the worker goes: the keys of operations cancelled with their
 * endpoints. A key still in use is left to UCX rather than pulled from
 * under an operation (UCX 1.13 ends some operations of a dead peer's
 * endpoint only when the worker is destroyed; it then warns that the key
 * was not returned). */
static void rma_rkeys_left_free(struct ux_sock *us)
{
    struct ux_rkey *kept = NULL;
    while (us->rkeys_left) {
        struct ux_rkey *rk = us->rkeys_left;
        us->rkeys_left = rk->next;
        if (rk->ops) { /* their callbacks still reach rk */
            pscom_plugin_log(4, "ucx: %u one-sided operation(s) to a dead "
                             "peer still under way; their key is left to "
                             "UCX", rk->ops);
            rk->next = kept;
            kept = rk;
            continue;
        }
        uxw_rkey_destroy(rk->k);
        free(rk);
    }
    us->rkeys_left = kept;
}

/* After the worker is gone no callback reaches the keys left to UCX: free
 * what is ours of them. */
static void rma_rkeys_left_drop(struct ux_sock *us)
{
    while (us->rkeys_left) {
        struct ux_rkey *rk = us->rkeys_left;
        us->rkeys_left = rk->next;
        free(rk);
    }
}

/* ---------------------------------------------------------------------- */
/* Plugin                                                                 */
/* ---------------------------------------------------------------------- */

static int ux_init(void)
{
    pscom_plugin_config_register(ux_rows, sizeof(ux_rows) / sizeof(ux_rows[0]));
    char why[256] = "";
    uxw_config_t cfg = ucx_settings();
    int st = uxw_context_create(&cfg, &spare_ctx, why, sizeof(why));
    if (st) {
        char reason[320];
        const char *tls = getenv("UCX_TLS");
        snprintf(reason, sizeof(reason), "UCX %s cannot start: %s%s%s%s",
                 uxw_version(), why, tls ? " (UCX_TLS=" : "", tls ? tls : "",
                 tls ? ")" : "");
        pscom_plugin_log(4, "ucx: %s; check the UCX_* settings (ucx_info -d "
                         "lists the transports)", reason);
        pscom_plugin_set_reason(reason);
        spare_ctx = NULL;
        return -ENODEV;
    }
    pscom_plugin_log(5, "ucx: UCX %s ready", uxw_version());
    return 0;
}

static void ux_destroy(void)
{
    rma_regions_free();
    uxw_context_destroy(spare_ctx);
    spare_ctx = NULL;
    pools_free();
}

static const pscom_plugin_ops_t ux_ops = {
    .init = ux_init,
    .destroy = ux_destroy,
    .hs_start = ux_hs_start,
    .hs_connect = ux_hs_connect,
    .hs_abort = ux_hs_abort,
    .open = ux_open,
    .close = ux_close,
    .tx_kick = ux_tx_kick,
    .tx_now = ux_tx_now,
    .progress = ux_progress,
    .rndv_describe = ux_rndv_describe,
    .rndv_pull_start = ux_rndv_pull_start,
    .rma_register = ux_rma_register,
    .rma_deregister = ux_rma_deregister,
    .rma_rkey = ux_rma_rkey,
    .rma_rkey_release = ux_rma_rkey_release,
    .rma_put = ux_rma_put,
    .rma_get = ux_rma_get,
};

PSCOM_PLUGIN_EXPORT const pscom_plugin_t pscom_plugin_ucx = {
    .api_version = PSCOM_PLUGIN_API_VERSION,
    .name = "ucx",
    .alias = NULL, /* the core registers PSP_UCP */
    .con_type = PSCOM_CON_TYPE_UCP,
    .priority = 30,
    .con_priv_size = sizeof(struct ux_con),
    /* Over shared memory UCX's progress polls FIFOs the peer writes. */
    .flags = PSCOM_PLUGIN_SPIN_RELAX,
    .rendezvous = &cfg_rendezvous,
    /* The pre-connection socket, and UCX's socket to the peer over tcp. */
    .fds_per_con = 2,
    .ops = &ux_ops,
};
