/*
 * Sockets: creation, listening, endpoint strings, transport masks, closing.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core.h"



pscom_socket_t *pscom_open_socket(size_t userdata_size,
                                  size_t connection_userdata_size,
                                  int local_rank, uint64_t socket_flags)
{
    psc_init_on_first_use();

    struct psc_sock *sock = calloc(1, sizeof(*sock) + userdata_size);
    if (!sock) {
        psc_err("pscom_open_socket: out of memory");
        return NULL;
    }
    sock->magic = PSC_SOCK_MAGIC;
    psc_list_init(&sock->cons);
    psc_list_init(&sock->recvq_any);
    psc_list_init(&sock->genrecvq_any);
    sock->listen_fd = -1;
    sock->con_type_mask = ~(uint64_t)0;

    pscom_socket_t *s = &sock->pub;
    s->listen_portno = -1;
    s->local_con_info.node_id = psc_ctx.node_id;
    s->local_con_info.rank = local_rank;
    s->local_con_info.tcp.portno = -1;
    s->local_con_info.id = sock;
    s->userdata_size = userdata_size;
    s->connection_userdata_size = connection_userdata_size;
    /* Default name: the pid, so that two processes differ. */
    char name[16];
    snprintf(name, sizeof(name), "%08x", (unsigned)getpid());
    memcpy(s->local_con_info.name, name, 8);
    (void)socket_flags;

    psc_lock();
    psc_list_add_tail(&sock->next_sock, &psc_ctx.sockets);
    psc_unlock();
    return s;
}

void pscom_socket_set_name(pscom_socket_t *socket, const char *name)
{
    if (!socket || !name) return;
    psc_lock(); /* handshakes of other threads' progress send it */
    memset(socket->local_con_info.name, 0, sizeof(socket->local_con_info.name));
    strncpy(socket->local_con_info.name, name,
            sizeof(socket->local_con_info.name));
    psc_unlock();
}

int pscom_get_portno(pscom_socket_t *socket)
{
    return socket ? socket->listen_portno : -1;
}

/* Out of descriptors: take the pending connection with the spare
 * descriptor and close it, so the peer learns at once instead of waiting in
 * our backlog; say so at most once a second. */
static void refuse_one(int lfd, struct psc_sock *sock)
{
    static uint64_t last_log;
    uint64_t now = psc_now_ms();
    if (now - last_log >= 1000) {
        last_log = now;
        psc_err("socket %.8s, port %d: cannot accept a connection: %s; %s",
                sock->pub.local_con_info.name, sock->pub.listen_portno,
                strerror(EMFILE), psc_fd_limit_hint());
    }
    if (psc_ctx.spare_fd < 0) return;
    close(psc_ctx.spare_fd);
    int fd = accept(lfd, NULL, NULL);
    if (fd >= 0) close(fd);
    psc_ctx.spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

static void on_listen_ready(int fd, uint32_t events, void *arg)
{
    struct psc_sock *sock = arg;

    for (int i = 0; i < 64; i++) {
        int cfd = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (cfd < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
                return;
            if (errno == EMFILE || errno == ENFILE) {
                refuse_one(fd, sock);
                continue;
            }
            psc_warn("accept on port %d: %s", sock->pub.listen_portno,
                     strerror(errno));
            return;
        }
        psc_precon_accept(sock, cfd);
    }
}

static int listen_register(struct psc_sock *sock)
{
    return pscom_plugin_fd_add(sock->listen_fd, EPOLLIN, 0, on_listen_ready,
                               sock);
}

pscom_err_t pscom_listen(pscom_socket_t *sk, int portno)
{
    struct psc_sock *sock = sock_of(sk);
    int fd = -1;

    psc_lock();
    if (sock->closing) {
        psc_unlock();
        psc_err("pscom_listen: the socket is closing");
        return PSCOM_ERR_INVALID;
    }
    if (sock->listen_fd >= 0) {
        pscom_err_t ret = PSCOM_SUCCESS;
        if (portno != PSCOM_ANYPORT && portno != sk->listen_portno)
            ret = PSCOM_ERR_ALREADY;
        else if (sock->listen_suspended)
            pscom_resume_listen(sk);
        psc_unlock();
        return ret;
    }

    if (portno == PSCOM_LISTEN_FD0) {
        fd = 0;
    } else {
        fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) goto err_sys;
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        struct sockaddr_in sa = {.sin_family = AF_INET,
                                 .sin_addr.s_addr = htonl(INADDR_ANY),
                                 .sin_port = htons(portno == PSCOM_ANYPORT
                                                       ? 0
                                                       : (uint16_t)portno)};
        if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) goto err_sys;
        unsigned backlog = psc_settings.tcp_backlog;
        if (listen(fd, backlog > 0x7fffffff ? 0x7fffffff : (int)backlog) < 0)
            goto err_sys;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);

    struct sockaddr_in sa;
    socklen_t salen = sizeof(sa);
    if (getsockname(fd, (struct sockaddr *)&sa, &salen) < 0) goto err_sys;

    sock->listen_fd = fd;
    sock->listen_suspended = false;
    sk->listen_portno = ntohs(sa.sin_port);
    sk->local_con_info.tcp.portno = sk->listen_portno;
    if (listen_register(sock)) goto err_sys;
    psc_debug("socket %.8s listens on port %d", sk->local_con_info.name,
              sk->listen_portno);
    psc_unlock();
    return PSCOM_SUCCESS;

err_sys: {
    int e = errno;
    if (portno == PSCOM_ANYPORT)
        psc_err("pscom_listen on any port: %s", strerror(e));
    else
        psc_err("pscom_listen on port %d: %s%s", portno, strerror(e),
                e == EADDRINUSE ? "; the port is taken, choose another or "
                                  "PSCOM_ANYPORT" : "");
    if (fd > 0) close(fd);
    sock->listen_fd = -1;
    sk->listen_portno = -1;
    psc_unlock();
    errno = e;
    return PSCOM_ERR_STDERROR;
}
}

/* Does an on-demand connection of sock still wait to be connected? It may
 * need our listener: the peer connects to us when it calls first, or calls
 * us back. */
static bool ondemand_pending(struct psc_sock *sock)
{
    struct psc_list *pos;
    psc_list_for_each(pos, &sock->cons) {
        struct psc_con *c = psc_list_entry(pos, struct psc_con, next_con);
        if (c->ondemand && !c->failed) return true;
    }
    return false;
}

static void stop_listen_now(struct psc_sock *sock)
{
    pscom_socket_t *socket = &sock->pub;
    sock->stop_pending = false;
    sock->suspend_pending = false;
    if (sock->listen_fd >= 0) {
        pscom_plugin_fd_del(sock->listen_fd);
        close(sock->listen_fd);
        sock->listen_fd = -1;
        socket->listen_portno = -1;
        socket->local_con_info.tcp.portno = -1;
    }
}

static void suspend_listen_now(struct psc_sock *sock)
{
    sock->suspend_pending = false;
    if (sock->listen_fd >= 0 && !sock->listen_suspended) {
        pscom_plugin_fd_del(sock->listen_fd);
        sock->listen_suspended = true;
    }
}

void psc_sock_ondemand_settled(struct psc_sock *sock)
{
    if (!sock->stop_pending && !sock->suspend_pending) return;
    if (ondemand_pending(sock)) return;
    if (sock->stop_pending)
        stop_listen_now(sock);
    else
        suspend_listen_now(sock);
}

void pscom_stop_listen(pscom_socket_t *socket)
{
    struct psc_sock *sock = sock_of(socket);
    psc_lock();
    if (ondemand_pending(sock)) {
        psc_debug("socket %.8s: listening until its on-demand connections "
                  "are connected", socket->local_con_info.name);
        sock->stop_pending = true;
    } else {
        stop_listen_now(sock);
    }
    psc_unlock();
}

void pscom_suspend_listen(pscom_socket_t *socket)
{
    struct psc_sock *sock = sock_of(socket);
    psc_lock();
    if (ondemand_pending(sock))
        sock->suspend_pending = true;
    else
        suspend_listen_now(sock);
    psc_unlock();
}

void pscom_resume_listen(pscom_socket_t *socket)
{
    struct psc_sock *sock = sock_of(socket);
    psc_lock();
    sock->suspend_pending = false;
    sock->stop_pending = false;
    if (sock->listen_fd >= 0 && sock->listen_suspended) {
        if (listen_register(sock) == 0) sock->listen_suspended = false;
    } else if (sock->listen_fd < 0) {
        psc_unlock();
        pscom_listen(socket, PSCOM_ANYPORT);
        return;
    }
    psc_unlock();
}

pscom_err_t pscom_socket_get_ep_str(pscom_socket_t *socket, char **ep_str)
{
    if (!socket || !ep_str) return PSCOM_ERR_INVALID;
    if (socket->listen_portno < 0) {
        psc_err("pscom_socket_get_ep_str: socket %.8s is not listening; call "
                "pscom_listen first", socket->local_con_info.name);
        return PSCOM_ERR_INVALID;
    }
    char buf[64];
    snprintf(buf, sizeof(buf), "%s:%d@%.8s", psc_ctx.node_addr,
             socket->listen_portno, socket->local_con_info.name);
    *ep_str = strdup(buf);
    return *ep_str ? PSCOM_SUCCESS : PSCOM_ERR_STDERROR;
}

void pscom_socket_free_ep_str(char *ep_str)
{
    free(ep_str);
}

/* ---------------------------------------------------------------------- */
/* Transport masks                                                        */
/* ---------------------------------------------------------------------- */

static uint64_t type_bit(pscom_con_type_t t)
{
    return (unsigned)t < 64 ? (uint64_t)1 << t : 0;
}

/* The mask is read by the lock's holder (a connect of another thread):
 * changed under the lock. */
static void mask_set(pscom_socket_t *socket, uint64_t keep, uint64_t add)
{
    psc_lock();
    struct psc_sock *sock = sock_of(socket);
    sock->con_type_mask = (sock->con_type_mask & keep) | add;
    psc_unlock();
}

void pscom_con_type_mask_all(pscom_socket_t *socket)
{
    mask_set(socket, 0, ~(uint64_t)0);
}

void pscom_con_type_mask_only(pscom_socket_t *socket, pscom_con_type_t con_type)
{
    mask_set(socket, 0, type_bit(con_type));
}

void pscom_con_type_mask_add(pscom_socket_t *socket, pscom_con_type_t con_type)
{
    mask_set(socket, ~(uint64_t)0, type_bit(con_type));
}

void pscom_con_type_mask_del(pscom_socket_t *socket, pscom_con_type_t con_type)
{
    mask_set(socket, ~type_bit(con_type), 0);
}

int pscom_con_type_mask_is_set(pscom_socket_t *socket,
                               pscom_con_type_t con_type)
{
    psc_lock();
    bool set = (sock_of(socket)->con_type_mask & type_bit(con_type)) != 0;
    psc_unlock();
    return set;
}

void *pscom_con_type_mask_backup(pscom_socket_t *socket)
{
    uint64_t *copy = malloc(sizeof(*copy));
    if (!copy) return NULL;
    psc_lock();
    *copy = sock_of(socket)->con_type_mask;
    psc_unlock();
    return copy;
}

void pscom_con_type_mask_restore(pscom_socket_t *socket,
                                 void *con_type_mask_backup)
{
    if (!con_type_mask_backup) return;
    mask_set(socket, 0, *(uint64_t *)con_type_mask_backup);
    free(con_type_mask_backup);
}

/* ---------------------------------------------------------------------- */
/* Closing                                                                */
/* ---------------------------------------------------------------------- */

/* Who wants to hear of a socket's close (pscom_plugin_sock_watch). Kept in
 * one list of the library, not in the socket: a watch is forgotten by its
 * callback and argument, without naming a socket that may be gone. */
struct psc_sock_watch {
    struct psc_list next; /* psc_ctx.sock_watches */
    struct psc_sock *sock;
    pscom_plugin_sock_closed_cb_t fn;
    void *arg;
};

int pscom_plugin_sock_watch(pscom_socket_t *socket,
                            pscom_plugin_sock_closed_cb_t fn, void *arg)
{
    if (!socket || !fn) return -EINVAL;
    struct psc_sock_watch *w = malloc(sizeof(*w));
    if (!w) return -ENOMEM;
    psc_lock();
    struct psc_sock *sock = sock_of(socket);
    if (sock->magic != PSC_SOCK_MAGIC || sock->closing) {
        psc_unlock();
        free(w);
        return -EINVAL;
    }
    *w = (struct psc_sock_watch){.sock = sock, .fn = fn, .arg = arg};
    psc_list_add_tail(&w->next, &psc_ctx.sock_watches);
    psc_unlock();
    return 0;
}

void pscom_plugin_run_locked(void (*fn)(void *arg), void *arg)
{
    psc_lock();
    psc_enter(); /* what fn closes is freed after it returned */
    fn(arg);
    psc_leave();
    psc_unlock();
}

void pscom_plugin_sock_unwatch(pscom_plugin_sock_closed_cb_t fn, void *arg)
{
    struct psc_list *pos, *tmp;
    psc_lock();
    psc_list_for_each_safe(pos, tmp, &psc_ctx.sock_watches) {
        struct psc_sock_watch *w =
            psc_list_entry(pos, struct psc_sock_watch, next);
        if (w->fn != fn || w->arg != arg) continue;
        psc_list_del(&w->next);
        free(w);
    }
    psc_unlock();
}

/* Each watch of sock runs once, and is gone before it runs. */
static void tell_watches(struct psc_sock *sock)
{
    for (;;) {
        struct psc_sock_watch *found = NULL;
        struct psc_list *pos;
        psc_list_for_each(pos, &psc_ctx.sock_watches) {
            struct psc_sock_watch *w =
                psc_list_entry(pos, struct psc_sock_watch, next);
            if (w->sock == sock) {
                found = w;
                break;
            }
        }
        if (!found) return;
        psc_list_del(&found->next);
        found->fn(&sock->pub, found->arg);
        free(found);
    }
}

static void sock_close(struct psc_sock *sock)
{
    if (sock->closing) return;
    sock->closing = true;
    tell_watches(sock);
    stop_listen_now(sock);
    psc_precon_drop_socket(sock);
    /* A connection closing already (a callback of its close closes the
     * socket) is left to that close, which takes it out of sock->cons. */
    for (;;) {
        struct psc_con *open = NULL;
        struct psc_list *pos;
        psc_list_for_each(pos, &sock->cons) {
            struct psc_con *con = psc_list_entry(pos, struct psc_con, next_con);
            if (!con->closing) {
                open = con;
                break;
            }
        }
        if (!open) break;
        psc_con_close(open);
    }
    psc_group_sock_closed(sock);
    /* Posted any-source receives and unexpected messages go with it. */
    while (!psc_list_empty(&sock->recvq_any)) {
        struct psc_req *req =
            psc_list_first(&sock->recvq_any, struct psc_req, next);
        psc_list_del(&req->next);
        psc_req_done(req, PSCOM_REQ_STATE_ERROR);
    }
    while (!psc_list_empty(&sock->genrecvq_any)) {
        struct psc_req *g =
            psc_list_first(&sock->genrecvq_any, struct psc_req, next_any);
        psc_list_del(&g->next_any);
        psc_list_del(&g->next);
        psc_req_release(g);
    }
    /* Freed by the reap, after the callbacks that may name it. */
    psc_list_del(&sock->next_sock);
    psc_list_add_tail(&sock->next_sock, &psc_ctx.closed_socks);
    sock->magic = 0;
}

void pscom_close_socket(pscom_socket_t *socket)
{
    psc_lock();
    psc_enter();
    psc_ctx.close_called = true;
    psc_run_all_deferred();
    if (socket) {
        if (sock_of(socket)->magic == PSC_SOCK_MAGIC) sock_close(sock_of(socket));
    } else {
        /* Sockets a callback below is closing already are left to it. */
        for (;;) {
            struct psc_sock *open = NULL;
            struct psc_list *pos;
            psc_list_for_each(pos, &psc_ctx.sockets) {
                struct psc_sock *s =
                    psc_list_entry(pos, struct psc_sock, next_sock);
                if (!s->closing) {
                    open = s;
                    break;
                }
            }
            if (!open) break;
            sock_close(open);
        }
    }
    /* Receives on any socket can be satisfied by no socket any more. */
    if (psc_list_empty(&psc_ctx.sockets)) {
        while (!psc_list_empty(&psc_ctx.recvq_any)) {
            struct psc_req *req =
                psc_list_first(&psc_ctx.recvq_any, struct psc_req, next);
            psc_list_del(&req->next);
            psc_req_done(req, PSCOM_REQ_STATE_ERROR);
        }
    }
    psc_leave();
    psc_unlock();
}
