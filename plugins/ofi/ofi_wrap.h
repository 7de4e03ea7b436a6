/*
 * ofw: the libfabric calls of the ofi plugin, behind a thin layer.
 *
 * The glue (ofi_plugin.c) never includes a libfabric header: it sees the
 * provider through these functions only, so that unit tests can link a fake
 * implementation (test/ofi/fake_wrap.c) that fails, delays or reorders
 * operations at will. ofi_wrap.c implements them with fi_* calls.
 *
 * Errors are negative errno values: libfabric's FI_E* codes equal the errno
 * codes they are named after, and the few that do not are mapped
 * (FI_ETRUNC to -EMSGSIZE, other provider-specific codes to -EIO). None of
 * these functions logs: the caller knows which connection an error is about.
 *
 * Threads: none of these functions is thread-safe on its own; the plugin
 * calls them with the library lock held (the domain is opened with
 * FI_THREAD_DOMAIN).
 *
 * The cross-memory attach calls at the end (process_vm_readv/writev) are
 * not libfabric's: pull mode moves large frames between processes of one
 * host with them, behind this layer so that the tests can fake them too.
 */
#ifndef OFI_WRAP_H_
#define OFI_WRAP_H_

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

/* Provider scratch space of one operation (the size of struct
 * fi_context2). It must be the first member of the caller's operation
 * record and stay valid until the operation's completion was read. */
typedef struct ofw_ctx {
    void *internal[8];
} ofw_ctx_t;

/* Largest endpoint name (fi_getname) the plugin handles. */
#define OFW_ADDR_MAX 512

/* What the plugin needs to know of the chosen provider. */
typedef struct ofw_info {
    char prov[64];          /* "tcp;ofi_rxm", "shm" */
    char fabric[64];        /* fabric name, for messages */
    char domain[64];        /* domain name (interface), for messages */
    uint32_t addr_format;   /* FI_SOCKADDR_IN, FI_ADDR_STR, ... */
    size_t inject_size;     /* largest fi_tinject */
    size_t max_msg_size;    /* largest message */
    size_t iov_limit;       /* entries of one fi_tsendv */
    size_t tx_size, rx_size; /* queue depths, for messages */
    int local_only;         /* reaches processes of this host only (shm) */
} ofw_info_t;

/* One successful completion. */
typedef struct ofw_comp {
    ofw_ctx_t *ctx; /* the operation's context */
    size_t len;     /* receives: bytes received */
    uint64_t tag;   /* receives: the message's tag */
} ofw_comp_t;

/* One failed (or canceled) operation. */
typedef struct ofw_cqerr {
    ofw_ctx_t *ctx;    /* NULL when the provider names no operation */
    int err;           /* positive errno: ECANCELED, EMSGSIZE (truncated), ... */
    int prov_errno;    /* the provider's own code, for messages */
    size_t len;        /* bytes transferred before the error */
    char text[160];    /* fi_strerror and fi_cq_strerror, for messages */
} ofw_cqerr_t;

/* A receive from any peer (FI_ADDR_UNSPEC). */
#define OFW_ADDR_UNSPEC UINT64_MAX

/* fi_cq_read found an error entry: read it with ofw_cq_readerr(). */
#define OFW_CQ_ERROR (-100000)

/* Choose the provider: the first that offers FI_EP_RDM with tagged
 * messages, receives from one source only (FI_DIRECTED_RECV) and sends
 * matched in order (FI_ORDER_SAS), restricted to provider `prov` and
 * domain `domain` when not
 * NULL. On success fills *info and keeps the choice for ofw_ep_open();
 * otherwise a negative errno and a sentence in why (what was asked, what
 * libfabric said, which providers exist). */
int ofw_select(const char *prov, const char *domain, ofw_info_t *info,
               char *why, size_t why_len);
/* Forget the choice (after every endpoint was closed). */
void ofw_unselect(void);

typedef struct ofw_ep ofw_ep_t;

/* Open fabric, domain, completion queue, address vector and an RDM
 * endpoint of the chosen provider. On success *ep owns them all and addr
 * (OFW_ADDR_MAX bytes) holds its name (*addr_len bytes). Otherwise a
 * negative errno and the failing call in why. */
int ofw_ep_open(ofw_ep_t **ep, void *addr, size_t *addr_len, char *why,
                size_t why_len);
/* The name of ep's region in /dev/shm (the shm provider; the file is this
 * name followed by ':' and more), or NULL when its provider has none. */
const char *ofw_ep_region(const ofw_ep_t *ep);
/* Close everything of ep. Operations still posted are dropped: their
 * contexts may be freed afterwards. */
void ofw_ep_close(ofw_ep_t *ep);

/* Insert a peer's name into the address vector: 0 and *fi_addr. The
 * provider reads as many bytes as the name's format says, whatever
 * addr_len: check a name from the network first (ofi_addr_check). */
int ofw_av_insert(ofw_ep_t *ep, const void *addr, size_t addr_len,
                  uint64_t *fi_addr);
/* A printable form of a peer's name ("fi_sockaddr_in://1.2.3.4:5"). */
const char *ofw_addr_str(ofw_ep_t *ep, const void *addr, size_t addr_len,
                         char *buf, size_t buf_len);

/* Tagged sends and receives. 0, -EAGAIN (queue full: read completions and
 * retry later) or another negative errno. fi_tinject copies buf and has no
 * completion; the others complete through the completion queue with ctx,
 * and the buffers (also the iovec array) must stay valid until then. A
 * receive takes messages from src only (an address of ofw_av_insert), or
 * from anyone with OFW_ADDR_UNSPEC. The shm provider of libfabric 1.17
 * lets messages of endpoints that are not in our address vector through
 * all the same: it records their source as FI_ADDR_UNSPEC (smr_map_add),
 * which its matching (smr_match_id) takes for a wildcard; and their
 * completions have no source address (fi_cq_readfrom gives what an earlier
 * completion left there), so FI_SOURCE cannot tell them apart either. */
ssize_t ofw_tinject(ofw_ep_t *ep, const void *buf, size_t len, uint64_t dest,
                    uint64_t tag);
ssize_t ofw_tsendv(ofw_ep_t *ep, const struct iovec *iov, size_t count,
                   uint64_t dest, uint64_t tag, ofw_ctx_t *ctx);
ssize_t ofw_trecv(ofw_ep_t *ep, void *buf, size_t len, uint64_t src,
                  uint64_t tag, uint64_t ignore, ofw_ctx_t *ctx);
/* Ask for ctx's operation to end; it then completes with ECANCELED (or
 * normally, when it was done already). */
int ofw_cancel(ofw_ep_t *ep, ofw_ctx_t *ctx);

/* Read up to max completions: their number, 0 when there are none,
 * OFW_CQ_ERROR when an error entry waits, or another negative errno. */
ssize_t ofw_cq_read(ofw_ep_t *ep, ofw_comp_t *comp, size_t max);
/* Take the waiting error entry: 0, or -EAGAIN when there is none. */
int ofw_cq_readerr(ofw_ep_t *ep, ofw_cqerr_t *err);

/* The text of a negative result of the functions above. */
const char *ofw_strerror(int err);

/* ---------------------------------------------------------------------- */
/* Cross-memory attach (processes of this host)                           */

/* 0 when this process may read and write the memory of other processes of
 * its user on this host; otherwise a negative errno and the reason in why
 * (kernel.yama.ptrace_scope, a seccomp filter, no such system call). */
int ofw_cma_usable(char *why, size_t why_len);
/* Copy len bytes at raddr in process pid to buf (read), or buf to raddr
 * (write). 0, or a negative errno: -ESRCH (no such process), -EFAULT (not
 * mapped there), -EPERM (not allowed), ... */
int ofw_cma_read(pid_t pid, void *buf, uint64_t raddr, size_t len);
int ofw_cma_write(pid_t pid, const void *buf, uint64_t raddr, size_t len);
/* ofw_cma_read of len bytes at raddr, then of the 8-byte word at waddr into
 * *word, in as few system calls as it takes (one, normally): the word is
 * read after the last of the bytes. */
int ofw_cma_read_word(pid_t pid, void *buf, uint64_t raddr, size_t len,
                      uint64_t *word, uint64_t waddr);

#endif /* OFI_WRAP_H_ */
