//! `MEMCPY`: a transport engine written outside the library and loaded at
//! run time.
//!
//! It reaches the PEs of this node by mapping their heaps (the same
//! `SCM_RIGHTS` exchange HCCS uses) and moves data with plain copies and
//! CPU atomics. It does not declare `LOAD_STORE`, so the runtime calls it
//! for every operation: everything crosses the plugin's C ABI.
//!
//! Build it and load it into any program of the library (Rust, C through
//! `libshmem`, Python):
//!
//! ```sh
//! cargo build --release -p shmem-plugin-example
//! SHMEM_TRANSPORT_PLUGINS=$PWD/target/release/libshmem_plugin_example.so \
//!   SHMEM_TEST_ENGINE=MEMCPY shmemrun -n 2 ./prog
//! ```

use std::ptr::NonNull;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

use shmem_core::wait::Span;
use shmem_core::{AmoOp, AmoWidth, Capabilities, PeId, Result, SignalOp, Transport, TransportInit};
use shmem_shm::NodeHeaps;

/// Engine name (what `SHMEM_TEST_ENGINE` says).
pub const NAME: &str = "MEMCPY";

shmem_core::export_transport_plugin!(name: "MEMCPY", priority: 5, create: create);

/// The engine: every same-node PE's heap, mapped here.
#[derive(Debug)]
pub struct Memcpy {
    heaps: NodeHeaps,
}

/// Builds the engine (collective: every PE maps every same-node heap).
///
/// # Errors
/// When the heaps cannot be exchanged or mapped.
pub fn create(init: &TransportInit<'_>) -> Result<Arc<dyn Transport>> {
    Ok(Arc::new(Memcpy {
        heaps: NodeHeaps::map(init, NAME)?,
    }))
}

impl Transport for Memcpy {
    fn name(&self) -> &'static str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::RMA | Capabilities::AMO | Capabilities::SIGNAL | Capabilities::DIRECT_POINTER
    }

    fn can_reach(&self, pe: PeId) -> bool {
        self.heaps.base(pe).is_some()
    }

    unsafe fn peer_ptr(&self, pe: PeId, offset: usize) -> Option<NonNull<u8>> {
        if offset > self.heaps.heap_size() {
            return None;
        }
        let b = self.heaps.base(pe)?;
        // SAFETY: `offset` is at most the heap size (checked above).
        NonNull::new(unsafe { b.as_ptr().add(offset) })
    }

    unsafe fn put(&self, pe: PeId, dst: usize, src: *const u8, len: usize) -> Result<()> {
        let base = self.heaps.require(pe)?;
        // SAFETY: the runtime checked [dst, dst + len) against the heap;
        // `src` is valid per the caller.
        unsafe { NodeHeaps::put(base, dst, src, len) };
        Ok(())
    }

    unsafe fn get(&self, pe: PeId, src: usize, dst: *mut u8, len: usize) -> Result<()> {
        let base = self.heaps.require(pe)?;
        // SAFETY: as for put, with the roles swapped.
        unsafe { std::ptr::copy(base.add(src), dst, len) };
        Ok(())
    }

    unsafe fn atomic(&self, pe: PeId, offset: usize, width: AmoWidth, op: AmoOp) -> Result<u64> {
        let base = self.heaps.require(pe)?;
        // SAFETY: the runtime checked range and alignment.
        Ok(unsafe { NodeHeaps::atomic(base, offset, width, op) })
    }

    unsafe fn signal(&self, pe: PeId, sig: usize, op: SignalOp, value: u64) -> Result<()> {
        let base = self.heaps.require(pe)?;
        // SAFETY: an in-heap, aligned signal word (checked by the runtime).
        unsafe { NodeHeaps::signal(base, sig, op, value, Span::bytes(0, 0)) };
        Ok(())
    }

    fn fence(&self) -> Result<()> {
        fence(Ordering::SeqCst);
        Ok(())
    }

    fn quiet(&self) -> Result<()> {
        // Copies are complete when they return.
        fence(Ordering::SeqCst);
        Ok(())
    }
}
