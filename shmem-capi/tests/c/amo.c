/* Atomics: standard, extended, bitwise, nbi, deprecated names and C11
   generic forms, on the heap and on static data. */
#include <shmem.h>
#include <stdint.h>
#include "check.h"

static long s_counter;
static unsigned int s_bits;
static int s_cswap = -1;
static double s_dbl;
static uint64_t s_u64;

int main(void) {
    shmem_init();
    int me = shmem_my_pe(), n = shmem_n_pes();
    long *h_counter = shmem_calloc(1, sizeof(long));
    int *h_int = shmem_calloc(4, sizeof(int));
    uint64_t *h_bits = shmem_calloc(1, sizeof(uint64_t));
    shmem_barrier_all();

    /* everyone adds to PE 0 (heap and static) */
    for (int i = 0; i < 10; i++) {
        shmem_long_atomic_add(h_counter, me + 1, 0);
        shmem_long_atomic_add(&s_counter, me + 1, 0);
        shmem_long_atomic_inc(h_counter, 0);
        shmem_atomic_inc(&s_counter, 0);
    }
    shmem_barrier_all();
    long expect = 10L * (n * (n + 1) / 2) + 10L * n;
    if (me == 0) CHECK(*h_counter == expect && s_counter == expect);
    CHECK(shmem_long_atomic_fetch(h_counter, 0) == expect);
    CHECK(shmem_long_atomic_fetch(&s_counter, 0) == expect);
    shmem_barrier_all();

    /* fetch_inc hands out distinct tickets */
    int t1 = shmem_int_atomic_fetch_inc(&h_int[0], 0);
    CHECK(t1 >= 0 && t1 < n);
    int ticket = shmem_int_atomic_fetch_add(&h_int[1], 1, n - 1);
    CHECK(ticket >= 0 && ticket < n);
    shmem_barrier_all();
    if (me == n - 1) CHECK(h_int[1] == n);

    /* compare-and-swap: exactly one PE wins, heap and static */
    int old = shmem_int_atomic_compare_swap(&s_cswap, -1, me, 0);
    int won = (old == -1);
    int *wins = shmem_calloc(1, sizeof(int));
    shmem_barrier_all();
    shmem_int_atomic_add(wins, won, 0);
    shmem_barrier_all();
    if (me == 0) CHECK(*wins == 1 && s_cswap >= 0 && s_cswap < n);

    /* set/swap/fetch on float types */
    shmem_barrier_all();
    if (me == 0) shmem_double_atomic_set(&s_dbl, 2.5, n - 1);
    shmem_barrier_all();
    if (me == n - 1) CHECK(s_dbl == 2.5);
    shmem_barrier_all();
    if (me == 0) {
        double prev = shmem_double_atomic_swap(&s_dbl, 4.0, n - 1);
        CHECK(prev == 2.5);
        CHECK(shmem_double_atomic_fetch(&s_dbl, n - 1) == 4.0);
    }
    shmem_barrier_all();

    /* bitwise: each PE sets its own bit */
    shmem_uint64_atomic_or(h_bits, 1ULL << me, 0);
    shmem_uint_atomic_fetch_or(&s_bits, 1u << me, 0);
    shmem_barrier_all();
    uint64_t all = (n == 64) ? ~0ULL : ((1ULL << n) - 1);
    if (me == 0) CHECK(*h_bits == all && s_bits == (unsigned)all);
    shmem_barrier_all();
    shmem_uint64_atomic_and(h_bits, ~(1ULL << me), 0);
    shmem_uint_atomic_xor(&s_bits, 1u << me, 0);
    shmem_barrier_all();
    if (me == 0) CHECK(*h_bits == 0 && s_bits == 0);
    CHECK(shmem_uint64_atomic_fetch_xor(h_bits, 0, 0) == 0);
    shmem_barrier_all();

    /* nbi forms complete by quiet */
    uint64_t f = 99;
    shmem_uint64_atomic_fetch_add_nbi(&f, &s_u64, 5, 0);
    shmem_quiet();
    CHECK(f % 5 == 0 && f < 5ULL * n);
    long fl = -1;
    shmem_long_atomic_fetch_nbi(&fl, h_counter, 0);
    shmem_quiet();
    CHECK(fl == expect);
    shmem_barrier_all();
    if (me == 0) CHECK(s_u64 == 5ULL * n);

    /* ctx forms and team contexts */
    shmem_ctx_t ctx;
    CHECK(shmem_ctx_create(0, &ctx) == 0);
    shmem_ctx_long_atomic_add(ctx, h_counter, 1, 0);
    shmem_atomic_add(ctx, &s_counter, 1, 0);
    shmem_ctx_quiet(ctx);
    shmem_ctx_destroy(ctx);
    shmem_barrier_all();
    if (me == 0) CHECK(*h_counter == expect + n && s_counter == expect + n);
    shmem_barrier_all();

    /* deprecated names */
    int *legacy = shmem_calloc(1, sizeof(int));
    shmem_barrier_all();
    shmem_int_add(legacy, 2, 0);
    shmem_int_inc(legacy, 0);
    (void)shmem_int_fadd(legacy, 0, 0);
    (void)shmem_int_finc(legacy, 0);
    shmem_barrier_all();
    if (me == 0) {
        CHECK(*legacy == 4 * n);
        CHECK(shmem_int_cswap(legacy, 4 * n, -5, 0) == 4 * n);
        CHECK(shmem_int_swap(legacy, 6, 0) == -5);
        CHECK(shmem_int_fetch(legacy, 0) == 6);
        shmem_int_set(legacy, 0, 0);
        CHECK(shmem_long_swap(h_counter, 0, 0) == expect + n);
        CHECK(shmem_swap(h_counter, 3, 0) == 0);
    }
    shmem_barrier_all();
    shmem_free(legacy);
    shmem_free(wins);
    shmem_free(h_bits);
    shmem_free(h_int);
    shmem_free(h_counter);
    shmem_finalize();
    if (me == 0) printf("amo: ok on %d PEs\n", n);
    return 0;
}
