/* Distributed locks protect a read-modify-write done with get and put. */
#include <shmem.h>
#include "check.h"

static long lock;          /* static lock */
static long counter;

int main(void) {
    shmem_init();
    int me = shmem_my_pe(), n = shmem_n_pes();
    long *hlock = shmem_calloc(1, sizeof(long));
    for (int i = 0; i < 20; i++) {
        shmem_set_lock(&lock);
        long v = shmem_long_g(&counter, 0);
        shmem_long_p(&counter, v + 1, 0);
        shmem_quiet();
        shmem_clear_lock(&lock);
    }
    int got = 0;
    while (!got) {
        if (shmem_test_lock(hlock) == 0) {
            long v = shmem_long_g(&counter, n - 1);
            shmem_long_p(&counter, v + 1, n - 1);
            shmem_clear_lock(hlock);
            got = 1;
        }
    }
    shmem_barrier_all();
    if (me == 0) CHECK(counter == 20L * n + (n == 1 ? 1 : 0));
    if (me == n - 1 && n > 1) CHECK(counter == n);
    shmem_barrier_all();
    shmem_free(hlock);
    shmem_finalize();
    if (me == 0) printf("locks: ok on %d PEs\n", n);
    return 0;
}
