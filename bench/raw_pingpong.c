/*
 * raw_pingpong — the baseline for pscom_bench: the same measurement over a
 * plain TCP socket on the loopback, with no library in between.
 *
 * It forks its peer like pscom_bench does; the parent is the server, the
 * child the client, which times and prints. Both sides busy-poll a
 * non-blocking socket (send/recv with MSG_DONTWAIT in a loop) with
 * TCP_NODELAY and the kernel's buffer autotuning. The size list, the
 * iteration rules, the window scheme of --bw/--bidir and the output columns
 * and JSON keys are those of pscom_bench, so the two can be compared line by
 * line. Messages carry no header; a 0-byte message travels as one byte so
 * that a round trip still happens.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"

struct opts {
    struct bench_opts c;
};

struct side {
    int fd;
    int is_client;
    const struct opts *o;
    unsigned char *sbuf;
    unsigned char *rbuf[WINDOW];
    unsigned nrbuf;
    double *times;
};

/* ---------------------------------------------------------------------- */
/* Helpers (the rest is shared with pscom_bench: bin/bench_util.h)        */
/* ---------------------------------------------------------------------- */

/* ---------------------------------------------------------------------- */
/* Busy-polling transfers                                                 */
/* ---------------------------------------------------------------------- */

/* Send scount messages of slen bytes, all from sbuf, and receive rcount
 * messages of rlen bytes into rbuf[0..rcount-1], both at the same time. */
static void xfer(int fd, const unsigned char *sbuf, size_t slen,
                 unsigned scount, unsigned char **rbuf, size_t rlen,
                 unsigned rcount)
{
    size_t stot = slen * scount, rtot = rlen * rcount, sp = 0, rp = 0;

    while (sp < stot || rp < rtot) {
        ssize_t n;

        if (sp < stot) {
            size_t off = sp % slen;

            n = send(fd, sbuf + off, slen - off, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (n > 0)
                sp += (size_t)n;
            else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                fail("send failed while %s at size %zu B, iteration %u: %s",
                     g_phase, (size_t)g_size, (unsigned)g_iter,
                     strerror(errno));
        }
        if (rp < rtot) {
            size_t off = rp % rlen;

            n = recv(fd, rbuf[rp / rlen] + off, rlen - off, MSG_DONTWAIT);
            if (n > 0)
                rp += (size_t)n;
            else if (n == 0)
                fail("the peer closed the connection while %s at size %zu B, "
                     "iteration %u",
                     g_phase, (size_t)g_size, (unsigned)g_iter);
            else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                fail("recv failed while %s at size %zu B, iteration %u: %s",
                     g_phase, (size_t)g_size, (unsigned)g_iter,
                     strerror(errno));
        }
    }
}

static void send_msgs(int fd, const void *buf, size_t len, unsigned count)
{
    xfer(fd, buf, len, count, NULL, 1, 0);
}

static void recv_msgs(int fd, unsigned char **bufs, size_t len, unsigned count)
{
    xfer(fd, NULL, 1, 0, bufs, len, count);
}

static void send_ack(int fd, uint32_t v)
{
    send_msgs(fd, &v, sizeof(v), 1);
}

static void recv_ack(int fd, uint32_t expected)
{
    uint32_t v;
    unsigned char *p = (unsigned char *)&v;

    recv_msgs(fd, &p, sizeof(v), 1);
    if (v != expected)
        fail("ack out of order: got %u, expected %u (size %zu B)",
             (unsigned)v, (unsigned)expected, (size_t)g_size);
}

static void tune_socket(int fd)
{
    int one = 1;

    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)))
        fail("setsockopt TCP_NODELAY: %s", strerror(errno));
    if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK))
        fail("fcntl O_NONBLOCK: %s", strerror(errno));
}

/* ---------------------------------------------------------------------- */
/* The measured loops                                                     */
/* ---------------------------------------------------------------------- */

static void run_size(struct side *s, size_t size, unsigned iters,
                     unsigned warm)
{
    const struct opts *o = s->o;
    size_t wlen = size ? size : 1; /* bytes on the wire */
    unsigned n = iters + warm, it;
    int client = s->is_client, verify = o->c.verify;
    unsigned sdir = client ? DIR_C2S : DIR_S2C, rdir = client ? DIR_S2C : DIR_C2S;
    struct tick_span span;

    /* A ping-pong's round trip runs from one reply to the next, as in
     * pscom_bench: one clock read per round trip. */
    uint64_t t0, t1 = 0;
    tick_span_start(&span);
    t0 = ticks();
    for (it = 0; it < n; it++) {
        unsigned k;

        g_iter = it;
        if (verify) {
            pat_fill(s->sbuf, size, pat_seed(size, it, sdir));
            t0 = ticks();
        }
        if (o->c.mode == MODE_PINGPONG) {
            if (client) {
                send_msgs(s->fd, s->sbuf, wlen, 1);
                recv_msgs(s->fd, s->rbuf, wlen, 1);
                t1 = ticks();
            } else {
                recv_msgs(s->fd, s->rbuf, wlen, 1);
                if (verify)
                    verify_or_die(s->rbuf[0], size, size, it, rdir, NO_SLOT, "");
                send_msgs(s->fd, s->sbuf, wlen, 1);
                continue;
            }
            if (verify)
                verify_or_die(s->rbuf[0], size, size, it, rdir, NO_SLOT, "");
        } else if (client) {
            t0 = ticks();
            if (o->c.mode == MODE_BIDIR)
                xfer(s->fd, s->sbuf, wlen, WINDOW, s->rbuf, wlen, WINDOW);
            else
                send_msgs(s->fd, s->sbuf, wlen, WINDOW);
            recv_ack(s->fd, it);
            t1 = ticks();
            if (verify && o->c.mode == MODE_BIDIR)
                for (k = 0; k < WINDOW; k++)
                    verify_or_die(s->rbuf[k], size, size, it, rdir, k, "");
        } else {
            if (o->c.mode == MODE_BIDIR)
                xfer(s->fd, s->sbuf, wlen, WINDOW, s->rbuf, wlen, WINDOW);
            else
                recv_msgs(s->fd, s->rbuf, wlen, WINDOW);
            if (verify)
                for (k = 0; k < WINDOW; k++)
                    verify_or_die(s->rbuf[k], size, size, it, rdir, k, "");
            send_ack(s->fd, it);
            continue;
        }
        if (it >= warm) s->times[it - warm] = (double)(t1 - t0);
        t0 = t1;
    }
    if (client)
        times_scale(s->times, iters, tick_span_rate(&span) /
                                         (o->c.mode == MODE_PINGPONG ? 2000.0
                                                                     : 1000.0 * WINDOW));
}

static void print_result(const struct opts *o, size_t size, unsigned iters,
                         double med, double p99)
{
    double bytes = (double)size * (o->c.mode == MODE_BIDIR ? 2 : 1);
    double bw = med > 0 ? bytes / med : 0;

    if (o->c.json)
        printf("{\"size\": %zu, \"iters\": %u, \"lat_us_median\": %.3f, "
               "\"lat_us_p99\": %.3f, \"bw_MBps\": %.2f, \"transport\": "
               "\"raw-tcp\", \"mode\": \"%s\"}\n",
               size, iters, med, p99, bw, mode_names[o->c.mode]);
    else
        printf("%12zu %9u %13.3f %13.3f %12.2f\n", size, iters, med, p99, bw);
    fflush(stdout);
}

static int run_side(struct side *s)
{
    const struct opts *o = s->o;
    size_t maxsize = 0, maxiters = 1;
    unsigned i;

    for (i = 0; i < o->c.nsizes; i++) {
        unsigned iters, warm;

        bench_iters(&o->c, o->c.sizes[i], &iters, &warm);
        if (o->c.sizes[i] > maxsize)
            maxsize = o->c.sizes[i];
        if (iters > maxiters)
            maxiters = iters;
    }
    s->sbuf  = alloc_buf(maxsize, 0);
    s->nrbuf = o->c.mode == MODE_PINGPONG ? 1 : WINDOW;
    for (i = 0; i < s->nrbuf; i++)
        s->rbuf[i] = alloc_buf(maxsize, 0);
    s->times = malloc(maxiters * sizeof(*s->times));
    if (!s->times)
        fail("out of memory");

    if (s->is_client && !o->c.json) {
        printf("# raw_pingpong: %s, transport raw-tcp%s\n", mode_names[o->c.mode],
               o->c.mode != MODE_PINGPONG ? ", window 16" : "");
        if (o->c.mode == MODE_BIDIR)
            printf("# latency: window time / %d; bandwidth counts both "
                   "directions\n", WINDOW);
        else if (o->c.mode == MODE_BW)
            printf("# latency: window time / %d\n", WINDOW);
        else
            printf("# latency: round trip / 2\n");
        printf("%12s %9s %13s %13s %12s\n", "size", "iters", "lat_med_us",
               "lat_p99_us", "bw_MBps");
        fflush(stdout);
    }
    for (i = 0; i < o->c.nsizes; i++) {
        unsigned iters, warm;
        double med, p99;

        bench_iters(&o->c, o->c.sizes[i], &iters, &warm);
        g_size = o->c.sizes[i];
        arm_timeout(s->is_client ? "measuring" : "serving");
        run_size(s, o->c.sizes[i], iters, warm);
        if (s->is_client) {
            stats(s->times, iters, &med, &p99);
            print_result(o, o->c.sizes[i], iters, med, p99);
        }
    }
    g_size = SIZE_MAX;

    /* The client's last word: the server closes only after it. */
    arm_timeout("closing");
    if (s->is_client)
        send_ack(s->fd, UINT32_MAX);
    else
        recv_ack(s->fd, UINT32_MAX);
    close(s->fd);
    alarm(0);
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Options and processes                                                  */
/* ---------------------------------------------------------------------- */

static void usage(FILE *out)
{
    fprintf(out,
"Usage: raw_pingpong [options]   (forks its peer, TCP over the loopback)\n"
"  --sizes LIST        comma list of message sizes, k/M/G = 1024 multiples\n"
"  --minsize N         smallest size (default 0; 0 runs 0, then 1, 2, 4, ...)\n"
"  --maxsize N         largest size, powers of two up to it (default 4M)\n"
"  --iters N           iterations per size (default: max(%d, min(%d, 200MB /\n"
"                      bytes per iteration)))\n"
"  --warmup N          untimed iterations first (default iters/10, at least 2)\n"
"  --bw                streaming: windows of %d sends, then one small ack\n"
"  --bidir             as --bw, both sides send a window at the same time\n"
"  --verify            fill every message with a pattern and check each byte\n"
"  --json              one JSON object per line per size\n"
"  --cpu A,B           pin the server (parent) to core A, the client (child)\n"
"                      to core B\n"
"  --timeout SEC       give up when a size takes longer (default 300, 0 = never)\n"
"  -h, --help          this text\n",
            ITERS_MIN, ITERS_MAX, WINDOW);
}

static void parse_options(struct opts *o, int argc, char **argv)
{
    static const struct option longopts[] = {
        BENCH_LONGOPTS,
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;

    bench_opts_init(&o->c);
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if (bench_opt(&o->c, c, optarg))
            continue;
        if (c == 'h') {
            usage(stdout);
            exit(0);
        }
        usage(stderr);
        exit(1);
    }
    if (optind < argc) {
        fprintf(stderr, "raw_pingpong: unexpected argument '%s' (see -h)\n",
                argv[optind]);
        exit(1);
    }
    bench_opts_done(&o->c);
}

int main(int argc, char **argv)
{
    struct opts o;
    struct sockaddr_in addr;
    socklen_t alen = sizeof(addr);
    struct sigaction sa;
    struct side s;
    int lfd, st, ret;
    sigset_t set;

    bench_prog = "raw_pingpong";
    g_role = "raw_pingpong";
    parse_options(&o, argc, argv);
    signal(SIGALRM, bench_on_alarm);
    signal(SIGPIPE, SIG_IGN);
    memset(&s, 0, sizeof(s));
    s.o = &o;

    /* Listen before the fork: the child can connect at once. */
    lfd = socket(AF_INET, SOCK_STREAM, 0);
    if (lfd < 0)
        fail("socket: %s", strerror(errno));
    memset(&addr, 0, sizeof(addr));
    addr.sin_family      = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port        = 0;
    if (bind(lfd, (struct sockaddr *)&addr, sizeof(addr)) ||
        listen(lfd, 1) ||
        getsockname(lfd, (struct sockaddr *)&addr, &alen))
        fail("listening on the loopback: %s", strerror(errno));

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = bench_on_sigchld;
    sa.sa_flags   = SA_RESTART | SA_NOCLDSTOP;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGCHLD, &sa, NULL);
    fflush(stdout);
    fflush(stderr);

    g_child = fork();
    if (g_child < 0)
        fail("fork: %s", strerror(errno));
    if (g_child == 0) {
        g_child = -1;
        g_role  = "client";
        signal(SIGCHLD, SIG_DFL);
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        close(lfd);
        pin_cpu(o.c.cpu_client);
        arm_timeout("connecting");
        s.fd = socket(AF_INET, SOCK_STREAM, 0);
        if (s.fd < 0 || connect(s.fd, (struct sockaddr *)&addr, sizeof(addr)))
            fail("connecting to 127.0.0.1:%d: %s", ntohs(addr.sin_port),
                 strerror(errno));
        tune_socket(s.fd);
        s.is_client = 1;
        ret = run_side(&s);
        fflush(stdout);
        exit(ret);
    }

    g_role = "server";
    pin_cpu(o.c.cpu_server);
    arm_timeout("waiting for the client to connect");
    s.fd = accept(lfd, NULL, NULL);
    if (s.fd < 0)
        fail("accept: %s", strerror(errno));
    close(lfd);
    tune_socket(s.fd);
    ret = run_side(&s);

    arm_timeout("waiting for the client process to exit");
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    sigprocmask(SIG_BLOCK, &set, NULL);
    if (g_child_reaped) {
        st = g_child_status;
    } else {
        while (waitpid(g_child, &st, 0) < 0)
            if (errno != EINTR)
                fail("waitpid: %s", strerror(errno));
    }
    g_child = -1;
    alarm(0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "raw_pingpong (server): the client process failed\n");
        return 1;
    }
    return ret;
}
