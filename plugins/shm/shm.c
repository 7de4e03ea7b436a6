/*
 * The shm plugin: connections between processes of one node over shared
 * memory, built into libpscom and preferred to every network transport.
 *
 * Each side of a connection creates one segment holding the ring its peer
 * writes into (shm_ring.h) and describes it in the handshake blob; the peer
 * maps it in hs_connect, so a segment that cannot be mapped makes the
 * handshake fall back to the next transport. Segments never outlive their
 * users (shm_seg.h).
 *
 * Sending copies the queued frames into the peer's ring at once (tx_kick);
 * what does not fit is retried from progress. Receiving polls the head slot
 * of every open connection's ring, kept in one dense array: an idle
 * connection costs one load per round. Bytes go from the ring straight into
 * the receive buffer once a body is being received.
 *
 * Large messages stream through the ring in chunks, so the sender's copy
 * in and the receiver's copy out overlap: measured faster than the single
 * copy of process_vm_readv whenever the sender has written its buffer (see
 * doc/shm.md). CMA stays available as the rendezvous pull (PSP_SHM_CMA);
 * where the kernel denies it, the plugin says so once and falls back.
 *
 * One-sided put and get (plugin interface 1.1) of at least PSP_SHM_RMA
 * bytes copy straight between the two processes with process_vm_writev /
 * process_vm_readv, synchronously; the core then sends its notice through
 * the ring, behind the bytes. The region's key is the target's pid.
 *
 * Shared memory reports no peer failure, so the pre-connection's TCP socket
 * is kept open and watched (cold): its end means the peer is gone, and the
 * connection fails once what the peer wrote before has been delivered.
 */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "pscom_plugin.h"
#include "shm_ring.h"
#include "shm_seg.h"

#define IOV_BATCH 32

#define SEG_MAGIC   0x31306d6873637370ull /* "pscshm01" */
#define SEG_VERSION 1
#define SEG_HDR_LEN 256 /* struct seg_hdr, padded; the ring follows */

#define BLOB_MAGIC 0x70736873u

/* The first bytes of a segment, written by its creator before the blob goes
 * out, read by the peer after mapping it. */
struct seg_hdr {
    uint64_t magic;
    uint64_t cookie; /* random, also in the blob: the right segment? */
    uint32_t version;
    uint32_t slots;
    uint64_t dsize;
    uint64_t size;
    int32_t pid;
    uint32_t reserved;
    /* Written by the peer: it cannot read this process's memory with
     * process_vm_readv, so rendezvous sends need not describe buffers. */
    _Atomic uint32_t no_cma;
    /* Written by the peer when it closes: the buffers it described may go
     * back to its application, and a pull that ends after this may have
     * copied bytes written again. */
    _Atomic uint32_t pulls_revoked;
};

_Static_assert(sizeof(struct seg_hdr) <= SEG_HDR_LEN, "segment header size");

/* hs_start's blob: where to find our segment. */
struct shm_blob {
    uint32_t magic;
    uint16_t version;
    uint16_t kind; /* enum shm_seg_kind */
    int32_t pid;
    int32_t id;    /* memfd descriptor number or shmid */
    uint64_t size;
    uint64_t cookie;
};

/* A region's key for one-sided operations (rma_register): whose memory. */
struct shm_rkey {
    uint32_t magic;
    int32_t pid;
};

#define RKEY_MAGIC 0x6b616d72u /* "rmak" */

/* A rendezvous buffer for the peer to pull with process_vm_readv. */
struct cma_blob {
    uint64_t addr;
    uint64_t len;
    int32_t pid;
    uint32_t magic;
};

struct shm_con {
    pscom_plugin_con_t *con;
    struct shm_rx rx;     /* from our segment */
    struct shm_tx tx;     /* into the peer's segment */
    struct shm_seg mine;  /* our receive ring */
    struct shm_seg peer;  /* the peer's receive ring, our send ring */
    struct seg_hdr *my_hdr, *peer_hdr;
    int fd;               /* the pre-connection socket, watched for EOF */
    unsigned idx;         /* in polls[] while open */
    bool busy;            /* delivering: nested progress leaves it alone */
    bool fd_watched;
    bool tx_blocked;      /* POLL_TX_BLOCKED is set */
    bool dead;            /* the core said stop: no more upcalls */
    bool no_pull;         /* CMA from this peer failed: do not try again */
    bool no_rma;          /* the peer process is gone for CMA (ESRCH) */
    int32_t peer_pid;     /* from its handshake blob */
};

/* What progress looks at, one entry per open connection. */
struct shm_poll {
    const _Atomic uint64_t *hdr; /* the next slot's header word */
    uint32_t expect;             /* its sequence number once published */
    uint32_t flags;              /* POLL_*: something besides receiving */
    struct shm_con *sc;
};

#define POLL_TX_BLOCKED 0x1u /* frames wait for room in the peer's ring */
#define POLL_HUP        0x2u /* the peer's socket ended */

static struct shm_poll *polls;
static unsigned npolls, polls_cap;

/* A header word no slot ever matches (sequence numbers are never 0). */
static const _Atomic uint64_t never_ready;

static size_t cfg_ring_size, cfg_chunk, cfg_rendezvous, cfg_cma, cfg_rma;
static unsigned cfg_slots;
static char *cfg_segment;

static enum shm_seg_kind seg_kind;
static uint32_t ring_slots;
static uint64_t ring_dsize;
static bool cma_denied; /* process_vm_readv returned EPERM once */
static bool rma_denied; /* CMA for one-sided operations returned EPERM once */

static const pscom_config_row_t shm_rows[] = {
    {"PSP_SHM_RING_SIZE", PSCOM_CONFIG_SIZE, "256k",
     "data bytes of the ring of each direction of an shm connection, rounded "
     "up to a power of two", "shm", NULL, &cfg_ring_size},
    {"PSP_SHM_SLOTS", PSCOM_CONFIG_UINT, "256",
     "slots (128-byte message headers with up to 120 inline bytes) of the "
     "ring of each direction, rounded up to a power of two", "shm",
     NULL, &cfg_slots},
    {"PSP_SHM_CHUNK", PSCOM_CONFIG_SIZE, "16k",
     "largest piece a long message is split into in the ring (at most half "
     "the ring): smaller pieces let the receiver start copying sooner",
     "shm", NULL, &cfg_chunk},
    {"PSP_SHM_RENDEZVOUS", PSCOM_CONFIG_SIZE, "512k",
     "rendezvous threshold on shm connections: bodies of at least this size "
     "wait until the receive is posted (pulled with CMA when PSP_SHM_CMA "
     "allows, else streamed through the ring)", "shm", "PSP_RENDEZVOUS",
     &cfg_rendezvous},
    {"PSP_SHM_CMA", PSCOM_CONFIG_SIZE, "inf",
     "rendezvous bodies of at least this size are copied once by the "
     "receiver with process_vm_readv (CMA); inf: never", "shm", NULL,
     &cfg_cma},
    {"PSP_SHM_RMA", PSCOM_CONFIG_SIZE, "8k",
     "one-sided puts and gets of at least this size copy straight between "
     "the processes with process_vm_writev/readv (CMA), smaller ones go "
     "through the ring; inf: never", "shm", NULL, &cfg_rma},
    {"PSP_SHM_SEGMENT", PSCOM_CONFIG_STR, "memfd",
     "how shm segments are shared: memfd (found through /proc/PID/fd; "
     "nothing can be left behind) or sysv (shmget, removed at once)", "shm",
     NULL, &cfg_segment},
};

static const pscom_config_range_t shm_ranges[] = {
    {"PSP_SHM_RING_SIZE", SHM_DATA_MIN, SHM_DATA_MAX},
    {"PSP_SHM_SLOTS", SHM_SLOTS_MIN, SHM_SLOTS_MAX},
    {"PSP_SHM_CHUNK", SHM_DATA_ALIGN, SHM_DATA_MAX / 2},
};

static uint64_t round_pow2(uint64_t v, uint64_t lo, uint64_t hi)
{
    if (v < lo) v = lo;
    if (v > hi) v = hi;
    uint64_t p = lo;
    while (p < v) p <<= 1;
    return p;
}

static int shm_init(void)
{
    pscom_plugin_config_ranges(shm_ranges,
                               sizeof(shm_ranges) / sizeof(shm_ranges[0]));
    pscom_plugin_config_register(shm_rows, sizeof(shm_rows) / sizeof(shm_rows[0]));
    seg_kind = shm_seg_kind_parse(cfg_segment);
    if (seg_kind == SHM_SEG_NONE) {
        pscom_plugin_log(1, "shm: PSP_SHM_SEGMENT=%s is neither memfd nor "
                         "sysv; using memfd", cfg_segment);
        seg_kind = SHM_SEG_MEMFD;
    }
    ring_slots = (uint32_t)round_pow2(cfg_slots, SHM_SLOTS_MIN, SHM_SLOTS_MAX);
    ring_dsize = round_pow2(cfg_ring_size, SHM_DATA_MIN, SHM_DATA_MAX);
    if (cfg_chunk > ring_dsize / 2) cfg_chunk = ring_dsize / 2;
    return 0;
}

static void shm_destroy(void)
{
    free(polls);
    polls = NULL;
    npolls = polls_cap = 0;
}

static int shm_offer(const pscom_plugin_peer_t *peer)
{
    return peer->same_node;
}

/* ---------------------------------------------------------------------- */
/* Handshake                                                              */
/* ---------------------------------------------------------------------- */

static uint64_t new_cookie(void)
{
    uint64_t c = 0;
    if (getrandom(&c, sizeof(c), GRND_NONBLOCK) != sizeof(c)) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        c = ((uint64_t)ts.tv_nsec << 32) ^ (uint64_t)ts.tv_sec ^
            ((uint64_t)getpid() << 16);
    }
    return c | 1;
}

static void release_segments(struct shm_con *sc)
{
    shm_seg_release(&sc->peer);
    shm_seg_release(&sc->mine);
    sc->my_hdr = sc->peer_hdr = NULL;
}

static int shm_hs_start(pscom_plugin_con_t *con, void *priv, void *blob,
                        size_t *len)
{
    struct shm_con *sc = priv;
    if (*len < sizeof(struct shm_blob)) return -ENOSPC;

    long page = sysconf(_SC_PAGESIZE);
    size_t size = SEG_HDR_LEN + shm_ring_size(ring_slots, ring_dsize);
    size = (size + (size_t)page - 1) & ~((size_t)page - 1);
    int rc = shm_seg_create(&sc->mine, seg_kind, size);
    if (rc) {
        pscom_plugin_log(4, "shm: %s: cannot create a %zu-byte %s segment: "
                         "%s", pscom_plugin_con_str(con), size,
                         shm_seg_kind_str(seg_kind), strerror(-rc));
        return rc;
    }
    sc->fd = -1;
    uint8_t *base = sc->mine.base;
    struct seg_hdr *h = (struct seg_hdr *)base;
    *h = (struct seg_hdr){.magic = SEG_MAGIC, .cookie = new_cookie(),
                          .version = SEG_VERSION, .slots = ring_slots,
                          .dsize = ring_dsize, .size = size,
                          .pid = (int32_t)getpid()};
    shm_ring_format(base + SEG_HDR_LEN, ring_slots, ring_dsize);
    shm_rx_init(&sc->rx, base + SEG_HDR_LEN, ring_slots, ring_dsize);
    shm_seg_prefault(&sc->mine, 0,
                     SEG_HDR_LEN + shm_ring_size(ring_slots, 0));
    sc->my_hdr = h;

    struct shm_blob b = {.magic = BLOB_MAGIC, .version = SEG_VERSION,
                         .kind = (uint16_t)sc->mine.kind, .pid = h->pid,
                         .id = sc->mine.id, .size = size, .cookie = h->cookie};
    memcpy(blob, &b, sizeof(b));
    *len = sizeof(b);
    return 0;
}

static int shm_hs_connect(pscom_plugin_con_t *con, void *priv, const void *blob,
                          size_t len)
{
    struct shm_con *sc = priv;
    struct shm_blob b;
    const char *why;
    int rc;

    if (len != sizeof(b)) {
        why = "malformed handshake blob";
        rc = -EPROTO;
        goto fail;
    }
    memcpy(&b, blob, sizeof(b));
    if (b.magic != BLOB_MAGIC || b.version != SEG_VERSION) {
        why = "unknown handshake blob version";
        rc = -EPROTO;
        goto fail;
    }
    /* Rendezvous pulls and one-sided operations read and write the
     * memory of the process the blob names: it must be the one the
     * pre-connection handshake connected us to. */
    pid_t peer = pscom_plugin_con_peer_pid(con);
    if (b.pid <= 0 || (peer > 0 && b.pid != peer)) {
        why = "the handshake blob names another process than the peer";
        rc = -EPROTO;
        goto fail;
    }
    rc = shm_seg_attach(&sc->peer, (enum shm_seg_kind)b.kind, b.pid, b.id,
                        (size_t)b.size);
    if (rc < 0) {
        why = "cannot map the peer's segment";
        goto fail;
    }
    bool pid_unknown = rc == 1;
    /* One copy of the header, checked and then used: the peer can still
     * write its segment, and a geometry it changed after our check would
     * make us write past the mapping. */
    struct seg_hdr h;
    memcpy(&h, sc->peer.base, offsetof(struct seg_hdr, no_cma));
    if (h.magic != SEG_MAGIC || h.version != SEG_VERSION ||
        h.cookie != b.cookie || h.size != b.size ||
        !shm_ring_geometry_ok(h.slots, h.dsize) ||
        SEG_HDR_LEN + shm_ring_size(h.slots, h.dsize) > h.size) {
        why = "the peer's segment is not what the handshake described";
        rc = -EPROTO;
        goto unmap;
    }
    sc->peer_hdr = sc->peer.base;
    sc->peer_pid = b.pid;
    if (pid_unknown) {
        /* Nothing by cross-memory attach to a process we cannot check:
         * neither our pulls nor one-sided operations (their keys name a
         * pid other than 0), and the peer describes no buffers to us. */
        pscom_plugin_log(4, "shm: %s: the peer's segment was made outside "
                         "our process namespace; no single-copy transfers "
                         "on this connection", pscom_plugin_con_str(con));
        sc->peer_pid = 0;
        sc->no_pull = true;
        atomic_store_explicit(&sc->peer_hdr->no_cma, 1, memory_order_relaxed);
    }
    shm_tx_init(&sc->tx, (uint8_t *)sc->peer.base + SEG_HDR_LEN, h.slots,
                h.dsize, cfg_chunk);
    shm_seg_prefault(&sc->peer, 0, SEG_HDR_LEN + shm_ring_size(h.slots, 0));
    return 0;

unmap:
    shm_seg_release(&sc->peer);
fail:
    pscom_plugin_log(4, "shm: %s: %s (%s); falling back to the next "
                     "transport", pscom_plugin_con_str(con), why,
                     strerror(-rc));
    return rc;
}

static void shm_hs_abort(pscom_plugin_con_t *con, void *priv)
{
    release_segments(priv);
}

/* ---------------------------------------------------------------------- */
/* Receiving                                                              */
/* ---------------------------------------------------------------------- */

static void set_flags(struct shm_con *sc, uint32_t set, uint32_t clear)
{
    if (sc->dead && set) return;
    struct shm_poll *e = &polls[sc->idx];
    e->flags = (e->flags & ~clear) | set;
}

static void set_blocked(struct shm_con *sc, bool on)
{
    sc->tx_blocked = on;
    if (on)
        set_flags(sc, POLL_TX_BLOCKED, 0);
    else
        set_flags(sc, 0, POLL_TX_BLOCKED);
}

/* The core said stop: no more upcalls for this connection. */
static void stop(struct shm_con *sc)
{
    if (sc->dead) return;
    sc->dead = true;
    struct shm_poll *e = &polls[sc->idx];
    e->hdr = &never_ready;
    e->expect = 1;
    e->flags = 0;
}

/* Hand one slot's bytes to the core. 0, or -1: the connection is closing. */
static int deliver(struct shm_con *sc, const uint8_t *p, size_t len, bool ext)
{
    pscom_plugin_con_t *con = sc->con;
    if (!ext) return pscom_plugin_rx_push(con, p, len);
    while (len) {
        void *dst;
        size_t d = pscom_plugin_rx_direct(con, &dst);
        if (!d) return pscom_plugin_rx_push(con, p, len);
        if (d > len) d = len;
        memcpy(dst, p, d);
        if (pscom_plugin_rx_direct_done(con, d)) return -1;
        p += d;
        len -= d;
    }
    return 0;
}

/* Deliver up to `budget` published slots. 1 if something was delivered,
 * 0 if nothing, -1 when the connection stopped. */
static int __attribute__((noinline)) drain(struct shm_con *sc, unsigned budget)
{
    struct shm_rx *rx = &sc->rx;
    uint64_t hdr;
    bool unreleased = false;
    int did = 0;

    if (sc->busy || sc->dead) return 0;
    sc->busy = true;
    while (budget-- && shm_rx_ready(rx, &hdr)) {
        size_t len;
        const uint8_t *p = shm_rx_bytes(rx, hdr, &len);
        if (!p) {
            sc->busy = false;
            pscom_plugin_log(1, "shm: %s: slot %llu of the receive ring is "
                             "out of bounds (header 0x%016llx); the peer is "
                             "broken", pscom_plugin_con_str(sc->con),
                             (unsigned long long)rx->head,
                             (unsigned long long)hdr);
            pscom_plugin_con_error(sc->con, PSCOM_OP_READ, PSCOM_ERR_IOERROR,
                                   "shm ring", EPROTO);
            stop(sc);
            return -1;
        }
        bool ext = hdr & SHM_SLOT_EXTERN;
        did = 1;
        int rc = deliver(sc, p, len, ext);
        shm_rx_consume(rx, hdr);
        if (rc) {
            sc->busy = false;
            stop(sc);
            return -1;
        }
        if (ext) {
            /* Give long chunks back at once: the sender is waiting. */
            shm_rx_release(rx);
            unreleased = false;
        } else {
            unreleased = true;
        }
    }
    if (unreleased) shm_rx_release_lazy(rx);
    struct shm_poll *e = &polls[sc->idx];
    e->hdr = shm_rx_next_hdr(rx);
    e->expect = shm_seq(rx->head);
    sc->busy = false;
    return did;
}

/* The peer's socket ended: deliver what it wrote before, then fail. */
static void finish_hup(struct shm_con *sc)
{
    if (sc->busy || sc->dead) return;
    /* What the peer wrote before it went is at most one ring: a peer that
     * goes on writing after closing its end is not waited for. */
    drain(sc, sc->rx.mask + 1);
    if (sc->dead) return;
    pscom_plugin_con_error(sc->con, PSCOM_OP_READ, PSCOM_ERR_EOF, "shm peer", 0);
    stop(sc);
}

static void on_fd(int fd, uint32_t events, void *arg)
{
    struct shm_con *sc = arg;
    if (!(events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))) {
        char buf[64];
        ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EINTR))) return;
    }
    /* Level-triggered HUP would fire every round: stop watching. */
    pscom_plugin_fd_del(fd);
    sc->fd_watched = false;
    set_flags(sc, POLL_HUP, 0);
    finish_hup(sc);
}

/* ---------------------------------------------------------------------- */
/* Sending                                                                */
/* ---------------------------------------------------------------------- */

static void shm_tx_kick(pscom_plugin_con_t *con, void *priv)
{
    struct shm_con *sc = priv;
    struct iovec iov[IOV_BATCH];
    size_t total;

    if (sc->dead) return;
    /* Frames queued by callbacks during tx_done come through nested kicks,
     * which flag the connection again if the ring is full. */
    if (sc->tx_blocked) set_blocked(sc, false);
    for (;;) {
        int cnt = pscom_plugin_tx_peek(con, iov, IOV_BATCH, &total);
        if (!cnt) return;
        size_t n = shm_tx_write(&sc->tx, iov, cnt, total);
        if (n < total) set_blocked(sc, true);
        if (n && pscom_plugin_tx_done(con, n)) {
            stop(sc);
            return;
        }
        /* Everything that was queued is written: no need to look again. */
        if (n < total || cnt < IOV_BATCH) return;
    }
}

/* A frame that fits one slot, with nothing queued: written now, or left to
 * the queue when the ring is full. */
static int shm_tx_now(pscom_plugin_con_t *con, void *priv,
                      const struct iovec *iov, int iovcnt)
{
    struct shm_con *sc = priv;
    size_t total = iov[0].iov_len + (iovcnt > 1 ? iov[1].iov_len : 0);
    if (total > SHM_SLOT_INLINE || sc->dead || sc->tx_blocked) return 0;
    return shm_tx_write(&sc->tx, iov, iovcnt, total) == total;
}

/* ---------------------------------------------------------------------- */
/* Progress                                                               */
/* ---------------------------------------------------------------------- */

static int __attribute__((noinline)) attention(struct shm_con *sc, uint32_t flags)
{
    if (flags & POLL_HUP) {
        finish_hup(sc);
        return 1;
    }
    if ((flags & POLL_TX_BLOCKED) && shm_tx_room_changed(&sc->tx)) {
        shm_tx_kick(sc->con, sc);
        return 1;
    }
    return 0;
}

static int shm_progress(void)
{
    int did = 0;
    struct shm_poll *p = polls;
    unsigned n = npolls;

    for (unsigned i = 0; i < n; i++) {
        uint64_t h = atomic_load_explicit(p[i].hdr, memory_order_acquire);
        if ((uint32_t)(h >> 32) == p[i].expect) {
            did |= drain(p[i].sc, ring_slots) > 0;
            /* A callback may have opened a connection and moved the
             * array. Connections are closed only outside of progress. */
            p = polls;
            n = npolls;
        }
        if (p[i].flags) {
            did |= attention(p[i].sc, p[i].flags);
            p = polls;
            n = npolls;
        }
    }
    return did;
}

/* ---------------------------------------------------------------------- */
/* Opening and closing                                                    */
/* ---------------------------------------------------------------------- */

static int shm_open(pscom_plugin_con_t *con, void *priv, int fd)
{
    struct shm_con *sc = priv;

    if (npolls == polls_cap) {
        unsigned cap = polls_cap ? 2 * polls_cap : 16;
        struct shm_poll *n = realloc(polls, cap * sizeof(*n));
        if (!n) {
            release_segments(sc);
            return -ENOMEM;
        }
        polls = n;
        polls_cap = cap;
    }
    sc->con = con;
    sc->fd = fd;
    /* Both sides have mapped both segments by now (the handshake's last
     * record follows the peer's hs_connect). */
    shm_seg_handed_over(&sc->mine);
    if (pscom_plugin_fd_add(fd, EPOLLIN | EPOLLRDHUP, 0, on_fd, sc)) {
        release_segments(sc);
        return -EIO;
    }
    sc->fd_watched = true;
    sc->idx = npolls++;
    polls[sc->idx] = (struct shm_poll){.hdr = shm_rx_next_hdr(&sc->rx),
                                       .expect = shm_seq(sc->rx.head),
                                       .sc = sc};
    return 1; /* keep the socket: its end tells us the peer is gone */
}

static void shm_close(pscom_plugin_con_t *con, void *priv)
{
    struct shm_con *sc = priv;
    if (sc->fd < 0) return;
    unsigned last = --npolls;
    if (sc->idx != last) {
        polls[sc->idx] = polls[last];
        polls[sc->idx].sc->idx = sc->idx;
    }
    if (sc->fd_watched) pscom_plugin_fd_del(sc->fd);
    close(sc->fd);
    sc->fd = -1;
    sc->dead = true;
    /* The core fails the rendezvous sends the peer has not pulled after
     * this: before their buffers can be written again, the peer learns
     * that its pulls can no longer be trusted. */
    if (sc->peer_hdr)
        atomic_store_explicit(&sc->peer_hdr->pulls_revoked, 1,
                              memory_order_seq_cst);
    atomic_thread_fence(memory_order_seq_cst);
    release_segments(sc);
}

/* ---------------------------------------------------------------------- */
/* Rendezvous: single copy with process_vm_readv                          */
/* ---------------------------------------------------------------------- */

static size_t shm_rndv_describe(pscom_plugin_con_t *con, void *priv,
                                const void *data, size_t len, void *blob)
{
    struct shm_con *sc = priv;
    if (len < cfg_cma || cma_denied || sc->no_pull ||
        atomic_load_explicit(&sc->my_hdr->no_cma, memory_order_relaxed))
        return 0;
    struct cma_blob b = {.addr = (uint64_t)(uintptr_t)data, .len = len,
                         .pid = (int32_t)getpid(), .magic = BLOB_MAGIC};
    memcpy(blob, &b, sizeof(b));
    return sizeof(b);
}

/* Copy len bytes between our buffer `local` and address `remote` of
 * process pid (write: to it), going on after partial copies. 0, or -errno
 * of the failing call. */
static int cma_move(pid_t pid, void *local, uint64_t remote, size_t len,
                    bool write)
{
    size_t done = 0;
    while (done < len) {
        struct iovec l = {(char *)local + done, len - done};
        struct iovec r = {(void *)(uintptr_t)(remote + done), len - done};
        ssize_t n = write ? process_vm_writev(pid, &l, 1, &r, 1, 0)
                          : process_vm_readv(pid, &l, 1, &r, 1, 0);
        if (n > 0) {
            done += (size_t)n;
            continue;
        }
        int e = n < 0 ? errno : EIO;
        if (e != EINTR) return -e;
    }
    return 0;
}

static int shm_rndv_pull(pscom_plugin_con_t *con, void *priv, const void *blob,
                         size_t blob_len, void *dst, size_t len)
{
    struct shm_con *sc = priv;
    struct cma_blob b;

    if (blob_len != sizeof(b)) return -EPROTO;
    memcpy(&b, blob, sizeof(b));
    if (b.magic != BLOB_MAGIC || len > b.len) return -EPROTO;
    if (cma_denied || sc->no_pull) goto tell_peer;
    if (b.pid != sc->peer_pid) {
        /* Only the connected process may be read, whatever a corrupt
         * description says. This body and the later ones of the
         * connection come through the ring. */
        pscom_plugin_log(1, "shm: %s: a rendezvous description names process "
                         "%d, not the peer (%d); this connection streams "
                         "large messages through the ring from now on",
                         pscom_plugin_con_str(con), (int)b.pid,
                         (int)sc->peer_pid);
        sc->no_pull = true;
        goto tell_peer;
    }

    if (atomic_load_explicit(&sc->my_hdr->pulls_revoked,
                             memory_order_acquire))
        return -ECONNRESET;
    int rc = cma_move(b.pid, dst, b.addr, len, false);
    if (!rc) {
        /* Read after the copy: not revoked yet means no byte copied was
         * written again (shm_close). Else the body takes the generic path,
         * which the closed peer no longer serves. */
        atomic_thread_fence(memory_order_seq_cst);
        if (!atomic_load_explicit(&sc->my_hdr->pulls_revoked,
                                  memory_order_acquire))
            return 0;
        pscom_plugin_log(3, "shm: %s: the peer closed while its message "
                         "was pulled; what was copied is dropped",
                         pscom_plugin_con_str(con));
        return -ECONNRESET;
    }
    int e = -rc;
    if (e == EPERM || e == ENOSYS) {
        cma_denied = true;
        pscom_plugin_log(4, "shm: process_vm_readv from pid %d: %s; "
                         "single-copy (CMA) transfers are not permitted "
                         "here (ptrace restrictions such as "
                         "kernel.yama.ptrace_scope, a container's seccomp "
                         "profile or missing capabilities); large "
                         "messages are streamed through the shared-memory "
                         "ring instead", (int)b.pid, strerror(e));
    } else {
        sc->no_pull = true;
        pscom_plugin_log(4, "shm: %s: process_vm_readv from pid %d: %s; "
                         "this connection streams large messages through "
                         "the ring from now on",
                         pscom_plugin_con_str(con), (int)b.pid, strerror(e));
    }
    atomic_store_explicit(&sc->peer_hdr->no_cma, 1, memory_order_relaxed);
    return rc;

tell_peer:
    atomic_store_explicit(&sc->peer_hdr->no_cma, 1, memory_order_relaxed);
    return cma_denied ? -EPERM : -EIO;
}

/* ---------------------------------------------------------------------- */
/* One-sided put and get with process_vm_writev/readv                     */
/* ---------------------------------------------------------------------- */

/* Any region of this process: peers reach it through our pid. */
static int shm_rma_register(pscom_socket_t *socket, void *addr, size_t len,
                            void *rkey, size_t *rkey_len, void **handle)
{
    struct shm_rkey k = {.magic = RKEY_MAGIC, .pid = (int32_t)getpid()};
    if (*rkey_len < sizeof(k)) return -ENOSPC;
    memcpy(rkey, &k, sizeof(k));
    *rkey_len = sizeof(k);
    *handle = NULL;
    return 0;
}

static int shm_rma_rkey(pscom_plugin_con_t *con, void *priv, const void *rkey,
                        size_t len, void **prkey)
{
    struct shm_con *sc = priv;
    struct shm_rkey k;
    if (cfg_rma == SIZE_MAX) return -ENOTSUP;
    if (len != sizeof(k)) return -EPROTO;
    memcpy(&k, rkey, sizeof(k));
    if (k.magic != RKEY_MAGIC) return -EPROTO;
    if (k.pid != sc->peer_pid) {
        pscom_plugin_log(4, "shm: %s: a remote key of pid %d used on the "
                         "connection to pid %d; its operations go through "
                         "the ring", pscom_plugin_con_str(con), (int)k.pid,
                         (int)sc->peer_pid);
        return -EINVAL;
    }
    if (rma_denied) return -EPERM;
    *prkey = NULL;
    return 0;
}

/* Move the bytes of a put (write) or get; -errno lets the core carry it.
 * A kernel that denies CMA (EPERM) is remembered for the process, a peer
 * that is gone (ESRCH) for the connection; each is said once. */
static int rma_move(pscom_plugin_con_t *con, struct shm_con *sc, void *local,
                    uint64_t raddr, size_t len, bool write)
{
    if (len < cfg_rma) return -ENOTSUP;
    if (rma_denied) return -EPERM;
    if (sc->no_rma) return -ESRCH;
    int rc = cma_move(sc->peer_pid, local, raddr, len, write);
    if (rc == -EPERM || rc == -ENOSYS) {
        rma_denied = true;
        pscom_plugin_log(4, "shm: %s to pid %d: %s; one-sided puts and gets "
                         "cannot copy straight between the processes here "
                         "(ptrace restrictions such as "
                         "kernel.yama.ptrace_scope, a container's seccomp "
                         "profile or missing capabilities) and go through "
                         "the shared-memory ring instead",
                         write ? "process_vm_writev" : "process_vm_readv",
                         (int)sc->peer_pid, strerror(-rc));
    } else if (rc == -ESRCH) {
        sc->no_rma = true;
        pscom_plugin_log(4, "shm: %s: %s to pid %d: %s; one-sided puts and "
                         "gets of this connection go through the ring from "
                         "now on", pscom_plugin_con_str(con),
                         write ? "process_vm_writev" : "process_vm_readv",
                         (int)sc->peer_pid, strerror(-rc));
    }
    return rc;
}

static int shm_rma_put(pscom_plugin_con_t *con, void *priv, void *prkey,
                       const void *src, uint64_t raddr, size_t len,
                       void *token)
{
    return rma_move(con, priv, (void *)src, raddr, len, true);
}

static int shm_rma_get(pscom_plugin_con_t *con, void *priv, void *prkey,
                       void *dst, uint64_t raddr, size_t len, void *token)
{
    return rma_move(con, priv, dst, raddr, len, false);
}

static const pscom_plugin_ops_t shm_ops = {
    .init = shm_init,
    .destroy = shm_destroy,
    .offer = shm_offer,
    .hs_start = shm_hs_start,
    .hs_connect = shm_hs_connect,
    .hs_abort = shm_hs_abort,
    .open = shm_open,
    .close = shm_close,
    .tx_kick = shm_tx_kick,
    .tx_now = shm_tx_now,
    .progress = shm_progress,
    .rndv_describe = shm_rndv_describe,
    .rndv_pull = shm_rndv_pull,
    .rma_register = shm_rma_register,
    .rma_rkey = shm_rma_rkey,
    .rma_put = shm_rma_put,
    .rma_get = shm_rma_get,
};

const pscom_plugin_t pscom_plugin_shm = {
    .api_version = PSCOM_PLUGIN_API_VERSION,
    .name = "shm",
    .con_type = PSCOM_CON_TYPE_SHM,
    .priority = 90,
    .con_priv_size = sizeof(struct shm_con),
    .flags = PSCOM_PLUGIN_LOCAL_ONLY | PSCOM_PLUGIN_SPIN_RELAX,
    .rendezvous = &cfg_rendezvous,
    .fds_per_con = 1, /* the pre-connection socket, watched for the peer's end */
    .ops = &shm_ops,
};
