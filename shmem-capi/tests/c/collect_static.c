/* Item: collect from global and static variables (deprecated 32/64-bit
   forms and team forms), into heap and static destinations. */
#include <shmem.h>
#include <stdint.h>
#include "check.h"

static long psync[SHMEM_COLLECT_SYNC_SIZE];
static uint32_t g32[2];
static uint64_t g64[2];
int gint[3];
static uint32_t sdst32[16];
static int sdsti[16];

int main(void) {
    for (int i = 0; i < SHMEM_COLLECT_SYNC_SIZE; i++) psync[i] = SHMEM_SYNC_VALUE;
    shmem_init();
    int me = shmem_my_pe(), n = shmem_n_pes();
    uint32_t *h32 = shmem_malloc(16 * sizeof(uint32_t));
    uint64_t *h64 = shmem_malloc(16 * sizeof(uint64_t));
    int *hi = shmem_malloc(16 * sizeof(int));
    g32[0] = 10u + (uint32_t)me; g32[1] = 20u + (uint32_t)me;
    g64[0] = (uint64_t)me << 33;
    for (int i = 0; i < 3; i++) gint[i] = me * 10 + i;
    shmem_barrier_all();

    /* one element from static data into the heap */
    shmem_collect32(h32, g32, 1, 0, 0, n, psync);
    for (int p = 0; p < n; p++) CHECK(h32[p] == 10u + (uint32_t)p);
    shmem_barrier_all();
    shmem_collect64(h64, g64, 1, 0, 0, n, psync);
    for (int p = 0; p < n; p++) CHECK(h64[p] == (uint64_t)p << 33);
    shmem_barrier_all();
    /* static to static, varying counts: PE p gives 1 + p % 2 */
    shmem_collect32(sdst32, g32, 1 + (size_t)(me % 2), 0, 0, n, psync);
    int at = 0;
    for (int p = 0; p < n; p++) {
        CHECK(sdst32[at++] == 10u + (uint32_t)p);
        if (p % 2) CHECK(sdst32[at++] == 20u + (uint32_t)p);
    }
    shmem_barrier_all();
    /* team forms */
    CHECK(shmem_int_collect(SHMEM_TEAM_WORLD, hi, gint, 1) == 0);
    for (int p = 0; p < n; p++) CHECK(hi[p] == p * 10);
    CHECK(shmem_int_collect(SHMEM_TEAM_WORLD, sdsti, gint, 3) == 0);
    for (int p = 0; p < n; p++)
        for (int i = 0; i < 3; i++) CHECK(sdsti[3 * p + i] == p * 10 + i);
    CHECK(shmem_collect(SHMEM_TEAM_WORLD, hi, gint, 2) == 0);
    for (int p = 0; p < n; p++) CHECK(hi[2 * p + 1] == p * 10 + 1);
    CHECK(shmem_int_fcollect(SHMEM_TEAM_WORLD, hi, gint, 1) == 0);
    for (int p = 0; p < n; p++) CHECK(hi[p] == p * 10);
    shmem_barrier_all();
    shmem_free(hi);
    shmem_free(h64);
    shmem_free(h32);
    shmem_finalize();
    if (me == 0) printf("collect_static: ok on %d PEs\n", n);
    return 0;
}
