/* Teams (split_strided, split_2d, translate_pe, get_config, destroy) and
   contexts (ctx_create, team_create_ctx, ctx_get_team, team-relative PEs). */
#include <shmem.h>
#include "check.h"

int main(void) {
    shmem_init();
    int me = shmem_my_pe(), n = shmem_n_pes();
    CHECK(shmem_team_my_pe(SHMEM_TEAM_WORLD) == me);
    CHECK(shmem_team_n_pes(SHMEM_TEAM_WORLD) == n);
    CHECK(shmem_team_n_pes(SHMEM_TEAM_SHARED) >= 1);
    CHECK(shmem_team_my_pe(SHMEM_TEAM_INVALID) == -1);
    CHECK(shmem_team_n_pes(SHMEM_TEAM_INVALID) == -1);

    /* even PEs */
    shmem_team_config_t conf = {.num_contexts = 2};
    shmem_team_t evens;
    int nev = (n + 1) / 2;
    CHECK(shmem_team_split_strided(SHMEM_TEAM_WORLD, 0, 2, nev, &conf, SHMEM_TEAM_NUM_CONTEXTS,
                                   &evens) == 0);
    if (me % 2 == 0) {
        CHECK(evens != SHMEM_TEAM_INVALID);
        CHECK(shmem_team_my_pe(evens) == me / 2 && shmem_team_n_pes(evens) == nev);
        CHECK(shmem_team_translate_pe(evens, 1 % nev, SHMEM_TEAM_WORLD) == (1 % nev) * 2);
        CHECK(shmem_team_translate_pe(SHMEM_TEAM_WORLD, me, evens) == me / 2);
        shmem_team_config_t got = {0};
        CHECK(shmem_team_get_config(evens, SHMEM_TEAM_NUM_CONTEXTS, &got) == 0);
        CHECK(got.num_contexts == 2);

        /* a context on the team numbers PEs within the team */
        int *box = NULL;
        shmem_ctx_t ctx;
        CHECK(shmem_team_create_ctx(evens, 0, &ctx) == 0);
        shmem_team_t back;
        CHECK(shmem_ctx_get_team(ctx, &back) == 0 && back == evens);
        box = shmem_malloc(sizeof(int) * 0 + 0); /* malloc(0): NULL on all PEs */
        CHECK(box == NULL);
        static int inbox = -1;
        int right = (shmem_team_my_pe(evens) + 1) % nev;
        shmem_ctx_int_p(ctx, &inbox, me, right);  /* team PE right = world 2*right */
        shmem_ctx_quiet(ctx);
        CHECK(shmem_sync(evens) == 0);
        int left_world = ((shmem_team_my_pe(evens) + nev - 1) % nev) * 2;
        CHECK(inbox == left_world);
        shmem_ctx_destroy(ctx);
        shmem_team_destroy(evens);
    } else {
        CHECK(evens == SHMEM_TEAM_INVALID);
        CHECK(shmem_team_translate_pe(SHMEM_TEAM_WORLD, me, SHMEM_TEAM_INVALID) == -1);
        int *box = shmem_malloc(0);
        CHECK(box == NULL);
    }
    shmem_barrier_all();

    /* 2-D grid with 2 columns */
    shmem_team_t xt, yt;
    CHECK(shmem_team_split_2d(SHMEM_TEAM_WORLD, 2, NULL, 0, &xt, NULL, 0, &yt) == 0);
    CHECK(shmem_team_my_pe(xt) == me % 2 && shmem_team_my_pe(yt) == me / 2);
    CHECK(shmem_team_n_pes(yt) == (n - me % 2 + 1) / 2);
    CHECK(shmem_team_translate_pe(yt, 0, SHMEM_TEAM_WORLD) == me % 2);
    CHECK(shmem_team_sync(xt) == 0);
    shmem_team_destroy(xt);
    shmem_team_destroy(yt);

    /* the default context and world-team contexts */
    shmem_team_t t;
    CHECK(shmem_ctx_get_team(SHMEM_CTX_DEFAULT, &t) == 0 && t == SHMEM_TEAM_WORLD);
    shmem_ctx_t wctx;
    CHECK(shmem_team_create_ctx(SHMEM_TEAM_WORLD, SHMEM_CTX_SERIALIZED, &wctx) == 0);
    shmem_ctx_fence(wctx);
    shmem_ctx_destroy(wctx);
    shmem_ctx_t bad;
    CHECK(shmem_team_create_ctx(SHMEM_TEAM_INVALID, 0, &bad) != 0);
    CHECK(bad == SHMEM_CTX_INVALID);
    CHECK(shmem_ctx_get_team(SHMEM_CTX_INVALID, &t) != 0 && t == SHMEM_TEAM_INVALID);
    /* An invalid parent or team: nonzero, and the outputs are invalid. */
    shmem_team_t x = SHMEM_TEAM_WORLD, y = SHMEM_TEAM_WORLD, s = SHMEM_TEAM_WORLD;
    CHECK(shmem_team_split_strided(SHMEM_TEAM_INVALID, 0, 1, 1, NULL, 0, &s) != 0);
    CHECK(s == SHMEM_TEAM_INVALID);
    CHECK(shmem_team_split_2d(SHMEM_TEAM_INVALID, 1, NULL, 0, &x, NULL, 0, &y) != 0);
    CHECK(x == SHMEM_TEAM_INVALID && y == SHMEM_TEAM_INVALID);
    shmem_team_config_t cfg;
    CHECK(shmem_team_get_config(SHMEM_TEAM_INVALID, SHMEM_TEAM_NUM_CONTEXTS, &cfg) != 0);
    shmem_barrier_all();
    shmem_finalize();
    if (me == 0) printf("teams_ctx: ok on %d PEs\n", n);
    return 0;
}
