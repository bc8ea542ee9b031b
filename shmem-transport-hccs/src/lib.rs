//! HCCS engine of the `shmem` library: same-node peers' symmetric heaps
//! mapped into this process.
//!
//! At init every PE on a node hands its heap's `memfd` to each same-node
//! peer over an abstract Unix socket with `SCM_RIGHTS` (both ends check with
//! `SO_PEERCRED` that the other side is the same user and the expected
//! process), and each maps every peer's heap. After that a put or get is a
//! memory copy, an atomic is a CPU atomic on the shared mapping, and
//! [`Transport::peer_ptr`] returns a real load/store pointer. Nothing is
//! created in the file system, so nothing outlives the job.
//!
//! The crate registers itself as `HCCS` (priority 100) with `inventory`;
//! linking it is all it takes:
//!
//! ```
//! shmem_transport_hccs::link();
//! assert!(shmem_core::transport::registered().iter().any(|r| r.name == "HCCS"));
//! ```

#![warn(clippy::missing_errors_doc)]

use std::ptr::NonNull;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

use shmem_core::wait::Span;
use shmem_core::{
    AmoOp, AmoWidth, Capabilities, PeId, Result, SignalOp, Transport, TransportInit,
    TransportRegistration,
};
use shmem_shm::NodeHeaps;

/// Engine name.
pub const NAME: &str = "HCCS";

/// Makes sure this crate is linked (its registration is then visible).
pub fn link() {}

shmem_core::inventory::submit! {
    TransportRegistration { name: NAME, priority: 100, create }
}

/// The intra-node engine: one mapping of each same-node PE's heap.
#[derive(Debug)]
pub struct Hccs {
    heaps: NodeHeaps,
}

fn create(init: &TransportInit<'_>) -> Result<Arc<dyn Transport>> {
    let heaps = NodeHeaps::map(init, NAME)?;
    Ok(Arc::new(Hccs { heaps }))
}

impl Hccs {
    #[inline]
    fn base(&self, pe: PeId) -> Result<*mut u8> {
        self.heaps.require(pe)
    }
}

impl Transport for Hccs {
    fn name(&self) -> &'static str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::RMA
            | Capabilities::AMO
            | Capabilities::SIGNAL
            | Capabilities::DIRECT_POINTER
            | Capabilities::LOAD_STORE
    }

    fn can_reach(&self, pe: PeId) -> bool {
        self.heaps.base(pe).is_some()
    }

    unsafe fn peer_ptr(&self, pe: PeId, offset: usize) -> Option<NonNull<u8>> {
        let b = self.heaps.base(pe)?;
        // SAFETY: the runtime checked offset <= heap size.
        NonNull::new(unsafe { b.as_ptr().add(offset) })
    }

    unsafe fn put(&self, pe: PeId, dst: usize, src: *const u8, len: usize) -> Result<()> {
        let base = self.base(pe)?;
        // SAFETY: dst..dst+len is inside the peer's mapping (checked by the
        // runtime); src is valid per the caller. Waiters are woken for this
        // PE too: another thread of it may be waiting on the data.
        unsafe { NodeHeaps::put(base, dst, src, len) };
        Ok(())
    }

    unsafe fn get(&self, pe: PeId, src: usize, dst: *mut u8, len: usize) -> Result<()> {
        let base = self.base(pe)?;
        // SAFETY: as for put, with the roles swapped.
        unsafe { std::ptr::copy(base.add(src), dst, len) };
        Ok(())
    }

    unsafe fn atomic(&self, pe: PeId, offset: usize, width: AmoWidth, op: AmoOp) -> Result<u64> {
        let base = self.base(pe)?;
        // SAFETY: offset in range and aligned (checked by the runtime).
        Ok(unsafe { NodeHeaps::atomic(base, offset, width, op) })
    }

    unsafe fn signal(&self, pe: PeId, sig: usize, op: SignalOp, value: u64) -> Result<()> {
        let base = self.base(pe)?;
        // SAFETY: aligned, in-heap signal word (checked by the runtime).
        unsafe { NodeHeaps::signal(base, sig, op, value, Span::bytes(0, 0)) };
        Ok(())
    }

    unsafe fn put_signal(
        &self,
        pe: PeId,
        dst: usize,
        src: *const u8,
        len: usize,
        sig: usize,
        op: SignalOp,
        value: u64,
        _nbi: bool,
    ) -> Result<()> {
        let base = self.base(pe)?;
        // SAFETY: as for put; an aligned, in-heap signal word (checked by
        // the runtime).
        unsafe { shmem_core::loadstore::put_signal(base, dst, src, len, sig, op, value) };
        Ok(())
    }

    fn fence(&self) -> Result<()> {
        fence(Ordering::SeqCst);
        Ok(())
    }

    fn quiet(&self) -> Result<()> {
        // Copies and atomics are complete when they return; the runtime
        // adds the fence that orders them.
        Ok(())
    }
}
