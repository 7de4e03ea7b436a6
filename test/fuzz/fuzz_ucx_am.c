/*
 * libFuzzer harness for the ucx plugin's receive side: the active messages
 * a peer's UCX delivers (plugins/ucx/ucx_plugin.c, am_cb and what follows
 * from it), with UCX and the core replaced by the unit tests' fakes
 * (test/ucx/fake.h): every kind of message id, UCX's flags (rendezvous
 * descriptor, data it lets us keep), heads that name this connection or
 * another, with and without a posted receive that takes whole messages,
 * bodies that may go straight into a receive buffer or be deferred,
 * UCX's receives ending well or failing, endpoint errors and rounds of
 * progress.
 *
 * What must hold, else the run aborts: no crash, overflow, leak or
 * failed assertion of the plugin or the fakes (the fake core checks, for
 * instance, that what pscom_plugin_rx_now is given is one whole message);
 * a connection reports at most one error; closing the connection leaves
 * no worker behind.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz_input.h"
#include "fake.h"
#include "ucx_blob.h"


extern const pscom_plugin_t pscom_plugin_ucx;
void fake_fd_owner(struct psc_con *c);

#define OPS (pscom_plugin_ucx.ops)
#define MAX_AMS 24       /* messages of one program (the fakes' limits) */
#define MAX_HDR 400      /* bytes of an AM header */
#define MAX_DATA 64      /* bytes of an AM's data: at most 8 frames in it */
#define DIRECT_LEN 4096  /* the posted receive's buffer */

enum op {
    OP_AM,        /* an active message */
    OP_PROGRESS,  /* a round of the plugin's progress */
    OP_RECV_DONE, /* one of the plugin's UCX receives ends */
    OP_SETTINGS,  /* what the core offers: rx_now, a direct buffer, defer */
    OP_EP_ERROR,  /* UCX reports the endpoint failed */
    OP_COUNT
};

/* The connection of a program, set up through the plugin's handshake as
 * test/ucx/test_ucx_plugin.c does it. */
struct tcon {
    struct psc_con core;
    void *priv;
    uint32_t slot, gen; /* the key the peer puts in front of messages */
    int peer_fd;
};

static struct tcon *tcon_open(void)
{
    /* One, reused: the fake connection is large (its message records). */
    static struct tcon the;
    struct tcon *t = &the;
    fake_con_init(&t->core);
    t->priv = calloc(1, pscom_plugin_ucx.con_priv_size);
    CHECK(t->priv);
    uint8_t blob[4096];
    size_t len = sizeof(blob);
    CHECK(OPS->hs_start(&t->core, t->priv, blob, &len) == 0);
    ux_blob_t mine;
    const char *why;
    CHECK(ux_blob_decode(blob, len, &mine, &why) == 0);
    t->slot = mine.slot;
    t->gen = mine.gen;
    ux_blob_t peer = {.flags = UX_BLOB_F_PEER_ERRORS, .slot = 7, .gen = 3,
                      .rndv = 64 * 1024, .addr = mine.addr,
                      .addr_len = mine.addr_len};
    uint8_t pblob[4096];
    size_t plen = sizeof(pblob);
    CHECK(ux_blob_encode(&peer, pblob, &plen) == 0);
    CHECK(OPS->hs_connect(&t->core, t->priv, pblob, plen) == 0);
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    t->peer_fd = sv[1];
    fake_fd_owner(&t->core);
    CHECK(OPS->open(&t->core, t->priv, sv[0]) == 1);
    fake_fd_owner(NULL);
    return t;
}

/* End every receive UCX still has (as UCX does when an endpoint goes), so
 * that closing does not wait for them. */
static void end_receives(void)
{
    for (int i = 0; i < fw.nrecvs; i++)
        if (fw.recvs[i].pending) fake_recv_complete(i, NULL, -25);
}

static void tcon_close(struct tcon *t)
{
    end_receives();
    fake_fd_owner(&t->core);
    OPS->close(&t->core, t->priv);
    fake_fd_owner(NULL);
    end_receives();
    OPS->progress();
    close(t->peer_fd);
    while (t->core.qn) fake_unqueue(&t->core, 0);
    free(t->priv);
}

static uint8_t direct[DIRECT_LEN];

/* An active message. Its header mostly starts with this connection's key
 * (or a packed frame's prefix naming it); the rest comes from the input. */
static void op_am(struct input *in, struct tcon *t, void **kept, int *nkept)
{
    static const unsigned ids[] = {UXW_AM_FRAME, UXW_AM_FRAME_PACKED,
                                   UXW_AM_FRAME_LONG, UXW_AM_BODY, 77};
    unsigned mode = byte(in);
    unsigned id = ids[mode % 5];
    unsigned flags = 0;
    if (mode & 8) flags |= UXW_AM_RNDV;
    if (mode & 16) flags |= UXW_AM_KEEPABLE;
    uint8_t hdr[MAX_HDR];
    size_t hl = byte(in) * 2 % MAX_HDR;
    memset(hdr, 0, hl);
    size_t key = 0;
    if (!(mode & 32) && hl >= 8) {
        memcpy(hdr, &t->slot, 4);
        memcpy(hdr + 4, &t->gen, 4);
        key = 8;
    }
    take_up_to(in, hdr + key, hl - key);
    size_t len = byte(in) % (MAX_DATA + 1);
    /* The data lives until the program ends: the plugin may keep it. */
    uint8_t *d = malloc(len); /* (ASan gives even 0 bytes an address) */
    CHECK(d);
    memset(d, 0, len);
    if (id == UXW_AM_FRAME_PACKED && len >= 8 && !(mode & 64)) {
        uint16_t gen = (uint16_t)t->gen;
        memcpy(d, &t->slot, 4);
        memcpy(d + 4, &gen, 2);
        take_up_to(in, d + 6, len - 6);
    } else {
        take_up_to(in, d, len);
    }
    kept[(*nkept)++] = d;
    fake_am(id, hl ? hdr : NULL, hl, d, len, flags);
}

static void op_settings(struct input *in, struct tcon *t)
{
    unsigned mode = byte(in);
    t->core.take_now = mode & 1;
    t->core.defer = (mode & 2) != 0;
    if (mode & 4) {
        t->core.direct_buf = direct;
        t->core.direct_len = byte(in) * 16 % (DIRECT_LEN + 1);
    } else {
        t->core.direct_buf = NULL;
        t->core.direct_len = 0;
    }
}

static void op_recv_done(struct input *in)
{
    if (!fw.nrecvs) return;
    int i = (int)(byte(in) % fw.nrecvs);
    if (!fw.recvs[i].pending) return;
    unsigned mode = byte(in);
    static uint8_t src[1 << 16];
    memset(src, (int)mode, fw.recvs[i].len < sizeof(src) ? fw.recvs[i].len
                                                          : sizeof(src));
    fake_recv_complete(i, fw.recvs[i].len <= sizeof(src) ? src : NULL,
                       mode & 1 ? -25 : 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool quiet;
    if (!quiet) {
        setenv("PSP_DEBUG", "0", 1); /* every input is malformed on purpose */
        quiet = true;
    }
    fake_wrap_reset();
    fw.recv_result = UXW_PENDING;
    struct input in = {data, size};
    struct tcon *t = tcon_open();
    void *kept[MAX_AMS];
    int nkept = 0;

    while (in.left && nkept < MAX_AMS && t->core.nmsgs < FAKE_MAX_MSGS - 8 &&
           fw.nrecvs < FAKE_MAX_OPS - 1) {
        switch (byte(&in) % OP_COUNT) {
        case OP_AM: op_am(&in, t, kept, &nkept); break;
        case OP_PROGRESS: OPS->progress(); break;
        case OP_RECV_DONE: op_recv_done(&in); break;
        case OP_SETTINGS: op_settings(&in, t); break;
        case OP_EP_ERROR: fake_ep_error(fake_last_ep(), -25); break;
        }
        CHECK(t->core.errors <= 1);
    }
    OPS->progress();
    CHECK(t->core.errors <= 1);
    tcon_close(t);
    CHECK(fw.workers == 0);
    for (int i = 0; i < nkept; i++) free(kept[i]);
    return 0;
}
