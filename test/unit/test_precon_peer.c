/*
 * The connecting side of the handshake against peers that are not what
 * they should be: another protocol version, not pscom at all, a peer that
 * hangs up, a peer with no transport in common. A fake peer runs in a
 * thread with plain blocking sockets.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "core.h"
#include "precon_codec.h"

struct fake {
    int lfd;
    int port;
    const void *reply; /* bytes sent after the client's first record */
    size_t reply_len;
    bool hang_up;      /* close without a reply */
    uint8_t got[4096]; /* what the client sent after our reply */
    size_t got_len;
    pthread_t thread;
};

static ssize_t read_full(int fd, void *buf, size_t len)
{
    size_t done = 0;
    while (done < len) {
        ssize_t n = read(fd, (char *)buf + done, len - done);
        if (n <= 0) return (ssize_t)done;
        done += n;
    }
    return (ssize_t)done;
}

static void *fake_main(void *arg)
{
    struct fake *f = arg;
    int fd = accept(f->lfd, NULL, NULL);
    if (fd < 0) return NULL;
    uint8_t hdr[PSC_PRECON_HDR_LEN];
    if (read_full(fd, hdr, sizeof(hdr)) == sizeof(hdr) && !f->hang_up) {
        struct psc_precon_hdr h;
        psc_precon_hdr_decode(hdr, &h, 1 << 20);
        uint8_t *payload = malloc(h.len + 1);
        read_full(fd, payload, h.len);
        free(payload);
        if (write(fd, f->reply, f->reply_len) < 0) {
        }
        ssize_t n;
        while ((n = read(fd, f->got + f->got_len, sizeof(f->got) - f->got_len)) > 0)
            f->got_len += n;
    }
    close(fd);
    return NULL;
}

static void fake_start(struct fake *f)
{
    f->lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sa);
    assert_int_equal(bind(f->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(f->lfd, 4), 0);
    getsockname(f->lfd, (struct sockaddr *)&sa, &len);
    f->port = ntohs(sa.sin_port);
    pthread_create(&f->thread, NULL, fake_main, f);
}

static void fake_stop(struct fake *f)
{
    pthread_join(f->thread, NULL);
    close(f->lfd);
}

static int errors;
static pscom_err_t last_err;
static pscom_op_t last_op;

static void on_error(pscom_connection_t *c, pscom_op_t op, pscom_err_t err)
{
    errors++;
    last_err = err;
    last_op = op;
}

static pscom_err_t connect_to(struct fake *f)
{
    char ep[64];
    snprintf(ep, sizeof(ep), "127.0.0.1:%d@fake", f->port);
    pscom_socket_t *s = pscom_open_socket(0, 0, 0, 0);
    s->ops.con_error = on_error;
    pscom_connection_t *c = pscom_open_connection(s);
    errors = 0;
    pscom_err_t rc = pscom_connect(c, ep, 1, PSCOM_CON_FLAG_DIRECT);
    pscom_close_socket(s);
    return rc;
}

static int setup(void **state)
{
    setenv("PSP_RETRY", "2", 1);
    assert_int_equal(pscom_init(PSCOM_VERSION), PSCOM_SUCCESS);
    pscom_set_debug(0);
    return 0;
}

static void other_version(void **state)
{
    /* A record header of protocol version 2. */
    uint8_t reply[PSC_PRECON_HDR_LEN] = {'P', 'S', 'C', 'P', 2, PSC_PRECON_HELLO};
    struct fake f = {.reply = reply, .reply_len = sizeof(reply)};
    fake_start(&f);
    assert_int_equal(connect_to(&f), PSCOM_ERR_UNSUPPORTED_VERSION);
    fake_stop(&f);
    assert_int_equal(errors, 1);
    assert_int_equal(last_err, PSCOM_ERR_UNSUPPORTED_VERSION);
    assert_int_equal(last_op, PSCOM_OP_CONNECT);

    /* We told the peer why, in our version. */
    struct psc_precon_hdr h;
    assert_true(f.got_len >= PSC_PRECON_HDR_LEN);
    assert_int_equal(psc_precon_hdr_decode(f.got, &h, 65536), 0);
    assert_int_equal(h.type, PSC_PRECON_ERROR);
    struct psc_precon_msg m;
    assert_int_equal(psc_precon_msg_decode(h.type, f.got + PSC_PRECON_HDR_LEN,
                                           h.len, &m), 0);
    assert_int_equal(m.error_code, PSCOM_ERR_UNSUPPORTED_VERSION);
    assert_non_null(strstr(m.error_text, "version 2"));
}

static void not_pscom(void **state)
{
    static const char reply[] = "HTTP/1.1 400 Bad Request\r\n\r\n";
    struct fake f = {.reply = reply, .reply_len = sizeof(reply) - 1};
    fake_start(&f);
    assert_int_equal(connect_to(&f), PSCOM_ERR_IOERROR);
    fake_stop(&f);
    assert_int_equal(errors, 1);
}

static void oversized_record(void **state)
{
    /* A valid header announcing a payload far over the limit. */
    uint8_t reply[PSC_PRECON_HDR_LEN] = {'P', 'S', 'C', 'P', 1, PSC_PRECON_HELLO,
                                         0, 0, 0xff, 0xff, 0xff, 0x7f};
    struct fake f = {.reply = reply, .reply_len = sizeof(reply)};
    fake_start(&f);
    assert_int_equal(connect_to(&f), PSCOM_ERR_IOERROR);
    fake_stop(&f);
}

static void hang_up_then_give_up(void **state)
{
    /* Every attempt is closed at once: retried, then failed. */
    struct fake f = {.hang_up = true};
    fake_start(&f);
    pthread_t second;
    pthread_create(&second, NULL, fake_main, &f); /* the retry */
    pscom_err_t rc = connect_to(&f);
    fake_stop(&f);
    pthread_join(second, NULL);
    assert_int_not_equal(rc, PSCOM_SUCCESS);
    assert_int_equal(errors, 1);
}

static void no_common_transport(void **state)
{
    /* A real pscom peer in this process that only allows loop, while our
     * socket refuses loop: nothing in common. */
    pscom_socket_t *srv = pscom_open_socket(0, 0, 0, 0);
    pscom_con_type_mask_only(srv, PSCOM_CON_TYPE_LOOP);
    assert_int_equal(pscom_listen(srv, PSCOM_ANYPORT), PSCOM_SUCCESS);
    char *ep;
    pscom_socket_get_ep_str(srv, &ep);

    pscom_socket_t *cli = pscom_open_socket(0, 0, 1, 0);
    pscom_con_type_mask_del(cli, PSCOM_CON_TYPE_LOOP);
    cli->ops.con_error = on_error;
    errors = 0;
    pscom_connection_t *c = pscom_open_connection(cli);
    assert_int_equal(pscom_connect(c, ep, 0, PSCOM_CON_FLAG_DIRECT),
                     PSCOM_ERR_CONNECTION_REFUSED);
    assert_int_equal(errors, 1);
    /* The refusing side dropped its half: no connection was accepted. */
    assert_null(pscom_get_next_connection(srv, NULL));
    pscom_socket_free_ep_str(ep);
    pscom_close_socket(cli);
    pscom_close_socket(srv);
}

/* A port on loopback where nothing listens: connecting there is refused. */
static int refusing_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sa);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    getsockname(fd, (struct sockaddr *)&sa, &len);
    close(fd);
    return ntohs(sa.sin_port);
}

/* A peer asks us to call it back (BACKCONNECT, on-demand) at a port where
 * nothing listens: the connection made for the call back fails after its
 * retries and is freed (no one else knows it; under valgrind or the
 * sanitizer build it showed as lost). */
static void failed_call_back_is_freed(void **state)
{
    (void)state;
    pscom_socket_t *s = pscom_open_socket(0, 0, 0, 0);
    assert_int_equal(pscom_listen(s, PSCOM_ANYPORT), PSCOM_SUCCESS);

    uint8_t buf[1024];
    struct psc_precon_writer w;
    psc_precon_begin(&w, buf, sizeof(buf), PSC_PRECON_BACKCONNECT);
    psc_precon_put(&w, PSC_TAG_NAME, "zzcaller", 8);
    psc_precon_put_i32(&w, PSC_TAG_RANK, 7);
    psc_precon_put_i32(&w, PSC_TAG_NODE_ID, 0);
    psc_precon_put_str(&w, PSC_TAG_BOOT_ID, "boot");
    psc_precon_put_str(&w, PSC_TAG_HOSTNAME, "elsewhere");
    psc_precon_put_u32(&w, PSC_TAG_PID, 1);
    psc_precon_put_u32(&w, PSC_TAG_PORT, (uint32_t)refusing_port());
    psc_precon_put_u64(&w, PSC_TAG_CON_ID, 1);
    long n = psc_precon_finish(&w);
    assert_true(n > 0);

    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)s->listen_portno),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(write(fd, buf, (size_t)n), n);

    /* The call back is made, refused, retried (PSP_RETRY=2), given up. */
    bool called_back = false;
    uint64_t deadline = psc_now_ms() + 10000;
    while (psc_now_ms() < deadline) {
        pscom_test_any();
        if (!psc_list_empty(&psc_ctx.precons)) called_back = true;
        if (called_back && psc_list_empty(&psc_ctx.precons)) break;
    }
    assert_true(called_back);
    assert_true(psc_list_empty(&psc_ctx.precons));
    assert_true(psc_list_empty(&psc_ctx.zombies));
    assert_null(pscom_get_next_connection(s, NULL)); /* never announced */
    close(fd);
    pscom_close_socket(s);
}

/* Our on-demand connection to a peer with the higher name: its first send
 * asks the peer to call back, and the call is adopted into that connection.
 * When that handshake fails (here: no transport in common), the
 * application's connection fails with the send queued on it, and is
 * reported; before, it was freed under the application (the send never
 * completed, the connection's pointer dangled). */
static void adopted_call_that_fails_fails_the_connection(void **state)
{
    (void)state;
    pscom_socket_t *low = pscom_open_socket(0, 0, 0, 0);
    pscom_socket_t *high = pscom_open_socket(0, 0, 1, 0);
    pscom_socket_set_name(low, "aaaaaaaa");
    pscom_socket_set_name(high, "zzzzzzzz");
    pscom_con_type_mask_only(low, PSCOM_CON_TYPE_LOOP);
    pscom_con_type_mask_del(high, PSCOM_CON_TYPE_LOOP);
    assert_int_equal(pscom_listen(low, PSCOM_ANYPORT), PSCOM_SUCCESS);
    assert_int_equal(pscom_listen(high, PSCOM_ANYPORT), PSCOM_SUCCESS);
    char *ep;
    assert_int_equal(pscom_socket_get_ep_str(high, &ep), PSCOM_SUCCESS);
    low->ops.con_error = on_error;
    errors = 0;
    pscom_connection_t *c = pscom_open_connection(low);
    assert_int_equal(pscom_connect(c, ep, 1, PSCOM_CON_FLAG_ONDEMAND),
                     PSCOM_SUCCESS);
    pscom_socket_free_ep_str(ep);

    pscom_request_t *r = pscom_request_create(0, 0);
    pscom_req_prepare(r, c, "x", 2, NULL, 0);
    pscom_post_send(r);
    uint64_t deadline = psc_now_ms() + 10000;
    while (!pscom_req_is_done(r) && psc_now_ms() < deadline) pscom_test_any();
    assert_true(pscom_req_is_done(r));
    assert_true(r->state & PSCOM_REQ_STATE_ERROR);
    assert_int_equal(errors, 1);
    assert_int_equal(con_of(c)->magic, PSC_CON_MAGIC); /* still ours */
    assert_ptr_equal(pscom_get_next_connection(low, NULL), c);
    pscom_request_free(r);
    pscom_close_socket(high);
    pscom_close_socket(low);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(other_version),
        cmocka_unit_test(not_pscom),
        cmocka_unit_test(oversized_record),
        cmocka_unit_test(hang_up_then_give_up),
        cmocka_unit_test(no_common_transport),
        cmocka_unit_test(failed_call_back_is_freed),
        cmocka_unit_test(adopted_call_that_fails_fails_the_connection),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
