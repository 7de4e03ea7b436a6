/*
 * pscom_run: the command line.
 *
 *   pscom_run [options] [-n N] prog [args...] [: [-n N] prog [args...]]...
 *
 * Options come before the first application.  Each application ("app")
 * after a ':' gets its own PMIx namespace.  Pure parsing, no side effects,
 * so it is unit-tested.
 */
#ifndef PSR_CLI_H
#define PSR_CLI_H

#include <sched.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct psr_app_spec {
    int np;             /* processes of this app, >= 1 */
    char **argv;        /* argc entries (not NULL-terminated), in the caller's argv */
    int argc;
} psr_app_spec_t;

typedef struct psr_opts {
    bool tag_output;        /* --tag-output */
    bool keep_going;        /* --keep-going */
    int bind;               /* --bind-to: PSR_BIND_NONE, _CORE, _HWTHREAD */
    int verbose;            /* -v, repeatable */
    size_t event_cache;     /* --event-cache N, default 512 */
    double grace;           /* --grace S: seconds before SIGTERM, then SIGKILL */
    double timeout;         /* --timeout S: 0 = none */
    bool help;              /* -h/--help: print usage, run nothing */
    bool version;           /* --version */
    psr_app_spec_t *apps;   /* napps entries, malloc'ed; free with psr_opts_free */
    int napps;
} psr_opts_t;

enum { PSR_BIND_NONE, PSR_BIND_CORE, PSR_BIND_HWTHREAD };

#define PSR_DEFAULT_EVENT_CACHE 512
#define PSR_DEFAULT_GRACE 1.0

/*
 * Parse argv.  On success returns 0 and fills *opts (free with
 * psr_opts_free).  On error returns -1 and writes a one-line message for
 * the user into err (size errlen).
 */
int psr_cli_parse(int argc, char **argv, psr_opts_t *opts, char *err, size_t errlen);

void psr_opts_free(psr_opts_t *opts);

/* A set of CPUs of any count (CPU_ALLOC): hosts may have more than the
 * CPU_SETSIZE (1024) of a cpu_set_t. */
typedef struct {
    cpu_set_t *set;
    size_t size; /* bytes: for the CPU_*_S macros and sched_setaffinity */
    int ncpus;   /* CPUs 0..ncpus-1 fit */
} psr_cpuset_t;

/* An empty set that holds CPUs 0..ncpus-1, the caller's to release with
 * psr_cpuset_free (also after a failed init: it leaves no memory): 0, or
 * -1 without memory. */
int psr_cpuset_init(psr_cpuset_t *s, int ncpus);
void psr_cpuset_free(psr_cpuset_t *s);
/* A new set into dst (whatever it held is not freed) equal to src, the
 * caller's to release: 0, or -1 without memory. */
int psr_cpuset_copy(psr_cpuset_t *dst, const psr_cpuset_t *src);
bool psr_cpuset_isset(const psr_cpuset_t *s, int cpu);

/* The CPUs this process may run on, in a set as large as the kernel
 * needs (it refuses a mask shorter than its CPU count; at most
 * PSR_CPUSET_MAX CPUs): 0, or -1 with errno. */
int psr_cpuset_affinity(psr_cpuset_t *s);

/* Parse a Linux CPU list ("0-3,8,10-11", as in sysfs) into set (cleared
 * first): 0, or -1 when it is malformed or names a CPU the set cannot
 * hold. */
int psr_cpulist_parse(const char *s, psr_cpuset_t *set);

/* The CPUs of set as such a list, ranges joined ("0-3,8,10-11"; "" for
 * none), into buf of len bytes: 0, or -1 when it does not fit (buf then
 * holds the entries that fit whole). Every list fits in
 * PSR_CPULIST_MAX(ncpus) bytes. */
int psr_cpulist_format(const psr_cpuset_t *set, char *buf, size_t len);
/* The costliest list per CPU alternates pairs and gaps ("0-1,3-4,..."):
 * 2d+2 bytes per 3 CPUs with d digits (single CPUs: d+1 per 2). CPU
 * numbers below PSR_CPUSET_MAX have at most 7 digits: 16 bytes per 3 CPUs,
 * well below 8 per CPU; the 1 is the terminating NUL. */
#define PSR_CPULIST_MAX(ncpus) ((size_t)(ncpus) * 8 + 1)
#define PSR_CPUSET_MAX (1 << 22)

/* The head of that list for a log line, into buf of len (at least 5)
 * bytes: the whole list, or the entries that fit followed by ",...". */
void psr_cpulist_head(const psr_cpuset_t *set, char *buf, size_t len);

/* The usage text, for --help and errors. */
extern const char psr_usage[];

#endif /* PSR_CLI_H */
