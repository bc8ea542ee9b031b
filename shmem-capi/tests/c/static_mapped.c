/* Static data between PEs of one node: mapped (loads, stores and CPU
 * atomics through a shared mapping, shmem_ptr non-NULL) when the process
 * had one thread at shmem_init; with "threaded" a thread runs during
 * shmem_init, the data stays private and the same calls go through
 * process_vm_writev/readv and the AMO service. Same results either way. */
#include <shmem.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>
#include "check.h"

#define BIG (1 << 16)
static long big[BIG];                 /* .bss */
long initialised[4] = {11, 22, 33, 44}; /* .data */
static long counter;
static long flag;
static int words[64];
static int pipe_fds[2];

static void *idle(void *arg) {
    char c;
    (void)arg;
    /* Alive across shmem_init; ends when main writes to the pipe. */
    if (read(pipe_fds[0], &c, 1) < 0) return NULL;
    return NULL;
}

int main(int argc, char **argv) {
    int threaded = argc > 1 && strcmp(argv[1], "threaded") == 0;
    pthread_t t;
    big[7] = 77; /* written before init: must survive the move */
    if (threaded) {
        CHECK(pipe(pipe_fds) == 0);
        CHECK(pthread_create(&t, NULL, idle, NULL) == 0);
    }
    shmem_init();
    int me = shmem_my_pe(), n = shmem_n_pes();
    int peer = (me + 1) % n;
    CHECK(initialised[0] == 11 && initialised[3] == 44);
    CHECK(big[7] == 77);
    long *remote = shmem_ptr(big, peer);
    if (threaded)
        CHECK(remote == NULL);
    else
        CHECK(remote != NULL);
    shmem_barrier_all();

    /* Every PE writes its slot on every PE, with p, put and through the
     * pointer where there is one. */
    for (int p = 0; p < n; p++) {
        shmem_long_p(&big[100 + me], 1000 + me, p);
        long v[3] = {me, me * 2, me * 3};
        shmem_long_put(&big[200 + 3 * me], v, 3, p);
    }
    if (remote) remote[300 + me] = 5000 + me;
    else shmem_long_p(&big[300 + me], 5000 + me, peer);
    shmem_barrier_all();
    for (int p = 0; p < n; p++) {
        CHECK(big[100 + p] == 1000 + p);
        CHECK(big[200 + 3 * p] == p && big[201 + 3 * p] == 2 * p && big[202 + 3 * p] == 3 * p);
    }
    int left = (me + n - 1) % n;
    CHECK(big[300 + left] == 5000 + left);
    CHECK(shmem_long_g(&big[100 + me], peer) == 1000 + me);
    long got[3];
    shmem_long_get(got, &big[200 + 3 * peer], 3, peer);
    CHECK(got[0] == peer && got[2] == 3 * peer);
    shmem_barrier_all();

    /* Atomics from every PE on PE 0's counter and on 32-bit words. */
    for (int i = 0; i < 1000; i++) {
        shmem_long_atomic_add(&counter, 1, 0);
        shmem_int_atomic_fetch_add(&words[i % 64], 1, 0);
    }
    shmem_barrier_all();
    if (me == 0) {
        CHECK(counter == 1000L * n);
        for (int i = 0; i < 64; i++)
            CHECK(words[i] == (1000 / 64 + (i < 1000 % 64)) * n);
    }
    CHECK(shmem_long_atomic_fetch(&counter, 0) == 1000L * n);
    shmem_barrier_all();

    /* A wait on static data is woken by a peer's p. */
    if (me == 0) {
        shmem_long_wait_until(&flag, SHMEM_CMP_EQ, (long)n - 1);
    } else {
        shmem_long_atomic_add(&flag, 1, 0);
    }
    shmem_barrier_all();
    if (me == 0) CHECK(flag == n - 1);

    shmem_finalize();
    if (threaded) {
        CHECK(write(pipe_fds[1], "x", 1) == 1);
        pthread_join(t, NULL);
    }
    if (me == 0) printf("static_mapped%s: ok on %d PEs\n", threaded ? " (threaded)" : "", n);
    return 0;
}
