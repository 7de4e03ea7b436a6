/*
 * The table of PSP_* settings: registration, parsing, the environment
 * readers of the public API, and the printed forms (pscom_info -c and
 * doc/configuration.md).
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "log.h"
#include "pscom.h"

char *(*pscom_env_get)(const char *name) = getenv;
int (*pscom_env_set)(const char *name, const char *value,
                     int overwrite) = setenv;

enum source {
    SRC_DEFAULT,
    SRC_ENVIRONMENT, /* the row's own name */
    SRC_PARENT,      /* the row's parent variable */
};

struct entry {
    const pscom_config_row_t *row;
    enum source src;
    char *owned;  /* the string this table allocated for *row->var */
    bool printed; /* already shown for PSP_DEBUG_PARAM */
};

/* A growing array of pointers to declarations that the caller keeps. */
struct decl_list {
    const void **v;
    size_t n, cap;
};

/* Append p; false when out of memory (nothing changed). */
static bool decl_add(struct decl_list *l, const void *p)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        const void **v = realloc(l->v, cap * sizeof(*v));
        if (!v) return false;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = p;
    return true;
}

static bool decl_known(const struct decl_list *l, const void *p)
{
    for (size_t i = 0; i < l->n; i++)
        if (l->v[i] == p) return true;
    return false;
}

static void decl_free(struct decl_list *l)
{
    free(l->v);
    *l = (struct decl_list){0};
}

/* Declared ranges (pscom_plugin_config_ranges, pscom_config_range_t) and
 * word lists (psc_config_words, psc_config_words_t), looked up by name. */
static struct decl_list ranges, word_lists;

/* Registered rows in registration order; duplicates are never added. */
static struct entry *entries;
static size_t n_entries, cap_entries;

/* Once psc_config_print_params() ran, rows registered later are shown as
 * they come, at this level. */
static int params_level;

/* Strings pscom_env_get_dir() had to allocate (a '/' was added), under
 * env_dirs_lock: an application may read settings from several threads. */
static char **env_dirs;
static size_t n_env_dirs;
static pthread_mutex_t env_dirs_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---------------------------------------------------------------------- */
/* Parsing                                                                */
/* ---------------------------------------------------------------------- */

static const char *type_name(pscom_config_type_t type)
{
    switch (type) {
    case PSCOM_CONFIG_INT: return "int";
    case PSCOM_CONFIG_UINT: return "uint";
    case PSCOM_CONFIG_SIZE: return "size";
    case PSCOM_CONFIG_BOOL: return "bool";
    case PSCOM_CONFIG_STR: return "string";
    case PSCOM_CONFIG_DIR: return "directory";
    }
    return "?";
}

#define PARSE_AUTO 1
#define PARSE_TOO_LARGE (-2)
#define PARSE_NOT_WORD (-3)

/* What a person should have written, for messages. */
static const char *type_expected(pscom_config_type_t type)
{
    switch (type) {
    case PSCOM_CONFIG_INT:
        return "an integer (decimal or 0x hexadecimal, optionally signed)";
    case PSCOM_CONFIG_UINT:
        return "an unsigned integer (decimal or 0x hexadecimal), \"inf\" or "
               "\"auto\"";
    case PSCOM_CONFIG_SIZE:
        return "a size in bytes (decimal or 0x hexadecimal with an optional "
               "k, M or G suffix), \"inf\" or \"auto\"";
    case PSCOM_CONFIG_BOOL:
        return "a boolean (0/1, yes/no, true/false, on/off)";
    case PSCOM_CONFIG_STR:
    case PSCOM_CONFIG_DIR:
        return "a string";
    }
    return "?";
}

/* Why a text was refused (parse_typed's result rc): "is not <what
 * should have been written>", or for a number beyond the type "is out of
 * the range of <type>". */
static const char *refusal(pscom_config_type_t type, int rc, char *buf,
                           size_t len)
{
    const char *span = type == PSCOM_CONFIG_INT ? "an int, -2147483648.."
                                                  "2147483647"
                       : type == PSCOM_CONFIG_UINT ? "an unsigned int, 0.."
                                                     "4294967295 (or inf)"
                                                   : "a size (or inf)";
    if (rc == PARSE_TOO_LARGE)
        snprintf(buf, len, "is out of the range of %s", span);
    else
        snprintf(buf, len, "is not %s", type_expected(type));
    return buf;
}

static bool type_valid(pscom_config_type_t type)
{
    switch (type) {
    case PSCOM_CONFIG_INT:
    case PSCOM_CONFIG_UINT:
    case PSCOM_CONFIG_SIZE:
    case PSCOM_CONFIG_BOOL:
    case PSCOM_CONFIG_STR:
    case PSCOM_CONFIG_DIR:
        return true;
    }
    return false;
}

/* Copy text without surrounding blanks into buf; false when it is too long
 * to be a number or keyword. */
static bool trim_copy(const char *text, char *buf, size_t len)
{
    size_t n;

    while (isspace((unsigned char)*text)) text++;
    n = strlen(text);
    while (n > 0 && isspace((unsigned char)text[n - 1])) n--;
    if (n >= len) return false;
    memcpy(buf, text, n);
    buf[n] = '\0';
    return true;
}

/* Digits in decimal or with a 0x prefix in hexadecimal, an optional sign
 * (allow_sign) and an optional k/M/G suffix (allow_suffix). Octal is not a
 * thing here: "010" is ten. 0, -1 when it is no such number,
 * PARSE_TOO_LARGE when it is one beyond 64 bits. */
static int parse_integer(const char *s, bool allow_sign, bool allow_suffix,
                         unsigned long long *mag_p, bool *neg_p)
{
    unsigned long long v;
    bool neg = false;
    int base = 10;
    char *end;

    if (allow_sign && (*s == '+' || *s == '-')) {
        neg = *s == '-';
        s++;
    }
    if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
        base = 16;
        s += 2;
    }
    /* strtoull would take blanks and a sign here; we do not. */
    if (base == 16 ? !isxdigit((unsigned char)*s) : !isdigit((unsigned char)*s))
        return -1;

    errno = 0;
    v = strtoull(s, &end, base);
    bool huge = errno == ERANGE;

    if (allow_suffix && *end) {
        unsigned shift;

        switch (*end) {
        case 'k': case 'K': shift = 10; break;
        case 'm': case 'M': shift = 20; break;
        case 'g': case 'G': shift = 30; break;
        default: return -1;
        }
        if (v > (ULLONG_MAX >> shift)) huge = true;
        v <<= shift;
        end++;
    }
    if (*end) return -1;
    if (huge) return PARSE_TOO_LARGE;

    *mag_p = v;
    *neg_p = neg;
    return 0;
}

static int parse_bool(const char *s, int *out)
{
    static const char *const yes[] = {"1", "yes", "true", "on"};
    static const char *const no[] = {"0", "no", "false", "off"};

    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = 1;
            return 0;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = 0;
            return 0;
        }
    }
    return -1;
}

/* The string stored for a DIR value: text with a '/' appended if missing
 * (an empty text stays empty: "not set"). */
static char *dir_dup(const char *text)
{
    size_t n = strlen(text);
    char *s;

    if (n == 0 || text[n - 1] == '/') return strdup(text);
    s = malloc(n + 2);
    if (!s) return NULL;
    memcpy(s, text, n);
    s[n] = '/';
    s[n + 1] = '\0';
    return s;
}

/* Parse text as `type` into out. 0 on success, -1 when it does not parse
 * (nothing written), PARSE_TOO_LARGE for a number beyond the type's range,
 * PARSE_AUTO for "auto" of UINT/SIZE (nothing written: the caller knows
 * the default). */
static int parse_typed(pscom_config_type_t type, const char *text, void *out)
{
    char buf[72];
    unsigned long long mag;
    bool neg;
    int rc;

    if (!text) return -1;

    if (type == PSCOM_CONFIG_STR || type == PSCOM_CONFIG_DIR) {
        char *s = type == PSCOM_CONFIG_DIR ? dir_dup(text) : strdup(text);

        if (!s) {
            psc_err("out of memory storing the string \"%s\"", text);
            return -1;
        }
        *(char **)out = s;
        return 0;
    }

    if (!trim_copy(text, buf, sizeof(buf))) return -1;

    switch (type) {
    case PSCOM_CONFIG_INT:
        if ((rc = parse_integer(buf, true, false, &mag, &neg)) != 0) return rc;
        if (neg ? mag > (unsigned long long)INT_MAX + 1 : mag > INT_MAX)
            return PARSE_TOO_LARGE;
        /* -(INT_MAX + 1) without signed overflow. */
        *(int *)out = neg ? (int)(-(long long)mag) : (int)mag;
        return 0;

    case PSCOM_CONFIG_UINT:
        if (strcasecmp(buf, "inf") == 0) {
            *(unsigned *)out = UINT_MAX;
            return 0;
        }
        if (strcasecmp(buf, "auto") == 0) return PARSE_AUTO;
        if ((rc = parse_integer(buf, false, false, &mag, &neg)) != 0) return rc;
        if (mag > UINT_MAX) return PARSE_TOO_LARGE;
        *(unsigned *)out = (unsigned)mag;
        return 0;

    case PSCOM_CONFIG_SIZE:
        if (strcasecmp(buf, "inf") == 0) {
            *(size_t *)out = SIZE_MAX;
            return 0;
        }
        if (strcasecmp(buf, "auto") == 0) return PARSE_AUTO;
        if ((rc = parse_integer(buf, false, true, &mag, &neg)) != 0) return rc;
        if (mag > SIZE_MAX) return PARSE_TOO_LARGE;
        *(size_t *)out = (size_t)mag;
        return 0;

    case PSCOM_CONFIG_BOOL:
        return parse_bool(buf, (int *)out);

    default:
        return -1;
    }
}

static const char *const *words_of(const pscom_config_row_t *row)
{
    if (row->type != PSCOM_CONFIG_STR) return NULL;
    for (size_t i = 0; i < word_lists.n; i++) {
        const psc_config_words_t *w = word_lists.v[i];
        if (strcmp(w->name, row->name) == 0) return w->words;
    }
    return NULL;
}

/* A word row's value: the list's spelling of the word text is, strdup'ed
 * into out; PARSE_NOT_WORD when it is none of them. */
static int parse_word(const char *const *words, const char *text, void *out)
{
    char buf[72];

    if (!text || !trim_copy(text, buf, sizeof(buf))) return PARSE_NOT_WORD;
    for (; *words; words++) {
        if (strcasecmp(buf, *words) != 0) continue;
        char *s = strdup(*words);
        if (!s) {
            psc_err("out of memory storing the string \"%s\"", *words);
            return -1;
        }
        *(char **)out = s;
        return 0;
    }
    return PARSE_NOT_WORD;
}

/* Why a row refused a text: refusal(), or the words a word row takes. */
static const char *row_refusal(const pscom_config_row_t *row, int rc,
                               char *buf, size_t len)
{
    const char *const *w = words_of(row);
    size_t pos;

    if (rc != PARSE_NOT_WORD || !w) return refusal(row->type, rc, buf, len);
    pos = (size_t)snprintf(buf, len, "is none of");
    for (size_t i = 0; w[i] && pos < len; i++)
        pos += (size_t)snprintf(buf + pos, len - pos, "%s %s",
                                i == 0 ? "" : w[i + 1] ? "," : " or", w[i]);
    return buf;
}

int psc_config_parse(const pscom_config_row_t *row, const char *text,
                     void *out)
{
    const char *const *words = words_of(row);
    if (words) return parse_word(words, text, out);

    int rc = parse_typed(row->type, text, out);

    if (rc != PARSE_AUTO) return rc;

    /* "auto" is the row's default; a default that is itself "auto" or
     * missing means 0. */
    if (row->defval && parse_typed(row->type, row->defval, out) == 0)
        return 0;
    if (row->type == PSCOM_CONFIG_SIZE)
        *(size_t *)out = 0;
    else
        *(unsigned *)out = 0;
    return 0;
}

/* ---------------------------------------------------------------------- */
/* The table                                                              */
/* ---------------------------------------------------------------------- */

static struct entry *entry_of(const pscom_config_row_t *row)
{
    for (size_t i = 0; i < n_entries; i++)
        if (entries[i].row == row) return &entries[i];
    return NULL;
}

static struct entry *entry_by_name(const char *name)
{
    for (size_t i = 0; i < n_entries; i++)
        if (strcmp(entries[i].row->name, name) == 0) return &entries[i];
    return NULL;
}

const pscom_config_row_t *psc_config_find(const char *name)
{
    struct entry *e = name ? entry_by_name(name) : NULL;

    return e ? e->row : NULL;
}

static bool is_string_type(pscom_config_type_t type)
{
    return type == PSCOM_CONFIG_STR || type == PSCOM_CONFIG_DIR;
}

/* Store a freshly parsed string, releasing the one stored before. */
static void entry_set_string(struct entry *e, char *s)
{
    free(e->owned);
    e->owned = s;
    *(char **)e->row->var = s;
}

/* Parse text into the row's variable; parse_typed's result. */
static int entry_set(struct entry *e, const char *text)
{
    const pscom_config_row_t *row = e->row;

    if (is_string_type(row->type)) {
        char *s;

        int rc = psc_config_parse(row, text, &s);
        if (rc != 0) return rc;
        entry_set_string(e, s);
        return 0;
    }
    return psc_config_parse(row, text, row->var);
}

static void entry_set_default(struct entry *e)
{
    const pscom_config_row_t *row = e->row;

    e->src = SRC_DEFAULT;
    if (!row->defval) {
        /* No default: strings are unset, numbers keep what the owner's
         * variable was initialised with. */
        if (is_string_type(row->type)) entry_set_string(e, NULL);
        return;
    }
    if (entry_set(e, row->defval) != 0)
        psc_err("bug: the default \"%s\" of %s (owner %s) is not %s",
                row->defval, row->name, row->owner ? row->owner : "core",
                type_expected(row->type));
}

void psc_config_value_str(const pscom_config_row_t *row, char *buf,
                          size_t len)
{
    if (!len) return;
    switch (row->type) {
    case PSCOM_CONFIG_INT:
        snprintf(buf, len, "%d", *(const int *)row->var);
        break;
    case PSCOM_CONFIG_UINT: {
        unsigned v = *(const unsigned *)row->var;

        if (v == UINT_MAX)
            snprintf(buf, len, "inf");
        else
            snprintf(buf, len, "%u", v);
        break;
    }
    case PSCOM_CONFIG_SIZE: {
        size_t v = *(const size_t *)row->var;

        if (v == SIZE_MAX)
            snprintf(buf, len, "inf");
        else
            snprintf(buf, len, "%zu", v);
        break;
    }
    case PSCOM_CONFIG_BOOL:
        snprintf(buf, len, "%d", *(const int *)row->var ? 1 : 0);
        break;
    case PSCOM_CONFIG_STR:
    case PSCOM_CONFIG_DIR: {
        const char *s = *(char *const *)row->var;

        if (!s)
            snprintf(buf, len, "(unset)");
        else if (!*s)
            snprintf(buf, len, "\"\"");
        else
            snprintf(buf, len, "%s", s);
        break;
    }
    default:
        snprintf(buf, len, "?");
    }
}

static const pscom_config_range_t *range_of(const char *name)
{
    for (size_t i = ranges.n; i-- > 0;) {
        const pscom_config_range_t *r = ranges.v[i];
        if (strcmp(r->name, name) == 0) return r;
    }
    return NULL;
}

/* A bound as it is written: UINT_MAX of an unsigned row as "inf", sizes
 * with the largest exact k/M/G suffix. */
static void bound_str(pscom_config_type_t type, long long v, char *buf,
                      size_t len)
{
    static const char suffix[] = "GMk";

    if (type == PSCOM_CONFIG_UINT && v == UINT_MAX) {
        snprintf(buf, len, "inf");
        return;
    }
    if (type == PSCOM_CONFIG_SIZE && v > 0) {
        for (int i = 0; i < 3; i++) {
            long long unit = 1LL << (10 * (3 - i));

            if (v % unit == 0) {
                snprintf(buf, len, "%lld%c", v / unit, suffix[i]);
                return;
            }
        }
    }
    snprintf(buf, len, "%lld", v);
}

/* "min..max" of a row's range, or "" without one. */
static void range_str(const pscom_config_row_t *row, char *buf, size_t len)
{
    const pscom_config_range_t *r = range_of(row->name);
    char lo[32], hi[32];

    if (!r) {
        snprintf(buf, len, "%s", "");
        return;
    }
    bound_str(row->type, r->min, lo, sizeof(lo));
    bound_str(row->type, r->max, hi, sizeof(hi));
    snprintf(buf, len, "%s..%s", lo, hi);
}

/* Move a value from the environment into its row's range, saying so. */
static void entry_clamp(struct entry *e, const char *from, const char *text)
{
    const pscom_config_row_t *row = e->row;
    const pscom_config_range_t *r = range_of(row->name);
    long long v, to;
    bool above;
    char span[72], now[64];

    if (!r) return;
    switch (row->type) {
    case PSCOM_CONFIG_INT: v = *(int *)row->var; break;
    case PSCOM_CONFIG_UINT: v = *(unsigned *)row->var; break;
    case PSCOM_CONFIG_SIZE: {
        size_t z = *(size_t *)row->var;

        v = z > (size_t)LLONG_MAX ? LLONG_MAX : (long long)z;
        break;
    }
    default: return;
    }
    if (v >= r->min && v <= r->max) return;

    above = v > r->max;
    to = above ? r->max : r->min;
    switch (row->type) {
    case PSCOM_CONFIG_INT: *(int *)row->var = (int)to; break;
    case PSCOM_CONFIG_UINT: *(unsigned *)row->var = (unsigned)to; break;
    default: *(size_t *)row->var = (size_t)to; break;
    }
    range_str(row, span, sizeof(span));
    psc_config_value_str(row, now, sizeof(now));
    if (strcmp(from, row->name) != 0)
        psc_err("%s=\"%s\" (read for %s) is %s the range %s of %s; using %s",
                from, text, row->name, above ? "above" : "below", span,
                row->name, now);
    else
        psc_err("%s=\"%s\" is %s its range %s; using %s", from, text,
                above ? "above" : "below", span, now);
}

/* Default, then the row's own variable, else (also when its own value is
 * refused) its parent. A parent that is a row of its own reports its bad
 * value itself, once. */
static void entry_load(struct entry *e)
{
    const pscom_config_row_t *row = e->row;
    const char *text = pscom_env_get(row->name);
    const char *parent = row->parent ? pscom_env_get(row->parent) : NULL;
    char def[128], why[160];
    int rc;

    entry_set_default(e);
    psc_config_value_str(row, def, sizeof(def));

    if (text) {
        rc = entry_set(e, text);
        if (rc == 0) {
            e->src = SRC_ENVIRONMENT;
            entry_clamp(e, row->name, text);
            return;
        }
        if (parent)
            psc_err("%s=\"%s\" %s; reading %s instead", row->name, text,
                    row_refusal(row, rc, why, sizeof(why)), row->parent);
        else
            psc_err("%s=\"%s\" %s; keeping the default %s", row->name, text,
                    row_refusal(row, rc, why, sizeof(why)), def);
    }
    if (!parent) return;

    rc = entry_set(e, parent);
    if (rc == 0) {
        e->src = SRC_PARENT;
        entry_clamp(e, row->parent, parent);
    } else if (!entry_by_name(row->parent)) {
        psc_err("%s=\"%s\" (read for %s) %s; %s keeps its default %s",
                row->parent, parent, row->name,
                row_refusal(row, rc, why, sizeof(why)), row->name, def);
    }
}

static void entry_print_param(struct entry *e)
{
    char val[256];

    psc_config_value_str(e->row, val, sizeof(val));
    switch (e->src) {
    case SRC_DEFAULT:
        psc_log_write(PSC_LOG_INFO, "%s = %s (default)", e->row->name, val);
        break;
    case SRC_ENVIRONMENT:
        psc_log_write(PSC_LOG_INFO, "%s = %s (environment)", e->row->name,
                      val);
        break;
    case SRC_PARENT:
        psc_log_write(PSC_LOG_INFO, "%s = %s (from %s)", e->row->name, val,
                      e->row->parent);
        break;
    }
    e->printed = true;
}

void psc_config_print_params(int level)
{
    if (level <= 0) return;
    if (level > params_level) params_level = level;
    for (size_t i = 0; i < n_entries; i++) {
        struct entry *e = &entries[i];

        if (e->printed) continue;
        if (level >= 2 || e->src != SRC_DEFAULT) entry_print_param(e);
    }
}

static bool entries_grow(void)
{
    size_t cap = cap_entries ? cap_entries * 2 : 64;
    struct entry *n = realloc(entries, cap * sizeof(*n));

    if (!n) return false;
    entries = n;
    cap_entries = cap;
    return true;
}

void psc_config_register(const pscom_config_row_t *rows, size_t count)
{
    size_t first = n_entries;

    for (size_t i = 0; i < count; i++) {
        const pscom_config_row_t *row = &rows[i];
        const char *owner = row->owner ? row->owner : "core";
        struct entry *other;

        if (!row->name || !row->var || !type_valid(row->type)) {
            psc_err("bug: configuration row %zu of %s is incomplete (needs a "
                    "name, a known type and a variable); ignored",
                    i, owner);
            continue;
        }
        /* The same table registered again (a second pscom_init). */
        if (entry_of(row)) continue;

        other = entry_by_name(row->name);
        if (other) {
            psc_err("%s of %s is ignored: %s already registered a setting "
                    "of this name",
                    row->name, owner,
                    other->row->owner ? other->row->owner : "core");
            continue;
        }
        if (n_entries == cap_entries && !entries_grow()) {
            psc_err("out of memory registering %s of %s; it keeps its "
                    "compiled-in value",
                    row->name, owner);
            continue;
        }
        entries[n_entries++] = (struct entry){.row = row};
        entry_load(&entries[n_entries - 1]);
    }

    if (params_level > 0) {
        for (size_t i = first; i < n_entries; i++) {
            struct entry *e = &entries[i];

            if (params_level >= 2 || e->src != SRC_DEFAULT)
                entry_print_param(e);
        }
    }
}

void pscom_plugin_config_register(const pscom_config_row_t *rows,
                                  size_t count)
{
    psc_config_register(rows, count);
}

void pscom_plugin_config_ranges(const pscom_config_range_t *list,
                                size_t count)
{
    for (size_t i = 0; i < count; i++) {
        const pscom_config_range_t *r = &list[i];

        if (!r->name || r->min > r->max) {
            psc_err("bug: configuration range %zu%s%s is incomplete or "
                    "empty; ignored", i, r->name ? " of " : "",
                    r->name ? r->name : "");
            continue;
        }
        /* The same table declared again (a plugin started again). */
        if (range_of(r->name) == r) continue;
        if (!decl_add(&ranges, r))
            psc_err("out of memory declaring the range of %s; it is not "
                    "checked", r->name);
    }
}

void psc_config_words(const psc_config_words_t *list, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        const psc_config_words_t *w = &list[i];

        /* Declared again by a second pscom_init. */
        if (decl_known(&word_lists, w)) continue;
        if (!decl_add(&word_lists, w))
            psc_err("out of memory declaring the values of %s; any text is "
                    "taken", w->name);
    }
}

void psc_config_reload(void)
{
    for (size_t i = 0; i < n_entries; i++) entry_load(&entries[i]);
}

const char *psc_config_source(const pscom_config_row_t *row)
{
    struct entry *e = entry_of(row);

    if (!e) return "default";
    switch (e->src) {
    case SRC_ENVIRONMENT: return "environment";
    case SRC_PARENT: return row->parent;
    default: return "default";
    }
}

void psc_config_cleanup(void)
{
    for (size_t i = 0; i < n_entries; i++) {
        struct entry *e = &entries[i];

        if (!e->owned) continue;
        if (*(char **)e->row->var == e->owned) *(char **)e->row->var = NULL;
        free(e->owned);
    }
    free(entries);
    entries = NULL;
    n_entries = cap_entries = 0;
    decl_free(&ranges);
    decl_free(&word_lists);
    params_level = 0;

    pthread_mutex_lock(&env_dirs_lock);
    for (size_t i = 0; i < n_env_dirs; i++) free(env_dirs[i]);
    free(env_dirs);
    env_dirs = NULL;
    n_env_dirs = 0;
    pthread_mutex_unlock(&env_dirs_lock);
}

/* ---------------------------------------------------------------------- */
/* Unknown variables                                                      */
/* ---------------------------------------------------------------------- */

/* Edit distance (insertions, deletions, substitutions). */
static size_t levenshtein(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    size_t *prev, *cur, d;

    prev = malloc((lb + 1) * sizeof(*prev));
    cur = malloc((lb + 1) * sizeof(*cur));
    if (!prev || !cur) {
        free(prev);
        free(cur);
        return SIZE_MAX;
    }
    for (size_t j = 0; j <= lb; j++) prev[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t *t;

        cur[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t del = prev[j] + 1;
            size_t ins = cur[j - 1] + 1;
            size_t sub = prev[j - 1] + (a[i - 1] != b[j - 1]);

            cur[j] = del < ins ? del : ins;
            if (sub < cur[j]) cur[j] = sub;
        }
        t = prev;
        prev = cur;
        cur = t;
    }
    d = prev[lb];
    free(prev);
    free(cur);
    return d;
}

/* The registered name closest to name, if it is close enough to be a
 * plausible typo; NULL otherwise. */
static const char *closest_name(const char *name)
{
    size_t len = strlen(name);
    size_t limit = len / 3 > 2 ? len / 3 : 2;
    size_t best_d = SIZE_MAX;
    const char *best = NULL;

    for (size_t i = 0; i < n_entries; i++) {
        size_t d = levenshtein(name, entries[i].row->name);

        if (d < best_d) {
            best_d = d;
            best = entries[i].row->name;
        }
    }
    return best_d <= limit ? best : NULL;
}

static bool has_prefix(const char *name, const char *prefix)
{
    return !strncmp(name, prefix, strlen(prefix));
}

void psc_config_note_owner_set(const char *owner)
{
    for (size_t i = 0; i < n_entries; i++) {
        const pscom_config_row_t *row = entries[i].row;
        if (entries[i].src != SRC_ENVIRONMENT || !row->owner ||
            strcmp(row->owner, owner) != 0)
            continue;
        const char *val = pscom_env_get(row->name);
        psc_warn("%s=%s: %s", row->name, val ? val : "", row->help);
    }
}

int psc_config_check_unknown(void)
{
    return psc_config_check_unknown_filtered(NULL, NULL, NULL);
}

/* ParaStation's name of a plugin setting (only is its alias prefix,
 * "PSP_OPENIB_"): the setting of the same suffix here (instead,
 * "PSP_VERBS_"), if there is one. */
static const char *own_name(const char *name, const char *only,
                            const char *instead, char *buf, size_t len)
{
    if (!only || !instead) return NULL;
    int n = snprintf(buf, len, "%s%s", instead, name + strlen(only));
    if (n < 0 || (size_t)n >= len || !entry_by_name(buf)) return NULL;
    return buf;
}

int psc_config_check_unknown_filtered(const char *const *skip,
                                      const char *only, const char *instead)
{
    int unknown = 0;

    for (char **ep = environ; ep && *ep; ep++) {
        const char *eq;
        const char *suggestion;
        char *name;
        bool skipped = false;

        if (strncmp(*ep, "PSP_", 4) != 0) continue;
        if (only && !has_prefix(*ep, only)) continue;
        for (const char *const *p = skip; p && *p; p++)
            skipped |= has_prefix(*ep, *p);
        if (skipped) continue;
        eq = strchr(*ep, '=');
        name = eq ? strndup(*ep, (size_t)(eq - *ep)) : strdup(*ep);
        if (!name) continue;
        char own[128];
        if (!entry_by_name(name)) {
            unknown++;
            suggestion = closest_name(name);
            if (own_name(name, only, instead, own, sizeof(own)))
                psc_err("%s is set, but this library does not read "
                        "ParaStation pscom's name for it; its setting is %s "
                        "(`pscom_info -c` says what it means)",
                        name, own);
            else if (suggestion)
                psc_err("%s is set but no setting of this name exists; did "
                        "you mean %s?",
                        name, suggestion);
            else
                psc_err("%s is set but no setting of this name exists "
                        "(`pscom_info -c` lists them all)",
                        name);
        }
        free(name);
    }
    return unknown;
}

/* ---------------------------------------------------------------------- */
/* Printing                                                               */
/* ---------------------------------------------------------------------- */

static const char *owner_of(const pscom_config_row_t *row)
{
    return row->owner ? row->owner : "core";
}

/* Core first, then owners alphabetically; registration order within. */
static int entry_order(const void *pa, const void *pb)
{
    const struct entry *a = *(const struct entry *const *)pa;
    const struct entry *b = *(const struct entry *const *)pb;
    const char *oa = owner_of(a->row), *ob = owner_of(b->row);
    int ca = strcmp(oa, "core") == 0, cb = strcmp(ob, "core") == 0;
    int c;

    if (ca != cb) return cb - ca;
    c = strcmp(oa, ob);
    if (c) return c;
    return a < b ? -1 : a > b;
}

/* The entries in print order (free the array); NULL when empty. */
static struct entry **sorted_entries(void)
{
    struct entry **v;

    if (!n_entries) return NULL;
    v = malloc(n_entries * sizeof(*v));
    if (!v) return NULL;
    for (size_t i = 0; i < n_entries; i++) v[i] = &entries[i];
    qsort(v, n_entries, sizeof(*v), entry_order);
    return v;
}

static const char *default_text(const pscom_config_row_t *row)
{
    if (!row->defval) return "(unset)";
    if (!*row->defval) return "\"\"";
    return row->defval;
}

static int maxi(int a, size_t b)
{
    return (size_t)a > b ? a : (int)b;
}

static void print_text(FILE *out, struct entry **v)
{
    int wn = 8, wt = 4, wd = 7, wv = 5, ws = 6, wo = 5;
    char val[256], span[72];

    for (size_t i = 0; i < n_entries; i++) {
        const pscom_config_row_t *row = v[i]->row;

        psc_config_value_str(row, val, sizeof(val));
        wn = maxi(wn, strlen(row->name));
        wt = maxi(wt, strlen(type_name(row->type)));
        wd = maxi(wd, strlen(default_text(row)));
        wv = maxi(wv, strlen(val));
        ws = maxi(ws, strlen(psc_config_source(row)));
        wo = maxi(wo, strlen(owner_of(row)));
    }

    fprintf(out, "%-*s  %-*s  %-*s  %-*s  %-*s  %-*s  %s\n", wn, "Variable",
            wt, "Type", wd, "Default", wv, "Value", ws, "Source", wo, "Owner",
            "Description");
    for (size_t i = 0; i < n_entries; i++) {
        const pscom_config_row_t *row = v[i]->row;

        psc_config_value_str(row, val, sizeof(val));
        fprintf(out, "%-*s  %-*s  %-*s  %-*s  %-*s  %-*s  %s", wn, row->name,
                wt, type_name(row->type), wd, default_text(row), wv, val, ws,
                psc_config_source(row), wo, owner_of(row),
                row->help ? row->help : "");
        range_str(row, span, sizeof(span));
        if (*span) fprintf(out, " (range %s)", span);
        if (row->parent) fprintf(out, " (falls back to %s)", row->parent);
        fputc('\n', out);
    }
}

/* Text for a markdown table cell: '|' must not end the cell, "<name>" must
 * not be taken for an HTML tag, '*' not for emphasis. */
static void md_cell(FILE *out, const char *s)
{
    for (; s && *s; s++) {
        switch (*s) {
        case '|': fputs("\\|", out); break;
        case '*': fputs("\\*", out); break;
        case '<': fputs("&lt;", out); break;
        case '>': fputs("&gt;", out); break;
        case '\n': fputc(' ', out); break;
        default: fputc(*s, out);
        }
    }
}

static void md_section_title(FILE *out, const char *owner)
{
    if (strcmp(owner, "core") == 0)
        fprintf(out, "## The library core\n\n");
    else if (strcmp(owner, "mpi") == 0)
        fprintf(out, "## Read by ParaStation MPI\n\n"
                     "ParaStation MPI reads these through "
                     "`pscom_env_get_*()`; they are listed so that setting "
                     "them is not reported as unknown.\n\n");
    else if (strcmp(owner, "parastation") == 0)
        fprintf(out, "## ParaStation pscom's, without effect here\n\n"
                     "ParaStation pscom reads these; this library accepts "
                     "them, so that a job script written for it is not told "
                     "they do not exist, and says at `PSP_DEBUG` >= 2 that "
                     "a set one has no effect. Each says what to use "
                     "instead, where there is something.\n\n");
    else
        fprintf(out, "## Plugin `%s`\n\n", owner);
}

static void print_markdown(FILE *out, struct entry **v)
{
    const char *section = NULL;
    char span[72];

    fprintf(out,
            "# Configuration reference\n"
            "\n"
            "This page is generated by `pscom_info -c --markdown` from the "
            "library's table of settings; do not edit it by hand.\n"
            "\n"
            "Every setting is an environment variable. Integers are decimal "
            "or hexadecimal (`0x` prefix). Unsigned integers and sizes also "
            "accept `inf` (the largest value) and `auto` (the default); "
            "sizes accept the suffixes `k`, `M` and `G` (powers of 1024). "
            "Booleans accept `0`/`1`, `yes`/`no`, `true`/`false` and "
            "`on`/`off`. A value that does not parse (an empty one too) is "
            "reported and the default kept, or, for a row that falls back "
            "to another variable, that variable read; a value outside the range a row gives is "
            "reported and the nearer end of the range used. A set `PSP_*` variable that no row below "
            "knows is reported with the closest known name (not those of a plugin that "
            "its `PSP_<NAME>=0` disables). `pscom_info -c` "
            "shows the current values and where they came from.\n");

    for (size_t i = 0; i < n_entries; i++) {
        const pscom_config_row_t *row = v[i]->row;
        const char *owner = owner_of(row);

        if (!section || strcmp(section, owner) != 0) {
            section = owner;
            fputc('\n', out);
            md_section_title(out, owner);
            fprintf(out, "| Variable | Type | Default | Description |\n"
                         "| --- | --- | --- | --- |\n");
        }
        fprintf(out, "| `%s` | %s | ", row->name, type_name(row->type));
        if (row->defval)
            fprintf(out, "`%s`", *row->defval ? row->defval : "\"\"");
        else
            fprintf(out, "unset");
        fprintf(out, " | ");
        md_cell(out, row->help);
        range_str(row, span, sizeof(span));
        if (*span || row->parent) {
            size_t n = row->help ? strlen(row->help) : 0;

            if (n && row->help[n - 1] != '.') fputc('.', out);
        }
        if (*span) fprintf(out, " Range: %s.", span);
        if (row->parent)
            fprintf(out, " When unset, `%s` is used.", row->parent);
        fprintf(out, " |\n");
    }
}

void psc_config_print(FILE *out, int markdown)
{
    struct entry **v = sorted_entries();

    if (!v && n_entries) {
        fprintf(out, "out of memory sorting the configuration table\n");
        return;
    }
    if (markdown)
        print_markdown(out, v);
    else
        print_text(out, v);
    free(v);
}

/* ---------------------------------------------------------------------- */
/* pscom_env_get_*                                                        */
/* ---------------------------------------------------------------------- */

/* Read name through the hook and parse it as type into tmp.
 * 1: tmp holds a new value; 0: keep the current one (unset, "auto" or bad). */
static int env_read(const char *name, pscom_config_type_t type, void *tmp,
                    const char *current)
{
    const char *text = name ? pscom_env_get(name) : NULL;
    int rc;

    if (!text) {
        if (psc_settings.debug_param >= 2)
            psc_log_write(PSC_LOG_INFO, "%s = %s (default)",
                          name ? name : "(null)", current);
        return 0;
    }
    rc = parse_typed(type, text, tmp);
    if (rc == PARSE_AUTO) {
        if (psc_settings.debug_param >= 1)
            psc_log_write(PSC_LOG_INFO, "%s = %s (auto: default)", name,
                          current);
        return 0;
    }
    if (rc != 0) {
        char why[160];
        psc_err("%s=\"%s\" %s; keeping the value %s", name, text,
                refusal(type, rc, why, sizeof(why)), current);
        return 0;
    }
    return 1;
}

static void env_print(const char *name, const char *value)
{
    if (psc_settings.debug_param >= 1)
        psc_log_write(PSC_LOG_INFO, "%s = %s (environment)", name, value);
}

void pscom_env_get_int(int *val, const char *name)
{
    char cur[32], now[32];
    int v;

    snprintf(cur, sizeof(cur), "%d", *val);
    if (!env_read(name, PSCOM_CONFIG_INT, &v, cur)) return;
    *val = v;
    snprintf(now, sizeof(now), "%d", v);
    env_print(name, now);
}

static void uint_str(char *buf, size_t len, unsigned v)
{
    if (v == UINT_MAX)
        snprintf(buf, len, "inf");
    else
        snprintf(buf, len, "%u", v);
}

void pscom_env_get_uint(unsigned int *val, const char *name)
{
    char cur[32], now[32];
    unsigned v;

    uint_str(cur, sizeof(cur), *val);
    if (!env_read(name, PSCOM_CONFIG_UINT, &v, cur)) return;
    *val = v;
    uint_str(now, sizeof(now), v);
    env_print(name, now);
}

static void size_str(char *buf, size_t len, size_t v)
{
    if (v == SIZE_MAX)
        snprintf(buf, len, "inf");
    else
        snprintf(buf, len, "%zu", v);
}

void pscom_env_get_size_t(size_t *val, const char *name)
{
    char cur[32], now[32];
    size_t v;

    size_str(cur, sizeof(cur), *val);
    if (!env_read(name, PSCOM_CONFIG_SIZE, &v, cur)) return;
    *val = v;
    size_str(now, sizeof(now), v);
    env_print(name, now);
}

/* The environment's own string is handed out (as pscom does): it lives as
 * long as the variable is not changed. */
void pscom_env_get_str(char **val, const char *name)
{
    char *text = name ? pscom_env_get(name) : NULL;

    if (!text) {
        if (psc_settings.debug_param >= 2)
            psc_log_write(PSC_LOG_INFO, "%s = %s (default)",
                          name ? name : "(null)", *val ? *val : "(unset)");
        return;
    }
    *val = text;
    env_print(name, text);
}

/* As pscom_env_get_str; when a '/' has to be added the string is allocated
 * and stays valid until psc_config_cleanup() at library teardown. */
void pscom_env_get_dir(char **val, const char *name)
{
    char *text = name ? pscom_env_get(name) : NULL;
    size_t n;
    char *s, **grown;

    if (!text) {
        if (psc_settings.debug_param >= 2)
            psc_log_write(PSC_LOG_INFO, "%s = %s (default)",
                          name ? name : "(null)", *val ? *val : "(unset)");
        return;
    }
    n = strlen(text);
    if (n == 0 || text[n - 1] == '/') {
        *val = text;
        env_print(name, text);
        return;
    }

    s = dir_dup(text);
    pthread_mutex_lock(&env_dirs_lock);
    grown = s ? realloc(env_dirs, (n_env_dirs + 1) * sizeof(*grown)) : NULL;
    if (grown) {
        env_dirs = grown;
        env_dirs[n_env_dirs++] = s;
    }
    pthread_mutex_unlock(&env_dirs_lock);
    if (!grown) {
        free(s);
        psc_err("out of memory reading %s=\"%s\"; keeping the value %s", name,
                text, *val ? *val : "(unset)");
        return;
    }
    *val = s;
    env_print(name, s);
}
