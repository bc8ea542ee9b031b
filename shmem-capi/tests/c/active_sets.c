/* Item: the deprecated collectives on active sets other than "all PEs":
   at 4 PEs the pairs {0,1}, {2,3} (stride 1), {0,2}, {1,3} (logPE_stride 1)
   and the triple {1,2,3}; at 2 PEs the set of both and each PE alone. Each
   runs concurrently with the other set of the pair, with pSync in static
   data for one and on the heap for the other. The calls of a set follow
   each other with the same pSync (no barrier between them); once every PE
   is done, every pSync is back at SHMEM_SYNC_VALUE. */
#include <shmem.h>
#include <stdint.h>
#include <string.h>
#include "check.h"

#define NS SHMEM_REDUCE_SYNC_SIZE
static long ps_static[NS];
static int32_t s32[8], d32[32];
static int64_t s64[8], d64[32];
static double dsrc[2], ddst[2], dwrk[SHMEM_REDUCE_MIN_WRKDATA_SIZE];
static long double lsrc[2], ldst[2], lwrk[2];
static int isrc[3], idst[3], iwrk[SHMEM_REDUCE_MIN_WRKDATA_SIZE];
static int ring_in;

#define psync_clean(ps) psync_clean_(ps, __LINE__)
/* Call between two barriers: no PE may start its next call meanwhile. */
static void psync_clean_(const long *ps, int line) {
    for (int i = 0; i < NS; i++) {
        if (ps[i] != SHMEM_SYNC_VALUE) {
            fprintf(stderr, "PE %d: line %d: pSync[%d] is %ld\n", shmem_my_pe(), line, i, ps[i]);
            exit(1);
        }
    }
}

/* Runs every deprecated collective over the set (start, logstride, size);
   `idx` is this PE's place in it. */
static void run(int start, int log, int size, int idx, long *ps) {
    int me = shmem_my_pe();
    int stride = 1 << log;
    int root = size - 1;
    int member[4];
    for (int i = 0; i < size; i++) member[i] = start + i * stride;

    shmem_barrier(start, log, size, ps);

    for (int i = 0; i < 8; i++) { s32[i] = me * 100 + i; s64[i] = (int64_t)me << 40 | i; }
    for (int i = 0; i < 32; i++) { d32[i] = -1; d64[i] = -1; }
    shmem_broadcast32(d32, s32, 3, root, start, log, size, ps);
    for (int i = 0; i < 3; i++)
        CHECK(d32[i] == (idx == root ? -1 : member[root] * 100 + i));
    shmem_broadcast64(d64, s64, 2, 0, start, log, size, ps);
    for (int i = 0; i < 2; i++)
        CHECK(d64[i] == (idx == 0 ? -1 : ((int64_t)member[0] << 40 | i)));

    shmem_fcollect32(d32, s32, 2, start, log, size, ps);
    for (int p = 0; p < size; p++)
        for (int i = 0; i < 2; i++) CHECK(d32[2 * p + i] == member[p] * 100 + i);
    shmem_fcollect64(d64, s64, 1, start, log, size, ps);
    for (int p = 0; p < size; p++) CHECK(d64[p] == (int64_t)member[p] << 40);

    /* collect: set member p gives p + 1 elements */
    for (int i = 0; i < 32; i++) d32[i] = -1;
    shmem_collect32(d32, s32, (size_t)idx + 1, start, log, size, ps);
    int at = 0;
    for (int p = 0; p < size; p++)
        for (int i = 0; i <= p; i++) CHECK(d32[at++] == member[p] * 100 + i);
    CHECK(d32[at] == -1);
    shmem_collect64(d64, s64, 1, start, log, size, ps);
    for (int p = 0; p < size; p++) CHECK(d64[p] == (int64_t)member[p] << 40);

    /* alltoall: block j of my dest is block idx of member j's source */
    for (int i = 0; i < 8; i++) s32[i] = me * 100 + i;
    shmem_alltoall32(d32, s32, 2, start, log, size, ps);
    for (int p = 0; p < size; p++)
        for (int i = 0; i < 2; i++) CHECK(d32[2 * p + i] == member[p] * 100 + 2 * idx + i);
    shmem_alltoall64(d64, s64, 1, start, log, size, ps);
    for (int p = 0; p < size; p++) CHECK(d64[p] == ((int64_t)member[p] << 40 | idx));
    /* alltoalls: dest stride 2, source stride 1, one element per PE */
    for (int i = 0; i < 32; i++) d32[i] = -1;
    shmem_alltoalls32(d32, s32, 2, 1, 1, start, log, size, ps);
    for (int p = 0; p < size; p++) CHECK(d32[2 * p] == member[p] * 100 + idx && d32[2 * p + 1] == -1);
    shmem_alltoalls64(d64, s64, 1, 1, 1, start, log, size, ps);
    for (int p = 0; p < size; p++) CHECK(d64[p] == ((int64_t)member[p] << 40 | idx));

    /* reductions, one of them in place */
    int isum = 0, imax = 0;
    for (int p = 0; p < size; p++) { isum += member[p]; imax = member[p] > imax ? member[p] : imax; }
    for (int i = 0; i < 3; i++) isrc[i] = me + i;
    shmem_int_sum_to_all(idst, isrc, 3, start, log, size, iwrk, ps);
    for (int i = 0; i < 3; i++) CHECK(idst[i] == isum + size * i);
    shmem_int_max_to_all(isrc, isrc, 3, start, log, size, iwrk, ps);
    for (int i = 0; i < 3; i++) CHECK(isrc[i] == imax + i);
    for (int i = 0; i < 3; i++) isrc[i] = 1 << me;
    shmem_int_or_to_all(idst, isrc, 3, start, log, size, iwrk, ps);
    int bits = 0;
    for (int p = 0; p < size; p++) bits |= 1 << member[p];
    CHECK(idst[0] == bits);
    dsrc[0] = me + 0.5; dsrc[1] = -me;
    shmem_double_min_to_all(ddst, dsrc, 2, start, log, size, dwrk, ps);
    CHECK(ddst[0] == member[0] + 0.5 && ddst[1] == -member[size - 1]);
    lsrc[0] = (long double)me / 3.0L; lsrc[1] = 1;
    shmem_longdouble_sum_to_all(ldst, lsrc, 2, start, log, size, lwrk, ps);
    long double lsum = 0;
    for (int p = 0; p < size; p++) lsum += (long double)member[p] / 3.0L;
    CHECK(ldst[0] == lsum && ldst[1] == size);
    /* The deprecated active-set shmem_sync: a put completed by quiet
       before it is seen after it. */
    shmem_int_p(&ring_in, me + 1000, member[(idx + 1) % size]);
    shmem_quiet();
    shmem_sync(start, log, size, ps);
    CHECK(ring_in == member[(idx + size - 1) % size] + 1000);
    shmem_sync(start, log, size, ps);
    shmem_barrier(start, log, size, ps);
}

int main(void) {
    for (int i = 0; i < NS; i++) ps_static[i] = SHMEM_SYNC_VALUE;
    shmem_init();
    int me = shmem_my_pe(), n = shmem_n_pes();
    long *ps_heap = shmem_malloc(NS * sizeof(long));
    for (int i = 0; i < NS; i++) ps_heap[i] = SHMEM_SYNC_VALUE;
    shmem_barrier_all();

    if (n == 4) {
        /* {0,1} and {2,3} at once, then {0,2} and {1,3}, then {1,2,3} */
        run(me < 2 ? 0 : 2, 0, 2, me % 2, me < 2 ? ps_static : ps_heap);
        shmem_barrier_all();
        psync_clean(ps_static);
        psync_clean(ps_heap);
        shmem_barrier_all();
        run(me % 2, 1, 2, me / 2, me % 2 ? ps_heap : ps_static);
        shmem_barrier_all();
        psync_clean(ps_static);
        psync_clean(ps_heap);
        shmem_barrier_all();
        if (me > 0) run(1, 0, 3, me - 1, ps_static);
        shmem_barrier_all();
        psync_clean(ps_static);
        shmem_barrier_all();
        /* the same set twice in a row with the same pSync */
        if (me % 2 == 0) { run(0, 1, 2, me / 2, ps_heap); run(0, 1, 2, me / 2, ps_heap); }
    } else {
        run(0, 0, n, me, ps_static);       /* every PE */
        shmem_barrier_all();
        psync_clean(ps_static);
        shmem_barrier_all();
        run(me, 0, 1, 0, ps_heap);         /* each PE alone */
    }
    shmem_barrier_all();
    psync_clean(ps_static);
    psync_clean(ps_heap);
    shmem_barrier_all();
    shmem_free(ps_heap);
    shmem_finalize();
    if (me == 0) printf("active_sets: ok on %d PEs\n", n);
    return 0;
}
