//! The runtime of one PE: heap, allocator, per-peer routing and the
//! PE-facing operations (RMA, atomics, signals, waits, memory management).
//!
//! One concept per file: [`Runtime`], its state and the checks every
//! operation makes are here; bring-up, routing, allocation agreement, RMA,
//! atomics, signals, waits, local views and ordering each have a file.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::bootstrap::{Activity, Bootstrap, HangPolicy, PeerHealth};
use crate::completion::{Completion, Handle};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::heap::{Allocator, Generations, Heap};
use crate::sym::{AtomicElement, AtomicInteger, Element, SymBuf, SymRef, SymSlice, WaitElement};
use crate::topology::Topology;
use crate::transport::{
    self, AmoOp, AmoWidth, Capabilities, Cmp, SignalOp, Transport, TransportInit,
};
use crate::wait::{self, ControlBlock, WaitPolicy};
use crate::wire;
use crate::{shmem_log, PeId};

mod alloc;
mod amo;
mod bringup;
mod ordering;
mod rma;
mod routing;
mod signals;
mod views;
mod waits;

/// Where the symmetric heap's memory should live. On a host without an
/// accelerator both kinds are host memory; the parameter is accepted so that
/// code written for device memory runs unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MemType {
    /// Host memory.
    Host,
    /// Device memory (host memory on this build).
    #[default]
    Device,
}

/// How a PE joins: what [`Runtime::new`] needs besides the bootstrap.
#[derive(Debug, Clone)]
pub struct RuntimeOptions {
    /// Instance number (several runtimes may live in one process).
    pub instance: u32,
    /// Heap size; `None` takes `SHMEM_SYMMETRIC_SIZE`.
    pub mem_size: Option<usize>,
    /// Effective configuration.
    pub config: Config,
}

/// A running PE of one job (one instance).
///
/// Every method that moves data checks the PE and the heap range first, so a
/// bad argument is an error, never a stray write.
///
/// # Errors of tests and waits
///
/// The `test*` and `wait_until*` methods on symmetric variables fail with
/// [`Error::UseAfterFree`] or [`Error::WrongInstance`] for a freed object or
/// one of another instance, [`Error::OutOfHeap`] / [`Error::Misaligned`] for
/// variables outside the heap or unaligned, [`Error::InvalidArgument`] for a
/// status mask or value list whose length is not the variables', and
/// [`Error::NotInitialized`] after finalize. The waits also fail, while
/// waiting, with [`Error::PeerExited`] or [`Error::Aborted`] when a PE dies or
/// the job is aborted, and with [`Error::Timeout`] after `SHMEM_WAIT_TIMEOUT`.
pub struct Runtime {
    instance: u32,
    my_pe: PeId,
    n_pes: usize,
    base: NonNull<u8>,
    size: usize,
    heap: Arc<dyn Heap>,
    bootstrap: Arc<dyn Bootstrap>,
    allocator: Mutex<Allocator>,
    /// Generations of live allocations (use-after-free checks).
    gens: Generations,
    topology: Topology,
    transports: Vec<Arc<dyn Transport>>,
    routes: Vec<u8>,
    /// Per PE: the engine for bulk non-blocking and stream copies (an
    /// asynchronous engine when one reaches the PE, else the normal route).
    async_routes: Vec<u8>,
    /// Engines that some route uses, in index order: `fence` and `quiet`
    /// visit only these (a linked engine that reaches nobody has nothing
    /// outstanding).
    in_use: Vec<u8>,
    /// Whether every engine in `in_use` reaches its PEs through mapped
    /// memory ([`Capabilities::DIRECT_POINTER`]): `quiet` then waits at most
    /// for this node's own copies, never for a peer or a link.
    quiet_is_local: bool,
    /// Per PE: its heap's base here when its route is a load/store engine
    /// ([`Capabilities::LOAD_STORE`]): blocking RMA, atomics and signals to
    /// it are done inline, without a call through the engine.
    direct: Vec<Option<NonNull<u8>>>,
    async_threshold: usize,
    config: Config,
    policy: WaitPolicy,
    finalized: AtomicBool,
    /// Dead PEs and finalize, one relaxed load on every operation.
    health: Arc<PeerHealth>,
    /// The blocking call this PE is in (hang report).
    activity: Arc<Activity>,
    /// Allocation collectives run so far (their number in the hang report).
    alloc_seq: std::sync::atomic::AtomicU64,
    /// Engines in use that waiting threads drive
    /// ([`Transport::wants_progress`]).
    driven: Vec<Arc<dyn Transport>>,
}

// SAFETY: `base` points into `heap`, which is Send + Sync and outlives the
// runtime; all shared state is behind atomics, a mutex or immutable.
unsafe impl Send for Runtime {}
// SAFETY: as above.
unsafe impl Sync for Runtime {}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("instance", &self.instance)
            .field("my_pe", &self.my_pe)
            .field("n_pes", &self.n_pes)
            .field("heap_size", &self.size)
            .field("engines", &self.route_summary())
            .finish()
    }
}

/// What a PE is built from besides the bootstrap and options, when the
/// defaults (a heap of kind `SHMEM_HEAP`, the linked and plugin engines)
/// are not what the program wants ([`Runtime::with_parts`]).
#[derive(Default)]
pub struct RuntimeParts {
    /// This PE's heap; its size is the job's heap size. `None`: create one
    /// of kind `SHMEM_HEAP`.
    pub heap: Option<Arc<dyn Heap>>,
    /// Engines offered beside the linked and plugin ones (every PE must
    /// offer the same).
    pub extra_engines: Vec<&'static transport::TransportRegistration>,
}

impl std::fmt::Debug for RuntimeParts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeParts")
            .field("heap", &self.heap)
            .field(
                "extra_engines",
                &self
                    .extra_engines
                    .iter()
                    .map(|r| r.name)
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl Runtime {
    /// This PE's rank.
    pub fn my_pe(&self) -> PeId {
        self.my_pe
    }

    /// Number of PEs.
    pub fn n_pes(&self) -> usize {
        self.n_pes
    }

    /// Instance number.
    pub fn instance(&self) -> u32 {
        self.instance
    }

    /// Heap size in bytes.
    pub fn heap_size(&self) -> usize {
        self.size
    }

    /// Base of this PE's heap.
    pub fn heap_base(&self) -> NonNull<u8> {
        self.base
    }

    /// The heap itself (for transports and bindings).
    pub fn heap(&self) -> &Arc<dyn Heap> {
        &self.heap
    }

    /// The control plane.
    pub fn bootstrap(&self) -> &Arc<dyn Bootstrap> {
        &self.bootstrap
    }

    /// Node membership.
    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    /// Effective configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Whether `finalize` has run.
    pub fn is_finalized(&self) -> bool {
        self.finalized.load(Ordering::Relaxed)
    }

    #[inline]
    pub(crate) fn live(&self) -> Result<()> {
        if self.health.word() & PeerHealth::FINALIZED != 0 {
            return Err(Error::NotInitialized);
        }
        Ok(())
    }

    /// The check every operation on `pe` starts with: fails after
    /// finalize, and naming `pe` once the control plane has reported it
    /// dead (one relaxed load while all is well).
    ///
    /// # Errors
    /// [`Error::NotInitialized`] after finalize; [`Error::PeerExited`] once
    /// `pe` is known dead.
    #[inline]
    pub fn live_for(&self, pe: PeId) -> Result<()> {
        if self.health.word() != 0 {
            self.health.check(Some(pe))?;
        }
        Ok(())
    }

    /// Where `pe`'s heap is mapped here when blocking operations on `pe`
    /// are this PE's own loads and stores (the engine of its route declares
    /// [`crate::Capabilities::LOAD_STORE`], and the runtime does them
    /// inline), else `None`; `pe` may be this PE. Decided once at init.
    /// For protocols that update and poll the same words on every call
    /// (the collectives' handshakes) and would otherwise pay the checks
    /// and the route on each: they store through [`crate::loadstore`] as
    /// the runtime itself would. The mapping lives as long as the runtime.
    #[inline]
    pub fn load_store_base(&self, pe: PeId) -> Option<NonNull<u8>> {
        self.direct(pe)
    }

    /// `pe`'s mapped heap when `len` bytes at heap `offset` may be accessed
    /// right now by this PE's own loads and stores, with nothing more to
    /// check: no PE is known dead and the runtime is not finalized, the
    /// range is not empty and lies in the heap past its reserved first
    /// page, it is aligned to `align` bytes, and `pe`'s route is load and
    /// store (as in [`Runtime::load_store_base`]). With `nbi`, also that a
    /// non-blocking copy of `len` bytes would be done inline rather than
    /// on an asynchronous engine. `None`: make the checked call, which
    /// does the same or says why not.
    ///
    /// For front ends whose every call should cost what a function call
    /// costs (the C ABI): the access is then [`crate::loadstore`]'s, the
    /// same the checked call makes, with no error value built or returned.
    #[inline(always)]
    pub fn load_store_span(
        &self,
        pe: PeId,
        offset: usize,
        len: usize,
        align: usize,
        nbi: bool,
    ) -> Option<NonNull<u8>> {
        let end = offset.checked_add(len)?;
        if self.health.word() != 0
            || len == 0
            || end > self.size
            || offset < crate::heap::RESERVED_BYTES
            || !offset.is_multiple_of(align.max(1))
            || (nbi && len >= self.async_threshold)
        {
            return None;
        }
        self.direct(pe)
    }

    /// What this PE is blocked in, for the hang report (collectives record
    /// their calls here).
    pub fn activity(&self) -> &Activity {
        &self.activity
    }

    /// The PEs the control plane has reported dead, with what is known of how.
    pub fn dead_pes(&self) -> Vec<(PeId, String)> {
        self.health.dead()
    }

    /// Errors unless `pe` is in `0..n_pes`.
    ///
    /// # Errors
    /// [`Error::PeOutOfRange`] unless `pe < n_pes`.
    #[inline]
    pub fn check_pe(&self, pe: PeId) -> Result<()> {
        if pe >= self.n_pes {
            return Err(Error::PeOutOfRange {
                pe,
                n_pes: self.n_pes,
            });
        }
        Ok(())
    }

    /// Errors unless `[offset, offset+len)` lies inside the heap.
    ///
    /// # Errors
    /// [`Error::OutOfHeap`] when the range leaves the heap, overflows, or touches the
    /// reserved first page.
    #[inline]
    pub fn check_range(&self, offset: usize, len: usize) -> Result<()> {
        // The first page holds the runtime's control words (wait doorbell):
        // no user access may touch it.
        match offset.checked_add(len) {
            Some(end) if end <= self.size && offset >= crate::heap::RESERVED_BYTES => Ok(()),
            _ => Err(Error::OutOfHeap {
                offset,
                len,
                heap_size: self.size,
            }),
        }
    }

    #[inline]
    fn check_instance(&self, instance: u32) -> Result<()> {
        if instance != self.instance {
            return Err(Error::WrongInstance {
                object: instance,
                runtime: self.instance,
            });
        }
        Ok(())
    }

    #[inline]
    fn route(&self, pe: PeId) -> Result<&dyn Transport> {
        self.live_for(pe)?;
        self.check_pe(pe)?;
        Ok(self.transports[self.routes[pe] as usize].as_ref())
    }

    #[inline]
    fn async_route(&self, pe: PeId) -> Result<&dyn Transport> {
        self.live_for(pe)?;
        self.check_pe(pe)?;
        Ok(self.transports[self.async_routes[pe] as usize].as_ref())
    }

    fn check_slice<T: Element>(&self, s: &SymSlice<T>) -> Result<()> {
        self.check_instance(s.instance())?;
        self.check_tag(s.tag(), s.offset())?;
        self.check_range(s.offset(), s.byte_len())
    }

    /// Errors if `tag` names an allocation that has been freed.
    #[inline]
    fn check_tag(&self, tag: u64, offset: usize) -> Result<()> {
        if !self.gens.is_live(tag) {
            return Err(Error::UseAfterFree { offset });
        }
        Ok(())
    }

    /// Instance and liveness of one element's handle.
    #[inline]
    fn check_ref<T: Element>(&self, r: &SymRef<T>) -> Result<()> {
        self.check_instance(r.instance())?;
        self.check_tag(r.tag(), r.offset())
    }

    #[inline]
    fn check_atomic(&self, offset: usize, width: usize) -> Result<()> {
        self.check_range(offset, width)?;
        if !offset.is_multiple_of(width) {
            return Err(Error::Misaligned { offset, width });
        }
        Ok(())
    }

    fn control_block(&self) -> *const ControlBlock {
        self.base.as_ptr() as *const ControlBlock
    }

    /// Heap offset of a local address, if it lies in this PE's heap.
    #[inline]
    pub fn offset_of(&self, addr: *const u8) -> Option<usize> {
        let a = addr as usize;
        let b = self.base.as_ptr() as usize;
        (a >= b && a < b + self.size).then(|| a - b)
    }

    /// Like [`Runtime::offset_of`], as an error naming the address.
    ///
    /// # Errors
    /// [`Error::NotSymmetric`] naming the address when it is not in this PE's heap.
    pub fn require_offset(&self, addr: *const u8) -> Result<usize> {
        self.offset_of(addr).ok_or(Error::NotSymmetric {
            addr: addr as usize,
            base: self.base.as_ptr() as usize,
            heap_size: self.size,
        })
    }

    /// Local address of heap `offset`.
    ///
    /// # Errors
    /// [`Error::OutOfHeap`] when `offset` is past the heap or in its reserved first page.
    pub fn local_ptr(&self, offset: usize) -> Result<NonNull<u8>> {
        self.check_range(offset, 0)?;
        // SAFETY: offset is within the heap mapping.
        Ok(unsafe { NonNull::new_unchecked(self.base.as_ptr().add(offset)) })
    }

    /// Base of `pe`'s heap when it is reached by load/store (see
    /// [`Capabilities::LOAD_STORE`]); `None` for other routes or a bad PE.
    #[inline]
    fn direct(&self, pe: PeId) -> Option<NonNull<u8>> {
        self.direct.get(pe).copied().flatten()
    }
}

fn elems_bytes<T>(count: usize) -> Result<usize> {
    count.checked_mul(std::mem::size_of::<T>()).ok_or_else(|| {
        Error::invalid(
            "count",
            format!("{count} elements overflow the address space"),
        )
    })
}

fn fits(n: usize, capacity: usize) -> Result<()> {
    if n > capacity {
        return Err(Error::invalid(
            "nelems",
            format!("{n} elements do not fit a symmetric object of {capacity} elements"),
        ));
    }
    Ok(())
}

fn strided_fits(arg: &'static str, len: usize, stride: usize, nelems: usize) -> Result<()> {
    if stride == 0 {
        return Err(Error::invalid(arg, "stride must be at least 1"));
    }
    if nelems == 0 {
        return Ok(());
    }
    let last = (nelems - 1)
        .checked_mul(stride)
        .ok_or_else(|| Error::invalid(arg, "stride * nelems overflows"))?;
    if last >= len {
        return Err(Error::invalid(
            arg,
            format!(
                "{nelems} elements with stride {stride} need {} elements, it has {len}",
                last + 1
            ),
        ));
    }
    Ok(())
}

/// Bytes of a slice of elements.
pub fn as_bytes<T: Element>(s: &[T]) -> &[u8] {
    // SAFETY: Element types have no padding requirements on reads of their
    // bytes for copying purposes, and u8 has alignment 1.
    unsafe { std::slice::from_raw_parts(s.as_ptr() as *const u8, std::mem::size_of_val(s)) }
}

/// Mutable bytes of a slice of elements.
pub fn as_bytes_mut<T: Element>(s: &mut [T]) -> &mut [u8] {
    // SAFETY: any bytes written are a valid T (Element contract).
    unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr() as *mut u8, std::mem::size_of_val(s)) }
}
