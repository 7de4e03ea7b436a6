/*
 * How the handshake starts loadable transports (lib/pscom/precon.c).
 *
 *   plugin_start overlap   PSP_PLUGINDIR holds slow_module.c as the ofi
 *                          module. Both ends of a connection must start it
 *                          at the same time: the acceptor right after its
 *                          HELLO, the connector before its TRY. When they
 *                          take turns, each start-up waits for the other in
 *                          vain and fails, and no overlap files appear.
 *   plugin_start lazy      The real modules. A connection that a transport
 *                          above ofi carries (UCX here) must not open the
 *                          ofi module: libfabric stays unloaded in both
 *                          processes. Skipped when UCX cannot run here.
 *
 * Both connect two processes with every transport allowed (shared memory
 * is off in meson's environment), exchange a message and check which
 * transport carries the connection.
 */
#include "itest.h"

#include <dirent.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int lazy; /* the mode: 0 overlap, 1 lazy */

static const char greeting[] = "started";

static int libfabric_loaded(void)
{
    void *h = dlopen("libfabric.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (h) dlclose(h);
    return h != NULL;
}

/* The transport must be the expected one, and in lazy mode libfabric must
 * not be in the process. */
static void check_transport(pscom_connection_t *con)
{
    itest_note("the connection runs over %s", pscom_con_type_str(con->type));
    if (!lazy) {
        ITEST_ASSERT_EQ(con->type, PSCOM_CON_TYPE_TCP,
                        "the slow module declines every connection");
        return;
    }
    ITEST_ASSERT(con->type == PSCOM_CON_TYPE_UCP ||
                     con->type == PSCOM_CON_TYPE_OPENIB,
                 "expected ucx (or verbs) to carry it, got %s",
                 pscom_con_type_str(con->type));
    ITEST_ASSERT(!libfabric_loaded(),
                 "libfabric was loaded for a connection over %s",
                 pscom_con_type_str(con->type));
}

static int acceptor(itest_link_t *link, void *arg)
{
    (void)arg;
    pscom_socket_t *sock;
    pscom_connection_t *con = itest_accept_peer(link, "acceptor", &sock);
    itest_step("sending the greeting");
    pscom_send(con, NULL, 0, (void *)greeting, sizeof(greeting));
    check_transport(con);
    /* Until the connector has it: the send may need our progress. */
    while (!itest_link_ready(link, 0)) itest_progress_once();
    itest_link_wait_note(link);
    pscom_close_socket(sock);
    return 0;
}

static int connector(itest_link_t *link, void *arg)
{
    (void)arg;
    pscom_socket_t *sock;
    pscom_connection_t *con = itest_connect_to_peer(link, "connector", &sock);
    char buf[sizeof(greeting)] = "";
    itest_step("receiving the greeting");
    ITEST_ASSERT_EQ(pscom_recv_from(con, NULL, 0, buf, sizeof(buf)),
                    PSCOM_SUCCESS, "receiving the greeting");
    ITEST_ASSERT(!memcmp(buf, greeting, sizeof(greeting)),
                 "the greeting arrived as \"%.*s\"", (int)sizeof(buf), buf);
    check_transport(con);
    itest_link_send_str(link, "got it");
    pscom_close_socket(sock);
    return 0;
}

/* Files in dir whose names start with prefix. */
static int count_files(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    ITEST_ASSERT(d != NULL, "cannot read %s", dir);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, prefix, strlen(prefix))) n++;
    closedir(d);
    return n;
}

static void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char path[4096];
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

int main(int argc, char **argv)
{
    itest_set_role("orchestrator");
    itest_watchdog(ITEST_DEFAULT_TIMEOUT);
    if (argc != 2 || (strcmp(argv[1], "overlap") && strcmp(argv[1], "lazy"))) {
        fprintf(stderr, "usage: plugin_start overlap|lazy\n");
        return 2;
    }
    lazy = !strcmp(argv[1], "lazy");

    char dir[] = "/tmp/pscom-plugin-start-XXXXXX";
    if (lazy) {
        itest_require_plugin("ucx");
    } else {
        ITEST_ASSERT(mkdtemp(dir) != NULL, "mkdtemp failed");
        setenv("START_SYNC_DIR", dir, 1);
    }

    itest_child_t acc, con;
    itest_spawn(&acc, "acceptor", acceptor, NULL);
    itest_spawn(&con, "connector", connector, NULL);
    itest_link_relay(&acc.link, &con.link); /* the endpoint */
    itest_link_relay(&con.link, &acc.link); /* the greeting arrived */
    itest_child_t *all[] = {&acc, &con};
    int failed = itest_children_check(all, 2);

    if (!lazy) {
        int started = count_files(dir, "started.");
        int overlapped = count_files(dir, "overlap.");
        remove_dir(dir);
        itest_note("start-ups: %d, of which overlapped: %d", started,
                   overlapped);
        ITEST_ASSERT_EQ(overlapped, 2, "each end must have started the "
                                       "module while the other did");
    }
    itest_note("%s", failed ? "FAILED" : "passed");
    return failed;
}
