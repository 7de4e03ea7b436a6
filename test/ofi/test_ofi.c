/*
 * Unit tests of the ofi plugin (plugins/ofi): its handshake blob, the send
 * FIFO that reports frames to the core in order, reassembly and ordering of
 * received frames, -EAGAIN from a full queue, error completions, the
 * zero-copy path for rendezvous data, closing with operations posted, and
 * pull mode (receivers read large frames from the sender's memory).
 *
 * The plugin runs against fakes (fake.h): an in-memory libfabric endpoint
 * and a core whose connections are plain structs. Both ends of a
 * connection live in this process and share the endpoint, as two sockets of
 * one process do.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "fake.h"
#include "ofi_proto.h"
#include "ofi_watch.h"

static const pscom_plugin_ops_t *ops;
static char region_path[128]; /* test_region_lock_not_inherited's, for teardown */

struct pair {
    struct psc_con a, b;
    void *pa, *pb;
    ofi_blob_t blob_a, blob_b; /* what each side announced */
};

static void progress(unsigned rounds)
{
    for (unsigned i = 0; i < rounds; i++) ops->progress();
}

static int setup(void **state)
{
    /* Frames up to PSP_OFI_COPY would be finished at once: the cases here
     * look at frames libfabric still holds (test_copy_done_at_once sets
     * it). */
    setenv("PSP_OFI_COPY", "0", 1);
    fake_reset();
    ops = pscom_plugin_ofi.ops;
    return 0;
}

static int teardown(void **state)
{
    unsetenv("PSP_OFI_BOUNCE");
    unsetenv("PSP_OFI_MAX_MSG");
    unsetenv("PSP_OFI_SENDQ");
    unsetenv("PSP_OFI_RECVQ");
    unsetenv("PSP_OFI_LINGER");
    unsetenv("PSP_OFI_PULL");
    unsetenv("PSP_OFI_SPLIT");
    unsetenv("PSP_OFI_SWEEP");
    unsetenv("PSP_OFI_COPY");
    if (region_path[0]) unlink(region_path); /* also when a check failed */
    region_path[0] = '\0';
    return 0;
}

/* The pre-connection socket pair_handshake opens A with (once), or -1. */
static int next_fd_a = -1;

/* Two new connections na and nb of the plugin, not yet connected. */
static void pair_init(struct pair *p, const char *na, const char *nb)
{
    p->pa = calloc(1, pscom_plugin_ofi.con_priv_size);
    p->pb = calloc(1, pscom_plugin_ofi.con_priv_size);
    fake_con_init(&p->a, na, p->pa);
    fake_con_init(&p->b, nb, p->pb);
}

/* Connect p's connections to each other and open them; no_flags: as if
 * neither blob had flags. */
static void pair_handshake(struct pair *p, int no_flags)
{
    uint8_t ba[4096], bb[4096];
    size_t la = sizeof(ba), lb = sizeof(bb);
    const char *why;

    assert_int_equal(ops->hs_start(&p->a, p->pa, ba, &la), 0);
    assert_int_equal(ops->hs_start(&p->b, p->pb, bb, &lb), 0);
    if (no_flags) ba[4] = ba[5] = bb[4] = bb[5] = 0;
    assert_int_equal(ofi_blob_decode(ba, la, &p->blob_a, &why), 0);
    assert_int_equal(ofi_blob_decode(bb, lb, &p->blob_b, &why), 0);
    assert_int_not_equal(p->blob_a.conid, p->blob_b.conid);
    assert_int_equal(ops->hs_connect(&p->b, p->pb, ba, la), 0);
    assert_int_equal(ops->hs_connect(&p->a, p->pa, bb, lb), 0);
    assert_int_equal(ops->open(&p->a, p->pa, next_fd_a), next_fd_a >= 0);
    next_fd_a = -1;
    assert_int_equal(ops->open(&p->b, p->pb, -1), 0);
}

/* Two new connections na and nb of the plugin, connected to each other. */
static void pair_connect(struct pair *p, const char *na, const char *nb,
                         int no_flags)
{
    pair_init(p, na, nb);
    pair_handshake(p, no_flags);
}

static void pair_open(struct pair *p)
{
    assert_int_equal(ops->init(), 0);
    pair_connect(p, "A", "B", 0);
}

/* Free both connections (closed already). */
static void pair_free(struct pair *p)
{
    free(p->pa);
    free(p->pb);
    fake_con_free(&p->a);
    fake_con_free(&p->b);
}

/* Close both connections and free them (the plugin stays). */
static void pair_drop(struct pair *p)
{
    ops->close(&p->a, p->pa);
    ops->close(&p->b, p->pb);
    pair_free(p);
}

static void pair_close(struct pair *p)
{
    pair_drop(p);
    progress(4);
    ops->destroy();
}

/* Queue frames on `from`, kick, and drive progress until they arrived. */
static size_t send_frames(struct pair *p, struct psc_con *from,
                          struct fake_frame **f, unsigned n, uint8_t *expect)
{
    size_t total = 0;
    for (unsigned i = 0; i < n; i++) {
        fake_enqueue(from, f[i]);
        total += fake_frame_bytes(f[i], expect + total);
    }
    ops->tx_kick(from, from->priv);
    return total;
}

/* ---------------------------------------------------------------------- */
/* Handshake blob                                                         */

static size_t valid_blob(uint8_t *buf, size_t cap, ofi_blob_t *b)
{
    memset(b, 0, sizeof(*b));
    b->flags = OFI_BLOB_PULL;
    b->conid = 0x01020304;
    b->bounce = 16384;
    b->max_msg = 1u << 20;
    b->addr_format = 2;
    strcpy(b->prov, "tcp;ofi_rxm");
    b->addr_len = 16;
    for (int i = 0; i < 16; i++) b->addr[i] = (uint8_t)(i * 7);
    return ofi_blob_encode(b, buf, cap);
}

static void test_blob_roundtrip(void **state)
{
    uint8_t buf[4096];
    ofi_blob_t in, out;
    const char *why = NULL;
    size_t n = valid_blob(buf, sizeof(buf), &in);
    assert_int_equal(n, 29 + strlen("tcp;ofi_rxm") + 16);
    assert_int_equal(ofi_blob_decode(buf, n, &out, &why), 0);
    assert_int_equal(out.flags, OFI_BLOB_PULL);
    assert_int_equal(out.conid, in.conid);
    assert_int_equal(out.bounce, in.bounce);
    assert_int_equal(out.max_msg, in.max_msg);
    assert_int_equal(out.addr_format, in.addr_format);
    assert_string_equal(out.prov, in.prov);
    assert_int_equal(out.addr_len, in.addr_len);
    assert_memory_equal(out.addr, in.addr, in.addr_len);
    /* Does not fit: 0, nothing promised about buf. */
    assert_int_equal(ofi_blob_encode(&in, buf, n - 1), 0);
    /* Unknown flags are dropped, not refused. */
    n = ofi_blob_encode(&in, buf, sizeof(buf));
    buf[4] |= 0x40;
    buf[5] = 0x80;
    assert_int_equal(ofi_blob_decode(buf, n, &out, &why), 0);
    assert_int_equal(out.flags, OFI_BLOB_PULL);
}

static void test_blob_malformed(void **state)
{
    uint8_t buf[4096], bad[4096];
    ofi_blob_t b, out;
    const char *why;
    size_t n = valid_blob(buf, sizeof(buf), &b);

    /* Every truncation and every extension is refused. */
    for (size_t len = 0; len < n; len++) {
        why = NULL;
        assert_int_not_equal(ofi_blob_decode(buf, len, &out, &why), 0);
        assert_non_null(why);
    }
    memcpy(bad, buf, n);
    bad[n] = 0;
    assert_int_equal(ofi_blob_decode(bad, n + 1, &out, &why), -EPROTO);
    assert_int_equal(ofi_blob_decode(NULL, 0, &out, &why), -EPROTO);

    struct {
        size_t off;
        uint8_t val;
        int rc;
    } cases[] = {
        {0, 'X', -EPROTO},            /* magic */
        {3, 2, -EPROTONOSUPPORT},     /* version */
        {6, 0, -EPROTO},              /* addr_len 0 */
        {7, 0xff, -EPROTO},           /* addr_len huge */
        {28, 0, -EPROTO},             /* prov_len 0 */
        {28, 64, -EPROTO},            /* prov_len > 63 */
        {28, 10, -EPROTO},            /* prov_len does not match */
        {29, 0, -EPROTO},             /* NUL in the provider name */
        {29, '\n', -EPROTO},          /* a control character in it */
        {29, 0x80, -EPROTO},          /* not ASCII */
        {12, 0, -EPROTO},             /* bounce 0 (low byte 0, 16384 -> 16384?) */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        memcpy(bad, buf, n);
        bad[cases[i].off] = cases[i].val;
        if (cases[i].off == 12) memset(bad + 12, 0, 4); /* bounce 0 */
        assert_int_equal(ofi_blob_decode(bad, n, &out, &why), cases[i].rc);
    }
    /* bounce above the limit, max_msg below bounce */
    memcpy(bad, buf, n);
    bad[15] = 0x80;
    assert_int_equal(ofi_blob_decode(bad, n, &out, &why), -EPROTO);
    memcpy(bad, buf, n);
    memset(bad + 16, 0, 8);
    bad[16] = 100;
    assert_int_equal(ofi_blob_decode(bad, n, &out, &why), -EPROTO);
}

/* Random bytes and random mutations of a valid blob: decoding never reads
 * past the end (ASan/valgrind would tell) and what it accepts is sane. */
static void test_blob_fuzz(void **state)
{
    uint8_t buf[4096], m[4096];
    ofi_blob_t b, out;
    const char *why;
    size_t n = valid_blob(buf, sizeof(buf), &b);
    srand(12345);
    for (int it = 0; it < 20000; it++) {
        size_t len;
        if (it & 1) {
            len = (size_t)rand() % 200;
            uint8_t *r = malloc(len ? len : 1);
            for (size_t i = 0; i < len; i++) r[i] = (uint8_t)rand();
            if (len >= 4 && (it & 2)) memcpy(r, "OFI\1", 4);
            if (!ofi_blob_decode(r, len, &out, &why)) {
                assert_true(out.addr_len >= 1 && out.addr_len <= OFW_ADDR_MAX);
                assert_true(out.bounce >= OFI_BOUNCE_MIN);
                assert_true(out.max_msg >= out.bounce);
                assert_int_equal(strlen(out.prov), (size_t)r[28]);
            }
            free(r);
        } else {
            memcpy(m, buf, n);
            len = n;
            for (int k = 0; k < 3; k++) m[rand() % n] = (uint8_t)rand();
            if (rand() & 1) len = (size_t)rand() % (n + 8);
            uint8_t *r = malloc(len ? len : 1);
            memcpy(r, m, len < n ? len : n);
            if (len > n) memset(r + n, 0, len - n);
            (void)ofi_blob_decode(r, len, &out, &why);
            free(r);
        }
    }
}

/* Blobs from a peer that cannot be used: the plugin refuses them, so that
 * the core tries the next transport. */
static void test_hs_connect_rejects(void **state)
{
    uint8_t buf[4096], own[4096];
    ofi_blob_t b;
    size_t lo = sizeof(own);
    struct psc_con c;
    void *priv = calloc(1, pscom_plugin_ofi.con_priv_size);

    assert_int_equal(ops->init(), 0);
    fake_con_init(&c, "C", priv);
    assert_int_equal(ops->hs_start(&c, priv, own, &lo), 0);

    size_t n = valid_blob(buf, sizeof(buf), &b);
    /* another provider than ours ("fake;prov") */
    assert_int_equal(ops->hs_connect(&c, priv, buf, n), -EPROTONOSUPPORT);
    /* our provider, another address format */
    strcpy(b.prov, fake.prov);
    n = ofi_blob_encode(&b, buf, sizeof(buf));
    assert_int_equal(ops->hs_connect(&c, priv, buf, n), -EAFNOSUPPORT);
    /* garbage */
    assert_int_equal(ops->hs_connect(&c, priv, "garbage", 7), -EPROTO);
    assert_int_equal(ops->hs_connect(&c, priv, buf, 3), -EPROTO);
    /* the address vector refuses the address (the fake's names have 9
     * bytes) */
    b.addr_format = 42;
    b.addr_len = 9;
    n = ofi_blob_encode(&b, buf, sizeof(buf));
    fake.av_fails = 1;
    assert_int_not_equal(ops->hs_connect(&c, priv, buf, n), 0);
    fake.av_fails = 0;
    assert_int_equal(ops->hs_connect(&c, priv, buf, n), 0);
    assert_int_equal(c.errors, 0);

    ops->hs_abort(&c, priv);
    ops->destroy();
    free(priv);
    fake_con_free(&c);
}

/* The peer's endpoint name goes to fi_av_insert, which takes no length:
 * the provider reads as much as the address format says (a string up to
 * its NUL). hs_connect refuses a name that is not whole for its format,
 * with a warning naming the connection and what is wrong, and inserts
 * nothing; the core then tries the next transport. Before, a 512-byte
 * string without a NUL was read past its end (ASan: heap-buffer-overflow
 * in the shm provider). */
static void test_hs_connect_checks_endpoint_names(void **state)
{
    struct sockaddr_in in = {.sin_family = AF_INET};
    struct sockaddr_in6 in6 = {.sin6_family = AF_INET6};
    struct sockaddr_in in_as6 = {.sin_family = AF_INET6};
    uint8_t nul_first[8] = {0}, no_nul[OFW_ADDR_MAX];
    memset(no_nul, 'A', sizeof(no_nul));
    static const char ok_str[] = "fi_shm://pscom-1-0000abcd";
    static const char inner_nul[] = "fi_shm://x\0y";
    const struct {
        uint32_t format;
        const void *addr;
        size_t len;
        int ok;
    } cases[] = {
        {OFI_FMT_STR, ok_str, sizeof(ok_str), 1},
        {OFI_FMT_STR, "x", 2, 1},
        {OFI_FMT_STR, no_nul, sizeof(no_nul), 0},
        {OFI_FMT_STR, ok_str, sizeof(ok_str) - 1, 0}, /* NUL cut off */
        {OFI_FMT_STR, inner_nul, sizeof(inner_nul), 0},
        {OFI_FMT_STR, nul_first, 1, 0},
        {OFI_FMT_SOCKADDR_IN, &in, sizeof(in), 1},
        {OFI_FMT_SOCKADDR_IN, &in, sizeof(in) - 1, 0},
        {OFI_FMT_SOCKADDR_IN, &in6, sizeof(in), 0}, /* a 16-byte prefix */
        {OFI_FMT_SOCKADDR_IN, &in_as6, sizeof(in_as6), 0},
        {OFI_FMT_SOCKADDR_IN6, &in6, sizeof(in6), 1},
        {OFI_FMT_SOCKADDR_IN6, &in6, sizeof(in), 0},
        {OFI_FMT_SOCKADDR_IN6, &in, sizeof(in), 0},
        {OFI_FMT_SOCKADDR, &in, sizeof(in), 1},
        {OFI_FMT_SOCKADDR, &in6, sizeof(in6), 1},
        {OFI_FMT_SOCKADDR, &in_as6, sizeof(in_as6), 0},
        {OFI_FMT_SOCKADDR, nul_first, 1, 0},
        {42, "fake-addr", 9, 1}, /* other formats: as long as ours */
        {42, "fake-addr+", 10, 0},
        {42, "fake", 4, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        fake_reset();
        fake_core_reset();
        fake.addr_format = cases[i].format;
        assert_int_equal(ops->init(), 0);
        struct psc_con c;
        void *priv = calloc(1, pscom_plugin_ofi.con_priv_size);
        uint8_t own[4096], buf[4096];
        size_t lo = sizeof(own);
        fake_con_init(&c, "C <-> peer:1", priv);
        assert_int_equal(ops->hs_start(&c, priv, own, &lo), 0);

        ofi_blob_t b;
        valid_blob(buf, sizeof(buf), &b);
        strcpy(b.prov, fake.prov);
        b.addr_format = cases[i].format;
        b.addr_len = cases[i].len;
        memcpy(b.addr, cases[i].addr, cases[i].len);
        size_t n = ofi_blob_encode(&b, buf, sizeof(buf));
        int rc = ops->hs_connect(&c, priv, buf, n);
        if (cases[i].ok) {
            assert_int_equal(rc, 0);
            assert_int_equal(fake.av_inserts, 1);
        } else {
            assert_int_equal(rc, -EPROTO);
            assert_int_equal(fake.av_inserts, 0);
            assert_non_null(strstr(fake_core_log, "C <-> peer:1: the peer "
                                                  "sent a malformed endpoint "
                                                  "name"));
            assert_non_null(strstr(fake_core_reason, "endpoint name of"));
        }
        ops->hs_abort(&c, priv);
        ops->destroy();
        free(priv);
        fake_con_free(&c);
    }
}

static void test_init_and_endpoint_failures(void **state)
{
    uint8_t blob[4096];
    size_t len = sizeof(blob);
    struct psc_con c;
    void *priv = calloc(1, pscom_plugin_ofi.con_priv_size);
    fake_con_init(&c, "C", priv);

    fake.select_fails = 1;
    fake_core_reason[0] = 0;
    assert_true(ops->init() < 0);
    assert_non_null(strstr(fake_core_reason, "no provider")); /* for pscom_info */
    fake.select_fails = 0;

    fake.ep_open_fails = 1;
    assert_int_equal(ops->init(), 0);
    assert_int_equal(ops->hs_start(&c, priv, blob, &len), -EIO);
    /* remembered: no second attempt, same answer */
    fake.ep_open_fails = 0;
    len = sizeof(blob);
    assert_int_equal(ops->hs_start(&c, priv, blob, &len), -EIO);
    assert_false(fake_ep_is_open());
    ops->destroy();

    /* A blob buffer too small for the endpoint name. */
    assert_int_equal(ops->init(), 0);
    len = 20;
    assert_int_equal(ops->hs_start(&c, priv, blob, &len), -ENOBUFS);
    ops->destroy();
    free(priv);
    fake_con_free(&c);
}

/* ---------------------------------------------------------------------- */
/* Sending and receiving                                                  */

static void check_stream(struct psc_con *to, const uint8_t *expect,
                         size_t total, unsigned frames)
{
    assert_int_equal(to->errors, 0);
    assert_int_equal(to->rx_len, total);
    assert_memory_equal(to->rx, expect, total);
    assert_int_equal(to->frames_in, frames);
}

/* Frames of every shape arrive whole and in order: empty bodies, injected
 * ones, one-message ones, head + body, a head larger than the receive
 * buffers, bodies in chunks. */
/* Frames of n shapes {xheader, body} from A to B: they arrive whole and in
 * order, are reported, and nothing stays unexpected. */
static void send_shapes(struct pair *p, const size_t (*shapes)[2], unsigned n)
{
    struct fake_frame **f = calloc(n, sizeof(*f));
    size_t cap = 0;
    for (unsigned i = 0; i < n; i++) {
        f[i] = fake_frame_new(i % 2 ? 0 : 1, shapes[i][0], shapes[i][1], i);
        cap += f[i]->hl + f[i]->bl;
    }
    uint8_t *expect = malloc(cap);
    size_t total = send_frames(p, &p->a, f, n, expect);
    progress(200);

    check_stream(&p->b, expect, total, n);
    assert_int_equal(p->a.qdone, n);
    assert_int_equal(p->a.tx_done_bytes, total);
    assert_int_equal(fake_unexpected_count(), 0);
    free(expect);
    free(f);
}

static void test_stream_shapes(void **state)
{
    setenv("PSP_OFI_BOUNCE", "256", 1);
    fake.max_msg_size = 1000; /* chunks of 1000 bytes */
    struct pair p;
    pair_open(&p);

    static const size_t shapes[][2] = {
        {0, 0},    {0, 8},    {16, 40},  {0, 200},  {24, 232}, {0, 249},
        {0, 1000}, {8, 4096}, {200, 0},  {250, 10}, {255, 3000}, {0, 2500},
        {3, 1},    {0, 999},  {0, 1001}, {64, 100000},
    };
    send_shapes(&p, shapes, sizeof(shapes) / sizeof(shapes[0]));
    assert_true(fake.largest_msg <= 1000);
    assert_true(fake.injects > 0);
    pair_close(&p);
}

/* n frames of all sizes up to 40000 bytes each way at once, 4 receives
 * posted and 8 frames in flight per connection, completions reversed in
 * each batch: every frame arrives, in order, and is reported. */
static void both_ways_reversed(unsigned n, uint32_t seed)
{
    setenv("PSP_OFI_RECVQ", "4", 1);
    setenv("PSP_OFI_SENDQ", "8", 1);
    fake.reverse_cq = 1;
    struct pair p;
    pair_open(&p);

    struct fake_frame **fa = calloc(n, sizeof(*fa));
    struct fake_frame **fb = calloc(n, sizeof(*fb));
    size_t cap = 0;
    for (unsigned i = 0; i < n; i++) {
        size_t bl = (i * 7919) % 40000;
        fa[i] = fake_frame_new(0, i % 17, bl, seed + i);
        fb[i] = fake_frame_new(0, i % 5, bl / 3, seed + n + i);
        cap += fa[i]->hl + fa[i]->bl;
    }
    uint8_t *ea = malloc(cap), *eb = malloc(cap);
    size_t ta = send_frames(&p, &p.a, fa, n, ea);
    size_t tb = send_frames(&p, &p.b, fb, n, eb);
    progress(5000);

    check_stream(&p.b, ea, ta, n);
    check_stream(&p.a, eb, tb, n);
    assert_int_equal(p.a.tx_done_bytes, ta);
    assert_int_equal(p.b.tx_done_bytes, tb);
    free(ea);
    free(eb);
    free(fa);
    free(fb);
    pair_close(&p);
}

static void test_order_reversed_completions(void **state)
{
    both_ways_reversed(300, 1000);
}

/* The send FIFO: a frame is reported to the core only when it and every
 * frame before it completed, however the completions arrive (frames sent
 * from the core's buffer: no copies). */
static void test_completion_fifo(void **state)
{
    fake.hold_tx = 1;
    struct pair p;
    pair_open(&p);

    struct fake_frame *f[4];
    uint8_t expect[4 * 2000];
    f[0] = fake_frame_new(0, 0, 1000, 1);
    f[1] = fake_frame_new(0, 0, 1100, 2);
    f[2] = fake_frame_new(0, 0, 1, 3);    /* injected: done at once */
    f[3] = fake_frame_new(0, 0, 1300, 4);
    size_t total = send_frames(&p, &p.a, f, 4, expect);
    progress(10);
    assert_int_equal(fake_held_count(), 3);
    assert_int_equal(p.a.tx_done_calls, 0);

    fake_release_held_one(2); /* frame 3 */
    fake_release_held_one(1); /* frame 1 */
    progress(10);
    assert_int_equal(p.a.tx_done_calls, 0); /* frame 0 still in flight */

    fake_release_held_one(0); /* frame 0 */
    progress(10);
    assert_int_equal(p.a.qdone, 4);
    assert_int_equal(p.a.tx_done_bytes, total);
    check_stream(&p.b, expect, total, 4);
    pair_close(&p);
}

/* Frames too large to inject but within PSP_OFI_COPY go from copies and
 * are reported at once, while libfabric still holds their sends: the core
 * may reuse their memory at once, and the peer still gets what was sent.
 * A larger frame is reported only when libfabric completed it, and so are
 * the copied frames behind it (queue order). */
static void test_copy_done_at_once(void **state)
{
    setenv("PSP_OFI_COPY", "4k", 1);
    fake.hold_tx = 1;
    struct pair p;
    pair_open(&p);

    struct fake_frame *f[3];
    uint8_t expect[3 * 6000];
    f[0] = fake_frame_new(0, 0, 1000, 11);
    f[1] = fake_frame_new(0, 7, 3000, 12);
    size_t total = send_frames(&p, &p.a, f, 2, expect);
    assert_int_equal(fake_held_count(), 2);
    assert_int_equal(p.a.qdone, 2);
    assert_int_equal(p.a.tx_done_bytes, total);
    /* The core's memory of done frames is the application's again. */
    memset(f[0]->body, 0xee, f[0]->bl);
    memset(f[1]->body, 0xee, f[1]->bl);

    f[2] = fake_frame_new(0, 0, 5000, 13); /* over 4k: from the core's buffer */
    total += send_frames(&p, &p.a, &f[2], 1, expect + total);
    progress(10);
    assert_int_equal(fake_held_count(), 3);
    assert_int_equal(p.a.qdone, 2);

    fake_release_held_one(2);
    progress(10);
    assert_int_equal(p.a.qdone, 3);
    assert_int_equal(p.a.tx_done_bytes, total);
    fake_release_held_one(1);
    fake_release_held_one(0);
    progress(10);
    check_stream(&p.b, expect, total, 3);
    pair_close(&p);
}

/* Copies outlive their connection: at most PSP_OFI_SENDQ of them are in
 * flight per connection (a frame beyond waits for libfabric, as without
 * copies); a close with copies in flight keeps the plugin progressed (a
 * hold) until the last completes; the plugin's destroy waits for copies
 * still in flight, within PSP_OFI_LINGER, and says when it gave up. */
static void test_copies_outlive_close(void **state)
{
    setenv("PSP_OFI_COPY", "4k", 1);
    setenv("PSP_OFI_SENDQ", "2", 1);
    setenv("PSP_OFI_LINGER", "200", 1);
    fake.hold_tx = 1;
    fake_core_holds = 0;
    fake_core_reset();
    struct pair p;
    pair_open(&p);

    struct fake_frame *f[3];
    uint8_t expect[3 * 1100];
    for (unsigned i = 0; i < 3; i++) f[i] = fake_frame_new(0, 0, 1000, 21 + i);
    size_t total = send_frames(&p, &p.a, f, 3, expect);
    progress(10);
    assert_int_equal(fake_held_count(), 3);
    assert_int_equal(p.a.qdone, 2); /* the third is not a copy */
    fake_release_held_one(2);
    progress(10);
    assert_int_equal(p.a.qdone, 3);
    assert_int_equal(p.a.tx_done_bytes, total);
    assert_int_equal(fake_core_holds, 0); /* open connections need none */

    ops->close(&p.a, p.pa);
    assert_int_equal(fake_core_holds, 1);
    fake_release_held_one(0);
    progress(10);
    assert_int_equal(fake_core_holds, 1); /* one copy still in flight */
    fake_release_held_one(0);
    progress(10);
    assert_int_equal(fake_core_holds, 0);
    check_stream(&p.b, expect, total, 3);

    /* The destroy waits for a copy of a closed connection ... */
    struct fake_frame *g = fake_frame_new(0, 0, 1000, 31);
    uint8_t gexp[1100];
    fake_enqueue(&p.b, g);
    fake_frame_bytes(g, gexp);
    ops->tx_kick(&p.b, p.pb);
    assert_int_equal(p.b.qdone, 1);
    ops->close(&p.b, p.pb);
    assert_int_equal(fake_core_holds, 1);
    fake.release_held_at = fake.cq_reads + 5;
    ops->destroy();
    assert_true(fake.cq_reads >= fake.release_held_at); /* it waited */
    assert_int_equal(fake_core_holds, 0);
    assert_null(strstr(fake_core_log, "still in flight"));
    pair_free(&p);

    /* ... and gives up after PSP_OFI_LINGER, saying so. */
    fake.release_held_at = 0;
    pair_open(&p);
    fake_enqueue(&p.a, fake_frame_new(0, 0, 1000, 32));
    ops->tx_kick(&p.a, p.pa);
    assert_int_equal(p.a.qdone, 1);
    ops->close(&p.a, p.pa);
    ops->close(&p.b, p.pb);
    ops->destroy();
    assert_int_equal(fake_core_holds, 0);
    assert_non_null(strstr(fake_core_log, "1 sends finished early "
                                          "(PSP_OFI_COPY) were still in "
                                          "flight after 200 ms"));
    pair_free(&p);
}

/* A close lends the frames whose sends libfabric still reads from the
 * core's buffers; each is returned when its last message completed. While
 * any is lent the plugin holds the core's progress: the closed connection
 * may have been its last, and the core calls a plugin's progress only
 * while it has connections or a hold (before, the send of a frame lent by
 * the last connection never ended). */
static void test_lent_frames_hold_progress(void **state)
{
    fake.hold_tx = 1;
    fake_core_holds = 0;
    struct pair p;
    pair_open(&p);
    struct fake_frame *f[2];
    uint8_t expect[2 * 60000];
    f[0] = fake_frame_new(0, 0, 50000, 1); /* head and body: two sends */
    f[1] = fake_frame_new(0, 0, 5000, 2);  /* one send */
    send_frames(&p, &p.a, f, 2, expect);
    assert_int_equal(fake_held_count(), 3);
    ops->close(&p.b, p.pb);
    ops->close(&p.a, p.pa);
    assert_int_equal(p.a.lent, 2);
    assert_int_equal(fake_core_holds, 1);

    fake_release_held_one(0); /* frame 0's head */
    progress(5);
    assert_int_equal(p.a.returned, 0);
    assert_int_equal(fake_core_holds, 1);
    fake_release_held_one(0); /* frame 0's body */
    progress(5);
    assert_int_equal(p.a.returned, 1);
    assert_int_equal(fake_core_holds, 1);
    fake_release_held_one(0); /* frame 1 */
    progress(5);
    assert_int_equal(p.a.returned, 2);
    assert_int_equal(fake_core_holds, 0);
    ops->destroy();
    pair_free(&p);
}

/* A connection that failed here (a protocol error from a broken peer)
 * still lends the frames libfabric reads at its close: the peer lives,
 * and its provider goes on taking them. peer_ended: the peer's
 * pre-connection socket closed without a goodbye, as when its process
 * ended, and nothing is lent. Before, a failed connection lent nothing,
 * and the application could write a buffer still being sent. */
static void lend_after_local_failure(int peer_ended)
{
    fake.hold_tx = 1;
    fake_core_holds = 0;
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    next_fd_a = sv[0];
    struct pair p;
    pair_open(&p);
    struct fake_frame *f = fake_frame_new(0, 0, 5000, 1);
    uint8_t expect[6000];
    send_frames(&p, &p.a, &f, 1, expect);
    assert_int_equal(fake_held_count(), 1);
    uint8_t bad[4] = {0};
    fake_send_raw(bad, sizeof(bad), ofi_tag(p.blob_a.conid, 0, OFI_PART_FIRST));
    progress(2);
    assert_int_equal(p.a.errors, 1);
    assert_int_equal(p.a.err, PSCOM_ERR_IOERROR);
    if (peer_ended) close(sv[1]);
    ops->close(&p.a, p.pa);
    assert_int_equal(p.a.lent, !peer_ended);
    assert_int_equal(fake_core_holds, !peer_ended);
    fake_release_held(0);
    progress(5);
    assert_int_equal(p.a.returned, !peer_ended);
    assert_int_equal(fake_core_holds, 0);
    if (!peer_ended) close(sv[1]);
    ops->close(&p.b, p.pb);
    pair_free(&p);
    progress(4);
    ops->destroy();
}

static void test_lend_after_local_failure(void **state)
{
    lend_after_local_failure(0);
}

static void test_no_lend_when_peer_ended(void **state)
{
    lend_after_local_failure(1);
}

/* What the peer's end of A's pre-connection socket holds: 1 and the frame
 * count of a goodbye followed by EOF, 0 when nothing came yet. */
static int read_goodbye(int fd, uint64_t *frames)
{
    uint8_t bye[16];
    ssize_t n = recv(fd, bye, sizeof(bye), MSG_DONTWAIT);
    if (n < 0 && errno == EAGAIN) return 0;
    assert_int_equal(n, sizeof(bye));
    assert_memory_equal(bye, "OFIB", 4);
    *frames = 0;
    for (int i = 7; i >= 0; i--) *frames = *frames << 8 | bye[8 + i];
    assert_int_equal(recv(fd, bye, sizeof(bye), MSG_DONTWAIT), 0);
    return 1;
}

/* A connection closed with copies in flight says goodbye (the number of
 * frames the peer is to wait for; the peer waits at most 5 *
 * PSP_OFI_EOF_GRACE after it) only when they completed, or when
 * PSP_OFI_LINGER passed, with a warning: a sender that progresses again
 * only later must not lose them. */
static void test_goodbye_waits_for_copies(void **state)
{
    setenv("PSP_OFI_COPY", "4k", 1);
    setenv("PSP_OFI_LINGER", "100", 1);
    fake.hold_tx = 1;
    fake_core_holds = 0;
    fake_core_reset();
    int sv[2];
    uint64_t frames;
    struct pair p;

    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    next_fd_a = sv[0];
    pair_open(&p);
    fake_enqueue(&p.a, fake_frame_new(0, 0, 1000, 41));
    fake_enqueue(&p.a, fake_frame_new(0, 0, 1000, 42));
    ops->tx_kick(&p.a, p.pa);
    assert_int_equal(p.a.qdone, 2);
    ops->close(&p.a, p.pa);
    assert_int_equal(read_goodbye(sv[1], &frames), 0);
    fake_release_held_one(0);
    progress(10);
    assert_int_equal(read_goodbye(sv[1], &frames), 0);
    fake_release_held_one(0);
    progress(10);
    assert_int_equal(read_goodbye(sv[1], &frames), 1);
    assert_int_equal(frames, 2);
    assert_int_equal(fake_core_holds, 0);
    close(sv[1]);

    /* A copy that does not complete within PSP_OFI_LINGER. */
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    ops->close(&p.b, p.pb);
    pair_free(&p);
    next_fd_a = sv[0];
    pair_connect(&p, "C", "D", 0);
    fake_enqueue(&p.a, fake_frame_new(0, 0, 1000, 43));
    ops->tx_kick(&p.a, p.pa);
    ops->close(&p.a, p.pa);
    assert_int_equal(fake_core_holds, 1);
    usleep(150 * 1000);
    progress(2048); /* partings are looked at every 1024 rounds */
    assert_int_equal(read_goodbye(sv[1], &frames), 1);
    assert_int_equal(frames, 1);
    assert_non_null(strstr(fake_core_log, "1 sends finished early "
                                          "(PSP_OFI_COPY) still in flight "
                                          "after PSP_OFI_LINGER=100 ms"));
    assert_int_equal(fake_core_holds, 0);
    fake_release_held(0); /* completes after all */
    progress(10);
    close(sv[1]);
    ops->close(&p.b, p.pb);
    pair_free(&p);
    ops->destroy();
}

/* The application cancels a send the plugin has handed to libfabric: the
 * frame is sent all the same, but not reported; the frames around it are
 * reported and new frames are still found behind it. */
static void test_cancel_in_flight(void **state)
{
    fake.hold_tx = 1;
    struct pair p;
    pair_open(&p);
    struct fake_frame *f[4];
    uint8_t expect[4 * 2000];
    size_t sz[4];
    for (unsigned i = 0; i < 4; i++) {
        f[i] = fake_frame_new(0, 0, 1000 + 100 * i, 40 + i);
        sz[i] = f[i]->hl + f[i]->bl;
    }
    size_t total = send_frames(&p, &p.a, f, 3, expect);
    assert_int_equal(fake_held_count(), 3);
    fake_cancel(&p.a, 1);
    total += send_frames(&p, &p.a, &f[3], 1, expect + total);
    assert_int_equal(fake_held_count(), 4); /* frame 3 found behind */
    fake_release_held(0);
    progress(20);
    assert_int_equal(p.a.qdone, 3);
    assert_int_equal(p.a.tx_done_bytes, sz[0] + sz[2] + sz[3]);
    check_stream(&p.b, expect, total, 4); /* the peer got all four */
    pair_close(&p);
}

/* A full send queue: tx_kick returns at once (no spinning inside the core's
 * call), progress retries, nothing is lost or reordered. */
static void test_send_eagain(void **state)
{
    struct pair p;
    pair_open(&p);

    struct fake_frame *f[6];
    uint8_t expect[6 * 10000];
    for (unsigned i = 0; i < 6; i++)
        f[i] = fake_frame_new(0, 4, i % 2 ? 8 : 5000, 77 + i);
    fake.send_eagain = 5;
    size_t total = send_frames(&p, &p.a, f, 6, expect);
    /* One attempt, then tx_kick gave up until progress. */
    assert_int_equal(fake.tsend_calls + fake.inject_calls, 1);
    assert_int_equal(p.a.tx_done_calls, 0);
    progress(50);
    assert_int_equal(fake.eagains, 5);
    check_stream(&p.b, expect, total, 6);
    assert_int_equal(p.a.tx_done_bytes, total);
    pair_close(&p);
}

/* tx_now: a frame small enough to inject goes out at once as the next
 * frame, with no report to the core; with frames in flight, no room, or
 * too large for an injection it is left to the queue, and the frames still
 * arrive whole and in order. */
static void test_send_now(void **state)
{
    struct pair p;
    pair_open(&p);
    uint8_t expect[3 * 10000];
    size_t total = 0;

    struct fake_frame *now = fake_frame_new(0, 4, 8, 11);
    struct iovec iov[2] = {{now->head, now->hl}, {now->body, now->bl}};
    assert_int_equal(ops->tx_now(&p.a, p.pa, iov, 2), 1);
    assert_int_equal(fake.inject_calls, 1);
    total += fake_frame_bytes(now, expect + total);

    /* No room: nothing sent. */
    fake.send_eagain = 1;
    assert_int_equal(ops->tx_now(&p.a, p.pa, iov, 2), 0);
    assert_int_equal(fake.eagains, 1);

    /* Behind a frame in flight: the queue. */
    struct fake_frame *big = fake_frame_new(0, 4, 5000, 12);
    total += send_frames(&p, &p.a, &big, 1, expect + total);
    assert_int_equal(ops->tx_now(&p.a, p.pa, iov, 2), 0);
    progress(50);
    assert_int_equal(p.a.qdone, 1);

    /* Too large to inject: the queue. */
    struct iovec biov[2] = {{big->head, big->hl}, {big->body, big->bl}};
    assert_int_equal(ops->tx_now(&p.a, p.pa, biov, 2), 0);

    /* Once more at once, then everything arrived in order. */
    unsigned injects = fake.inject_calls;
    assert_int_equal(ops->tx_now(&p.a, p.pa, iov, 2), 1);
    assert_int_equal(fake.inject_calls, injects + 1);
    total += fake_frame_bytes(now, expect + total);
    progress(50);
    check_stream(&p.b, expect, total, 3);
    assert_int_equal(p.a.tx_done_bytes, big->hl + big->bl);
    pair_close(&p);
    free(now->body); /* never queued: the fake core does not own it */
    free(now);
}

/* A full receive queue when posting receives: retried from progress. */
static void test_recv_eagain(void **state)
{
    setenv("PSP_OFI_RECVQ", "4", 1);
    fake.recv_eagain = 6; /* four of A's slots and two of B's */
    struct pair p;
    pair_open(&p);
    assert_int_equal(fake_posted_count(), 2);

    struct fake_frame *f[10];
    uint8_t expect[20 * 3000];
    for (unsigned i = 0; i < 10; i++) f[i] = fake_frame_new(0, 0, 2000, i);
    size_t total = send_frames(&p, &p.a, f, 10, expect);
    progress(100);
    check_stream(&p.b, expect, total, 10);

    /* Delivered slots whose post finds the queue full are owed again. */
    unsigned before = fake.eagains;
    fake.recv_eagain = 3;
    struct fake_frame *g[10];
    for (unsigned i = 0; i < 10; i++) g[i] = fake_frame_new(0, 0, 2000, 20 + i);
    total += send_frames(&p, &p.a, g, 10, expect + total);
    progress(100);
    assert_int_equal(fake.eagains, before + 3);
    check_stream(&p.b, expect, total, 20);
    pair_close(&p);
}

/* A delivered ring slot is posted again before the next read of the
 * completion queue, not while its frame is delivered (so the application
 * can answer first); frames that find their slot not yet posted wait as
 * unexpected and still arrive in order; closing with slots owed frees
 * them (ASan sees a use after free otherwise). */
static void test_slot_posted_before_next_read(void **state)
{
    setenv("PSP_OFI_RECVQ", "2", 1);
    struct pair p;
    pair_open(&p);
    assert_int_equal(fake_posted_count(), 4); /* two slots per side */

    struct fake_frame *f[6];
    uint8_t expect[6 * 200];
    for (unsigned i = 0; i < 6; i++) f[i] = fake_frame_new(0, 0, 100, 40 + i);
    size_t total = send_frames(&p, &p.a, f, 2, expect);
    progress(1);
    assert_int_equal(p.b.frames_in, 2);
    assert_int_equal(fake_posted_count(), 2); /* A's; B's both owed */

    total += send_frames(&p, &p.a, f + 2, 2, expect + total);
    assert_int_equal(fake_unexpected_count(), 2);
    progress(1); /* posts B's slots, which take the waiting frames */
    assert_int_equal(fake_unexpected_count(), 0);
    assert_int_equal(p.b.frames_in, 4);

    total += send_frames(&p, &p.a, f + 4, 2, expect + total);
    progress(1);
    check_stream(&p.b, expect, total, 6);
    assert_int_equal(fake_posted_count(), 2); /* B's owed again */
    pair_close(&p);
    assert_int_equal(fake_posted_count(), 0);
}

/* A progress call nested in the delivery of a frame (the core's upcall
 * waits) posts the slots delivered before it, for their frames, and leaves
 * the one being delivered; every frame still arrives, in order. */
static int nested_done;

static void progress_at_third_frame(struct psc_con *c)
{
    if (c->frames_in != 2 || nested_done) return;
    nested_done = 1;
    ops->progress();
}

static void test_progress_nested_in_delivery(void **state)
{
    setenv("PSP_OFI_RECVQ", "4", 1);
    nested_done = 0;
    struct pair p;
    pair_open(&p);
    p.b.on_push = progress_at_third_frame;

    struct fake_frame *f[8];
    uint8_t expect[8 * 200];
    for (unsigned i = 0; i < 8; i++) f[i] = fake_frame_new(0, 0, 100, 60 + i);
    size_t total = send_frames(&p, &p.a, f, 3, expect);
    progress(1);
    assert_int_equal(nested_done, 1);
    assert_int_equal(p.b.frames_in, 3);
    total += send_frames(&p, &p.a, f + 3, 5, expect + total);
    progress(50);
    check_stream(&p.b, expect, total, 8);
    assert_int_equal(fake_unexpected_count(), 0);
    pair_close(&p);
}

/* A rendezvous body and an eager one of 100000 bytes: the core offers its
 * buffer for the first only, which gets it directly. */
static void direct_and_eager(void)
{
    struct pair p;
    pair_open(&p);
    p.b.direct_enabled = 1;

    struct fake_frame *f[2];
    uint8_t *expect = malloc(300000);
    f[0] = fake_frame_new(3, 8, 100000, 9);  /* RNDV_DATA */
    f[1] = fake_frame_new(0, 0, 100000, 10); /* USER */
    size_t total = send_frames(&p, &p.a, f, 2, expect);
    progress(50);
    check_stream(&p.b, expect, total, 2);
    assert_int_equal(p.b.direct_bytes, 100000);
    free(expect);
    pair_close(&p);
}

/* Rendezvous data goes straight into the core's buffer; other large bodies
 * are copied. */
static void test_direct_rendezvous_data(void **state)
{
    direct_and_eager();
}

/* ---------------------------------------------------------------------- */
/* Errors                                                                 */

static void test_send_error_completion(void **state)
{
    struct pair p;
    pair_open(&p);
    struct fake_frame *f[3];
    uint8_t expect[3 * 5000];
    for (unsigned i = 0; i < 3; i++) f[i] = fake_frame_new(0, 0, 4000, i);
    fake.send_error_completion = 1;
    send_frames(&p, &p.a, f, 3, expect);
    progress(20);
    assert_int_equal(p.a.errors, 1);
    assert_int_equal(p.a.err_op, PSCOM_OP_WRITE);
    assert_int_equal(p.a.err, PSCOM_ERR_EOF); /* connection reset */
    assert_int_equal(p.a.tx_done_calls, 0);   /* frame 0 failed first */
    progress(20);
    assert_int_equal(p.a.errors, 1); /* once */
    pair_close(&p);
}

/* Messages from a broken or hostile peer: longer than the receive buffer,
 * shorter than a header, longer than the frame they start. */
static void test_bad_messages(void **state)
{
    static const struct {
        size_t len;
        int patch_header;
    } cases[] = {{16385, 0}, {4, 0}, {64, 1}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        fake_reset();
        struct pair p;
        pair_open(&p);
        uint8_t *msg = calloc(1, cases[i].len);
        if (cases[i].patch_header) {
            pscom_header_net_t h = {.xheader_len = 0, .msg_type = 0,
                                    .data_len = 8};
            memcpy(msg, &h, 8); /* a 16-byte frame in 64 bytes */
        }
        fake_send_raw(msg, cases[i].len,
                      ofi_tag(p.blob_b.conid, 0, OFI_PART_FIRST));
        progress(5);
        assert_int_equal(p.b.errors, 1);
        assert_int_equal(p.b.err_op, PSCOM_OP_READ);
        assert_int_equal(p.b.frames_in, 0);
        free(msg);
        pair_close(&p);
    }
}

/* Messages from another endpoint than the peer's, tagged with a
 * connection's conid, never become its frames: a first message of a frame
 * (the slot's receive) and the rest of a large frame (a body's receive,
 * the stranger's chunk queued before the peer's). Receives are directed at
 * the peer; before, they took messages from anyone and both were delivered
 * as the peer's. */
static void test_strangers_messages_ignored(void **state)
{
    struct pair p;
    pair_open(&p);
    uint8_t evil[8 + 5];
    pscom_header_net_t h = {.msg_type = 1, .data_len = 5};
    memcpy(evil, &h, 8);
    memcpy(evil + 8, "EVIL!", 5);
    fake_send_from(99, evil, sizeof(evil),
                   ofi_tag(p.blob_b.conid, 0, OFI_PART_FIRST));
    progress(5);
    assert_int_equal(p.b.frames_in, 0);

    struct fake_frame *f[2];
    uint8_t expect[60000];
    f[0] = fake_frame_new(0, 0, 100, 1);
    f[1] = fake_frame_new(0, 0, 50000, 2); /* head, then the body */
    uint8_t *body = malloc(f[1]->bl);
    memset(body, 'E', f[1]->bl);
    fake_send_from(99, body, f[1]->bl, ofi_tag(p.blob_b.conid, 1, 1));
    free(body);
    size_t total = send_frames(&p, &p.a, f, 2, expect);
    progress(20);
    check_stream(&p.b, expect, total, 2);
    assert_int_equal(fake_unexpected_count(), 2); /* the stranger's */
    pair_close(&p);
}

/* Conids start at a random number, not at one derived from the process
 * id: another process cannot guess them (each init starts anew). */
static void test_conids_random(void **state)
{
    uint32_t conid[2];
    for (int i = 0; i < 2; i++) {
        struct pair p;
        pair_open(&p);
        conid[i] = p.blob_a.conid;
        pair_close(&p);
    }
    assert_int_not_equal(conid[0], conid[1]);
    assert_int_not_equal(conid[0], ((uint32_t)getpid() << 12) + 1);
}

/* The peer's end-of-connection message behind a send of ours in flight:
 * same_round 0, it arrives while the send is in flight; 1, it is read in
 * the same round as the send's completion. Either way it is delivered
 * after the send was reported, and at most one round after. */
static void eof_behind_send(int same_round)
{
    struct pair p;
    pair_open(&p);
    fake.hold_tx = 1;
    struct fake_frame *big = fake_frame_new(0, 0, 50000, 1);
    struct fake_frame *eof = fake_frame_new(4, 0, 0, 2);
    uint8_t expect[60000];
    send_frames(&p, &p.a, &big, 1, expect);
    if (!same_round) {
        send_frames(&p, &p.b, &eof, 1, expect);
        progress(20);
        assert_int_equal(p.a.frames_in, 0); /* held back */
        fake_release_held(0);
    } else {
        progress(2);
        /* A's send completion, then B's EOF: one read of A's queue. */
        fake.hold_tx = 0;
        fake_release_held(0);
        send_frames(&p, &p.b, &eof, 1, expect);
        ops->progress();
        assert_int_equal(p.a.qdone, 1);
        assert_int_equal(p.a.frames_in, 0); /* one more round */
    }
    progress(2);
    assert_int_equal(p.a.frames_in, 1);
    assert_int_equal(p.a.qdone, 1);
    assert_true(p.a.tx_done_evt < p.a.frame_evt);
    pair_close(&p);
}

/* The peer's end-of-connection message waits until our sends in flight
 * completed: the core would fail them, though the peer has them. */
static void test_eof_waits_for_sends(void **state)
{
    eof_behind_send(0);
}

/* The peer's EOF read in the same round as the completion of our last
 * send waits one round (the application sees the send done first), and
 * is then delivered: it is the peer's last frame, so no later completion
 * brings it up again. Before, it stayed held until the peer's goodbye
 * timed out (5 * PSP_OFI_EOF_GRACE), or for ever while the peer's
 * pre-connection socket stayed open. */
static void test_eof_after_last_send_in_same_round(void **state)
{
    eof_behind_send(1);
}

/* tx_done returns -1 (closing): the plugin stops using the connection,
 * although more of its sends complete. */
static void test_stop_after_closing(void **state)
{
    struct pair p;
    pair_open(&p);
    struct fake_frame *f[3];
    uint8_t expect[3 * 3000];
    for (unsigned i = 0; i < 3; i++) f[i] = fake_frame_new(0, 0, 2000, i);
    p.a.close_on_tx_done = 1;
    send_frames(&p, &p.a, f, 3, expect);
    progress(10);
    assert_int_equal(p.a.tx_done_calls, 1);
    assert_int_equal(p.a.errors, 0);
    pair_close(&p);
}

/* Each open connection's peer on this node is known to the watchdog (for
 * its report of ended peers) until the connection closes; a peer without
 * a process id (another node) is not. */
static void test_peers_known_to_watchdog(void **state)
{
    (void)state;
    struct pair p, q;
    pair_open(&p);
    assert_int_equal(owd_peer_count(), 2);
    ops->close(&p.b, p.pb);
    assert_int_equal(owd_peer_count(), 1);

    pair_init(&q, "C", "D");
    q.b.peer_pid = 0;
    pair_handshake(&q, 0);
    assert_int_equal(owd_peer_count(), 2);

    ops->close(&p.a, p.pa);
    pair_drop(&q);
    assert_int_equal(owd_peer_count(), 0);
    progress(4);
    ops->destroy();
    pair_free(&p);
}

/* Closing with receives posted cancels them; messages to the closed
 * connection are drained by a sink for PSP_OFI_LINGER ms. */
static void test_close_cancels_and_drains(void **state)
{
    setenv("PSP_OFI_RECVQ", "8", 1);
    struct pair p;
    pair_open(&p);
    assert_int_equal(fake_posted_count(), 16);
    ops->close(&p.b, p.pb);
    assert_int_equal(fake.cancels, 8);
    progress(5);
    /* A's 8 receives and B's sink */
    assert_int_equal(fake_posted_count(), 9);
    /* A still sends to B: the sink takes it, nothing stays unexpected. */
    struct fake_frame *f = fake_frame_new(0, 0, 100, 1);
    uint8_t expect[200];
    send_frames(&p, &p.a, &f, 1, expect);
    progress(5);
    assert_int_equal(fake_unexpected_count(), 0);
    assert_int_equal(p.b.frames_in, 0);
    ops->close(&p.a, p.pa);
    progress(5);
    ops->destroy();
    pair_free(&p);
}

/* A connection that failed because its peer died posts no sink when it
 * closes: nothing more comes from a dead peer, and ofi_rxm crashed inside
 * fi_trecv posting one (rndv_window over tcp;ofi_rxm). */
static void test_close_after_peer_died(void **state)
{
    setenv("PSP_OFI_RECVQ", "8", 1);
    struct pair p;
    pair_open(&p);
    struct fake_frame *f = fake_frame_new(0, 0, 4000, 0);
    uint8_t expect[5000];
    fake.send_error_completion = 1; /* connection reset: the peer is gone */
    send_frames(&p, &p.a, &f, 1, expect);
    progress(20);
    assert_int_equal(p.a.errors, 1);
    assert_int_equal(p.a.err, PSCOM_ERR_EOF);
    ops->close(&p.a, p.pa);
    assert_int_equal(fake.cancels, 8);
    progress(5);
    assert_int_equal(fake_posted_count(), 8); /* B's receives, no sink */
    ops->close(&p.b, p.pb);
    progress(5);
    assert_int_equal(fake_posted_count(), 1); /* B's sink: A is alive */
    ops->destroy();
    pair_free(&p);
}


/* ---------------------------------------------------------------------- */
/* Pull mode                                                              */

/* n frames (4-byte xheader, bl bytes of body, seeds from `seed`) sent while
 * `count` sends find the queue full, after `after` more that succeed: all
 * arrive whole and in order, and are reported, once progress retried. */
static void send_into_full_queue(struct pair *p, unsigned n, size_t bl,
                                 unsigned seed, unsigned after,
                                 unsigned count)
{
    struct fake_frame **f = calloc(n, sizeof(*f));
    uint8_t *expect = malloc(n * (bl + 16));
    for (unsigned i = 0; i < n; i++) f[i] = fake_frame_new(0, 4, bl, seed + i);
    fake.send_eagain_after = after;
    fake.send_eagain = count;
    size_t total = send_frames(p, &p->a, f, n, expect);
    progress(100);
    check_stream(&p->b, expect, total, n);
    assert_int_equal(p->a.tx_done_bytes, total);
    assert_int_equal(fake.eagains, count);
    free(expect);
    free(f);
}

/* A provider for this host with the shm provider's inject size: pull
 * mode by default. */
static void pull_setup(void)
{
    fake.local_only = 1;
    fake.inject_size = 4096;
    setenv("PSP_OFI_SPLIT", "0", 1); /* every frame too large is pulled */
}

/* Pull mode with frames of up to 16 KiB after their head split into
 * injected messages (the default is 8 KiB). */
static void split_setup(void)
{
    pull_setup();
    setenv("PSP_OFI_SPLIT", "16k", 1);
}

/* Frames of every shape arrive whole and in order; what does not fit an
 * inject is copied by the receiver (no sends with completions at all) and
 * acknowledged once per frame. */
static void test_pull_stream_shapes(void **state)
{
    pull_setup();
    setenv("PSP_OFI_BOUNCE", "256", 1);
    struct pair p;
    pair_open(&p);
    assert_int_equal(p.blob_a.flags & OFI_BLOB_PULL, OFI_BLOB_PULL);

    static const size_t shapes[][2] = {
        {0, 0},     {0, 8},    {16, 200},  {0, 248},    {0, 249},
        {8, 4096},  {200, 0},  {220, 100}, {250, 10},   {255, 3000},
        {232, 100}, {3, 1},    {0, 5000},  {64, 100000}, {255, 0},
    };
    enum { N = sizeof(shapes) / sizeof(shapes[0]) };
    unsigned pulled = 0;
    for (unsigned i = 0; i < N; i++)
        if (8 + shapes[i][0] + shapes[i][1] > 256) pulled++;
    send_shapes(&p, shapes, N);
    assert_int_equal(fake.tsend_calls, 0);
    assert_int_equal(fake.injects, N);
    assert_int_equal(fake.cma_writes, pulled);
    assert_true(fake.cma_reads >= pulled);
    pair_close(&p);
}

/* Split frames: in pull mode a frame too large to inject whose rest after
 * its head is at most PSP_OFI_SPLIT goes as its head with a descriptor
 * marked split, then the rest in injected chunks of the inject size;
 * larger ones are pulled. All arrive whole and in order, and only the
 * pulled ones are read from the sender's memory. */
static void test_split_stream_shapes(void **state)
{
    split_setup();
    struct pair p;
    pair_open(&p);

    static const size_t shapes[][2] = {
        {0, 5000},  {8, 4096}, {0, 0},     {16, 200},   {0, 16384},
        {255, 3000}, {0, 16385}, {3, 9000}, {64, 100000}, {0, 4089},
    };
    enum { N = sizeof(shapes) / sizeof(shapes[0]) };
    /* chunks of 4096 bytes: 5000 -> 2, 4096 -> 1, 16384 -> 4, 9000 -> 3,
     * 4089 -> 1 (its frame of 4097 bytes is one too long to inject) */
    const unsigned chunks = 2 + 1 + 4 + 3 + 1;
    const unsigned pulled = 2; /* 16385 and 100000 bytes after the head */
    send_shapes(&p, shapes, N);
    assert_int_equal(fake.tsend_calls, 0);
    assert_int_equal(fake.injects, N + chunks);
    assert_int_equal(fake.cma_writes, pulled);
    assert_true(fake.cma_reads >= pulled);
    assert_true(fake.largest_msg <= 4096);
    pair_close(&p);
}

/* A split frame whose chunks find the queue full half way: the rest goes
 * from progress, and every frame still arrives whole and in order. */
static void test_split_eagain(void **state)
{
    split_setup();
    struct pair p;
    pair_open(&p);
    /* the head and one chunk go, then three sends find the queue full */
    send_into_full_queue(&p, 3, 12000, 60, 2, 3);
    assert_int_equal(fake.cma_reads, 0);
    assert_int_equal(fake.injects, 3 * 4);
    pair_close(&p);
}

/* The same in pull mode: copies and acknowledgements interleave with
 * everything else. */
static void test_pull_order_both_ways(void **state)
{
    pull_setup();
    both_ways_reversed(200, 300);
}

/* A frame is done when the receiver acknowledges having copied it, not
 * before; another connection's frames complete meanwhile. */
static void test_pull_done_when_acknowledged(void **state)
{
    pull_setup();
    struct pair p, q;
    pair_open(&p);
    pair_connect(&q, "C", "D", 0);

    fake.cma_hold_writes = 1; /* B's acknowledgement does not arrive */
    struct fake_frame *f1 = fake_frame_new(0, 0, 60000, 1);
    struct fake_frame *f2 = fake_frame_new(0, 0, 60000, 2);
    uint8_t e1[70000], e2[70000];
    size_t t1 = send_frames(&p, &p.a, &f1, 1, e1);
    progress(20);
    check_stream(&p.b, e1, t1, 1); /* B has it */
    assert_int_equal(p.a.tx_done_calls, 0);

    size_t t2 = send_frames(&q, &q.a, &f2, 1, e2);
    progress(20);
    check_stream(&q.b, e2, t2, 1);
    assert_int_equal(q.a.tx_done_bytes, t2);
    assert_int_equal(p.a.tx_done_calls, 0);

    fake_release_cma_writes();
    progress(5);
    assert_int_equal(p.a.tx_done_bytes, t1);

    pair_drop(&q);
    pair_close(&p);
}

/* The receiver acknowledges a pulled frame, then answers it. When the
 * sender's next progress call finds both, it reports the frame done
 * before it delivers the answer, as they were sent: the core then runs the
 * send's completion first (ParaStation MPI's partitioned sends need it). */
static void test_pull_ack_before_answer(void **state)
{
    pull_setup();
    struct pair p;
    pair_open(&p);

    fake.cma_hold_writes = 1;
    struct fake_frame *big = fake_frame_new(0, 0, 60000, 1);
    struct fake_frame *answer = fake_frame_new(0, 0, 8, 2);
    uint8_t e1[70000], e2[64];
    size_t t1 = send_frames(&p, &p.a, &big, 1, e1);
    progress(20);
    check_stream(&p.b, e1, t1, 1);
    assert_int_equal(p.a.tx_done_calls, 0);

    fake_release_cma_writes(); /* B's acknowledgement, then its answer */
    size_t t2 = send_frames(&p, &p.b, &answer, 1, e2);
    assert_int_equal(p.a.frames_in, 0);
    ops->progress();
    check_stream(&p.a, e2, t2, 1);
    assert_int_equal(p.a.tx_done_bytes, t1);
    assert_true(p.a.tx_done_evt < p.a.frame_evt);
    pair_close(&p);
}

/* Full queues when offering: retried from progress, nothing lost. */
static void test_pull_eagain(void **state)
{
    pull_setup();
    struct pair p;
    pair_open(&p);
    send_into_full_queue(&p, 6, 9000, 40, 0, 4);
    pair_close(&p);
}

/* Bodies are copied straight into the core's buffer where it offers one,
 * else through a buffer of the plugin. */
static void test_pull_direct(void **state)
{
    pull_setup();
    direct_and_eager();
    /* Two bodies, and each frame's acknowledgement word after its copy. */
    assert_int_equal(fake.cma_read_bytes, 200000 + 2 * sizeof(uint64_t));
}

/* A closes before B copied its frame: the core fails that send and gives
 * its buffer back to the application. B's copy after the close is
 * dropped, and B's connection ends (EOF) instead of delivering bytes the
 * application may have written again. */
static void test_pull_revoked_by_close(void **state)
{
    pull_setup();
    struct pair p;
    pair_open(&p);
    struct fake_frame *f = fake_frame_new(0, 0, 9000, 1);
    uint8_t expect[10000];
    send_frames(&p, &p.a, &f, 1, expect);
    ops->close(&p.a, p.pa);
    progress(20);
    /* The body, then the word. */
    assert_int_equal(fake.cma_read_bytes, 9000 + sizeof(uint64_t));
    assert_int_equal(p.b.errors, 1);
    assert_int_equal(p.b.err, PSCOM_ERR_EOF);
    assert_int_equal(p.b.frames_in, 0);
    ops->close(&p.b, p.pb);
    pair_free(&p);
    progress(4);
    ops->destroy();
}

/* The sender's process is gone (or its memory not readable) when the
 * receiver copies: the receiver's connection fails once, with EOF for a
 * missing process; the sender's frame stays unacknowledged. */
static void test_pull_copy_fails(void **state)
{
    static const struct {
        int err;
        pscom_err_t want;
    } cases[] = {{-ESRCH, PSCOM_ERR_EOF}, {-EPERM, PSCOM_ERR_IOERROR},
                 {-EFAULT, PSCOM_ERR_IOERROR}};
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        fake_reset();
        pull_setup();
        struct pair p;
        pair_open(&p);
        struct fake_frame *f[2];
        uint8_t expect[2 * 10000];
        f[0] = fake_frame_new(0, 0, 9000, 1);
        f[1] = fake_frame_new(0, 0, 9000, 2);
        fake.cma_read_error = cases[c].err;
        send_frames(&p, &p.a, f, 2, expect);
        progress(20);
        assert_int_equal(p.b.errors, 1);
        assert_int_equal(p.b.err_op, PSCOM_OP_READ);
        assert_int_equal(p.b.err, cases[c].want);
        assert_int_equal(p.b.frames_in, 0);
        assert_int_equal(p.a.errors, 0);
        assert_int_equal(p.a.tx_done_calls, 0);
        progress(20);
        assert_int_equal(p.b.errors, 1);
        /* A closes with its frames unacknowledged: what B might still
         * copy or write is kept until the plugin goes (no leak). */
        pair_close(&p);
    }
}

/* Malformed pull messages: a descriptor of another length than the rest
 * of its frame, one without a process, a message too short for one, one
 * marked split that names a process and an acknowledgement word. Each
 * fails the connection once. */
static void test_pull_bad_descriptors(void **state)
{
    for (int c = 0; c < 4; c++) {
        fake_reset();
        pull_setup();
        struct pair p;
        pair_open(&p);
        uint8_t msg[64] = {0};
        pscom_header_net_t h = {.msg_type = 0, .data_len = 1000};
        memcpy(msg, &h, 8);
        ofi_pull_desc_t d = {.addr = 1, .len = 1000 + 8 - 16, .ack = 2,
                             .pid = 3};
        size_t len = 16 + OFI_PULL_DESC_LEN;
        if (c == 0) d.len -= 1;
        if (c == 1) d.pid = 0;
        if (c == 2) len = 20;
        if (c == 3) d.flags = OFI_DESC_SPLIT;
        ofi_pull_desc_encode(&d, msg + 16);
        fake_send_raw(msg, len, ofi_tag(p.blob_b.conid, 0, OFI_PART_FIRST));
        progress(5);
        assert_int_equal(p.b.errors, 1);
        assert_int_equal(p.b.err, PSCOM_ERR_IOERROR);
        assert_int_equal(p.b.frames_in, 0);
        assert_int_equal(fake.cma_reads, 0);
        pair_close(&p);
    }
}

/* A pull descriptor that names a process other than the peer fails the
 * connection before anything is read from or written to that process. */
static void test_pull_descriptor_names_another_process(void **state)
{
    pull_setup();
    struct pair p;
    pair_open(&p);
    /* A good frame first: its descriptor names this process, the peer. */
    static const size_t shape[][2] = {{0, 5000}};
    send_shapes(&p, shape, 1);
    assert_int_equal(p.b.errors, 0);
    unsigned reads = fake.cma_reads, writes = fake.cma_writes;
    uint8_t msg[64] = {0};
    pscom_header_net_t h = {.msg_type = 0, .data_len = 1000};
    memcpy(msg, &h, 8);
    ofi_pull_desc_t d = {.addr = 1, .len = 1000 + 8 - 16, .ack = 2,
                         .pid = (uint32_t)getpid() + 1};
    ofi_pull_desc_encode(&d, msg + 16);
    fake_send_raw(msg, 16 + OFI_PULL_DESC_LEN,
                  ofi_tag(p.blob_b.conid, 1, OFI_PART_FIRST));
    progress(5);
    assert_int_equal(p.b.errors, 1);
    assert_int_equal(p.b.err, PSCOM_ERR_IOERROR);
    assert_int_equal(fake.cma_reads, reads);
    assert_int_equal(fake.cma_writes, writes);
    pair_close(&p);
}

/* Pull mode with a peer whose process id the core does not know (not one
 * of this node, for the core): the handshake refuses it, with the reason,
 * and the core tries the next transport. */
static void test_pull_needs_the_peers_pid(void **state)
{
    pull_setup();
    assert_int_equal(ops->init(), 0);
    struct pair p;
    uint8_t ba[4096], bb[4096];
    size_t la = sizeof(ba), lb = sizeof(bb);
    pair_init(&p, "A", "B");
    p.b.peer_pid = 0;
    assert_int_equal(ops->hs_start(&p.a, p.pa, ba, &la), 0);
    assert_int_equal(ops->hs_start(&p.b, p.pb, bb, &lb), 0);
    assert_int_equal(ops->hs_connect(&p.b, p.pb, ba, la), -EPROTO);
    assert_non_null(strstr(fake_core_reason, "process id"));
    ops->hs_abort(&p.a, p.pa);
    ops->hs_abort(&p.b, p.pb);
    pair_free(&p);
    ops->destroy();
}

/* No cross-memory attach here, or not wanted, or a provider that reaches
 * other hosts: frames are sent. */
static void test_pull_unavailable(void **state)
{
    pull_setup();
    fake.cma_denied = 1;
    struct pair p;
    pair_open(&p);
    assert_int_equal(p.blob_a.flags & OFI_BLOB_PULL, 0);
    pair_close(&p);

    fake_reset();
    pull_setup();
    setenv("PSP_OFI_PULL", "0", 1);
    pair_open(&p);
    assert_int_equal(p.blob_a.flags & OFI_BLOB_PULL, 0);
    pair_close(&p);

    fake_reset();
    setenv("PSP_OFI_PULL", "1", 1);
    fake.inject_size = 4096;
    pair_open(&p);
    assert_int_equal(p.blob_a.flags & OFI_BLOB_PULL, 0);
    struct fake_frame *f = fake_frame_new(0, 0, 9000, 1);
    uint8_t expect[10000];
    size_t total = send_frames(&p, &p.a, &f, 1, expect);
    progress(10);
    check_stream(&p.b, expect, total, 1);
    assert_int_equal(fake.cma_reads, 0);
    assert_true(fake.tsend_calls > 0);
    pair_close(&p);
}

/* One side without pull mode (its blob lacks the flag): neither side
 * pulls. */
static void test_pull_needs_both(void **state)
{
    pull_setup();
    struct pair p;
    assert_int_equal(ops->init(), 0);
    pair_connect(&p, "A", "B", 1);
    struct fake_frame *f = fake_frame_new(0, 0, 9000, 1);
    uint8_t expect[10000];
    size_t total = send_frames(&p, &p.a, &f, 1, expect);
    progress(10);
    check_stream(&p.b, expect, total, 1);
    assert_int_equal(fake.cma_reads, 0);
    pair_close(&p);
}

/* ---------------------------------------------------------------------- */
/* The lock on the shm provider's region (ofi_sweep.h)                    */

/* Can path be locked exclusively at once, through an open file of its
 * own? Not while anyone (this process included) holds a lock on it. */
static int lockable(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    int ok = flock(fd, LOCK_EX | LOCK_NB) == 0;
    close(fd);
    return ok;
}

/* A child forked after the endpoint opened does not keep the lock on its
 * parent's region: the lock belongs to the open file, which the child
 * shares, so without pthread_atfork's drop a live child would keep the
 * region of its killed parent from being swept. Here the parent closes
 * its endpoint while the child lives, and the region must be free. */
static void test_region_lock_not_inherited(void **state)
{
    char c, name[64], *path = region_path;
    snprintf(name, sizeof(name), "pscom-%d-0fa4c0de", (int)getpid());
    snprintf(path, sizeof(region_path), "/dev/shm/%s:test", name);
    int fd = open(path, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) {
        path[0] = '\0';
        print_message("no file in /dev/shm (%s): %s\n", path, strerror(errno));
        skip();
    }
    close(fd);
    setenv("PSP_OFI_SWEEP", "0", 1); /* the real /dev/shm: sweep nothing */
    fake.region = name;

    struct pair p;
    pair_open(&p);
    int held = !lockable(path); /* the endpoint holds its shared lock */

    int up[2], down[2];
    assert_int_equal(pipe(up), 0);
    assert_int_equal(pipe(down), 0);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) { /* lives until the parent has looked */
        close(up[0]);
        close(down[1]);
        if (write(up[1], "r", 1) != 1) _exit(1);
        _exit(read(down[0], &c, 1) < 0);
    }
    close(up[1]);
    close(down[0]);
    assert_int_equal(read(up[0], &c, 1), 1);
    pair_close(&p); /* closes the endpoint and this process's lock */
    int free_with_child = lockable(path);
    assert_int_equal(write(down[1], "x", 1), 1);
    int status;
    assert_int_equal(waitpid(child, &status, 0), child);
    close(up[0]);
    close(down[1]);

    assert_true(held);
    assert_true(free_with_child);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_blob_roundtrip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_peers_known_to_watchdog, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_blob_malformed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_blob_fuzz, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hs_connect_rejects, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hs_connect_checks_endpoint_names,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_init_and_endpoint_failures, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_stream_shapes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_order_reversed_completions, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_completion_fifo, setup, teardown),
        cmocka_unit_test_setup_teardown(test_copy_done_at_once, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_copies_outlive_close, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_goodbye_waits_for_copies, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_lent_frames_hold_progress, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_lend_after_local_failure, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_no_lend_when_peer_ended, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_cancel_in_flight, setup, teardown),
        cmocka_unit_test_setup_teardown(test_send_eagain, setup, teardown),
        cmocka_unit_test_setup_teardown(test_send_now, setup, teardown),
        cmocka_unit_test_setup_teardown(test_recv_eagain, setup, teardown),
        cmocka_unit_test_setup_teardown(test_slot_posted_before_next_read,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_progress_nested_in_delivery,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_direct_rendezvous_data, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_send_error_completion, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_bad_messages, setup, teardown),
        cmocka_unit_test_setup_teardown(test_strangers_messages_ignored,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_conids_random, setup, teardown),
        cmocka_unit_test_setup_teardown(test_eof_waits_for_sends, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_eof_after_last_send_in_same_round,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_stop_after_closing, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_close_cancels_and_drains, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_close_after_peer_died, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_pull_stream_shapes, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_split_stream_shapes, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_split_eagain, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pull_order_both_ways, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_pull_done_when_acknowledged,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_pull_ack_before_answer, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_pull_eagain, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pull_revoked_by_close, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_pull_direct, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pull_copy_fails, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_pull_descriptor_names_another_process,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_pull_needs_the_peers_pid, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_pull_bad_descriptors, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_pull_unavailable, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_pull_needs_both, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_region_lock_not_inherited, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
