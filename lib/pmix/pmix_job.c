/*
 * The job: PMIx_Init and singleton detection, accessors, barrier, finalize;
 * logging and the mapping of PMIx statuses to pscom errors.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pmix_priv.h"

/* The constants of pscom_pmix.h are PMIx's own values. */
_Static_assert(PSCOM_PMIX_PROC_TERMINATED == PMIX_EVENT_PROC_TERMINATED, "");
_Static_assert(PSCOM_PMIX_PROC_ABORTED_BY_SIG == PMIX_ERR_PROC_ABORTED_BY_SIG, "");
_Static_assert(PSCOM_PMIX_PROC_REQUESTED_ABORT == PMIX_ERR_PROC_REQUESTED_ABORT, "");
_Static_assert(PSCOM_PMIX_LOST_CONNECTION == PMIX_ERR_LOST_CONNECTION, "");
_Static_assert(PSCOM_PMIX_NODE_DOWN == PMIX_EVENT_NODE_DOWN, "");
_Static_assert(PSCOM_PMIX_EXTERNAL_BASE == PMIX_EXTERNAL_ERR_BASE, "");
_Static_assert(PSCOM_PMIX_EVENT_CONTINUE == PMIX_SUCCESS, "");
_Static_assert(PSCOM_PMIX_EVENT_NO_ACTION_TAKEN == PMIX_EVENT_NO_ACTION_TAKEN, "");
_Static_assert(PSCOM_PMIX_EVENT_PARTIAL_ACTION_TAKEN ==
                   PMIX_EVENT_PARTIAL_ACTION_TAKEN, "");
_Static_assert(PSCOM_PMIX_EVENT_ACTION_DEFERRED == PMIX_EVENT_ACTION_DEFERRED, "");
_Static_assert(PSCOM_PMIX_EVENT_ACTION_COMPLETE == PMIX_EVENT_ACTION_COMPLETE, "");

/* The one job of this process. */
static pscom_pmix_job_t *the_job;
static pthread_mutex_t job_lock = PTHREAD_MUTEX_INITIALIZER;

void pmx_log(const pscom_pmix_job_t *job, int level, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;

    if (level > pscom_plugin_log_level()) return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (job)
        pscom_plugin_log(level, "pmix %s rank %d: %s", job->me.nspace,
                         job->rank, msg);
    else
        pscom_plugin_log(level, "pmix: %s", msg);
}

pscom_err_t pmx_err(pmix_status_t rc)
{
    switch (rc) {
    case PMIX_SUCCESS: return PSCOM_SUCCESS;
    case PMIX_ERR_BAD_PARAM: return PSCOM_ERR_INVALID;
    case PMIX_ERR_NOT_FOUND: errno = ENOENT; break;
    case PMIX_ERR_TIMEOUT: errno = ETIMEDOUT; break;
    case PMIX_ERR_DUPLICATE_KEY:
    case PMIX_ERR_EXISTS: errno = EEXIST; break;
    case PMIX_ERR_NO_PERMISSIONS: errno = EACCES; break;
    case PMIX_ERR_NOT_SUPPORTED:
    case PMIX_ERR_PARAM_VALUE_NOT_SUPPORTED: errno = ENOTSUP; break;
    case PMIX_ERR_UNREACH:
    case PMIX_ERR_LOST_CONNECTION:
    case PMIX_ERR_COMM_FAILURE:
    case PMIX_ERR_INIT: errno = ENOTCONN; break;
    case PMIX_ERR_NOMEM:
    case PMIX_ERR_OUT_OF_RESOURCE: errno = ENOMEM; break;
    default: errno = EIO; break;
    }
    return PSCOM_ERR_STDERROR;
}

bool pmx_nspace_is(const char *a, const char *b)
{
    return a && b && a[0] && b[0] && strncmp(a, b, PMIX_MAX_NSLEN) == 0;
}

void pmx_proc(const pscom_pmix_job_t *job, int rank, pmix_proc_t *p)
{
    PMIX_LOAD_PROCID(p, job->me.nspace, (pmix_rank_t)rank);
}

bool pmx_server_usable(const pscom_pmix_job_t *job, const char *what)
{
    if (job->singleton) {
        pmx_log(job, PMX_LOG_ERROR,
                "%s needs a PMIx server; this process runs as a singleton "
                "(start it with a PMIx launcher: pscom_run, mpirun, srun "
                "--mpi=pmix)", what);
        errno = ENOTCONN;
        return false;
    }
    if (pmx_server_lost(job)) {
        pmx_log(job, PMX_LOG_ERROR,
                "%s: the connection to the PMIx server is lost", what);
        errno = ENOTCONN;
        return false;
    }
    return true;
}

pmix_data_range_t pmx_range(pscom_pmix_range_t range)
{
    switch (range) {
    case PSCOM_PMIX_RANGE_PROC_LOCAL: return PMIX_RANGE_PROC_LOCAL;
    case PSCOM_PMIX_RANGE_LOCAL: return PMIX_RANGE_LOCAL;
    case PSCOM_PMIX_RANGE_NAMESPACE: return PMIX_RANGE_NAMESPACE;
    case PSCOM_PMIX_RANGE_SESSION: return PMIX_RANGE_SESSION;
    case PSCOM_PMIX_RANGE_GLOBAL: return PMIX_RANGE_GLOBAL;
    case PSCOM_PMIX_RANGE_DEFAULT:
    default: return PMIX_RANGE_UNDEF;
    }
}

/* Was this process started by a PMIx launcher? */
static bool pmix_env_present(void)
{
    extern char **environ;

    if (getenv("PMIX_NAMESPACE") || getenv("PMIX_RANK")) return true;
    for (char **e = environ; e && *e; e++)
        if (!strncmp(*e, "PMIX_SERVER_URI", 15)) return true;
    return false;
}

/* The server this process connected to: PMIx takes it from the first of
 * these variables that is set, "NSPACE.RANK;URI" (the rank after the last
 * dot before the ';'). */
static bool server_from_env(pmix_proc_t *server)
{
    static const char *const vars[] = {"PMIX_SERVER_URI41", "PMIX_SERVER_URI4",
                                       "PMIX_SERVER_URI3", "PMIX_SERVER_URI21",
                                       "PMIX_SERVER_URI2"};
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        const char *uri = getenv(vars[i]);
        if (!uri) continue;
        const char *semi = strchr(uri, ';');
        const char *dot = NULL;
        for (const char *c = uri; semi && c < semi; c++)
            if (*c == '.') dot = c;
        if (!dot || dot == uri || (size_t)(dot - uri) > PMIX_MAX_NSLEN)
            return false;
        char *end;
        errno = 0;
        unsigned long rank = strtoul(dot + 1, &end, 10);
        if (errno || end != semi || end == dot + 1) return false;
        memset(server, 0, sizeof(*server));
        memcpy(server->nspace, uri, (size_t)(dot - uri));
        server->rank = (pmix_rank_t)rank;
        return true;
    }
    return false;
}

static int get_u32(const pscom_pmix_job_t *job, const pmix_proc_t *proc,
                   const char *key, uint32_t *out)
{
    pmix_value_t *val = NULL;
    pmix_status_t rc = PMIx_Get(proc, key, NULL, 0, &val);
    if (rc != PMIX_SUCCESS || !val) return -1;
    int ret = 0;
    switch (val->type) {
    case PMIX_UINT32: *out = val->data.uint32; break;
    case PMIX_UINT16: *out = val->data.uint16; break;
    case PMIX_INT: *out = (uint32_t)val->data.integer; break;
    case PMIX_UINT: *out = val->data.uint; break;
    case PMIX_SIZE: *out = (uint32_t)val->data.size; break;
    default: ret = -1; break;
    }
    PMIX_VALUE_RELEASE(val);
    (void)job;
    return ret;
}

void pmx_job_free(pscom_pmix_job_t *job)
{
    for (size_t i = 0; i < job->nhdlrs; i++) {
        free(job->hdlrs[i]->codes);
        free(job->hdlrs[i]);
    }
    free(job->hdlrs);
    free(job->closing);
    free(job->cons);
    free(job->local);
    free(job->failed);
    pthread_mutex_destroy(&job->evq_lock);
    pthread_mutex_destroy(&job->dispatch_lock);
    pthread_mutex_destroy(&job->peers_lock);
    pthread_mutex_destroy(&job->hdlr_lock);
    free(job);
}

pscom_err_t pscom_pmix_init(pscom_pmix_job_t **job_p)
{
    pscom_err_t ret;

    if (!job_p) return PSCOM_ERR_INVALID;
    ret = pscom_init(PSCOM_VERSION);
    if (ret != PSCOM_SUCCESS) return ret;

    pthread_mutex_lock(&job_lock);
    if (the_job) {
        pthread_mutex_unlock(&job_lock);
        pmx_log(the_job, PMX_LOG_ERROR,
                "pscom_pmix_init: this process has a job already; call "
                "pscom_pmix_finalize first");
        return PSCOM_ERR_ALREADY;
    }
    pscom_pmix_job_t *job = calloc(1, sizeof(*job));
    if (!job) {
        pthread_mutex_unlock(&job_lock);
        errno = ENOMEM;
        return PSCOM_ERR_STDERROR;
    }
    pthread_mutex_init(&job->evq_lock, NULL);
    pthread_mutex_init(&job->dispatch_lock, NULL);
    pthread_mutex_init(&job->peers_lock, NULL);
    pthread_mutex_init(&job->hdlr_lock, NULL);
    job->pipe_rd = job->pipe_wr = -1;
    job->next_id = 1;

    pmix_status_t rc = PMIx_Init(&job->me, NULL, 0);
    if (rc != PMIX_SUCCESS) {
        if (pmix_env_present()) {
            pmx_log(NULL, PMX_LOG_ERROR,
                    "PMIx_Init failed: %s, although the environment names a "
                    "PMIx server (PMIX_NAMESPACE=%s, PMIX_RANK=%s); is the "
                    "launcher still running, and is its PMIx version "
                    "compatible with this one (%s)?",
                    PMIx_Error_string(rc),
                    getenv("PMIX_NAMESPACE") ? getenv("PMIX_NAMESPACE") : "unset",
                    getenv("PMIX_RANK") ? getenv("PMIX_RANK") : "unset",
                    PMIx_Get_version());
            pmx_job_free(job);
            pthread_mutex_unlock(&job_lock);
            errno = ENOTCONN;
            return PSCOM_ERR_STDERROR;
        }
        job->singleton = true;
        job->rank = 0;
        job->size = 1;
        PMIX_LOAD_PROCID(&job->me, "singleton", 0);
        pmx_log(NULL, PMX_LOG_ERROR,
                "no PMIx server (PMIx_Init: %s): running as a singleton, "
                "rank 0 of a 1-process job", PMIx_Error_string(rc));
    } else {
        pmix_proc_t wild;
        uint32_t size = 0;

        PMIX_LOAD_PROCID(&wild, job->me.nspace, PMIX_RANK_WILDCARD);
        if (get_u32(job, &wild, PMIX_JOB_SIZE, &size) || size == 0) {
            pmx_log(NULL, PMX_LOG_ERROR,
                    "the PMIx host does not tell the job size (PMIX_JOB_SIZE "
                    "of namespace %s)", job->me.nspace);
            PMIx_Finalize(NULL, 0);
            pmx_job_free(job);
            pthread_mutex_unlock(&job_lock);
            errno = ENOTSUP;
            return PSCOM_ERR_STDERROR;
        }
        job->rank = (int)job->me.rank;
        job->size = (int)size;
        if (job->rank >= job->size) {
            pmx_log(NULL, PMX_LOG_ERROR, "PMIx says rank %d of %d ranks",
                    job->rank, job->size);
            PMIx_Finalize(NULL, 0);
            pmx_job_free(job);
            pthread_mutex_unlock(&job_lock);
            errno = EINVAL;
            return PSCOM_ERR_STDERROR;
        }
        job->server_known = server_from_env(&job->server);
        pmx_log(job, PMX_LOG_INFO, "PMIx %s, %d ranks, server %s:%d",
                PMIx_Get_version(), job->size,
                job->server_known ? job->server.nspace : "unknown",
                job->server_known ? (int)job->server.rank : -1);
    }

    job->failed = calloc((size_t)job->size, sizeof(*job->failed));
    if (!job->failed || pmx_events_start(job)) {
        if (!job->singleton) PMIx_Finalize(NULL, 0);
        pmx_job_free(job);
        pthread_mutex_unlock(&job_lock);
        return PSCOM_ERR_STDERROR;
    }
    the_job = job;
    pthread_mutex_unlock(&job_lock);
    *job_p = job;
    return PSCOM_SUCCESS;
}

static void fence_done(pmix_status_t status, void *cbdata)
{
    pmx_op_finish(cbdata, status);
}

pscom_err_t pscom_pmix_barrier(pscom_pmix_job_t *job)
{
    if (!job) return PSCOM_ERR_INVALID;
    if (job->singleton) return PSCOM_SUCCESS;
    if (!pmx_server_usable(job, "pscom_pmix_barrier")) return PSCOM_ERR_STDERROR;
    pmix_proc_t wild;
    PMIX_LOAD_PROCID(&wild, job->me.nspace, PMIX_RANK_WILDCARD);
    /* pscom progresses while the fence is under way: what this process
     * still owes its peers must move (a rendezvous answer, a send the
     * transport took but has not put out yet — UCX's shared memory sends
     * only from the sender's progress), or a peer waiting for it never
     * reaches the fence. The fence's callback wakes a sleeping wait
     * through the event pipe. */
    struct pmx_op op = {.job = job};
    const char *what = "PMIx_Fence_nb";
    pmix_status_t rc = PMIx_Fence_nb(&wild, 1, NULL, 0, fence_done, &op);
    if (rc == PMIX_SUCCESS) {
        rc = pmx_op_wait(&op);
        what = "the fence";
    } else if (rc == PMIX_OPERATION_SUCCEEDED) {
        rc = PMIX_SUCCESS;
    }
    if (rc != PMIX_SUCCESS) {
        pmx_log(job, PMX_LOG_ERROR, "pscom_pmix_barrier: %s: %s", what,
                PMIx_Error_string(rc));
        return pmx_err(rc);
    }
    return PSCOM_SUCCESS;
}

void pscom_pmix_finalize(pscom_pmix_job_t *job)
{
    if (!job) return;
    pthread_mutex_lock(&job_lock);
    if (job != the_job) {
        pthread_mutex_unlock(&job_lock);
        return;
    }
    /* From a handler, the dispatcher still holds the job: it frees it
     * when the handler returned. */
    bool from_handler = pmx_dispatching(job);
    pmx_events_stop(job);
    pmx_sock_watch_stop(job);
    if (!job->singleton) {
        pmix_status_t rc = PMIx_Finalize(NULL, 0);
        if (rc != PMIX_SUCCESS && !pmx_server_lost(job))
            pmx_log(job, PMX_LOG_WARN, "PMIx_Finalize: %s",
                    PMIx_Error_string(rc));
    }
    the_job = NULL;
    pthread_mutex_unlock(&job_lock);
    if (from_handler)
        job->finalized = true;
    else
        pmx_job_free(job);
}

int pscom_pmix_rank(const pscom_pmix_job_t *job)
{
    return job ? job->rank : -1;
}

int pscom_pmix_size(const pscom_pmix_job_t *job)
{
    return job ? job->size : 0;
}

const char *pscom_pmix_nspace(const pscom_pmix_job_t *job)
{
    return job ? job->me.nspace : NULL;
}

int pscom_pmix_is_singleton(const pscom_pmix_job_t *job)
{
    return job && job->singleton;
}

pscom_socket_t *pmx_job_sock(pscom_pmix_job_t *job)
{
    pthread_mutex_lock(&job->peers_lock);
    pscom_socket_t *sock = job->sock;
    pthread_mutex_unlock(&job->peers_lock);
    return sock;
}

pscom_socket_t *pscom_pmix_socket(const pscom_pmix_job_t *job)
{
    return job ? pmx_job_sock((pscom_pmix_job_t *)job) : NULL;
}

pscom_connection_t *pscom_pmix_connection(const pscom_pmix_job_t *job,
                                          int rank)
{
    if (!job || rank < 0 || rank >= job->size) return NULL;
    return pmx_peer_get((pscom_pmix_job_t *)job, rank, NULL);
}

int pscom_pmix_is_local(const pscom_pmix_job_t *job, int rank)
{
    if (!job || rank < 0 || rank >= job->size) return -1;
    const signed char *local = __atomic_load_n(&job->local, __ATOMIC_ACQUIRE);
    return local ? local[rank] : -1;
}

const char *pscom_pmix_event_str(int code)
{
    return PMIx_Error_string((pmix_status_t)code);
}
