/*
 * Diagnostics: every line goes out as "<pscom:PID:HOST> message" (with
 * PSP_DEBUG_TIMING "<pscom:PID:HOST:TIME> message") in a single stdio call,
 * so lines from several threads or processes sharing one file do not
 * interleave within a line.
 */
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include <wordexp.h>

#include "pscom_plugin.h"

int psc_log_level = 1;

/* The PSP_DEBUG_OUT file, or NULL for stderr. */
static FILE *log_file;
/* The PSP_DEBUG_OUT text last asked for, before expansion, whether or not
 * it could be opened (asking for it again does nothing). */
static char *log_name;

static char hostname[64];
static pthread_once_t hostname_once = PTHREAD_ONCE_INIT;

static void hostname_init(void)
{
    if (gethostname(hostname, sizeof(hostname)) != 0)
        strcpy(hostname, "unknown");
    hostname[sizeof(hostname) - 1] = '\0';
}

FILE *psc_log_stream(void)
{
    return log_file ? log_file : stderr;
}

/* PSP_DEBUG_TIMING. Read without a lock while other threads log: timing is
 * stored (release) after timing_start, and loaded (acquire) before it. */
enum timing { TIMING_NONE, TIMING_US, TIMING_DELTA, TIMING_WALL, TIMING_DATE };
static int timing = TIMING_NONE;
static int64_t timing_start_ns; /* CLOCK_MONOTONIC: what us counts from */
static int64_t timing_last_ns;  /* CLOCK_MONOTONIC: delta's previous line */

static int64_t clock_ns(clockid_t id, struct timespec *ts)
{
    clock_gettime(id, ts);
    return (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec;
}

void psc_log_timing_set(const char *kind)
{
    static const struct {
        const char *word;
        enum timing t;
    } kinds[] = {{"1", TIMING_US},      {"us", TIMING_US},
                 {"delta", TIMING_DELTA}, {"wall", TIMING_WALL},
                 {"date", TIMING_DATE}};
    enum timing t = TIMING_NONE;
    struct timespec mono, real;

    for (size_t i = 0; kind && i < sizeof(kinds) / sizeof(kinds[0]); i++)
        if (strcasecmp(kind, kinds[i].word) == 0) t = kinds[i].t;

    /* Relative times count from the first request for them, also when
     * the library is initialised again. */
    if ((t == TIMING_US || t == TIMING_DELTA) && !timing_start_ns) {
        int64_t now = clock_ns(CLOCK_MONOTONIC, &mono);
        char date[32];
        struct tm tm;

        clock_ns(CLOCK_REALTIME, &real);
        timing_start_ns = now;
        __atomic_store_n(&timing_last_ns, now, __ATOMIC_RELAXED);
        __atomic_store_n(&timing, t, __ATOMIC_RELEASE);
        if (!localtime_r(&real.tv_sec, &tm) ||
            !strftime(date, sizeof(date), "%Y-%m-%d %H:%M:%S", &tm))
            date[0] = '\0';
        psc_info("PSP_DEBUG_TIMING=%s: times count from %s.%06ld", kind,
                 date, real.tv_nsec / 1000);
        return;
    }
    __atomic_store_n(&timing, t, __ATOMIC_RELEASE);
}

/* ":TIME" for the prefix, or "" without PSP_DEBUG_TIMING. */
static void time_str(char *buf, size_t len)
{
    int t = __atomic_load_n(&timing, __ATOMIC_ACQUIRE);
    struct timespec ts;
    int64_t d;

    switch (t) {
    case TIMING_US:
    case TIMING_DELTA: {
        int64_t now = clock_ns(CLOCK_MONOTONIC, &ts);
        int64_t from = timing_start_ns;

        if (t == TIMING_DELTA)
            from = __atomic_exchange_n(&timing_last_ns, now, __ATOMIC_RELAXED);
        /* Another thread's later line may have taken delta's turn. */
        d = now > from ? now - from : 0;
        snprintf(buf, len, ":%04lld.%06lld", (long long)(d / 1000000000),
                 (long long)(d % 1000000000 / 1000));
        return;
    }
    case TIMING_WALL:
        clock_gettime(CLOCK_REALTIME, &ts);
        snprintf(buf, len, ":%lld.%06ld", (long long)ts.tv_sec,
                 ts.tv_nsec / 1000);
        return;
    case TIMING_DATE: {
        char date[24];
        struct tm tm;

        clock_gettime(CLOCK_REALTIME, &ts);
        if (!localtime_r(&ts.tv_sec, &tm) ||
            !strftime(date, sizeof(date), "%Y-%m-%d_%H:%M:%S", &tm))
            date[0] = '\0';
        snprintf(buf, len, ":%s.%06ld", date, ts.tv_nsec / 1000);
        return;
    }
    default:
        if (len) buf[0] = '\0';
    }
}

/* Compose "<pscom:PID:HOST> " (or "<pscom:PID:HOST:TIME> ") before every
 * line of msg, end with a newline, and write it with one call. */
static void emit(const char *msg)
{
    char prefix[160];
    char when[64];
    char stackbuf[1024];
    char *out = stackbuf;
    size_t plen, lines = 1, need, pos = 0;
    const char *p;

    pthread_once(&hostname_once, hostname_init);
    time_str(when, sizeof(when));
    plen = (size_t)snprintf(prefix, sizeof(prefix), "<pscom:%d:%s%s> ",
                            (int)getpid(), hostname, when);
    if (plen >= sizeof(prefix)) plen = sizeof(prefix) - 1;

    for (p = msg; *p; p++)
        if (*p == '\n' && p[1] != '\0') lines++;
    need = strlen(msg) + lines * plen + 2;
    if (need > sizeof(stackbuf)) {
        out = malloc(need);
        if (!out) {
            /* Out of memory: still say something, unprefixed. */
            fputs(msg, psc_log_stream());
            return;
        }
    }

    p = msg;
    for (;;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);

        memcpy(out + pos, prefix, plen);
        pos += plen;
        memcpy(out + pos, p, len);
        pos += len;
        out[pos++] = '\n';
        if (!nl || nl[1] == '\0') break;
        p = nl + 1;
    }
    out[pos] = '\0';

    fputs(out, psc_log_stream());
    if (out != stackbuf) free(out);
}

static void log_vwrite(const char *fmt, va_list ap)
{
    char buf[1024];
    va_list ap2;
    int n;

    va_copy(ap2, ap);
    n = vsnprintf(buf, sizeof(buf), fmt, ap);
    if (n < 0) {
        va_end(ap2);
        return;
    }
    if ((size_t)n < sizeof(buf)) {
        emit(buf);
    } else {
        char *big = malloc((size_t)n + 1);

        if (big) {
            vsnprintf(big, (size_t)n + 1, fmt, ap2);
            emit(big);
            free(big);
        } else {
            emit(buf); /* truncated rather than nothing */
        }
    }
    va_end(ap2);
}

void psc_log_write(int level, const char *fmt, ...)
{
    va_list ap;

    (void)level;
    va_start(ap, fmt);
    log_vwrite(fmt, ap);
    va_end(ap);
}

/* Close the PSP_DEBUG_OUT file, if any, and go back to stderr. */
static void log_close(void)
{
    FILE *f = log_file;

    log_file = NULL;
    if (f) fclose(f);
    free(log_name);
    log_name = NULL;
}

/* Why wordexp() could not expand a name. */
static const char *expand_error(int rc)
{
    switch (rc) {
    case WRDE_BADCHAR:
        return "it contains one of |&;<>(){} or a newline";
    case WRDE_CMDSUB:
        return "command substitution is not allowed";
    case WRDE_SYNTAX:
        return "shell syntax error, e.g. an unmatched quote";
    case WRDE_BADVAL:
        return "it names a variable that is not set";
    default: return "it could not be expanded";
    }
}

void psc_log_open(const char *path)
{
    wordexp_t we;
    const char *file = path;
    int expanded = 0;
    int rc;
    FILE *f;

    if (!path || !*path) {
        log_close();
        return;
    }
    if (log_name && strcmp(log_name, path) == 0) return;

    /* Shell-like expansion ($VAR, ~), never running commands; an unset
     * variable is an error, not an empty word. */
    rc = wordexp(path, &we, WRDE_NOCMD | WRDE_UNDEF);
    if (rc == 0) {
        expanded = 1;
        if (we.we_wordc == 1) file = we.we_wordv[0];
    } else if (rc == WRDE_NOSPACE) {
        wordfree(&we);
    }

    f = NULL;
    int err = 0;
    if (rc == 0 && we.we_wordc == 1) {
        /* Not blocking in open: a FIFO nobody reads would hang us here. */
        int fd = open(file, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC |
                                O_NONBLOCK, 0666);
        if (fd >= 0) {
            fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
            f = fdopen(fd, "a");
            if (!f) close(fd);
        }
        err = errno;
    }
    if (!f) {
        /* Remember the name anyway: asking again must not repeat this. */
        log_close();
        log_name = strdup(path);
        if (rc != 0 || we.we_wordc != 1)
            psc_log_write(PSC_LOG_ERROR,
                          "PSP_DEBUG_OUT=\"%s\" names no file: %s; logging "
                          "to stderr instead",
                          path, rc != 0 ? expand_error(rc)
                                        : "it expands to no word or to "
                                          "several");
        else
            psc_log_write(PSC_LOG_ERROR,
                          "cannot open the log file \"%s\" named by "
                          "PSP_DEBUG_OUT=\"%s\" for appending: %s; logging "
                          "to stderr instead",
                          file, path,
                          err == ENXIO ? "a FIFO that nobody reads"
                                       : strerror(err));
        if (expanded) wordfree(&we);
        return;
    }
    /* Unbuffered, as stderr: a message (a state dump has many lines) goes
     * out in one write, so that processes sharing the file do not cut
     * into it; line buffering split it at 4 KiB. */
    setvbuf(f, NULL, _IONBF, 0);
    if (expanded) wordfree(&we);

    log_close();
    log_name = strdup(path);
    log_file = f;
}

void pscom_plugin_log(int level, const char *fmt, ...)
{
    va_list ap;

    if (psc_log_level_get() < level) return;
    va_start(ap, fmt);
    log_vwrite(fmt, ap);
    va_end(ap);
}

int pscom_plugin_log_level(void)
{
    return psc_log_level_get();
}
