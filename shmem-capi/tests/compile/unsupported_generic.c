/* Must not compile: the bitwise atomics have no double form, and the
   generic selection names shmem_generic_unsupported_type in its error. */
#include <shmem.h>

static double x;

int main(void) {
    shmem_init();
    shmem_atomic_and(&x, 1.0, 0);
    shmem_finalize();
    return 0;
}
