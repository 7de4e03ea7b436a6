/*
 * A transport for unit tests, without a network: connections look
 * established on it, its progress op is the test's own (the only one the
 * core polls), and it writes and closes nothing by itself.
 */
#ifndef TEST_FAKE_TRANSPORT_H
#define TEST_FAKE_TRANSPORT_H

#include "core.h"

struct fake_transport {
    pscom_plugin_ops_t ops;
    pscom_plugin_t desc;
    struct psc_plugin plugin;
};

static inline void fake_transport_tx_kick(pscom_plugin_con_t *c, void *priv)
{
    (void)c;
    (void)priv;
}

static inline void fake_transport_close(pscom_plugin_con_t *c, void *priv)
{
    (void)c;
    (void)priv;
}

/* Set t up with `progress` as its progress op. */
static inline void fake_transport_init(struct fake_transport *t,
                                       int (*progress)(void))
{
    t->ops = (pscom_plugin_ops_t){.tx_kick = fake_transport_tx_kick,
                                  .close = fake_transport_close,
                                  .progress = progress};
    t->desc = (pscom_plugin_t){.api_version = PSCOM_PLUGIN_API_VERSION,
                               .name = "fake",
                               .ops = &t->ops};
    t->plugin = (struct psc_plugin){.desc = &t->desc, .name = "fake"};
}

/* A new connection of s that looks established on t, whose progress op
 * becomes the only one polled; NULL when it cannot be opened. */
static inline struct psc_con *fake_transport_con(struct fake_transport *t,
                                                 pscom_socket_t *s)
{
    pscom_connection_t *c = pscom_open_connection(s);
    if (!c) return NULL;
    struct psc_con *con = con_of(c);
    con->plugin = &t->plugin;
    con->plugin_open = true;
    t->plugin.open_cons++;
    psc_active.n = 1;
    psc_active.progress[0] = t->ops.progress;
    return con;
}

/* t's connections are gone: its progress op is polled no more. */
static inline void fake_transport_off(struct fake_transport *t)
{
    if (psc_active.n == 1 && psc_active.progress[0] == t->ops.progress)
        psc_active.n = 0;
}

#endif
