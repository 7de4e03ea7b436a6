/*
 * mpi_pingpong — a two-rank MPI ping-pong in the style of pscom_bench --json,
 * the MPI reference point of bench/compare-shm (built by that script with
 * mpicc when it is available).
 *
 * Usage: mpirun -np 2 mpi_pingpong [--sizes 8,64k,4M] [--iters N]
 *
 * Rank 0 times every round trip; latency is half of it (median over the
 * iterations), bandwidth is size / latency in MB/s (10^6 bytes/s).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SIZES 32

static size_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    switch (*end) {
    case 'k': case 'K': v *= 1024; break;
    case 'm': case 'M': v *= 1024 * 1024; break;
    case 'g': case 'G': v *= 1024.0 * 1024 * 1024; break;
    default: break;
    }
    return (size_t)v;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    size_t sizes[MAX_SIZES] = {8, 65536, 4194304};
    int nsizes = 3;
    long iters = -1;
    int rank, nranks;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--sizes") && i + 1 < argc) {
            char *copy = strdup(argv[++i]), *save = NULL;
            nsizes = 0;
            for (char *t = strtok_r(copy, ",", &save); t && nsizes < MAX_SIZES;
                 t = strtok_r(NULL, ",", &save))
                sizes[nsizes++] = parse_size(t);
            free(copy);
        } else if (!strcmp(argv[i], "--iters") && i + 1 < argc) {
            iters = atol(argv[++i]);
        }
    }
    if (nranks != 2) {
        if (!rank) fprintf(stderr, "mpi_pingpong: needs exactly 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    size_t max = 1;
    for (int i = 0; i < nsizes; i++)
        if (sizes[i] > max) max = sizes[i];
    char *buf = malloc(max);
    memset(buf, 1, max);
    int peer = 1 - rank;

    for (int s = 0; s < nsizes; s++) {
        size_t size = sizes[s];
        long n = iters > 0 ? iters : size <= 4096 ? 100000 : size <= 262144 ? 5000 : 500;
        long warm = n / 10 + 2;
        double *t = malloc(sizeof(double) * (size_t)n);
        MPI_Barrier(MPI_COMM_WORLD);
        for (long i = -warm; i < n; i++) {
            double t0 = MPI_Wtime();
            if (rank == 0) {
                MPI_Send(buf, (int)size, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
                MPI_Recv(buf, (int)size, MPI_BYTE, peer, 1, MPI_COMM_WORLD,
                         MPI_STATUS_IGNORE);
            } else {
                MPI_Recv(buf, (int)size, MPI_BYTE, peer, 1, MPI_COMM_WORLD,
                         MPI_STATUS_IGNORE);
                MPI_Send(buf, (int)size, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
            }
            if (i >= 0) t[i] = (MPI_Wtime() - t0) * 1e6 / 2;
        }
        if (rank == 0) {
            qsort(t, (size_t)n, sizeof(double), cmp);
            double med = t[n / 2];
            printf("{\"size\": %zu, \"iters\": %ld, \"lat_us_median\": %.3f, "
                   "\"bw_MBps\": %.2f, \"transport\": \"mpi\"}\n", size, n, med,
                   med > 0 ? size / med : 0.0);
            fflush(stdout);
        }
        free(t);
    }
    free(buf);
    MPI_Finalize();
    return 0;
}
