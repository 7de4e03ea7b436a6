/*
 * Connections: life cycle, failure, closing and the send queue kick.
 *
 * A connection is freed only at a safe point (progress depth 0), because
 * application callbacks may close it while a plugin is still inside its
 * read or write loop for it: closing retires it (psc_con_retire) and
 * psc_con_reap() frees it later.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core.h"

struct psc_con *psc_con_create(struct psc_sock *sock)
{
    size_t user = sock->pub.connection_userdata_size;
    struct psc_con *con = calloc(1, sizeof(*con) + user);
    if (!con) return NULL;

    con->magic = PSC_CON_MAGIC;
    con->sock = sock;
    con->id = ++psc_ctx.next_id;
    psc_list_init(&con->next_con);
    psc_list_init(&con->next_dead);
    psc_list_init(&con->sendq);
    psc_list_init(&con->recvq_user);
    psc_list_init(&con->net_recvq);
    psc_list_init(&con->rndv_sendq);
    psc_list_init(&con->rndv_recvq);
    psc_list_init(&con->rkeys);
    psc_list_init(&con->group_slots);
    psc_list_init(&con->rx_deferq);
    psc_rx_init(&con->rx);
    con->rndv_threshold = psc_settings.rendezvous;

    pscom_connection_t *c = &con->pub;
    c->socket = &sock->pub;
    c->state = PSCOM_CON_STATE_NO_RW;
    c->type = PSCOM_CON_TYPE_NONE;
    c->remote_con_info.rank = PSCOM_RANK_UNDEFINED;
    c->remote_con_info.node_id = -1;
    c->remote_con_info.tcp.portno = -1;
    c->userdata_size = user;
    return con;
}

void psc_con_make_visible(struct psc_con *con)
{
    if (con->visible) return;
    con->visible = true;
    psc_list_add_tail(&con->next_con, &con->sock->cons);
}

pscom_connection_t *pscom_open_connection(pscom_socket_t *socket)
{
    if (!socket) return NULL;
    psc_lock();
    if (sock_of(socket)->closing) {
        psc_unlock();
        psc_err("pscom_open_connection: the socket is closing");
        return NULL;
    }
    struct psc_con *con = psc_con_create(sock_of(socket));
    if (con) psc_con_make_visible(con);
    psc_unlock();
    if (!con) {
        psc_err("pscom_open_connection: out of memory");
        return NULL;
    }
    return &con->pub;
}

const char *psc_con_str(struct psc_con *con)
{
    static __thread char buf[256];
    const pscom_con_info_t *l = &con->sock->pub.local_con_info;
    const pscom_con_info_t *r = &con->pub.remote_con_info;
    snprintf(buf, sizeof(buf), "connection %.8s(r%d) <-> %.8s(r%d)@%s [%s]",
             l->name, l->rank, r->name, r->rank,
             con->peer_addr[0] ? con->peer_addr : "?",
             pscom_con_type_str(con->pub.type));
    return buf;
}

const char *pscom_plugin_con_str(pscom_plugin_con_t *con)
{
    return psc_con_str(con);
}

pid_t pscom_plugin_con_peer_pid(pscom_plugin_con_t *con)
{
    return con->local_pid;
}

pscom_connection_t *pscom_plugin_con_pub(pscom_plugin_con_t *con)
{
    return &con->pub;
}

pscom_socket_t *pscom_plugin_con_socket(pscom_plugin_con_t *con)
{
    return &con->sock->pub;
}

void psc_con_kick(struct psc_con *con)
{
    if (!con->plugin_open || con->failed) return;
    /* Plugins may report completions from tx_kick: their callbacks run
     * after it returned, and connections they close are freed after them. */
    psc_enter();
    psc_hold();
    con->plugin->desc->ops->tx_kick(con, con->plugin_priv);
    psc_unhold();
    psc_leave();
}

void psc_con_enqueue(struct psc_con *con, struct psc_req *req)
{
    /* Nothing queued before it, and the plugin takes it whole at once (a
     * small frame, copied): sent, without the queue and tx_kick. */
    if (psc_con_tx_now(con, req->iov, req->iov[1].iov_len ? 2 : 1)) {
        req->tx_left = 0;
        psc_req_state_add(req, PSCOM_REQ_STATE_IO_STARTED);
        /* Its completion may close and free the connection: only after. */
        psc_enter();
        psc_proto_frame_sent(con, req);
        psc_leave();
        return;
    }
    psc_con_queue(con, req);
}

void psc_con_queue(struct psc_con *con, struct psc_req *req)
{
    psc_list_add_tail(&req->next, &con->sendq);
    psc_con_kick(con);
}

void psc_con_established(struct psc_con *con, struct psc_plugin *plugin,
                         void *priv)
{
    const pscom_plugin_t *d = plugin->desc;

    con->plugin = plugin;
    con->plugin_priv = priv;
    con->plugin_open = true;
    con->tx_now = PSCOM_PLUGIN_API_MINOR(d->api_version) >= 3 ? d->ops->tx_now
                                                             : NULL;
    psc_plugin_con_opened(plugin);
    psc_ctx.local_procs_stale = true;
    con->pub.type = d->con_type;
    con->pub.state = PSCOM_CON_STATE_RW;
    con->ondemand = false;
    con->rndv_threshold = d->rendezvous ? *d->rendezvous : psc_settings.rendezvous;
    psc_sock_ondemand_settled(con->sock);
    if (psc_settings.debug_contype)
        psc_log_write(PSC_LOG_ERROR, "%s: using %s", psc_con_str(con), d->name);
    else
        psc_debug("%s: established on %s", psc_con_str(con), d->name);
    if (!psc_list_empty(&con->sendq)) psc_con_kick(con);
}

void pscom_plugin_con_error(pscom_plugin_con_t *con, pscom_op_t op,
                            pscom_err_t err, const char *what, int sys_errno)
{
    if (con->failed) return;
    if (err == PSCOM_ERR_EOF)
        psc_debug("%s: the peer closed the connection (%s)", psc_con_str(con),
                  what);
    else
        psc_warn("%s: %s failed: %s; the connection is closed", psc_con_str(con),
                 what, sys_errno ? strerror(sys_errno) : pscom_err_str(err));
    psc_con_fail(con, op, err);
}

/* The socket's con_error for a connection that failed while callbacks
 * were held (psc_hold): it waits behind them, so that the application
 * learns of the failure after the requests that completed before it. */
struct con_error_event {
    struct psc_con *con;
    pscom_op_t op;
    pscom_err_t err;
};

static void report_con_error(struct psc_con *con, pscom_op_t op,
                             pscom_err_t err)
{
    pscom_socket_t *s = &con->sock->pub;
    if (con->visible && !con->closing && s->ops.con_error)
        s->ops.con_error(&con->pub, op, err);
}

static void con_error_event_run(pscom_req_state_t state, void *priv)
{
    const struct con_error_event *e = priv;
    report_con_error(e->con, e->op, e->err);
}

static void con_error_later(struct psc_con *con, pscom_op_t op,
                            pscom_err_t err)
{
    struct psc_req *ev = psc_req_alloc(0, sizeof(struct con_error_event));
    if (!ev) {
        report_con_error(con, op, err);
        return;
    }
    struct con_error_event *e = (struct con_error_event *)ev->pub.user;
    *e = (struct con_error_event){.con = con, .op = op, .err = err};
    ev->pub.connection = &con->pub; /* kept until it ran (psc_con_reap) */
    ev->self_free = true;
    ev->inplace_done = con_error_event_run;
    ev->inplace_priv = e;
    psc_req_done(ev, 0); /* held: runs in turn */
}

void psc_con_fail(struct psc_con *con, pscom_op_t op, pscom_err_t err)
{
    if (con->failed) return;
    con->failed = true;
    con->tx_now = NULL;
    con->error = err;
    con->pub.state = PSCOM_CON_STATE_CLOSED;
    psc_ctx.events++;
    psc_sock_ondemand_settled(con->sock);

    /* Sends may still be in the transport's hands (asynchronous plugins):
     * they fail once the plugin is closed (psc_con_reap). */
    if (con->plugin_open) {
        psc_proto_fail_receives(con);
        if (psc_list_unlinked(&con->next_dead))
            psc_list_add_tail(&con->next_dead, &psc_ctx.dead);
    } else {
        psc_proto_fail_requests(con);
    }

    if (psc_holding()) con_error_later(con, op, err);
    else report_con_error(con, op, err);
}

/* PSP_DEBUG_STATS: one line for a connection that was established. */
static void print_stats(struct psc_con *con)
{
    const struct psc_con_stats *s = &con->stats;

    psc_log_write(PSC_LOG_INFO,
                  "%s: statistics: sent %llu messages, %llu bytes (%llu by "
                  "rendezvous); received %llu messages, %llu bytes (%llu by "
                  "rendezvous, %llu unexpected); one-sided %llu operations, "
                  "%llu bytes",
                  psc_con_str(con), (unsigned long long)s->tx_msgs,
                  (unsigned long long)s->tx_bytes,
                  (unsigned long long)s->tx_rndv,
                  (unsigned long long)s->rx_msgs,
                  (unsigned long long)s->rx_bytes,
                  (unsigned long long)s->rx_rndv,
                  (unsigned long long)s->rx_unexpected,
                  (unsigned long long)s->rma_ops,
                  (unsigned long long)s->rma_bytes);
}

void psc_con_retire(struct psc_con *con)
{
    if (con->zombie) return;
    con->zombie = true;
    if (psc_settings.debug_stats && con->plugin) print_stats(con);
    psc_proto_drop_unexpected(con);
    psc_group_con_retired(con);
    if (con->precon) {
        psc_precon_destroy(con->precon);
        con->precon = NULL;
    }
    if (con->visible) psc_list_del(&con->next_con);
    con->visible = false;
    psc_list_add_tail(&con->next_con, &psc_ctx.zombies);
    if (con->plugin_open && psc_list_unlinked(&con->next_dead))
        psc_list_add_tail(&con->next_dead, &psc_ctx.dead);
}

/* Does a held callback name con (a request on it, a con_error report), or,
 * with con NULL, the socket sock (a receive on it)? */
static bool held_names(const struct psc_con *con, const struct psc_sock *sock)
{
    struct psc_list *pos;
    psc_list_for_each(pos, &psc_ctx.held) {
        const struct psc_req *req =
            psc_list_entry(pos, struct psc_req, next_held);
        if (con ? req->pub.connection == &con->pub
                : req->pub.socket == &sock->pub)
            return true;
    }
    return false;
}

static bool sock_in_use(const struct psc_sock *sock)
{
    if (!psc_list_empty(&sock->cons) || held_names(NULL, sock)) return true;
    struct psc_list *pos;
    psc_list_for_each(pos, &psc_ctx.zombies) {
        if (psc_list_entry(pos, struct psc_con, next_con)->sock == sock)
            return true;
    }
    return false;
}

void psc_con_reap(void)
{
    /* Callbacks run here may close more: this loop reaps them. */
    psc_ctx.depth++;
again:
    while (!psc_list_empty(&psc_ctx.dead)) {
        struct psc_con *con =
            psc_list_first(&psc_ctx.dead, struct psc_con, next_dead);
        psc_list_del(&con->next_dead);
        if (!con->plugin_open) continue;
        con->plugin_open = false;
        psc_plugin_con_closed(con->plugin);
        psc_ctx.local_procs_stale = true;
        psc_rma_con_release(con);
        con->plugin->desc->ops->close(con, con->plugin_priv);
        psc_proto_plugin_closed(con);
    }
    /* An application's close reports everything done by the time it
     * returns: what is held runs, cut or not. */
    if (psc_ctx.close_called && !psc_ctx.hold) {
        if (!psc_list_empty(&psc_ctx.held)) {
            psc_req_run_held(true);
            goto again;
        }
        psc_ctx.close_called = false;
    }
    psc_ctx.depth--;
    /* Else what is held keeps its order and its cut: the connections and
     * sockets it names wait for a later reap. */
    struct psc_list *pos, *tmp;
    psc_list_for_each_safe(pos, tmp, &psc_ctx.zombies) {
        struct psc_con *con = psc_list_entry(pos, struct psc_con, next_con);
        if (held_names(con, NULL)) continue;
        psc_list_del(&con->next_con);
        psc_rx_init(&con->rx);
        free(con->plugin_priv);
        con->magic = 0;
        free(con);
    }
    psc_list_for_each_safe(pos, tmp, &psc_ctx.closed_socks) {
        struct psc_sock *sock = psc_list_entry(pos, struct psc_sock, next_sock);
        if (sock_in_use(sock)) continue;
        psc_list_del(&sock->next_sock);
        free(sock);
    }
}

pscom_connection_t *pscom_get_next_connection(pscom_socket_t *socket,
                                              pscom_connection_t *connection)
{
    struct psc_sock *sock = sock_of(socket);
    psc_lock(); /* another thread's progress adds and removes connections */
    struct psc_list *pos =
        connection ? con_of(connection)->next_con.next : sock->cons.next;
    pscom_connection_t *next =
        pos == &sock->cons ? NULL
                           : &psc_list_entry(pos, struct psc_con, next_con)->pub;
    psc_unlock();
    return next;
}

/* ---------------------------------------------------------------------- */
/* Connecting                                                             */
/* ---------------------------------------------------------------------- */

/* Split "host:port[@name]". 0, or -1 with a message. */
static int parse_ep(const char *ep, char *host, size_t hlen, int *port,
                    char name[8])
{
    const char *colon = strrchr(ep, ':');
    const char *at = strchr(ep, '@');
    if (at && colon > at) colon = NULL;
    if (!colon || colon == ep || (size_t)(colon - ep) >= hlen) return -1;

    memcpy(host, ep, colon - ep);
    host[colon - ep] = 0;
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (end == colon + 1 || p <= 0 || p > 65535) return -1;
    if (at ? end != at : *end != 0) return -1;
    *port = (int)p;
    memset(name, 0, 8);
    if (at) memcpy(name, at + 1, strnlen(at + 1, 8));
    return 0;
}

/* Does sa (with the name from the endpoint string) name `sock` itself? */
static bool is_own_endpoint(struct psc_sock *sock, const struct sockaddr_in *sa,
                            const char name[8])
{
    const pscom_socket_t *s = &sock->pub;
    static const char none[8];
    if (s->listen_portno <= 0 || ntohs(sa->sin_port) != s->listen_portno)
        return false;
    if (memcmp(name, none, 8) && memcmp(name, s->local_con_info.name, 8))
        return false;
    uint32_t a = ntohl(sa->sin_addr.s_addr);
    return (a >> 24) == 127 || a == (uint32_t)psc_ctx.node_id;
}

/* A connection to one's own socket: one connection that delivers to
 * itself (ParaStation MPI relies on that, and on con_accept being called
 * for that same connection). PSCOM_NOT_IMPLEMENTED when the loop transport
 * is not allowed here. */
static pscom_err_t connect_self(struct psc_con *con)
{
    struct psc_plugin *lp = psc_plugin_find("loop");
    uint64_t mask = con->sock->con_type_mask;
    if (!lp || lp->state != PSC_PLUGIN_LOADED ||
        !(mask & ((uint64_t)1 << PSCOM_CON_TYPE_LOOP)))
        return PSCOM_NOT_IMPLEMENTED;
    const pscom_plugin_t *d = lp->desc;
    void *priv = calloc(1, d->con_priv_size);
    uint8_t blob[64];
    size_t len = sizeof(blob);
    if (!priv || d->ops->hs_start(con, priv, blob, &len) ||
        d->ops->hs_connect(con, priv, blob, len) ||
        d->ops->open(con, priv, -1) < 0) {
        free(priv);
        psc_err("%s: cannot connect the socket to itself", psc_con_str(con));
        return PSCOM_ERR_STDERROR;
    }
    pscom_socket_t *s = &con->sock->pub;
    con->pub.remote_con_info = s->local_con_info;
    psc_con_established(con, lp, priv);
    if (s->ops.con_accept) s->ops.con_accept(&con->pub);
    return PSCOM_SUCCESS;
}

static bool connect_settled(void *arg)
{
    struct psc_con *con = arg;
    return con->failed || con->plugin_open;
}

pscom_err_t pscom_connect(pscom_connection_t *connection, const char *ep_str,
                          int dest_rank, uint64_t connection_flags)
{
    char host[256], name[8];
    int port;
    struct sockaddr_in sa;

    if (!connection || !ep_str) return PSCOM_ERR_INVALID;
    if (parse_ep(ep_str, host, sizeof(host), &port, name)) {
        psc_err("pscom_connect: cannot parse the endpoint \"%s\"; expected "
                "HOST:PORT or HOST:PORT@NAME (from pscom_socket_get_ep_str)",
                ep_str);
        return PSCOM_ERR_INVALID;
    }
    pscom_err_t ret = psc_resolve(host, port, &sa);
    if (ret) return ret;

    psc_lock();
    struct psc_con *con = con_of(connection);
    if (con->plugin_open || con->precon || con->failed || con->ondemand) {
        psc_unlock();
        psc_err("pscom_connect: %s is connected or in use already; open a "
                "new connection with pscom_open_connection",
                psc_con_str(con));
        return PSCOM_ERR_ALREADY;
    }
    connection->remote_con_info.rank = dest_rank;
    connection->remote_con_info.tcp.portno = port;
    memcpy(connection->remote_con_info.name, name, 8);
    snprintf(con->peer_addr, sizeof(con->peer_addr), "%.48s:%d", host, port);

    if (is_own_endpoint(con->sock, &sa, name)) {
        ret = connect_self(con);
        if (ret != PSCOM_NOT_IMPLEMENTED) {
            psc_unlock();
            return ret;
        }
        ret = PSCOM_SUCCESS; /* loop not allowed: connect like to anyone */
    }
    if (connection_flags & PSCOM_CON_FLAG_ONDEMAND) {
        con->ondemand = true;
        con->od_addr = sa;
        connection->type = PSCOM_CON_TYPE_ONDEMAND;
        connection->state = PSCOM_CON_STATE_RW;
        psc_unlock();
        return PSCOM_SUCCESS;
    }
    psc_precon_connect(con, &sa);
    psc_progress_until(connect_settled, con, 0);
    if (con->failed) ret = con->error ? con->error : PSCOM_ERR_IOERROR;
    psc_unlock();
    return ret;
}

/* ---------------------------------------------------------------------- */
/* Closing                                                                */
/* ---------------------------------------------------------------------- */

static bool sends_drained(void *arg)
{
    struct psc_con *con = arg;
    return con->failed || (psc_list_empty(&con->sendq) &&
                           psc_list_empty(&con->rndv_sendq));
}

static bool sendq_empty(void *arg)
{
    struct psc_con *con = arg;
    return con->failed || psc_list_empty(&con->sendq);
}

void pscom_flush(pscom_connection_t *connection)
{
    if (!connection) return;
    psc_lock();
    psc_progress_until(sendq_empty, con_of(connection), 0);
    psc_unlock();
}

/* How long a close may wait (ms; 0: no limit): `limit`, and at exit no
 * longer than what is left of the exit handler's budget. */
static unsigned close_limit(unsigned limit)
{
    if (!psc_ctx.exit_until) return limit;
    uint64_t now = psc_now_ms();
    uint64_t left = now < psc_ctx.exit_until ? psc_ctx.exit_until - now : 1;
    return limit && limit < left ? limit : (unsigned)left;
}

void psc_con_close(struct psc_con *con)
{
    if (con->zombie || con->closing) return;
    if (con->plugin_open && !con->failed) {
        /* Once: a callback that the EOF's flush runs may close again. */
        if (!con->eof_sent) {
            unsigned limit = close_limit(psc_settings.shutdown_timeout_ms);
            if (psc_progress_until(sends_drained, con, limit))
                psc_warn("%s: closing with sends still pending after "
                         "%u ms (PSP_SHUTDOWN_TIMEOUT%s); they fail",
                         psc_con_str(con), limit,
                         psc_ctx.exit_until ? ", at exit" : "");
            if (!con->failed) {
                psc_proto_send_eof(con);
                con->eof_sent = true;
            }
        }
        if (!con->failed) {
            unsigned limit = psc_settings.shutdown_timeout_ms;
            psc_progress_until(sendq_empty, con,
                               close_limit(limit ? limit : 10000));
        }
    }
    con->closing = true;
    if (!con->failed) {
        con->failed = true;
        con->tx_now = NULL;
        con->error = PSCOM_ERR_EOF;
        if (con->plugin_open)
            psc_proto_fail_receives(con); /* sends: after the plugin's close */
        else
            psc_proto_fail_requests(con);
    }
    con->pub.state = PSCOM_CON_STATE_CLOSED;
    psc_con_retire(con);
}

void pscom_close_connection(pscom_connection_t *connection)
{
    if (!connection) return;
    psc_lock();
    psc_enter();
    psc_ctx.close_called = true;
    psc_run_all_deferred();
    struct psc_con *con = con_of(connection);
    if (con->magic == PSC_CON_MAGIC) psc_con_close(con);
    psc_leave();
    psc_unlock();
}

/* The open connection whose public part is `connection`, found among the
 * connections of the open sockets without reading through the pointer
 * (the caller may hold one to a connection freed long ago), or NULL. */
static struct psc_con *find_live_con(const pscom_connection_t *connection)
{
    struct psc_list *s, *c;
    psc_list_for_each(s, &psc_ctx.sockets) {
        struct psc_sock *sock = psc_list_entry(s, struct psc_sock, next_sock);
        psc_list_for_each(c, &sock->cons) {
            struct psc_con *con = psc_list_entry(c, struct psc_con, next_con);
            if (&con->pub == connection) return con;
        }
    }
    return NULL;
}

/* Rounds of progress a failure spends reading what the transport still
 * holds for the connection. tcp reads all its socket has in one round;
 * the bound keeps a peer that goes on sending from holding the call. */
#define FAIL_DRAIN_ROUNDS 256

/* Read what has arrived for con before it is failed, so that the messages
 * its peer sent before it died become unexpected messages that stay
 * receivable: the bytes still in the kernel's socket buffer would go with
 * the connection, while the transport alone delivers them before the end
 * of the stream. Until a round of progress finds nothing to do (so nothing
 * more for con either), or the transport ended the connection itself, or
 * a callback closed it. Runs inside the caller's psc_enter: con is not
 * freed meanwhile. */
static void drain_before_fail(struct psc_con *con)
{
    for (unsigned round = 0; round < FAIL_DRAIN_ROUNDS; round++) {
        /* Not psc_progress: a cut that waits for the next round of the
         * caller (we may run inside a callback) would make every round
         * count. */
        if (!psc_progress_work()) return;
        if (con->failed || con->closing || con->zombie) return;
    }
    psc_debug("%s: still reading after %u rounds of progress; failing it "
              "now", psc_con_str(con), FAIL_DRAIN_ROUNDS);
}

pscom_err_t pscom_fail_connection(pscom_connection_t *connection,
                                  pscom_err_t error)
{
    if (!connection || error >= 0) return PSCOM_ERR_INVALID;
    psc_lock();
    psc_enter();
    struct psc_con *con = find_live_con(connection);
    pscom_err_t ret = PSCOM_SUCCESS;
    if (!con) {
        psc_debug("pscom_fail_connection: %p is no open connection (closed "
                  "already, or its socket was closed); nothing to fail",
                  (void *)connection);
        ret = PSCOM_ERR_INVALID;
    } else if (con->failed || con->closing) {
        ret = PSCOM_ERR_ALREADY;
    } else {
        if (con->plugin_open) drain_before_fail(con);
        if (con->failed || con->closing || con->zombie) {
            /* The transport reported the end itself (con_error has been
             * called with its error), or a callback closed it. */
            ret = PSCOM_ERR_ALREADY;
        } else {
            if (con->precon) psc_precon_destroy(con->precon);
            con->ondemand = false;
            psc_debug("%s: failed by the application: %s", psc_con_str(con),
                      pscom_err_str(error));
            psc_con_fail(con, PSCOM_OP_RW, error);
        }
    }
    psc_leave();
    psc_unlock();
    return ret;
}

static int cmp_pid(const void *a, const void *b)
{
    pid_t x = *(const pid_t *)a, y = *(const pid_t *)b;
    return (x > y) - (x < y);
}

/* Distinct processes on this node among the peers of open connections,
 * this one included. */
static unsigned count_local_procs(void)
{
    size_t n = 0, cap = 0;
    pid_t *pids = NULL;
    struct psc_list *s, *c;
    psc_list_for_each(s, &psc_ctx.sockets) {
        struct psc_sock *sock = psc_list_entry(s, struct psc_sock, next_sock);
        psc_list_for_each(c, &sock->cons) {
            struct psc_con *con = psc_list_entry(c, struct psc_con, next_con);
            if (!con->plugin_open || !con->local_pid) continue;
            if (n == cap) {
                cap = cap ? 2 * cap : 64;
                pid_t *p = realloc(pids, cap * sizeof(*p));
                if (!p) break;
                pids = p;
            }
            pids[n++] = con->local_pid;
        }
    }
    unsigned procs = 1;
    if (n) qsort(pids, n, sizeof(*pids), cmp_pid);
    for (size_t i = 0; i < n; i++)
        if ((i == 0 || pids[i] != pids[i - 1]) && pids[i] != getpid()) procs++;
    free(pids);
    return procs;
}

bool psc_oversubscribed(void)
{
    static bool over;
    static long cpus;
    if (!psc_ctx.local_procs_stale) return over;
    psc_ctx.local_procs_stale = false;
    if (!cpus) {
        cpus = sysconf(_SC_NPROCESSORS_ONLN);
        if (cpus < 1) cpus = 1;
    }
    unsigned procs = count_local_procs();
    bool now = procs > (unsigned long)cpus;
    if (now != over)
        psc_debug("%u processes on this node with %ld CPUs: waits %s", procs,
                  cpus, now ? "rest early (oversubscribed)"
                            : "spin PSP_WAIT_SPIN microseconds");
    /* Plugins stay armed between the sleeps of an oversubscribed node
     * only (progress.c). */
    if (over && !now) psc_plugins_wait_disarm();
    over = now;
    return over;
}
