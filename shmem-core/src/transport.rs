//! The data-plane contract ([`Transport`]) and the link-time registry of engines.
//!
//! A transport moves bytes between symmetric heaps. Addresses cross this
//! boundary as (PE, offset into the symmetric heap), never as raw peer
//! pointers; the runtime has already checked PE and bounds. The contract is
//! untyped (bytes, an op enum, a width), typed APIs are built on top.

use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::bootstrap::Bootstrap;
use crate::completion::Completion;
use crate::config::Config;
use crate::error::Result;
use crate::heap::Heap;
use crate::topology::Topology;
use crate::PeId;

/// What a transport can do, as bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Capabilities(pub u32);

impl Capabilities {
    /// put / get.
    pub const RMA: Capabilities = Capabilities(1);
    /// Remote atomics.
    pub const AMO: Capabilities = Capabilities(2);
    /// Signal updates (put_signal, signal_op).
    pub const SIGNAL: Capabilities = Capabilities(4);
    /// A load/store pointer to peer memory ([`Transport::peer_ptr`]).
    pub const DIRECT_POINTER: Capabilities = Capabilities(8);
    /// Non-blocking operations complete asynchronously (need `quiet`).
    pub const ASYNC: Capabilities = Capabilities(16);
    /// Can reach a peer's memory outside the symmetric heap by address.
    pub const EXTERNAL_MEMORY: Capabilities = Capabilities(32);
    /// put, get, atomics and signals on a reachable PE are exactly copies
    /// and CPU atomics on [`Transport::peer_ptr`] memory followed by
    /// [`crate::wait::ring`] on the target's control block, so the runtime
    /// may perform them inline for blocking calls (the fast path for small
    /// messages). Implies [`Capabilities::DIRECT_POINTER`].
    pub const LOAD_STORE: Capabilities = Capabilities(64);

    /// Whether every bit of `other` is set.
    pub fn contains(self, other: Capabilities) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for Capabilities {
    type Output = Capabilities;
    fn bitor(self, rhs: Capabilities) -> Capabilities {
        Capabilities(self.0 | rhs.0)
    }
}

/// Width of an atomic operand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AmoWidth {
    /// 32-bit.
    W32,
    /// 64-bit.
    W64,
}

impl AmoWidth {
    /// Bytes.
    pub fn bytes(self) -> usize {
        match self {
            AmoWidth::W32 => 4,
            AmoWidth::W64 => 8,
        }
    }
}

/// An atomic memory operation. Operands travel as `u64` bit patterns
/// (zero-extended for 32-bit); every op returns the previous value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AmoOp {
    /// Read the value.
    Fetch,
    /// Store `value`.
    Set(u64),
    /// Store `value`, return the old one.
    Swap(u64),
    /// Store `value` if the current value equals `cond`.
    CompareSwap {
        /// Expected value.
        cond: u64,
        /// New value.
        value: u64,
    },
    /// Wrapping add.
    Add(u64),
    /// Bitwise and.
    And(u64),
    /// Bitwise or.
    Or(u64),
    /// Bitwise xor.
    Xor(u64),
}

/// How a signal word is updated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalOp {
    /// `signal = value`.
    Set,
    /// `signal += value`.
    Add,
}

/// Comparison used by waits and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `<`
    Lt,
    /// `<=`
    Le,
}

impl Cmp {
    /// Evaluates `lhs <cmp> rhs`.
    pub fn eval<T: PartialOrd>(self, lhs: T, rhs: T) -> bool {
        match self {
            Cmp::Eq => lhs == rhs,
            Cmp::Ne => lhs != rhs,
            Cmp::Gt => lhs > rhs,
            Cmp::Ge => lhs >= rhs,
            Cmp::Lt => lhs < rhs,
            Cmp::Le => lhs <= rhs,
        }
    }
}

/// One engine moving data between symmetric heaps.
///
/// Offsets are already bounds-checked by the runtime; alignment of atomics is
/// checked too. After any operation that changes a peer's memory, the
/// transport must make sure that peer's blocked waiters are woken (see
/// [`crate::wait::ring`]).
pub trait Transport: Send + Sync + fmt::Debug {
    /// Engine name, upper case (`"HCCS"`).
    fn name(&self) -> &'static str;
    /// What this engine supports.
    fn capabilities(&self) -> Capabilities;
    /// Whether this engine can reach `pe`.
    fn can_reach(&self, pe: PeId) -> bool;
    /// For an [`Capabilities::ASYNC`] engine: non-blocking copies of at
    /// least this many bytes (and stream copies) go to it even where a
    /// [`Capabilities::LOAD_STORE`] route could copy inline. `None` (the
    /// default): no preference.
    fn bulk_threshold(&self) -> Option<usize> {
        None
    }
    /// A load/store pointer to `offset` in `pe`'s heap, if the engine maps it.
    ///
    /// # Safety
    /// `pe` must be a PE of the job and `offset` at most the heap size (the
    /// runtime checks both); an engine may compute the pointer without
    /// checking them.
    unsafe fn peer_ptr(&self, pe: PeId, offset: usize) -> Option<NonNull<u8>> {
        let _ = (pe, offset);
        None
    }
    /// Copies `len` bytes from local `src` to `pe`'s heap at `dst`; returns
    /// when `src` may be reused.
    ///
    /// # Safety
    /// `src` must be valid for reads of `len` bytes.
    ///
    /// # Errors
    /// an error naming the PE when the peer is gone; the engine's own failure as
    /// [`crate::Error::Transport`].
    unsafe fn put(&self, pe: PeId, dst: usize, src: *const u8, len: usize) -> Result<()>;
    /// Copies `len` bytes from `pe`'s heap at `src` into local `dst`; returns
    /// when the data has arrived.
    ///
    /// # Safety
    /// `dst` must be valid for writes of `len` bytes.
    ///
    /// # Errors
    /// an error naming the PE when the peer is gone; the engine's own failure as
    /// [`crate::Error::Transport`].
    unsafe fn get(&self, pe: PeId, src: usize, dst: *mut u8, len: usize) -> Result<()>;
    /// Starts a put; completion (and reuse of `src`) only after [`Transport::quiet`].
    ///
    /// # Safety
    /// `src` must stay valid for reads of `len` bytes until `quiet` returns.
    ///
    /// # Errors
    /// an error naming the PE when the peer is gone; the engine's own failure as
    /// [`crate::Error::Transport`].
    unsafe fn put_nbi(&self, pe: PeId, dst: usize, src: *const u8, len: usize) -> Result<()> {
        // SAFETY: forwarded contract; a blocking put is a valid non-blocking one.
        unsafe { self.put(pe, dst, src, len) }
    }
    /// Starts a get; `dst` is valid only after [`Transport::quiet`].
    ///
    /// # Safety
    /// `dst` must stay valid for writes of `len` bytes until `quiet` returns.
    ///
    /// # Errors
    /// an error naming the PE when the peer is gone; the engine's own failure as
    /// [`crate::Error::Transport`].
    unsafe fn get_nbi(&self, pe: PeId, src: usize, dst: *mut u8, len: usize) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe { self.get(pe, src, dst, len) }
    }
    /// Starts a put and returns its completion; `src` must stay valid until
    /// it completes. Engines without asynchronous completion copy at once.
    ///
    /// # Safety
    /// `src` must stay valid for reads of `len` bytes until the completion is done.
    ///
    /// # Errors
    /// an error naming the PE when the peer is gone; the engine's own failure as
    /// [`crate::Error::Transport`].
    unsafe fn put_async(
        &self,
        pe: PeId,
        dst: usize,
        src: *const u8,
        len: usize,
    ) -> Result<Completion> {
        // SAFETY: forwarded contract.
        unsafe { self.put(pe, dst, src, len)? };
        Ok(Completion::done())
    }
    /// Starts a get and returns its completion.
    ///
    /// # Safety
    /// `dst` must stay valid for writes of `len` bytes until the completion is done.
    ///
    /// # Errors
    /// an error naming the PE when the peer is gone; the engine's own failure as
    /// [`crate::Error::Transport`].
    unsafe fn get_async(
        &self,
        pe: PeId,
        src: usize,
        dst: *mut u8,
        len: usize,
    ) -> Result<Completion> {
        // SAFETY: forwarded contract.
        unsafe { self.get(pe, src, dst, len)? };
        Ok(Completion::done())
    }
    /// Performs `op` on the `width`-wide word at virtual address `addr` of
    /// `pe`, in memory outside its heap that `pe` exposed
    /// ([`Transport::expose_memory`]), atomically with the CPU atomics of
    /// `pe`'s own node on it; returns the previous value.
    ///
    /// # Safety
    /// `addr` must be aligned to `width` (the runtime checks it).
    ///
    /// # Errors
    /// [`crate::Error::Unsupported`] where `pe` did not expose the word, or
    /// the engine cannot update it atomically with `pe`'s CPU atomics (the
    /// caller then finds another way); an error naming the PE when the peer
    /// is gone; the engine's own failure as [`crate::Error::Transport`].
    unsafe fn atomic_at_address(
        &self,
        pe: PeId,
        addr: usize,
        width: AmoWidth,
        op: AmoOp,
    ) -> Result<u64> {
        let _ = (pe, addr, width, op);
        Err(crate::Error::Unsupported(format!(
            "engine {} has no atomics on memory outside the symmetric heap",
            self.name()
        )))
    }
    /// Makes `regions` (start, length) of this process's memory outside the
    /// symmetric heap reachable by the other PEs' [`Transport::put_to_address`]
    /// and [`Transport::get_from_address`] through this engine (a libfabric
    /// engine registers them as memory regions); returns what the peers need
    /// to reach them, handed to their [`Transport::learn_exposed_memory`].
    /// Called from [`crate::Runtime::expose_memory`] on every PE. An engine
    /// that needs nothing returns an empty card (the default).
    ///
    /// # Safety
    /// `regions` must stay mapped and writable for the engine's life.
    ///
    /// # Errors
    /// The engine's failure (the runtime logs it and exposes nothing
    /// through this engine).
    unsafe fn expose_memory(&self, regions: &[(usize, usize)]) -> Result<Vec<u8>> {
        let _ = regions;
        Ok(Vec::new())
    }
    /// Learns every PE's card from [`Transport::expose_memory`] (index: PE;
    /// empty: that PE exposed nothing through this engine).
    ///
    /// # Errors
    /// A card this engine cannot read.
    fn learn_exposed_memory(&self, cards: &[&[u8]]) -> Result<()> {
        let _ = cards;
        Ok(())
    }
    /// Copies into `pe`'s process memory at virtual address `addr`, outside
    /// the symmetric heap (a peer's static data). Needs [`Capabilities::EXTERNAL_MEMORY`].
    ///
    /// # Safety
    /// `src` must be valid for reads of `len` bytes.
    ///
    /// # Errors
    /// [`crate::Error::Unsupported`] unless the engine has
    /// [`Capabilities::EXTERNAL_MEMORY`]; an error naming the PE when the peer is gone; the
    /// engine's own failure as [`crate::Error::Transport`].
    unsafe fn put_to_address(
        &self,
        pe: PeId,
        addr: usize,
        src: *const u8,
        len: usize,
    ) -> Result<()> {
        let _ = (pe, addr, src, len);
        Err(crate::Error::Unsupported(format!(
            "engine {} cannot reach memory outside the symmetric heap",
            self.name()
        )))
    }
    /// Copies from `pe`'s process memory at virtual address `addr`.
    ///
    /// # Safety
    /// `dst` must be valid for writes of `len` bytes.
    ///
    /// # Errors
    /// [`crate::Error::Unsupported`] unless the engine has
    /// [`Capabilities::EXTERNAL_MEMORY`]; an error naming the PE when the peer is gone; the
    /// engine's own failure as [`crate::Error::Transport`].
    unsafe fn get_from_address(
        &self,
        pe: PeId,
        addr: usize,
        dst: *mut u8,
        len: usize,
    ) -> Result<()> {
        let _ = (pe, addr, dst, len);
        Err(crate::Error::Unsupported(format!(
            "engine {} cannot reach memory outside the symmetric heap",
            self.name()
        )))
    }
    /// Performs `op` on the `width`-wide word at `offset` of `pe`; returns
    /// the previous value.
    ///
    /// # Safety
    /// `pe` must be a PE of the job, `[offset, offset + width)` inside the
    /// symmetric heap (past its reserved first page) and `offset` aligned to
    /// `width`; the runtime checks all three before calling, and an engine
    /// may touch the word without checking them again.
    ///
    /// # Errors
    /// an error naming the PE when the peer is gone; the engine's own failure as
    /// [`crate::Error::Transport`].
    unsafe fn atomic(&self, pe: PeId, offset: usize, width: AmoWidth, op: AmoOp) -> Result<u64>;
    /// Performs a non-fetching `op` (`Set`, `Add`, `And`, `Or`, `Xor`) on
    /// the `width`-wide word at `offset` of `pe`. An engine may return once
    /// the update is posted: it is complete at the target by the next
    /// `quiet` (as a put is), and this PE's later operations on `pe` see
    /// it, as they see a [`Transport::atomic`]'s. The default performs
    /// [`Transport::atomic`].
    ///
    /// # Safety
    /// As for [`Transport::atomic`].
    ///
    /// # Errors
    /// As for [`Transport::atomic`]; an update that fails after this
    /// returns is reported by `quiet`.
    unsafe fn atomic_post(
        &self,
        pe: PeId,
        offset: usize,
        width: AmoWidth,
        op: AmoOp,
    ) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe { self.atomic(pe, offset, width, op) }.map(|_| ())
    }
    /// Updates the 64-bit signal word at `sig` of `pe`.
    ///
    /// # Safety
    /// As for [`Transport::atomic`] with an 8-byte word at `sig`.
    ///
    /// # Errors
    /// an error naming the PE when the peer is gone; the engine's own failure as
    /// [`crate::Error::Transport`].
    unsafe fn signal(&self, pe: PeId, sig: usize, op: SignalOp, value: u64) -> Result<()>;
    /// Puts data, then updates the signal; the signal is visible only after
    /// the data. With `nbi`, `src` must stay valid until `quiet`.
    ///
    /// # Safety
    /// `src` must be valid for reads of `len` bytes (until `quiet` if `nbi`);
    /// `[dst, dst + len)` inside the heap and `sig` as for
    /// [`Transport::signal`] (the runtime checks them).
    ///
    /// # Errors
    /// an error naming the PE when the peer is gone; the engine's own failure as
    /// [`crate::Error::Transport`].
    #[allow(clippy::too_many_arguments)]
    unsafe fn put_signal(
        &self,
        pe: PeId,
        dst: usize,
        src: *const u8,
        len: usize,
        sig: usize,
        op: SignalOp,
        value: u64,
        nbi: bool,
    ) -> Result<()> {
        let _ = nbi;
        // SAFETY: forwarded contract.
        unsafe { self.put(pe, dst, src, len)? };
        self.fence()?;
        // SAFETY: the caller's contract covers `sig` as for `signal`.
        unsafe { self.signal(pe, sig, op, value) }
    }
    /// A blocking [`Transport::put_signal`] (with `len` 0: a bare
    /// [`Transport::signal`]) made by a collective: only the target waits
    /// for it, and this PE never depends on its completion (it learns what
    /// it needs from the target's own later signals, as a barrier's
    /// handshake does). An engine may leave it out of what `quiet` and
    /// `fence` wait for, which spares a barrier's `quiet` the wait for the
    /// acknowledgement of the previous collective's signal. It is still
    /// ordered after this PE's operations that an earlier `fence` or `quiet`
    /// completed, its data lands before its signal, `src` is free on return,
    /// and a failure is still reported (by the next `quiet`, and to the
    /// target, which waits for it); dropping the engine waits for it. The
    /// default is `put_signal`.
    ///
    /// # Safety
    /// As for [`Transport::put_signal`] with `nbi` false.
    ///
    /// # Errors
    /// As for [`Transport::put_signal`].
    #[allow(clippy::too_many_arguments)]
    unsafe fn put_signal_collective(
        &self,
        pe: PeId,
        dst: usize,
        src: *const u8,
        len: usize,
        sig: usize,
        op: SignalOp,
        value: u64,
    ) -> Result<()> {
        if len == 0 {
            // SAFETY: forwarded contract.
            return unsafe { self.signal(pe, sig, op, value) };
        }
        // SAFETY: forwarded contract.
        unsafe { self.put_signal(pe, dst, src, len, sig, op, value, false) }
    }
    /// Orders earlier puts/AMOs to each PE before later ones to the same PE.
    ///
    /// # Errors
    /// The engine's failure.
    fn fence(&self) -> Result<()>;
    /// Completes every outstanding operation this PE issued on this engine.
    /// The runtime follows the engines' `quiet` with one `SeqCst` fence, so
    /// an engine whose operations finish before they return (plain loads and
    /// stores) returns at once.
    ///
    /// # Errors
    /// The engine's failure, or an error naming a PE whose operations cannot complete.
    fn quiet(&self) -> Result<()>;
    /// Whether threads that wait in the library should drive this engine
    /// ([`Transport::progress`]): engines whose data and messages move only
    /// inside library calls, as manual-progress libfabric providers do.
    fn wants_progress(&self) -> bool {
        false
    }
    /// Makes progress once on behalf of a thread waiting in the library
    /// (polls completions, applies arrived messages), so that what the wait
    /// is for is handled on the waiting thread instead of being handed over
    /// from a progress thread. Called between checks of a wait's condition
    /// while it spins or yields, never while it sleeps; cheap when there is
    /// nothing to do.
    fn progress(&self) {}
}

/// What a transport constructor gets: the job as seen from this PE.
///
/// Construction is collective: every PE constructs every linked engine in
/// the same order, so constructors may use the bootstrap.
pub struct TransportInit<'a> {
    /// Control plane.
    pub bootstrap: &'a dyn Bootstrap,
    /// This PE's heap.
    pub heap: &'a Arc<dyn Heap>,
    /// Which PEs share a node.
    pub topology: &'a Topology,
    /// Effective configuration.
    pub config: &'a Config,
}

/// A linked transport, submitted with `inventory::submit!` by its crate.
pub struct TransportRegistration {
    /// Engine name as `SHMEM_TEST_ENGINE` spells it (upper case).
    pub name: &'static str,
    /// Higher wins when several engines reach a peer.
    pub priority: u32,
    /// Builds the engine (collective, see [`TransportInit`]).
    pub create: fn(&TransportInit<'_>) -> Result<Arc<dyn Transport>>,
}

inventory::collect!(TransportRegistration);

/// Linked engines, highest priority first (ties by name, so the order is
/// the same in every process of a job).
pub fn registered() -> Vec<&'static TransportRegistration> {
    let mut v: Vec<_> = inventory::iter::<TransportRegistration>
        .into_iter()
        .collect();
    v.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.name.cmp(b.name)));
    v
}

/// An engine the runtime can build: linked in, or loaded from a plugin.
#[derive(Debug, Clone)]
pub enum EngineSource {
    /// Submitted with `inventory` by a linked crate.
    Linked(&'static TransportRegistration),
    /// Loaded from `SHMEM_TRANSPORT_PLUGINS`.
    Plugin(Arc<crate::plugin::LoadedPlugin>),
}

impl fmt::Debug for TransportRegistration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TransportRegistration")
            .field("name", &self.name)
            .field("priority", &self.priority)
            .finish()
    }
}

impl EngineSource {
    /// Engine name.
    pub fn name(&self) -> &'static str {
        match self {
            EngineSource::Linked(r) => r.name,
            EngineSource::Plugin(p) => p.name(),
        }
    }
    /// Routing priority.
    pub fn priority(&self) -> u32 {
        match self {
            EngineSource::Linked(r) => r.priority,
            EngineSource::Plugin(p) => p.priority(),
        }
    }
    /// Builds the engine (collective).
    ///
    /// # Errors
    /// What the engine's constructor reports.
    pub fn create(&self, init: &TransportInit<'_>) -> Result<Arc<dyn Transport>> {
        match self {
            EngineSource::Linked(r) => (r.create)(init),
            EngineSource::Plugin(p) => p.create(init),
        }
    }
}

/// The linked engines and those of `SHMEM_TRANSPORT_PLUGINS`, highest
/// priority first (ties by name).
///
/// # Errors
/// [`crate::Error::Plugin`] when a plugin cannot be loaded or its engine
/// has the name of a linked engine.
pub fn available(config: &Config) -> Result<Vec<EngineSource>> {
    let mut v: Vec<EngineSource> = registered().into_iter().map(EngineSource::Linked).collect();
    for p in crate::plugin::load_configured(config)? {
        if v.iter().any(|e| e.name() == p.name()) {
            return Err(crate::Error::Plugin {
                path: p.path().to_string(),
                reason: format!("its engine {} is already linked or loaded", p.name()),
            });
        }
        v.push(EngineSource::Plugin(p));
    }
    v.sort_by(|a, b| b.priority().cmp(&a.priority()).then(a.name().cmp(b.name())));
    Ok(v)
}

/// Names of the linked engines and loaded plugins, for error messages.
pub fn registered_names() -> String {
    let mut names: Vec<_> = registered().iter().map(|r| r.name).collect();
    names.extend(crate::plugin::loaded_names());
    if names.is_empty() {
        "none (enable a transport feature of the `shmem` crate)".to_string()
    } else {
        names.join(", ")
    }
}
