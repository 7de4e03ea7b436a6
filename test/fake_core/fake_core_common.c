/*
 * Core services shared by the plugin unit tests' fake cores (see
 * fake_core_common.h).
 */
#include "fake_core_common.h"

#include <ctype.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char fake_core_log[16384];
int fake_core_log_level;
char fake_core_reason[512];
void (*fake_core_row_hook)(const pscom_config_row_t *row);

void fake_core_reset(void)
{
    fake_core_log[0] = '\0';
    fake_core_reason[0] = '\0';
}

size_t fake_core_size(const char *v)
{
    unsigned long long n;
    char *end;

    if (!v) return 0;
    if (!strcmp(v, "inf")) return SIZE_MAX;
    n = strtoull(v, &end, 0);
    switch (tolower((unsigned char)*end)) {
    case 'k': n <<= 10; break;
    case 'm': n <<= 20; break;
    case 'g': n <<= 30; break;
    }
    return (size_t)n;
}

/* Ranges the plugin declared; values are moved into them as the core
 * does (without its message). */
static const pscom_config_range_t *fake_ranges[64];
static size_t fake_n_ranges;

void pscom_plugin_config_ranges(const pscom_config_range_t *ranges,
                                size_t count)
{
    for (size_t i = 0; i < count; i++) {
        size_t k = 0;

        /* A plugin initialised again declares the same table again. */
        while (k < fake_n_ranges && fake_ranges[k] != &ranges[i]) k++;
        if (k == fake_n_ranges && fake_n_ranges < 64)
            fake_ranges[fake_n_ranges++] = &ranges[i];
    }
}

static long long fake_clamp(const char *name, long long v)
{
    for (size_t i = 0; i < fake_n_ranges; i++) {
        const pscom_config_range_t *r = fake_ranges[i];

        if (strcmp(r->name, name) != 0) continue;
        return v < r->min ? r->min : v > r->max ? r->max : v;
    }
    return v;
}

/* A size: "inf" stays SIZE_MAX unless a range caps it. */
static size_t fake_clamp_size(const char *name, size_t z)
{
    long long v = z > (size_t)LLONG_MAX ? LLONG_MAX : (long long)z;
    long long c = fake_clamp(name, v);

    return c == v ? z : (size_t)c;
}

void pscom_plugin_config_register(const pscom_config_row_t *rows, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        const pscom_config_row_t *r = &rows[i];
        const char *v = getenv(r->name);
        if (!v && r->parent) v = getenv(r->parent);
        if (!v) v = r->defval;
        if (fake_core_row_hook) fake_core_row_hook(r);
        switch (r->type) {
        case PSCOM_CONFIG_INT:
            *(int *)r->var = (int)fake_clamp(r->name, v ? atoi(v) : 0);
            break;
        case PSCOM_CONFIG_BOOL:
            *(int *)r->var = v ? atoi(v) : 0;
            break;
        case PSCOM_CONFIG_UINT: {
            size_t z = fake_core_size(v); /* "inf": UINT_MAX, as the core */

            *(unsigned *)r->var = (unsigned)fake_clamp(
                r->name, z > UINT_MAX ? (long long)UINT_MAX : (long long)z);
            break;
        }
        case PSCOM_CONFIG_SIZE:
            *(size_t *)r->var = fake_clamp_size(r->name, fake_core_size(v));
            break;
        case PSCOM_CONFIG_STR:
        case PSCOM_CONFIG_DIR:
            *(const char **)r->var = v;
            break;
        }
    }
}

void pscom_plugin_log(int level, const char *fmt, ...)
{
    size_t off = strlen(fake_core_log);
    va_list ap;

    if (off + 2 < sizeof(fake_core_log)) {
        va_start(ap, fmt);
        vsnprintf(fake_core_log + off, sizeof(fake_core_log) - off - 1, fmt,
                  ap);
        va_end(ap);
        strcat(fake_core_log, "\n");
    }
    if (getenv("FAKE_CORE_LOG")) {
        va_start(ap, fmt);
        fprintf(stderr, "[log %d] ", level);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        va_end(ap);
    }
}

int pscom_plugin_log_level(void)
{
    return getenv("FAKE_CORE_LOG") ? 6 : fake_core_log_level;
}

void pscom_plugin_set_reason(const char *reason)
{
    snprintf(fake_core_reason, sizeof(fake_core_reason), "%s", reason);
}

pscom_connection_t *pscom_plugin_con_pub(pscom_plugin_con_t *con)
{
    (void)con;
    return NULL;
}

int pscom_plugin_fd_mod(int fd, uint32_t events)
{
    (void)fd;
    (void)events;
    return 0;
}

int fake_core_collect(uint8_t *dst, size_t *have, size_t need,
                      const uint8_t **p, size_t *len)
{
    size_t take = need - *have;
    if (take > *len) take = *len;
    memcpy(dst + *have, *p, take);
    *have += take;
    *p += take;
    *len -= take;
    return *have == need;
}

int fake_core_frame_iov(struct iovec *iov, int *n, int iov_max,
                        const void *head, size_t head_len, const void *body,
                        size_t body_len, size_t *skip, size_t *sum)
{
    struct iovec parts[2] = {{(void *)head, head_len},
                             {(void *)body, body_len}};

    for (int k = 0; k < 2; k++) {
        if (*skip >= parts[k].iov_len) {
            *skip -= parts[k].iov_len;
            continue;
        }
        if (*n == iov_max) return -1;
        iov[*n].iov_base = (char *)parts[k].iov_base + *skip;
        iov[*n].iov_len = parts[k].iov_len - *skip;
        *sum += iov[*n].iov_len;
        *skip = 0;
        (*n)++;
    }
    return 0;
}

int fake_core_holds;

void pscom_plugin_hold_progress(const char *name, int hold)
{
    (void)name;
    fake_core_holds += hold ? 1 : -1;
}
