/*
 * Pre-connections: the TCP handshake that sets up every connection.
 *
 * The connector opens a TCP connection to the peer's listener and sends
 * HELLO with its identity. The acceptor answers HELLO with its identity and
 * the plugins it offers this peer. The connector walks its own plugins in
 * priority order, skipping those the acceptor does not offer: for each it
 * sends TRY with the plugin's blob, the acceptor answers ACCEPT with its
 * blob (or REJECT), and the connector confirms with ESTABLISHED (or FAILED
 * and the next plugin). On ESTABLISHED both sides hand the connection to the
 * plugin; tcp keeps the pre-connection's socket as its data socket. The
 * record format is in precon_codec.h and doc/wire-protocol.md.
 *
 * Records are read exactly (header, then payload), never past the end of a
 * record, so the bytes that follow ESTABLISHED belong to the plugin.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core.h"
#include "precon_codec.h"

enum pc_state {
    PC_TCP_CONNECTING, /* connector: non-blocking connect under way */
    PC_RETRY_WAIT,     /* connector: waiting to connect again */
    PC_HELLO,          /* waiting for the peer's HELLO */
    PC_NEGOTIATE,      /* choosing a plugin */
    PC_SWITCH,         /* ESTABLISHED queued; switch once it is written */
    PC_BACK_SENT,      /* on-demand: BACKCONNECT queued; close once written */
    PC_OD_WAIT,        /* on-demand: waiting for the peer to connect back */
};

static const char *const state_names[] = {
    "connecting",         "waiting to retry", "hello",
    "plugin negotiation", "switching",        "asking to be called back",
    "waiting for the peer to call back"};

#define OUT_MAX (PSC_PRECON_HDR_LEN + PSC_PRECON_PLUGIN_DATA_MAX + 4096)

struct psc_precon {
    struct psc_list next; /* psc_ctx.precons */
    struct psc_con *con;
    int fd;
    bool connector;
    bool backconnect; /* connector: ask the peer to connect to us */
    bool adopted;     /* acceptor: the peer's call reached an on-demand
                       * connection of ours; no con_accept */
    enum pc_state state;

    struct sockaddr_in addr; /* connector: where to connect */
    unsigned attempts;
    uint64_t retry_at;
    uint64_t deadline;

    uint8_t hdr[PSC_PRECON_HDR_LEN];
    size_t hdr_have;
    struct psc_precon_hdr h;
    uint8_t *payload;
    size_t payload_have;

    uint8_t out[2 * OUT_MAX];
    size_t out_len, out_off;

    pscom_plugin_peer_t peer;
    char peer_host[PSC_PRECON_STR_MAX + 1];
    char peer_boot[PSC_PRECON_STR_MAX + 1];
    char peer_list[256]; /* the peer's plugin list, for messages */
    struct psc_plugin *offer[PSC_PRECON_MAX_PLUGINS]; /* acceptor: offered */
    unsigned offer_count;
    struct psc_plugin *cand[PSC_PRECON_MAX_PLUGINS];  /* connector: to try */
    unsigned cand_count, cand_next;
    struct psc_plugin *trying;
    void *try_priv;
};

/* What a record handler tells the reader. */
enum { PC_GO_ON = 0, PC_STOP = 1 };

static void on_fd(int fd, uint32_t events, void *arg);

static const char *pc_peer(struct psc_precon *pc)
{
    return pc->con->peer_addr[0] ? pc->con->peer_addr : "?";
}

static void set_peer_addr(struct psc_con *con, const struct sockaddr_in *sa)
{
    char ip[INET_ADDRSTRLEN] = "?";
    inet_ntop(AF_INET, &sa->sin_addr, ip, sizeof(ip));
    snprintf(con->peer_addr, sizeof(con->peer_addr), "%s:%u", ip,
             ntohs(sa->sin_port));
}

static void abort_trying(struct psc_precon *pc)
{
    if (!pc->trying) return;
    const pscom_plugin_ops_t *ops = pc->trying->desc->ops;
    if (ops->hs_abort) ops->hs_abort(pc->con, pc->try_priv);
    free(pc->try_priv);
    pc->trying = NULL;
    pc->try_priv = NULL;
}

static void close_fd(struct psc_precon *pc)
{
    if (pc->fd < 0) return;
    pscom_plugin_fd_del(pc->fd);
    close(pc->fd);
    pc->fd = -1;
}

static void reset_io(struct psc_precon *pc)
{
    free(pc->payload);
    pc->payload = NULL;
    pc->hdr_have = 0;
    pc->payload_have = 0;
    pc->out_len = pc->out_off = 0;
}

void psc_precon_destroy(struct psc_precon *pc)
{
    abort_trying(pc);
    close_fd(pc);
    reset_io(pc);
    psc_list_del(&pc->next);
    if (pc->con && pc->con->precon == pc) pc->con->precon = NULL;
    free(pc);
}

/* When a handshake that makes no step from `now` on has stalled
 * (PSP_CONNECT_TIMEOUT, 0: never). */
static uint64_t stall_deadline(uint64_t now)
{
    unsigned ms = psc_settings.connect_timeout_ms;
    return ms ? now + ms : UINT64_MAX;
}

static struct psc_precon *pc_new(struct psc_con *con, bool connector)
{
    struct psc_precon *pc = calloc(1, sizeof(*pc));
    if (!pc) return NULL;
    pc->con = con;
    pc->fd = -1;
    pc->connector = connector;
    pc->deadline = stall_deadline(psc_now_ms());
    psc_list_add_tail(&pc->next, &psc_ctx.precons);
    con->precon = pc;
    return pc;
}

/* A handshake failed for good. The connection it was for fails where the
 * application has it: its own connection (connecting, or an on-demand one
 * that the peer's call was adopted into: its queued sends fail with it).
 * One no one knows of (an incoming call, or a call back for the peer's
 * BACKCONNECT) goes: nothing else would free it. */
static void handshake_failed(struct psc_con *con, bool connector,
                             pscom_err_t err)
{
    if (connector || con->visible) psc_con_fail(con, PSCOM_OP_CONNECT, err);
    if (!con->visible) psc_con_retire(con);
}

static int pc_fail(struct psc_precon *pc, pscom_err_t err)
{
    struct psc_con *con = pc->con;
    bool connector = pc->connector;

    psc_precon_destroy(pc);
    handshake_failed(con, connector, err);
    return PC_STOP;
}

static uint64_t backoff_ms(unsigned attempt)
{
    uint64_t ms = 10ull << (attempt < 7 ? attempt : 7); /* 10 ms .. 1.28 s */
    return ms + (uint64_t)(rand() % (int)(ms / 2 + 1));
}

/* The connector may try again (refused, reset, timed out). */
static int pc_retry_or_fail(struct psc_precon *pc, pscom_err_t err,
                            const char *why)
{
    if (pc->connector && pc->attempts < psc_settings.retry) {
        uint64_t wait = backoff_ms(pc->attempts);
        psc_debug("connect to %s: %s; attempt %u of %u in %llu ms", pc_peer(pc),
                  why, pc->attempts + 1, psc_settings.retry,
                  (unsigned long long)wait);
        abort_trying(pc);
        close_fd(pc);
        reset_io(pc);
        pc->state = PC_RETRY_WAIT;
        pc->retry_at = psc_now_ms() + wait;
        return PC_STOP;
    }
    if (pc->connector)
        psc_err("connect to %s failed after %u attempts: %s. Is the peer "
                "running and listening there? (PSP_RETRY=%u, "
                "PSP_CONNECT_TIMEOUT=%u ms)", pc_peer(pc), pc->attempts, why,
                psc_settings.retry, psc_settings.connect_timeout_ms);
    else
        psc_debug("handshake from %s dropped: %s", pc_peer(pc), why);
    return pc_fail(pc, err);
}

/* ---------------------------------------------------------------------- */
/* Writing records                                                        */
/* ---------------------------------------------------------------------- */

static int pc_flush(struct psc_precon *pc)
{
    while (pc->out_off < pc->out_len) {
        ssize_t n = send(pc->fd, pc->out + pc->out_off, pc->out_len - pc->out_off,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                pscom_plugin_fd_mod(pc->fd, EPOLLIN | EPOLLOUT);
                return 0;
            }
            return -1;
        }
        pc->out_off += n;
    }
    pc->out_len = pc->out_off = 0;
    pscom_plugin_fd_mod(pc->fd, EPOLLIN);
    return 0;
}

static void begin(struct psc_precon_writer *w, uint8_t *buf, uint8_t type)
{
    psc_precon_begin(w, buf, OUT_MAX, type);
}

/* Queue a finished record and write what can be written. */
static int pc_send(struct psc_precon *pc, struct psc_precon_writer *w)
{
    long len = psc_precon_finish(w);
    uint8_t type = w->buf[5];
    if (len < 0 || pc->out_len + (size_t)len > sizeof(pc->out)) {
        psc_err("handshake with %s: internal error encoding a %s record",
                pc_peer(pc), psc_precon_type_str(type));
        return -1;
    }
    if (psc_settings.debug_precon)
        psc_log_write(PSC_LOG_ERROR, "precon %s: send %s (%ld bytes)",
                      pc_peer(pc), psc_precon_type_str(type), len);
    memcpy(pc->out + pc->out_len, w->buf, len);
    pc->out_len += len;
    return pc_flush(pc);
}

static void put_identity(struct psc_precon_writer *w, struct psc_con *con)
{
    const pscom_socket_t *s = &con->sock->pub;
    psc_precon_put(w, PSC_TAG_NAME, s->local_con_info.name, 8);
    psc_precon_put_i32(w, PSC_TAG_RANK, s->local_con_info.rank);
    psc_precon_put_i32(w, PSC_TAG_NODE_ID, psc_ctx.node_id);
    psc_precon_put_str(w, PSC_TAG_BOOT_ID, psc_ctx.boot_id);
    psc_precon_put_str(w, PSC_TAG_HOSTNAME, psc_ctx.hostname);
    psc_precon_put_u32(w, PSC_TAG_PID, (uint32_t)getpid());
    psc_precon_put_u32(w, PSC_TAG_PORT,
                       s->listen_portno > 0 ? (uint32_t)s->listen_portno : 0);
    psc_precon_put_u64(w, PSC_TAG_CON_ID, con->id);
    psc_precon_put_u32(w, PSC_TAG_FLAGS,
                       con->ondemand ? PSC_PRECON_F_ONDEMAND : 0);
}

/* A record about a plugin; why (REJECT, FAILED: the reason, for the peer's
 * debug line; at most PSC_PRECON_STR_MAX bytes, as hs_why and the plugin's
 * why[] are) may be NULL. */
static int send_simple(struct psc_precon *pc, uint8_t type, const char *plugin,
                       const char *why)
{
    uint8_t buf[OUT_MAX];
    struct psc_precon_writer w;
    begin(&w, buf, type);
    if (plugin) psc_precon_put_str(&w, PSC_TAG_PLUGIN, plugin);
    if (why && why[0]) psc_precon_put_str(&w, PSC_TAG_ERROR_TEXT, why);
    return pc_send(pc, &w);
}

/* Answer a TRY with REJECT, saying why: PC_GO_ON, or the connection failed
 * when the record could not be sent. */
static int reject(struct psc_precon *pc, const char *plugin, const char *why)
{
    return send_simple(pc, PSC_PRECON_REJECT, plugin, why)
               ? pc_fail(pc, PSCOM_ERR_IOERROR)
               : PC_GO_ON;
}

/* Why a plugin's hs op failed with rc, into why: what it said since
 * psc_plugin_reason_begin, else the error's text. */
static void hs_why(int rc, char *why, size_t len)
{
    const char *said = psc_plugin_reason_end();
    snprintf(why, len, "%s", said[0] ? said : strerror(rc < 0 ? -rc : rc));
}

/* ---------------------------------------------------------------------- */
/* Closing after an ERROR record                                          */
/* ---------------------------------------------------------------------- */

/* A socket closed with received bytes unread sends a reset, and a reset
 * ends the connection at once: what of the ERROR record the network lost
 * is never sent again. So after an ERROR the socket lingers (linger.c) for
 * LINGER_MS at most, when its records are written; else it is closed. */
#define LINGER_MS 2000

static void close_after_error(struct psc_precon *pc)
{
    if (pc->fd < 0) return;
    if (pc->out_off != pc->out_len) {
        close_fd(pc);
        return;
    }
    pscom_plugin_fd_del(pc->fd);
    psc_linger(pc->fd, LINGER_MS);
    pc->fd = -1;
}

/* Send an ERROR record, and close the socket so that it arrives. */
static void send_error(struct psc_precon *pc, pscom_err_t code,
                       const char *text)
{
    uint8_t buf[OUT_MAX];
    struct psc_precon_writer w;
    begin(&w, buf, PSC_PRECON_ERROR);
    psc_precon_put_i32(&w, PSC_TAG_ERROR_CODE, code);
    psc_precon_put_str(&w, PSC_TAG_ERROR_TEXT, text);
    if (pc_send(pc, &w) == 0) close_after_error(pc);
}

/* ---------------------------------------------------------------------- */
/* Plugin negotiation                                                     */
/* ---------------------------------------------------------------------- */

static bool plugin_usable(struct psc_precon *pc, struct psc_plugin *p)
{
    if (!psc_plugin_offerable(p, pc->con->sock->con_type_mask)) return false;
    /* A module not opened yet is offered by name; it opens when tried. */
    if (p->state == PSC_PLUGIN_PENDING) return true;
    const pscom_plugin_t *d = p->desc;
    if ((d->flags & PSCOM_PLUGIN_LOCAL_ONLY) && !pc->peer.same_node)
        return false;
    /* A plugin not started yet is offered; it starts when tried. */
    return !p->initialised || !d->ops->offer || d->ops->offer(&pc->peer);
}

/* Our usable plugins for this peer, in priority order. */
static unsigned usable_plugins(struct psc_precon *pc, struct psc_plugin **out)
{
    unsigned n = 0;
    for (unsigned i = 0; i < psc_plugin_count() && n < PSC_PRECON_MAX_PLUGINS;
         i++) {
        struct psc_plugin *p = psc_plugin_get(i);
        if (plugin_usable(pc, p)) out[n++] = p;
    }
    return n;
}

/* Open and start p for this peer: 0, or -1 when it cannot serve it. */
static int start_for_peer(struct psc_precon *pc, struct psc_plugin *p)
{
    return psc_plugin_start(p) || !plugin_usable(pc, p) ? -1 : 0;
}

static void list_str(char *buf, size_t len, struct psc_plugin **list,
                     unsigned n)
{
    size_t off = 0;
    buf[0] = 0;
    for (unsigned i = 0; i < n && off < len; i++)
        off += snprintf(buf + off, len - off, "%s%s", i ? "," : "",
                        list[i]->name);
    if (!n) snprintf(buf, len, "none");
}

static int try_next(struct psc_precon *pc)
{
    abort_trying(pc);
    while (pc->cand_next < pc->cand_count) {
        struct psc_plugin *p = pc->cand[pc->cand_next++];
        if (start_for_peer(pc, p)) {
            psc_debug("connect to %s: %s cannot be used (%s); trying the "
                      "next transport", pc_peer(pc), p->name,
                      p->why[0] ? p->why : "it does not reach this peer");
            continue;
        }
        const pscom_plugin_t *d = p->desc;
        void *priv = calloc(1, d->con_priv_size ? d->con_priv_size : 1);
        uint8_t blob[PSC_PRECON_PLUGIN_DATA_MAX];
        size_t blen = sizeof(blob);
        char why[PSC_PRECON_STR_MAX + 1];
        psc_plugin_reason_begin();
        int rc = priv ? d->ops->hs_start(pc->con, priv, blob, &blen) : -ENOMEM;
        hs_why(rc, why, sizeof(why));
        if (rc) {
            psc_debug("connect to %s: %s is not available for this "
                      "connection (%s); trying the next transport",
                      pc_peer(pc), d->name, why);
            free(priv);
            continue;
        }
        pc->trying = p;
        pc->try_priv = priv;
        uint8_t buf[OUT_MAX];
        struct psc_precon_writer w;
        begin(&w, buf, PSC_PRECON_TRY);
        psc_precon_put_str(&w, PSC_TAG_PLUGIN, d->name);
        if (blen) psc_precon_put(&w, PSC_TAG_PLUGIN_DATA, blob, blen);
        pc->state = PC_NEGOTIATE;
        if (pc_send(pc, &w)) return pc_retry_or_fail(pc, PSCOM_ERR_IOERROR,
                                                     strerror(errno));
        return PC_GO_ON;
    }

    char ours[128];
    struct psc_plugin *mine[PSC_PRECON_MAX_PLUGINS];
    list_str(ours, sizeof(ours), mine, usable_plugins(pc, mine));
    char text[1024];
    snprintf(text, sizeof(text),
             "no common transport: this side (%s) offers [%s], the peer (%s) "
             "offers [%s]",
             psc_ctx.hostname, ours, pc->peer_host,
             pc->peer_list[0] ? pc->peer_list : "none");
    /* Why the transports this socket allows are not usable here. */
    char why[512] = "";
    size_t off = 0;
    uint64_t mask = pc->con->sock->con_type_mask;
    for (unsigned i = 0; i < psc_plugin_count() && off < sizeof(why); i++) {
        struct psc_plugin *p = psc_plugin_get(i);
        if (p->state == PSC_PLUGIN_LOADED || p->state == PSC_PLUGIN_PENDING ||
            !p->why[0])
            continue;
        const pscom_plugin_t *d = p->desc;
        if (d && (unsigned)d->con_type < 64 &&
            !(mask & ((uint64_t)1 << d->con_type)))
            continue;
        off += snprintf(why + off, sizeof(why) - off, "; %s: %s", p->name,
                        p->why);
    }
    psc_err("connect to %s: %s%s; check the PSP_<TRANSPORT> settings and the "
            "sockets' transport masks", pc_peer(pc), text, why);
    send_error(pc, PSCOM_ERR_CONNECTION_REFUSED, text);
    return pc_fail(pc, PSCOM_ERR_CONNECTION_REFUSED);
}

/* The handshake is over: hand the connection to the plugin. */
static int do_switch(struct psc_precon *pc)
{
    struct psc_con *con = pc->con;
    struct psc_plugin *p = pc->trying;
    void *priv = pc->try_priv;
    int fd = pc->fd;

    pc->trying = NULL;
    pc->try_priv = NULL;
    pscom_plugin_fd_del(fd);
    pc->fd = -1;
    bool connector = pc->connector;
    bool adopted = pc->adopted;
    psc_precon_destroy(pc);

    int rc = p->desc->ops->open(con, priv, fd);
    if (rc < 0) {
        psc_err("%s: transport %s failed to start: %s", psc_con_str(con),
                p->name, strerror(-rc));
        close(fd);
        free(priv);
        handshake_failed(con, connector, PSCOM_ERR_IOERROR);
        return PC_STOP;
    }
    if (rc == 0) close(fd);
    bool announce = connector ? con->od_notify : !adopted;
    con->od_notify = false;
    if (announce) psc_con_make_visible(con);
    psc_con_established(con, p, priv);
    if (announce && con->sock->pub.ops.con_accept)
        con->sock->pub.ops.con_accept(&con->pub);
    return PC_STOP;
}

/* ---------------------------------------------------------------------- */
/* Handling records                                                       */
/* ---------------------------------------------------------------------- */

static int take_identity(struct psc_precon *pc, const struct psc_precon_msg *m)
{
    if (!m->has_name || !m->has_rank || !m->has_node_id || !m->boot_id ||
        !m->hostname || !m->has_pid) {
        psc_err("handshake with %s: HELLO without the peer's identity; "
                "dropping the connection", pc_peer(pc));
        return -1;
    }
    pscom_con_info_t *ri = &pc->con->pub.remote_con_info;
    memcpy(ri->name, m->name, 8);
    if (m->rank != PSCOM_RANK_UNDEFINED) {
        if (pc->connector && ri->rank != PSCOM_RANK_UNDEFINED && ri->rank != m->rank)
            psc_warn("connect to %s: expected rank %d, the peer says it is "
                     "rank %d", pc_peer(pc), ri->rank, m->rank);
        ri->rank = m->rank;
    }
    ri->node_id = m->node_id;
    ri->tcp.portno = m->has_port ? (int32_t)m->port : -1;
    snprintf(pc->peer_host, sizeof(pc->peer_host), "%s", m->hostname);
    snprintf(pc->peer_boot, sizeof(pc->peer_boot), "%s", m->boot_id);
    pc->peer.same_node = !strcmp(pc->peer_boot, psc_ctx.boot_id) &&
                         !strcmp(pc->peer_host, psc_ctx.hostname);
    pc->peer.node_id = m->node_id;
    pc->peer.rank = m->rank;
    pc->peer.pid = (pid_t)m->pid;
    pc->con->local_pid = pc->peer.same_node ? pc->peer.pid : 0;
    pc->peer.hostname = pc->peer_host;

    size_t off = 0;
    pc->peer_list[0] = 0;
    for (unsigned i = 0; i < m->plugin_count && off < sizeof(pc->peer_list); i++)
        off += snprintf(pc->peer_list + off, sizeof(pc->peer_list) - off,
                        "%s%s", i ? "," : "", m->plugins[i]);
    return 0;
}

/* The connection of `sock` to the peer socket with this name and listening
 * port (on-demand or not), or NULL. */
static struct psc_con *peer_find(struct psc_sock *sock, const char *name,
                                 uint32_t port)
{
    struct psc_list *pos;
    psc_list_for_each(pos, &sock->cons) {
        struct psc_con *c = psc_list_entry(pos, struct psc_con, next_con);
        const pscom_con_info_t *ri = &c->pub.remote_con_info;
        if (c->failed || memcmp(ri->name, name, 8)) continue;
        if (ri->tcp.portno != (int32_t)port) continue;
        return c;
    }
    return NULL;
}

/* An on-demand connection that has not started connecting itself: idle, or
 * asking (or having asked) the peer to call back. */
static bool waits_for_call(struct psc_con *c)
{
    return c->ondemand && (!c->precon || c->precon->backconnect);
}

/* The peer's on-demand call reached us: carry it on our own on-demand
 * connection to that peer instead of a new one. */
static void adopt(struct psc_precon *pc, struct psc_con *mine)
{
    struct psc_con *fresh = pc->con;
    if (mine->precon) psc_precon_destroy(mine->precon);
    memcpy(mine->peer_addr, fresh->peer_addr, sizeof(mine->peer_addr));
    mine->pub.remote_con_info = fresh->pub.remote_con_info;
    mine->local_pid = fresh->local_pid;
    mine->pub.state = PSCOM_CON_STATE_ACCEPTING_ONDEMAND;
    mine->precon = pc;
    pc->con = mine;
    pc->adopted = true;
    fresh->precon = NULL;
    psc_con_retire(fresh);
}

/* The acceptor starts the transport the connector will most likely try
 * (the first of its offer that starts) as soon as its HELLO is out, while
 * the connector starts its own. Else the two would take turns, the
 * connector's start-up before its TRY, ours after it: over libfabric
 * about 0.35 s each here, mostly its libraries' own start-up. */
static void start_first(struct psc_precon *pc)
{
    for (unsigned i = 0; i < pc->offer_count; i++) {
        struct psc_plugin *p = pc->offer[i];
        if (p->initialised || !psc_plugin_start(p)) return;
    }
}

static int on_hello_acceptor(struct psc_precon *pc,
                             const struct psc_precon_msg *m)
{
    if (take_identity(pc, m)) return pc_fail(pc, PSCOM_ERR_IOERROR);
    if (m->has_flags && (m->flags & PSC_PRECON_F_ONDEMAND) && m->has_port) {
        struct psc_con *mine = peer_find(pc->con->sock, m->name, m->port);
        if (mine && waits_for_call(mine)) adopt(pc, mine);
    }
    pc->offer_count = usable_plugins(pc, pc->offer);

    const char *names[PSC_PRECON_MAX_PLUGINS];
    for (unsigned i = 0; i < pc->offer_count; i++) names[i] = pc->offer[i]->name;
    uint8_t buf[OUT_MAX];
    struct psc_precon_writer w;
    begin(&w, buf, PSC_PRECON_HELLO);
    put_identity(&w, pc->con);
    psc_precon_put_plugins(&w, names, pc->offer_count);
    pc->con->pub.state = PSCOM_CON_STATE_ACCEPTING;
    pc->state = PC_NEGOTIATE;
    if (pc_send(pc, &w)) return pc_fail(pc, PSCOM_ERR_IOERROR);
    start_first(pc);
    return PC_GO_ON;
}

static void start_connect(struct psc_precon *pc);

/* A peer with a lower name asks us to connect to it (on-demand name rule). */
static int on_backconnect(struct psc_precon *pc, const struct psc_precon_msg *m)
{
    if (take_identity(pc, m) || !m->has_port || !m->port) {
        psc_err("handshake from %s: BACKCONNECT without the peer's identity "
                "or port; ignored", pc_peer(pc));
        return pc_fail(pc, PSCOM_ERR_IOERROR);
    }
    struct psc_sock *sock = pc->con->sock;
    struct psc_con *mine = peer_find(sock, m->name, m->port);
    if (mine && !waits_for_call(mine)) {
        /* We have a connection to it, or are connecting: that is the one. */
        return pc_fail(pc, PSCOM_ERR_EOF);
    }
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    if (getpeername(pc->fd, (struct sockaddr *)&sa, &len)) {
        psc_err("handshake from %s: %s", pc_peer(pc), strerror(errno));
        return pc_fail(pc, PSCOM_ERR_IOERROR);
    }
    sa.sin_port = htons((uint16_t)m->port);
    struct psc_con *con = mine;
    if (!con) {
        /* No connection of ours is waiting for this peer: make one and
         * announce it through con_accept once it works. */
        con = psc_con_create(sock);
        if (!con) return pc_fail(pc, PSCOM_ERR_STDERROR);
        con->ondemand = true;
        con->od_notify = true;
        con->od_addr = sa;
        con->pub.remote_con_info = pc->con->pub.remote_con_info;
    } else if (con->precon) {
        psc_precon_destroy(con->precon);
    }
    psc_debug("%s asks to be called back; connecting", pc_peer(pc));
    pc_fail(pc, PSCOM_ERR_EOF);
    psc_precon_connect(con, &con->od_addr);
    return PC_STOP;
}

static int on_hello_connector(struct psc_precon *pc,
                              const struct psc_precon_msg *m)
{
    if (take_identity(pc, m)) return pc_fail(pc, PSCOM_ERR_IOERROR);
    struct psc_plugin *mine[PSC_PRECON_MAX_PLUGINS];
    unsigned n = usable_plugins(pc, mine);
    pc->cand_count = pc->cand_next = 0;
    for (unsigned i = 0; i < n; i++)
        for (unsigned j = 0; j < m->plugin_count; j++)
            if (!strcmp(mine[i]->name, m->plugins[j])) {
                pc->cand[pc->cand_count++] = mine[i];
                break;
            }
    return try_next(pc);
}

static int on_try(struct psc_precon *pc, const struct psc_precon_msg *m)
{
    struct psc_plugin *p = NULL;
    for (unsigned i = 0; m->plugin && i < pc->offer_count; i++)
        if (!strcmp(pc->offer[i]->name, m->plugin)) p = pc->offer[i];
    abort_trying(pc);
    if (!p) {
        psc_debug("handshake from %s: asked for %s, which we do not offer",
                  pc_peer(pc), m->plugin ? m->plugin : "(none)");
        return reject(pc, m->plugin, "not offered to this peer");
    }
    if (start_for_peer(pc, p)) {
        const char *why = p->why[0] ? p->why : "it does not reach this peer";
        psc_debug("handshake from %s: %s cannot be used here (%s); rejecting "
                  "it", pc_peer(pc), p->name, why);
        return reject(pc, p->name, why);
    }
    const pscom_plugin_t *d = p->desc;
    void *priv = calloc(1, d->con_priv_size ? d->con_priv_size : 1);
    uint8_t blob[PSC_PRECON_PLUGIN_DATA_MAX];
    size_t blen = sizeof(blob);
    char why[PSC_PRECON_STR_MAX + 1];
    psc_plugin_reason_begin();
    int rc = priv ? d->ops->hs_start(pc->con, priv, blob, &blen) : -ENOMEM;
    if (!rc) {
        pc->trying = p;
        pc->try_priv = priv;
        /* A reason hs_start gave is not hs_connect's. */
        psc_plugin_reason_begin();
        rc = d->ops->hs_connect(pc->con, priv, m->plugin_data, m->plugin_data_len);
    } else {
        free(priv);
    }
    hs_why(rc, why, sizeof(why));
    if (rc) {
        psc_debug("handshake from %s: %s failed here (%s); rejecting it",
                  pc_peer(pc), d->name, why);
        abort_trying(pc);
        return reject(pc, d->name, why);
    }
    uint8_t buf[OUT_MAX];
    struct psc_precon_writer w;
    begin(&w, buf, PSC_PRECON_ACCEPT);
    psc_precon_put_str(&w, PSC_TAG_PLUGIN, d->name);
    if (blen) psc_precon_put(&w, PSC_TAG_PLUGIN_DATA, blob, blen);
    return pc_send(pc, &w) ? pc_fail(pc, PSCOM_ERR_IOERROR) : PC_GO_ON;
}

static bool about_trying(struct psc_precon *pc, const struct psc_precon_msg *m)
{
    return pc->trying && m->plugin && !strcmp(m->plugin, pc->trying->name);
}

static int on_accept(struct psc_precon *pc, const struct psc_precon_msg *m)
{
    if (!about_trying(pc, m)) {
        psc_err("handshake with %s: ACCEPT for a transport we did not ask "
                "for; dropping the connection", pc_peer(pc));
        return pc_fail(pc, PSCOM_ERR_IOERROR);
    }
    const pscom_plugin_t *d = pc->trying->desc;
    char why[PSC_PRECON_STR_MAX + 1];
    psc_plugin_reason_begin();
    int rc = d->ops->hs_connect(pc->con, pc->try_priv, m->plugin_data,
                                m->plugin_data_len);
    hs_why(rc, why, sizeof(why));
    if (rc) {
        psc_debug("connect to %s: %s failed (%s); trying the next transport",
                  pc_peer(pc), d->name, why);
        if (send_simple(pc, PSC_PRECON_FAILED, d->name, why))
            return pc_retry_or_fail(pc, PSCOM_ERR_IOERROR, strerror(errno));
        return try_next(pc);
    }
    if (send_simple(pc, PSC_PRECON_ESTABLISHED, d->name, NULL))
        return pc_retry_or_fail(pc, PSCOM_ERR_IOERROR, strerror(errno));
    pc->state = PC_SWITCH;
    if (pc->out_len) return PC_GO_ON; /* switch when ESTABLISHED is out */
    return do_switch(pc);
}

static int on_error(struct psc_precon *pc, const struct psc_precon_msg *m)
{
    pscom_err_t code = m->has_error_code ? (pscom_err_t)m->error_code
                                         : PSCOM_ERR_CONNECTION_REFUSED;
    if (code >= 0 || code < PSCOM_ERR_CONNECTION_REFUSED)
        code = PSCOM_ERR_CONNECTION_REFUSED;
    psc_err("%s %s refused the connection: %s (%s)",
            pc->connector ? "connect to" : "handshake from", pc_peer(pc),
            m->error_text ? m->error_text : "no reason given",
            pscom_err_str(code));
    return pc_fail(pc, code);
}

static int handle_record(struct psc_precon *pc)
{
    struct psc_precon_msg *m = malloc(sizeof(*m));
    if (!m) return pc_fail(pc, PSCOM_ERR_STDERROR);
    int rc = psc_precon_msg_decode(pc->h.type, pc->payload, pc->h.len, m);
    if (rc) {
        free(m);
        psc_err("handshake with %s: malformed %s record (%s); dropping the "
                "connection", pc_peer(pc), psc_precon_type_str(pc->h.type),
                psc_precon_status_str(rc));
        return pc_fail(pc, PSCOM_ERR_IOERROR);
    }
    if (psc_settings.debug_precon)
        psc_log_write(PSC_LOG_ERROR, "precon %s: got %s in state %s",
                      pc_peer(pc), psc_precon_type_str(m->type),
                      state_names[pc->state]);

    int ret;
    uint8_t t = m->type;
    if (t == PSC_PRECON_ERROR) {
        ret = on_error(pc, m);
    } else if (pc->state == PC_HELLO && !pc->connector &&
               t == PSC_PRECON_BACKCONNECT) {
        ret = on_backconnect(pc, m);
    } else if (pc->state == PC_HELLO && t == PSC_PRECON_HELLO) {
        ret = pc->connector ? on_hello_connector(pc, m) : on_hello_acceptor(pc, m);
    } else if (pc->state == PC_NEGOTIATE && !pc->connector &&
               t == PSC_PRECON_TRY) {
        ret = on_try(pc, m);
    } else if (pc->state == PC_NEGOTIATE && !pc->connector &&
               t == PSC_PRECON_ESTABLISHED && about_trying(pc, m)) {
        ret = do_switch(pc);
    } else if (pc->state == PC_NEGOTIATE && !pc->connector &&
               t == PSC_PRECON_FAILED) {
        psc_debug("handshake from %s: %s failed at the peer (%s)", pc_peer(pc),
                  m->plugin ? m->plugin : "(none)",
                  m->error_text ? m->error_text : "no reason given");
        abort_trying(pc);
        ret = PC_GO_ON;
    } else if (pc->state == PC_NEGOTIATE && pc->connector &&
               t == PSC_PRECON_ACCEPT) {
        ret = on_accept(pc, m);
    } else if (pc->state == PC_NEGOTIATE && pc->connector &&
               t == PSC_PRECON_REJECT && about_trying(pc, m)) {
        psc_debug("connect to %s: the peer cannot use %s (%s); trying the "
                  "next transport", pc_peer(pc), m->plugin,
                  m->error_text ? m->error_text : "no reason given");
        ret = try_next(pc);
    } else {
        psc_err("handshake with %s: unexpected %s record in state %s; "
                "dropping the connection", pc_peer(pc),
                psc_precon_type_str(t), state_names[pc->state]);
        ret = pc_fail(pc, PSCOM_ERR_IOERROR);
    }
    free(m);
    return ret;
}

/* A record header arrived: check it. */
static int header_arrived(struct psc_precon *pc)
{
    int rc = psc_precon_hdr_decode(pc->hdr, &pc->h,
                                   psc_settings.precon_max_payload);
    if (rc == PSC_PRECON_E_VERSION) {
        char text[160];
        snprintf(text, sizeof(text),
                 "pre-connection protocol version %u is not supported; this "
                 "side speaks version %u", pc->h.version, PSC_PRECON_VERSION);
        psc_err("%s %s: %s (peer and this library are of incompatible "
                "releases)", pc->connector ? "connect to" : "handshake from",
                pc_peer(pc), text);
        send_error(pc, PSCOM_ERR_UNSUPPORTED_VERSION, text);
        return pc_fail(pc, PSCOM_ERR_UNSUPPORTED_VERSION);
    }
    if (rc == PSC_PRECON_E_TOOBIG) {
        /* A setting that differs between the two sides: say so to both,
         * and the connecting side does not try again. */
        char text[200];
        snprintf(text, sizeof(text),
                 "a handshake record of %u bytes is larger than the %u bytes "
                 "this side accepts (PSP_PRECON_MAX_RECORD)",
                 (unsigned)pc->h.len, psc_settings.precon_max_payload);
        psc_err("%s %s: %s; dropping the connection",
                pc->connector ? "connect to" : "handshake from", pc_peer(pc),
                text);
        send_error(pc, PSCOM_ERR_IOERROR, text);
        return pc_fail(pc, PSCOM_ERR_IOERROR);
    }
    if (rc) {
        psc_err("%s %s: %s; dropping the connection",
                pc->connector ? "connect to" : "handshake from", pc_peer(pc),
                psc_precon_status_str(rc));
        return pc_fail(pc, PSCOM_ERR_IOERROR);
    }
    if (pc->h.len) {
        pc->payload = malloc(pc->h.len);
        if (!pc->payload) return pc_fail(pc, PSCOM_ERR_STDERROR);
    }
    pc->payload_have = 0;
    return PC_GO_ON;
}

static int pc_read(struct psc_precon *pc)
{
    for (;;) {
        uint8_t *dst;
        size_t want;
        if (pc->hdr_have < PSC_PRECON_HDR_LEN) {
            dst = pc->hdr + pc->hdr_have;
            want = PSC_PRECON_HDR_LEN - pc->hdr_have;
        } else {
            dst = pc->payload + pc->payload_have;
            want = pc->h.len - pc->payload_have;
        }
        ssize_t n = want ? recv(pc->fd, dst, want, MSG_DONTWAIT) : 0;
        if (want && n == 0) {
            return pc_retry_or_fail(pc, PSCOM_ERR_EOF,
                                    "the peer closed the connection during "
                                    "the handshake");
        }
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return PC_GO_ON;
            return pc_retry_or_fail(pc, PSCOM_ERR_IOERROR, strerror(errno));
        }
        if (pc->hdr_have < PSC_PRECON_HDR_LEN) {
            pc->hdr_have += n;
            if (pc->hdr_have < PSC_PRECON_HDR_LEN) continue;
            if (header_arrived(pc)) return PC_STOP;
            if (pc->h.len) continue;
        } else {
            pc->payload_have += n;
            if (pc->payload_have < pc->h.len) continue;
        }
        int rc = handle_record(pc);
        if (rc) return rc;
        free(pc->payload);
        pc->payload = NULL;
        pc->hdr_have = 0;
    }
}

/* ---------------------------------------------------------------------- */
/* Connecting and accepting                                               */
/* ---------------------------------------------------------------------- */

static void tune_socket(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* BACKCONNECT is out: hang up and wait for the peer's call. */
static void wait_for_call(struct psc_precon *pc)
{
    close_fd(pc);
    reset_io(pc);
    pc->state = PC_OD_WAIT;
    pc->deadline = stall_deadline(psc_now_ms());
}

static int send_hello(struct psc_precon *pc)
{
    uint8_t buf[OUT_MAX];
    struct psc_precon_writer w;
    begin(&w, buf, pc->backconnect ? PSC_PRECON_BACKCONNECT : PSC_PRECON_HELLO);
    put_identity(&w, pc->con);
    pc->state = pc->backconnect ? PC_BACK_SENT : PC_HELLO;
    int rc = pc_send(pc, &w);
    if (!rc && pc->backconnect && !pc->out_len) wait_for_call(pc);
    return rc;
}

static int start_tcp_connect(struct psc_precon *pc)
{
    pc->attempts++;
    pc->deadline = stall_deadline(psc_now_ms());
    pc->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (pc->fd < 0) {
        int e = errno;
        if (e == EMFILE || e == ENFILE)
            psc_err("connect to %s: no file descriptor left (%s); %s",
                    pc_peer(pc), strerror(e), psc_fd_limit_hint());
        else
            psc_err("connect to %s: socket(): %s", pc_peer(pc), strerror(e));
        return pc_fail(pc, PSCOM_ERR_STDERROR);
    }
    tune_socket(pc->fd);
    pc->state = PC_TCP_CONNECTING;
    int rc = connect(pc->fd, (struct sockaddr *)&pc->addr, sizeof(pc->addr));
    if (rc < 0 && errno != EINPROGRESS)
        return pc_retry_or_fail(pc, PSCOM_ERR_CONNECTION_REFUSED, strerror(errno));
    if (pscom_plugin_fd_add(pc->fd, EPOLLOUT, 1, on_fd, pc))
        return pc_fail(pc, PSCOM_ERR_STDERROR);
    return PC_GO_ON;
}

static void on_fd(int fd, uint32_t events, void *arg)
{
    struct psc_precon *pc = arg;
    (void)fd;

    if (pc->state == PC_TCP_CONNECTING) {
        int err = 0;
        socklen_t len = sizeof(err);
        getsockopt(pc->fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err) {
            pc_retry_or_fail(pc, err == ECONNREFUSED ? PSCOM_ERR_CONNECTION_REFUSED
                                                     : PSCOM_ERR_IOERROR,
                             strerror(err));
            return;
        }
        if (!(events & EPOLLOUT)) return;
        if (send_hello(pc)) pc_retry_or_fail(pc, PSCOM_ERR_IOERROR, strerror(errno));
        return;
    }
    if ((events & EPOLLOUT) && pc->out_len) {
        if (pc_flush(pc)) {
            pc_retry_or_fail(pc, PSCOM_ERR_IOERROR, strerror(errno));
            return;
        }
        if (pc->state == PC_SWITCH && !pc->out_len) {
            do_switch(pc);
            return;
        }
        if (pc->state == PC_BACK_SENT && !pc->out_len) {
            wait_for_call(pc);
            return;
        }
    }
    if (events & (EPOLLIN | EPOLLERR | EPOLLHUP)) pc_read(pc);
}

pscom_err_t psc_resolve(const char *host, int port, struct sockaddr_in *sa)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc || !res) {
        psc_err("connect to %s:%d: cannot resolve the host: %s", host, port,
                rc ? gai_strerror(rc) : "no address");
        return PSCOM_ERR_INVALID;
    }
    memcpy(sa, res->ai_addr, sizeof(*sa));
    freeaddrinfo(res);
    sa->sin_port = htons((uint16_t)port);
    return PSCOM_SUCCESS;
}

static void start_connect(struct psc_precon *pc)
{
    set_peer_addr(pc->con, &pc->addr);
    pc->con->pub.state = pc->con->ondemand ? PSCOM_CON_STATE_CONNECTING_ONDEMAND
                                           : PSCOM_CON_STATE_CONNECTING;
    start_tcp_connect(pc);
}

void psc_precon_connect(struct psc_con *con, const struct sockaddr_in *sa)
{
    struct psc_precon *pc = pc_new(con, true);
    if (!pc) {
        psc_err("connect to %s: out of memory", psc_con_str(con));
        handshake_failed(con, true, PSCOM_ERR_STDERROR);
        return;
    }
    pc->addr = *sa;
    start_connect(pc);
}

/* The name rule: of two on-demand peers, the one with the higher (name,
 * port) connects; the lower one asks it to. So simultaneous first sends make
 * one connection. A peer whose name we do not know, or a socket of ours
 * that does not listen, means we connect ourselves. */
static bool ask_back(struct psc_con *con)
{
    const pscom_socket_t *s = &con->sock->pub;
    static const char none[8];
    if (s->listen_portno <= 0 || !memcmp(con->pub.remote_con_info.name, none, 8))
        return false;
    int c = memcmp(s->local_con_info.name, con->pub.remote_con_info.name, 8);
    if (!c) c = s->listen_portno - (int)ntohs(con->od_addr.sin_port);
    return c < 0;
}

void psc_ondemand_connect(struct psc_con *con)
{
    struct psc_precon *pc = pc_new(con, true);
    if (!pc) {
        psc_err("connect to %s: out of memory", psc_con_str(con));
        handshake_failed(con, true, PSCOM_ERR_STDERROR);
        return;
    }
    pc->addr = con->od_addr;
    pc->backconnect = ask_back(con);
    start_connect(pc);
}

void psc_precon_accept(struct psc_sock *sock, int fd)
{
    struct psc_con *con = psc_con_create(sock);
    struct psc_precon *pc = con ? pc_new(con, false) : NULL;
    if (!pc) {
        psc_err("accept: out of memory for a new connection");
        free(con);
        close(fd);
        return;
    }
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    if (getpeername(fd, (struct sockaddr *)&sa, &len) == 0)
        set_peer_addr(con, &sa);
    tune_socket(fd);
    pc->fd = fd;
    pc->state = PC_HELLO;
    con->pub.state = PSCOM_CON_STATE_ACCEPTING;
    if (pscom_plugin_fd_add(fd, EPOLLIN, 1, on_fd, pc)) {
        pc_fail(pc, PSCOM_ERR_STDERROR);
        return;
    }
}

void psc_precon_drop_socket(struct psc_sock *sock)
{
    struct psc_list *pos, *tmp;
    psc_list_for_each_safe(pos, tmp, &psc_ctx.precons) {
        struct psc_precon *pc = psc_list_entry(pos, struct psc_precon, next);
        if (pc->con->sock != sock || pc->con->visible) continue;
        pc_fail(pc, PSCOM_ERR_EOF);
    }
}

void psc_precon_check_timeouts(void)
{
    uint64_t now = psc_now_ms();
    struct psc_list *pos, *tmp;
    psc_linger_check(now);
    psc_list_for_each_safe(pos, tmp, &psc_ctx.precons) {
        struct psc_precon *pc = psc_list_entry(pos, struct psc_precon, next);
        if (pc->state == PC_RETRY_WAIT) {
            if (now >= pc->retry_at) start_tcp_connect(pc);
            continue;
        }
        if (pc->state == PC_OD_WAIT && now >= pc->deadline) {
            psc_debug("connect to %s: no call back yet; asking again",
                      pc_peer(pc));
            pc_retry_or_fail(pc, PSCOM_ERR_CONNECTION_REFUSED,
                             "the peer did not connect back in time");
            continue;
        }
        if (now < pc->deadline) continue;
        char why[160];
        snprintf(why, sizeof(why), "handshake stalled in state \"%s\" for %u "
                 "ms (PSP_CONNECT_TIMEOUT)", state_names[pc->state],
                 psc_settings.connect_timeout_ms);
        pc->deadline = stall_deadline(now);
        pc_retry_or_fail(pc, PSCOM_ERR_IOERROR, why);
    }
}

void psc_precon_dump_locked(FILE *out)
{
    struct psc_list *pos;
    uint64_t now = psc_now_ms();
    psc_list_for_each(pos, &psc_ctx.precons) {
        struct psc_precon *pc = psc_list_entry(pos, struct psc_precon, next);
        const pscom_con_info_t *l = &pc->con->sock->pub.local_con_info;
        char limit[48] = "no time limit";
        if (pc->deadline != UINT64_MAX)
            snprintf(limit, sizeof(limit), "stalled in %llu ms",
                     (unsigned long long)(pc->deadline > now
                                              ? pc->deadline - now : 0));
        char attempt[32] = "";
        if (pc->connector)
            snprintf(attempt, sizeof(attempt), ", attempt %u", pc->attempts);
        fprintf(out, "  handshake %.8s(r%d) %s %s: %s%s%s%s, %s\n", l->name,
                l->rank, pc->connector ? "->" : "<-", pc_peer(pc),
                state_names[pc->state], attempt,
                pc->trying ? ", trying " : "",
                pc->trying ? pc->trying->name : "", limit);
    }
}
