/*
 * Job bootstrap: publish the endpoint string, fence, read the peers'
 * strings, learn locality, prepare a connection to every rank; and failing
 * the connection of a peer that an event reported dead.
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pmix_priv.h"

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* The socket name of a rank: 8 characters at most, unique in the job, so
 * that the on-demand rule (the lower name asks to be called back) has a
 * winner. Decimal while it fits, base 36 beyond. */
static void rank_name(int rank, char buf[9])
{
    if (rank >= 0 && rank <= 9999999) {
        snprintf(buf, 9, "r%07u", (unsigned)rank % 10000000u);
        return;
    }
    static const char digits[] = "0123456789abcdefghijklmnopqrstuvwxyz";
    unsigned v = (unsigned)rank;
    buf[0] = 'z'; /* sorts after every decimal name */
    for (int i = 7; i >= 1; i--) {
        buf[i] = digits[v % 36];
        v /= 36;
    }
    buf[8] = '\0';
}

int pmx_ep_check(const char *ep, int *port, char name[9], const char **why)
{
    const char *colon, *at;
    char *end;
    long p;

    if (!ep || !*ep) {
        *why = "it is empty";
        return -1;
    }
    if (strlen(ep) > 300) {
        *why = "it is too long";
        return -1;
    }
    for (const char *s = ep; *s; s++)
        if ((unsigned char)*s <= ' ' || (unsigned char)*s >= 0x7f) {
            *why = "it holds a blank or a non-printable character";
            return -1;
        }
    at = strchr(ep, '@');
    colon = at ? NULL : strrchr(ep, ':');
    if (at)
        for (const char *s = ep; s < at; s++)
            if (*s == ':') colon = s;
    if (!colon || colon == ep) {
        *why = "there is no HOST:PORT";
        return -1;
    }
    errno = 0;
    p = strtol(colon + 1, &end, 10);
    if (errno || end == colon + 1 || p <= 0 || p > 65535 ||
        (at ? end != at : *end != '\0')) {
        *why = "the port is not a number from 1 to 65535";
        return -1;
    }
    if (!at || !at[1] || strlen(at + 1) > 8) {
        *why = "the socket name after '@' is missing or longer than 8";
        return -1;
    }
    *port = (int)p;
    snprintf(name, 9, "%s", at + 1);
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Failing a peer                                                         */
/* ---------------------------------------------------------------------- */

pscom_connection_t *pmx_peer_get(pscom_pmix_job_t *job, int rank,
                                 signed char *failed)
{
    pthread_mutex_lock(&job->peers_lock);
    pscom_connection_t *con = job->cons ? job->cons[rank] : NULL;
    if (failed) *failed = job->failed[rank];
    pthread_mutex_unlock(&job->peers_lock);
    return con;
}

/* Set rank's connection, unless the socket was closed meanwhile (a
 * callback of the bootstrap's own progress may close it): then false. */
static bool peer_set(pscom_pmix_job_t *job, int rank, pscom_connection_t *con)
{
    pthread_mutex_lock(&job->peers_lock);
    bool open = !job->sock_closed;
    if (open) job->cons[rank] = con;
    pthread_mutex_unlock(&job->peers_lock);
    return open;
}

static bool sock_closed(pscom_pmix_job_t *job)
{
    pthread_mutex_lock(&job->peers_lock);
    bool closed = job->sock_closed;
    pthread_mutex_unlock(&job->peers_lock);
    return closed;
}

/* The bootstrap's answer once its socket was closed under it: its
 * connections are gone (do not touch them, nor the socket). */
static pscom_err_t closed_meanwhile(pscom_pmix_job_t *job)
{
    pmx_log(job, PMX_LOG_ERROR, "the bootstrap socket was closed during the "
            "bootstrap");
    errno = ECONNABORTED;
    return PSCOM_ERR_STDERROR;
}

/* The error a rank's failure mark (job->failed: 1 failed, 2 ended
 * normally) fails its connection with. */
static pscom_err_t mark_err(signed char failed)
{
    return failed == 2 ? PSCOM_ERR_EOF : PSCOM_ERR_IOERROR;
}

struct fail_rank {
    pscom_pmix_job_t *job;
    int rank;
    int code;
    const char *text;
    bool normal_exit;
};

/* Under pscom's lock (pscom_plugin_run_locked), so that no other thread
 * closes the socket between reading the connection and failing it: a new
 * connection of the application could have taken its memory. */
static void fail_rank_locked(void *arg)
{
    const struct fail_rank *f = arg;
    pscom_pmix_job_t *job = f->job;
    int rank = f->rank;
    /* Marked and its connection read in one step: a bootstrap on another
     * thread sets a connection before it looks for marks, so it either
     * finds this mark or set the connection we read. */
    signed char failed = f->normal_exit ? 2 : 1;
    pthread_mutex_lock(&job->peers_lock);
    bool first = !job->failed[rank];
    if (first) job->failed[rank] = failed;
    pscom_connection_t *con = job->cons ? job->cons[rank] : NULL;
    bool closed = job->sock_closed;
    pthread_mutex_unlock(&job->peers_lock);
    if (!first) return;

    /* Said before the connection fails: its con_error may end the
     * program. */
    pmx_log(job, f->normal_exit ? PMX_LOG_INFO : PMX_LOG_ERROR,
            "rank %d %s (PMIx event %s%s%s); %s", rank,
            f->normal_exit ? "terminated" : "failed",
            PMIx_Error_string(f->code), f->text ? ": " : "",
            f->text ? f->text : "",
            con      ? "failing its connection and the requests pending on it"
            : closed ? "its connection went with the closed socket"
                     : "there is no connection to it yet");
    if (con) pscom_fail_connection(con, mark_err(failed));
}

void pmx_fail_peer(pscom_pmix_job_t *job, int rank, int code,
                   const char *text, bool normal_exit)
{
    if (rank < 0 || rank >= job->size || rank == job->rank) return;
    struct fail_rank f = {job, rank, code, text, normal_exit};
    pscom_plugin_run_locked(fail_rank_locked, &f);
}

/* A rank an event marked failed before its connection existed. */
static void fail_marked_locked(void *arg)
{
    const struct fail_rank *f = arg;
    signed char failed;
    pscom_connection_t *con = pmx_peer_get(f->job, f->rank, &failed);
    if (con && failed) pscom_fail_connection(con, mark_err(failed));
}

/* ---------------------------------------------------------------------- */
/* The bootstrap socket's close                                           */
/* ---------------------------------------------------------------------- */

/* pscom_close_socket() frees the socket's connections, before or after
 * pscom_pmix_finalize(). The table must forget them first: an event would
 * fail freed memory, or a new connection of the application that took its
 * place. pscom tells us (pscom_plugin_sock_watch) before it closes them,
 * with its lock held; the peers lock is never held while calling pscom. */
static void on_sock_close(pscom_socket_t *socket, void *arg)
{
    pscom_pmix_job_t *job = (pscom_pmix_job_t *)arg;
    (void)socket;
    pthread_mutex_lock(&job->peers_lock);
    job->sock_closed = true;
    job->sock = NULL;
    if (job->cons)
        for (int r = 0; r < job->size; r++) job->cons[r] = NULL;
    pthread_mutex_unlock(&job->peers_lock);
    pmx_log(job, PMX_LOG_DEBUG, "the bootstrap socket was closed: its "
            "connections are forgotten");
}

static int sock_watch_start(pscom_pmix_job_t *job, pscom_socket_t *sock)
{
    int err = pscom_plugin_sock_watch(sock, on_sock_close, job);
    if (err)
        pmx_log(job, PMX_LOG_ERROR, "cannot watch the bootstrap socket for "
                "its close: %s", strerror(-err));
    return err;
}

void pmx_sock_watch_stop(pscom_pmix_job_t *job)
{
    pscom_plugin_sock_unwatch(on_sock_close, job);
}

/* ---------------------------------------------------------------------- */
/* Bootstrap                                                              */
/* ---------------------------------------------------------------------- */

/* The value of `key` published by `rank`, from the data the fence brought
 * (PMIX_OPTIONAL: no request to the server); hosts that did not bring it
 * get one request with a short timeout, unless an event reported the rank
 * dead. *val_p: release with PMIX_VALUE_RELEASE. */
static pmix_status_t get_peer_value(pscom_pmix_job_t *job, int rank,
                                    const char *key, pmix_value_t **val_p)
{
    pmix_proc_t proc;
    pmix_info_t info;
    bool yes = true;
    int timeout = 5;
    pmix_status_t rc;

    pmx_proc(job, rank, &proc);
    PMIX_INFO_LOAD(&info, PMIX_OPTIONAL, &yes, PMIX_BOOL);
    rc = PMIx_Get(&proc, key, &info, 1, val_p);
    PMIX_INFO_DESTRUCT(&info);
    if (rc != PMIX_ERR_NOT_FOUND || pmx_rank_reported_dead(job, rank)) return rc;
    PMIX_INFO_LOAD(&info, PMIX_TIMEOUT, &timeout, PMIX_INT);
    rc = PMIx_Get(&proc, key, &info, 1, val_p);
    PMIX_INFO_DESTRUCT(&info);
    return rc;
}

/* Read and check every peer's endpoint string into eps[]. Logs every bad
 * rank (the first few of them); 0, -1 (bad ranks), -2 (out of memory) or
 * -3 (a rank without an endpoint was reported dead). */
static int read_endpoints(pscom_pmix_job_t *job, char **eps, uint32_t *nodeids)
{
    int bad = 0, dead = 0;

    for (int r = 0; r < job->size; r++) {
        pmix_value_t *val = NULL;
        const char *why = NULL;
        char name[9], expect[9];
        int port;

        if (r == job->rank) continue;
        pmix_status_t rc = get_peer_value(job, r, PMX_KEY_EP, &val);
        if ((rc != PMIX_SUCCESS || !val) && pmx_rank_reported_dead(job, r)) {
            if (++dead <= 8)
                pmx_log(job, PMX_LOG_ERROR,
                        "rank %d ended before it published its endpoint "
                        "(a PMIx event reported it); the bootstrap fails",
                        r);
            continue;
        }
        if (rc != PMIX_SUCCESS || !val) {
            if (++bad <= 8)
                pmx_log(job, PMX_LOG_ERROR,
                        "rank %d published no endpoint string (PMIx_Get "
                        "\"%s\": %s); did rank %d call pscom_pmix_bootstrap?",
                        r, PMX_KEY_EP, PMIx_Error_string(rc), r);
            continue;
        }
        rank_name(r, expect);
        if (val->type != PMIX_STRING) {
            why = "it is not a string";
        } else if (pmx_ep_check(val->data.string, &port, name, &why) == 0 &&
                   strcmp(name, expect) != 0) {
            why = "the socket name is not the rank's";
        }
        if (why) {
            if (++bad <= 8)
                pmx_log(job, PMX_LOG_ERROR,
                        "rank %d published a malformed endpoint string "
                        "(\"%s\" = \"%.64s\"): %s; expected HOST:PORT@%s as "
                        "pscom_pmix_bootstrap makes it (another pscom "
                        "version?)", r, PMX_KEY_EP,
                        val->type == PMIX_STRING && val->data.string
                            ? val->data.string : "?",
                        why, expect);
            PMIX_VALUE_RELEASE(val);
            continue;
        }
        eps[r] = strdup(val->data.string);
        PMIX_VALUE_RELEASE(val);
        if (!eps[r]) return -2;

        val = NULL;
        rc = get_peer_value(job, r, PMX_KEY_NODEID, &val);
        if (rc == PMIX_SUCCESS && val && val->type == PMIX_UINT32)
            nodeids[r] = val->data.uint32;
        if (val) PMIX_VALUE_RELEASE(val);
    }
    if (bad > 8)
        pmx_log(job, PMX_LOG_ERROR, "... and %d more ranks without a valid "
                "endpoint string", bad - 8);
    if (dead > 8)
        pmx_log(job, PMX_LOG_ERROR, "... and %d more ranks that ended", dead - 8);
    return dead ? -3 : bad ? -1 : 0;
}

/* Which ranks run on this node, according to the host: local[size]. */
static void read_locality(pscom_pmix_job_t *job, signed char *local)
{
    pmix_proc_t *procs = NULL;
    size_t n = 0;
    pmix_status_t rc;

    for (int r = 0; r < job->size; r++) local[r] = -1;
    local[job->rank] = 1;

    rc = PMIx_Resolve_peers(NULL, job->me.nspace, &procs, &n);
    if (rc == PMIX_SUCCESS && procs) {
        for (int r = 0; r < job->size; r++) local[r] = 0;
        for (size_t i = 0; i < n; i++)
            if (procs[i].rank < (pmix_rank_t)job->size &&
                pmx_nspace_is(procs[i].nspace, job->me.nspace))
                local[procs[i].rank] = 1;
        local[job->rank] = 1;
        PMIX_PROC_FREE(procs, n);
        return;
    }

    pmix_proc_t wild;
    pmix_value_t *val = NULL;
    PMIX_LOAD_PROCID(&wild, job->me.nspace, PMIX_RANK_WILDCARD);
    pmix_status_t rc2 = PMIx_Get(&wild, PMIX_LOCAL_PEERS, NULL, 0, &val);
    if (rc2 == PMIX_SUCCESS && val && val->type == PMIX_STRING) {
        for (int r = 0; r < job->size; r++) local[r] = 0;
        const char *s = val->data.string;
        while (*s) {
            char *end;
            long r = strtol(s, &end, 10);
            if (end == s) break;
            if (r >= 0 && r < job->size) local[r] = 1;
            s = *end == ',' ? end + 1 : end;
        }
        local[job->rank] = 1;
    } else {
        pmx_log(job, PMX_LOG_INFO,
                "the PMIx host tells no locality (PMIx_Resolve_peers: %s, "
                "PMIX_LOCAL_PEERS: %s)", PMIx_Error_string(rc),
                PMIx_Error_string(rc2));
    }
    if (val) PMIX_VALUE_RELEASE(val);
}

/* Log where PMIx's locality and the pscom node ids disagree. */
static void check_locality(pscom_pmix_job_t *job, const signed char *local,
                           const uint32_t *nodeids, uint32_t mine)
{
    int mismatch = 0, first = -1;

    for (int r = 0; r < job->size; r++) {
        if (r == job->rank || local[r] < 0 || !nodeids[r]) continue;
        if (local[r] != (nodeids[r] == mine)) {
            if (first < 0) first = r;
            mismatch++;
        }
    }
    if (!mismatch) return;
    pmx_log(job, PMX_LOG_WARN,
            "PMIx and pscom disagree on the node of %d rank(s): PMIx places "
            "rank %d %s this node, its pscom node id is 0x%08x, ours 0x%08x "
            "(shm is offered where the pscom handshake finds the same boot "
            "id and hostname; PSP_NETWORK changes the node id)", mismatch,
            first, local[first] ? "on" : "off", nodeids[first], mine);
}

/* Accepted connections of the ranks below us, found by rank and name. */
static int collect_accepted(pscom_pmix_job_t *job, pscom_socket_t *sock)
{
    int missing = 0;
    char name[9];

    for (pscom_connection_t *c = pscom_get_next_connection(sock, NULL); c;
         c = pscom_get_next_connection(sock, c)) {
        int r = c->remote_con_info.rank;
        if (r < 0 || r >= job->rank || pmx_peer_get(job, r, NULL)) continue;
        if (c->type == PSCOM_CON_TYPE_NONE ||
            c->type == PSCOM_CON_TYPE_ONDEMAND ||
            !(c->state & PSCOM_CON_STATE_RW))
            continue;
        rank_name(r, name);
        if (strncmp(c->remote_con_info.name, name, 8)) continue;
        if (!peer_set(job, r, c)) break;
    }
    for (int r = 0; r < job->rank; r++)
        if (!pmx_peer_get(job, r, NULL)) missing++;
    return missing;
}

static pscom_err_t connect_direct(pscom_pmix_job_t *job, pscom_socket_t *sock,
                                  char **eps)
{
    unsigned timeout_ms = 10000;
    pscom_err_t ret;

    for (int r = job->rank + 1; r < job->size; r++) {
        pscom_connection_t *con = pscom_open_connection(sock);
        if (!con) return PSCOM_ERR_STDERROR;
        ret = pscom_connect(con, eps[r], r, PSCOM_CON_FLAG_DIRECT);
        if (sock_closed(job)) return closed_meanwhile(job);
        if (ret != PSCOM_SUCCESS) {
            pmx_log(job, PMX_LOG_ERROR,
                    "cannot connect to rank %d at %s: %s", r, eps[r],
                    pscom_err_str(ret));
            pscom_close_connection(con);
            return ret;
        }
        if (!peer_set(job, r, con)) return closed_meanwhile(job);
    }

    pscom_env_get_uint(&timeout_ms, "PSP_CONNECT_TIMEOUT");
    uint64_t deadline = now_ms() + 3 * (uint64_t)timeout_ms;
    for (unsigned round = 0;; round++) {
        if (sock_closed(job)) return closed_meanwhile(job);
        if ((round & 63) == 0) {
            int missing = collect_accepted(job, sock);
            if (!missing) break;
            for (int r = 0; r < job->rank; r++) {
                signed char failed;
                if (!pmx_peer_get(job, r, &failed) && failed) {
                    pmx_log(job, PMX_LOG_ERROR,
                            "rank %d failed before it connected to us", r);
                    errno = ECONNABORTED;
                    return PSCOM_ERR_STDERROR;
                }
            }
            if (now_ms() > deadline) {
                int first = 0;
                while (pmx_peer_get(job, first, NULL)) first++;
                pmx_log(job, PMX_LOG_ERROR,
                        "%d rank(s) below us did not connect within %u ms "
                        "(3 * PSP_CONNECT_TIMEOUT), rank %d (%s) first", missing,
                        3 * timeout_ms, first, eps[first]);
                errno = ETIMEDOUT;
                return PSCOM_ERR_STDERROR;
            }
        }
        if (!pscom_test_any()) sched_yield();
    }
    return PSCOM_SUCCESS;
}

static pscom_err_t connect_ondemand(pscom_pmix_job_t *job,
                                    pscom_socket_t *sock, char **eps)
{
    for (int r = 0; r < job->size; r++) {
        if (r == job->rank) continue;
        pscom_connection_t *con = pscom_open_connection(sock);
        if (!con) return PSCOM_ERR_STDERROR;
        pscom_err_t ret = pscom_connect(con, eps[r], r, PSCOM_CON_FLAG_ONDEMAND);
        if (sock_closed(job)) return closed_meanwhile(job);
        if (ret != PSCOM_SUCCESS) {
            pmx_log(job, PMX_LOG_ERROR,
                    "cannot prepare the connection to rank %d at %s: %s", r,
                    eps[r], pscom_err_str(ret));
            pscom_close_connection(con);
            return ret;
        }
        if (!peer_set(job, r, con)) return closed_meanwhile(job);
    }
    return PSCOM_SUCCESS;
}

static pscom_err_t connect_self(pscom_pmix_job_t *job, pscom_socket_t *sock,
                                const char *ep)
{
    if (sock_closed(job)) return closed_meanwhile(job);
    pscom_connection_t *con = pscom_open_connection(sock);
    if (!con) return PSCOM_ERR_STDERROR;
    pscom_err_t ret = pscom_connect(con, ep, job->rank, PSCOM_CON_FLAG_DIRECT);
    if (sock_closed(job)) return closed_meanwhile(job);
    if (ret != PSCOM_SUCCESS) {
        pmx_log(job, PMX_LOG_ERROR, "cannot connect to ourselves at %s: %s",
                ep, pscom_err_str(ret));
        pscom_close_connection(con);
        return ret;
    }
    if (!peer_set(job, job->rank, con)) return closed_meanwhile(job);
    return PSCOM_SUCCESS;
}

static pscom_err_t put_and_fence(pscom_pmix_job_t *job, const char *ep,
                                 uint32_t nodeid)
{
    pmix_value_t v;
    pmix_status_t rc;
    const char *what;

    PMIX_VALUE_LOAD(&v, ep, PMIX_STRING);
    rc = PMIx_Put(PMIX_GLOBAL, PMX_KEY_EP, &v);
    PMIX_VALUE_DESTRUCT(&v);
    what = "PMIx_Put " PMX_KEY_EP;
    if (rc != PMIX_SUCCESS) goto fail;
    PMIX_VALUE_LOAD(&v, &nodeid, PMIX_UINT32);
    rc = PMIx_Put(PMIX_GLOBAL, PMX_KEY_NODEID, &v);
    PMIX_VALUE_DESTRUCT(&v);
    what = "PMIx_Put " PMX_KEY_NODEID;
    if (rc != PMIX_SUCCESS) goto fail;
    what = "PMIx_Commit";
    rc = PMIx_Commit();
    if (rc != PMIX_SUCCESS) goto fail;

    pmix_proc_t wild;
    pmix_info_t info;
    bool yes = true;
    PMIX_LOAD_PROCID(&wild, job->me.nspace, PMIX_RANK_WILDCARD);
    PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &yes, PMIX_BOOL);
    rc = PMIx_Fence(&wild, 1, &info, 1);
    PMIX_INFO_DESTRUCT(&info);
    what = "PMIx_Fence (collecting the endpoint strings)";
    if (rc != PMIX_SUCCESS) goto fail;
    return PSCOM_SUCCESS;

fail:
    pmx_log(job, PMX_LOG_ERROR, "bootstrap: %s failed: %s", what,
            PMIx_Error_string(rc));
    return pmx_err(rc);
}

pscom_err_t pscom_pmix_bootstrap(pscom_pmix_job_t *job, pscom_socket_t *sock,
                                 unsigned flags)
{
    const unsigned both = PSCOM_PMIX_BOOT_ONDEMAND | PSCOM_PMIX_BOOT_DIRECT;
    char name[9], *ep = NULL, **eps = NULL;
    uint32_t *nodeids = NULL;
    signed char *local = NULL;
    uint64_t t0 = now_ms(), t_fence = 0, t_read = 0;
    int ondemand;
    pscom_err_t ret;

    if (!job || !sock || (flags & ~both) || (flags & both) == both)
        return PSCOM_ERR_INVALID;
    pthread_mutex_lock(&job->peers_lock);
    bool again = job->sock || job->sock_closed;
    pthread_mutex_unlock(&job->peers_lock);
    if (again) {
        pmx_log(job, PMX_LOG_ERROR, "pscom_pmix_bootstrap: called twice");
        return PSCOM_ERR_ALREADY;
    }
    if (flags & PSCOM_PMIX_BOOT_ONDEMAND) {
        ondemand = 1;
    } else if (flags & PSCOM_PMIX_BOOT_DIRECT) {
        ondemand = 0;
    } else {
        ondemand = 1;
        pscom_env_get_int(&ondemand, "PSP_ONDEMAND");
    }

    pscom_connection_t **cons = calloc((size_t)job->size, sizeof(*cons));
    pthread_mutex_lock(&job->peers_lock);
    pscom_connection_t **old = job->cons; /* of a call that failed early */
    job->cons = cons;
    pthread_mutex_unlock(&job->peers_lock);
    free(old);
    /* Filled whole, then published: pscom_pmix_is_local reads it from any
     * thread without a lock. */
    local = malloc((size_t)job->size);
    eps = calloc((size_t)job->size, sizeof(*eps));
    nodeids = calloc((size_t)job->size, sizeof(*nodeids));
    if (!job->cons || !local || !eps || !nodeids) {
        errno = ENOMEM;
        ret = PSCOM_ERR_STDERROR;
        goto out_free;
    }

    rank_name(job->rank, name);
    if (sock->local_con_info.rank != PSCOM_RANK_UNDEFINED &&
        sock->local_con_info.rank != job->rank)
        pmx_log(job, PMX_LOG_WARN, "the socket was opened for rank %d; it "
                "becomes rank %d", sock->local_con_info.rank, job->rank);
    pscom_socket_set_name(sock, name);
    sock->local_con_info.rank = job->rank;
    if (sock->listen_portno < 0) {
        ret = pscom_listen(sock, PSCOM_ANYPORT);
        if (ret != PSCOM_SUCCESS) goto out_free;
    }
    ret = pscom_socket_get_ep_str(sock, &ep);
    if (ret != PSCOM_SUCCESS) goto out_free;
    int werr = sock_watch_start(job, sock);
    if (werr) {
        errno = -werr;
        ret = PSCOM_ERR_STDERROR;
        goto out_free;
    }
    pthread_mutex_lock(&job->peers_lock);
    bool closed = job->sock_closed;
    if (!closed) job->sock = sock;
    pthread_mutex_unlock(&job->peers_lock);
    if (closed) {
        ret = closed_meanwhile(job);
        goto out_free;
    }

    if (job->singleton) {
        local[0] = 1;
        __atomic_store_n(&job->local, local, __ATOMIC_RELEASE);
        local = NULL;
        ret = connect_self(job, sock, ep);
        goto out_free;
    }

    ret = put_and_fence(job, ep, (uint32_t)pscom_get_nodeid());
    if (ret != PSCOM_SUCCESS) goto out_free;
    t_fence = now_ms();
    switch (read_endpoints(job, eps, nodeids)) {
    case 0: break;
    case -2:
        errno = ENOMEM;
        ret = PSCOM_ERR_STDERROR;
        goto out_free;
    case -3:
        errno = ECONNABORTED;
        ret = PSCOM_ERR_STDERROR;
        goto out_free;
    default:
        ret = PSCOM_ERR_INVALID;
        goto out_free;
    }
    read_locality(job, local);
    check_locality(job, local, nodeids, (uint32_t)pscom_get_nodeid());
    __atomic_store_n(&job->local, local, __ATOMIC_RELEASE);
    local = NULL;
    t_read = now_ms();

    /* On-demand connections first: pscom progress (which the direct
     * connection to ourselves runs) may already meet the peers' calls, and
     * they must find their connection to adopt. */
    ret = ondemand ? connect_ondemand(job, sock, eps)
                   : connect_direct(job, sock, eps);
    if (ret == PSCOM_SUCCESS) ret = connect_self(job, sock, ep);
    if (ret == PSCOM_SUCCESS) {
        /* Peers reported dead before their connection existed. */
        for (int r = 0; r < job->size; r++) {
            struct fail_rank f = {.job = job, .rank = r};
            if (r != job->rank) pscom_plugin_run_locked(fail_marked_locked, &f);
        }
        pmx_log(job, PMX_LOG_INFO,
                "bootstrap of %d ranks (%s): put+fence %llu ms, endpoints "
                "%llu ms, connections %llu ms", job->size,
                ondemand ? "on demand" : "all at once",
                (unsigned long long)(t_fence - t0),
                (unsigned long long)(t_read - t_fence),
                (unsigned long long)(now_ms() - t_read));
    }

out_free:
    free(local);
    if (ep) pscom_socket_free_ep_str(ep);
    if (eps)
        for (int r = 0; r < job->size; r++) free(eps[r]);
    free(eps);
    free(nodeids);
    return ret;
}
