/*
 * Signals sent to pscom_run reach every process.
 *   t_signal 1 catch|default
 * "catch": SIGTERM and SIGINT are caught; the process reports which one
 * and exits with 100 + its number.  "default": the signal kills it.
 * Every process prints "ready <rank>" once all are connected.
 */
#include "tclient.h"

static void on_signal(int sig)
{
    char msg[64];
    int n = snprintf(msg, sizeof(msg), "rank %u caught signal %d\n", t_me.rank, sig);
    if (write(STDOUT_FILENO, msg, n) < 0) _exit(2);
    _exit(100 + sig);
}

int main(int argc, char **argv)
{
    bool catch = argc > 2 && strcmp(argv[2], "catch") == 0;
    t_init(argc, argv, 40);
    if (catch) {
        signal(SIGTERM, on_signal);
        signal(SIGINT, on_signal);
    }
    pmix_proc_t all = t_me;
    all.rank = PMIX_RANK_WILDCARD;
    T_STATUS(PMIx_Fence(&all, 1, NULL, 0), PMIX_SUCCESS, "fence");
    printf("ready %u\n", t_me.rank);
    for (int i = 0; i < 300; i++) usleep(100000);
    t_fail("no signal within 30 s");
}
