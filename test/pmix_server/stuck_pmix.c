/*
 * A PMIx server library that gets stuck at the end of a job, linked into
 * pscom_run's objects with -Wl,--wrap (run_case.py, stuck_teardown and
 * stuck_finalize):
 *   pscom_run_stuck           --wrap=PMIx_server_deregister_nspace: the
 *                             deregistration of a namespace never calls
 *                             back, as OpenPMIx 4.2's progress thread was
 *                             seen stuck after clients died during a fence
 *   pscom_run_stuck_finalize  --wrap=PMIx_server_finalize: the finalize
 *                             never returns
 * Each says on stderr that it was called; the test waits for that line
 * before it signals pscom_run. A wrapper the binary does not wrap is not
 * used.
 */
#include <pmix_server.h>
#include <unistd.h>

void __wrap_PMIx_server_deregister_nspace(const pmix_nspace_t nspace,
                                          pmix_op_cbfunc_t cbfunc,
                                          void *cbdata);
pmix_status_t __wrap_PMIx_server_finalize(void);

static void say(const char *line, size_t len)
{
    if (write(2, line, len) < 0) return;
}

void __wrap_PMIx_server_deregister_nspace(const pmix_nspace_t nspace,
                                          pmix_op_cbfunc_t cbfunc,
                                          void *cbdata)
{
    static const char said[] = "stuck_deregister: called\n";
    (void)nspace;
    (void)cbfunc;
    (void)cbdata;
    say(said, sizeof(said) - 1);
}

pmix_status_t __wrap_PMIx_server_finalize(void)
{
    static const char said[] = "stuck_finalize: called\n";
    say(said, sizeof(said) - 1);
    for (;;) pause();
}
