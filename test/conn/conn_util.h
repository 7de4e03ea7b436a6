/*
 * Small helpers shared by the connection-management tests (header only).
 */
#ifndef CONN_UTIL_H
#define CONN_UTIL_H

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <unistd.h>

#include "itest.h"

/* Split an endpoint string "HOST:PORT@NAME" (or "HOST:PORT") into its host
 * and port; fails the test when it does not parse. */
static inline void conn_parse_ep(const char *ep, char *host, size_t hlen,
                                 int *port)
{
    const char *colon = strrchr(ep, ':');
    char *end;
    long p;

    ITEST_ASSERT(colon && colon != ep && (size_t)(colon - ep) < hlen,
                 "endpoint \"%s\" has no HOST:PORT", ep);
    memcpy(host, ep, (size_t)(colon - ep));
    host[colon - ep] = '\0';
    p = strtol(colon + 1, &end, 10);
    ITEST_ASSERT(end != colon + 1 && p > 0 && p < 65536 &&
                     (*end == '\0' || *end == '@'),
                 "endpoint \"%s\" has no valid port", ep);
    *port = (int)p;
}

/* Open file descriptors of process `pid` (0: this one), or -1. */
static inline int conn_count_fds(pid_t pid)
{
    char path[64];
    DIR *d;
    struct dirent *e;
    int n = 0;

    if (pid)
        snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    else
        snprintf(path, sizeof(path), "/proc/self/fd");
    d = opendir(path);
    if (!d) return -1;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] != '.') n++;
    }
    closedir(d);
    return pid ? n : n - 1; /* opendir's own descriptor */
}

/* Set the soft and hard RLIMIT_NOFILE of this process to `limit`. */
static inline void conn_set_nofile(rlim_t limit)
{
    struct rlimit rl = {.rlim_cur = limit, .rlim_max = limit};
    if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
        ITEST_FAIL("setrlimit(RLIMIT_NOFILE, %llu): %s",
                   (unsigned long long)limit, strerror(errno));
}

/* Raise the soft RLIMIT_NOFILE to the hard one; the resulting soft limit. */
static inline rlim_t conn_raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        ITEST_FAIL("getrlimit(RLIMIT_NOFILE): %s", strerror(errno));
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
            ITEST_FAIL("raising RLIMIT_NOFILE to %llu: %s",
                       (unsigned long long)rl.rlim_max, strerror(errno));
    }
    return rl.rlim_cur;
}

/* A path for a log file of this run (the file exists, empty). The name is
 * in static storage (forked children inherit it, nothing to free). */
static inline char *conn_tmp_log(const char *what)
{
    static char path[4096];
    const char *dir = getenv("TMPDIR");
    int fd;

    if (!dir || !*dir) dir = "/tmp";
    if (snprintf(path, sizeof(path), "%s/pscom-conn-%s-XXXXXX", dir, what) >=
        (int)sizeof(path))
        ITEST_FAIL("TMPDIR is too long");
    fd = mkstemp(path);
    if (fd < 0) ITEST_FAIL("mkstemp(%s): %s", path, strerror(errno));
    close(fd);
    return path;
}

/* Lines of file `path` that contain `needle`; the first one is copied to
 * first (when not NULL). -1 when the file cannot be read. */
static inline int conn_grep_count(const char *path, const char *needle,
                                  char *first, size_t first_len)
{
    FILE *f = fopen(path, "r");
    char line[2048];
    int n = 0;

    if (!f) return -1;
    if (first && first_len) first[0] = '\0';
    while (fgets(line, sizeof(line), f)) {
        if (!strstr(line, needle)) continue;
        if (n == 0 && first && first_len) {
            size_t l = strcspn(line, "\n");
            if (l >= first_len) l = first_len - 1;
            memcpy(first, line, l);
            first[l] = '\0';
        }
        n++;
    }
    fclose(f);
    return n;
}

/* Drive progress until the control link has a message (or EOF). */
static inline void conn_progress_until_link(itest_link_t *link)
{
    while (!itest_link_ready(link, 0)) itest_progress_once();
}

#endif
