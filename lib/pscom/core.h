/*
 * Internal structures of the core: the library context, sockets,
 * connections and requests, and the functions the core files share.
 *
 * Each public object is the last member of its private wrapper, because the
 * public structs end in user storage of a size chosen at run time. The
 * wrappers are found back with psc_container_of (sock_of, con_of, req_of).
 */
#ifndef PSC_CORE_H
#define PSC_CORE_H

#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <netinet/in.h>
#include <sys/uio.h>

#include "config.h"
#include "list.h"
#include "log.h"
#include "plugin.h"
#include "pscom.h"
#include "pscom_plugin.h"

#define PSC_SOCK_MAGIC 0x736f636bu /* "sock" */
#define PSC_CON_MAGIC  0x636f6e6eu /* "conn" */
#define PSC_REQ_MAGIC  0x72657175u /* "requ" */
#define PSC_REQ_FREED  0x66726565u /* "free" */

/* ---------------------------------------------------------------------- */
/* Wire format of messages on an established connection                   */
/* ---------------------------------------------------------------------- */

/* Message types (pscom_header_net_t.msg_type). */
enum psc_msg_type {
    PSC_MSG_USER      = 0, /* eager user message: header, xheader, data */
    PSC_MSG_RNDV_REQ  = 1, /* rendezvous announcement: xheader + psc_rndv_info */
    PSC_MSG_RNDV_CTS  = 2, /* receiver is ready: psc_rndv_cts, no data */
    PSC_MSG_RNDV_DATA = 3, /* rendezvous body: psc_rndv_data_hdr, data */
    PSC_MSG_EOF       = 4, /* the sender closes the connection */
    PSC_MSG_RNDV_FIN  = 5, /* receiver pulled the body itself: psc_rndv_fin */
    /* One-sided communication (rma.c, doc/rma.md). */
    PSC_MSG_RMA_PUT   = 6,  /* xheader rma_put + user; body written at dest */
    PSC_MSG_RMA_ACC   = 7,  /* xheader rma_accumulate + user; body: operand */
    PSC_MSG_RMA_GET   = 8,  /* xheader rma_get + user; no body */
    PSC_MSG_RMA_GACC  = 9,  /* xheader rma_get_accumulate + user; operand */
    PSC_MSG_RMA_FOP   = 10, /* xheader rma_fetch_op + user; operand */
    PSC_MSG_RMA_CAS   = 11, /* xheader rma_compare_swap + user; compare, new */
    PSC_MSG_RMA_REPLY = 12, /* psc_rma_reply; body: the target's bytes */
    PSC_MSG_RMA_WRITE = 13, /* xheader rma_write; body written at dest */
    PSC_MSG_RMA_READ  = 14, /* xheader rma_read; no body */
    /* Groups (group.c). */
    PSC_MSG_BCAST     = 15, /* pscom_xheader_bcast_t + user xheader; data */
    PSC_MSG_BARRIER   = 16, /* pscom_xheader_bcast_t; no body */
    /* One-sided notices: a plugin moved the bytes (rma.c). */
    PSC_MSG_RMA_PUT_DONE = 17, /* xheader rma_put + user + psc_rma_notice */
    PSC_MSG_RMA_GET_DONE = 18, /* xheader rma_get + user; no body */
    PSC_MSG_TYPE_MAX  = 18,
};

/* The answer to RMA_GET, _GACC, _FOP, _CAS and _READ. */
struct psc_rma_reply {
    uint64_t id;      /* the origin's request id, from the request's xheader */
    int32_t status;   /* 0, or the pscom_err_t the target refused with */
    uint32_t reserved;
};

/* Ends the xheader of RMA_PUT_DONE: the length the plugin wrote. */
struct psc_rma_notice {
    uint64_t len;
};

/* Largest plugin description of a send buffer (zero-copy rendezvous). */
#define PSC_RNDV_BLOB_MAX 64

/* Ends the xheader of a RNDV_REQ: [user xheader][blob][psc_rndv_info]. */
struct psc_rndv_info {
    uint64_t sender_id; /* the send request's id at the sender */
    uint64_t data_len;  /* the body length */
    uint32_t blob_len;  /* bytes of plugin blob before this trailer */
    uint32_t reserved;
};

struct psc_rndv_fin {
    uint64_t sender_id;
};

struct psc_rndv_cts {
    uint64_t sender_id;
    uint64_t receiver_id;
};

struct psc_rndv_data_hdr {
    uint64_t receiver_id;
};

#define PSC_HDR_LEN sizeof(pscom_header_net_t)
/* Spare xheader room every request has for protocol trailers. */
#define PSC_XHEADER_SPARE (sizeof(struct psc_rndv_info) + PSC_RNDV_BLOB_MAX)
/* The longest xheader a message can carry: the header's 16-bit field also
 * counts the trailer. */
#define PSC_XHEADER_MAX ((size_t)UINT16_MAX - PSC_XHEADER_SPARE)
/* Room for a control frame: header + the largest control xheader. */
#define PSC_CTRL_FRAME_LEN (PSC_HDR_LEN + sizeof(struct psc_rndv_cts))

/* Check an arriving header: 0, or -1 with *why set to a static text. */
int psc_header_check(const pscom_header_net_t *hdr, const char **why);

/* ---------------------------------------------------------------------- */
/* Requests                                                               */
/* ---------------------------------------------------------------------- */

enum psc_req_kind {
    PSC_REQ_USER,      /* created by pscom_request_create */
    PSC_REQ_GENERATED, /* an unexpected message waiting for its receive */
    PSC_REQ_CONTROL,   /* an internal frame (CTS, EOF); freed when sent */
};

/* What the frame of a queued send request is. */
enum psc_frame {
    PSC_FRAME_EAGER,     /* header + xheader + data */
    PSC_FRAME_RNDV_REQ,  /* header + xheader + rndv info */
    PSC_FRAME_RNDV_DATA, /* ctrl header + data */
    PSC_FRAME_CONTROL,   /* ctrl header only */
};

struct psc_con;

struct psc_req {
    uint32_t magic;
    uint32_t alloc_size; /* bytes allocated for it (with xheader, user);
                          * UINT32_MAX: that many or more */
    uint8_t kind;  /* enum psc_req_kind */
    uint8_t frame; /* enum psc_frame, while in a send queue */
    bool self_free; /* free after io_done (pscom_send, control frames) */
    bool got_all;   /* generated: the whole body has arrived */
    bool rndv_gen;  /* generated: a rendezvous announcement (no body yet) */
    bool tx_hold;   /* in con->sendq, but waits for pscom_plugin_rma_done:
                     * neither it nor the frames behind it are written */
    bool rndv_pulling; /* in con->rx_deferq: the plugin pulls its body
                        * (rndv_pull_start); a FIN follows */
    bool exact_reply;  /* a one-sided request whose reply has exactly
                        * data_len bytes (with a remote key; not
                        * pscom_post_rma_read) */
    bool lent;           /* its frame is still read by a transport
                          * operation after the plugin's close
                          * (pscom_plugin_tx_lend): ended by
                          * pscom_plugin_tx_returned, not by the failure */
    bool rndv_described; /* a rendezvous send whose buffer the plugin took
                          * (rndv_describe): it has no way to give it
                          * back, so the send is not cancelled */

    /* The one queue the request is in: con->sendq, con->recvq_user,
     * sock->recvq_any, psc_ctx.recvq_any, con->net_recvq, con->rndv_sendq,
     * con->rndv_recvq or con->rx_deferq. */
    struct psc_list next;
    /* Generated requests: sock->genrecvq_any (arrival order). Held frames
     * (tx_hold): rma.c's table of operations a plugin has started. */
    struct psc_list next_any;

    uint64_t seq; /* posting order (receives) or arrival order (generated) */
    uint64_t id;  /* rendezvous id, unique per process */
    /* Rendezvous send: the receiver's answer (enum psc_msg_type, RNDV_CTS
     * or RNDV_FIN; 0: none yet) when it came before the transport reported
     * the announcement written, and the CTS's receiver id. */
    uint8_t rndv_answer;
    uint64_t rndv_receiver_id;

    /* Send side: the frame as at most two pieces, and what is written. */
    struct iovec iov[2];
    size_t tx_left; /* bytes of the frame not yet written */
    uint8_t ctrl[PSC_CTRL_FRAME_LEN] __attribute__((aligned(8)));

    /* Receive side. */
    size_t received;            /* body bytes stored so far */
    void *gbuf;                 /* generated: buffer of the unexpected body */
    struct psc_rndv_info rndv;  /* rendezvous receive: what was announced */
    uint8_t rndv_blob[PSC_RNDV_BLOB_MAX]; /* ... and the plugin's blob */
    struct psc_con *gcon;       /* generated: where it arrived */
    struct psc_req *merged_into; /* generated, still arriving: its receive */

    /* Done inside a plugin or a send's post, callbacks not yet run:
     * psc_ctx.held (its own link, unlinked otherwise: `next` may still be
     * in use, by group.c for one; cancelling it is too late), and the extra
     * state psc_req_done will add. */
    struct psc_list next_held;
    pscom_req_state_t held_extra;

    /* pscom_send_inplace */
    void (*inplace_done)(pscom_req_state_t state, void *priv);
    void *inplace_priv;

    pscom_request_t pub; /* last: xheader and user storage follow */
};

static inline struct psc_req *req_of(pscom_request_t *r)
{
    return psc_container_of(r, struct psc_req, pub);
}

/* Allocate a request (zeroed) with room for xlen bytes of xheader and
 * user_size bytes of user storage. */
struct psc_req *psc_req_alloc(size_t xlen, size_t user_size);
void psc_req_release(struct psc_req *req);
/* Make a finished request (DONE, and in no queue) as psc_req_alloc returned
 * it, zeroed, to be posted again without allocating. */
void psc_req_renew(struct psc_req *req);

/* Mark done with extra state bits and call io_done. The request must not be
 * touched afterwards (io_done may free or repost it). Inside a call into a
 * plugin (psc_hold), a request with callbacks is only put on psc_ctx.held;
 * psc_req_run_held finishes those, in order: all of them, or (!all) up to
 * a receive that follows a send's completion, which waits for the next
 * round of progress (psc_ctx.held_cut). psc_req_done (inline, below)
 * finishes a request nobody is called back for itself and leaves the rest
 * to psc_req_finish. */
static inline void psc_req_done(struct psc_req *req, pscom_req_state_t extra);
void psc_req_finish(struct psc_req *req, pscom_req_state_t extra);
void psc_req_run_held(bool all);

/* ---------------------------------------------------------------------- */
/* Sockets and connections                                                */
/* ---------------------------------------------------------------------- */

struct psc_sock {
    uint32_t magic;
    struct psc_list next_sock;    /* psc_ctx.sockets, or psc_ctx.closed_socks */
    struct psc_list cons;         /* psc_con.next_con: visible connections */
    struct psc_list recvq_any;    /* psc_req.next: posted any-source receives */
    struct psc_list genrecvq_any; /* psc_req.next_any: unexpected messages */
    int listen_fd;                /* -1 when not listening */
    bool listen_suspended;
    /* pscom_stop_listen / pscom_suspend_listen while on-demand connections
     * may still need the listener: done once they are settled. */
    bool stop_pending, suspend_pending;
    bool closing; /* sock_close under way or done: nothing new is posted on
                   * it; freed at the reap (psc_con_reap) */
    uint64_t con_type_mask; /* bit (1 << pscom_con_type_t): allowed transports */
    pscom_socket_t pub;     /* last */
};

static inline struct psc_sock *sock_of(pscom_socket_t *s)
{
    return psc_container_of(s, struct psc_sock, pub);
}

enum psc_rx_phase {
    PSC_RX_HEADER,  /* collecting the 8-byte header */
    PSC_RX_XHEADER, /* collecting the xheader */
    PSC_RX_DATA,    /* moving the body */
};

struct psc_rx {
    enum psc_rx_phase phase;
    size_t have;  /* bytes of header+xheader collected */
    size_t need;  /* header+xheader length of the current message */
    uint8_t *hbuf; /* header + xheader, contiguous (recv_accept reads it) */
    size_t hcap;
    uint8_t hinline[PSC_HDR_LEN + 256] __attribute__((aligned(8)));
    /* Body: `left` bytes still to come; the first `dst_left` of them go to
     * dst, the rest are dropped (truncation). */
    struct psc_req *req; /* the request receiving the body, or NULL */
    size_t left;
    char *dst;
    size_t dst_left;
    bool truncated;
    /* The body goes whole into a matched receive's own buffer: a plugin
     * may take it out of line (pscom_plugin_rx_defer). */
    bool defer_ok;
};

struct psc_precon;

struct psc_con {
    uint32_t magic;
    struct psc_sock *sock;
    struct psc_list next_con;   /* sock->cons, or psc_ctx.zombies once closed */
    struct psc_list sendq;      /* psc_req.next: frames to write, in order */
    struct psc_list recvq_user; /* psc_req.next: receives posted on this con */
    struct psc_list net_recvq;  /* psc_req.next: unexpected messages, in order */
    struct psc_list rndv_sendq; /* psc_req.next: sends waiting for CTS */
    struct psc_list rndv_recvq; /* psc_req.next: receives waiting for data */
    struct psc_list rkeys;      /* PSCOM_rkey.next_con: keys with a plugin
                                 * key (prkey) on this connection */
    /* group.c's member slots (struct gslot.next) that name this
     * connection: retiring it clears just those. */
    struct psc_list group_slots;
    /* psc_req.next: receives whose body the plugin moves out of line
     * (pscom_plugin_rx_defer), in any order; they end when the plugin says
     * so, or fail after its close(). */
    struct psc_list rx_deferq;

    struct psc_rx rx;

    struct psc_plugin *plugin; /* NULL until established */
    void *plugin_priv;         /* plugin->desc->con_priv_size bytes */
    /* The plugin's tx_now (API 1.3): set when established, cleared when
     * the connection fails or closes (every way to the plugin's close). */
    int (*tx_now)(struct psc_con *con, void *priv, const struct iovec *iov,
                  int iovcnt);
    struct psc_precon *precon; /* while connecting */
    size_t rndv_threshold;     /* bodies of at least this size use rendezvous */
    /* What PSP_DEBUG_STATS prints when the connection is retired: plain
     * increments, once per user message where it is posted for sending or
     * its header arrives (proto.c), per one-sided operation where it is
     * posted (rma.c). */
    struct psc_con_stats {
        uint64_t tx_msgs, tx_bytes, tx_rndv;
        uint64_t rx_msgs, rx_bytes, rx_rndv;
        uint64_t rx_unexpected; /* kept until a receive was posted */
        uint64_t rma_ops, rma_bytes;
    } stats;

    struct psc_list next_dead; /* psc_ctx.dead: plugin to be closed */
    /* The request whose body was arriving when the connection failed: the
     * plugin may still write into its buffer until its close(), so it is
     * failed (or released) only then. */
    struct psc_req *rx_failed;

    bool visible;      /* in sock->cons */
    bool failed;       /* error reported; requests failed */
    bool closing;      /* pscom_close_connection in progress */
    bool plugin_open;  /* plugin->ops.open succeeded, close not yet called */
    bool zombie;       /* waiting to be freed */
    bool eof_sent;     /* our EOF went out: no frame may follow it */
    bool got_eof;      /* the peer sent EOF */
    bool eof_pending;  /* ... while bodies before it were still arriving out
                        * of line: acted on once rx_deferq is empty */
    pscom_err_t error; /* the error that ended it */

    char peer_addr[64]; /* "a.b.c.d:port" of the peer, for messages */
    pid_t local_pid;    /* the peer's pid when it runs on this node, else 0 */

    /* On-demand connections: created by pscom_connect(ONDEMAND), connected
     * on the first send, by us or (name rule) by the peer calling back. */
    bool ondemand;           /* not connected yet */
    bool od_notify;          /* we connect back for a peer that asked: make
                              * visible and call con_accept when established */
    struct sockaddr_in od_addr; /* the peer's listener */
    uint64_t id;        /* unique per process */

    pscom_connection_t pub; /* last */
};

static inline struct psc_con *con_of(pscom_connection_t *c)
{
    return psc_container_of(c, struct psc_con, pub);
}

/* A connection object (not visible in the socket until established). */
struct psc_con *psc_con_create(struct psc_sock *sock);
/* Make the connection visible in its socket (for the acceptor at success). */
void psc_con_make_visible(struct psc_con *con);
/* Switch an established connection to `plugin`. */
void psc_con_established(struct psc_con *con, struct psc_plugin *plugin,
                         void *priv);
/* Fail: fail pending requests, report through con_error, close the
 * plugin later. Idempotent. */
void psc_con_fail(struct psc_con *con, pscom_op_t op, pscom_err_t err);
/* No frame may be queued on con any more: it failed, is closing, or its
 * EOF went out (a callback run by the close's last flush may send). */
static inline bool psc_con_sends_over(const struct psc_con *con)
{
    return con->failed || con->closing || con->eof_sent;
}
/* Queue a request's frame and start writing (or send it at once, when
 * the plugin takes it whole: tx_now). */
void psc_con_enqueue(struct psc_con *con, struct psc_req *req);
/* Queue it behind the others, not offering it to tx_now. */
void psc_con_queue(struct psc_con *con, struct psc_req *req);

/* Offer a frame (iov[0..iovcnt)) to the plugin's tx_now when nothing is
 * queued before it; true when the plugin took it whole: sent. */
static inline bool psc_con_tx_now(struct psc_con *con,
                                  const struct iovec *iov, int iovcnt)
{
    return con->tx_now && psc_list_empty(&con->sendq) &&
           con->tx_now(con, con->plugin_priv, iov, iovcnt) > 0;
}
/* Let the plugin write what is queued. */
void psc_con_kick(struct psc_con *con);
/* Flush, send EOF, fail what is left and retire (pscom_close_connection). */
void psc_con_close(struct psc_con *con);
/* Free the connection at the next safe point. */
void psc_con_retire(struct psc_con *con);
/* Free retired connections (only at progress depth 0). */
void psc_con_reap(void);
/* Printable description of a connection (static per-thread buffer). */
const char *psc_con_str(struct psc_con *con);
/* Receive state: reset to expect a header. */
void psc_rx_init(struct psc_rx *rx);

/* ---------------------------------------------------------------------- */
/* Matching (match.c)                                                     */
/* ---------------------------------------------------------------------- */

/* For a message that arrived on con with header hdr (xheader behind it):
 * the earliest-posted receive that accepts it, unlinked from its queue, or
 * NULL. Looks at con->recvq_user, sock->recvq_any and the global queue.
 * psc_match_posted (inline, below) takes the usual case itself: no
 * receive from any source posted, and the first one posted for con
 * accepts it. */
static inline struct psc_req *psc_match_posted(struct psc_con *con,
                                               pscom_header_net_t *hdr);
struct psc_req *psc_match_posted_all(struct psc_con *con,
                                     pscom_header_net_t *hdr);
/* The first receive in con->recvq_user after `after` that accepts the
 * message, unlinked, or NULL (when no receive from any source is posted). */
struct psc_req *psc_match_con_after(struct psc_con *con,
                                    pscom_header_net_t *hdr,
                                    struct psc_req *after);

/* For a receive being posted: the first unexpected message it accepts, or
 * NULL. The generated request is unlinked from both its queues. */
struct psc_req *psc_match_generated(struct psc_req *req);

/* As psc_match_generated, but leaves the generated request queued. */
struct psc_req *psc_peek_generated(struct psc_req *req);

/* Queue a posted receive (assigns its posting order). */
void psc_recvq_add(struct psc_req *req);

/* Queue an unexpected message (assigns its arrival order). */
void psc_genrecvq_add(struct psc_con *con, struct psc_req *greq);

/* Does `req` accept the message (connection and recv_accept)? */
bool psc_req_accepts(struct psc_req *req, struct psc_con *con,
                     pscom_header_net_t *hdr);

/* ---------------------------------------------------------------------- */
/* Protocol (proto.c)                                                     */
/* ---------------------------------------------------------------------- */

/* Post a user send on its connection (eager or rendezvous). */
void psc_proto_send(struct psc_con *con, struct psc_req *req);
/* A receive was posted: match it against unexpected messages or queue it. */
void psc_proto_post_recv(struct psc_req *req);
/* Fail every request a connection holds: receives (and unexpected messages
 * that did not arrive whole), sends, or both. */
void psc_proto_fail_receives(struct psc_con *con);
void psc_proto_fail_sends(struct psc_con *con);
void psc_proto_fail_requests(struct psc_con *con);
/* The connection is closed (retired): its unexpected messages, which stayed
 * receivable while it was only failed, go. They name it, and it is freed
 * soon; closing a connection ends what no receive took from it. */
void psc_proto_drop_unexpected(struct psc_con *con);
/* The plugin was closed: fail the sends it held and the receives whose
 * bodies it was moving out of line. */
void psc_proto_plugin_closed(struct psc_con *con);
/* A queued frame was written completely. */
void psc_proto_frame_sent(struct psc_con *con, struct psc_req *req);
/* Send an EOF frame. */
void psc_proto_send_eof(struct psc_con *con);

/* ---------------------------------------------------------------------- */
/* One-sided communication (rma.c) and groups (group.c)                   */
/* ---------------------------------------------------------------------- */

/* Header checks for their message types (as psc_header_check). */
int psc_rma_header_check(const pscom_header_net_t *hdr, const char **why);
int psc_group_header_check(const pscom_header_net_t *hdr, const char **why);

/* A message of their types arrived on con; hdr holds its header and
 * xheader. Return 0 with *body set to the request that takes the body (it
 * completes through psc_req_done when the body is in), or -1 after failing
 * the connection. A message with a body always gets a request. A handler
 * acts (answers, calls back) only for messages without body; the core has
 * finished reading those before it calls the handler. */
int psc_rma_rx(struct psc_con *con, pscom_header_net_t *hdr,
               struct psc_req **body);
int psc_group_rx(struct psc_con *con, pscom_header_net_t *hdr,
                 struct psc_req **body);

/* The connection failed or closes: fail what rma.c and group.c hold for it. */
void psc_rma_con_fail(struct psc_con *con);
void psc_group_con_fail(struct psc_con *con);
/* The connection is retired (psc_con_retire): drop the group messages that
 * arrived whole on it and that no receive took, and take it out of the
 * groups that name it (its group_slots: the cost is the groups it is in). */
void psc_group_con_retired(struct psc_con *con);
/* The socket is closing, its connections retired: its groups can be found
 * and used no more (pscom_group_close frees them). */
void psc_group_sock_closed(struct psc_sock *sock);
/* The plugin of con is about to be closed: release the plugin keys
 * (rma_rkey_release) of the remote keys used on it. */
void psc_rma_con_release(struct psc_con *con);
/* A held frame (tx_hold) is failed: forget its plugin token, so a late
 * pscom_plugin_rma_done finds nothing. */
void psc_rma_hold_drop(struct psc_req *req);

/* Queue req on con as one message: the network header at `head` (filled in
 * here with type, xlen and body_len), xlen bytes of xheader right behind
 * it, then the body. req completes through psc_req_done when written, or
 * at once with PSCOM_REQ_STATE_ERROR when the connection is broken. */
void psc_xmsg_send(struct psc_con *con, struct psc_req *req, uint8_t type,
                   pscom_header_net_t *head, size_t xlen, void *body,
                   size_t body_len);

/* ---------------------------------------------------------------------- */
/* Progress (progress.c)                                                  */
/* ---------------------------------------------------------------------- */

/* One round: poll plugins and file descriptors. 1 if anything happened,
 * or callbacks cut off wait for the next round (psc_ctx.held_cut). */
int psc_progress(void);
/* The same round; 1 only if anything happened in it. */
int psc_progress_work(void);
/* Close the epoll set (teardown). */
void psc_progress_cleanup(void);

/* ---------------------------------------------------------------------- */
/* Pre-connections (precon.c)                                             */
/* ---------------------------------------------------------------------- */

/* Resolve host:port into *sa. 0, or PSCOM_ERR_INVALID with a message. */
pscom_err_t psc_resolve(const char *host, int port, struct sockaddr_in *sa);
/* Start connecting con to sa. */
void psc_precon_connect(struct psc_con *con, const struct sockaddr_in *sa);
/* First use of an on-demand connection: connect, or ask the peer to. */
void psc_ondemand_connect(struct psc_con *con);
/* A connection arrived on a listening socket. */
void psc_precon_accept(struct psc_sock *sock, int fd);
/* Drop the precon of a connection (close fd, free). */
void psc_precon_destroy(struct psc_precon *pc);
/* An on-demand connection of sock was established or failed: carry out a
 * deferred stop/suspend of the listener once none is pending (sock.c). */
void psc_sock_ondemand_settled(struct psc_sock *sock);

/* Drop the handshakes of connections of `sock` not yet visible. */
void psc_precon_drop_socket(struct psc_sock *sock);
/* Time out stalled handshakes (called from progress now and then). */
void psc_precon_check_timeouts(void);

/* Graceful ends of TCP sockets (linger.c): fd, out of the progress set, is
 * shut for writing and closed once the peer has acknowledged everything or
 * closed its end, or after ms. */
#define PSC_LINGER_CLOSE_MS 10000
void psc_linger(int fd, unsigned ms);
/* End the lingering sockets whose time is up or whose peer has
 * acknowledged everything (from psc_precon_check_timeouts). */
void psc_linger_check(uint64_t now);
/* At exit: wait until every lingering socket has ended, until until_ms
 * (psc_now_ms) at most. */
void psc_linger_finish(uint64_t until_ms);

/* ---------------------------------------------------------------------- */
/* The library context                                                    */
/* ---------------------------------------------------------------------- */

struct psc_ctx {
    bool initialised; /* init has begun (under init_lock, see init.c) */
    bool init_done;   /* ... and ended: atomic, release/acquire */
    bool threaded;
    pthread_mutex_t lock;        /* recursive; taken only when threaded */
    unsigned lock_waiters;       /* threads blocked in psc_lock */
    struct psc_list sockets;     /* psc_sock.next_sock */
    struct psc_list recvq_any;   /* psc_req.next: receives on any socket */
    struct psc_list zombies;     /* psc_con.next_con: to be freed */
    struct psc_list closed_socks; /* psc_sock.next_sock: to be freed */
    struct psc_list sock_watches; /* psc_sock_watch.next (sock.c) */
    bool close_called;           /* an application close since the last
                                  * reap: it runs everything held */
    uint64_t exit_until;         /* ms (psc_now_ms): the end of the exit
                                  * handler's budget for flushing and
                                  * closing; 0 outside it */
    struct psc_list dead;        /* psc_con.next_dead: plugin to be closed */
    struct psc_list precons;     /* psc_precon.next: handshakes under way */
    struct psc_list held;        /* psc_req.next_held: done inside a
                                  * plugin, callbacks not yet run */
    bool held_cut;               /* held starts with a receive that came
                                  * after a send's completion: it waits for
                                  * the next round (psc_req_run_held) */
    bool held_sent;              /* a held send's callbacks ran since the
                                  * caller last had control */
    unsigned hold;               /* > 0: psc_req_done holds callbacks */
    uint64_t seq;                /* posting/arrival order counter */
    uint64_t next_id;            /* request and connection ids */
    unsigned depth;              /* nesting of progress rounds */
    unsigned long round;         /* progress rounds so far */
    unsigned long events;        /* requests done, connections failed */
    bool local_procs_stale;      /* connections opened or closed since
                                  * psc_oversubscribed() last counted */
    int spare_fd;                /* kept open to refuse connections on EMFILE */
    int node_id;
    char node_addr[16];          /* dotted IPv4 address in endpoint strings */
    char hostname[256];
    char boot_id[64];
};

extern struct psc_ctx psc_ctx;

/* Around the core's calls into plugins (progress ops, descriptor
 * callbacks, tx_kick): a request that completes inside keeps its callbacks
 * (psc_req_done puts it on psc_ctx.held) until the outermost such call
 * returned, so an application callback that waits or closes never
 * re-enters a plugin in the middle of its work (as ParaStation pscom runs
 * io_done from a queue). Called inside psc_enter: connections the
 * callbacks close are freed after them. */
static inline void psc_hold(void)
{
    psc_ctx.hold++;
}

/* Do completions wait on psc_ctx.held: inside a call into a plugin, or
 * behind a cut (what completes meanwhile must not overtake it)? */
static inline bool psc_holding(void)
{
    return psc_ctx.hold || psc_ctx.held_cut;
}

static inline void psc_unhold(void)
{
    if (--psc_ctx.hold == 0 && !psc_list_empty(&psc_ctx.held) &&
        !psc_ctx.held_cut)
        psc_req_run_held(false);
}

/* Ends a psc_hold without running what is held: it waits for the next round of
 * progress (psc_run_deferred) or a close (psc_run_all_deferred), or for the
 * run of held callbacks that made the call to go on. Around the API calls that
 * post a send (pscom_post_send, hence pscom_send_inplace, and the root's
 * pscom_post_bcast), so that a send's callbacks never run inside the call.
 * ParaStation pscom writes sends over shared memory from its progress engine,
 * so there such a send's io_done never runs before its post returned, and
 * ParaStation MPI relies on it: it tells a sub-request's completion which
 * counter to decrement only after posting it (partitioned communication), and
 * a callback that ran inside the post would miss the counter. (Over tcp
 * ParaStation pscom writes at once and runs io_done inside the post; here
 * every transport defers.) One-sided posts that a plugin finishes at once
 * still complete inside the call (doc/rma.md). */
static inline void psc_unhold_later(void)
{
    psc_ctx.hold--;
}

/* Run what a post or a cut (psc_req_run_held) left held, outside any call
 * into a plugin: the first thing a round of progress does. 1 when there
 * was something. */
static inline int psc_run_deferred(void)
{
    if (psc_ctx.hold || psc_list_empty(&psc_ctx.held)) return 0;
    psc_req_run_held(false);
    return 1;
}

/* What closing runs before it may free connections (their held callbacks
 * and con_error reports name them): everything held, with no cut. */
static inline void psc_run_all_deferred(void)
{
    if (!psc_ctx.hold && !psc_list_empty(&psc_ctx.held))
        psc_req_run_held(true);
}

static inline void psc_lock(void)
{
    if (!psc_ctx.threaded) return;
    __atomic_add_fetch(&psc_ctx.lock_waiters, 1, __ATOMIC_RELAXED);
    pthread_mutex_lock(&psc_ctx.lock);
    __atomic_sub_fetch(&psc_ctx.lock_waiters, 1, __ATOMIC_RELAXED);
}

/* Around API calls that may reach into plugins: connections closed by a
 * callback meanwhile are freed only when the outermost call leaves. */
static inline void psc_enter(void)
{
    psc_ctx.depth++;
}

static inline void psc_leave(void)
{
    if (--psc_ctx.depth) return;
    psc_ctx.held_sent = false; /* the caller has control again */
    if (!psc_list_empty(&psc_ctx.dead) || !psc_list_empty(&psc_ctx.zombies) ||
        !psc_list_empty(&psc_ctx.closed_socks) || psc_ctx.close_called)
        psc_con_reap();
}

static inline void psc_unlock(void)
{
    if (psc_ctx.threaded) pthread_mutex_unlock(&psc_ctx.lock);
}

/* Between releasing and retaking the lock in a polling loop: let a thread
 * that waits for the lock have it (the mutex is not fair). */
static inline void psc_lock_handoff(void)
{
    if (psc_ctx.threaded &&
        __atomic_load_n(&psc_ctx.lock_waiters, __ATOMIC_RELAXED))
        sched_yield();
}

/* Add state bits to a posted request. Its owner may read the state without
 * the lock, so the new value is one untorn store; only the lock holder
 * writes it, so no locked read-modify-write is needed (that one costs about
 * as much as the rest of a small message's receive path). */
static inline void psc_req_state_add(struct psc_req *req, pscom_req_state_t bits)
{
    __atomic_store_n(&req->pub.state, req->pub.state | bits, __ATOMIC_RELAXED);
}

static inline void psc_req_done(struct psc_req *req, pscom_req_state_t extra)
{
    if (req->pub.ops.io_done || req->inplace_done || req->self_free ||
        req->kind == PSC_REQ_CONTROL) {
        psc_req_finish(req, extra);
        return;
    }
    psc_ctx.events++;
    __atomic_store_n(&req->pub.state,
                     req->pub.state | extra | PSCOM_REQ_STATE_IO_DONE |
                         PSCOM_REQ_STATE_DONE,
                     __ATOMIC_RELEASE);
}

static inline struct psc_req *psc_match_posted(struct psc_con *con,
                                               pscom_header_net_t *hdr)
{
    if (!psc_list_empty(&con->sock->recvq_any) ||
        !psc_list_empty(&psc_ctx.recvq_any) ||
        psc_list_empty(&con->recvq_user))
        return psc_match_posted_all(con, hdr);
    struct psc_req *req =
        psc_list_entry(con->recvq_user.next, struct psc_req, next);
    pscom_request_t *r = &req->pub;
    if (r->ops.recv_accept && !r->ops.recv_accept(r, &con->pub, hdr))
        return psc_match_con_after(con, hdr, req);
    psc_list_del(&req->next);
    return req;
}

/* Free the requests kept for reuse (req.c): at exit, and before a second
 * thread may use the library. */
void psc_req_cache_drain(void);
/* Requests kept for reuse now (for tests). */
unsigned psc_req_cache_count(void);

/* The library's state, as pscom_dump_info prints it: every socket and
 * connection with what it waits for, groups with collectives under way,
 * handshakes (util.c; lock held). */
void psc_dump_state_locked(FILE *out);
/* The parts of it that group.c and precon.c know: a socket's groups, and
 * the handshakes under way. */
void psc_group_dump_locked(FILE *out, struct psc_sock *sock);
void psc_precon_dump_locked(FILE *out);

/* PSP_SIGQUIT=1: install the SIGQUIT handler whose dump runs in progress
 * (sigquit.c; at initialisation). */
void psc_sigquit_init(void);
/* Write the state to the log, whatever PSP_DEBUG says, after a line that
 * says why (lock held). */
void psc_dump_state_to_log_locked(const char *why);

/* Node identity (util.c). */
void psc_node_identity_init(void);
/* pscom_init() unless it has been done: for calls that may come first. */
void psc_init_on_first_use(void);
/* The CPU's spin-wait hint, between polls of memory another core writes
 * (util.c; a call of its own, so that tests can count it). */
void psc_cpu_relax(void);

/* Wait until cond_fn(arg) holds, driving progress. Returns 0, or -1 when
 * timeout_ms (0 = none) passed. */
int psc_progress_until(bool (*cond_fn)(void *arg), void *arg,
                       unsigned timeout_ms);

/* Drive progress until a round did something or an event (a completed
 * request, a failed connection) happened; yields the CPU while idle for
 * long, as psc_progress_until does. For pscom_wait_any. */
void psc_progress_wait_event(void);

/* "the open files limit is N (hard limit M); ..." for EMFILE messages. */
const char *psc_fd_limit_hint(void);

/* More processes of ours run on this node (this one and the peers of its
 * open connections) than it has CPUs: waits should give their CPU away
 * early. Counted again after connections opened or closed. */
bool psc_oversubscribed(void);

/* Monotonic milliseconds. */
uint64_t psc_now_ms(void);

#endif
