/*
 * flag_probe — the hardware floor of a shared-memory ping-pong: two
 * processes pinned to two cores bounce a counter between two cache lines
 * (one written by each side). Prints the one-way time (round trip / 2) as
 * the median of several batches, in the style of pscom_bench --json.
 *
 * Usage: flag_probe [--cpu A,B] [--iters N] [--batches N] [--json]
 *
 * Virtual machines sometimes place the two vCPUs far apart for a while: the
 * project lead saw a cache-line round trip of ~55 ns turn into ~470 ns for
 * seconds to minutes, and 120-220 ns one-way were seen for an hour while
 * the shm plugin was written. Benchmark scripts run this before and after
 * their measurements and compare only figures of the same placement.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct line {
    _Atomic uint64_t v;
    char pad[128 - sizeof(uint64_t)];
};

static void pin(int cpu)
{
    cpu_set_t set;
    if (cpu < 0) return;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof(set), &set)) {
        perror("flag_probe: sched_setaffinity");
        exit(1);
    }
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    int cpu_a = 0, cpu_b = 1, json = 0;
    long iters = 200000, batches = 9;

    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--cpu") && i + 1 < argc) {
            if (sscanf(argv[++i], "%d,%d", &cpu_a, &cpu_b) != 2) {
                fprintf(stderr, "flag_probe: --cpu needs A,B\n");
                return 2;
            }
        } else if (!strcmp(argv[i], "--iters") && i + 1 < argc) {
            iters = atol(argv[++i]);
        } else if (!strcmp(argv[i], "--batches") && i + 1 < argc) {
            batches = atol(argv[++i]);
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else {
            fprintf(stderr, "usage: flag_probe [--cpu A,B] [--iters N] "
                            "[--batches N] [--json]\n");
            return 2;
        }
    }
    if (iters < 1 || batches < 1 || batches > 99) return 2;

    struct line *l = mmap(NULL, 2 * sizeof(struct line), PROT_READ | PROT_WRITE,
                          MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (l == MAP_FAILED) {
        perror("flag_probe: mmap");
        return 1;
    }
    long total = iters * batches + 1000;
    pid_t pid = fork();
    if (pid < 0) {
        perror("flag_probe: fork");
        return 1;
    }
    if (pid == 0) {
        pin(cpu_b);
        for (uint64_t n = 1; n <= (uint64_t)total; n++) {
            while (atomic_load_explicit(&l[0].v, memory_order_acquire) != n)
                ;
            atomic_store_explicit(&l[1].v, n, memory_order_release);
        }
        _exit(0);
    }
    pin(cpu_a);
    double t[99];
    uint64_t n = 0;
    for (long b = -1; b < batches; b++) {
        long k = b < 0 ? 1000 : iters; /* batch -1 warms up */
        double t0 = now_ns();
        for (long i = 0; i < k; i++) {
            n++;
            atomic_store_explicit(&l[0].v, n, memory_order_release);
            while (atomic_load_explicit(&l[1].v, memory_order_acquire) != n)
                ;
        }
        if (b >= 0) t[b] = (now_ns() - t0) / k / 2;
    }
    waitpid(pid, NULL, 0);
    qsort(t, batches, sizeof(t[0]), cmp);
    double med = t[batches / 2];
    if (json)
        printf("{\"probe\": \"flag\", \"one_way_ns\": %.1f, \"min_ns\": %.1f, "
               "\"max_ns\": %.1f}\n", med, t[0], t[batches - 1]);
    else
        printf("flag ping-pong cores %d,%d: one-way %.1f ns (batches %.1f .. "
               "%.1f)\n", cpu_a, cpu_b, med, t[0], t[batches - 1]);
    return 0;
}
