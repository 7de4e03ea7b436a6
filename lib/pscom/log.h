/*
 * Diagnostics. Levels follow PSP_DEBUG: 0 fatal, 1 error, 2 warning, 3 info,
 * 4 debug, 5 verbose, 6 trace. Output goes to stderr, or to the file named by
 * PSP_DEBUG_OUT. Every line starts with "<pscom:PID:HOST> ", or with
 * PSP_DEBUG_TIMING "<pscom:PID:HOST:TIME> ".
 *
 * Say in each message what failed, where (connection names, peer address,
 * transport), the system error, and what to try.
 */
#ifndef PSC_LOG_H
#define PSC_LOG_H

#include <stdio.h>

enum psc_log_level {
    PSC_LOG_FATAL   = 0,
    PSC_LOG_ERROR   = 1,
    PSC_LOG_WARN    = 2,
    PSC_LOG_INFO    = 3,
    PSC_LOG_DEBUG   = 4,
    PSC_LOG_VERBOSE = 5,
    PSC_LOG_TRACE   = 6,
};

/* The current PSP_DEBUG level. pscom_set_debug may change it while other
 * threads log: read and set it only through these (relaxed atomics, plain
 * loads and stores on the usual targets). */
extern int psc_log_level;

static inline int psc_log_level_get(void)
{
    return __atomic_load_n(&psc_log_level, __ATOMIC_RELAXED);
}

static inline void psc_log_level_set(int level)
{
    __atomic_store_n(&psc_log_level, level, __ATOMIC_RELAXED);
}

void psc_log_write(int level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* (Re)open the output named by PSP_DEBUG_OUT; stderr when unset or on error. */
void psc_log_open(const char *path);

/* Timestamps in the prefix (PSP_DEBUG_TIMING): "us" or "1" seconds since
 * the first call that asked for us or delta, "delta" seconds since the
 * previous line, "wall" seconds since the epoch (all as
 * seconds.microseconds), "date" the local date and time
 * (YYYY-MM-DD_hh:mm:ss.uuuuuu); NULL, "0" or any other text: none. */
void psc_log_timing_set(const char *kind);

/* The stream diagnostics go to (for multi-line dumps). */
FILE *psc_log_stream(void);

#define psc_log(level, ...)                                                    \
    do {                                                                       \
        if (psc_log_level_get() >= (level))                                  \
            psc_log_write((level), __VA_ARGS__);                               \
    } while (0)

#define psc_err(...)   psc_log(PSC_LOG_ERROR, __VA_ARGS__)
#define psc_warn(...)  psc_log(PSC_LOG_WARN, __VA_ARGS__)
#define psc_info(...)  psc_log(PSC_LOG_INFO, __VA_ARGS__)
#define psc_debug(...) psc_log(PSC_LOG_DEBUG, __VA_ARGS__)
#define psc_verbose(...) psc_log(PSC_LOG_VERBOSE, __VA_ARGS__)

#ifdef PSC_ENABLE_TRACE
#define psc_trace(...) psc_log(PSC_LOG_TRACE, __VA_ARGS__)
#else
#define psc_trace(...)                                                         \
    do {                                                                       \
    } while (0)
#endif

#endif
