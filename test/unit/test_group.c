/*
 * Group messages (pscom_post_bcast) at a rank that is not the root, fed
 * into connections without a transport: the broadcast is carried out by
 * a receive of the group's own, so the user's request is in no queue.
 * What a member passes on to its children stays in their connections'
 * send queues, where the tests read it. The barrier tests put the peers
 * on a fake transport that answers each round, with psc_req_alloc failing
 * on demand (-Wl,--wrap).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/epoll.h>
#include <cmocka.h>

#include "fake_transport.h"
#include "frames.h"

#define GROUP 7
#define MAX_MEMBERS 5

/* bcast_arg2 of group messages (doc/wire-protocol.md). */
#define FLAG_FAILED 1u
#define FLAG_CUT 2u

/* psc_req_alloc fails while alloc_fails is set (-Wl,--wrap); the calls it
 * refused are counted. */
static bool alloc_fails;
static unsigned allocs_refused;

struct psc_req *__real_psc_req_alloc(size_t xlen, size_t user_size);
struct psc_req *__wrap_psc_req_alloc(size_t xlen, size_t user_size);
struct psc_req *__wrap_psc_req_alloc(size_t xlen, size_t user_size)
{
    if (alloc_fails) {
        allocs_refused++;
        return NULL;
    }
    return __real_psc_req_alloc(xlen, user_size);
}

static pscom_socket_t *sock;
static pscom_connection_t *parent;
static pscom_connection_t *cons[MAX_MEMBERS];
static pscom_group_t *group;

/* Rank 1 of n; the others are behind fresh connections. Rank 0 is the
 * root and our parent; with 5 members rank 2 is our child. */
static void open_members(uint32_t n)
{
    sock = pscom_open_socket(0, 0, 0, 0);
    for (uint32_t i = 0; i < n; i++)
        cons[i] = i == 1 ? NULL : pscom_open_connection(sock);
    parent = cons[0];
    group = pscom_group_open(sock, GROUP, 1, n, cons);
    assert_non_null(group);
}

/* Rank 1 of two. */
static int open_group(void **state)
{
    (void)state;
    open_members(2);
    return 0;
}

/* Rank 1 of five: parent rank 0, child rank 2. */
static int open_group5(void **state)
{
    (void)state;
    open_members(5);
    return 0;
}

static int close_group(void **state)
{
    (void)state;
    pscom_group_close(group);
    pscom_close_socket(sock);
    return 0;
}

static unsigned done_calls;

static void count_done(pscom_request_t *r)
{
    (void)r;
    done_calls++;
}

static char buf[16];

/* A broadcast from root 0 on group id of socket s into data, not posted. */
static pscom_request_t *bcast_req(pscom_socket_t *s, uint32_t id, void *data,
                                  size_t len)
{
    pscom_request_t *r = pscom_request_create(sizeof(pscom_xheader_bcast_t), 0);
    r->socket = s;
    r->data = data;
    r->data_len = len;
    r->xheader_len = sizeof(pscom_xheader_bcast_t);
    r->xheader.bcast.group_id = id;
    r->xheader.bcast.bcast_root = 0;
    return r;
}

static pscom_request_t *post_bcast_len(size_t len)
{
    pscom_request_t *r = bcast_req(sock, GROUP, buf, len);
    r->ops.io_done = count_done;
    memset(buf, 0, sizeof(buf));
    done_calls = 0;
    pscom_post_bcast(r);
    return r;
}

static pscom_request_t *post_bcast(void)
{
    return post_bcast_len(sizeof(buf));
}

/* A broadcast from root 0 with `flags`, a body of len bytes, and, when
 * cut, the root's length full behind the xheader. */
static void bcast_frame_flags(struct frame *f, uint32_t flags,
                              const char *body, size_t len, uint64_t full)
{
    uint8_t x[sizeof(pscom_xheader_bcast_t) + sizeof(full)];
    pscom_xheader_bcast_t b = {.group_id = GROUP, .bcast_root = 0,
                               .bcast_arg1 = 2, .bcast_arg2 = flags};
    size_t xlen = sizeof(b);
    memcpy(x, &b, sizeof(b));
    if (flags & FLAG_CUT) {
        memcpy(x + xlen, &full, sizeof(full));
        xlen += sizeof(full);
    }
    frame_make(f, PSC_MSG_BCAST, x, xlen, body, len, len);
}

/* The root's broadcast, "hello". */
static void bcast_frame(struct frame *f)
{
    bcast_frame_flags(f, 0, "hello", 6, 6);
}

/* The one frame queued on c: its header and xheader (NULL: none queued). */
static const pscom_header_net_t *sent_frame(pscom_connection_t *c)
{
    struct psc_con *con = con_of(c);
    if (psc_list_empty(&con->sendq)) return NULL;
    struct psc_req *req = psc_list_first(&con->sendq, struct psc_req, next);
    assert_ptr_equal(req->next.next, &con->sendq);
    return req->iov[0].iov_base;
}

static const pscom_xheader_bcast_t *bcast_of(const pscom_header_net_t *h)
{
    return (const void *)(h + 1);
}

/* The forward to our child (5 members) is never written here: fail it, so
 * that r ends, in error, and free r. */
static void end_forward(pscom_request_t *r)
{
    assert_false(r->state & PSCOM_REQ_STATE_DONE);
    assert_int_equal(pscom_fail_connection(cons[2], PSCOM_ERR_IOERROR),
                     PSCOM_SUCCESS);
    pscom_test_any();
    assert_int_equal(done_calls, 1);
    assert_true(r->state & PSCOM_REQ_STATE_ERROR);
    pscom_request_free(r);
}

/* A broadcast posted now takes the "hello" that waits for it. */
static void later_bcast_gets_hello(void)
{
    pscom_request_t *r = post_bcast();
    pscom_test_any();
    assert_int_equal(done_calls, 1);
    assert_true(pscom_req_successful(r));
    assert_string_equal(buf, "hello");
    pscom_request_free(r);
}

/* Cancelling it is refused: the message that comes later completes it
 * once, into the buffer the caller still owns. (It used to be reported
 * cancelled, and then completed again when the message came.) */
static void bcast_is_not_cancelled(void **state)
{
    (void)state;
    pscom_request_t *r = post_bcast();
    assert_int_equal(pscom_cancel(r), 0);
    assert_int_equal(pscom_cancel_recv(r), 0);
    assert_int_equal(done_calls, 0);
    struct frame f;
    bcast_frame(&f);
    assert_int_equal(feed(parent, &f), 0);
    pscom_test_any();
    assert_int_equal(done_calls, 1);
    assert_true(pscom_req_successful(r));
    assert_false(r->state & PSCOM_REQ_STATE_CANCELED);
    assert_string_equal(buf, "hello");
    pscom_request_free(r);
}

/* A broadcast and the root's EOF in one read of the transport (inside the
 * core's hold, as in a plugin's progress op): the message arrived whole,
 * so it stays receivable after the failure, as a point-to-point one does,
 * and the broadcast posted later takes it. (It used to be dropped.) */
static void message_before_the_eof_stays(void **state)
{
    (void)state;
    struct frame f, eof;
    bcast_frame(&f);
    frame_make(&eof, PSC_MSG_EOF, NULL, 0, NULL, 0, 0);
    memcpy(f.buf + f.len, eof.buf, eof.len);
    f.len += eof.len;
    psc_hold();
    feed(parent, &f);
    psc_unhold();
    pscom_test_any();
    assert_int_equal(parent->state, PSCOM_CON_STATE_CLOSED);
    later_bcast_gets_hello();
}

/* The same when the connection fails after the message was in (the
 * failure used to drop it). */
static void message_before_a_failure_stays(void **state)
{
    (void)state;
    struct frame f;
    bcast_frame(&f);
    assert_int_equal(feed(parent, &f), 0);
    assert_int_equal(pscom_fail_connection(parent, PSCOM_ERR_IOERROR),
                     PSCOM_SUCCESS);
    later_bcast_gets_hello();
}

/* A broadcast whose message never came fails with the connection. */
static void failure_without_message_fails(void **state)
{
    (void)state;
    assert_int_equal(pscom_fail_connection(parent, PSCOM_ERR_IOERROR),
                     PSCOM_SUCCESS);
    pscom_request_t *r = post_bcast();
    assert_int_equal(done_calls, 1);
    assert_true(r->state & PSCOM_REQ_STATE_ERROR);
    pscom_request_free(r);
}

/* Closing the connection drops the message (no receive took it) and the
 * group forgets the connection: the broadcast posted later fails at once,
 * without touching the freed connection (valgrind). */
static void message_goes_with_the_close(void **state)
{
    (void)state;
    struct frame f;
    bcast_frame(&f);
    assert_int_equal(feed(parent, &f), 0);
    pscom_close_connection(parent);
    pscom_test_any();
    pscom_request_t *r = post_bcast();
    assert_int_equal(done_calls, 1);
    assert_true(r->state & PSCOM_REQ_STATE_ERROR);
    assert_string_equal(buf, "");
    pscom_request_free(r);
}

/* Our parent's connection fails: our child is told, with a failure notice
 * (a flag, no body), instead of waiting for ever. (Our part ends, in
 * error, once that notice is written.) */
static void failed_parent_notifies_the_subtree(void **state)
{
    (void)state;
    pscom_request_t *r = post_bcast();
    assert_null(sent_frame(cons[2]));
    assert_int_equal(pscom_fail_connection(parent, PSCOM_ERR_IOERROR),
                     PSCOM_SUCCESS);
    pscom_test_any();
    const pscom_header_net_t *h = sent_frame(cons[2]);
    assert_non_null(h);
    assert_int_equal(h->msg_type, PSC_MSG_BCAST);
    assert_int_equal(h->xheader_len, sizeof(pscom_xheader_bcast_t));
    assert_int_equal(h->data_len, 0);
    assert_int_equal(bcast_of(h)->group_id, GROUP);
    assert_int_equal(bcast_of(h)->bcast_root, 0);
    assert_int_equal(bcast_of(h)->bcast_arg2, FLAG_FAILED);
    end_forward(r);
}

/* A failure notice from our parent is passed on, and ends our part in
 * error. */
static void failure_notice_is_passed_on(void **state)
{
    (void)state;
    pscom_request_t *r = post_bcast();
    struct frame f;
    bcast_frame_flags(&f, FLAG_FAILED, NULL, 0, 0);
    assert_int_equal(feed(parent, &f), 0);
    pscom_test_any();
    const pscom_header_net_t *h = sent_frame(cons[2]);
    assert_non_null(h);
    assert_int_equal(h->data_len, 0);
    assert_int_equal(bcast_of(h)->bcast_arg2, FLAG_FAILED);
    end_forward(r);
}

/* Once our part started, passing it on needs no memory: with none to be
 * had when the root's message comes, our child still gets it whole. */
static void forward_allocates_nothing(void **state)
{
    (void)state;
    pscom_request_t *r = post_bcast();
    struct frame f;
    bcast_frame(&f);
    alloc_fails = true;
    allocs_refused = 0;
    assert_int_equal(feed(parent, &f), 0);
    pscom_test_any();
    alloc_fails = false;
    assert_int_equal(allocs_refused, 0);
    assert_string_equal(buf, "hello");
    const pscom_header_net_t *h = sent_frame(cons[2]);
    assert_non_null(h);
    assert_int_equal(h->data_len, 6);
    assert_int_equal(bcast_of(h)->bcast_arg2, 0);
    struct psc_req *fwd =
        psc_list_first(&con_of(cons[2])->sendq, struct psc_req, next);
    assert_int_equal(fwd->iov[1].iov_len, 6);
    assert_memory_equal(fwd->iov[1].iov_base, "hello", 6);
    end_forward(r);
}

/* Without memory to start, a broadcast fails at once and sends nothing;
 * its parent's and child's connections fail too (the member would be out
 * of step with them for good: the parent's message taken by its next
 * broadcast, the child waiting), the other members' stay. */
static void start_out_of_memory_fails_the_neighbours(void **state)
{
    (void)state;
    pscom_request_t *r = bcast_req(sock, GROUP, buf, sizeof(buf));
    r->ops.io_done = count_done;
    done_calls = 0;
    alloc_fails = true;
    pscom_post_bcast(r);
    alloc_fails = false;
    pscom_test_any();
    assert_int_equal(done_calls, 1);
    assert_true(r->state & PSCOM_REQ_STATE_ERROR);
    assert_null(sent_frame(cons[2]));
    assert_int_equal(parent->state, PSCOM_CON_STATE_CLOSED);
    assert_int_equal(cons[2]->state, PSCOM_CON_STATE_CLOSED);
    assert_int_not_equal(cons[3]->state, PSCOM_CON_STATE_CLOSED);
    assert_int_not_equal(cons[4]->state, PSCOM_CON_STATE_CLOSED);
    pscom_request_free(r);
}

/* Our buffer is short: we end TRUNCATED with the root's length, and pass
 * on what we hold flagged as cut, with the root's length behind the
 * xheader. */
static void short_buffer_cuts_for_the_subtree(void **state)
{
    (void)state;
    pscom_request_t *r = post_bcast_len(4);
    struct frame f;
    bcast_frame(&f);
    assert_int_equal(feed(parent, &f), 0);
    pscom_test_any();
    assert_true(r->state & PSCOM_REQ_STATE_TRUNCATED);
    assert_false(r->state & PSCOM_REQ_STATE_ERROR);
    assert_int_equal(r->header.data_len, 6);
    assert_memory_equal(buf, "hell", 4);
    assert_int_equal(buf[4], 0);
    const pscom_header_net_t *h = sent_frame(cons[2]);
    assert_non_null(h);
    uint64_t full;
    assert_int_equal(h->data_len, 4);
    assert_int_equal(bcast_of(h)->bcast_arg2, FLAG_CUT);
    assert_int_equal(h->xheader_len,
                     sizeof(pscom_xheader_bcast_t) + sizeof(full));
    memcpy(&full, bcast_of(h) + 1, sizeof(full));
    assert_int_equal(full, 6);
    end_forward(r);
}

/* A message cut above us: we end TRUNCATED with the root's length though
 * all that came fits, our xheader is without the root's length, and our
 * child hears of the cut too. */
static void cut_upstream_ends_truncated(void **state)
{
    (void)state;
    pscom_request_t *r = post_bcast();
    struct frame f;
    bcast_frame_flags(&f, FLAG_CUT, "hello", 6, 5000);
    assert_int_equal(feed(parent, &f), 0);
    pscom_test_any();
    assert_true(r->state & PSCOM_REQ_STATE_TRUNCATED);
    assert_false(r->state & PSCOM_REQ_STATE_ERROR);
    assert_int_equal(r->header.data_len, 5000);
    assert_int_equal(r->header.xheader_len, sizeof(pscom_xheader_bcast_t));
    assert_string_equal(buf, "hello");
    const pscom_header_net_t *h = sent_frame(cons[2]);
    assert_non_null(h);
    uint64_t full;
    assert_int_equal(h->data_len, 6);
    assert_int_equal(bcast_of(h)->bcast_arg2, FLAG_CUT);
    memcpy(&full, bcast_of(h) + 1, sizeof(full));
    assert_int_equal(full, 5000);
    end_forward(r);
}

/* Flags against the rules of doc/wire-protocol.md fail the connection. */
static void bad_flags_fail_the_connection(void **state)
{
    (void)state;
    struct frame f;
    bcast_frame_flags(&f, 4, "hello", 6, 6);
    feed(parent, &f);
    pscom_test_any();
    assert_int_equal(parent->state, PSCOM_CON_STATE_CLOSED);
}

static void cut_without_its_length_fails_the_connection(void **state)
{
    (void)state;
    struct frame f;
    bcast_frame_flags(&f, 0, "hello", 6, 6);
    pscom_xheader_bcast_t b;
    memcpy(&b, f.buf + sizeof(pscom_header_net_t), sizeof(b));
    b.bcast_arg2 = FLAG_CUT;
    memcpy(f.buf + sizeof(pscom_header_net_t), &b, sizeof(b));
    feed(parent, &f);
    pscom_test_any();
    assert_int_equal(parent->state, PSCOM_CON_STATE_CLOSED);
}

/* pscom_bcast refuses an xheader_len larger than a message carries (it
 * used to wrap the length and copy xheader_len bytes: a crash). */
static void huge_xheader_len_is_refused(void **state)
{
    (void)state;
    pscom_socket_t *s = pscom_open_socket(0, 0, 0, 0);
    pscom_group_t *g = pscom_group_open(s, GROUP, 0, 1, NULL);
    assert_non_null(g);
    char xh[4] = "xyz", data[8] = "data";
    pscom_bcast(g, 0, xh, SIZE_MAX - 8, data, sizeof(data));
    pscom_bcast(g, 0, xh, 65536, data, sizeof(data));
    pscom_bcast(g, 0, xh, sizeof(xh), data, sizeof(data));
    assert_string_equal(xh, "xyz");
    assert_string_equal(data, "data");
    pscom_group_close(g);
    pscom_close_socket(s);
}

/* Closing the group while its broadcast is under way keeps it until the
 * broadcast ends, and a connection retired meanwhile leaves it: the
 * forward to the closed child fails instead of reading the freed
 * connection (AddressSanitizer shows that). */
static void closed_busy_group_forgets_retired_connections(void **state)
{
    (void)state;
    pscom_request_t *r = post_bcast();
    pscom_group_close(group);
    group = NULL; /* freed when its broadcast ends */
    pscom_close_connection(cons[2]);
    struct frame f;
    bcast_frame(&f);
    feed(parent, &f);
    pscom_test_any();
    assert_int_equal(done_calls, 1);
    assert_true(r->state & PSCOM_REQ_STATE_ERROR);
    assert_string_equal(buf, "hello");
    pscom_request_free(r);
}

static int close_socket_only(void **state)
{
    (void)state;
    pscom_close_socket(sock);
    return 0;
}

/* A callback run while a collective waits: it fails the connections named
 * in closing_cons and closes the group. */
static pscom_connection_t *closing_cons[MAX_MEMBERS];
static int fired;

static void fail_and_close(int fd, uint32_t ev, void *arg)
{
    (void)ev;
    (void)arg;
    char c;
    if (read(fd, &c, 1) != 1 || fired++) return;
    for (int i = 0; i < MAX_MEMBERS; i++)
        if (closing_cons[i])
            pscom_fail_connection(closing_cons[i], PSCOM_ERR_IOERROR);
    pscom_group_close(group);
    group = NULL;
}

/* Run pscom_bcast (or pscom_barrier) while fail_and_close is due. The
 * collective must end in error without touching the group it no longer
 * has (AddressSanitizer: a read of it after the wait, or in the barrier's
 * next round). */
static void collective_with_close_in_wait(bool barrier)
{
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    assert_int_equal(write(pfd[1], "x", 1), 1);
    fired = 0;
    pscom_plugin_fd_add(pfd[0], EPOLLIN, 1, fail_and_close, NULL);
    if (barrier) {
        pscom_barrier(group);
    } else {
        char data[16];
        pscom_bcast(group, 0, NULL, 0, data, sizeof(data));
    }
    assert_int_equal(fired, 1);
    assert_null(group);
    pscom_plugin_fd_del(pfd[0]);
    close(pfd[0]);
    close(pfd[1]);
}

static void bcast_group_closed_in_wait(void **state)
{
    (void)state;
    memset(closing_cons, 0, sizeof(closing_cons));
    closing_cons[0] = parent;
    collective_with_close_in_wait(false);
}

/* Rank 1 of 5: the barrier's first round sends to rank 2 and waits for
 * rank 0; the callback fails every connection, so that every round ends. */
static void barrier_group_closed_in_wait(void **state)
{
    (void)state;
    memcpy(closing_cons, cons, sizeof(closing_cons));
    collective_with_close_in_wait(true);
}

/* Closing a socket takes its groups with it: they are found no more, the
 * id can be opened again on another socket, their collectives fail
 * cleanly, and pscom_group_close frees them. */
static void socket_close_retires_its_groups(void **state)
{
    (void)state;
    pscom_socket_t *s1 = pscom_open_socket(0, 0, 0, 0);
    pscom_connection_t *c[2] = {NULL, pscom_open_connection(s1)};
    pscom_group_t *g1 = pscom_group_open(s1, GROUP, 0, 1, NULL);
    pscom_group_t *g2 = pscom_group_open(s1, GROUP + 1, 0, 2, c);
    assert_non_null(g1);
    assert_non_null(g2);
    assert_ptr_equal(pscom_group_find(NULL, GROUP), g1);
    pscom_close_socket(s1);
    assert_null(pscom_group_find(NULL, GROUP));
    assert_null(pscom_group_find(NULL, GROUP + 1));

    pscom_socket_t *s2 = pscom_open_socket(0, 0, 0, 0);
    pscom_group_t *g3 = pscom_group_open(s2, GROUP, 0, 1, NULL);
    assert_non_null(g3);
    assert_ptr_equal(pscom_group_find(s2, GROUP), g3);
    assert_ptr_equal(pscom_group_find(NULL, GROUP), g3);

    char data[4] = "abc";
    pscom_bcast(g2, 0, NULL, 0, data, sizeof(data));
    pscom_barrier(g2);
    pscom_bcast(g1, 0, NULL, 0, data, sizeof(data));
    assert_int_equal(pscom_group_get_id(g2), GROUP + 1);
    pscom_group_close(g1);
    pscom_group_close(g2);
    pscom_group_close(g3);
    pscom_close_socket(s2);
}


/* How many group member slots name connection c (the groups it is in,
 * counted once per rank it has in them). */
static size_t slots_of(pscom_connection_t *c)
{
    return psc_list_count(&con_of(c)->group_slots);
}

/* A connection that is in several groups, one of them closed but busy,
 * leaves every one of them when it is closed, and only it: a connection
 * knows its groups (retiring it no longer walks every member of every
 * group), and each group forgets just that member. AddressSanitizer
 * reports a group that still points to the freed connection. */
static void retired_connection_leaves_every_group(void **state)
{
    (void)state;
    pscom_socket_t *s = pscom_open_socket(0, 0, 0, 0);
    pscom_connection_t *a = pscom_open_connection(s);
    pscom_connection_t *b = pscom_open_connection(s);
    pscom_connection_t *c = pscom_open_connection(s);
    pscom_connection_t *in1[3] = {NULL, a, b}; /* we are the root */
    pscom_connection_t *in2[3] = {a, NULL, b}; /* a is our parent */
    pscom_connection_t *in3[2] = {b, NULL};    /* without a */
    /* Rank 1 of 5 under root c: a is our child (rank 2), b is not. */
    pscom_connection_t *in4[5] = {c, NULL, a, b, b};
    pscom_group_t *g1 = pscom_group_open(s, 21, 0, 3, in1);
    pscom_group_t *g2 = pscom_group_open(s, 22, 1, 3, in2);
    pscom_group_t *g3 = pscom_group_open(s, 23, 1, 2, in3);
    pscom_group_t *g4 = pscom_group_open(s, 24, 1, 5, in4);
    assert_true(g1 && g2 && g3 && g4);
    assert_int_equal(slots_of(a), 3);
    assert_int_equal(slots_of(b), 5);
    assert_int_equal(slots_of(c), 1);

    /* g4 is closed while its broadcast waits for root c: it stays. */
    char data4[8] = "", data2[8] = "", data3[8] = "";
    pscom_request_t *r4 = bcast_req(s, 24, data4, sizeof(data4));
    pscom_post_bcast(r4);
    pscom_group_close(g4);
    assert_false(r4->state & PSCOM_REQ_STATE_DONE);

    pscom_close_connection(a);
    pscom_test_any(); /* a is freed */
    assert_int_equal(slots_of(b), 5);
    assert_int_equal(slots_of(c), 1);

    /* g2: the broadcast from a fails at once, without reading it. */
    pscom_request_t *r2 = bcast_req(s, 22, data2, sizeof(data2));
    pscom_post_bcast(r2);
    assert_true(r2->state & PSCOM_REQ_STATE_DONE);
    assert_true(r2->state & PSCOM_REQ_STATE_ERROR);

    /* g3, which a was not in, still waits for b. */
    pscom_request_t *r3 = bcast_req(s, 23, data3, sizeof(data3));
    pscom_post_bcast(r3);
    assert_false(r3->state & PSCOM_REQ_STATE_DONE);
    struct frame f;
    pscom_xheader_bcast_t x = {.group_id = 23, .bcast_root = 0,
                               .bcast_arg1 = 2};
    frame_make(&f, PSC_MSG_BCAST, &x, sizeof(x), "hi", 3, 3);
    assert_int_equal(feed(b, &f), 0);
    pscom_test_any();
    assert_true(pscom_req_successful(r3));
    assert_string_equal(data3, "hi");

    /* g4's root sends: we have it, and our forward to a (rank 2, our only
     * child) fails. */
    x = (pscom_xheader_bcast_t){.group_id = 24, .bcast_root = 0,
                                .bcast_arg1 = 5};
    frame_make(&f, PSC_MSG_BCAST, &x, sizeof(x), "hey", 4, 4);
    assert_int_equal(feed(c, &f), 0);
    pscom_test_any();
    assert_string_equal(data4, "hey");
    assert_true(r4->state & PSCOM_REQ_STATE_DONE);
    assert_true(r4->state & PSCOM_REQ_STATE_ERROR);
    assert_null(sent_frame(b));
    /* g4 is freed now, and its slots are gone from b and c. */
    assert_int_equal(slots_of(b), 3);
    assert_int_equal(slots_of(c), 0);

    pscom_group_close(g3);
    assert_int_equal(slots_of(b), 2);
    pscom_request_free(r2);
    pscom_request_free(r3);
    pscom_request_free(r4);
    pscom_close_socket(s); /* retires b after g3 was freed */
    pscom_group_close(g1);
    pscom_group_close(g2);
}

/* A connection closed already (retired, not freed yet: inside a callback)
 * is refused: it is not retired again, so a group would keep it after it
 * is freed. */
static pscom_socket_t *zsock;
static pscom_connection_t *zcon;
static pscom_group_t *zgroup;

static void close_then_open(int fd, uint32_t ev, void *arg)
{
    (void)ev;
    (void)arg;
    char ch;
    if (read(fd, &ch, 1) != 1) return;
    pscom_connection_t *in[2] = {NULL, zcon};
    pscom_close_connection(zcon);
    zgroup = pscom_group_open(zsock, GROUP, 0, 2, in);
}

static void closed_connection_is_refused(void **state)
{
    (void)state;
    int pfd[2];
    zsock = pscom_open_socket(0, 0, 0, 0);
    zcon = pscom_open_connection(zsock);
    zgroup = (pscom_group_t *)&zgroup;
    assert_int_equal(pipe(pfd), 0);
    assert_int_equal(write(pfd[1], "x", 1), 1);
    pscom_plugin_fd_add(pfd[0], EPOLLIN, 1, close_then_open, NULL);
    while (zgroup == (pscom_group_t *)&zgroup) pscom_test_any();
    assert_null(zgroup);
    assert_null(pscom_group_find(zsock, GROUP));
    pscom_plugin_fd_del(pfd[0]);
    close(pfd[0]);
    close(pfd[1]);
    pscom_close_socket(zsock);
}

/* Out of memory, pscom_group_open fails (logged), and leaves nothing: the
 * id stays free. A group of one needs no memory for its barrier. */
static void group_open_out_of_memory_fails(void **state)
{
    (void)state;
    pscom_socket_t *s = pscom_open_socket(0, 0, 0, 0);
    pscom_connection_t *in[2] = {NULL, pscom_open_connection(s)};
    alloc_fails = true;
    allocs_refused = 0;
    pscom_group_t *g = pscom_group_open(s, GROUP, 0, 2, in);
    pscom_group_t *one = pscom_group_open(s, GROUP + 1, 0, 1, NULL);
    alloc_fails = false;
    assert_null(g);
    assert_true(allocs_refused > 0);
    assert_int_equal(slots_of(in[1]), 0);
    assert_null(pscom_group_find(s, GROUP));
    assert_non_null(one);
    pscom_barrier(one);
    g = pscom_group_open(s, GROUP, 0, 2, in);
    assert_non_null(g);
    pscom_group_close(g);
    pscom_group_close(one);
    pscom_close_socket(s);
}

/* The barrier's peers, rank 1 of 5: connections of a fake transport whose
 * progress op writes what is queued (the close's EOF too) and answers our
 * barrier message of each round with the round's message of the member
 * below us (after our receive of the round is posted, so that it needs no
 * memory either). */
#define BAR_N 5
#define BAR_ME 1
#define BAR_ROUNDS 3
static struct fake_transport bar_transport;
static struct psc_con *bar_peers[BAR_N];
static unsigned bar_sent;
static uint32_t bar_to[BAR_ROUNDS], bar_dist[BAR_ROUNDS], bar_flags[BAR_ROUNDS];

static int bar_progress(void)
{
    int did = 0;
    for (uint32_t r = 0; r < BAR_N; r++) {
        struct psc_con *c = bar_peers[r];
        struct iovec iov[4];
        size_t total;
        if (!c || !c->plugin_open || c->failed) continue;
        int n = pscom_plugin_tx_peek(c, iov, 4, &total);
        if (n <= 0) continue;
        did = 1;
        uint8_t head[sizeof(pscom_header_net_t) + sizeof(pscom_xheader_bcast_t)];
        size_t have = 0;
        for (int i = 0; i < n && have < sizeof(head); i++) {
            size_t k = iov[i].iov_len < sizeof(head) - have
                           ? iov[i].iov_len : sizeof(head) - have;
            memcpy(head + have, iov[i].iov_base, k);
            have += k;
        }
        const pscom_header_net_t *h = (const void *)head;
        if (have < sizeof(*h) || h->msg_type != PSC_MSG_BARRIER) {
            pscom_plugin_tx_done(c, total);
            continue;
        }
        assert_int_equal(have, sizeof(head));
        assert_true(bar_sent < BAR_ROUNDS);
        uint32_t dist = bcast_of(h)->bcast_arg1;
        bar_to[bar_sent] = r;
        bar_dist[bar_sent] = dist;
        bar_flags[bar_sent] = bcast_of(h)->bcast_arg2;
        bar_sent++;
        assert_int_equal(pscom_plugin_tx_done(c, total), 0);

        pscom_xheader_bcast_t x = {.group_id = GROUP, .bcast_arg1 = dist};
        struct frame f;
        frame_make(&f, PSC_MSG_BARRIER, &x, sizeof(x), NULL, 0, 0);
        struct psc_con *from = bar_peers[(BAR_ME + BAR_N - dist) % BAR_N];
        assert_int_equal(pscom_plugin_rx_push(from, f.buf, f.len), 0);
    }
    return did;
}

static int open_barrier_group(void **state)
{
    (void)state;
    fake_transport_init(&bar_transport, bar_progress);
    sock = pscom_open_socket(0, 0, 0, 0);
    for (uint32_t i = 0; i < BAR_N; i++) {
        bar_peers[i] =
            i == BAR_ME ? NULL : fake_transport_con(&bar_transport, sock);
        cons[i] = bar_peers[i] ? &bar_peers[i]->pub : NULL;
    }
    group = pscom_group_open(sock, GROUP, BAR_ME, BAR_N, cons);
    assert_non_null(group);
    bar_sent = 0;
    return 0;
}

static int close_barrier_group(void **state)
{
    close_group(state);
    memset(bar_peers, 0, sizeof(bar_peers));
    fake_transport_off(&bar_transport);
    return 0;
}

/* A barrier allocates nothing once it began: with every allocation
 * failing, it still runs all its rounds, each telling the member 2^k
 * above (no failure flag) and taking the message of the one 2^k below.
 * (It used to allocate each round's requests and, out of memory, return
 * at once: the members waiting for its messages waited for ever.) Then a
 * second barrier, as the group's requests are used again. */
static void barrier_allocates_nothing(void **state)
{
    (void)state;
    watchdog_start(20);
    for (int run = 0; run < 2; run++) {
        bar_sent = 0;
        allocs_refused = 0;
        alloc_fails = true;
        pscom_barrier(group);
        alloc_fails = false;
        assert_int_equal(bar_sent, BAR_ROUNDS);
        assert_int_equal(allocs_refused, 0);
        for (uint32_t k = 0; k < BAR_ROUNDS; k++) {
            assert_int_equal(bar_dist[k], 1u << k);
            assert_int_equal(bar_to[k], (BAR_ME + (1u << k)) % BAR_N);
            assert_int_equal(bar_flags[k], 0);
        }
    }
    watchdog_stop();
}

/* A barrier called while one of the same group runs (here from a callback
 * during its wait) has no requests of the group's left; out of memory, it
 * returns at once and sends nothing, and the first barrier still ends. */
static void nested_barrier(int fd, uint32_t ev, void *arg)
{
    (void)ev;
    (void)arg;
    char ch;
    if (read(fd, &ch, 1) != 1) return;
    unsigned sent = bar_sent;
    alloc_fails = true;
    pscom_barrier(group);
    alloc_fails = false;
    assert_int_equal(bar_sent, sent);
    fired++;
}

static void second_barrier_out_of_memory_sends_nothing(void **state)
{
    (void)state;
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    assert_int_equal(write(pfd[1], "x", 1), 1);
    fired = 0;
    allocs_refused = 0;
    pscom_plugin_fd_add(pfd[0], EPOLLIN, 1, nested_barrier, NULL);
    watchdog_start(20);
    pscom_barrier(group);
    watchdog_stop();
    assert_int_equal(fired, 1);
    assert_int_equal(allocs_refused, 2);
    assert_int_equal(bar_sent, BAR_ROUNDS);
    pscom_plugin_fd_del(pfd[0]);
    close(pfd[0]);
    close(pfd[1]);
}

int main(void)
{
    assert_int_equal(pscom_init(PSCOM_VERSION), PSCOM_SUCCESS);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(bcast_is_not_cancelled, open_group,
                                        close_group),
        cmocka_unit_test_setup_teardown(message_before_the_eof_stays,
                                        open_group, close_group),
        cmocka_unit_test_setup_teardown(message_before_a_failure_stays,
                                        open_group, close_group),
        cmocka_unit_test_setup_teardown(failure_without_message_fails,
                                        open_group, close_group),
        cmocka_unit_test_setup_teardown(message_goes_with_the_close,
                                        open_group, close_group),
        cmocka_unit_test_setup_teardown(failed_parent_notifies_the_subtree,
                                        open_group5, close_group),
        cmocka_unit_test_setup_teardown(failure_notice_is_passed_on,
                                        open_group5, close_group),
        cmocka_unit_test_setup_teardown(forward_allocates_nothing,
                                        open_group5, close_group),
        cmocka_unit_test_setup_teardown(start_out_of_memory_fails_the_neighbours,
                                        open_group5, close_group),
        cmocka_unit_test_setup_teardown(short_buffer_cuts_for_the_subtree,
                                        open_group5, close_group),
        cmocka_unit_test_setup_teardown(cut_upstream_ends_truncated,
                                        open_group5, close_group),
        cmocka_unit_test_setup_teardown(bad_flags_fail_the_connection,
                                        open_group, close_group),
        cmocka_unit_test_setup_teardown(
            cut_without_its_length_fails_the_connection, open_group,
            close_group),
        cmocka_unit_test(socket_close_retires_its_groups),
        cmocka_unit_test_setup_teardown(
            closed_busy_group_forgets_retired_connections, open_group5,
            close_socket_only),
        cmocka_unit_test_setup_teardown(bcast_group_closed_in_wait,
                                        open_group, close_socket_only),
        cmocka_unit_test_setup_teardown(barrier_group_closed_in_wait,
                                        open_group5, close_socket_only),
        cmocka_unit_test(huge_xheader_len_is_refused),
        cmocka_unit_test(retired_connection_leaves_every_group),
        cmocka_unit_test(closed_connection_is_refused),
        cmocka_unit_test(group_open_out_of_memory_fails),
        cmocka_unit_test_setup_teardown(barrier_allocates_nothing,
                                        open_barrier_group,
                                        close_barrier_group),
        cmocka_unit_test_setup_teardown(
            second_barrier_out_of_memory_sends_nothing, open_barrier_group,
            close_barrier_group),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
