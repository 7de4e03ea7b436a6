/*
 * libFuzzer harness for the ofi plugin's receive side: the messages a peer
 * sends to a connection (plugins/ofi/ofi_plugin.c), with libfabric and the
 * core replaced by the unit tests' fakes (test/ofi/fake.h). Two connections
 * A and B of the plugin are connected to each other in this process; the
 * program sends B messages of its own making with B's tags (frame heads,
 * chunks, split and pull descriptors, sequence numbers near the expected
 * ones), mixed with frames A really sends and rounds of progress. In pull
 * mode the descriptors name a buffer of the harness or addresses outside
 * it, where the fake cross-memory attach fails as process_vm_readv does.
 *
 * What must hold, else the run aborts: no crash, overflow, leak or failed
 * check of the plugin or the fakes; each connection reports at most one
 * error; the plugin never reads or writes a process other than the peer
 * (this one), whatever a descriptor names; closing both and destroying the
 * plugin leaves nothing behind.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_input.h"
#include "fake.h"
#include "ofi_proto.h"


extern const pscom_plugin_t pscom_plugin_ofi;

#define OPS (pscom_plugin_ofi.ops)
#define MAX_STEPS 64  /* messages and frames of one program */
#define MAX_MSG 600   /* bytes of a message the program makes */

enum op {
    OP_RAW,      /* a message of the program's making to B */
    OP_FRAME,    /* A sends B a real frame (not in pull mode) */
    OP_PROGRESS, /* rounds of the plugin's progress */
    OP_DIRECT,   /* B's core offers rendezvous bodies a direct buffer */
    OP_COUNT
};

/* What pull descriptors may name: the "sender's memory". */
static uint8_t sender_mem[8192] __attribute__((aligned(8)));

struct pair {
    struct psc_con a, b;
    void *pa, *pb;
    ofi_blob_t blob_a, blob_b;
    bool pull;
};

static void configure(struct input *in, struct pair *p)
{
    unsigned mode = byte(in);
    fake_reset();
    p->pull = mode & 1;
    if (p->pull) {
        fake.local_only = 1;
        fake.inject_size = 4096;
        fake.cma_lo = (uintptr_t)sender_mem;
        fake.cma_hi = (uintptr_t)sender_mem + sizeof(sender_mem);
        setenv("PSP_OFI_SPLIT", mode & 2 ? "8k" : "0", 1);
    } else {
        unsetenv("PSP_OFI_SPLIT");
    }
    setenv("PSP_OFI_BOUNCE", mode & 4 ? "256" : "16k", 1);
    setenv("PSP_OFI_RECVQ", mode & 8 ? "2" : "8", 1);
    if (mode & 16) fake.max_msg_size = 1000; /* chunks of 1000 bytes */
}

static void pair_open(struct pair *p, bool peer_known)
{
    uint8_t ba[4096], bb[4096];
    size_t la = sizeof(ba), lb = sizeof(bb);
    const char *why;
    CHECK(OPS->init() == 0);
    p->pa = calloc(1, pscom_plugin_ofi.con_priv_size);
    p->pb = calloc(1, pscom_plugin_ofi.con_priv_size);
    CHECK(p->pa && p->pb);
    fake_con_init(&p->a, "A", p->pa);
    fake_con_init(&p->b, "B", p->pb);
    if (!peer_known) p->b.peer_pid = 0;
    CHECK(OPS->hs_start(&p->a, p->pa, ba, &la) == 0);
    CHECK(OPS->hs_start(&p->b, p->pb, bb, &lb) == 0);
    CHECK(ofi_blob_decode(ba, la, &p->blob_a, &why) == 0);
    CHECK(ofi_blob_decode(bb, lb, &p->blob_b, &why) == 0);
    CHECK(OPS->hs_connect(&p->b, p->pb, ba, la) == 0);
    CHECK(OPS->hs_connect(&p->a, p->pa, bb, lb) == 0);
    CHECK(OPS->open(&p->a, p->pa, -1) == 0);
    CHECK(OPS->open(&p->b, p->pb, -1) == 0);
}

static void pair_close(struct pair *p)
{
    OPS->close(&p->a, p->pa);
    OPS->close(&p->b, p->pb);
    free(p->pa);
    free(p->pb);
    fake_con_free(&p->a);
    fake_con_free(&p->b);
    for (int i = 0; i < 4; i++) OPS->progress();
    OPS->destroy();
}

/* A message to B: a frame head (type, xheader and body lengths from the
 * input), then input bytes, and in pull mode now and then a pull or split
 * descriptor at its end, naming the harness's buffer or not. */
static void op_raw(struct input *in, struct pair *p)
{
    uint8_t msg[MAX_MSG + OFI_PULL_DESC_LEN];
    unsigned mode = byte(in);
    size_t len = u16(in) % (MAX_MSG + 1);
    memset(msg, 0, sizeof(msg));
    if (len >= 8) {
        pscom_header_net_t h = {.msg_type = (uint8_t)(byte(in) % 6),
                                .xheader_len = (uint16_t)byte(in)};
        uint16_t dl = (uint16_t)u16(in);
        h.data_len = dl;
        memcpy(msg, &h, sizeof(h));
        take_up_to(in, msg + 8, len - 8);
    } else {
        take_up_to(in, msg, len);
    }
    if (p->pull && (mode & 1) && len + OFI_PULL_DESC_LEN <= sizeof(msg)) {
        ofi_pull_desc_t d = {0};
        uint16_t off = (uint16_t)u16(in);
        uint16_t dl = (uint16_t)u16(in);
        if (mode & 2) {
            d.flags = OFI_DESC_SPLIT;
            d.addr = byte(in) * 64; /* the chunk size */
        } else {
            d.addr = (uintptr_t)sender_mem + off;
            d.ack = (uintptr_t)sender_mem + (mode & 4 ? off : 8 * (mode >> 5));
            d.pid = mode & 8 ? (uint32_t)getpid() + 1 : (uint32_t)getpid();
        }
        d.len = mode & 16 ? dl : 0; /* 0: the receiver's own check */
        if (!(mode & 16) && len >= 8) {
            pscom_header_net_t h;
            memcpy(&h, msg, 8);
            uint64_t total = 8 + (uint64_t)h.xheader_len + h.data_len;
            if (total > len) d.len = total - len;
        }
        ofi_pull_desc_encode(&d, msg + len);
        len += OFI_PULL_DESC_LEN;
    }
    uint32_t seq = (mode >> 5) % 4;
    unsigned part = byte(in) % 4;
    fake_send_raw(msg, len, ofi_tag(p->blob_b.conid, seq, part));
}

static void op_frame(struct input *in, struct pair *p, unsigned n)
{
    if (p->pull) return; /* A's buffers are out of the fake's reach */
    unsigned xl = byte(in);
    size_t bl = u16(in) % 3000;
    fake_enqueue(&p->a, fake_frame_new((uint8_t)(byte(in) % 4 == 3 ? 3 : 0),
                                       xl, bl, n));
    OPS->tx_kick(&p->a, p->pa);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool quiet;
    if (!quiet) {
        setenv("PSP_DEBUG", "0", 1); /* every input is malformed on purpose */
        quiet = true;
    }
    struct input in = {data, size};
    static struct pair p;
    configure(&in, &p);
    /* Without the peer's process id pull mode is refused at the handshake
     * (unit test test_pull_needs_the_peers_pid). */
    pair_open(&p, p.pull || (byte(&in) & 1));

    for (unsigned n = 0; in.left && n < MAX_STEPS; n++) {
        switch (byte(&in) % OP_COUNT) {
        case OP_RAW: op_raw(&in, &p); break;
        case OP_FRAME: op_frame(&in, &p, n); break;
        case OP_PROGRESS:
            for (unsigned r = byte(&in) % 4 + 1; r; r--) OPS->progress();
            break;
        case OP_DIRECT: p.b.direct_enabled = byte(&in) & 1; break;
        }
        CHECK(p.a.errors <= 1 && p.b.errors <= 1);
    }
    for (int r = 0; r < 8; r++) OPS->progress();
    CHECK(p.a.errors <= 1 && p.b.errors <= 1);
    CHECK(fake.cma_foreign == 0);
    pair_close(&p);
    return 0;
}
