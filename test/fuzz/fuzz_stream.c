/*
 * libFuzzer harness for the core's receive side: what a peer sends on a
 * connection, as every transport hands it to the core (the byte stream of
 * pscom_plugin_rx_push, whole messages through pscom_plugin_rx_now), mixed
 * with what the application does meanwhile (receives posted on the
 * connection or on any source, with and without recv_accept; sends, eager
 * and rendezvous, that the peer's answers may name; probes, cancels, the
 * transport reporting frames written).
 *
 * The input is a program of steps (see the op enum); each step takes its
 * operands from the input and stops where the input ends. Each input runs
 * on a fresh connection without a transport, closed at the end.
 *
 * What must hold, else the run aborts (a finding):
 * - nothing crashes, reads or writes out of bounds, or leaks (the
 *   sanitizers; every buffer is allocated to its exact size);
 * - a connection reports at most one error, and once it has failed the
 *   core refuses further bytes;
 * - once the connection is closed and the any-source receives are
 *   cancelled, every request of the program is done: none hangs;
 * - a receive that completed without error got at most its buffer's worth.
 *
 * Left out: RMA_WRITE and RMA_READ (pscom's older one-sided calls), which
 * address the receiver's memory without a region by design: the peer is
 * trusted with them, as in ParaStation pscom (doc/rma.md). The harness
 * refuses their headers (psc_rma_header_check is wrapped, -Wl,--wrap), as
 * the core refuses a malformed header: the connection fails.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
void *__real_malloc(size_t size);
void *__wrap_malloc(size_t size);
void *__real_calloc(size_t n, size_t size);
void *__wrap_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t size);
void *__wrap_realloc(void *p, size_t size);

/* A header may announce up to 2^40 bytes of body, which the core allocates
 * for an unexpected message (and a group message before its receive).
 * Allocations that large fail on a real machine (more than its memory);
 * here every one above ALLOC_MAX does (the core is linked with
 * -Wl,--wrap= for malloc, calloc and realloc), which must fail the
 * connection cleanly, and the fuzzer stays fast. */
#define ALLOC_MAX (64u << 20)

void *__wrap_malloc(size_t size)
{
    return size > ALLOC_MAX ? NULL : __real_malloc(size);
}

void *__wrap_calloc(size_t n, size_t size)
{
    return n && size > ALLOC_MAX / n ? NULL : __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t size)
{
    return size > ALLOC_MAX ? NULL : __real_realloc(p, size);
}

int __real_psc_rma_header_check(const pscom_header_net_t *hdr,
                                const char **why);
int __wrap_psc_rma_header_check(const pscom_header_net_t *hdr,
                                const char **why);

int __wrap_psc_rma_header_check(const pscom_header_net_t *hdr,
                                const char **why)
{
    if (hdr->msg_type == PSC_MSG_RMA_WRITE ||
        hdr->msg_type == PSC_MSG_RMA_READ) {
        *why = "raw-address one-sided message (not fuzzed)";
        return -1;
    }
    return __real_psc_rma_header_check(hdr, why);
}

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) abort();                                                  \
    } while (0)

#define NREQ 8         /* receive and send slots of one program */
#define MAX_XH 32      /* extended header room of each request */
#define RNDV_AT 64     /* the connection's rendezvous threshold */
#define REGION 4096    /* bytes of the registered one-sided region */

enum op {
    OP_RAW,       /* n, then n bytes pushed as they are */
    OP_FRAME,     /* a frame built from type, lengths and input bytes,
                   * pushed in chunks */
    OP_RX_NOW,    /* a whole user message through pscom_plugin_rx_now */
    OP_RECV,      /* post a receive */
    OP_SEND,      /* post a send (rendezvous from RNDV_AT bytes) */
    OP_TX,        /* the transport writes some of the send queue */
    OP_CANCEL,    /* cancel a receive */
    OP_PROBE,     /* pscom_iprobe, then a round of progress */
    OP_COUNT
};

struct input {
    const uint8_t *p;
    size_t left;
};

static bool take(struct input *in, void *dst, size_t n)
{
    if (in->left < n) return false;
    memcpy(dst, in->p, n);
    in->p += n;
    in->left -= n;
    return true;
}

static unsigned byte(struct input *in)
{
    uint8_t b = 0;
    take(in, &b, 1);
    return b;
}

/* Up to n bytes of the input, as many as are left. */
static size_t take_up_to(struct input *in, void *dst, size_t n)
{
    if (n > in->left) n = in->left;
    take(in, dst, n);
    return n;
}

static pscom_socket_t *sock;
static pscom_memh_t memh;
static int errors;

static void on_error(pscom_connection_t *c, pscom_op_t op, pscom_err_t err)
{
    (void)c;
    (void)op;
    (void)err;
    errors++;
}

/* Accepts messages whose extended header is empty or starts even. */
static int accept_even(pscom_request_t *r, pscom_connection_t *c,
                       pscom_header_net_t *h)
{
    (void)r;
    (void)c;
    return !h->xheader_len || !(((const uint8_t *)(h + 1))[0] & 1);
}

static void init_once(void)
{
    static uint8_t region[REGION];
    if (sock) return;
    CHECK(pscom_init(PSCOM_VERSION) == PSCOM_SUCCESS);
    pscom_set_debug(0); /* every input is malformed on purpose */
    sock = pscom_open_socket(0, 0, 0, 0);
    CHECK(sock);
    sock->ops.con_error = on_error;
    /* A region that one-sided messages can name (its id is small). */
    CHECK(pscom_mem_register(sock, region, sizeof(region), &memh) ==
          PSCOM_SUCCESS);
}

struct slot {
    pscom_request_t *req;
    void *buf;
    size_t len;
    bool recv;
};

/* A frame: header, xheader and what the input has of the body. */
static void op_frame(struct input *in, pscom_connection_t *c)
{
    static uint8_t f[8 + 255 + 65536];
    pscom_header_net_t h = {0};
    h.msg_type = (uint8_t)(byte(in) % (PSC_MSG_TYPE_MAX + 2));
    h.xheader_len = (uint16_t)byte(in);
    uint16_t dlen = 0;
    take(in, &dlen, sizeof(dlen));
    h.data_len = dlen;
    memcpy(f, &h, sizeof(h));
    size_t len = sizeof(h);
    len += take_up_to(in, f + len, h.xheader_len);
    len += take_up_to(in, f + len, dlen);
    unsigned chunk = 1 + byte(in) % 64;
    for (size_t off = 0; off < len; off += chunk) {
        size_t n = len - off < chunk ? len - off : chunk;
        if (pscom_plugin_rx_push(con_of(c), f + off, n)) break;
    }
}

static void op_rx_now(struct input *in, pscom_connection_t *c)
{
    static uint64_t head[(8 + 255) / 8 + 1]; /* aligned, as plugins pass it */
    static uint8_t body[256];
    pscom_header_net_t h = {0};
    h.msg_type = PSC_MSG_USER;
    h.xheader_len = (uint16_t)(byte(in) % MAX_XH);
    h.data_len = byte(in);
    memcpy(head, &h, sizeof(h));
    take_up_to(in, (uint8_t *)head + sizeof(h), h.xheader_len);
    take_up_to(in, body, h.data_len);
    /* The lengths the plugin claims may disagree with the header. */
    size_t hl = sizeof(h) + (byte(in) % 4 ? h.xheader_len : byte(in) % 40);
    size_t bl = byte(in) % 4 ? h.data_len : byte(in);
    if (!pscom_plugin_rx_now(con_of(c), head, hl, body, bl)) {
        /* Not taken: a plugin delivers it as a stream then. */
        uint8_t whole[8 + 255 + 256];
        memcpy(whole, head, sizeof(h) + h.xheader_len);
        memcpy(whole + sizeof(h) + h.xheader_len, body, h.data_len);
        pscom_plugin_rx_push(con_of(c), whole,
                             sizeof(h) + h.xheader_len + h.data_len);
    }
}

static pscom_request_t *new_req(struct slot *s, size_t len, bool recv)
{
    s->req = pscom_request_create(MAX_XH, 0);
    CHECK(s->req);
    s->buf = malloc(len ? len : 1);
    CHECK(s->buf);
    s->len = len;
    s->recv = recv;
    s->req->data = s->buf;
    s->req->data_len = len;
    return s->req;
}

static void op_recv(struct input *in, pscom_connection_t *c, struct slot *s)
{
    unsigned mode = byte(in);
    size_t len = byte(in) * (mode & 8 ? 64 : 1);
    if (s->req) return;
    pscom_request_t *r = new_req(s, len, true);
    r->xheader_len = mode % 5 * 8;
    if (mode & 1) {
        r->connection = NULL; /* any source of the socket */
        r->socket = sock;
    } else {
        r->connection = c;
    }
    if (mode & 2) r->ops.recv_accept = accept_even;
    pscom_post_recv(r);
}

static void op_send(struct input *in, pscom_connection_t *c, struct slot *s)
{
    unsigned mode = byte(in);
    size_t len = byte(in) * (mode & 1 ? 64 : 1);
    if (s->req) return;
    pscom_request_t *r = new_req(s, len, false);
    memset(s->buf, 's', len);
    r->connection = c;
    r->xheader_len = mode % 3 * 8;
    memset(&r->xheader, 0, r->xheader_len);
    pscom_post_send(r);
}

/* The transport takes the first n bytes of the send queue. */
static void op_tx(struct input *in, pscom_connection_t *c)
{
    struct iovec iov[16];
    size_t total;
    unsigned want = byte(in) * 16;
    pscom_plugin_tx_peek(con_of(c), iov, 16, &total);
    if (want > total) want = (unsigned)total;
    if (want) pscom_plugin_tx_done(con_of(c), want);
}

static void op_probe(struct input *in, pscom_connection_t *c)
{
    pscom_request_t *r = pscom_request_create(MAX_XH, 0);
    CHECK(r);
    r->connection = byte(in) & 1 ? c : NULL;
    r->socket = sock;
    r->xheader_len = 4;
    pscom_iprobe(r);
    pscom_request_free(r);
    pscom_test_any();
}

static void finish(struct slot *slots, pscom_connection_t *c)
{
    pscom_close_connection(c);
    for (int i = 0; i < NREQ; i++) {
        struct slot *s = &slots[i];
        pscom_request_t *r = s->req;
        if (!r) continue;
        if (!pscom_req_is_done(r) && s->recv && !r->connection)
            pscom_cancel_recv(r);
        CHECK(pscom_req_is_done(r));
        if (s->recv && pscom_req_successful(r))
            CHECK(r->header.data_len <= s->len);
        pscom_request_free(r);
        free(s->buf);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    init_once();
    struct input in = {data, size};
    struct slot slots[NREQ] = {{0}};
    errors = 0;
    pscom_connection_t *c = pscom_open_connection(sock);
    CHECK(c);
    con_of(c)->rndv_threshold = RNDV_AT;

    while (in.left) {
        unsigned op = byte(&in) % OP_COUNT;
        struct slot *s = &slots[byte(&in) % NREQ];
        switch (op) {
        case OP_RAW: {
            uint8_t raw[256];
            size_t n = take_up_to(&in, raw, byte(&in));
            pscom_plugin_rx_push(con_of(c), raw, n);
            break;
        }
        case OP_FRAME: op_frame(&in, c); break;
        case OP_RX_NOW: op_rx_now(&in, c); break;
        case OP_RECV: op_recv(&in, c, s); break;
        case OP_SEND: op_send(&in, c, s); break;
        case OP_TX: op_tx(&in, c); break;
        case OP_CANCEL:
            if (s->req && s->recv) pscom_cancel_recv(s->req);
            break;
        case OP_PROBE: op_probe(&in, c); break;
        }
        CHECK(errors <= 1);
        if (errors) {
            /* A failed connection takes no more bytes. */
            uint8_t zero[8] = {0};
            CHECK(pscom_plugin_rx_push(con_of(c), zero, sizeof(zero)) == -1);
        }
    }
    finish(slots, c);
    CHECK(errors <= 1);
    return 0;
}
