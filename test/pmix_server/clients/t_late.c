/*
 * Datastore requests at the edges of what pscom_run can serve; run under
 * pscom_run_stuck (stuck_pmix.c), whose PSCOM_TEST_STUCK holds or fails
 * pscom_run's copies of values.
 *   pscom_run_stuck -vv -n 1 t_late 1 late
 * Sends, without waiting for the answers: publish t.late.a, lookup
 * t.late.a, publish t.late.b, lookup t.late.b, unpublish t.late.a; then
 * exits without PMIx_Finalize. With a copy held until the job has ended,
 * the requests reach pscom_run after its last process has gone.
 *   pscom_run_stuck -n 1 t_late 1 status
 * Publishes t.late.s (a string) and prints "publish status: <status>".
 */
#include "tclient.h"

static void op_done(pmix_status_t status, void *cbdata)
{
    (void)status;
    (void)cbdata;
}

static void lookup_done(pmix_status_t status, pmix_pdata_t data[], size_t ndata, void *cbdata)
{
    (void)status;
    (void)data;
    (void)ndata;
    (void)cbdata;
}

static void publish_nb(const char *key)
{
    pmix_info_t info;
    PMIX_INFO_LOAD(&info, key, key, PMIX_STRING);
    T_STATUS(PMIx_Publish_nb(&info, 1, op_done, NULL), PMIX_SUCCESS, "PMIx_Publish_nb");
    PMIX_INFO_DESTRUCT(&info);
}

static void lookup_nb(const char *key)
{
    char *keys[] = { (char *)key, NULL };
    T_STATUS(PMIx_Lookup_nb(keys, NULL, 0, lookup_done, NULL), PMIX_SUCCESS,
             "PMIx_Lookup_nb");
}

int main(int argc, char **argv)
{
    const char *mode = argc > 2 ? argv[2] : "";
    t_init(argc, argv, 40);
    if (strcmp(mode, "late") == 0) {
        /* A child that holds the connection open: the library keeps
         * reading this process's requests after it has gone. */
        if (fork() == 0) {
            close(STDOUT_FILENO);
            close(STDERR_FILENO);
            sleep(3);
            _exit(0);
        }
        publish_nb("t.late.a");
        lookup_nb("t.late.a");
        publish_nb("t.late.b");
        lookup_nb("t.late.b");
        char *keys[] = { "t.late.a", NULL };
        T_STATUS(PMIx_Unpublish_nb(keys, NULL, 0, op_done, NULL), PMIX_SUCCESS,
                 "PMIx_Unpublish_nb");
        usleep(500000);     /* the requests have reached the server */
        _exit(0);
    }
    T_CHECK(strcmp(mode, "status") == 0, "mode late or status, not '%s'", mode);
    pmix_info_t info;
    PMIX_INFO_LOAD(&info, "t.late.s", "a string", PMIX_STRING);
    printf("publish status: %s\n", PMIx_Error_string(PMIx_Publish(&info, 1)));
    PMIX_INFO_DESTRUCT(&info);
    t_finalize();
    return 0;
}
