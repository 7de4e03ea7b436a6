/*
 * The plugin registry: built-in and loadable plugins, ordered by the user's
 * PSP_<NAME> priority (0 disables), ties broken by the built-in priority.
 */
#ifndef PSC_PLUGIN_H
#define PSC_PLUGIN_H

#include <stdbool.h>

#include "pscom_plugin.h"

enum psc_plugin_state {
    PSC_PLUGIN_LOADED,   /* registered and initialised */
    PSC_PLUGIN_DISABLED, /* PSP_<NAME>=0 */
    PSC_PLUGIN_FAILED,   /* not found, wrong version, or init failed */
    PSC_PLUGIN_PENDING,  /* loadable, opened when a connection tries it */
};

struct psc_plugin {
    const pscom_plugin_t *desc; /* NULL when loading failed */
    char name[32];
    enum psc_plugin_state state;
    char why[256];      /* for FAILED/DISABLED: the reason, for pscom_info */
    char path[512];     /* the module file, "" for built-in plugins */
    int user_priority;  /* PSP_<NAME> */
    bool initialised;
    unsigned open_cons; /* connections currently open on it */
    unsigned holds;     /* pscom_plugin_hold_progress calls in force */
    /* The ops table when the descriptor is of interface 1.1 or later, so
     * that the one-sided ops may be read; NULL for 1.0 plugins, whose
     * tables end before them. */
    const pscom_plugin_ops_t *rma;
};

/* d->ops if d is of interface minor 1 or later, else NULL. */
const pscom_plugin_ops_t *psc_plugin_rma_ops(const pscom_plugin_t *d);

/* Register the built-in plugins and the names of the loadable ones
 * (idempotent). Modules are not opened yet: vendor libraries are heavy
 * (UCX's start-up alone takes a fifth of a second) and often unneeded. */
void psc_plugins_load(void);

/* Open and initialise the loadable plugins (idempotent): at the first
 * connection, and for tools. */
void psc_plugins_load_modules(void);

/* Run a loaded plugin's init op if it has not run (loadable plugins start
 * when first tried). 0, or -1 when it failed (state FAILED, reason in why). */
int psc_plugin_ensure_init(struct psc_plugin *p);

/* Around a plugin's init, hs_start or hs_connect op: what the op gave to
 * pscom_plugin_set_reason ("" if nothing), for pscom_info and the
 * handshake's messages. */
void psc_plugin_reason_begin(void);
const char *psc_plugin_reason_end(void);

/* Load and start every plugin (for tools: pscom_info, tests). */
void psc_plugins_init_all(void);

/* Open p if it is a module not opened yet, then run its init op if that
 * has not run: 0, or -1 when it cannot serve (state and reason in p). The
 * handshake starts a module when it is about to try it, so that a
 * connection UCX carries never pays for opening libfabric, whose
 * libraries' constructors alone take a fifth of a second here. */
int psc_plugin_start(struct psc_plugin *p);

/* Loaded, or a module not opened yet and not disabled (PSP_<NAME>=0), and
 * of a type that the transport mask allows (for a module not opened yet,
 * the type it will have)? */
bool psc_plugin_offerable(const struct psc_plugin *p, uint64_t mask);

/* PSP_ prefixes of the settings of plugins that have not declared them:
 * loadable ones not loaded yet, and those disabled (PSP_<NAME>=0) or
 * failed (NULL-terminated), for the unknown-variable check at
 * initialisation. A setting of a disabled plugin is not unknown. */
const char *const *psc_plugins_pending_prefixes(void);

/* Number of known plugins (in any state) and the i-th in priority order:
 * usable ones first, highest priority first. */
unsigned psc_plugin_count(void);
struct psc_plugin *psc_plugin_get(unsigned i);

/* A plugin by name (case-insensitive) or NULL. */
struct psc_plugin *psc_plugin_find(const char *name);
/* The plugin carrying connections of type t, or NULL. */
struct psc_plugin *psc_plugin_by_type(pscom_con_type_t t);

/* Sort a list of plugins: by user priority, then built-in priority
 * (descending; a module not opened yet by the priority it will have);
 * disabled and failed ones last. Exposed for the unit test. */
void psc_plugin_sort(struct psc_plugin **list, unsigned count);

/* A connection of p was opened / closed (keeps the progress list). */
void psc_plugin_con_opened(struct psc_plugin *p);
void psc_plugin_con_closed(struct psc_plugin *p);

/* The progress ops of the plugins with open connections, densely, in
 * priority order (kept by psc_plugin_con_opened/closed): a round of the
 * progress engine calls each. */
#define PSC_MAX_PLUGINS 16
struct psc_active {
    unsigned n;
    bool relax; /* every one has PSCOM_PLUGIN_SPIN_RELAX */
    int (*progress[PSC_MAX_PLUGINS])(void);
};
extern struct psc_active psc_active;

/* Before a sleeping wait: ask every plugin with open connections to have
 * what it waits for signalled on its descriptors (ops.wait_arm; plugins
 * armed already are not asked again). true when all agreed; they stay
 * armed until psc_plugins_wait_disarm(). false (nothing left armed) when
 * one needs polling. */
bool psc_plugins_wait_arm(void);
void psc_plugins_wait_disarm(void);

/* Destroy all plugins (library teardown). */
void psc_plugins_unload(void);

/* Public API functions this build does not implement yet (NULL terminated),
 * for pscom_info. */
extern const char *const psc_not_implemented[];

#endif
