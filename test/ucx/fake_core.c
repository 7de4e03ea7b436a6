/*
 * The connection services of pscom_plugin.h, faked for the ucx plugin's unit
 * tests (see fake.h): one send queue per connection, a receive state
 * machine that splits what the plugin delivers into messages, and records of
 * errors and file descriptors. The rest comes from test/fake_core.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake.h"

static pscom_socket_t *the_socket = (pscom_socket_t *)0x1000;
pscom_socket_t *fake_socket;

struct fake_rma_done fake_done[FAKE_MAX_DONE];
int fake_ndone;
struct psc_con *fake_done_con;
void (*fake_done_hook)(void *token, int err);

void pscom_plugin_rma_done(void *token, int err)
{
    assert(fake_ndone < FAKE_MAX_DONE);
    fake_done[fake_ndone++] = (struct fake_rma_done){
        .token = token, .err = err,
        .con_errors = fake_done_con ? fake_done_con->errors : 0};
    if (fake_done_hook) fake_done_hook(token, err);
}

void fake_con_init(struct psc_con *c)
{
    memset(c, 0, sizeof(*c));
    c->need = sizeof(pscom_header_net_t);
    fake_socket = the_socket;
}

size_t fake_head(uint8_t *out, size_t xlen, uint64_t data_len, uint8_t fill)
{
    pscom_header_net_t h = {.xheader_len = (uint16_t)xlen, .msg_type = 0,
                            .data_len = data_len};
    memcpy(out, &h, sizeof(h));
    memset(out + sizeof(h), fill, xlen);
    return sizeof(h) + xlen;
}

struct fake_frame *fake_queue(struct psc_con *c, size_t xlen, void *body,
                              size_t body_len)
{
    assert(c->qn < FAKE_MAX_FRAMES);
    struct fake_frame *f = malloc(sizeof(*f));
    assert(f);
    c->q[c->qn++] = f;
    f->head_len = fake_head(f->head, xlen, body_len, (uint8_t)(0x40 + c->qn));
    f->body = body;
    f->body_len = body_len;
    f->left = f->head_len + body_len;
    return f;
}

void fake_unqueue(struct psc_con *c, int i)
{
    free(c->q[i]);
    memmove(&c->q[i], &c->q[i + 1], (c->qn - i - 1) * sizeof(c->q[0]));
    c->qn--;
}

int pscom_plugin_tx_peek(pscom_plugin_con_t *c, struct iovec *iov, int iov_max,
                         size_t *total)
{
    int n = 0;
    size_t sum = 0;
    for (int i = 0; i < c->qn; i++) {
        struct fake_frame *f = c->q[i];
        size_t skip = f->head_len + f->body_len - f->left;
        if (fake_core_frame_iov(iov, &n, iov_max, f->head, f->head_len,
                                f->body, f->body_len, &skip, &sum) < 0)
            break;
    }
    *total = sum;
    return n;
}

int pscom_plugin_tx_done(pscom_plugin_con_t *c, size_t n)
{
    assert(c->ndone < FAKE_MAX_FRAMES * 2);
    c->done_calls[c->ndone++] = n;
    while (n) {
        assert(c->qn > 0); /* more bytes reported than queued */
        struct fake_frame *f = c->q[0];
        size_t take = n < f->left ? n : f->left;
        f->left -= take;
        n -= take;
        if (!f->left) fake_unqueue(c, 0);
    }
    return c->closing ? -1 : 0;
}

/* The token is the connection: tests look at its counts. */
void *pscom_plugin_tx_lend(pscom_plugin_con_t *c, const void *head)
{
    for (int i = 0; i < c->qn; i++)
        if (c->q[i]->head == head) {
            c->lent++;
            return c;
        }
    return NULL;
}

void pscom_plugin_tx_returned(void *token)
{
    struct psc_con *c = token;
    c->returned++;
}

int pscom_plugin_tx_pending(pscom_plugin_con_t *c)
{
    return c->qn > 0;
}

static void msg_done(struct psc_con *c)
{
    c->nmsgs++;
    c->in_body = false;
    c->have = 0;
    c->need = sizeof(pscom_header_net_t);
}

int pscom_plugin_rx_push(pscom_plugin_con_t *c, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    if (c->closing) return -1;
    while (len) {
        assert(c->nmsgs < FAKE_MAX_MSGS);
        struct fake_msg *m = &c->msgs[c->nmsgs];
        if (c->in_body) {
            size_t take = len < c->body_left ? len : c->body_left;
            size_t room = sizeof(m->body) - m->body_len;
            memcpy(m->body + m->body_len, p, take < room ? take : room);
            m->body_len += take;
            c->body_left -= take;
            p += take;
            len -= take;
            if (!c->body_left) msg_done(c);
            continue;
        }
        if (!fake_core_collect(c->hbuf, &c->have, c->need, &p, &len)) continue;
        pscom_header_net_t h;
        memcpy(&h, c->hbuf, sizeof(h));
        if (c->need == sizeof(h) && h.xheader_len) {
            c->need += h.xheader_len;
            continue;
        }
        memset(m, 0, sizeof(*m));
        memcpy(m->head, c->hbuf,
               c->have < sizeof(m->head) ? c->have : sizeof(m->head));
        m->head_len = c->have;
        c->body_left = h.data_len;
        if (!c->body_left) msg_done(c);
        else c->in_body = true;
    }
    return c->closing ? -1 : 0;
}

int pscom_plugin_rx_now(pscom_plugin_con_t *c, const void *head,
                        size_t head_len, const void *body, size_t body_len)
{
    pscom_header_net_t h;
    /* The core reads the header in place. */
    assert((uintptr_t)head % _Alignof(pscom_header_net_t) == 0);
    if (!c->take_now || c->closing || c->in_body || c->have ||
        head_len < sizeof(h))
        return 0;
    memcpy(&h, head, sizeof(h));
    /* One whole message. */
    assert(head_len == sizeof(h) + h.xheader_len);
    assert(body_len == h.data_len);
    assert(c->nmsgs < FAKE_MAX_MSGS);
    struct fake_msg *m = &c->msgs[c->nmsgs++];
    memset(m, 0, sizeof(*m));
    memcpy(m->head, head,
           head_len < sizeof(m->head) ? head_len : sizeof(m->head));
    m->head_len = head_len;
    memcpy(m->body, body, body_len < sizeof(m->body) ? body_len
                                                     : sizeof(m->body));
    m->body_len = body_len;
    m->now = true;
    return 1;
}

size_t pscom_plugin_rx_direct(pscom_plugin_con_t *c, void **buf)
{
    if (!c->in_body || !c->direct_buf || !c->direct_len) return 0;
    *buf = c->direct_buf;
    return c->direct_len < c->body_left ? c->direct_len : c->body_left;
}

int pscom_plugin_rx_direct_done(pscom_plugin_con_t *c, size_t n)
{
    struct fake_msg *m = &c->msgs[c->nmsgs];
    assert(c->in_body && n <= c->body_left && n <= c->direct_len);
    size_t room = sizeof(m->body) - m->body_len;
    memcpy(m->body + m->body_len, c->direct_buf, n < room ? n : room);
    m->body_len += n;
    m->direct += n;
    c->direct_buf = (char *)c->direct_buf + n;
    c->direct_len -= n;
    c->body_left -= n;
    if (!c->body_left) msg_done(c);
    return c->closing ? -1 : 0;
}

void *pscom_plugin_rx_defer(pscom_plugin_con_t *c, void **buf, size_t *len)
{
    struct fake_msg *m = &c->msgs[c->nmsgs];
    if (c->closing || !c->defer || !c->in_body || m->body_len ||
        !c->direct_buf || c->direct_len < c->body_left)
        return NULL;
    m->deferred = true;
    m->defer_buf = c->direct_buf;
    m->defer_len = c->body_left;
    *buf = c->direct_buf;
    *len = c->body_left;
    c->direct_buf = (char *)c->direct_buf + c->body_left;
    c->direct_len -= c->body_left;
    c->body_left = 0;
    int idx = c->nmsgs;
    msg_done(c);
    return (void *)(uintptr_t)(idx + 1);
}

int pscom_plugin_rx_defer_done(pscom_plugin_con_t *c, void *handle, int err)
{
    int idx = (int)(uintptr_t)handle - 1;
    assert(idx >= 0 && idx < c->nmsgs);
    struct fake_msg *m = &c->msgs[idx];
    assert(m->deferred && !m->defer_done); /* once per handle */
    m->defer_done = true;
    m->defer_err = err;
    if (!err) {
        size_t n = m->defer_len < sizeof(m->body) ? m->defer_len : sizeof(m->body);
        memcpy(m->body, m->defer_buf, n);
        m->body_len = m->defer_len;
        m->direct = m->defer_len;
    }
    c->defer_order[c->ndefer_done++] = idx;
    return c->closing ? -1 : 0;
}

void pscom_plugin_con_error(pscom_plugin_con_t *c, pscom_op_t op,
                            pscom_err_t err, const char *what, int sys_errno)
{
    (void)sys_errno;
    c->errors++;
    c->err_op = op;
    c->err = err;
    snprintf(c->err_what, sizeof(c->err_what), "%s", what);
}

pscom_socket_t *pscom_plugin_con_socket(pscom_plugin_con_t *c)
{
    (void)c;
    return the_socket;
}

const char *pscom_plugin_con_str(pscom_plugin_con_t *c)
{
    (void)c;
    return "fake connection";
}

/* The one fd watch of the last connection that asked (enough here). */
static struct psc_con *fd_owner;

int pscom_plugin_fd_add(int fd, uint32_t events, int hot,
                        pscom_plugin_fd_cb_t cb, void *arg)
{
    (void)events;
    (void)hot;
    /* The plugin's arg is its connection state; remember the callback on
     * the connection that is being opened (set by the test). */
    if (fd_owner) {
        fd_owner->fd = fd;
        fd_owner->fd_added++;
        fd_owner->fd_cb = cb;
        fd_owner->fd_arg = arg;
    }
    return 0;
}

void pscom_plugin_fd_del(int fd)
{
    (void)fd;
    if (fd_owner) fd_owner->fd_added--;
}

void fake_fd_owner(struct psc_con *c);
void fake_fd_owner(struct psc_con *c)
{
    fd_owner = c;
}
