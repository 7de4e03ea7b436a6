/*
 * Linked into pscom_run_stuck with -Wl,--wrap=PMIx_server_deregister_nspace:
 * a PMIx server library whose deregistration of a namespace never calls
 * back, as OpenPMIx 4.2's progress thread was seen stuck after clients died
 * during a fence (run_case.py, stuck_teardown).
 */
#include <pmix_server.h>
#include <unistd.h>

void __wrap_PMIx_server_deregister_nspace(const pmix_nspace_t nspace,
                                          pmix_op_cbfunc_t cbfunc,
                                          void *cbdata);

void __wrap_PMIx_server_deregister_nspace(const pmix_nspace_t nspace,
                                          pmix_op_cbfunc_t cbfunc,
                                          void *cbdata)
{
    static const char said[] = "stuck_deregister: called\n";
    (void)nspace;
    (void)cbfunc;
    (void)cbdata;
    /* The test waits for this line before it signals pscom_run. */
    if (write(2, said, sizeof(said) - 1) < 0) return;
}
