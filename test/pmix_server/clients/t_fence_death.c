/*
 * A process dies before a fence the others are in.
 *   t_fence_death 1 before|after
 * Rank 1 exits with status 7 before PMIx_Init ("before") or after it
 * without PMIx_Finalize ("after"); the others enter a fence over the whole
 * namespace and print "fence returned <status> after <s> s" if it returns.
 * The fence must not hang the job: either the launcher ends the job or the
 * fence completes for the survivors.
 */
#include "tclient.h"

int main(int argc, char **argv)
{
    const char *when = argc > 2 ? argv[2] : "after";
    const char *rank = getenv("PMIX_RANK");
    if (strcmp(when, "before") == 0 && rank && strcmp(rank, "1") == 0) _exit(7);

    t_init(argc, argv, 40);
    if (t_me.rank == 1) {
        usleep(200000);
        _exit(7);
    }
    pmix_proc_t all = t_me;
    all.rank = PMIX_RANK_WILDCARD;
    double t0 = t_now();
    pmix_status_t rc = PMIx_Fence(&all, 1, NULL, 0);
    printf("fence returned %s after %.2f s\n", PMIx_Error_string(rc), t_now() - t0);
    t_finalize();
    return 0;
}
