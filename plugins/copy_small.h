/*
 * Copying the few bytes of a small message without a library call (shared
 * by the plugins): most frames of small messages are an 8-byte header, a
 * short xheader and a few bytes, and a call to memcpy costs more than the
 * copy. For sizes up to a few hundred bytes; d and s must not overlap.
 */
#ifndef PSCOM_COPY_SMALL_H
#define PSCOM_COPY_SMALL_H

#include <stddef.h>
#include <stdint.h>

static inline void copy_small(void *dst, const void *src, size_t n)
{
    uint8_t *d = dst;
    const uint8_t *s = src;
    if (n >= 16) {
        size_t i = 0;
        for (; i + 16 <= n; i += 16) __builtin_memcpy(d + i, s + i, 16);
        if (i < n) __builtin_memcpy(d + n - 16, s + n - 16, 16);
    } else if (n >= 8) {
        uint64_t a, b;
        __builtin_memcpy(&a, s, 8);
        __builtin_memcpy(&b, s + n - 8, 8);
        __builtin_memcpy(d, &a, 8);
        __builtin_memcpy(d + n - 8, &b, 8);
    } else if (n >= 4) {
        uint32_t a, b;
        __builtin_memcpy(&a, s, 4);
        __builtin_memcpy(&b, s + n - 4, 4);
        __builtin_memcpy(d, &a, 4);
        __builtin_memcpy(d + n - 4, &b, 4);
    } else if (n) {
        d[0] = s[0];
        d[n / 2] = s[n / 2];
        d[n - 1] = s[n - 1];
    }
}

#endif
