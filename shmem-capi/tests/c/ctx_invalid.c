/* Item: shmem_ctx_quiet, shmem_ctx_fence and shmem_ctx_destroy on
   SHMEM_CTX_INVALID are no-ops (OpenSHMEM 1.5). */
#include <shmem.h>
#include "check.h"

static int x;

int main(void) {
    shmem_init();
    int me = shmem_my_pe(), n = shmem_n_pes();
    shmem_ctx_t ctx = SHMEM_CTX_INVALID;
    shmem_ctx_quiet(SHMEM_CTX_INVALID);
    shmem_ctx_fence(SHMEM_CTX_INVALID);
    shmem_ctx_destroy(SHMEM_CTX_INVALID);
    /* a failed create leaves the handle invalid; the same calls still work */
    if (shmem_team_create_ctx(SHMEM_TEAM_INVALID, 0, &ctx) != 0) {
        CHECK(ctx == SHMEM_CTX_INVALID);
        shmem_ctx_quiet(ctx);
        shmem_ctx_fence(ctx);
        shmem_ctx_destroy(ctx);
    }
    /* the library still works afterwards */
    shmem_int_p(&x, me + 1, (me + 1) % n);
    shmem_barrier_all();
    CHECK(x == (me + n - 1) % n + 1);
    shmem_finalize();
    if (me == 0) printf("ctx_invalid: ok on %d PEs\n", n);
    return 0;
}
