/*
 * A fake UCX layer for the ucx plugin's unit tests (see fake.h).
 */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fake.h"

struct fake_wrap fw;

struct uxw_context {
    int dummy;
};

struct uxw_worker {
    int dummy;
};

static struct uxw_worker the_worker;
static char ep_objs[16]; /* distinct addresses for endpoints */
static int next_ep;

static const char fake_addr[] = "FAKE-UCX-WORKER-ADDRESS";

void fake_wrap_reset(void)
{
    memset(&fw, 0, sizeof(fw));
    fw.send_result = UXW_PENDING;
    fw.recv_result = UXW_PENDING;
    fw.close_result = UXW_OK;
    fw.max_am_header = 512;
    fw.put_result = UXW_PENDING;
    fw.get_result = UXW_PENDING;
    fw.flush_result = UXW_PENDING;
    fw.key_len = 10;
}

int uxw_context_create(const uxw_config_t *cfg, uxw_context_t **ctx_p,
                       char *why, size_t why_len)
{
    (void)why;
    (void)why_len;
    fw.ctx_rma = cfg->rma;
    *ctx_p = malloc(sizeof(**ctx_p));
    assert(*ctx_p);
    fw.contexts++;
    return 0;
}

void uxw_context_destroy(uxw_context_t *ctx)
{
    if (!ctx) return;
    fw.contexts--;
    free(ctx);
}

int uxw_worker_create(uxw_context_t *ctx, uxw_am_cb_t am_cb, void *am_arg,
                      uxw_worker_t **worker_p, char *why, size_t why_len)
{
    (void)why;
    (void)why_len;
    uxw_context_destroy(ctx);
    fw.am_cb = am_cb;
    fw.am_arg = am_arg;
    fw.workers++;
    *worker_p = &the_worker;
    return 0;
}

void uxw_worker_destroy(uxw_worker_t *w)
{
    (void)w;
    fw.workers--;
}

void uxw_worker_address(uxw_worker_t *w, const void **addr, size_t *len)
{
    (void)w;
    *addr = fake_addr;
    *len = sizeof(fake_addr);
}

size_t uxw_worker_max_am_header(uxw_worker_t *w)
{
    (void)w;
    return fw.max_am_header;
}

unsigned uxw_worker_progress(uxw_worker_t *w)
{
    (void)w;
    unsigned n = 0;
    if (fw.in_progress) {
        void (*run)(void) = fw.in_progress;
        fw.in_progress = NULL;
        run();
        n++;
    }
    for (int i = 0; fw.rma_in_progress && i < fw.nrmas; i++)
        if (fw.rmas[i].pending) {
            fake_rma_complete(i, 0);
            n++;
        }
    return n;
}

int uxw_ep_create(uxw_worker_t *w, const void *addr, size_t len,
                  int peer_errors, uxw_ep_err_cb_t err_cb, void *err_arg,
                  uxw_ep_t **ep_p)
{
    (void)w;
    fw.ep_peer_errors = peer_errors;
    if (fw.ep_create_result) return fw.ep_create_result;
    assert(len == sizeof(fake_addr) && !memcmp(addr, fake_addr, len));
    fw.err_cb = err_cb;
    fw.err_arg = err_arg;
    fw.ep_creates++;
    *ep_p = (uxw_ep_t *)&ep_objs[next_ep++ % 16];
    return 0;
}

uxw_ep_t *fake_last_ep(void)
{
    return (uxw_ep_t *)&ep_objs[(next_ep - 1) % 16];
}

int uxw_ep_close(uxw_worker_t *w, uxw_ep_t *ep, int force, const uxw_op_t *op)
{
    (void)w;
    (void)ep;
    fw.ep_closes++;
    fw.ep_close_force += force != 0;
    if (force && fw.force_close_status)
        for (int i = 0; i < fw.nrecvs; i++)
            if (fw.recvs[i].pending)
                fake_recv_complete(i, NULL, fw.force_close_status);
    if (fw.close_result == UXW_PENDING) fw.close_op = op;
    return fw.close_result;
}

int uxw_am_send(uxw_ep_t *ep, unsigned id, const void *hdr, size_t hdr_len,
                const struct iovec *iov, int iovcnt, int proto,
                const uxw_op_t *op)
{
    assert(fw.nsends < FAKE_MAX_OPS);
    struct fake_send *s = &fw.sends[fw.nsends++];
    assert(hdr_len <= sizeof(s->hdr));
    s->ep = ep;
    s->id = id;
    if (hdr_len) memcpy(s->hdr, hdr, hdr_len);
    s->hdr_len = hdr_len;
    s->data_len = 0;
    for (int i = 0; i < iovcnt; i++) {
        size_t n = iov[i].iov_len;
        if (s->data_len + n > sizeof(s->data)) n = sizeof(s->data) - s->data_len;
        memcpy(s->data + s->data_len, iov[i].iov_base, n);
        s->data_len += n;
    }
    s->iov = iov;
    s->iovcnt = iovcnt;
    s->proto = proto;
    s->op = op;
    s->pending = fw.send_result == UXW_PENDING;
    if (s->pending && fw.end_inside)
        fake_send_complete(fw.nsends - 1, fw.end_status);
    return fw.send_result;
}

/* As UCX: taken only when a send would be done at once (send_result
 * UXW_OK); recorded like the others, without an op. */
int uxw_am_send_now(uxw_worker_t *w, uxw_ep_t *ep, unsigned id,
                    const void *buf, size_t len)
{
    (void)w;
    if (fw.send_result != UXW_OK) return fw.send_result < 0 ? fw.send_result : -2;
    struct iovec iov = {(void *)buf, len};
    return uxw_am_send(ep, id, NULL, 0, &iov, 1, UXW_SEND_EAGER, NULL);
}

void fake_send_complete(int i, int status)
{
    assert(i < fw.nsends && fw.sends[i].pending);
    /* UCX reads an iovec list (more than one piece; one goes as a plain
     * buffer) until the send is done: it must still say the same. */
    struct fake_send *s = &fw.sends[i];
    if (s->iovcnt > 1) {
        size_t off = 0; /* what the record holds of it: its start */
        for (int k = 0; k < s->iovcnt && off < s->data_len; k++) {
            size_t n = s->iov[k].iov_len;
            if (n > s->data_len - off) n = s->data_len - off;
            assert(memcmp(s->data + off, s->iov[k].iov_base, n) == 0);
            off += n;
        }
        assert(off == s->data_len);
    }
    fw.sends[i].pending = false;
    fw.sends[i].op->cb.done(fw.sends[i].op->user, status);
}

int uxw_am_recv(uxw_worker_t *w, void *desc, void *buf, size_t len,
                const uxw_op_t *op)
{
    (void)w;
    assert(fw.nrecvs < FAKE_MAX_OPS);
    struct fake_recv *r = &fw.recvs[fw.nrecvs++];
    r->desc = desc;
    r->buf = buf;
    r->len = len;
    r->op = op;
    r->pending = fw.recv_result == UXW_PENDING;
    if (!r->pending) memcpy(buf, desc, len); /* desc is the data here */
    if (r->pending && fw.end_inside)
        fake_recv_complete(fw.nrecvs - 1, desc, fw.end_status);
    return fw.recv_result;
}

void fake_recv_complete(int i, const void *src, int status)
{
    struct fake_recv *r = &fw.recvs[i];
    assert(i < fw.nrecvs && r->pending);
    r->pending = false;
    if (!status && src) memcpy(r->buf, src, r->len);
    r->op->cb.recv(r->op->user, status, status ? 0 : r->len);
}

void uxw_am_release(uxw_worker_t *w, void *data)
{
    (void)w;
    fw.released = data;
    fw.releases++;
}

int fake_am(unsigned id, const void *hdr, size_t hdr_len, void *data,
            size_t len, unsigned flags)
{
    return fw.am_cb(fw.am_arg, id, hdr, hdr_len, data, len, flags);
}

void fake_ep_error(uxw_ep_t *ep, int status)
{
    fw.err_cb(fw.err_arg, ep, status);
}

/* The "packed key": FAKEKEY, then bytes up to fw.key_len. */
static const char fake_key[] = "FAKEKEY";

int uxw_mem_map(uxw_worker_t *w, void *addr, size_t len, void *key,
                size_t *key_len, uxw_mem_t **mem_p)
{
    (void)w;
    assert(addr && len);
    if (fw.map_result) return fw.map_result;
    if (fw.key_len > *key_len) {
        *key_len = fw.key_len;
        return UXW_ERR_KEY_TOO_LONG;
    }
    memset(key, 'k', fw.key_len);
    memcpy(key, fake_key, sizeof(fake_key) - 1);
    *key_len = fw.key_len;
    *mem_p = malloc(1);
    fw.maps++;
    return 0;
}

void uxw_mem_unmap(uxw_worker_t *w, uxw_mem_t *mem)
{
    (void)w;
    free(mem);
    fw.maps--;
}

int uxw_rkey_unpack(uxw_ep_t *ep, const void *key, uxw_rkey_t **rkey_p)
{
    (void)ep;
    if (memcmp(key, fake_key, sizeof(fake_key) - 1)) return -5; /* INVALID_PARAM */
    *rkey_p = malloc(1);
    fw.rkeys++;
    return 0;
}

void uxw_rkey_destroy(uxw_rkey_t *rkey)
{
    free(rkey);
    fw.rkeys--;
}

static int rma_op(char kind, uxw_ep_t *ep, void *buf, size_t len,
                  uint64_t raddr, uxw_rkey_t *rkey, int result,
                  const uxw_op_t *op)
{
    assert(fw.nrmas < FAKE_MAX_OPS);
    struct fake_rma *r = &fw.rmas[fw.nrmas++];
    *r = (struct fake_rma){.kind = kind, .ep = ep, .buf = buf, .len = len,
                           .raddr = raddr, .rkey = rkey, .op = op,
                           .pending = result == UXW_PENDING};
    /* A put's bytes travel now; a get's arrive when it completes. */
    if (kind == 'p' && result >= 0) memcpy((void *)(uintptr_t)raddr, buf, len);
    if (kind == 'g' && result == UXW_OK)
        memcpy(buf, (void *)(uintptr_t)raddr, len);
    if (r->pending && fw.end_inside)
        fake_rma_complete(fw.nrmas - 1, fw.end_status);
    return result;
}

int uxw_put(uxw_ep_t *ep, const void *src, size_t len, uint64_t raddr,
            uxw_rkey_t *rkey, const uxw_op_t *op)
{
    assert(rkey);
    return rma_op('p', ep, (void *)src, len, raddr, rkey, fw.put_result, op);
}

int uxw_get(uxw_ep_t *ep, void *dst, size_t len, uint64_t raddr,
            uxw_rkey_t *rkey, const uxw_op_t *op)
{
    assert(rkey);
    return rma_op('g', ep, dst, len, raddr, rkey, fw.get_result, op);
}

int uxw_ep_flush(uxw_ep_t *ep, const uxw_op_t *op)
{
    return rma_op('f', ep, NULL, 0, 0, NULL, fw.flush_result, op);
}

void fake_rma_complete(int i, int status)
{
    struct fake_rma *r = &fw.rmas[i];
    assert(i < fw.nrmas && r->pending);
    r->pending = false;
    if (r->kind == 'g' && !status)
        memcpy(r->buf, (void *)(uintptr_t)r->raddr, r->len);
    r->op->cb.done(r->op->user, status);
}

int uxw_status_errno(int status)
{
    if (uxw_status_is_peer_gone(status)) return -ECONNRESET;
    if (status == -16) return -ECANCELED; /* UCS_ERR_CANCELED */
    return -EIO;
}

const char *uxw_status_str(int status)
{
    return status ? "Fake error" : "Success";
}

int uxw_status_is_peer_gone(int status)
{
    return status == -25; /* UCS_ERR_CONNECTION_RESET */
}

const char *uxw_version(void)
{
    return "fake";
}
