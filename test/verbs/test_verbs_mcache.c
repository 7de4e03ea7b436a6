/*
 * The registration cache of the verbs plugin (plugins/verbs/mcache.c):
 * hits, LRU eviction at the bound, entries in use never evicted,
 * invalidation, overlapping regions, access rights, size 0 = off, and
 * registrations of the peer's rights covering the bytes asked for only and
 * ending with their last user.
 * Registration is a callback that only counts.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "mcache.h"

#define R 1 /* "read" access for the tests */
#define W 2 /* "write" access */

static int regs, deregs, fail_next;
static uint32_t next_key;

static int reg(void *arg, vb_mreg_t *out)
{
    if (fail_next) {
        int e = fail_next;
        fail_next = 0;
        return -e;
    }
    regs++;
    out->lkey = out->rkey = ++next_key;
    out->handle = (void *)(uintptr_t)next_key;
    return 0;
}

static void dereg(void *arg, vb_mreg_t *r)
{
    deregs++;
}

static const vb_mcache_ops_t ops = {.reg = reg, .dereg = dereg};

static size_t page;
static uint8_t *mem; /* 16 pages */

static int setup(void **state)
{
    regs = deregs = fail_next = 0;
    page = (size_t)sysconf(_SC_PAGESIZE);
    mem = aligned_alloc(page, 16 * page);
    return mem ? 0 : -1;
}

static int teardown(void **state)
{
    free(mem);
    return 0;
}

static vb_mentry_t *get(vb_mcache_t *mc, size_t off, size_t len, int access)
{
    vb_mentry_t *e = NULL;
    assert_int_equal(vb_mcache_get(mc, mem + off, len, access, &e), 0);
    assert_non_null(e);
    uintptr_t s = (uintptr_t)e->reg.addr;
    assert_true(s <= (uintptr_t)(mem + off));
    assert_true((uintptr_t)(mem + off + len) <= s + e->reg.len);
    assert_int_equal(s % page, 0);
    return e;
}

static void hits(void **state)
{
    vb_mcache_t *mc = vb_mcache_create(4, 0, &ops, NULL);
    vb_mentry_t *a = get(mc, 100, 1000, R);
    vb_mcache_put(mc, a);
    vb_mentry_t *b = get(mc, 100, 1000, R);
    assert_ptr_equal(a, b);
    /* Same page: covered by the page-rounded registration. */
    vb_mentry_t *c = get(mc, 2000, 10, R);
    assert_ptr_equal(a, c);
    assert_int_equal(a->refs, 2);
    vb_mcache_put(mc, b);
    vb_mcache_put(mc, c);
    assert_int_equal(regs, 1);
    vb_mcache_stats_t st = vb_mcache_stats(mc);
    assert_int_equal(st.hits, 2);
    assert_int_equal(st.misses, 1);
    vb_mcache_destroy(mc);
    assert_int_equal(deregs, 1);
}

static void access_rights(void **state)
{
    vb_mcache_t *mc = vb_mcache_create(4, 0, &ops, NULL);
    vb_mentry_t *w = get(mc, 0, 100, W);
    vb_mcache_put(mc, w);
    vb_mentry_t *r = get(mc, 0, 100, R); /* W does not serve R */
    assert_ptr_not_equal(w, r);
    vb_mcache_put(mc, r);
    vb_mentry_t *rw = get(mc, 0, 100, R | W); /* neither serves R|W */
    assert_ptr_not_equal(rw, r);
    assert_ptr_not_equal(rw, w);
    vb_mcache_put(mc, rw);
    vb_mentry_t *again = get(mc, 0, 100, W); /* the R|W entry does (MRU) */
    assert_ptr_equal(again, rw);
    vb_mcache_put(mc, again);
    assert_int_equal(regs, 3);
    vb_mcache_destroy(mc);
    assert_int_equal(deregs, 3);
}

static void lru_eviction_at_bound(void **state)
{
    vb_mcache_t *mc = vb_mcache_create(2, 0, &ops, NULL);
    vb_mentry_t *a = get(mc, 0 * page, 10, R);
    vb_mcache_put(mc, a);
    vb_mentry_t *b = get(mc, 2 * page, 10, R);
    vb_mcache_put(mc, b);
    vb_mentry_t *c = get(mc, 4 * page, 10, R); /* evicts a */
    vb_mcache_put(mc, c);
    assert_int_equal(vb_mcache_count(mc), 2);
    assert_int_equal(deregs, 1);
    vb_mentry_t *b2 = get(mc, 2 * page, 10, R); /* hit; b is now MRU */
    assert_ptr_equal(b, b2);
    vb_mcache_put(mc, b2);
    vb_mentry_t *d = get(mc, 6 * page, 10, R); /* evicts c, not b */
    vb_mcache_put(mc, d);
    assert_int_equal(deregs, 2);
    vb_mentry_t *b3 = get(mc, 2 * page, 10, R);
    assert_ptr_equal(b, b3);
    vb_mcache_put(mc, b3);
    vb_mentry_t *c2 = get(mc, 4 * page, 10, R); /* c was evicted: a miss */
    vb_mcache_put(mc, c2);
    vb_mcache_stats_t st = vb_mcache_stats(mc);
    assert_int_equal(st.misses, 5);
    assert_int_equal(st.evictions, 3);
    assert_true(vb_mcache_count(mc) <= 2);
    vb_mcache_destroy(mc);
    assert_int_equal(regs, deregs);
}

static void in_use_not_evicted(void **state)
{
    vb_mcache_t *mc = vb_mcache_create(1, 0, &ops, NULL);
    vb_mentry_t *a = get(mc, 0, 10, R);
    vb_mentry_t *b = get(mc, 4 * page, 10, R); /* cache full of used: uncached */
    assert_true(a->cached);
    assert_false(b->cached);
    assert_int_equal(vb_mcache_count(mc), 1);
    vb_mcache_put(mc, b); /* deregistered with its last reference */
    assert_int_equal(deregs, 1);
    vb_mcache_put(mc, a); /* stays cached */
    assert_int_equal(deregs, 1);
    vb_mentry_t *a2 = get(mc, 0, 10, R);
    assert_ptr_equal(a, a2);
    vb_mcache_put(mc, a2);
    assert_int_equal(vb_mcache_stats(mc).uncached, 1);
    vb_mcache_destroy(mc);
    assert_int_equal(regs, deregs);
}

static void invalidation(void **state)
{
    vb_mcache_t *mc = vb_mcache_create(8, 0, &ops, NULL);
    vb_mentry_t *a = get(mc, 0, 3 * page, R);
    vb_mcache_put(mc, a);
    vb_mentry_t *b = get(mc, 8 * page, 100, R);
    /* Invalidate a range touching only a's last page. */
    assert_int_equal(vb_mcache_invalidate(mc, mem + 2 * page + 5, 1), 1);
    assert_int_equal(deregs, 1);
    assert_int_equal(vb_mcache_count(mc), 1);
    vb_mentry_t *a2 = get(mc, 0, 10, R); /* a miss now */
    assert_int_equal(regs, 3);
    vb_mcache_put(mc, a2);
    /* b is in use: dropped from the cache, deregistered on its put. */
    assert_int_equal(vb_mcache_invalidate(mc, mem + 8 * page, page), 1);
    assert_int_equal(deregs, 1);
    assert_false(b->cached);
    vb_mentry_t *b2 = get(mc, 8 * page, 100, R); /* not found any more */
    assert_ptr_not_equal(b, b2);
    vb_mcache_put(mc, b);
    assert_int_equal(deregs, 2);
    vb_mcache_put(mc, b2);
    /* Nothing overlapping: nothing dropped. */
    assert_int_equal(vb_mcache_invalidate(mc, mem + 12 * page, page), 0);
    assert_int_equal(vb_mcache_stats(mc).invalidations, 2);
    vb_mcache_destroy(mc);
    assert_int_equal(regs, deregs);
}

static void overlapping_regions(void **state)
{
    vb_mcache_t *mc = vb_mcache_create(8, 0, &ops, NULL);
    vb_mentry_t *a = get(mc, 0, 2 * page, R);         /* pages 0-1 */
    vb_mentry_t *b = get(mc, page + 1, 2 * page, R);  /* pages 1-3: a miss */
    assert_ptr_not_equal(a, b);
    assert_int_equal(regs, 2);
    vb_mcache_put(mc, a);
    vb_mcache_put(mc, b);
    /* Inside both: the most recently used (b) serves it. */
    vb_mentry_t *c = get(mc, page + 10, 10, R);
    assert_ptr_equal(c, b);
    vb_mcache_put(mc, c);
    /* Inside a only. */
    vb_mentry_t *d = get(mc, 10, 10, R);
    assert_ptr_equal(d, a);
    vb_mcache_put(mc, d);
    /* Spanning both, covered by neither: a third registration. */
    vb_mentry_t *e = get(mc, 0, 4 * page, R);
    assert_ptr_not_equal(e, a);
    assert_ptr_not_equal(e, b);
    vb_mcache_put(mc, e);
    /* Invalidating page 3 drops b and e, keeps a. */
    assert_int_equal(vb_mcache_invalidate(mc, mem + 3 * page, 1), 2);
    vb_mentry_t *f = get(mc, 0, 10, R);
    assert_ptr_equal(f, a);
    vb_mcache_put(mc, f);
    vb_mcache_destroy(mc);
    assert_int_equal(regs, deregs);
}

static void size_zero_is_off(void **state)
{
    vb_mcache_t *mc = vb_mcache_create(0, 0, &ops, NULL);
    vb_mentry_t *a = get(mc, 0, 100, R);
    vb_mentry_t *b = get(mc, 0, 100, R);
    assert_ptr_not_equal(a, b);
    assert_int_equal(regs, 2);
    assert_int_equal(vb_mcache_count(mc), 0);
    vb_mcache_put(mc, a);
    assert_int_equal(deregs, 1);
    vb_mcache_put(mc, b);
    assert_int_equal(deregs, 2);
    vb_mcache_destroy(mc);
    assert_int_equal(deregs, 2);
}

static void errors(void **state)
{
    vb_mcache_t *mc = vb_mcache_create(4, 0, &ops, NULL);
    vb_mentry_t *e = NULL;
    assert_int_equal(vb_mcache_get(mc, mem, 0, R, &e), -EINVAL);
    assert_int_equal(vb_mcache_get(mc, (void *)(UINTPTR_MAX - 10), 100, R, &e),
                     -EINVAL);
    fail_next = ENOMEM;
    assert_int_equal(vb_mcache_get(mc, mem, 100, R, &e), -ENOMEM);
    assert_null(e);
    assert_int_equal(vb_mcache_count(mc), 0);
    vb_mcache_put(mc, NULL); /* harmless */
    vb_mcache_destroy(mc);
    assert_int_equal(regs, deregs);
}

/* The peer's rights (R here, as remote read; P a second one, as remote
 * write) are registered exactly. */
#define P 4

static vb_mentry_t *get_exact(vb_mcache_t *mc, size_t off, size_t len,
                              int access)
{
    vb_mentry_t *e = NULL;
    assert_int_equal(vb_mcache_get(mc, mem + off, len, access, &e), 0);
    assert_ptr_equal(e->reg.addr, mem + off);
    assert_int_equal(e->reg.len, len);
    return e;
}

static void peer_rights_registered_exactly(void **state)
{
    vb_mcache_t *mc = vb_mcache_create(8, R | P, &ops, NULL);
    vb_mentry_t *r = get_exact(mc, 100, 1000, R);
    /* The same page past those bytes: a registration of its own. */
    vb_mentry_t *r2 = get_exact(mc, 1100, 10, R);
    /* Any peer right among others makes it exact. */
    vb_mentry_t *rw = get_exact(mc, 5, 7, R | W);
    /* Local rights only: whole pages, as before. */
    vb_mentry_t *w = get(mc, 100, 10, W);
    assert_ptr_equal(w->reg.addr, mem);
    assert_int_equal(w->reg.len, page);
    vb_mcache_put(mc, r2);
    vb_mcache_put(mc, rw);
    vb_mcache_put(mc, w);
    /* The same range and peer rights: a hit. */
    vb_mentry_t *again = get_exact(mc, 100, 1000, R);
    assert_ptr_equal(again, r);
    vb_mcache_put(mc, again);
    /* Inside r, but not all of it: not served by r, whose key would let
     * the peer read the rest (a freed and reused send buffer). */
    vb_mentry_t *inner = get_exact(mc, 200, 50, R);
    assert_ptr_not_equal(inner, r);
    vb_mcache_put(mc, inner);
    vb_mcache_put(mc, r);
    /* A region the peer may read and write, then a send buffer in it: the
     * buffer's key must not carry the region's right to write. */
    vb_mentry_t *region = get_exact(mc, 4 * page, 2 * page, R | P | W);
    vb_mentry_t *buf = get_exact(mc, 4 * page, 2 * page, R);
    assert_ptr_not_equal(buf, region);
    assert_int_equal(buf->reg.access & P, 0);
    vb_mcache_put(mc, buf);
    /* A local lookup inside a region the peer may reach gets a
     * registration of its own: holding the region's would keep the peer's
     * key working after the region is deregistered. */
    vb_mentry_t *local = get(mc, 4 * page, 100, W);
    assert_ptr_not_equal(local, region);
    assert_int_equal(local->reg.access & P, 0);
    int before = deregs;
    vb_mcache_put(mc, region);
    assert_int_equal(deregs, before + 1);
    vb_mcache_put(mc, local);
    vb_mcache_destroy(mc);
    assert_int_equal(regs, deregs);
}

/* The peer's key must stop working once the registration's last user
 * let go of it (a revoked region, a send buffer freed after its message):
 * such entries are shared while in use, then deregistered. */
static void peer_rights_end_with_last_put(void **state)
{
    vb_mcache_t *mc = vb_mcache_create(8, R | P, &ops, NULL);
    vb_mentry_t *a = get_exact(mc, 100, 1000, R | P | W);
    vb_mentry_t *b = get_exact(mc, 100, 1000, R | P | W);
    assert_ptr_equal(a, b);
    assert_int_equal(regs, 1);
    vb_mcache_put(mc, a);
    assert_int_equal(deregs, 0);
    vb_mcache_put(mc, b);
    assert_int_equal(deregs, 1);
    assert_int_equal(vb_mcache_count(mc), 0);
    /* Registered anew, with a new key. */
    vb_mentry_t *c = get_exact(mc, 100, 1000, R | P | W);
    assert_int_equal(regs, 2);
    vb_mcache_put(mc, c);
    assert_int_equal(deregs, 2);
    /* Local rights stay cached for reuse. */
    vb_mentry_t *w = get(mc, 100, 10, W);
    vb_mcache_put(mc, w);
    assert_int_equal(deregs, 2);
    assert_int_equal(vb_mcache_count(mc), 1);
    w = get(mc, 100, 10, W);
    assert_int_equal(regs, 3);
    vb_mcache_put(mc, w);
    vb_mcache_destroy(mc);
    assert_int_equal(regs, deregs);
}

static void random_use_stays_bounded(void **state)
{
    vb_mcache_t *mc = vb_mcache_create(5, 0, &ops, NULL);
    vb_mentry_t *held[8] = {0};
    srand(3);
    for (int i = 0; i < 20000; i++) {
        int slot = rand() % 8;
        if (held[slot]) {
            vb_mcache_put(mc, held[slot]);
            held[slot] = NULL;
        } else {
            size_t off = (size_t)(rand() % 15) * page + (size_t)(rand() % 100);
            size_t len = 1 + (size_t)(rand() % (int)page);
            held[slot] = get(mc, off, len, rand() % 2 ? R : W);
        }
        if (rand() % 50 == 0)
            vb_mcache_invalidate(mc, mem + (size_t)(rand() % 16) * page, page);
        assert_true(vb_mcache_count(mc) <= 5);
    }
    for (int i = 0; i < 8; i++) vb_mcache_put(mc, held[i]);
    vb_mcache_destroy(mc);
    assert_int_equal(regs, deregs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(hits, setup, teardown),
        cmocka_unit_test_setup_teardown(access_rights, setup, teardown),
        cmocka_unit_test_setup_teardown(lru_eviction_at_bound, setup, teardown),
        cmocka_unit_test_setup_teardown(in_use_not_evicted, setup, teardown),
        cmocka_unit_test_setup_teardown(invalidation, setup, teardown),
        cmocka_unit_test_setup_teardown(overlapping_regions, setup, teardown),
        cmocka_unit_test_setup_teardown(size_zero_is_off, setup, teardown),
        cmocka_unit_test_setup_teardown(errors, setup, teardown),
        cmocka_unit_test_setup_teardown(random_use_stays_bounded, setup, teardown),
        cmocka_unit_test_setup_teardown(peer_rights_registered_exactly, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(peer_rights_end_with_last_put, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
