/*
 * A process dies before a fence the others are in.
 *   t_fence_death 1 before|late|after [STATUS]
 * Rank 1 exits with STATUS (default 7) without PMIx_Init: at once, while
 * the others wait 0.5 s before their PMIx_Init ("before"), or 0.5 s after
 * its start, when the others have connected ("late"); or after PMIx_Init
 * without PMIx_Finalize ("after"). The others enter a fence over the whole
 * namespace and print "fence returned <status> after <s> s" if it returns.
 * The fence must not hang the job: either the launcher ends the job or the
 * fence completes for the survivors.
 */
#include "tclient.h"

int main(int argc, char **argv)
{
    const char *when = argc > 2 ? argv[2] : "after";
    int status = argc > 3 ? atoi(argv[3]) : 7;
    const char *rank = getenv("PMIX_RANK");
    bool is_1 = rank && strcmp(rank, "1") == 0;
    if (strcmp(when, "before") == 0) {
        if (is_1) _exit(status);
        usleep(500000);
    } else if (strcmp(when, "late") == 0 && is_1) {
        usleep(500000);
        _exit(status);
    }

    t_init(argc, argv, 40);
    if (t_me.rank == 1) {
        usleep(200000);
        _exit(status);
    }
    pmix_proc_t all = t_me;
    all.rank = PMIX_RANK_WILDCARD;
    double t0 = t_now();
    pmix_status_t rc = PMIx_Fence(&all, 1, NULL, 0);
    printf("fence returned %s after %.2f s\n", PMIx_Error_string(rc), t_now() - t0);
    t_finalize();
    return 0;
}
