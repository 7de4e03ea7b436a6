/*
 * Names of states, types, errors and operations for messages. Returned
 * strings are static, or in a per-thread buffer valid until the next call
 * of the same function from the same thread.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core.h"

#define PSC_ERRORS(X)                                                          \
    X(PSCOM_SUCCESS, "success")                                                \
    X(PSCOM_ERR_STDERROR, "system error")                                      \
    X(PSCOM_ERR_INVALID, "invalid argument")                                   \
    X(PSCOM_ERR_ALREADY, "operation already in progress")                      \
    X(PSCOM_NOT_IMPLEMENTED, "function not implemented")                       \
    X(PSCOM_ERR_EOF, "end of file")                                            \
    X(PSCOM_ERR_IOERROR, "input/output error")                                 \
    X(PSCOM_ERR_UNSUPPORTED_VERSION, "unsupported version")                    \
    X(PSCOM_ERR_CONNECTION_REFUSED, "connection refused")

const char *pscom_err_str(pscom_err_t error)
{
    static __thread char buf[40];
    switch (error) {
#define CASE(code, text)                                                       \
    case code:                                                                 \
        return text;
        PSC_ERRORS(CASE)
#undef CASE
    }
    snprintf(buf, sizeof(buf), "error %d", (int)error);
    return buf;
}

const char *pscom_op_str(pscom_op_t operation)
{
    switch (operation) {
    case PSCOM_OP_READ: return "read";
    case PSCOM_OP_WRITE: return "write";
    case PSCOM_OP_CONNECT: return "connect";
    case PSCOM_OP_RW: return "read/write";
    }
    return "unknown operation";
}

const char *pscom_con_state_str(pscom_con_state_t state)
{
    static const struct {
        pscom_con_state_t state;
        const char *name;
    } names[] = {
        {PSCOM_CON_STATE_NO_RW, "idle (no read, no write)"},
        {PSCOM_CON_STATE_R, "read only"},
        {PSCOM_CON_STATE_W, "write only"},
        {PSCOM_CON_STATE_RW, "open"},
        {PSCOM_CON_STATE_CLOSED, "closed"},
        {PSCOM_CON_STATE_CONNECTING, "connecting"},
        {PSCOM_CON_STATE_ACCEPTING, "accepting"},
        {PSCOM_CON_STATE_CLOSE_WAIT, "waiting for the peer's close"},
        {PSCOM_CON_STATE_CLOSING, "closing"},
        {PSCOM_CON_STATE_SUSPENDING, "suspending"},
        {PSCOM_CON_STATE_SUSPEND_SENT, "suspend sent"},
        {PSCOM_CON_STATE_SUSPEND_RECEIVED, "suspend received"},
        {PSCOM_CON_STATE_SUSPENDED, "suspended"},
        {PSCOM_CON_STATE_CONNECTING_ONDEMAND, "connecting on demand"},
        {PSCOM_CON_STATE_ACCEPTING_ONDEMAND, "accepting on demand"},
    };
    static __thread char buf[32];
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (names[i].state == state) return names[i].name;
    snprintf(buf, sizeof(buf), "state 0x%x", (unsigned)state);
    return buf;
}

const char *pscom_con_type_str(pscom_con_type_t type)
{
    static const char *const names[PSCOM_CON_TYPE_COUNT] = {
        [PSCOM_CON_TYPE_NONE] = "none",     [PSCOM_CON_TYPE_LOOP] = "loop",
        [PSCOM_CON_TYPE_TCP] = "tcp",       [PSCOM_CON_TYPE_SHM] = "shm",
        [PSCOM_CON_TYPE_P4S] = "p4s",       [PSCOM_CON_TYPE_GM] = "gm",
        [PSCOM_CON_TYPE_MVAPI] = "mvapi",   [PSCOM_CON_TYPE_OPENIB] = "verbs",
        [PSCOM_CON_TYPE_ELAN] = "elan",     [PSCOM_CON_TYPE_DAPL] = "dapl",
        [PSCOM_CON_TYPE_ONDEMAND] = "ondemand",
        [PSCOM_CON_TYPE_OFED] = "ofi",      [PSCOM_CON_TYPE_EXTOLL] = "extoll",
        [PSCOM_CON_TYPE_PSM] = "psm",       [PSCOM_CON_TYPE_VELO] = "velo",
        [PSCOM_CON_TYPE_CBC] = "cbc",       [PSCOM_CON_TYPE_MXM] = "mxm",
        [PSCOM_CON_TYPE_SUSPENDED] = "suspended",
        [PSCOM_CON_TYPE_UCP] = "ucx",       [PSCOM_CON_TYPE_GW] = "gateway",
        [PSCOM_CON_TYPE_PORTALS] = "portals",
    };
    if ((unsigned)type < PSCOM_CON_TYPE_COUNT && names[type]) return names[type];
    return "unknown";
}

static void info_str(char *buf, size_t len, const pscom_con_info_t *ci)
{
    struct in_addr a = {.s_addr = htonl((uint32_t)ci->node_id)};
    char ip[INET_ADDRSTRLEN] = "?";
    inet_ntop(AF_INET, &a, ip, sizeof(ip));
    snprintf(buf, len, "(%s,%d,%p,%.8s)", ip, ci->rank, ci->id, ci->name);
}

const char *pscom_con_info_str(pscom_con_info_t *con_info)
{
    static __thread char buf[128];
    info_str(buf, sizeof(buf), con_info);
    return buf;
}

const char *pscom_con_info_str2(pscom_con_info_t *con_info1,
                                pscom_con_info_t *con_info2)
{
    static __thread char buf[300];
    char a[128], b[128];
    info_str(a, sizeof(a), con_info1);
    info_str(b, sizeof(b), con_info2);
    snprintf(buf, sizeof(buf), "%s to %s", a, b);
    return buf;
}

const char *pscom_con_str(pscom_connection_t *connection)
{
    if (!connection) return "(no connection)";
    return psc_con_str(con_of(connection));
}

const char *pscom_req_state_str(pscom_req_state_t state)
{
    static const struct {
        pscom_req_state_t bit;
        const char *name;
    } bits[] = {
        {PSCOM_REQ_STATE_SEND_REQUEST, "send"},
        {PSCOM_REQ_STATE_RECV_REQUEST, "recv"},
        {PSCOM_REQ_STATE_GRECV_REQUEST, "grecv"},
        {PSCOM_REQ_STATE_POSTED, "posted"},
        {PSCOM_REQ_STATE_IO_STARTED, "io_started"},
        {PSCOM_REQ_STATE_IO_DONE, "io_done"},
        {PSCOM_REQ_STATE_ERROR, "error"},
        {PSCOM_REQ_STATE_CANCELED, "canceled"},
        {PSCOM_REQ_STATE_TRUNCATED, "truncated"},
        {PSCOM_REQ_STATE_DONE, "done"},
        {PSCOM_REQ_STATE_RMA_READ_REQUEST, "rma_read"},
        {PSCOM_REQ_STATE_RMA_WRITE_REQUEST, "rma_write"},
        {PSCOM_REQ_STATE_PASSIVE_SIDE, "passive"},
        {PSCOM_REQ_STATE_RENDEZVOUS_REQUEST, "rendezvous"},
        {PSCOM_REQ_STATE_GRECV_MERGED, "merged"},
    };
    static __thread char buf[256];
    size_t off = 0;
    buf[0] = 0;
    for (size_t i = 0; i < sizeof(bits) / sizeof(bits[0]); i++)
        if (state & bits[i].bit)
            off += snprintf(buf + off, sizeof(buf) - off, "%s%s",
                            off ? "|" : "", bits[i].name);
    if (!off) snprintf(buf, sizeof(buf), "none");
    return buf;
}
