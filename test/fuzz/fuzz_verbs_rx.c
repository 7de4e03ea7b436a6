/*
 * libFuzzer harness for the verbs plugin's receive side
 * (plugins/verbs/verbs_plugin.c) over the unit tests' fake HCA
 * (test/verbs/fake_verbs.c), with the core's services stood in for here.
 * Two connections A and B of the plugin are connected to each other in
 * this process. The program mixes:
 *   - messages of its own making arriving at B's queue pair as A's HCA
 *     would deliver them (fake_deliver): the 8-byte slot header with
 *     credits near the real ones, rendezvous handles that B lent (or
 *     stale, or made up), stream bytes, lengths that disagree;
 *   - frames A really sends (with the credits and releases it owes);
 *   - rendezvous reads B makes from descriptors that A really lent, with
 *     their fields changed or not;
 *   - one-sided gets and puts B makes with A's region key, changed or not;
 *   - rendezvous descriptors B lends (whose handles the made-up messages
 *     name);
 *   - B's core failing the connection at its next push; rounds of
 *     progress; messages that arrive before B is open.
 *
 * What must hold, else the run aborts:
 *   - no crash, overflow, leak or failed check of the plugin;
 *   - each connection reports at most one error, and B's core gets no
 *     bytes after B's;
 *   - a rendezvous read, get or put that the plugin reports done stayed
 *     within a range that a descriptor or key of this program gave the
 *     peer with the rkey it used (the fake HCA lets through what a
 *     registration covers, as a real one does: so the registrations of
 *     what the peer may touch must cover no more), and a read or get
 *     brought the bytes it named;
 *   - an rkey given out names one range and one set of rights;
 *   - a read writes only its destination;
 *   - A's buffer, which lies in the middle of pages between guard bytes,
 *     keeps its contents (every put writes what it holds), and so do the
 *     guards;
 *   - a one-sided operation is reported once at most;
 *   - no queue pair goes through a transition a real HCA would refuse,
 *     and no completion queue overruns;
 *   - closing both and destroying the plugin leaves no verbs object.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fake_core_common.h"
#include "fake_verbs.h"
#include "fuzz_input.h"
#include "pscom_plugin.h"
#include "wireup.h"

extern const pscom_plugin_t pscom_plugin_verbs;

#define OPS (pscom_plugin_verbs.ops)
#define MAX_STEPS 64
#define MAX_MSG 1200 /* bytes of a message the program makes */
#define MEM 16384    /* each side's buffer */
#define LENT_MAX 8
#define RMA_MAX 8
#define PAGE 4096
#define VISIBLE_MAX (2 * LENT_MAX + 1)

/* ---------------------------------------------------------------------- */
/* The core's connection services                                         */
/* ---------------------------------------------------------------------- */

struct psc_con {
    const char *name;
    void *priv;
    uint8_t out[4096]; /* the stream this side sends, not yet taken */
    size_t out_len;
    unsigned errors;
    bool fail_next_push; /* the core fails the connection at its next push */
    bool failed;         /* ... and did: nothing more is pushed */
    size_t pushed;
};

static volatile uint8_t sink; /* what the harness reads goes here */

const char *pscom_plugin_con_str(pscom_plugin_con_t *con)
{
    return con->name;
}

int pscom_plugin_tx_peek(pscom_plugin_con_t *con, struct iovec *iov,
                         int iov_max, size_t *total)
{
    *total = con->out_len;
    if (!con->out_len || iov_max < 1) return 0;
    iov[0] = (struct iovec){.iov_base = con->out, .iov_len = con->out_len};
    return 1;
}

int pscom_plugin_tx_done(pscom_plugin_con_t *con, size_t n)
{
    CHECK(n <= con->out_len);
    memmove(con->out, con->out + n, con->out_len - n);
    con->out_len -= n;
    return 0;
}

int pscom_plugin_rx_push(pscom_plugin_con_t *con, const void *buf, size_t len)
{
    CHECK(!con->errors && !con->failed);
    CHECK(len);
    /* The plugin hands over bytes of its receive slot: read them all. */
    for (size_t i = 0; i < len; i++) sink ^= ((const uint8_t *)buf)[i];
    con->pushed += len;
    if (con->fail_next_push) {
        con->failed = true;
        return -1;
    }
    return 0;
}

void pscom_plugin_con_error(pscom_plugin_con_t *con, pscom_op_t op,
                            pscom_err_t err, const char *what, int sys_errno)
{
    (void)op;
    (void)err;
    (void)sys_errno;
    CHECK(what && *what);
    con->errors++;
}

/* A's buffer lies in the middle of pages, between guard bytes: a
 * registration of whole pages would let the peer reach those. */
static uint8_t arena_a[MEM + 3 * PAGE] __attribute__((aligned(PAGE)));
#define GUARD 0xee
static uint8_t *const mem_a = arena_a + PAGE + 192;
static uint8_t arena_ref[sizeof(arena_a)]; /* what it holds, all along */
static uint8_t mem_b[MEM] __attribute__((aligned(64)));

/* What A's buffer holds. */
static uint8_t pattern(size_t i)
{
    return (uint8_t)(i * 7 + (i >> 8));
}

static bool in_range(uintptr_t a, size_t len, uintptr_t lo, size_t n)
{
    return a >= lo && a - lo <= n && len <= n - (a - lo);
}

static bool in_mem_a(uintptr_t a, size_t len)
{
    return in_range(a, len, (uintptr_t)mem_a, MEM);
}

/* What descriptors and keys of this program gave the peer: rkey and range,
 * and whether it may write there (A's region). */
static struct visible {
    uint32_t rkey;
    uintptr_t addr;
    size_t len;
    bool write;
} visible[VISIBLE_MAX];
static size_t nvisible;

static void show(uint32_t rkey, uintptr_t addr, size_t len, bool write)
{
    /* A key names what it was given for and no more: one range and one
     * set of rights per rkey. */
    for (size_t i = 0; i < nvisible; i++)
        if (visible[i].rkey == rkey)
            CHECK(visible[i].addr == addr && visible[i].len == len &&
                  visible[i].write == write);
    CHECK(nvisible < VISIBLE_MAX);
    visible[nvisible++] = (struct visible){rkey, addr, len, write};
}

/* Did the program give the peer [addr, addr + len) with rkey? */
static bool shown(uint32_t rkey, uintptr_t addr, size_t len, bool write)
{
    for (size_t i = 0; i < nvisible; i++)
        if (visible[i].rkey == rkey && (visible[i].write || !write) &&
            in_range(addr, len, visible[i].addr, visible[i].len))
            return true;
    return false;
}

/* One-sided operations B started: what they named, and their end. Puts
 * write what A's buffer holds already, so that it keeps its pattern. */
struct rma {
    bool started, put, done;
    uint8_t local[2048];
    uint32_t rkey;
    uintptr_t remote;
    size_t len;
};
static struct rma rmas[RMA_MAX];

void pscom_plugin_rma_done(void *token, int err)
{
    struct rma *r = token;
    CHECK(r >= rmas && r < rmas + RMA_MAX && r->started);
    CHECK(!r->done);
    r->done = true;
    if (err) return;
    CHECK(shown(r->rkey, r->remote, r->len, r->put));
    if (!r->put && in_mem_a(r->remote, r->len))
        CHECK(!memcmp(r->local, (const void *)r->remote, r->len));
}

/* ---------------------------------------------------------------------- */
/* The pair                                                               */
/* ---------------------------------------------------------------------- */

struct pair {
    struct psc_con a, b;
    uint32_t qpn_b;
    /* Descriptors A lent (rndv_describe), for B's reads. */
    uint8_t desc[LENT_MAX][64];
    size_t ndesc;
    /* Handles B lent, for the made-up messages to release. */
    uint32_t handle_b[LENT_MAX];
    size_t nhandle_b;
    /* A region of A's, and its key. */
    void *region;
    uint8_t key[PSCOM_PLUGIN_RKEY_MAX];
    size_t key_len;
};

static unsigned configure(struct input *in)
{
    unsigned mode = byte(in);
    fake_reset();
    fake_core_reset();
    if (mode & 1) fake_cfg.max_msg_sz = 1000; /* reads in chunks */
    if (mode & 2) fake_cfg.rd_atom = 0;       /* no rendezvous reads */
    setenv("PSP_VERBS_BUFSIZE", mode & 4 ? "256" : "2048", 1);
    setenv("PSP_VERBS_RECVQ_SIZE", mode & 8 ? "3" : "8", 1);
    setenv("PSP_VERBS_SENDQ_SIZE", mode & 16 ? "2" : "8", 1);
    setenv("PSP_VERBS_MCACHE_SIZE", mode & 32 ? "8" : "0", 1);
    setenv("PSP_VERBS_RMA", "1", 1);
    return mode;
}

/* Both handshaken, A open; B opens with pair_open_b. */
static void pair_open(struct pair *p)
{
    uint8_t ba[VB_WIREUP_LEN], bb[VB_WIREUP_LEN];
    size_t la = sizeof(ba), lb = sizeof(bb);
    memset(p, 0, sizeof(*p));
    p->a.name = "A";
    p->b.name = "B";
    CHECK(OPS->init() == 0);
    p->a.priv = calloc(1, pscom_plugin_verbs.con_priv_size);
    p->b.priv = calloc(1, pscom_plugin_verbs.con_priv_size);
    CHECK(p->a.priv && p->b.priv);
    CHECK(OPS->hs_start(&p->a, p->a.priv, ba, &la) == 0);
    CHECK(OPS->hs_start(&p->b, p->b.priv, bb, &lb) == 0);
    vb_wireup_t w;
    CHECK(vb_wireup_decode(bb, lb, &w) == 0);
    p->qpn_b = w.qpn;
    CHECK(OPS->hs_connect(&p->b, p->b.priv, ba, la) == 0);
    CHECK(OPS->hs_connect(&p->a, p->a.priv, bb, lb) == 0);
    CHECK(OPS->open(&p->a, p->a.priv, -1) == 1);
}

static void pair_open_b(struct pair *p)
{
    CHECK(OPS->open(&p->b, p->b.priv, -1) == 1);
    CHECK(OPS->rma_register(NULL, mem_a, MEM, p->key, &p->key_len,
                            &p->region) == 0);
    vb_rmakey_t k;
    CHECK(vb_rmakey_decode(p->key, p->key_len, &k) == 0);
    show(k.rkey, (uintptr_t)mem_a, MEM, true);
}

static void pair_close(struct pair *p)
{
    OPS->rma_deregister(NULL, p->region);
    OPS->close(&p->a, p->a.priv);
    OPS->close(&p->b, p->b.priv);
    free(p->a.priv);
    free(p->b.priv);
    OPS->destroy();
    CHECK(fake_stats.live_qp == 0 && fake_stats.live_mr == 0 &&
          fake_stats.live_cq == 0 && fake_stats.live_pd == 0 &&
          fake_stats.live_ctx == 0);
}

/* A field of 8 bytes changed by the program, or not. */
static uint64_t vary64(struct input *in, uint64_t v)
{
    switch (byte(in) % 6) {
    case 0: return v + (int8_t)byte(in);
    case 1: return v + ((uint64_t)u16(in) << 8);
    case 2: return v ^ (1ull << (byte(in) % 64));
    case 3: return (uint64_t)u16(in);
    default: return v;
    }
}

/* ---------------------------------------------------------------------- */
/* The steps                                                              */
/* ---------------------------------------------------------------------- */

/* A message of the program's making to B: a slot header, handles, stream
 * bytes; its parts agree or not. */
static void op_raw(struct input *in, struct pair *p)
{
    uint8_t msg[MAX_MSG];
    unsigned mode = byte(in);
    size_t len;
    memset(msg, 0, sizeof(msg));
    if (mode & 1) {
        len = u16(in) % (MAX_MSG + 1);
        take_up_to(in, msg, len);
    } else {
        unsigned nrel = mode & 2 ? byte(in) % 4 : 0;
        size_t plen = u16(in) % (MAX_MSG - VB_MSG_HDR_LEN - 4 * 3);
        vb_msg_hdr_t h = {.credits = (uint16_t)(byte(in) % 4),
                          .nrel = (uint8_t)nrel, .len = (uint32_t)plen};
        vb_msg_encode(&h, msg);
        for (unsigned i = 0; i < nrel; i++) {
            uint32_t hd = p->nhandle_b && (mode & 4)
                              ? p->handle_b[byte(in) % p->nhandle_b]
                              : (uint32_t)u16(in);
            vb_msg_put_handle(msg, i, hd);
        }
        len = VB_MSG_HDR_LEN + 4 * nrel;
        take_up_to(in, msg + len, plen);
        len += plen;
        if (mode & 8) len = len + (int8_t)byte(in) % 5; /* disagree */
        if (len > MAX_MSG) len = MAX_MSG;
    }
    fake_deliver(p->qpn_b, msg, (uint32_t)len);
}

/* A sends B a frame: a header and a body of the program's length. */
static void op_frame(struct input *in, struct pair *p)
{
    struct psc_con *a = &p->a;
    size_t bl = u16(in) % 3000;
    if (a->out_len + 8 + bl > sizeof(a->out)) return;
    pscom_header_net_t h = {.msg_type = 0, .data_len = bl};
    memcpy(a->out + a->out_len, &h, 8);
    memset(a->out + a->out_len + 8, (int)bl, bl);
    a->out_len += 8 + bl;
    OPS->tx_kick(a, a->priv);
}

/* A lends a slice of its buffer (the rendezvous of a send). */
static void op_lend_a(struct input *in, struct pair *p)
{
    if (p->ndesc == LENT_MAX) return;
    size_t off = u16(in) % MEM, len = u16(in) % (MEM - off) + 1;
    size_t n = OPS->rndv_describe(&p->a, p->a.priv, mem_a + off, len,
                                  p->desc[p->ndesc]);
    CHECK(n <= sizeof(p->desc[0]));
    if (!n) return;
    vb_rndv_desc_t d;
    CHECK(vb_rndv_decode(p->desc[p->ndesc], n, &d) == 0);
    CHECK(d.addr == (uintptr_t)(mem_a + off) && d.len == len);
    show(d.rkey, d.addr, len, false);
    p->ndesc++;
}

/* B lends one, for made-up messages to release. */
static void op_lend_b(struct input *in, struct pair *p)
{
    if (p->nhandle_b == LENT_MAX) return;
    size_t off = u16(in) % MEM, len = u16(in) % (MEM - off) + 1;
    uint8_t blob[64];
    vb_rndv_desc_t d;
    size_t n = OPS->rndv_describe(&p->b, p->b.priv, mem_b + off, len, blob);
    if (!n) return;
    CHECK(vb_rndv_decode(blob, n, &d) == 0);
    show(d.rkey, d.addr, d.len, false);
    p->handle_b[p->nhandle_b++] = d.handle;
}

/* B reads what a descriptor of A's names, changed or not. */
static void op_pull(struct input *in, struct pair *p)
{
    if (!p->ndesc) return;
    uint8_t blob[VB_RNDV_LEN];
    memcpy(blob, p->desc[byte(in) % p->ndesc], VB_RNDV_LEN);
    vb_rndv_desc_t d;
    CHECK(vb_rndv_decode(blob, sizeof(blob), &d) == 0);
    unsigned mode = byte(in);
    if (mode & 1) d.rkey = (uint32_t)vary64(in, d.rkey);
    if (mode & 2) d.addr = vary64(in, d.addr);
    if (mode & 4) d.len = vary64(in, d.len);
    if (mode & 8) d.handle = (uint32_t)vary64(in, d.handle);
    size_t blen = sizeof(blob);
    if (vb_rndv_encode(&d, blob, sizeof(blob)) < 0) {
        blen = take_up_to(in, blob, sizeof(blob)); /* bytes as they come */
        if (vb_rndv_decode(blob, blen, &d)) memset(&d, 0, sizeof(d));
    }
    size_t off = u16(in) % MEM;
    size_t len = mode & 16 ? d.len + (int8_t)byte(in) % 3 : d.len;
    if (len > MEM - off) len = MEM - off;
    static uint8_t before[MEM];
    memset(mem_b + off, 0xa5, len);
    memcpy(before, mem_b, MEM);
    int rc = OPS->rndv_pull(&p->b, p->b.priv, blob, blen, mem_b + off, len);
    CHECK(!memcmp(before, mem_b, off));
    CHECK(!memcmp(before + off + len, mem_b + off + len, MEM - off - len));
    if (rc == 0 && len) {
        CHECK(len <= d.len);
        CHECK(shown(d.rkey, d.addr, len, false));
        if (in_mem_a(d.addr, len))
            CHECK(!memcmp(mem_b + off, (const void *)(uintptr_t)d.addr, len));
    }
}

/* B gets or puts with A's region key, changed or not. */
static void op_rma(struct input *in, struct pair *p)
{
    unsigned mode = byte(in);
    uint8_t key[PSCOM_PLUGIN_RKEY_MAX];
    size_t key_len = p->key_len;
    memcpy(key, p->key, key_len);
    vb_rmakey_t k;
    CHECK(vb_rmakey_decode(key, key_len, &k) == 0);
    if (mode & 1) k.rkey = (uint32_t)vary64(in, k.rkey);
    if (mode & 2) k.addr = vary64(in, k.addr);
    if (mode & 4) k.len = vary64(in, k.len);
    if (mode & 8) k.lid = (uint16_t)vary64(in, k.lid);
    if (vb_rmakey_encode(&k, key, sizeof(key)) < 0)
        key_len = take_up_to(in, key, VB_RMAKEY_LEN);
    void *prkey = NULL;
    if (OPS->rma_rkey(&p->b, p->b.priv, key, key_len, &prkey)) return;
    if (vb_rmakey_decode(key, key_len, &k)) CHECK(0); /* taken: well formed */
    struct rma *r = NULL;
    for (int i = 0; i < RMA_MAX && !r; i++)
        if (!rmas[i].started) r = &rmas[i];
    size_t len = u16(in) % sizeof(r->local) + 1;
    uint64_t raddr = k.addr + (int16_t)u16(in);
    if (r) {
        *r = (struct rma){.started = true, .put = mode & 16, .len = len,
                          .rkey = k.rkey, .remote = (uintptr_t)raddr};
        /* (also the part in A's buffer of a put that reaches beyond it:
         * the HCA carries out what a registration covers, chunk by chunk) */
        for (size_t i = 0; r->put && i < len; i++)
            if (in_mem_a(r->remote + i, 1))
                r->local[i] = *(const uint8_t *)(r->remote + i);
        int rc = r->put ? OPS->rma_put(&p->b, p->b.priv, prkey, r->local,
                                       raddr, len, r)
                        : OPS->rma_get(&p->b, p->b.priv, prkey, r->local,
                                       raddr, len, r);
        /* Started: within the key's range. */
        if (rc == 1)
            CHECK(len <= k.len && raddr >= k.addr &&
                  raddr - k.addr <= k.len - len);
        else r->started = false;
    }
    OPS->rma_rkey_release(&p->b, p->b.priv, prkey);
}

enum op {
    OP_RAW,
    OP_FRAME,
    OP_LEND_A,
    OP_LEND_B,
    OP_PULL,
    OP_RMA,
    OP_PROGRESS,
    OP_FAIL_B,
    OP_COUNT
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool quiet;
    if (!quiet) {
        /* every input is malformed on purpose */
        fake_core_log_level = 0;
        quiet = true;
    }
    struct input in = {data, size};
    static struct pair p;
    memset(rmas, 0, sizeof(rmas));
    nvisible = 0;
    static bool ref_built;
    if (!ref_built) {
        ref_built = true;
        memset(arena_ref, GUARD, sizeof(arena_ref));
        for (size_t i = 0; i < MEM; i++)
            arena_ref[mem_a - arena_a + i] = pattern(i);
    }
    memcpy(arena_a, arena_ref, sizeof(arena_a));
    unsigned mode = configure(&in);
    pair_open(&p);
    /* Messages before B is open: kept, then handled at its open. */
    for (unsigned n = mode & 64 ? byte(&in) % 8 : 0; n; n--) {
        op_raw(&in, &p);
        OPS->progress();
    }
    pair_open_b(&p);

    for (unsigned n = 0; in.left && n < MAX_STEPS; n++) {
        switch (byte(&in) % OP_COUNT) {
        case OP_RAW: op_raw(&in, &p); break;
        case OP_FRAME: op_frame(&in, &p); break;
        case OP_LEND_A: op_lend_a(&in, &p); break;
        case OP_LEND_B: op_lend_b(&in, &p); break;
        case OP_PULL: op_pull(&in, &p); break;
        case OP_RMA: op_rma(&in, &p); break;
        case OP_PROGRESS:
            for (unsigned r = byte(&in) % 4 + 1; r; r--) OPS->progress();
            break;
        case OP_FAIL_B: p.b.fail_next_push = true; break;
        }
        CHECK(p.a.errors <= 1 && p.b.errors <= 1);
    }
    for (int r = 0; r < 8; r++) OPS->progress();
    CHECK(p.a.errors <= 1 && p.b.errors <= 1);
    CHECK(fake_stats.bad_transition == 0);
    CHECK(!memcmp(arena_a, arena_ref, sizeof(arena_a)));
    pair_close(&p);
    return 0;
}
