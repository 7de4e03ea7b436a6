/*
 * Connection services of a fake core for the tests of the built-in stream
 * plugins (test/tcp, test/shm), which drive a plugin's ops directly. A
 * connection is a struct fake_con: the plugin sends the bytes queued in it
 * (tx_peek, tx_done) and it counts what the plugin delivers and reports.
 * Nothing goes directly into a receive buffer (rx_direct offers none).
 * Descriptors are recorded, not watched: a test calls a descriptor's
 * callback itself (fake_core_fd_cb); a lingering close closes at once.
 */
#ifndef FAKE_CORE_STREAM_H
#define FAKE_CORE_STREAM_H

#include <stdbool.h>
#include <stddef.h>

#include "pscom_plugin.h"

struct fake_con {
    void *priv;       /* the plugin's state: con_priv_size bytes, zeroed */
    char out[4096];   /* bytes queued for sending */
    size_t out_len;
    size_t in_len;    /* bytes delivered with rx_push */
    int pushes;       /* rx_push calls */
    int errors;       /* con_error calls */
    pscom_err_t err;  /* the last one's error */
    bool closing;     /* tx_done and rx_push answer "closing" */
    /* Called after every rx_push (the bytes counted), or NULL. */
    void (*on_push)(struct fake_con *k);
};

/* The plugin's handle of the connection k. */
static inline pscom_plugin_con_t *fake_con_handle(struct fake_con *k)
{
    return (pscom_plugin_con_t *)k;
}

/* A new connection with plugin state of priv_size bytes (freed by
 * fake_con_free). */
void fake_con_init(struct fake_con *k, size_t priv_size);
void fake_con_free(struct fake_con *k);

/* Queue len bytes for sending (the plugin's tx_kick is not called). */
void fake_con_queue(struct fake_con *k, const void *buf, size_t len);

/* The callback the plugin registered for fd, with its argument in *arg;
 * NULL when fd is not registered. */
pscom_plugin_fd_cb_t fake_core_fd_cb(int fd, void **arg);

#endif
