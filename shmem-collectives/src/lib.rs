//! Teams and collectives of the `shmem` library, built only on the core
//! runtime's RMA, signals and waits, so every transport gets them for free.
//!
//! [`Collectives::new`] (collective over all PEs) allocates a pool of
//! scratch slots on the symmetric heap and builds the predefined teams
//! ([`Collectives::world`], [`Collectives::shared`]). New teams come from
//! [`Collectives::team_split_strided`] and [`Collectives::team_split_2d`];
//! a PE left out of a split gets `None` (OpenSHMEM's `SHMEM_TEAM_INVALID`).
//!
//! On a team, every member calls the same collectives in the same order:
//! [`barrier`](Collectives::barrier) / [`sync`](Collectives::sync),
//! [`broadcast`](Collectives::broadcast), [`collect`](Collectives::collect),
//! [`fcollect`](Collectives::fcollect), [`alltoall`](Collectives::alltoall),
//! [`alltoalls`](Collectives::alltoalls), reductions
//! ([`reduce`](Collectives::reduce) and `sum_reduce`, `and_reduce`, ...) and
//! prefix scans ([`scan`](Collectives::scan), `sum_inscan`, `sum_exscan`),
//! plus the paged [`kv_shuffle`](Collectives::kv_shuffle).
//!
//! Each call opens with a handshake barrier that compares a fingerprint of
//! its arguments, so a different root, count, element type or operation on
//! some PE is an error on every PE ([`shmem_core::Error::CollectiveMismatch`])
//! before any data moves, and data can then be put straight into the
//! destination buffers. One exception, as OpenSHMEM allows: on a team
//! whose PEs map each other's heaps, a broadcast is published by its root
//! and copied by the members (a small one's root returns without
//! waiting); members check the root's fingerprint before they copy
//! anything, and the root checks their receipts (a small broadcast's at
//! its next call on the team, or the one after when the next is another
//! small broadcast it roots; that call then fails on the root and, when
//! it opens with a plain handshake, on its other members; the root of a
//! small broadcast across nodes does not wait either). A PE that calls another
//! collective meanwhile leaves the others waiting until the hang report
//! names it.
//! Algorithms are chosen by team and message size;
//! `SHMEM_BARRIER_ALGORITHM`, `SHMEM_BROADCAST_ALGORITHM`,
//! `SHMEM_FCOLLECT_ALGORITHM`, `SHMEM_COLLECT_ALGORITHM`,
//! `SHMEM_ALLTOALL_ALGORITHM`, `SHMEM_REDUCE_ALGORITHM` and
//! `SHMEM_SCAN_ALGORITHM` (read through the runtime's
//! [`Config`](shmem_core::Config)) force one; see [`AlgorithmChoice`].
//! Across nodes, `SHMEM_NODE_LEADERS_ALLTOALL` (8 by default) is the most
//! nodes whose leaders exchange all-to-all; above it they disseminate.
//!
//! How every collective call fails is described once, under
//! [Errors](Collectives#errors) on [`Collectives`].
//!
//! The smallest use, run by every PE of a job (it needs a running job, so it
//! is not run as a doc test; the crate's tests run PEs as threads):
//!
//! ```no_run
//! use std::sync::Arc;
//! use shmem_collectives::Collectives;
//!
//! fn allreduce(rt: Arc<shmem_core::Runtime>) -> shmem_core::Result<()> {
//!     let coll = Collectives::new(rt.clone())?;
//!     let world = coll.world();
//!     let src = rt.malloc::<i64>(4)?;
//!     let dst = rt.malloc::<i64>(4)?;
//!     rt.write_local(&src, &[rt.my_pe() as i64; 4])?;
//!     coll.sum_reduce(&world, &dst, &src, 4)?;
//!     let n = rt.n_pes() as i64;
//!     assert_eq!(rt.read_local(&dst)?, vec![n * (n - 1) / 2; 4]);
//!
//!     // Even and odd PEs in teams of their own.
//!     let evens = coll.team_split_strided(&world, 0, 2, rt.n_pes().div_ceil(2), None)?;
//!     if let Some(team) = evens {
//!         coll.barrier(&team)?;
//!         coll.team_destroy(team)?;
//!     }
//!     coll.barrier_all()
//! }
//! ```

#![warn(clippy::missing_errors_doc)]

mod algorithm;
mod alltoall;
mod broadcast;
mod collectives;
mod direct;
mod fold;
mod gather;
mod kv_shuffle;
mod nodes;
mod push;
mod reduce;
mod reduce_op;
mod team;

pub use algorithm::{
    AlgorithmChoice, AlltoallAlgorithm, BarrierAlgorithm, BroadcastAlgorithm, GatherAlgorithm,
    ReduceAlgorithm, ScanAlgorithm,
};
pub use collectives::{Collectives, CollectivesOptions};
pub use kv_shuffle::{kv_shuffle_roles, KvCacheLayout, KvRole};
pub use reduce_op::{BitwiseReducible, ReduceOp, Reducible, ScanKind};
pub use team::{Team, TeamConfig};

#[cfg(test)]
mod tests {
    #[test]
    fn handles_cross_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<crate::Collectives>();
        send_sync::<crate::Team>();
    }
}
