/*
 * The transport plugin interface of pscom.
 *
 * A plugin carries the bytes of established connections. The core owns the
 * connections, their send and receive queues and the message framing; a
 * plugin only moves frames. It sees the core through the functions declared
 * here and nothing else, so a plugin built out of tree against this header
 * works with any library of the same PSCOM_PLUGIN_API_VERSION major.
 *
 * Life of a connection on a plugin:
 *   1. Pre-connection (TCP): both sides exchange their identity; the
 *      connecting side picks the first plugin of its priority order that the
 *      accepting side also offers (ops.offer).
 *   2. Both sides call ops.hs_start() to describe their end (a blob, e.g. a
 *      worker address), exchange the blobs, and call ops.hs_connect() with the
 *      peer's blob. If either side fails, both call ops.hs_abort() and the
 *      next common plugin is tried; tcp comes last.
 *   3. ops.open() switches the connection to the plugin. From then on the core
 *      calls ops.tx_kick() when frames are queued (a frame for an empty
 *      queue is first offered to ops.tx_now(), if the plugin has it), and
 *      the plugin hands arriving bytes to
 *      pscom_plugin_rx_push()/pscom_plugin_rx_direct*().
 *   4. ops.close() releases the plugin's state; it is called exactly once
 *      after a successful open(), on close and on error alike.
 *
 * All callbacks run with the library lock held (if the application enabled
 * threads) and must not block. Requests that upcalls complete keep their
 * application callbacks (io_done) until the core's call into the plugin
 * (progress, a descriptor callback, tx_kick) returned: those callbacks may
 * post, wait or close, and never re-enter a plugin in the middle of its
 * work. The int results of the upcalls tell the plugin when to stop using
 * a connection (closed by the core, or failed).
 */
#ifndef PSCOM_PLUGIN_H_
#define PSCOM_PLUGIN_H_

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "pscom.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Major in the high byte: a different major is refused at load time. */
/* Minor in the low byte: the core reads the ops a minor added only from
 * descriptors of that minor or later (1.1 added the one-sided ops, 1.2 the
 * sleeping waits, 1.3 tx_now; 1.4 added no op, only the upcall
 * pscom_plugin_rx_now; 1.5 rndv_pull_start, and the flag
 * PSCOM_PLUGIN_SPIN_RELAX, which older cores ignore; 1.6 added no op, only
 * the upcall pscom_plugin_con_peer_pid; 1.7 no op, only the service
 * pscom_plugin_wait_until; 1.8 no op, only the service
 * pscom_plugin_config_ranges; 1.9 no op, only the service
 * pscom_plugin_hold_progress; 1.10 no op, only the service
 * pscom_plugin_fd_linger; 1.11 no op, only the services
 * pscom_plugin_tx_lend and pscom_plugin_tx_returned; 1.12 no op, only the
 * services pscom_plugin_sock_watch, pscom_plugin_sock_unwatch and
 * pscom_plugin_run_locked). */
#define PSCOM_PLUGIN_API_VERSION 0x010c
#define PSCOM_PLUGIN_API_MAJOR(v) (((v) >> 8) & 0xff)
#define PSCOM_PLUGIN_API_MINOR(v) ((v) & 0xff)

/* A core connection as a plugin sees it (opaque). */
typedef struct psc_con pscom_plugin_con_t;

/* ---------------------------------------------------------------------- */
/* Configuration rows                                                     */
/* ---------------------------------------------------------------------- */

typedef enum pscom_config_type {
    PSCOM_CONFIG_INT,  /* int */
    PSCOM_CONFIG_UINT, /* unsigned int; "inf" is UINT_MAX */
    PSCOM_CONFIG_SIZE, /* size_t; "inf" is SIZE_MAX; k/M/G suffixes (powers of 1024) */
    PSCOM_CONFIG_BOOL, /* int 0/1; also yes/no, true/false, on/off */
    PSCOM_CONFIG_STR,  /* char *, NULL when unset; owned by the table */
    PSCOM_CONFIG_DIR,  /* as STR, with a trailing '/' added */
} pscom_config_type_t;

/* One PSP_* variable. Tables are static and live as long as the program. */
typedef struct pscom_config_row {
    const char *name;         /* "PSP_TCP_SNDBUF" */
    pscom_config_type_t type; /* what `var` points to */
    const char *defval;       /* the default as text; NULL: unset (strings) */
    const char *help;         /* one line, for pscom_info -c and the docs */
    const char *owner;        /* "core", or the plugin name */
    const char *parent;       /* consulted when `name` is unset, or NULL */
    void *var;                /* where the parsed value is stored */
} pscom_config_row_t;

/* Add rows to the library's table. Each variable is set from its default,
 * then from the environment (or its parent). A value that does not parse is
 * reported and the default kept. */
void pscom_plugin_config_register(const pscom_config_row_t *rows, size_t count);

/* The values a numeric row (int, uint, size) accepts: min..max, both
 * included. */
typedef struct pscom_config_range {
    const char *name; /* the row's name */
    long long min, max;
} pscom_config_range_t;

/* Declare ranges for rows registered afterwards (1.8; the table is static
 * and lives as long as the program). A value from the environment outside
 * its row's range is reported and the nearer bound used; `pscom_info -c`
 * and the docs show the range. */
void pscom_plugin_config_ranges(const pscom_config_range_t *ranges,
                                size_t count);

/* ---------------------------------------------------------------------- */
/* The plugin descriptor                                                  */
/* ---------------------------------------------------------------------- */

/* Who the peer of a connection being set up is. */
typedef struct pscom_plugin_peer {
    int same_node;        /* 1: the peer runs on this host (boot id + hostname) */
    int node_id;          /* the peer's node id */
    int rank;             /* the peer socket's rank, or PSCOM_RANK_UNDEFINED */
    pid_t pid;            /* the peer's process id */
    const char *hostname; /* the peer's hostname */
} pscom_plugin_peer_t;

typedef struct pscom_plugin_ops {
    /* Optional. Once, before the plugin is first used; 0 or a negative errno.
     * A failing init disables the plugin (logged, listed by pscom_info). */
    int (*init)(void);
    /* Optional. At library teardown after every connection was closed. */
    void (*destroy)(void);
    /* Optional. 1 when the plugin can be offered for this peer (default 1). */
    int (*offer)(const pscom_plugin_peer_t *peer);
    /* Mandatory. Describe our end for the peer: write at most *len bytes to
     * blob and set *len. 0, or a negative errno to skip this plugin. */
    int (*hs_start)(pscom_plugin_con_t *con, void *priv, void *blob,
                    size_t *len);
    /* Mandatory. Connect to the peer's end described by blob. 0 or -errno. */
    int (*hs_connect)(pscom_plugin_con_t *con, void *priv, const void *blob,
                      size_t len);
    /* Optional. Undo hs_start/hs_connect after a failed handshake. */
    void (*hs_abort)(pscom_plugin_con_t *con, void *priv);
    /* Mandatory. The connection now runs on this plugin. precon_fd is the
     * pre-connection's TCP socket: return 1 to keep it (the plugin closes it
     * in close()), 0 to let the core close it. Negative errno on failure:
     * then the plugin has released everything itself (no close() follows)
     * and the core closes precon_fd. */
    int (*open)(pscom_plugin_con_t *con, void *priv, int precon_fd);
    /* Mandatory. Release everything of this connection. No upcalls after. */
    void (*close)(pscom_plugin_con_t *con, void *priv);
    /* Mandatory. Frames are queued: write what can be written now with
     * pscom_plugin_tx_peek()/pscom_plugin_tx_done(); what cannot, later. */
    void (*tx_kick)(pscom_plugin_con_t *con, void *priv);
    /* Optional. Polled on every round of progress while the plugin has open
     * connections; returns 1 when it made progress. */
    int (*progress)(void);

    /* Optional zero-copy rendezvous. Sender side: describe the send buffer
     * (data, len) for the peer in at most 64 bytes at blob (e.g. pid and
     * address); return the length, or 0 when this message should take the
     * generic path. The buffer stays valid until the peer confirms. */
    size_t (*rndv_describe)(pscom_plugin_con_t *con, void *priv,
                            const void *data, size_t len, void *blob);
    /* Receiver side: copy len bytes of the peer's buffer described by blob
     * into dst. 0 on success; a negative errno makes the core fall back to
     * the generic rendezvous for this message (the plugin should remember a
     * permanent failure, e.g. EPERM, and describe no more buffers). */
    int (*rndv_pull)(pscom_plugin_con_t *con, void *priv, const void *blob,
                     size_t blob_len, void *dst, size_t len);

    /* ---- API 1.1: one-sided fast paths (all optional) ----
     * Without them put and get travel as two-sided messages through the
     * core. With them the plugin moves the bytes of a put or get itself and
     * the core then sends a short notice on the connection, on which the
     * target checks the range and runs its callback, in order with the
     * connection's other messages. Atomics always take the core's path.
     * The fast path needs rma_register (on the target's side), rma_rkey and
     * rma_put and/or rma_get (on the origin's side). */

    /* Make [addr, addr+len) of this socket's process reachable for peers
     * (addr NULL and len 0: the whole address space, if the plugin can).
     * Write at most PSCOM_PLUGIN_RKEY_MAX bytes describing it to rkey and
     * set *rkey_len (0 is fine when the peer needs nothing); keep what
     * rma_deregister needs in *handle. 0, or -errno: no fast path for this
     * region on this plugin. Called when the region's key is packed, for
     * every plugin that is initialised at that moment, once per region and
     * plugin (a key packed before a plugin was initialised has no entry of
     * it; packing again later adds one). socket is what the application
     * passed to pscom_mem_register (it may be NULL). */
    int (*rma_register)(pscom_socket_t *socket, void *addr, size_t len,
                        void *rkey, size_t *rkey_len, void **handle);
    /* Undo rma_register (the region is deregistered). The socket may have
     * been closed meanwhile: use it as a key only. */
    void (*rma_deregister)(pscom_socket_t *socket, void *handle);
    /* On an open connection of this plugin: prepare access to the peer's
     * region that its rma_register described with rkey (the peer of this
     * connection packed the key; check that it is, where a mix-up could do
     * harm). Called at the first put or get with the key on the
     * established connection. 0 and *prkey (NULL is a valid prkey), or
     * -errno: this key takes the core's path on this connection, for
     * good. */
    int (*rma_rkey)(pscom_plugin_con_t *con, void *priv, const void *rkey,
                    size_t len, void **prkey);
    /* Release what rma_rkey made (the remote key is destroyed, or the
     * connection closes: then before ops.close, possibly while operations
     * with it are still started). */
    void (*rma_rkey_release)(pscom_plugin_con_t *con, void *priv,
                             void *prkey);
    /* Write len bytes at src to the peer's address raddr (put), or read len
     * bytes at raddr into dst (get); len > 0, and the range lies in the
     * region the key names. Return 0 when done, 1 when started: then
     * pscom_plugin_rma_done(token, err) follows from the plugin's progress
     * op (never from inside this call); or -errno to let the core carry
     * this operation. "Done" for a put means the bytes are in the target's
     * memory before any later message of this connection arrives there
     * (flush first where the transport does not order them).
     *
     * -ENOTSUP or -EAGAIN say "not this one" (e.g. below the plugin's own
     * size threshold: small operations are often cheaper as one message
     * through the core) and are not logged; other errors are logged at
     * debug level. The core remembers nothing of either: a plugin that
     * learns that it can never reach the peer (EPERM) remembers that itself
     * and answers quickly from then on.
     *
     * While an operation is started, the core holds its notice's place in
     * the connection's send queue: pscom_plugin_tx_peek() hands out nothing
     * behind it until pscom_plugin_rma_done. */
    int (*rma_put)(pscom_plugin_con_t *con, void *priv, void *prkey,
                   const void *src, uint64_t raddr, size_t len, void *token);
    int (*rma_get)(pscom_plugin_con_t *con, void *priv, void *prkey,
                   void *dst, uint64_t raddr, size_t len, void *token);

    /* ---- API 1.2: sleeping waits (optional) ----
     * A wait that has made no progress for a while may sleep in the core's
     * epoll set instead of polling, woken by the first descriptor event,
     * if every plugin with open connections agrees: one without a progress
     * op always does; one with a progress op only through wait_arm.
     * wait_arm: from now on, everything this plugin waits for is signalled
     * on descriptors it registered with pscom_plugin_fd_add (arm them);
     * return 1, or 0 when it needs polling now (nothing to undo then).
     * wait_disarm follows every wait_arm that returned 1, after the sleep
     * and the callbacks of the descriptors that woke it. Never called in
     * a process that uses pscom from several threads. */
    int (*wait_arm)(void);
    void (*wait_disarm)(void);

    /* ---- API 1.3: sending without the queue (optional) ----
     * A frame (iov[0] its head; iov[1] its body when iovcnt is 2) for a
     * connection with nothing queued: return 1 when the transport took it
     * whole and keeps no reference to its buffers, so it counts as sent
     * (the core completes it; no tx_peek/tx_done for it); 0 to leave it to
     * the queue and tx_kick: the core queues it at once. A plugin may have
     * started it all the same (its transport did not finish at once); it
     * then finds it in the next tx_peek and reports it with tx_done as
     * any queued frame. It must make no upcalls. The core calls it only
     * for open connections that have not failed, and may always queue
     * instead. */
    int (*tx_now)(pscom_plugin_con_t *con, void *priv, const struct iovec *iov,
                  int iovcnt);

    /* ---- API 1.5: rendezvous pulls that end later (optional) ----
     * As rndv_pull, but the copy into dst may go on after the call: return
     * 0 when it started (or ended), and report its end with
     * pscom_plugin_rx_defer_done(con, handle, err) from the progress op
     * (never from inside this call), as for a deferred body; the core then
     * confirms to the sender. A
     * negative errno: nothing started, the core tries rndv_pull, then the
     * generic rendezvous. len may be less than the body (a truncating
     * receive): a plugin that cannot pull a part refuses. The core prefers
     * it to rndv_pull. */
    int (*rndv_pull_start)(pscom_plugin_con_t *con, void *priv,
                           const void *blob, size_t blob_len, void *dst,
                           size_t len, void *handle);
} pscom_plugin_ops_t;

/* Largest plugin part of a packed remote key (rma_register). */
#define PSCOM_PLUGIN_RKEY_MAX 128

/* Capabilities (pscom_plugin_t.flags). */
#define PSCOM_PLUGIN_LOCAL_ONLY 0x1 /* only for peers on the same node */
/* Its progress op polls memory that another core writes (a shared-memory
 * queue): a wait polling this plugin alone adds the CPU's spin-wait hint
 * (pause) after a few polls that found nothing. */
#define PSCOM_PLUGIN_SPIN_RELAX 0x2

typedef struct pscom_plugin {
    uint32_t api_version;       /* PSCOM_PLUGIN_API_VERSION */
    const char *name;           /* short lower-case name: "tcp" */
    const char *alias;          /* other PSP_<ALIAS> priority name, or NULL */
    pscom_con_type_t con_type;  /* what connection->type shows */
    int priority;               /* built-in rank; larger is preferred */
    size_t con_priv_size;       /* zeroed per-connection state given as `priv` */
    unsigned flags;             /* PSCOM_PLUGIN_* */
    size_t *rendezvous;         /* threshold for this plugin, or NULL: the core's */
    unsigned fds_per_con;       /* file descriptors an open connection keeps */
    const pscom_plugin_ops_t *ops;
} pscom_plugin_t;

/* A loadable plugin libpscom4NAME.so exports its descriptor under this name
 * followed by NAME: pscom_plugin_ucx. Modules are best built with hidden
 * symbols (calls inside the module then need no PLT) and the descriptor
 * marked PSCOM_PLUGIN_EXPORT. */
#define PSCOM_PLUGIN_SYMBOL_PREFIX "pscom_plugin_"
#define PSCOM_PLUGIN_EXPORT __attribute__((visibility("default")))

/* ---------------------------------------------------------------------- */
/* Core services                                                          */
/* ---------------------------------------------------------------------- */

/* Send side. Describe the bytes to write next: up to iov_max entries
 * covering the queued frames in order. Returns the number of entries, 0 when
 * nothing can be written now (nothing queued, or the first frame waits for
 * a started one-sided operation, see rma_put); *total gets their byte
 * count. */
int pscom_plugin_tx_peek(pscom_plugin_con_t *con, struct iovec *iov,
                         int iov_max, size_t *total);
/* n bytes of what tx_peek described were written (completes requests).
 * Returns 0, or -1 when the connection is closing: then stop using it.
 * Where a send is done only when the peer acknowledged it, report it before
 * delivering anything the peer sent after that acknowledgement. When a
 * receive completes after a send's completion in the same round of
 * progress, the core runs the receive's callback one round later, so the
 * caller sees the send done first. */
int pscom_plugin_tx_done(pscom_plugin_con_t *con, size_t n);
/* Only from close(): the frame whose head tx_peek handed out at `head`
 * (its first iovec's address), or the rendezvous send whose data `head` is
 * (described by rndv_describe), is still being read by an operation the
 * transport cannot withdraw. The core then ends its send only when the
 * plugin passes the returned token to pscom_plugin_tx_returned, in error
 * (until then its buffers stay the application's send buffers, and a
 * copy of the core's stays allocated). NULL when no such frame is queued.
 * The core calls the plugin's progress only while it has connections or a
 * hold: until its last token is returned, a plugin keeps a hold
 * (pscom_plugin_hold_progress), since the closing connection may be its
 * last. (API 1.11) */
void *pscom_plugin_tx_lend(pscom_plugin_con_t *con, const void *head);
/* The transport no longer reads the frame of a token of tx_lend. */
void pscom_plugin_tx_returned(void *token);
/* 1 when frames are queued. */
int pscom_plugin_tx_pending(pscom_plugin_con_t *con);

/* Receive side. Feed arriving bytes (any chunking); the core copies what it
 * keeps, so buf may be reused when the call returns. buf may be memory the
 * peer can still write (a shared ring): the core reads a header once and
 * sizes every copy from its own copy, so bytes changed meanwhile change at
 * most the message's contents (the receives' callbacks see the header in
 * place, pscom.h). Returns 0, or -1 when the connection failed or is
 * closing: then stop reading it. */
int pscom_plugin_rx_push(pscom_plugin_con_t *con, const void *buf, size_t len);
/* From inside a transport's own callback, during the progress op (where
 * application code must not run: it may wait, and so re-enter the
 * transport): take a message now if head[0..head_len) (its header and
 * xheader, aligned for pscom_header_net_t) and body[0..body_len) are one
 * whole user message, the connection expects a new message, and a posted
 * receive takes it. 1: taken (copied; the receive is complete, its
 * callbacks run when the progress op returned, as for every upcall); 0: not
 * taken, deliver it later with pscom_plugin_rx_push() as usual. Only the
 * receive's recv_accept may run inside. The caller keeps the connection's
 * order: nothing of this connection may wait undelivered before it. Added
 * with API 1.4; a plugin that calls it does not load into an older
 * library. */
int pscom_plugin_rx_now(pscom_plugin_con_t *con, const void *head,
                        size_t head_len, const void *body, size_t body_len);
/* Where the next bytes of a message body may go directly (a user buffer),
 * or 0 when they must go through pscom_plugin_rx_push(). */
size_t pscom_plugin_rx_direct(pscom_plugin_con_t *con, void **buf);
/* n bytes were written to the buffer rx_direct returned. 0 or -1 as above. */
int pscom_plugin_rx_direct_done(pscom_plugin_con_t *con, size_t n);
/* Take the body of the current message out of line (for plugins that
 * receive a body asynchronously, e.g. a UCX or RDMA rendezvous). When the
 * whole body goes into a buffer that stays the plugin's until it says the
 * body is complete — a rendezvous body for a matched receive that is not
 * truncated, and none of it delivered yet — returns a handle, sets *buf and
 * *len (the whole body), and the core expects the next message at once: so
 * several bodies may move at the same time and complete in any order.
 * Otherwise returns NULL: deliver the body as usual (rx_direct, rx_push).
 * Added in library 6.1 (API 1.1); a plugin that calls it does not load
 * into an older library. */
void *pscom_plugin_rx_defer(pscom_plugin_con_t *con, void **buf, size_t *len);
/* The body of `handle` (from rx_defer, or the one rndv_pull_start was
 * given, whose dst and len stand for *buf and *len) is complete (err 0:
 * all *len bytes are in *buf) or failed (err a negative errno: the receive
 * ends with an error; report the connection's failure with
 * pscom_plugin_con_error as usual). Call it at
 * most once per handle, from the progress op, and never after ops.close()
 * began: a body not finished by then fails when close() returns, and from
 * then on the plugin must not write its buffer. An EOF of the peer that
 * arrives while bodies are deferred takes effect after the last of them.
 * Returns 0, or -1 when the connection failed or is closing (deliver no
 * more messages; outstanding bodies may still be finished until close()). */
int pscom_plugin_rx_defer_done(pscom_plugin_con_t *con, void *handle, int err);

/* The connection broke (EOF, reset, ...). The core fails its requests and
 * calls socket->ops.con_error; ops.close() follows later, outside of the
 * plugin's own call chain, so `priv` stays valid until then. what: the
 * system call that failed, for the log line. */
void pscom_plugin_con_error(pscom_plugin_con_t *con, pscom_op_t op,
                            pscom_err_t err, const char *what, int sys_errno);

/* The public connection, for names in messages. */
pscom_connection_t *pscom_plugin_con_pub(pscom_plugin_con_t *con);
/* The socket the connection belongs to: a key for per-socket plugin state
 * (stays valid while the socket has connections). */
pscom_socket_t *pscom_plugin_con_socket(pscom_plugin_con_t *con);
/* "name(rank)@host:port <-> name(rank)@host:port [transport]" */
const char *pscom_plugin_con_str(pscom_plugin_con_t *con);
/* The peer's process id, from the pre-connection handshake, when the peer
 * runs on this node; 0 when it does not (or is not known). A plugin that
 * reaches into the peer's memory (cross-memory attach) checks a process id
 * that came with a message against it: only the connected process may be
 * read or written, whatever the message says. (API 1.6) */
pid_t pscom_plugin_con_peer_pid(pscom_plugin_con_t *con);

/* File descriptors watched by the progress engine. `hot` descriptors are
 * looked at on every round; cold ones (listeners) every few rounds. */
typedef void (*pscom_plugin_fd_cb_t)(int fd, uint32_t events, void *arg);
int pscom_plugin_fd_add(int fd, uint32_t events, int hot,
                        pscom_plugin_fd_cb_t cb, void *arg);
int pscom_plugin_fd_mod(int fd, uint32_t events);
void pscom_plugin_fd_del(int fd);
/* Close a TCP socket (not in the progress set any more) without losing
 * what it still has to send: it is shut for writing and what the peer
 * sends is dropped until the peer has acknowledged everything, closed its
 * end, or 10 s have passed; then it is closed. A plain close() with bytes
 * unread sends a reset, which drops the send queue's tail. (API 1.10) */
void pscom_plugin_fd_linger(int fd);

/* Hear of a socket's close: fn(socket, arg) runs once, when
 * pscom_close_socket() (also with NULL, and at exit) closes `socket`,
 * before its connections are closed; the watch is forgotten then. It runs
 * with the library lock held, on the closing thread, and must call no
 * pscom function but the logging services (pscom_plugin_log,
 * pscom_plugin_log_level). For code beside the library that keeps a
 * socket's connections in tables of its own (libpscom_pmix), which must
 * forget them before they are freed. `socket` must be one the application
 * has not closed yet (a closed one may be freed). Returns 0, -EINVAL for a
 * socket whose close is under way, or -ENOMEM. (API 1.12) */
typedef void (*pscom_plugin_sock_closed_cb_t)(pscom_socket_t *socket,
                                              void *arg);
int pscom_plugin_sock_watch(pscom_socket_t *socket,
                            pscom_plugin_sock_closed_cb_t fn, void *arg);
/* Forget the watches of fn and arg that have not run, on every socket.
 * Once it returns, fn is not running for them on another thread and will
 * not run. (API 1.12) */
void pscom_plugin_sock_unwatch(pscom_plugin_sock_closed_cb_t fn, void *arg);
/* Run fn(arg) with the library lock held (recursive: fn may call pscom),
 * so that no other thread's close frees a connection between fn reading
 * it from a table of its own (kept current by a socket watch) and using
 * it. Not from inside a socket watch. (API 1.12) */
void pscom_plugin_run_locked(void (*fn)(void *arg), void *arg);

/* Progress as a wait does (spinning, then resting as PSP_WAIT_SPIN and
 * PSP_WAIT_SLEEP say) until cond(arg) returns nonzero. cond runs with the
 * library lock held (with threads), before the first round, after every
 * round and after every sleep, which lasts at most 10 ms: a condition
 * another thread makes true is seen without a wake-up (one through a
 * watched descriptor ends a sleep at once). For code beside the library
 * that waits for something else while pscom must progress
 * (libpscom_pmix's barrier and lookup); not from inside a callback of the
 * library.
 * (API 1.7) */
void pscom_plugin_wait_until(int (*cond)(void *arg), void *arg);

/* Keep the progress op of the plugin `name` (its descriptor's name) called
 * in every round while a hold is in force (hold nonzero takes one, hold 0
 * releases one), also when no connection is open on it. For work that
 * outlives its connections: sends a plugin reported finished early that
 * its provider still carries after the connection closed. The ops.destroy
 * of such a plugin should finish that work within a bound of its own;
 * holds left then are dropped. Call it from the plugin's ops (with the
 * library lock held, as every service here). (API 1.9) */
void pscom_plugin_hold_progress(const char *name, int hold);

/* A one-sided operation that rma_put/rma_get started (returned 1) ended:
 * err 0, or a negative errno. On an error the core carries the operation
 * again on its own path while the connection is up (a put writes the same
 * bytes again), and fails the request when the connection broke. Call it
 * at most once per token, from the progress op. When a connection closes or
 * fails, the core fails the operations still started on it right after
 * ops.close() returns (the application may then reuse their buffers, so
 * close must end the transfers first), and forgets their tokens: do not
 * call this for them after ops.close(); a token the core does not know is
 * ignored. */
void pscom_plugin_rma_done(void *token, int err);

/* From a plugin's init op: the reason it is about to fail, in words for a
 * person ("no RDMA device found"); pscom_info shows it. From its hs_start
 * or hs_connect op: why it cannot serve this connection ("cannot reach the
 * peer's UCX worker: Destination is unreachable"); the handshake's debug
 * lines show it on both sides (it travels in the REJECT or FAILED record).
 * At most 255 bytes are kept. Ignored at other times. */
void pscom_plugin_set_reason(const char *reason);

/* For tools and tests: 1 when the plugin `name` (also ParaStation's names
 * "ucp", "openib") is loaded and usable in this process, else 0 and *why
 * (if given) says why. Initialises the library if needed, and opens and
 * starts that plugin (only that one) if it was not yet. */
int pscom_plugin_available(const char *name, const char **why);

/* Logging at PSP_DEBUG levels (0 fatal .. 6 trace). */
void pscom_plugin_log(int level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
int pscom_plugin_log_level(void);

#ifdef __cplusplus
}
#endif

#endif /* PSCOM_PLUGIN_H_ */
