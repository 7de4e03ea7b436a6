/*
 * A loadable plugin for the start-up test (plugin_start.c), built as this
 * directory's libpscom4ofi.so so that the core takes it for the ofi module.
 * It stands for a transport whose start-up takes long, and checks that the
 * two ends of a connection start it at the same time.
 *
 * Its init op leaves "started.<pid>" in $START_SYNC_DIR, then waits until
 * another process's file is there too. Then it leaves "overlap.<pid>" and
 * succeeds. When no other start-up shows up within START_WAIT_S seconds,
 * init fails. The handshake can then only finish over tcp, and the test
 * finds no overlap files. Each process waits for the other there. So the
 * two start-ups meet only when each process starts the module on its own
 * initiative: the acceptor as soon as its HELLO is out, the connector
 * before its TRY.
 *
 * The module never carries a connection: hs_start declines, and the
 * connector goes on to tcp.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pscom_plugin.h"

#define START_WAIT_S 30

static void touch(const char *dir, const char *what)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s.%d", dir, what, (int)getpid());
    FILE *f = fopen(path, "w");
    if (f) fclose(f);
}

/* Has a process other than this one left "started.<pid>" in dir? */
static int other_started(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    int found = 0;
    struct dirent *e;
    while (!found && (e = readdir(d))) {
        int pid;
        if (sscanf(e->d_name, "started.%d", &pid) == 1 && pid != getpid())
            found = 1;
    }
    closedir(d);
    return found;
}

static int slow_init(void)
{
    const char *dir = getenv("START_SYNC_DIR");
    if (!dir) {
        pscom_plugin_set_reason("START_SYNC_DIR is not set");
        return -EINVAL;
    }
    touch(dir, "started");
    struct timespec nap = {0, 2 * 1000 * 1000};
    for (long i = 0; i < START_WAIT_S * 500L; i++) {
        if (other_started(dir)) {
            touch(dir, "overlap");
            return 0;
        }
        nanosleep(&nap, NULL);
    }
    pscom_plugin_set_reason("the peer did not start this plugin at the same "
                            "time");
    return -ETIMEDOUT;
}

static int slow_hs_start(pscom_plugin_con_t *con, void *priv, void *blob,
                         size_t *len)
{
    (void)con, (void)priv, (void)blob, (void)len;
    return -EOPNOTSUPP;
}

static int slow_hs_connect(pscom_plugin_con_t *con, void *priv,
                           const void *blob, size_t len)
{
    (void)con, (void)priv, (void)blob, (void)len;
    return -EOPNOTSUPP;
}

static int slow_open(pscom_plugin_con_t *con, void *priv, int precon_fd)
{
    (void)con, (void)priv, (void)precon_fd;
    return -EOPNOTSUPP;
}

static void slow_close(pscom_plugin_con_t *con, void *priv)
{
    (void)con, (void)priv;
}

static void slow_tx_kick(pscom_plugin_con_t *con, void *priv)
{
    (void)con, (void)priv;
}

static const pscom_plugin_ops_t slow_ops = {
    .init = slow_init,
    .hs_start = slow_hs_start,
    .hs_connect = slow_hs_connect,
    .open = slow_open,
    .close = slow_close,
    .tx_kick = slow_tx_kick,
};

PSCOM_PLUGIN_EXPORT const pscom_plugin_t pscom_plugin_ofi = {
    .api_version = PSCOM_PLUGIN_API_VERSION,
    .name = "ofi",
    .con_type = PSCOM_CON_TYPE_OFED,
    .priority = 20,
    .ops = &slow_ops,
};
