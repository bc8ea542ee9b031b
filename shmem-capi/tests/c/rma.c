/* RMA: put/get/p/g/iput/iget/nbi for types, sizes and mem, on the heap
   and on global/static data, with contexts and C11 generic names. */
#define _POSIX_C_SOURCE 200809L
#include <shmem.h>
#include <string.h>
#include <stdint.h>
#include <time.h>
#include "check.h"

#define N 64
static int s_int[N];          /* bss */
double g_dbl[N] = {1.0};      /* data */
static long double s_ld[4];
static uint8_t s_bytes[256];
static short s_stride[2 * N];
/* Larger than one staging round trip of a peer on another node (256 KiB). */
#define BIG (600 * 1024 + 3)
static unsigned char s_big[BIG];
static unsigned char big_src[BIG], big_got[BIG];
static long s_flag;

int main(void) {
    shmem_init();
    int me = shmem_my_pe(), n = shmem_n_pes();
    int right = (me + 1) % n, left = (me + n - 1) % n;
    int src[N];
    for (int i = 0; i < N; i++) src[i] = me * 1000 + i;

    /* typed put/get on heap and statics */
    int *h_int = shmem_malloc(N * sizeof(int));
    shmem_int_put(h_int, src, N, right);
    shmem_int_put(s_int, src, N, right);
    shmem_barrier_all();
    for (int i = 0; i < N; i++) CHECK(h_int[i] == left * 1000 + i && s_int[i] == left * 1000 + i);
    int got[N];
    shmem_int_get(got, s_int, N, right);
    for (int i = 0; i < N; i++) CHECK(got[i] == me * 1000 + i);
    shmem_int_get(got, h_int, N, left);
    for (int i = 0; i < N; i++) CHECK(got[i] == ((left + n - 1) % n) * 1000 + i);
    shmem_barrier_all();

    /* p/g for several types */
    shmem_double_p(&g_dbl[me % N], me + 0.5, right);
    shmem_barrier_all();
    CHECK(g_dbl[left % N] == left + 0.5);
    CHECK(shmem_double_g(&g_dbl[me % N], right) == me + 0.5);
    long double ld = 1.25L * me;
    shmem_longdouble_p(&s_ld[1], ld, right);
    shmem_barrier_all();
    CHECK(s_ld[1] == 1.25L * left);
    CHECK(shmem_longdouble_g(&s_ld[1], left) == 1.25L * ((left + n - 1) % n));
    shmem_barrier_all();

    /* sized and mem forms */
    uint64_t *h64 = shmem_calloc(N, 8);
    uint64_t v64[N];
    for (int i = 0; i < N; i++) v64[i] = ((uint64_t)me << 32) | i;
    shmem_put64(h64, v64, N, right);
    shmem_putmem(s_bytes, "hello", 6, right);
    shmem_put8(s_bytes + 8, "xy", 2, right);
    shmem_barrier_all();
    for (int i = 0; i < N; i++) CHECK(h64[i] == (((uint64_t)left << 32) | i));
    CHECK(strcmp((char *)s_bytes, "hello") == 0 && s_bytes[8] == 'x' && s_bytes[9] == 'y');
    uint64_t back[2];
    shmem_get128(back, h64, 1, me);
    CHECK(back[0] == h64[0] && back[1] == h64[1]);
    char text[6];
    shmem_getmem(text, s_bytes, 6, left);
    CHECK(strcmp(text, "hello") == 0);
    shmem_barrier_all();

    /* strided */
    short sv[N];
    for (int i = 0; i < N; i++) sv[i] = (short)(me * 100 + i);
    shmem_short_iput(s_stride, sv, 2, 1, N, right);
    shmem_barrier_all();
    for (int i = 0; i < N; i++) CHECK(s_stride[2 * i] == (short)(left * 100 + i));
    short sg[N];
    shmem_short_iget(sg, s_stride, 1, 2, N, right);
    for (int i = 0; i < N; i++) CHECK(sg[i] == (short)(me * 100 + i));
    int *h_str = shmem_calloc(2 * N, sizeof(int));
    shmem_iput32(h_str, src, 2, 1, N, right);
    shmem_barrier_all();
    for (int i = 0; i < N; i++) CHECK(h_str[2 * i] == left * 1000 + i && h_str[2 * i + 1] == 0);
    shmem_barrier_all();

    /* non-blocking: complete at quiet */
    int nb[N];
    for (int i = 0; i < N; i++) nb[i] = -i - me;
    shmem_int_put_nbi(h_int, nb, N, right);
    shmem_putmem_nbi(s_int, nb, sizeof nb, right);
    shmem_quiet();
    shmem_barrier_all();
    for (int i = 0; i < N; i++) CHECK(h_int[i] == -i - left && s_int[i] == -i - left);
    int nbg[N];
    shmem_int_get_nbi(nbg, h_int, N, right);
    shmem_quiet();
    for (int i = 0; i < N; i++) CHECK(nbg[i] == -i - me);
    shmem_barrier_all();

    /* contexts and C11 generic forms */
    shmem_ctx_t ctx;
    CHECK(shmem_ctx_create(SHMEM_CTX_PRIVATE, &ctx) == 0);
    shmem_ctx_int_p(ctx, &h_int[0], 7 + me, right);
    shmem_ctx_quiet(ctx);
    shmem_p(&h_int[1], 8 + me, right);
    shmem_p(ctx, &h_int[2], 9 + me, right);
    long lv = me;
    long *hl = shmem_malloc(sizeof(long));
    shmem_put(hl, &lv, 1, right);
    shmem_put(ctx, s_int + 3, src, 1, right);
    shmem_ctx_quiet(ctx);
    shmem_ctx_destroy(ctx);
    shmem_barrier_all();
    CHECK(h_int[0] == 7 + left && h_int[1] == 8 + left && h_int[2] == 9 + left);
    CHECK(*hl == left && s_int[3] == left * 1000);
    CHECK(shmem_g(&h_int[0], me) == 7 + left);
    long lg;
    shmem_get(&lg, hl, 1, left);
    CHECK(lg == (left + n - 1) % n);
    shmem_barrier_all();

    /* a large put and get on static data */
    for (int i = 0; i < BIG; i++) big_src[i] = (unsigned char)(i * 7 + me);
    shmem_putmem(s_big, big_src, BIG, right);
    shmem_barrier_all();
    for (int i = 0; i < BIG; i++) CHECK(s_big[i] == (unsigned char)(i * 7 + left));
    shmem_getmem(big_got, s_big, BIG, right);
    for (int i = 0; i < BIG; i++) CHECK(big_got[i] == (unsigned char)(i * 7 + me));
    shmem_barrier_all();

    /* a PE asleep in a wait on static data is woken by its left PE's put
       (from another host in the multi-host test) */
    struct timespec pause = {0, 100 * 1000 * 1000};
    nanosleep(&pause, NULL);
    shmem_long_p(&s_flag, 100 + me, right);
    shmem_long_wait_until(&s_flag, SHMEM_CMP_EQ, 100 + left);
    CHECK(shmem_long_g(&s_flag, right) == 100 + me);
    shmem_barrier_all();
    shmem_free(hl);
    shmem_free(h_str);
    shmem_free(h64);
    shmem_free(h_int);
    shmem_finalize();
    if (me == 0) printf("rma: ok on %d PEs\n", n);
    return 0;
}
