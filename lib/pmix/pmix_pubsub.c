/*
 * Publish, lookup and unpublish of a socket's endpoint string, so that jobs
 * launched separately can connect to each other.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pmix_priv.h"

static bool service_ok(const pscom_pmix_job_t *job, const char *service,
                       const char *what)
{
    if (service && *service && strlen(service) <= PMIX_MAX_KEYLEN) return true;
    pmx_log(job, PMX_LOG_ERROR, "%s: the service name must have 1 to %d "
            "characters", what, PMIX_MAX_KEYLEN);
    return false;
}

static pmix_persistence_t persistence(pscom_pmix_persist_t p)
{
    switch (p) {
    case PSCOM_PMIX_PERSIST_INDEF: return PMIX_PERSIST_INDEF;
    case PSCOM_PMIX_PERSIST_FIRST_READ: return PMIX_PERSIST_FIRST_READ;
    case PSCOM_PMIX_PERSIST_PROC: return PMIX_PERSIST_PROC;
    case PSCOM_PMIX_PERSIST_APP: return PMIX_PERSIST_APP;
    case PSCOM_PMIX_PERSIST_SESSION: return PMIX_PERSIST_SESSION;
    case PSCOM_PMIX_PERSIST_DEFAULT:
    default: return PMIX_PERSIST_INVALID;
    }
}

pscom_err_t pscom_pmix_publish(pscom_pmix_job_t *job, pscom_socket_t *socket,
                               const char *service, pscom_pmix_range_t range,
                               pscom_pmix_persist_t persist)
{
    pmix_info_t info[3];
    size_t n = 0;
    char *ep = NULL;
    pmix_status_t rc;
    pscom_err_t ret;

    if (!job || range < PSCOM_PMIX_RANGE_DEFAULT ||
        range > PSCOM_PMIX_RANGE_GLOBAL || persist < PSCOM_PMIX_PERSIST_DEFAULT ||
        persist > PSCOM_PMIX_PERSIST_SESSION)
        return PSCOM_ERR_INVALID;
    if (!service_ok(job, service, "pscom_pmix_publish")) return PSCOM_ERR_INVALID;
    if (!socket) socket = pmx_job_sock(job);
    if (!socket) {
        pmx_log(job, PMX_LOG_ERROR, "pscom_pmix_publish \"%s\": no socket "
                "(pass one, or bootstrap first; the bootstrap socket is "
                "closed?)", service);
        return PSCOM_ERR_INVALID;
    }
    if (!pmx_server_usable(job, "pscom_pmix_publish")) return PSCOM_ERR_STDERROR;
    ret = pscom_socket_get_ep_str(socket, &ep);
    if (ret != PSCOM_SUCCESS) return ret;

    PMIX_INFO_LOAD(&info[n++], service, ep, PMIX_STRING);
    if (range != PSCOM_PMIX_RANGE_DEFAULT) {
        pmix_data_range_t r = pmx_range(range);
        PMIX_INFO_LOAD(&info[n++], PMIX_RANGE, &r, PMIX_DATA_RANGE);
    }
    if (persist != PSCOM_PMIX_PERSIST_DEFAULT) {
        pmix_persistence_t p = persistence(persist);
        PMIX_INFO_LOAD(&info[n++], PMIX_PERSISTENCE, &p, PMIX_PERSIST);
    }
    rc = PMIx_Publish(info, n);
    for (size_t i = 0; i < n; i++) PMIX_INFO_DESTRUCT(&info[i]);
    if (rc != PMIX_SUCCESS) {
        pmx_log(job, PMX_LOG_ERROR, "pscom_pmix_publish \"%s\" (%s): "
                "PMIx_Publish: %s", service, ep, PMIx_Error_string(rc));
        pscom_socket_free_ep_str(ep);
        return pmx_err(rc);
    }
    pmx_log(job, PMX_LOG_INFO, "published \"%s\" = %s", service, ep);
    pscom_socket_free_ep_str(ep);
    return PSCOM_SUCCESS;
}

/* A lookup under way: PMIx_Lookup_nb's callback fills it on PMIx's thread
 * while pscom_pmix_lookup waits with pscom progressing. */
struct lookup_wait {
    struct pmx_op op;
    pmix_value_t value; /* a copy: PMIx frees its data after the callback */
    pmix_proc_t proc;   /* who published it */
};

static void lookup_done(pmix_status_t status, pmix_pdata_t data[],
                        size_t ndata, void *cbdata)
{
    struct lookup_wait *lw = cbdata;
    if (status == PMIX_SUCCESS && ndata < 1) status = PMIX_ERR_NOT_FOUND;
    if (status == PMIX_SUCCESS) {
        lw->proc = data[0].proc;
        status = PMIx_Value_xfer(&lw->value, &data[0].value);
    }
    pmx_op_finish(&lw->op, status);
}

pscom_err_t pscom_pmix_lookup(pscom_pmix_job_t *job, const char *service,
                              pscom_pmix_range_t range, int wait,
                              unsigned timeout_s, char **ep_p)
{
    pmix_info_t info[3];
    size_t n = 0;
    pmix_status_t rc;
    const char *why;
    char name[9];
    int port;

    if (!job || !ep_p || range < PSCOM_PMIX_RANGE_DEFAULT ||
        range > PSCOM_PMIX_RANGE_GLOBAL)
        return PSCOM_ERR_INVALID;
    if (!service_ok(job, service, "pscom_pmix_lookup")) return PSCOM_ERR_INVALID;
    if (!pmx_server_usable(job, "pscom_pmix_lookup")) return PSCOM_ERR_STDERROR;

    if (range != PSCOM_PMIX_RANGE_DEFAULT) {
        pmix_data_range_t r = pmx_range(range);
        PMIX_INFO_LOAD(&info[n++], PMIX_RANGE, &r, PMIX_DATA_RANGE);
    }
    if (wait) {
        int all = 0; /* wait for every key asked for */
        PMIX_INFO_LOAD(&info[n++], PMIX_WAIT, &all, PMIX_INT);
    }
    if (timeout_s) {
        int t = timeout_s > 0x7fffffff ? 0x7fffffff : (int)timeout_s;
        PMIX_INFO_LOAD(&info[n++], PMIX_TIMEOUT, &t, PMIX_INT);
    }
    /* pscom progresses during the lookup, as during the barrier: a peer
     * that publishes only once it has what this process still owes it
     * (a send its transport moves only from our progress) must get it. */
    struct lookup_wait lw = {.op.job = job};
    PMIX_VALUE_CONSTRUCT(&lw.value);
    char *keys[2] = {(char *)service, NULL};
    rc = PMIx_Lookup_nb(keys, n ? info : NULL, n, lookup_done, &lw);
    if (rc == PMIX_SUCCESS) rc = pmx_op_wait(&lw.op);
    for (size_t i = 0; i < n; i++) PMIX_INFO_DESTRUCT(&info[i]);
    if (rc != PMIX_SUCCESS) {
        pmx_log(job, rc == PMIX_ERR_NOT_FOUND && !wait ? PMX_LOG_INFO
                                                       : PMX_LOG_ERROR,
                "pscom_pmix_lookup \"%s\"%s: PMIx_Lookup_nb: %s", service,
                wait ? " (waiting)" : "", PMIx_Error_string(rc));
        PMIX_VALUE_DESTRUCT(&lw.value);
        return pmx_err(rc);
    }
    if (lw.value.type != PMIX_STRING || !lw.value.data.string ||
        pmx_ep_check(lw.value.data.string, &port, name, &why)) {
        pmx_log(job, PMX_LOG_ERROR,
                "pscom_pmix_lookup \"%s\": %s:%u published something that is "
                "no endpoint string (%s)", service, lw.proc.nspace,
                lw.proc.rank,
                lw.value.type != PMIX_STRING ? "not a string" : why);
        PMIX_VALUE_DESTRUCT(&lw.value);
        return PSCOM_ERR_INVALID;
    }
    *ep_p = strdup(lw.value.data.string);
    pmx_log(job, PMX_LOG_INFO, "looked up \"%s\" = %s (published by %s:%u)",
            service, lw.value.data.string, lw.proc.nspace, lw.proc.rank);
    PMIX_VALUE_DESTRUCT(&lw.value);
    if (!*ep_p) {
        errno = ENOMEM;
        return PSCOM_ERR_STDERROR;
    }
    return PSCOM_SUCCESS;
}

pscom_err_t pscom_pmix_unpublish(pscom_pmix_job_t *job, const char *service,
                                 pscom_pmix_range_t range)
{
    pmix_info_t info;
    size_t n = 0;
    char *keys[2];
    pmix_status_t rc;

    if (!job || range < PSCOM_PMIX_RANGE_DEFAULT || range > PSCOM_PMIX_RANGE_GLOBAL)
        return PSCOM_ERR_INVALID;
    if (!service_ok(job, service, "pscom_pmix_unpublish")) return PSCOM_ERR_INVALID;
    if (!pmx_server_usable(job, "pscom_pmix_unpublish")) return PSCOM_ERR_STDERROR;

    if (range != PSCOM_PMIX_RANGE_DEFAULT) {
        pmix_data_range_t r = pmx_range(range);
        PMIX_INFO_LOAD(&info, PMIX_RANGE, &r, PMIX_DATA_RANGE);
        n = 1;
    }
    keys[0] = (char *)service;
    keys[1] = NULL;
    rc = PMIx_Unpublish(keys, n ? &info : NULL, n);
    if (n) PMIX_INFO_DESTRUCT(&info);
    if (rc != PMIX_SUCCESS) {
        pmx_log(job, PMX_LOG_ERROR, "pscom_pmix_unpublish \"%s\": "
                "PMIx_Unpublish: %s", service, PMIx_Error_string(rc));
        return pmx_err(rc);
    }
    return PSCOM_SUCCESS;
}
