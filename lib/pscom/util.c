/*
 * Small public utilities, node identity and dumps.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core.h"
#include "psc_build.h"

void psc_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

ssize_t pscom_readall(int fd, void *buf, size_t count)
{
    size_t done = 0;
    while (done < count) {
        ssize_t n = read(fd, (char *)buf + done, count - done);
        if (n > 0) {
            done += n;
        } else if (n == 0) {
            break;
        } else if (errno != EINTR) {
            return done ? (ssize_t)done : -1;
        }
    }
    return (ssize_t)done;
}

ssize_t pscom_writeall(int fd, const void *buf, size_t count)
{
    size_t done = 0;
    while (done < count) {
        ssize_t n = write(fd, (const char *)buf + done, count - done);
        if (n >= 0) {
            done += n;
        } else if (errno != EINTR) {
            return done ? (ssize_t)done : -1;
        }
    }
    return (ssize_t)done;
}

int pscom_atoport(const char *service, const char *proto)
{
    char *end;
    long p = strtol(service, &end, 10);
    if (*service && !*end) return (p > 0 && p < 65536) ? (int)p : -1;
    struct servent *se = getservbyname(service, proto ? proto : "tcp");
    return se ? ntohs(se->s_port) : -1;
}

int pscom_atoaddr(const char *address, struct in_addr *addr)
{
    struct addrinfo hints = {.ai_family = AF_INET};
    struct addrinfo *res = NULL;
    if (!address || getaddrinfo(address, NULL, &hints, &res) || !res) return -1;
    *addr = ((struct sockaddr_in *)res->ai_addr)->sin_addr;
    freeaddrinfo(res);
    return 0;
}

int pscom_ascii_to_sockaddr_in(const char *host, const char *port,
                               const char *protocol, struct sockaddr_in *addr)
{
    int p = pscom_atoport(port, protocol);
    if (p < 0) return -1;
    memset(addr, 0, sizeof(*addr));
    addr->sin_family = AF_INET;
    addr->sin_port = htons((uint16_t)p);
    return pscom_atoaddr(host, &addr->sin_addr);
}

const char *pscom_dumpstr(const void *buf, size_t size)
{
    static __thread char out[256];
    const unsigned char *p = buf;
    size_t off = 0, i;
    for (i = 0; i < size && off + 4 < sizeof(out) - 8; i++)
        off += snprintf(out + off, sizeof(out) - off, "%02x ", p[i]);
    off += snprintf(out + off, sizeof(out) - off, "'");
    for (i = 0; i < size && off + 2 < sizeof(out) - 4; i++)
        out[off++] = isprint(p[i]) ? (char)p[i] : '.';
    snprintf(out + off, sizeof(out) - off, "%s'", i < size ? "..." : "");
    return out;
}

/* Other threads may be logging (they read the level without the lock). */
void pscom_set_debug(int level)
{
    __atomic_store_n(&psc_settings.debug, level, __ATOMIC_RELAXED);
    psc_log_level_set(level);
}

int pscom_get_nodeid(void)
{
    psc_init_on_first_use();
    return psc_ctx.node_id;
}

int pscom_is_cuda_enabled(void)
{
    return 0;
}

/* For programs built with PSCOM_CUDA_AWARENESS: this build knows no device
 * memory, so every pointer is host memory. */
int pscom_is_gpu_mem(const void *ptr);
int pscom_is_gpu_mem(const void *ptr)
{
    (void)ptr;
    return 0;
}

const char *psc_fd_limit_hint(void)
{
    static __thread char buf[200];
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl)) return "raise the open files limit";
    snprintf(buf, sizeof(buf),
             "the open files limit is %llu (hard limit %llu) and a connection "
             "needs one or two; raise it with 'ulimit -n' (or in "
             "/etc/security/limits.conf) or open fewer connections",
             (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max);
    return buf;
}

/* ---------------------------------------------------------------------- */
/* Node identity                                                          */
/* ---------------------------------------------------------------------- */

/* Parse PSP_NETWORK "a.b.c.d[/bits]"; 0 on success. */
static int parse_network(const char *s, uint32_t *net, uint32_t *mask)
{
    char buf[64];
    snprintf(buf, sizeof(buf), "%s", s);
    char *slash = strchr(buf, '/');
    int bits = -1;
    if (slash) {
        *slash = 0;
        bits = atoi(slash + 1);
        if (bits < 0 || bits > 32) return -1;
    }
    struct in_addr a;
    if (inet_pton(AF_INET, buf, &a) != 1) return -1;
    *net = ntohl(a.s_addr);
    if (bits < 0) {
        /* Without a prefix length, the zero low bytes say what is free. */
        bits = 32;
        while (bits > 0 && !(*net & (1u << (32 - bits)))) bits--;
        bits = (bits + 7) / 8 * 8;
    }
    *mask = bits ? ~0u << (32 - bits) : 0;
    *net &= *mask;
    return 0;
}

static uint32_t pick_address(void)
{
    uint32_t net = 0, mask = 0, found = 0;
    bool want_net = psc_settings.network && psc_settings.network[0];
    if (want_net && parse_network(psc_settings.network, &net, &mask)) {
        psc_err("PSP_NETWORK=\"%s\" is not a network like 192.168.1.0 or "
                "10.0.0.0/8; ignored", psc_settings.network);
        want_net = false;
    }
    struct ifaddrs *ifa = NULL;
    if (getifaddrs(&ifa) == 0) {
        for (struct ifaddrs *i = ifa; i; i = i->ifa_next) {
            if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
            if (!(i->ifa_flags & IFF_UP)) continue;
            uint32_t a =
                ntohl(((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr);
            if (want_net ? (a & mask) != net : (i->ifa_flags & IFF_LOOPBACK))
                continue;
            found = a;
            break;
        }
        freeifaddrs(ifa);
    }
    if (!found && want_net)
        psc_err("PSP_NETWORK=\"%s\": no interface of this host is in that "
                "network; using the default address", psc_settings.network);
    return found ? found : INADDR_LOOPBACK;
}

void psc_node_identity_init(void)
{
    if (gethostname(psc_ctx.hostname, sizeof(psc_ctx.hostname) - 1))
        snprintf(psc_ctx.hostname, sizeof(psc_ctx.hostname), "localhost");

    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (!f || !fgets(psc_ctx.boot_id, sizeof(psc_ctx.boot_id), f))
        snprintf(psc_ctx.boot_id, sizeof(psc_ctx.boot_id), "hostid-%lx",
                 gethostid());
    if (f) fclose(f);
    psc_ctx.boot_id[strcspn(psc_ctx.boot_id, "\n")] = 0;

    uint32_t a = pick_address();
    psc_ctx.node_id = (int)a;
    struct in_addr ia = {.s_addr = htonl(a)};
    inet_ntop(AF_INET, &ia, psc_ctx.node_addr, sizeof(psc_ctx.node_addr));
}

/* ---------------------------------------------------------------------- */
/* Dumps                                                                  */
/* ---------------------------------------------------------------------- */

/* How many requests a queue (linked by psc_req.next) holds, and their
 * bytes: what is left to write of each frame (a send queue), or each
 * message's body length (announced, for a rendezvous). */
struct qsum {
    size_t n;
    unsigned long long bytes;
};

static struct qsum qsum(struct psc_list *q, bool to_write)
{
    struct qsum s = {0, 0};
    struct psc_list *pos;
    psc_list_for_each(pos, q) {
        struct psc_req *r = psc_list_entry(pos, struct psc_req, next);
        s.n++;
        if (to_write)
            s.bytes += r->tx_left;
        else
            s.bytes += r->rndv_gen ? r->rndv.data_len : r->pub.data_len;
    }
    return s;
}

/* One line: what the connection waits for. The keys are explained in
 * doc/architecture.md (State dump). */
static void dump_con_locked(FILE *out, struct psc_con *con)
{
    struct qsum sends = qsum(&con->sendq, true);
    struct qsum rndv_sends = qsum(&con->rndv_sendq, false);
    struct qsum unexpected = qsum(&con->net_recvq, false);
    size_t rndv_recvs =
        psc_list_count(&con->rndv_recvq) + psc_list_count(&con->rx_deferq);

    fprintf(out,
            "%s state=%s recvs=%zu sends=%zu (%llu B) rndv_sends=%zu "
            "(%llu B) rndv_recvs=%zu unexpected=%zu (%llu B)",
            psc_con_str(con), pscom_con_state_str(con->pub.state),
            psc_list_count(&con->recvq_user), sends.n, sends.bytes,
            rndv_sends.n, rndv_sends.bytes, rndv_recvs, unexpected.n,
            unexpected.bytes);
    if (con->rx.phase == PSC_RX_DATA && con->rx.left)
        fprintf(out, ", reading a body (%zu B to come)", con->rx.left);
    if (con->ondemand) fprintf(out, ", on demand: not connected yet");
    if (con->precon) fprintf(out, ", handshake under way");
    if (con->got_eof) fprintf(out, ", the peer closed");
    if (con->closing) fprintf(out, ", closing");
    if (con->failed) fprintf(out, ", failed: %s", pscom_err_str(con->error));
    fprintf(out, "\n");
}

void psc_dump_state_locked(FILE *out)
{
    struct psc_list *spos, *cpos;

    fprintf(out, "pscom %s state: pid %d on %s (%s), node id %d%s\n",
            PSC_VERSION_STRING, (int)getpid(), psc_ctx.hostname,
            psc_ctx.node_addr, psc_ctx.node_id,
            psc_ctx.threaded ? ", threads" : "");
    psc_list_for_each(spos, &psc_ctx.sockets) {
        struct psc_sock *s = psc_list_entry(spos, struct psc_sock, next_sock);
        const pscom_con_info_t *l = &s->pub.local_con_info;
        char listen[32] = "not listening";
        if (s->listen_fd >= 0)
            snprintf(listen, sizeof(listen), "port %d%s", s->pub.listen_portno,
                     s->listen_suspended ? " (suspended)" : "");
        fprintf(out, "socket %.8s(r%d) %s: connections=%zu anysrc_recvs=%zu\n",
                l->name, l->rank, listen, psc_list_count(&s->cons),
                psc_list_count(&s->recvq_any));
        psc_list_for_each(cpos, &s->cons) {
            fprintf(out, "  ");
            dump_con_locked(out,
                            psc_list_entry(cpos, struct psc_con, next_con));
        }
        psc_group_dump_locked(out, s);
    }
    fprintf(out, "receives from any socket: %zu\n",
            psc_list_count(&psc_ctx.recvq_any));
    fprintf(out, "handshakes under way: %zu\n",
            psc_list_count(&psc_ctx.precons));
    psc_precon_dump_locked(out);
    fprintf(out, "end of pscom state\n");
}

void pscom_dump_connection(FILE *out, pscom_connection_t *connection)
{
    if (!connection) return;
    psc_lock();
    dump_con_locked(out, con_of(connection));
    psc_unlock();
}

void pscom_dump_reqstat(FILE *out)
{
    psc_lock();
    size_t any = psc_list_count(&psc_ctx.recvq_any);
    struct psc_list *pos;
    psc_list_for_each(pos, &psc_ctx.sockets) {
        struct psc_sock *s = psc_list_entry(pos, struct psc_sock, next_sock);
        any += psc_list_count(&s->recvq_any);
    }
    psc_unlock();
    fprintf(out, "pscom requests: %zu any-source receives posted\n", any);
}

void pscom_dump_info(FILE *out)
{
    psc_lock();
    psc_dump_state_locked(out);
    psc_unlock();
}
