/*
 * pscom — an open point-to-point messaging library for HPC.
 *
 * This is the public interface. It is source compatible with the interface of
 * ParaStation pscom 6.0: the type names, constants, struct layouts and function
 * signatures below are what programs written for that library expect. The
 * text and the implementation behind it are this project's own.
 *
 * Threading: after pscom_init() the library must be called from one thread at
 * a time. After pscom_init_thread() every function may be called from any
 * thread concurrently.
 *
 * Memory: objects created by a pscom_*_create/open call are owned by the
 * library until the matching free/close call. Buffers passed to a request
 * stay owned by the caller and must stay valid until the request is done.
 */
#ifndef PSCOM_H_
#define PSCOM_H_

#ifdef __cplusplus
extern "C" {
#endif

#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

struct in_addr;
struct sockaddr_in;

/* ---------------------------------------------------------------------- */
/* Versions                                                               */
/* ---------------------------------------------------------------------- */

#ifndef PSCOM_CUDA_AWARENESS
#define PSCOM_ABI_CUDA_SUPPORT 0
#else
#define PSCOM_ABI_CUDA_SUPPORT 1
#define PSCOM_CUDA_AWARENESS_SUPPORT
#endif

/* The binary interface: a program built against major M runs on any library
 * with the same major and an equal or larger minor. */
#define PSCOM_ABI_VERSION_MAJOR 5
#define PSCOM_ABI_VERSION_MINOR 0

/* The source interface: 0x00MMmmpp (major, minor, patch). */
#define PSCOM_API_VERSION_MAJOR 6
#define PSCOM_API_VERSION_MINOR 1
#define PSCOM_API_VERSION_PATCH 0
#define PSCOM_API_VERSION                                                      \
    ((PSCOM_API_VERSION_MAJOR << 16) | (PSCOM_API_VERSION_MINOR << 8) |        \
     PSCOM_API_VERSION_PATCH)

/* Bits 0..i-1 set. */
#define PSCOM_BIT_MASK(i) ((i) >= 64 ? ~0 : ((1 << (i)) - 1))

/* The 16-bit version passed to pscom_init(): cuda (1 bit), major (7), minor (8). */
#define PSCOM_ABI_VERSION_CUDA_BITS  1
#define PSCOM_ABI_VERSION_MAJOR_BITS 7
#define PSCOM_ABI_VERSION_MINOR_BITS 8
#define PSCOM_ABI_VERSION_CUDA_SHIFT                                           \
    (PSCOM_ABI_VERSION_MAJOR_BITS + PSCOM_ABI_VERSION_MINOR_BITS)
#define PSCOM_ABI_VERSION_MAJOR_SHIFT (PSCOM_ABI_VERSION_MINOR_BITS)

#define PSCOM_VERSION_BUILD(cuda, major, minor)                                \
    (((cuda) << PSCOM_ABI_VERSION_CUDA_SHIFT) |                                \
     ((major) << PSCOM_ABI_VERSION_MAJOR_SHIFT) | (minor))

#define PSCOM_VERSION_SPLIT(pscom_version, cuda, major, minor)                 \
    do {                                                                       \
        (cuda)  = ((pscom_version) >> PSCOM_ABI_VERSION_CUDA_SHIFT) &          \
                 PSCOM_BIT_MASK(PSCOM_ABI_VERSION_CUDA_BITS);                  \
        (major) = ((pscom_version) >> PSCOM_ABI_VERSION_MAJOR_SHIFT) &         \
                  PSCOM_BIT_MASK(PSCOM_ABI_VERSION_MAJOR_BITS);                \
        (minor) = (pscom_version)&PSCOM_BIT_MASK(PSCOM_ABI_VERSION_MINOR_BITS); \
    } while (0)

#define PSCOM_VERSION                                                          \
    PSCOM_VERSION_BUILD(PSCOM_ABI_CUDA_SUPPORT, PSCOM_ABI_VERSION_MAJOR,       \
                        PSCOM_ABI_VERSION_MINOR)

/* ---------------------------------------------------------------------- */
/* Constants                                                              */
/* ---------------------------------------------------------------------- */

/* Result of the calls that can fail. For PSCOM_ERR_STDERROR errno says more. */
typedef enum PSCOM_err {
    PSCOM_SUCCESS                 = 0,
    PSCOM_ERR_STDERROR            = -1,
    PSCOM_ERR_INVALID             = -2,
    PSCOM_ERR_ALREADY             = -3,
    PSCOM_NOT_IMPLEMENTED         = -4,
    PSCOM_ERR_EOF                 = -5,
    PSCOM_ERR_IOERROR             = -6,
    PSCOM_ERR_UNSUPPORTED_VERSION = -7,
    PSCOM_ERR_CONNECTION_REFUSED  = -8,
} pscom_err_t;

/* What a connection can do at the moment. The R/W bits may be combined. */
typedef enum PSCOM_con_state {
    PSCOM_CON_STATE_NO_RW      = 0x0,
    PSCOM_CON_STATE_R          = 0x1,
    PSCOM_CON_STATE_W          = 0x2,
    PSCOM_CON_STATE_RW         = 0x3,
    PSCOM_CON_STATE_CLOSED     = 0x4,
    PSCOM_CON_STATE_CONNECTING = 0x8,  /* we opened the pre-connection */
    PSCOM_CON_STATE_ACCEPTING  = 0x10, /* the peer opened it */
    PSCOM_CON_STATE_CLOSE_WAIT = 0x400, /* our EOF is out, waiting for the peer's */
    PSCOM_CON_STATE_CLOSING    = 0x20,
    PSCOM_CON_STATE_SUSPENDING = 0x40,
    PSCOM_CON_STATE_SUSPEND_SENT     = PSCOM_CON_STATE_SUSPENDING | 0x080,
    PSCOM_CON_STATE_SUSPEND_RECEIVED = PSCOM_CON_STATE_SUSPENDING | 0x100,
    PSCOM_CON_STATE_SUSPENDED = PSCOM_CON_STATE_SUSPENDING |
                                PSCOM_CON_STATE_SUSPEND_SENT |
                                PSCOM_CON_STATE_SUSPEND_RECEIVED,
    PSCOM_CON_STATE_CONNECTING_ONDEMAND = 0x200 | PSCOM_CON_STATE_CONNECTING,
    PSCOM_CON_STATE_ACCEPTING_ONDEMAND  = 0x200 | PSCOM_CON_STATE_ACCEPTING,
} pscom_con_state_t;

/* The transport carrying a connection. Several values are kept only so that
 * the numbering stays the one programs were built with. */
typedef enum PSCOM_con_type {
    PSCOM_CON_TYPE_NONE      = 0x00,
    PSCOM_CON_TYPE_LOOP      = 0x01, /* a connection to one's own socket */
    PSCOM_CON_TYPE_TCP       = 0x02,
    PSCOM_CON_TYPE_SHM       = 0x03,
    PSCOM_CON_TYPE_P4S       = 0x04, /* unused */
    PSCOM_CON_TYPE_GM        = 0x05, /* unused */
    PSCOM_CON_TYPE_MVAPI     = 0x06, /* unused */
    PSCOM_CON_TYPE_OPENIB    = 0x07, /* InfiniBand/RoCE verbs */
    PSCOM_CON_TYPE_ELAN      = 0x08, /* unused */
    PSCOM_CON_TYPE_DAPL      = 0x09, /* unused */
    PSCOM_CON_TYPE_ONDEMAND  = 0x0a, /* not connected yet; connects on first use */
    PSCOM_CON_TYPE_OFED      = 0x0b, /* libfabric (OFI) in this library */
    PSCOM_CON_TYPE_EXTOLL    = 0x0c, /* unused */
    PSCOM_CON_TYPE_PSM       = 0x0d, /* unused */
    PSCOM_CON_TYPE_VELO      = 0x0e, /* unused */
    PSCOM_CON_TYPE_CBC       = 0x0f, /* unused */
    PSCOM_CON_TYPE_MXM       = 0x10, /* unused */
    PSCOM_CON_TYPE_SUSPENDED = 0x11,
    PSCOM_CON_TYPE_UCP       = 0x12, /* UCX */
    PSCOM_CON_TYPE_GW        = 0x13, /* unused */
    PSCOM_CON_TYPE_PORTALS   = 0x14, /* unused */
    PSCOM_CON_TYPE_COUNT,
} pscom_con_type_t;

/* This library's name for the libfabric transport. */
#define PSCOM_CON_TYPE_OFI PSCOM_CON_TYPE_OFED

/* Flags of pscom_connect(). */
typedef enum PSCOM_connect_flags {
    PSCOM_CON_FLAG_DIRECT   = 0x00000001, /* connect now */
    PSCOM_CON_FLAG_ONDEMAND = 0x00000002, /* connect on first use */
} pscom_connect_flags_t;

/* Flags of pscom_open_socket(). */
typedef enum PSCOM_socket_flags {
    PSCOM_SOCK_FLAG_INTRA_JOB = 0x00000001,
    PSCOM_SOCK_FLAG_INTER_JOB = 0x00000002,
} pscom_socket_flags_t;

/* "No rank" for pscom_open_socket() and pscom_connect(). */
#define PSCOM_RANK_UNDEFINED -1

/* The operation that failed, as passed to socket->ops.con_error. */
typedef enum PSCOM_op {
    PSCOM_OP_READ    = 1,
    PSCOM_OP_WRITE   = 2,
    PSCOM_OP_CONNECT = 3,
    PSCOM_OP_RW      = 4,
} pscom_op_t;

#define PSCOM_HAS_TWO_SIDED_RMA

typedef enum PSCOM_rma_op {
    PSCOM_RMA_PUT              = 0,
    PSCOM_RMA_GET              = 1,
    PSCOM_RMA_ACCUMULATE       = 2,
    PSCOM_RMA_GET_ACCUMULATE   = 3,
    PSCOM_RMA_FETCH_AND_OP     = 4,
    PSCOM_RMA_COMPARE_AND_SWAP = 5,
    PSCOM_RMA_OP_COUNT
} pscom_rma_op_t;

/* Request state bits (pscom_request_t.state). */
#define PSCOM_REQ_STATE_SEND_REQUEST       0x00000001
#define PSCOM_REQ_STATE_RECV_REQUEST       0x00000002
#define PSCOM_REQ_STATE_GRECV_REQUEST      0x00000004 /* generated: no receive posted yet */
#define PSCOM_REQ_STATE_POSTED             0x00000008 /* in a send or receive queue */
#define PSCOM_REQ_STATE_IO_STARTED         0x00000010 /* data moving: no cancel */
#define PSCOM_REQ_STATE_IO_DONE            0x00000020
#define PSCOM_REQ_STATE_ERROR              0x00000040
#define PSCOM_REQ_STATE_CANCELED           0x00000080
#define PSCOM_REQ_STATE_TRUNCATED          0x00000100 /* message larger than the buffer */
#define PSCOM_REQ_STATE_DONE               0x00000200 /* finished; io_done was called */
#define PSCOM_REQ_STATE_RMA_READ_REQUEST   0x00000400
#define PSCOM_REQ_STATE_RMA_WRITE_REQUEST  0x00000800
#define PSCOM_REQ_STATE_PASSIVE_SIDE       0x00001000
#define PSCOM_REQ_STATE_RENDEZVOUS_REQUEST 0x00002000
#define PSCOM_REQ_STATE_GRECV_MERGED       0x00004000

#define PSCOM_V_NONSTRING
#ifdef __has_attribute
#if __has_attribute(__nonstring__)
#undef PSCOM_V_NONSTRING
#define PSCOM_V_NONSTRING __attribute__((__nonstring__))
#endif
#endif

typedef unsigned int pscom_req_state_t;

typedef struct PSCOM_socket pscom_socket_t;
typedef struct PSCOM_connection pscom_connection_t;
typedef struct PSCOM_request pscom_request_t;
typedef struct PSCOM_header_net pscom_header_net_t;
typedef struct PSCOM_con_info pscom_con_info_t;

/* A registered memory region (pscom_mem_register). */
typedef struct PSCOM_memh *pscom_memh_t;
/* A peer's memory region, unpacked from its packed key (pscom_rkey_generate). */
typedef struct PSCOM_rkey *pscom_rkey_t;

/* ---------------------------------------------------------------------- */
/* Extended headers                                                       */
/* ---------------------------------------------------------------------- */

/* A user type may be appended to each RMA header by defining the matching
 * PSCOM_XHEADER_RMA_*_USER_TYPE macro before including this file. */
#ifdef PSCOM_XHEADER_RMA_PUT_USER_TYPE
#define PSCOM_USER_PUT_ PSCOM_XHEADER_RMA_PUT_USER_TYPE user;
#else
#define PSCOM_USER_PUT_ char user[0];
#endif
#ifdef PSCOM_XHEADER_RMA_ACCUMULATE_USER_TYPE
#define PSCOM_USER_ACC_ PSCOM_XHEADER_RMA_ACCUMULATE_USER_TYPE user;
#else
#define PSCOM_USER_ACC_ char user[0];
#endif
#ifdef PSCOM_XHEADER_RMA_GET_USER_TYPE
#define PSCOM_USER_GET_ PSCOM_XHEADER_RMA_GET_USER_TYPE user;
#else
#define PSCOM_USER_GET_ char user[0];
#endif
#ifdef PSCOM_XHEADER_RMA_GET_ACCUMULATE_USER_TYPE
#define PSCOM_USER_GACC_ PSCOM_XHEADER_RMA_GET_ACCUMULATE_USER_TYPE user;
#else
#define PSCOM_USER_GACC_ char user[0];
#endif
#ifdef PSCOM_XHEADER_RMA_FETCH_OP_USER_TYPE
#define PSCOM_USER_FOP_ PSCOM_XHEADER_RMA_FETCH_OP_USER_TYPE user;
#else
#define PSCOM_USER_FOP_ char user[0];
#endif
#ifdef PSCOM_XHEADER_RMA_COMPARE_SWAP_USER_TYPE
#define PSCOM_USER_CAS_ PSCOM_XHEADER_RMA_COMPARE_SWAP_USER_TYPE user;
#else
#define PSCOM_USER_CAS_ char user[0];
#endif

/* Target of a put or accumulate. */
typedef struct PSCOM_rma_put_data {
    void *dest; /* address at the target */
    void *memh; /* the target's region handle */
} pscom_rma_put_data_t;

typedef struct PSCOM_xheader_rma_put {
    pscom_rma_put_data_t common;
    PSCOM_USER_PUT_
} pscom_xheader_rma_put_t;

typedef struct PSCOM_xheader_rma_accumulate {
    pscom_rma_put_data_t common;
    PSCOM_USER_ACC_
} pscom_xheader_rma_accumulate_t;

/* Source of a get, get-accumulate, fetch-and-op or compare-and-swap. */
typedef struct PSCOM_rma_get_data {
    void *id;         /* the origin's request, echoed in the answer */
    void *src;        /* address at the target */
    uint64_t src_len; /* bytes to read there */
    void *memh;       /* the target's region handle */
} pscom_rma_get_data_t;

typedef struct PSCOM_xheader_rma_get {
    pscom_rma_get_data_t common;
    PSCOM_USER_GET_
} pscom_xheader_rma_get_t;

typedef struct PSCOM_xheader_rma_get_accumulate {
    pscom_rma_get_data_t common;
    PSCOM_USER_GACC_
} pscom_xheader_rma_get_accumulate_t;

typedef struct PSCOM_xheader_rma_fetch_op {
    pscom_rma_get_data_t common;
    PSCOM_USER_FOP_
} pscom_xheader_rma_fetch_op_t;

typedef struct PSCOM_xheader_rma_compare_swap {
    pscom_rma_get_data_t common;
    PSCOM_USER_CAS_
} pscom_xheader_rma_compare_swap_t;

#undef PSCOM_USER_PUT_
#undef PSCOM_USER_ACC_
#undef PSCOM_USER_GET_
#undef PSCOM_USER_GACC_
#undef PSCOM_USER_FOP_
#undef PSCOM_USER_CAS_

/* The answer to any get-like operation. */
typedef struct PSCOM_xheader_rma_get_answer {
    void *id;
    void *req;
} pscom_xheader_rma_get_answer_t;

/* pscom_post_rma_write(): where the data goes at the peer. */
typedef struct PSCOM_xheader_rma_write {
    void *dest;
} pscom_xheader_rma_write_t;

/* pscom_post_rma_read(): what to read at the peer. */
typedef struct PSCOM_xheader_rma_read {
    void *id;
    void *src;
    uint64_t src_len;
} pscom_xheader_rma_read_t;

typedef struct PSCOM_xheader_rma_read_answer {
    void *id;
} pscom_xheader_rma_read_answer_t;

typedef struct PSCOM_xheader_rendezvous_fin {
    void *id;
} pscom_xheader_rendezvous_fin_t;

/* Header of pscom_post_bcast() messages. */
typedef struct PSCOM_xheader_bcast {
    uint32_t group_id;
    uint32_t bcast_root;
    uint32_t bcast_arg1; /* used by the library */
    uint32_t bcast_arg2; /* used by the library */
    char user[0];
} pscom_xheader_bcast_t;

/* The extended header: what travels between the network header and the data.
 * Applications put their own type in `user` (PSCOM_XHEADER_USER_TYPE). */
typedef union PSCOM_xheader {
    pscom_xheader_rma_read_t rma_read;
    pscom_xheader_rma_read_answer_t rma_read_answer;
    pscom_xheader_rma_write_t rma_write;
    pscom_xheader_rendezvous_fin_t ren_fin;
    pscom_xheader_rma_get_t rma_get;
    pscom_xheader_rma_get_answer_t rma_get_answer;
    pscom_xheader_rma_put_t rma_put;
    pscom_xheader_rma_accumulate_t rma_accumulate;
    pscom_xheader_rma_get_accumulate_t rma_get_accumulate;
    pscom_xheader_rma_fetch_op_t rma_fetch_op;
    pscom_xheader_rma_compare_swap_t rma_compare_swap;
    pscom_xheader_bcast_t bcast;
#ifdef PSCOM_XHEADER_USER_TYPE
    PSCOM_XHEADER_USER_TYPE user;
#else
    char user[0];
#endif
} pscom_xheader_t;

/* Largest message length the 40-bit header field can carry (1 TiB - 1). */
#define PSCOM_DATA_LEN_MASK 0xffffffffff

/* The header in front of every message on the wire, and the header of a
 * received message as the application sees it (request->header). For a
 * received message data_len is the length the sender sent, also when the
 * receive buffer was smaller. */
struct PSCOM_header_net {
    uint16_t xheader_len;
    uint8_t msg_type;
    uint64_t data_len : 40;
    pscom_xheader_t xheader[0];
};

/* ---------------------------------------------------------------------- */
/* Objects                                                                */
/* ---------------------------------------------------------------------- */

/* A send or receive. Create with pscom_request_create(), fill the fields,
 * post, wait, free. The library owns it from post until it is done. */
struct PSCOM_request {
    pscom_req_state_t state;

    size_t xheader_len; /* bytes of xheader to send / room for it on receive */
    size_t data_len;    /* bytes to send / size of the receive buffer */
    void *data;         /* the caller's buffer */

    pscom_connection_t *connection; /* peer; NULL on a receive: any source */
    pscom_socket_t *socket;         /* receive: NULL means any socket */

    struct PSCOM_request_rma {
        void *origin_addr;
        void *target_addr;
        void *compare_addr;
        void *result_addr;
        pscom_rkey_t rkey;
    } rma;

    struct PSCOM_request_ops {
        /* Receive only: return 1 to take this message, 0 to let it pass. Called
         * with the message's connection and network header (xheader behind it).
         * The header may lie in memory the sender can still write (a shared
         * ring): read each field once; the request gets the checked copy. */
        int (*recv_accept)(pscom_request_t *request,
                           pscom_connection_t *connection,
                           pscom_header_net_t *header_net);
        /* Called once when the request is done (state has DONE set). The
         * request may be freed or reposted from inside the callback. */
        void (*io_done)(pscom_request_t *request);
    } ops;

    size_t user_size;            /* bytes at `user` */
    struct PSCOM_req_user *user; /* the caller's per-request storage */

    size_t max_xheader_len; /* room at `xheader` */

    pscom_header_net_t header; /* the received message's header */
    pscom_xheader_t xheader;   /* max_xheader_len bytes of extended header */
};

/* Who a socket or a connection's peer is. */
struct PSCOM_con_info {
    union {
        struct {
            int32_t portno;
        } tcp;
        struct {
            uint64_t jobid;
            uint32_t remote_sockid;
        } rrcomm;
    };
    int node_id; /* equal for all processes on one host */
    int rank;    /* socket: own rank; connection: the peer's rank */
    void *id;    /* the connection's id at its owner */
    /* The socket name. Not NUL terminated: print it with "%.8s". */
    char name[8] PSCOM_V_NONSTRING;
};

/* A communication endpoint: listens, owns connections, matches receives. */
struct PSCOM_socket {
    struct PSCOM_socket_ops {
        /* A peer connected to us (passive side), connection ready to use. */
        void (*con_accept)(pscom_connection_t *new_connection);
        /* A connection failed or closed; its pending requests are failed. */
        void (*con_error)(pscom_connection_t *connection, pscom_op_t operation,
                          pscom_err_t error);
        /* Asked for every arriving user message before posted receives are
         * searched; returns the request to receive it, or NULL. The header,
         * as for recv_accept, may lie where the sender can still write. */
        pscom_request_t *(*default_recv)(pscom_connection_t *connection,
                                         pscom_header_net_t *header_net);
    } ops;
    int listen_portno; /* port we listen on, or -1 */

    pscom_con_info_t local_con_info;
    size_t connection_userdata_size; /* bytes at connection->userdata */
    size_t userdata_size;            /* bytes at userdata */
#ifdef PSCOM_SOCKET_USERDATA_TYPE
    PSCOM_SOCKET_USERDATA_TYPE userdata;
#else
    char userdata[0];
#endif
};

/* A bidirectional channel to one peer socket. */
struct PSCOM_connection {
    pscom_socket_t *socket;
    pscom_con_state_t state;
    pscom_con_type_t type;

    pscom_con_info_t remote_con_info;

    size_t userdata_size; /* bytes at userdata */
#ifdef PSCOM_CONNECTION_USERDATA_TYPE
    PSCOM_CONNECTION_USERDATA_TYPE userdata;
#else
    char userdata[0];
#endif
};

/* ---------------------------------------------------------------------- */
/* Setup                                                                  */
/* ---------------------------------------------------------------------- */

/* Initialise the library; pass PSCOM_VERSION. Reads the PSP_* settings.
 * Returns PSCOM_ERR_UNSUPPORTED_VERSION when the program was built for an
 * incompatible binary interface. May be called more than once. */
pscom_err_t pscom_init(int pscom_version);

/* As pscom_init(), and makes every call safe from concurrent threads. */
pscom_err_t pscom_init_thread(int pscom_version);

/* An identifier of this host, equal for all processes on it; -1 on error. */
int pscom_get_nodeid(void);

/* The port `socket` listens on, or -1. */
int pscom_get_portno(pscom_socket_t *socket);

/* A new socket with userdata_size bytes of socket user storage and
 * connection_userdata_size bytes in each of its connections. local_rank may
 * be PSCOM_RANK_UNDEFINED. NULL on error. Free with pscom_close_socket(). */
pscom_socket_t *pscom_open_socket(size_t userdata_size,
                                  size_t connection_userdata_size,
                                  int local_rank, uint64_t socket_flags);

/* Name the socket (up to 8 bytes are kept). Peers see it in remote_con_info. */
void pscom_socket_set_name(pscom_socket_t *socket, const char *name);

#define PSCOM_ANYPORT   -1 /* let the system choose the port */
#define PSCOM_LISTEN_FD0 0 /* use the listening socket open as fd 0 */

/* Listen for connections on portno (or PSCOM_ANYPORT). PSCOM_ERR_ALREADY when
 * the socket listens on another port already; PSCOM_ERR_STDERROR with errno
 * on a system error, which is also logged. */
pscom_err_t pscom_listen(pscom_socket_t *socket, int portno);

/* Close the listener. Established connections stay. */
void pscom_stop_listen(pscom_socket_t *socket);

#define PSCOM_HAS_LISTEN_SUSPEND_RESUME 1

/* Stop accepting for a while; the port (and the endpoint string) stays. */
void pscom_suspend_listen(pscom_socket_t *socket);

/* Accept again after pscom_suspend_listen(), or listen as before a stop. */
void pscom_resume_listen(pscom_socket_t *socket);

/* Start the I/O of every send queued on `connection`. Does not wait until
 * the sends are done. */
void pscom_flush(pscom_connection_t *connection);

/* Send what is queued, tell the peer, fail the pending receives, and free the
 * connection. It waits for the queued sends at most PSP_SHUTDOWN_TIMEOUT
 * milliseconds (0: without limit); those still pending then fail. A send
 * whose buffer the transport still reads and cannot withdraw (ucx, ofi)
 * fails only once the transport lets go of it: until then its request is
 * not done and the buffer must stay as it is. */
void pscom_close_connection(pscom_connection_t *connection);

/* Extension of this library (not in ParaStation pscom).
 * Fail `connection` as if its transport had broken, for a layer that learns
 * of a dead peer by other means (a PMIx event): a handshake or on-demand
 * connect under way is abandoned, every pending send and receive ends with
 * PSCOM_REQ_STATE_ERROR, the state becomes PSCOM_CON_STATE_CLOSED and
 * socket->ops.con_error(connection, PSCOM_OP_RW, error) is called once.
 * Later sends and receives on it fail at once; unexpected messages that had
 * arrived whole stay receivable. The connection stays valid until
 * pscom_close_connection(), which then sends nothing.
 * An established connection is read first: pscom progresses until a round
 * finds nothing more to do (at most 256 rounds), so that the messages the
 * peer sent before it died, still held by the transport (tcp: the socket
 * buffer), arrive whole and stay receivable, as the transport alone would
 * have delivered them before the end of the stream. Callbacks (io_done,
 * con_error of other connections) may run meanwhile. When the transport
 * meets the end of the stream then, that end stands: con_error has been
 * called with its error (PSCOM_ERR_EOF) and PSCOM_ERR_ALREADY is returned;
 * likewise when a callback closed the connection meanwhile.
 * error: a negative pscom_err_t (PSCOM_ERR_IOERROR for a failure,
 * PSCOM_ERR_EOF for a peer that ended). PSCOM_ERR_ALREADY when it failed or
 * is closing already (nothing is called), PSCOM_ERR_INVALID for bad
 * arguments and for a pointer that is no open connection (closed, also by
 * pscom_close_socket(), or never one): such a pointer is not read through.
 * May be called from callbacks (io_done, con_error, file descriptor
 * callbacks), not from recv_accept or default_recv (the transport is then
 * in the middle of reading). */
#define PSCOM_HAS_FAIL_CONNECTION 1
pscom_err_t pscom_fail_connection(pscom_connection_t *connection,
                                  pscom_err_t error);

/* Close all connections of `socket` and the socket itself; NULL closes every
 * socket. The socket must not be used afterwards. */
void pscom_close_socket(pscom_socket_t *socket);

/* A new, unconnected connection on `socket`; NULL on error. */
pscom_connection_t *pscom_open_connection(pscom_socket_t *socket);

/* ---------------------------------------------------------------------- */
/* Requests                                                               */
/* ---------------------------------------------------------------------- */

/* A request with room for max_xheader_len bytes of extended header and
 * user_size bytes of user storage. NULL when out of memory, or when
 * max_xheader_len is more than a message can carry (65535 bytes less the
 * library's own trailer of 88 bytes). */
pscom_request_t *pscom_request_create(size_t max_xheader_len, size_t user_size);

#define PSCOM_REQUEST_CREATE()                                                 \
    pscom_request_create(sizeof(PSCOM_XHEADER_USER_TYPE),                      \
                         sizeof(struct PSCOM_req_user))

/* Free a request that is not posted (done or never posted). */
void pscom_request_free(pscom_request_t *request);

/* Post a receive: request->connection (or NULL and request->socket, or both
 * NULL), data, data_len, xheader_len, optional ops.recv_accept and io_done. */
void pscom_post_recv(pscom_request_t *request);

/* Post a send of xheader_len bytes of xheader and data_len bytes of data on
 * request->connection. */
void pscom_post_send(pscom_request_t *request);

/* Fill the common fields of a request. */
static inline pscom_request_t *pscom_req_prepare(pscom_request_t *req,
                                                 pscom_connection_t *connection,
                                                 void *data, size_t data_len,
                                                 void *xheader,
                                                 size_t xheader_len)
{
    req->connection  = connection;
    req->data        = data;
    req->data_len    = data_len;
    req->xheader_len = xheader_len;
    if (xheader) {
        assert(xheader_len <= req->max_xheader_len);
        memcpy(&req->xheader.user, xheader, xheader_len);
    }
    return req;
}

/* Send a copy of the buffers; returns at once, the library frees its copy.
 * An xheader longer than pscom_request_create() allows is not sent (an
 * error is logged). */
void pscom_send(pscom_connection_t *connection, void *xheader,
                size_t xheader_len, void *data, size_t data_len);

/* Send the buffers in place; io_done(state, priv) is called when done, and
 * the buffers must stay valid until then. An xheader longer than
 * pscom_request_create() allows is not sent: io_done gets an error state at
 * once. */
void pscom_send_inplace(pscom_connection_t *connection, void *xheader,
                        size_t xheader_len, void *data, size_t data_len,
                        void (*io_done)(pscom_req_state_t state, void *priv),
                        void *priv);

/* Blocking receive of exactly xheader_len + data_len bytes from `connection`
 * (or any connection of `socket`). PSCOM_ERR_IOERROR when it failed or did
 * not fit. */
pscom_err_t pscom_recv(pscom_connection_t *connection, pscom_socket_t *socket,
                       void *xheader, size_t xheader_len, void *data,
                       size_t data_len);

static inline pscom_err_t pscom_recv_from(pscom_connection_t *connection,
                                          void *xheader, size_t xheader_len,
                                          void *data, size_t data_len)
{
    return pscom_recv(connection, connection->socket, xheader, xheader_len,
                      data, data_len);
}

static inline pscom_err_t pscom_recv_any(pscom_socket_t *socket, void *xheader,
                                         size_t xheader_len, void *data,
                                         size_t data_len)
{
    return pscom_recv(NULL, socket, xheader, xheader_len, data, data_len);
}

/* Write data_len bytes of data to xheader.rma_write.dest at the peer. */
void pscom_post_rma_write(pscom_request_t *request);

/* Read xheader.rma_read.src_len bytes at xheader.rma_read.src of the peer
 * into data. */
void pscom_post_rma_read(pscom_request_t *request);

/* Drive progress until `request` is done. */
void pscom_wait(pscom_request_t *request);

/* Wait for every request of the NULL-terminated array. */
void pscom_wait_all(pscom_request_t **requests);

/* One round of progress; 1 when something happened. */
int pscom_test_any(void);

/* Progress until something happened. After pscom_init_thread it returns
 * after one round at most: another thread may have ended what the caller
 * waits for, so the caller looks again. */
void pscom_wait_any(void);

/* Cancel a request whose I/O has not started; 1 when it was cancelled.
 * A broadcast (pscom_post_bcast) is not cancelled: 0. Nor is a rendezvous
 * send whose buffer the transport has taken already (ucx, verbs and shm
 * with cross-memory attach describe it to the peer when it is posted). */
int pscom_cancel(pscom_request_t *request);
int pscom_cancel_send(pscom_request_t *request);
int pscom_cancel_recv(pscom_request_t *request);

/* Is there a message the receive `request` would take? 1 (and the message's
 * header and xheader copied into request->header/xheader) or 0. The message
 * is not consumed. */
int pscom_iprobe(pscom_request_t *request);

/* Wait until pscom_iprobe() would return 1. As with ParaStation pscom, this
 * waits for ever on a connection that has failed and holds no message: it
 * has no way to report the failure (ParaStation MPI takes whatever header
 * the request holds when it returns). Where the peer may fail, loop on
 * pscom_iprobe() and look at connection->state, or rely on the socket's
 * con_error callback. */
void pscom_probe(pscom_request_t *request);

static inline int pscom_req_state_successful(pscom_req_state_t state)
{
    return (state & (PSCOM_REQ_STATE_ERROR | PSCOM_REQ_STATE_CANCELED |
                     PSCOM_REQ_STATE_TRUNCATED | PSCOM_REQ_STATE_DONE)) ==
           PSCOM_REQ_STATE_DONE;
}

/* The two checks below may poll a request that another thread completes:
 * its state is read with acquire order, so that once DONE is seen the
 * request's header, xheader and data are too. */
static inline int pscom_req_successful(pscom_request_t *req)
{
    return pscom_req_state_successful(
        __atomic_load_n(&req->state, __ATOMIC_ACQUIRE));
}

static inline int pscom_req_state_is_done(pscom_req_state_t state)
{
    return state & PSCOM_REQ_STATE_DONE;
}

static inline int pscom_req_is_done(pscom_request_t *req)
{
    return pscom_req_state_is_done(
        __atomic_load_n(&req->state, __ATOMIC_ACQUIRE));
}

/* ---------------------------------------------------------------------- */
/* Device memory (this build has no GPU support)                          */
/* ---------------------------------------------------------------------- */

#ifdef PSCOM_CUDA_AWARENESS
void pscom_memcpy(void *dst, const void *src, size_t len);
int pscom_is_gpu_mem(const void *ptr);
#else
static inline void pscom_memcpy(void *dst, const void *src, size_t len)
{
    memcpy(dst, src, len);
}
#endif
/* 1 when the library moves GPU memory itself, else 0. */
int pscom_is_cuda_enabled(void);

/* ---------------------------------------------------------------------- */
/* Groups and broadcast                                                   */
/* ---------------------------------------------------------------------- */

typedef struct PSCOM_group pscom_group_t;

/* Open group `group_id` on `socket`: member my_grank of group_size, whose
 * peers are connections[i] (open connections of `socket`;
 * connections[my_grank] is not used and may be NULL, the array may be NULL
 * for a group of one). The library copies the array. NULL, logged, on bad
 * arguments, on a closed socket or connection, when the socket has an open
 * group of that id already, or out of memory (a group of more than one
 * member allocates here what its barrier needs, see pscom_barrier).
 * Group ids are the application's to agree on, like MPI context ids: every
 * member opens the group with the same id, and an id is not opened again on
 * a socket while messages of an earlier group of that id may still be on
 * their way (a member closed it while another still sends, or left a
 * collective early): such a message is taken by the new group's collective
 * of the same kind and root as if it were its own.
 * Members call the group's collectives in the same order. A group forgets a
 * connection that is closed (its collectives treat that peer as failed);
 * closing the socket makes the group unusable: pscom_group_find no longer
 * finds it, its collectives fail (logged), and only pscom_group_close may
 * still be called on it, which frees it. */
pscom_group_t *pscom_group_open(pscom_socket_t *socket, uint32_t group_id,
                                uint32_t my_grank, uint32_t group_size,
                                pscom_connection_t **connections);

/* Close and free the group (NULL: nothing); also one whose socket was
 * closed. A broadcast or barrier still under way on it (a callback may
 * close the group) keeps it allocated until it ends. The group must not be
 * used afterwards. */
void pscom_group_close(pscom_group_t *group);

/* Post a broadcast: request->socket, xheader.bcast.group_id and .bcast_root,
 * xheader_len (at least sizeof(pscom_xheader_bcast_t), the application's
 * xheader after it; the root's is delivered to every member), data and
 * data_len (the root sends them, the others receive into them). The request
 * is done when this member's part is: at the root once its sends to its
 * children are written, elsewhere once the message arrived and was passed
 * on.
 * TRUNCATED, with header.data_len the root's length, at a member that got
 * less than the root sent: its own data_len was shorter, or a member above
 * it in the broadcast tree had a shorter one (what arrives is what that
 * member kept). ERROR when a connection on this member's path from the root
 * failed: its parent's, or one above it (members below a failure end with
 * ERROR too, they do not wait), or one of its children's. ERROR at once on
 * bad arguments (logged). It takes what it needs when it starts: without
 * memory then it ends in ERROR at once, sends nothing, and fails the
 * connections to its parent and children in the broadcast tree (they end
 * in ERROR instead of going on out of step); once started it needs none.
 * A broadcast is not cancelled (pscom_cancel: 0). bcast_arg1 and
 * bcast_arg2 are the library's. */
void pscom_post_bcast(pscom_request_t *request);

/* Broadcast data_len bytes of data, and xheader_len bytes of xheader, from
 * member bcast_root of `group` to every member; blocking. At most 65431
 * bytes of xheader (what a message carries, less the broadcast's own
 * header); more is refused. It returns nothing: a refused, failed or
 * truncated broadcast is logged (see pscom_post_bcast for when). */
void pscom_bcast(pscom_group_t *group, unsigned bcast_root, void *xheader,
                 size_t xheader_len, void *data, size_t data_len);

/* Wait until every member of `group` entered the barrier. Every member
 * returns also after a failure: a member whose connection to another
 * failed, or that heard of such a failure from another member, runs the
 * barrier to its end and logs an error; it does not wait for a member it
 * cannot reach. Its own requests come from the group (allocated by
 * pscom_group_open), so it does not stop half-way for want of memory; a
 * peer's round message that came early and cannot be kept fails that
 * connection, and the barrier ends with a logged error. Barriers of one group are called one after the other: one called while
 * another of the group is under way (another thread, a callback) allocates
 * its own, and out of memory returns at once, logged, without taking
 * part. */
void pscom_barrier(pscom_group_t *group);

/* The open group `group_id` of `socket` (NULL: of any socket), or NULL. */
pscom_group_t *pscom_group_find(pscom_socket_t *socket, uint32_t group_id);

/* The group's id (also of one whose socket was closed). */
uint32_t pscom_group_get_id(pscom_group_t *group);

/* ---------------------------------------------------------------------- */
/* Transport selection                                                    */
/* ---------------------------------------------------------------------- */

/* Which transports new connections of `socket` may use. */
void pscom_con_type_mask_all(pscom_socket_t *socket);
void pscom_con_type_mask_only(pscom_socket_t *socket, pscom_con_type_t con_type);
void pscom_con_type_mask_add(pscom_socket_t *socket, pscom_con_type_t con_type);
void pscom_con_type_mask_del(pscom_socket_t *socket, pscom_con_type_t con_type);
int pscom_con_type_mask_is_set(pscom_socket_t *socket,
                               pscom_con_type_t con_type);
/* Save the mask (free the copy with free() or by restoring it). */
void *pscom_con_type_mask_backup(pscom_socket_t *socket);
/* Restore a saved mask and free the copy. */
void pscom_con_type_mask_restore(pscom_socket_t *socket,
                                 void *con_type_mask_backup);

/* ---------------------------------------------------------------------- */
/* Connecting                                                             */
/* ---------------------------------------------------------------------- */

/* Iterate the connections of `socket`: pass NULL first, then the previous
 * connection. NULL at the end. */
pscom_connection_t *pscom_get_next_connection(pscom_socket_t *socket,
                                              pscom_connection_t *con);

/* Connect `connection` to the socket that published ep_str (from
 * pscom_socket_get_ep_str(), or "host:port"). dest_rank is the peer's rank or
 * PSCOM_RANK_UNDEFINED; flags are pscom_connect_flags_t. */
pscom_err_t pscom_connect(pscom_connection_t *connection, const char *ep_str,
                          int dest_rank, uint64_t connection_flags);

/* The endpoint string of a listening socket; free it with
 * pscom_socket_free_ep_str(). */
pscom_err_t pscom_socket_get_ep_str(pscom_socket_t *socket, char **ep_str);
void pscom_socket_free_ep_str(char *ep_str);

/* ---------------------------------------------------------------------- */
/* Names for printing. The returned strings are static or per-thread and   */
/* stay valid until the next call from the same thread.                    */
/* ---------------------------------------------------------------------- */

const char *pscom_con_state_str(pscom_con_state_t state);
const char *pscom_con_type_str(pscom_con_type_t type);
const char *pscom_con_info_str(pscom_con_info_t *con_info);
const char *pscom_con_info_str2(pscom_con_info_t *con_info1,
                                pscom_con_info_t *con_info2);
const char *pscom_con_str(pscom_connection_t *connection);
const char *pscom_req_state_str(pscom_req_state_t state);
const char *pscom_err_str(pscom_err_t error);
const char *pscom_op_str(pscom_op_t operation);

/* ---------------------------------------------------------------------- */
/* One-sided communication                                                */
/* ---------------------------------------------------------------------- */

pscom_err_t pscom_mem_register(pscom_socket_t *socket, void *addr,
                               size_t length, pscom_memh_t *memh);
pscom_err_t pscom_rkey_generate(pscom_connection_t *connection, void *rkeybuf,
                                size_t bufsize, pscom_rkey_t *rkey);
pscom_err_t pscom_mem_deregister(pscom_memh_t memh);
pscom_err_t pscom_rkey_destroy(pscom_rkey_t rkey);
pscom_err_t pscom_rkey_buffer_pack(void **rkeybuf, size_t *bufsize,
                                   pscom_memh_t memh);
void pscom_rkey_buffer_release(void *rkey_buffer);
void pscom_post_rma_put(pscom_request_t *request);
void pscom_post_rma_get(pscom_request_t *request);
void pscom_post_rma_accumulate(pscom_request_t *request);
void pscom_post_rma_get_accumulate(pscom_request_t *request);
void pscom_post_rma_fetch_op(pscom_request_t *request);
void pscom_post_rma_compare_swap(pscom_request_t *request);
void pscom_register_rma_callbacks(void (*target_callback)(pscom_request_t *req),
                                  pscom_memh_t memh, pscom_rma_op_t rma_op);

/* ---------------------------------------------------------------------- */
/* Utilities                                                              */
/* ---------------------------------------------------------------------- */

/* Set PSP_DEBUG at run time (0 fatal .. 6 trace). Any thread, also while
 * others are inside the library. */
void pscom_set_debug(int level);

/* read()/write() until count bytes moved, EOF or an error. */
ssize_t pscom_readall(int fd, void *buf, size_t count);
ssize_t pscom_writeall(int fd, const void *buf, size_t count);

int pscom_atoport(const char *service, const char *proto);
int pscom_atoaddr(const char *address, struct in_addr *addr);
int pscom_ascii_to_sockaddr_in(const char *host, const char *port,
                               const char *protocol, struct sockaddr_in *addr);

/* A printable form of a buffer, for debug output. */
const char *pscom_dumpstr(const void *buf, size_t size);

#define pscom_min(a, b) (((a) < (b)) ? (a) : (b))
#define pscom_max(a, b) (((a) > (b)) ? (a) : (b))

void pscom_dump_connection(FILE *out, pscom_connection_t *connection);
void pscom_dump_reqstat(FILE *out);
void pscom_dump_info(FILE *out);

/* Read an environment variable into *val when it is set and parses; *val is
 * left alone otherwise (a bad value is reported). Unsigned readers accept
 * "inf" and "auto". Any thread. pscom_env_get_dir adds a missing trailing
 * '/' in a string the library keeps until it is torn down. */
void pscom_env_get_int(int *val, const char *name);
void pscom_env_get_uint(unsigned int *val, const char *name);
void pscom_env_get_size_t(size_t *val, const char *name);
void pscom_env_get_str(char **val, const char *name);
void pscom_env_get_dir(char **val, const char *name);

/* Hooks for the environment (default getenv/setenv). */
extern char *(*pscom_env_get)(const char *name);
extern int (*pscom_env_set)(const char *name, const char *value, int overwrite);

#ifdef __cplusplus
}
#endif

#endif /* PSCOM_H_ */
