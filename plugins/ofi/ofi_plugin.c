/*
 * The ofi plugin: pscom connections over libfabric (loadable module
 * libpscom4ofi.so).
 *
 * One RDM endpoint per process, with one completion queue and one address
 * vector, carries every ofi connection of every socket. It is opened by the
 * first handshake and closed at library teardown or exit. A connection is a
 * pair of connection ids (conids), one per side, exchanged in the handshake
 * blobs (ofi_proto.h) together with the endpoint names: messages to a side
 * carry its conid in the tag, so receives posted for one connection never
 * match another's, also between the same two processes.
 *
 * Sending: each frame the core queues (head = header + extended header,
 * then the body) becomes one tagged message, or, when it is larger than
 * the receiver's receive buffers, a first message (the head) and the body
 * in chunks of at most the providers' largest message. Up to PSP_OFI_SENDQ
 * frames are in flight per connection; a FIFO of them reports finished
 * frames to the core in queue order (pscom_plugin_tx_done), and only once
 * libfabric is done with their buffers. Frames that fit the provider's
 * inject size are copied and finished at once, and so, outside pull mode,
 * are those up to PSP_OFI_COPY (sent from a copy of our own; at most
 * PSP_OFI_SENDQ copies in flight per connection). Copies outlive their
 * connection: a close with copies in flight holds the plugin in the core's
 * progress until they completed, and the plugin's destroy (at exit) waits
 * for them within PSP_OFI_LINGER.
 *
 * Receiving: each connection keeps PSP_OFI_RECVQ receives posted, one per
 * frame sequence number (the tag carries it), each into a buffer of
 * PSP_OFI_BOUNCE bytes; the frame order is therefore the sequence order,
 * however the completions arrive. The rest of a large frame is received
 * into a temporary buffer and pushed, except for rendezvous data (the core
 * has matched a posted receive for it), which goes straight into the user's
 * buffer: zero copy where the provider has a rendezvous protocol.
 *
 * Pull mode (PSP_OFI_PULL; by default with the shm provider, whose sends
 * wait for their receivers in one queue): a frame larger than the inject
 * size goes as its head and a descriptor of the rest; the receiver copies
 * the rest from the sender's memory (process_vm_readv) and acknowledges
 * by writing to a word of the sender's (process_vm_writev). No send then
 * waits for a receiver inside the provider, so a killed peer cannot hold
 * back the completions of sends to other peers. A frame whose rest is at
 * most PSP_OFI_SPLIT is split instead: its head with a descriptor marked
 * split, then the rest in injected chunks, received as the rest of a
 * sent frame (cross-memory calls cost microseconds on some hosts).
 *
 * Peer death: a failed send reports an error completion; a peer that only
 * sends to us is watched through the pre-connection's TCP socket, which the
 * plugin keeps. A peer closes it with a goodbye record that says how many
 * frames it sent; a socket that closes without one fails the connection
 * after PSP_OFI_EOF_GRACE ms (time for messages still in the fabric).
 *
 * Re-entrancy: upcalls into the core may run application callbacks that
 * send, receive or wait, and so call back into this plugin. State is
 * updated before every upcall; after an upcall that returned -1 (or after
 * pscom_plugin_con_error) the connection's state is not touched again,
 * because at progress depth 0 the core may already have closed it.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
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

#include "../copy_small.h"
#include "ofi_proto.h"
#include "ofi_sweep.h"
#include "ofi_watch.h"
#include "ofi_wrap.h"
#include "pscom_plugin.h"

#define LOG(level, ...) pscom_plugin_log((level), "ofi: " __VA_ARGS__)
enum { L_FATAL = 0, L_ERR = 1, L_WARN = 2, L_INFO = 3, L_DEBUG = 4,
       L_VERBOSE = 5 };

#define INJECT_MAX 4096 /* largest frame copied to the stack for fi_tinject */
#define COPY_SMALL_MAX 256 /* frames up to this size copied without memcpy */
#define CQ_BATCH 16
#define BYE_LEN 16
#define EXIT_WAIT_MAX_MS 10000 /* longest wait for copies at exit */

/* ---------------------------------------------------------------------- */
/* Settings                                                               */
/* ---------------------------------------------------------------------- */

static char *cfg_provider, *cfg_domain;
static size_t cfg_rendezvous, cfg_bounce, cfg_max_msg, cfg_split, cfg_copy;
static unsigned cfg_recvq, cfg_sendq, cfg_eof_grace, cfg_linger, cfg_stall;
static int cfg_pull, cfg_sweep;

static const pscom_config_row_t ofi_rows[] = {
    {"PSP_OFI_PROVIDER", PSCOM_CONFIG_STR, NULL,
     "libfabric provider, e.g. \"tcp;ofi_rxm\" or \"shm\"; unset: the first "
     "that offers RDM endpoints with tagged messages", "ofi", NULL,
     &cfg_provider},
    {"PSP_OFI_DOMAIN", PSCOM_CONFIG_STR, NULL,
     "libfabric domain (for tcp: the interface, e.g. eth0); unset: the "
     "provider's first", "ofi", NULL, &cfg_domain},
    {"PSP_OFI_RENDEZVOUS", PSCOM_CONFIG_SIZE, "128k",
     "rendezvous threshold on ofi connections: larger bodies wait for the "
     "receive and go straight into its buffer", "ofi", "PSP_RENDEZVOUS",
     &cfg_rendezvous},
    {"PSP_OFI_BOUNCE", PSCOM_CONFIG_SIZE, "16k",
     "size of each posted receive buffer; larger frames are sent as a head "
     "and a body", "ofi", NULL, &cfg_bounce},
    {"PSP_OFI_RECVQ", PSCOM_CONFIG_UINT, "8",
     "receive buffers posted per ofi connection; memory per connection is "
     "PSP_OFI_RECVQ * PSP_OFI_BOUNCE", "ofi", NULL, &cfg_recvq},
    {"PSP_OFI_SENDQ", PSCOM_CONFIG_UINT, "64",
     "frames in flight per ofi connection", "ofi", NULL, &cfg_sendq},
    {"PSP_OFI_MAX_MSG", PSCOM_CONFIG_SIZE, "inf",
     "largest libfabric message; longer bodies go in chunks (at most the "
     "provider's max_msg_size)", "ofi", NULL, &cfg_max_msg},
    {"PSP_OFI_EOF_GRACE", PSCOM_CONFIG_UINT, "200",
     "ms to wait for messages still in the fabric after a peer's "
     "pre-connection socket closed without a goodbye, before the connection "
     "fails", "ofi", NULL, &cfg_eof_grace},
    {"PSP_OFI_LINGER", PSCOM_CONFIG_UINT, "2000",
     "ms during which messages to a closed ofi connection are drained; also "
     "the longest wait at exit for copied sends (PSP_OFI_COPY) still in "
     "flight", "ofi", NULL, &cfg_linger},
    {"PSP_OFI_PULL", PSCOM_CONFIG_INT, "-1",
     "1: receivers on this host copy frames larger than the inject size "
     "from the sender's memory (no send waits on a dead peer); 0: they are "
     "sent; -1: 1 with the shm provider", "ofi", NULL, &cfg_pull},
    {"PSP_OFI_SPLIT", PSCOM_CONFIG_SIZE, "8k",
     "pull mode: a frame whose rest after its head is at most this size is "
     "sent as injected messages of the inject size instead of being copied "
     "by the receiver (providers with an inject size of 1k or more); 0: "
     "never", "ofi", NULL, &cfg_split},
    {"PSP_OFI_COPY", PSCOM_CONFIG_SIZE, "16k",
     "frames too large to inject and at most this size (and the peer's "
     "PSP_OFI_BOUNCE) are copied, sent as one message and finished at once, "
     "as injected frames are, instead of when libfabric completes the send "
     "(not in pull mode, see PSP_OFI_SPLIT; at most PSP_OFI_SENDQ copies "
     "in flight per connection); 0: never", "ofi", NULL, &cfg_copy},
    {"PSP_OFI_SWEEP", PSCOM_CONFIG_BOOL, "1",
     "shm provider: when this process opens its endpoint, remove the "
     "regions (16 MiB files in /dev/shm) that killed processes of this user "
     "left behind (process gone, file not locked, older than 5 s); 0: "
     "leave them", "ofi", NULL, &cfg_sweep},
    {"PSP_OFI_STALL_TIMEOUT", PSCOM_CONFIG_UINT, "30",
     "seconds after which a libfabric call that has not returned (a spin "
     "lock in shared memory that a killed process held) ends the process "
     "with an error naming the call and the peers that are gone; 0 or inf: "
     "wait for ever", "ofi", NULL, &cfg_stall},
};

static const pscom_config_range_t ofi_ranges[] = {
    {"PSP_OFI_BOUNCE", OFI_BOUNCE_MIN, OFI_BOUNCE_MAX},
    {"PSP_OFI_RECVQ", 1, 1024},
    {"PSP_OFI_SENDQ", 1, 4096},
    {"PSP_OFI_PULL", -1, 1},
};

/* ---------------------------------------------------------------------- */
/* Lists                                                                  */
/* ---------------------------------------------------------------------- */

struct dl {
    struct dl *next, *prev;
};

static void dl_init(struct dl *h)
{
    h->next = h->prev = h;
}

static bool dl_empty(const struct dl *h)
{
    return h->next == h;
}

static void dl_add(struct dl *h, struct dl *n)
{
    n->next = h->next;
    n->prev = h;
    h->next->prev = n;
    h->next = n;
}

static void dl_add_tail(struct dl *h, struct dl *n)
{
    dl_add(h->prev, n);
}

static void dl_del(struct dl *n)
{
    n->prev->next = n->next;
    n->next->prev = n->prev;
    n->next = n->prev = n;
}

#define dl_entry(p, type, member) \
    ((type *)((char *)(p) - offsetof(type, member)))

/* ---------------------------------------------------------------------- */
/* State                                                                  */
/* ---------------------------------------------------------------------- */

enum op_kind {
    OP_SLOT, /* a posted receive of the ring: first messages of frames */
    OP_BODY, /* a chunk of the rest of a frame */
    OP_TX,   /* a send */
    OP_COPY, /* a send of a copy of a frame, reported done when posted */
    OP_SINK, /* drains messages to a closed connection */
};

enum slot_state {
    SLOT_IDLE,   /* owed a receive (on ofi.owed): delivered, or the last
                  * try found the queue full */
    SLOT_POSTED, /* the provider holds it */
    SLOT_DONE,   /* received, not yet delivered */
    SLOT_BUSY,   /* being delivered */
};

struct ofi_con;

/* A closed connection whose copies (OP_COPY) are still in flight: its
 * goodbye, which tells the peer how many frames to wait for, and the
 * close of its pre-connection socket wait for them (the peer gives up
 * waiting after 5 * PSP_OFI_EOF_GRACE), or for PSP_OFI_LINGER. */
struct parting {
    struct dl link;    /* ofi.partings */
    int fd;            /* the pre-connection socket */
    uint64_t frames;   /* frames sent, for the goodbye */
    unsigned copies;   /* its copies still in flight */
    uint32_t conid;
    uint64_t deadline; /* ms */
};

/* One libfabric operation. Owned by its connection (oc) while that is
 * open; when the connection closes, operations the provider still holds
 * become orphans (oc NULL, on ofi.orphans) until their completion. */
/* A frame the provider still reads from the core's buffers after its
 * connection closed: the core ends its send (pscom_plugin_tx_returned)
 * when the last of its operations is done. */
struct loan {
    void *token; /* of pscom_plugin_tx_lend */
    unsigned ops;
};

struct op {
    ofw_ctx_t ctx; /* first: the provider's scratch space */
    uint8_t kind;  /* enum op_kind */
    bool posted;   /* the provider holds it */
    bool direct;   /* OP_BODY: received into the core's buffer */
    uint8_t state; /* OP_SLOT: enum slot_state */
    struct ofi_con *oc;
    struct parting *parting; /* an orphaned OP_COPY: its connection's */
    struct loan *loan; /* an orphaned OP_TX reading the core's buffers */
    struct dl link; /* oc->ops (not slots), or ofi.orphans, ofi.sinks,
                     * ofi.owed (an idle slot) */
    uint32_t seq;   /* OP_SLOT: the frame it is posted (or owed) for */
    size_t len;     /* OP_SLOT: bytes received; OP_BODY: bytes posted */
    uint64_t frame; /* OP_TX: frame number */
    uint64_t deadline; /* OP_SINK: ms */
    void *dst;      /* OP_BODY: where it receives */
    void *tmp;      /* owned buffer: OP_BODY copy path, OP_TX copies */
    struct iovec iov[2]; /* OP_TX: valid until completion */
    size_t cap;     /* bytes at buf */
    uint8_t buf[];  /* OP_SLOT, OP_SINK: the receive buffer */
};

/* A frame in flight (send FIFO). */
struct txe {
    const void *head; /* where its head is in the core's queue */
    size_t hl;        /* head bytes */
    uint64_t bytes;   /* head + body */
    uint32_t pending; /* posted messages (or an offer) not yet completed */
    bool posting;     /* not every message of it is posted yet */
    bool gone;        /* no longer queued (the send was canceled) */
    bool offer;       /* pull mode: the peer copies its rest */
    void *tmp;        /* offer: the rest of a long head and the body */
    struct loan *loan; /* at close: its operations outlive the connection */
};

struct ofi_con {
    pscom_plugin_con_t *con;
    struct dl link; /* ofi.cons while open */
    struct dl ops;  /* OP_BODY and OP_TX operations of this connection */
    bool counted;   /* holds a reference on the endpoint */
    bool open;
    bool dead;      /* failed or closing: no more upcalls */
    bool peer_gone; /* failed because the peer died (no goodbye) */
    bool attn;      /* on the attention scan (counted in ofi.attn) */
    bool tx_blocked; /* a send found the queue full */
    bool tx_report; /* frames completed: report them from progress */
    bool pull;      /* pull mode (both sides asked for it, and the core
                     * knows the peer's process id) */
    int fd;         /* the pre-connection socket, or -1 */

    uint32_t conid;      /* peers tag messages to us with it */
    uint32_t peer_conid; /* we tag messages to the peer with it */
    uint64_t dest;       /* the peer's address (fi_addr_t) */
    size_t peer_bounce;  /* largest first message the peer takes */
    size_t chunk;        /* largest message in either direction */
    unsigned copies;     /* OP_COPY sends in flight (at most nfifo) */

    /* Receiving. */
    struct op **ring;
    unsigned nring;
    unsigned rx_idx;     /* ring slot of the next frame */
    uint32_t rx_seq;     /* the next frame to deliver */
    uint64_t rx_frames;  /* frames delivered */
    uint64_t eof_hold_at; /* ms since the peer's EOF message waits, or 0 */
    uint64_t tx_drained_round; /* ofi.calls when the last send completed */
    struct {
        bool active;     /* the rest of frame `seq` is being received */
        bool need_post;  /* the next chunk is not posted yet */
        bool direct_ok;  /* rendezvous data: the core's buffer is safe */
        uint32_t seq;
        uint64_t k;      /* chunks received */
        uint64_t left;   /* bytes still to receive */
        size_t chunk;    /* bytes per chunk of this frame's rest */
    } body;

    /* Pull mode, sending: fifo[f % nfifo] is acknowledged when
     * acks[f % nfifo] is f + 1 (written by the peer). */
    uint64_t *acks;
    uint64_t ack_next;   /* the first frame not yet looked at */
    unsigned offers;     /* frames the peer is to copy */
    struct dl olink;     /* ofi.offering while offers */

    /* Sending. */
    struct txe *fifo;
    unsigned nfifo;
    uint64_t tx_head, tx_tail; /* frames reported .. frames committed */
    struct tx_partial {
        bool active;     /* frame tx_tail-1 is partly posted */
        uint64_t frame;
        const uint8_t *head, *body;
        size_t hl, bl, first;
        uint64_t off, total, k;
    } txp;
    /* Pull mode: the rest of frame `frame`, injected in chunks (tx_split);
     * `off` bytes of it are sent (all when off == len). */
    struct split_tx {
        uint64_t frame;
        const uint8_t *rest;
        size_t len, off, chunk; /* chunk k starts at k * chunk */
    } tsp;

    /* Watching the peer. */
    uint64_t gone_at;    /* ms when the peer's socket closed, or 0 */
    uint8_t bye[BYE_LEN];
    size_t bye_have;
    uint64_t bye_frames; /* frames the peer says it sent */
};

/* A peer endpoint in the address vector (entries are never removed:
 * operations may still reference them). */
struct peer {
    uint64_t fi_addr;
    size_t len;
    uint8_t addr[OFW_ADDR_MAX];
};

static struct {
    ofw_info_t info;
    size_t inject_max;   /* frames up to this size go with fi_tinject */
    size_t max_msg;      /* largest message we take */
    ofw_ep_t *ep;        /* NULL until the first handshake */
    pid_t ep_pid;        /* the process that opened it */
    int region_fd;       /* locked while it lives (ofi_sweep.h); -1 */
    int ep_err;          /* opening the endpoint failed for good */
    uint8_t addr[OFW_ADDR_MAX];
    size_t addr_len;
    uint32_t next_conid;
    unsigned refs;       /* connections in handshake or open */
    struct dl cons;      /* open connections */
    struct dl orphans;   /* operations of closed connections */
    struct dl sinks;     /* OP_SINK operations, oldest last */
    struct dl offering;  /* connections with frames for the peer to copy */
    struct dl owed;      /* delivered ring slots to post again (op.link) */
    bool pull;           /* offer pull mode to peers */
    unsigned attn;       /* connections with attn set */
    unsigned rounds;
    unsigned in_progress; /* nesting of ofi_progress */
    unsigned copies;     /* OP_COPY sends in flight, also of closed
                          * connections */
    bool held;           /* pscom_plugin_hold_progress for orphaned copies */
    unsigned loans;      /* frames lent to the core and not returned; a
                          * hold on progress while there are any */
    struct dl partings;  /* closed connections waiting for their copies */
    uint64_t calls;       /* outermost ofi_progress calls */
    /* Completions read from the queue and not yet handled, shared by nested
     * ofi_progress calls: an upcall's callback may wait (close a
     * connection, which waits for its sends) for completions that its outer
     * call has read already. */
    ofw_comp_t comp[CQ_BATCH];
    unsigned comp_next, comp_n;
    struct peer **peers; /* open addressing, cap a power of two */
    unsigned npeers, peers_cap;
} ofi;

/* ---------------------------------------------------------------------- */
/* Helpers                                                                */
/* ---------------------------------------------------------------------- */

/* Random bits from the kernel, or, where it has none to give yet, from
 * the clock and the process id. */
static uint32_t random_u32(void)
{
    uint32_t r;
    if (getrandom(&r, sizeof(r), GRND_NONBLOCK) == sizeof(r)) return r;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint32_t)ts.tv_nsec ^ (uint32_t)ts.tv_sec << 20 ^
           (uint32_t)getpid() << 12;
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static size_t min_size(uint64_t a, uint64_t b)
{
    return (size_t)(a < b ? a : b);
}

static struct op *op_new(enum op_kind kind, size_t cap)
{
    struct op *op = calloc(1, sizeof(*op) + cap);
    if (!op) return NULL;
    op->kind = (uint8_t)kind;
    op->cap = cap;
    op->link.next = op->link.prev = &op->link;
    return op;
}

static void op_free(struct op *op)
{
    dl_del(&op->link);
    free(op->tmp);
    if (op->loan && !--op->loan->ops) {
        pscom_plugin_tx_returned(op->loan->token);
        free(op->loan);
        if (!--ofi.loans) pscom_plugin_hold_progress("ofi", 0);
    }
    free(op);
}

static void set_attn(struct ofi_con *oc)
{
    if (oc->attn) return;
    oc->attn = true;
    ofi.attn++;
}

static void clear_attn(struct ofi_con *oc)
{
    if (!oc->attn) return;
    oc->attn = false;
    ofi.attn--;
}

static pscom_err_t err_of(int e)
{
    switch (e) {
    case ECONNRESET:
    case ECONNREFUSED:
    case ECONNABORTED:
    case ENOTCONN:
    case EPIPE:
    case EHOSTUNREACH:
    case ENETUNREACH:
    case ESHUTDOWN:
        return PSCOM_ERR_EOF;
    default:
        return PSCOM_ERR_IOERROR;
    }
}

static bool bye_ok(const struct ofi_con *oc)
{
    return oc->bye_have == BYE_LEN && !memcmp(oc->bye, "OFIB", 4);
}

/* The connection failed here: tell the core (once). Do not touch oc
 * afterwards: the application may close the connection from con_error. */
static void fail_con(struct ofi_con *oc, pscom_op_t op, pscom_err_t err,
                     const char *what, int sys_errno)
{
    if (oc->dead) return;
    oc->dead = true;
    oc->peer_gone = err == PSCOM_ERR_EOF && !bye_ok(oc);
    pscom_plugin_con_error(oc->con, op, err, what, sys_errno);
}

/* A message from the peer that breaks the protocol. */
static void fail_proto(struct ofi_con *oc, const char *why)
{
    if (oc->dead) return;
    LOG(L_ERR, "%s: %s (provider %s); closing the connection",
        pscom_plugin_con_str(oc->con), why, ofi.info.prov);
    fail_con(oc, PSCOM_OP_READ, PSCOM_ERR_IOERROR, "receive (protocol error)",
             EPROTO);
}

/* ---------------------------------------------------------------------- */
/* Endpoint and peers                                                     */
/* ---------------------------------------------------------------------- */

/* Close the endpoint (the core's teardown, ops.destroy, at exit too): the
 * shm provider then removes its region from /dev/shm. Where the core's
 * exit handler does not tear down (another thread holds the library lock,
 * or exit() was called from a callback of the library), nothing closes
 * it: that thread may be inside the provider, or about to be, and closing
 * the endpoint under it crashed it (SIGSEGV in fi_cq_read, forced with a
 * debugger). The process ends anyway; its region is left to the next
 * process's sweep (ofi_sweep.h). */
static void ep_close(void)
{
    ofw_ep_close(ofi.ep); /* the provider removes its region */
    ofi.ep = NULL;
    owd_stop();
    if (ofi.region_fd >= 0) close(ofi.region_fd);
    ofi.region_fd = -1;
}

static void region_swept(const char *name, void *arg)
{
    (void)arg;
    LOG(L_DEBUG, "removed %s/%s, the region of a process that is gone",
        OFS_DIR, name);
}

/* A forked child must not keep the lock of its parent's region: the lock
 * belongs to the open file, shared with the child, and would keep the
 * region of a killed parent from being swept while the child lives. */
static void region_drop_in_child(void)
{
    if (ofi.region_fd >= 0) close(ofi.region_fd);
    ofi.region_fd = -1;
}

/* The shm provider's region: lock it for the life of the process, so that
 * other processes' sweeps know it is alive, then remove what dead
 * processes left (ofi_sweep.h). */
static void region_start(void)
{
    static bool atfork;
    const char *region = ofw_ep_region(ofi.ep);
    if (!region) return;
    ofi.region_fd = ofs_hold(OFS_DIR, region);
    if (ofi.region_fd < 0)
        LOG(errno == ENOENT ? L_INFO : L_WARN, "cannot lock the region "
            "%s/%s…: %s; a sweep by a process in another pid namespace "
            "could remove it (PSP_OFI_SWEEP=0 there avoids it)", OFS_DIR,
            region, strerror(errno));
    else if (!atfork)
        atfork = pthread_atfork(NULL, NULL, region_drop_in_child) == 0;
    if (!cfg_sweep) return;
    int n = ofs_sweep(OFS_DIR, getuid(), OFS_MIN_AGE, region_swept, NULL);
    if (n < 0)
        LOG(L_INFO, "cannot look for regions of dead processes in %s: %s",
            OFS_DIR, strerror(-n));
    else if (n)
        LOG(L_INFO, "removed %d region%s of dead processes from %s", n,
            n == 1 ? "" : "s", OFS_DIR);
}

/* Providers start threads (connection management, progress). They inherit
 * the signal mask of the thread that creates them: with every signal
 * blocked they never run the application's handlers (a SIGCHLD handler
 * that waits for a child would race with the main thread). */
static void signals_block(sigset_t *old)
{
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, old);
}

static void signals_restore(const sigset_t *old)
{
    pthread_sigmask(SIG_SETMASK, old, NULL);
}

/* The watchdog (ofi_watch.h) found a provider call that does not return.
 * The thread in it holds the library lock and cannot be freed: end the
 * process with _exit, since exit handlers would wait for that lock. */
static void on_stall(const owd_report_t *r, void *arg)
{
    (void)arg;
    char cpu[96] = "";
    if (r->cpu >= 0)
        snprintf(cpu, sizeof(cpu), " (the process used %.1f s of CPU "
                 "meanwhile)", r->cpu);
    char peers[96];
    if (!r->peers)
        snprintf(peers, sizeof(peers), "no connected peer runs on this node");
    else
        snprintf(peers, sizeof(peers), "of the %u connected peer%s on this "
                 "node, %u ha%s ended%s", r->peers, r->peers == 1 ? "" : "s",
                 r->gone, r->gone == 1 ? "s" : "ve", r->gone ? ": " : "");
    LOG(L_FATAL, "%s of provider %s has not returned for %.1f s%s; %s%s. A "
        "process killed inside libfabric can leave a lock in shared memory "
        "taken for good (doc/plugins/ofi.md); ending this process "
        "(PSP_OFI_STALL_TIMEOUT=%u s, 0 waits for ever)", r->call,
        ofi.info.prov, r->seconds, cpu, peers, r->gone_list, cfg_stall);
    _exit(EXIT_FAILURE);
}

static void watch_start(void)
{
    /* 0, and also inf (or any count of milliseconds beyond 32 bits, 49
     * days): wait for ever. */
    if (!cfg_stall || cfg_stall > UINT32_MAX / 1000) return;
    sigset_t old;
    signals_block(&old);
    int rc = owd_start(cfg_stall * 1000, on_stall, NULL);
    signals_restore(&old);
    if (rc)
        LOG(L_WARN, "cannot start the thread that ends a process stuck in a "
            "libfabric call (PSP_OFI_STALL_TIMEOUT): %s; such a process "
            "hangs", strerror(-rc));
}

/* Register oc's peer with the watchdog, named "name(rank)@host:port" (the
 * far side of the connection's name, without the transport, which the core
 * sets after this plugin opened the connection). */
static void watch_peer(struct ofi_con *oc)
{
    pid_t pid = pscom_plugin_con_peer_pid(oc->con);
    if (pid <= 0) return;
    char name[160];
    const char *s = pscom_plugin_con_str(oc->con);
    const char *far = strstr(s, " <-> ");
    snprintf(name, sizeof(name), "%s", far ? far + 5 : s);
    char *tr = strrchr(name, '[');
    if (tr && tr > name && tr[-1] == ' ') tr[-1] = 0;
    owd_peer_add(oc, pid, name);
}

static int ep_get(void)
{
    if (ofi.ep) return 0;
    if (ofi.ep_err) return ofi.ep_err;
    char why[256];
    sigset_t old;
    signals_block(&old);
    int rc = ofw_ep_open(&ofi.ep, ofi.addr, &ofi.addr_len, why, sizeof(why));
    signals_restore(&old);
    if (rc) {
        ofi.ep_err = rc;
        ofi.ep = NULL;
        LOG(L_WARN, "cannot open an endpoint of provider %s (domain %s): %s; "
            "connections use the next transport", ofi.info.prov,
            ofi.info.domain, why);
        return rc;
    }
    ofi.ep_pid = getpid();
    region_start();
    watch_start();
    char s[128];
    LOG(L_DEBUG, "endpoint %s open (provider %s, domain %s)",
        ofw_addr_str(ofi.ep, ofi.addr, ofi.addr_len, s, sizeof(s)),
        ofi.info.prov, ofi.info.domain);
    return 0;
}

static uint64_t addr_hash(const uint8_t *a, size_t len)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++) h = (h ^ a[i]) * 1099511628211ull;
    return h;
}

static int peers_grow(void)
{
    unsigned cap = ofi.peers_cap ? ofi.peers_cap * 2 : 64;
    struct peer **t = calloc(cap, sizeof(*t));
    if (!t) return -ENOMEM;
    for (unsigned i = 0; i < ofi.peers_cap; i++) {
        struct peer *p = ofi.peers[i];
        if (!p) continue;
        unsigned j = (unsigned)addr_hash(p->addr, p->len) & (cap - 1);
        while (t[j]) j = (j + 1) & (cap - 1);
        t[j] = p;
    }
    free(ofi.peers);
    ofi.peers = t;
    ofi.peers_cap = cap;
    return 0;
}

/* The address vector entry of a peer's endpoint name, inserted once. */
static int peer_addr(const uint8_t *addr, size_t len, uint64_t *fi_addr)
{
    if ((ofi.npeers + 1) * 2 > ofi.peers_cap && peers_grow()) return -ENOMEM;
    unsigned mask = ofi.peers_cap - 1;
    unsigned j = (unsigned)addr_hash(addr, len) & mask;
    for (; ofi.peers[j]; j = (j + 1) & mask) {
        struct peer *p = ofi.peers[j];
        if (p->len == len && !memcmp(p->addr, addr, len)) {
            *fi_addr = p->fi_addr;
            return 0;
        }
    }
    struct peer *p = calloc(1, sizeof(*p));
    if (!p) return -ENOMEM;
    int rc = ofw_av_insert(ofi.ep, addr, len, &p->fi_addr);
    if (rc) {
        free(p);
        return rc;
    }
    p->len = len;
    memcpy(p->addr, addr, len);
    ofi.peers[j] = p;
    ofi.npeers++;
    *fi_addr = p->fi_addr;
    return 0;
}

static void ref_put(struct ofi_con *oc)
{
    if (!oc->counted) return;
    oc->counted = false;
    ofi.refs--;
}

/* ---------------------------------------------------------------------- */
/* Receiving                                                              */
/* ---------------------------------------------------------------------- */

static void deliver(struct ofi_con *oc);

/* Ring slot `slot` is owed a receive for frame `seq`, posted before the
 * next read of the completion queue (post_owed): a slot whose post found
 * the queue full, and a delivered one. The delivered one is not posted at
 * once: the progress call that delivered a message returns sooner, and the
 * application's answer to it goes out before the provider's receive call
 * (over shm 6-12% of the 8-byte latency). Its next frame is nring - 1
 * frames ahead, so the peer would have to send all of them first to find
 * it not posted; the provider then keeps the frame as unexpected until it
 * is. */
static void owe_slot(struct op *slot, uint32_t seq)
{
    slot->state = SLOT_IDLE;
    slot->seq = seq & OFI_SEQ_MASK;
    dl_add_tail(&ofi.owed, &slot->link);
}

/* Post ring slot `op` for frame `seq`: 0, or the provider's error. The
 * slot is SLOT_IDLE when that failed. Like every receive of an open
 * connection it is directed at the peer's endpoint: another endpoint that
 * knows or guesses our conid cannot put frames into the connection (over
 * shm it still can, see ofw_trecv). */
static ssize_t slot_post_raw(struct ofi_con *oc, struct op *op, uint32_t seq)
{
    dl_del(&op->link); /* no longer owed, if it was */
    op->seq = seq & OFI_SEQ_MASK;
    ssize_t rc = ofw_trecv(ofi.ep, op->buf, op->cap, oc->dest,
                           ofi_tag(oc->conid, op->seq, OFI_PART_FIRST), 0,
                           &op->ctx);
    op->state = rc ? SLOT_IDLE : SLOT_POSTED;
    op->posted = rc == 0;
    return rc;
}

/* Post ring slot `op` for frame `seq`. 0; -1 when the connection failed. */
static int slot_post(struct ofi_con *oc, struct op *op, uint32_t seq)
{
    ssize_t rc = slot_post_raw(oc, op, seq);
    if (rc == 0) return 0;
    /* Full queue; the shm provider says -ENOMEM when unexpected messages
     * hold its receive entries (posting and progress free them). */
    if (rc == -EAGAIN || rc == -ENOMEM) {
        owe_slot(op, seq);
        return 0;
    }
    LOG(L_DEBUG, "%s: posting a receive failed: %s (provider %s)",
        pscom_plugin_con_str(oc->con), ofw_strerror((int)rc), ofi.info.prov);
    fail_con(oc, PSCOM_OP_READ, PSCOM_ERR_IOERROR, "fi_trecv", (int)-rc);
    return -1;
}

/* Post the owed slots again, once each: one that finds the queue full
 * again is owed again, for the next read. Posting takes a slot off the
 * list, and so does freeing a closed connection's slots (op_free). */
static void post_owed(void)
{
    struct dl *last = ofi.owed.prev;
    while (!dl_empty(&ofi.owed)) {
        struct dl *p = ofi.owed.next;
        struct op *slot = dl_entry(p, struct op, link);
        dl_del(p);
        if (!slot->oc->dead) slot_post(slot->oc, slot, slot->seq);
        if (p == last) break;
    }
}

/* Post the next chunk of the rest of the frame being received. 0, or -1
 * when the connection failed. */
static int body_post(struct ofi_con *oc)
{
    size_t n = min_size(oc->body.left, oc->body.chunk);
    struct op *op = op_new(OP_BODY, 0);
    if (!op) goto nomem;
    void *dst = NULL;
    if (oc->body.direct_ok) {
        void *b = NULL;
        size_t avail = pscom_plugin_rx_direct(oc->con, &b);
        if (avail >= n && b) {
            dst = b;
            op->direct = true;
        }
    }
    if (!dst) {
        op->tmp = malloc(n ? n : 1);
        if (!op->tmp) goto nomem;
        dst = op->tmp;
    }
    op->oc = oc;
    op->dst = dst;
    op->len = n;
    ssize_t rc = ofw_trecv(ofi.ep, dst, n, oc->dest,
                           ofi_tag(oc->conid, oc->body.seq,
                                   ofi_chunk_part(oc->body.k)),
                           0, &op->ctx);
    if (rc == -EAGAIN || rc == -ENOMEM) {
        op_free(op);
        set_attn(oc);
        return 0;
    }
    if (rc) {
        op_free(op);
        LOG(L_DEBUG, "%s: posting a receive of %zu bytes failed: %s "
            "(provider %s)", pscom_plugin_con_str(oc->con), n,
            ofw_strerror((int)rc), ofi.info.prov);
        fail_con(oc, PSCOM_OP_READ, PSCOM_ERR_IOERROR, "fi_trecv", (int)-rc);
        return -1;
    }
    op->posted = true;
    dl_add(&oc->ops, &op->link);
    oc->body.need_post = false;
    return 0;

nomem:
    if (op) op_free(op);
    LOG(L_DEBUG, "%s: out of memory for a message body of %zu bytes",
        pscom_plugin_con_str(oc->con), n);
    fail_con(oc, PSCOM_OP_READ, PSCOM_ERR_STDERROR,
             "allocating a buffer for a message body", ENOMEM);
    return -1;
}

/* The peer's end-of-connection message makes the core fail what is still
 * queued on this connection, also sends whose data the peer has taken but
 * whose completion we have not read yet (a rendezvous send completes only
 * after the receiver's acknowledgement). So it waits until the sends in
 * flight have completed, for at most PSP_OFI_EOF_GRACE ms. */
static bool hold_eof(struct ofi_con *oc)
{
    if (oc->tx_head == oc->tx_tail) {
        /* Sends completed in this round: let the application see them
         * before the connection fails (one more round). */
        if (oc->tx_drained_round != ofi.calls) return false;
        set_attn(oc);
        return true;
    }
    uint64_t now = now_ms();
    if (!oc->eof_hold_at) oc->eof_hold_at = now;
    if (now >= oc->eof_hold_at + cfg_eof_grace) return false;
    set_attn(oc); /* looked at again from progress */
    return true;
}

/* Pull mode: the peer's process is gone or its memory cannot be read. */
static void fail_pull(struct ofi_con *oc, const char *what, int err)
{
    if (oc->dead) return;
    if (err == -EPERM || err == -ENOSYS)
        LOG(L_ERR, "%s: %s of the peer's memory is not allowed (%s); set "
            "PSP_OFI_PULL=0", pscom_plugin_con_str(oc->con), what,
            strerror(-err));
    else
        LOG(L_DEBUG, "%s: %s of the peer's memory failed: %s",
            pscom_plugin_con_str(oc->con), what, strerror(-err));
    fail_con(oc, PSCOM_OP_READ, err == -ESRCH ? PSCOM_ERR_EOF
                                              : PSCOM_ERR_IOERROR,
             what, -err);
}

/* Pull mode: copy the rest of the frame being received (described by d)
 * from the peer's memory into the core's buffer where it offers one (any
 * frame: the copy ends before the next upcall), else through a temporary
 * buffer; acknowledge it before the last upcall. 0, or -1 when the
 * connection failed or the core stopped it. */
static int body_pull(struct ofi_con *oc, const ofi_pull_desc_t *d,
                     uint64_t frame)
{
    uint64_t off = 0;
    void *tmp = NULL;
    while (off < d->len) {
        void *b = NULL;
        size_t avail = pscom_plugin_rx_direct(oc->con, &b);
        bool direct = avail && b;
        size_t n = min_size(d->len - off, direct ? avail : 1u << 20);
        if (!direct) {
            if (!tmp) tmp = malloc(min_size(d->len - off, 1u << 20));
            if (!tmp) {
                fail_con(oc, PSCOM_OP_READ, PSCOM_ERR_STDERROR,
                         "allocating a buffer for a message body", ENOMEM);
                return -1;
            }
            b = tmp;
        }
        bool last = off + n == d->len;
        uint64_t w = 0;
        /* With the last bytes, the acknowledgement word: did the peer
         * close and give the buffer back to its application meanwhile
         * (OFI_ACK_REVOKED)? Read after the copy: a word not yet revoked
         * means no byte copied was written again. */
        int err = last ? ofw_cma_read_word((pid_t)d->pid, b, d->addr + off, n,
                                           &w, d->ack)
                       : ofw_cma_read((pid_t)d->pid, b, d->addr + off, n);
        if (!err && last && w == OFI_ACK_REVOKED) {
            free(tmp);
            fail_con(oc, PSCOM_OP_READ, PSCOM_ERR_EOF,
                     "the peer closed while its message was copied; what "
                     "was copied is dropped", 0);
            return -1;
        }
        if (!err && last) {
            /* The peer may reuse its buffer: say so before the upcall. */
            uint64_t v = frame + 1;
            err = ofw_cma_write((pid_t)d->pid, &v, d->ack, sizeof(v));
            if (err) {
                free(tmp);
                fail_pull(oc, "process_vm_writev", err);
                return -1;
            }
        }
        if (err) {
            free(tmp);
            fail_pull(oc, "process_vm_readv", err);
            return -1;
        }
        off += n;
        if (off == d->len) oc->body.active = false;
        int rc = direct ? pscom_plugin_rx_direct_done(oc->con, n)
                        : pscom_plugin_rx_push(oc->con, b, n);
        if (rc) {
            free(tmp);
            oc->dead = true;
            return -1;
        }
    }
    free(tmp);
    return 0;
}

/* Does a pull descriptor name the peer? Only the connected process may be
 * read and written (its acknowledgement word), whatever a corrupt message
 * says. Fails the connection when it does not. */
static bool pull_pid_ok(struct ofi_con *oc, uint32_t pid)
{
    pid_t peer = pscom_plugin_con_peer_pid(oc->con);
    if ((pid_t)pid == peer) return true;
    char why[128];
    snprintf(why, sizeof(why), "pull descriptor naming process %u, not the "
             "peer (%d)", pid, (int)peer);
    fail_proto(oc, why);
    return false;
}

/* Hand the frames that arrived in sequence to the core. */
static void deliver(struct ofi_con *oc)
{
    while (!oc->dead) {
        if (oc->body.active) {
            if (oc->body.need_post) body_post(oc);
            return;
        }
        struct op *slot = oc->ring[oc->rx_idx];
        if (slot->state != SLOT_DONE) return;

        size_t len = slot->len, head;
        uint64_t total;
        uint8_t type;
        if (ofi_frame_parse(slot->buf, len, &head, &total, &type)) {
            fail_proto(oc, "message shorter than a frame header");
            return;
        }
        if (len > total) {
            fail_proto(oc, "message longer than the frame it starts");
            return;
        }
        /* Pull mode: a first message shorter than its frame ends with the
         * descriptor of the rest; a split one announces the rest as
         * injected chunks of `addr` bytes (tx_split). */
        ofi_pull_desc_t pd = {0};
        bool pull = oc->pull && len < total;
        size_t split = 0;
        if (pull) {
            if (len < OFI_PULL_DESC_LEN + 8) {
                fail_proto(oc, "message shorter than a pull descriptor");
                return;
            }
            len -= OFI_PULL_DESC_LEN;
            ofi_pull_desc_decode(slot->buf + len, &pd);
            bool is_split = pd.flags == OFI_DESC_SPLIT;
            bool valid = is_split ? !pd.pid && !pd.ack && pd.addr &&
                                        pd.addr <= OFI_SPLIT_CHUNK_MAX
                                  : pd.pid && !pd.flags;
            if (pd.len != total - len || !valid) {
                fail_proto(oc, "pull descriptor that does not match its "
                               "frame");
                return;
            }
            if (!is_split && !pull_pid_ok(oc, pd.pid)) return;
            if (is_split) {
                split = (size_t)pd.addr;
                pull = false;
            }
        }
        if (type == OFI_MSG_EOF && len == total && hold_eof(oc)) return;
        oc->eof_hold_at = 0;
        /* State first: the push may call back into this plugin. */
        slot->state = SLOT_BUSY;
        uint32_t seq = oc->rx_seq;
        oc->rx_seq = (seq + 1) & OFI_SEQ_MASK;
        if (++oc->rx_idx == oc->nring) oc->rx_idx = 0;
        oc->rx_frames++;
        if (len < total) {
            /* Until the rest is in, nested calls deliver nothing. */
            oc->body.active = true;
            oc->body.need_post = !pull;
            oc->body.chunk = split ? split : oc->chunk;
            oc->body.seq = seq;
            oc->body.k = 0;
            oc->body.left = total - len;
            oc->body.direct_ok = type == OFI_MSG_RNDV_DATA && len == head;
        }
        if (pscom_plugin_rx_push(oc->con, slot->buf, len)) {
            oc->dead = true;
            return;
        }
        owe_slot(slot, seq + oc->nring);
        if (pull && body_pull(oc, &pd, oc->rx_frames - 1)) return;
    }
}

static void body_done(struct ofi_con *oc, struct op *op, size_t len)
{
    bool direct = op->direct;
    void *dst = op->dst;
    if (len != op->len) {
        op_free(op);
        fail_proto(oc, "message body shorter than announced");
        return;
    }
    oc->body.left -= len;
    oc->body.k++;
    if (oc->body.left)
        oc->body.need_post = true;
    else
        oc->body.active = false;

    int rc;
    if (direct) {
        /* The core still waits for exactly these bytes, unless the
         * connection failed meanwhile. */
        void *b = NULL;
        size_t avail = pscom_plugin_rx_direct(oc->con, &b);
        if (b != dst || avail < len) {
            op_free(op);
            oc->dead = true;
            return;
        }
        op_free(op);
        rc = pscom_plugin_rx_direct_done(oc->con, len);
    } else {
        rc = pscom_plugin_rx_push(oc->con, op->tmp, len);
        op_free(op);
    }
    if (rc) {
        oc->dead = true;
        return;
    }
    deliver(oc);
}

/* ---------------------------------------------------------------------- */
/* Sending                                                                */
/* ---------------------------------------------------------------------- */

static void fail_send(struct ofi_con *oc, const char *what, int err)
{
    LOG(L_DEBUG, "%s: %s failed: %s (provider %s)",
        pscom_plugin_con_str(oc->con), what, ofw_strerror(-err), ofi.info.prov);
    fail_con(oc, PSCOM_OP_WRITE, err_of(err), what, err);
}

/* The result of a send call: 1 when sent, 0 when the queue is full (tried
 * again from progress), -1 when the connection failed. */
static int send_result(struct ofi_con *oc, ssize_t rc, const char *what)
{
    if (rc == 0) return 1;
    if (rc == -EAGAIN) {
        oc->tx_blocked = true;
        set_attn(oc);
        return 0;
    }
    fail_send(oc, what, (int)-rc);
    return -1;
}

/* Frame number oc->tx_tail is handed to libfabric: e is its FIFO entry. */
static void fifo_commit(struct ofi_con *oc, struct txe e)
{
    oc->fifo[oc->tx_tail % oc->nfifo] = e;
    oc->tx_tail++;
}

/* Send op's iovecs (cnt of them) as part `part` of its frame; the op is
 * the connection's until completed. send_result's answer; the op is freed
 * when it was not sent. */
static int op_send(struct ofi_con *oc, struct op *op, size_t cnt,
                   unsigned part)
{
    op->oc = oc;
    ssize_t rc = ofw_tsendv(ofi.ep, op->iov, cnt, oc->dest,
                            ofi_tag(oc->peer_conid, (uint32_t)op->frame,
                                    part),
                            &op->ctx);
    int sent = send_result(oc, rc, "fi_tsendv");
    if (sent <= 0) {
        op_free(op);
        return sent;
    }
    op->posted = true;
    dl_add(&oc->ops, &op->link);
    return 1;
}

/* Post the messages of the partly posted frame. 1 when all are posted, 0
 * when the send queue is full, -1 when the connection failed. */
static int txp_continue(struct ofi_con *oc)
{
    while (oc->txp.off < oc->txp.total) {
        uint64_t off = oc->txp.off;
        size_t len;
        unsigned part;
        if (off == 0) {
            len = oc->txp.first;
            part = OFI_PART_FIRST;
        } else {
            len = min_size(oc->txp.total - off, oc->chunk);
            part = ofi_chunk_part(oc->txp.k);
        }
        struct op *op = op_new(OP_TX, 0);
        if (!op) {
            fail_send(oc, "malloc", ENOMEM);
            return -1;
        }
        size_t cnt = 0, hl = oc->txp.hl;
        if (off < hl) {
            size_t n = min_size(hl - off, len);
            op->iov[cnt++] = (struct iovec){(void *)(oc->txp.head + off), n};
        }
        if (off + len > hl) {
            size_t boff = off > hl ? off - hl : 0;
            size_t n = len - (off < hl ? hl - off : 0);
            op->iov[cnt++] = (struct iovec){(void *)(oc->txp.body + boff), n};
        }
        if (cnt > ofi.info.iov_limit) {
            op->tmp = malloc(len);
            if (!op->tmp) {
                op_free(op);
                fail_send(oc, "malloc", ENOMEM);
                return -1;
            }
            memcpy(op->tmp, op->iov[0].iov_base, op->iov[0].iov_len);
            memcpy((char *)op->tmp + op->iov[0].iov_len, op->iov[1].iov_base,
                   op->iov[1].iov_len);
            op->iov[0] = (struct iovec){op->tmp, len};
            cnt = 1;
        }
        op->frame = oc->txp.frame;
        int sent = op_send(oc, op, cnt, part);
        if (sent <= 0) return sent;
        if (off == 0) {
            /* The frame is committed with its first message. */
            fifo_commit(oc, (struct txe){.head = oc->txp.head,
                                         .hl = oc->txp.hl,
                                         .bytes = oc->txp.total,
                                         .posting = true});
        } else {
            oc->txp.k++;
        }
        oc->fifo[op->frame % oc->nfifo].pending++;
        oc->txp.off += len;
    }
    oc->fifo[oc->txp.frame % oc->nfifo].posting = false;
    oc->txp.active = false;
    return 1;
}

/* A whole frame small enough for one injection (inject_frame). */
static bool injectable(const struct ofi_con *oc, uint64_t total)
{
    return total <= ofi.inject_max && total <= oc->peer_bounce;
}

/* Send frame number `frame` (head and body, injectable) as one message;
 * libfabric copies it. fi_tinject's result. */
static ssize_t inject_frame(struct ofi_con *oc, uint64_t frame,
                            const void *head, size_t hl, const void *body,
                            size_t bl)
{
    uint8_t buf[INJECT_MAX];
    if (hl + bl <= COPY_SMALL_MAX) {
        copy_small(buf, head, hl);
        copy_small(buf + hl, body, bl);
    } else {
        memcpy(buf, head, hl);
        if (bl) memcpy(buf + hl, body, bl);
    }
    return ofw_tinject(ofi.ep, buf, hl + bl, oc->dest,
                       ofi_tag(oc->peer_conid, (uint32_t)frame,
                               OFI_PART_FIRST));
}

/* Pull mode: the first message of frame `frame` that does not fit an
 * injection whole: `first` bytes of its head, then descriptor d of the
 * rest. send_result's answer. */
static int inject_with_desc(struct ofi_con *oc, uint64_t frame,
                            const uint8_t *head, size_t first,
                            const ofi_pull_desc_t *d)
{
    uint8_t buf[INJECT_MAX];
    memcpy(buf, head, first);
    ofi_pull_desc_encode(d, buf + first);
    ssize_t rc = ofw_tinject(ofi.ep, buf, first + OFI_PULL_DESC_LEN, oc->dest,
                             ofi_tag(oc->peer_conid, (uint32_t)frame,
                                     OFI_PART_FIRST));
    return send_result(oc, rc, "fi_tinject");
}

/* Pull mode: send a frame too large to inject as its head (or as much of
 * it as fits) and a descriptor of the rest, which the peer copies from our
 * memory; the frame is done when the peer acknowledges that (poll_acks).
 * 1 when sent, 0 when the queue is full, -1 when the connection failed. */
static int tx_offer(struct ofi_con *oc, uint64_t frame, const uint8_t *head,
                    size_t hl, const uint8_t *body, size_t bl, uint64_t total)
{
    size_t first = ofi_pull_first_len(hl, min_size(ofi.inject_max,
                                                   oc->peer_bounce));
    size_t rest = (size_t)(total - first);
    uint8_t *tmp = NULL;
    const uint8_t *src = body;
    if (first < hl) {
        /* A head longer than a first message: its end and the body are
         * copied as one piece, from a copy. */
        tmp = malloc(rest);
        if (!tmp) {
            fail_send(oc, "malloc", ENOMEM);
            return -1;
        }
        memcpy(tmp, head + first, hl - first);
        if (bl) memcpy(tmp + (hl - first), body, bl);
        src = tmp;
    }
    uint64_t *ack = &oc->acks[frame % oc->nfifo];
    *ack = 0;
    ofi_pull_desc_t d = {.addr = (uint64_t)(uintptr_t)src, .len = rest,
                         .ack = (uint64_t)(uintptr_t)ack,
                         .pid = (uint32_t)getpid()};
    int sent = inject_with_desc(oc, frame, head, first, &d);
    if (sent <= 0) {
        free(tmp);
        return sent;
    }
    fifo_commit(oc, (struct txe){.head = head, .hl = hl, .bytes = total,
                                 .pending = 1, .offer = true, .tmp = tmp});
    if (!oc->offers++) dl_add_tail(&ofi.offering, &oc->olink);
    return 1;
}

/* Pull mode: may frame `total` bytes long with a head of hl bytes go as
 * injected messages (tx_split) instead of being pulled? When its head fits
 * a first message with a descriptor and its rest is at most PSP_OFI_SPLIT:
 * the copies through the provider's queue cost less than the receiver's
 * cross-memory read and acknowledgement (doc/plugins/ofi.md). */
static bool splittable(const struct ofi_con *oc, size_t hl, uint64_t total)
{
    size_t max = min_size(ofi.inject_max, oc->peer_bounce);
    return ofi.inject_max >= OFI_SPLIT_INJECT_MIN &&
           ofi_pull_first_len(hl, max) == hl && total - hl <= cfg_split;
}

/* Inject the chunks of the split frame's rest that are not sent yet. 1
 * when all are, 0 when the queue is full, -1 when the connection failed. */
static int tsp_continue(struct ofi_con *oc)
{
    while (oc->tsp.off < oc->tsp.len) {
        size_t n = min_size(oc->tsp.len - oc->tsp.off, oc->tsp.chunk);
        ssize_t rc = ofw_tinject(ofi.ep, oc->tsp.rest + oc->tsp.off, n,
                                 oc->dest,
                                 ofi_tag(oc->peer_conid,
                                         (uint32_t)oc->tsp.frame,
                                         ofi_chunk_part(oc->tsp.off /
                                                        oc->tsp.chunk)));
        int sent = send_result(oc, rc, "fi_tinject");
        if (sent <= 0) return sent;
        oc->tsp.off += n;
    }
    oc->fifo[oc->tsp.frame % oc->nfifo].posting = false;
    return 1;
}

/* Pull mode, a frame that splittable() allows: its head with a descriptor
 * marked split (the rest follows as chunks of the inject size),
 * then the body in such chunks. Each message is injected: nothing waits
 * for the peer, as with pulled frames. 1 when all is sent, 0 when the
 * queue is full (the rest goes from tx_post later), -1 when the
 * connection failed. */
static int tx_split(struct ofi_con *oc, uint64_t frame, const uint8_t *head,
                    size_t hl, const uint8_t *body, size_t bl)
{
    size_t chunk = min_size(ofi.inject_max, OFI_SPLIT_CHUNK_MAX);
    ofi_pull_desc_t d = {.addr = chunk, .len = bl, .flags = OFI_DESC_SPLIT};
    int sent = inject_with_desc(oc, frame, head, hl, &d);
    if (sent <= 0) return sent;
    fifo_commit(oc, (struct txe){.head = head, .hl = hl, .bytes = hl + bl,
                                 .posting = true});
    oc->tsp = (struct split_tx){
        .frame = frame, .rest = body, .len = bl, .chunk = chunk};
    return tsp_continue(oc);
}

/* Pull mode: frames whose acknowledgement arrived are done; their
 * connections report them from scan_attn (no upcalls here). */
static void poll_acks(void)
{
    struct dl *p, *next;
    for (p = ofi.offering.next; p != &ofi.offering; p = next) {
        next = p->next;
        struct ofi_con *oc = dl_entry(p, struct ofi_con, olink);
        /* Frames before tx_head are reported: none waits for an ack. */
        if (oc->ack_next < oc->tx_head) oc->ack_next = oc->tx_head;
        for (; oc->ack_next != oc->tx_tail; oc->ack_next++) {
            uint64_t f = oc->ack_next;
            struct txe *e = &oc->fifo[f % oc->nfifo];
            if (!e->offer || !e->pending) continue;
            if (__atomic_load_n(&oc->acks[f % oc->nfifo], __ATOMIC_ACQUIRE) !=
                f + 1)
                break;
            e->pending = 0;
            free(e->tmp);
            e->tmp = NULL;
            oc->offers--;
            oc->tx_report = true;
            set_attn(oc);
        }
        if (!oc->offers) dl_del(&oc->olink);
    }
}

/* Memory of closed connections that a peer may still copy from or write
 * an acknowledgement to (it has not acknowledged everything): never freed,
 * not even with the plugin, which may be initialised again. Only
 * connections closed before their frames were taken leave it. */
static struct {
    void **p;
    unsigned n, cap;
} graves;

static void bury(void *p)
{
    if (graves.n == graves.cap) {
        unsigned cap = graves.cap ? 2 * graves.cap : 16;
        void **g = realloc(graves.p, cap * sizeof(*g));
        if (!g) return; /* lost, but not freed */
        graves.p = g;
        graves.cap = cap;
    }
    graves.p[graves.n++] = p;
}

#define IOV_PEEK (2 * 4096 + 4)

/* The index of the first iovec after the frames in flight. Frames are
 * recognised by where their head is: one the core no longer has was
 * canceled by the application after it was handed to us (the peer gets it
 * anyway) and is not reported. */
static int skip_in_flight(struct ofi_con *oc, const struct iovec *iov, int cnt)
{
    int i = 0;
    for (uint64_t f = oc->tx_head; f != oc->tx_tail; f++) {
        struct txe *e = &oc->fifo[f % oc->nfifo];
        if (e->gone) continue;
        if (i >= cnt) return cnt;
        if (iov[i].iov_base != e->head || iov[i].iov_len != e->hl) {
            LOG(L_WARN, "%s: a send was canceled after it was handed to "
                "libfabric; the peer receives it all the same",
                pscom_plugin_con_str(oc->con));
            e->gone = true;
            continue;
        }
        i += e->bytes > e->hl ? 2 : 1;
    }
    return i;
}

/* A frame too large to inject but within PSP_OFI_COPY: a copy of it goes
 * as one message and the frame is finished at once, as an injected one.
 * A small send is then done before anything the peer sends after
 * receiving it can arrive, as on the other transports (ParaStation MPI's
 * partitioned sends rely on it: tcp;ofi_rxm injects only 64 bytes). The
 * copy lives until libfabric completes it, also past the connection's
 * close; a send that fails then fails the connection. 1 when sent, 0 when
 * the provider's queue is full, -1 when the connection failed. */
static int tx_copy(struct ofi_con *oc, uint64_t frame, const uint8_t *head,
                   size_t hl, const uint8_t *body, size_t bl)
{
    struct op *op = op_new(OP_COPY, hl + bl);
    if (!op) {
        fail_send(oc, "malloc", ENOMEM);
        return -1;
    }
    memcpy(op->buf, head, hl);
    if (bl) memcpy(op->buf + hl, body, bl);
    op->frame = frame;
    op->iov[0] = (struct iovec){op->buf, hl + bl};
    int sent = op_send(oc, op, 1, OFI_PART_FIRST);
    if (sent <= 0) return sent;
    oc->copies++;
    ofi.copies++;
    fifo_commit(oc, (struct txe){.head = head, .hl = hl, .bytes = hl + bl});
    return 1;
}

static void parting_end(struct parting *pt);

static void hold_release(void)
{
    if (!ofi.held) return;
    ofi.held = false;
    pscom_plugin_hold_progress("ofi", 0);
}

/* A copy's send completed (or failed, or the provider is gone). */
static void copy_done(struct op *op)
{
    struct parting *pt = op->parting;
    if (op->oc) op->oc->copies--;
    ofi.copies--;
    op_free(op);
    if (pt && --pt->copies == 0) parting_end(pt);
    if (!ofi.copies) hold_release();
}

/* Post queued frames while the window has room. No upcalls except
 * con_error. 0, or -1 when the connection failed. */
static int tx_post(struct ofi_con *oc)
{
    static struct iovec iov[IOV_PEEK];
    for (;;) {
        if (oc->txp.active) {
            int rc = txp_continue(oc);
            if (rc <= 0) return rc;
        }
        if (oc->tsp.off < oc->tsp.len) {
            int rc = tsp_continue(oc);
            if (rc <= 0) return rc;
        }
        if (oc->tx_tail - oc->tx_head >= oc->nfifo) return 0;

        size_t total;
        int want = (int)(2 * (oc->tx_tail - oc->tx_head) + 2);
        int cnt = pscom_plugin_tx_peek(oc->con, iov, want, &total);
        int i = skip_in_flight(oc, iov, cnt);
        if (i >= cnt) return 0;

        const uint8_t *head = iov[i].iov_base;
        size_t hl;
        uint64_t ftotal;
        uint8_t type;
        if (ofi_frame_parse(head, iov[i].iov_len, &hl, &ftotal, &type) ||
            hl != iov[i].iov_len) {
            LOG(L_ERR, "%s: internal error: a queued frame does not start "
                "with its header", pscom_plugin_con_str(oc->con));
            fail_send(oc, "frame", EPROTO);
            return -1;
        }
        size_t bl = (size_t)(ftotal - hl);
        const uint8_t *body = NULL;
        if (bl) {
            if (i + 1 >= cnt || iov[i + 1].iov_len != bl) return 0;
            body = iov[i + 1].iov_base;
        }

        uint64_t frame = oc->tx_tail;
        if (injectable(oc, ftotal)) {
            ssize_t rc = inject_frame(oc, frame, head, hl, body, bl);
            int sent = send_result(oc, rc, "fi_tinject");
            if (sent <= 0) return sent;
            fifo_commit(oc, (struct txe){.head = head, .hl = hl,
                                         .bytes = ftotal});
            continue;
        }
        if (!oc->pull && ftotal <= cfg_copy && ftotal <= oc->peer_bounce &&
            oc->copies < oc->nfifo) {
            int rc = tx_copy(oc, frame, head, hl, body, bl);
            if (rc <= 0) return rc;
            continue;
        }
        if (oc->pull) {
            int rc = splittable(oc, hl, ftotal)
                         ? tx_split(oc, frame, head, hl, body, bl)
                         : tx_offer(oc, frame, head, hl, body, bl, ftotal);
            if (rc <= 0) return rc;
            continue;
        }
        /* Too large for one message: post it piece by piece. */
        oc->txp = (struct tx_partial){
            .active = true,
            .frame = frame,
            .head = head,
            .body = body,
            .hl = hl,
            .bl = bl,
            .total = ftotal,
            .first = ofi_first_len(hl, bl, oc->peer_bounce),
        };
    }
}

/* Post, and report finished frames to the core, until neither moves. */
static void tx_run(struct ofi_con *oc)
{
    for (;;) {
        if (oc->dead) return;
        if (tx_post(oc)) return;
        uint64_t bytes = 0;
        while (oc->tx_head != oc->tx_tail) {
            struct txe *e = &oc->fifo[oc->tx_head % oc->nfifo];
            if (e->posting || e->pending) break;
            if (!e->gone) bytes += e->bytes;
            oc->tx_head++;
        }
        if (oc->tx_head == oc->tx_tail) oc->tx_drained_round = ofi.calls;
        if (!bytes) return;
        if (!pscom_plugin_tx_pending(oc->con)) {
            /* The core failed the connection and dropped its queue. */
            oc->dead = true;
            return;
        }
        if (pscom_plugin_tx_done(oc->con, bytes)) {
            /* Inside progress the core frees nothing; outside (tx_kick from
             * a send) the application may have closed the connection. */
            if (ofi.in_progress) oc->dead = true;
            return;
        }
    }
}

static void tx_done_op(struct ofi_con *oc, struct op *op)
{
    oc->fifo[op->frame % oc->nfifo].pending--;
    op_free(op);
    tx_run(oc);
}

/* ---------------------------------------------------------------------- */
/* Completions                                                            */
/* ---------------------------------------------------------------------- */

/* A sink takes messages from anyone: it drops them. */
static void sink_post(struct op *op)
{
    uint64_t tag = op->frame; /* the closed connection's conid << 32 */
    op->posted = ofw_trecv(ofi.ep, op->buf, op->cap, OFW_ADDR_UNSPEC, tag,
                           OFI_TAG_ANY_OF_CONID, &op->ctx) == 0;
    if (!op->posted) op_free(op);
}

static void on_comp(const ofw_comp_t *c)
{
    struct op *op = (struct op *)c->ctx;
    struct ofi_con *oc = op->oc;
    op->posted = false;
    switch (op->kind) {
    case OP_SLOT:
        if (!oc) {
            op_free(op);
            return;
        }
        op->len = c->len;
        op->state = SLOT_DONE;
        deliver(oc);
        return;
    case OP_BODY:
        if (!oc) {
            op_free(op);
            return;
        }
        dl_del(&op->link);
        body_done(oc, op, c->len);
        return;
    case OP_TX:
        if (!oc) {
            op_free(op);
            return;
        }
        tx_done_op(oc, op);
        return;
    case OP_COPY: /* its frame was reported when it was posted */
        copy_done(op);
        return;
    case OP_SINK:
        LOG(L_VERBOSE, "drained a message of %zu bytes to closed connection "
            "id %u", c->len, (unsigned)(op->frame >> 32));
        if (op->deadline > now_ms())
            sink_post(op);
        else
            op_free(op);
        return;
    }
}

static void on_cq_error(const ofw_cqerr_t *e)
{
    struct op *op = (struct op *)e->ctx;
    if (!op) {
        LOG(L_WARN, "completion error without an operation: %s", e->text);
        return;
    }
    struct ofi_con *oc = op->oc;
    op->posted = false;
    if (op->kind == OP_SINK) {
        if (e->err != ECANCELED && op->deadline > now_ms())
            sink_post(op);
        else
            op_free(op);
        return;
    }
    if (op->kind == OP_COPY && (!oc || oc->dead || e->err == ECANCELED)) {
        if (!oc)
            LOG(L_WARN, "a send finished early (PSP_OFI_COPY) failed after "
                "its connection closed; the peer misses that message: %s",
                e->text);
        copy_done(op);
        return;
    }
    if (!oc || oc->dead || e->err == ECANCELED) {
        if (op->kind != OP_SLOT || !oc) op_free(op);
        return;
    }
    char what[320];
    if (op->kind == OP_TX || op->kind == OP_COPY) {
        if (op->kind == OP_COPY) copy_done(op);
        snprintf(what, sizeof(what), "libfabric send (%s: %s)", ofi.info.prov,
                 e->text);
        LOG(L_DEBUG, "%s: send completed with an error: %s",
            pscom_plugin_con_str(oc->con), e->text);
        fail_con(oc, PSCOM_OP_WRITE, err_of(e->err), what, e->err);
        return;
    }
    if (e->err == EMSGSIZE) {
        fail_proto(oc, "message longer than the receive posted for it");
        return;
    }
    snprintf(what, sizeof(what), "libfabric receive (%s: %s)", ofi.info.prov,
             e->text);
    fail_con(oc, PSCOM_OP_READ, err_of(e->err), what, e->err);
}

/* ---------------------------------------------------------------------- */
/* Watching the peer through the pre-connection socket                    */
/* ---------------------------------------------------------------------- */

static void put_u64le(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_u64le(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* Tell the peer how many frames were sent to it (it waits for them), and
 * close the pre-connection socket. */
static void say_bye(int fd, uint64_t frames)
{
    uint8_t bye[BYE_LEN] = {'O', 'F', 'I', 'B'};
    put_u64le(bye + 8, frames);
    ssize_t n = send(fd, bye, sizeof(bye), MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)n; /* a peer that is gone needs no goodbye */
    close(fd);
}

/* The copies of a closed connection completed, or are given up: its
 * goodbye goes. */
static void parting_end(struct parting *pt)
{
    if (pt->copies) {
        LOG(L_WARN, "closed connection id %u: %u sends finished early "
            "(PSP_OFI_COPY) still in flight after PSP_OFI_LINGER=%u ms; "
            "saying goodbye without them (the peer misses them)", pt->conid,
            pt->copies, cfg_linger);
        for (struct dl *d = ofi.orphans.next; d != &ofi.orphans; d = d->next) {
            struct op *op = dl_entry(d, struct op, link);
            if (op->parting == pt) op->parting = NULL;
        }
    }
    dl_del(&pt->link);
    say_bye(pt->fd, pt->frames);
    free(pt);
}

/* Closed connections whose copies are late; when none is left, the
 * copies no longer keep the plugin progressed. */
static void expire_partings(void)
{
    uint64_t now = now_ms();
    struct dl *d, *next;
    bool expired = false;
    for (d = ofi.partings.next; d != &ofi.partings; d = next) {
        next = d->next;
        struct parting *pt = dl_entry(d, struct parting, link);
        if (now < pt->deadline) continue;
        parting_end(pt);
        expired = true;
    }
    if (expired && dl_empty(&ofi.partings)) hold_release();
}

static void check_gone(struct ofi_con *oc)
{
    uint64_t now = now_ms();
    if (bye_ok(oc)) {
        if (oc->rx_frames >= oc->bye_frames ||
            now >= oc->gone_at + 5ull * cfg_eof_grace) {
            LOG(L_DEBUG, "%s: the peer closed its end (%llu of %llu frames "
                "arrived)", pscom_plugin_con_str(oc->con),
                (unsigned long long)oc->rx_frames,
                (unsigned long long)oc->bye_frames);
            fail_con(oc, PSCOM_OP_READ, PSCOM_ERR_EOF,
                     "peer closed the connection", 0);
        }
        return;
    }
    if (now >= oc->gone_at + cfg_eof_grace) {
        LOG(L_INFO, "%s: the peer's pre-connection socket closed without a "
            "goodbye: the peer process is gone", pscom_plugin_con_str(oc->con));
        fail_con(oc, PSCOM_OP_READ, PSCOM_ERR_EOF,
                 "pre-connection socket (peer gone)", ECONNRESET);
    }
}

static void on_fd(int fd, uint32_t events, void *arg)
{
    struct ofi_con *oc = arg;
    (void)events;
    if (!oc->open || oc->dead) return;
    for (;;) {
        uint8_t buf[64];
        ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n > 0) {
            size_t take = min_size((uint64_t)n, BYE_LEN - oc->bye_have);
            memcpy(oc->bye + oc->bye_have, buf, take);
            oc->bye_have += take;
            if (bye_ok(oc)) oc->bye_frames = get_u64le(oc->bye + 8);
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        if (!oc->gone_at) oc->gone_at = now_ms();
        break;
    }
    if (oc->gone_at) check_gone(oc);
}

/* ---------------------------------------------------------------------- */
/* Operations                                                             */
/* ---------------------------------------------------------------------- */

static int ofi_init(void)
{
    pscom_plugin_config_ranges(ofi_ranges,
                               sizeof(ofi_ranges) / sizeof(ofi_ranges[0]));
    pscom_plugin_config_register(ofi_rows, sizeof(ofi_rows) / sizeof(ofi_rows[0]));

    memset(&ofi, 0, sizeof(ofi));
    ofi.region_fd = -1;
    dl_init(&ofi.cons);
    dl_init(&ofi.orphans);
    dl_init(&ofi.partings);
    dl_init(&ofi.sinks);
    dl_init(&ofi.offering);
    dl_init(&ofi.owed);
    /* Conids count up from a random start: they cannot be guessed from
     * the process id. */
    ofi.next_conid = random_u32();

    char why[512];
    sigset_t old;
    signals_block(&old);
    int rc = ofw_select(cfg_provider, cfg_domain, &ofi.info, why, sizeof(why));
    signals_restore(&old);
    if (rc) {
        /* Asked for by name: worth a warning; otherwise libfabric simply
         * has nothing for us here. */
        LOG(cfg_provider && *cfg_provider ? L_WARN : L_DEBUG,
            "%s; the ofi plugin is not used%s", why,
            cfg_provider && *cfg_provider ? " (check PSP_OFI_PROVIDER)" : "");
        pscom_plugin_set_reason(why);
        return rc;
    }
    if (cfg_pull > 0 || (cfg_pull < 0 && ofi.info.local_only)) {
        char cma_why[128];
        if (!ofi.info.local_only) {
            snprintf(cma_why, sizeof(cma_why), "provider %s also reaches "
                     "other hosts", ofi.info.prov);
        } else if (min_size(ofi.info.inject_size, INJECT_MAX) <
                   OFI_PULL_DESC_LEN + OFI_BOUNCE_MIN) {
            snprintf(cma_why, sizeof(cma_why), "inject size %zu too small",
                     ofi.info.inject_size);
        } else if (ofw_cma_usable(cma_why, sizeof(cma_why)) == 0) {
            ofi.pull = true;
        }
        if (!ofi.pull)
            LOG(cfg_pull > 0 ? L_WARN : L_INFO, "receivers cannot copy "
                "large messages from their senders (%s): they are sent, and "
                "a killed peer may hold back sends to other peers",
                cma_why);
    }
    if (cfg_bounce > ofi.info.max_msg_size) cfg_bounce = ofi.info.max_msg_size;
    ofi.max_msg = min_size(cfg_max_msg, ofi.info.max_msg_size);
    if (ofi.max_msg < cfg_bounce) ofi.max_msg = cfg_bounce;
    ofi.inject_max = min_size(ofi.info.inject_size, INJECT_MAX);
    LOG(L_DEBUG, "provider %s, fabric %s, domain %s: inject %zu, largest "
        "message %zu, iov %zu, queues tx %zu rx %zu%s%s", ofi.info.prov,
        ofi.info.fabric, ofi.info.domain, ofi.info.inject_size,
        ofi.info.max_msg_size, ofi.info.iov_limit, ofi.info.tx_size,
        ofi.info.rx_size, ofi.info.local_only ? "; this host only" : "",
        ofi.pull ? "; receivers copy large messages" : "");
    return 0;
}

static int ofi_progress(void);

/* Sends the core counts as done (copies) must reach the peer before the
 * endpoint goes: progress until they completed, within PSP_OFI_LINGER. */
static void finish_copies(void)
{
    if (ofi.copies && ofi.ep) {
        unsigned ms = cfg_linger < EXIT_WAIT_MAX_MS ? cfg_linger
                                                    : EXIT_WAIT_MAX_MS;
        uint64_t deadline = now_ms() + ms;
        for (unsigned n = 1; ofi.copies && now_ms() < deadline; n++) {
            ofi_progress();
            if (!(n & 63)) sched_yield(); /* a peer on this core */
        }
        if (ofi.copies)
            LOG(L_WARN, "%u sends finished early (PSP_OFI_COPY) were still "
                "in flight after %u ms (PSP_OFI_LINGER, at most %u at "
                "exit); their peers miss them", ofi.copies, ms,
                EXIT_WAIT_MAX_MS);
    }
    while (!dl_empty(&ofi.partings)) {
        struct parting *pt = dl_entry(ofi.partings.next, struct parting, link);
        pt->copies = 0; /* reported above */
        parting_end(pt);
    }
}

static void ofi_destroy(void)
{
    finish_copies();
    if (ofi.ep) ep_close();
    /* The provider is gone: nothing references the operations any more. */
    while (!dl_empty(&ofi.orphans))
        op_free(dl_entry(ofi.orphans.next, struct op, link));
    while (!dl_empty(&ofi.sinks))
        op_free(dl_entry(ofi.sinks.next, struct op, link));
    ofi.copies = 0;
    hold_release();
    for (unsigned i = 0; i < ofi.peers_cap; i++) free(ofi.peers[i]);
    free(ofi.peers);
    ofi.peers = NULL;
    ofi.peers_cap = ofi.npeers = 0;
    ofw_unselect();
}

static int ofi_offer(const pscom_plugin_peer_t *peer)
{
    return !ofi.info.local_only || peer->same_node;
}

static int ofi_hs_start(pscom_plugin_con_t *con, void *priv, void *blob,
                        size_t *len)
{
    struct ofi_con *oc = priv;
    int rc = ep_get();
    if (rc) return rc;

    oc->con = con;
    oc->fd = -1;
    dl_init(&oc->ops);
    dl_init(&oc->link);
    dl_init(&oc->olink);
    if (++ofi.next_conid == 0) ofi.next_conid = 1;
    oc->conid = ofi.next_conid;
    oc->counted = true;
    ofi.refs++;

    ofi_blob_t b = {
        .flags = ofi.pull ? OFI_BLOB_PULL : 0,
        .conid = oc->conid,
        .bounce = (uint32_t)cfg_bounce,
        .max_msg = ofi.max_msg,
        .addr_format = ofi.info.addr_format,
        .addr_len = ofi.addr_len,
    };
    snprintf(b.prov, sizeof(b.prov), "%s", ofi.info.prov);
    memcpy(b.addr, ofi.addr, ofi.addr_len);
    size_t n = ofi_blob_encode(&b, blob, *len);
    if (!n) {
        ref_put(oc);
        LOG(L_DEBUG, "%s: the endpoint name (%zu bytes) does not fit the "
            "handshake", pscom_plugin_con_str(con), ofi.addr_len);
        return -ENOBUFS;
    }
    *len = n;
    return 0;
}

static int ofi_hs_connect(pscom_plugin_con_t *con, void *priv,
                          const void *blob, size_t len)
{
    struct ofi_con *oc = priv;
    ofi_blob_t *b = calloc(1, sizeof(*b));
    const char *why = NULL;
    char bad_name[160];
    int rc;

    if (!b) return -ENOMEM;
    rc = ofi_blob_decode(blob, len, b, &why);
    if (rc) goto out;
    if (strcmp(b->prov, ofi.info.prov)) {
        why = "the peer uses another libfabric provider";
        rc = -EPROTONOSUPPORT;
        goto out;
    }
    if (b->addr_format != ofi.info.addr_format) {
        why = "the peer's endpoint name has another address format";
        rc = -EAFNOSUPPORT;
        goto out;
    }
    /* A name from the network that libfabric would read past. */
    rc = ofi_addr_check(b->addr_format, b->addr, b->addr_len, ofi.addr_len,
                        bad_name, sizeof(bad_name));
    if (rc) {
        LOG(L_WARN, "%s: the peer sent a malformed endpoint name (%s, "
            "provider %s); not connecting over ofi",
            pscom_plugin_con_str(con), bad_name, ofi.info.prov);
        why = bad_name;
        goto out;
    }
    rc = peer_addr(b->addr, b->addr_len, &oc->dest);
    if (rc) {
        why = "fi_av_insert of the peer's endpoint failed";
        goto out;
    }
    oc->peer_conid = b->conid;
    oc->peer_bounce = b->bounce;
    oc->pull = ofi.pull && (b->flags & OFI_BLOB_PULL);
    if (oc->pull && pscom_plugin_con_peer_pid(con) <= 0) {
        why = "pull mode needs the peer's process id, which the core knows "
              "only for peers it takes for ones of this node (PSP_OFI_PULL=0 "
              "turns pull mode off)";
        rc = -EPROTO;
        goto out;
    }
    oc->chunk = min_size(ofi.max_msg, b->max_msg);

out:
    if (rc) {
        char reason[200];
        snprintf(reason, sizeof(reason), "%s (peer's provider \"%s\", ours "
                 "\"%s\"): %s", why ? why : "handshake failed",
                 b->prov[0] ? b->prov : "?", ofi.info.prov, strerror(-rc));
        LOG(L_DEBUG, "%s: %s", pscom_plugin_con_str(con), reason);
        pscom_plugin_set_reason(reason);
    }
    free(b);
    return rc;
}

static void ofi_hs_abort(pscom_plugin_con_t *con, void *priv)
{
    ref_put(priv);
}

/* Free what open() allocated (no operation of oc is posted). */
static void release(struct ofi_con *oc)
{
    for (unsigned i = 0; oc->ring && i < oc->nring; i++) {
        struct op *op = oc->ring[i];
        if (!op) continue;
        if (op->posted) {
            op->oc = NULL;
            dl_add(&ofi.orphans, &op->link);
            ofw_cancel(ofi.ep, &op->ctx);
        } else {
            op_free(op);
        }
    }
    free(oc->ring);
    oc->ring = NULL;
    /* Frames the peer has not acknowledged: it may still copy them and
     * write their acknowledgements. The core fails those it counts as
     * unsent after this and gives their buffers back to the application:
     * their words say so before (the peer drops such a copy). Our own
     * copies (tmp) stay as they are. */
    for (uint64_t f = oc->tx_head; oc->fifo && f != oc->tx_tail; f++) {
        struct txe *e = &oc->fifo[f % oc->nfifo];
        if (e->offer && e->pending && !e->tmp)
            __atomic_store_n(&oc->acks[f % oc->nfifo], OFI_ACK_REVOKED,
                             __ATOMIC_SEQ_CST);
        if (e->tmp && e->pending)
            bury(e->tmp);
        else
            free(e->tmp);
    }
    /* Before the application can write the buffers again. */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (oc->offers)
        bury(oc->acks);
    else
        free(oc->acks);
    oc->acks = NULL;
    oc->offers = 0;
    dl_del(&oc->olink);
    free(oc->fifo);
    oc->fifo = NULL;
}

static int ofi_open(pscom_plugin_con_t *con, void *priv, int fd)
{
    struct ofi_con *oc = priv;

    oc->nring = cfg_recvq;
    oc->nfifo = cfg_sendq;
    oc->ring = calloc(oc->nring, sizeof(*oc->ring));
    oc->fifo = calloc(oc->nfifo, sizeof(*oc->fifo));
    if (!oc->ring || !oc->fifo) goto nomem;
    if (oc->pull) {
        oc->acks = calloc(oc->nfifo, sizeof(*oc->acks));
        if (!oc->acks) goto nomem;
    }
    for (unsigned i = 0; i < oc->nring; i++) {
        struct op *op = op_new(OP_SLOT, cfg_bounce);
        if (!op) goto nomem;
        op->oc = oc;
        oc->ring[i] = op;
        ssize_t rc = slot_post_raw(oc, op, i);
        if (rc == -EAGAIN || rc == -ENOMEM) {
            owe_slot(op, i); /* posted from progress */
        } else if (rc) {
            LOG(L_ERR, "%s: posting receives failed: %s",
                pscom_plugin_con_str(con), ofw_strerror((int)rc));
            release(oc);
            ref_put(oc);
            return (int)rc;
        }
    }
    oc->open = true;
    dl_add(&ofi.cons, &oc->link);
    watch_peer(oc);

    int keep = 0;
    if (fd >= 0) {
        if (pscom_plugin_fd_add(fd, EPOLLIN | EPOLLRDHUP, 0, on_fd, oc) == 0) {
            oc->fd = fd;
            keep = 1;
        } else {
            LOG(L_WARN, "%s: cannot watch the pre-connection socket; a peer "
                "that dies while we only receive goes unnoticed",
                pscom_plugin_con_str(con));
        }
    }
    LOG(L_DEBUG, "%s: open (conids %u here, %u there; provider %s)",
        pscom_plugin_con_str(con), oc->conid, oc->peer_conid, ofi.info.prov);
    /* Frames may have arrived before this side switched. */
    return keep;

nomem:
    LOG(L_ERR, "%s: out of memory for %u receive buffers of %zu bytes (see "
        "PSP_OFI_RECVQ, PSP_OFI_BOUNCE)", pscom_plugin_con_str(con), cfg_recvq,
        cfg_bounce);
    release(oc);
    ref_put(oc);
    return -ENOMEM;
}

/* At close: op (posted, of frame op->frame) reads the core's buffers, and
 * the provider cannot withdraw it. Its frame stays lent until the last
 * such operation is done: the core must not give the buffers back to the
 * application, which would write them while the provider still sends
 * them to the peer. While frames are lent the core keeps calling our
 * progress, also when no ofi connection is open any more: without it the
 * provider's completions would never be read, and the send of the last
 * connection to close never ended. */
static void lend_frame(struct ofi_con *oc, struct op *op)
{
    struct txe *e = &oc->fifo[op->frame % oc->nfifo];
    if (e->gone) return;
    if (!e->loan) {
        struct loan *l = calloc(1, sizeof(*l));
        if (!l) return;
        l->token = pscom_plugin_tx_lend(oc->con, e->head);
        if (!l->token) {
            free(l);
            return;
        }
        e->loan = l;
        if (!ofi.loans++) pscom_plugin_hold_progress("ofi", 1);
    }
    e->loan->ops++;
    op->loan = e->loan;
}

/* Has the peer's pre-connection socket closed without a goodbye, its
 * process ended? Also where the connection failed for another reason
 * first and no longer watched the socket. */
static bool precon_ended(struct ofi_con *oc)
{
    if (oc->gone_at) return !bye_ok(oc);
    if (oc->fd < 0) return false;
    char c;
    ssize_t n = recv(oc->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    /* The stream's end may come after a goodbye read already. */
    if (n == 0) return !bye_ok(oc);
    return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

static void ofi_close(pscom_plugin_con_t *con, void *priv)
{
    struct ofi_con *oc = priv;
    if (!oc->open) return;
    /* Sends may still be read unless the peer is known to be gone: also
     * when the connection failed here (a protocol error, no memory), the
     * peer lives and its provider goes on taking what we sent. */
    bool peer_reads = !oc->peer_gone && !precon_ended(oc);
    oc->open = false;
    oc->dead = true;
    clear_attn(oc);
    dl_del(&oc->link);
    owd_peer_del(oc);

    struct parting *pt = NULL;
    if (oc->fd >= 0) {
        pscom_plugin_fd_del(oc->fd);
        if (oc->copies) pt = calloc(1, sizeof(*pt));
        if (pt) {
            *pt = (struct parting){.fd = oc->fd, .frames = oc->tx_tail,
                                   .conid = oc->conid,
                                   .deadline = now_ms() + cfg_linger};
            dl_add(&ofi.partings, &pt->link);
        } else {
            say_bye(oc->fd, oc->tx_tail);
        }
        oc->fd = -1;
    }

    /* Operations the provider still holds outlive the connection; sends
     * that read the core's buffers keep their frames from the core. */
    while (!dl_empty(&oc->ops)) {
        struct op *op = dl_entry(oc->ops.next, struct op, link);
        dl_del(&op->link);
        if (!op->posted) {
            op_free(op);
            continue;
        }
        if (op->kind == OP_TX && !op->tmp && peer_reads) lend_frame(oc, op);
        op->oc = NULL;
        if (op->kind == OP_COPY && pt) {
            op->parting = pt;
            pt->copies++;
        }
        dl_add(&ofi.orphans, &op->link);
        if (op->kind == OP_BODY) ofw_cancel(ofi.ep, &op->ctx);
    }
    release(oc);
    /* Copies the core counts as sent: keep them moving (the core stops
     * calling progress when the last connection closes). */
    if (ofi.copies && !ofi.held) {
        ofi.held = true;
        pscom_plugin_hold_progress("ofi", 1);
    }

    /* Messages the peer sent before it learnt of the close would stay in
     * the provider's unexpected queue for good: drain them for a while.
     * Not for a dead peer, which sends nothing more: ofi_rxm of libfabric
     * 1.17 crashed inside fi_trecv posting such a sink after the peer was
     * killed with rendezvous messages in flight (rndv_window). */
    if (cfg_linger && !oc->peer_gone) {
        struct op *s = op_new(OP_SINK, 64);
        if (s) {
            s->frame = (uint64_t)oc->conid << 32;
            s->deadline = now_ms() + cfg_linger;
            dl_add(&ofi.sinks, &s->link);
            sink_post(s);
        }
    }
    ref_put(oc);
}

/* A frame small enough to inject, with nothing queued or in flight: sent
 * now as the next frame, or left to the queue (no room: EAGAIN; a failure
 * is met again and reported there). */
static int ofi_tx_now(pscom_plugin_con_t *con, void *priv,
                      const struct iovec *iov, int iovcnt)
{
    struct ofi_con *oc = priv;
    size_t hl = iov[0].iov_len, bl = iovcnt > 1 ? iov[1].iov_len : 0;
    if (!oc->open || oc->dead || oc->txp.active || oc->tx_blocked ||
        oc->tx_head != oc->tx_tail || !injectable(oc, hl + bl) ||
        inject_frame(oc, oc->tx_tail, iov[0].iov_base, hl,
                     bl ? iov[1].iov_base : NULL, bl))
        return 0;
    oc->tx_head = ++oc->tx_tail;
    return 1;
}

static void ofi_tx_kick(pscom_plugin_con_t *con, void *priv)
{
    struct ofi_con *oc = priv;
    if (!oc->open || oc->dead) return;
    tx_run(oc);
}

/* Connections whose sends or a body's receive found a full queue, whose
 * sends completed, or whose EOF waits (hold_eof). A frame that arrived
 * and was not delivered is looked at again: the EOF, held for sends in
 * flight or for one more round after the last of them completed, is the
 * peer's last frame, and no completion would ever call deliver for it. */
static void scan_attn(void)
{
    struct dl *p, *next;
    for (p = ofi.cons.next; p != &ofi.cons && ofi.attn; p = next) {
        next = p->next;
        struct ofi_con *oc = dl_entry(p, struct ofi_con, link);
        if (!oc->attn) continue;
        clear_attn(oc);
        if (oc->dead) continue;
        if (oc->body.active && oc->body.need_post) {
            if (body_post(oc)) continue;
        }
        if (oc->tx_blocked || oc->tx_report) {
            oc->tx_blocked = oc->tx_report = false;
            tx_run(oc);
        }
        if (!oc->dead && oc->ring[oc->rx_idx]->state == SLOT_DONE)
            deliver(oc);
    }
}

/* Sinks past their deadline are canceled (freed on completion). */
static void expire_sinks(void)
{
    uint64_t now = now_ms();
    while (!dl_empty(&ofi.sinks)) {
        struct op *s = dl_entry(ofi.sinks.prev, struct op, link);
        if (s->deadline > now) break;
        dl_del(&s->link);
        dl_add(&ofi.orphans, &s->link);
        s->deadline = 0;
        if (s->posted) ofw_cancel(ofi.ep, &s->ctx);
    }
}

/* Handle the completions read and not yet handled; 1 when there were. */
static int handle_comps(void)
{
    int did = ofi.comp_next < ofi.comp_n;
    while (ofi.comp_next < ofi.comp_n) {
        /* A copy: a nested call may refill the array. */
        ofw_comp_t c = ofi.comp[ofi.comp_next++];
        on_comp(&c);
    }
    return did;
}

static int ofi_progress(void)
{
    if (!ofi.ep) return 0;
    if (!ofi.in_progress++) ofi.calls++;
    /* What an outer call read (rarely anything: checked here, as the
     * call costs an idle poll a fifth of its instructions). */
    int did = ofi.comp_next < ofi.comp_n ? handle_comps() : 0;
    for (int round = 0; round < 4; round++) {
        /* Before the provider looks for arriving messages again. */
        if (!dl_empty(&ofi.owed)) post_owed();
        ssize_t n = ofw_cq_read(ofi.ep, ofi.comp, CQ_BATCH);
        if (n > 0) {
            /* Before anything calls the core: a nested call sees them. */
            ofi.comp_next = 0;
            ofi.comp_n = (unsigned)n;
            /* A peer acknowledges a pulled frame before it sends what
             * follows from it: the sends those acknowledgements end are
             * reported first, so that the core sees them done before the
             * peer's answer (psc_req_run_held). */
            if (!dl_empty(&ofi.offering)) {
                poll_acks();
                if (ofi.attn) scan_attn();
            }
            did |= handle_comps();
            if (n < CQ_BATCH) break;
            continue;
        }
        if (n == OFW_CQ_ERROR) {
            ofw_cqerr_t e;
            while (ofw_cq_readerr(ofi.ep, &e) == 0) on_cq_error(&e);
            did = 1;
            continue;
        }
        if (n < 0 && pscom_plugin_log_level() >= L_WARN && !(ofi.rounds & 0xffff))
            LOG(L_WARN, "reading the completion queue failed: %s",
                ofw_strerror((int)n));
        break;
    }
    if (!dl_empty(&ofi.offering)) poll_acks();
    if (ofi.attn) scan_attn();
    if ((!dl_empty(&ofi.sinks) || !dl_empty(&ofi.partings)) &&
        (++ofi.rounds & 1023) == 0) {
        expire_sinks();
        expire_partings();
    }
    ofi.in_progress--;
    return did;
}

static const pscom_plugin_ops_t ofi_ops = {
    .init = ofi_init,
    .destroy = ofi_destroy,
    .offer = ofi_offer,
    .hs_start = ofi_hs_start,
    .hs_connect = ofi_hs_connect,
    .hs_abort = ofi_hs_abort,
    .open = ofi_open,
    .close = ofi_close,
    .tx_kick = ofi_tx_kick,
    .tx_now = ofi_tx_now,
    .progress = ofi_progress,
};

PSCOM_PLUGIN_EXPORT const pscom_plugin_t pscom_plugin_ofi = {
    .api_version = PSCOM_PLUGIN_API_VERSION,
    .name = "ofi",
    .con_type = PSCOM_CON_TYPE_OFI,
    .priority = 20,
    .con_priv_size = sizeof(struct ofi_con),
    .rendezvous = &cfg_rendezvous,
    .fds_per_con = 1, /* the pre-connection socket; the endpoint is shared */
    .ops = &ofi_ops,
};
