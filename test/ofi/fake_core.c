/*
 * A fake core for the ofi plugin's unit tests: the connection services of
 * pscom_plugin.h over a tiny send queue of frames and a receive side that
 * records the byte stream and, like the real core, offers the user's buffer
 * for the body of rendezvous data (message type 3) through rx_direct. The
 * rest comes from test/fake_core.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "fake.h"

/* ---------------------------------------------------------------------- */
/* Connections                                                            */

static unsigned long event_seq;

void fake_con_init(struct psc_con *c, const char *name, void *priv)
{
    memset(c, 0, sizeof(*c));
    c->name = name;
    c->priv = priv;
    c->hneed = 8;
    c->peer_pid = getpid();
}

void fake_con_free(struct psc_con *c)
{
    for (unsigned i = 0; i < c->qn; i++) {
        free(c->q[i]->body);
        free(c->q[i]);
    }
    for (unsigned i = 0; i < c->ncanceled; i++) {
        free(c->canceled[i]->body);
        free(c->canceled[i]);
    }
    free(c->rx);
    free(c->direct_buf);
}

static uint8_t pat(uint32_t seed, size_t i)
{
    return (uint8_t)((seed * 2654435761u) >> 24 ^ (i * 131 + (i >> 8)));
}

struct fake_frame *fake_frame_new(uint8_t type, size_t xl, size_t bl,
                                  uint32_t seed)
{
    struct fake_frame *f = calloc(1, sizeof(*f));
    pscom_header_net_t h = {.xheader_len = (uint16_t)xl, .msg_type = type,
                            .data_len = bl};
    memcpy(f->head, &h, 8);
    for (size_t i = 0; i < xl; i++) f->head[8 + i] = pat(seed + 1, i);
    f->hl = 8 + xl;
    f->bl = bl;
    if (bl) {
        f->body = malloc(bl);
        for (size_t i = 0; i < bl; i++) f->body[i] = pat(seed, i);
    }
    return f;
}

void fake_enqueue(struct psc_con *c, struct fake_frame *f)
{
    if (c->qn == FAKE_MAX_FRAMES) abort();
    c->q[c->qn++] = f;
}

void fake_cancel(struct psc_con *c, unsigned i)
{
    if (i < c->qdone || i >= c->qn) abort();
    struct fake_frame *f = c->q[i];
    memmove(&c->q[i], &c->q[i + 1], (c->qn - i - 1) * sizeof(c->q[0]));
    c->qn--;
    c->q[FAKE_MAX_FRAMES - 1] = NULL;
    /* kept for the test's expectations; freed with the connection */
    c->canceled[c->ncanceled++] = f;
}

size_t fake_frame_bytes(const struct fake_frame *f, uint8_t *buf)
{
    memcpy(buf, f->head, f->hl);
    if (f->bl) memcpy(buf + f->hl, f->body, f->bl);
    return f->hl + f->bl;
}

int pscom_plugin_tx_peek(pscom_plugin_con_t *c, struct iovec *iov, int iov_max,
                         size_t *total)
{
    int n = 0;
    size_t sum = 0, skip = c->partial;
    for (unsigned i = c->qdone; i < c->qn; i++) {
        struct fake_frame *f = c->q[i];
        if (fake_core_frame_iov(iov, &n, iov_max, f->head, f->hl, f->body,
                                f->bl, &skip, &sum) < 0)
            break;
    }
    *total = sum;
    return n;
}

int pscom_plugin_tx_done(pscom_plugin_con_t *c, size_t n)
{
    c->tx_done_calls++;
    c->tx_done_bytes += n;
    c->tx_done_evt = ++event_seq;
    while (n) {
        if (c->qdone == c->qn) {
            fprintf(stderr, "fake core: tx_done beyond the queue\n");
            abort();
        }
        struct fake_frame *f = c->q[c->qdone];
        size_t left = f->hl + f->bl - c->partial;
        if (n < left) {
            c->partial += n;
            n = 0;
        } else {
            n -= left;
            c->partial = 0;
            c->qdone++;
        }
    }
    if (c->close_on_tx_done) c->failed = 1; /* the core dropped its queue */
    return c->failed ? -1 : 0;
}

/* The token is the connection: tests look at its counts. */
void *pscom_plugin_tx_lend(pscom_plugin_con_t *c, const void *head)
{
    for (unsigned i = c->qdone; i < c->qn; i++)
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
    return !c->failed && c->qdone < c->qn;
}

static void rx_append(struct psc_con *c, const void *p, size_t n)
{
    if (c->rx_len + n > c->rx_cap) {
        c->rx_cap = (c->rx_len + n) * 2;
        c->rx = realloc(c->rx, c->rx_cap);
    }
    memcpy(c->rx + c->rx_len, p, n);
    c->rx_len += n;
}

/* One frame header is complete: where its body goes. */
static void head_done(struct psc_con *c)
{
    pscom_header_net_t h;
    memcpy(&h, c->hb, 8);
    c->hhave = 0;
    c->hneed = 8;
    if (!h.data_len) {
        c->frames_in++;
        c->frame_evt = ++event_seq;
        return;
    }
    c->in_body = 1;
    c->body_left = h.data_len;
    c->body_direct = c->direct_enabled && h.msg_type == 3;
    if (c->body_direct) {
        free(c->direct_buf);
        c->direct_buf = malloc(h.data_len);
        c->direct_len = h.data_len;
        c->direct_off = 0;
    }
}

int pscom_plugin_rx_push(pscom_plugin_con_t *c, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    if (c->failed) return -1;
    if (c->on_push) c->on_push(c);
    rx_append(c, buf, len);
    while (len) {
        if (c->in_body) {
            size_t take = len < c->body_left ? len : (size_t)c->body_left;
            if (c->body_direct) {
                memcpy(c->direct_buf + c->direct_off, p, take);
                c->direct_off += take;
            }
            c->body_left -= take;
            p += take;
            len -= take;
            if (!c->body_left) {
                c->in_body = 0;
                c->frames_in++;
                c->frame_evt = ++event_seq;
            }
            continue;
        }
        if (!fake_core_collect(c->hb, &c->hhave, c->hneed, &p, &len)) continue;
        if (c->hneed == 8) {
            pscom_header_net_t h;
            memcpy(&h, c->hb, 8);
            c->hneed = 8 + h.xheader_len;
            if (c->hhave < c->hneed) continue;
        }
        head_done(c);
    }
    return c->failed ? -1 : 0;
}

size_t pscom_plugin_rx_direct(pscom_plugin_con_t *c, void **buf)
{
    if (c->failed || !c->in_body || !c->body_direct) return 0;
    *buf = c->direct_buf + c->direct_off;
    return (size_t)c->body_left;
}

int pscom_plugin_rx_direct_done(pscom_plugin_con_t *c, size_t n)
{
    rx_append(c, c->direct_buf + c->direct_off, n);
    c->direct_off += n;
    c->direct_bytes += n;
    c->body_left -= n;
    if (!c->body_left) {
        c->in_body = 0;
        c->frames_in++;
        c->frame_evt = ++event_seq;
    }
    return c->failed ? -1 : 0;
}

void pscom_plugin_con_error(pscom_plugin_con_t *c, pscom_op_t op,
                            pscom_err_t err, const char *what, int sys_errno)
{
    c->errors++;
    c->failed = 1;
    c->err_op = op;
    c->err = err;
    pscom_plugin_log(1, "fake core: con_error %s: %s (%d)", c->name, what,
                     sys_errno);
}

pscom_socket_t *pscom_plugin_con_socket(pscom_plugin_con_t *c)
{
    return NULL;
}

const char *pscom_plugin_con_str(pscom_plugin_con_t *c)
{
    return c->name;
}

pid_t pscom_plugin_con_peer_pid(pscom_plugin_con_t *c)
{
    return c->peer_pid;
}
