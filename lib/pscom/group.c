/*
 * Groups: a numbered set of connections of one socket, with broadcast and
 * barrier over it.
 *
 * Group messages (BCAST, BARRIER) never meet the application's receives:
 * they are matched here, by connection, type, group id and root, against
 * the group receives this file posts, in posting order; one that comes
 * first waits in arrival order until its receive is posted. So a group may
 * receive before its peers have opened it, and consecutive collectives of
 * one group stay apart, because the members call them in the same order
 * and each connection delivers in order. A message that arrived whole stays
 * receivable while its connection is only failed, as a point-to-point one
 * does; it goes when the connection is retired (closed).
 *
 * Broadcast follows a tree rooted at the broadcast root: every member
 * passes the message on to up to FANOUT children, the first members of the
 * FANOUT near-equal chunks of the ranks below it. A member passes on what
 * it holds: when that is less than the root sent (its buffer is short, or
 * its parent's was), the message is flagged as cut and carries the root's
 * length, so that every member below ends TRUNCATED as well. A member whose
 * part failed (its parent's connection, or a failure notice from its
 * parent) sends its children a failure notice, so that its whole subtree
 * ends in error instead of waiting.
 *
 * Barrier is a dissemination barrier: in round k every member tells the
 * member 2^k ranks above it and waits for the one 2^k ranks below. A member
 * runs every round whatever failed: once it saw a failure its messages say
 * so, and a receive from a failed connection ends at once. So every member
 * returns, those that learnt of a failure with a logged error.
 *
 * A group forgets a connection that is retired (its pointer becomes NULL:
 * nothing goes or comes through it), and a closed socket takes its groups
 * off the list: they are found no more, their collectives fail, and
 * pscom_group_close only frees them. Each member slot of a group is linked
 * into its connection's list (psc_con.group_slots), so that retiring a
 * connection costs the groups it is in, not every member of every group:
 * an MPI program has a group per communicator, and closes connections at
 * its end.
 *
 * A group of more than one member keeps the two requests its barrier needs
 * (a round's send and receive, used again in every round) from
 * pscom_group_open on, so that a barrier, once it began, allocates nothing
 * and cannot leave its rounds early for want of memory: the members that
 * wait for its messages would wait for ever, or it would return as if it
 * had synchronised. Out of memory, pscom_group_open fails instead.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

#define GROUP_MAGIC 0x67727570u /* "grup" */
#define FANOUT 3
#define NONE ((unsigned)-1)

/* Flags of a group message, in bcast_arg2. */
#define GROUP_FAILED 1u /* the sender's part failed: no body, and the
                         * receiver's part fails too */
#define GROUP_CUT 2u    /* broadcast: the body is the start of the root's
                         * data; the root's length (u64) ends the xheader */

/* A member of a group as the group sees it. */
struct gslot {
    struct psc_con *con;  /* NULL at our own rank and once forgotten (the
                           * connection retired, the socket closed, the
                           * group freed) */
    struct psc_list next; /* con->group_slots, while con is set */
};

struct PSCOM_group {
    uint32_t magic;
    struct psc_list next;  /* groups, until it is freed or its socket is
                            * closed: a closed group still busy stays, so
                            * that its socket's close finds it */
    struct psc_sock *sock; /* NULL once its socket is closed */
    uint32_t id;
    uint32_t rank;
    uint32_t size;
    unsigned busy; /* broadcasts and barriers under way on it */
    bool closed;   /* pscom_group_close ran: found no more, freed once not
                    * busy */
    /* The barrier's send and receive (a group of one has none), owned by
     * the group; NULL while a barrier has them. */
    struct psc_req *bar_send, *bar_recv;
    struct gslot members[]; /* by group rank */
};

static struct psc_list groups = PSC_LIST_HEAD_INIT(groups);
/* Group receives waiting for their message, in posting order (psc_req.next). */
static struct psc_list posted = PSC_LIST_HEAD_INIT(posted);
/* Group messages that came before their receive, arrival order (psc_req.next). */
static struct psc_list unexpected = PSC_LIST_HEAD_INIT(unexpected);

/* What a group message or receive is about: with the connection, the key
 * it is matched by. Kept in the request's user storage. */
struct gkey {
    uint8_t type;
    uint32_t group_id;
    uint32_t root;
};

/* User storage of a group receive. */
struct grecv {
    struct gkey key;
    struct bcast_op *op; /* broadcast: what to do once it is in */
    uint32_t flags;      /* the message's GROUP_* flags */
    uint64_t full_len;   /* broadcast: the length of the root's data */
};

/* User storage of an unexpected group message; its body follows. */
struct gmsg {
    struct gkey key;
    bool arrived;          /* the body is in */
    struct psc_req *taker; /* the receive waiting for the rest of the body */
    char data[];
};

/* A posted broadcast in progress; it keeps its group allocated (busy). */
struct bcast_op {
    struct psc_req *user; /* the application's request */
    struct PSCOM_group *group;
    size_t xlen;          /* its xheader length */
    unsigned pending;     /* forwards not written yet, +1 while starting */
    pscom_req_state_t err;
    unsigned nchild;
    uint32_t child[FANOUT]; /* group ranks */
    uint32_t child_size[FANOUT];
    /* The forward to each child, allocated when the broadcast starts: once
     * it started it allocates nothing, so no child is left waiting for a
     * forward that found no memory. */
    struct psc_req *fwd[FANOUT];
};

/* ---------------------------------------------------------------------- */
/* The broadcast tree, over ranks relative to the root                    */
/* ---------------------------------------------------------------------- */

/* The children of relative rank u whose subtree has n ranks. */
static unsigned tree_children(unsigned u, unsigned n, unsigned start[],
                              unsigned size[])
{
    unsigned rest = n ? n - 1 : 0, base = rest / FANOUT, extra = rest % FANOUT;
    unsigned next = u + 1, count = 0;
    for (unsigned i = 0; i < FANOUT; i++) {
        unsigned sz = base + (i < extra);
        if (!sz) break;
        start[count] = next;
        size[count] = sz;
        count++;
        next += sz;
    }
    return count;
}

/* The parent of relative rank u (NONE for the root) and the size of u's
 * subtree in a tree over n ranks. */
static void tree_locate(unsigned n, unsigned u, unsigned *parent,
                        unsigned *sub)
{
    unsigned node = 0, len = n;
    *parent = NONE;
    while (node != u) {
        unsigned start[FANOUT], size[FANOUT];
        unsigned c = tree_children(node, len, start, size);
        unsigned i = 0;
        while (i + 1 < c && u >= start[i + 1]) i++;
        *parent = node;
        node = start[i];
        len = size[i];
    }
    *sub = len;
}

/* ---------------------------------------------------------------------- */
/* Matching                                                               */
/* ---------------------------------------------------------------------- */

static bool key_eq(const struct gkey *a, const struct gkey *b)
{
    return a->type == b->type && a->group_id == b->group_id &&
           a->root == b->root;
}

static struct gkey key_of(const pscom_header_net_t *hdr)
{
    const pscom_xheader_bcast_t *b = (const void *)(hdr + 1);
    return (struct gkey){.type = hdr->msg_type,
                         .group_id = b->group_id,
                         .root = b->bcast_root};
}

/* Take the message's header and xheader into the group receive req. The
 * root's length that ends a cut broadcast's xheader goes to its struct
 * grecv, not to the request's xheader. */
static void accept_header(struct psc_req *req, const pscom_header_net_t *hdr,
                          size_t received)
{
    pscom_request_t *r = &req->pub;
    struct grecv *gr = (struct grecv *)r->user;
    const pscom_xheader_bcast_t *b = (const void *)(hdr + 1);
    size_t xl = hdr->xheader_len;

    gr->flags = b->bcast_arg2;
    gr->full_len = hdr->data_len;
    if (gr->flags & GROUP_CUT) {
        xl -= sizeof(gr->full_len);
        memcpy(&gr->full_len, (const char *)b + xl, sizeof(gr->full_len));
    }
    r->header = *hdr;
    r->header.xheader_len = (uint16_t)xl;
    memcpy(&r->xheader, b, xl < r->xheader_len ? xl : r->xheader_len);
    psc_req_state_add(req, PSCOM_REQ_STATE_IO_STARTED);
    if (received > r->data_len)
        psc_req_state_add(req, PSCOM_REQ_STATE_TRUNCATED);
}

/* An unexpected message (whole) goes to its receive; g is freed after. */
static void deliver(struct psc_req *g, struct psc_req *req)
{
    size_t len = g->pub.data_len;
    size_t fit = len < req->pub.data_len ? len : req->pub.data_len;
    accept_header(req, &g->pub.header, len);
    if (fit) memcpy(req->pub.data, g->pub.data, fit);
    psc_req_done(req, 0);
}

static void drop_warn(struct psc_con *con, unsigned n)
{
    psc_warn("%s: closed with %u group message%s that no broadcast or "
             "barrier took; dropped", psc_con_str(con), n, n == 1 ? "" : "s");
}

/* The body of an unexpected message is in (or its connection failed).
 * Once it has a receive, g goes here: psc_req_done does not touch a request
 * after its io_done. */
static void unexpected_done(pscom_request_t *r)
{
    struct psc_req *g = req_of(r);
    struct gmsg *gm = (struct gmsg *)r->user;
    struct psc_req *taker = gm->taker;
    struct psc_con *con = con_of(r->connection);

    if (r->state & PSCOM_REQ_STATE_ERROR) {
        psc_list_del(&g->next);
        psc_req_release(g);
        if (taker) psc_req_done(taker, PSCOM_REQ_STATE_ERROR);
        return;
    }
    gm->arrived = true;
    if (taker) {
        deliver(g, taker);
        psc_req_release(g);
    } else if (con->zombie) {
        /* Its connection was closed while this callback was held: dropped,
         * as psc_group_con_retired drops the messages that were in by
         * then. A held request keeps its connection allocated. */
        psc_list_del(&g->next);
        psc_req_release(g);
        drop_warn(con, 1);
    }
}

/* Post the group receive req on con (NULL: a connection the group has
 * forgotten, and the receive fails): its struct grecv, data, data_len and
 * xheader_len are set. */
static void group_recv(struct psc_req *req, struct psc_con *con)
{
    struct grecv *gr = (struct grecv *)req->pub.user;
    struct psc_list *pos;

    req->pub.connection = con ? &con->pub : NULL;
    req->pub.state = PSCOM_REQ_STATE_RECV_REQUEST | PSCOM_REQ_STATE_POSTED;
    psc_list_for_each(pos, &unexpected) {
        struct psc_req *g = psc_list_entry(pos, struct psc_req, next);
        struct gmsg *gm = (struct gmsg *)g->pub.user;
        if (!con || g->pub.connection != &con->pub ||
            !key_eq(&gm->key, &gr->key))
            continue;
        psc_list_del(&g->next);
        if (gm->arrived) {
            deliver(g, req);
            psc_req_release(g);
        } else {
            gm->taker = req;
        }
        return;
    }
    if (!con || psc_con_sends_over(con)) {
        psc_req_done(req, PSCOM_REQ_STATE_ERROR);
        return;
    }
    psc_list_add_tail(&req->next, &posted);
}

/* Send c, a group message with xlen bytes of xheader, over con, or fail it
 * when the group has forgotten the connection (con NULL). */
static void group_send(struct psc_con *con, struct psc_req *c, uint8_t type,
                       size_t xlen, void *body, size_t body_len)
{
    c->pub.state = PSCOM_REQ_STATE_SEND_REQUEST | PSCOM_REQ_STATE_POSTED;
    if (!con) {
        psc_req_done(c, PSCOM_REQ_STATE_ERROR);
        return;
    }
    psc_xmsg_send(con, c, type, &c->pub.header, xlen, body, body_len);
}

int psc_group_header_check(const pscom_header_net_t *hdr, const char **why)
{
    if (hdr->xheader_len < sizeof(pscom_xheader_bcast_t) ||
        (hdr->msg_type == PSC_MSG_BARRIER &&
         (hdr->xheader_len != sizeof(pscom_xheader_bcast_t) || hdr->data_len))) {
        *why = "group message with a bad length";
        return -1;
    }
    return 0;
}

/* What is wrong with the flags of a group message (hdr with its xheader),
 * or NULL. */
static const char *flags_check(const pscom_header_net_t *hdr)
{
    const pscom_xheader_bcast_t *b = (const void *)(hdr + 1);
    uint32_t flags = b->bcast_arg2;
    uint64_t full;

    if (hdr->msg_type == PSC_MSG_BARRIER)
        return flags & ~GROUP_FAILED ? "barrier message with unknown flags"
                                     : NULL;
    if (flags & ~(GROUP_FAILED | GROUP_CUT))
        return "broadcast with unknown flags";
    if (flags & GROUP_FAILED)
        return hdr->data_len || (flags & GROUP_CUT)
                   ? "broadcast failure notice with a body"
                   : NULL;
    if (!(flags & GROUP_CUT)) return NULL;
    if (hdr->xheader_len < sizeof(*b) + sizeof(full))
        return "cut broadcast without the root's length";
    memcpy(&full, (const char *)b + hdr->xheader_len - sizeof(full),
           sizeof(full));
    if (full <= hdr->data_len || full > PSCOM_DATA_LEN_MASK)
        return "cut broadcast with a root's length that does not fit its body";
    return NULL;
}

int psc_group_rx(struct psc_con *con, pscom_header_net_t *hdr,
                 struct psc_req **body)
{
    struct gkey key = key_of(hdr);
    struct psc_list *pos;
    const char *why = flags_check(hdr);

    if (why) {
        psc_err("%s: received a %s; closing the connection", psc_con_str(con),
                why);
        psc_con_fail(con, PSCOM_OP_READ, PSCOM_ERR_IOERROR);
        return -1;
    }
    psc_list_for_each(pos, &posted) {
        struct psc_req *req = psc_list_entry(pos, struct psc_req, next);
        struct grecv *gr = (struct grecv *)req->pub.user;
        if (req->pub.connection != &con->pub || !key_eq(&gr->key, &key))
            continue;
        psc_list_del(&req->next);
        accept_header(req, hdr, hdr->data_len);
        *body = req;
        return 0;
    }

    uint64_t len = hdr->data_len;
    struct psc_req *g = NULL;
    if (len <= SIZE_MAX - sizeof(struct gmsg))
        g = psc_req_alloc(hdr->xheader_len, sizeof(struct gmsg) + len);
    if (!g) {
        psc_err("%s: out of memory keeping a group message of %llu bytes "
                "that came before its receive; closing the connection",
                psc_con_str(con), (unsigned long long)len);
        psc_con_fail(con, PSCOM_OP_READ, PSCOM_ERR_STDERROR);
        return -1;
    }
    struct gmsg *gm = (struct gmsg *)g->pub.user;
    gm->key = key;
    memcpy(&g->pub.header, hdr, PSC_HDR_LEN + hdr->xheader_len);
    g->pub.xheader_len = hdr->xheader_len;
    g->pub.connection = &con->pub;
    g->pub.data = gm->data;
    g->pub.data_len = len;
    g->pub.ops.io_done = unexpected_done;
    psc_list_add_tail(&g->next, &unexpected);
    *body = g;
    return 0;
}

void psc_group_con_fail(struct psc_con *con)
{
    struct psc_list failed, *pos, *tmp;
    psc_list_init(&failed);

    /* Unexpected messages that arrived whole stay receivable (until
     * psc_group_con_retired); those still arriving end through the core
     * (unexpected_done). */
    psc_list_for_each_safe(pos, tmp, &posted) {
        struct psc_req *req = psc_list_entry(pos, struct psc_req, next);
        if (req->pub.connection != &con->pub) continue;
        psc_list_del(&req->next);
        psc_list_add_tail(&req->next, &failed);
    }
    while (!psc_list_empty(&failed)) {
        struct psc_req *req = psc_list_first(&failed, struct psc_req, next);
        psc_list_del(&req->next);
        psc_req_done(req, PSCOM_REQ_STATE_ERROR);
    }
}

void psc_group_con_retired(struct psc_con *con)
{
    struct psc_list *pos, *tmp;
    unsigned n = 0;

    /* Those still arriving end through the core (unexpected_done). */
    psc_list_for_each_safe(pos, tmp, &unexpected) {
        struct psc_req *g = psc_list_entry(pos, struct psc_req, next);
        struct gmsg *gm = (struct gmsg *)g->pub.user;
        if (g->pub.connection != &con->pub || !gm->arrived) continue;
        psc_list_del(&g->next);
        psc_req_release(g);
        n++;
    }
    if (n) drop_warn(con, n);
    while (!psc_list_empty(&con->group_slots)) {
        struct gslot *slot =
            psc_list_first(&con->group_slots, struct gslot, next);
        psc_list_del(&slot->next);
        slot->con = NULL;
    }
}

/* g forgets all its connections (lock held). */
static void forget_members_locked(struct PSCOM_group *g)
{
    for (uint32_t i = 0; i < g->size; i++) {
        struct gslot *slot = &g->members[i];
        if (!slot->con) continue;
        psc_list_del(&slot->next);
        slot->con = NULL;
    }
}

void psc_group_sock_closed(struct psc_sock *sock)
{
    struct psc_list *pos, *tmp;
    psc_list_for_each_safe(pos, tmp, &groups) {
        struct PSCOM_group *g = psc_list_entry(pos, struct PSCOM_group, next);
        if (g->sock != sock) continue;
        psc_list_del(&g->next);
        g->sock = NULL;
        forget_members_locked(g);
    }
}

/* ---------------------------------------------------------------------- */
/* Groups                                                                 */
/* ---------------------------------------------------------------------- */

static struct PSCOM_group *find_locked(struct psc_sock *sock, uint32_t id)
{
    struct psc_list *pos;
    psc_list_for_each(pos, &groups) {
        struct PSCOM_group *g = psc_list_entry(pos, struct PSCOM_group, next);
        if (g->id == id && !g->closed && (!sock || g->sock == sock)) return g;
    }
    return NULL;
}

/* The barrier's round requests: a send and a receive of a BARRIER
 * message. Both, or false and neither. */
static bool barrier_reqs_alloc(struct psc_req **send, struct psc_req **recv)
{
    *send = psc_req_alloc(sizeof(pscom_xheader_bcast_t), 0);
    *recv = psc_req_alloc(sizeof(pscom_xheader_bcast_t), sizeof(struct grecv));
    if (*send && *recv) return true;
    if (*send) psc_req_release(*send);
    if (*recv) psc_req_release(*recv);
    *send = *recv = NULL;
    return false;
}

static void barrier_reqs_release(struct psc_req *send, struct psc_req *recv)
{
    if (send) psc_req_release(send);
    if (recv) psc_req_release(recv);
}

/* Free g, which no barrier uses and which is on no list (lock held). */
static void group_free_locked(struct PSCOM_group *g)
{
    forget_members_locked(g);
    barrier_reqs_release(g->bar_send, g->bar_recv);
    free(g);
}

/* Name g's connections (lock held): each slot joins its connection's
 * list. NULL, or why not (then g names none). */
static const char *join_members_locked(struct PSCOM_group *g,
                                       pscom_connection_t **connections)
{
    for (uint32_t i = 0; i < g->size; i++) {
        /* A retired connection is freed soon, and not retired again. */
        if (i != g->rank && con_of(connections[i])->zombie)
            return "a connection of the group is closed";
    }
    for (uint32_t i = 0; i < g->size; i++) {
        if (i == g->rank) continue;
        struct gslot *slot = &g->members[i];
        slot->con = con_of(connections[i]);
        psc_list_add_tail(&slot->next, &slot->con->group_slots);
    }
    return NULL;
}

pscom_group_t *pscom_group_open(pscom_socket_t *socket, uint32_t group_id,
                                uint32_t my_grank, uint32_t group_size,
                                pscom_connection_t **connections)
{
    if (!socket || !group_size || my_grank >= group_size ||
        (group_size > 1 && !connections)) {
        psc_err("pscom_group_open(group %u): rank %u of %u, socket %p, "
                "connections %p: invalid arguments", group_id, my_grank,
                group_size, (void *)socket, (void *)connections);
        return NULL;
    }
    for (uint32_t i = 0; i < group_size; i++) {
        if (i == my_grank) continue;
        if (!connections[i] ||
            con_of(connections[i])->magic != PSC_CON_MAGIC ||
            connections[i]->socket != socket) {
            psc_err("pscom_group_open(group %u): the connection of rank %u "
                    "is not an open connection of this socket", group_id, i);
            return NULL;
        }
    }
    struct PSCOM_group *g =
        calloc(1, sizeof(*g) + group_size * sizeof(g->members[0]));
    if (!g || (group_size > 1 &&
               !barrier_reqs_alloc(&g->bar_send, &g->bar_recv))) {
        psc_err("pscom_group_open(group %u, %u members): out of memory",
                group_id, group_size);
        free(g);
        return NULL;
    }
    g->magic = GROUP_MAGIC;
    g->sock = sock_of(socket);
    g->id = group_id;
    g->rank = my_grank;
    g->size = group_size;

    const char *why = NULL;
    psc_lock();
    if (g->sock->magic != PSC_SOCK_MAGIC || g->sock->closing)
        why = "the socket is closed";
    else if (find_locked(g->sock, group_id))
        why = "a group with this id is open on this socket already";
    else
        why = join_members_locked(g, connections);
    if (!why) psc_list_add_tail(&g->next, &groups);
    else group_free_locked(g);
    psc_unlock();
    if (why) {
        psc_err("pscom_group_open(group %u): %s", group_id, why);
        return NULL;
    }
    return g;
}

#define SOCKET_CLOSED \
    "the group's socket was closed; only pscom_group_close may be called"

/* Let go of the group (lock held): one use fewer (`uses`), and once none
 * is left of a closed group, it is freed. */
static void group_put(struct PSCOM_group *g, unsigned uses)
{
    g->busy -= uses;
    if (g->busy || !g->closed) return;
    psc_list_del(&g->next); /* unlinked already if its socket closed */
    group_free_locked(g);
}

static bool group_valid(pscom_group_t *group, const char *fn)
{
    if (group && group->magic == GROUP_MAGIC) return true;
    psc_err("%s(%p): not an open group (closed already?)", fn, (void *)group);
    return false;
}

void pscom_group_close(pscom_group_t *group)
{
    if (!group) return;
    if (!group_valid(group, "pscom_group_close")) return;
    psc_lock();
    group->magic = 0;
    group->closed = true;
    group_put(group, 0);
    psc_unlock();
}

pscom_group_t *pscom_group_find(pscom_socket_t *socket, uint32_t group_id)
{
    psc_lock();
    struct PSCOM_group *g = find_locked(socket ? sock_of(socket) : NULL,
                                        group_id);
    psc_unlock();
    return g;
}

uint32_t pscom_group_get_id(pscom_group_t *group)
{
    return group_valid(group, "pscom_group_get_id") ? group->id : 0;
}

/* ---------------------------------------------------------------------- */
/* Broadcast                                                              */
/* ---------------------------------------------------------------------- */

/* With the forwards it did not send (a start that found no memory). */
static void bcast_op_free(struct bcast_op *op)
{
    for (unsigned i = 0; i < FANOUT; i++)
        if (op->fwd[i]) psc_req_release(op->fwd[i]);
    free(op);
}

static void bcast_finish(struct bcast_op *op)
{
    struct psc_req *user = op->user;
    struct PSCOM_group *g = op->group;
    pscom_req_state_t err = op->err;
    bcast_op_free(op);
    group_put(g, 1);
    psc_req_done(user, err);
}

static void forward_written(pscom_req_state_t state, void *priv)
{
    struct bcast_op *op = priv;
    if (state & PSCOM_REQ_STATE_ERROR) op->err |= PSCOM_REQ_STATE_ERROR;
    if (!--op->pending) bcast_finish(op);
}

/* Pass the broadcast on to our children, then finish: the first len bytes
 * of the root's full_len, or a failure notice when our part failed
 * (op->err). */
static void bcast_forward(struct bcast_op *op, size_t len, uint64_t full_len)
{
    pscom_request_t *u = &op->user->pub;
    struct PSCOM_group *g = op->group;
    bool failed = op->err & PSCOM_REQ_STATE_ERROR;
    uint32_t flags = failed ? GROUP_FAILED : len < full_len ? GROUP_CUT : 0;
    size_t xlen = op->xlen + (flags & GROUP_CUT ? sizeof(full_len) : 0);

    op->pending = op->nchild + 1;
    for (unsigned i = 0; i < op->nchild; i++) {
        struct psc_req *c = op->fwd[i];
        op->fwd[i] = NULL;
        c->self_free = true;
        c->inplace_done = forward_written;
        c->inplace_priv = op;
        memcpy(&c->pub.xheader, &u->xheader, op->xlen);
        c->pub.xheader.bcast.bcast_arg1 = op->child_size[i];
        c->pub.xheader.bcast.bcast_arg2 = flags;
        if (flags & GROUP_CUT)
            memcpy((char *)&c->pub.xheader + op->xlen, &full_len,
                   sizeof(full_len));
        group_send(g->members[op->child[i]].con, c, PSC_MSG_BCAST, xlen,
                   failed ? NULL : u->data, failed ? 0 : len);
    }
    if (!--op->pending) bcast_finish(op);
}

/* Our part of the broadcast arrived in the user's buffer, or failed. */
static void bcast_received(pscom_request_t *r)
{
    struct grecv *gr = (struct grecv *)r->user;
    struct bcast_op *op = gr->op;
    pscom_request_t *u = &op->user->pub;

    if ((r->state & PSCOM_REQ_STATE_ERROR) || (gr->flags & GROUP_FAILED)) {
        op->err |= PSCOM_REQ_STATE_ERROR;
        bcast_forward(op, 0, 0);
        return;
    }
    size_t got = r->header.data_len < u->data_len ? r->header.data_len
                                                   : u->data_len;
    u->header = r->header;
    u->header.data_len = gr->full_len;
    memcpy(&u->xheader, &r->xheader, op->xlen);
    psc_req_state_add(op->user, PSCOM_REQ_STATE_IO_STARTED);
    if (got < gr->full_len)
        psc_req_state_add(op->user, PSCOM_REQ_STATE_TRUNCATED);
    bcast_forward(op, got, gr->full_len);
}

/* Fail the connection to member `rank` (lock held), if it has one. */
static void fail_member(struct PSCOM_group *g, uint32_t rank)
{
    struct psc_con *con = g->members[rank].con;
    if (con && !con->failed && !con->closing)
        psc_con_fail(con, PSCOM_OP_RW, PSCOM_ERR_STDERROR);
}

/* A broadcast that found no memory to start: the members next to us in
 * its tree would go on without us, out of step for good (our parent's
 * message taken by our next broadcast of that root, our children waiting
 * for one that never comes). Their connections fail instead, as one does
 * whose early group message cannot be kept: they end in error. */
static const char *bcast_no_memory(struct PSCOM_group *g, uint32_t root,
                                   unsigned parent, unsigned nchild,
                                   const unsigned start[])
{
    errno = ENOMEM;
    if (parent != NONE) fail_member(g, (parent + root) % g->size);
    for (unsigned i = 0; i < nchild; i++)
        fail_member(g, (start[i] + root) % g->size);
    return "out of memory; the connections to its parent and children in "
           "the broadcast tree are failed";
}

/* Start the broadcast req on group g (lock held): the request is posted,
 * with its xheader_len, data, data_len, group id and root. NULL, or why it
 * cannot start (then nothing was sent or posted). */
static const char *bcast_start_locked(struct psc_req *req,
                                      struct PSCOM_group *g)
{
    pscom_request_t *r = &req->pub;
    uint32_t root = r->xheader.bcast.bcast_root;
    unsigned u, parent, sub, start[FANOUT], size[FANOUT], nchild;

    if (root >= g->size) return "the root is not a rank of the group";
    u = (g->rank + g->size - root) % g->size;
    tree_locate(g->size, u, &parent, &sub);
    nchild = tree_children(u, sub, start, size);
    struct bcast_op *op = calloc(1, sizeof(*op));
    if (!op) return bcast_no_memory(g, root, parent, nchild, start);
    op->user = req;
    op->group = g;
    op->xlen = r->xheader_len;
    op->nchild = nchild;
    for (unsigned i = 0; i < op->nchild; i++) {
        op->child[i] = (start[i] + root) % g->size;
        op->child_size[i] = size[i];
        /* Room for the root's length: every request has spare xheader
         * room for a trailer (PSC_XHEADER_SPARE). */
        op->fwd[i] = psc_req_alloc(op->xlen, 0);
        if (!op->fwd[i]) {
            bcast_op_free(op);
            return bcast_no_memory(g, root, parent, nchild, start);
        }
    }

    if (parent == NONE) {
        r->state = PSCOM_REQ_STATE_SEND_REQUEST | PSCOM_REQ_STATE_POSTED |
                   PSCOM_REQ_STATE_IO_STARTED;
        r->header.xheader_len = (uint16_t)op->xlen;
        r->header.msg_type = PSC_MSG_BCAST;
        r->header.data_len = r->data_len;
        g->busy++;
        psc_hold(); /* the root sends: as pscom_post_send */
        if (r->data_len > PSCOM_DATA_LEN_MASK) {
            /* The members wait for it: they get a failure notice. */
            psc_err("pscom_post_bcast(group %u, root %u): data_len %zu is "
                    "more than a message can carry", g->id, root,
                    r->data_len);
            op->err = PSCOM_REQ_STATE_ERROR;
            bcast_forward(op, 0, 0);
        } else {
            bcast_forward(op, r->data_len, r->data_len);
        }
        psc_unhold_later();
        return NULL;
    }
    struct psc_req *rr = psc_req_alloc(op->xlen, sizeof(struct grecv));
    if (!rr) {
        bcast_op_free(op);
        return bcast_no_memory(g, root, parent, nchild, start);
    }
    struct grecv *gr = (struct grecv *)rr->pub.user;
    gr->key = (struct gkey){.type = PSC_MSG_BCAST,
                            .group_id = g->id,
                            .root = root};
    gr->op = op;
    gr->flags = 0;
    rr->self_free = true;
    rr->pub.xheader_len = op->xlen;
    rr->pub.data = r->data;
    rr->pub.data_len = r->data_len;
    rr->pub.ops.io_done = bcast_received;
    g->busy++;
    group_recv(rr, g->members[(parent + root) % g->size].con);
    return NULL;
}

void pscom_post_bcast(pscom_request_t *request)
{
    struct psc_req *req = req_of(request);
    pscom_request_t *r = request;
    const char *why = NULL;

    if (req->magic != PSC_REQ_MAGIC) {
        psc_err("pscom_post_bcast(%p): not a request, or freed",
                (void *)request);
        return;
    }
    psc_lock();
    if ((r->state & PSCOM_REQ_STATE_POSTED) &&
        !(r->state & PSCOM_REQ_STATE_DONE)) {
        psc_err("pscom_post_bcast: request %p is posted already",
                (void *)request);
        psc_unlock();
        return;
    }
    size_t xlen = r->xheader_len ? r->xheader_len : r->max_xheader_len;
    uint32_t gid = r->xheader.bcast.group_id;
    uint32_t root = r->xheader.bcast.bcast_root;
    struct PSCOM_group *g =
        find_locked(r->socket ? sock_of(r->socket) : NULL, gid);

    r->state = PSCOM_REQ_STATE_RECV_REQUEST | PSCOM_REQ_STATE_POSTED;
    if (xlen < sizeof(pscom_xheader_bcast_t) ||
        (xlen > r->max_xheader_len && xlen > sizeof(pscom_xheader_t))) {
        why = "xheader_len must hold pscom_xheader_bcast_t and fit the "
              "request";
    } else if (!g) {
        why = "no such group on this socket";
    } else {
        r->xheader_len = xlen;
        why = bcast_start_locked(req, g);
    }
    if (why) {
        psc_err("pscom_post_bcast(group %u, root %u): %s", gid, root, why);
        psc_req_done(req, PSCOM_REQ_STATE_ERROR);
    }
    psc_unlock();
}

/* The largest xheader_len of pscom_bcast: what a message carries, less the
 * broadcast's own part. */
#define BCAST_USER_XHEADER_MAX (PSC_XHEADER_MAX - sizeof(pscom_xheader_bcast_t))

void pscom_bcast(pscom_group_t *group, unsigned bcast_root, void *xheader,
                 size_t xheader_len, void *data, size_t data_len)
{
    if (!group_valid(group, "pscom_bcast")) return;
    /* A callback may close the group while we wait: its fields now. */
    uint32_t id = group->id, rank = group->rank;
    if (xheader_len > BCAST_USER_XHEADER_MAX) {
        psc_err("pscom_bcast(group %u, root %u): xheader_len %zu is more "
                "than the %zu bytes a broadcast can carry", id, bcast_root,
                xheader_len, BCAST_USER_XHEADER_MAX);
        return;
    }
    size_t xlen = sizeof(pscom_xheader_bcast_t) + xheader_len;
    pscom_request_t *r = pscom_request_create(xlen, 0);
    if (!r) return;
    r->xheader_len = xlen;
    r->data = data;
    r->data_len = data_len;
    r->xheader.bcast.group_id = id;
    r->xheader.bcast.bcast_root = bcast_root;
    bool root = bcast_root == rank;
    if (root && xheader_len) memcpy(r->xheader.bcast.user, xheader, xheader_len);

    psc_lock();
    r->socket = group->sock ? &group->sock->pub : NULL;
    r->state = PSCOM_REQ_STATE_RECV_REQUEST | PSCOM_REQ_STATE_POSTED;
    const char *why = group->sock ? bcast_start_locked(req_of(r), group)
                                  : SOCKET_CLOSED;
    if (why) psc_req_done(req_of(r), PSCOM_REQ_STATE_ERROR);
    psc_unlock();

    if (why) {
        psc_err("pscom_bcast(group %u, root %u): %s", id, bcast_root, why);
    } else {
        pscom_wait(r);
        if (r->state & PSCOM_REQ_STATE_ERROR)
            psc_err("pscom_bcast(group %u, root %u, rank %u): failed: a "
                    "connection of the broadcast tree failed, at this "
                    "member or above it", id, bcast_root, rank);
        else if (r->state & PSCOM_REQ_STATE_TRUNCATED)
            psc_err("pscom_bcast(group %u, root %u, rank %u): truncated: "
                    "the root sent %llu bytes, more than data_len %zu here "
                    "or at a member above", id, bcast_root, rank,
                    (unsigned long long)r->header.data_len, data_len);
    }
    if (!root && xheader_len && pscom_req_successful(r))
        memcpy(xheader, r->xheader.bcast.user, xheader_len);
    pscom_request_free(r);
}

/* ---------------------------------------------------------------------- */
/* Barrier                                                                */
/* ---------------------------------------------------------------------- */

/* What the barrier's round (its send s to rank `to`, its receive rr from
 * rank `from`) saw fail, into why; nothing when why holds a failure
 * already. */
static void round_failure(char *why, size_t len, pscom_request_t *s,
                          uint32_t to, pscom_request_t *rr, uint32_t from)
{
    const struct grecv *gr = (const struct grecv *)rr->user;
    if (why[0]) return;
    if (!pscom_req_successful(s))
        snprintf(why, len, "the connection to rank %u failed", to);
    else if (!pscom_req_successful(rr))
        snprintf(why, len, "the connection from rank %u failed", from);
    else if (gr->flags & GROUP_FAILED)
        snprintf(why, len, "rank %u had seen a failure", from);
}

void pscom_barrier(pscom_group_t *group)
{
    if (!group_valid(group, "pscom_barrier")) return;
    uint32_t size = group->size, me = group->rank, id = group->id;
    char why[96] = ""; /* the first failure seen */
    struct psc_req *s = NULL, *rr = NULL;

    psc_lock();
    bool dead = !group->sock;
    if (!dead) {
        /* A callback may close the group while a round waits. */
        group->busy++;
        s = group->bar_send;
        rr = group->bar_recv;
        group->bar_send = group->bar_recv = NULL;
    }
    psc_unlock();
    if (dead) {
        psc_err("pscom_barrier(group %u): %s", id, SOCKET_CLOSED);
        return;
    }
    if (size > 1 && !s && !barrier_reqs_alloc(&s, &rr)) {
        /* Another barrier of the group has its requests: a second thread,
         * or a callback, called one while it runs. Nothing was sent. */
        psc_err("pscom_barrier(group %u, rank %u of %u): out of memory "
                "before the barrier began, while another barrier of the "
                "group was under way (a group's collectives are called one "
                "after the other); this member did not take part", id, me,
                size);
        psc_lock();
        group_put(group, 1);
        psc_unlock();
        return;
    }

    for (uint32_t dist = 1; dist < size; dist *= 2) {
        uint32_t to = (me + dist) % size, from = (me + size - dist) % size;
        size_t xlen = sizeof(pscom_xheader_bcast_t);
        psc_req_renew(s);
        psc_req_renew(rr);
        struct grecv *gr = (struct grecv *)rr->pub.user;
        gr->key = (struct gkey){.type = PSC_MSG_BARRIER, .group_id = id};
        rr->pub.xheader_len = xlen;
        s->pub.xheader.bcast = (pscom_xheader_bcast_t){
            .group_id = id,
            .bcast_arg1 = dist,
            .bcast_arg2 = why[0] ? GROUP_FAILED : 0};

        psc_lock();
        psc_enter(); /* a failure's callbacks may close: free after */
        group_recv(rr, group->members[from].con);
        group_send(group->members[to].con, s, PSC_MSG_BARRIER, xlen, NULL, 0);
        psc_leave();
        psc_unlock();
        pscom_wait(&s->pub);
        pscom_wait(&rr->pub);
        round_failure(why, sizeof(why), &s->pub, to, &rr->pub, from);
    }
    psc_lock();
    if (!group->bar_send) {
        group->bar_send = s;
        group->bar_recv = rr;
    } else {
        barrier_reqs_release(s, rr);
    }
    group_put(group, 1);
    psc_unlock();
    if (why[0])
        psc_err("pscom_barrier(group %u, rank %u of %u): %s; the barrier "
                "ended with an error", id, me, size, why);
}

/* ---------------------------------------------------------------------- */
/* State dump                                                             */
/* ---------------------------------------------------------------------- */

/* The member rank of con in g, or NONE. */
static unsigned member_rank_locked(const struct PSCOM_group *g,
                                   const struct psc_con *con)
{
    for (uint32_t i = 0; i < g->size; i++)
        if (g->members[i].con == con) return i;
    return NONE;
}

void psc_group_dump_locked(FILE *out, struct psc_sock *sock)
{
    struct psc_list *gpos, *rpos;
    psc_list_for_each(gpos, &groups) {
        struct PSCOM_group *g = psc_list_entry(gpos, struct PSCOM_group, next);
        if (g->sock != sock) continue;
        fprintf(out, "  group %u rank %u of %u: %u broadcast/barrier under "
                "way%s\n", g->id, g->rank, g->size, g->busy,
                g->closed ? " (closed)" : "");
        psc_list_for_each(rpos, &posted) {
            struct psc_req *req = psc_list_entry(rpos, struct psc_req, next);
            struct grecv *gr = (struct grecv *)req->pub.user;
            struct psc_con *con =
                req->pub.connection ? con_of(req->pub.connection) : NULL;
            if (gr->key.group_id != g->id || !con || con->sock != sock)
                continue;
            char what[48] = "a barrier message";
            if (gr->key.type == PSC_MSG_BCAST)
                snprintf(what, sizeof(what), "the broadcast of root %u",
                         gr->key.root);
            fprintf(out, "    waiting for %s from group rank %u: "
                    "%.8s(r%d)\n", what, member_rank_locked(g, con),
                    con->pub.remote_con_info.name,
                    con->pub.remote_con_info.rank);
        }
    }
}
