/*
 * A fake UCX layer for the ucx plugin's unit tests (see fake.h).
 */
#include <assert.h>
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
}

int uxw_context_create(const uxw_config_t *cfg, uxw_context_t **ctx_p,
                       char *why, size_t why_len)
{
    (void)cfg;
    (void)why;
    (void)why_len;
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
    return 0;
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

int uxw_ep_close(uxw_worker_t *w, uxw_ep_t *ep, int force, uxw_done_cb_t cb,
                 void *user)
{
    (void)w;
    (void)ep;
    fw.ep_closes++;
    fw.ep_close_force += force != 0;
    if (force && fw.force_close_status)
        for (int i = 0; i < fw.nrecvs; i++)
            if (fw.recvs[i].pending)
                fake_recv_complete(i, NULL, fw.force_close_status);
    if (fw.close_result == UXW_PENDING) {
        fw.close_cb = cb;
        fw.close_user = user;
    }
    return fw.close_result;
}

int uxw_am_send(uxw_ep_t *ep, unsigned id, const void *hdr, size_t hdr_len,
                const struct iovec *iov, int iovcnt, int eager,
                uxw_done_cb_t cb, void *user)
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
    s->iovcnt = iovcnt;
    s->eager = eager;
    s->cb = cb;
    s->user = user;
    s->pending = fw.send_result == UXW_PENDING;
    return fw.send_result;
}

void fake_send_complete(int i, int status)
{
    assert(i < fw.nsends && fw.sends[i].pending);
    fw.sends[i].pending = false;
    fw.sends[i].cb(fw.sends[i].user, status);
}

int uxw_am_recv(uxw_worker_t *w, void *desc, void *buf, size_t len,
                uxw_recv_cb_t cb, void *user)
{
    (void)w;
    assert(fw.nrecvs < FAKE_MAX_OPS);
    struct fake_recv *r = &fw.recvs[fw.nrecvs++];
    r->desc = desc;
    r->buf = buf;
    r->len = len;
    r->cb = cb;
    r->user = user;
    r->pending = fw.recv_result == UXW_PENDING;
    if (!r->pending) memcpy(buf, desc, len); /* desc is the data here */
    return fw.recv_result;
}

void fake_recv_complete(int i, const void *src, int status)
{
    struct fake_recv *r = &fw.recvs[i];
    assert(i < fw.nrecvs && r->pending);
    r->pending = false;
    if (!status && src) memcpy(r->buf, src, r->len);
    r->cb(r->user, status, status ? 0 : r->len);
}

void uxw_am_release(uxw_worker_t *w, void *data)
{
    (void)w;
    (void)data;
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
