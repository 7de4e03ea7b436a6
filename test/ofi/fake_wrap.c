/*
 * A fake ofw (plugins/ofi/ofi_wrap.h) for the unit tests: one in-memory
 * endpoint that matches tagged messages against posted receives the way an
 * RDM provider does (posted receives in posting order, unexpected messages
 * in arrival order), with knobs that make sends or receives fail with
 * -EAGAIN, hold or reorder completions, and fail operations.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake.h"

struct fake_knobs fake;

struct posted {
    void *buf;
    size_t len;
    uint64_t src; /* OFW_ADDR_UNSPEC: any */
    uint64_t tag, ignore;
    ofw_ctx_t *ctx;
};

struct unexp {
    uint8_t *data;
    size_t len;
    uint64_t src, tag;
};

struct cqe {
    ofw_ctx_t *ctx;
    size_t len;
    uint64_t tag;
    int err; /* 0: success */
};

#define MAXQ 4096
static struct posted posted[MAXQ];
static unsigned nposted;
static struct unexp unexp[MAXQ];
static unsigned nunexp;
static struct cqe cq[MAXQ];
static unsigned ncq;
static struct cqe held[MAXQ]; /* send completions held back */
static unsigned nheld;
static int ep_open;
/* Cross-memory writes held back (fake.cma_hold_writes). */
struct held_write {
    uint64_t raddr;
    uint8_t data[8];
    size_t len;
};
static struct held_write held_writes[16];
static unsigned nheld_writes;

void fake_reset(void)
{
    for (unsigned i = 0; i < nunexp; i++) free(unexp[i].data);
    nposted = nunexp = ncq = nheld = 0;
    nheld_writes = 0;
    memset(&fake, 0, sizeof(fake));
    fake.inject_size = 64;
    fake.max_msg_size = SIZE_MAX;
    fake.iov_limit = 4;
    fake.addr_format = 42;
    snprintf(fake.prov, sizeof(fake.prov), "fake;prov");
}

unsigned fake_posted_count(void)
{
    return nposted;
}

unsigned fake_unexpected_count(void)
{
    return nunexp;
}

unsigned fake_held_count(void)
{
    return nheld;
}

int fake_ep_is_open(void)
{
    return ep_open;
}

static void cq_push(ofw_ctx_t *ctx, size_t len, uint64_t tag, int err)
{
    if (ncq == MAXQ) abort();
    cq[ncq++] = (struct cqe){ctx, len, tag, err};
}

void fake_release_held(int reverse)
{
    for (unsigned i = 0; i < nheld; i++) {
        struct cqe *e = &held[reverse ? nheld - 1 - i : i];
        cq_push(e->ctx, e->len, e->tag, e->err);
    }
    nheld = 0;
}

void fake_release_held_one(unsigned i)
{
    if (i >= nheld) return;
    struct cqe e = held[i];
    memmove(&held[i], &held[i + 1], (nheld - i - 1) * sizeof(held[0]));
    nheld--;
    cq_push(e.ctx, e.len, e.tag, e.err);
}

/* Does a receive for src, tag and ignore take a message from msg_src with
 * msg_tag? */
static int matches(uint64_t src, uint64_t tag, uint64_t ignore,
                   uint64_t msg_src, uint64_t msg_tag)
{
    return (src == OFW_ADDR_UNSPEC || src == msg_src) &&
           (tag & ~ignore) == (msg_tag & ~ignore);
}

/* Match a message against the posted receives; 1 when taken. */
static int deliver(const uint8_t *data, size_t len, uint64_t src,
                   uint64_t tag)
{
    for (unsigned i = 0; i < nposted; i++) {
        struct posted *p = &posted[i];
        if (!matches(p->src, p->tag, p->ignore, src, tag)) continue;
        struct posted r = *p;
        memmove(p, p + 1, (nposted - i - 1) * sizeof(*p));
        nposted--;
        if (len > r.len) {
            memcpy(r.buf, data, r.len);
            cq_push(r.ctx, r.len, tag, EMSGSIZE);
        } else {
            memcpy(r.buf, data, len);
            cq_push(r.ctx, len, tag, 0);
        }
        return 1;
    }
    return 0;
}

static void send_msg(const uint8_t *data, size_t len, uint64_t src,
                     uint64_t tag)
{
    fake.msgs_sent++;
    if (len > fake.largest_msg) fake.largest_msg = len;
    if (deliver(data, len, src, tag)) return;
    if (nunexp == MAXQ) abort();
    unexp[nunexp].data = malloc(len ? len : 1);
    memcpy(unexp[nunexp].data, data, len);
    unexp[nunexp].len = len;
    unexp[nunexp].src = src;
    unexp[nunexp].tag = tag;
    nunexp++;
}

void fake_send_raw(const void *data, size_t len, uint64_t tag)
{
    send_msg(data, len, FAKE_PEER_ADDR, tag);
}

void fake_send_from(uint64_t src, const void *data, size_t len, uint64_t tag)
{
    send_msg(data, len, src, tag);
}

int ofw_select(const char *prov, const char *domain, ofw_info_t *info,
               char *why, size_t why_len)
{
    if (fake.select_fails) {
        snprintf(why, why_len, "fake: no provider \"%s\"", prov ? prov : "");
        return -ENODEV;
    }
    memset(info, 0, sizeof(*info));
    snprintf(info->prov, sizeof(info->prov), "%s", fake.prov);
    snprintf(info->fabric, sizeof(info->fabric), "fakefabric");
    snprintf(info->domain, sizeof(info->domain), "fakedomain");
    info->addr_format = fake.addr_format;
    info->inject_size = fake.inject_size;
    info->max_msg_size = fake.max_msg_size;
    info->iov_limit = fake.iov_limit;
    info->tx_size = info->rx_size = 1024;
    info->local_only = fake.local_only;
    return 0;
}

void ofw_unselect(void)
{
}

int ofw_ep_open(ofw_ep_t **ep, void *addr, size_t *addr_len, char *why,
                size_t why_len)
{
    if (fake.ep_open_fails) {
        snprintf(why, why_len, "fake: fi_endpoint failed");
        return -EIO;
    }
    static int dummy;
    *ep = (ofw_ep_t *)&dummy;
    memcpy(addr, "fake-addr", 9);
    *addr_len = 9;
    ep_open = 1;
    return 0;
}

const char *ofw_ep_region(const ofw_ep_t *ep)
{
    (void)ep;
    return fake.region; /* NULL unless a test names one */
}

void ofw_ep_close(ofw_ep_t *ep)
{
    (void)ep;
    ep_open = 0;
    nposted = ncq = nheld = 0;
}

int ofw_av_insert(ofw_ep_t *ep, const void *addr, size_t addr_len,
                  uint64_t *fi_addr)
{
    if (fake.av_fails) return -EINVAL;
    fake.av_inserts++;
    *fi_addr = FAKE_PEER_ADDR;
    return 0;
}

const char *ofw_addr_str(ofw_ep_t *ep, const void *addr, size_t addr_len,
                         char *buf, size_t buf_len)
{
    snprintf(buf, buf_len, "fake://%.*s", (int)addr_len, (const char *)addr);
    return buf;
}

/* Does this send find the queue full (send_eagain, send_eagain_after)? */
static int send_refused(void)
{
    if (!fake.send_eagain) return 0;
    if (fake.send_eagain_after) {
        fake.send_eagain_after--;
        return 0;
    }
    fake.send_eagain--;
    fake.eagains++;
    return 1;
}

ssize_t ofw_tinject(ofw_ep_t *ep, const void *buf, size_t len, uint64_t dest,
                    uint64_t tag)
{
    fake.inject_calls++;
    if (send_refused()) return -EAGAIN;
    if (len > fake.inject_size) return -EINVAL;
    fake.injects++;
    send_msg(buf, len, FAKE_PEER_ADDR, tag);
    return 0;
}

ssize_t ofw_tsendv(ofw_ep_t *ep, const struct iovec *iov, size_t count,
                   uint64_t dest, uint64_t tag, ofw_ctx_t *ctx)
{
    fake.tsend_calls++;
    if (send_refused()) return -EAGAIN;
    if (count > fake.iov_limit) return -EINVAL;
    if (fake.send_fails) return -EIO;
    size_t len = 0;
    for (size_t i = 0; i < count; i++) len += iov[i].iov_len;
    if (len > fake.max_msg_size) return -EMSGSIZE;
    uint8_t *data = malloc(len ? len : 1);
    size_t off = 0;
    for (size_t i = 0; i < count; i++) {
        memcpy(data + off, iov[i].iov_base, iov[i].iov_len);
        off += iov[i].iov_len;
    }
    send_msg(data, len, FAKE_PEER_ADDR, tag);
    free(data);
    int err = 0;
    if (fake.send_error_completion) {
        fake.send_error_completion--;
        err = ECONNRESET;
    }
    if (fake.hold_tx)
        held[nheld++] = (struct cqe){ctx, len, tag, err};
    else
        cq_push(ctx, len, tag, err);
    return 0;
}

ssize_t ofw_trecv(ofw_ep_t *ep, void *buf, size_t len, uint64_t src,
                  uint64_t tag, uint64_t ignore, ofw_ctx_t *ctx)
{
    fake.trecv_calls++;
    if (fake.recv_eagain) {
        fake.recv_eagain--;
        fake.eagains++;
        return -EAGAIN;
    }
    for (unsigned i = 0; i < nunexp; i++) {
        struct unexp *u = &unexp[i];
        if (!matches(src, tag, ignore, u->src, u->tag)) continue;
        struct unexp m = *u;
        memmove(u, u + 1, (nunexp - i - 1) * sizeof(*u));
        nunexp--;
        if (m.len > len) {
            memcpy(buf, m.data, len);
            cq_push(ctx, len, m.tag, EMSGSIZE);
        } else {
            memcpy(buf, m.data, m.len);
            cq_push(ctx, m.len, m.tag, 0);
        }
        free(m.data);
        return 0;
    }
    if (nposted == MAXQ) abort();
    posted[nposted++] = (struct posted){buf, len, src, tag, ignore, ctx};
    return 0;
}

int ofw_cancel(ofw_ep_t *ep, ofw_ctx_t *ctx)
{
    fake.cancels++;
    for (unsigned i = 0; i < nposted; i++) {
        if (posted[i].ctx != ctx) continue;
        memmove(&posted[i], &posted[i + 1], (nposted - i - 1) * sizeof(posted[0]));
        nposted--;
        cq_push(ctx, 0, 0, ECANCELED);
        return 0;
    }
    return 0;
}

ssize_t ofw_cq_read(ofw_ep_t *ep, ofw_comp_t *comp, size_t max)
{
    if (++fake.cq_reads == fake.release_held_at) fake_release_held(0);
    if (!ncq) return 0;
    if (cq[0].err) return OFW_CQ_ERROR;
    size_t n = 0;
    while (n < max && n < ncq && !cq[n].err) {
        comp[n].ctx = cq[n].ctx;
        comp[n].len = cq[n].len;
        comp[n].tag = cq[n].tag;
        n++;
    }
    if (fake.reverse_cq) {
        for (size_t a = 0, b = n - 1; a < b; a++, b--) {
            ofw_comp_t t = comp[a];
            comp[a] = comp[b];
            comp[b] = t;
        }
    }
    memmove(cq, cq + n, (ncq - n) * sizeof(cq[0]));
    ncq -= (unsigned)n;
    return (ssize_t)n;
}

int ofw_cq_readerr(ofw_ep_t *ep, ofw_cqerr_t *err)
{
    if (!ncq || !cq[0].err) return -EAGAIN;
    memset(err, 0, sizeof(*err));
    err->ctx = cq[0].ctx;
    err->err = cq[0].err;
    err->len = cq[0].len;
    snprintf(err->text, sizeof(err->text), "fake error %d", cq[0].err);
    memmove(cq, cq + 1, (ncq - 1) * sizeof(cq[0]));
    ncq--;
    return 0;
}

const char *ofw_strerror(int err)
{
    return strerror(err < 0 ? -err : err);
}

/* ---------------------------------------------------------------------- */
/* Cross-memory attach                                                    */

int ofw_cma_usable(char *why, size_t why_len)
{
    if (!fake.cma_denied) return 0;
    snprintf(why, why_len, "fake: kernel.yama.ptrace_scope is 1");
    return -EPERM;
}

/* Is [raddr, raddr + len) where the fake may reach? */
static int cma_reachable(uint64_t raddr, size_t len)
{
    return !fake.cma_hi || (raddr >= fake.cma_lo && raddr <= fake.cma_hi &&
                            len <= fake.cma_hi - raddr);
}

int ofw_cma_read(pid_t pid, void *buf, uint64_t raddr, size_t len)
{
    fake.cma_reads++;
    if (pid != getpid()) {
        fake.cma_foreign++;
        return -ESRCH;
    }
    if (!cma_reachable(raddr, len)) return -EFAULT;
    if (fake.cma_read_error) {
        int e = fake.cma_read_error;
        fake.cma_read_error = 0;
        return e;
    }
    memcpy(buf, (const void *)(uintptr_t)raddr, len);
    fake.cma_read_bytes += len;
    return 0;
}

int ofw_cma_read_word(pid_t pid, void *buf, uint64_t raddr, size_t len,
                      uint64_t *word, uint64_t waddr)
{
    int rc = ofw_cma_read(pid, buf, raddr, len);
    if (rc) return rc;
    fake.cma_reads--; /* one system call for both */
    return ofw_cma_read(pid, word, waddr, sizeof(*word));
}

int ofw_cma_write(pid_t pid, const void *buf, uint64_t raddr, size_t len)
{
    fake.cma_writes++;
    if (pid != getpid()) {
        fake.cma_foreign++;
        return -ESRCH;
    }
    if (!cma_reachable(raddr, len)) return -EFAULT;
    if (fake.cma_hold_writes && len <= 8 && nheld_writes < 16) {
        fake.cma_hold_writes--;
        struct held_write *h = &held_writes[nheld_writes++];
        h->raddr = raddr;
        h->len = len;
        memcpy(h->data, buf, len);
        return 0;
    }
    memcpy((void *)(uintptr_t)raddr, buf, len);
    return 0;
}

void fake_release_cma_writes(void)
{
    for (unsigned i = 0; i < nheld_writes; i++)
        memcpy((void *)(uintptr_t)held_writes[i].raddr, held_writes[i].data,
               held_writes[i].len);
    nheld_writes = 0;
}
