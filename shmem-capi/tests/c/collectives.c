/* Team collectives on heap and static buffers, and the deprecated
   active-set forms over all PEs. */
#include <shmem.h>
#include <string.h>
#include "check.h"

#define N 8
#define MAXPE 16
static long s_src[N], s_dst[N * MAXPE];
static int s_red[N], s_out[N];
static long pSync[SHMEM_REDUCE_SYNC_SIZE];
static long pWrk[SHMEM_REDUCE_MIN_WRKDATA_SIZE + N];

int main(void) {
    shmem_init();
    int me = shmem_my_pe(), n = shmem_n_pes();
    CHECK(n <= MAXPE);
    for (int i = 0; i < SHMEM_REDUCE_SYNC_SIZE; i++) pSync[i] = SHMEM_SYNC_VALUE;
    shmem_sync_all();

    long *src = shmem_malloc(N * sizeof(long));
    long *dst = shmem_malloc(N * MAXPE * sizeof(long));
    for (int i = 0; i < N; i++) src[i] = s_src[i] = me * 100 + i;
    shmem_barrier_all();

    /* broadcast from the last PE */
    memset(dst, 0, N * sizeof(long));
    CHECK(shmem_long_broadcast(SHMEM_TEAM_WORLD, dst, src, N, n - 1) == 0);
    for (int i = 0; i < N; i++) CHECK(dst[i] == (n - 1) * 100 + i);
    CHECK(shmem_broadcast(SHMEM_TEAM_WORLD, s_dst, s_src, N, 0) == 0);
    for (int i = 0; i < N; i++) CHECK(s_dst[i] == i);
    CHECK(shmem_broadcastmem(SHMEM_TEAM_WORLD, dst, src, 3, 0) == 0);

    /* fcollect and collect (PE i contributes i + 1 elements) */
    CHECK(shmem_long_fcollect(SHMEM_TEAM_WORLD, dst, src, N) == 0);
    for (int p = 0; p < n; p++)
        for (int i = 0; i < N; i++) CHECK(dst[p * N + i] == p * 100 + i);
    CHECK(shmem_fcollect(SHMEM_TEAM_WORLD, s_dst, s_src, N) == 0);
    for (int p = 0; p < n; p++) CHECK(s_dst[p * N + 5] == p * 100 + 5);
    CHECK(shmem_long_collect(SHMEM_TEAM_WORLD, dst, src, (me % N) + 1) == 0);
    int at = 0;
    for (int p = 0; p < n; p++)
        for (int i = 0; i <= p % N; i++) CHECK(dst[at++] == p * 100 + i);
    CHECK(shmem_collect(SHMEM_TEAM_WORLD, s_dst, s_src, 1) == 0);
    for (int p = 0; p < n; p++) CHECK(s_dst[p] == p * 100);

    /* alltoall / alltoalls: block j of PE p goes to PE j's block p */
    long *a2a = shmem_malloc(MAXPE * 2 * sizeof(long));
    for (int j = 0; j < n; j++) { a2a[2 * j] = me * 1000 + j; a2a[2 * j + 1] = -1; }
    CHECK(shmem_long_alltoall(SHMEM_TEAM_WORLD, dst, a2a, 2) == 0);
    for (int p = 0; p < n; p++) CHECK(dst[2 * p] == p * 1000 + me && dst[2 * p + 1] == -1);
    CHECK(shmem_long_alltoalls(SHMEM_TEAM_WORLD, dst, a2a, 1, 2, 1) == 0);
    for (int p = 0; p < n; p++) CHECK(dst[p] == p * 1000 + me);

    /* reductions */
    int *ri = shmem_malloc(N * sizeof(int)), *ro = shmem_malloc(N * sizeof(int));
    for (int i = 0; i < N; i++) { ri[i] = me + i; s_red[i] = 1 << me; }
    CHECK(shmem_int_sum_reduce(SHMEM_TEAM_WORLD, ro, ri, N) == 0);
    for (int i = 0; i < N; i++) CHECK(ro[i] == n * (n - 1) / 2 + n * i);
    CHECK(shmem_int_max_reduce(SHMEM_TEAM_WORLD, ro, ri, N) == 0);
    CHECK(ro[0] == n - 1);
    CHECK(shmem_min_reduce(SHMEM_TEAM_WORLD, ro, ri, N) == 0);
    CHECK(ro[2] == 2);
    CHECK(shmem_int32_or_reduce(SHMEM_TEAM_WORLD, s_out, s_red, N) == 0);
    CHECK(s_out[3] == (1 << n) - 1);
    CHECK(shmem_int32_xor_reduce(SHMEM_TEAM_WORLD, s_red, s_red, N) == 0); /* in place */
    CHECK(s_red[0] == (1 << n) - 1);
    double *dv = shmem_malloc(sizeof(double)), *dp = shmem_malloc(sizeof(double));
    *dv = 2.0;
    CHECK(shmem_double_prod_reduce(SHMEM_TEAM_WORLD, dp, dv, 1) == 0);
    CHECK(*dp == (double)(1 << n));

    /* on a team of the odd PEs */
    shmem_team_t odds;
    CHECK(shmem_team_split_strided(SHMEM_TEAM_WORLD, 1, 2, n / 2, NULL, 0, &odds) == 0);
    if (odds != SHMEM_TEAM_INVALID) {
        CHECK(shmem_int_sum_reduce(odds, ro, ri, 1) == 0);
        int want = 0;
        for (int p = 1; p < n; p += 2) want += p;
        CHECK(ro[0] == want);
        CHECK(shmem_int_broadcast(odds, s_out, s_red, 1, 0) == 0);
        shmem_team_destroy(odds);
    }
    shmem_barrier_all();

    /* deprecated active-set forms over all PEs */
    shmem_barrier(0, 0, n, pSync);
    int *bi = shmem_malloc(4 * MAXPE * sizeof(int));
    int keep = bi[0] = -7;
    shmem_broadcast32(bi, ri, 1, 0, 0, 0, n, pSync);
    if (me == 0) CHECK(bi[0] == keep);      /* the root's dest is untouched */
    else CHECK(bi[0] == 0);
    shmem_barrier(0, 0, n, pSync);
    shmem_fcollect64(dst, src, 1, 0, 0, n, pSync);
    for (int p = 0; p < n; p++) CHECK(dst[p] == p * 100);
    shmem_barrier(0, 0, n, pSync);
    shmem_collect32(bi, ri, 2, 0, 0, n, pSync);
    for (int p = 0; p < n; p++) CHECK(bi[2 * p] == p && bi[2 * p + 1] == p + 1);
    shmem_barrier(0, 0, n, pSync);
    shmem_long_sum_to_all(s_dst, s_src, N, 0, 0, n, pWrk, pSync);
    for (int i = 0; i < N; i++) CHECK(s_dst[i] == 100L * n * (n - 1) / 2 + (long)n * i);
    shmem_barrier(0, 0, n, pSync);
    shmem_int_max_to_all(ro, ri, N, 0, 0, n, (int *)pWrk, pSync);
    CHECK(ro[N - 1] == n - 1 + N - 1);
    shmem_barrier_all();

    shmem_free(bi);
    shmem_free(dp);
    shmem_free(dv);
    shmem_free(ro);
    shmem_free(ri);
    shmem_free(a2a);
    shmem_free(dst);
    shmem_free(src);
    shmem_finalize();
    if (me == 0) printf("collectives: ok on %d PEs\n", n);
    return 0;
}
