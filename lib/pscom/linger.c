/*
 * Graceful ends of TCP sockets.
 *
 * Closing a TCP socket that still has received bytes unread, or that
 * receives bytes afterwards, makes the kernel send a reset instead of a
 * FIN, and a reset throws away what is still in our send queue: the tail
 * of a message whose send the library already reported done (a tcp
 * connection closed while the peer had just sent something), or an ERROR
 * record of the pre-connection handshake. So such a socket lingers: it is
 * shut for writing (the FIN follows the queued bytes), and what the peer
 * still sends is read and dropped, until the peer has acknowledged all we
 * sent (then a reset loses nothing: what it received stays readable),
 * until it closes its end or the connection breaks, or until a deadline.
 * Then the descriptor is closed.
 */
#include <errno.h>
#include <linux/sockios.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core.h"

/* More than this many lingering sockets (a job closing thousands of
 * connections at once) and further ones are closed at once. */
#define LINGER_MAX 4096

struct lingerer {
    struct psc_list next; /* lingering */
    int fd;
    uint64_t deadline; /* ms */
};

static struct psc_list lingering = PSC_LIST_HEAD_INIT(lingering);
static unsigned n_lingering;

static void linger_end(struct lingerer *l)
{
    pscom_plugin_fd_del(l->fd);
    close(l->fd);
    psc_list_del(&l->next);
    n_lingering--;
    free(l);
}

/* Has the peer acknowledged everything we sent, our FIN included? */
static bool all_acknowledged(int fd)
{
    int unacked = 0;
    return ioctl(fd, SIOCOUTQ, &unacked) == 0 && unacked == 0;
}

/* Drop what the peer sent. 1 while the socket should linger on. */
static int drop_input(int fd)
{
    char buf[4096];
    for (unsigned reads = 0;;) {
        ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n > 0 && ++reads == 16) return 1; /* more in the next round */
        if (n > 0) continue;
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return !all_acknowledged(fd);
        return 0; /* the peer closed its end, or the connection broke */
    }
}

static void on_linger_fd(int fd, uint32_t events, void *arg)
{
    (void)events;
    if (!drop_input(fd)) linger_end(arg);
}

void psc_linger(int fd, unsigned ms)
{
    if (fd < 0) return;
    struct lingerer *l = NULL;
    if (n_lingering < LINGER_MAX && shutdown(fd, SHUT_WR) == 0 &&
        drop_input(fd))
        l = malloc(sizeof(*l));
    if (!l) {
        close(fd);
        return;
    }
    l->fd = fd;
    l->deadline = psc_now_ms() + ms;
    if (pscom_plugin_fd_add(fd, EPOLLIN | EPOLLRDHUP, 0, on_linger_fd, l)) {
        close(fd);
        free(l);
        return;
    }
    psc_list_add_tail(&l->next, &lingering);
    n_lingering++;
}

void pscom_plugin_fd_linger(int fd)
{
    psc_linger(fd, PSC_LINGER_CLOSE_MS);
}

void psc_linger_check(uint64_t now)
{
    struct psc_list *pos, *tmp;
    psc_list_for_each_safe(pos, tmp, &lingering) {
        struct lingerer *l = psc_list_entry(pos, struct lingerer, next);
        if (now >= l->deadline || all_acknowledged(l->fd)) linger_end(l);
    }
}

void psc_linger_finish(uint64_t until_ms)
{
    /* At exit no round of progress reads the sockets any more: look at
     * them here, until each has ended or its deadline has passed, or until
     * until_ms (the exit's budget), when the rest are closed. */
    while (n_lingering) {
        uint64_t now = psc_now_ms();
        struct psc_list *pos, *tmp;
        psc_list_for_each_safe(pos, tmp, &lingering) {
            struct lingerer *l = psc_list_entry(pos, struct lingerer, next);
            if (now >= until_ms || now >= l->deadline || !drop_input(l->fd))
                linger_end(l);
        }
        if (n_lingering) usleep(1000);
    }
}
