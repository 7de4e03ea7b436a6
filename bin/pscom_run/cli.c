/*
 * pscom_run: command line parsing.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

const char psr_usage[] =
    "usage: pscom_run [options] [-n N] prog [args...] [: [-n N] prog [args...]]...\n"
    "\n"
    "Starts N processes of prog on this node under an embedded PMIx server.\n"
    "Each ':'-separated application gets its own PMIx namespace.\n"
    "\n"
    "options:\n"
    "  -n, --np N         processes of the following application (default 1)\n"
    "  --tag-output       prefix every output line with [rank] or [app:rank]\n"
    "  --keep-going       survivors continue when a process dies abnormally\n"
    "                     (default: the job ends with that process's status)\n"
    "  --bind-to core|hwthread|none\n"
    "                     core: process i of the job (ranks of the applications\n"
    "                     in order) runs on the i-th core of the CPUs pscom_run\n"
    "                     may use (all its hardware threads), round robin;\n"
    "                     hwthread: on the i-th CPU; none: where the kernel\n"
    "                     puts it (default)\n"
    "  --event-cache N    environment events kept for late registrants (default 512)\n"
    "  --grace S          seconds between ending a job and SIGTERM, and between\n"
    "                     SIGTERM and SIGKILL (default 1)\n"
    "  --timeout S        end the job after S seconds, exit status 124\n"
    "  -v, --verbose      more on stderr, per v: -v deaths and events; -vv (or\n"
    "                     -v -v) also connections, fences and the datastore\n"
    "  -h, --help         this text\n"
    "  --version          version of pscom_run and of the PMIx library\n";

static int fail(char *err, size_t errlen, const char *fmt, const char *arg)
{
    snprintf(err, errlen, fmt, arg);
    return -1;
}

static int parse_long(const char *s, long min, long max, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max) return -1;
    *out = v;
    return 0;
}

static int parse_seconds(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= 0) || v > 1e6) return -1;
    *out = v;
    return 0;
}

/* "--opt=value" or "--opt value": the value, advancing *i for the latter. */
static const char *opt_value(int argc, char **argv, int *i, const char *name)
{
    size_t len = strlen(name);
    const char *a = argv[*i];
    if (strncmp(a, name, len) == 0 && a[len] == '=') return a + len + 1;
    if (strcmp(a, name) == 0 && *i + 1 < argc) return argv[++*i];
    return NULL;
}

static bool is_opt(const char *a, const char *name)
{
    size_t len = strlen(name);
    return strncmp(a, name, len) == 0 && (a[len] == '\0' || a[len] == '=');
}

int psr_cli_parse(int argc, char **argv, psr_opts_t *opts, char *err, size_t errlen)
{
    memset(opts, 0, sizeof(*opts));
    opts->event_cache = PSR_DEFAULT_EVENT_CACHE;
    opts->grace = PSR_DEFAULT_GRACE;

    int i = 1;
    /* Global options. */
    for (; i < argc; i++) {
        const char *a = argv[i];
        const char *v;
        long n;
        if (strcmp(a, "--tag-output") == 0) {
            opts->tag_output = true;
        } else if (strcmp(a, "--keep-going") == 0) {
            opts->keep_going = true;
        } else if (strcmp(a, "--verbose") == 0) {
            opts->verbose++;
        } else if (a[0] == '-' && a[1] == 'v' && a[1 + strspn(a + 1, "v")] == '\0') {
            /* -v, -vv, -vvv: a level per v, as -v -v -v. */
            opts->verbose += (int)strlen(a + 1);
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            opts->help = true;
            return 0;
        } else if (strcmp(a, "--version") == 0) {
            opts->version = true;
            return 0;
        } else if (is_opt(a, "--bind-to")) {
            v = opt_value(argc, argv, &i, "--bind-to");
            if (v && strcmp(v, "core") == 0)
                opts->bind = PSR_BIND_CORE;
            else if (v && strcmp(v, "hwthread") == 0)
                opts->bind = PSR_BIND_HWTHREAD;
            else if (v && strcmp(v, "none") == 0)
                opts->bind = PSR_BIND_NONE;
            else
                return fail(err, errlen, "--bind-to needs core, hwthread or none, not '%s'",
                            v ? v : "");
        } else if (is_opt(a, "--event-cache")) {
            v = opt_value(argc, argv, &i, "--event-cache");
            if (!v || parse_long(v, 1, 1L << 20, &n))
                return fail(err, errlen,
                            "--event-cache needs a number of events from 1 to 1048576, not '%s'",
                            v ? v : "");
            opts->event_cache = (size_t)n;
        } else if (is_opt(a, "--grace")) {
            v = opt_value(argc, argv, &i, "--grace");
            if (!v || parse_seconds(v, &opts->grace))
                return fail(err, errlen, "--grace needs seconds (e.g. 0.5), not '%s'", v ? v : "");
        } else if (is_opt(a, "--timeout")) {
            v = opt_value(argc, argv, &i, "--timeout");
            if (!v || parse_seconds(v, &opts->timeout))
                return fail(err, errlen, "--timeout needs seconds (e.g. 30), not '%s'", v ? v : "");
        } else {
            break;
        }
    }

    /* Applications: [-n N] prog args... separated by ":". */
    int cap = 4;
    opts->apps = calloc(cap, sizeof(*opts->apps));
    if (!opts->apps) return fail(err, errlen, "out of memory%s", "");
    while (i < argc) {
        psr_app_spec_t app = { .np = 1 };
        if (is_opt(argv[i], "-n") || is_opt(argv[i], "--np") || is_opt(argv[i], "-np")) {
            const char *name = argv[i][1] == '-' ? "--np" : is_opt(argv[i], "-np") ? "-np" : "-n";
            const char *v = opt_value(argc, argv, &i, name);
            long n;
            if (!v || parse_long(v, 1, 100000, &n)) {
                psr_opts_free(opts);
                return fail(err, errlen, "-n needs a process count between 1 and 100000, not '%s'",
                            v ? v : "");
            }
            app.np = (int)n;
            i++;
        }
        if (i >= argc || strcmp(argv[i], ":") == 0) {
            psr_opts_free(opts);
            return fail(err, errlen, "application %s has no program to run",
                        opts->napps == 0 ? "1" : "after ':'");
        }
        if (argv[i][0] == '-') {
            /* An option we do not know, or one in the wrong place. */
            char opt[64];
            snprintf(opt, sizeof(opt), "%s", argv[i]);
            psr_opts_free(opts);
            return fail(err, errlen,
                        "unknown option '%s' where a program was expected (see pscom_run --help)",
                        opt);
        }
        app.argv = &argv[i];
        while (i < argc && strcmp(argv[i], ":") != 0) {
            i++;
            app.argc++;
        }
        if (opts->napps == cap) {
            cap *= 2;
            psr_app_spec_t *more = realloc(opts->apps, cap * sizeof(*more));
            if (!more) {
                psr_opts_free(opts);
                return fail(err, errlen, "out of memory%s", "");
            }
            opts->apps = more;
        }
        opts->apps[opts->napps++] = app;
        if (i < argc) i++; /* skip ":" */
        if (i >= argc && strcmp(argv[argc - 1], ":") == 0) {
            psr_opts_free(opts);
            return fail(err, errlen, "nothing follows the last '%s'", ":");
        }
    }
    if (opts->napps == 0) {
        psr_opts_free(opts);
        return fail(err, errlen, "no program to run (see pscom_run --help)%s", "");
    }
    return 0;
}

void psr_cpulist_head(const psr_cpuset_t *set, char *buf, size_t len)
{
    if (psr_cpulist_format(set, buf, len) == 0) return;
    psr_cpulist_format(set, buf, len - 4);
    strcat(buf, ",...");
}

void psr_opts_free(psr_opts_t *opts)
{
    free(opts->apps);
    opts->apps = NULL;
    opts->napps = 0;
}

int psr_cpuset_init(psr_cpuset_t *s, int ncpus)
{
    s->set = CPU_ALLOC(ncpus);
    if (!s->set) return -1;
    s->size = CPU_ALLOC_SIZE(ncpus);
    s->ncpus = ncpus;
    CPU_ZERO_S(s->size, s->set);
    return 0;
}

void psr_cpuset_free(psr_cpuset_t *s)
{
    CPU_FREE(s->set);
    s->set = NULL;
    s->size = 0;
    s->ncpus = 0;
}

int psr_cpuset_copy(psr_cpuset_t *dst, const psr_cpuset_t *src)
{
    if (psr_cpuset_init(dst, src->ncpus)) return -1;
    memcpy(dst->set, src->set, src->size);
    return 0;
}

bool psr_cpuset_isset(const psr_cpuset_t *s, int cpu)
{
    return cpu >= 0 && cpu < s->ncpus && CPU_ISSET_S(cpu, s->size, s->set);
}

int psr_cpuset_affinity(psr_cpuset_t *s)
{
    for (int n = CPU_SETSIZE;; n *= 2) {
        if (psr_cpuset_init(s, n)) return -1;
        if (sched_getaffinity(0, s->size, s->set) == 0) return 0;
        int e = errno;
        psr_cpuset_free(s);
        errno = e;
        if (e != EINVAL || n >= PSR_CPUSET_MAX) return -1;
    }
}

int psr_cpulist_parse(const char *s, psr_cpuset_t *set)
{
    CPU_ZERO_S(set->size, set->set);
    while (*s && *s != '\n') {
        char *end;
        errno = 0;
        long lo = strtol(s, &end, 10), hi = lo;
        if (end == s || errno || lo < 0) return -1;
        s = end;
        if (*s == '-') {
            hi = strtol(++s, &end, 10);
            if (end == s || errno || hi < lo) return -1;
            s = end;
        }
        if (hi >= set->ncpus) return -1;
        for (long c = lo; c <= hi; c++) CPU_SET_S((int)c, set->size, set->set);
        if (*s == ',') {
            if (!*++s || *s == '\n') return -1;
        } else if (*s && *s != '\n') {
            return -1;
        }
    }
    return 0;
}

int psr_cpulist_format(const psr_cpuset_t *set, char *buf, size_t len)
{
    size_t off = 0;
    if (!len) return -1;
    buf[0] = '\0';
    for (int c = 0; c < set->ncpus; c++) {
        if (!psr_cpuset_isset(set, c)) continue;
        int hi = c;
        while (psr_cpuset_isset(set, hi + 1)) hi++;
        int n = hi == c ? snprintf(buf + off, len - off, "%s%d", off ? "," : "", c)
                        : snprintf(buf + off, len - off, "%s%d-%d", off ? "," : "", c, hi);
        if (n < 0 || (size_t)n >= len - off) {
            buf[off] = '\0'; /* the entries that fit whole */
            return -1;
        }
        off += (size_t)n;
        c = hi;
    }
    return 0;
}
