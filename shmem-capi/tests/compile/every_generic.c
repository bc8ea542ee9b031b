/*
 * Instantiates every OpenSHMEM 1.5 type-generic interface for every type
 * the specification lists for it (the lists below are written from the
 * spec's tables, independently of shmem.h's own lists). Compiled and linked
 * by tests/c_api.rs as C11 (gcc -std=c11 -Wall -Wextra -pedantic -Werror)
 * and as C++17 (g++ -std=c++17, same warnings), with the generic names and,
 * with EVERY_TYPED_NAME defined, with the typed names. It is never run:
 * linking proves every name exists.
 */
#include <shmem.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#define CPLXF std::complex<float>
#define CPLXD std::complex<double>
#else
#define CPLXF float _Complex
#define CPLXD double _Complex
#endif
#ifdef EVERY_TYPED_NAME
/* the typed name of each call (compiled this way as C++ too) */
#define G(op, N) shmem_##N##_##op
#define GC(op, N) shmem_ctx_##N##_##op
#else
#define G(op, N) shmem_##op
#define GC(op, N) shmem_##op
#endif

/* Standard RMA types (also broadcast, collect, fcollect, alltoall(s)). */
#define SPEC_RMA(X)                                                                      \
    X(float, float) X(double, double) X(long double, longdouble) X(char, char)           \
    X(signed char, schar) X(short, short) X(int, int) X(long, long)                      \
    X(long long, longlong) X(unsigned char, uchar) X(unsigned short, ushort)             \
    X(unsigned int, uint) X(unsigned long, ulong) X(unsigned long long, ulonglong)       \
    X(int8_t, int8) X(int16_t, int16) X(int32_t, int32) X(int64_t, int64)                \
    X(uint8_t, uint8) X(uint16_t, uint16) X(uint32_t, uint32) X(uint64_t, uint64)        \
    X(size_t, size) X(ptrdiff_t, ptrdiff)
/* Standard AMO types. */
#define SPEC_AMO_STD(X)                                                                  \
    X(int, int) X(long, long) X(long long, longlong) X(unsigned int, uint)               \
    X(unsigned long, ulong) X(unsigned long long, ulonglong) X(int32_t, int32)           \
    X(int64_t, int64) X(uint32_t, uint32) X(uint64_t, uint64) X(size_t, size)            \
    X(ptrdiff_t, ptrdiff)
/* Extended AMO types: the standard ones and float, double. */
#define SPEC_AMO_EXT(X) SPEC_AMO_STD(X) X(float, float) X(double, double)
/* Bitwise AMO types. */
#define SPEC_AMO_BIT(X)                                                                  \
    X(unsigned int, uint) X(unsigned long, ulong) X(unsigned long long, ulonglong)       \
    X(int32_t, int32) X(int64_t, int64) X(uint32_t, uint32) X(uint64_t, uint64)
/* Point-to-point synchronisation types. */
#define SPEC_P2P(X)                                                                      \
    X(short, short) X(int, int) X(long, long) X(long long, longlong)                     \
    X(unsigned short, ushort) X(unsigned int, uint) X(unsigned long, ulong)              \
    X(unsigned long long, ulonglong) X(int32_t, int32) X(int64_t, int64)                 \
    X(uint32_t, uint32) X(uint64_t, uint64) X(size_t, size) X(ptrdiff_t, ptrdiff)
/* Reduction types: bitwise (and, or, xor), ordered (min, max), arithmetic
   (sum, prod: the ordered ones and the complex types). */
#define SPEC_RED_BIT(X)                                                                  \
    X(unsigned char, uchar) X(unsigned short, ushort) X(unsigned int, uint)              \
    X(unsigned long, ulong) X(unsigned long long, ulonglong) X(int8_t, int8)             \
    X(int16_t, int16) X(int32_t, int32) X(int64_t, int64) X(uint8_t, uint8)              \
    X(uint16_t, uint16) X(uint32_t, uint32) X(uint64_t, uint64) X(size_t, size)
#define SPEC_RED_MINMAX(X)                                                               \
    X(char, char) X(signed char, schar) X(short, short) X(int, int) X(long, long)        \
    X(long long, longlong) X(ptrdiff_t, ptrdiff) X(unsigned char, uchar)                 \
    X(unsigned short, ushort) X(unsigned int, uint) X(unsigned long, ulong)              \
    X(unsigned long long, ulonglong) X(int8_t, int8) X(int16_t, int16)                   \
    X(int32_t, int32) X(int64_t, int64) X(uint8_t, uint8) X(uint16_t, uint16)            \
    X(uint32_t, uint32) X(uint64_t, uint64) X(size_t, size) X(float, float)              \
    X(double, double) X(long double, longdouble)
#define SPEC_RED_ARITH(X) SPEC_RED_MINMAX(X) X(CPLXD, complexd) X(CPLXF, complexf)

static shmem_ctx_t ctx;
static uint64_t sig;

#define RMA(T, N)                                                              \
    {                                                                          \
        static T d[8], s[8];                                                   \
        const T *cs = s;                                                       \
        T v = d[0];                                                            \
        G(put, N)(d, s, 1, 0);            GC(put, N)(ctx, d, s, 1, 0);         \
        G(get, N)(d, s, 1, 0);            GC(get, N)(ctx, d, s, 1, 0);         \
        G(put_nbi, N)(d, s, 1, 0);        GC(put_nbi, N)(ctx, d, s, 1, 0);     \
        G(get_nbi, N)(d, s, 1, 0);        GC(get_nbi, N)(ctx, d, s, 1, 0);     \
        G(iput, N)(d, s, 1, 1, 1, 0);     GC(iput, N)(ctx, d, s, 1, 1, 1, 0);  \
        G(iget, N)(d, s, 1, 1, 1, 0);     GC(iget, N)(ctx, d, s, 1, 1, 1, 0);  \
        G(p, N)(d, v, 0);                 GC(p, N)(ctx, d, v, 0);              \
        v = G(g, N)(cs, 0);               v = GC(g, N)(ctx, cs, 0);            \
        G(put_signal, N)(d, s, 1, &sig, 1, SHMEM_SIGNAL_SET, 0);               \
        GC(put_signal, N)(ctx, d, s, 1, &sig, 1, SHMEM_SIGNAL_ADD, 0);         \
        G(put_signal_nbi, N)(d, s, 1, &sig, 1, SHMEM_SIGNAL_SET, 0);           \
        GC(put_signal_nbi, N)(ctx, d, s, 1, &sig, 1, SHMEM_SIGNAL_ADD, 0);     \
        G(broadcast, N)(SHMEM_TEAM_WORLD, d, s, 1, 0);                         \
        G(collect, N)(SHMEM_TEAM_WORLD, d, s, 1);                              \
        G(fcollect, N)(SHMEM_TEAM_WORLD, d, s, 1);                             \
        G(alltoall, N)(SHMEM_TEAM_WORLD, d, s, 1);                             \
        G(alltoalls, N)(SHMEM_TEAM_WORLD, d, s, 1, 1, 1);                      \
        d[1] = v;                                                              \
    }

#define AMO_EXT(T, N)                                                          \
    {                                                                          \
        static T d, f;                                                         \
        const T *cd = &d;                                                      \
        T v = 1;                                                               \
        v = G(atomic_fetch, N)(cd, 0);    v = GC(atomic_fetch, N)(ctx, cd, 0); \
        G(atomic_set, N)(&d, v, 0);       GC(atomic_set, N)(ctx, &d, v, 0);    \
        v = G(atomic_swap, N)(&d, v, 0);  v = GC(atomic_swap, N)(ctx, &d, v, 0); \
        G(atomic_fetch_nbi, N)(&f, cd, 0);                                     \
        GC(atomic_fetch_nbi, N)(ctx, &f, cd, 0);                               \
        G(atomic_swap_nbi, N)(&f, &d, v, 0);                                   \
        GC(atomic_swap_nbi, N)(ctx, &f, &d, v, 0);                             \
    }

#define AMO_STD(T, N)                                                          \
    {                                                                          \
        static T d, f;                                                         \
        T v = 1;                                                               \
        v = G(atomic_compare_swap, N)(&d, v, v, 0);                            \
        v = GC(atomic_compare_swap, N)(ctx, &d, v, v, 0);                      \
        v = G(atomic_fetch_inc, N)(&d, 0);  v = GC(atomic_fetch_inc, N)(ctx, &d, 0); \
        G(atomic_inc, N)(&d, 0);            GC(atomic_inc, N)(ctx, &d, 0);     \
        v = G(atomic_fetch_add, N)(&d, v, 0);                                  \
        v = GC(atomic_fetch_add, N)(ctx, &d, v, 0);                            \
        G(atomic_add, N)(&d, v, 0);         GC(atomic_add, N)(ctx, &d, v, 0);  \
        G(atomic_compare_swap_nbi, N)(&f, &d, v, v, 0);                        \
        GC(atomic_compare_swap_nbi, N)(ctx, &f, &d, v, v, 0);                  \
        G(atomic_fetch_inc_nbi, N)(&f, &d, 0);                                 \
        GC(atomic_fetch_inc_nbi, N)(ctx, &f, &d, 0);                           \
        G(atomic_fetch_add_nbi, N)(&f, &d, v, 0);                              \
        GC(atomic_fetch_add_nbi, N)(ctx, &f, &d, v, 0);                        \
    }

#define AMO_BIT(T, N)                                                          \
    {                                                                          \
        static T d, f;                                                         \
        T v = 1;                                                               \
        v = G(atomic_fetch_and, N)(&d, v, 0); v = GC(atomic_fetch_and, N)(ctx, &d, v, 0); \
        v = G(atomic_fetch_or, N)(&d, v, 0);  v = GC(atomic_fetch_or, N)(ctx, &d, v, 0);  \
        v = G(atomic_fetch_xor, N)(&d, v, 0); v = GC(atomic_fetch_xor, N)(ctx, &d, v, 0); \
        G(atomic_and, N)(&d, v, 0);  GC(atomic_and, N)(ctx, &d, v, 0);         \
        G(atomic_or, N)(&d, v, 0);   GC(atomic_or, N)(ctx, &d, v, 0);          \
        G(atomic_xor, N)(&d, v, 0);  GC(atomic_xor, N)(ctx, &d, v, 0);         \
        G(atomic_fetch_and_nbi, N)(&f, &d, v, 0);                              \
        GC(atomic_fetch_and_nbi, N)(ctx, &f, &d, v, 0);                        \
        G(atomic_fetch_or_nbi, N)(&f, &d, v, 0);                               \
        GC(atomic_fetch_or_nbi, N)(ctx, &f, &d, v, 0);                         \
        G(atomic_fetch_xor_nbi, N)(&f, &d, v, 0);                              \
        GC(atomic_fetch_xor_nbi, N)(ctx, &f, &d, v, 0);                        \
    }

#define P2P(T, N)                                                              \
    {                                                                          \
        static T iv[4];                                                        \
        T cmpv[4] = {0, 0, 0, 0};                                              \
        size_t idx[4];                                                         \
        int status[4] = {0, 0, 0, 0};                                          \
        G(wait_until, N)(iv, SHMEM_CMP_EQ, cmpv[0]);                           \
        G(wait_until_all, N)(iv, 4, status, SHMEM_CMP_EQ, cmpv[0]);            \
        (void)G(wait_until_any, N)(iv, 4, status, SHMEM_CMP_EQ, cmpv[0]);      \
        (void)G(wait_until_some, N)(iv, 4, idx, status, SHMEM_CMP_EQ, cmpv[0]); \
        G(wait_until_all_vector, N)(iv, 4, status, SHMEM_CMP_EQ, cmpv);        \
        (void)G(wait_until_any_vector, N)(iv, 4, status, SHMEM_CMP_EQ, cmpv);  \
        (void)G(wait_until_some_vector, N)(iv, 4, idx, status, SHMEM_CMP_EQ, cmpv); \
        (void)G(test, N)(iv, SHMEM_CMP_EQ, cmpv[0]);                           \
        (void)G(test_all, N)(iv, 4, status, SHMEM_CMP_EQ, cmpv[0]);            \
        (void)G(test_any, N)(iv, 4, status, SHMEM_CMP_EQ, cmpv[0]);            \
        (void)G(test_some, N)(iv, 4, idx, status, SHMEM_CMP_EQ, cmpv[0]);      \
        (void)G(test_all_vector, N)(iv, 4, status, SHMEM_CMP_EQ, cmpv);        \
        (void)G(test_any_vector, N)(iv, 4, status, SHMEM_CMP_EQ, cmpv);        \
        (void)G(test_some_vector, N)(iv, 4, idx, status, SHMEM_CMP_EQ, cmpv);  \
    }

#define RED(op, T, N)                                                          \
    {                                                                          \
        static T d[2], s[2];                                                   \
        (void)G(op##_reduce, N)(SHMEM_TEAM_WORLD, d, s, 2);                    \
    }
#define RED_BIT(T, N) RED(and, T, N) RED(or, T, N) RED(xor, T, N)
#define RED_MINMAX(T, N) RED(min, T, N) RED(max, T, N)
#define RED_ARITH(T, N) RED(sum, T, N) RED(prod, T, N)

#if !defined(__cplusplus) && !defined(EVERY_TYPED_NAME)
/* The 1.4 C11 generic names that 1.5 keeps as deprecated: standard AMO
   types for the arithmetic ones, extended for fetch, set and swap. */
#define DEP_STD(T, N)                                                          \
    {                                                                          \
        static T d;                                                            \
        T v = 1;                                                               \
        v = shmem_fadd(&d, v, 0);         v = shmem_finc(&d, 0);               \
        shmem_add(&d, v, 0);              shmem_inc(&d, 0);                    \
        v = shmem_cswap(&d, v, v, 0);     (void)v;                             \
    }
#define DEP_EXT(T, N)                                                          \
    {                                                                          \
        static T d;                                                            \
        const T *cd = &d;                                                      \
        T v = 1;                                                               \
        v = shmem_swap(&d, v, 0);         v = shmem_fetch(cd, 0);              \
        shmem_set(&d, v, 0);                                                   \
    }
#else
#define DEP_STD(T, N)
#define DEP_EXT(T, N)
#endif

int main(int argc, char **argv) {
    (void)argv;
    shmem_init();
    ctx = SHMEM_CTX_DEFAULT;
    if (argc > 1000) { /* never run: the calls only need to compile and link */
        SPEC_RMA(RMA)
        SPEC_AMO_EXT(AMO_EXT)
        SPEC_AMO_STD(AMO_STD)
        SPEC_AMO_BIT(AMO_BIT)
        SPEC_AMO_STD(DEP_STD)
        SPEC_AMO_EXT(DEP_EXT)
        SPEC_P2P(P2P)
        SPEC_RED_BIT(RED_BIT)
        SPEC_RED_MINMAX(RED_MINMAX)
        SPEC_RED_ARITH(RED_ARITH)
    }
    shmem_finalize();
    return 0;
}
