/*
 * Messages larger than 4 GiB (MPI's large counts): the lengths travel in
 * 40 bits and no part of the library may cut them to 32.
 *
 * The sender sends one message of BIG_MESSAGE_LEN bytes (default
 * 4 GiB + 4099) three ways: posted with pscom_post_send into a receive
 * posted first; with pscom_send (the library copies it) into a receive
 * posted first; and posted before the receive is (an unexpected message).
 * The receiver checks every byte, the guard behind its buffer, and the
 * header's data_len.
 *
 * Memory: the sender holds the message and, for pscom_send, its copy; the
 * receiver one buffer (with an unexpected eager message, also the
 * library's). The test needs about 3 times the message in free memory and
 * is skipped (exit 77) when /proc/meminfo says there is less.
 */
#include "itest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* Filling and checking 4 GiB takes seconds, more under sanitizers. */
#define WATCHDOG_S 600

static size_t len; /* BIG_MESSAGE_LEN */

enum way { POSTED, COPIED, UNEXPECTED, N_WAYS };
static const char *const way_name[N_WAYS] = {
    "pscom_post_send, receive posted first",
    "pscom_send (a copy), receive posted first",
    "pscom_post_send, receive posted after the message came",
};

static uint64_t seed_of(enum way w)
{
    return 0xb16000u + (uint64_t)w;
}

/* The pattern: the 8-byte word at offset 8i is i times an odd constant,
 * xor the seed; cheap enough for 4 GiB (itest_fill takes seconds per
 * GiB), and no two words of a message alike, so a shifted or repeated
 * piece shows. */
static uint64_t word_at(uint64_t seed, size_t i)
{
    return (uint64_t)i * 0x9e3779b97f4a7c15ull ^ seed;
}

static void fill(char *buf, size_t n, uint64_t seed)
{
    size_t i = 0;
    for (; (i + 1) * 8 <= n; i++) {
        uint64_t w = word_at(seed, i);
        memcpy(buf + i * 8, &w, 8);
    }
    uint64_t w = word_at(seed, i);
    memcpy(buf + i * 8, &w, n - i * 8);
}

/* The offset of the first byte that differs from the pattern, or n. */
static size_t mismatch(const char *buf, size_t n, uint64_t seed)
{
    size_t i = 0;
    for (; (i + 1) * 8 <= n; i++) {
        uint64_t w = word_at(seed, i);
        if (memcmp(buf + i * 8, &w, 8) != 0) break;
    }
    uint64_t w = word_at(seed, i);
    for (size_t k = i * 8; k < n; k++)
        if (buf[k] != ((const char *)&w)[(k - i * 8) % 8]) return k;
    return n;
}

/* n bytes and a guard behind them, in huge pages where the kernel gives
 * them on request: a million page faults of 4 KiB take many seconds in
 * some virtual machines. */
static char *big_alloc(size_t n)
{
    void *p = NULL;
    if (posix_memalign(&p, 2 << 20, n + ITEST_GUARD_LEN) != 0)
        ITEST_FAIL("out of memory for %zu bytes", n);
    madvise(p, n + ITEST_GUARD_LEN, MADV_HUGEPAGE);
    memset((char *)p + n, ITEST_GUARD_BYTE, ITEST_GUARD_LEN);
    return p;
}

static int sender(itest_link_t *link, void *arg)
{
    pscom_socket_t *sock;
    itest_watchdog(WATCHDOG_S);
    pscom_connection_t *con = itest_connect_to_peer(link, "sender", &sock);
    char *buf = big_alloc(len);
    for (enum way w = POSTED; w < N_WAYS; w++) {
        /* The receive is posted, or not; the last message (pscom_send's,
         * without a request) arrived. */
        while (!itest_link_ready(link, 0)) pscom_test_any();
        itest_link_wait_note(link);
        itest_step("sending %zu bytes: %s", len, way_name[w]);
        fill(buf, len, seed_of(w));
        if (w == COPIED) {
            pscom_send(con, NULL, 0, buf, len);
        } else {
            pscom_request_t *s = itest_request(0);
            pscom_req_prepare(s, con, buf, len, NULL, 0);
            pscom_post_send(s);
            if (w == UNEXPECTED) {
                /* Until it is there (an eager one) or announced. */
                itest_progress_ms(1000);
                itest_link_send_str(link, "sent");
            }
            pscom_wait(s);
            ITEST_ASSERT_REQ_OK(s, "the send of %zu bytes (%s)", len,
                                way_name[w]);
            pscom_request_free(s);
        }
    }
    free(buf);
    while (!itest_link_ready(link, 0)) pscom_test_any();
    itest_link_wait_note(link); /* checked */
    pscom_close_socket(sock);
    return 0;
}

static int receiver(itest_link_t *link, void *arg)
{
    pscom_socket_t *sock;
    itest_watchdog(WATCHDOG_S);
    pscom_connection_t *con = itest_accept_peer(link, "receiver", &sock);
    itest_step("over %s", pscom_con_type_str(con->type));
    char *buf = big_alloc(len);
    memset(buf, 0x5a, len);
    for (enum way w = POSTED; w < N_WAYS; w++) {
        pscom_request_t *r = itest_request(0);
        r->connection = con;
        r->data = buf;
        r->data_len = len;
        if (w == UNEXPECTED) {
            itest_link_send_str(link, "go");
            itest_link_wait_note(link); /* sent */
            pscom_post_recv(r);
        } else {
            pscom_post_recv(r);
            itest_link_send_str(link, "go");
        }
        pscom_wait(r);
        ITEST_ASSERT_REQ_OK(r, "the receive of %zu bytes (%s)", len,
                            way_name[w]);
        ITEST_ASSERT_EQ(r->header.data_len, len, "header.data_len (%s)",
                        way_name[w]);
        size_t at = mismatch(buf, len, seed_of(w));
        ITEST_ASSERT(at == len, "the %zu-byte message (%s) differs from what "
                     "was sent from offset %zu on", len, way_name[w], at);
        ITEST_ASSERT_GUARD(buf, len, "the receive of %zu bytes", len);
        pscom_request_free(r);
    }
    free(buf);
    itest_link_send_str(link, "checked");
    pscom_close_socket(sock);
    return 0;
}

/* Available memory in bytes, 0 when unknown. */
static size_t mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[128];
    unsigned long long kib = 0;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1) break;
    fclose(f);
    return (size_t)kib * 1024;
}

int main(void)
{
    const char *s = getenv("BIG_MESSAGE_LEN");
    len = s ? strtoull(s, NULL, 0) : (4ull << 30) + 4099;
    size_t avail = mem_available();
    if (avail && avail / 3 < len) {
        itest_note("SKIP: %zu MiB of memory available, the test needs about "
                   "%zu MiB", avail >> 20, 3 * (len >> 20));
        return 77;
    }
    itest_note("transport %s, %zu bytes", itest_transport_name(), len);
    itest_watchdog(WATCHDOG_S + 10);
    itest_child_t r, snd;
    itest_spawn(&r, "receiver", receiver, NULL);
    itest_spawn(&snd, "sender", sender, NULL);
    itest_link_relay(&r.link, &snd.link); /* the endpoint */
    for (enum way w = POSTED; w < N_WAYS; w++) {
        itest_link_relay(&r.link, &snd.link); /* go */
        if (w == UNEXPECTED) itest_link_relay(&snd.link, &r.link); /* sent */
    }
    itest_link_relay(&r.link, &snd.link); /* checked */
    int failed = itest_children_check((itest_child_t *[]){&r, &snd}, 2);
    itest_note("%s", failed ? "FAILED" : "passed");
    return failed ? 1 : 0;
}
