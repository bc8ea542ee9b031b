/* Item: shmem_test_any and shmem_wait_until_any take turns among ready
   entries: a loop that drains "any" reaches every entry. Every PE sets its
   flag on PE 0 once; PE 0 then sees all of them ready and must find each
   index before it finds one twice. */
#include <shmem.h>
#include <stdlib.h>
#include "check.h"

int main(void) {
    shmem_init();
    int me = shmem_my_pe(), n = shmem_n_pes();
    int *flags = shmem_calloc((size_t)n, sizeof(int));
    long *lf = shmem_calloc((size_t)n, sizeof(long));
    shmem_barrier_all();
    shmem_int_p(&flags[me], 1, 0);
    shmem_long_p(&lf[me], 1, 0);
    shmem_barrier_all();
    if (me == 0) {
        int seen[64] = {0};
        /* all ready and never consumed: turns must still reach each one */
        for (int k = 0; k < n; k++) {
            size_t i = shmem_int_test_any(flags, (size_t)n, NULL, SHMEM_CMP_EQ, 1);
            CHECK(i < (size_t)n);
            CHECK(!seen[i]);
            seen[i] = 1;
        }
        int seen2[64] = {0};
        for (int k = 0; k < n; k++) {
            size_t i = shmem_long_wait_until_any(lf, (size_t)n, NULL, SHMEM_CMP_EQ, 1);
            CHECK(i < (size_t)n && !seen2[i]);
            seen2[i] = 1;
        }
        /* with a status mask the masked entries are skipped */
        int status[64] = {0};
        status[0] = 1;
        for (int k = 0; k < 2 * n; k++) {
            size_t i = shmem_test_any(flags, (size_t)n, status, SHMEM_CMP_EQ, 1);
            CHECK(i != 0 && i < (size_t)n);
        }
        /* nothing ready: SIZE_MAX */
        CHECK(shmem_int_test_any(flags, (size_t)n, NULL, SHMEM_CMP_EQ, 2) == SIZE_MAX);
    }
    shmem_barrier_all();
    shmem_free(lf);
    shmem_free(flags);
    shmem_finalize();
    if (me == 0) printf("test_any_fair: ok on %d PEs\n", n);
    return 0;
}
