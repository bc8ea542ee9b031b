/* Must not compile, as C11 or C++17: the bitwise atomics have no double
   form; the error names shmem_generic_unsupported_type (C) or the routine
   in a static_assert (C++). */
#include <shmem.h>

static double x;

int main(void) {
    shmem_init();
    shmem_atomic_and(&x, 1.0, 0);
    shmem_finalize();
    return 0;
}
