/*
 * pscom_run: line assembly for --tag-output.
 *
 * Bytes read from a child's stdout or stderr pipe are cut into lines and
 * each line is written once, prefixed with the child's tag ("[3] " or
 * "[1:0] "), so lines of different ranks never interleave inside a line.
 * A line longer than PSR_LINE_MAX is written in pieces, each tagged and
 * ended with a newline.  Pure: the writer is a callback.
 */
#ifndef PSR_OUTPUT_H
#define PSR_OUTPUT_H

#include <stddef.h>

#define PSR_LINE_MAX 65536

/* Write one complete, tagged line (text includes the final newline). */
typedef void (*psr_line_writer_cb_t)(void *arg, const char *text, size_t len);

typedef struct psr_linebuf {
    char *buf;          /* pending partial line, malloc'ed, owned */
    size_t len;
    size_t cap;
} psr_linebuf_t;

/* Feed n bytes; complete lines go to write(arg, ...) with tag in front. */
void psr_lb_feed(psr_linebuf_t *lb, const char *tag, const char *data, size_t n,
                 psr_line_writer_cb_t write, void *arg);

/* End of stream: a pending partial line is written with a newline added. */
void psr_lb_flush(psr_linebuf_t *lb, const char *tag, psr_line_writer_cb_t write, void *arg);

/* Release the buffer. */
void psr_lb_free(psr_linebuf_t *lb);

#endif /* PSR_OUTPUT_H */
