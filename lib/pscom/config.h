/*
 * The table of every PSP_* variable. Rows come from the core (config_core.c)
 * and from plugins (pscom_plugin_config_register). The same table feeds the
 * variables, pscom_env_get_*, `pscom_info -c` and doc/configuration.md.
 */
#ifndef PSC_CONFIG_H
#define PSC_CONFIG_H

#include <stddef.h>
#include <stdio.h>

#include "pscom_plugin.h"

/* The core's settings, filled from the table (config_core.c). */
struct psc_settings {
    int debug;                    /* PSP_DEBUG */
    char *debug_out;              /* PSP_DEBUG_OUT */
    int debug_param;              /* PSP_DEBUG_PARAM */
    int debug_contype;            /* PSP_DEBUG_CONTYPE */
    int debug_precon;             /* PSP_DEBUG_PRECON */
    int debug_version;            /* PSP_DEBUG_VERSION */
    char *debug_timing;           /* PSP_DEBUG_TIMING */
    int debug_stats;              /* PSP_DEBUG_STATS */
    size_t rendezvous;            /* PSP_RENDEZVOUS */
    int sched_yield;              /* PSP_SCHED_YIELD */
    int wait_sleep;               /* PSP_WAIT_SLEEP */
    unsigned wait_spin_us;        /* PSP_WAIT_SPIN */
    unsigned tcp_backlog;         /* PSP_TCP_BACKLOG */
    unsigned retry;               /* PSP_RETRY */
    unsigned connect_timeout_ms;  /* PSP_CONNECT_TIMEOUT */
    unsigned shutdown_timeout_ms; /* PSP_SHUTDOWN_TIMEOUT */
    char *network;                /* PSP_NETWORK */
    char *plugindir;              /* PSP_PLUGINDIR */
    int ondemand;                 /* PSP_ONDEMAND */
    unsigned precon_max_payload;  /* PSP_PRECON_MAX_RECORD */
    int sigquit;                  /* PSP_SIGQUIT */
};

extern struct psc_settings psc_settings;

/* Register the core rows (once; called by pscom_init). */
void psc_config_core_register(void);

/* Add rows (same as pscom_plugin_config_register). */
void psc_config_register(const pscom_config_row_t *rows, size_t count);

/* A string row that takes one of a few words only. */
typedef struct psc_config_words {
    const char *name;         /* the row's name */
    const char *const *words; /* NULL-terminated */
} psc_config_words_t;

/* Declare word lists for string rows registered afterwards (the list lives
 * as long as the program, as the rows do). A value is taken when it is one
 * of its row's words, ignoring case and surrounding blanks, and stored as
 * the list spells it; any other value is reported and the default kept. */
void psc_config_words(const psc_config_words_t *list, size_t count);

/* Parse `text` as a value of `row`'s type into `out` (which points to a
 * variable of that type). 0 on success, -1 when it does not parse, -2 when
 * it is a number beyond the type's range, -3 when it is none of a word
 * row's words (nothing written in any of these cases). Strings are
 * strdup'ed. */
int psc_config_parse(const pscom_config_row_t *row, const char *text,
                     void *out);

/* Warn (PSP_DEBUG >= 2) about each row of `owner` whose variable is set:
 * "NAME=VALUE: <help>". */
void psc_config_note_owner_set(const char *owner);

/* Re-read every row from the environment (defaults first). */
void psc_config_reload(void);

/* Warn (PSP_DEBUG >= 1) about each set PSP_* variable that no row knows,
 * naming the closest known name. Returns how many there were. */
int psc_config_check_unknown(void);

/* The same, ignoring names that start with a prefix of the NULL-terminated
 * list `skip` (settings of plugins not loaded yet), and, when `only` is
 * given, looking only at names that start with it. `instead`, with `only`
 * a plugin's ParaStation prefix ("PSP_OPENIB_"), is the plugin's own
 * ("PSP_VERBS_"): a name with a setting of the same suffix says so. */
int psc_config_check_unknown_filtered(const char *const *skip,
                                      const char *only, const char *instead);

/* Find a row by name; NULL if none. */
const pscom_config_row_t *psc_config_find(const char *name);

/* The value of a row as text ("inf", "16k" is not needed: plain numbers). */
void psc_config_value_str(const pscom_config_row_t *row, char *buf,
                          size_t len);

/* Where the current value came from: "default", "environment", or the
 * parent's name. */
const char *psc_config_source(const pscom_config_row_t *row);

/* Print the table: markdown=0 for pscom_info -c (name, type, default,
 * current value, owner, help), markdown=1 for doc/configuration.md. */
void psc_config_print(FILE *out, int markdown);

/* Print every row that was set from the environment (PSP_DEBUG_PARAM=1), or
 * every row (2). */
void psc_config_print_params(int level);

/* Free strings owned by the table (at library teardown). */
void psc_config_cleanup(void);

#endif
