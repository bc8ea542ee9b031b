/* Undefined uses end the job with a message, never a crash:
   argv[1] names the case, argv[2] the file stderr goes to. */
#include <shmem.h>
#include <string.h>
#include "check.h"

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    /* Append: every PE writes here, and a later open must not erase an
       earlier PE's message. */
    if (!freopen(argv[2], "a", stderr)) return 2;
    if (strcmp(argv[1], "before_init") == 0) {
        return shmem_my_pe() == 0 ? 3 : 4;   /* never returns */
    }
    shmem_init();
    int me = shmem_my_pe(), n = shmem_n_pes();
    int local = 0;
    if (strcmp(argv[1], "not_symmetric") == 0 && me == 0) {
        shmem_int_p(&local, 1, n - 1);
    } else if (strcmp(argv[1], "bad_pe") == 0 && me == 0) {
        static int x;
        shmem_int_p(&x, 1, n);
    } else if (strcmp(argv[1], "use_after_free") == 0) {
        int *p = shmem_malloc(64 * sizeof(int));
        shmem_free(p);
        if (me == 0) shmem_int_p(p, 1, n - 1);
    } else if (strcmp(argv[1], "global_exit") == 0 && me == n - 1) {
        shmem_global_exit(7);
    }
    shmem_barrier_all();
    shmem_finalize();
    return 0;
}
