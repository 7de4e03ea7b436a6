/*
 * The loop plugin: connections between two sockets of the same process
 * (PSCOM_CON_TYPE_LOOP), including a socket connected to itself.
 *
 * The handshake still runs over TCP, so both ends are set up like any
 * other connection. Each end registers under a random key; the keys are
 * exchanged as blobs and looked up in this process's registry (a key that is
 * not found fails the plugin and the next transport is used). Sending
 * pushes the queued frames straight into the partner's receive state
 * machine: one copy from the sender's buffer into the receiver's buffer
 * when the receive is posted.
 *
 * A connection of a socket to its own endpoint is a single connection that
 * delivers to itself (the core sets it up without a handshake: an end whose
 * partner is itself).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pscom_plugin.h"

struct loop_con {
    pscom_plugin_con_t *con;
    uint64_t key;
    struct loop_con *peer;
    struct loop_con *next; /* registry: every end of this process */
    bool open;
    bool closed;
    bool in_kick;    /* delivering: a nested kick only asks for another pass */
    bool kick_again;
};

static struct loop_con *registry;

static uint64_t random_key(void)
{
    uint64_t k = 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        if (read(fd, &k, sizeof(k)) != sizeof(k)) k = 0;
        close(fd);
    }
    static uint64_t counter;
    return k ^ (++counter * 0x9e3779b97f4a7c15ull) ^ (uint64_t)(uintptr_t)&k;
}

static void unregister(struct loop_con *lc)
{
    for (struct loop_con **p = &registry; *p; p = &(*p)->next)
        if (*p == lc) {
            *p = lc->next;
            return;
        }
}

static int loop_offer(const pscom_plugin_peer_t *peer)
{
    return peer->same_node && peer->pid == getpid();
}

static int loop_hs_start(pscom_plugin_con_t *con, void *priv, void *blob,
                         size_t *len)
{
    struct loop_con *lc = priv;
    if (*len < sizeof(lc->key)) return -ENOSPC;
    lc->con = con;
    lc->key = random_key();
    lc->next = registry;
    registry = lc;
    memcpy(blob, &lc->key, sizeof(lc->key));
    *len = sizeof(lc->key);
    return 0;
}

static int loop_hs_connect(pscom_plugin_con_t *con, void *priv,
                           const void *blob, size_t len)
{
    struct loop_con *lc = priv;
    uint64_t key;
    if (len != sizeof(key)) return -EPROTO;
    memcpy(&key, blob, sizeof(key));
    for (struct loop_con *p = registry; p; p = p->next)
        if (p->key == key) { /* itself: a connection to its own socket */
            lc->peer = p;
            return 0;
        }
    return -ENOENT;
}

static void loop_hs_abort(pscom_plugin_con_t *con, void *priv)
{
    unregister(priv);
}

static void loop_tx_kick(pscom_plugin_con_t *con, void *priv)
{
    struct loop_con *lc = priv;
    struct iovec iov[16];
    size_t total;

    /* Delivering runs the receiver's callbacks, which may send on this
     * connection again: that send only asks the running pass to go on, so
     * no frame is delivered twice or out of order. */
    if (lc->in_kick) {
        lc->kick_again = true;
        return;
    }
    lc->in_kick = true;
    /* Hold frames until the partner end is switched to us as well. */
    while (lc->open && lc->peer && lc->peer->open && !lc->peer->closed) {
        lc->kick_again = false;
        int cnt = pscom_plugin_tx_peek(con, iov, 16, &total);
        if (!cnt) break;
        /* Only the first frame: its delivery may queue more behind it. */
        size_t len = 0;
        int n = 0;
        const pscom_header_net_t *h = iov[0].iov_base;
        size_t frame = iov[0].iov_len >= sizeof(*h)
                           ? sizeof(*h) + h->xheader_len + h->data_len
                           : iov[0].iov_len;
        while (n < cnt && len < frame) len += iov[n++].iov_len;
        bool gone = false;
        for (int i = 0; i < n && !gone; i++)
            gone = pscom_plugin_rx_push(lc->peer->con, iov[i].iov_base,
                                        iov[i].iov_len) != 0;
        if (gone) {
            /* The partner is gone; what we hold can go nowhere. */
            lc->in_kick = false;
            pscom_plugin_con_error(con, PSCOM_OP_WRITE, PSCOM_ERR_EOF,
                                   "in-process delivery", 0);
            return;
        }
        if (pscom_plugin_tx_done(con, len)) {
            lc->in_kick = false;
            return;
        }
    }
    lc->in_kick = false;
}

static int loop_open(pscom_plugin_con_t *con, void *priv, int precon_fd)
{
    struct loop_con *lc = priv;
    lc->open = true;
    /* The partner may have queued frames while we were switching. */
    if (lc->peer && lc->peer->open) {
        loop_tx_kick(lc->peer->con, lc->peer);
        loop_tx_kick(con, lc);
    }
    return 0;
}

static void loop_close(pscom_plugin_con_t *con, void *priv)
{
    struct loop_con *lc = priv;
    lc->closed = true;
    unregister(lc);
    struct loop_con *peer = lc->peer;
    if (peer && peer->peer == lc) {
        peer->peer = NULL;
        /* The partner learns of the close like a tcp peer learns of EOF. */
        if (peer->open && !peer->closed)
            pscom_plugin_con_error(peer->con, PSCOM_OP_READ, PSCOM_ERR_EOF,
                                   "in-process partner closed", 0);
    }
}

static const pscom_plugin_ops_t loop_ops = {
    .offer = loop_offer,
    .hs_start = loop_hs_start,
    .hs_connect = loop_hs_connect,
    .hs_abort = loop_hs_abort,
    .open = loop_open,
    .close = loop_close,
    .tx_kick = loop_tx_kick,
};

static size_t loop_rendezvous = (size_t)-1;

const pscom_plugin_t pscom_plugin_loop = {
    .api_version = PSCOM_PLUGIN_API_VERSION,
    .name = "loop",
    .con_type = PSCOM_CON_TYPE_LOOP,
    .priority = 100,
    .con_priv_size = sizeof(struct loop_con),
    .flags = PSCOM_PLUGIN_LOCAL_ONLY,
    .rendezvous = &loop_rendezvous,
    .ops = &loop_ops,
};
