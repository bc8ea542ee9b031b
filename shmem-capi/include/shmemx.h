/*
 * shmemx.h: extensions of shmem-rs beyond OpenSHMEM 1.5.
 *
 *   - start-up without a launcher: a UniqueId made by rank 0 and shipped to
 *     the others by any means, or a tcp://host:port URL rank 0 binds;
 *   - engine selection (before init) and query;
 *   - streams: ordered queues of copies and barriers run by a worker thread
 *     (symmetric-heap buffers on both sides).
 *
 * Every int-returning call gives 0 on success and prints why on failure.
 */
#ifndef SHMEMX_H
#define SHMEMX_H

#include <shmem.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SHMEMX_UNIQUEID_BYTES 128
typedef struct {
    unsigned char internal[SHMEMX_UNIQUEID_BYTES];
} shmemx_uniqueid_t;

/* Rank 0: starts the job's config store and fills *uid. */
int shmemx_get_uniqueid(shmemx_uniqueid_t *uid);
/* Every PE, rank 0 included; mem_size 0 takes SHMEM_SYMMETRIC_SIZE. */
int shmemx_init_with_uniqueid(int rank, int nranks, size_t mem_size, const shmemx_uniqueid_t *uid);
/* Every PE; rank 0 binds url ("tcp://10.0.0.1:7000"). */
int shmemx_init_attr(int rank, int nranks, size_t mem_size, const char *url);

/* Before init: force an engine ("HCCS", "SDMA") for every peer. */
int shmemx_set_engine(const char *name);
/* After init: the engine that routes to pe. */
const char *shmemx_engine_for(int pe);

typedef struct shmemx_stream_handle *shmemx_stream_t;
int shmemx_stream_create(shmemx_stream_t *stream);
int shmemx_stream_destroy(shmemx_stream_t stream);
int shmemx_stream_sync(shmemx_stream_t stream);
int shmemx_putmem_on_stream(void *dest, const void *source, size_t nbytes, int pe,
                            shmemx_stream_t stream);
int shmemx_getmem_on_stream(void *dest, const void *source, size_t nbytes, int pe,
                            shmemx_stream_t stream);
int shmemx_barrier_all_on_stream(shmemx_stream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* SHMEMX_H */
