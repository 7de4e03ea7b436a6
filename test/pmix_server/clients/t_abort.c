/*
 * PMIx_Abort ends the job with the given status and message.
 *   pscom_run -n 3 t_abort 1 [STATUS]
 * Rank 1 aborts with STATUS (default 42) once everyone is connected; the
 * others wait to be ended.
 */
#include "tclient.h"

int main(int argc, char **argv)
{
    t_init(argc, argv, 40);
    pmix_proc_t all = t_me;
    all.rank = PMIX_RANK_WILDCARD;
    T_STATUS(PMIx_Fence(&all, 1, NULL, 0), PMIX_SUCCESS, "fence");
    if (t_me.rank == 1) {
        int status = argc > 2 ? atoi(argv[2]) : 42;
        printf("rank 1 aborting with status %d\n", status);
        pmix_status_t rc = PMIx_Abort(status, "t_abort: rank 1 gives up", NULL, 0);
        t_fail("PMIx_Abort returned %s and the process still runs", PMIx_Error_string(rc));
    }
    sleep(30);
    t_fail("still running 30 s after PMIx_Abort of rank 1");
}
