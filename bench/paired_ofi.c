/*
 * bench/ofi_paired: pscom over its ofi plugin against libfabric's own
 * tagged ping-pong on an RDM endpoint (the loop fi_pingpong -e rdm -m
 * tagged runs: fi_tinject up to the provider's inject size, else fi_tsend
 * and its completion; a receive always posted ahead, posted again as soon
 * as it completed), in the same two processes; the driver is paired.c
 * (paired.h says why).
 *
 *   PSP_OFI_PROVIDER=shm chrt -f 10 <builddir>/bench/ofi_paired --size 8 \
 *       --pairs 200 --cpu 0,1
 *
 * PSP_OFI_PROVIDER picks the provider of both sides ("shm", "tcp;ofi_rxm";
 * unset: the first one fi_getinfo offers). Over shm only sizes up to the
 * provider's inject size (see raw_setup). Prints what ucx_paired prints.
 * A benchmark aid, not installed; bench/compare-ofi runs it with -P.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include "bench_util.h"
#include "paired.h"

#define TAG 0x5053434full

const struct backend backend = {
    .prog = "ofi_paired",
    .raw = "libfabric tagged ping-pong",
    .plugin = "ofi",
    .con_type = PSCOM_CON_TYPE_OFI,
    .env = "PSP_OFI_PROVIDER",
};

struct ofi_side {
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_av *av;
    struct fid_cq *cq;
    struct fid_ep *ep;
    fi_addr_t peer;
    struct fi_context2 rx_ctx, tx_ctx;
    unsigned rx_done, tx_done; /* completions seen */
};

static void ofi_check(int rc, const char *what)
{
    if (rc) fail("%s: %s", what, fi_strerror(rc < 0 ? -rc : rc));
}

/* Reap completions; fails on an error entry. */
static void progress(struct ofi_side *o)
{
    struct fi_cq_entry e[4];
    ssize_t n = fi_cq_read(o->cq, e, 4);
    if (n == -FI_EAGAIN) return;
    if (n == -FI_EAVAIL) {
        struct fi_cq_err_entry err = {0};
        fi_cq_readerr(o->cq, &err, 0);
        fail("libfabric completion error: %s",
             fi_strerror(err.err ? err.err : FI_EOTHER));
    }
    if (n < 0) ofi_check((int)n, "fi_cq_read");
    for (ssize_t i = 0; i < n; i++) {
        if (e[i].op_context == &o->rx_ctx) o->rx_done++;
        else if (e[i].op_context == &o->tx_ctx) o->tx_done++;
    }
}

static void post_recv(struct side *s, struct ofi_side *o)
{
    ssize_t rc;
    while ((rc = fi_trecv(o->ep, s->rbuf, s->size, NULL, o->peer, TAG, 0,
                          &o->rx_ctx)) == -FI_EAGAIN)
        progress(o);
    ofi_check((int)rc, "fi_trecv");
}

void raw_setup(struct side *s)
{
    struct ofi_side *o = calloc(1, sizeof(*o));
    struct fi_info *hints = fi_allocinfo();
    if (!o || !hints) fail("out of memory");
    s->raw = o;
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_TAGGED;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED |
                                  FI_MR_PROV_KEY;
    hints->domain_attr->threading = FI_THREAD_DOMAIN;
    const char *prov = getenv("PSP_OFI_PROVIDER");
    if (prov && *prov) hints->fabric_attr->prov_name = strdup(prov);
    ofi_check(fi_getinfo(FI_VERSION(1, 10), NULL, NULL, 0, hints, &o->info),
              "fi_getinfo (a provider with tagged RDM endpoints)");
    fi_freeinfo(hints);
    if (!strcmp(o->info->fabric_attr->prov_name, "shm")) {
        /* Beside pscom's endpoint in the same process, messages above the
         * inject size stopped arriving after a few hundred (libfabric
         * 1.17; with a name of its own too). */
        if (s->size > o->info->tx_attr->inject_size)
            fail("over the shm provider only messages up to its inject "
                 "size (%zu bytes) are measured, not %zu",
                 o->info->tx_attr->inject_size, s->size);
        /* The provider names an endpoint after the process by default;
         * pscom's endpoint in the same process has a name of its own. */
        char name[64];
        snprintf(name, sizeof(name), "fi_shm://paired-%ld", (long)getpid());
        free(o->info->src_addr);
        o->info->src_addr = strdup(name);
        o->info->src_addrlen = strlen(name) + 1;
    }
    ofi_check(fi_fabric(o->info->fabric_attr, &o->fabric, NULL), "fi_fabric");
    ofi_check(fi_domain(o->fabric, o->info, &o->domain, NULL), "fi_domain");
    struct fi_cq_attr cq = {.format = FI_CQ_FORMAT_CONTEXT};
    ofi_check(fi_cq_open(o->domain, &cq, &o->cq, NULL), "fi_cq_open");
    struct fi_av_attr av = {.type = FI_AV_TABLE};
    ofi_check(fi_av_open(o->domain, &av, &o->av, NULL), "fi_av_open");
    ofi_check(fi_endpoint(o->domain, o->info, &o->ep, NULL), "fi_endpoint");
    ofi_check(fi_ep_bind(o->ep, &o->av->fid, 0), "fi_ep_bind (av)");
    ofi_check(fi_ep_bind(o->ep, &o->cq->fid, FI_TRANSMIT | FI_RECV),
              "fi_ep_bind (cq)");
    ofi_check(fi_enable(o->ep), "fi_enable");
    char name[256];
    size_t len = sizeof(name), peer_len;
    ofi_check(fi_getname(&o->ep->fid, name, &len), "fi_getname");
    void *peer = swap_blob(s->fd, name, len, &peer_len);
    if (fi_av_insert(o->av, peer, 1, &o->peer, 0, NULL) != 1)
        fail("fi_av_insert: the peer's address was not taken");
    free(peer);
    post_recv(s, o);
}

void raw_send(struct side *s)
{
    struct ofi_side *o = s->raw;
    ssize_t rc;
    if (s->size <= o->info->tx_attr->inject_size) {
        while ((rc = fi_tinject(o->ep, s->sbuf, s->size, o->peer, TAG)) ==
               -FI_EAGAIN)
            progress(o);
        ofi_check((int)rc, "fi_tinject");
        return;
    }
    unsigned want = o->tx_done + 1;
    while ((rc = fi_tsend(o->ep, s->sbuf, s->size, NULL, o->peer, TAG,
                          &o->tx_ctx)) == -FI_EAGAIN)
        progress(o);
    ofi_check((int)rc, "fi_tsend");
    while (o->tx_done != want) progress(o);
}

/* The receive posted ahead completes; the next one is posted at once. */
void raw_recv(struct side *s)
{
    struct ofi_side *o = s->raw;
    unsigned want = o->rx_done + 1;
    while (o->rx_done != want) progress(o);
    post_recv(s, o);
}

void raw_teardown(struct side *s)
{
    struct ofi_side *o = s->raw;
    fi_close(&o->ep->fid); /* cancels the receive posted ahead */
    fi_close(&o->av->fid);
    fi_close(&o->cq->fid);
    fi_close(&o->domain->fid);
    fi_close(&o->fabric->fid);
    fi_freeinfo(o->info);
    free(o);
}
