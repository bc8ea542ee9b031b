/* OSU OpenSHMEM benchmark patterns through the C ABI, in one program.
 *
 * Every two-PE row follows OSU 7.4: PE 0 issues the operation in a loop
 * while PE 1 waits in shmem_barrier_all (a library wait, as users run);
 * collective rows are timed on every PE and reported as the slowest PE's
 * average. Output, one line per row, parsed by `shmem-bench capi`:
 *
 *     row <pattern> <bytes> <microseconds per operation>
 *
 * Usage: oshrun -np N osu_patterns [max_bytes] [iters]
 */
#include <shmem.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static long iters_for(size_t bytes, long base) {
    long n = base;
    if (bytes >= 65536) n = base / 10;
    if (bytes >= 1048576) n = base / 50;
    return n < 20 ? 20 : n;
}

static int me, npes;
static long iters_base;
static double timing[1];
static double tmax[1];
static long psync[2][SHMEM_REDUCE_SYNC_SIZE];
static const size_t SIZES[] = {8, 64, 512, 4096, 32768, 262144, 1048576, 4194304};
#define NSIZES (sizeof SIZES / sizeof SIZES[0])

/* The slowest PE's value of `t` (a collective over all PEs). */
static double slowest(double t) {
    timing[0] = t;
    shmem_barrier_all();
    shmem_double_max_reduce(SHMEM_TEAM_WORLD, tmax, timing, 1);
    return tmax[0];
}

static void row(const char *name, size_t bytes, double us) {
    if (me == 0) printf("row %s %zu %.4f\n", name, bytes, us);
    fflush(stdout);
}

/* PE 0 runs `body` in a loop; PE 1 sits in shmem_barrier_all meanwhile. */
#define TWO_PE(name, bytes, body)                                              \
    do {                                                                       \
        long n_ = iters_for(bytes, iters_base), skip_ = n_ / 10 + 1;           \
        double t0_ = 0;                                                        \
        shmem_barrier_all();                                                   \
        if (me == 0) {                                                         \
            for (long i = 0; i < n_ + skip_; i++) {                            \
                if (i == skip_) t0_ = now_us();                                \
                body;                                                          \
            }                                                                  \
            row(name, bytes, (now_us() - t0_) / n_);                           \
        }                                                                      \
        shmem_barrier_all();                                                   \
    } while (0)

/* Every PE runs `body` in a loop (`i` counts iterations); the slowest PE's
 * average is reported. */
#define COLLECTIVE(name, bytes, body)                                          \
    do {                                                                       \
        long n_ = iters_for(bytes, iters_base / 10), skip_ = n_ / 10 + 1;      \
        double t0_ = 0;                                                        \
        shmem_barrier_all();                                                   \
        for (long i = 0; i < n_ + skip_; i++) {                                \
            if (i == skip_) t0_ = now_us();                                    \
            body;                                                              \
        }                                                                      \
        double t_ = slowest((now_us() - t0_) / n_);                            \
        row(name, bytes, t_);                                                  \
    } while (0)

int main(int argc, char **argv) {
    size_t max_bytes = argc > 1 ? (size_t)atol(argv[1]) : 1048576;
    iters_base = argc > 2 ? atol(argv[2]) : 10000;
    shmem_init();
    me = shmem_my_pe();
    npes = shmem_n_pes();
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < SHMEM_REDUCE_SYNC_SIZE; i++) psync[k][i] = SHMEM_SYNC_VALUE;

    size_t big = max_bytes * (size_t)npes;
    if (big < 512) big = 512; /* the 64 x 8 bytes of the message-rate row */
    size_t nwrk = max_bytes / 8 / 2 + 1 + SHMEM_REDUCE_MIN_WRKDATA_SIZE;
    char *src = shmem_malloc(big);
    char *dst = shmem_malloc(big);
    float *fsrc = shmem_malloc(max_bytes);
    float *fdst = shmem_malloc(max_bytes);
    float *pwrk[2] = {shmem_malloc(nwrk * sizeof(float)), shmem_malloc(nwrk * sizeof(float))};
    long *word = shmem_calloc(1, sizeof(long));
    int *iword = shmem_calloc(1, sizeof(int));
    char *local = malloc(max_bytes);
    if (!src || !dst || !fsrc || !fdst || !pwrk[0] || !pwrk[1] || !word || !iword || !local) {
        fprintf(stderr, "osu_patterns: allocation of %zu bytes failed\n", big);
        shmem_global_exit(1);
    }
    memset(src, me, big);
    memset(local, 1, max_bytes);
    for (size_t i = 0; i < max_bytes / sizeof(float); i++) fsrc[i] = (float)(i % 7);

    if (npes >= 2) {
        for (size_t s = 0; s < NSIZES && SIZES[s] <= max_bytes; s++) {
            size_t b = SIZES[s];
            TWO_PE("put", b, (shmem_putmem(dst, local, b, 1), shmem_quiet()));
            TWO_PE("get", b, shmem_getmem(local, dst, b, 1));
            TWO_PE("put_nbi", b, (shmem_putmem_nbi(dst, local, b, 1), shmem_quiet()));
        }
        long v = 0;
        TWO_PE("p", 8, shmem_long_p(word, 1, 1));
        TWO_PE("g", 8, v += shmem_long_g(word, 1));
        TWO_PE("quiet", 0, shmem_quiet());
        TWO_PE("atomic_fetch_add_int", 4, v += shmem_int_atomic_fetch_add(iword, 1, 1));
        TWO_PE("atomic_add_int", 4, shmem_int_atomic_add(iword, 1, 1));
        TWO_PE("atomic_fetch_add_long", 8, v += shmem_long_atomic_fetch_add(word, 1, 1));
        TWO_PE("atomic_compare_swap_long", 8, v += shmem_long_atomic_compare_swap(word, 0, 1, 1));
        /* Message rate: a window of 64 non-blocking puts, one quiet. */
        TWO_PE("put_rate_8x64", 8, {
            for (int w = 0; w < 64; w++) shmem_putmem_nbi(dst + 8 * w, local, 8, 1);
            shmem_quiet();
        });
        if (v == -1) printf("unreachable\n");
    }

    COLLECTIVE("barrier_all", 0, shmem_barrier_all());
    for (size_t s = 0; s < NSIZES && SIZES[s] <= max_bytes; s++) {
        size_t b = SIZES[s];
        int n32 = (int)(b / 4);
        /* As OSU: in place, active set of all PEs, alternating pSync. */
        COLLECTIVE("broadcast32", b, shmem_broadcast32(dst, dst, n32, 0, 0, 0, npes, psync[i & 1]));
        COLLECTIVE("broadcast", b, shmem_broadcastmem(SHMEM_TEAM_WORLD, dst, src, b, 0));
        COLLECTIVE("fcollect32", b, shmem_fcollect32(dst, src, n32, 0, 0, npes, psync[i & 1]));
        COLLECTIVE("fcollect", b, shmem_fcollectmem(SHMEM_TEAM_WORLD, dst, src, b));
        COLLECTIVE("collect", b, shmem_collectmem(SHMEM_TEAM_WORLD, dst, src, b));
        COLLECTIVE("alltoall", b, shmem_alltoallmem(SHMEM_TEAM_WORLD, dst, src, b));
        COLLECTIVE("float_sum_to_all", b,
                   shmem_float_sum_to_all(fdst, fsrc, n32, 0, 0, npes, pwrk[i & 1], psync[i & 1]));
        COLLECTIVE("float_sum_reduce", b, shmem_float_sum_reduce(SHMEM_TEAM_WORLD, fdst, fsrc, n32));
    }

    shmem_free(src);
    shmem_free(dst);
    shmem_free(fsrc);
    shmem_free(fdst);
    shmem_free(pwrk[0]);
    shmem_free(pwrk[1]);
    shmem_free(word);
    shmem_free(iword);
    free(local);
    shmem_finalize();
    return 0;
}
