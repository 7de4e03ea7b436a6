/*
 * Garbage sent to a listening socket.
 *
 * A pscom process listens. The orchestrator opens raw TCP connections to
 * its port and sends: random bytes (several seeds, 1 B .. 64 KiB), a
 * pre-connection record header announcing a huge payload, a correct magic
 * with a wrong version, an unknown record type, a malformed HELLO payload,
 * a few bytes then close, and nothing at all. For each it checks that the
 * listener closes the connection (or answers with an ERROR record, type 7,
 * and closes) within a few seconds instead of hanging on it. Some raw
 * connections stay open and silent meanwhile.
 *
 * Then a real pscom client connects and exchanges a verified message: the
 * listener stayed up and was not blocked by the silent connections. The
 * listener must have accepted exactly one connection (the garbage none),
 * and must exit cleanly.
 *
 * Record header (lib/pscom/precon_codec.h): u32 magic 0x50435350, u8
 * version, u8 type, u16 flags, u32 payload length; little endian.
 */
#include "itest.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define PRECON_MAGIC   0x50435350u
#define PRECON_VERSION 1
#define PRECON_HELLO   1
#define PRECON_ERROR   7
#define PRECON_HDR_LEN 12

#define CLOSE_WAIT_MS 3000 /* how long the listener may take to drop garbage */
#define N_SILENT      5
#define MSG_LEN       (256 * 1024)

/* ---------------------------------------------------------------------- */
/* The listener and the real client                                       */

static int listener(itest_link_t *link, void *arg)
{
    pscom_socket_t *sock;
    pscom_request_t *req, *echo, *quit;
    void *buf;
    char *ep;

    itest_pscom_init();
    sock = itest_open_socket("listener", 1);
    ep   = itest_ep_str(sock);
    itest_link_send_str(link, ep);
    free(ep);

    itest_step("serving: waiting for the real client's message");
    buf = itest_alloc_guarded(MSG_LEN);
    req = itest_request(8);
    req->connection  = NULL;
    req->socket      = sock;
    req->data        = buf;
    req->data_len    = MSG_LEN;
    req->xheader_len = 4;
    pscom_post_recv(req);
    pscom_wait(req);
    ITEST_ASSERT_REQ_OK(req, "the real client's message");
    ITEST_ASSERT_EQ(req->header.data_len, MSG_LEN, "message length");
    ITEST_ASSERT_PATTERN(buf, MSG_LEN, 0x6a7ba6e0u, "the client's message");
    ITEST_ASSERT(req->connection != NULL, "req->connection after the receive");

    itest_step("echoing");
    echo = itest_request(8);
    pscom_req_prepare(echo, req->connection, buf, MSG_LEN, &req->xheader.user,
                      4);
    pscom_post_send(echo);
    pscom_wait(echo);
    ITEST_ASSERT_REQ_OK(echo, "echo to the real client");

    itest_step("waiting for the client's quit");
    quit = itest_request(8);
    quit->connection = req->connection;
    quit->socket     = sock;
    pscom_post_recv(quit);
    pscom_wait(quit);
    ITEST_ASSERT_REQ_OK(quit, "quit message");

    ITEST_ASSERT_EQ(itest_accept_count(), 1,
                    "accepted connections (garbage must never become a "
                    "connection)");
    pscom_request_free(req);
    pscom_request_free(echo);
    pscom_request_free(quit);
    free(buf);
    itest_step("closing");
    pscom_close_socket(sock);
    return 0;
}

static int client(itest_link_t *link, void *arg)
{
    pscom_socket_t *sock;
    pscom_connection_t *con;
    pscom_request_t *s, *r;
    uint32_t tag = 0x0ddba11u;
    void *out, *in;
    char *ep;

    itest_pscom_init();
    sock = itest_open_socket("client", 0);
    ep   = itest_link_recv_str(link);
    itest_step("connecting to %s (after the garbage)", ep);
    con = itest_connect(sock, ep);
    free(ep);

    itest_step("exchanging a verified message");
    out = malloc(MSG_LEN);
    in  = itest_alloc_guarded(MSG_LEN);
    ITEST_ASSERT(out != NULL, "out of memory");
    itest_fill(out, MSG_LEN, 0x6a7ba6e0u);
    r = itest_request(8);
    r->connection  = con;
    r->socket      = sock;
    r->data        = in;
    r->data_len    = MSG_LEN;
    r->xheader_len = 4;
    pscom_post_recv(r);
    s = itest_request(8);
    pscom_req_prepare(s, con, out, MSG_LEN, &tag, sizeof(tag));
    pscom_post_send(s);
    pscom_wait(s);
    ITEST_ASSERT_REQ_OK(s, "send to the listener");
    pscom_wait(r);
    ITEST_ASSERT_REQ_OK(r, "echo from the listener");
    ITEST_ASSERT_EQ(r->header.data_len, MSG_LEN, "echo length");
    ITEST_ASSERT(memcmp(&r->xheader.user, &tag, sizeof(tag)) == 0,
                 "echoed xheader");
    ITEST_ASSERT_PATTERN(in, MSG_LEN, 0x6a7ba6e0u, "echo");
    ITEST_ASSERT_GUARD(in, MSG_LEN, "echo");

    itest_step("sending quit");
    pscom_req_prepare(s, con, NULL, 0, NULL, 0);
    pscom_post_send(s);
    pscom_wait(s);
    ITEST_ASSERT_REQ_OK(s, "quit");
    pscom_request_free(s);
    pscom_request_free(r);
    free(out);
    free(in);
    itest_step("closing");
    pscom_close_socket(sock);
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Raw TCP from the orchestrator                                          */

static struct sockaddr_in target;
static int n_bad;

static void parse_ep(const char *ep)
{
    char host[64];
    const char *colon = strchr(ep, ':');
    size_t hlen;

    ITEST_ASSERT(colon != NULL, "endpoint string \"%s\" has no ':'", ep);
    hlen = (size_t)(colon - ep);
    ITEST_ASSERT(hlen < sizeof(host), "host part of \"%s\" too long", ep);
    memcpy(host, ep, hlen);
    host[hlen] = '\0';
    memset(&target, 0, sizeof(target));
    target.sin_family = AF_INET;
    target.sin_port   = htons((uint16_t)atoi(colon + 1));
    ITEST_ASSERT(inet_pton(AF_INET, host, &target.sin_addr) == 1,
                 "host \"%s\" of endpoint \"%s\" is not an IPv4 address", host,
                 ep);
    ITEST_ASSERT(ntohs(target.sin_port) != 0, "port of \"%s\"", ep);
}

static int raw_connect(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct timeval tv = {.tv_sec = 3};
    ITEST_ASSERT(fd >= 0, "socket(): %s", strerror(errno));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (connect(fd, (struct sockaddr *)&target, sizeof(target)) < 0)
        ITEST_FAIL("raw connect to the listener: %s (did it die?)",
                   strerror(errno));
    return fd;
}

/* Send what the listener takes; it may close early, which is fine. */
static void raw_send(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR) continue;
            return; /* EPIPE, ECONNRESET, or the send timeout */
        }
        p += n;
        len -= (size_t)n;
    }
}

static size_t put_hdr(uint8_t *b, uint32_t magic, uint8_t version,
                      uint8_t type, uint16_t flags, uint32_t len)
{
    for (int i = 0; i < 4; i++) b[i] = (uint8_t)(magic >> (8 * i));
    b[4] = version;
    b[5] = type;
    b[6] = (uint8_t)flags;
    b[7] = (uint8_t)(flags >> 8);
    for (int i = 0; i < 4; i++) b[8 + i] = (uint8_t)(len >> (8 * i));
    return PRECON_HDR_LEN;
}

static const char *hex(const uint8_t *b, size_t len)
{
    static char buf[3 * 32 + 4];
    size_t n = 0;
    for (size_t i = 0; i < len && i < 32; i++)
        n += (size_t)snprintf(buf + n, sizeof(buf) - n, "%02x ", b[i]);
    if (len > 32) snprintf(buf + n, sizeof(buf) - n, "...");
    return buf;
}

/* Read until the listener closes (EOF or reset) or the time is up. Checks
 * that whatever the listener answered is an ERROR record. 1 when closed. */
static int expect_close(int fd, const char *what)
{
    uint8_t answer[4096];
    size_t got = 0;
    double end = itest_now() + CLOSE_WAIT_MS / 1000.0;
    int closed = 0;

    while (!closed) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int left = (int)((end - itest_now()) * 1000);
        ssize_t n;
        if (left <= 0) break;
        if (poll(&pfd, 1, left) <= 0) continue;
        n = recv(fd, answer + got, sizeof(answer) - got, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno == ECONNRESET)) {
            closed = 1;
        } else if (n > 0) {
            got += (size_t)n;
            if (got == sizeof(answer)) break;
        }
    }
    if (got > 0) {
        uint32_t magic = (uint32_t)answer[0] | (uint32_t)answer[1] << 8 |
                         (uint32_t)answer[2] << 16 | (uint32_t)answer[3] << 24;
        if (got < PRECON_HDR_LEN || magic != PRECON_MAGIC ||
            answer[5] != PRECON_ERROR) {
            itest_note("BAD: %s: the listener answered %zu bytes that are not "
                       "an ERROR record: %s",
                       what, got, hex(answer, got));
            n_bad++;
            return closed;
        }
        itest_note("%s: the listener answered with an ERROR record (%zu "
                   "bytes)",
                   what, got);
    }
    if (!closed) {
        itest_note("BAD: %s: the listener kept the connection open for %d ms",
                   what, CLOSE_WAIT_MS);
        n_bad++;
    } else {
        itest_note("%s: closed by the listener", what);
    }
    return closed;
}

static void garbage_random(void)
{
    static const size_t lens[] = {1, 11, 12, 100, 4096, 65536};
    uint8_t *buf = malloc(65536);
    ITEST_ASSERT(buf != NULL, "out of memory");
    for (uint32_t seed = 1; seed <= 6; seed++) {
        size_t len = lens[seed - 1];
        int fd;
        itest_step("random bytes: seed %u, %zu bytes", seed, len);
        itest_fill(buf, len, seed * 7919u);
        fd = raw_connect();
        raw_send(fd, buf, len);
        /* Fewer bytes than a record header: only our EOF tells the listener
         * no more will come. */
        if (len < PRECON_HDR_LEN) shutdown(fd, SHUT_WR);
        expect_close(fd, itest_fmt("%zu random bytes (seed %u)", len, seed));
        close(fd);
    }
    free(buf);
}

static void garbage_header(const char *what, uint8_t version, uint8_t type,
                           uint32_t len, const void *payload, size_t plen)
{
    uint8_t b[PRECON_HDR_LEN + 256];
    size_t n = put_hdr(b, PRECON_MAGIC, version, type, 0, len);
    int fd;

    itest_step("%s", what);
    ITEST_ASSERT(plen <= sizeof(b) - n, "payload too long");
    if (plen) memcpy(b + n, payload, plen);
    fd = raw_connect();
    raw_send(fd, b, n + plen);
    expect_close(fd, what);
    close(fd);
}

static void garbage_huge(void)
{
    uint8_t b[PRECON_HDR_LEN];
    uint8_t more[1000];
    int fd;

    garbage_header("header announcing 4 GiB", PRECON_VERSION, PRECON_HELLO,
                   0xfffffff0u, NULL, 0);

    itest_step("header announcing 1 GiB followed by some bytes");
    put_hdr(b, PRECON_MAGIC, PRECON_VERSION, PRECON_HELLO, 0, 1u << 30);
    itest_fill(more, sizeof(more), 99);
    fd = raw_connect();
    raw_send(fd, b, sizeof(b));
    raw_send(fd, more, sizeof(more));
    expect_close(fd, "header announcing 1 GiB, then 1000 bytes");
    close(fd);
}

/* A well-formed HELLO payload (TLV fields: u16 tag, u16 length, value) as
 * a connecting peer sends it. */
static size_t put_tlv(uint8_t *b, size_t off, uint16_t tag, const void *v,
                      uint16_t len)
{
    b[off]     = (uint8_t)tag;
    b[off + 1] = (uint8_t)(tag >> 8);
    b[off + 2] = (uint8_t)len;
    b[off + 3] = (uint8_t)(len >> 8);
    memcpy(b + off + 4, v, len);
    return off + 4 + len;
}

static size_t put_tlv_u32(uint8_t *b, size_t off, uint16_t tag, uint32_t v)
{
    uint8_t le[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16),
                     (uint8_t)(v >> 24)};
    return put_tlv(b, off, tag, le, 4);
}

static size_t hello_payload(uint8_t *b)
{
    size_t off = 0;
    off = put_tlv(b, off, 1, "rawpeer_", 8);              /* name */
    off = put_tlv_u32(b, off, 2, (uint32_t)-1);           /* rank */
    off = put_tlv_u32(b, off, 3, 12345);                  /* node id */
    off = put_tlv(b, off, 4, "not-a-boot-id", 13);        /* boot id */
    off = put_tlv(b, off, 5, "rawhost", 7);               /* hostname */
    off = put_tlv_u32(b, off, 6, (uint32_t)getpid());     /* pid */
    return off;
}

/* Send a HELLO with `version`; the first record of the answer, if any. */
static int hello_answer_type(uint8_t version, const char *what)
{
    uint8_t b[PRECON_HDR_LEN + 256], answer[PRECON_HDR_LEN];
    size_t plen = hello_payload(b + PRECON_HDR_LEN);
    size_t got  = 0;
    double end  = itest_now() + CLOSE_WAIT_MS / 1000.0;
    int fd;

    put_hdr(b, PRECON_MAGIC, version, PRECON_HELLO, 0, (uint32_t)plen);
    fd = raw_connect();
    raw_send(fd, b, PRECON_HDR_LEN + plen);
    while (got < sizeof(answer) && itest_now() < end) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        ssize_t n;
        if (poll(&pfd, 1, 100) <= 0) continue;
        n = recv(fd, answer + got, sizeof(answer) - got, 0);
        if (n <= 0) break;
        got += (size_t)n;
    }
    close(fd);
    if (got < sizeof(answer)) {
        itest_note("%s: no answer record (%zu bytes), connection closed or "
                   "silent",
                   what, got);
        return -1;
    }
    itest_note("%s: answered with record type %u", what, answer[5]);
    return answer[5];
}

static void garbage_version(void)
{
    int t;

    /* The control case: the raw HELLO is good enough to be answered. */
    itest_step("well-formed HELLO, version 1 (control)");
    t = hello_answer_type(PRECON_VERSION, "well-formed HELLO, version 1");
    if (t != PRECON_HELLO) {
        itest_note("BAD: the listener did not answer a well-formed HELLO with "
                   "a HELLO (got %d): the raw records of this test may be out "
                   "of date with lib/pscom/precon_codec.h",
                   t);
        n_bad++;
    }
    itest_step("well-formed HELLO, version 2");
    t = hello_answer_type(PRECON_VERSION + 1, "well-formed HELLO, version 2");
    if (t != -1 && t != PRECON_ERROR) {
        itest_note("BAD: the listener answered a HELLO of an unsupported "
                   "version with record type %d, not ERROR (7)",
                   t);
        n_bad++;
    }
    {
        uint8_t b[PRECON_HDR_LEN + 256];
        size_t plen = hello_payload(b);
        garbage_header("well-formed HELLO, version 99 (then wait for close)",
                       99, PRECON_HELLO, (uint32_t)plen, b, plen);
    }
    garbage_header("correct magic, version 99", 99, PRECON_HELLO, 0, NULL, 0);
    garbage_header("correct magic, version 0", 0, PRECON_HELLO, 0, NULL, 0);
    garbage_header("correct magic, version 255 with a payload", 255,
                   PRECON_HELLO, 8, "\1\0\10\0abcd", 8);
}

static void garbage_records(void)
{
    /* tag NAME (1) claiming 200 bytes in an 8-byte payload */
    static const uint8_t overrun[8] = {1, 0, 200, 0, 'x', 'y', 'z', 'w'};
    /* tag NAME with a wrong length (3 instead of 8) */
    static const uint8_t badlen[7] = {1, 0, 3, 0, 'a', 'b', 'c'};

    garbage_header("unknown record type 200", PRECON_VERSION, 200, 0, NULL, 0);
    garbage_header("record type 0", PRECON_VERSION, 0, 0, NULL, 0);
    garbage_header("HELLO whose field overruns the payload", PRECON_VERSION,
                   PRECON_HELLO, sizeof(overrun), overrun, sizeof(overrun));
    garbage_header("HELLO with a wrong field length", PRECON_VERSION,
                   PRECON_HELLO, sizeof(badlen), badlen, sizeof(badlen));
    garbage_header("ESTABLISHED as the first record", PRECON_VERSION, 5, 0,
                   NULL, 0);
}

static void garbage_short(void)
{
    uint8_t b[PRECON_HDR_LEN + 10];
    int fd;

    itest_step("a few bytes then close");
    put_hdr(b, PRECON_MAGIC, PRECON_VERSION, PRECON_HELLO, 0, 100);
    fd = raw_connect();
    raw_send(fd, b, 5);
    close(fd);

    itest_step("a header promising 100 bytes, 10 sent, then close");
    memset(b + PRECON_HDR_LEN, 0, 10);
    fd = raw_connect();
    raw_send(fd, b, sizeof(b));
    close(fd);

    itest_step("connect then close, 10 times");
    for (int i = 0; i < 10; i++) close(raw_connect());

    itest_step("connect then close with a reset");
    {
        struct linger lg = {.l_onoff = 1, .l_linger = 0};
        fd = raw_connect();
        raw_send(fd, b, 3);
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
        close(fd);
    }
}

int main(void)
{
    itest_child_t lis, cli;
    int silent[N_SILENT], partial;
    uint8_t hdr[PRECON_HDR_LEN];
    char *ep;
    int failed;

    itest_watchdog(ITEST_DEFAULT_TIMEOUT + 10);
    itest_note("transport %s", itest_transport_name());
    itest_spawn(&lis, "listener", listener, NULL);
    ep = itest_link_recv_str(&lis.link);
    itest_note("listener at %s", ep);
    parse_ep(ep);

    itest_step("opening %d silent connections and one with half a header",
               N_SILENT);
    for (int i = 0; i < N_SILENT; i++) silent[i] = raw_connect();
    put_hdr(hdr, PRECON_MAGIC, PRECON_VERSION, PRECON_HELLO, 0, 64);
    partial = raw_connect();
    raw_send(partial, hdr, 6);

    garbage_random();
    garbage_huge();
    garbage_version();
    garbage_records();
    garbage_short();

    itest_step("a real client connects while silent connections are open");
    itest_spawn(&cli, "client", client, NULL);
    itest_link_send_str(&cli.link, ep);
    free(ep);
    failed = itest_children_check((itest_child_t *[]){&cli, &lis}, 2);

    for (int i = 0; i < N_SILENT; i++) close(silent[i]);
    close(partial);
    if (n_bad) itest_note("%d garbage cases were handled badly", n_bad);
    failed |= n_bad != 0;
    itest_note("%s", failed ? "FAILED" : "passed");
    return failed ? 1 : 0;
}
