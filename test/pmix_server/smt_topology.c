/*
 * pscom_run on a host whose cores have two hardware threads each, on any
 * host: linked into pscom_run's objects as pscom_run_smt, with
 * -Wl,--wrap=fopen, so that pscom_run reads the sysfs list of CPU c's
 * siblings as "2k-2k+1" (k = c / 2): CPUs 0 and 1 are one core, 2 and 3
 * the next, and so on. Every other file is opened as it is. Only
 * pscom_run's own calls see this (its children bind themselves between
 * fork and exec, then run other programs). run_case.py (bind_to_core)
 * checks that --bind-to core then binds each process to both threads of
 * its core, and takes each core once.
 */
#include <stdio.h>
#include <string.h>

FILE *__wrap_fopen(const char *path, const char *mode);
FILE *__real_fopen(const char *path, const char *mode);
FILE *__wrap_fopen64(const char *path, const char *mode);
FILE *__real_fopen64(const char *path, const char *mode);

/* The fake list for a sysfs siblings path, or NULL for another file. */
static FILE *siblings(const char *path)
{
    static char list[32]; /* pscom_run reads one list at a time */
    int c, end = 0;
    if (sscanf(path, "/sys/devices/system/cpu/cpu%d/topology/thread_siblings_list%n",
               &c, &end) != 1 || path[end] != 0 || c < 0)
        return NULL;
    int n = snprintf(list, sizeof(list), "%d-%d\n", c & ~1, c | 1);
    return fmemopen(list, (size_t)n, "r");
}

FILE *__wrap_fopen(const char *path, const char *mode)
{
    FILE *f = siblings(path);
    return f ? f : __real_fopen(path, mode);
}

FILE *__wrap_fopen64(const char *path, const char *mode)
{
    FILE *f = siblings(path);
    return f ? f : __real_fopen64(path, mode);
}
