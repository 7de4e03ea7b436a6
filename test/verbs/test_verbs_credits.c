/*
 * Credit flow of the verbs plugin (plugins/verbs/credits.c): a sender stalls
 * when only the reserved credit is left, credits come back in message
 * headers or in credit-only messages, two sides that both flood never
 * deadlock and never overrun a receive ring, and the send ring wraps.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "credits.h"

static void init_checks_sizes(void **state)
{
    vb_credit_t c;
    assert_int_equal(vb_credit_init(&c, 2, 16, 0), -EINVAL);
    assert_int_equal(vb_credit_init(&c, 16, 2, 0), -EINVAL);
    assert_int_equal(vb_credit_init(&c, 70000, 16, 0), -EINVAL);
    assert_int_equal(vb_credit_init(&c, 16, 8, 0), 0);
    assert_int_equal(c.avail, 8); /* the peer's ring */
    assert_int_equal(c.threshold, 8);
    assert_int_equal(vb_credit_init(&c, 16, 8, 100), 0);
    assert_int_equal(c.threshold, 15); /* at most ring - reserve */
    /* At least 2, so that credit-only messages do not answer each other. */
    assert_int_equal(vb_credit_init(&c, 3, 3, 1), 0);
    assert_int_equal(c.threshold, 2);
}

static void sender_stalls_at_reserve(void **state)
{
    vb_credit_t c;
    assert_int_equal(vb_credit_init(&c, 8, 8, 0), 0);
    int sent = 0;
    while (vb_credit_can_send(&c)) {
        vb_credit_take(&c);
        sent++;
    }
    assert_int_equal(sent, 8 - VB_CREDIT_RESERVE);
    assert_int_equal(c.avail, VB_CREDIT_RESERVE);
    /* Nothing owed: no credit-only message either. */
    assert_false(vb_credit_want_update(&c));
    /* Two slots come back: sending resumes. */
    assert_int_equal(vb_credit_returned(&c, 2), 0);
    assert_true(vb_credit_can_send(&c));
}

static void credits_return_piggybacked(void **state)
{
    vb_credit_t a, b;
    assert_int_equal(vb_credit_init(&a, 8, 8, 0), 0);
    assert_int_equal(vb_credit_init(&b, 8, 8, 0), 0);
    /* A sends three messages; B consumes them. */
    for (int i = 0; i < 3; i++) {
        assert_int_equal(vb_credit_take(&a), 0);
        assert_int_equal(vb_credit_returned(&b, 0), 0);
        assert_int_equal(vb_credit_consumed(&b), 0);
    }
    assert_int_equal(b.owed, 3);
    assert_false(vb_credit_want_update(&b)); /* below the threshold (4) */
    /* B's next data message carries them. */
    uint32_t back = vb_credit_take(&b);
    assert_int_equal(back, 3);
    assert_int_equal(b.owed, 0);
    assert_int_equal(vb_credit_returned(&a, back), 0);
    assert_int_equal(a.avail, 8);
}

static void credits_return_explicitly(void **state)
{
    vb_credit_t a, b;
    assert_int_equal(vb_credit_init(&a, 8, 8, 0), 0);
    assert_int_equal(vb_credit_init(&b, 8, 8, 0), 0);
    while (vb_credit_can_send(&a)) {
        vb_credit_take(&a);
        vb_credit_consumed(&b);
    }
    /* B has no data, but owes 7 >= 4: it sends a credit-only message. */
    assert_true(vb_credit_want_update(&b));
    uint32_t back = vb_credit_take(&b);
    assert_int_equal(back, 7);
    assert_false(vb_credit_want_update(&b));
    assert_int_equal(vb_credit_returned(&a, back), 0);
    assert_true(vb_credit_can_send(&a));
}

static void bad_peer_rejected(void **state)
{
    vb_credit_t c;
    assert_int_equal(vb_credit_init(&c, 4, 4, 0), 0);
    /* More credits than the peer has slots. */
    assert_int_equal(vb_credit_returned(&c, 1), -EPROTO);
    vb_credit_take(&c);
    assert_int_equal(vb_credit_returned(&c, 2), -EPROTO);
    assert_int_equal(vb_credit_returned(&c, 1), 0);
    /* More consumed than our ring holds. */
    for (int i = 0; i < 4; i++) assert_int_equal(vb_credit_consumed(&c), 0);
    assert_int_equal(vb_credit_consumed(&c), -EPROTO);
}

/* ---------------------------------------------------------------------- */
/* Two sides against each other                                           */
/* ---------------------------------------------------------------------- */

struct msg {
    uint32_t credits;
    int data;
};

struct side {
    vb_credit_t cr;
    uint32_t ring;
    unsigned pending;       /* data messages the application wants sent */
    struct msg *inflight;   /* sent, not yet in the peer's ring (FIFO) */
    unsigned in_head, in_count;
    struct msg *slots;      /* arrived in our ring, not consumed (FIFO) */
    unsigned sl_head, sl_count;
    unsigned delivered;     /* data messages this side consumed */
    unsigned updates;       /* credit-only messages this side sent */
    /* An upcall that waits: the first data message's slot is held (read,
     * not re-posted) until hold_for more data messages were consumed. */
    unsigned hold_for, hold_left;
    bool holding, held_once;
};

#define QCAP 100000

static void side_init(struct side *s, uint32_t ring, uint32_t peer_ring)
{
    memset(s, 0, sizeof(*s));
    s->ring = ring;
    assert_int_equal(vb_credit_init(&s->cr, ring, peer_ring, 0), 0);
    s->inflight = calloc(QCAP, sizeof(struct msg));
    s->slots = calloc(ring, sizeof(struct msg));
}

static void side_free(struct side *s)
{
    free(s->inflight);
    free(s->slots);
}

/* What tx_flush does: data when a data credit is left, else a credit-only
 * message when one is warranted. 1 when something was sent. */
static int try_send(struct side *s)
{
    int data = s->pending > 0;
    if (data && !vb_credit_can_send(&s->cr)) data = 0;
    if (!data && !vb_credit_want_update(&s->cr)) return 0;
    struct msg m = {.credits = vb_credit_take(&s->cr), .data = data};
    if (data) s->pending--;
    else s->updates++;
    assert_true(s->in_count < QCAP);
    s->inflight[(s->in_head + s->in_count++) % QCAP] = m;
    return 1;
}

/* The HCA moves one message into the peer's ring: a receive must be
 * posted (no RNR). */
static int deliver(struct side *from, struct side *to)
{
    if (!from->in_count) return 0;
    struct msg m = from->inflight[from->in_head];
    from->in_head = (from->in_head + 1) % QCAP;
    from->in_count--;
    /* a posted receive was there */
    assert_true(to->sl_count + to->holding < to->ring);
    to->slots[(to->sl_head + to->sl_count++) % to->ring] = m;
    return 1;
}

/* The receiver handles one message: takes its credits, reposts the slot,
 * owes it, then tries to send (as progress does after a completion). */
static int consume(struct side *s)
{
    if (!s->sl_count) return 0;
    struct msg m = s->slots[s->sl_head];
    s->sl_head = (s->sl_head + 1) % s->ring;
    s->sl_count--;
    assert_int_equal(vb_credit_returned(&s->cr, m.credits), 0);
    if (m.data && s->hold_for && !s->held_once) {
        /* Read by an upcall that waits for the messages behind it. */
        s->held_once = s->holding = true;
        s->hold_left = s->hold_for;
        vb_credit_hold(&s->cr);
        s->delivered++;
        while (try_send(s)) {}
        return 1;
    }
    assert_int_equal(vb_credit_consumed(&s->cr), 0);
    if (m.data) s->delivered++;
    if (m.data && s->holding && !--s->hold_left) {
        /* The upcall returns: its slot is posted again. */
        s->holding = false;
        vb_credit_unhold(&s->cr);
        assert_int_equal(vb_credit_consumed(&s->cr), 0);
    }
    while (try_send(s)) {}
    return 1;
}

/* Random interleavings until both sides got `target` data messages; fails
 * when no step is possible before that (a deadlock). */
static void run_pair(uint32_t ring_a, uint32_t ring_b, unsigned target_a,
                     unsigned target_b, unsigned seed, int lazy_b,
                     unsigned hold_b)
{
    struct side a, b;
    side_init(&a, ring_a, ring_b);
    side_init(&b, ring_b, ring_a);
    b.hold_for = hold_b;
    a.pending = target_b; /* A sends what B should get */
    b.pending = target_a;
    srand(seed);
    unsigned long steps = 0;
    while (a.delivered < target_a || b.delivered < target_b) {
        int r = rand() % 6, did = 0;
        /* Try the chosen action, then all in turn, so a stall is only
         * reported when nothing at all can happen. */
        for (int k = -1; k < 6 && !did; k++) {
            switch (k < 0 ? r : k) {
            case 0: did = try_send(&a); break;
            case 1: did = try_send(&b); break;
            case 2: did = deliver(&a, &b); break;
            case 3: did = deliver(&b, &a); break;
            case 4: did = consume(&a); break;
            case 5:
                /* A lazy receiver consumes only when nothing else can
                 * happen, so the other side runs out of credits. */
                if (lazy_b && k < 0) break;
                did = consume(&b);
                break;
            }
        }
        if (!did) {
            fail_msg("deadlock after %lu steps: A avail %u owed %u pending %u, "
                     "B avail %u owed %u pending %u", steps, a.cr.avail,
                     a.cr.owed, a.pending, b.cr.avail, b.cr.owed, b.pending);
        }
        steps++;
        assert_true(steps < 100ul * (target_a + target_b + 100));
    }
    assert_int_equal(a.delivered, target_a);
    assert_int_equal(b.delivered, target_b);
    assert_false(b.holding);
    side_free(&a);
    side_free(&b);
}

static void no_deadlock_both_flood(void **state)
{
    for (unsigned seed = 1; seed <= 40; seed++) {
        run_pair(3, 3, 2000, 2000, seed, 0, 0);
        run_pair(4, 16, 3000, 3000, seed, 0, 0);
        run_pair(16, 16, 5000, 5000, seed, 1, 0);
    }
}

/* B's upcall for its first message waits for 50 more messages (a callback
 * that closes its connection waits for the sends behind it, whose
 * acknowledgements arrive as messages): with one slot held, the others
 * still return credits, also with the smallest ring. */
static void no_deadlock_with_a_held_slot(void **state)
{
    for (unsigned seed = 1; seed <= 40; seed++) {
        run_pair(3, 3, 0, 200, seed, 0, 50);
        run_pair(3, 3, 200, 200, seed, 1, 50);
        run_pair(8, 4, 100, 300, seed, 0, 60);
    }
}

static void no_deadlock_one_way(void **state)
{
    /* B never sends data: A's credits come back only by credit-only
     * messages, which in turn use A's slots. */
    for (unsigned seed = 1; seed <= 40; seed++) {
        run_pair(3, 3, 0, 3000, seed, 0, 0);
        run_pair(8, 3, 0, 3000, seed, 1, 0);
        run_pair(16, 16, 0, 3000, seed, 1, 0);
    }
}

static void both_out_of_credits(void **state)
{
    /* Both sides spend every data credit before anything arrives. */
    struct side a, b;
    side_init(&a, 4, 4);
    side_init(&b, 4, 4);
    a.pending = b.pending = 100;
    while (try_send(&a)) {}
    while (try_send(&b)) {}
    assert_false(vb_credit_can_send(&a.cr));
    assert_false(vb_credit_can_send(&b.cr));
    int rounds = 0;
    while ((a.pending || b.pending || a.in_count || b.in_count ||
            a.sl_count || b.sl_count) && rounds < 100000) {
        deliver(&a, &b);
        deliver(&b, &a);
        consume(&a);
        consume(&b);
        try_send(&a);
        try_send(&b);
        rounds++;
    }
    assert_int_equal(a.delivered, 100);
    assert_int_equal(b.delivered, 100);
    side_free(&a);
    side_free(&b);
}

static void updates_die_out(void **state)
{
    /* No data at all, both sides owing as much as they can: credit-only
     * messages flow until nobody owes enough, then stop. */
    uint32_t rings[] = {3, 4, 16};
    for (size_t i = 0; i < sizeof(rings) / sizeof(rings[0]); i++) {
        struct side a, b;
        side_init(&a, rings[i], rings[i]);
        side_init(&b, rings[i], rings[i]);
        /* As after each consumed ring - 1 data messages of the other. */
        a.cr.avail = b.cr.avail = 1;
        a.cr.owed = b.cr.owed = rings[i] - 1;
        int steps = 0;
        for (;;) {
            int did = try_send(&a) | try_send(&b) | deliver(&a, &b) |
                      deliver(&b, &a) | consume(&a) | consume(&b);
            if (!did) break;
            assert_true(++steps < 1000);
        }
        assert_true(a.updates + b.updates <= 2 * rings[i]);
        assert_true(a.cr.owed < a.cr.threshold);
        assert_true(b.cr.owed < b.cr.threshold);
        /* And every credit is back where data can use it. */
        assert_true(vb_credit_can_send(&a.cr));
        assert_true(vb_credit_can_send(&b.cr));
        side_free(&a);
        side_free(&b);
    }
}

/* ---------------------------------------------------------------------- */
/* Send ring                                                              */
/* ---------------------------------------------------------------------- */

static void ring_wraps(void **state)
{
    uint32_t sizes[] = {1, 2, 3, 7, 16};
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        vb_ring_t r;
        vb_ring_init(&r, sizes[s]);
        assert_true(vb_ring_empty(&r));
        uint64_t pushed = 0, popped = 0;
        srand(7);
        for (int i = 0; i < 100000; i++) {
            if (!vb_ring_full(&r) && (vb_ring_empty(&r) || rand() % 2)) {
                uint32_t idx = vb_ring_push(&r);
                assert_int_equal(idx, pushed % sizes[s]);
                pushed++;
            } else {
                assert_false(vb_ring_empty(&r));
                assert_int_equal(vb_ring_tail(&r), popped % sizes[s]);
                vb_ring_pop(&r);
                popped++;
            }
            assert_int_equal(r.count, pushed - popped);
            assert_true(r.count <= sizes[s]);
        }
        assert_true(pushed > 10 * sizes[s]); /* wrapped many times */
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(init_checks_sizes),
        cmocka_unit_test(sender_stalls_at_reserve),
        cmocka_unit_test(credits_return_piggybacked),
        cmocka_unit_test(credits_return_explicitly),
        cmocka_unit_test(bad_peer_rejected),
        cmocka_unit_test(no_deadlock_both_flood),
        cmocka_unit_test(no_deadlock_one_way),
        cmocka_unit_test(no_deadlock_with_a_held_slot),
        cmocka_unit_test(both_out_of_credits),
        cmocka_unit_test(updates_die_out),
        cmocka_unit_test(ring_wraps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
