/*
 * One-sided and group messages from the network, fed into connections that
 * have no transport (the upcall a plugin uses), checked against the rules
 * of doc/wire-protocol.md: lengths, answers for no request, regions that do
 * not exist or are too small, operands of the wrong size, bodies where none
 * belong. Bad input drops the message or fails only its own connection,
 * never writes outside a registered region and never crashes; good input
 * lands where it should and calls the region's callback. The notices of
 * plugin fast paths (RMA_PUT_DONE, RMA_GET_DONE) call the callback once,
 * with the request the two-sided message would have given, and only for
 * ranges inside a registered region.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "frames.h"

#include "error_socket.h"

static int put_calls, acc_calls, get_calls;
static pscom_request_t last_cb; /* the callback's request, up to its xheader */
static size_t last_cb_xlen;

static void keep_cb_request(pscom_request_t *r)
{
    memcpy(&last_cb, r, offsetof(pscom_request_t, xheader));
    last_cb_xlen = r->xheader_len;
}

static void on_put(pscom_request_t *r)
{
    put_calls++;
    keep_cb_request(r);
}

static void on_get(pscom_request_t *r)
{
    get_calls++;
    keep_cb_request(r);
}

static void on_acc(pscom_request_t *r)
{
    acc_calls++;
}

/* The region id peers use for memh, read from its packed key (the test
 * knows the layout of doc/rma.md). */
static uint64_t region_id(pscom_memh_t memh)
{
    void *buf;
    size_t len;
    uint64_t id;
    assert_int_equal(pscom_rkey_buffer_pack(&buf, &len, memh), PSCOM_SUCCESS);
    memcpy(&id, (char *)buf + 8, sizeof(id));
    pscom_rkey_buffer_release(buf);
    return id;
}

static void header_lengths(void **state)
{
    pscom_header_net_t h = {0};
    const char *why = NULL;
    static const uint8_t types[] = {PSC_MSG_RMA_PUT,  PSC_MSG_RMA_ACC,
                                    PSC_MSG_RMA_GET,  PSC_MSG_RMA_GACC,
                                    PSC_MSG_RMA_FOP,  PSC_MSG_RMA_CAS,
                                    PSC_MSG_RMA_REPLY, PSC_MSG_RMA_WRITE,
                                    PSC_MSG_RMA_READ, PSC_MSG_BCAST,
                                    PSC_MSG_BARRIER, PSC_MSG_RMA_PUT_DONE,
                                    PSC_MSG_RMA_GET_DONE};
    for (size_t i = 0; i < sizeof(types); i++) {
        h.msg_type = types[i];
        h.xheader_len = 3; /* shorter than every fixed part */
        h.data_len = 0;
        assert_int_equal(psc_header_check(&h, &why), -1);
    }
    h.msg_type = PSC_MSG_RMA_GET;
    h.xheader_len = sizeof(pscom_xheader_rma_get_t) + 16;
    assert_int_equal(psc_header_check(&h, &why), 0);
    h.data_len = 1; /* a get has no body */
    assert_int_equal(psc_header_check(&h, &why), -1);
    h.msg_type = PSC_MSG_BARRIER;
    h.xheader_len = sizeof(pscom_xheader_bcast_t);
    assert_int_equal(psc_header_check(&h, &why), -1);
    h.data_len = 0;
    assert_int_equal(psc_header_check(&h, &why), 0);
    h.msg_type = PSC_MSG_RMA_REPLY;
    h.xheader_len = sizeof(struct psc_rma_reply);
    h.data_len = 100;
    assert_int_equal(psc_header_check(&h, &why), 0);
}

static void reply_for_no_request(void **state)
{
    struct frame f;
    struct psc_rma_reply rep = {.id = 424242};
    pscom_connection_t *c = fresh();
    frame_make(&f, PSC_MSG_RMA_REPLY, &rep, sizeof(rep), "xyz", 3, 3);
    assert_int_equal(feed(c, &f), -1);
    assert_int_equal(errors, 1);
    assert_int_equal(last_err, PSCOM_ERR_IOERROR);
    pscom_close_connection(c);
}

static void puts_land_only_inside(void **state)
{
    static char mem[256];
    char guard[64];
    pscom_memh_t memh;
    memset(mem, 0, sizeof(mem));
    assert_int_equal(pscom_mem_register(sock, mem + 64, 128, &memh),
                     PSCOM_SUCCESS);
    pscom_register_rma_callbacks(on_put, memh, PSCOM_RMA_PUT);
    pscom_register_rma_callbacks(on_acc, memh, PSCOM_RMA_ACCUMULATE);
    uint64_t id = region_id(memh);
    pscom_connection_t *c = fresh();
    struct frame f;
    pscom_xheader_rma_put_t x = {0};
    put_calls = acc_calls = 0;

    /* Inside: written, callback. */
    x.common.dest = mem + 64;
    x.common.memh = (void *)(uintptr_t)id;
    frame_make(&f, PSC_MSG_RMA_PUT, &x, sizeof(x), "INSIDE", 6, 6);
    assert_int_equal(feed(c, &f), 0);
    assert_memory_equal(mem + 64, "INSIDE", 6);
    assert_int_equal(put_calls, 1);

    /* Reaching past the end, starting before it, unknown region: the body
     * is read and dropped, the connection goes on. */
    memcpy(guard, mem, 64);
    x.common.dest = mem + 64 + 120;
    frame_make(&f, PSC_MSG_RMA_PUT, &x, sizeof(x), "0123456789abcdef", 16, 16);
    assert_int_equal(feed(c, &f), 0);
    x.common.dest = mem + 60;
    assert_int_equal(feed(c, &f), 0);
    x.common.dest = mem + 64;
    x.common.memh = (void *)(uintptr_t)(id + 1000);
    frame_make(&f, PSC_MSG_RMA_ACC, &x, sizeof(x), "0123456789abcdef", 16, 16);
    assert_int_equal(feed(c, &f), 0);
    assert_memory_equal(mem, guard, 64);
    assert_memory_equal(mem + 64, "INSIDE", 6);
    assert_int_equal(mem + 64 + 120 < mem + sizeof(mem), 1);
    for (size_t i = 192; i < sizeof(mem); i++) assert_int_equal(mem[i], 0);
    assert_int_equal(put_calls, 1);
    assert_int_equal(acc_calls, 0);
    assert_int_equal(errors, 0);

    /* A deregistered region is unknown. */
    x.common.memh = (void *)(uintptr_t)id;
    assert_int_equal(pscom_mem_deregister(memh), PSCOM_SUCCESS);
    frame_make(&f, PSC_MSG_RMA_PUT, &x, sizeof(x), "AFTER!", 6, 6);
    assert_int_equal(feed(c, &f), 0);
    assert_memory_equal(mem + 64, "INSIDE", 6);
    assert_int_equal(errors, 0);
    pscom_close_connection(c);
}

/* An RMA_PUT_DONE: the put's xheader (with `user` bytes of the
 * application's part), then the 8-byte length trailer. */
static void put_notice(struct frame *f, void *dest, uint64_t id, size_t user,
                       uint64_t len, uint64_t body)
{
    uint8_t x[sizeof(pscom_rma_put_data_t) + 64 + 8] = {0};
    pscom_rma_put_data_t p = {.dest = dest, .memh = (void *)(uintptr_t)id};
    memcpy(x, &p, sizeof(p));
    memset(x + sizeof(p), 0x33, user);
    memcpy(x + sizeof(p) + user, &len, sizeof(len));
    frame_make(f, PSC_MSG_RMA_PUT_DONE, x, sizeof(p) + user + 8, "zz", body,
               body < 2 ? body : 2);
}

static void notices_call_back_inside_only(void **state)
{
    static char mem[256];
    pscom_memh_t memh;
    assert_int_equal(pscom_mem_register(sock, mem + 64, 128, &memh),
                     PSCOM_SUCCESS);
    pscom_register_rma_callbacks(on_put, memh, PSCOM_RMA_PUT);
    pscom_register_rma_callbacks(on_get, memh, PSCOM_RMA_GET);
    uint64_t id = region_id(memh);
    pscom_connection_t *c = fresh();
    struct frame f;
    put_calls = get_calls = 0;

    /* A put notice: the callback sees what an RMA_PUT of 100 bytes with a
     * 12-byte application part would have given it. */
    put_notice(&f, mem + 64, id, 12, 100, 0);
    assert_int_equal(feed(c, &f), 0);
    assert_int_equal(put_calls, 1);
    assert_ptr_equal(last_cb.data, mem + 64);
    assert_int_equal(last_cb.data_len, 100);
    assert_int_equal(last_cb.header.msg_type, PSC_MSG_RMA_PUT);
    assert_int_equal(last_cb.header.data_len, 100);
    assert_int_equal(last_cb.header.xheader_len,
                     sizeof(pscom_rma_put_data_t) + 12);
    assert_int_equal(last_cb_xlen, sizeof(pscom_rma_put_data_t) + 12);
    assert_int_equal(last_cb.connection, c);
    assert_true(last_cb.state & PSCOM_REQ_STATE_PASSIVE_SIDE);
    assert_true(last_cb.state & PSCOM_REQ_STATE_RMA_WRITE_REQUEST);

    /* A get notice. */
    pscom_xheader_rma_get_t g = {0};
    g.common.src = mem + 100;
    g.common.src_len = 92;
    g.common.memh = (void *)(uintptr_t)id;
    frame_make(&f, PSC_MSG_RMA_GET_DONE, &g, sizeof(g), NULL, 0, 0);
    assert_int_equal(feed(c, &f), 0);
    assert_int_equal(get_calls, 1);
    assert_ptr_equal(last_cb.data, mem + 100);
    assert_int_equal(last_cb.data_len, 92);
    assert_true(last_cb.state & PSCOM_REQ_STATE_RMA_READ_REQUEST);

    /* Outside the region, or an unknown region: no callback, and nothing
     * is sent back (the origin waits for no answer); the connection goes
     * on. */
    put_notice(&f, mem + 64, id, 0, 129, 0);
    assert_int_equal(feed(c, &f), 0);
    put_notice(&f, mem + 63, id, 0, 1, 0);
    assert_int_equal(feed(c, &f), 0);
    put_notice(&f, mem + 64, id + 1000, 0, 1, 0);
    assert_int_equal(feed(c, &f), 0);
    g.common.src_len = 93;
    frame_make(&f, PSC_MSG_RMA_GET_DONE, &g, sizeof(g), NULL, 0, 0);
    assert_int_equal(feed(c, &f), 0);
    assert_int_equal(put_calls, 1);
    assert_int_equal(get_calls, 1);
    assert_int_equal(errors, 0);
    assert_true(psc_list_empty(&con_of(c)->sendq));

    /* Malformed: a body, a trailer-less xheader, a length beyond what a
     * message can carry. Each closes its connection. */
    put_notice(&f, mem + 64, id, 0, 2, 2);
    assert_int_equal(feed(c, &f), -1);
    assert_int_equal(errors, 1);
    pscom_close_connection(c);

    c = fresh();
    pscom_rma_put_data_t p = {.dest = mem + 64, .memh = (void *)(uintptr_t)id};
    frame_make(&f, PSC_MSG_RMA_PUT_DONE, &p, sizeof(p), NULL, 0, 0);
    assert_int_equal(feed(c, &f), -1);
    assert_int_equal(errors, 1);
    pscom_close_connection(c);

    c = fresh();
    put_notice(&f, mem + 64, 0, 0, PSCOM_DATA_LEN_MASK + 1ull, 0);
    assert_int_equal(feed(c, &f), -1);
    assert_int_equal(errors, 1);
    pscom_close_connection(c);

    c = fresh();
    frame_make(&f, PSC_MSG_RMA_GET_DONE, &g, sizeof(g), "x", 1, 1);
    assert_int_equal(feed(c, &f), -1);
    assert_int_equal(errors, 1);
    pscom_close_connection(c);

    /* A deregistered region is unknown. */
    c = fresh();
    assert_int_equal(pscom_mem_deregister(memh), PSCOM_SUCCESS);
    put_notice(&f, mem + 64, id, 0, 8, 0);
    assert_int_equal(feed(c, &f), 0);
    assert_int_equal(put_calls, 1);
    assert_int_equal(errors, 0);
    pscom_close_connection(c);
}

static void atomics_with_wrong_operands(void **state)
{
    static uint64_t word = 77;
    pscom_memh_t memh;
    assert_int_equal(pscom_mem_register(sock, &word, sizeof(word), &memh),
                     PSCOM_SUCCESS);
    pscom_connection_t *c = fresh();
    struct frame f;
    pscom_xheader_rma_compare_swap_t x = {0};
    x.common.id = (void *)1;
    x.common.src = &word;
    x.common.src_len = 8;
    x.common.memh = (void *)(uintptr_t)region_id(memh);
    uint64_t ops[2] = {77, 99};

    /* Compare-and-swap with one operand instead of two: refused. */
    frame_make(&f, PSC_MSG_RMA_CAS, &x, sizeof(x), ops, 8, 8);
    assert_int_equal(feed(c, &f), 0);
    assert_int_equal(word, 77);
    /* Fetch-and-op with an operand longer than the target: refused. */
    frame_make(&f, PSC_MSG_RMA_FOP, &x, sizeof(x), ops, 16, 16);
    assert_int_equal(feed(c, &f), 0);
    assert_int_equal(word, 77);
    /* Right: swapped (the answer waits in the send queue). */
    frame_make(&f, PSC_MSG_RMA_CAS, &x, sizeof(x), ops, 16, 16);
    assert_int_equal(feed(c, &f), 0);
    assert_int_equal(word, 99);
    assert_int_equal(errors, 0);

    /* A refusal that carries a body is malformed. */
    struct psc_rma_reply rep = {.id = 1, .status = PSCOM_ERR_INVALID};
    frame_make(&f, PSC_MSG_RMA_REPLY, &rep, sizeof(rep), "x", 1, 1);
    assert_int_equal(feed(c, &f), -1);
    assert_int_equal(errors, 1);
    pscom_close_connection(c);
    pscom_mem_deregister(memh);
}

static void bcast_before_group_open(void **state)
{
    pscom_connection_t *c = fresh();
    struct frame f;
    struct {
        pscom_xheader_bcast_t b;
        char user[4];
    } x = {{.group_id = 5, .bcast_root = 0, .bcast_arg1 = 1}, "usr"};
    frame_make(&f, PSC_MSG_BCAST, &x, sizeof(x), "hello", 5, 5);
    assert_int_equal(feed(c, &f), 0);

    pscom_connection_t *cons[2] = {c, NULL};
    pscom_group_t *g = pscom_group_open(sock, 5, 1, 2, cons);
    assert_non_null(g);
    char buf[8] = {0}, xh[4] = {0};
    pscom_bcast(g, 0, xh, sizeof(xh), buf, 5);
    assert_memory_equal(buf, "hello", 5);
    assert_memory_equal(xh, "usr", 4);
    pscom_group_close(g);
    assert_int_equal(errors, 0);
    pscom_close_connection(c);
}

static void random_rma_bytes_never_crash(void **state)
{
    /* Not RMA_WRITE and RMA_READ: they address the peer's memory without
     * a region (the peer is trusted, as in ParaStation pscom). */
    static uint8_t types[] = {PSC_MSG_RMA_PUT,   PSC_MSG_RMA_ACC,
                              PSC_MSG_RMA_GET,   PSC_MSG_RMA_GACC,
                              PSC_MSG_RMA_FOP,   PSC_MSG_RMA_CAS,
                              PSC_MSG_RMA_REPLY, PSC_MSG_BCAST,
                              PSC_MSG_BARRIER,   PSC_MSG_RMA_PUT_DONE,
                              PSC_MSG_RMA_GET_DONE};
    uint32_t seed = 12345;
    for (int round = 0; round < 2000; round++) {
        pscom_connection_t *c = fresh();
        struct frame f;
        uint8_t x[64], d[64];
        for (size_t i = 0; i < sizeof(x); i++) {
            seed = seed * 1103515245 + 12345;
            x[i] = (uint8_t)(seed >> 16);
            d[i] = (uint8_t)(seed >> 8);
        }
        /* Never a valid region id: the library's ids are small counters;
         * these are large. */
        x[15] |= 0x80;
        x[31] |= 0x80;
        size_t xl = 16 + (seed >> 4) % 48, dl = (seed >> 12) % 64;
        if (round % 3 == 0) dl = 0; /* notices and gets have no body */
        frame_make(&f, types[round % sizeof(types)], x, xl, d, dl, dl);
        feed(c, &f);
        pscom_close_connection(c);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(header_lengths),
        cmocka_unit_test(reply_for_no_request),
        cmocka_unit_test(puts_land_only_inside),
        cmocka_unit_test(notices_call_back_inside_only),
        cmocka_unit_test(atomics_with_wrong_operands),
        cmocka_unit_test(bcast_before_group_open),
        cmocka_unit_test(random_rma_bytes_never_crash),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
