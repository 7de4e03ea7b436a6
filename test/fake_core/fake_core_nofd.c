/*
 * Descriptor services of a fake core for plugin tests that do not drive
 * the plugin through its descriptors: every call succeeds and nothing is
 * watched (pscom_plugin_fd_mod, which no test records, is in
 * fake_core_common.c).
 */
#include "pscom_plugin.h"

int pscom_plugin_fd_add(int fd, uint32_t events, int hot,
                        pscom_plugin_fd_cb_t cb, void *arg)
{
    (void)fd;
    (void)events;
    (void)hot;
    (void)cb;
    (void)arg;
    return 0;
}

void pscom_plugin_fd_del(int fd)
{
    (void)fd;
}
