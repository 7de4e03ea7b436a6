/*
 * The parts of a fake core that the plugin unit tests (test/ofi, test/ucx,
 * test/verbs) share: the services of pscom_plugin.h that do not depend on
 * how a test models a connection. Configuration rows are read from the
 * environment (a row's own name, then its parent's, then its default), log
 * lines are kept for the test to search, and the reason a plugin gives for
 * not running is kept too.
 *
 * Each test's own fake core adds the connection services (send queue,
 * receive side, errors), which differ with what the test checks.
 * fake_core_nofd.c adds descriptor services that only accept, for tests
 * that do not drive a plugin through its descriptors.
 */
#ifndef FAKE_CORE_COMMON_H
#define FAKE_CORE_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "pscom_plugin.h"

/* Every line the plugin logged, each ending in '\n' (cut off when full).
 * With FAKE_CORE_LOG set in the environment the lines also go to stderr and
 * pscom_plugin_log_level() reports 6. */
extern char fake_core_log[16384];

/* What pscom_plugin_log_level() reports (unless FAKE_CORE_LOG is set). */
extern int fake_core_log_level;

/* What the plugin last gave pscom_plugin_set_reason(). */
extern char fake_core_reason[512];

/* Called with every row pscom_plugin_config_register() sees, or NULL. */
extern void (*fake_core_row_hook)(const pscom_config_row_t *row);

/* Holds pscom_plugin_hold_progress() took, less those it released. */
extern int fake_core_holds;

/* Empty the log and the reason. */
void fake_core_reset(void);

/* A size setting: "inf" (SIZE_MAX), or a number with an optional k, m or g
 * (either case). NULL is 0. */
size_t fake_core_size(const char *v);

/* Append the parts of a frame (head, then body) that remain after the first
 * *skip bytes to iov[*n...iov_max), adding their lengths to *sum and using
 * up *skip. -1 when iov filled up before the frame's end, else 0. */
int fake_core_frame_iov(struct iovec *iov, int *n, int iov_max,
                        const void *head, size_t head_len, const void *body,
                        size_t body_len, size_t *skip, size_t *sum);

/* Move bytes from the stream (*p, *len) into dst until it holds `need`
 * (*have counts what it holds). 1 once it does, 0 when the stream ran out
 * first. */
int fake_core_collect(uint8_t *dst, size_t *have, size_t need,
                      const uint8_t **p, size_t *len);

#endif
