/*
 * Does a UCX_TLS value let UCX open its shared-memory transports (posix,
 * sysv)? Shared by the plugin (which then sets MM_ERROR_HANDLING) and
 * bench/ucx_paired (which does as the plugin does).
 */
#ifndef PSCOM_UCX_TLS_H_
#define PSCOM_UCX_TLS_H_

#include <stdio.h>
#include <string.h>

/* 1 when tls (UCX_TLS, or NULL when unset) is unset or empty, names "all",
 * "sm", "shm", "mm", "posix" or "sysv", or excludes (^...) none of the
 * shared-memory names; else 0. */
static inline int ucx_tls_wants_shm(const char *tls)
{
    if (!tls || !*tls) return 1;
    int negate = tls[0] == '^';
    static const char *const names[] = {"all", "sm", "shm", "mm", "posix",
                                        "sysv"};
    char list[256];
    snprintf(list, sizeof(list), "%s", tls + negate);
    int named = 0;
    char *save = NULL;
    for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        t[strcspn(t, ":")] = 0; /* "posix:aux" */
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
            if (!strcmp(t, names[i]) && (!negate || i > 0)) named = 1;
    }
    return negate ? !named : named;
}

#endif /* PSCOM_UCX_TLS_H_ */
