//! RoCE engine of the `shmem` library: RDMA verbs between nodes.
//!
//! Planned shape (not implemented yet, so nothing is registered and
//! `SHMEM_TEST_ENGINE=ROCE` reports that the engine is not linked): a
//! protection domain per job, the symmetric heap registered as one memory
//! region, a reliable-connected queue pair per remote peer, endpoints and
//! remote keys exchanged with one bootstrap allgather; put = RDMA WRITE,
//! get = RDMA READ, fetch-add / compare-swap = RDMA atomics. Two providers:
//! `hw` over the `ibverbs` crate (Cargo feature `ibverbs`) and `sw`, a
//! software verbs provider over TCP for hosts without RDMA hardware.
