/*
 * The message protocol on an established connection: framing of sends,
 * the receive state machine, eager and rendezvous transfers.
 *
 * Every message is a pscom_header_net_t, an extended header and a body.
 * Eager messages carry the user's xheader and data. A send of at least the
 * connection's rendezvous threshold first announces itself (RNDV_REQ: the
 * user's xheader with a psc_rndv_info trailer); once a receive has matched
 * the announcement, the receiver answers RNDV_CTS and the sender writes the
 * body as RNDV_DATA straight into the receiver's buffer. Announcements are
 * matched in arrival order, so matching order is the sending order also
 * when eager and rendezvous messages mix.
 *
 * A message plugin may take a RNDV_DATA body out of line
 * (pscom_plugin_rx_defer): its receive waits on con->rx_deferq while the
 * messages behind it are handled, so that several bodies move at once and
 * complete in any order. An EOF that arrives meanwhile waits for them.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../../plugins/copy_small.h"
#include "core.h"

_Static_assert(sizeof(pscom_header_net_t) == 8, "network header is 8 bytes");
_Static_assert(offsetof(pscom_request_t, xheader) ==
                   offsetof(pscom_request_t, header) + sizeof(pscom_header_net_t),
               "the xheader must follow the header in a request");

/* Fill a header. On little-endian machines in one 8-byte store: the
 * plugins read a header whole right after (tx_now), and a load that spans
 * several stores still in flight waits until they are written (the field
 * stores are seven: the bit field goes byte by byte). Every message
 * checks the layout: its receiver reads the fields. */
static void set_header(pscom_header_net_t *h, uint8_t type, size_t xlen,
                       uint64_t data_len)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint64_t w = (uint64_t)(uint16_t)xlen | (uint64_t)type << 16 |
                 data_len << 24;
    memcpy(h, &w, sizeof(w));
#else
    h->xheader_len = (uint16_t)xlen;
    h->msg_type = type;
    h->data_len = data_len;
#endif
}

int psc_header_check(const pscom_header_net_t *hdr, const char **why)
{
    switch (hdr->msg_type) {
    case PSC_MSG_USER:
        return 0;
    case PSC_MSG_RNDV_REQ:
        if (hdr->xheader_len < sizeof(struct psc_rndv_info) || hdr->data_len) {
            *why = "rendezvous announcement with a bad length";
            return -1;
        }
        return 0;
    case PSC_MSG_RNDV_CTS:
        if (hdr->xheader_len != sizeof(struct psc_rndv_cts) || hdr->data_len) {
            *why = "rendezvous clear-to-send with a bad length";
            return -1;
        }
        return 0;
    case PSC_MSG_RNDV_DATA:
        if (hdr->xheader_len != sizeof(struct psc_rndv_data_hdr)) {
            *why = "rendezvous data with a bad header length";
            return -1;
        }
        return 0;
    case PSC_MSG_RNDV_FIN:
        if (hdr->xheader_len != sizeof(struct psc_rndv_fin) || hdr->data_len) {
            *why = "rendezvous completion with a bad length";
            return -1;
        }
        return 0;
    case PSC_MSG_EOF:
        if (hdr->xheader_len || hdr->data_len) {
            *why = "end-of-connection message with a body";
            return -1;
        }
        return 0;
    case PSC_MSG_RMA_PUT ... PSC_MSG_RMA_READ:
    case PSC_MSG_RMA_PUT_DONE:
    case PSC_MSG_RMA_GET_DONE:
        return psc_rma_header_check(hdr, why);
    case PSC_MSG_BCAST:
    case PSC_MSG_BARRIER:
        return psc_group_header_check(hdr, why);
    default:
        *why = "unknown message type";
        return -1;
    }
}

/* ---------------------------------------------------------------------- */
/* Send side                                                              */
/* ---------------------------------------------------------------------- */

static void frame_init(struct psc_req *req, enum psc_frame frame, void *head,
                       size_t head_len, void *body, size_t body_len)
{
    req->frame = frame;
    req->iov[0].iov_base = head;
    req->iov[0].iov_len = head_len;
    req->iov[1].iov_base = body;
    req->iov[1].iov_len = body_len;
    req->tx_left = head_len + body_len;
}

static void send_control(struct psc_con *con, uint8_t type, const void *x,
                         size_t xlen)
{
    /* Nothing follows our EOF (a rendezvous answered during the close):
     * the peer takes the EOF for the end. */
    if (con->eof_sent) return;
    struct psc_req *req = psc_req_alloc(0, 0);
    if (!req) {
        psc_err("%s: out of memory for a control message; the connection "
                "cannot go on", psc_con_str(con));
        psc_con_fail(con, PSCOM_OP_WRITE, PSCOM_ERR_STDERROR);
        return;
    }
    req->kind = PSC_REQ_CONTROL;
    set_header((pscom_header_net_t *)req->ctrl, type, xlen, 0);
    if (xlen) memcpy(req->ctrl + PSC_HDR_LEN, x, xlen);
    frame_init(req, PSC_FRAME_CONTROL, req->ctrl, PSC_HDR_LEN + xlen, NULL, 0);
    psc_con_enqueue(con, req);
}

void psc_proto_send_eof(struct psc_con *con)
{
    send_control(con, PSC_MSG_EOF, NULL, 0);
}

/* psc_con_enqueue's first step for an eager message (its header set),
 * without setting up the frame in the request: when the plugin takes it
 * at once (psc_con_tx_now) it is sent, and done. Else it is for the queue
 * (psc_con_queue). Only inside psc_enter (pscom_post_send), so that a
 * connection its completion closes stays until the call returns. */
static bool eager_now(struct psc_con *con, struct psc_req *req)
{
    pscom_request_t *r = &req->pub;
    const struct iovec iov[2] = {
        {.iov_base = &r->header, .iov_len = PSC_HDR_LEN + r->xheader_len},
        {.iov_base = r->data, .iov_len = r->data_len},
    };
    if (!psc_con_tx_now(con, iov, r->data_len ? 2 : 1)) return false;
    psc_req_done(req, PSCOM_REQ_STATE_IO_STARTED);
    return true;
}

void psc_proto_send(struct psc_con *con, struct psc_req *req)
{
    pscom_request_t *r = &req->pub;

    req->rndv_described = false; /* a request posted again */

    if (psc_con_sends_over(con)) {
        psc_debug("send on %s refused: the connection is %s",
                  psc_con_str(con), con->failed ? "broken" : "closing");
        psc_req_done(req, PSCOM_REQ_STATE_ERROR);
        return;
    }
    if (con->ondemand && !con->precon) {
        psc_ondemand_connect(con);
        if (con->failed) {
            psc_req_done(req, PSCOM_REQ_STATE_ERROR);
            return;
        }
    }
    con->stats.tx_msgs++;
    con->stats.tx_bytes += r->data_len;
    if (r->data_len < con->rndv_threshold) {
        set_header(&r->header, PSC_MSG_USER, r->xheader_len, r->data_len);
        if (eager_now(con, req)) return;
        frame_init(req, PSC_FRAME_EAGER, &r->header,
                   PSC_HDR_LEN + r->xheader_len, r->data, r->data_len);
        psc_con_queue(con, req); /* tx_now was asked already */
        return;
    }
    con->stats.tx_rndv++;
    struct psc_rndv_info info = {.sender_id = ++psc_ctx.next_id,
                                 .data_len = r->data_len};
    char *x = (char *)&r->xheader + r->xheader_len;
    const pscom_plugin_ops_t *ops =
        con->plugin_open ? con->plugin->desc->ops : NULL;
    if (ops && ops->rndv_describe) {
        size_t n = ops->rndv_describe(con, con->plugin_priv, r->data,
                                      r->data_len, x);
        info.blob_len = n <= PSC_RNDV_BLOB_MAX ? (uint32_t)n : 0;
        req->rndv_described = info.blob_len > 0;
    }
    req->id = info.sender_id;
    req->rndv_answer = 0;
    memcpy(x + info.blob_len, &info, sizeof(info));
    size_t xlen = r->xheader_len + info.blob_len + sizeof(info);
    set_header(&r->header, PSC_MSG_RNDV_REQ, xlen, 0);
    psc_req_state_add(req, PSCOM_REQ_STATE_RENDEZVOUS_REQUEST);
    frame_init(req, PSC_FRAME_RNDV_REQ, &r->header, PSC_HDR_LEN + xlen,
               NULL, 0);
    psc_con_enqueue(con, req);
}

static void rndv_send_data(struct psc_con *con, struct psc_req *req,
                           uint64_t receiver_id);

void psc_proto_frame_sent(struct psc_con *con, struct psc_req *req)
{
    switch (req->frame) {
    case PSC_FRAME_RNDV_REQ:
        /* The receiver may have answered already (rx_rndv_answered). */
        if (req->rndv_answer == PSC_MSG_RNDV_CTS)
            rndv_send_data(con, req, req->rndv_receiver_id);
        else if (req->rndv_answer == PSC_MSG_RNDV_FIN)
            psc_req_done(req, 0);
        else
            psc_list_add_tail(&req->next, &con->rndv_sendq);
        break;
    case PSC_FRAME_CONTROL:
        psc_req_release(req);
        break;
    default:
        psc_req_done(req, 0);
        break;
    }
}

int pscom_plugin_tx_pending(pscom_plugin_con_t *con)
{
    return !psc_list_empty(&con->sendq);
}

int pscom_plugin_tx_peek(pscom_plugin_con_t *con, struct iovec *iov,
                         int iov_max, size_t *total)
{
    int n = 0;
    size_t sum = 0;
    struct psc_list *pos;

    psc_list_for_each(pos, &con->sendq) {
        struct psc_req *req = psc_list_entry(pos, struct psc_req, next);
        /* Waits for a plugin's one-sided operation; order is kept. */
        if (req->tx_hold) break;
        size_t skip = req->iov[0].iov_len + req->iov[1].iov_len - req->tx_left;
        for (int i = 0; i < 2; i++) {
            size_t len = req->iov[i].iov_len;
            if (skip >= len) {
                skip -= len;
                continue;
            }
            if (n == iov_max) goto out;
            /* Handed to the transport: no cancel from here on. A frame
             * that did not fit stays cancellable. */
            if (!(req->pub.state & PSCOM_REQ_STATE_IO_STARTED))
                psc_req_state_add(req, PSCOM_REQ_STATE_IO_STARTED);
            iov[n].iov_base = (char *)req->iov[i].iov_base + skip;
            iov[n].iov_len = len - skip;
            sum += len - skip;
            skip = 0;
            n++;
        }
    }
out:
    *total = sum;
    return n;
}

int pscom_plugin_tx_done(pscom_plugin_con_t *con, size_t n)
{
    struct psc_list sent;
    psc_list_init(&sent);

    /* Update the queue first: completions may run application code that
     * posts more sends on this connection. */
    while (n) {
        struct psc_req *req = psc_list_first(&con->sendq, struct psc_req, next);
        if (!req) {
            psc_err("%s: the transport reports more bytes written than were "
                    "queued", psc_con_str(con));
            break;
        }
        size_t take = n < req->tx_left ? n : req->tx_left;
        if (!(req->pub.state & PSCOM_REQ_STATE_IO_STARTED))
            psc_req_state_add(req, PSCOM_REQ_STATE_IO_STARTED);
        req->tx_left -= take;
        n -= take;
        if (req->tx_left) break;
        psc_list_del(&req->next);
        psc_list_add_tail(&req->next, &sent);
    }
    while (!psc_list_empty(&sent)) {
        struct psc_req *req = psc_list_first(&sent, struct psc_req, next);
        psc_list_del(&req->next);
        psc_proto_frame_sent(con, req);
    }
    return con->failed || con->zombie ? -1 : 0;
}

/* ---------------------------------------------------------------------- */
/* Receive side                                                           */
/* ---------------------------------------------------------------------- */

void psc_rx_init(struct psc_rx *rx)
{
    if (rx->hbuf && rx->hbuf != rx->hinline) free(rx->hbuf);
    memset(rx, 0, offsetof(struct psc_rx, hinline));
    rx->hbuf = rx->hinline;
    rx->hcap = sizeof(rx->hinline);
    rx->phase = PSC_RX_HEADER;
    rx->need = PSC_HDR_LEN;
}

static void rx_next_message(struct psc_rx *rx)
{
    rx->phase = PSC_RX_HEADER;
    rx->have = 0;
    rx->need = PSC_HDR_LEN;
    rx->req = NULL;
    rx->left = 0;
    rx->dst = NULL;
    rx->dst_left = 0;
    rx->truncated = false;
    rx->defer_ok = false;
}

/* A protocol violation: the peer is broken or not a pscom peer. */
static int rx_protocol_error(struct psc_con *con, const char *why)
{
    psc_err("%s: received a malformed message (%s); closing the "
            "connection", psc_con_str(con), why);
    psc_con_fail(con, PSCOM_OP_READ, PSCOM_ERR_IOERROR);
    return -1;
}

/* Where a request's xheader goes: its storage runs past pscom_request_t
 * (max_xheader_len bytes, psc_req_alloc). */
static void *req_xheader(pscom_request_t *r)
{
    return (char *)r + offsetof(pscom_request_t, xheader);
}

/* Copy n bytes into a receive: inline for the few bytes of a small
 * message (a call to memcpy costs more than the copy), memcpy beyond. */
static inline void copy_in(void *dst, const void *src, size_t n)
{
    if (n <= 64)
        copy_small(dst, src, n);
    else
        memcpy(dst, src, n);
}

/* req takes the matched message: its header h (the core's own copy) and
 * the xheader at xheader are copied into req. */
static inline void accept_into(struct psc_req *req, struct psc_con *con,
                               const pscom_header_net_t *h,
                               const void *xheader)
{
    pscom_request_t *r = &req->pub;
    size_t xl = h->xheader_len;
    size_t room = r->xheader_len < r->max_xheader_len ? r->xheader_len
                                                      : r->max_xheader_len;
    r->header = *h;
    copy_in(req_xheader(r), xheader, xl < room ? xl : room);
    r->connection = &con->pub;
    psc_req_state_add(req, PSCOM_REQ_STATE_IO_STARTED);
    if (h->data_len > r->data_len)
        psc_req_state_add(req, PSCOM_REQ_STATE_TRUNCATED);
}

/* Aim the body of `total` bytes at req (user buffer, or generated buffer). */
static void rx_body_to(struct psc_rx *rx, struct psc_req *req, size_t total)
{
    rx->phase = PSC_RX_DATA;
    rx->req = req;
    rx->left = total;
    req->received = 0;
    if (req->kind == PSC_REQ_GENERATED) {
        rx->dst = req->gbuf;
        rx->dst_left = total;
    } else {
        rx->dst = req->pub.data;
        rx->dst_left = total < req->pub.data_len ? total : req->pub.data_len;
        rx->truncated = total > req->pub.data_len;
    }
}

/* Copy what fits of a body of `total` bytes into req's buffer; how much
 * that was. */
static size_t copy_fit(struct psc_req *req, const void *body, size_t total)
{
    size_t fit = total < req->pub.data_len ? total : req->pub.data_len;
    copy_in(req->pub.data, body, fit);
    return fit;
}

static int rx_body_done(struct psc_con *con)
{
    struct psc_req *req = con->rx.req;
    bool truncated = con->rx.truncated;

    rx_next_message(&con->rx);
    if (!req) return 0;
    if (req->kind == PSC_REQ_GENERATED) {
        struct psc_req *u = req->merged_into;
        if (!u) {
            req->got_all = true;
            return 0;
        }
        /* A receive took it over while it arrived: hand the body over. */
        size_t total = req->pub.header.data_len;
        u->received = copy_fit(u, req->gbuf, total);
        truncated = u->received < total;
        psc_req_release(req);
        req = u;
    }
    psc_req_done(req, truncated ? PSCOM_REQ_STATE_TRUNCATED : 0);
    return con->failed || con->zombie ? -1 : 0;
}

/* An unexpected message: keep it until a receive is posted. */
static struct psc_req *generate(struct psc_con *con,
                                const pscom_header_net_t *h,
                                const void *xheader,
                                const struct psc_rndv_info *rndv,
                                const void *blob)
{
    struct psc_req *g = psc_req_alloc(h->xheader_len, 0);
    if (g && !rndv && h->data_len) {
        g->gbuf = malloc(h->data_len);
        if (!g->gbuf) {
            psc_req_release(g);
            g = NULL;
        }
    }
    if (!g) {
        psc_err("%s: out of memory keeping an unexpected message of %llu "
                "bytes; post receives earlier or lower PSP_RENDEZVOUS; "
                "closing the connection", psc_con_str(con),
                (unsigned long long)h->data_len);
        psc_con_fail(con, PSCOM_OP_READ, PSCOM_ERR_STDERROR);
        return NULL;
    }
    con->stats.rx_unexpected++;
    g->kind = PSC_REQ_GENERATED;
    g->pub.state = PSCOM_REQ_STATE_GRECV_REQUEST | PSCOM_REQ_STATE_POSTED;
    g->pub.header = *h;
    memcpy(req_xheader(&g->pub), xheader, h->xheader_len);
    g->pub.xheader_len = h->xheader_len;
    g->pub.connection = &con->pub;
    g->pub.data_len = h->data_len;
    g->pub.data = g->gbuf;
    if (rndv) {
        g->rndv = *rndv;
        g->rndv_gen = true;
        memcpy(g->rndv_blob, blob, rndv->blob_len);
    }
    psc_genrecvq_add(con, g);
    return g;
}

/* The receive that takes a user message: default_recv, then posted. */
static struct psc_req *find_receiver(struct psc_con *con,
                                     pscom_header_net_t *hdr)
{
    pscom_socket_t *s = &con->sock->pub;
    if (s->ops.default_recv) {
        pscom_request_t *r = s->ops.default_recv(&con->pub, hdr);
        if (r) {
            r->state = PSCOM_REQ_STATE_RECV_REQUEST | PSCOM_REQ_STATE_POSTED;
            return req_of(r);
        }
    }
    return psc_match_posted(con, hdr);
}

/* Tell the sender of a rendezvous that its buffer is free. */
static void send_rndv_fin(struct psc_con *con, uint64_t sender_id)
{
    struct psc_rndv_fin fin = {.sender_id = sender_id};
    send_control(con, PSC_MSG_RNDV_FIN, &fin, sizeof(fin));
}

/* Let the plugin copy the body from the sender's buffer: out of line
 * (rndv_pull_start, API 1.5: the receive waits on con->rx_deferq as a
 * deferred body does, and pscom_plugin_rx_defer_done sends the FIN), or at
 * once (rndv_pull). 0 when started or done. */
static int rndv_try_pull(struct psc_con *con, struct psc_req *req,
                         const struct psc_rndv_info *info, const void *blob)
{
    if (!info->blob_len || !con->plugin_open || con->failed) return -1;
    const pscom_plugin_t *d = con->plugin->desc;
    const pscom_plugin_ops_t *ops = d->ops;
    size_t len = info->data_len < req->pub.data_len ? info->data_len
                                                    : req->pub.data_len;
    /* The plugin reports the end of a started pull from its progress op,
     * never from inside the call: the receive is queued after it. */
    if (PSCOM_PLUGIN_API_MINOR(d->api_version) >= 5 && ops->rndv_pull_start &&
        !ops->rndv_pull_start(con, con->plugin_priv, blob, info->blob_len,
                              req->pub.data, len, req)) {
        req->rndv = *info; /* the FIN names the sender's id */
        req->rndv_pulling = true;
        req->received = len;
        psc_list_add_tail(&req->next, &con->rx_deferq);
        return 0;
    }
    if (!ops->rndv_pull) return -1;
    if (ops->rndv_pull(con, con->plugin_priv, blob, info->blob_len,
                       req->pub.data, len))
        return -1;
    send_rndv_fin(con, info->sender_id);
    req->received = len;
    psc_req_done(req, 0);
    return 0;
}

/* The receiver of an announced rendezvous is known: pull the body, or ask
 * the sender for it. */
static void rndv_start_recv(struct psc_con *con, struct psc_req *req,
                            const struct psc_rndv_info *info, const void *blob)
{
    psc_req_state_add(req, PSCOM_REQ_STATE_RENDEZVOUS_REQUEST);
    if (!rndv_try_pull(con, req, info, blob)) return;
    req->id = ++psc_ctx.next_id;
    req->rndv = *info;
    psc_list_add_tail(&req->next, &con->rndv_recvq);
    struct psc_rndv_cts cts = {.sender_id = info->sender_id,
                               .receiver_id = req->id};
    send_control(con, PSC_MSG_RNDV_CTS, &cts, sizeof(cts));
}

static struct psc_req *find_by_id(struct psc_list *queue, uint64_t id)
{
    struct psc_list *pos;
    psc_list_for_each(pos, queue) {
        struct psc_req *req = psc_list_entry(pos, struct psc_req, next);
        if (req->id == id) return req;
    }
    return NULL;
}

static int rx_user(struct psc_con *con, pscom_header_net_t *hdr)
{
    con->stats.rx_msgs++;
    con->stats.rx_bytes += hdr->data_len;
    struct psc_req *req = find_receiver(con, hdr);
    if (req) {
        accept_into(req, con, hdr, hdr + 1);
    } else {
        req = generate(con, hdr, hdr + 1, NULL, NULL);
        if (!req) return -1;
    }
    rx_body_to(&con->rx, req, hdr->data_len);
    if (!hdr->data_len) return rx_body_done(con);
    return 0;
}

static int rx_rndv_req(struct psc_con *con, pscom_header_net_t *hdr)
{
    struct psc_rndv_info info;
    size_t xl = hdr->xheader_len;
    uint8_t blob[PSC_RNDV_BLOB_MAX];

    memcpy(&info, (char *)(hdr + 1) + xl - sizeof(info), sizeof(info));
    if (info.data_len > PSCOM_DATA_LEN_MASK)
        return rx_protocol_error(con, "rendezvous length out of range");
    if (info.blob_len > PSC_RNDV_BLOB_MAX ||
        info.blob_len > xl - sizeof(info))
        return rx_protocol_error(con, "rendezvous description too long");
    size_t ulen = xl - sizeof(info) - info.blob_len;
    memcpy(blob, (char *)(hdr + 1) + ulen, info.blob_len);
    con->stats.rx_msgs++;
    con->stats.rx_bytes += info.data_len;
    con->stats.rx_rndv++;
    /* Present it to matching as the user message it stands for. */
    set_header(hdr, PSC_MSG_USER, ulen, info.data_len);

    rx_next_message(&con->rx);
    struct psc_req *req = find_receiver(con, hdr);
    if (!req) return generate(con, hdr, hdr + 1, &info, blob) ? 0 : -1;
    accept_into(req, con, hdr, hdr + 1);
    rndv_start_recv(con, req, &info, blob);
    return con->failed || con->zombie ? -1 : 0;
}

/* Queue the body of a rendezvous send the receiver is ready for. */
static void rndv_send_data(struct psc_con *con, struct psc_req *req,
                           uint64_t receiver_id)
{
    if (con->eof_sent) {
        /* The close stopped waiting for this answer and sent its EOF: the
         * body cannot follow it (send_control). */
        psc_debug("%s: clear-to-send after our EOF; the send fails",
                  psc_con_str(con));
        psc_req_done(req, PSCOM_REQ_STATE_ERROR);
        return;
    }
    pscom_header_net_t *h = (pscom_header_net_t *)req->ctrl;
    struct psc_rndv_data_hdr dh = {.receiver_id = receiver_id};
    set_header(h, PSC_MSG_RNDV_DATA, sizeof(dh), req->pub.data_len);
    memcpy(req->ctrl + PSC_HDR_LEN, &dh, sizeof(dh));
    frame_init(req, PSC_FRAME_RNDV_DATA, req->ctrl, PSC_HDR_LEN + sizeof(dh),
               req->pub.data, req->pub.data_len);
    psc_con_enqueue(con, req);
}

/* An answer to an announcement that is still in the send queue: the
 * transport has sent it (I/O started) but not yet reported it written,
 * which a transport that reports frames in queue order does when an
 * earlier frame is still in flight. The answer is kept for
 * psc_proto_frame_sent. NULL when no such announcement waits for one. */
static struct psc_req *rx_rndv_answered(struct psc_con *con, uint64_t id,
                                        uint8_t type)
{
    struct psc_list *pos;
    psc_list_for_each(pos, &con->sendq) {
        struct psc_req *req = psc_list_entry(pos, struct psc_req, next);
        if (req->frame != PSC_FRAME_RNDV_REQ || req->id != id) continue;
        if (!(req->pub.state & PSCOM_REQ_STATE_IO_STARTED) ||
            req->rndv_answer)
            return NULL;
        req->rndv_answer = type;
        return req;
    }
    return NULL;
}

static int rx_rndv_cts(struct psc_con *con, pscom_header_net_t *hdr)
{
    struct psc_rndv_cts cts;
    memcpy(&cts, hdr + 1, sizeof(cts));
    rx_next_message(&con->rx);

    struct psc_req *req = find_by_id(&con->rndv_sendq, cts.sender_id);
    if (!req) {
        req = rx_rndv_answered(con, cts.sender_id, PSC_MSG_RNDV_CTS);
        if (!req) return rx_protocol_error(con, "clear-to-send for no send");
        req->rndv_receiver_id = cts.receiver_id;
        return 0;
    }
    psc_list_del(&req->next);
    rndv_send_data(con, req, cts.receiver_id);
    return con->failed || con->zombie ? -1 : 0;
}

static int rx_rndv_fin(struct psc_con *con, pscom_header_net_t *hdr)
{
    struct psc_rndv_fin fin;
    memcpy(&fin, hdr + 1, sizeof(fin));
    rx_next_message(&con->rx);

    struct psc_req *req = find_by_id(&con->rndv_sendq, fin.sender_id);
    if (!req) {
        if (!rx_rndv_answered(con, fin.sender_id, PSC_MSG_RNDV_FIN))
            return rx_protocol_error(con, "rendezvous completion for no send");
        return 0;
    }
    psc_list_del(&req->next);
    psc_req_done(req, 0);
    return con->failed || con->zombie ? -1 : 0;
}

static int rx_rndv_data(struct psc_con *con, pscom_header_net_t *hdr)
{
    struct psc_rndv_data_hdr dh;
    memcpy(&dh, hdr + 1, sizeof(dh));
    uint64_t len = hdr->data_len;

    struct psc_req *req = find_by_id(&con->rndv_recvq, dh.receiver_id);
    if (!req) return rx_protocol_error(con, "rendezvous data for no receive");
    if (len != req->rndv.data_len)
        return rx_protocol_error(con, "rendezvous data of another length "
                                      "than announced");
    psc_list_del(&req->next);
    rx_body_to(&con->rx, req, len);
    if (!len) return rx_body_done(con);
    /* A matched receive's own buffer, which stays until the receive ends. */
    con->rx.defer_ok = !con->rx.truncated;
    return 0;
}

/* One-sided and group messages: the handler names the request that takes
 * the body. A message without body is finished before the handler runs,
 * because the handler may answer it and call the application. */
static int rx_ext(struct psc_con *con, pscom_header_net_t *hdr,
                  int (*handler)(struct psc_con *, pscom_header_net_t *,
                                 struct psc_req **))
{
    struct psc_req *req = NULL;
    uint64_t len = hdr->data_len;

    if (!len) rx_next_message(&con->rx);
    if (handler(con, hdr, &req)) return -1;
    if (!req) {
        if (len) return rx_protocol_error(con, "message body for no request");
        return con->failed || con->zombie ? -1 : 0;
    }
    rx_body_to(&con->rx, req, len);
    if (!len) return rx_body_done(con);
    return 0;
}

static int rx_eof(struct psc_con *con)
{
    con->got_eof = true;
    psc_debug("%s: the peer closed the connection", psc_con_str(con));
    psc_con_fail(con, PSCOM_OP_READ, PSCOM_ERR_EOF);
    return -1;
}

static int rx_dispatch(struct psc_con *con)
{
    pscom_header_net_t *hdr = (pscom_header_net_t *)con->rx.hbuf;

    if (con->eof_pending)
        return rx_protocol_error(con, "a message after the end of the "
                                      "connection");
    switch (hdr->msg_type) {
    case PSC_MSG_USER:
        return rx_user(con, hdr);
    case PSC_MSG_RNDV_REQ:
        return rx_rndv_req(con, hdr);
    case PSC_MSG_RNDV_CTS:
        return rx_rndv_cts(con, hdr);
    case PSC_MSG_RNDV_DATA:
        return rx_rndv_data(con, hdr);
    case PSC_MSG_RNDV_FIN:
        return rx_rndv_fin(con, hdr);
    case PSC_MSG_EOF:
        rx_next_message(&con->rx);
        con->eof_pending = true;
        /* Bodies sent before the EOF may still be arriving out of line. */
        return psc_list_empty(&con->rx_deferq) ? rx_eof(con) : 0;
    case PSC_MSG_RMA_PUT ... PSC_MSG_RMA_READ:
    case PSC_MSG_RMA_PUT_DONE:
    case PSC_MSG_RMA_GET_DONE:
        return rx_ext(con, hdr, psc_rma_rx);
    case PSC_MSG_BCAST:
    case PSC_MSG_BARRIER:
        return rx_ext(con, hdr, psc_group_rx);
    }
    return rx_protocol_error(con, "unknown message type");
}

/* The 8-byte header is complete: check it and make room for the xheader. */
static int rx_header_done(struct psc_con *con)
{
    struct psc_rx *rx = &con->rx;
    const pscom_header_net_t *hdr = (const pscom_header_net_t *)rx->hbuf;
    const char *why = NULL;

    if (psc_header_check(hdr, &why)) return rx_protocol_error(con, why);
    rx->need = PSC_HDR_LEN + hdr->xheader_len;
    if (rx->need > rx->hcap) {
        uint8_t *big = malloc(rx->need);
        if (!big) return rx_protocol_error(con, "no memory for the xheader");
        memcpy(big, rx->hbuf, PSC_HDR_LEN);
        if (rx->hbuf != rx->hinline) free(rx->hbuf);
        rx->hbuf = big;
        rx->hcap = rx->need;
    }
    rx->phase = PSC_RX_XHEADER;
    return 0;
}

/* A header can be read in place at p. */
static bool header_aligned(const void *p)
{
    return (uintptr_t)p % _Alignof(pscom_header_net_t) == 0;
}

/* At least a header, aligned, at head: head[0..head_len) (header and
 * xheader) and body_len bytes of body are one whole user message. */
static bool is_whole_user(const pscom_header_net_t *hdr, size_t head_len,
                          size_t body_len)
{
    return hdr->msg_type == PSC_MSG_USER &&
           head_len == PSC_HDR_LEN + hdr->xheader_len &&
           body_len == hdr->data_len;
}

/* Bytes of the body under way (phase PSC_RX_DATA): what fits goes to its
 * buffer, the rest of a truncated body is dropped. Sets *took; -1 when the
 * body ended and the connection is closing. */
static int rx_body_bytes(struct psc_con *con, const char *p, size_t len,
                         size_t *took)
{
    struct psc_rx *rx = &con->rx;
    size_t take = len < rx->left ? len : rx->left;
    size_t keep = take < rx->dst_left ? take : rx->dst_left;
    if (keep) {
        memcpy(rx->dst, p, keep);
        rx->dst += keep;
        rx->dst_left -= keep;
    }
    rx->req->received += take;
    rx->left -= take;
    *took = take;
    return !rx->left && rx_body_done(con) ? -1 : 0;
}

/* A whole user message between two messages, read in place: h, its
 * header as checked (the core's own copy), its xheader at xheader and its
 * body at body. For req (its receive; NULL: keep it as unexpected). The
 * outcome is the receive loop's (test_match compares them), without the
 * loop's steps: the connection expects the next message all along. 0, or
 * -1 when it is closing. */
static inline int rx_user_whole(struct psc_con *con,
                                const pscom_header_net_t *h,
                                const void *xheader, const void *body,
                                struct psc_req *req)
{
    size_t total = h->data_len;

    con->stats.rx_msgs++;
    con->stats.rx_bytes += total;
    if (!req) {
        req = generate(con, h, xheader, NULL, NULL);
        if (!req) return -1;
        if (total) memcpy(req->gbuf, body, total);
        req->received = total;
        req->got_all = true;
        return 0;
    }
    accept_into(req, con, h, xheader);
    size_t fit = copy_fit(req, body, total);
    req->received = total;
    psc_req_done(req, total > fit ? PSCOM_REQ_STATE_TRUNCATED : 0);
    return con->failed || con->zombie ? -1 : 0;
}

/* The header at p (aligned), read once: whole messages are parsed in place,
 * and p may be memory the peer can still write (shm's ring, UCX's shared
 * memory), where a length read twice could differ between the check and
 * the use. */
static inline pscom_header_net_t header_once(const void *p)
{
    uint64_t w = __atomic_load_n((const uint64_t *)p, __ATOMIC_RELAXED);
    pscom_header_net_t h;
    memcpy(&h, &w, sizeof(h));
    return h;
}

/* The connection expects the first byte of a message next. */
static bool between_messages(const struct psc_con *con)
{
    return con->rx.phase == PSC_RX_HEADER && !con->rx.have &&
           !con->eof_pending;
}

int pscom_plugin_rx_now(pscom_plugin_con_t *con, const void *head,
                        size_t head_len, const void *body, size_t body_len)
{
    pscom_header_net_t *hdr = (pscom_header_net_t *)head;
    if (con->failed || con->zombie || !between_messages(con) ||
        con->sock->pub.ops.default_recv || head_len < PSC_HDR_LEN ||
        !header_aligned(head))
        return 0;
    pscom_header_net_t h = header_once(head);
    if (!is_whole_user(&h, head_len, body_len)) return 0;
    struct psc_req *req = psc_match_posted(con, hdr);
    if (!req) return 0;
    /* A matched receive: no allocation, nothing that can fail the
     * connection; only its callbacks must wait — also should a plugin call
     * this outside the core's call into it (then they wait for the next). */
    psc_hold();
    rx_user_whole(con, &h, hdr + 1, body, req);
    psc_unhold_later();
    return 1;
}

int pscom_plugin_rx_push(pscom_plugin_con_t *con, const void *buf, size_t len)
{
    struct psc_rx *rx = &con->rx;
    const char *p = buf;

    if (con->failed || con->zombie) return -1;
    if (between_messages(con) && len >= PSC_HDR_LEN && header_aligned(buf)) {
        /* The receives' callbacks see the header in place; the core uses
         * its copy. */
        pscom_header_net_t *hdr = (pscom_header_net_t *)buf;
        pscom_header_net_t h = header_once(buf);
        size_t head_len = PSC_HDR_LEN + h.xheader_len;
        if (head_len <= len && is_whole_user(&h, head_len, len - head_len))
            return rx_user_whole(con, &h, hdr + 1, p + head_len,
                                 find_receiver(con, hdr));
    }
    while (len) {
        if (rx->phase == PSC_RX_DATA) {
            size_t took;
            if (rx_body_bytes(con, p, len, &took)) return -1;
            p += took;
            len -= took;
            continue;
        }
        size_t take = rx->need - rx->have;
        if (take > len) take = len;
        memcpy(rx->hbuf + rx->have, p, take);
        rx->have += take;
        p += take;
        len -= take;
        if (rx->have < rx->need) continue;
        if (rx->phase == PSC_RX_HEADER) {
            if (rx_header_done(con)) return -1;
            if (rx->have < rx->need) continue;
        }
        if (rx_dispatch(con)) return -1;
        if (con->failed || con->zombie) return -1;
    }
    return 0;
}

size_t pscom_plugin_rx_direct(pscom_plugin_con_t *con, void **buf)
{
    struct psc_rx *rx = &con->rx;
    if (rx->phase != PSC_RX_DATA || !rx->dst_left) return 0;
    *buf = rx->dst;
    return rx->dst_left;
}

int pscom_plugin_rx_direct_done(pscom_plugin_con_t *con, size_t n)
{
    struct psc_rx *rx = &con->rx;
    if (con->failed || con->zombie || !rx->req || n > rx->dst_left) return -1;
    rx->dst += n;
    rx->dst_left -= n;
    rx->left -= n;
    rx->req->received += n;
    rx->defer_ok = false;
    if (!rx->left) return rx_body_done(con);
    return 0;
}

void *pscom_plugin_rx_defer(pscom_plugin_con_t *con, void **buf, size_t *len)
{
    struct psc_rx *rx = &con->rx;
    if (con->failed || con->zombie || rx->phase != PSC_RX_DATA ||
        !rx->defer_ok || !rx->left || rx->req->received)
        return NULL;
    struct psc_req *req = rx->req;
    *buf = rx->dst;
    *len = rx->left;
    req->received = rx->left; /* what it has once the plugin says done */
    psc_list_add_tail(&req->next, &con->rx_deferq);
    rx_next_message(rx);
    return req;
}

int pscom_plugin_rx_defer_done(pscom_plugin_con_t *con, void *handle, int err)
{
    struct psc_req *req = handle;
    if (!req || req->magic != PSC_REQ_MAGIC) {
        psc_err("%s: internal error: the transport finished a deferred "
                "message body that is not one", psc_con_str(con));
        return -1;
    }
    psc_list_del(&req->next);
    if (req->rndv_pulling) {
        /* A pulled rendezvous body: the sender's buffer is free. */
        req->rndv_pulling = false;
        if (!err && !con->failed) send_rndv_fin(con, req->rndv.sender_id);
    }
    /* After con_error no receive of the connection succeeds. */
    psc_req_done(req, err || con->failed ? PSCOM_REQ_STATE_ERROR : 0);
    if (con->eof_pending && !con->failed && psc_list_empty(&con->rx_deferq))
        return rx_eof(con);
    return con->failed || con->zombie ? -1 : 0;
}

/* ---------------------------------------------------------------------- */
/* Posting receives                                                       */
/* ---------------------------------------------------------------------- */

/* A receive takes over an unexpected message. */
static void merge_generated(struct psc_req *req, struct psc_req *g)
{
    struct psc_con *con = g->gcon;
    size_t total = g->pub.header.data_len;

    accept_into(req, con, &g->pub.header, req_xheader(&g->pub));
    psc_req_state_add(req, PSCOM_REQ_STATE_GRECV_MERGED);

    if (g->rndv_gen) {
        rndv_start_recv(con, req, &g->rndv, g->rndv_blob);
        psc_req_release(g);
        return;
    }
    if (!g->got_all) {
        /* The body is still arriving, possibly straight into g's buffer
         * through a plugin's asynchronous receive: let it finish there and
         * hand it over then (rx_body_done). */
        g->merged_into = req;
        return;
    }
    req->received = copy_fit(req, g->gbuf, total);
    psc_req_release(g);
    psc_req_done(req, 0);
}

void psc_proto_post_recv(struct psc_req *req)
{
    struct psc_req *g = psc_match_generated(req);
    if (g) {
        merge_generated(req, g);
        return;
    }
    if (req->pub.connection && con_of(req->pub.connection)->failed) {
        psc_req_done(req, PSCOM_REQ_STATE_ERROR);
        return;
    }
    psc_recvq_add(req);
}

/* ---------------------------------------------------------------------- */
/* Failure                                                                */
/* ---------------------------------------------------------------------- */

/* A send the connection's failure ends; a control frame is released. */
static void end_failed_send(struct psc_req *req)
{
    if (req->kind == PSC_REQ_CONTROL)
        psc_req_release(req);
    else
        psc_req_done(req, PSCOM_REQ_STATE_ERROR);
}

static void fail_queue(struct psc_list *queue)
{
    while (!psc_list_empty(queue)) {
        struct psc_req *req = psc_list_first(queue, struct psc_req, next);
        psc_list_del(&req->next);
        if (req->tx_hold) psc_rma_hold_drop(req);
        /* A lent frame ends when the transport gives it back. */
        if (!req->lent) end_failed_send(req);
    }
}

void *pscom_plugin_tx_lend(pscom_plugin_con_t *con, const void *head)
{
    struct psc_list *pos;
    psc_list_for_each(pos, &con->sendq) {
        struct psc_req *req = psc_list_entry(pos, struct psc_req, next);
        if (req->iov[0].iov_base != head) continue;
        req->lent = true;
        return req;
    }
    psc_list_for_each(pos, &con->rndv_sendq) {
        struct psc_req *req = psc_list_entry(pos, struct psc_req, next);
        if (!req->rndv_described || req->pub.data != head) continue;
        req->lent = true;
        return req;
    }
    return NULL;
}

void pscom_plugin_tx_returned(void *token)
{
    struct psc_req *req = token;
    if (!req || !req->lent) return;
    req->lent = false;
    /* Still queued: the connection has not failed it yet, and will. */
    if (psc_list_unlinked(&req->next)) end_failed_send(req);
}

/* An unexpected message leaves its connection's and its socket's queues
 * (harmless when it left them already). */
static void unqueue_generated(struct psc_req *g)
{
    psc_list_del(&g->next);
    psc_list_del(&g->next_any);
}

/* End the request that was receiving a body when its connection failed. */
static void fail_current_receive(struct psc_req *cur)
{
    if (cur->kind == PSC_REQ_GENERATED) {
        /* An unexpected message: its buffer goes, and the receive that
         * took it over while it arrived fails. */
        struct psc_req *u = cur->merged_into;
        unqueue_generated(cur);
        psc_req_release(cur);
        if (u) psc_req_done(u, PSCOM_REQ_STATE_ERROR);
    } else {
        psc_req_done(cur, PSCOM_REQ_STATE_ERROR);
    }
}

/* Drop the unexpected messages of con but `leave` (NULL: none) and, when
 * whole_stay, those that arrived whole; how many. */
static unsigned drop_generated(struct psc_con *con, const struct psc_req *leave,
                               bool whole_stay)
{
    unsigned n = 0;
    struct psc_list *pos, *tmp;
    psc_list_for_each_safe(pos, tmp, &con->net_recvq) {
        struct psc_req *g = psc_list_entry(pos, struct psc_req, next);
        if (g == leave || (whole_stay && g->got_all && !g->rndv_gen)) continue;
        unqueue_generated(g);
        psc_req_release(g);
        n++;
    }
    return n;
}

void psc_proto_fail_receives(struct psc_con *con)
{
    struct psc_req *cur = con->rx.req;
    rx_next_message(&con->rx);

    /* Unexpected messages that arrived whole stay receivable; the rest go
     * (but the one arriving now only with `cur`). */
    drop_generated(con, cur, true);
    if (cur && con->plugin_open) {
        /* Freed after the plugin's close (psc_proto_fail_sends): the plugin
         * may still be moving bytes into it. An unexpected message that
         * can no longer arrive whole leaves the queues now, before the
         * callbacks below run (one may close the socket, which releases
         * what its queues hold). */
        if (cur->kind == PSC_REQ_GENERATED) unqueue_generated(cur);
        con->rx_failed = cur;
    } else if (cur) {
        fail_current_receive(cur);
    }

    fail_queue(&con->rndv_recvq);
    fail_queue(&con->recvq_user);
    psc_rma_con_fail(con);
    psc_group_con_fail(con);
}

void psc_proto_drop_unexpected(struct psc_con *con)
{
    /* An unexpected message a plugin was still moving left the queues at
     * the failure (psc_proto_fail_receives); it is freed with its receive
     * when the plugin is closed (psc_proto_fail_sends). */
    unsigned n = drop_generated(con, NULL, false);
    if (n)
        psc_warn("%s: closed with %u unexpected message%s that no receive "
                 "took; dropped", psc_con_str(con), n, n == 1 ? "" : "s");
}

void psc_proto_fail_sends(struct psc_con *con)
{
    struct psc_req *cur = con->rx_failed;
    con->rx_failed = NULL;
    if (cur) fail_current_receive(cur);
    fail_queue(&con->sendq);
    fail_queue(&con->rndv_sendq);
}

void psc_proto_fail_requests(struct psc_con *con)
{
    psc_proto_fail_receives(con);
    psc_proto_plugin_closed(con);
}

void psc_proto_plugin_closed(struct psc_con *con)
{
    psc_proto_fail_sends(con);
    fail_queue(&con->rx_deferq);
}
