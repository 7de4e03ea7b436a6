/*
 * A process that waits for a message that is slow to come gives the CPU
 * away: with more processes than cores the peer it waits for may need that
 * core (MPI libraries call pscom_wait_any in their progress loop, and a
 * loop that never yields made their collectives crawl on an oversubscribed
 * node). Over transports that signal through file descriptors (tcp) it
 * sleeps in epoll_wait until data comes; over the others (shm) it yields.
 *
 * The program is linked with the static core and -Wl,--wrap=sched_yield,
 * --wrap=epoll_wait so that it counts the library's calls (epoll_wait only
 * those with a timeout: sleeps). PSP_SCHED_YIELD is 0 (meson sets it):
 * yielding must come from the idle rule, not from the setting. The sender
 * sleeps for a while without calling pscom, then sends; the receiver waits
 * for the first message with pscom_wait_any and for the second with
 * pscom_wait. IDLE_EXPECT says what both waits must have done ("yield" or
 * "sleep") at least once, and that the other never happened, or "spin":
 * neither happened (PSP_WAIT_SPIN longer than the pause); both messages
 * must arrive intact. The transport is PSCOM_TEST_TRANSPORT.
 *
 * IDLE_CPUS, when set, is the number of CPUs the library sees (sysconf is
 * wrapped too): with 1, the two processes oversubscribe the node, and a
 * wait must rest at once whatever PSP_WAIT_SPIN says.
 */
#include "itest.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

int __real_sched_yield(void);
int __wrap_sched_yield(void);
int __real_epoll_wait(int epfd, struct epoll_event *ev, int n, int timeout);
int __wrap_epoll_wait(int epfd, struct epoll_event *ev, int n, int timeout);
int __real_epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev);
int __wrap_epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev);

static unsigned long yields, sleeps, ctls;

int __wrap_epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
    ctls++;
    return __real_epoll_ctl(epfd, op, fd, ev);
}

int __wrap_sched_yield(void)
{
    yields++;
    return __real_sched_yield();
}

int __wrap_epoll_wait(int epfd, struct epoll_event *ev, int n, int timeout)
{
    if (timeout != 0) sleeps++;
    return __real_epoll_wait(epfd, ev, n, timeout);
}

long __real_sysconf(int name);
long __wrap_sysconf(int name);

/* ThreadSanitizer calls sysconf while it starts, before an instrumented
 * function may run. */
#if defined(__has_attribute)
#if __has_attribute(disable_sanitizer_instrumentation)
__attribute__((disable_sanitizer_instrumentation))
#endif
#endif
long __wrap_sysconf(int name)
{
    const char *cpus = getenv("IDLE_CPUS");
    if (name == _SC_NPROCESSORS_ONLN && cpus) return atol(cpus);
    return __real_sysconf(name);
}

static enum { SPIN, YIELD, SLEEP } expect;

#define MSG_LEN 4096
#define PAUSE_MS 300

static void send_after_pause(pscom_connection_t *con, uint32_t seed)
{
    char buf[MSG_LEN];
    itest_sleep_ms(PAUSE_MS);
    itest_fill(buf, sizeof(buf), seed);
    pscom_request_t *req = itest_request(0);
    pscom_req_prepare(req, con, buf, sizeof(buf), NULL, 0);
    pscom_post_send(req);
    pscom_wait(req);
    ITEST_ASSERT_REQ_OK(req, "send %u", seed);
    pscom_request_free(req);
}

/* Post a receive and wait for it with pscom_wait_any (any = 1) or
 * pscom_wait; check that the wait yielded or slept as expected. */
static void recv_counting(pscom_connection_t *con, uint32_t seed, int any)
{
    char *buf = itest_alloc_guarded(MSG_LEN);
    pscom_request_t *req = itest_request(0);
    pscom_req_prepare(req, con, buf, MSG_LEN, NULL, 0);
    pscom_post_recv(req);
    const char *how = any ? "pscom_wait_any" : "pscom_wait";
    yields = sleeps = ctls = 0;
    if (any)
        while (!pscom_req_is_done(req)) pscom_wait_any();
    else
        pscom_wait(req);
    unsigned long y = yields, s = sleeps, c = ctls;
    itest_note("%s: sched_yield %lu times, epoll_wait with a timeout %lu "
               "times, epoll_ctl %lu times", how, y, s, c);
    ITEST_ASSERT_REQ_OK(req, "receive %u", seed);
    ITEST_ASSERT_EQ(req->header.data_len, MSG_LEN, "length of message %u",
                    seed);
    ITEST_ASSERT_PATTERN(buf, MSG_LEN, seed, "message %u", seed);
    ITEST_ASSERT_GUARD(buf, MSG_LEN, "message %u", seed);
    pscom_request_free(req);
    free(buf);
    if (expect == SPIN) {
        ITEST_ASSERT_EQ(y, 0, "%s yielded before PSP_WAIT_SPIN passed", how);
        ITEST_ASSERT_EQ(s, 0, "%s slept before PSP_WAIT_SPIN passed", how);
    } else if (expect == SLEEP) {
        ITEST_ASSERT(s > 0, "%s polled %d ms without sleeping", how, PAUSE_MS);
        ITEST_ASSERT_EQ(y, 0, "%s yielded although it could sleep", how);
        /* Oversubscribed, the socket stays armed between sleeps: a few
         * epoll_ctl calls in all, not two per sleep. */
        if (getenv("IDLE_CPUS"))
            ITEST_ASSERT(c <= 4, "%s: %lu epoll_ctl calls for %lu sleeps",
                         how, c, s);
    } else {
        ITEST_ASSERT(y > 0, "%s busy-polled %d ms without yielding the CPU",
                     how, PAUSE_MS);
        ITEST_ASSERT_EQ(s, 0, "%s slept although it must poll", how);
    }
}

static int receiver(itest_link_t *link, void *arg)
{
    pscom_socket_t *sock;
    pscom_connection_t *con = itest_accept_peer(link, "receiver", &sock);

    itest_step("waiting with pscom_wait_any for a message %d ms away",
               PAUSE_MS);
    recv_counting(con, 1, 1);

    itest_step("waiting with pscom_wait for a message %d ms away", PAUSE_MS);
    recv_counting(con, 2, 0);

    itest_link_send_u64(link, 0);
    itest_link_recv_u64(link);
    pscom_close_socket(sock);
    return 0;
}

static int sender(itest_link_t *link, void *arg)
{
    pscom_socket_t *sock;
    pscom_connection_t *con = itest_connect_to_peer(link, "sender", &sock);
    itest_step("sending two messages, each after a pause");
    send_after_pause(con, 1);
    send_after_pause(con, 2);
    itest_link_send_u64(link, 0);
    itest_link_recv_u64(link);
    pscom_close_socket(sock);
    return 0;
}

int main(void)
{
    itest_child_t rcv, snd;
    const char *how = getenv("IDLE_EXPECT");

    if (!how || (strcmp(how, "spin") && strcmp(how, "yield") &&
                 strcmp(how, "sleep"))) {
        fprintf(stderr, "idle_yield: set IDLE_EXPECT=spin, yield or sleep\n");
        return 2;
    }
    expect = !strcmp(how, "spin") ? SPIN : !strcmp(how, "yield") ? YIELD : SLEEP;

    itest_watchdog(ITEST_DEFAULT_TIMEOUT + 10);
    itest_spawn(&rcv, "receiver", receiver, NULL);
    itest_spawn(&snd, "sender", sender, NULL);
    itest_link_relay(&rcv.link, &snd.link); /* the endpoint */
    /* Both are done: let them close. */
    itest_link_recv_u64(&rcv.link);
    itest_link_recv_u64(&snd.link);
    itest_link_send_u64(&rcv.link, 0);
    itest_link_send_u64(&snd.link, 0);
    return itest_children_check((itest_child_t *[]){&rcv, &snd}, 2);
}
