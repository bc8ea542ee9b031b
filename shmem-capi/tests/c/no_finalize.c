/* A program in the start_pes style that returns from main without
 * shmem_finalize: PE 0 is done at once while the others still read its
 * memory and synchronise with it. The implicit finalize at exit keeps PE 0
 * in the job until every PE is done, so every PE exits 0. */
#include <shmem.h>
#include "check.h"

static long table[64];

int main(void) {
    start_pes(0);
    int me = _my_pe(), n = _num_pes();
    for (int i = 0; i < 64; i++) table[i] = 100 * me + i;
    long *heap = shmem_malloc(64 * sizeof(long));
    for (int i = 0; i < 64; i++) heap[i] = 1000 * me + i;
    shmem_barrier_all();
    CHECK(n >= 2);
    if (me == 0) return 0; /* done: no finalize */
    long sum = 0;
    for (int round = 0; round < 2000; round++) {
        for (int i = 0; i < 64; i++) {
            CHECK(shmem_long_g(&table[i], 0) == i);
            sum += shmem_long_g(&heap[i], 0);
        }
        shmem_quiet();
    }
    CHECK(sum == 2000L * (64 * 63 / 2));
    return 0;
}
