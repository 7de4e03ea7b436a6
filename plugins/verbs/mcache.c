/*
 * The registration cache (see mcache.h). Lookups walk the list from the
 * most recently used entry: the bound is small (hundreds), lookups happen
 * once per rendezvous message, and hits are usually near the front.
 */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "mcache.h"

struct vb_mcache {
    size_t max;               /* bound on cached entries; 0: off */
    size_t count;             /* cached entries */
    vb_mentry_t *mru, *lru;   /* the cached entries, most recent first */
    uintptr_t page;           /* page size */
    int exact;                /* rights registered to the byte */
    const vb_mcache_ops_t *ops;
    void *arg;
    vb_mcache_stats_t stats;
};

static void unlink_entry(vb_mcache_t *mc, vb_mentry_t *e)
{
    if (e->prev) e->prev->next = e->next;
    else mc->mru = e->next;
    if (e->next) e->next->prev = e->prev;
    else mc->lru = e->prev;
    e->prev = e->next = NULL;
}

static void push_front(vb_mcache_t *mc, vb_mentry_t *e)
{
    e->prev = NULL;
    e->next = mc->mru;
    if (mc->mru) mc->mru->prev = e;
    else mc->lru = e;
    mc->mru = e;
}

static void release(vb_mcache_t *mc, vb_mentry_t *e)
{
    mc->ops->dereg(mc->arg, &e->reg);
    free(e);
}

/* Take a cached entry off the list; free it unless it is in use. */
static void drop(vb_mcache_t *mc, vb_mentry_t *e)
{
    unlink_entry(mc, e);
    e->cached = false;
    mc->count--;
    if (!e->refs) release(mc, e);
}

vb_mcache_t *vb_mcache_create(size_t max, int exact_access,
                              const vb_mcache_ops_t *ops, void *arg)
{
    vb_mcache_t *mc = calloc(1, sizeof(*mc));
    if (!mc) return NULL;
    long page = sysconf(_SC_PAGESIZE);
    mc->page = page > 0 ? (uintptr_t)page : 4096;
    mc->max = max;
    mc->exact = exact_access;
    mc->ops = ops;
    mc->arg = arg;
    return mc;
}

void vb_mcache_destroy(vb_mcache_t *mc)
{
    if (!mc) return;
    while (mc->mru) drop(mc, mc->mru);
    free(mc);
}

/* May e serve a request for [start, end) with `access`? With the peer's
 * rights only an entry of exactly that range and of the same peer rights
 * does: a larger one would let the peer reach more bytes, one with more
 * peer rights would let it do more with them. Nor does an entry with the
 * peer's rights serve a request without them: its reference would keep
 * the peer's key working after its owner let go (rma_deregister). */
static bool serves(const vb_mcache_t *mc, const vb_mentry_t *e,
                   uintptr_t start, uintptr_t end, int access)
{
    uintptr_t s = (uintptr_t)e->reg.addr;
    if ((e->reg.access & access) != access) return false;
    if ((e->reg.access & mc->exact) != (access & mc->exact)) return false;
    if (access & mc->exact)
        return s == start && e->reg.len == end - start;
    return s <= start && end <= s + e->reg.len;
}

/* Make room for one more cached entry. false when every entry is in use. */
static bool make_room(vb_mcache_t *mc)
{
    if (mc->count < mc->max) return true;
    for (vb_mentry_t *e = mc->lru; e; e = e->prev) {
        if (e->refs) continue;
        drop(mc, e);
        mc->stats.evictions++;
        return true;
    }
    return false;
}

int vb_mcache_get(vb_mcache_t *mc, const void *addr, size_t len, int access,
                  vb_mentry_t **entry_p)
{
    uintptr_t start = (uintptr_t)addr;
    if (!len || start + len < start) return -EINVAL;
    uintptr_t end = start + len;

    for (vb_mentry_t *e = mc->mru; e; e = e->next) {
        if (!serves(mc, e, start, end, access)) continue;
        mc->stats.hits++;
        if (e != mc->mru) {
            unlink_entry(mc, e);
            push_front(mc, e);
        }
        e->refs++;
        *entry_p = e;
        return 0;
    }
    mc->stats.misses++;

    uintptr_t pstart = start, pend = end;
    if (!(access & mc->exact)) {
        pstart = start & ~(mc->page - 1);
        pend = (end + mc->page - 1) & ~(mc->page - 1);
        if (pend < end) pend = end; /* the last page of the address space */
    }
    vb_mentry_t *e = calloc(1, sizeof(*e));
    if (!e) return -ENOMEM;
    e->reg.addr = (void *)pstart;
    e->reg.len = pend - pstart;
    e->reg.access = access;
    int rc = mc->ops->reg(mc->arg, &e->reg);
    if (rc) {
        free(e);
        return rc < 0 ? rc : -rc;
    }
    e->refs = 1;
    if (mc->max && make_room(mc)) {
        e->cached = true;
        push_front(mc, e);
        mc->count++;
    } else {
        mc->stats.uncached++;
    }
    *entry_p = e;
    return 0;
}

void vb_mcache_put(vb_mcache_t *mc, vb_mentry_t *e)
{
    if (!e || !e->refs) return;
    if (--e->refs) return;
    /* The peer's rights end with the last user: a key given out for them
     * must stop working (a revoked region, a buffer freed after its send),
     * and only deregistering revokes it. */
    if (e->cached && (e->reg.access & mc->exact)) {
        unlink_entry(mc, e);
        e->cached = false;
        mc->count--;
    }
    if (!e->cached) release(mc, e);
}

size_t vb_mcache_invalidate(vb_mcache_t *mc, const void *addr, size_t len)
{
    uintptr_t start = (uintptr_t)addr;
    uintptr_t end = start + len < start ? UINTPTR_MAX : start + len;
    size_t n = 0;
    vb_mentry_t *e = mc->mru;
    while (e) {
        vb_mentry_t *next = e->next;
        uintptr_t s = (uintptr_t)e->reg.addr;
        if (s < end && start < s + e->reg.len) {
            drop(mc, e);
            n++;
        }
        e = next;
    }
    mc->stats.invalidations += n;
    return n;
}

size_t vb_mcache_count(const vb_mcache_t *mc)
{
    return mc->count;
}

size_t vb_mcache_max(const vb_mcache_t *mc)
{
    return mc->max;
}

vb_mcache_stats_t vb_mcache_stats(const vb_mcache_t *mc)
{
    return mc->stats;
}
