/* Item: C11 generics for the bitwise atomics (and, or, xor; fetch and nbi
   forms; with and without a context) on the 1.5 types, and the bitwise
   reductions on int8_t..int64_t. */
#include <shmem.h>
#include <stdint.h>
#include "check.h"

static int32_t i32; static int64_t i64; static uint32_t u32; static uint64_t u64;
static unsigned int ui; static unsigned long ul; static unsigned long long ull;
static int8_t r8[2], d8[2]; static int16_t r16[2], d16[2];
static int32_t r32[2], d32[2]; static int64_t r64[2], d64[2];

#define BITS(var, T)                                                              \
    do {                                                                          \
        var = (T)~(T)0;                                                           \
        shmem_barrier_all();                                                      \
        /* every PE clears its own bit on the next PE, then sets bit 40 or 20 */ \
        shmem_atomic_and(&var, (T) ~((T)1 << me), (me + 1) % n);                  \
        shmem_barrier_all();                                                      \
        CHECK(var == (T)((T)~(T)0 & (T) ~((T)1 << ((me + n - 1) % n))));          \
        shmem_barrier_all();                                                      \
        var = 0;                                                                  \
        shmem_barrier_all();                                                      \
        shmem_atomic_or(SHMEM_CTX_DEFAULT, &var, (T)((T)1 << me), 0);             \
        shmem_barrier_all();                                                      \
        if (me == 0) CHECK(var == (T)(((T)1 << n) - 1));                          \
        shmem_barrier_all();                                                      \
        T old = shmem_atomic_fetch_xor(&var, (T)((T)1 << me), 0);                 \
        (void)old;                                                                \
        shmem_barrier_all();                                                      \
        if (me == 0) CHECK(var == 0);                                             \
        shmem_barrier_all();                                                      \
        T f1 = 1, f2 = 1, f3 = 1;                                                 \
        if (me == 0) {                                                            \
            shmem_atomic_fetch_or_nbi(&f1, &var, (T)6, n - 1);                    \
            shmem_quiet();                                                        \
            shmem_atomic_fetch_and_nbi(SHMEM_CTX_DEFAULT, &f2, &var, (T)2, n - 1); \
            shmem_quiet();                                                        \
            shmem_atomic_fetch_xor_nbi(&f3, &var, (T)3, n - 1);                   \
            shmem_quiet();                                                        \
            CHECK(f1 == 0 && f2 == 6 && f3 == 2);                                 \
            CHECK(shmem_atomic_fetch_and(SHMEM_CTX_DEFAULT, &var, (T)0, n - 1) == 1); \
            CHECK(shmem_atomic_fetch_or(&var, (T)0, n - 1) == 0);                 \
            shmem_atomic_xor(SHMEM_CTX_DEFAULT, &var, (T)5, n - 1);               \
            CHECK(shmem_atomic_fetch(&var, n - 1) == 5);                          \
        }                                                                         \
        shmem_barrier_all();                                                      \
    } while (0)

int main(void) {
    shmem_init();
    int me = shmem_my_pe(), n = shmem_n_pes();
    BITS(i32, int32_t);
    BITS(i64, int64_t);
    BITS(u32, uint32_t);
    BITS(u64, uint64_t);
    BITS(ui, unsigned int);
    BITS(ul, unsigned long);
    BITS(ull, unsigned long long);

#define RED(src, dst, T)                                                          \
    do {                                                                          \
        src[0] = (T)(1 << me); src[1] = (T)(me == 0 ? -1 : 3);                    \
        CHECK(shmem_or_reduce(SHMEM_TEAM_WORLD, dst, src, 2) == 0);               \
        CHECK(dst[0] == (T)((1 << n) - 1));                                       \
        CHECK(shmem_and_reduce(SHMEM_TEAM_WORLD, dst, src, 2) == 0);              \
        CHECK(dst[0] == 0 && dst[1] == 3);                                        \
        CHECK(shmem_xor_reduce(SHMEM_TEAM_WORLD, dst, src, 2) == 0);              \
        CHECK(dst[0] == (T)((1 << n) - 1));                                       \
        CHECK(dst[1] == (T)((n - 1) % 2 ? ~(T)3 : (T)-1));                        \
    } while (0)
    RED(r8, d8, int8_t);
    RED(r16, d16, int16_t);
    RED(r32, d32, int32_t);
    RED(r64, d64, int64_t);

    shmem_finalize();
    if (me == 0) printf("generics: ok on %d PEs\n", n);
    return 0;
}
