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
 * on a fresh connection without a transport, closed at the end. Two steps
 * build messages the fuzzer could not guess: rendezvous answers naming the
 * ids of the program's own requests, and one-sided messages naming the
 * registered region, aimed at, across and beyond its ends; one-sided
 * operations posted at the peer (this process's own region key stands for
 * the peer's), whose replies the peer makes up. Each input
 * opens a group whose members other than this process are all the one
 * connection, so that broadcasts can be posted and the peer's group
 * messages have a group to go to.
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

#include "fuzz_input.h"
#include "core.h"

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
    OP_ANSWER,    /* the peer's rendezvous answer to a request of a slot */
    OP_RMA,       /* a one-sided message at (or near) the region */
    OP_BCAST,     /* post a broadcast on the group */
    OP_ORIGIN,    /* post a one-sided operation at the peer */
    OP_GROUP_MSG, /* a broadcast or barrier message of the peer */
    OP_COUNT
};

static pscom_socket_t *sock;
static pscom_memh_t memh;
static void *keybuf; /* the region's packed key, standing for the peer's */
static size_t keylen;
static pscom_rkey_t rkey; /* keybuf on the running input's connection */
static uint64_t region_id; /* the name peers use for the region */
static uint8_t region[REGION];
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

/* The region's target callback, for every operation: it reads what the
 * core says the operation touches, which must lie in the region (or in
 * the request's own storage, the operand of an accumulate). */
static volatile uint8_t sink;

static void target_cb(pscom_request_t *r)
{
    const uint8_t *p = r->data;
    uintptr_t a = (uintptr_t)p, lo = (uintptr_t)region;
    bool in_region =
        a >= lo && a <= lo + REGION && r->data_len <= lo + REGION - a;
    CHECK(!r->data_len || in_region || p == (const uint8_t *)r->user);
    for (size_t i = 0; p && i < r->data_len; i++) sink ^= p[i];
}

static void init_once(void)
{
    if (sock) return;
    CHECK(pscom_init(PSCOM_VERSION) == PSCOM_SUCCESS);
    pscom_set_debug(0); /* every input is malformed on purpose */
    sock = pscom_open_socket(0, 0, 0, 0);
    CHECK(sock);
    sock->ops.con_error = on_error;
    /* A region that one-sided messages can name (its id is small). */
    CHECK(pscom_mem_register(sock, region, sizeof(region), &memh) ==
          PSCOM_SUCCESS);
    region_id = psc_ctx.next_id; /* the id registering gave it */
    for (int op = 0; op < PSCOM_RMA_OP_COUNT; op++)
        pscom_register_rma_callbacks(target_cb, memh, (pscom_rma_op_t)op);
    CHECK(pscom_rkey_buffer_pack(&keybuf, &keylen, memh) == PSCOM_SUCCESS);
}

enum slot_kind {
    SLOT_RECV,
    SLOT_SEND,
    SLOT_BCAST,  /* receives the broadcast (or sends it, at the root) */
    SLOT_ORIGIN, /* a one-sided operation; buf has room for two operands */
};

struct slot {
    pscom_request_t *req; /* NULL: free */
    void *buf;
    size_t len;
    enum slot_kind kind;
};

/* Does the slot's request receive into buf? */
static bool receives(const struct slot *s)
{
    return s->kind == SLOT_RECV || s->kind == SLOT_BCAST;
}

static pscom_request_t *new_req(struct slot *s, size_t len,
                                enum slot_kind kind);

/* The group of the running input. */
static pscom_group_t *group;
static uint32_t group_id, group_size;

static void open_group(struct input *in, pscom_connection_t *c)
{
    pscom_connection_t *cons[4];
    group_size = 2 + byte(in) % 3;
    uint32_t me = byte(in) % group_size;
    group_id = 1 + byte(in) % 4;
    for (uint32_t i = 0; i < group_size; i++) cons[i] = i == me ? NULL : c;
    group = pscom_group_open(sock, group_id, me, group_size, cons);
    CHECK(group);
}

static uint8_t frame_buf[8 + 255 + 65536];

/* Push a frame (header, xheader x[0..xl), then what the input has of a body
 * of dlen bytes) in chunks whose size the input picks. */
static void push_frame(struct input *in, pscom_connection_t *c, uint8_t type,
                       const void *x, size_t xl, uint16_t dlen)
{
    pscom_header_net_t h = {0};
    h.msg_type = type;
    h.xheader_len = (uint16_t)xl;
    h.data_len = dlen;
    memcpy(frame_buf, &h, sizeof(h));
    memcpy(frame_buf + sizeof(h), x, xl);
    size_t len = sizeof(h) + xl;
    len += take_up_to(in, frame_buf + len, dlen);
    unsigned chunk = 1 + byte(in) % 64;
    for (size_t off = 0; off < len; off += chunk) {
        size_t n = len - off < chunk ? len - off : chunk;
        if (pscom_plugin_rx_push(con_of(c), frame_buf + off, n)) break;
    }
}

/* A frame of any type, its xheader from the input. */
static void op_frame(struct input *in, pscom_connection_t *c)
{
    uint8_t x[255];
    uint8_t type = (uint8_t)(byte(in) % (PSC_MSG_TYPE_MAX + 2));
    size_t xl = byte(in);
    uint16_t dlen = 0;
    take(in, &dlen, sizeof(dlen));
    memset(x, 0, xl);
    take_up_to(in, x, xl);
    push_frame(in, c, type, x, xl, dlen);
}

/* The peer's answer to the rendezvous of slot s: for a send, a CTS (with
 * an id of the peer's choice) or a FIN naming it; for a receive that
 * asked for its body, the body (RNDV_DATA). The ids are the requests'. */
static void op_answer(struct input *in, pscom_connection_t *c,
                      const struct slot *s)
{
    if (!s->req) return;
    uint64_t id = req_of(s->req)->id;
    unsigned mode = byte(in);
    if (mode & 4) id += mode >> 3; /* now and then a near miss */
    if (s->kind == SLOT_ORIGIN) {
        struct psc_rma_reply rep = {.id = id,
                                    .status = mode & 2 ? PSCOM_ERR_INVALID : 0};
        push_frame(in, c, PSC_MSG_RMA_REPLY, &rep, sizeof(rep),
                   (uint16_t)u16(in) % 512);
    } else if (!receives(s) && mode & 1) {
        struct psc_rndv_fin fin = {.sender_id = id};
        push_frame(in, c, PSC_MSG_RNDV_FIN, &fin, sizeof(fin), 0);
    } else if (!receives(s)) {
        struct psc_rndv_cts cts = {.sender_id = id};
        take(in, &cts.receiver_id, 1);
        push_frame(in, c, PSC_MSG_RNDV_CTS, &cts, sizeof(cts), 0);
    } else {
        struct psc_rndv_data_hdr dh = {.receiver_id = id};
        uint16_t dlen = 0;
        take(in, &dlen, sizeof(dlen));
        push_frame(in, c, PSC_MSG_RNDV_DATA, &dh, sizeof(dh), dlen);
    }
}

/* A broadcast of the group (now and then of another group, or a root
 * that is no rank of it), into or from a buffer the input sizes. */
static void op_bcast(struct input *in, struct slot *s)
{
    unsigned mode = byte(in);
    size_t len = byte(in);
    if (s->req) return;
    pscom_request_t *r = new_req(s, len, SLOT_BCAST);
    memset(s->buf, 'b', len);
    r->socket = sock;
    r->xheader_len = sizeof(pscom_xheader_bcast_t) + mode % 3 * 4;
    memset(&r->xheader, 0, r->xheader_len);
    r->xheader.bcast.group_id = group_id + (mode & 8 ? 1 : 0);
    r->xheader.bcast.bcast_root = (mode >> 4) % (group_size + 1);
    pscom_post_bcast(r);
}

static void origin_done(pscom_request_t *r)
{
    (void)r; /* with a callback, the request stays the program's to free */
}

/* A one-sided operation at the peer's region (the key stands for it), at
 * an offset the input picks, of up to 255 bytes. */
static void op_origin(struct input *in, pscom_connection_t *c, struct slot *s)
{
    typedef void (*post_fn)(pscom_request_t *);
    static const post_fn posts[] = {
        pscom_post_rma_put,           pscom_post_rma_get,
        pscom_post_rma_accumulate,    pscom_post_rma_get_accumulate,
        pscom_post_rma_fetch_op,      pscom_post_rma_compare_swap,
    };
    unsigned mode = byte(in);
    size_t len = byte(in);
    unsigned off = u16(in);
    if (s->req || !rkey) return;
    pscom_request_t *r = new_req(s, 2 * len, SLOT_ORIGIN);
    memset(s->buf, 'o', 2 * len);
    r->connection = c;
    r->data_len = len;
    r->xheader_len = 0;
    r->rma.rkey = rkey;
    /* (an address as the peer would have it: a number, maybe outside) */
    r->rma.target_addr = (void *)((uintptr_t)region + off % (2 * REGION));
    r->rma.origin_addr = s->buf;
    r->rma.compare_addr = (char *)s->buf + len;
    r->rma.result_addr = s->buf;
    r->ops.io_done = origin_done;
    posts[mode % (sizeof(posts) / sizeof(posts[0]))](r);
}

/* The peer's broadcast (or barrier) message for a group and root the
 * input picks, mostly the running group's. */
static void op_group_msg(struct input *in, pscom_connection_t *c)
{
    unsigned mode = byte(in);
    uint8_t x[sizeof(pscom_xheader_bcast_t) + 16] = {0};
    pscom_xheader_bcast_t b = {
        .group_id = mode & 1 ? group_id : byte(in),
        .bcast_root = (mode >> 1) % (group_size + 1),
    };
    take(in, &b.bcast_arg1, sizeof(b.bcast_arg1));
    take(in, &b.bcast_arg2, sizeof(b.bcast_arg2));
    memcpy(x, &b, sizeof(b));
    size_t xl = sizeof(b) + (mode >> 4) % 17;
    uint16_t dlen = 0;
    take(in, &dlen, 1);
    push_frame(in, c, mode & 8 ? PSC_MSG_BARRIER : PSC_MSG_BCAST, x, xl,
               mode & 8 ? 0 : dlen);
}

/* A one-sided message naming the registered region (or, now and then,
 * another id), at an offset and of a length the input picks: inside the
 * region, across one of its ends or outside it. */
static void op_rma(struct input *in, pscom_connection_t *c)
{
    static const uint8_t types[] = {
        PSC_MSG_RMA_PUT,  PSC_MSG_RMA_ACC,      PSC_MSG_RMA_GET,
        PSC_MSG_RMA_GACC, PSC_MSG_RMA_FOP,      PSC_MSG_RMA_CAS,
        PSC_MSG_RMA_PUT_DONE, PSC_MSG_RMA_GET_DONE, PSC_MSG_RMA_REPLY,
    };
    uint8_t type = types[byte(in) % sizeof(types)];
    unsigned mode = byte(in);
    int16_t off = 0;
    uint16_t len = 0;
    take(in, &off, sizeof(off));
    take(in, &len, sizeof(len));
    /* An address as a peer names it: a number, not a pointer we form. */
    uintptr_t addr = (uintptr_t)region + (uintptr_t)(intptr_t)off;
    void *memh_name = (void *)(uintptr_t)(mode & 1 ? region_id
                                                   : region_id + mode % 7);
    uint8_t x[64] = {0};
    size_t xl;
    uint16_t dlen = len;
    bool put_like = type == PSC_MSG_RMA_PUT || type == PSC_MSG_RMA_ACC ||
                    type == PSC_MSG_RMA_PUT_DONE;
    if (type == PSC_MSG_RMA_REPLY) {
        struct psc_rma_reply r = {.id = mode};
        memcpy(x, &r, sizeof(r));
        xl = sizeof(r);
    } else if (put_like) {
        pscom_rma_put_data_t p = {.dest = (void *)addr, .memh = memh_name};
        memcpy(x, &p, sizeof(p));
        xl = sizeof(p);
        if (type == PSC_MSG_RMA_PUT_DONE) {
            struct psc_rma_notice n = {.len = len};
            memcpy(x + xl, &n, sizeof(n));
            xl += sizeof(n);
            dlen = 0;
        }
    } else {
        pscom_rma_get_data_t g = {.id = (void *)(uintptr_t)(mode >> 1),
                                  .src = (void *)addr, .src_len = len,
                                  .memh = memh_name};
        memcpy(x, &g, sizeof(g));
        xl = sizeof(g);
        if (type == PSC_MSG_RMA_GET || type == PSC_MSG_RMA_GET_DONE) dlen = 0;
        else if (type == PSC_MSG_RMA_CAS) dlen = (uint16_t)(2 * len);
        else dlen = len / (1 + mode % 4);
    }
    if (mode & 2) dlen ^= (uint16_t)byte(in); /* lengths that disagree */
    xl += byte(in) % 8;                        /* the user's part */
    push_frame(in, c, type, x, xl, dlen);
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

static pscom_request_t *new_req(struct slot *s, size_t len,
                                enum slot_kind kind)
{
    s->req = pscom_request_create(MAX_XH, 0);
    CHECK(s->req);
    s->buf = malloc(len); /* (ASan gives even 0 bytes an address) */
    CHECK(s->buf);
    s->len = len;
    s->kind = kind;
    s->req->data = s->buf;
    s->req->data_len = len;
    return s->req;
}

static void op_recv(struct input *in, pscom_connection_t *c, struct slot *s)
{
    unsigned mode = byte(in);
    size_t len = byte(in) * (mode & 8 ? 64 : 1);
    if (s->req) return;
    pscom_request_t *r = new_req(s, len, SLOT_RECV);
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
    pscom_request_t *r = new_req(s, len, SLOT_SEND);
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
        if (!pscom_req_is_done(r) && s->kind == SLOT_RECV && !r->connection)
            pscom_cancel_recv(r);
        CHECK(pscom_req_is_done(r));
        if (receives(s) && pscom_req_successful(r))
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
    open_group(&in, c);
    CHECK(pscom_rkey_generate(c, keybuf, keylen, &rkey) == PSCOM_SUCCESS);

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
            if (s->req && receives(s)) pscom_cancel_recv(s->req);
            break;
        case OP_PROBE: op_probe(&in, c); break;
        case OP_ANSWER: op_answer(&in, c, s); break;
        case OP_RMA: op_rma(&in, c); break;
        case OP_BCAST: op_bcast(&in, s); break;
        case OP_ORIGIN: op_origin(&in, c, s); break;
        case OP_GROUP_MSG: op_group_msg(&in, c); break;
        }
        CHECK(errors <= 1);
        if (errors) {
            /* A failed connection takes no more bytes. */
            uint8_t zero[8] = {0};
            CHECK(pscom_plugin_rx_push(con_of(c), zero, sizeof(zero)) == -1);
        }
    }
    finish(slots, c);
    pscom_group_close(group);
    pscom_rkey_destroy(rkey);
    rkey = NULL;
    CHECK(errors <= 1);
    return 0;
}
