/* Names older programs use: start_pes, _my_pe, _num_pes, shmalloc, shfree,
   _SHMEM_* constants. */
#include <shmem.h>
#include "check.h"

int main(void) {
    start_pes(0);
    int me = _my_pe(), n = _num_pes();
    CHECK(me == shmem_my_pe() && n == shmem_n_pes());
    long *x = shmalloc(sizeof(long));
    *x = 0;
    shmem_barrier_all();
    shmem_long_inc(x, 0);
    shmem_barrier_all();
    if (me == 0) CHECK(*x == n);
    CHECK(_SHMEM_CMP_EQ == SHMEM_CMP_EQ && _SHMEM_SYNC_VALUE == SHMEM_SYNC_VALUE);
    CHECK(_SHMEM_BCAST_SYNC_SIZE == SHMEM_BCAST_SYNC_SIZE);
    shmem_barrier_all();
    shfree(x);
    shmem_finalize();
    if (me == 0) printf("legacy: ok on %d PEs\n", n);
    return 0;
}
