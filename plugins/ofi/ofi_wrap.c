/*
 * ofw over libfabric: one thin function per fi_* call the plugin makes
 * (see ofi_wrap.h). No policy lives here beyond the hints that say what the
 * plugin needs: an RDM endpoint with tagged messages, operation contexts
 * supplied by the caller, no memory registration for local buffers. Calls
 * that can meet one of the provider's locks in shared memory are marked
 * for the watchdog (ofi_watch.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include "ofi_proto.h"
#include "ofi_watch.h"
#include "ofi_wrap.h"

_Static_assert(sizeof(ofw_ctx_t) == sizeof(struct fi_context2),
               "ofw_ctx_t must have the size of struct fi_context2");
_Static_assert(OFI_FMT_SOCKADDR == FI_SOCKADDR &&
                   OFI_FMT_SOCKADDR_IN == FI_SOCKADDR_IN &&
                   OFI_FMT_SOCKADDR_IN6 == FI_SOCKADDR_IN6 &&
                   OFI_FMT_STR == FI_ADDR_STR,
               "OFI_FMT_* must be libfabric's address formats");

/* The interface version the plugin is written against: libfabric 1.10
 * semantics (mr_mode bits, FI_CONTEXT2). */
#define OFW_FI_VERSION FI_VERSION(1, 10)

/* What a provider must offer the plugin: RDM endpoints with tagged
 * messages; receives that take messages of one peer only, so that another
 * endpoint cannot put frames into a connection (see ofw_trecv for shm's
 * gap); and sends to one peer matched in the order they were sent
 * (FI_ORDER_SAS): chunks k and k + 255 of a frame's rest have the same tag
 * and are all posted at once, the receiver posts one chunk's receive at a
 * time. shm and tcp;ofi_rxm of libfabric 1.17 grant all of it. */
static void hints_require(struct fi_info *hints)
{
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_TAGGED | FI_DIRECTED_RECV;
    hints->tx_attr->msg_order = FI_ORDER_SAS;
    hints->rx_attr->msg_order = FI_ORDER_SAS;
}

_Static_assert(OFW_ADDR_UNSPEC == FI_ADDR_UNSPEC,
               "OFW_ADDR_UNSPEC must be FI_ADDR_UNSPEC");

struct ofw_ep {
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_cq *cq;
    struct fid_av *av;
    struct fid_ep *ep;
    char region[32]; /* the shm provider's region name, or "" */
};

static struct fi_info *chosen; /* fi_dupinfo of the selected provider */

static int map_err(ssize_t rc)
{
    if (rc >= 0) return (int)rc;
    int e = (int)-rc;
    if (e == FI_ETRUNC) return -EMSGSIZE;
    if (e == FI_EAVAIL) return OFW_CQ_ERROR;
    if (e >= FI_ERRNO_OFFSET) return -EIO;
    return -e;
}

static int prov_is_local(const char *prov)
{
    return !strncmp(prov, "shm", 3) && (prov[3] == 0 || prov[3] == ';');
}

static void copy_str(char *dst, size_t len, const char *src)
{
    snprintf(dst, len, "%s", src ? src : "?");
}

/* The providers that offer an RDM endpoint with tagged messages at all, for
 * the message of a failed selection. */
static void list_providers(char *buf, size_t len)
{
    struct fi_info *hints = fi_allocinfo(), *list = NULL;
    size_t off = 0;

    buf[0] = 0;
    if (!hints) return;
    hints_require(hints);
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    if (fi_getinfo(OFW_FI_VERSION, NULL, NULL, 0, hints, &list) == 0) {
        for (struct fi_info *i = list; i && off < len; i = i->next) {
            const char *p = i->fabric_attr->prov_name;
            if (!p || strstr(buf, p)) continue; /* one line per provider */
            off += snprintf(buf + off, len - off, "%s%s", off ? ", " : "", p);
        }
        fi_freeinfo(list);
    }
    fi_freeinfo(hints);
    if (!buf[0]) snprintf(buf, len, "none");
}

int ofw_select(const char *prov, const char *domain, ofw_info_t *info,
               char *why, size_t why_len)
{
    struct fi_info *hints, *list = NULL;
    int rc;

    ofw_unselect();
    hints = fi_allocinfo();
    if (!hints) {
        snprintf(why, why_len, "fi_allocinfo: out of memory");
        return -ENOMEM;
    }
    hints_require(hints);
    /* Every operation gets its own fi_context2; iovec arrays stay valid
     * until completion (FI_ASYNC_IOV costs us nothing). */
    hints->mode = FI_CONTEXT | FI_CONTEXT2 | FI_ASYNC_IOV;
    /* Local buffers are never registered: providers that need that
     * (FI_MR_LOCAL) are left out; the bits below only concern RMA. */
    hints->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED |
                                  FI_MR_PROV_KEY;
    hints->domain_attr->threading = FI_THREAD_DOMAIN;
    if (prov && *prov) hints->fabric_attr->prov_name = strdup(prov);
    if (domain && *domain) hints->domain_attr->name = strdup(domain);

    rc = fi_getinfo(OFW_FI_VERSION, NULL, NULL, 0, hints, &list);
    fi_freeinfo(hints);
    if (rc || !list) {
        char avail[256];
        list_providers(avail, sizeof(avail));
        snprintf(why, why_len,
                 "no provider%s%s%s with tagged RDM endpoints, directed "
                 "receives and ordered sends%s%s (%s); here: %s",
                 prov && *prov ? " \"" : "", prov && *prov ? prov : "",
                 prov && *prov ? "\"" : "", domain && *domain ? " in domain " : "",
                 domain && *domain ? domain : "",
                 rc ? fi_strerror(-rc) : "empty list", avail);
        if (list) fi_freeinfo(list);
        return -ENODEV;
    }
    /* fi_getinfo lists the best matches first. */
    struct fi_info *next = list->next;
    list->next = NULL;
    chosen = fi_dupinfo(list);
    list->next = next;
    fi_freeinfo(list);
    if (!chosen) {
        snprintf(why, why_len, "fi_dupinfo: out of memory");
        return -ENOMEM;
    }

    memset(info, 0, sizeof(*info));
    copy_str(info->prov, sizeof(info->prov), chosen->fabric_attr->prov_name);
    copy_str(info->fabric, sizeof(info->fabric), chosen->fabric_attr->name);
    copy_str(info->domain, sizeof(info->domain), chosen->domain_attr->name);
    info->addr_format = chosen->addr_format;
    info->inject_size = chosen->tx_attr->inject_size;
    info->max_msg_size = chosen->ep_attr->max_msg_size;
    info->iov_limit = chosen->tx_attr->iov_limit;
    info->tx_size = chosen->tx_attr->size;
    info->rx_size = chosen->rx_attr->size;
    info->local_only = prov_is_local(info->prov);
    return 0;
}

void ofw_unselect(void)
{
    if (chosen) fi_freeinfo(chosen);
    chosen = NULL;
}

/* The shm provider names an endpoint's region in /dev/shm after the
 * process id. A process killed with SIGKILL leaves its region behind, and a
 * later process with the same id then cannot open an endpoint (the
 * provider refuses a name whose owner lives: itself). A copy of info with
 * a name that has a random part, or NULL when out of memory. */
static struct fi_info *with_unique_name(const struct fi_info *info,
                                        char *region, size_t region_len)
{
    uint32_t r;
    if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != sizeof(r)) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        r = (uint32_t)ts.tv_nsec ^ (uint32_t)ts.tv_sec << 20;
    }
    char name[64];
    snprintf(region, region_len, "pscom-%ld-%08x", (long)getpid(),
             (unsigned)r);
    snprintf(name, sizeof(name), "fi_shm://%s", region);
    struct fi_info *copy = fi_dupinfo(info);
    if (!copy) return NULL;
    free(copy->src_addr);
    copy->src_addr = strdup(name);
    copy->src_addrlen = strlen(name) + 1;
    if (!copy->src_addr) {
        fi_freeinfo(copy);
        return NULL;
    }
    return copy;
}

int ofw_ep_open(ofw_ep_t **out, void *addr, size_t *addr_len, char *why,
                size_t why_len)
{
    struct ofw_ep *e;
    const char *what;
    int rc;

    if (!chosen) {
        snprintf(why, why_len, "no provider was selected");
        return -ENODEV;
    }
    e = calloc(1, sizeof(*e));
    if (!e) {
        snprintf(why, why_len, "out of memory");
        return -ENOMEM;
    }

    what = "fi_fabric";
    rc = fi_fabric(chosen->fabric_attr, &e->fabric, NULL);
    if (rc) goto fail;

    what = "fi_domain";
    rc = fi_domain(e->fabric, chosen, &e->domain, NULL);
    if (rc) goto fail;

    struct fi_cq_attr cq_attr = {
        .format = FI_CQ_FORMAT_TAGGED,
        .wait_obj = FI_WAIT_NONE,
        .size = chosen->tx_attr->size + chosen->rx_attr->size,
    };
    what = "fi_cq_open";
    rc = fi_cq_open(e->domain, &cq_attr, &e->cq, NULL);
    if (rc) goto fail;

    struct fi_av_attr av_attr = {
        .type = chosen->domain_attr->av_type != FI_AV_UNSPEC
                    ? chosen->domain_attr->av_type
                    : FI_AV_TABLE,
    };
    what = "fi_av_open";
    rc = fi_av_open(e->domain, &av_attr, &e->av, NULL);
    if (rc) goto fail;

    what = "fi_endpoint";
    struct fi_info *ep_info = chosen;
    if (prov_is_local(chosen->fabric_attr->prov_name)) {
        ep_info = with_unique_name(chosen, e->region, sizeof(e->region));
        rc = -FI_ENOMEM;
        if (!ep_info) goto fail;
    }
    rc = fi_endpoint(e->domain, ep_info, &e->ep, NULL);
    if (ep_info != chosen) fi_freeinfo(ep_info);
    if (rc) goto fail;

    what = "fi_ep_bind(cq)";
    rc = fi_ep_bind(e->ep, &e->cq->fid, FI_TRANSMIT | FI_RECV);
    if (rc) goto fail;

    what = "fi_ep_bind(av)";
    rc = fi_ep_bind(e->ep, &e->av->fid, 0);
    if (rc) goto fail;

    what = "fi_enable";
    rc = fi_enable(e->ep);
    if (rc) goto fail;

    what = "fi_getname";
    size_t len = OFW_ADDR_MAX;
    rc = fi_getname(&e->ep->fid, addr, &len);
    if (rc) goto fail;

    *addr_len = len;
    *out = e;
    return 0;

fail:
    snprintf(why, why_len, "%s: %s", what, fi_strerror(-rc));
    ofw_ep_close(e);
    return map_err(rc) < 0 ? map_err(rc) : -EIO;
}

const char *ofw_ep_region(const ofw_ep_t *e)
{
    return e && e->region[0] ? e->region : NULL;
}

void ofw_ep_close(ofw_ep_t *e)
{
    if (!e) return;
    /* Endpoint before what it is bound to. */
    owd_enter("fi_close");
    if (e->ep) fi_close(&e->ep->fid);
    if (e->av) fi_close(&e->av->fid);
    if (e->cq) fi_close(&e->cq->fid);
    if (e->domain) fi_close(&e->domain->fid);
    if (e->fabric) fi_close(&e->fabric->fid);
    owd_leave();
    free(e);
}

int ofw_av_insert(ofw_ep_t *e, const void *addr, size_t addr_len,
                  uint64_t *fi_addr)
{
    fi_addr_t a = FI_ADDR_NOTAVAIL;
    /* The provider reads as much as the name's format says: the caller
     * checked that it is that long (ofi_addr_check). */
    (void)addr_len;
    owd_enter("fi_av_insert");
    int rc = fi_av_insert(e->av, addr, 1, &a, 0, NULL);
    owd_leave();
    if (rc < 0) return map_err(rc);
    if (rc != 1 || a == FI_ADDR_NOTAVAIL) return -EINVAL;
    *fi_addr = a;
    return 0;
}

const char *ofw_addr_str(ofw_ep_t *e, const void *addr, size_t addr_len,
                         char *buf, size_t buf_len)
{
    size_t len = buf_len;
    (void)addr_len;
    if (!e || !buf_len) return "?";
    fi_av_straddr(e->av, addr, buf, &len);
    buf[buf_len - 1] = 0;
    return buf;
}

ssize_t ofw_tinject(ofw_ep_t *e, const void *buf, size_t len, uint64_t dest,
                    uint64_t tag)
{
    owd_enter("fi_tinject");
    ssize_t rc = fi_tinject(e->ep, buf, len, dest, tag);
    owd_leave();
    return map_err(rc);
}

ssize_t ofw_tsendv(ofw_ep_t *e, const struct iovec *iov, size_t count,
                   uint64_t dest, uint64_t tag, ofw_ctx_t *ctx)
{
    owd_enter("fi_tsendv");
    ssize_t rc = fi_tsendv(e->ep, iov, NULL, count, dest, tag, ctx);
    owd_leave();
    return map_err(rc);
}

ssize_t ofw_trecv(ofw_ep_t *e, void *buf, size_t len, uint64_t src,
                  uint64_t tag, uint64_t ignore, ofw_ctx_t *ctx)
{
    owd_enter("fi_trecv");
    ssize_t rc = fi_trecv(e->ep, buf, len, NULL, src, tag, ignore, ctx);
    owd_leave();
    return map_err(rc);
}

int ofw_cancel(ofw_ep_t *e, ofw_ctx_t *ctx)
{
    owd_enter("fi_cancel");
    int rc = fi_cancel(&e->ep->fid, ctx);
    owd_leave();
    return map_err(rc);
}

#define CQ_BATCH 16

ssize_t ofw_cq_read(ofw_ep_t *e, ofw_comp_t *comp, size_t max)
{
    struct fi_cq_tagged_entry ent[CQ_BATCH];
    if (max > CQ_BATCH) max = CQ_BATCH;
    owd_enter("fi_cq_read");
    ssize_t n = fi_cq_read(e->cq, ent, max);
    owd_leave();
    if (n == -FI_EAGAIN) return 0;
    if (n < 0) return map_err(n);
    for (ssize_t i = 0; i < n; i++) {
        comp[i].ctx = ent[i].op_context;
        comp[i].len = ent[i].len;
        comp[i].tag = ent[i].tag;
    }
    return n;
}

int ofw_cq_readerr(ofw_ep_t *e, ofw_cqerr_t *err)
{
    struct fi_cq_err_entry ent;
    memset(&ent, 0, sizeof(ent));
    owd_enter("fi_cq_readerr");
    ssize_t rc = fi_cq_readerr(e->cq, &ent, 0);
    owd_leave();
    if (rc == -FI_EAGAIN || rc == 0) return -EAGAIN;
    if (rc < 0) return map_err(rc);
    err->ctx = ent.op_context;
    err->len = ent.len;
    err->prov_errno = ent.prov_errno;
    int code = ent.err;
    err->err = code == FI_ETRUNC ? EMSGSIZE
               : code >= FI_ERRNO_OFFSET ? EIO
               : code > 0 ? code
                          : EIO;
    const char *prov = fi_cq_strerror(e->cq, ent.prov_errno, ent.err_data,
                                      NULL, 0);
    snprintf(err->text, sizeof(err->text), "%s%s%s%s", fi_strerror(code),
             prov && *prov ? " (" : "", prov && *prov ? prov : "",
             prov && *prov ? ")" : "");
    return 0;
}

const char *ofw_strerror(int err)
{
    if (err == OFW_CQ_ERROR) return "an error completion is waiting";
    return fi_strerror(err < 0 ? -err : err);
}

/* ---------------------------------------------------------------------- */
/* Cross-memory attach                                                    */

int ofw_cma_usable(char *why, size_t why_len)
{
    /* Yama at 1 or more allows it only towards descendants (or processes
     * that asked for it), not between the ranks of a job. */
    FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", "r");
    if (f) {
        int scope = 0;
        int n = fscanf(f, "%d", &scope);
        fclose(f);
        if (n == 1 && scope != 0) {
            snprintf(why, why_len, "kernel.yama.ptrace_scope is %d", scope);
            return -EPERM;
        }
    }
    /* A seccomp filter or an old kernel: try it on ourselves. */
    static volatile uint64_t probe = 0x70756c6cull;
    uint64_t got = 0;
    int rc = ofw_cma_read(getpid(), &got, (uint64_t)(uintptr_t)&probe,
                          sizeof(got));
    if (rc || got != probe) {
        snprintf(why, why_len, "process_vm_readv: %s",
                 rc ? strerror(-rc) : "wrong bytes");
        return rc ? rc : -EIO;
    }
    return 0;
}

/* process_vm_readv or _writev until all of len is copied. */
static int cma_copy(pid_t pid, void *buf, uint64_t raddr, size_t len,
                    int write)
{
    while (len) {
        struct iovec l = {buf, len}, r = {(void *)(uintptr_t)raddr, len};
        ssize_t n = write ? process_vm_writev(pid, &l, 1, &r, 1, 0)
                          : process_vm_readv(pid, &l, 1, &r, 1, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return -errno;
        if (n == 0) return -EFAULT;
        buf = (char *)buf + n;
        raddr += (uint64_t)n;
        len -= (size_t)n;
    }
    return 0;
}

int ofw_cma_read(pid_t pid, void *buf, uint64_t raddr, size_t len)
{
    return cma_copy(pid, buf, raddr, len, 0);
}

int ofw_cma_write(pid_t pid, const void *buf, uint64_t raddr, size_t len)
{
    return cma_copy(pid, (void *)buf, raddr, len, 1);
}

int ofw_cma_read_word(pid_t pid, void *buf, uint64_t raddr, size_t len,
                      uint64_t *word, uint64_t waddr)
{
#if !defined(__x86_64__) && !defined(__i386__)
    /* Loads may pass each other here: the word after a fence, in a call of
     * its own. */
    int rc = cma_copy(pid, buf, raddr, len, 0);
    if (rc) return rc;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    return cma_copy(pid, word, waddr, sizeof(*word), 0);
#else
    /* The kernel copies the remote ranges in order, and x86 keeps loads in
     * order: one call reads the word after the bytes. */
    size_t wdone = 0;
    while (len || wdone < sizeof(*word)) {
        struct iovec l[2], r[2];
        unsigned long n = 0;
        if (len) {
            l[n] = (struct iovec){buf, len};
            r[n++] = (struct iovec){(void *)(uintptr_t)raddr, len};
        }
        l[n] = (struct iovec){(char *)word + wdone, sizeof(*word) - wdone};
        r[n++] = (struct iovec){(void *)(uintptr_t)(waddr + wdone),
                                sizeof(*word) - wdone};
        ssize_t got = process_vm_readv(pid, l, n, r, n, 0);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) return -errno;
        if (got == 0) return -EFAULT;
        size_t m = (size_t)got < len ? (size_t)got : len;
        buf = (char *)buf + m;
        raddr += m;
        len -= m;
        wdone += (size_t)got - m;
    }
    return 0;
#endif
}
