/*
 * Connection services of a fake core for stream plugins (see
 * fake_core_stream.h).
 */
#include "fake_core_stream.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

static struct fake_con *con_of(pscom_plugin_con_t *c)
{
    return (struct fake_con *)c;
}

void fake_con_init(struct fake_con *k, size_t priv_size)
{
    *k = (struct fake_con){.priv = calloc(1, priv_size)};
    assert_non_null(k->priv);
}

void fake_con_free(struct fake_con *k)
{
    free(k->priv);
    k->priv = NULL;
}

void fake_con_queue(struct fake_con *k, const void *buf, size_t len)
{
    assert_true(k->out_len + len <= sizeof(k->out));
    memcpy(k->out + k->out_len, buf, len);
    k->out_len += len;
}

int pscom_plugin_tx_peek(pscom_plugin_con_t *c, struct iovec *iov,
                         int iov_max, size_t *total)
{
    struct fake_con *k = con_of(c);
    *total = k->out_len;
    if (!k->out_len || iov_max < 1) return 0;
    iov[0] = (struct iovec){k->out, k->out_len};
    return 1;
}

int pscom_plugin_tx_done(pscom_plugin_con_t *c, size_t n)
{
    struct fake_con *k = con_of(c);
    assert_true(n <= k->out_len);
    memmove(k->out, k->out + n, k->out_len - n);
    k->out_len -= n;
    return k->closing ? -1 : 0;
}

int pscom_plugin_rx_push(pscom_plugin_con_t *c, const void *buf, size_t len)
{
    struct fake_con *k = con_of(c);
    k->in_len += len;
    k->pushes++;
    if (k->on_push) k->on_push(k);
    return k->closing ? -1 : 0;
}

size_t pscom_plugin_rx_direct(pscom_plugin_con_t *c, void **buf)
{
    return 0;
}

int pscom_plugin_rx_direct_done(pscom_plugin_con_t *c, size_t n)
{
    fail_msg("rx_direct offered no buffer");
    return -1;
}

void pscom_plugin_con_error(pscom_plugin_con_t *c, pscom_op_t op,
                            pscom_err_t err, const char *what, int sys_errno)
{
    con_of(c)->errors++;
    con_of(c)->err = err;
}

const char *pscom_plugin_con_str(pscom_plugin_con_t *c)
{
    return "fake connection";
}

pid_t pscom_plugin_con_peer_pid(pscom_plugin_con_t *c)
{
    return 0; /* not known */
}

/* The registered descriptors. */
static struct {
    int fd;
    pscom_plugin_fd_cb_t cb;
    void *arg;
} fds[16];

pscom_plugin_fd_cb_t fake_core_fd_cb(int fd, void **arg)
{
    for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++) {
        if (fds[i].cb && fds[i].fd == fd) {
            *arg = fds[i].arg;
            return fds[i].cb;
        }
    }
    return NULL;
}

int pscom_plugin_fd_add(int fd, uint32_t events, int hot,
                        pscom_plugin_fd_cb_t cb, void *arg)
{
    for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++) {
        if (!fds[i].cb) {
            fds[i].fd = fd;
            fds[i].cb = cb;
            fds[i].arg = arg;
            return 0;
        }
    }
    fail_msg("more descriptors than the fake core records");
    return -1;
}

void pscom_plugin_fd_del(int fd)
{
    for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
        if (fds[i].cb && fds[i].fd == fd) fds[i].cb = NULL;
}

void pscom_plugin_fd_linger(int fd)
{
    close(fd);
}
