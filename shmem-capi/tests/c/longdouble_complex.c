/* Item: long double and complex reductions (team and *_to_all forms),
   shmem_pcontrol, and the C11 generics for long double collectives. */
#include <shmem.h>
#include <complex.h>
#include <string.h>
#include "check.h"

#define N 3
/* Within 1e-17 relative: what long double keeps and double cannot (the
   order of the PEs' contributions may differ from the check's). */
#define NEAR(a, b) (((a) - (b) < 0 ? (b) - (a) : (a) - (b)) <= 1e-17L * ((b) < 0 ? -(b) : (b)))
static long double lsrc[N], ldst[N], lwrk[N];
static double complex csrc[N], cdst[N], cwrk[N];
static float complex fsrc[N], fdst[N], fwrk[N];
static long psync[SHMEM_REDUCE_SYNC_SIZE];
static long double bsrc[4 * 4], bdst[4 * 4];

int main(void) {
    for (int i = 0; i < SHMEM_REDUCE_SYNC_SIZE; i++) psync[i] = SHMEM_SYNC_VALUE;
    shmem_init();
    shmem_pcontrol(1);
    shmem_pcontrol(0, "ignored", 3);
    int me = shmem_my_pe(), n = shmem_n_pes();
    /* 1/3 is not exact in double: long double arithmetic shows in the sum. */
    const long double third = 1.0L / 3.0L;
    long double want_sum[N], want_prod[N];
    for (int i = 0; i < N; i++) { want_sum[i] = 0; want_prod[i] = 1; }
    for (int p = 0; p < n; p++)
        for (int i = 0; i < N; i++) {
            long double v = (long double)(p + 1) * third + (long double)i;
            want_sum[i] += v;
            want_prod[i] *= v;
        }
    for (int i = 0; i < N; i++) lsrc[i] = (long double)(me + 1) * third + (long double)i;

    CHECK(shmem_longdouble_sum_reduce(SHMEM_TEAM_WORLD, ldst, lsrc, N) == 0);
    for (int i = 0; i < N; i++) CHECK(NEAR(ldst[i], want_sum[i]));
    CHECK(shmem_longdouble_prod_reduce(SHMEM_TEAM_WORLD, ldst, lsrc, N) == 0);
    for (int i = 0; i < N; i++) CHECK(NEAR(ldst[i], want_prod[i]));
    CHECK(shmem_longdouble_max_reduce(SHMEM_TEAM_WORLD, ldst, lsrc, N) == 0);
    for (int i = 0; i < N; i++) CHECK(ldst[i] == (long double)n * third + (long double)i);
    CHECK(shmem_longdouble_min_reduce(SHMEM_TEAM_WORLD, ldst, lsrc, N) == 0);
    for (int i = 0; i < N; i++) CHECK(ldst[i] == third + (long double)i);
    /* generic, in place */
    memcpy(ldst, lsrc, sizeof ldst);
    CHECK(shmem_sum_reduce(SHMEM_TEAM_WORLD, ldst, ldst, N) == 0);
    for (int i = 0; i < N; i++) CHECK(NEAR(ldst[i], want_sum[i]));

    shmem_longdouble_sum_to_all(ldst, lsrc, N, 0, 0, n, lwrk, psync);
    for (int i = 0; i < N; i++) CHECK(NEAR(ldst[i], want_sum[i]));
    shmem_barrier_all();
    shmem_longdouble_max_to_all(ldst, lsrc, N, 0, 0, n, lwrk, psync);
    CHECK(ldst[0] == (long double)n * third);
    shmem_barrier_all();
    shmem_longdouble_min_to_all(ldst, lsrc, N, 0, 0, n, lwrk, psync);
    CHECK(ldst[0] == third);
    shmem_barrier_all();
    shmem_longdouble_prod_to_all(ldst, lsrc, N, 0, 0, n, lwrk, psync);
    CHECK(NEAR(ldst[2], want_prod[2]));
    shmem_barrier_all();

    /* complex: PE p contributes (p+1) + i*(i-1) */
    double complex zs[N], zp[N];
    float complex fs[N], fp[N];
    for (int i = 0; i < N; i++) { zs[i] = 0; zp[i] = 1; fs[i] = 0; fp[i] = 1; }
    for (int p = 0; p < n; p++)
        for (int i = 0; i < N; i++) {
            double complex v = (double)(p + 1) + (double)(i - 1) * I;
            zs[i] += v; zp[i] *= v;
            fs[i] += (float complex)v; fp[i] *= (float complex)v;
        }
    for (int i = 0; i < N; i++) {
        csrc[i] = (double)(me + 1) + (double)(i - 1) * I;
        fsrc[i] = (float complex)csrc[i];
    }
    CHECK(shmem_complexd_sum_reduce(SHMEM_TEAM_WORLD, cdst, csrc, N) == 0);
    for (int i = 0; i < N; i++) CHECK(cdst[i] == zs[i]);
    CHECK(shmem_complexd_prod_reduce(SHMEM_TEAM_WORLD, cdst, csrc, N) == 0);
    for (int i = 0; i < N; i++) CHECK(cdst[i] == zp[i]);
    CHECK(shmem_complexf_sum_reduce(SHMEM_TEAM_WORLD, fdst, fsrc, N) == 0);
    for (int i = 0; i < N; i++) CHECK(fdst[i] == fs[i]);
    CHECK(shmem_prod_reduce(SHMEM_TEAM_WORLD, fdst, fsrc, N) == 0);
    for (int i = 0; i < N; i++) CHECK(fdst[i] == fp[i]);
    shmem_complexd_sum_to_all(cdst, csrc, N, 0, 0, n, cwrk, psync);
    for (int i = 0; i < N; i++) CHECK(cdst[i] == zs[i]);
    shmem_barrier_all();
    shmem_complexd_prod_to_all(cdst, csrc, N, 0, 0, n, cwrk, psync);
    for (int i = 0; i < N; i++) CHECK(cdst[i] == zp[i]);
    shmem_barrier_all();
    shmem_complexf_sum_to_all(fdst, fsrc, N, 0, 0, n, fwrk, psync);
    for (int i = 0; i < N; i++) CHECK(fdst[i] == fs[i]);
    shmem_barrier_all();
    shmem_complexf_prod_to_all(fdst, fsrc, N, 0, 0, n, fwrk, psync);
    for (int i = 0; i < N; i++) CHECK(fdst[i] == fp[i]);
    shmem_barrier_all();

    /* C11 generics on long double collectives (static buffers) */
    for (int i = 0; i < 4 * 4; i++) { bsrc[i] = (long double)(me * 100 + i) + third; bdst[i] = -1; }
    shmem_barrier_all();
    CHECK(shmem_broadcast(SHMEM_TEAM_WORLD, bdst, bsrc, 2, n - 1) == 0);
    CHECK(bdst[0] == (long double)((n - 1) * 100) + third);
    CHECK(shmem_fcollect(SHMEM_TEAM_WORLD, bdst, bsrc, 2) == 0);
    for (int p = 0; p < n; p++) CHECK(bdst[2 * p + 1] == (long double)(p * 100 + 1) + third);
    CHECK(shmem_collect(SHMEM_TEAM_WORLD, bdst, bsrc, 1) == 0);
    for (int p = 0; p < n; p++) CHECK(bdst[p] == (long double)(p * 100) + third);
    CHECK(shmem_alltoall(SHMEM_TEAM_WORLD, bdst, bsrc, 1) == 0);
    for (int p = 0; p < n; p++) CHECK(bdst[p] == (long double)(p * 100 + me) + third);
    CHECK(shmem_alltoalls(SHMEM_TEAM_WORLD, bdst, bsrc, 2, 1, 1) == 0);
    for (int p = 0; p < n; p++) CHECK(bdst[2 * p] == (long double)(p * 100 + me) + third);
    /* long double p/g through the generics */
    shmem_barrier_all();
    shmem_p(&bdst[0], third * (long double)me, (me + 1) % n);
    shmem_barrier_all();
    CHECK(shmem_g(&bdst[0], me) == third * (long double)((me + n - 1) % n));

    shmem_finalize();
    if (me == 0) printf("longdouble_complex: ok on %d PEs\n", n);
    return 0;
}
