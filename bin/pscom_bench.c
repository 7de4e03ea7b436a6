/*
 * pscom_bench — ping-pong and streaming benchmark over the pscom interface.
 *
 * Three ways to run it:
 *   pscom_bench [options]             forks a peer and measures between the
 *                                     two local processes
 *   pscom_bench -l PORT               serves one client, then exits
 *   pscom_bench -c HOST:PORT [opts]   runs against such a server
 *
 * The client (the forked child, or the -c side) drives the run: it sends the
 * run parameters in a first message, so the server needs no options. The
 * client times every round trip (or every window) and prints the results.
 *
 * Modes:
 *   ping-pong  one message there, one back; latency is half the round trip.
 *   --bw       the client sends a window of WINDOW messages, the server
 *              answers with one small ack; per-message time is window/WINDOW.
 *   --bidir    as --bw, but both sides send a window at the same time; the
 *              bandwidth counts the bytes of both directions.
 * In every mode the bandwidth column is message bytes / median per-message
 * time, in MB/s (10^6 bytes per second).
 *
 * Under a PMIx launcher (PMIX_RANK or PMIX_NAMESPACE set, in builds with
 * libpscom_pmix): the ranks bootstrap through PMIx (bin/pscom_bench_pmix.c);
 * rank 0 measures against rank 1, or with --pairs all every pair i < j in
 * turn, the lower rank as the client. Output and --json are as above, one
 * block per pair.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "pscom.h"
#include "pscom_plugin.h" /* pscom_plugin_available */
#ifdef PSCOM_BENCH_PMIX
#include "pscom_bench_pmix.h"
#endif

#define MAX_XHEADER    (65535 - 88) /* what a message carries (pscom.h) */
#define PARAMS_MAGIC   0x5053424eu /* "PSBN" */
#define PARAMS_VERSION 1
#define PARAMS_F_THREADED 0x1u /* wire_params.flags: pscom_init_thread */
#define PARAMS_F_ONE_BUF  0x2u /* ... a window's receives share one buffer */
#define PARAMS_F_HUGE     0x4u /* ... buffers in transparent huge pages */
#define PARAMS_F_KNOWN    (PARAMS_F_THREADED | PARAMS_F_ONE_BUF | PARAMS_F_HUGE)

struct opts {
    struct bench_opts c; /* the options shared with raw_pingpong */
    int ondemand;
    int threaded; /* pscom_init_thread instead of pscom_init */
    int one_buffer; /* --bw/--bidir: the window's receives share a buffer */
    int huge_pages; /* --huge-pages: buffers of 2 MiB up in huge pages */
    size_t xheader;
    const char *transport;     /* --transport NAME, or NULL */
    pscom_con_type_t con_type; /* ... its connection type */
    int listen_port;        /* -l PORT, or -1 */
    const char *connect_to; /* -c HOST:PORT, or NULL */
    int all_pairs;          /* PMIx mode: --pairs all */
};

/* The first message, client to server. Both run on the same byte order
 * (checked with the magic). */
struct wire_step {
    uint64_t size;
    uint32_t iters;
    uint32_t warmup;
};

struct wire_params {
    uint32_t magic;
    uint32_t version;
    uint32_t mode;
    uint32_t verify;
    uint32_t xheader;
    uint32_t window;
    uint32_t nsizes;
    uint32_t flags; /* PARAMS_F_*; unknown bits are refused */
    struct wire_step step[MAX_SIZES];
};

/* The server's answer to the parameters: 0 or a negative errno. */
struct wire_reply {
    uint32_t magic;
    int32_t status;
};

/* Everything one side of a run uses. */
struct bench {
    pscom_connection_t *con;
    struct wire_params p;
    int is_client;
    size_t maxsize;
    unsigned char *sbuf;            /* one send buffer, sent WINDOW times */
    unsigned char *rbuf[WINDOW];    /* receive buffers, one per window slot */
    unsigned nrbuf;
    pscom_request_t *sreq[WINDOW];
    pscom_request_t *rreq[WINDOW];
    pscom_request_t *ack_sreq, *ack_rreq;
    uint32_t ack_out, ack_in;
    double *times; /* per-iteration one-way (or per-message) time in µs */
};

/* ---------------------------------------------------------------------- */
/* State for the signal handlers                                          */
/* ---------------------------------------------------------------------- */

static volatile sig_atomic_t g_closing;
static int g_pair[2] = {-1, -1}; /* PMIx mode: client and server rank */

static void req_failed(pscom_request_t *req, const char *what)
{
    fprintf(stderr, "pscom_bench (%s): %s failed while %s", g_role, what,
            g_phase);
    if (g_size != SIZE_MAX)
        fprintf(stderr, " at size %zu B, iteration %u", (size_t)g_size,
                (unsigned)g_iter);
    fprintf(stderr, ": request state %s", pscom_req_state_str(req->state));
    if (req->connection)
        fprintf(stderr, ", %s", pscom_con_str(req->connection));
    fputc('\n', stderr);
    die();
}

static void on_con_error(pscom_connection_t *con, pscom_op_t op,
                         pscom_err_t err)
{
    if (g_closing)
        return;
    fprintf(stderr, "pscom_bench (%s): %s: %s during %s\n", g_role,
            pscom_con_str(con), pscom_err_str(err), pscom_op_str(op));
}

/* ---------------------------------------------------------------------- */
/* Helpers                                                                */
/* ---------------------------------------------------------------------- */

/* The verify pattern: a Weyl sequence of 64-bit words from a seed that
 * depends on size, iteration and direction. */

/* The extended header of a request (max_xheader_len bytes). */
static unsigned char *req_xheader(pscom_request_t *req)
{
    return (unsigned char *)req + offsetof(pscom_request_t, xheader);
}

static inline void post_send(pscom_request_t *req, pscom_connection_t *con,
                             void *data, size_t len, size_t xheader_len)
{
    req->connection  = con;
    req->data        = data;
    req->data_len    = len;
    req->xheader_len = xheader_len;
    pscom_post_send(req);
}

static inline void post_recv(pscom_request_t *req, pscom_connection_t *con,
                             void *data, size_t len, size_t xheader_len)
{
    req->connection  = con;
    req->socket      = con->socket;
    req->data        = data;
    req->data_len    = len;
    req->xheader_len = xheader_len;
    pscom_post_recv(req);
}

static inline void wait_ok(pscom_request_t *req, const char *what)
{
    pscom_wait(req);
    if (!pscom_req_successful(req))
        req_failed(req, what);
}

/* A finished receive must have succeeded and carried exactly len bytes. */
static inline void check_recv(pscom_request_t *req, size_t len,
                              const char *what)
{
    if (!pscom_req_successful(req))
        req_failed(req, what);
    if (req->header.data_len != len)
        fail("%s: got a message of %zu bytes, expected %zu (at size %zu B, "
             "iteration %u)",
             what, (size_t)req->header.data_len, len, (size_t)g_size,
             (unsigned)g_iter);
}

static inline void wait_recv(pscom_request_t *req, size_t len,
                             const char *what)
{
    pscom_wait(req);
    check_recv(req, len, what);
}

/* ---------------------------------------------------------------------- */
/* Options                                                                */
/* ---------------------------------------------------------------------- */

static const struct {
    const char *name;
    pscom_con_type_t type;
} transports[] = {
    {"tcp", PSCOM_CON_TYPE_TCP},      {"shm", PSCOM_CON_TYPE_SHM},
    {"ucx", PSCOM_CON_TYPE_UCP},      {"ucp", PSCOM_CON_TYPE_UCP},
    {"ofi", PSCOM_CON_TYPE_OFI},      {"verbs", PSCOM_CON_TYPE_OPENIB},
    {"openib", PSCOM_CON_TYPE_OPENIB},
};

static void usage(FILE *out)
{
    fprintf(out,
"Usage: pscom_bench [options]              fork a peer, measure locally\n"
"       pscom_bench -l PORT                serve one client, then exit\n"
"       pscom_bench -c HOST:PORT [options] run against a server\n"
"\n"
"Run options (give them to the client; the server learns them):\n"
"  --sizes LIST        comma list of message sizes, k/M/G = 1024 multiples\n"
"  --minsize N         smallest size (default 0; 0 runs 0, then 1, 2, 4, ...)\n"
"  --maxsize N         largest size, powers of two up to it (default 4M)\n"
"  --iters N           iterations per size (default: max(%d, min(%d, 200MB /\n"
"                      bytes per iteration)))\n"
"  --warmup N          untimed iterations first (default iters/10, at least 2)\n"
"  --bw                streaming: windows of %d sends, then one small ack\n"
"  --bidir             as --bw, both sides send a window at the same time\n"
"  --one-buffer        with --bw/--bidir: receive every message of a window\n"
"                      into the same buffer, as ucx_perftest -t tag_bw does\n"
"                      (default: a buffer per message; not with --verify)\n"
"  --huge-pages        buffers of 2 MiB or more in transparent huge pages\n"
"                      (madvise), as ucx_perftest allocates its buffers\n"
"  --verify            fill every message with a pattern and check each byte\n"
"  --xheader N         extended header bytes per message (default 0)\n"
"  --ondemand          connect on first use (default with PSP_ONDEMAND=1)\n"
"  --threaded          both sides call pscom_init_thread instead of pscom_init\n"
"  --json              one JSON object per line per size\n"
"Both sides:\n"
"  --transport NAME    use only this transport: tcp shm ucx ucp ofi verbs openib\n"
"  --cpu A,B           pin the server (parent, -l) to core A, the client\n"
"                      (child, -c) to core B\n"
"  --timeout SEC       give up when a size (or connecting) takes longer\n"
"                      (default 300, 0 = never)\n"
"  -l, --listen PORT   server mode\n"
"  -c, --connect H:P   client mode\n"
"Under a PMIx launcher (pscom_run, mpirun, srun --mpi=pmix):\n"
"  --pairs first|all   rank 0 with rank 1 (default), or every pair in turn\n"
"  -h, --help          this text\n",
            ITERS_MIN, ITERS_MAX, WINDOW);
}

static void parse_options(struct opts *o, int argc, char **argv)
{
    enum {
        OPT_TRANSPORT = BOPT_NEXT, OPT_ONDEMAND, OPT_THREADED, OPT_XHEADER,
        OPT_PAIRS, OPT_ONE_BUFFER, OPT_HUGE_PAGES,
    };
    static const struct option longopts[] = {
        BENCH_LONGOPTS,
        {"one-buffer", no_argument, NULL, OPT_ONE_BUFFER},
        {"huge-pages", no_argument, NULL, OPT_HUGE_PAGES},
        {"transport", required_argument, NULL, OPT_TRANSPORT},
        {"ondemand", no_argument, NULL, OPT_ONDEMAND},
        {"threaded", no_argument, NULL, OPT_THREADED},
        {"xheader", required_argument, NULL, OPT_XHEADER},
        {"pairs", required_argument, NULL, OPT_PAIRS},
        {"listen", required_argument, NULL, 'l'},
        {"connect", required_argument, NULL, 'c'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    size_t i;

    memset(o, 0, sizeof(*o));
    bench_opts_init(&o->c);
    o->listen_port = -1;

    while ((c = getopt_long(argc, argv, "hl:c:", longopts, NULL)) != -1) {
        if (bench_opt(&o->c, c, optarg))
            continue;
        switch (c) {
        case OPT_ONE_BUFFER:
            o->one_buffer = 1;
            break;
        case OPT_HUGE_PAGES:
            o->huge_pages = 1;
            break;
        case OPT_TRANSPORT:
            for (i = 0; i < sizeof(transports) / sizeof(transports[0]); i++)
                if (!strcmp(optarg, transports[i].name))
                    break;
            if (i == sizeof(transports) / sizeof(transports[0])) {
                fprintf(stderr, "pscom_bench: unknown transport '%s'; known: ",
                        optarg);
                for (i = 0; i < sizeof(transports) / sizeof(transports[0]); i++)
                    fprintf(stderr, "%s%s", i ? ", " : "", transports[i].name);
                fputc('\n', stderr);
                exit(1);
            }
            o->transport = transports[i].name;
            o->con_type  = transports[i].type;
            break;
        case OPT_ONDEMAND:
            o->ondemand = 1;
            break;
        case OPT_THREADED:
            o->threaded = 1;
            break;
        case OPT_XHEADER:
            o->xheader = (size_t)parse_long(optarg, "--xheader", 0, MAX_XHEADER);
            break;
        case OPT_PAIRS:
            if (strcmp(optarg, "first") && strcmp(optarg, "all")) {
                fprintf(stderr, "pscom_bench: --pairs is first or all, not "
                                "'%s'\n", optarg);
                exit(1);
            }
            o->all_pairs = !strcmp(optarg, "all");
            break;
        case 'l':
            o->listen_port = (int)parse_long(optarg, "--listen", 1, 65535);
            break;
        case 'c':
            o->connect_to = optarg;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            exit(1);
        }
    }
    if (optind < argc) {
        fprintf(stderr, "pscom_bench: unexpected argument '%s' (see -h)\n",
                argv[optind]);
        exit(1);
    }
    if (o->listen_port >= 0 && o->connect_to) {
        fprintf(stderr, "pscom_bench: -l and -c exclude each other\n");
        exit(1);
    }
    bench_opts_done(&o->c);
    if (o->one_buffer && (o->c.mode == MODE_PINGPONG || o->c.verify)) {
        fprintf(stderr, "pscom_bench: --one-buffer goes with --bw or --bidir, "
                        "and not with --verify (the messages of a window "
                        "overwrite each other)\n");
        exit(1);
    }
}

/* ---------------------------------------------------------------------- */
/* Setup shared by both sides                                             */
/* ---------------------------------------------------------------------- */

static pscom_socket_t *open_socket(const struct opts *o)
{
    pscom_err_t rc = o->threaded ? pscom_init_thread(PSCOM_VERSION) :
                                   pscom_init(PSCOM_VERSION);
    pscom_socket_t *sock;

    if (rc != PSCOM_SUCCESS)
        fail("%s failed: %s", o->threaded ? "pscom_init_thread" : "pscom_init",
             pscom_err_str(rc));
    sock = pscom_open_socket(0, 0, PSCOM_RANK_UNDEFINED,
                             PSCOM_SOCK_FLAG_INTER_JOB);
    if (!sock)
        fail("pscom_open_socket failed");
    pscom_socket_set_name(sock, "bench");
    sock->ops.con_error = on_con_error;
    if (o->transport) {
        const char *why = "";

        /* Said here, before a connection fails for want of it. */
        if (!pscom_plugin_available(o->transport, &why))
            fail("transport %s is not available here: %s", o->transport, why);
        pscom_con_type_mask_only(sock, o->con_type);
    }
    return sock;
}

static pscom_request_t *new_req(size_t xheader)
{
    pscom_request_t *req = pscom_request_create(xheader, 0);

    if (!req)
        fail("out of memory creating a request");
    return req;
}

/* Buffers and requests for the whole run (the largest size). */
static void bench_alloc(struct bench *b)
{
    unsigned i;
    size_t xh = b->p.xheader, maxiters = 1;
    int streaming = b->p.mode != MODE_PINGPONG;
    int recv_window = b->p.mode == MODE_BIDIR || (b->p.mode == MODE_BW &&
                                                  !b->is_client);
    int huge = !!(b->p.flags & PARAMS_F_HUGE);

    b->maxsize = 0;
    for (i = 0; i < b->p.nsizes; i++) {
        if (b->p.step[i].size > b->maxsize)
            b->maxsize = b->p.step[i].size;
        if (b->p.step[i].iters > maxiters)
            maxiters = b->p.step[i].iters;
    }
    b->sbuf  = alloc_buf(b->maxsize, huge);
    b->nrbuf = recv_window && !(b->p.flags & PARAMS_F_ONE_BUF) ? WINDOW : 1;
    for (i = 0; i < b->nrbuf; i++)
        b->rbuf[i] = alloc_buf(b->maxsize, huge);
    for (i = 0; i < (streaming ? WINDOW : 1u); i++) {
        b->sreq[i] = new_req(xh);
        b->rreq[i] = new_req(xh);
    }
    b->ack_sreq = new_req(0);
    b->ack_rreq = new_req(0);
    if (b->is_client) {
        b->times = malloc(maxiters * sizeof(*b->times));
        if (!b->times)
            fail("out of memory for %zu timings", maxiters);
    }
}

/* Fill or check the payload and xheader of one message. */
static void fill_msg(struct bench *b, pscom_request_t *sreq, size_t size,
                     unsigned it, unsigned dir)
{
    pat_fill(b->sbuf, size, pat_seed(size, it, dir));
    if (b->p.xheader)
        pat_fill(req_xheader(sreq), b->p.xheader, pat_seed(size, it, dir + 8));
}

static void check_msg(struct bench *b, pscom_request_t *rreq,
                      const unsigned char *data, size_t size, unsigned it,
                      unsigned dir, unsigned slot)
{
    verify_or_die(data, size, size, it, dir, slot, "");
    if (b->p.xheader) {
        size_t off;
        unsigned e, g;

        if (pat_check(req_xheader(rreq), b->p.xheader,
                      pat_seed(size, it, dir + 8), &off, &e, &g))
            fail("verify failed: size %zu, iteration %u, offset %zu in the "
                 "xheader (%s): expected 0x%02x, got 0x%02x",
                 size, it, off, dir_name(dir), e, g);
    }
}

/* ---------------------------------------------------------------------- */
/* The measured loops                                                     */
/* ---------------------------------------------------------------------- */

static void client_pingpong(struct bench *b, size_t size, unsigned n,
                            unsigned warm)
{
    pscom_request_t *sreq = b->sreq[0], *rreq = b->rreq[0];
    size_t xh = b->p.xheader;
    struct tick_span span;
    uint64_t t0;
    unsigned it;

    /* One clock read per round trip, as ucx_perftest: a round trip is
     * the time from one reply to the next, its checks included; only the
     * verification's filling and checking is left out. */
    tick_span_start(&span);
    t0 = ticks();
    for (it = 0; it < n; it++) {
        uint64_t t1;

        g_iter = it;
        if (b->p.verify) {
            fill_msg(b, sreq, size, it, DIR_C2S);
            t0 = ticks();
        }
        /* The request, then the receive of the reply, as an MPI ping-pong
         * (MPI_Send; MPI_Recv) and ucx_perftest do: the receive is posted
         * while the message travels. A reply that comes first waits as an
         * unexpected message. */
        post_send(sreq, b->con, b->sbuf, size, xh);
        post_recv(rreq, b->con, b->rbuf[0], size, xh);
        pscom_wait(rreq);
        t1 = ticks();
        check_recv(rreq, size, "receive");
        wait_ok(sreq, "send");
        if (b->p.verify)
            check_msg(b, rreq, b->rbuf[0], size, it, DIR_S2C, NO_SLOT);
        if (it >= warm)
            b->times[it - warm] = (double)(t1 - t0);
        t0 = t1;
    }
    times_scale(b->times, n - warm, tick_span_rate(&span) / 2000.0);
}

static void server_pingpong(struct bench *b, size_t size, unsigned n)
{
    pscom_request_t *sreq = b->sreq[0], *rreq = b->rreq[0];
    size_t xh = b->p.xheader;
    unsigned it;

    post_recv(rreq, b->con, b->rbuf[0], size, xh);
    for (it = 0; it < n; it++) {
        g_iter = it;
        if (b->p.verify)
            fill_msg(b, sreq, size, it, DIR_S2C);
        wait_recv(rreq, size, "receive");
        if (b->p.verify)
            check_msg(b, rreq, b->rbuf[0], size, it, DIR_C2S, NO_SLOT);
        /* The reply first, then the next receive, as an MPI ping-pong
         * (MPI_Recv; MPI_Send) and ucx_perftest do: posting the receive
         * is not part of the turn-around. */
        post_send(sreq, b->con, b->sbuf, size, xh);
        if (it + 1 < n)
            post_recv(rreq, b->con, b->rbuf[0], size, xh);
        wait_ok(sreq, "send");
    }
}

static void post_window_sends(struct bench *b, size_t size)
{
    unsigned k;

    for (k = 0; k < WINDOW; k++) {
        /* Every message of a window carries the same payload and xheader. */
        if (k && b->p.xheader && b->p.verify)
            memcpy(req_xheader(b->sreq[k]), req_xheader(b->sreq[0]),
                   b->p.xheader);
        post_send(b->sreq[k], b->con, b->sbuf, size, b->p.xheader);
    }
}

static void post_window_recvs(struct bench *b, size_t size)
{
    unsigned k;

    for (k = 0; k < WINDOW; k++)
        post_recv(b->rreq[k], b->con, b->rbuf[k % b->nrbuf], size,
                  b->p.xheader);
}

static void wait_window(struct bench *b, pscom_request_t **reqs, size_t size,
                        int recv)
{
    unsigned k;

    for (k = 0; k < WINDOW; k++) {
        if (recv)
            wait_recv(reqs[k], size, "window receive");
        else
            wait_ok(reqs[k], "window send");
    }
}

static void check_window(struct bench *b, size_t size, unsigned it,
                         unsigned dir)
{
    unsigned k;

    for (k = 0; k < WINDOW; k++)
        check_msg(b, b->rreq[k], b->rbuf[k], size, it, dir, k);
}

static void client_window(struct bench *b, size_t size, unsigned n,
                          unsigned warm)
{
    int bidir = b->p.mode == MODE_BIDIR;
    struct tick_span span;
    unsigned it;

    tick_span_start(&span);
    for (it = 0; it < n; it++) {
        uint64_t t0, t1;

        g_iter = it;
        if (b->p.verify)
            fill_msg(b, b->sreq[0], size, it, DIR_C2S);
        if (bidir)
            post_window_recvs(b, size);
        post_recv(b->ack_rreq, b->con, &b->ack_in, sizeof(b->ack_in), 0);
        t0 = ticks();
        post_window_sends(b, size);
        wait_window(b, b->sreq, size, 0);
        if (bidir)
            wait_window(b, b->rreq, size, 1);
        pscom_wait(b->ack_rreq);
        t1 = ticks();
        check_recv(b->ack_rreq, sizeof(b->ack_in), "ack receive");
        if (b->ack_in != it)
            fail("ack out of order: got %u, expected %u (size %zu)",
                 (unsigned)b->ack_in, it, size);
        if (bidir && b->p.verify)
            check_window(b, size, it, DIR_S2C);
        if (it >= warm)
            b->times[it - warm] = (double)(t1 - t0);
    }
    times_scale(b->times, n - warm, tick_span_rate(&span) / 1000.0 / WINDOW);
}

static void server_window(struct bench *b, size_t size, unsigned n)
{
    int bidir = b->p.mode == MODE_BIDIR;
    unsigned it;

    if (!bidir)
        post_window_recvs(b, size);
    for (it = 0; it < n; it++) {
        g_iter = it;
        if (bidir) {
            if (b->p.verify)
                fill_msg(b, b->sreq[0], size, it, DIR_S2C);
            post_window_recvs(b, size);
            post_window_sends(b, size);
        }
        wait_window(b, b->rreq, size, 1);
        if (b->p.verify)
            check_window(b, size, it, DIR_C2S);
        if (!bidir && it + 1 < n)
            post_window_recvs(b, size);
        b->ack_out = it;
        post_send(b->ack_sreq, b->con, &b->ack_out, sizeof(b->ack_out), 0);
        wait_ok(b->ack_sreq, "ack send");
        if (bidir)
            wait_window(b, b->sreq, size, 0);
    }
}

/* ---------------------------------------------------------------------- */
/* Output                                                                 */
/* ---------------------------------------------------------------------- */

static void print_header(const struct bench *b, const char *transport)
{
    printf("# pscom_bench: %s, transport %s, xheader %u B", mode_names[b->p.mode],
           transport, (unsigned)b->p.xheader);
    if (b->p.mode != MODE_PINGPONG)
        printf(", window %d", WINDOW);
    if (b->p.flags & PARAMS_F_ONE_BUF)
        printf(", one receive buffer");
    if (b->p.flags & PARAMS_F_THREADED)
        printf(", threaded (pscom_init_thread)");
    if (b->p.flags & PARAMS_F_HUGE)
        printf(", huge pages");
    putchar('\n');
    printf("# %s\n", pscom_con_str(b->con));
    if (b->p.mode == MODE_BIDIR)
        printf("# latency: window time / %d; bandwidth counts both "
               "directions\n", WINDOW);
    else if (b->p.mode == MODE_BW)
        printf("# latency: window time / %d\n", WINDOW);
    else
        printf("# latency: round trip / 2\n");
    printf("%12s %9s %13s %13s %12s\n", "size", "iters", "lat_med_us",
           "lat_p99_us", "bw_MBps");
    fflush(stdout);
}

static void print_json_str(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            printf("\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            printf("\\u%04x", (unsigned char)*s);
        else
            putchar(*s);
    }
    putchar('"');
}

static void print_result(const struct bench *b, int json, size_t size,
                         unsigned iters, double med, double p99,
                         const char *transport)
{
    double bytes = (double)size * (b->p.mode == MODE_BIDIR ? 2 : 1);
    double bw = med > 0 ? bytes / med : 0; /* bytes per µs = MB/s */

    if (json) {
        printf("{\"size\": %zu, \"iters\": %u, \"lat_us_median\": %.3f, "
               "\"lat_us_p99\": %.3f, \"bw_MBps\": %.2f, \"transport\": ",
               size, iters, med, p99, bw);
        print_json_str(transport);
        printf(", \"mode\": \"%s\", \"threaded\": %s, \"one_buffer\": %s, "
               "\"huge_pages\": %s",
               mode_names[b->p.mode],
               b->p.flags & PARAMS_F_THREADED ? "true" : "false",
               b->p.flags & PARAMS_F_ONE_BUF ? "true" : "false",
               b->p.flags & PARAMS_F_HUGE ? "true" : "false");
        if (g_pair[0] >= 0)
            printf(", \"ranks\": [%d, %d]", g_pair[0], g_pair[1]);
        printf("}\n");
    } else {
        printf("%12zu %9u %13.3f %13.3f %12.2f\n", size, iters, med, p99, bw);
    }
    fflush(stdout);
}

/* ---------------------------------------------------------------------- */
/* The two sides                                                          */
/* ---------------------------------------------------------------------- */

static void build_params(const struct opts *o, struct wire_params *p)
{
    unsigned i;

    memset(p, 0, sizeof(*p));
    p->magic   = PARAMS_MAGIC;
    p->version = PARAMS_VERSION;
    p->mode    = o->c.mode;
    p->verify  = (uint32_t)o->c.verify;
    p->xheader = (uint32_t)o->xheader;
    p->window  = WINDOW;
    p->nsizes  = o->c.nsizes;
    p->flags   = (o->threaded ? PARAMS_F_THREADED : 0) |
                 (o->one_buffer ? PARAMS_F_ONE_BUF : 0) |
                 (o->huge_pages ? PARAMS_F_HUGE : 0);
    for (i = 0; i < o->c.nsizes; i++) {
        unsigned iters, warm;

        bench_iters(&o->c, o->c.sizes[i], &iters, &warm);
        p->step[i].size   = o->c.sizes[i];
        p->step[i].iters  = iters;
        p->step[i].warmup = (uint32_t)warm;
    }
}

/* Buffers and requests of bench_alloc(), for runs that go on (PMIx pairs). */
static void bench_free(struct bench *b)
{
    unsigned i;

    free(b->sbuf);
    for (i = 0; i < b->nrbuf; i++)
        free(b->rbuf[i]);
    for (i = 0; i < WINDOW; i++) {
        if (b->sreq[i]) pscom_request_free(b->sreq[i]);
        if (b->rreq[i]) pscom_request_free(b->rreq[i]);
    }
    pscom_request_free(b->ack_sreq);
    pscom_request_free(b->ack_rreq);
    free(b->times);
}

/* Measure against the server at `ep`; or, with `con` (PMIx mode), over that
 * connection of `sock`, which then both stay open. */
static int client(const struct opts *o, const char *ep, pscom_socket_t *sock,
                  pscom_connection_t *con)
{
    struct bench b = {.is_client = 1};
    struct wire_reply reply = {0};
    pscom_request_t *req, *rep;
    const char *transport;
    int ondemand = 0;
    uint64_t flags = 0, t_connect = 0, t_first = 0;
    pscom_err_t rc;
    unsigned i;

    if (con) {
        b.con = con;
        goto connected;
    }
    sock = open_socket(o);
    pscom_env_get_int(&ondemand, "PSP_ONDEMAND");
    flags = (o->ondemand || ondemand == 1) ? PSCOM_CON_FLAG_ONDEMAND :
                                             PSCOM_CON_FLAG_DIRECT;
    b.con = pscom_open_connection(sock);
    if (!b.con)
        fail("pscom_open_connection failed");

    arm_timeout("connecting");
    t_connect = now_ns();
    rc = pscom_connect(b.con, ep, PSCOM_RANK_UNDEFINED, flags);
    if (rc != PSCOM_SUCCESS)
        fail("cannot connect to %s: %s%s%s", ep, pscom_err_str(rc),
             rc == PSCOM_ERR_STDERROR ? ": " : "",
             rc == PSCOM_ERR_STDERROR ? strerror(errno) : "");
connected:

    /* Send the parameters and wait for the server's answer: the first round
     * trip also completes an on-demand connection. */
    arm_timeout("exchanging the run parameters");
    build_params(o, &b.p);
    req = new_req(0);
    rep = new_req(0);
    post_recv(rep, b.con, &reply, sizeof(reply), 0);
    post_send(req, b.con, &b.p, sizeof(b.p), 0);
    wait_ok(req, "sending the parameters");
    wait_recv(rep, sizeof(reply), "receiving the server's answer");
    t_first = now_ns();
    if (reply.magic != PARAMS_MAGIC)
        fail("the server's answer is garbled (magic 0x%08x)",
             (unsigned)reply.magic);
    if (reply.status)
        fail("the server cannot run this benchmark: %s",
             strerror(-reply.status));
    pscom_request_free(req);
    pscom_request_free(rep);

    transport = pscom_con_type_str(b.con->type);
    bench_alloc(&b);
    if (!o->c.json) {
        print_header(&b, transport);
        /* The cost of connecting: for --ondemand the first round trip
         * carries the whole connection setup. */
        if (t_connect)
            printf("# connect + first round trip: %.1f us (%s)\n",
                   (double)(t_first - t_connect) / 1000.0,
                   (flags & PSCOM_CON_FLAG_ONDEMAND) ? "on demand" : "direct");
    }

    for (i = 0; i < b.p.nsizes; i++) {
        size_t size = b.p.step[i].size;
        unsigned iters = b.p.step[i].iters, warm = b.p.step[i].warmup;
        double med, p99;

        g_size = size;
        arm_timeout("measuring");
        if (b.p.mode == MODE_PINGPONG)
            client_pingpong(&b, size, warm + iters, warm);
        else
            client_window(&b, size, warm + iters, warm);
        stats(b.times, iters, &med, &p99);
        print_result(&b, o->c.json, size, iters, med, p99, transport);
    }
    g_size = SIZE_MAX;

    /* The server waits for this message before it closes its side. */
    arm_timeout("closing");
    b.ack_out = UINT32_MAX;
    post_send(b.ack_sreq, b.con, &b.ack_out, sizeof(b.ack_out), 0);
    wait_ok(b.ack_sreq, "sending the final message");
    alarm(0);
    if (con) {
        bench_free(&b);
        return 0;
    }
    g_closing = 1;
    pscom_close_connection(b.con);
    pscom_close_socket(sock);
    bench_free(&b);
    return 0;
}

/* Serve one client on `sock` (already listening); or, with `con` (PMIx
 * mode), the client at the other end of con, leaving both open. */
static int server(const struct opts *o, pscom_socket_t *sock,
                  pscom_connection_t *con, int announce)
{
    struct bench b = {.is_client = 0};
    struct wire_reply reply = {.magic = PARAMS_MAGIC, .status = 0};
    pscom_request_t *req = new_req(0), *rep = new_req(0);
    unsigned i;

    (void)o;
    g_phase = "waiting for a client";
    req->socket = sock;
    req->connection = con;
    req->data = &b.p;
    req->data_len = sizeof(b.p);
    req->xheader_len = 0;
    pscom_post_recv(req);
    pscom_wait(req);
    arm_timeout("receiving the run parameters");
    if (!pscom_req_successful(req))
        req_failed(req, "receiving the parameters");
    b.con = req->connection;
    if (req->header.data_len != sizeof(b.p) || b.p.magic != PARAMS_MAGIC ||
        b.p.version != PARAMS_VERSION)
        fail("the client %s sent no valid parameters (a different "
             "pscom_bench version?)", pscom_con_str(b.con));
    if (b.p.nsizes == 0 || b.p.nsizes > MAX_SIZES || b.p.mode > MODE_BIDIR ||
        b.p.window != WINDOW || b.p.xheader > MAX_XHEADER ||
        (b.p.flags & ~PARAMS_F_KNOWN) ||
        ((b.p.flags & PARAMS_F_ONE_BUF) && b.p.verify))
        reply.status = -EINVAL;
    for (i = 0; i < b.p.nsizes && i < MAX_SIZES; i++)
        if (b.p.step[i].size > MAX_MSG_SIZE || !b.p.step[i].iters)
            reply.status = -EINVAL;
    post_send(rep, b.con, &reply, sizeof(reply), 0);
    wait_ok(rep, "answering the parameters");
    if (reply.status)
        fail("rejected invalid parameters from %s", pscom_con_str(b.con));
    pscom_request_free(req);
    pscom_request_free(rep);
    /* The library was set up before the client said how: switch it now. */
    if (b.p.flags & PARAMS_F_THREADED) {
        pscom_err_t rc = pscom_init_thread(PSCOM_VERSION);

        if (rc != PSCOM_SUCCESS)
            fail("pscom_init_thread failed: %s", pscom_err_str(rc));
    }

    if (announce) {
        printf("pscom_bench: serving %s via %s: %s%s, %u sizes\n",
               pscom_con_str(b.con), pscom_con_type_str(b.con->type),
               mode_names[b.p.mode],
               b.p.flags & PARAMS_F_THREADED ? " (threaded)" : "",
               (unsigned)b.p.nsizes);
        fflush(stdout);
    }
    bench_alloc(&b);

    for (i = 0; i < b.p.nsizes; i++) {
        size_t size = b.p.step[i].size;
        unsigned n = b.p.step[i].iters + b.p.step[i].warmup;

        g_size = size;
        arm_timeout("serving");
        if (b.p.mode == MODE_PINGPONG)
            server_pingpong(&b, size, n);
        else
            server_window(&b, size, n);
    }
    g_size = SIZE_MAX;

    /* The client closes right after its final message: its EOF is no error. */
    arm_timeout("waiting for the client's final message");
    g_closing = 1;
    post_recv(b.ack_rreq, b.con, &b.ack_in, sizeof(b.ack_in), 0);
    wait_recv(b.ack_rreq, sizeof(b.ack_in), "receiving the final message");
    if (con) {
        alarm(0);
        g_closing = 0;
        bench_free(&b);
        return 0;
    }
    pscom_close_connection(b.con);
    pscom_close_socket(sock);
    bench_free(&b);
    return 0;
}

/* The child: wait for the server's endpoint string on `fd`, then run. */
static int forked_client(const struct opts *o, int fd)
{
    char ep[512];
    size_t len = 0;

    g_role = "client";
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() == 1)
        fail("the server process is gone");
    pin_cpu(o->c.cpu_client);
    arm_timeout("waiting for the server to listen");
    for (;;) {
        ssize_t n = read(fd, ep + len, sizeof(ep) - 1 - len);

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            fail("reading the endpoint from the server: %s", strerror(errno));
        if (n == 0)
            break;
        len += (size_t)n;
        if (len == sizeof(ep) - 1)
            break;
    }
    close(fd);
    ep[len] = '\0';
    if (!len)
        fail("the server process failed before it listened");
    return client(o, ep, NULL, NULL);
}

/* Fork the client first (before pscom_init, so no library state is shared
 * between the processes), then listen and hand it the endpoint string
 * through a pipe: it connects only once the server listens. */
static int run_forked(const struct opts *o)
{
    struct sigaction sa;
    pscom_socket_t *sock;
    char *ep = NULL;
    pscom_err_t rc;
    int pfd[2], st, ret;
    sigset_t set;
    size_t len;

    if (pipe(pfd))
        fail("pipe: %s", strerror(errno));
    fflush(stdout);
    fflush(stderr);

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = bench_on_sigchld;
    sa.sa_flags   = SA_RESTART | SA_NOCLDSTOP;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGCHLD, &sa, NULL);

    g_child = fork();
    if (g_child < 0)
        fail("fork: %s", strerror(errno));
    if (g_child == 0) {
        g_child = -1;
        signal(SIGCHLD, SIG_DFL);
        close(pfd[1]);
        ret = forked_client(o, pfd[0]);
        fflush(stdout);
        exit(ret);
    }

    g_role = "server";
    close(pfd[0]);
    signal(SIGPIPE, SIG_IGN);
    pin_cpu(o->c.cpu_server);
    arm_timeout("starting to listen");
    sock = open_socket(o);
    rc = pscom_listen(sock, PSCOM_ANYPORT);
    if (rc != PSCOM_SUCCESS)
        fail("pscom_listen failed: %s", pscom_err_str(rc));
    rc = pscom_socket_get_ep_str(sock, &ep);
    if (rc != PSCOM_SUCCESS || !ep)
        fail("pscom_socket_get_ep_str failed: %s", pscom_err_str(rc));
    len = strlen(ep);
    if (write(pfd[1], ep, len) != (ssize_t)len)
        fail("passing the endpoint to the client: %s", strerror(errno));
    close(pfd[1]);
    pscom_socket_free_ep_str(ep);

    arm_timeout("waiting for the client to connect");
    ret = server(o, sock, NULL, 0);

    arm_timeout("waiting for the client process to exit");
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    sigprocmask(SIG_BLOCK, &set, NULL);
    if (g_child_reaped) {
        st = g_child_status;
    } else {
        while (waitpid(g_child, &st, 0) < 0) {
            /* The handler may run in a thread of a transport library (its
             * SIGCHLD is not blocked there) and reap the child first. */
            if (errno == ECHILD && g_child_reaped) {
                st = g_child_status;
                break;
            }
            if (errno != EINTR)
                fail("waitpid: %s", strerror(errno));
        }
    }
    g_child = -1;
    alarm(0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "pscom_bench (server): the client process failed\n");
        return 1;
    }
    return ret;
}

static int run_listen(const struct opts *o)
{
    pscom_socket_t *sock;
    pscom_err_t rc;

    g_role = "server";
    signal(SIGPIPE, SIG_IGN);
    pin_cpu(o->c.cpu_server);
    sock = open_socket(o);
    rc = pscom_listen(sock, o->listen_port);
    if (rc != PSCOM_SUCCESS)
        fail("cannot listen on port %d: %s%s%s", o->listen_port,
             pscom_err_str(rc), rc == PSCOM_ERR_STDERROR ? ": " : "",
             rc == PSCOM_ERR_STDERROR ? strerror(errno) : "");
    printf("pscom_bench: listening on port %d\n", pscom_get_portno(sock));
    fflush(stdout);
    return server(o, sock, NULL, 1);
}

#ifdef PSCOM_BENCH_PMIX
/* The two sides for bin/pscom_bench_pmix.c. */
static char pmix_role[64];

static pscom_socket_t *pmix_open_socket(const void *o)
{
    return open_socket(o);
}

static int pmix_client(const void *o, pscom_socket_t *sock,
                       pscom_connection_t *con, int rank, int peer)
{
    snprintf(pmix_role, sizeof(pmix_role), "rank %d, client of rank %d",
             rank, peer);
    g_role = pmix_role;
    g_closing = 0;
    g_pair[0] = rank;
    g_pair[1] = peer;
    return client(o, NULL, sock, con);
}

static int pmix_server(const void *o, pscom_socket_t *sock,
                       pscom_connection_t *con, int rank, int peer)
{
    snprintf(pmix_role, sizeof(pmix_role), "rank %d, server of rank %d",
             rank, peer);
    g_role = pmix_role;
    g_closing = 0;
    return server(o, sock, con, 0);
}

static int run_pmix(const struct opts *o)
{
    struct pscom_bench_pmix_ops ops = {o, pmix_open_socket, pmix_client,
                                       pmix_server};

    int ret;

    signal(SIGPIPE, SIG_IGN);
    ret = pscom_bench_pmix_run(&ops, o->all_pairs);
    g_closing = 1;
    pscom_close_socket(NULL);
    return ret;
}
#endif

int main(int argc, char **argv)
{
    struct opts o;

    bench_prog = "pscom_bench";
    g_role = "pscom_bench";
    bench_timeout_hint = " (raise it with --timeout SEC)";
    parse_options(&o, argc, argv);
    signal(SIGALRM, bench_on_alarm);
#ifdef PSCOM_BENCH_PMIX
    if (pscom_bench_pmix_present() && o.listen_port < 0 && !o.connect_to)
        return run_pmix(&o);
#endif

    if (o.listen_port >= 0)
        return run_listen(&o);
    if (o.connect_to) {
        g_role = "client";
        signal(SIGPIPE, SIG_IGN);
        pin_cpu(o.c.cpu_client);
        return client(&o, o.connect_to, NULL, NULL);
    }
    if (o.all_pairs) {
        fprintf(stderr, "pscom_bench: --pairs needs a PMIx launcher%s\n",
#ifdef PSCOM_BENCH_PMIX
                ""
#else
                " and a build with libpscom_pmix"
#endif
        );
        return 1;
    }
    return run_forked(&o);
}
