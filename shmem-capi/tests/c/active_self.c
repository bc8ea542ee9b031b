/* Deprecated active-set collectives (OpenSHMEM 1.5, section 9.9 and
   Annex on deprecated interfaces) over an active set of one PE: PE_start =
   the caller, PE_size = 1 (logPE_stride is then irrelevant). Each PE runs
   them alone, at a different time from the others; the result is what the
   collective gives over one PE. Also shmem_alltoalls32/64 over all PEs. */
#include <shmem.h>
#include <stdint.h>
#include <string.h>
#include "check.h"

static long psync[SHMEM_REDUCE_SYNC_SIZE];
static long psync2[SHMEM_ALLTOALLS_SYNC_SIZE];
static int iwrk[SHMEM_REDUCE_MIN_WRKDATA_SIZE];
static double dwrk[SHMEM_REDUCE_MIN_WRKDATA_SIZE];
static int isrc[3], idst[3];
static double dsrc[2], ddst[2];
static uint32_t a32[4], b32[4];
static uint64_t a64[8], b64[8];

int main(void) {
    for (int i = 0; i < SHMEM_REDUCE_SYNC_SIZE; i++) psync[i] = SHMEM_SYNC_VALUE;
    for (int i = 0; i < SHMEM_ALLTOALLS_SYNC_SIZE; i++) psync2[i] = SHMEM_SYNC_VALUE;
    shmem_init();
    int me = shmem_my_pe(), n = shmem_n_pes();

    /* PEs take turns, so a PE's one-PE collective never waits for others. */
    for (int turn = 0; turn < n; turn++) {
        shmem_barrier_all();
        if (turn != me) continue;

        shmem_barrier(me, 5, 1, psync);

        for (int i = 0; i < 3; i++) { isrc[i] = me * 10 + i; idst[i] = -1; }
        shmem_int_sum_to_all(idst, isrc, 3, me, 0, 1, iwrk, psync);
        for (int i = 0; i < 3; i++) CHECK(idst[i] == me * 10 + i);
        shmem_int_prod_to_all(idst, isrc, 3, me, 3, 1, iwrk, psync);
        for (int i = 0; i < 3; i++) CHECK(idst[i] == me * 10 + i);

        dsrc[0] = me + 0.5; dsrc[1] = -1.25; ddst[0] = ddst[1] = 0;
        shmem_double_max_to_all(ddst, dsrc, 2, me, 0, 1, dwrk, psync);
        CHECK(ddst[0] == me + 0.5 && ddst[1] == -1.25);

        /* in place */
        shmem_int_min_to_all(isrc, isrc, 3, me, 0, 1, iwrk, psync);
        CHECK(isrc[2] == me * 10 + 2);

        for (int i = 0; i < 4; i++) { a32[i] = 100 + me + i; b32[i] = 0; }
        shmem_collect32(b32, a32, 2, me, 0, 1, psync);
        CHECK(b32[0] == 100u + me && b32[1] == 101u + me && b32[2] == 0);
        memset(b32, 0, sizeof b32);
        shmem_fcollect32(b32, a32, 3, me, 0, 1, psync);
        CHECK(b32[2] == 102u + me && b32[3] == 0);
        memset(b32, 0, sizeof b32);
        shmem_alltoall32(b32, a32, 1, me, 0, 1, psync);
        CHECK(b32[0] == 100u + me && b32[1] == 0);

        /* broadcast over one PE: the root's dest is not updated */
        memset(b32, 0, sizeof b32);
        shmem_broadcast32(b32, a32, 4, 0, me, 0, 1, psync);
        CHECK(b32[0] == 0 && b32[3] == 0);

        /* alltoalls over one PE: dest[j*dst] = source[j*sst], j < nelems */
        for (int i = 0; i < 8; i++) { a64[i] = 1000 + i; b64[i] = 0; }
        shmem_alltoalls64(b64, a64, 3, 2, 3, me, 0, 1, psync);
        CHECK(b64[0] == 1000 && b64[3] == 1002 && b64[6] == 1004);
        CHECK(b64[1] == 0 && b64[2] == 0 && b64[4] == 0 && b64[7] == 0);
    }
    shmem_barrier_all();

    /* alltoalls32 over all PEs: PE j's dest[(i*nelems + k)*dst] is PE i's
       source[(j*nelems + k)*sst]; here nelems 1, dst 2, sst 1. */
    uint32_t *src = shmem_malloc(sizeof(uint32_t) * n);
    uint32_t *dst = shmem_calloc(2 * n, sizeof(uint32_t));
    CHECK(src && dst);
    for (int j = 0; j < n; j++) src[j] = (uint32_t)(me * 100 + j);
    shmem_barrier_all();
    shmem_alltoalls32(dst, src, 2, 1, 1, 0, 0, n, psync2);
    for (int i = 0; i < n; i++) {
        CHECK(dst[2 * i] == (uint32_t)(i * 100 + me));
        CHECK(dst[2 * i + 1] == 0);
    }
    shmem_free(src);
    shmem_free(dst);
    shmem_finalize();
    return 0;
}
