/*
 * The plugin registry.
 *
 * Built-in plugins are linked into libpscom; the others are shared modules
 * libpscom4NAME.so, looked up in PSP_PLUGINDIR or else in the directory
 * libpscom itself was loaded from. Each plugin gets a PSP_<NAME> row
 * (user priority: 0 disables, larger is preferred; ties go to the built-in
 * priority). A plugin that is missing, of another interface version, or whose
 * init fails is kept in the list with the reason, for pscom_info.
 */
#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core.h"
#include "psc_build.h"

extern const pscom_plugin_t pscom_plugin_loop;
extern const pscom_plugin_t pscom_plugin_shm;
extern const pscom_plugin_t pscom_plugin_tcp;

static const pscom_plugin_t *const builtin[] = {
    &pscom_plugin_loop,
    &pscom_plugin_shm,
    &pscom_plugin_tcp,
};

/* Loadable plugins this project ships, with ParaStation's names for their
 * PSP_ priority variables. */
static const struct loadable_entry {
    const char *name;
    const char *alias;
    pscom_con_type_t type; /* what the module will say, before it is loaded */
    int priority;
} loadable[] = {
    {"verbs", "openib", PSCOM_CON_TYPE_OPENIB, 50},
    {"ucx", "ucp", PSCOM_CON_TYPE_UCP, 30},
    {"ofi", NULL, PSCOM_CON_TYPE_OFED, 20},
};

struct slot {
    struct psc_plugin p;
    char row_name[40];
    char alias_name[40];
    int alias_dummy;
    pscom_config_row_t rows[2];
    void *dl;
};

static struct slot slots[PSC_MAX_PLUGINS];
static struct psc_plugin *order[PSC_MAX_PLUGINS];
static unsigned count;
static bool loaded;

const char *const psc_not_implemented[] = {NULL};

/* dst = "PSP_" + upper-case name. */
static void row_name(char *dst, size_t len, const char *name)
{
    size_t i = 0;
    for (const char *p = "PSP_"; *p && i + 1 < len; p++) dst[i++] = *p;
    for (const char *p = name; *p && i + 1 < len; p++)
        dst[i++] = (char)toupper((unsigned char)*p);
    dst[i] = 0;
}

static struct slot *new_slot(const char *name)
{
    if (count == PSC_MAX_PLUGINS) {
        psc_err("too many plugins; %s is ignored", name);
        return NULL;
    }
    struct slot *s = &slots[count];
    memset(s, 0, sizeof(*s));
    size_t n = strnlen(name, sizeof(s->p.name) - 1);
    memcpy(s->p.name, name, n);
    s->p.name[n] = 0;
    order[count++] = &s->p;
    return s;
}

/* The PSP_<NAME> row (and PSP_<ALIAS>, which it falls back to). */
static void register_priority(struct slot *s, const char *alias)
{
    row_name(s->row_name, sizeof(s->row_name), s->p.name);
    s->p.user_priority = 1;
    s->rows[0] = (pscom_config_row_t){
        .name = s->row_name,
        .type = PSCOM_CONFIG_INT,
        .defval = "1",
        .help = "user priority of this transport: 0 disables it, larger "
                "values are preferred",
        .owner = s->p.name,
        .var = &s->p.user_priority,
    };
    size_t n = 1;
    if (alias) {
        row_name(s->alias_name, sizeof(s->alias_name), alias);
        s->rows[0].parent = s->alias_name;
        s->rows[1] = (pscom_config_row_t){
            .name = s->alias_name,
            .type = PSCOM_CONFIG_INT,
            .defval = "1",
            .help = "ParaStation name of the same setting (used when the "
                    "other is unset)",
            .owner = s->p.name,
            .var = &s->alias_dummy,
        };
        n = 2;
    }
    psc_config_register(s->rows, n);
}

/* Whether a plugin's init or handshake op runs (psc_plugin_reason_begin),
 * and what it said about failing. */
static bool capturing;
static char reason[256]; /* a string of the handshake: at most 255 bytes */

void pscom_plugin_set_reason(const char *text)
{
    if (capturing && text) snprintf(reason, sizeof(reason), "%s", text);
}

void psc_plugin_reason_begin(void)
{
    reason[0] = 0;
    capturing = true;
}

const char *psc_plugin_reason_end(void)
{
    capturing = false;
    return reason;
}

static void init_plugin(struct slot *s, const pscom_plugin_t *d)
{
    if (!s->rows[0].name) register_priority(s, d->alias);
    s->p.desc = d;
    if (PSCOM_PLUGIN_API_MAJOR(d->api_version) !=
        PSCOM_PLUGIN_API_MAJOR(PSCOM_PLUGIN_API_VERSION)) {
        s->p.state = PSC_PLUGIN_FAILED;
        snprintf(s->p.why, sizeof(s->p.why),
                 "plugin interface version 0x%04x, this library needs "
                 "0x%04x", d->api_version, PSCOM_PLUGIN_API_VERSION);
        s->p.desc = NULL;
        return;
    }
    if (!d->ops || !d->ops->hs_start || !d->ops->hs_connect || !d->ops->open ||
        !d->ops->close || !d->ops->tx_kick) {
        s->p.state = PSC_PLUGIN_FAILED;
        snprintf(s->p.why, sizeof(s->p.why), "a mandatory operation is missing");
        s->p.desc = NULL;
        return;
    }
    if (s->p.user_priority <= 0) {
        s->p.state = PSC_PLUGIN_DISABLED;
        char var[40];
        memcpy(var, s->row_name, sizeof(var));
        snprintf(s->p.why, sizeof(s->p.why), "disabled by %s=%d", var,
                 s->p.user_priority);
        return;
    }
    s->p.state = PSC_PLUGIN_LOADED;
    s->p.rma = psc_plugin_rma_ops(d);
    /* Built-in plugins start now; a loadable one when it is first tried
     * (psc_plugin_ensure_init): vendor start-up can take a good part of a
     * second (libfabric probes all its providers) and is wasted when, say,
     * shared memory carries every connection. */
    if (!s->dl) psc_plugin_ensure_init(&s->p);
}

const pscom_plugin_ops_t *psc_plugin_rma_ops(const pscom_plugin_t *d)
{
    if (!d || !d->ops || PSCOM_PLUGIN_API_MINOR(d->api_version) < 1)
        return NULL;
    return d->ops;
}

int psc_plugin_ensure_init(struct psc_plugin *p)
{
    struct slot *s = (struct slot *)p;
    if (p->initialised) return 0;
    if (p->state != PSC_PLUGIN_LOADED) return -1;
    const pscom_plugin_t *d = p->desc;
    psc_plugin_reason_begin();
    int rc = d->ops->init ? d->ops->init() : 0;
    const char *said = psc_plugin_reason_end();
    if (rc) {
        p->state = PSC_PLUGIN_FAILED;
        snprintf(p->why, sizeof(p->why), "initialisation failed: %s",
                 said[0] ? said : rc < 0 ? strerror(-rc) : "error");
        psc_debug("plugin %s: %s", p->name, p->why);
    } else {
        p->initialised = true;
    }
    if (s->dl) {
        /* Its settings exist now: those set that it does not know. */
        char prefix[48], own[48];
        snprintf(own, sizeof(own), "%s_", s->row_name);
        psc_config_check_unknown_filtered(NULL, own, NULL);
        if (s->alias_name[0]) {
            snprintf(prefix, sizeof(prefix), "%s_", s->alias_name);
            psc_config_check_unknown_filtered(NULL, prefix, own);
        }
        psc_plugin_sort(order, count);
    }
    return rc ? -1 : 0;
}

void psc_plugins_init_all(void)
{
    psc_plugins_load_modules();
    for (unsigned i = 0; i < count; i++) psc_plugin_ensure_init(&slots[i].p);
}

/* The directory libpscom was loaded from, with a trailing '/'. */
static void library_dir(char *dir, size_t len)
{
    Dl_info info;
    dir[0] = 0;
    if (dladdr((void *)psc_plugins_load, &info) && info.dli_fname) {
        const char *slash = strrchr(info.dli_fname, '/');
        if (slash && (size_t)(slash - info.dli_fname + 1) < len) {
            memcpy(dir, info.dli_fname, slash - info.dli_fname + 1);
            dir[slash - info.dli_fname + 1] = 0;
        }
    }
}

/* Where a module is looked for: PSP_PLUGINDIR alone when set; otherwise
 * the directory of libpscom, the configured install directory and the build
 * tree (for programs linked statically against the core, like pscom_info). */
static unsigned plugin_dirs(char dirs[][512], unsigned max)
{
    unsigned n = 0;
    if (psc_settings.plugindir && psc_settings.plugindir[0]) {
        snprintf(dirs[n++], 512, "%s", psc_settings.plugindir);
        return n;
    }
    library_dir(dirs[n], 512);
    if (dirs[n][0]) n++;
    const char *fixed[] = {PSC_INSTALL_LIBDIR "/", PSC_BUILD_ROOT "/"};
    for (size_t i = 0; i < 2 && n < max; i++) {
        bool dup = false;
        for (unsigned j = 0; j < n; j++) dup |= !strcmp(dirs[j], fixed[i]);
        if (!dup) snprintf(dirs[n++], 512, "%s", fixed[i]);
    }
    return n;
}

/* A loadable plugin's slot and priority rows, module not opened yet. */
static void announce_module(const char *name, const char *alias)
{
    struct slot *s = new_slot(name);
    if (!s) return;
    register_priority(s, alias);
    s->p.state = PSC_PLUGIN_PENDING;
    snprintf(s->p.why, sizeof(s->p.why),
             "opened when a connection first tries it");
}

static void load_module(struct slot *s)
{
    const char *name = s->p.name;
    s->p.why[0] = 0;
    if (s->p.user_priority <= 0) {
        /* Not even loaded: vendor libraries have constructors of their own. */
        char var[40];
        memcpy(var, s->row_name, sizeof(var));
        s->p.state = PSC_PLUGIN_DISABLED;
        snprintf(s->p.why, sizeof(s->p.why), "disabled by %s=%d (not loaded)",
                 var, s->p.user_priority);
        return;
    }

    char dirs[4][512];
    unsigned ndirs = plugin_dirs(dirs, 4);
    char tried[sizeof(s->p.why)] = "";
    size_t off = 0;
    for (unsigned i = 0; i < ndirs && !s->dl; i++) {
        int n = snprintf(s->p.path, sizeof(s->p.path), "%.400s%s%s.so", dirs[i],
                         PSC_PLUGIN_PREFIX, name);
        if (n < 0 || (size_t)n >= sizeof(s->p.path)) continue;
        if (access(s->p.path, F_OK)) {
            off += snprintf(tried + off, sizeof(tried) - off, "%s%s",
                            off ? ", " : "", dirs[i]);
            if (off >= sizeof(tried)) off = sizeof(tried) - 1;
            continue;
        }
        s->dl = dlopen(s->p.path, RTLD_NOW | RTLD_LOCAL);
        if (!s->dl) {
            const char *e = dlerror();
            s->p.state = PSC_PLUGIN_FAILED;
            snprintf(s->p.why, sizeof(s->p.why), "cannot be loaded: %s",
                     e ? e : "unknown error");
            psc_debug("plugin %s: %s", name, s->p.why);
            return;
        }
    }
    if (!s->dl) {
        s->p.state = PSC_PLUGIN_FAILED;
        s->p.path[0] = 0;
        snprintf(s->p.why, sizeof(s->p.why),
                 "not installed (no %s%s.so in %.180s)", PSC_PLUGIN_PREFIX, name,
                 tried);
        psc_debug("plugin %s: %s", name, s->p.why);
        return;
    }
    char sym[64];
    snprintf(sym, sizeof(sym), "%s%s", PSCOM_PLUGIN_SYMBOL_PREFIX, name);
    const pscom_plugin_t *d = dlsym(s->dl, sym);
    if (!d) {
        s->p.state = PSC_PLUGIN_FAILED;
        snprintf(s->p.why, sizeof(s->p.why), "the module has no symbol %s",
                 sym);
        return;
    }
    init_plugin(s, d);
}

/* The entry of the loadable table for a plugin's name, or NULL. */
static const struct loadable_entry *loadable_of(const struct psc_plugin *p)
{
    for (size_t i = 0; i < sizeof(loadable) / sizeof(loadable[0]); i++)
        if (!strcmp(p->name, loadable[i].name)) return &loadable[i];
    return NULL;
}

/* A module not opened yet ranks by the priority its table entry gives. */
static int builtin_priority(const struct psc_plugin *p)
{
    if (p->desc) return p->desc->priority;
    const struct loadable_entry *l = loadable_of(p);
    return l ? l->priority : 0;
}

/* Loaded, or a module not opened yet that is not disabled. */
static bool may_serve(const struct psc_plugin *p)
{
    return p->state == PSC_PLUGIN_LOADED ||
           (p->state == PSC_PLUGIN_PENDING && p->user_priority > 0);
}

void psc_plugin_sort(struct psc_plugin **list, unsigned n)
{
    /* Insertion sort: a handful of entries, and it is stable. */
    for (unsigned i = 1; i < n; i++) {
        struct psc_plugin *p = list[i];
        unsigned j = i;
        while (j > 0) {
            struct psc_plugin *q = list[j - 1];
            bool p_ok = may_serve(p);
            bool q_ok = may_serve(q);
            bool before = p_ok != q_ok ? p_ok
                          : p->user_priority != q->user_priority
                              ? p->user_priority > q->user_priority
                              : builtin_priority(p) > builtin_priority(q);
            if (!before) break;
            list[j] = q;
            j--;
        }
        list[j] = p;
    }
}

void psc_plugins_load(void)
{
    if (loaded) return;
    loaded = true;
    for (size_t i = 0; i < sizeof(builtin) / sizeof(builtin[0]); i++) {
        struct slot *s = new_slot(builtin[i]->name);
        if (s) init_plugin(s, builtin[i]);
    }
    for (size_t i = 0; i < sizeof(loadable) / sizeof(loadable[0]); i++)
        announce_module(loadable[i].name, loadable[i].alias);
    psc_plugin_sort(order, count);
}

void psc_plugins_load_modules(void)
{
    static bool done;
    if (done) return;
    done = true;
    for (unsigned i = 0; i < count; i++) {
        struct slot *s = (struct slot *)order[i];
        if (s->p.state != PSC_PLUGIN_PENDING) continue;
        load_module(s);
    }
    psc_plugin_sort(order, count);
}

int psc_plugin_start(struct psc_plugin *p)
{
    if (p->state == PSC_PLUGIN_PENDING) {
        load_module((struct slot *)p);
        psc_plugin_sort(order, count);
    }
    return psc_plugin_ensure_init(p);
}

bool psc_plugin_offerable(const struct psc_plugin *p, uint64_t mask)
{
    if (!may_serve(p)) return false;
    unsigned type = 64;
    if (p->desc) {
        type = (unsigned)p->desc->con_type;
    } else {
        const struct loadable_entry *l = loadable_of(p);
        if (l) type = (unsigned)l->type;
    }
    return type < 64 && (mask & ((uint64_t)1 << type));
}

const char *const *psc_plugins_pending_prefixes(void)
{
    static char names[2 * PSC_MAX_PLUGINS][48];
    static const char *list[2 * PSC_MAX_PLUGINS + 1];
    unsigned n = 0;
    for (unsigned i = 0; i < count; i++) {
        struct slot *s = (struct slot *)order[i];
        if (s->p.state == PSC_PLUGIN_LOADED && s->p.initialised) continue;
        snprintf(names[n], sizeof(names[n]), "%s_", s->row_name);
        list[n] = names[n];
        n++;
        if (s->alias_name[0]) {
            snprintf(names[n], sizeof(names[n]), "%s_", s->alias_name);
            list[n] = names[n];
            n++;
        }
    }
    list[n] = NULL;
    return list;
}

unsigned psc_plugin_count(void)
{
    return count;
}

struct psc_plugin *psc_plugin_get(unsigned i)
{
    return i < count ? order[i] : NULL;
}

struct psc_plugin *psc_plugin_find(const char *name)
{
    for (unsigned i = 0; i < count; i++)
        if (!strcasecmp(order[i]->name, name)) return order[i];
    return NULL;
}

struct psc_plugin *psc_plugin_by_type(pscom_con_type_t t)
{
    for (unsigned i = 0; i < count; i++)
        if (order[i]->desc && order[i]->desc->con_type == t) return order[i];
    return NULL;
}

struct psc_active psc_active;
static const pscom_plugin_ops_t *active_ops[PSC_MAX_PLUGINS];

static void rebuild_active(void)
{
    unsigned n = 0;
    bool relax = true;
    for (unsigned i = 0; i < count; i++) {
        struct psc_plugin *p = order[i];
        if ((p->open_cons || p->holds) && p->desc &&
            p->desc->ops->progress) {
            active_ops[n] = PSCOM_PLUGIN_API_MINOR(p->desc->api_version) >= 2
                                ? p->desc->ops : NULL;
            psc_active.progress[n++] = p->desc->ops->progress;
            relax &= (p->desc->flags & PSCOM_PLUGIN_SPIN_RELAX) != 0;
        }
    }
    psc_active.n = n;
    psc_active.relax = n && relax;
}

void psc_plugin_con_opened(struct psc_plugin *p)
{
    if (p->open_cons++ == 0) rebuild_active();
}

void psc_plugin_con_closed(struct psc_plugin *p)
{
    if (--p->open_cons == 0) rebuild_active();
}

void pscom_plugin_hold_progress(const char *name, int hold)
{
    struct psc_plugin *p = psc_plugin_find(name);
    if (!p || !p->desc) {
        psc_warn("pscom_plugin_hold_progress: no plugin \"%s\" is loaded",
                 name);
        return;
    }
    if (hold) {
        if (p->holds++ == 0) rebuild_active();
    } else if (!p->holds) {
        psc_warn("pscom_plugin_hold_progress: plugin %s released a hold it "
                 "did not take", p->name);
    } else if (--p->holds == 0) {
        rebuild_active();
    }
}

/* The plugins armed for sleeps: they stay armed until
 * psc_plugins_wait_disarm, and the active set may change meanwhile. */
static const pscom_plugin_ops_t *armed[PSC_MAX_PLUGINS];
static unsigned narmed;

static bool is_armed(const pscom_plugin_ops_t *ops)
{
    for (unsigned i = 0; i < narmed; i++)
        if (armed[i] == ops) return true;
    return false;
}

bool psc_plugins_wait_arm(void)
{
    for (unsigned i = 0; i < psc_active.n; i++) {
        const pscom_plugin_ops_t *ops = active_ops[i];
        if (!ops || !ops->wait_arm || !ops->wait_disarm) {
            psc_plugins_wait_disarm();
            return false;
        }
    }
    for (unsigned i = 0; i < psc_active.n; i++) {
        const pscom_plugin_ops_t *ops = active_ops[i];
        if (is_armed(ops)) continue;
        if (!ops->wait_arm()) {
            psc_plugins_wait_disarm();
            return false;
        }
        armed[narmed++] = ops;
    }
    return true;
}

void psc_plugins_wait_disarm(void)
{
    while (narmed) armed[--narmed]->wait_disarm();
}

void psc_plugins_unload(void)
{
    for (unsigned i = 0; i < count; i++) {
        struct slot *s = (struct slot *)order[i];
        if (s->p.initialised && s->p.desc->ops->destroy)
            s->p.desc->ops->destroy();
        s->p.initialised = false;
        s->p.holds = 0; /* a hold its destroy did not release */
        /* Modules stay mapped: their config rows stay in the table. */
    }
    rebuild_active();
}

int pscom_plugin_available(const char *name, const char **why)
{
    psc_init_on_first_use();
    struct psc_plugin *p = psc_plugin_find(name);
    if (!p) {
        /* ParaStation's names of our transports */
        if (!strcasecmp(name, "ucp")) p = psc_plugin_find("ucx");
        else if (!strcasecmp(name, "openib")) p = psc_plugin_find("verbs");
    }
    if (!p) {
        if (why) *why = "no plugin of that name";
        return 0;
    }
    /* Only this one is opened and started: asking for ucx does not open
     * libfabric. (Under the library lock: it may sort the plugin list.) */
    psc_lock();
    int ok = psc_plugin_start(p) == 0;
    psc_unlock();
    if (!ok && why) *why = p->why;
    return ok;
}
