/*
 * The ucx plugin's logic (plugins/ucx/ucx_plugin.c) with UCX and the core
 * replaced by fakes (fake.h): the handshake blob it sends and what it does
 * with the peer's, the order in which it reports sent frames to the core
 * whatever order UCX completes them in, the queue of arrived messages while
 * a rendezvous body is on its way, when a body goes straight into the
 * receive buffer and when through a buffer of its own, bodies the receiver
 * pulls, messages for unknown connections, malformed messages, broken
 * endpoints and a dead peer, and closing with operations still under way.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "fake.h"
#include "ucx_blob.h"

extern const pscom_plugin_t pscom_plugin_ucx;
void fake_fd_owner(struct psc_con *c);

#define OPS (pscom_plugin_ucx.ops)
#define PEER_SLOT 7
#define PEER_GEN  3
#define RNDV      (64 * 1024) /* the plugin's default threshold */

/* A connection's key: what the peer puts in front of its messages. */
struct key {
    uint32_t slot, gen;
};

/* One connection of the plugin, set up through the handshake. */
struct tcon {
    struct psc_con core;
    void *priv;
    struct key key; /* from its blob */
    int peer_fd;    /* the peer's end of the pre-connection socket */
};

/* PSP_UCX_PEER_ERRORS as this run has it (the test runs with 1 and 0). */
static int peer_errors_setting(void)
{
    const char *v = getenv("PSP_UCX_PEER_ERRORS");
    return !v || atoi(v) != 0;
}

static struct tcon *tcon_open_flags(uint64_t peer_rndv, uint16_t peer_flags)
{
    struct tcon *t = calloc(1, sizeof(*t));
    assert_non_null(t);
    fake_con_init(&t->core);
    t->priv = calloc(1, pscom_plugin_ucx.con_priv_size);
    assert_non_null(t->priv);

    uint8_t blob[4096];
    size_t len = sizeof(blob);
    assert_int_equal(OPS->hs_start(&t->core, t->priv, blob, &len), 0);
    ux_blob_t mine;
    const char *why;
    assert_int_equal(ux_blob_decode(blob, len, &mine, &why), 0);
    assert_int_equal(mine.rndv, RNDV);
    t->key.slot = mine.slot;
    t->key.gen = mine.gen;

    assert_int_equal(mine.flags,
                     peer_errors_setting() ? UX_BLOB_F_PEER_ERRORS : 0);
    ux_blob_t peer = {.flags = peer_flags, .slot = PEER_SLOT, .gen = PEER_GEN,
                      .rndv = peer_rndv, .addr = mine.addr,
                      .addr_len = mine.addr_len};
    uint8_t pblob[4096];
    size_t plen = sizeof(pblob);
    assert_int_equal(ux_blob_encode(&peer, pblob, &plen), 0);
    assert_int_equal(OPS->hs_connect(&t->core, t->priv, pblob, plen), 0);
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    t->peer_fd = sv[1];
    fake_fd_owner(&t->core);
    assert_int_equal(OPS->open(&t->core, t->priv, sv[0]), 1);
    fake_fd_owner(NULL);
    assert_int_equal(t->core.fd_added, 1);
    return t;
}

static struct tcon *tcon_open(uint64_t peer_rndv)
{
    return tcon_open_flags(peer_rndv, UX_BLOB_F_PEER_ERRORS);
}

static void tcon_close(struct tcon *t)
{
    fake_fd_owner(&t->core);
    OPS->close(&t->core, t->priv);
    fake_fd_owner(NULL);
    assert_int_equal(t->core.fd_added, 0);
    if (t->peer_fd >= 0) close(t->peer_fd);
    while (t->core.qn) fake_unqueue(&t->core, 0);
    free(t->priv);
    free(t);
}

static void progress(void)
{
    OPS->progress();
}

/* Progress finds nothing more to do within a few rounds: nothing is under
 * way. */
static bool settles(void)
{
    for (int i = 0; i < 4; i++)
        if (!OPS->progress()) return true;
    return false;
}

/* A small frame as the peer's plugin packs it: slot, the generation's low
 * 16 bits, message type 0, xheader length; the xheader (xlen bytes of
 * fill), the body. Its length. */
static size_t small_frame(uint8_t *out, struct key k, size_t xlen,
                          const void *body, size_t bl, uint8_t fill)
{
    uint16_t gen = (uint16_t)k.gen;
    memcpy(out, &k.slot, 4);
    memcpy(out + 4, &gen, 2);
    out[6] = 0;
    out[7] = (uint8_t)xlen;
    memset(out + 8, fill, xlen);
    memcpy(out + 8 + xlen, body, bl);
    return 8 + xlen + bl;
}

/* The prefix of a small frame the plugin sent to PEER_SLOT/PEER_GEN for a
 * frame with an xheader of xlen bytes. */
static void assert_small_prefix(const uint8_t *d, size_t xlen)
{
    uint32_t slot;
    uint16_t gen;
    memcpy(&slot, d, 4);
    memcpy(&gen, d + 4, 2);
    assert_int_equal(slot, PEER_SLOT);
    assert_int_equal(gen, PEER_GEN);
    assert_int_equal(d[6], 0);
    assert_int_equal(d[7], xlen);
}

/* An AM for t: key, then the frame head (xlen bytes of xheader, body of
 * body_len), as the peer's plugin builds it. */
static size_t am_hdr(uint8_t *out, struct key k, size_t xlen,
                     uint64_t body_len, uint8_t fill)
{
    memcpy(out, &k.slot, 4);
    memcpy(out + 4, &k.gen, 4);
    return 8 + fake_head(out + 8, xlen, body_len, fill);
}

static int am_eager(struct key k, size_t xlen, void *body, size_t len,
                    uint8_t fill)
{
    uint8_t h[512];
    size_t hl = am_hdr(h, k, xlen, len, fill);
    return fake_am(UXW_AM_FRAME, h, hl, body, len, 0);
}

static int am_rndv(struct key k, size_t xlen, void *desc, size_t len,
                   uint8_t fill)
{
    uint8_t h[512];
    size_t hl = am_hdr(h, k, xlen, len, fill);
    return fake_am(UXW_AM_FRAME, h, hl, desc, len, UXW_AM_RNDV);
}

static int setup(void **state)
{
    (void)state;
    fake_wrap_reset();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    /* Every test closes its connections: no worker may be left. */
    assert_int_equal(fw.workers, 0);
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Handshake                                                              */
/* ---------------------------------------------------------------------- */

static void blob_from_hs_start(void **state)
{
    struct tcon *a = tcon_open(RNDV);
    struct tcon *b = tcon_open(RNDV);
    /* One worker for both connections of the socket, distinct keys. */
    assert_int_equal(fw.workers, 1);
    assert_true(a->key.slot != b->key.slot);
    tcon_close(a);
    assert_int_equal(fw.workers, 1);
    tcon_close(b);
    assert_int_equal(fw.workers, 0);
}

/* Peer error-handling mode when either end wants it. */
static void error_mode_is_agreed(void **state)
{
    struct tcon *t = tcon_open_flags(RNDV, UX_BLOB_F_PEER_ERRORS);
    assert_int_equal(fw.ep_peer_errors, 1);
    tcon_close(t);
    t = tcon_open_flags(RNDV, 0);
    assert_int_equal(fw.ep_peer_errors, peer_errors_setting());
    tcon_close(t);
}

static void hs_connect_refuses_bad_blobs(void **state)
{
    struct psc_con *core = malloc(sizeof(*core));
    fake_con_init(core);
    void *priv = calloc(1, pscom_plugin_ucx.con_priv_size);
    uint8_t blob[4096];
    size_t len = sizeof(blob);
    assert_int_equal(OPS->hs_start(core, priv, blob, &len), 0);

    uint8_t bad[64] = {0};
    assert_int_equal(OPS->hs_connect(core, priv, bad, sizeof(bad)), -EPROTO);
    assert_int_equal(OPS->hs_connect(core, priv, NULL, 0), -EPROTO);
    assert_int_equal(OPS->hs_connect(core, priv, blob, len - 1), -EPROTO);
    assert_int_equal(fw.ep_creates, 0);

    /* A good blob whose address UCX cannot reach: refused too. */
    fw.ep_create_result = -6; /* UCS_ERR_UNREACHABLE */
    assert_int_equal(OPS->hs_connect(core, priv, blob, len), -EHOSTUNREACH);
    OPS->hs_abort(core, priv);
    free(priv);
    free(core);
    assert_int_equal(fw.workers, 0);
}

/* ---------------------------------------------------------------------- */
/* Sending                                                                */
/* ---------------------------------------------------------------------- */

static void sends_complete_in_queue_order(void **state)
{
    struct tcon *t = tcon_open(RNDV);
    char b1[100], b2[200];
    memset(b1, 'a', sizeof(b1));
    fake_queue(&t->core, 16, b1, sizeof(b1));
    fake_queue(&t->core, 0, NULL, 0);
    fake_queue(&t->core, 300, b2, sizeof(b2));
    OPS->tx_kick(&t->core, t->priv);
    assert_int_equal(fw.nsends, 3);

    /* Heads as the peer expects them. An eager frame too long for one
     * piece is packed: prefix and xheader, then the body, all data, in
     * two pieces (the body is not copied). */
    assert_int_equal(fw.sends[0].id, UXW_AM_FRAME_PACKED);
    assert_int_equal(fw.sends[0].hdr_len, 0);
    assert_int_equal(fw.sends[0].iovcnt, 2);
    assert_int_equal(fw.sends[0].data_len, 8 + 16 + sizeof(b1));
    assert_small_prefix(fw.sends[0].data, 16);
    assert_memory_equal(fw.sends[0].data + 8, t->core.q[0]->head + 8, 16);
    assert_memory_equal(fw.sends[0].data + 8 + 16, b1, sizeof(b1));
    /* The header-only frame is small: its 8-byte prefix as data. */
    assert_int_equal(fw.sends[1].id, UXW_AM_FRAME_PACKED);
    assert_int_equal(fw.sends[1].hdr_len, 0);
    assert_int_equal(fw.sends[1].data_len, 8);
    assert_small_prefix(fw.sends[1].data, 0);
    /* An xheader longer than a prefix announces (255 bytes): the key and
     * the head in the AM header. */
    uint32_t key[2];
    memcpy(key, fw.sends[2].hdr, 8);
    assert_int_equal(key[0], PEER_SLOT);
    assert_int_equal(key[1], PEER_GEN);
    assert_int_equal(fw.sends[2].id, UXW_AM_FRAME);
    assert_int_equal(fw.sends[2].hdr_len, 8 + 8 + 300);
    assert_int_equal(fw.sends[2].data_len, sizeof(b2));

    /* A second kick hands nothing twice. */
    OPS->tx_kick(&t->core, t->priv);
    assert_int_equal(fw.nsends, 3);

    /* UCX finishes the last two first: the core hears nothing yet. */
    fake_send_complete(2, 0);
    fake_send_complete(1, 0);
    progress();
    assert_int_equal(t->core.ndone, 0);
    /* The first: all three, one by one, in order. */
    fake_send_complete(0, 0);
    progress();
    assert_int_equal(t->core.ndone, 3);
    assert_int_equal(t->core.done_calls[0], 8 + 16 + sizeof(b1));
    assert_int_equal(t->core.done_calls[1], 8);
    assert_int_equal(t->core.done_calls[2], 8 + 300 + sizeof(b2));
    assert_int_equal(t->core.qn, 0);
    tcon_close(t);
}

/* A frame UCX takes at once is done for the core at once (tx_kick runs
 * inside a core call, which holds connections open); one behind a frame
 * still under way waits for it: the core learns of frames in order. */
static void immediate_completion_is_reported_at_once(void **state)
{
    struct tcon *t = tcon_open(RNDV);
    fw.send_result = UXW_OK;
    char b[8];
    fake_queue(&t->core, 0, b, sizeof(b));
    OPS->tx_kick(&t->core, t->priv);
    assert_int_equal(fw.nsends, 1);
    assert_int_equal(t->core.ndone, 1);
    assert_int_equal(t->core.done_calls[0], 16);
    assert_int_equal(t->core.qn, 0);

    fw.send_result = UXW_PENDING;
    fake_queue(&t->core, 0, b, sizeof(b));
    OPS->tx_kick(&t->core, t->priv);
    fw.send_result = UXW_OK;
    fake_queue(&t->core, 0, b, 4);
    OPS->tx_kick(&t->core, t->priv);
    assert_int_equal(fw.nsends, 3);
    progress();
    assert_int_equal(t->core.ndone, 1); /* the second holds the third */
    fake_send_complete(1, 0);
    progress();
    assert_int_equal(t->core.ndone, 3);
    assert_int_equal(t->core.done_calls[1], 16);
    assert_int_equal(t->core.done_calls[2], 12);
    assert_true(settles());
    tcon_close(t);
}

static void eager_below_threshold_ucx_choice_above(void **state)
{
    struct tcon *t = tcon_open(RNDV);
    static char small[RNDV - 1], big[RNDV];
    fake_queue(&t->core, 0, small, sizeof(small));
    fake_queue(&t->core, 8, big, sizeof(big));
    OPS->tx_kick(&t->core, t->priv);
    assert_int_equal(fw.nsends, 2);
    assert_int_equal(fw.sends[0].proto, UXW_SEND_EAGER);
    assert_int_equal(fw.sends[1].proto, UXW_SEND_ANY);
    fake_send_complete(0, 0);
    fake_send_complete(1, 0);
    progress();
    assert_int_equal(t->core.ndone, 2);
    tcon_close(t);
}

static void long_head_travels_in_the_data(void **state)
{
    fw.max_am_header = 300; /* frame heads up to 292 bytes fit */
    struct tcon *t = tcon_open(RNDV);
    char b[100];
    memset(b, 'b', sizeof(b));
    /* xheaders longer than a packed frame's: not packed */
    fake_queue(&t->core, 284, b, sizeof(b)); /* head 292: fits */
    fake_queue(&t->core, 285, b, sizeof(b)); /* head 293: does not */
    OPS->tx_kick(&t->core, t->priv);
    assert_int_equal(fw.nsends, 2);
    assert_int_equal(fw.sends[0].id, UXW_AM_FRAME);
    assert_int_equal(fw.sends[1].id, UXW_AM_FRAME_LONG);
    assert_int_equal(fw.sends[1].hdr_len, 8);
    assert_int_equal(fw.sends[1].data_len, 8 + 285 + sizeof(b));
    assert_memory_equal(fw.sends[1].data, t->core.q[1]->head, 293);
    assert_memory_equal(fw.sends[1].data + 293, b, sizeof(b));

    /* And the receiving side of it. */
    uint8_t key[8];
    memcpy(key, &t->key.slot, 4);
    memcpy(key + 4, &t->key.gen, 4);
    uint8_t data[8 + 49 + 10];
    fake_head(data, 49, 10, 0x77);
    memset(data + 57, 'z', 10);
    fake_am(UXW_AM_FRAME_LONG, key, 8, data, sizeof(data), 0);
    progress();
    assert_int_equal(t->core.nmsgs, 1);
    assert_int_equal(t->core.msgs[0].head_len, 57);
    assert_int_equal(t->core.msgs[0].body_len, 10);
    assert_int_equal(t->core.msgs[0].body[9], 'z');

    fake_send_complete(0, 0);
    fake_send_complete(1, 0);
    progress();
    tcon_close(t);
}

/* Arrivals run by fw.in_progress, for arrive_t. */
static struct tcon *arrive_t;

/* A small frame as the peer packs it (4-byte xheader, body), `offset`
 * bytes into an aligned buffer of UCX's. */
static void arrive_packed_at(size_t offset, const char *body)
{
    uint8_t d[128] __attribute__((aligned(8)));
    size_t n = small_frame(d + offset, arrive_t->key, 4, body, strlen(body),
                           0x21);
    assert_int_equal(fake_am(UXW_AM_FRAME_PACKED, NULL, 0, d + offset, n, 0),
                     UXW_AM_DONE);
}

static void arrive_small(void)
{
    arrive_packed_at(0, "first");
}

static void arrive_small_unaligned(void)
{
    arrive_packed_at(1, "odd");
}

/* An eager frame with its head in the AM header and its body as data. */
static void arrive_eager(void)
{
    char b[] = "eager";
    assert_int_equal(am_eager(arrive_t->key, 4, b, 5, 0x22), UXW_AM_DONE);
}

/* A rendezvous announcement: its body is UCX's to fetch. */
static char arrive_desc;
static void arrive_rndv(void)
{
    assert_int_equal(am_rndv(arrive_t->key, 4, &arrive_desc, 100, 0x24),
                     UXW_AM_KEEP);
}

/* One the core does not take at once (no receive posted for it yet), then
 * a small one it would take. */
static void arrive_refused_then_small(void)
{
    arrive_t->core.take_now = false;
    arrive_eager();
    arrive_t->core.take_now = true;
    arrive_packed_at(0, "behind");
}

/* The i-th message the core got: handed over from the callback or not,
 * and its body. */
static void assert_msg(const struct psc_con *c, int i, bool now,
                       const char *body)
{
    assert_true(c->nmsgs > i);
    assert_int_equal(c->msgs[i].now, now);
    assert_int_equal(c->msgs[i].body_len, strlen(body));
    assert_memory_equal(c->msgs[i].body, body, strlen(body));
}

/* One round of the plugin's progress with `arrive` run inside UCX's
 * progress; then c has nmsgs messages. */
static void progress_with(void (*arrive)(void), const struct psc_con *c,
                          int nmsgs)
{
    fw.in_progress = arrive;
    progress();
    assert_int_equal(c->nmsgs, nmsgs);
}

static void message_to_the_core_from_the_callback(void **state)
{
    (void)state;
    struct tcon *t = tcon_open(RNDV);
    struct psc_con *c = &t->core;
    arrive_t = t;
    c->take_now = true;

    /* Inside UCX's progress, nothing of the connection waiting: handed to
     * the core from the callback. */
    progress_with(arrive_small, c, 1);
    assert_msg(c, 0, true, "first");
    assert_int_equal(c->msgs[0].head_len, 12);

    /* From an odd place in UCX's buffer: the header is rebuilt in an
     * aligned one (the fake core checks the alignment). */
    progress_with(arrive_small_unaligned, c, 2);
    assert_msg(c, 1, true, "odd");

    /* A frame with its head in the AM header (not a small one): through
     * the queue. */
    progress_with(arrive_eager, c, 3);
    assert_msg(c, 2, false, "eager");
    assert_int_equal(c->msgs[2].head_len, 12);

    /* Behind a message that waits for the dispatch: in order, both through
     * the queue. */
    progress_with(arrive_refused_then_small, c, 5);
    assert_msg(c, 3, false, "eager");
    assert_msg(c, 4, false, "behind");

    /* Behind a send UCX finished, whose report waits for the dispatch: the
     * report first, then the message, through the queue. */
    char b[8] = "payload";
    fake_queue(c, 4, b, sizeof(b));
    OPS->tx_kick(c, t->priv);
    assert_int_equal(fw.nsends, 1);
    fake_send_complete(0, 0);
    assert_int_equal(c->qn, 1);
    progress_with(arrive_small, c, 6);
    assert_int_equal(c->qn, 0);
    assert_msg(c, 5, false, "first");

    /* A callback outside the plugin's progress (UCX progressed for another
     * reason): recorded, delivered by the next progress. */
    arrive_small();
    assert_int_equal(c->nmsgs, 6);
    progress();
    assert_int_equal(c->nmsgs, 7);
    assert_msg(c, 6, false, "first");

    /* The core does not take it (no receive posted for it): through the
     * queue, unchanged. */
    c->take_now = false;
    progress_with(arrive_small, c, 8);
    assert_msg(c, 7, false, "first");

    /* A rendezvous body is never handed over from the callback: UCX
     * fetches it first. */
    c->take_now = true;
    static char src[100];
    memset(src, 'V', sizeof(src));
    progress_with(arrive_rndv, c, 8);
    assert_int_equal(fw.nrecvs, 1);
    fake_recv_complete(0, src, 0);
    progress();
    assert_int_equal(c->nmsgs, 9);
    assert_false(c->msgs[8].now);
    assert_int_equal(c->msgs[8].body_len, sizeof(src));
    assert_memory_equal(c->msgs[8].body, src, sizeof(src));
    assert_true(settles());
    tcon_close(t);
}

/* A malformed small frame for t: no message, the connection fails; t is
 * closed. */
static void small_frame_fails(struct tcon *t, uint8_t *d, size_t n)
{
    int nmsgs = t->core.nmsgs;
    assert_int_equal(fake_am(UXW_AM_FRAME_PACKED, NULL, 0, d, n, 0),
                     UXW_AM_DONE);
    progress();
    assert_int_equal(t->core.nmsgs, nmsgs);
    assert_int_equal(t->core.errors, 1);
    tcon_close(t);
}

static void small_frames_are_packed(void **state)
{
    struct tcon *t = tcon_open(RNDV);
    char b[8] = "payload";
    fake_queue(&t->core, 4, b, sizeof(b));
    OPS->tx_kick(&t->core, t->priv);
    assert_int_equal(fw.nsends, 1);
    struct fake_send *s = &fw.sends[0];
    assert_int_equal(s->id, UXW_AM_FRAME_PACKED);
    assert_int_equal(s->hdr_len, 0);
    assert_int_equal(s->proto, UXW_SEND_EAGER);
    /* The key and the header (16 bytes) become an 8-byte prefix. */
    assert_int_equal(s->data_len, 8 + 4 + sizeof(b));
    assert_small_prefix(s->data, 4);
    assert_memory_equal(s->data + 8, t->core.q[0]->head + 8, 4);
    assert_memory_equal(s->data + 12, b, sizeof(b));
    fake_send_complete(0, 0);
    progress();
    assert_int_equal(t->core.ndone, 1);

    /* Receiving one: the header rebuilt in front of the xheader. */
    uint8_t d[64], want[16];
    size_t n = small_frame(d, t->key, 4, "hello", 5, 0x33);
    assert_int_equal(fake_am(UXW_AM_FRAME_PACKED, NULL, 0, d, n, 0),
                     UXW_AM_DONE);
    progress();
    assert_int_equal(t->core.nmsgs, 1);
    assert_int_equal(t->core.msgs[0].head_len, fake_head(want, 4, 5, 0x33));
    assert_memory_equal(t->core.msgs[0].head, want, 12);
    assert_int_equal(t->core.msgs[0].body_len, 5);
    assert_memory_equal(t->core.msgs[0].body, "hello", 5);

    /* Shorter than the prefix, or announced as rendezvous: dropped. An
     * xheader longer than the frame: the connection fails. */
    assert_int_equal(fake_am(UXW_AM_FRAME_PACKED, NULL, 0, d, 7, 0),
                     UXW_AM_DONE);
    assert_int_equal(fake_am(UXW_AM_FRAME_PACKED, NULL, 0, d, n, UXW_AM_RNDV),
                     UXW_AM_DONE);
    progress();
    assert_int_equal(t->core.nmsgs, 1);
    assert_int_equal(t->core.errors, 0);
    d[7] = (uint8_t)(n - 8 + 1);
    small_frame_fails(t, d, n);

    /* The longest xheader a prefix announces (255 bytes): the head is
     * rebuilt whole. */
    t = tcon_open(RNDV);
    uint8_t big[300];
    n = small_frame(big, t->key, 255, "x", 1, 0x55);
    assert_int_equal(fake_am(UXW_AM_FRAME_PACKED, NULL, 0, big, n, 0),
                     UXW_AM_DONE);
    progress();
    assert_int_equal(t->core.nmsgs, 1);
    uint8_t want_big[8 + 255];
    assert_int_equal(t->core.msgs[0].head_len,
                     fake_head(want_big, 255, 1, 0x55));
    assert_memory_equal(t->core.msgs[0].head, want_big, sizeof(want_big));
    assert_int_equal(t->core.msgs[0].body_len, 1);
    assert_int_equal(t->core.errors, 0);
    tcon_close(t);
}

/* A packed frame of a few KiB as the peer sends it, arriving inside UCX's
 * progress (progress_with): xheader of 4 bytes, a body of arrive_len bytes
 * of 'P', as data UCX would let us keep. */
static size_t arrive_len;
static uint8_t arrive_buf[8 + 4 + 6000];
static int arrive_ret;
static void arrive_packed_big(void)
{
    static char body[6000];
    memset(body, 'P', arrive_len);
    size_t n = small_frame(arrive_buf, arrive_t->key, 4, body, arrive_len,
                           0x66);
    arrive_ret = fake_am(UXW_AM_FRAME_PACKED, NULL, 0, arrive_buf, n,
                         UXW_AM_KEEPABLE);
}

/* The body of message i: len bytes of 'P'. */
static void assert_packed_body(const struct psc_con *c, int i, size_t len)
{
    uint8_t want[8 + 4];
    assert_int_equal(c->msgs[i].head_len, fake_head(want, 4, len, 0x66));
    assert_memory_equal(c->msgs[i].head, want, sizeof(want));
    assert_int_equal(c->msgs[i].body_len, len);
    for (size_t k = 0; k < len; k++) assert_int_equal(c->msgs[i].body[k], 'P');
}

/* Longer packed frames arrive as the small ones do: to the core from the
 * callback when a receive takes them; else copied, or kept by UCX when
 * longer than a pooled entry, and given back at the address UCX gave. */
static void packed_frames_of_a_few_kib_arrive(void **state)
{
    (void)state;
    struct tcon *t = tcon_open(RNDV);
    struct psc_con *c = &t->core;
    arrive_t = t;

    c->take_now = true;
    arrive_len = 1000;
    progress_with(arrive_packed_big, c, 1);
    assert_int_equal(arrive_ret, UXW_AM_DONE);
    assert_true(c->msgs[0].now);
    assert_packed_body(c, 0, 1000);

    c->take_now = false;
    progress_with(arrive_packed_big, c, 2);
    assert_int_equal(arrive_ret, UXW_AM_DONE); /* copied */
    assert_false(c->msgs[1].now);
    assert_packed_body(c, 1, 1000);

    arrive_len = 6000;
    progress_with(arrive_packed_big, c, 3);
    assert_int_equal(arrive_ret, UXW_AM_KEEP);
    assert_false(c->msgs[2].now);
    assert_packed_body(c, 2, 6000);
    assert_int_equal(fw.releases, 1);
    assert_ptr_equal(fw.released, arrive_buf);
    tcon_close(t);
}

/* tx_now with a frame too long to pack into one piece: sent as tx_kick
 * would send it. Done (1) when UCX took it at once. When UCX keeps it, 0:
 * the core queues it, tx_kick does not send it again, and the core learns
 * it is done once UCX is. A header that disagrees with the body: 0,
 * nothing sent. */
static void larger_frame_sent_now_or_kept(void **state)
{
    (void)state;
    struct tcon *t = tcon_open(RNDV);
    static char b[1000];
    memset(b, 'L', sizeof(b));
    uint8_t head[64];
    size_t hl = fake_head(head, 4, sizeof(b), 0x48);
    struct iovec iov[2] = {{head, hl}, {b, sizeof(b)}};

    fw.send_result = UXW_OK;
    assert_int_equal(OPS->tx_now(&t->core, t->priv, iov, 2), 1);
    assert_int_equal(fw.nsends, 1);
    assert_int_equal(fw.sends[0].id, UXW_AM_FRAME_PACKED);
    assert_int_equal(fw.sends[0].data_len, 8 + 4 + sizeof(b));
    assert_memory_equal(fw.sends[0].data + 12, b, sizeof(b));
    assert_true(settles());
    assert_int_equal(t->core.ndone, 0); /* the core completes it itself */

    /* The header says 999 bytes of body, the frame has 1000. */
    uint8_t bad[64];
    struct iovec biov[2] = {{bad, fake_head(bad, 4, sizeof(b) - 1, 0x49)},
                            {b, sizeof(b)}};
    assert_int_equal(OPS->tx_now(&t->core, t->priv, biov, 2), 0);
    assert_int_equal(fw.nsends, 1);

    /* UCX keeps it. */
    fw.send_result = UXW_PENDING;
    struct fake_frame *f = fake_queue(&t->core, 4, b, sizeof(b));
    struct iovec qiov[2] = {{f->head, f->head_len}, {b, sizeof(b)}};
    assert_int_equal(OPS->tx_now(&t->core, t->priv, qiov, 2), 0);
    assert_int_equal(fw.nsends, 2);
    OPS->tx_kick(&t->core, t->priv);
    assert_int_equal(fw.nsends, 2); /* not twice */
    progress();
    assert_int_equal(t->core.ndone, 0);
    fake_send_complete(1, 0);
    progress();
    assert_int_equal(t->core.ndone, 1);
    assert_int_equal(t->core.done_calls[0], hl + sizeof(b));
    assert_int_equal(t->core.qn, 0);
    tcon_close(t);
}

/* tx_now: a small frame goes out packed only if UCX copies it at once
 * (no op to wait for, nothing for the core to complete later); otherwise,
 * and behind frames in UCX's hands, it is left to the queue. */
static void small_frame_sent_now_or_left_to_the_queue(void **state)
{
    struct tcon *t = tcon_open(RNDV);
    uint8_t head[64];
    char b[8] = "payload";
    size_t hl = fake_head(head, 4, sizeof(b), 0x44);
    struct iovec iov[2] = {{head, hl}, {b, sizeof(b)}};

    fw.send_result = UXW_OK;
    assert_int_equal(OPS->tx_now(&t->core, t->priv, iov, 2), 1);
    assert_int_equal(fw.nsends, 1);
    struct fake_send *s = &fw.sends[0];
    assert_int_equal(s->id, UXW_AM_FRAME_PACKED);
    assert_null(s->op);
    assert_false(s->pending);
    assert_int_equal(s->data_len, hl + sizeof(b)); /* prefix for header */
    assert_small_prefix(s->data, 4);
    assert_memory_equal(s->data + 8, head + 8, 4);
    assert_memory_equal(s->data + 12, b, sizeof(b));
    assert_true(settles());
    assert_int_equal(t->core.ndone, 0); /* the core completes it itself */

    /* A head alone. */
    uint8_t head0[16];
    struct iovec iov0 = {head0, fake_head(head0, 4, 0, 0x45)};
    assert_int_equal(OPS->tx_now(&t->core, t->priv, &iov0, 1), 1);
    assert_int_equal(fw.sends[1].data_len, 8 + 4);

    /* A head whose body is not all there (the prefix could not say so):
     * left to the queue. */
    assert_int_equal(OPS->tx_now(&t->core, t->priv, iov, 1), 0);
    assert_int_equal(fw.nsends, 2);

    /* UCX has no room: nothing sent. */
    fw.send_result = UXW_PENDING;
    assert_int_equal(OPS->tx_now(&t->core, t->priv, iov, 2), 0);
    assert_int_equal(fw.nsends, 2);

    /* A queued frame in UCX's hands: the next waits behind it. */
    fake_queue(&t->core, 0, b, sizeof(b));
    OPS->tx_kick(&t->core, t->priv);
    assert_int_equal(fw.nsends, 3);
    fw.send_result = UXW_OK;
    assert_int_equal(OPS->tx_now(&t->core, t->priv, iov, 2), 0);
    assert_int_equal(fw.nsends, 3);
    fake_send_complete(2, 0);
    progress();
    assert_int_equal(t->core.ndone, 1);

    /* Too large to travel packed. */
    static char big[256];
    struct iovec biov[2] = {{head, hl}, {big, sizeof(big)}};
    assert_int_equal(OPS->tx_now(&t->core, t->priv, biov, 2), 0);
    assert_int_equal(fw.nsends, 3);
    tcon_close(t);
}

static void cancelled_frame_is_skipped(void **state)
{
    struct tcon *t = tcon_open(RNDV);
    char b[4];
    fake_queue(&t->core, 0, b, sizeof(b));
    fake_queue(&t->core, 0, b, sizeof(b));
    fake_queue(&t->core, 0, b, sizeof(b));
    OPS->tx_kick(&t->core, t->priv);
    assert_int_equal(fw.nsends, 3);
    /* The application cancels the middle send after it went to UCX. */
    fake_unqueue(&t->core, 1);
    /* A new frame: handed once, the others not again. */
    fake_queue(&t->core, 0, b, sizeof(b));
    OPS->tx_kick(&t->core, t->priv);
    assert_int_equal(fw.nsends, 4);
    for (int i = 0; i < 4; i++) fake_send_complete(i, 0);
    progress();
    assert_int_equal(t->core.ndone, 3);
    assert_int_equal(t->core.qn, 0);
    tcon_close(t);
}

static void send_error_fails_the_connection(void **state)
{
    struct tcon *t = tcon_open(RNDV);
    char b[4];
    fake_queue(&t->core, 0, b, sizeof(b));
    fake_queue(&t->core, 0, b, sizeof(b));
    OPS->tx_kick(&t->core, t->priv);
    fake_send_complete(0, 0);
    fake_send_complete(1, -25); /* connection reset */
    progress();
    assert_int_equal(t->core.ndone, 1); /* the good one first */
    assert_int_equal(t->core.errors, 1);
    assert_int_equal(t->core.err_op, PSCOM_OP_WRITE);
    assert_int_equal(t->core.err, PSCOM_ERR_EOF);
    /* Nothing more after the error. */
    fake_queue(&t->core, 0, b, sizeof(b));
    OPS->tx_kick(&t->core, t->priv);
    assert_int_equal(fw.nsends, 2);
    progress();
    assert_int_equal(t->core.errors, 1);
    tcon_close(t);
    assert_int_equal(fw.ep_close_force, 1);
}

/* ---------------------------------------------------------------------- */
/* Receiving                                                              */
/* ---------------------------------------------------------------------- */

static void eager_messages_arrive_in_order(void **state)
{
    struct tcon *t = tcon_open(RNDV);
    char small[8] = "abcdefg";
    static char mid[2000], big[8000];
    memset(mid, 'M', sizeof(mid));
    memset(big, 'B', sizeof(big));
    assert_int_equal(am_eager(t->key, 4, small, sizeof(small), 1), UXW_AM_DONE);
    /* Eager data of a few KiB is copied even when UCX would let us keep it
     * (keeping costs UCX more); larger data is kept, not copied. */
    uint8_t h[64];
    size_t hl = am_hdr(h, t->key, 0, sizeof(mid), 2);
    assert_int_equal(fake_am(UXW_AM_FRAME, h, hl, mid, sizeof(mid),
                             UXW_AM_KEEPABLE),
                     UXW_AM_DONE);
    hl = am_hdr(h, t->key, 0, sizeof(big), 3);
    assert_int_equal(fake_am(UXW_AM_FRAME, h, hl, big, sizeof(big),
                             UXW_AM_KEEPABLE),
                     UXW_AM_KEEP);
    assert_int_equal(am_eager(t->key, 0, NULL, 0, 4), UXW_AM_DONE);
    assert_int_equal(t->core.nmsgs, 0); /* nothing from inside UCX */
    progress();
    assert_int_equal(t->core.nmsgs, 4);
    assert_memory_equal(t->core.msgs[0].body, small, sizeof(small));
    assert_int_equal(t->core.msgs[0].head_len, 12);
    assert_int_equal(t->core.msgs[1].body_len, sizeof(mid));
    assert_memory_equal(t->core.msgs[1].body, mid, sizeof(mid));
    assert_int_equal(t->core.msgs[2].body_len, sizeof(big));
    assert_memory_equal(t->core.msgs[2].body, big, sizeof(big));
    assert_int_equal(t->core.msgs[3].body_len, 0);
    assert_int_equal(fw.releases, 1); /* the kept data was given back */
    tcon_close(t);
}

static void rendezvous_goes_direct_and_holds_later_messages(void **state)
{
    struct tcon *t = tcon_open(RNDV);
    static char src[RNDV * 2], dst[RNDV * 2];
    memset(src, 'R', sizeof(src));
    t->core.direct_buf = dst;
    t->core.direct_len = sizeof(dst);

    char desc;
    assert_int_equal(am_rndv(t->key, 8, &desc, sizeof(src), 1), UXW_AM_KEEP);
    char e[3] = "xy";
    assert_int_equal(am_eager(t->key, 0, e, sizeof(e), 2), UXW_AM_DONE);
    progress();
    /* The body goes straight to the receive buffer; the eager message
     * behind it waits. */
    assert_int_equal(fw.nrecvs, 1);
    assert_ptr_equal(fw.recvs[0].buf, dst);
    assert_ptr_equal(fw.recvs[0].desc, &desc);
    assert_int_equal(t->core.nmsgs, 0);
    /* While the body moves, progress counts as made (no yielding). */
    assert_int_equal(OPS->progress(), 1);
    assert_int_equal(t->core.nmsgs, 0);

    fake_recv_complete(0, src, 0);
    progress();
    assert_int_equal(t->core.nmsgs, 2);
    assert_int_equal(OPS->progress(), 0);
    assert_int_equal(t->core.msgs[0].body_len, sizeof(src));
    assert_int_equal(t->core.msgs[0].direct, sizeof(src));
    assert_memory_equal(dst, src, sizeof(src));
    assert_int_equal(t->core.msgs[1].body_len, sizeof(e));
    assert_int_equal(fw.releases, 0); /* the descriptor went to the recv */
    tcon_close(t);
}

static void rendezvous_below_peer_threshold_goes_through_a_buffer(void **state)
{
    /* The peer's threshold is 1 MiB: a 64 KiB UCX rendezvous body is an
     * eager message of its core, whose buffer may be the core's own. */
    struct tcon *t = tcon_open(1 << 20);
    static char src[RNDV], dst[RNDV];
    memset(src, 'Q', sizeof(src));
    t->core.direct_buf = dst;
    t->core.direct_len = sizeof(dst);
    char desc;
    am_rndv(t->key, 0, &desc, sizeof(src), 1);
    progress();
    assert_int_equal(fw.nrecvs, 1);
    assert_ptr_not_equal(fw.recvs[0].buf, dst);
    fake_recv_complete(0, src, 0);
    progress();
    assert_int_equal(t->core.nmsgs, 1);
    assert_int_equal(t->core.msgs[0].direct, 0);
    assert_memory_equal(t->core.msgs[0].body, src, sizeof(src));
    tcon_close(t);
}

static void truncated_rendezvous_goes_through_a_buffer(void **state)
{
    struct tcon *t = tcon_open(RNDV);
    static char src[RNDV], dst[100];
    memset(src, 'T', sizeof(src));
    t->core.direct_buf = dst;
    t->core.direct_len = sizeof(dst); /* the receive buffer is smaller */
    char desc;
    am_rndv(t->key, 0, &desc, sizeof(src), 1);
    progress();
    assert_ptr_not_equal(fw.recvs[0].buf, dst);
    fake_recv_complete(0, src, 0);
    progress();
    assert_int_equal(t->core.nmsgs, 1);
    assert_int_equal(t->core.msgs[0].body_len, sizeof(src));
    tcon_close(t);
}

static void rendezvous_done_at_once(void **state)
{
    struct tcon *t = tcon_open(RNDV);
    static char src[RNDV], dst[RNDV];
    memset(src, 'I', sizeof(src));
    t->core.direct_buf = dst;
    t->core.direct_len = sizeof(dst);
    fw.recv_result = UXW_OK; /* the fake copies from desc */
    am_rndv(t->key, 0, src, sizeof(src), 1);
    char e[2] = "e";
    am_eager(t->key, 0, e, sizeof(e), 2);
    progress();
    assert_int_equal(t->core.nmsgs, 2);
    assert_memory_equal(dst, src, sizeof(src));
    tcon_close(t);
}

/* UCX may end an operation inside the call that starts it and still say
 * it is under way (a failing endpoint purges its requests, a new one
 * included): each is reported once, and none stays counted as under way. */
static void operations_ending_inside_their_call(void **state)
{
    (void)state;
    struct tcon *t = tcon_open(RNDV);
    static char src[RNDV], dst[RNDV];
    memset(src, 'n', sizeof(src));
    t->core.direct_buf = dst;
    t->core.direct_len = sizeof(dst);
    fw.end_inside = true;
    char b[8] = "frame";
    fake_queue(&t->core, 0, b, sizeof(b));
    OPS->tx_kick(&t->core, t->priv);
    am_rndv(t->key, 0, src, sizeof(src), 1);
    progress();
    assert_int_equal(t->core.ndone, 1);
    assert_int_equal(t->core.nmsgs, 1);
    assert_memory_equal(dst, src, sizeof(src));
    assert_true(settles());

    /* A body that failed inside the call fails the connection. */
    fw.end_status = -25; /* connection reset */
    am_rndv(t->key, 0, src, sizeof(src), 2);
    assert_true(settles());
    assert_int_equal(t->core.errors, 1);
    assert_int_equal(t->core.err, PSCOM_ERR_EOF);
    tcon_close(t);
}

/* Bodies the core lets go out of line move at the same time, do not hold
 * up the messages behind them, and are reported in the order they end. */
static void rendezvous_bodies_out_of_line_in_any_order(void **state)
{
    struct tcon *t = tcon_open(RNDV);
    static char src[3][RNDV], dst[3 * RNDV];
    for (int i = 0; i < 3; i++) memset(src[i], 'a' + i, RNDV);
    t->core.defer = true;
    t->core.direct_buf = dst;
    t->core.direct_len = sizeof(dst);
    char desc[3];
    for (int i = 0; i < 3; i++)
        assert_int_equal(am_rndv(t->key, 0, &desc[i], RNDV, 1 + i),
                         UXW_AM_KEEP);
    char e[3] = "ok";
    am_eager(t->key, 0, e, sizeof(e), 9);
    progress();
    assert_int_equal(fw.nrecvs, 3);
    for (int i = 0; i < 3; i++) {
        assert_ptr_equal(fw.recvs[i].buf, dst + i * RNDV);
        assert_ptr_equal(fw.recvs[i].desc, &desc[i]);
        assert_true(t->core.msgs[i].deferred);
    }
    assert_int_equal(t->core.nmsgs, 4);
    assert_int_equal(t->core.msgs[3].body_len, sizeof(e));
    assert_int_equal(t->core.ndefer_done, 0);
    assert_int_equal(OPS->progress(), 1); /* data is moving */

    fake_recv_complete(2, src[2], 0);
    progress();
    assert_int_equal(t->core.ndefer_done, 1);
    assert_int_equal(t->core.defer_order[0], 2);
    fake_recv_complete(0, src[0], 0);
    fake_recv_complete(1, src[1], 0);
    progress();
    assert_int_equal(t->core.ndefer_done, 3);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(t->core.msgs[i].defer_err, 0);
        assert_memory_equal(dst + i * RNDV, src[i], RNDV);
    }
    assert_int_equal(OPS->progress(), 0);
    assert_int_equal(t->core.errors, 0);
    assert_int_equal(fw.releases, 0); /* the descriptors went to the recvs */
    tcon_close(t);
}

/* A body the core does not let go out of line (here: no room in the
 * receive buffer, as for a truncated message) is received in line and
 * holds up what comes after it, not what went before. */
static void body_in_line_after_bodies_out_of_line(void **state)
{
    struct tcon *t = tcon_open(RNDV);
    static char src[RNDV], dst[RNDV + 10];
    memset(src, 'z', sizeof(src));
    t->core.defer = true;
    t->core.direct_buf = dst;
    t->core.direct_len = sizeof(dst);
    char d1, d2;
    am_rndv(t->key, 0, &d1, RNDV, 1);
    am_rndv(t->key, 0, &d2, RNDV, 2); /* does not fit what is left */
    char e[3] = "ee";
    am_eager(t->key, 0, e, sizeof(e), 3);
    progress();
    assert_int_equal(fw.nrecvs, 2);
    assert_true(t->core.msgs[0].deferred);
    assert_ptr_not_equal(fw.recvs[1].buf, dst + RNDV); /* our own buffer */
    assert_int_equal(t->core.nmsgs, 1);

    fake_recv_complete(0, src, 0);
    progress();
    assert_int_equal(t->core.ndefer_done, 1);
    assert_int_equal(t->core.nmsgs, 1); /* the eager one still waits */
    fake_recv_complete(1, src, 0);
    progress();
    assert_int_equal(t->core.nmsgs, 3);
    assert_false(t->core.msgs[1].deferred);
    assert_int_equal(t->core.msgs[1].body_len, RNDV);
    assert_int_equal(t->core.msgs[2].body_len, sizeof(e));
    tcon_close(t);
}

/* A body that fails in UCX fails its receive and the connection. */
static void failed_body_out_of_line(void **state)
{
    struct tcon *t = tcon_open(RNDV);
    static char dst[2 * RNDV], src[RNDV];
    t->core.defer = true;
    t->core.direct_buf = dst;
    t->core.direct_len = sizeof(dst);
    char d1, d2;
    am_rndv(t->key, 0, &d1, RNDV, 1);
    am_rndv(t->key, 0, &d2, RNDV, 2);
    progress();
    fake_recv_complete(0, src, -25);
    fake_recv_complete(1, src, 0);
    progress();
    assert_int_equal(t->core.ndefer_done, 2);
    assert_int_not_equal(t->core.msgs[0].defer_err, 0);
    assert_int_equal(t->core.msgs[1].defer_err, 0);
    assert_int_equal(t->core.errors, 1);
    assert_int_equal(t->core.err, PSCOM_ERR_EOF);
    tcon_close(t);
}

/* The endpoint breaks with bodies out of line: the failure is reported at
 * once; what UCX still has ends when the endpoint is dropped, and close()
 * returns only then, without telling the core of them (it fails them). */
static void endpoint_error_with_bodies_out_of_line(void **state)
{
    struct tcon *t = tcon_open(RNDV);
    static char dst[3 * RNDV], src[RNDV];
    memset(src, 's', sizeof(src));
    t->core.defer = true;
    t->core.direct_buf = dst;
    t->core.direct_len = sizeof(dst);
    char d[3];
    for (int i = 0; i < 3; i++) am_rndv(t->key, 0, &d[i], RNDV, 1 + i);
    progress();
    fake_recv_complete(1, src, 0);
    progress();
    assert_int_equal(t->core.ndefer_done, 1);
    fake_ep_error(fake_last_ep(), -25);
    progress();
    assert_int_equal(t->core.errors, 1);
    assert_int_equal(t->core.ndefer_done, 1);

    fw.force_close_status = -16; /* UCX ends them: cancelled */
    tcon_close(t);
    assert_int_equal(fw.ep_close_force, 1);
    assert_false(fw.recvs[0].pending);
    assert_false(fw.recvs[2].pending);
}

static void messages_before_open_wait_for_open(void **state)
{
    struct psc_con *core = malloc(sizeof(*core));
    fake_con_init(core);
    void *priv = calloc(1, pscom_plugin_ucx.con_priv_size);
    uint8_t blob[4096], pblob[4096];
    size_t len = sizeof(blob), plen = sizeof(pblob);
    assert_int_equal(OPS->hs_start(core, priv, blob, &len), 0);
    ux_blob_t mine;
    const char *why;
    assert_int_equal(ux_blob_decode(blob, len, &mine, &why), 0);
    ux_blob_t peer = mine;
    peer.slot = PEER_SLOT;
    assert_int_equal(ux_blob_encode(&peer, pblob, &plen), 0);
    assert_int_equal(OPS->hs_connect(core, priv, pblob, plen), 0);

    /* The peer opened first and sends. */
    struct key k = {mine.slot, mine.gen};
    char m[4] = "pre";
    am_eager(k, 0, m, sizeof(m), 1);
    progress();
    assert_int_equal(core->nmsgs, 0);
    assert_int_equal(OPS->open(core, priv, -1), 0);
    assert_int_equal(core->nmsgs, 0); /* not from open */
    progress();
    assert_int_equal(core->nmsgs, 1);
    OPS->close(core, priv);
    free(priv);
    free(core);
}

static void unknown_and_stale_keys_are_dropped(void **state)
{
    struct tcon *t = tcon_open(RNDV);
    struct key stale = t->key, other = t->key;
    stale.gen++;
    other.slot += 1000;
    char m[4] = "abc";
    assert_int_equal(am_eager(stale, 0, m, sizeof(m), 1), UXW_AM_DONE);
    assert_int_equal(am_eager(other, 0, m, sizeof(m), 1), UXW_AM_DONE);
    char desc;
    assert_int_equal(am_rndv(other, 0, &desc, RNDV, 1), UXW_AM_DONE);
    assert_int_equal(fake_am(UXW_AM_FRAME, "short", 5, NULL, 0, 0),
                     UXW_AM_DONE);
    /* No header at all (UCX may pass none): dropped for want of a key,
     * before anything is read from the missing header. */
    fake_core_reset();
    assert_int_equal(fake_am(UXW_AM_FRAME, NULL, 0, m, sizeof(m), 0),
                     UXW_AM_DONE);
    assert_int_equal(fake_am(UXW_AM_FRAME_LONG, NULL, 0, m, sizeof(m), 0),
                     UXW_AM_DONE);
    assert_non_null(strstr(fake_core_log, "without a connection key"));
    progress();
    assert_int_equal(t->core.nmsgs, 0);
    assert_int_equal(t->core.errors, 0);

    /* A closed connection's key is stale at once, also when its slot is
     * taken again (the socket lives on through another connection). */
    struct tcon *keep = tcon_open(RNDV);
    struct key old = t->key;
    tcon_close(t);
    t = tcon_open(RNDV);
    assert_int_equal(t->key.slot, old.slot);
    assert_int_not_equal(t->key.gen, old.gen);
    am_eager(old, 0, m, sizeof(m), 1);
    progress();
    assert_int_equal(t->core.nmsgs, 0);
    assert_int_equal(keep->core.nmsgs, 0);
    tcon_close(t);
    tcon_close(keep);
}

static void malformed_message_fails_after_earlier_ones(void **state)
{
    struct tcon *t = tcon_open(RNDV);
    char m[4] = "ok!";
    am_eager(t->key, 0, m, sizeof(m), 1);
    /* Header says 10 body bytes, 4 came. */
    uint8_t h[64];
    size_t hl = am_hdr(h, t->key, 0, 10, 2);
    fake_am(UXW_AM_FRAME, h, hl, m, sizeof(m), 0);
    /* xheader length disagrees with the head length. */
    hl = am_hdr(h, t->key, 4, 0, 3);
    fake_am(UXW_AM_FRAME, h, hl - 1, NULL, 0, 0);
    progress();
    assert_int_equal(t->core.nmsgs, 1);
    assert_int_equal(t->core.errors, 1);
    assert_int_equal(t->core.err, PSCOM_ERR_IOERROR);
    assert_non_null(strstr(t->core.err_what, "malformed"));
    tcon_close(t);
}

static void endpoint_error_after_what_arrived(void **state)
{
    struct tcon *t = tcon_open(RNDV);
    char m[4] = "ok!";
    am_eager(t->key, 0, m, sizeof(m), 1);
    fake_ep_error(fake_last_ep(), -25);
    /* Later messages are dropped. */
    am_eager(t->key, 0, m, sizeof(m), 2);
    progress();
    assert_int_equal(t->core.nmsgs, 1);
    assert_int_equal(t->core.errors, 1);
    assert_int_equal(t->core.err, PSCOM_ERR_EOF);
    assert_int_equal(t->core.err_op, PSCOM_OP_READ);
    tcon_close(t);
    assert_int_equal(fw.ep_close_force, 1);
}

static void dead_peer_socket_fails_after_grace(void **state)
{
    struct tcon *t = tcon_open(RNDV);
    char m[4] = "hi";
    am_eager(t->key, 0, m, sizeof(m), 1);
    /* Readable, but nothing to read yet: no end. */
    t->core.fd_cb(t->core.fd, EPOLLIN, t->core.fd_arg);
    progress();
    struct timespec ts = {0, 120 * 1000 * 1000};
    nanosleep(&ts, NULL);
    progress();
    assert_int_equal(t->core.errors, 0);
    /* The peer's process ends: its end of the socket closes. */
    close(t->peer_fd);
    t->peer_fd = -1;
    t->core.fd_cb(t->core.fd, EPOLLIN | EPOLLHUP, t->core.fd_arg);
    progress();
    assert_int_equal(t->core.nmsgs, 1); /* delivered first */
    assert_int_equal(t->core.errors, 0); /* not yet: grace */
    nanosleep(&ts, NULL);
    progress();
    assert_int_equal(t->core.errors, 1);
    assert_int_equal(t->core.err, PSCOM_ERR_EOF);
    tcon_close(t);
}

/* ---------------------------------------------------------------------- */
/* Pulled rendezvous (rndv_describe, UXW_AM_BODY, rndv_pull_start)        */
/* ---------------------------------------------------------------------- */

/* A body the peer announces for t: key, then its id. */
static int am_body(struct key k, uint64_t id, void *desc, size_t len,
                   unsigned flags)
{
    uint8_t h[16];
    memcpy(h, &k.slot, 4);
    memcpy(h + 4, &k.gen, 4);
    memcpy(h + 8, &id, 8);
    return fake_am(UXW_AM_BODY, h, sizeof(h), desc, len, flags);
}

/* The core's handle for a pull into buf: a message it recorded as taken
 * out of line. */
static void *pull_handle(struct tcon *t, void *buf, size_t len)
{
    struct fake_msg *m = &t->core.msgs[t->core.nmsgs];
    m->deferred = true;
    m->defer_buf = buf;
    m->defer_len = len;
    return (void *)(uintptr_t)(++t->core.nmsgs);
}

static int pull_start(struct tcon *t, uint64_t id, void *dst, size_t len)
{
    return OPS->rndv_pull_start(&t->core, t->priv, &id, sizeof(id), dst, len,
                                pull_handle(t, dst, len));
}

/* The sender hands the body to UCX's rendezvous at once, to the peer's
 * key, with an id of the connection that the announcement carries. */
static void body_goes_to_ucx_with_its_announcement(void **state)
{
    struct tcon *t = tcon_open(RNDV);
    static char body[RNDV];
    memset(body, 'b', sizeof(body));
    uint64_t blob[8];
    assert_int_equal(OPS->rndv_describe(&t->core, t->priv, body, RNDV, blob),
                     8);
    assert_int_equal(fw.nsends, 1);
    struct fake_send *s = &fw.sends[0];
    assert_int_equal(s->id, UXW_AM_BODY);
    assert_int_equal(s->proto, UXW_SEND_RNDV);
    assert_int_equal(s->hdr_len, 16);
    uint32_t slot, gen;
    uint64_t id;
    memcpy(&slot, s->hdr, 4);
    memcpy(&gen, s->hdr + 4, 4);
    memcpy(&id, s->hdr + 8, 8);
    assert_int_equal(slot, PEER_SLOT);
    assert_int_equal(gen, PEER_GEN);
    assert_int_equal(id, blob[0]);
    assert_int_equal(s->data_len, RNDV);
    assert_memory_equal(s->data, body, RNDV);
    assert_int_equal(OPS->rndv_describe(&t->core, t->priv, body, RNDV, blob),
                     8);
    assert_int_equal(blob[0], id + 1);

    /* The receiver pulled the first; the second failed: the connection
     * fails. A body UCX refuses at once is left to the core's way. */
    fake_send_complete(0, 0);
    progress();
    assert_int_equal(t->core.errors, 0);
    fake_send_complete(1, -25);
    progress();
    assert_int_equal(t->core.errors, 1);
    assert_int_equal(t->core.err_op, PSCOM_OP_WRITE);
    tcon_close(t);

    t = tcon_open(RNDV);
    fw.send_result = -3;
    assert_int_equal(OPS->rndv_describe(&t->core, t->priv, body, RNDV, blob),
                     0);
    tcon_close(t);
}

/* The receiver keeps the announced body's descriptor until its receive
 * matched, then UCX moves the body into the receive buffer out of line. */
static void body_pulled_into_the_receive_buffer(void **state)
{
    struct tcon *t = tcon_open(RNDV);
    static char src[2][RNDV], dst[2][RNDV];
    memset(src[0], 'x', RNDV);
    memset(src[1], 'y', RNDV);
    char desc[2];
    assert_int_equal(am_body(t->key, 5, &desc[0], RNDV, UXW_AM_RNDV),
                     UXW_AM_KEEP);
    assert_int_equal(am_body(t->key, 6, &desc[1], RNDV, UXW_AM_RNDV),
                     UXW_AM_KEEP);
    assert_true(settles()); /* nothing moves before the pull */
    assert_int_equal(fw.nrecvs, 0);

    /* Pulled in the order their receives match, not their ids'. */
    assert_int_equal(pull_start(t, 6, dst[1], RNDV), 0);
    assert_int_equal(pull_start(t, 5, dst[0], RNDV), 0);
    assert_int_equal(fw.nrecvs, 2);
    assert_ptr_equal(fw.recvs[0].desc, &desc[1]);
    assert_ptr_equal(fw.recvs[0].buf, dst[1]);
    assert_int_equal(fw.recvs[0].len, RNDV);
    assert_ptr_equal(fw.recvs[1].desc, &desc[0]);
    assert_int_equal(t->core.ndefer_done, 0);
    assert_int_equal(OPS->progress(), 1); /* data is moving */

    fake_recv_complete(0, src[1], 0);
    progress();
    assert_int_equal(t->core.ndefer_done, 1);
    assert_int_equal(t->core.defer_order[0], 0);
    assert_int_equal(t->core.msgs[0].defer_err, 0);
    assert_memory_equal(dst[1], src[1], RNDV);
    fake_recv_complete(1, src[0], -25);
    progress();
    assert_int_equal(t->core.ndefer_done, 2);
    assert_int_not_equal(t->core.msgs[1].defer_err, 0);
    assert_int_equal(t->core.errors, 1);
    assert_int_equal(fw.releases, 0); /* both went to their receives */
    tcon_close(t);
}

/* A body whose receive cannot take it whole, or that is not there, is let
 * go (UCX ends the sender's send) and the core's rendezvous moves it; a
 * body that arrives after its pull gave up, and the bodies left at close,
 * are let go too. */
static void bodies_not_pulled_are_let_go(void **state)
{
    struct tcon *t = tcon_open(RNDV);
    static char dst[RNDV];
    char desc[3];
    am_body(t->key, 1, &desc[0], RNDV, UXW_AM_RNDV);
    assert_true(pull_start(t, 1, dst, RNDV - 1) < 0); /* truncated */
    assert_int_equal(fw.releases, 1);
    assert_ptr_equal(fw.released, &desc[0]);
    assert_true(pull_start(t, 1, dst, RNDV) < 0); /* gone now */
    assert_true(pull_start(t, 3, dst, RNDV) < 0); /* not there */
    assert_int_equal(am_body(t->key, 2, &desc[1], RNDV, UXW_AM_RNDV),
                     UXW_AM_DONE); /* behind a pull that gave up */
    assert_int_equal(am_body(t->key, 4, &desc[2], RNDV, UXW_AM_RNDV),
                     UXW_AM_KEEP);
    assert_int_equal(fw.nrecvs, 0);
    assert_int_equal(t->core.errors, 0);
    tcon_close(t);
    assert_int_equal(fw.releases, 2);
    assert_ptr_equal(fw.released, &desc[2]);
}

/* A body sent eagerly is malformed: the connection fails. One for an
 * unknown connection is dropped. */
static void malformed_and_stray_bodies(void **state)
{
    struct tcon *t = tcon_open(RNDV);
    char desc;
    struct key stray = {t->key.slot + 5, t->key.gen};
    assert_int_equal(am_body(stray, 1, &desc, RNDV, UXW_AM_RNDV), UXW_AM_DONE);
    progress();
    assert_int_equal(t->core.errors, 0);
    assert_int_equal(am_body(t->key, 1, &desc, RNDV, 0), UXW_AM_DONE);
    progress();
    assert_int_equal(t->core.errors, 1);
    assert_int_equal(t->core.err, PSCOM_ERR_IOERROR);
    tcon_close(t);
}

/* A connection that closes while a body of ours still waits for its pull
 * (the core gave its send up) drops its endpoint, so that the peer cannot
 * read the buffer afterwards. UCX may end such a send later, or never: it
 * is freed either way. */
static void close_drops_bodies_waiting_for_their_pull(void **state)
{
    struct tcon *other = tcon_open(RNDV); /* keeps the worker */
    struct tcon *t = tcon_open(RNDV);
    static char body[RNDV];
    uint64_t blob;
    assert_int_equal(OPS->rndv_describe(&t->core, t->priv, body, RNDV, &blob),
                     8);
    assert_int_equal(OPS->rndv_describe(&t->core, t->priv, body, RNDV, &blob),
                     8);
    tcon_close(t);
    assert_int_equal(fw.ep_close_force, 1);
    fake_send_complete(0, -16); /* cancelled: freed, nothing reported */
    progress();
    assert_int_equal(other->core.errors, 0);
    /* Send 1 never ends: freed with the worker (the sanitizer build checks
     * for leaks). A connection with no body left closes gently. */
    tcon_close(other);
    assert_int_equal(fw.ep_close_force, 1);
    assert_int_equal(fw.workers, 0);
}

static void close_with_operations_under_way(void **state)
{
    struct tcon *t = tcon_open(RNDV);
    static char body[RNDV], dst[RNDV];
    fake_queue(&t->core, 0, body, sizeof(body));
    OPS->tx_kick(&t->core, t->priv);
    t->core.direct_buf = dst;
    t->core.direct_len = sizeof(dst);
    char desc;
    am_rndv(t->key, 0, &desc, sizeof(dst), 1);
    char e[2] = "e", e2[2] = "f";
    am_eager(t->key, 0, e, sizeof(e), 2);
    uint8_t h[64];
    static char kept[8000];
    size_t hl = am_hdr(h, t->key, 0, sizeof(kept), 3);
    fake_am(UXW_AM_FRAME, h, hl, kept, sizeof(kept), UXW_AM_KEEPABLE);
    am_eager(t->key, 0, e2, sizeof(e2), 4);
    progress();
    assert_int_equal(fw.nrecvs, 1);

    /* The connection closes while UCX still has the send and the receive;
     * the close waits a bounded time, then leaves them to their callbacks. */
    tcon_close(t);
    assert_int_equal(fw.releases, 1); /* the kept data of the queue */
    assert_int_equal(fw.workers, 0);
    fake_send_complete(0, -4); /* cancelled */
    fake_recv_complete(0, NULL, -4);
}

/* UCX aborts when a worker is destroyed under an unfinished close (a flush
 * waiting for a peer that does not answer): such a worker stays. */
static void unfinished_close_leaves_the_worker(void **state)
{
    struct tcon *t = tcon_open(RNDV);
    fw.close_result = UXW_PENDING;
    tcon_close(t); /* waits its bounded time */
    assert_int_equal(fw.ep_closes, 1);
    assert_int_equal(fw.workers, 1); /* not destroyed */
    fw.workers = 0; /* the fake's worker is static: nothing to free */
}

static void pools_survive_many_messages(void **state)
{
    struct tcon *t = tcon_open(RNDV);
    fw.send_result = UXW_OK;
    char b[32];
    for (int round = 0; round < 500; round++) {
        fake_queue(&t->core, 0, b, sizeof(b));
        OPS->tx_kick(&t->core, t->priv);
        am_eager(t->key, 0, b, sizeof(b), 1);
        progress();
        assert_int_equal(t->core.nmsgs, 1);
        assert_int_equal(t->core.ndone, 1);
        t->core.nmsgs = 0;
        t->core.ndone = 0;
        fw.nsends = 0;
    }
    tcon_close(t);
}


/* ---------------------------------------------------------------------- */
/* One-sided operations                                                   */
/* ---------------------------------------------------------------------- */

#define RMA_MIN 1024 /* PSP_UCX_RMA as main() sets it */

static bool rma_off(void)
{
    const char *v = getenv("PSP_UCX_RMA");
    return v && !strcmp(v, "inf");
}

/* A region of the fake socket: its key, and the plugin's handle. */
struct region {
    uint8_t key[PSCOM_PLUGIN_RKEY_MAX];
    size_t key_len;
    void *handle;
};

static void region_register(struct region *r, void *addr, size_t len)
{
    r->key_len = PSCOM_PLUGIN_RKEY_MAX;
    assert_int_equal(OPS->rma_register(fake_socket, addr, len, r->key,
                                       &r->key_len, &r->handle), 0);
    assert_true(r->key_len > 0 && r->key_len <= PSCOM_PLUGIN_RKEY_MAX);
}

static void *rkey_of(struct tcon *t, struct region *r)
{
    void *prkey = NULL;
    assert_int_equal(OPS->rma_rkey(&t->core, t->priv, r->key, r->key_len,
                                   &prkey), 0);
    assert_non_null(prkey);
    return prkey;
}

static int rma_setup(void **state)
{
    setup(state);
    fake_ndone = 0;
    fake_done_con = NULL;
    fake_done_hook = NULL;
    return 0;
}

static int rma_teardown(void **state)
{
    assert_int_equal(fw.maps, 0);
    assert_int_equal(fw.rkeys, 0);
    return teardown(state);
}

static void rma_off_maps_nothing(void **state)
{
    /* Runs in both settings. */
    static char mem[64];
    struct tcon *t = tcon_open(RNDV); /* sets fake_socket */
    tcon_close(t);
    uint8_t key[PSCOM_PLUGIN_RKEY_MAX];
    size_t key_len = sizeof(key);
    void *h;
    int rc = OPS->rma_register(fake_socket, mem, sizeof(mem), key, &key_len, &h);
    if (rma_off()) {
        assert_int_equal(rc, -ENOTSUP);
        assert_int_equal(fw.ctx_rma, 0);
        assert_int_equal(fw.workers, 0);
        return;
    }
    assert_int_equal(rc, 0);
    assert_int_equal(fw.ctx_rma, 1);
    OPS->rma_deregister(fake_socket, h);
}

static void register_needs_no_connection(void **state)
{
    static char mem[4096];
    struct tcon *t = tcon_open(RNDV); /* sets fake_socket */
    tcon_close(t);
    assert_int_equal(fw.workers, 0);

    /* The socket's worker comes with the region and goes with it. */
    struct region r;
    region_register(&r, mem, sizeof(mem));
    assert_int_equal(fw.workers, 1);
    assert_int_equal(fw.maps, 1);
    /* A connection opened meanwhile shares it and outlives nothing. */
    t = tcon_open(RNDV);
    assert_int_equal(fw.workers, 1);
    tcon_close(t);
    assert_int_equal(fw.workers, 1);
    OPS->rma_deregister(fake_socket, r.handle);
    assert_int_equal(fw.maps, 0);
    assert_int_equal(fw.workers, 0);
}

static void register_refuses_what_it_cannot_map(void **state)
{
    static char mem[64];
    struct tcon *t = tcon_open(RNDV);
    tcon_close(t);
    uint8_t key[PSCOM_PLUGIN_RKEY_MAX];
    size_t key_len = sizeof(key);
    void *h;
    /* The whole address space, and a region without socket. */
    assert_int_equal(OPS->rma_register(fake_socket, NULL, 0, key, &key_len,
                                       &h), -ENOTSUP);
    assert_int_equal(OPS->rma_register(NULL, mem, sizeof(mem), key, &key_len,
                                       &h), -ENOTSUP);
    /* A UCX key that does not fit: nothing stays mapped. */
    fw.key_len = PSCOM_PLUGIN_RKEY_MAX;
    assert_int_equal(OPS->rma_register(fake_socket, mem, sizeof(mem), key,
                                       &key_len, &h), -ENOSPC);
    fw.key_len = 10;
    fw.map_result = -3; /* UCS_ERR_NO_MEMORY */
    assert_int_equal(OPS->rma_register(fake_socket, mem, sizeof(mem), key,
                                       &key_len, &h), -EIO);
    assert_int_equal(fw.maps, 0);
    assert_int_equal(fw.workers, 0);
}

static void rkey_checks_the_key(void **state)
{
    static char mem[64];
    struct tcon *t = tcon_open(RNDV);
    struct region r;
    region_register(&r, mem, sizeof(mem));
    void *prkey = NULL;
    uint8_t bad[PSCOM_PLUGIN_RKEY_MAX];
    /* Truncated to the header, and another magic. */
    assert_int_equal(OPS->rma_rkey(&t->core, t->priv, r.key, 12, &prkey),
                     -EPROTO);
    memcpy(bad, r.key, r.key_len);
    bad[0] ^= 1;
    assert_int_equal(OPS->rma_rkey(&t->core, t->priv, bad, r.key_len, &prkey),
                     -EPROTO);
    /* Packed by another process than this connection's peer. */
    memcpy(bad, r.key, r.key_len);
    bad[6] ^= 1;
    assert_int_equal(OPS->rma_rkey(&t->core, t->priv, bad, r.key_len, &prkey),
                     -EPERM);
    /* UCX refuses its part. */
    memcpy(bad, r.key, r.key_len);
    bad[12] ^= 1;
    assert_int_equal(OPS->rma_rkey(&t->core, t->priv, bad, r.key_len, &prkey),
                     -EIO);
    assert_int_equal(fw.rkeys, 0);
    prkey = rkey_of(t, &r);
    assert_int_equal(fw.rkeys, 1);
    OPS->rma_rkey_release(&t->core, t->priv, prkey);
    assert_int_equal(fw.rkeys, 0);
    tcon_close(t);
    OPS->rma_deregister(fake_socket, r.handle);
}

/* A connection with a region of its socket and the region's key on it. */
struct rfix {
    struct tcon *t;
    struct region r;
    void *rk; /* NULL once released */
    char *target;
};

static void rfix_open(struct rfix *f, void *target, size_t len)
{
    f->t = tcon_open(RNDV);
    f->target = target;
    region_register(&f->r, target, len);
    f->rk = rkey_of(f->t, &f->r);
}

static void rfix_release_key(struct rfix *f)
{
    OPS->rma_rkey_release(&f->t->core, f->t->priv, f->rk);
    f->rk = NULL;
}

static void rfix_close(struct rfix *f)
{
    if (f->rk) rfix_release_key(f);
    tcon_close(f->t);
    OPS->rma_deregister(fake_socket, f->r.handle);
}

/* Put len bytes of src, or get them into dst, at offset off of the
 * region. */
static int put(struct rfix *f, const void *src, size_t off, size_t len,
               void *token)
{
    return OPS->rma_put(&f->t->core, f->t->priv, f->rk, src,
                        (uintptr_t)f->target + off, len, token);
}

static int get(struct rfix *f, void *dst, size_t off, size_t len, void *token)
{
    return OPS->rma_get(&f->t->core, f->t->priv, f->rk, dst,
                        (uintptr_t)f->target + off, len, token);
}

static void put_is_done_after_put_and_flush(void **state)
{
    static char target[8192], src[8192];
    struct rfix f;
    rfix_open(&f, target, sizeof(target));
    for (size_t i = 0; i < sizeof(src); i++) src[i] = (char)(i * 7);
    int token;

    /* Below PSP_UCX_RMA: the core's path, nothing started. */
    assert_int_equal(put(&f, src, 0, RMA_MIN - 1, &token), -ENOTSUP);
    assert_int_equal(fw.nrmas, 0);

    assert_int_equal(put(&f, src, 100, 5000, &token), 1);
    assert_int_equal(fw.nrmas, 2);
    assert_int_equal(fw.rmas[0].kind, 'p');
    assert_int_equal(fw.rmas[0].len, 5000);
    assert_int_equal(fw.rmas[0].raddr, (uintptr_t)target + 100);
    assert_int_equal(fw.rmas[1].kind, 'f');
    progress();
    assert_int_equal(fake_ndone, 0);
    /* The flush may complete first; both are needed. */
    fake_rma_complete(1, 0);
    progress();
    assert_int_equal(fake_ndone, 0);
    fake_rma_complete(0, 0);
    assert_int_equal(fake_ndone, 0); /* only from progress */
    progress();
    assert_int_equal(fake_ndone, 1);
    assert_ptr_equal(fake_done[0].token, &token);
    assert_int_equal(fake_done[0].err, 0);
    assert_memory_equal(target + 100, src, 5000);
    progress();
    assert_int_equal(fake_ndone, 1); /* once */

    /* Done at once (shared memory): 0, and no notice follows. */
    fw.put_result = fw.flush_result = UXW_OK;
    assert_int_equal(put(&f, src, 0, RMA_MIN, &token), 0);
    progress();
    assert_int_equal(fake_ndone, 1);

    /* A put UCX refuses at once: the core carries it. */
    fw.put_result = -6;
    assert_int_equal(put(&f, src, 0, RMA_MIN, &token), -EIO);
    rfix_close(&f);
}

static void get_errors_reach_the_core(void **state)
{
    static char target[4096], dst[4096];
    struct rfix f;
    rfix_open(&f, target, sizeof(target));
    memset(target, 0x5a, sizeof(target));
    int tok[3];
    for (int i = 0; i < 3; i++)
        assert_int_equal(get(&f, dst, 0, sizeof(dst), &tok[i]), 1);
    fake_rma_complete(1, -25); /* the peer is gone */
    fake_rma_complete(2, -6);  /* another failure */
    fake_rma_complete(0, 0);
    progress();
    assert_int_equal(fake_ndone, 3);
    for (int i = 0; i < 3; i++) {
        int err = 1;
        for (int k = 0; k < 3; k++)
            if (fake_done[k].token == &tok[i]) err = fake_done[k].err;
        assert_int_equal(err, i == 0 ? 0 : i == 1 ? -ECONNRESET : -EIO);
    }
    assert_memory_equal(dst, target, sizeof(dst));
    /* Done at once. */
    fw.get_result = UXW_OK;
    memset(dst, 0, sizeof(dst));
    assert_int_equal(get(&f, dst, 0, sizeof(dst), &tok[0]), 0);
    assert_memory_equal(dst, target, sizeof(dst));
    rfix_close(&f);
}

/* One-sided steps that UCX ends inside their calls: the operation is
 * done (or failed) at once, and nothing stays counted as under way. */
static void rma_ending_inside_their_call(void **state)
{
    (void)state;
    static char target[4096], src[4096], dst[4096];
    struct rfix f;
    rfix_open(&f, target, sizeof(target));
    memset(src, 'r', sizeof(src));
    int token;
    fw.end_inside = true;
    assert_int_equal(put(&f, src, 0, sizeof(src), &token), 0);
    assert_int_equal(fw.nrmas, 2); /* put and flush */
    assert_memory_equal(target, src, sizeof(src));
    fw.end_status = -25;
    assert_int_equal(get(&f, dst, 0, sizeof(dst), &token), -ECONNRESET);
    progress();
    assert_int_equal(fake_ndone, 0); /* what ended at once is not reported */
    assert_true(settles());
    rfix_close(&f);
}

/* After an endpoint failure nothing more is reported: the core fails the
 * operations under way once the connection is closed. */
static void endpoint_failure_ends_reports(void **state)
{
    static char target[4096], buf[4096];
    struct rfix f;
    rfix_open(&f, target, sizeof(target));
    int tp, tg;
    assert_int_equal(put(&f, buf, 0, sizeof(buf), &tp), 1);
    assert_int_equal(get(&f, buf, 0, sizeof(buf), &tg), 1);
    fake_ep_error(fake_last_ep(), -25);
    fake_rma_complete(0, -25); /* UCX ends the put, not the rest yet */
    progress();
    assert_int_equal(f.t->core.errors, 1);
    /* No new operations on a failed connection. */
    assert_int_equal(put(&f, buf, 0, sizeof(buf), &tp), -ENOTCONN);
    fake_rma_complete(1, -16);
    fake_rma_complete(2, -16);
    progress();
    assert_int_equal(fake_ndone, 0);
    rfix_close(&f);
    assert_int_equal(fake_ndone, 0);
}

/* The core may release a key while operations use it: destroyed after. */
static void key_released_under_way(void **state)
{
    static char target[4096], buf[4096];
    struct rfix f;
    rfix_open(&f, target, sizeof(target));
    int tok;
    assert_int_equal(get(&f, buf, 0, sizeof(buf), &tok), 1);
    rfix_release_key(&f);
    assert_int_equal(fw.rkeys, 1);
    fake_rma_complete(0, 0);
    assert_int_equal(fw.rkeys, 1);
    progress();
    assert_int_equal(fake_ndone, 1);
    assert_int_equal(fw.rkeys, 0);
    rfix_close(&f);
}

/* The core's callbacks may start the next operation from rma_done. */
static struct rfix hook_f;
static char hook_src[4096];
static int hook_left;

static void start_another(void *token, int err)
{
    (void)token;
    assert_int_equal(err, 0);
    if (!hook_left) return;
    hook_left--;
    assert_int_equal(put(&hook_f, hook_src, 0, sizeof(hook_src), &hook_left),
                     1);
}

static void operations_started_from_done(void **state)
{
    static char target[4096];
    rfix_open(&hook_f, target, sizeof(target));
    hook_left = 5;
    fake_done_hook = start_another;
    fw.rma_in_progress = true; /* UCX finishes what it has in each round */
    assert_int_equal(put(&hook_f, hook_src, 0, sizeof(hook_src), &hook_left),
                     1);
    for (int i = 0; i < 20 && fake_ndone < 6; i++) progress();
    assert_int_equal(fake_ndone, 6);
    assert_int_equal(hook_left, 0);
    rfix_close(&hook_f);
}

/* Close ends the transfers first (the core reuses their buffers after
 * close) and reports nothing. */
static void close_waits_for_operations(void **state)
{
    static char target[4096], buf[4096];
    struct rfix f;
    rfix_open(&f, target, sizeof(target));
    int tok;
    memset(target, 3, sizeof(target));
    assert_int_equal(get(&f, buf, 0, sizeof(buf), &tok), 1);
    rfix_release_key(&f);
    fw.rma_in_progress = true;
    tcon_close(f.t);
    assert_memory_equal(buf, target, sizeof(buf)); /* before close returned */
    assert_int_equal(fake_ndone, 0);
    assert_int_equal(fw.rkeys, 0); /* destroyed before the endpoint */
    OPS->rma_deregister(fake_socket, f.r.handle);
}

/* A dead peer cannot finish them: no wait; they are cancelled with the
 * endpoint and their late callbacks free them. */
static void close_after_dead_peer_does_not_wait(void **state)
{
    static char target[4096], buf[4096];
    struct rfix f;
    rfix_open(&f, target, sizeof(target));
    int tok;
    assert_int_equal(get(&f, buf, 0, sizeof(buf), &tok), 1);
    close(f.t->peer_fd);
    f.t->peer_fd = -1;
    f.t->core.fd_cb(f.t->core.fd, EPOLLIN | EPOLLHUP, f.t->core.fd_arg);
    rfix_release_key(&f);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    tcon_close(f.t);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    assert_true(t1.tv_sec - t0.tv_sec < 2); /* did not wait its 2 s */
    assert_int_equal(fake_ndone, 0);
    fake_rma_complete(0, -16); /* UCX cancels it: freed, not reported */
    assert_int_equal(fake_ndone, 0);
    /* Its key outlived the endpoint; it goes with the worker. */
    assert_int_equal(fw.rkeys, 1);
    OPS->rma_deregister(fake_socket, f.r.handle);
    assert_int_equal(fw.workers, 0);
    assert_int_equal(fw.rkeys, 0);
}

static int group_setup(void **state)
{
    (void)state;
    fake_wrap_reset();
    return OPS->init();
}

static int group_teardown(void **state)
{
    (void)state;
    OPS->destroy();
    return fw.contexts; /* every context freed */
}

int main(void)
{
    /* The one-sided threshold the tests expect, unless a run sets "inf". */
    if (!rma_off()) setenv("PSP_UCX_RMA", "1024", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(blob_from_hs_start, setup, teardown),
        cmocka_unit_test_setup_teardown(error_mode_is_agreed, setup, teardown),
        cmocka_unit_test_setup_teardown(hs_connect_refuses_bad_blobs, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(sends_complete_in_queue_order, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            immediate_completion_is_reported_at_once, setup, teardown),
        cmocka_unit_test_setup_teardown(eager_below_threshold_ucx_choice_above,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(long_head_travels_in_the_data, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            message_to_the_core_from_the_callback, setup, teardown),
        cmocka_unit_test_setup_teardown(small_frames_are_packed, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            small_frame_sent_now_or_left_to_the_queue, setup, teardown),
        cmocka_unit_test_setup_teardown(packed_frames_of_a_few_kib_arrive,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(larger_frame_sent_now_or_kept, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(cancelled_frame_is_skipped, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(send_error_fails_the_connection, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(eager_messages_arrive_in_order, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            rendezvous_goes_direct_and_holds_later_messages, setup, teardown),
        cmocka_unit_test_setup_teardown(
            rendezvous_below_peer_threshold_goes_through_a_buffer, setup,
            teardown),
        cmocka_unit_test_setup_teardown(
            truncated_rendezvous_goes_through_a_buffer, setup, teardown),
        cmocka_unit_test_setup_teardown(rendezvous_done_at_once, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            rendezvous_bodies_out_of_line_in_any_order, setup, teardown),
        cmocka_unit_test_setup_teardown(operations_ending_inside_their_call,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(body_in_line_after_bodies_out_of_line,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(failed_body_out_of_line, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            endpoint_error_with_bodies_out_of_line, setup, teardown),
        cmocka_unit_test_setup_teardown(messages_before_open_wait_for_open,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(unknown_and_stale_keys_are_dropped,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            malformed_message_fails_after_earlier_ones, setup, teardown),
        cmocka_unit_test_setup_teardown(endpoint_error_after_what_arrived,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(dead_peer_socket_fails_after_grace,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            body_goes_to_ucx_with_its_announcement, setup, teardown),
        cmocka_unit_test_setup_teardown(body_pulled_into_the_receive_buffer,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(bodies_not_pulled_are_let_go, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(malformed_and_stray_bodies, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            close_drops_bodies_waiting_for_their_pull, setup, teardown),
        cmocka_unit_test_setup_teardown(close_with_operations_under_way, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(unfinished_close_leaves_the_worker,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(pools_survive_many_messages, setup,
                                        teardown),
        /* Last of the tests that run with PSP_UCX_RMA=inf too. */
        cmocka_unit_test_setup_teardown(rma_off_maps_nothing, setup,
                                        rma_teardown),
        cmocka_unit_test_setup_teardown(register_needs_no_connection,
                                        rma_setup, rma_teardown),
        cmocka_unit_test_setup_teardown(register_refuses_what_it_cannot_map,
                                        rma_setup, rma_teardown),
        cmocka_unit_test_setup_teardown(rkey_checks_the_key, rma_setup,
                                        rma_teardown),
        cmocka_unit_test_setup_teardown(put_is_done_after_put_and_flush,
                                        rma_setup, rma_teardown),
        cmocka_unit_test_setup_teardown(get_errors_reach_the_core, rma_setup,
                                        rma_teardown),
        cmocka_unit_test_setup_teardown(rma_ending_inside_their_call,
                                        rma_setup, rma_teardown),
        cmocka_unit_test_setup_teardown(endpoint_failure_ends_reports,
                                        rma_setup, rma_teardown),
        cmocka_unit_test_setup_teardown(key_released_under_way, rma_setup,
                                        rma_teardown),
        cmocka_unit_test_setup_teardown(operations_started_from_done,
                                        rma_setup, rma_teardown),
        cmocka_unit_test_setup_teardown(close_waits_for_operations, rma_setup,
                                        rma_teardown),
        cmocka_unit_test_setup_teardown(close_after_dead_peer_does_not_wait,
                                        rma_setup, rma_teardown),
    };
    size_t n = sizeof(tests) / sizeof(tests[0]);
    if (rma_off())
        for (n = 0; tests[n].test_func != rma_off_maps_nothing; n++) {}
    return _cmocka_run_group_tests("ucx_plugin", tests, rma_off() ? n + 1 : n,
                                   group_setup, group_teardown);
}
