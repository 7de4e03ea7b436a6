/*
 * One-sided communication: memory registration, remote keys and the RMA
 * requests (put, get, accumulate, get-accumulate, fetch-and-op,
 * compare-and-swap, and the older rma_write/rma_read).
 *
 * Every operation can be carried by the two-sided protocol of the
 * connection, so it works on every transport. The target handles each
 * message in its progress engine: a put is written straight into the target
 * memory, a get is answered with the target's bytes. The accumulate family
 * moves only bytes: the operand arrives in a buffer of the target's request,
 * and the callback the application registered for the region (for MPI: the
 * window) applies the operation; for get-accumulate, fetch-and-op and
 * compare-and-swap the target first takes a copy of the target bytes, which
 * is the answer. Compare-and-swap compares and copies here. All of it runs
 * under the library lock within one progress step, so these operations are
 * atomic with respect to each other at the target.
 *
 * Plugin fast paths (interface 1.1): a packed key carries what each plugin
 * that registered the region needs; on a connection whose plugin can reach
 * the peer's memory, put and get move their bytes through the plugin and
 * the core then sends a notice (RMA_PUT_DONE, RMA_GET_DONE) on which the
 * target checks the range and runs its callback, in order with the
 * connection's other messages: the notice frame takes its place in the send
 * queue when the operation is posted and is held there until the plugin
 * reports the bytes moved. doc/rma.md has the details.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "rkey_codec.h"

_Static_assert(PSC_HDR_LEN + sizeof(struct psc_rma_reply) <= PSC_CTRL_FRAME_LEN,
               "an RMA reply header fits a request's control frame");

#define MEMH_MAGIC    0x6d656d68u /* "memh" */
#define MEMH_FREED    0x64656164u /* "dead" */
#define RKEY_MAGIC    0x726b6579u /* "rkey" */

/* One plugin's registration of a region (rma_register), made when the
 * region's key is first packed while the plugin is initialised. */
struct memh_reg {
    struct psc_plugin *plugin;
    int rc;       /* 0: registered; -errno: the plugin declined */
    void *handle; /* for rma_deregister */
    size_t key_len;
    uint8_t key[PSCOM_PLUGIN_RKEY_MAX];
};

/* A registered region. addr NULL with length 0 is the whole address space
 * (what ParaStation MPI registers for windows without memory of their own,
 * such as dynamic windows): no bounds are checked for it. */
struct PSCOM_memh {
    uint32_t magic;
    uint64_t id;           /* the name peers use, unique in this process */
    struct psc_list next;  /* memh_table[bucket] */
    pscom_socket_t *socket;
    char *addr;
    size_t len;
    void (*target_cb[PSCOM_RMA_OP_COUNT])(pscom_request_t *req);
    unsigned nreg;
    struct memh_reg *reg; /* the plugins asked so far (malloc) */
};

enum rkey_fast {
    FAST_UNTRIED, /* no operation on an established connection yet */
    FAST_READY,   /* plugin and prkey set; in con->rkeys */
    FAST_NONE,    /* the core's path, for good */
};

/* A peer's region, as this process addresses it. */
struct PSCOM_rkey {
    uint32_t magic;
    pscom_connection_t *connection; /* the one it was generated for */
    uint64_t memh_id;
    uint64_t addr;
    uint64_t len;
    size_t plugin_len;
    uint8_t *plugin_data; /* the key's plugin entries, checked (malloc) */
    /* The fast path on `connection`. */
    enum rkey_fast fast;
    struct psc_plugin *plugin; /* whose rma_rkey made prkey */
    void *prkey;
    struct psc_list next_con; /* con->rkeys while FAST_READY */
};

/* ---------------------------------------------------------------------- */
/* Tables: registered regions by id, origin requests waiting for replies  */
/* ---------------------------------------------------------------------- */

#define BUCKETS 64

static struct psc_list memh_table[BUCKETS]; /* PSCOM_memh.next */
/* Requests waiting for a RMA_REPLY, by psc_req.id (psc_req.next). Their
 * pub.connection is where the reply comes from; pub.data and data_len say
 * where it goes. */
static struct psc_list waiting[BUCKETS];
/* Held frames (psc_req.tx_hold) by psc_req.id, linked through next_any:
 * the notices of operations a plugin has started. The id is the token the
 * plugin hands back to pscom_plugin_rma_done, so a late or repeated call
 * finds nothing instead of a freed request. */
static struct psc_list held[BUCKETS];
static bool tables_ready;

static void tables_init(void)
{
    if (tables_ready) return;
    for (int i = 0; i < BUCKETS; i++) {
        psc_list_init(&memh_table[i]);
        psc_list_init(&waiting[i]);
        psc_list_init(&held[i]);
    }
    tables_ready = true;
}

static struct PSCOM_memh *memh_find(uint64_t id)
{
    struct psc_list *pos;
    tables_init();
    psc_list_for_each(pos, &memh_table[id % BUCKETS]) {
        struct PSCOM_memh *m = psc_list_entry(pos, struct PSCOM_memh, next);
        if (m->id == id) return m;
    }
    return NULL;
}

static void wait_add(struct psc_req *req)
{
    tables_init();
    req->id = ++psc_ctx.next_id;
    psc_list_add_tail(&req->next, &waiting[req->id % BUCKETS]);
}

/* The request with `id` in a table whose requests are linked through the
 * member at offset `link`. */
static struct psc_req *table_find(struct psc_list *table, size_t link,
                                  uint64_t id)
{
    struct psc_list *pos;
    tables_init();
    psc_list_for_each(pos, &table[id % BUCKETS]) {
        struct psc_req *req = (struct psc_req *)((char *)pos - link);
        if (req->id == id) return req;
    }
    return NULL;
}

static struct psc_req *wait_find(uint64_t id)
{
    return table_find(waiting, offsetof(struct psc_req, next), id);
}

static void hold_add(struct psc_req *m)
{
    tables_init();
    m->tx_hold = true;
    psc_list_add_tail(&m->next_any, &held[m->id % BUCKETS]);
}

static struct psc_req *hold_find(uint64_t id)
{
    return table_find(held, offsetof(struct psc_req, next_any), id);
}

void psc_rma_hold_drop(struct psc_req *req)
{
    psc_list_del(&req->next_any);
}

static void origin_done(pscom_req_state_t state, void *priv);

void psc_rma_con_fail(struct psc_con *con)
{
    struct psc_list failed;
    psc_list_init(&failed);

    if (!tables_ready) return;
    /* Collect first: completions may post new requests. */
    for (int i = 0; i < BUCKETS; i++) {
        struct psc_list *pos, *tmp;
        psc_list_for_each_safe(pos, tmp, &waiting[i]) {
            struct psc_req *req = psc_list_entry(pos, struct psc_req, next);
            if (req->pub.connection != &con->pub) continue;
            psc_list_del(&req->next);
            psc_list_add_tail(&req->next, &failed);
        }
    }
    /* Operations whose plugin has moved the bytes (their notice queued,
     * not held) fail now too, not when their notice fails at the plugin's
     * close: a callback may wait for them. Those still moving (held) wait
     * for the close. */
    struct psc_list *pos;
    psc_list_for_each(pos, &con->sendq) {
        struct psc_req *m = psc_list_entry(pos, struct psc_req, next);
        if (m->inplace_done != origin_done || m->tx_hold) continue;
        struct psc_req *origin = m->inplace_priv;
        if (!psc_list_unlinked(&origin->next)) continue;
        m->inplace_done = NULL;
        m->inplace_priv = NULL;
        psc_list_add_tail(&origin->next, &failed);
    }
    while (!psc_list_empty(&failed)) {
        struct psc_req *req = psc_list_first(&failed, struct psc_req, next);
        psc_list_del(&req->next);
        psc_req_done(req, PSCOM_REQ_STATE_ERROR);
    }
}

/* ---------------------------------------------------------------------- */
/* Sending                                                                */
/* ---------------------------------------------------------------------- */

/* Make req's frame one message: header at head, xlen bytes of xheader
 * behind it, then the body. */
static void xmsg_frame(struct psc_req *req, uint8_t type,
                       pscom_header_net_t *head, size_t xlen, void *body,
                       size_t body_len)
{
    head->xheader_len = (uint16_t)xlen;
    head->msg_type = type;
    head->data_len = body_len;
    req->frame = PSC_FRAME_EAGER;
    req->iov[0].iov_base = head;
    req->iov[0].iov_len = PSC_HDR_LEN + xlen;
    req->iov[1].iov_base = body;
    req->iov[1].iov_len = body_len;
    req->tx_left = PSC_HDR_LEN + xlen + body_len;
}

void psc_xmsg_send(struct psc_con *con, struct psc_req *req, uint8_t type,
                   pscom_header_net_t *head, size_t xlen, void *body,
                   size_t body_len)
{
    if (psc_con_sends_over(con)) {
        psc_debug("%s: one-sided or group message refused: the connection "
                  "is %s", psc_con_str(con), con->failed ? "broken" : "closing");
        psc_req_done(req, PSCOM_REQ_STATE_ERROR);
        return;
    }
    if (con->ondemand && !con->precon) {
        psc_ondemand_connect(con);
        if (con->failed) {
            psc_req_done(req, PSCOM_REQ_STATE_ERROR);
            return;
        }
    }
    xmsg_frame(req, type, head, xlen, body, body_len);
    psc_con_enqueue(con, req);
}

/* An internal request that frees itself once io_done ran. */
static struct psc_req *internal_req(size_t xlen, size_t user_size)
{
    struct psc_req *req = psc_req_alloc(xlen, user_size);
    if (!req) return NULL;
    req->self_free = true;
    return req;
}

/* ---------------------------------------------------------------------- */
/* Registration and keys                                                  */
/* ---------------------------------------------------------------------- */

pscom_err_t pscom_mem_register(pscom_socket_t *socket, void *addr,
                               size_t length, pscom_memh_t *memh)
{
    if (!memh) {
        psc_err("pscom_mem_register: no place for the handle (memh is NULL)");
        return PSCOM_ERR_INVALID;
    }
    if (!addr && length) {
        psc_err("pscom_mem_register: a region of %zu bytes at NULL", length);
        *memh = NULL; /* as ParaStation pscom: callers test the handle */
        return PSCOM_ERR_INVALID;
    }
    struct PSCOM_memh *m = calloc(1, sizeof(*m));
    if (!m) {
        psc_err("pscom_mem_register: out of memory");
        *memh = NULL;
        return PSCOM_ERR_STDERROR;
    }
    m->magic = MEMH_MAGIC;
    m->socket = socket;
    m->addr = addr;
    m->len = addr ? length : 0;

    psc_lock();
    tables_init();
    m->id = ++psc_ctx.next_id;
    psc_list_add_tail(&m->next, &memh_table[m->id % BUCKETS]);
    psc_unlock();

    psc_debug("registered memory %p, %zu bytes, as region %llu", addr, length,
              (unsigned long long)m->id);
    *memh = m;
    return PSCOM_SUCCESS;
}

static bool memh_valid(pscom_memh_t memh, const char *fn)
{
    if (memh->magic == MEMH_MAGIC) return true;
    psc_err("%s(%p): not a registered region (deregistered already?)", fn,
            (void *)memh);
    return false;
}

static bool memh_asked(const struct PSCOM_memh *m, const struct psc_plugin *p)
{
    for (unsigned i = 0; i < m->nreg; i++)
        if (m->reg[i].plugin == p) return true;
    return false;
}

/* Let every initialised plugin with rma_register that was not asked yet
 * register the region (once per plugin and region). */
static void memh_register_plugins(struct PSCOM_memh *m)
{
    unsigned n = psc_plugin_count();
    for (unsigned i = 0; i < n; i++) {
        struct psc_plugin *p = psc_plugin_get(i);
        if (p->state != PSC_PLUGIN_LOADED || !p->initialised || !p->rma ||
            !p->rma->rma_register || memh_asked(m, p))
            continue;
        struct memh_reg *grown = realloc(m->reg, (m->nreg + 1) * sizeof(*grown));
        if (!grown) {
            psc_err("pscom_rkey_buffer_pack: out of memory registering "
                    "region %llu with plugin %s; its one-sided operations "
                    "take the core's path", (unsigned long long)m->id,
                    p->name);
            return;
        }
        m->reg = grown;
        struct memh_reg *r = &m->reg[m->nreg++];
        *r = (struct memh_reg){.plugin = p, .key_len = PSCOM_PLUGIN_RKEY_MAX};
        r->rc = p->rma->rma_register(m->socket, m->addr, m->len, r->key,
                                     &r->key_len, &r->handle);
        if (!r->rc && r->key_len > PSCOM_PLUGIN_RKEY_MAX) {
            psc_err("plugin %s: rma_register wrote a %zu-byte key, more than "
                    "PSCOM_PLUGIN_RKEY_MAX (%d); the region takes the core's "
                    "path on it", p->name, r->key_len, PSCOM_PLUGIN_RKEY_MAX);
            if (p->rma->rma_deregister)
                p->rma->rma_deregister(m->socket, r->handle);
            r->rc = -EOVERFLOW;
        }
        if (r->rc)
            psc_debug("plugin %s does not register region %llu (%p, %zu "
                      "bytes): %s; its one-sided operations take the core's "
                      "path there", p->name, (unsigned long long)m->id,
                      (void *)m->addr, m->len, strerror(-r->rc));
    }
}

static void memh_deregister_plugins(struct PSCOM_memh *m)
{
    for (unsigned i = 0; i < m->nreg; i++) {
        struct memh_reg *r = &m->reg[i];
        if (!r->rc && r->plugin->initialised && r->plugin->rma->rma_deregister)
            r->plugin->rma->rma_deregister(m->socket, r->handle);
    }
    free(m->reg);
    m->reg = NULL;
    m->nreg = 0;
}

pscom_err_t pscom_mem_deregister(pscom_memh_t memh)
{
    if (!memh) return PSCOM_SUCCESS;
    if (!memh_valid(memh, "pscom_mem_deregister")) return PSCOM_ERR_INVALID;
    psc_lock();
    psc_list_del(&memh->next);
    memh->magic = MEMH_FREED;
    memh_deregister_plugins(memh);
    psc_unlock();
    free(memh);
    return PSCOM_SUCCESS;
}

void pscom_register_rma_callbacks(void (*target_callback)(pscom_request_t *req),
                                  pscom_memh_t memh, pscom_rma_op_t rma_op)
{
    if (!memh) return;
    if (!memh_valid(memh, "pscom_register_rma_callbacks")) return;
    if ((unsigned)rma_op >= PSCOM_RMA_OP_COUNT) {
        psc_err("pscom_register_rma_callbacks: unknown operation %d",
                (int)rma_op);
        return;
    }
    psc_lock();
    memh->target_cb[rma_op] = target_callback;
    psc_unlock();
}

/* The packed key of m with an entry per plugin that registered it. */
static void *memh_pack(struct PSCOM_memh *m, size_t *size)
{
    struct psc_rkey_entry e[PSC_RKEY_ENTRIES_MAX];
    unsigned n = 0;
    for (unsigned i = 0; i < m->nreg && n < PSC_RKEY_ENTRIES_MAX; i++) {
        struct memh_reg *r = &m->reg[i];
        if (r->rc) continue;
        e[n++] = (struct psc_rkey_entry){
            .name = r->plugin->name, .name_len = strlen(r->plugin->name),
            .data = r->key, .data_len = r->key_len};
    }
    const struct psc_rkey_head head = {
        .memh_id = m->id,
        .addr = (uint64_t)(uintptr_t)m->addr,
        .len = m->len,
    };
    *size = psc_rkey_size(e, n);
    if (!*size) {
        psc_err("pscom_rkey_buffer_pack: the plugin keys of region %llu do "
                "not fit a packed key; it is packed without them",
                (unsigned long long)m->id);
        n = 0;
        *size = psc_rkey_size(e, 0);
    }
    void *buf = malloc(*size);
    if (buf) psc_rkey_encode(buf, &head, e, n);
    return buf;
}

pscom_err_t pscom_rkey_buffer_pack(void **rkeybuf, size_t *bufsize,
                                   pscom_memh_t memh)
{
    if (!rkeybuf || !bufsize) {
        psc_err("pscom_rkey_buffer_pack: no place for the buffer");
        return PSCOM_ERR_INVALID;
    }
    if (!memh) {
        *rkeybuf = NULL;
        *bufsize = 0;
        return PSCOM_ERR_INVALID;
    }
    if (!memh_valid(memh, "pscom_rkey_buffer_pack")) return PSCOM_ERR_INVALID;
    size_t size;
    psc_lock();
    memh_register_plugins(memh);
    void *buf = memh_pack(memh, &size);
    psc_unlock();
    if (!buf) {
        psc_err("pscom_rkey_buffer_pack: out of memory");
        return PSCOM_ERR_STDERROR;
    }
    *rkeybuf = buf;
    *bufsize = size;
    return PSCOM_SUCCESS;
}

void pscom_rkey_buffer_release(void *rkey_buffer)
{
    struct psc_rkey_head *p = rkey_buffer;
    if (!p) return;
    if (p->magic != PSC_RKEY_MAGIC) {
        psc_err("pscom_rkey_buffer_release(%p): not a buffer of "
                "pscom_rkey_buffer_pack (released twice?); not freed",
                rkey_buffer);
        return;
    }
    p->magic = 0;
    free(p);
}

pscom_err_t pscom_rkey_generate(pscom_connection_t *connection, void *rkeybuf,
                                size_t bufsize, pscom_rkey_t *rkey)
{
    if (!rkey) {
        psc_err("pscom_rkey_generate: no place for the key (rkey is NULL)");
        return PSCOM_ERR_INVALID;
    }
    /* The peer exposes nothing: NULL is the key for that. */
    if (!rkeybuf || !bufsize) {
        *rkey = NULL;
        return PSCOM_SUCCESS;
    }
    struct psc_rkey_head h;
    const char *why;
    if (psc_rkey_decode(rkeybuf, bufsize, &h, &why)) {
        psc_err("pscom_rkey_generate: the %zu-byte buffer is refused: %s; "
                "it must be the unchanged output of pscom_rkey_buffer_pack "
                "of a peer running this library version", bufsize, why);
        return PSCOM_ERR_INVALID;
    }
    struct PSCOM_rkey *k = calloc(1, sizeof(*k));
    uint8_t *pd = h.plugin_len ? malloc(h.plugin_len) : NULL;
    if (!k || (h.plugin_len && !pd)) {
        free(k);
        free(pd);
        psc_err("pscom_rkey_generate: out of memory");
        return PSCOM_ERR_STDERROR;
    }
    if (pd) memcpy(pd, (const uint8_t *)rkeybuf + sizeof(h), h.plugin_len);
    k->magic = RKEY_MAGIC;
    k->connection = connection;
    k->memh_id = h.memh_id;
    k->addr = h.addr;
    k->len = h.len;
    k->plugin_len = h.plugin_len;
    k->plugin_data = pd;
    k->fast = FAST_UNTRIED;
    psc_list_init(&k->next_con);
    *rkey = k;
    return PSCOM_SUCCESS;
}

/* Give the plugin key back (rma_rkey_release); k leaves con->rkeys. */
static void rkey_release_prkey(struct psc_con *con, struct PSCOM_rkey *k)
{
    psc_list_del(&k->next_con);
    if (k->plugin->rma->rma_rkey_release)
        k->plugin->rma->rma_rkey_release(con, con->plugin_priv, k->prkey);
    k->prkey = NULL;
    k->fast = FAST_NONE;
}

void psc_rma_con_release(struct psc_con *con)
{
    while (!psc_list_empty(&con->rkeys))
        rkey_release_prkey(con, psc_list_first(&con->rkeys, struct PSCOM_rkey,
                                               next_con));
}

pscom_err_t pscom_rkey_destroy(pscom_rkey_t rkey)
{
    if (!rkey) return PSCOM_SUCCESS;
    if (rkey->magic != RKEY_MAGIC) {
        psc_err("pscom_rkey_destroy(%p): not a remote key (destroyed "
                "twice?)", (void *)rkey);
        return PSCOM_ERR_INVALID;
    }
    psc_lock();
    /* Linked only while the connection's plugin is open. */
    if (!psc_list_unlinked(&rkey->next_con))
        rkey_release_prkey(con_of(rkey->connection), rkey);
    rkey->magic = 0;
    psc_unlock();
    free(rkey->plugin_data);
    free(rkey);
    return PSCOM_SUCCESS;
}

/* ---------------------------------------------------------------------- */
/* Origin side                                                            */
/* ---------------------------------------------------------------------- */

static bool in_region(uint64_t r_addr, uint64_t r_len, uint64_t addr,
                      uint64_t len)
{
    if (!r_addr && !r_len) return true; /* the whole address space */
    return addr >= r_addr && len <= r_len && addr - r_addr <= r_len - len;
}

/* The xheader length an RMA request sends: what the caller set, or all of
 * it (ParaStation MPI leaves xheader_len as pscom_request_create set it),
 * and at least the library's part. */
static size_t rma_xlen(pscom_request_t *r, size_t common)
{
    size_t xlen = r->xheader_len ? r->xheader_len : r->max_xheader_len;
    return xlen < common ? common : xlen;
}

/* Checks shared by every RMA post; state is the request's new state.
 * Returns the connection, or NULL after failing the request. */
static struct psc_con *origin_prepare(pscom_request_t *r, const char *fn,
                                      pscom_req_state_t state, bool keyed,
                                      size_t common, size_t target_len)
{
    struct psc_req *req = req_of(r);
    const char *why = NULL;

    if (req->magic != PSC_REQ_MAGIC) {
        psc_err("%s(%p): not a request, or freed", fn, (void *)r);
        return NULL;
    }
    if ((r->state & PSCOM_REQ_STATE_POSTED) &&
        !(r->state & PSCOM_REQ_STATE_DONE)) {
        psc_err("%s: request %p is posted already", fn, (void *)r);
        return NULL;
    }
    /* As in ParaStation pscom: without io_done a request of the keyed
     * family frees itself once done. */
    req->self_free = keyed && !r->ops.io_done;
    r->state = state | PSCOM_REQ_STATE_POSTED;

    struct psc_con *con = r->connection ? con_of(r->connection) : NULL;
    size_t xlen = rma_xlen(r, common);
    if (!con || con->magic != PSC_CON_MAGIC)
        why = "the request has no open connection";
    else if (xlen > r->max_xheader_len && xlen > sizeof(pscom_xheader_t))
        why = "xheader_len exceeds the request's max_xheader_len";
    else if (r->data_len > PSCOM_DATA_LEN_MASK)
        why = "data_len is larger than a message can be";
    else if (keyed && !r->rma.rkey)
        why = "the request has no remote key (rma.rkey; the peer exposes "
              "no memory?)";
    else if (keyed && r->rma.rkey->magic != RKEY_MAGIC)
        why = "rma.rkey is not a remote key (destroyed?)";
    else if (keyed && !in_region(r->rma.rkey->addr, r->rma.rkey->len,
                                 (uint64_t)(uintptr_t)r->rma.target_addr,
                                 target_len))
        why = "the target range lies outside the peer's registered region";
    else if (psc_con_sends_over(con))
        why = con->failed ? "the connection is broken"
                          : "the connection is closing";
    if (why) {
        if (con && con->magic == PSC_CON_MAGIC && psc_con_sends_over(con))
            psc_debug("%s on %s: %s", fn, psc_con_str(con), why);
        else
            psc_err("%s: %s", fn, why);
        psc_req_done(req, PSCOM_REQ_STATE_ERROR);
        return NULL;
    }
    con->stats.rma_ops++;
    con->stats.rma_bytes += r->data_len;
    return con;
}

/* ---------------------------------------------------------------------- */
/* Origin side: plugin fast paths for put and get                         */
/* ---------------------------------------------------------------------- */

/* Can the plugin of con move the bytes of operations with k? Asks the
 * plugin for its key (rma_rkey) at the first operation on an established
 * connection and remembers the answer. */
static bool fast_ready(struct psc_con *con, struct PSCOM_rkey *k)
{
    if (k->connection != &con->pub) return false; /* made for another */
    if (k->fast != FAST_UNTRIED) return k->fast == FAST_READY;
    if (!con->plugin_open || psc_con_sends_over(con))
        return false; /* not established yet */

    struct psc_plugin *p = con->plugin;
    const pscom_plugin_ops_t *ops = p->rma;
    struct psc_rkey_entry e;
    k->fast = FAST_NONE;
    if (!ops || !ops->rma_rkey || (!ops->rma_put && !ops->rma_get) ||
        !psc_rkey_find(k->plugin_data, k->plugin_len, p->name, &e))
        return false;
    void *prkey = NULL;
    int rc = ops->rma_rkey(con, con->plugin_priv, e.data, e.data_len, &prkey);
    if (rc) {
        psc_debug("%s: plugin %s cannot reach the peer's region %llu (%s); "
                  "its puts and gets take the core's path",
                  psc_con_str(con), p->name, (unsigned long long)k->memh_id,
                  strerror(rc < 0 ? -rc : rc));
        return false;
    }
    k->fast = FAST_READY;
    k->plugin = p;
    k->prkey = prkey;
    psc_list_add_tail(&k->next_con, &con->rkeys);
    return true;
}

/* The notice frame m (a copy of the origin request's xheader) is written:
 * so is the origin request, with m's error if any. */
static void origin_done(pscom_req_state_t state, void *priv)
{
    psc_req_done(priv, state & PSCOM_REQ_STATE_ERROR);
}

/* Frame m as the notice for the operation of len bytes. */
static void frame_notice(struct psc_req *m, bool put, size_t len)
{
    size_t xlen = m->pub.xheader_len;
    if (put) {
        struct psc_rma_notice n = {.len = len};
        memcpy((char *)&m->pub.xheader + xlen, &n, sizeof(n));
        xlen += sizeof(n);
    }
    xmsg_frame(m, put ? PSC_MSG_RMA_PUT_DONE : PSC_MSG_RMA_GET_DONE,
               &m->pub.header, xlen, NULL, 0);
}

/* The plugin did not move the bytes: m becomes the core's message of the
 * operation, in the notice's place in the send queue. */
static void frame_core(struct psc_req *m, bool put)
{
    struct psc_req *req = m->inplace_priv;
    pscom_request_t *r = &req->pub;
    size_t xlen = m->pub.xheader_len;
    if (put) {
        xmsg_frame(m, PSC_MSG_RMA_PUT, &m->pub.header, xlen, r->data,
                   r->data_len);
        return;
    }
    /* A get: the origin request waits for the answer instead. */
    m->inplace_done = NULL;
    m->inplace_priv = NULL;
    req->exact_reply = true;
    wait_add(req);
    m->pub.xheader.rma_get.common.id = (void *)(uintptr_t)req->id;
    xmsg_frame(m, PSC_MSG_RMA_GET, &m->pub.header, xlen, NULL, 0);
}

/* Let the connection's plugin move the bytes of put or get r (checked by
 * origin_prepare, xheader filled in, r->data set). true: it took the
 * operation, r completes once the notice is written; false: the core's
 * path. */
static bool fast_post(struct psc_con *con, pscom_request_t *r, bool put,
                      size_t xlen)
{
    struct PSCOM_rkey *k = r->rma.rkey;
    if (!r->data_len || !fast_ready(con, k)) return false;
    const pscom_plugin_ops_t *ops = con->plugin->rma;
    if (put ? !ops->rma_put : !ops->rma_get) return false;

    struct psc_req *m =
        internal_req(xlen + (put ? sizeof(struct psc_rma_notice) : 0), 0);
    if (!m) return false;
    m->id = ++psc_ctx.next_id;
    m->pub.xheader_len = xlen;
    m->pub.connection = &con->pub;
    memcpy(&m->pub.xheader, &r->xheader, xlen);
    m->inplace_done = origin_done;
    m->inplace_priv = req_of(r);

    void *token = (void *)(uintptr_t)m->id;
    uint64_t raddr = (uint64_t)(uintptr_t)r->rma.target_addr;
    int rc = put ? ops->rma_put(con, con->plugin_priv, k->prkey,
                                r->rma.origin_addr, raddr, r->data_len, token)
                 : ops->rma_get(con, con->plugin_priv, k->prkey,
                                r->rma.origin_addr, raddr, r->data_len, token);
    if (rc < 0 || rc > 1) {
        if (rc != -ENOTSUP && rc != -EAGAIN)
            psc_debug("%s: plugin %s could not %s %zu bytes (%s); the core "
                      "carries it", psc_con_str(con), con->plugin->name,
                      put ? "put" : "get", r->data_len,
                      rc < 0 ? strerror(-rc) : "bad return value");
        psc_req_release(m);
        return false;
    }
    psc_req_state_add(req_of(r), PSCOM_REQ_STATE_IO_STARTED);
    if (!put) /* as the answer of the core's path would leave it */
        r->header = (pscom_header_net_t){
            .xheader_len = sizeof(struct psc_rma_reply),
            .msg_type = PSC_MSG_RMA_REPLY, .data_len = r->data_len};
    frame_notice(m, put, r->data_len);
    if (rc == 0) {
        psc_con_enqueue(con, m);
    } else {
        /* Its place in the queue is taken now: later messages of this
         * connection stay behind it. */
        hold_add(m);
        psc_list_add_tail(&m->next, &con->sendq);
    }
    return true;
}

void pscom_plugin_rma_done(void *token, int err)
{
    struct psc_req *m = hold_find((uint64_t)(uintptr_t)token);
    if (!m) {
        psc_debug("pscom_plugin_rma_done: no one-sided operation waits for "
                  "token %llu (its connection was closed); ignored",
                  (unsigned long long)(uintptr_t)token);
        return;
    }
    psc_list_del(&m->next_any);
    struct psc_con *con = con_of(m->pub.connection);
    /* A broken connection fails the frame with its other sends, once the
     * plugin is closed; until then it stays held. */
    if (con->failed || con->closing) return;
    if (err) {
        bool put = m->pub.header.msg_type == PSC_MSG_RMA_PUT_DONE;
        psc_debug("%s: plugin %s failed to %s (%s); the core carries it",
                  psc_con_str(con), con->plugin->name, put ? "put" : "get",
                  strerror(err < 0 ? -err : err));
        frame_core(m, put);
    }
    m->tx_hold = false;
    psc_con_kick(con);
}

/* Put-like operations: the request itself is the message. */
static void post_put_like(pscom_request_t *r, const char *fn, uint8_t type)
{
    struct psc_con *con = origin_prepare(r, fn, PSCOM_REQ_STATE_SEND_REQUEST,
                                         true, sizeof(pscom_rma_put_data_t),
                                         r->data_len);
    if (!con) return;
    size_t xlen = rma_xlen(r, sizeof(pscom_rma_put_data_t));
    r->data = r->rma.origin_addr;
    r->xheader.rma_put.common.dest = r->rma.target_addr;
    r->xheader.rma_put.common.memh = (void *)(uintptr_t)r->rma.rkey->memh_id;
    if (type == PSC_MSG_RMA_PUT && fast_post(con, r, true, xlen)) return;
    psc_xmsg_send(con, req_of(r), type, &r->header, xlen, r->data,
                  r->data_len);
}

/* Get-like operations: an internal request carries the message (the
 * request's xheader, the body), the request waits for the reply, which
 * goes to reply_buf. */
static void post_get_like(pscom_request_t *r, const char *fn, uint8_t type,
                          const void *body1, const void *body2, size_t part,
                          void *reply_buf)
{
    size_t common = sizeof(pscom_rma_get_data_t);
    struct psc_con *con = origin_prepare(r, fn, PSCOM_REQ_STATE_RMA_READ_REQUEST,
                                         true, common, r->data_len);
    if (!con) return;
    if (r->data_len && (!reply_buf || (body2 && !body1))) {
        psc_err("%s: a buffer of %zu bytes is NULL (rma.%s)", fn, r->data_len,
                !reply_buf ? "result_addr / origin_addr" : "compare_addr");
        psc_req_done(req_of(r), PSCOM_REQ_STATE_ERROR);
        return;
    }
    size_t xlen = rma_xlen(r, common);
    pscom_rma_get_data_t *g = &r->xheader.rma_get.common;
    g->src = r->rma.target_addr;
    g->src_len = r->data_len;
    g->memh = (void *)(uintptr_t)r->rma.rkey->memh_id;
    r->data = reply_buf;
    if (type == PSC_MSG_RMA_GET && fast_post(con, r, false, xlen)) return;

    size_t body_len = (body1 ? part : 0) + (body2 ? part : 0);
    /* The operands are copied: the request fails as soon as its
     * connection does (a callback may wait for it), while the transport
     * may still be reading the frame until its plugin is closed. */
    struct psc_req *m = internal_req(xlen, body_len);
    if (!m) {
        psc_err("%s on %s: out of memory for a copy of the operands "
                "(%zu bytes)", fn, psc_con_str(con), body_len);
        psc_req_done(req_of(r), PSCOM_REQ_STATE_ERROR);
        return;
    }
    m->kind = PSC_REQ_CONTROL;
    void *body = m->pub.user;
    if (body1 && part) memcpy(m->pub.user, body1, part);
    if (body2 && part) memcpy((char *)m->pub.user + part, body2, part);

    struct psc_req *req = req_of(r);
    req->exact_reply = true;
    wait_add(req);
    g->id = (void *)(uintptr_t)req->id;
    memcpy(&m->pub.xheader, &r->xheader, xlen);
    psc_xmsg_send(con, m, type, &m->pub.header, xlen, body_len ? body : NULL,
                  body_len);
}

void pscom_post_rma_put(pscom_request_t *request)
{
    psc_lock();
    psc_enter(); /* a failure's callbacks may close: free after */
    post_put_like(request, "pscom_post_rma_put", PSC_MSG_RMA_PUT);
    psc_leave();
    psc_unlock();
}

void pscom_post_rma_accumulate(pscom_request_t *request)
{
    psc_lock();
    psc_enter(); /* a failure's callbacks may close: free after */
    post_put_like(request, "pscom_post_rma_accumulate", PSC_MSG_RMA_ACC);
    psc_leave();
    psc_unlock();
}

void pscom_post_rma_get(pscom_request_t *request)
{
    psc_lock();
    psc_enter(); /* a failure's callbacks may close: free after */
    post_get_like(request, "pscom_post_rma_get", PSC_MSG_RMA_GET, NULL, NULL,
                  0, request->rma.origin_addr);
    psc_leave();
    psc_unlock();
}

void pscom_post_rma_get_accumulate(pscom_request_t *request)
{
    psc_lock();
    psc_enter(); /* a failure's callbacks may close: free after */
    post_get_like(request, "pscom_post_rma_get_accumulate", PSC_MSG_RMA_GACC,
                  request->rma.origin_addr, NULL, request->data_len,
                  request->rma.result_addr);
    psc_leave();
    psc_unlock();
}

void pscom_post_rma_fetch_op(pscom_request_t *request)
{
    psc_lock();
    psc_enter(); /* a failure's callbacks may close: free after */
    post_get_like(request, "pscom_post_rma_fetch_op", PSC_MSG_RMA_FOP,
                  request->rma.origin_addr, NULL, request->data_len,
                  request->rma.result_addr);
    psc_leave();
    psc_unlock();
}

void pscom_post_rma_compare_swap(pscom_request_t *request)
{
    psc_lock();
    psc_enter(); /* a failure's callbacks may close: free after */
    post_get_like(request, "pscom_post_rma_compare_swap", PSC_MSG_RMA_CAS,
                  request->rma.compare_addr, request->rma.origin_addr,
                  request->data_len, request->rma.result_addr);
    psc_leave();
    psc_unlock();
}

void pscom_post_rma_write(pscom_request_t *request)
{
    psc_lock();
    psc_enter(); /* a failure's callbacks may close: free after */
    struct psc_con *con = origin_prepare(
        request, "pscom_post_rma_write",
        PSCOM_REQ_STATE_SEND_REQUEST | PSCOM_REQ_STATE_RMA_WRITE_REQUEST,
        false, 0, 0);
    if (con) {
        request->xheader_len = sizeof(pscom_xheader_rma_write_t);
        psc_xmsg_send(con, req_of(request), PSC_MSG_RMA_WRITE,
                      &request->header, sizeof(pscom_xheader_rma_write_t),
                      request->data, request->data_len);
    }
    psc_leave();
    psc_unlock();
}

void pscom_post_rma_read(pscom_request_t *request)
{
    psc_lock();
    psc_enter(); /* a failure's callbacks may close: free after */
    struct psc_con *con = origin_prepare(request, "pscom_post_rma_read",
                                         PSCOM_REQ_STATE_RMA_READ_REQUEST,
                                         false, 0, 0);
    if (con) {
        size_t xlen = sizeof(pscom_xheader_rma_read_t);
        struct psc_req *m = internal_req(xlen, 0);
        if (!m) {
            psc_err("pscom_post_rma_read on %s: out of memory",
                    psc_con_str(con));
            psc_req_done(req_of(request), PSCOM_REQ_STATE_ERROR);
        } else {
            struct psc_req *req = req_of(request);
            m->kind = PSC_REQ_CONTROL;
            req->exact_reply = false; /* src_len bytes, as the peer says */
            wait_add(req);
            m->pub.xheader.rma_read = request->xheader.rma_read;
            m->pub.xheader.rma_read.id = (void *)(uintptr_t)req->id;
            psc_xmsg_send(con, m, PSC_MSG_RMA_READ, &m->pub.header, xlen,
                          NULL, 0);
        }
    }
    psc_leave();
    psc_unlock();
}

/* ---------------------------------------------------------------------- */
/* Target side                                                            */
/* ---------------------------------------------------------------------- */

int psc_rma_header_check(const pscom_header_net_t *hdr, const char **why)
{
    size_t xl = hdr->xheader_len;
    switch (hdr->msg_type) {
    case PSC_MSG_RMA_PUT:
    case PSC_MSG_RMA_ACC:
        if (xl < sizeof(pscom_rma_put_data_t)) break;
        return 0;
    case PSC_MSG_RMA_GET:
        if (xl < sizeof(pscom_rma_get_data_t) || hdr->data_len) break;
        return 0;
    case PSC_MSG_RMA_GACC:
    case PSC_MSG_RMA_FOP:
    case PSC_MSG_RMA_CAS:
        if (xl < sizeof(pscom_rma_get_data_t)) break;
        return 0;
    case PSC_MSG_RMA_REPLY:
        if (xl != sizeof(struct psc_rma_reply)) break;
        return 0;
    case PSC_MSG_RMA_WRITE:
        if (xl != sizeof(pscom_xheader_rma_write_t)) break;
        return 0;
    case PSC_MSG_RMA_READ:
        if (xl != sizeof(pscom_xheader_rma_read_t) || hdr->data_len) break;
        return 0;
    case PSC_MSG_RMA_PUT_DONE:
        if (xl < sizeof(pscom_rma_put_data_t) + sizeof(struct psc_rma_notice) ||
            hdr->data_len)
            break;
        return 0;
    case PSC_MSG_RMA_GET_DONE:
        if (xl < sizeof(pscom_rma_get_data_t) || hdr->data_len) break;
        return 0;
    }
    *why = "one-sided message with a bad length";
    return -1;
}

static const pscom_rma_op_t op_of_type[] = {
    [PSC_MSG_RMA_PUT] = PSCOM_RMA_PUT,
    [PSC_MSG_RMA_ACC] = PSCOM_RMA_ACCUMULATE,
    [PSC_MSG_RMA_GET] = PSCOM_RMA_GET,
    [PSC_MSG_RMA_GACC] = PSCOM_RMA_GET_ACCUMULATE,
    [PSC_MSG_RMA_FOP] = PSCOM_RMA_FETCH_AND_OP,
    [PSC_MSG_RMA_CAS] = PSCOM_RMA_COMPARE_AND_SWAP,
};

static const char *type_name(uint8_t type)
{
    switch (type) {
    case PSC_MSG_RMA_PUT: return "put";
    case PSC_MSG_RMA_ACC: return "accumulate";
    case PSC_MSG_RMA_GET: return "get";
    case PSC_MSG_RMA_GACC: return "get-accumulate";
    case PSC_MSG_RMA_FOP: return "fetch-and-op";
    case PSC_MSG_RMA_CAS: return "compare-and-swap";
    case PSC_MSG_RMA_WRITE: return "rma write";
    case PSC_MSG_RMA_READ: return "rma read";
    }
    return "rma";
}

/* The request that a target callback sees: the message's header and
 * xheader (with common.memh the local handle), the connection, and
 * user_size bytes of storage (the operand of the accumulate family). */
static struct psc_req *target_req(struct psc_con *con,
                                  const pscom_header_net_t *hdr,
                                  struct PSCOM_memh *m, size_t user_size)
{
    struct psc_req *t = internal_req(hdr->xheader_len, user_size);
    if (!t) return NULL;
    pscom_request_t *r = &t->pub;
    memcpy(&r->header, hdr, PSC_HDR_LEN + hdr->xheader_len);
    r->xheader_len = hdr->xheader_len;
    r->connection = &con->pub;
    r->socket = &con->sock->pub;
    r->state = PSCOM_REQ_STATE_PASSIVE_SIDE |
               (hdr->msg_type == PSC_MSG_RMA_GET ||
                        hdr->msg_type == PSC_MSG_RMA_READ
                    ? PSCOM_REQ_STATE_RMA_READ_REQUEST
                    : PSCOM_REQ_STATE_RMA_WRITE_REQUEST);
    if (m) {
        /* Every RMA xheader starts with the same common part up to memh. */
        if (hdr->msg_type == PSC_MSG_RMA_PUT || hdr->msg_type == PSC_MSG_RMA_ACC)
            r->xheader.rma_put.common.memh = m;
        else
            r->xheader.rma_get.common.memh = m;
        t->id = m->id; /* looked up again when the body is in */
    }
    return t;
}

static void call_target_cb(struct psc_req *t, uint8_t type)
{
    struct PSCOM_memh *m = memh_find(t->id);
    if (!m) return;
    void (*cb)(pscom_request_t *) = m->target_cb[op_of_type[type]];
    if (cb) cb(&t->pub);
}

/* The reply: the header goes in a->ctrl, the body is `data`. */
static void send_reply(struct psc_con *con, struct psc_req *a, uint64_t id,
                       pscom_err_t status, void *data, size_t len)
{
    pscom_header_net_t *h = (pscom_header_net_t *)a->ctrl;
    struct psc_rma_reply rep = {.id = id, .status = status};
    memcpy(a->ctrl + PSC_HDR_LEN, &rep, sizeof(rep));
    psc_xmsg_send(con, a, PSC_MSG_RMA_REPLY, h, sizeof(rep), data, len);
}

/* A refusal for a get-like request that could not be served. */
static int refuse(struct psc_con *con, uint64_t id, pscom_err_t status)
{
    struct psc_req *a = internal_req(0, 0);
    if (!a) {
        psc_err("%s: out of memory answering a one-sided request; closing "
                "the connection", psc_con_str(con));
        psc_con_fail(con, PSCOM_OP_WRITE, PSCOM_ERR_STDERROR);
        return -1;
    }
    a->kind = PSC_REQ_CONTROL;
    send_reply(con, a, id, status, NULL, 0);
    return 0;
}

/* A body nobody may have: read and dropped. A get-like request is refused
 * once its body is read (not earlier: nothing may be sent back while a
 * message is half read). */
static void drop_done(pscom_request_t *r)
{
    struct psc_req *t = req_of(r);
    if (!(r->state & PSCOM_REQ_STATE_ERROR) && t->id)
        refuse(con_of(r->connection), t->id, PSCOM_ERR_INVALID);
}

static struct psc_req *drop_req(struct psc_con *con, uint64_t refuse_id)
{
    struct psc_req *t = internal_req(0, 0);
    if (!t) return NULL;
    t->pub.ops.io_done = drop_done;
    t->pub.connection = &con->pub;
    t->id = refuse_id;
    return t;
}

static int out_of_memory(struct psc_con *con, const char *what)
{
    psc_err("%s: out of memory receiving a one-sided %s; closing the "
            "connection", psc_con_str(con), what);
    psc_con_fail(con, PSCOM_OP_READ, PSCOM_ERR_STDERROR);
    return -1;
}

/* put: the body is in the target memory. */
static void put_done(pscom_request_t *r)
{
    if (r->state & PSCOM_REQ_STATE_ERROR) return;
    call_target_cb(req_of(r), PSC_MSG_RMA_PUT);
}

/* accumulate: the operand is in; the callback applies it. */
static void acc_done(pscom_request_t *r)
{
    if (r->state & PSCOM_REQ_STATE_ERROR) return;
    call_target_cb(req_of(r), PSC_MSG_RMA_ACC);
}

/* get: the answer is written. */
static void get_done(pscom_request_t *r)
{
    if (r->state & PSCOM_REQ_STATE_ERROR) return;
    call_target_cb(req_of(r), PSC_MSG_RMA_GET);
}

/* get-accumulate, fetch-and-op, compare-and-swap: the operand is in. Take
 * the answer, change the target bytes, answer. One step, so atomic with
 * respect to every other of these at this target. */
static void atomic_done(pscom_request_t *r)
{
    struct psc_req *t = req_of(r);
    if (r->state & PSCOM_REQ_STATE_ERROR) return;
    struct psc_con *con = con_of(r->connection);
    const pscom_rma_get_data_t *g = &r->xheader.rma_get.common;
    uint8_t type = r->header.msg_type;
    uint64_t id = (uint64_t)(uintptr_t)g->id;
    size_t len = g->src_len;

    if (!memh_find(t->id)) {
        psc_warn("%s: one-sided %s on a region that was deregistered "
                 "meanwhile; refused", psc_con_str(con), type_name(type));
        refuse(con, id, PSCOM_ERR_INVALID);
        return;
    }
    struct psc_req *a = internal_req(0, len);
    if (!a) {
        psc_err("%s: out of memory answering a one-sided %s; closing the "
                "connection", psc_con_str(con), type_name(type));
        psc_con_fail(con, PSCOM_OP_WRITE, PSCOM_ERR_STDERROR);
        return;
    }
    a->kind = PSC_REQ_CONTROL;
    if (len) memcpy(a->pub.user, g->src, len);
    /* (A peer may ask for 0 bytes: then there is no operand at all.) */
    if (type == PSC_MSG_RMA_CAS && len && !memcmp(g->src, r->data, len))
        memcpy(g->src, (char *)r->data + len, len);
    call_target_cb(t, type);
    send_reply(con, a, id, PSCOM_SUCCESS, a->pub.user, len);
}

static int rx_reply(struct psc_con *con, pscom_header_net_t *hdr,
                    struct psc_req **body)
{
    struct psc_rma_reply rep;
    memcpy(&rep, hdr + 1, sizeof(rep));
    struct psc_req *req = wait_find(rep.id);
    if (!req || req->pub.connection != &con->pub) {
        psc_err("%s: received a one-sided answer for no request; closing the "
                "connection", psc_con_str(con));
        psc_con_fail(con, PSCOM_OP_READ, PSCOM_ERR_IOERROR);
        return -1;
    }
    if (rep.status) {
        if (hdr->data_len) {
            psc_err("%s: received a one-sided refusal with a body; closing "
                    "the connection", psc_con_str(con));
            psc_con_fail(con, PSCOM_OP_READ, PSCOM_ERR_IOERROR);
            return -1;
        }
        psc_list_del(&req->next);
        psc_debug("%s: the target refused a one-sided request: %s",
                  psc_con_str(con), pscom_err_str(rep.status));
        psc_req_done(req, PSCOM_REQ_STATE_ERROR);
        return 0;
    }
    if (req->exact_reply && hdr->data_len != req->pub.data_len) {
        psc_err("%s: received a one-sided answer of %llu bytes for a request "
                "of %zu; closing the connection", psc_con_str(con),
                (unsigned long long)hdr->data_len, req->pub.data_len);
        psc_con_fail(con, PSCOM_OP_READ, PSCOM_ERR_IOERROR);
        return -1;
    }
    psc_list_del(&req->next);
    req->pub.header = *hdr;
    psc_req_state_add(req, PSCOM_REQ_STATE_IO_STARTED);
    if (hdr->data_len > req->pub.data_len)
        psc_req_state_add(req, PSCOM_REQ_STATE_TRUNCATED);
    *body = req;
    return 0;
}

/* A notice: rewrite its header (in place) into the one of the put or get
 * it stands for, whose bytes a plugin has moved already. 0, or -1 after
 * failing the connection. */
static int notice_unwrap(struct psc_con *con, pscom_header_net_t *hdr)
{
    if (hdr->msg_type == PSC_MSG_RMA_GET_DONE) {
        hdr->msg_type = PSC_MSG_RMA_GET;
        return 0;
    }
    struct psc_rma_notice n;
    size_t xl = hdr->xheader_len - sizeof(n);
    memcpy(&n, (char *)(hdr + 1) + xl, sizeof(n));
    if (n.len > PSCOM_DATA_LEN_MASK) {
        psc_err("%s: received a one-sided put notice for %llu bytes, more "
                "than a message can carry; closing the connection",
                psc_con_str(con), (unsigned long long)n.len);
        psc_con_fail(con, PSCOM_OP_READ, PSCOM_ERR_IOERROR);
        return -1;
    }
    hdr->msg_type = PSC_MSG_RMA_PUT;
    hdr->xheader_len = (uint16_t)xl;
    hdr->data_len = n.len;
    return 0;
}

int psc_rma_rx(struct psc_con *con, pscom_header_net_t *hdr,
               struct psc_req **body)
{
    bool notice = hdr->msg_type == PSC_MSG_RMA_PUT_DONE ||
                  hdr->msg_type == PSC_MSG_RMA_GET_DONE;
    if (notice && notice_unwrap(con, hdr)) return -1;
    uint8_t type = hdr->msg_type;
    uint64_t len = hdr->data_len; /* of a put notice: what was written */

    if (type == PSC_MSG_RMA_REPLY) return rx_reply(con, hdr, body);

    if (type == PSC_MSG_RMA_WRITE || type == PSC_MSG_RMA_READ) {
        /* The older interface addresses the peer's memory without a
         * region: the peer is trusted, as in ParaStation pscom. */
        struct psc_req *t = target_req(con, hdr, NULL, 0);
        if (!t) return out_of_memory(con, type_name(type));
        if (type == PSC_MSG_RMA_WRITE) {
            t->pub.data = t->pub.xheader.rma_write.dest;
            t->pub.data_len = len;
            *body = t;
            return 0;
        }
        const pscom_xheader_rma_read_t *rd = &t->pub.xheader.rma_read;
        send_reply(con, t, (uint64_t)(uintptr_t)rd->id, PSCOM_SUCCESS,
                   rd->src, rd->src_len);
        return 0;
    }

    /* The region and the target range. */
    const pscom_xheader_t *x = (const pscom_xheader_t *)(hdr + 1);
    bool put_like = type == PSC_MSG_RMA_PUT || type == PSC_MSG_RMA_ACC;
    uint64_t mid = (uint64_t)(uintptr_t)(put_like ? x->rma_put.common.memh
                                                  : x->rma_get.common.memh);
    uint64_t addr = (uint64_t)(uintptr_t)(put_like ? x->rma_put.common.dest
                                                   : x->rma_get.common.src);
    uint64_t tlen = put_like ? len : x->rma_get.common.src_len;
    uint64_t id = put_like ? 0 : (uint64_t)(uintptr_t)x->rma_get.common.id;
    struct PSCOM_memh *m = memh_find(mid);
    const char *why = NULL;

    if (!m)
        why = "names no registered region (deregistered already?)";
    else if (!in_region((uint64_t)(uintptr_t)m->addr, m->len, addr, tlen))
        why = "reaches outside the registered region";
    else if (type == PSC_MSG_RMA_CAS && len != 2 * tlen)
        why = "carries operands of another length than the target range";
    else if ((type == PSC_MSG_RMA_GACC || type == PSC_MSG_RMA_FOP) &&
             len > tlen)
        why = "carries an operand longer than the target range";
    if (why) {
        psc_err("%s: one-sided %s of %llu bytes at %#llx %s; %s",
                psc_con_str(con), type_name(type), (unsigned long long)tlen,
                (unsigned long long)addr, why,
                notice ? "the plugin has moved the bytes already, the "
                         "callback is not run" : "refused");
        if (notice) return 0;
        if (!len) return put_like ? 0 : refuse(con, id, PSCOM_ERR_INVALID);
        *body = drop_req(con, put_like ? 0 : id);
        return *body ? 0 : out_of_memory(con, type_name(type));
    }

    struct psc_req *t;
    if (notice) {
        /* The bytes are in place: run the callback now, as when the body
         * of a put is in, or the answer of a get is written. */
        t = target_req(con, hdr, m, 0);
        if (!t) return out_of_memory(con, type_name(type));
        t->pub.data = (void *)(uintptr_t)addr;
        t->pub.data_len = tlen;
        t->pub.ops.io_done = type == PSC_MSG_RMA_PUT ? put_done : get_done;
        psc_req_done(t, 0);
        return 0;
    }
    switch (type) {
    case PSC_MSG_RMA_PUT:
        t = target_req(con, hdr, m, 0);
        if (!t) return out_of_memory(con, type_name(type));
        t->pub.data = (void *)(uintptr_t)addr;
        t->pub.data_len = len;
        t->pub.ops.io_done = put_done;
        *body = t;
        return 0;
    case PSC_MSG_RMA_GET:
        t = target_req(con, hdr, m, 0);
        if (!t) return out_of_memory(con, type_name(type));
        t->pub.data = (void *)(uintptr_t)addr;
        t->pub.data_len = tlen;
        t->pub.ops.io_done = get_done;
        send_reply(con, t, id, PSCOM_SUCCESS, t->pub.data, tlen);
        return 0;
    default: /* the accumulate family: the operand goes to the request */
        t = target_req(con, hdr, m, len);
        if (!t) return out_of_memory(con, type_name(type));
        t->pub.data = t->pub.user;
        t->pub.data_len = len;
        t->pub.ops.io_done = type == PSC_MSG_RMA_ACC ? acc_done : atomic_done;
        *body = t;
        return 0;
    }
}
