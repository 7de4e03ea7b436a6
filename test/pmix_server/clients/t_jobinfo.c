/*
 * Job information, PMIx_Resolve_peers and PMIx_Resolve_nodes.
 *   t_jobinfo NAPPS SIZE0 [SIZE1 ...]
 * Prints "jobinfo ok" when every answer is right.  With T_COMPARE=1 (runs
 * under other launchers) wrong answers are listed as "DIFF" notes.
 */
#include "tclient.h"

static void check_peers(const char *node, const char *nspace, uint32_t want_n,
                        pmix_rank_t first)
{
    pmix_proc_t *procs = NULL;
    size_t n = 0;
    pmix_status_t rc = PMIx_Resolve_peers(node, nspace, &procs, &n);
    T_STATUS(rc, PMIX_SUCCESS, "PMIx_Resolve_peers(this node, an app's namespace)");
    T_DIFF(n == want_n, "Resolve_peers(%s, %s): %zu processes, expected %u", node, nspace, n,
            want_n);
    for (size_t i = 0; i < n; i++) {
        T_DIFF(PMIX_CHECK_NSPACE(procs[i].nspace, nspace), "peer %zu in namespace %s", i,
                procs[i].nspace);
        T_DIFF(procs[i].rank == first + i, "peer %zu has rank %u, expected %u", i,
                procs[i].rank, (unsigned)(first + i));
    }
    PMIX_PROC_FREE(procs, n);
}

int main(int argc, char **argv)
{
    t_init(argc, argv, 30);
    T_CHECK(argc >= 2 + t_napps, "usage: t_jobinfo NAPPS SIZE0 [SIZE1 ...]");
    uint32_t sizes[T_MAX_APPS], total = 0, offset = 0;
    for (int a = 0; a < t_napps; a++) {
        sizes[a] = (uint32_t)atoi(argv[2 + a]);
        if ((uint32_t)a < t_appnum) offset += sizes[a];
        total += sizes[a];
    }
    t_exchange();

    pmix_proc_t wc = t_me;
    wc.rank = PMIX_RANK_WILDCARD;
    bool shared = PMIX_CHECK_NSPACE(t_ns[0], t_ns[t_napps - 1]) && t_napps > 1;
    uint32_t my_ns_size = shared ? total : sizes[t_appnum];
    T_DIFF(t_get_u32(&wc, PMIX_JOB_SIZE) == my_ns_size, "PMIX_JOB_SIZE %u, expected %u",
            t_get_u32(&wc, PMIX_JOB_SIZE), my_ns_size);
    T_DIFF(t_get_u32(&wc, PMIX_UNIV_SIZE) >= total, "PMIX_UNIV_SIZE %u < %u processes",
            t_get_u32(&wc, PMIX_UNIV_SIZE), total);
    T_DIFF(t_get_u32(&wc, PMIX_LOCAL_SIZE) == my_ns_size, "PMIX_LOCAL_SIZE %u, expected %u",
            t_get_u32(&wc, PMIX_LOCAL_SIZE), my_ns_size);
    T_DIFF(t_get_u32(&t_me, PMIX_LOCAL_RANK) == t_me.rank, "PMIX_LOCAL_RANK %u, rank %u",
            t_get_u32(&t_me, PMIX_LOCAL_RANK), t_me.rank);
    T_DIFF(t_get_u32(&t_me, PMIX_NODE_RANK) == offset + t_arank,
            "PMIX_NODE_RANK %u, expected %u", t_get_u32(&t_me, PMIX_NODE_RANK),
            offset + t_arank);

    pmix_value_t *v = NULL;
    pmix_status_t rc = PMIx_Get(&wc, PMIX_LOCAL_PEERS, NULL, 0, &v);
    T_STATUS(rc, PMIX_SUCCESS, "PMIx_Get(PMIX_LOCAL_PEERS)");
    T_DIFF(v->type == PMIX_STRING, "PMIX_LOCAL_PEERS is not a string");
    t_note("local peers %s", v->data.string);
    PMIX_VALUE_RELEASE(v);

    char host[256];
    rc = PMIx_Get(&t_me, PMIX_HOSTNAME, NULL, 0, &v);
    T_STATUS(rc, PMIX_SUCCESS, "PMIx_Get(PMIX_HOSTNAME)");
    snprintf(host, sizeof(host), "%s", v->data.string);
    PMIX_VALUE_RELEASE(v);

    /* Peers on this node: of our namespace and of every other app's. */
    for (int a = 0; a < t_napps; a++) {
        if (shared && a > 0) break;
        check_peers(host, t_ns[a], shared ? total : sizes[a], 0);
    }

    /* All namespaces this process knows; ours at least. */
    pmix_proc_t *procs = NULL;
    size_t n = 0;
    rc = PMIx_Resolve_peers(host, NULL, &procs, &n);
    T_STATUS(rc, PMIX_SUCCESS, "PMIx_Resolve_peers(this node, any namespace)");
    T_DIFF(n >= my_ns_size, "Resolve_peers(this node, any): %zu < %u", n, my_ns_size);
    PMIX_PROC_FREE(procs, n);

    /* A namespace nobody registered (T_SKIP_UNKNOWN=1 skips it: Open MPI
     * 4.1's mpirun never answers these). */
    bool skip_unknown = getenv("T_SKIP_UNKNOWN") != NULL;
    pmix_nspace_t unknown;
    PMIX_LOAD_NSPACE(unknown, "no.such.namespace");
    double t0 = t_now();
    if (!skip_unknown) {
        procs = NULL;
        n = 0;
        rc = PMIx_Resolve_peers(host, unknown, &procs, &n);
        T_DIFF(rc != PMIX_SUCCESS && n == 0, "Resolve_peers(unknown namespace): %s, %zu procs",
               PMIx_Error_string(rc), n);
        t_note("Resolve_peers(unknown namespace) -> %s in %.2f s", PMIx_Error_string(rc),
               t_now() - t0);
    }

    /* A node that is not in the job. */
    procs = NULL;
    n = 0;
    t0 = t_now();
    rc = PMIx_Resolve_peers("node-not-in-this-job", t_me.nspace, &procs, &n);
    T_DIFF(rc != PMIX_SUCCESS || n == 0, "Resolve_peers(foreign node): %s, %zu procs",
            PMIx_Error_string(rc), n);
    t_note("Resolve_peers(node not in job) -> %s, %zu procs in %.2f s", PMIx_Error_string(rc), n,
           t_now() - t0);
    PMIX_PROC_FREE(procs, n);

    /* Nodes of each namespace: exactly this one. */
    for (int a = 0; a < t_napps; a++) {
        char *nodes = NULL;
        rc = PMIx_Resolve_nodes(t_ns[a], &nodes);
        T_STATUS(rc, PMIX_SUCCESS, "PMIx_Resolve_nodes(an app's namespace)");
        T_DIFF(nodes && strcmp(nodes, host) == 0, "Resolve_nodes(%s) = '%s', expected '%s'",
                t_ns[a], nodes ? nodes : "(null)", host);
        free(nodes);
    }
    char *nodes = NULL;
    if (!skip_unknown) {
        rc = PMIx_Resolve_nodes(unknown, &nodes);
        T_DIFF(rc != PMIX_SUCCESS, "Resolve_nodes(unknown namespace) succeeded: '%s'",
               nodes ? nodes : "(null)");
        t_note("Resolve_nodes(unknown namespace) -> %s", PMIx_Error_string(rc));
        free(nodes);
    }

    t_fence_all();
    printf("jobinfo ok %u:%u\n", t_appnum, t_arank);
    t_finalize();
    return 0;
}
