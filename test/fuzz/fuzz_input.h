/*
 * What the libFuzzer harnesses share: a finding aborts (CHECK), and the
 * input read as a program's operands, each taking what is left of the
 * input and zeros past its end.
 */
#ifndef FUZZ_INPUT_H
#define FUZZ_INPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__,  \
                    #cond);                                                    \
            abort();                                                           \
        }                                                                      \
    } while (0)

struct input {
    const uint8_t *p;
    size_t left;
};

/* n bytes into dst, or false (and nothing taken) when fewer are left. */
static inline bool take(struct input *in, void *dst, size_t n)
{
    if (in->left < n) return false;
    memcpy(dst, in->p, n);
    in->p += n;
    in->left -= n;
    return true;
}

/* The next byte, 0 past the end. */
static inline unsigned byte(struct input *in)
{
    uint8_t b = 0;
    take(in, &b, 1);
    return b;
}

/* The next two bytes, little endian, 0 past the end. */
static inline unsigned u16(struct input *in)
{
    unsigned lo = byte(in);
    return lo | byte(in) << 8;
}

/* Up to n bytes into dst, as many as are left; how many. */
static inline size_t take_up_to(struct input *in, void *dst, size_t n)
{
    if (n > in->left) n = in->left;
    take(in, dst, n);
    return n;
}

#endif
