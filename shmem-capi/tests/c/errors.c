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
    } else if (strcmp(argv[1], "small_dest") == 0) {
        /* collect's destination is followed by the source on the heap: a
           count whose total does not fit in between is refused instead of
           writing over the source */
        static long psync[SHMEM_COLLECT_SYNC_SIZE];
        int *dest = shmem_malloc(4 * sizeof(int));
        int *src = shmem_malloc(4096 * sizeof(int));
        ptrdiff_t gap = (char *)src - (char *)dest;
        size_t each = (size_t)gap / sizeof(int) / (size_t)n + 1;
        if (gap <= 0 || each > 4096) return 5; /* the layout this case needs */
        shmem_collect32(dest, src, each, 0, 0, n, psync);
    } else if (strcmp(argv[1], "not_in_set") == 0 && me == 0) {
        /* the active set {1} does not hold PE 0 */
        static long psync[SHMEM_BARRIER_SYNC_SIZE];
        shmem_barrier(1, 0, 1, psync);
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
