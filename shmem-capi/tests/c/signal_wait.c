/* put-with-signal, signal_wait_until, wait_until/test and the
   _all/_any/_some/_vector forms; heap and static variables. */
#include <shmem.h>
#include <stdint.h>
#include "check.h"

#define N 16
static uint64_t s_sig;
static long s_data[N];
static int s_flags[8];

int main(void) {
    shmem_init();
    int me = shmem_my_pe(), n = shmem_n_pes();
    int right = (me + 1) % n, left = (me + n - 1) % n;
    long *h_data = shmem_calloc(N, sizeof(long));
    uint64_t *h_sig = shmem_calloc(1, sizeof(uint64_t));
    long src[N];
    for (int i = 0; i < N; i++) src[i] = me * 100 + i;
    shmem_barrier_all();

    /* heap data + heap signal */
    shmem_long_put_signal(h_data, src, N, h_sig, 1, SHMEM_SIGNAL_SET, right);
    /* GE: at 4 PEs the left neighbour may already have moved on to its
       set-10/add-5 below before this PE first looks */
    uint64_t got = shmem_signal_wait_until(h_sig, SHMEM_CMP_GE, 1);
    CHECK(got == 1 || got == 10 || got == 15);
    for (int i = 0; i < N; i++) CHECK(h_data[i] == left * 100 + i);
    /* static data + static signal, ADD, nbi */
    shmem_long_put_signal_nbi(s_data, src, N, &s_sig, 3, SHMEM_SIGNAL_ADD, right);
    shmem_quiet();
    shmem_signal_wait_until(&s_sig, SHMEM_CMP_GE, 3);
    for (int i = 0; i < N; i++) CHECK(s_data[i] == left * 100 + i);
    uint64_t seen = shmem_signal_fetch(&s_sig); /* the next ADD 2 may already be in */
    CHECK(seen == 3 || seen == 5);
    shmem_putmem_signal(h_data, src, sizeof(long), &s_sig, 2, SHMEM_SIGNAL_ADD, right);
    shmem_signal_wait_until(&s_sig, SHMEM_CMP_EQ, 5);
    shmem_signal_set(h_sig, 10, right);
    shmem_signal_add(h_sig, 5, right);
    shmem_signal_wait_until(h_sig, SHMEM_CMP_EQ, 15);
    shmem_barrier_all();

    /* wait_until on a static int set by a peer's p */
    shmem_int_p(&s_flags[0], 42, right);
    shmem_int_wait_until(&s_flags[0], SHMEM_CMP_EQ, 42);
    shmem_wait_until(&s_flags[0], SHMEM_CMP_GT, 41);
    CHECK(shmem_int_test(&s_flags[0], SHMEM_CMP_NE, 0));
    CHECK(!shmem_test(&s_flags[0], SHMEM_CMP_LT, 42));
    shmem_barrier_all();

    /* array forms on heap flags: left neighbour sets flags 1 and 3 */
    int *flags = shmem_calloc(8, sizeof(int));
    CHECK(shmem_int_test_any(flags, 8, NULL, SHMEM_CMP_EQ, 1) == SIZE_MAX);
    shmem_barrier_all();
    shmem_int_p(&flags[1], 1, right);
    shmem_int_p(&flags[3], 1, right);
    size_t which = shmem_int_wait_until_any(flags, 8, NULL, SHMEM_CMP_EQ, 1);
    CHECK(which == 1 || which == 3);
    int status[8] = {1, 0, 1, 0, 1, 1, 1, 1}; /* only 1 and 3 watched */
    shmem_int_wait_until_all(flags, 8, status, SHMEM_CMP_EQ, 1);
    size_t idx[8];
    size_t k = shmem_int_wait_until_some(flags, 8, idx, NULL, SHMEM_CMP_EQ, 1);
    CHECK(k == 2 && idx[0] == 1 && idx[1] == 3);
    CHECK(shmem_int_test_some(flags, 8, idx, NULL, SHMEM_CMP_EQ, 0) == 6);
    CHECK(shmem_int_test_all(flags, 8, status, SHMEM_CMP_EQ, 1));
    int all_masked[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    CHECK(shmem_int_wait_until_any(flags, 8, all_masked, SHMEM_CMP_EQ, 7) == SIZE_MAX);
    int want[8] = {0, 1, 0, 1, 0, 0, 0, 0};
    shmem_int_wait_until_all_vector(flags, 8, NULL, SHMEM_CMP_EQ, want);
    CHECK(shmem_int_test_all_vector(flags, 8, NULL, SHMEM_CMP_EQ, want));
    CHECK(shmem_int_test_any_vector(flags, 8, NULL, SHMEM_CMP_NE, want) == SIZE_MAX);
    /* every entry is ready: any index may come back (turns rotate) */
    CHECK(shmem_int_wait_until_any_vector(flags, 8, NULL, SHMEM_CMP_GE, want) < 8);
    CHECK(shmem_int_wait_until_some_vector(flags, 8, idx, NULL, SHMEM_CMP_EQ, want) == 8);
    CHECK(shmem_int_test_some_vector(flags, 8, idx, status, SHMEM_CMP_EQ, want) == 2);
    shmem_barrier_all();

    /* 64-bit and 16-bit watch types, deprecated shmem_wait */
    uint64_t *u = shmem_calloc(1, 8);
    short *sh = shmem_calloc(1, sizeof(short));
    long *lw = shmem_calloc(1, sizeof(long));
    shmem_barrier_all();
    shmem_uint64_atomic_set(u, 7, right);
    shmem_short_p(sh, -3, right);
    shmem_long_p(lw, 1, right);
    shmem_uint64_wait_until(u, SHMEM_CMP_EQ, 7);
    shmem_short_wait_until(sh, SHMEM_CMP_LT, 0);
    shmem_wait(lw, 0);
    CHECK(*lw == 1);
    shmem_barrier_all();
    shmem_free(lw);
    shmem_free(sh);
    shmem_free(u);
    shmem_free(flags);
    shmem_free(h_sig);
    shmem_free(h_data);
    shmem_finalize();
    if (me == 0) printf("signal_wait: ok on %d PEs\n", n);
    return 0;
}
