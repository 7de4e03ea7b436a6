/*
 * Test helpers: build wire frames and feed them into connections that have
 * no transport, through the same upcall a plugin uses.
 */
#ifndef TEST_FRAMES_H
#define TEST_FRAMES_H

#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core.h"

struct frame {
    uint8_t buf[1 << 16];
    size_t len;
};

/* header + xheader + data as one frame */
static inline void frame_make(struct frame *f, uint8_t type, const void *x,
                              size_t xlen, const void *data, uint64_t dlen,
                              size_t copy_len)
{
    pscom_header_net_t h = {0};
    h.xheader_len = (uint16_t)xlen;
    h.msg_type = type;
    h.data_len = dlen;
    memcpy(f->buf, &h, sizeof(h));
    if (xlen) memcpy(f->buf + sizeof(h), x, xlen);
    if (copy_len) memcpy(f->buf + sizeof(h) + xlen, data, copy_len);
    f->len = sizeof(h) + xlen + copy_len;
}

/* A user message with a 4-byte tag as xheader. */
static inline void frame_user(struct frame *f, uint32_t tag, const void *data,
                              size_t len)
{
    frame_make(f, PSC_MSG_USER, &tag, sizeof(tag), data, len, len);
}

static inline int feed(pscom_connection_t *c, const struct frame *f)
{
    return pscom_plugin_rx_push(con_of(c), f->buf, f->len);
}

/* A call that does not return fails the test program at once instead of
 * leaving it to the suite's timeout (cmocka named the test before). */
static inline void watchdog_fire(int sig)
{
    (void)sig;
    static const char m[] = "a call did not return within the watchdog's "
                            "time\n";
    (void)!write(2, m, sizeof(m) - 1);
    _exit(1);
}

static inline void watchdog_start(unsigned seconds)
{
    signal(SIGALRM, watchdog_fire);
    alarm(seconds);
}

static inline void watchdog_stop(void)
{
    alarm(0);
}

#endif
