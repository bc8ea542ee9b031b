/* Setup, query and memory management (OpenSHMEM 1.5 sections 9.1, 9.3). */
#include <shmem.h>
#include <string.h>
#include <stdint.h>
#include "check.h"

static int static_var;

int main(void) {
    int provided = -1;
    CHECK(shmem_init_thread(SHMEM_THREAD_MULTIPLE, &provided) == 0);
    CHECK(provided >= SHMEM_THREAD_SINGLE && provided <= SHMEM_THREAD_MULTIPLE);
    int q = -1;
    shmem_query_thread(&q);
    CHECK(q == provided);
    int me = shmem_my_pe(), n = shmem_n_pes();
    CHECK(n >= 1 && me >= 0 && me < n);

    int major = 0, minor = 0;
    shmem_info_get_version(&major, &minor);
    CHECK(major == SHMEM_MAJOR_VERSION && minor == SHMEM_MINOR_VERSION);
    char name[SHMEM_MAX_NAME_LEN];
    shmem_info_get_name(name);
    CHECK(strlen(name) > 0 && strlen(name) < SHMEM_MAX_NAME_LEN);
    CHECK(strlen(SHMEM_VENDOR_STRING) > 0);

    for (int pe = 0; pe < n; pe++) CHECK(shmem_pe_accessible(pe));
    CHECK(!shmem_pe_accessible(n));
    CHECK(!shmem_pe_accessible(-1));

    int local;
    long *heap = shmem_malloc(16 * sizeof(long));
    CHECK(heap != NULL);
    CHECK(shmem_addr_accessible(heap, (me + 1) % n));
    CHECK(shmem_addr_accessible(&static_var, (me + 1) % n));
    CHECK(!shmem_addr_accessible(&local, (me + 1) % n));

    /* shmem_ptr: our own object is its own address; peers on this node may
       be reachable by load/store. */
    CHECK(shmem_ptr(heap, me) == (void *)heap);
    CHECK(shmem_ptr(&local, me) == NULL);
    heap[0] = me;
    shmem_barrier_all();
    long *peer = shmem_ptr(heap, (me + 1) % n);
    if (peer) CHECK(*peer == (me + 1) % n);
    CHECK(shmem_team_ptr(SHMEM_TEAM_WORLD, heap, me) == (void *)heap);

    /* calloc zeroes, align aligns, realloc keeps the prefix, free takes NULL */
    long *z = shmem_calloc(100, sizeof(long));
    CHECK(z != NULL);
    for (int i = 0; i < 100; i++) CHECK(z[i] == 0);
    void *a = shmem_align(4096, 100);
    CHECK(a != NULL && ((uintptr_t)a % 4096) == 0);
    for (int i = 0; i < 16; i++) heap[i] = me * 100 + i;
    heap = shmem_realloc(heap, 1024 * sizeof(long));
    CHECK(heap != NULL);
    for (int i = 0; i < 16; i++) CHECK(heap[i] == me * 100 + i);
    shmem_barrier_all();
    long v = shmem_long_g(&heap[3], (me + 1) % n);
    CHECK(v == ((me + 1) % n) * 100 + 3);
    void *h = shmem_malloc_with_hints(64, SHMEM_MALLOC_ATOMICS_REMOTE);
    CHECK(h != NULL);
    CHECK(shmem_malloc(0) == NULL);
    shmem_free(NULL);
    shmem_free(h);
    shmem_free(a);
    shmem_free(z);
    shmem_barrier_all();
    shmem_free(heap);
    CHECK(shmem_initialized());
    shmem_finalize();
    CHECK(!shmem_initialized());
    if (me == 0) printf("setup: ok on %d PEs\n", n);
    return 0;
}
