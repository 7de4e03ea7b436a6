/*
 * Test doubles for the ofi plugin's unit tests: a fake libfabric layer
 * (fake_wrap.c, implementing plugins/ofi/ofi_wrap.h) and a fake core
 * (fake_core.c, implementing the connection services of pscom_plugin.h that
 * the plugin calls, and test/fake_core for the rest). Both ends of a connection live in this one process and share the
 * fake endpoint.
 */
#ifndef OFI_TEST_FAKE_H_
#define OFI_TEST_FAKE_H_

#include <stddef.h>
#include <stdint.h>

#include "fake_core_common.h"
#include "ofi_wrap.h"
#include "pscom_plugin.h"

/* ---------------------------------------------------------------------- */
/* Fake libfabric                                                         */

struct fake_knobs {
    /* provider */
    char prov[64];
    size_t inject_size, max_msg_size, iov_limit;
    int local_only;        /* the provider reaches this host only */
    uint32_t addr_format;  /* of endpoint names (42: none of libfabric's) */
    int select_fails, ep_open_fails, av_fails;
    const char *region;    /* what ofw_ep_region says; NULL: no region */
    /* behaviour */
    unsigned send_eagain;  /* the next n sends return -EAGAIN */
    unsigned send_eagain_after; /* ... after this many more succeeded */
    unsigned recv_eagain;  /* the next n receives return -EAGAIN */
    int send_fails;        /* fi_tsendv returns -EIO */
    unsigned send_error_completion; /* the next n sends complete with an error */
    int hold_tx;           /* keep send completions until fake_release_held */
    unsigned release_held_at; /* nonzero: the completion queue read of
                               * this number (counting from the reset)
                               * releases the held completions first */
    int reverse_cq;        /* hand out each batch of completions reversed */
    /* cross-memory attach (in this process: addresses are pointers) */
    int cma_denied;        /* ofw_cma_usable says no */
    int cma_read_error;    /* the next read fails with this -errno */
    unsigned cma_hold_writes; /* keep the next n writes until
                               * fake_release_cma_writes */
    /* When cma_hi is set, only [cma_lo, cma_hi) may be read or written;
     * other addresses fail with -EFAULT, as process_vm_readv's do (for
     * descriptors from test/fuzz/fuzz_ofi_rx.c, which name anything). */
    uintptr_t cma_lo, cma_hi;
    /* counters */
    unsigned inject_calls, tsend_calls, trecv_calls, injects, eagains;
    unsigned msgs_sent, cancels, av_inserts;
    unsigned cq_reads;
    unsigned cma_reads, cma_writes;
    unsigned cma_foreign; /* reads and writes naming another process */
    size_t largest_msg, cma_read_bytes;
};
extern struct fake_knobs fake;

void fake_reset(void);
void fake_release_held(int reverse);
/* Release only held send completion i (in holding order). */
void fake_release_held_one(unsigned i);
/* The address every peer's name is inserted as, and the source of every
 * message the plugin sends: both ends live in this process. */
#define FAKE_PEER_ADDR 7
/* A message of a broken peer, with this tag. */
void fake_send_raw(const void *data, size_t len, uint64_t tag);
/* A message with this tag from another endpoint, known as src. */
void fake_send_from(uint64_t src, const void *data, size_t len, uint64_t tag);
/* Carry out the held cross-memory writes. */
void fake_release_cma_writes(void);
unsigned fake_posted_count(void);
unsigned fake_unexpected_count(void);
unsigned fake_held_count(void);
int fake_ep_is_open(void);

/* ---------------------------------------------------------------------- */
/* Fake core                                                              */

#define FAKE_MAX_FRAMES 512

struct fake_frame {
    uint8_t head[8 + 256];
    size_t hl;
    uint8_t *body;
    size_t bl;
};

/* The core's side of one connection. */
struct psc_con {
    const char *name;
    pid_t peer_pid; /* pscom_plugin_con_peer_pid: this process (the
                     * default: both ends live here), 0 unknown */
    /* send queue */
    struct fake_frame *q[FAKE_MAX_FRAMES];
    unsigned qn;      /* frames queued */
    unsigned qdone;   /* frames completed (tx_done) */
    struct fake_frame *canceled[16];
    unsigned ncanceled;
    size_t partial;   /* bytes of frame qdone already reported */
    unsigned tx_done_calls;
    size_t tx_done_bytes;
    unsigned lent, returned; /* pscom_plugin_tx_lend, _tx_returned */
    int close_on_tx_done; /* tx_done returns -1 (closing) */
    void (*on_push)(struct psc_con *c); /* called as rx_push starts */
    /* receive: the byte stream as the application would see it */
    uint8_t *rx;
    size_t rx_len, rx_cap;
    size_t direct_bytes;  /* of rx, written through rx_direct */
    unsigned frames_in;   /* complete frames received */
    int direct_enabled;   /* offer rx_direct for rendezvous data */
    /* receive parser */
    uint8_t hb[8 + 65536];
    size_t hhave, hneed;
    uint64_t body_left;
    int in_body, body_direct;
    uint8_t *direct_buf;  /* the "user buffer" of rendezvous data */
    size_t direct_off, direct_len;
    /* failure */
    unsigned long tx_done_evt; /* event number of the last tx_done */
    unsigned long frame_evt;   /* event number of the last frame received */
    int failed;
    int errors;
    pscom_op_t err_op;
    pscom_err_t err;
    void *priv;
};

void fake_con_init(struct psc_con *c, const char *name, void *priv);
void fake_con_free(struct psc_con *c);
/* Queue a frame: header of type, xheader of xl bytes and body of bl bytes,
 * filled with a pattern from seed. The frame is owned by the connection. */
struct fake_frame *fake_frame_new(uint8_t type, size_t xl, size_t bl,
                                  uint32_t seed);
void fake_enqueue(struct psc_con *c, struct fake_frame *f);
/* The application cancels queued frame i (counted from the queue's start;
 * not yet reported done): it leaves the queue, as pscom_cancel_send does. */
void fake_cancel(struct psc_con *c, unsigned i);
/* Append the frame's bytes to buf (for the expected stream). */
size_t fake_frame_bytes(const struct fake_frame *f, uint8_t *buf);

/* The descriptor under test. */
extern const pscom_plugin_t pscom_plugin_ofi;

#endif /* OFI_TEST_FAKE_H_ */
