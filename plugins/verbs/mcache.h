/*
 * The registration cache of the verbs plugin: a bounded LRU list of memory
 * registrations, so that a buffer received into by rendezvous again (or
 * the local buffer of a one-sided operation) is not registered again. Pure logic: registering and deregistering are the
 * caller's callbacks, so the cache is tested without hardware.
 *
 * A registration covers whole pages: [addr, addr + len) rounded out to page
 * boundaries, and a lookup hits an entry that covers the requested range
 * with at least the requested access rights, so that neighbouring buffers
 * share it. Except for the peer's rights (exact_access of
 * vb_mcache_create): the HCA checks a peer's access against the
 * registration its key names, so such a registration covers the bytes
 * asked for and no more, a lookup hits only an entry of exactly that range
 * and those peer rights (and one without them never hits such an entry),
 * and the entry is deregistered with its last
 * reference, cached or not: the peer's key must stop working when the last
 * user of the registration lets go of it. Overlapping entries may coexist.
 * Entries in use (references held) are never evicted; when every cached
 * entry is in use and the cache is full, a new registration is handed out
 * uncached and deregistered when its last reference goes. A bound of 0
 * turns caching off: every get registers, every last put deregisters.
 *
 * Invalidation: a cached registration keeps pinning the pages that were
 * mapped when it was made. If the application unmaps the range and new
 * memory appears at the same address, the cached entry would point the HCA
 * at the old pages. vb_mcache_invalidate() drops every entry overlapping a
 * range; the plugin's policy on when that is needed (and why the cache is
 * off by default) is in doc/plugins/verbs.md.
 *
 * Not thread-safe: the plugin runs under the library lock.
 */
#ifndef VB_MCACHE_H
#define VB_MCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A registration as the HCA knows it. */
typedef struct vb_mreg {
    void *addr;    /* first byte registered (page aligned, unless exact) */
    size_t len;    /* bytes registered (whole pages, unless exact) */
    int access;    /* IBV_ACCESS_* flags it was registered with */
    uint32_t lkey; /* for local scatter/gather entries */
    uint32_t rkey; /* for the peer's RDMA operations */
    void *handle;  /* the caller's object (struct ibv_mr *) */
} vb_mreg_t;

typedef struct vb_mcache_ops {
    /* Register [addr, addr + len) with `access`; fill *out (addr, len and
     * access are preset). 0 or a negative errno. */
    int (*reg)(void *arg, vb_mreg_t *out);
    /* Deregister what reg() made. */
    void (*dereg)(void *arg, vb_mreg_t *reg);
} vb_mcache_ops_t;

typedef struct vb_mentry {
    vb_mreg_t reg;
    unsigned refs;                /* holders of this entry */
    bool cached;                  /* on the LRU list, found by lookups */
    struct vb_mentry *prev, *next; /* vb_mcache.mru: most recently used first */
} vb_mentry_t;

typedef struct vb_mcache_stats {
    uint64_t hits, misses;  /* lookups */
    uint64_t evictions;     /* entries dropped to stay within the bound */
    uint64_t invalidations; /* entries dropped by vb_mcache_invalidate */
    uint64_t uncached;      /* registrations handed out uncached */
} vb_mcache_stats_t;

typedef struct vb_mcache vb_mcache_t;

/* A cache of at most `max` registrations (0: caching off). exact_access:
 * the rights (IBV_ACCESS_* bits) that give the peer access, registered to
 * the byte (0: none). `ops` and `arg` must outlive the cache. NULL when out
 * of memory. */
vb_mcache_t *vb_mcache_create(size_t max, int exact_access,
                              const vb_mcache_ops_t *ops, void *arg);

/* Deregister and free every cached entry. Entries still referenced are
 * owned by their holders from now on and are freed by their last put, which
 * must come before `ops`/`arg` go away. */
void vb_mcache_destroy(vb_mcache_t *mc);

/* A registration covering [addr, addr + len) with at least `access`, with
 * one reference for the caller. 0 and *entry_p, or -EINVAL (len 0), -ENOMEM,
 * or the error of ops->reg. */
int vb_mcache_get(vb_mcache_t *mc, const void *addr, size_t len, int access,
                  vb_mentry_t **entry_p);

/* Drop the reference from vb_mcache_get(). An uncached entry, or one with
 * the peer's rights, is deregistered and freed with its last reference. */
void vb_mcache_put(vb_mcache_t *mc, vb_mentry_t *e);

/* Drop every cached entry overlapping [addr, addr + len): unreferenced ones
 * are deregistered now, the others with their last put. Returns how many
 * entries were dropped. */
size_t vb_mcache_invalidate(vb_mcache_t *mc, const void *addr, size_t len);

/* Cached entries now, and the bound. */
size_t vb_mcache_count(const vb_mcache_t *mc);
size_t vb_mcache_max(const vb_mcache_t *mc);
vb_mcache_stats_t vb_mcache_stats(const vb_mcache_t *mc);

#endif
