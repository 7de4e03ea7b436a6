/*
 * pscom_run: line assembly for --tag-output.
 */
#include <stdlib.h>
#include <string.h>

#include "output.h"

/* Emit tag + text[0..len) + "\n" as one write. */
static void emit(const char *tag, const char *text, size_t len,
                 psr_line_writer_cb_t write, void *arg)
{
    size_t tlen = strlen(tag);
    char small[1024];
    char *line = tlen + len + 1 <= sizeof(small) ? small : malloc(tlen + len + 1);
    if (!line) {
        /* Out of memory: keep the text, lose only the atomicity. */
        write(arg, tag, tlen);
        write(arg, text, len);
        write(arg, "\n", 1);
        return;
    }
    memcpy(line, tag, tlen);
    memcpy(line + tlen, text, len);
    line[tlen + len] = '\n';
    write(arg, line, tlen + len + 1);
    if (line != small) free(line);
}

static int reserve(psr_linebuf_t *lb, size_t need)
{
    if (lb->cap >= need) return 0;
    size_t cap = lb->cap ? lb->cap : 256;
    while (cap < need) cap *= 2;
    char *b = realloc(lb->buf, cap);
    if (!b) return -1;
    lb->buf = b;
    lb->cap = cap;
    return 0;
}

void psr_lb_feed(psr_linebuf_t *lb, const char *tag, const char *data, size_t n,
                 psr_line_writer_cb_t write, void *arg)
{
    while (n > 0) {
        const char *nl = memchr(data, '\n', n);
        size_t seg = nl ? (size_t)(nl - data) : n;     /* bytes before the newline */
        size_t room = PSR_LINE_MAX - lb->len;
        int complete = nl && seg <= room;              /* the line ends in this piece */
        size_t take = seg <= room ? seg : room;

        if (complete && lb->len == 0) {
            /* Whole line in the input: no copy. */
            emit(tag, data, take, write, arg);
        } else if (reserve(lb, lb->len + take) == 0) {
            memcpy(lb->buf + lb->len, data, take);
            lb->len += take;
            if (complete || lb->len == PSR_LINE_MAX) {
                emit(tag, lb->buf, lb->len, write, arg);
                lb->len = 0;
            }
        } else {
            /* Cannot buffer: write what is pending, then this piece. */
            if (lb->len) emit(tag, lb->buf, lb->len, write, arg);
            lb->len = 0;
            emit(tag, data, take, write, arg);
        }
        take += complete;       /* the newline itself */
        data += take;
        n -= take;
    }
}

void psr_lb_flush(psr_linebuf_t *lb, const char *tag, psr_line_writer_cb_t write, void *arg)
{
    if (lb->len) emit(tag, lb->buf, lb->len, write, arg);
    lb->len = 0;
}

void psr_lb_free(psr_linebuf_t *lb)
{
    free(lb->buf);
    lb->buf = NULL;
    lb->len = lb->cap = 0;
}
