//! Compatibility path: the same-node heap mapper moved to the `shmem-shm`
//! support crate and the load/store operations to [`crate::loadstore`].
//! This shim keeps `shmem_core::node_heaps::NodeHeaps::{wake, put, atomic,
//! signal}` compiling for engines not yet moved over; new code uses
//! [`crate::loadstore`] (or `shmem_shm::NodeHeaps`).

use crate::transport::{AmoOp, AmoWidth, SignalOp};
use crate::wait::Span;

/// The load/store operations under their old names (see [`crate::loadstore`]).
#[derive(Debug, Clone, Copy)]
pub struct NodeHeaps;

impl NodeHeaps {
    /// [`crate::loadstore::wake`].
    ///
    /// # Safety
    /// As for [`crate::loadstore::wake`].
    #[inline]
    pub unsafe fn wake(base: *mut u8, offset: usize, len: usize) {
        // SAFETY: forwarded contract.
        unsafe { crate::loadstore::wake(base, offset, len) }
    }

    /// [`crate::loadstore::put`].
    ///
    /// # Safety
    /// As for [`crate::loadstore::put`].
    #[inline]
    pub unsafe fn put(base: *mut u8, dst: usize, src: *const u8, len: usize) {
        // SAFETY: forwarded contract.
        unsafe { crate::loadstore::put(base, dst, src, len) }
    }

    /// [`crate::loadstore::atomic`].
    ///
    /// # Safety
    /// As for [`crate::loadstore::atomic`].
    #[inline]
    pub unsafe fn atomic(base: *mut u8, offset: usize, width: AmoWidth, op: AmoOp) -> u64 {
        // SAFETY: forwarded contract.
        unsafe { crate::loadstore::atomic(base, offset, width, op) }
    }

    /// [`crate::loadstore::signal`].
    ///
    /// # Safety
    /// As for [`crate::loadstore::signal`].
    #[inline]
    pub unsafe fn signal(base: *mut u8, sig: usize, op: SignalOp, value: u64, data: Span) {
        // SAFETY: forwarded contract.
        unsafe { crate::loadstore::signal(base, sig, op, value, data) }
    }
}
