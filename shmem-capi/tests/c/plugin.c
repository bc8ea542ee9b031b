/* Runs on whatever engine routes the job; the test runs it with a run-time
   plugin engine forced (SHMEM_TRANSPORT_PLUGINS + SHMEM_TEST_ENGINE):
   put/get at several sizes, atomics from every PE, put-with-signal, on the
   symmetric heap only (a plugin engine need not reach static data). */
#include <shmem.h>
#include <stdint.h>
#include <string.h>
#include "check.h"

#define BIG (1 << 20)

int main(void) {
    shmem_init();
    int me = shmem_my_pe(), n = shmem_n_pes();
    int right = (me + 1) % n, left = (me + n - 1) % n;
    unsigned char *buf = shmem_calloc(BIG, 1);
    unsigned char *src = malloc(BIG), *back = malloc(BIG);
    long *counter = shmem_calloc(1, sizeof(long));
    uint64_t *sig = shmem_calloc(1, sizeof(uint64_t));
    long *words = shmem_calloc(64, sizeof(long));
    CHECK(buf && src && back && counter && sig && words);

    size_t sizes[] = {1, 7, 64, 4099, BIG};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t len = sizes[k];
        for (size_t i = 0; i < len; i++) src[i] = (unsigned char)(me * 31 + k * 7 + i);
        shmem_putmem(buf, src, len, right);
        shmem_barrier_all();
        for (size_t i = 0; i < len; i++) CHECK(buf[i] == (unsigned char)(left * 31 + k * 7 + i));
        shmem_getmem(back, buf, len, right);
        CHECK(memcmp(back, src, len) == 0);
        shmem_barrier_all();
    }

    for (int i = 0; i < 100; i++) shmem_long_atomic_add(counter, 1, 0);
    long old = shmem_long_atomic_fetch_add(counter, 1000, 0);
    CHECK(old >= 100 && old < 100 * n + 1000 * n);
    shmem_long_atomic_set(&words[me], me + 1, right);
    CHECK(shmem_long_atomic_compare_swap(&words[63], 0, 7, right) == 0 ||
          shmem_long_atomic_fetch(&words[63], right) == 7);
    shmem_barrier_all();
    if (me == 0) CHECK(*counter == 1100L * n);
    CHECK(words[left] == left + 1);

    long data[16];
    for (int i = 0; i < 16; i++) data[i] = me * 100 + i;
    shmem_long_put_signal(words + 16, data, 16, sig, 1, SHMEM_SIGNAL_ADD, right);
    CHECK(shmem_signal_wait_until(sig, SHMEM_CMP_EQ, 1) == 1);
    for (int i = 0; i < 16; i++) CHECK(words[16 + i] == left * 100 + i);

    shmem_barrier_all();
    shmem_free(words);
    shmem_free(sig);
    shmem_free(counter);
    shmem_free(buf);
    free(src);
    free(back);
    if (me == 0) printf("plugin.c: %d PEs ok\n", n);
    shmem_finalize();
    return 0;
}
