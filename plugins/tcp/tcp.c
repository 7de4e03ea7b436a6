/*
 * The tcp plugin: the universal fallback, built into libpscom.
 *
 * It keeps the pre-connection's socket as the data socket. Reads go into a
 * read-ahead buffer, except that the body of a message whose receive buffer
 * is known is read straight into that buffer (readv of the buffer and the
 * read-ahead, so that the next header comes with the same call). Writes are
 * vectored (sendmsg over the queued frames).
 *
 * Polling: while few connections are open, progress reads each socket
 * directly (one recv per connection and round, the cheapest busy poll) and
 * retries blocked writes; with more, the sockets go into the core's epoll
 * set. A wait that sleeps (ops.wait_arm) puts them there for the sleep.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "pscom_plugin.h"

#define IOV_BATCH 64

struct tcp_con {
    pscom_plugin_con_t *con;
    int fd;
    bool want_out;        /* EPOLLOUT armed: a write would block */
    bool dead;            /* failed, or the core said stop: no more I/O */
    bool write_broken;    /* the peer reset: read what it sent, then fail */
    struct tcp_con *next; /* tcp_cons: open connections */
    struct tcp_con **pprev;
    char *ra;             /* read-ahead buffer */
};

static size_t cfg_sndbuf, cfg_rcvbuf, cfg_readahead, cfg_rendezvous;
static unsigned cfg_direct_poll;
static int cfg_nodelay;

static const pscom_config_row_t tcp_rows[] = {
    {"PSP_TCP_SNDBUF", PSCOM_CONFIG_SIZE, "0",
     "SO_SNDBUF of tcp data sockets; 0 keeps the kernel's autotuning", "tcp",
     NULL, &cfg_sndbuf},
    {"PSP_TCP_RCVBUF", PSCOM_CONFIG_SIZE, "0",
     "SO_RCVBUF of tcp data sockets; 0 keeps the kernel's autotuning", "tcp",
     NULL, &cfg_rcvbuf},
    {"PSP_TCP_NODELAY", PSCOM_CONFIG_BOOL, "1",
     "TCP_NODELAY on tcp data sockets (send small messages at once)", "tcp",
     NULL, &cfg_nodelay},
    {"PSP_READAHEAD", PSCOM_CONFIG_SIZE, "32768",
     "bytes read ahead from a tcp socket in one call", "tcp", NULL,
     &cfg_readahead},
    {"PSP_TCP_RENDEZVOUS", PSCOM_CONFIG_SIZE, "inf",
     "rendezvous threshold on tcp connections", "tcp", "PSP_RENDEZVOUS",
     &cfg_rendezvous},
    {"PSP_TCP_DIRECT_POLL", PSCOM_CONFIG_UINT, "4",
     "up to this many tcp connections are polled with a direct read each "
     "round; beyond, they are polled through epoll", "tcp", NULL,
     &cfg_direct_poll},
};

static const pscom_config_range_t tcp_ranges[] = {
    {"PSP_READAHEAD", 64, 1LL << 30},
};

static struct tcp_con *tcp_cons;
static unsigned tcp_count;

static void update_epoll(void);

static int tcp_init(void)
{
    pscom_plugin_config_ranges(tcp_ranges,
                               sizeof(tcp_ranges) / sizeof(tcp_ranges[0]));
    pscom_plugin_config_register(tcp_rows, sizeof(tcp_rows) / sizeof(tcp_rows[0]));
    return 0;
}

static int tcp_hs_start(pscom_plugin_con_t *con, void *priv, void *blob,
                        size_t *len)
{
    *len = 0;
    return 0;
}

static int tcp_hs_connect(pscom_plugin_con_t *con, void *priv, const void *blob,
                          size_t len)
{
    return 0;
}

/* The core sleeps in its epoll set (ops.wait_arm; on an oversubscribed
 * node it stays armed between sleeps): the sockets' events must reach it,
 * so while armed every socket is in the epoll set, as beyond
 * PSP_TCP_DIRECT_POLL connections. */
static bool armed;

static bool direct_mode(void)
{
    return tcp_count <= cfg_direct_poll && !armed;
}

/* In direct mode progress reads and retries blocked writes itself, which
 * costs one system call per connection and round instead of two. */
static uint32_t wanted_events(struct tcp_con *tc)
{
    if (direct_mode()) return 0;
    return EPOLLIN | (tc->want_out ? EPOLLOUT : 0);
}

/* Read what the socket has. 1 if something was read, 0 if nothing, -1 when
 * the connection is gone. */
static int tcp_read(struct tcp_con *tc)
{
    int did = 0;
    if (tc->dead) return -1;
    for (;;) {
        void *direct;
        size_t dlen = pscom_plugin_rx_direct(tc->con, &direct);
        ssize_t n;
        size_t asked;
        if (dlen) {
            struct iovec iov[2] = {{direct, dlen}, {tc->ra, cfg_readahead}};
            asked = dlen + cfg_readahead;
            n = readv(tc->fd, iov, 2);
        } else {
            asked = cfg_readahead;
            n = recv(tc->fd, tc->ra, cfg_readahead, MSG_DONTWAIT);
        }
        if (n > 0) {
            did = 1;
            size_t d = (size_t)n < dlen ? (size_t)n : dlen;
            if ((d && pscom_plugin_rx_direct_done(tc->con, d)) ||
                ((size_t)n > d && pscom_plugin_rx_push(tc->con, tc->ra, n - d)))
                break; /* the core said stop */
            if ((size_t)n < asked) return did;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return did;
        int e = n < 0 ? errno : 0;
        pscom_plugin_con_error(tc->con, PSCOM_OP_READ,
                               !n || e == ECONNRESET ? PSCOM_ERR_EOF
                                                     : PSCOM_ERR_IOERROR,
                               "read", e);
        break;
    }
    tc->dead = true;
    return -1;
}

static void set_want_out(struct tcp_con *tc, bool on)
{
    if (tc->want_out == on) return;
    tc->want_out = on;
    pscom_plugin_fd_mod(tc->fd, wanted_events(tc));
}

static void tcp_tx_kick(pscom_plugin_con_t *con, void *priv)
{
    struct tcp_con *tc = priv;
    struct iovec iov[IOV_BATCH];
    size_t total;

    while (!tc->dead && !tc->write_broken) {
        int cnt = pscom_plugin_tx_peek(con, iov, IOV_BATCH, &total);
        if (!cnt) {
            set_want_out(tc, false);
            return;
        }
        struct msghdr msg = {.msg_iov = iov, .msg_iovlen = cnt};
        ssize_t n = sendmsg(tc->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                set_want_out(tc, true);
                return;
            }
            int e = errno;
            if (e == EPIPE || e == ECONNRESET) {
                /* What the peer sent before it closed is still readable
                 * (the EOF message included): the read side delivers it
                 * and then reports the end. Not from here: tx_kick may be
                 * called while the core handles a message of this
                 * connection. */
                tc->write_broken = true;
                set_want_out(tc, false);
                return;
            }
            tc->dead = true;
            pscom_plugin_con_error(con, PSCOM_OP_WRITE, PSCOM_ERR_IOERROR,
                                   "write", e);
            return;
        }
        if (pscom_plugin_tx_done(con, (size_t)n)) {
            tc->dead = true;
            return;
        }
        if ((size_t)n < total) {
            set_want_out(tc, true);
            return;
        }
    }
}

static void on_fd(int fd, uint32_t events, void *arg)
{
    struct tcp_con *tc = arg;
    if (events & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
        if (tcp_read(tc) < 0) return;
    }
    if (events & EPOLLOUT) tcp_tx_kick(tc->con, tc);
}

static void update_epoll(void)
{
    for (struct tcp_con *tc = tcp_cons; tc; tc = tc->next)
        pscom_plugin_fd_mod(tc->fd, wanted_events(tc));
}

static int tcp_open(pscom_plugin_con_t *con, void *priv, int fd)
{
    struct tcp_con *tc = priv;
    int one = 1;

    tc->ra = malloc(cfg_readahead);
    if (!tc->ra) return -ENOMEM;
    tc->con = con;
    tc->dead = tc->write_broken = false;
    tc->fd = fd;
    if (cfg_nodelay) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (cfg_sndbuf) {
        int v = cfg_sndbuf > 0x7fffffff ? 0x7fffffff : (int)cfg_sndbuf;
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v));
    }
    if (cfg_rcvbuf) {
        int v = cfg_rcvbuf > 0x7fffffff ? 0x7fffffff : (int)cfg_rcvbuf;
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v));
    }

    tc->next = tcp_cons;
    tc->pprev = &tcp_cons;
    if (tcp_cons) tcp_cons->pprev = &tc->next;
    tcp_cons = tc;
    bool was_direct = direct_mode();
    tcp_count++;
    if (pscom_plugin_fd_add(fd, 0, 1, on_fd, tc)) {
        *tc->pprev = tc->next;
        if (tc->next) tc->next->pprev = tc->pprev;
        tcp_count--;
        free(tc->ra);
        return -EIO;
    }
    if (was_direct != direct_mode()) update_epoll();
    else pscom_plugin_fd_mod(fd, wanted_events(tc));
    return 1; /* keep the socket */
}

static void tcp_close(pscom_plugin_con_t *con, void *priv)
{
    struct tcp_con *tc = priv;
    if (tc->fd < 0) return;
    *tc->pprev = tc->next;
    if (tc->next) tc->next->pprev = tc->pprev;
    bool was_direct = direct_mode();
    tcp_count--;
    pscom_plugin_fd_del(tc->fd);
    /* Not close(): with bytes of the peer unread that sends a reset, and
     * the reset drops what our send queue still holds. */
    pscom_plugin_fd_linger(tc->fd);
    tc->fd = -1;
    free(tc->ra);
    tc->ra = NULL;
    if (was_direct != direct_mode()) update_epoll();
}

static int tcp_progress(void)
{
    if (!direct_mode()) return 0;
    int did = 0;
    struct tcp_con *tc = tcp_cons;
    while (tc) {
        /* Reading may run callbacks that close this or other connections;
         * closing only takes effect at the end of the round, so the list
         * stays intact while we walk it. */
        struct tcp_con *next = tc->next;
        int rc = tcp_read(tc);
        if (rc > 0) did = 1;
        if (rc >= 0 && tc->want_out) tcp_tx_kick(tc->con, tc);
        tc = next;
    }
    return did;
}

/* Everything we wait for is a socket event: readable, or writable again
 * after a write would have blocked. */
static int tcp_wait_arm(void)
{
    armed = true;
    update_epoll(); /* no system call for sockets armed already */
    return 1;
}

static void tcp_wait_disarm(void)
{
    armed = false;
    update_epoll();
}

static const pscom_plugin_ops_t tcp_ops = {
    .init = tcp_init,
    .hs_start = tcp_hs_start,
    .hs_connect = tcp_hs_connect,
    .open = tcp_open,
    .close = tcp_close,
    .tx_kick = tcp_tx_kick,
    .progress = tcp_progress,
    .wait_arm = tcp_wait_arm,
    .wait_disarm = tcp_wait_disarm,
};

const pscom_plugin_t pscom_plugin_tcp = {
    .api_version = PSCOM_PLUGIN_API_VERSION,
    .name = "tcp",
    .con_type = PSCOM_CON_TYPE_TCP,
    .priority = 2,
    .con_priv_size = sizeof(struct tcp_con),
    .rendezvous = &cfg_rendezvous,
    .fds_per_con = 1,
    .ops = &tcp_ops,
};
