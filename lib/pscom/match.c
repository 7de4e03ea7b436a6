/*
 * Receive matching.
 *
 * Posted receives live in three queues: per connection (con->recvq_user),
 * any source on a socket (sock->recvq_any) and any source on any socket
 * (psc_ctx.recvq_any). Each receive gets a posting number when queued; an
 * arriving message goes to the earliest-posted receive that accepts it,
 * whichever queue that is in, so MPI's ordering rules hold across per-source
 * and any-source receives.
 *
 * Unexpected messages (generated requests) are kept per connection
 * (con->net_recvq) and per socket (sock->genrecvq_any), both in arrival
 * order. A receive posted later takes the first of them it accepts.
 */
#include "core.h"

bool psc_req_accepts(struct psc_req *req, struct psc_con *con,
                     pscom_header_net_t *hdr)
{
    pscom_request_t *r = &req->pub;
    if (r->connection && r->connection != &con->pub) return false;
    if (!r->connection && r->socket && r->socket != &con->sock->pub)
        return false;
    return !r->ops.recv_accept || r->ops.recv_accept(r, &con->pub, hdr);
}

/* The first receive of `queue` after `pos` (the queue's head: from the
 * start) that accepts the message. */
static struct psc_req *first_accepting_after(struct psc_list *queue,
                                             struct psc_list *pos,
                                             struct psc_con *con,
                                             pscom_header_net_t *hdr,
                                             uint64_t before)
{
    for (pos = pos->next; pos != queue; pos = pos->next) {
        struct psc_req *req = psc_list_entry(pos, struct psc_req, next);
        /* Queues are in posting order: nothing later can win. */
        if (req->seq > before) break;
        if (psc_req_accepts(req, con, hdr)) return req;
    }
    return NULL;
}

/* The first receive of `queue` that accepts the message. */
static struct psc_req *first_accepting(struct psc_list *queue,
                                       struct psc_con *con,
                                       pscom_header_net_t *hdr,
                                       uint64_t before)
{
    return first_accepting_after(queue, queue, con, hdr, before);
}

struct psc_req *psc_match_con_after(struct psc_con *con,
                                    pscom_header_net_t *hdr,
                                    struct psc_req *after)
{
    struct psc_req *req = first_accepting_after(&con->recvq_user, &after->next,
                                                con, hdr, UINT64_MAX);
    if (req) psc_list_del(&req->next);
    return req;
}

struct psc_req *psc_match_posted_all(struct psc_con *con,
                                     pscom_header_net_t *hdr)
{
    struct psc_req *best =
        first_accepting(&con->recvq_user, con, hdr, UINT64_MAX);
    uint64_t limit = best ? best->seq : UINT64_MAX;

    struct psc_req *any = first_accepting(&con->sock->recvq_any, con, hdr, limit);
    if (any) {
        best = any;
        limit = any->seq;
    }
    any = first_accepting(&psc_ctx.recvq_any, con, hdr, limit);
    if (any) best = any;

    if (best) psc_list_del(&best->next);
    return best;
}

void psc_recvq_add(struct psc_req *req)
{
    req->seq = ++psc_ctx.seq;
    struct psc_list *queue;
    if (req->pub.connection)
        queue = &con_of(req->pub.connection)->recvq_user;
    else if (req->pub.socket)
        queue = &sock_of(req->pub.socket)->recvq_any;
    else
        queue = &psc_ctx.recvq_any;
    psc_list_add_tail(&req->next, queue);
}

void psc_genrecvq_add(struct psc_con *con, struct psc_req *greq)
{
    greq->seq = ++psc_ctx.seq;
    greq->gcon = con;
    psc_list_add_tail(&greq->next, &con->net_recvq);
    psc_list_add_tail(&greq->next_any, &con->sock->genrecvq_any);
}

static bool gen_accepted(struct psc_req *req, struct psc_req *g)
{
    return psc_req_accepts(req, g->gcon, &g->pub.header);
}

static struct psc_req *find_generated(struct psc_req *req)
{
    struct psc_list *pos;

    if (req->pub.connection) {
        struct psc_con *con = con_of(req->pub.connection);
        psc_list_for_each(pos, &con->net_recvq) {
            struct psc_req *g = psc_list_entry(pos, struct psc_req, next);
            if (gen_accepted(req, g)) return g;
        }
        return NULL;
    }
    if (req->pub.socket) {
        struct psc_sock *sock = sock_of(req->pub.socket);
        psc_list_for_each(pos, &sock->genrecvq_any) {
            struct psc_req *g = psc_list_entry(pos, struct psc_req, next_any);
            if (gen_accepted(req, g)) return g;
        }
        return NULL;
    }
    /* Any socket: the earliest arrival over all sockets. */
    struct psc_req *best = NULL;
    struct psc_list *spos;
    psc_list_for_each(spos, &psc_ctx.sockets) {
        struct psc_sock *sock = psc_list_entry(spos, struct psc_sock, next_sock);
        psc_list_for_each(pos, &sock->genrecvq_any) {
            struct psc_req *g = psc_list_entry(pos, struct psc_req, next_any);
            if (best && g->seq > best->seq) break;
            if (gen_accepted(req, g)) {
                best = g;
                break;
            }
        }
    }
    return best;
}

struct psc_req *psc_peek_generated(struct psc_req *req)
{
    return find_generated(req);
}

struct psc_req *psc_match_generated(struct psc_req *req)
{
    struct psc_req *g = find_generated(req);
    if (g) {
        psc_list_del(&g->next);
        psc_list_del(&g->next_any);
    }
    return g;
}
