//! The runtime of one PE: heap, allocator, per-peer routing and the
//! PE-facing operations (RMA, atomics, signals, waits, memory management).

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
use crate::{shmem_log, PeId};

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

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
enum CollectiveKind {
    Malloc = 1,
    Free = 2,
    Realloc = 3,
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
    /// Joins the job: creates the heap, discovers the topology, builds the
    /// linked transports and the per-peer routing table (collective).
    ///
    /// # Errors
    /// When the PEs disagree on heap size or engines, the heap cannot be
    /// created, an engine cannot be built or reaches no route for some PE,
    /// or a bootstrap call fails.
    pub fn new(bootstrap: Arc<dyn Bootstrap>, opts: RuntimeOptions) -> Result<Arc<Runtime>> {
        Runtime::with_parts(bootstrap, opts, RuntimeParts::default())
    }

    /// [`Runtime::new`] with a heap and extra engines of the caller's.
    ///
    /// # Errors
    /// As [`Runtime::new`]; also when an extra engine has the name of a
    /// linked or plugin one.
    pub fn with_parts(
        bootstrap: Arc<dyn Bootstrap>,
        opts: RuntimeOptions,
        parts: RuntimeParts,
    ) -> Result<Arc<Runtime>> {
        let my_pe = bootstrap.rank();
        let n_pes = bootstrap.size();
        crate::log::set_pe(my_pe);
        let config = opts.config;
        let size = match &parts.heap {
            Some(h) => h.size(),
            None => opts.mem_size.unwrap_or(config.symmetric_size.0),
        };

        // Agree on heap size and linked engines before touching anything else.
        let mut engines = transport::available(&config)?;
        for reg in &parts.extra_engines {
            if engines.iter().any(|e| e.name() == reg.name) {
                return Err(Error::EngineUnavailable {
                    requested: reg.name.to_string(),
                    reason: "an engine of that name is already linked or loaded".into(),
                    available: transport::registered_names(),
                });
            }
            engines.push(transport::EngineSource::Linked(reg));
        }
        engines.sort_by(|a, b| b.priority().cmp(&a.priority()).then(a.name().cmp(b.name())));
        let names: Vec<&str> = engines.iter().map(|r| r.name()).collect();
        let mut hello = (size as u64).to_le_bytes().to_vec();
        hello.extend_from_slice(names.join(",").as_bytes());
        let all = bootstrap.allgather(&hello)?;
        let mut sizes_differ = Vec::new();
        for (pe, m) in all.iter().enumerate() {
            let their =
                u64::from_le_bytes(m.get(..8).and_then(|b| b.try_into().ok()).unwrap_or([0; 8]));
            if their != size as u64 {
                sizes_differ.push(format!("PE {pe}: {their} bytes"));
            }
            if m.get(8..) != Some(hello[8..].as_ref()) {
                return Err(Error::CollectiveMismatch {
                    op: "init",
                    details: format!(
                        "PE {pe} links engines [{}], PE {my_pe} links [{}]; run the same binary on every PE",
                        String::from_utf8_lossy(m.get(8..).unwrap_or_default()),
                        names.join(",")
                    ),
                });
            }
        }
        if !sizes_differ.is_empty() {
            return Err(Error::CollectiveMismatch {
                op: "init (mem_size)",
                details: format!(
                    "PE {my_pe} asked for {size} bytes; {}",
                    sizes_differ.join(", ")
                ),
            });
        }

        let heap: Arc<dyn Heap> = match parts.heap {
            Some(h) => h,
            None => crate::heap::create_heap(&config.heap, size)?,
        };
        let topology = Topology::discover(bootstrap.as_ref())?;
        let init = TransportInit {
            bootstrap: bootstrap.as_ref(),
            heap: &heap,
            topology: &topology,
            config: &config,
        };

        let forced = config.test_engine.trim().to_ascii_uppercase();
        let (transports, routes) = if forced.is_empty() || forced == "AUTO" {
            let mut built = Vec::new();
            for reg in &engines {
                built.push(reg.create(&init)?);
            }
            let mut routes = Vec::with_capacity(n_pes);
            for pe in 0..n_pes {
                let idx = built.iter().position(|t| t.can_reach(pe)).ok_or_else(|| {
                    Error::Unreachable {
                        pe,
                        available: transport::registered_names(),
                    }
                })?;
                routes.push(idx as u8);
            }
            (built, routes)
        } else {
            let reg = engines.iter().find(|r| r.name() == forced).ok_or_else(|| {
                Error::EngineUnavailable {
                    requested: config.test_engine.clone(),
                    reason: "neither linked into this program nor loaded from SHMEM_TRANSPORT_PLUGINS (SHMEM_TEST_ENGINE)".into(),
                    available: transport::registered_names(),
                }
            })?;
            let t = reg.create(&init)?;
            if let Some(pe) = (0..n_pes).find(|&pe| !t.can_reach(pe)) {
                return Err(Error::EngineUnavailable {
                    requested: config.test_engine.clone(),
                    reason: format!(
                        "it cannot reach PE {pe} (SHMEM_TEST_ENGINE forces it for every peer)"
                    ),
                    available: transport::registered_names(),
                });
            }
            (vec![t], vec![0u8; n_pes])
        };

        let async_routes = (0..n_pes)
            .map(|pe| {
                transports
                    .iter()
                    .position(|t| t.capabilities().contains(Capabilities::ASYNC) && t.can_reach(pe))
                    .map_or(routes[pe], |i| i as u8)
            })
            .collect::<Vec<u8>>();
        let direct = (0..n_pes)
            .map(|pe| {
                let t = &transports[routes[pe] as usize];
                if !t.capabilities().contains(Capabilities::LOAD_STORE) {
                    return None;
                }
                if pe == my_pe {
                    Some(heap.base())
                } else {
                    // SAFETY: `pe < n_pes` and offset 0 is inside every heap.
                    unsafe { t.peer_ptr(pe, 0) }
                }
            })
            .collect();
        let mut in_use: Vec<u8> = routes.iter().chain(&async_routes).copied().collect();
        in_use.sort_unstable();
        in_use.dedup();
        let local = topology.local_pes().len();
        let cores = config.cores();
        // Engines without a direct mapping move data on progress threads.
        let progress = routes.iter().any(|&r| {
            !transports[r as usize]
                .capabilities()
                .contains(Capabilities::DIRECT_POINTER)
        });
        let policy = WaitPolicy {
            spin: config.spin_duration(local, progress)?,
            yield_for: if local > cores || progress {
                Duration::from_micros(500)
            } else {
                Duration::ZERO
            },
            poll: Duration::from_millis(50),
            timeout: (!config.wait_timeout.is_zero()).then_some(config.wait_timeout),
        };
        let rt = Runtime {
            instance: opts.instance,
            my_pe,
            n_pes,
            base: heap.base(),
            size,
            heap,
            bootstrap,
            allocator: Mutex::new(Allocator::new(size)),
            gens: Generations::new(),
            topology,
            transports,
            routes,
            async_routes,
            in_use,
            direct,
            async_threshold: config.sdma_threshold.0,
            config,
            policy,
            finalized: AtomicBool::new(false),
            health: Arc::new(PeerHealth::new()),
            activity: Arc::new(Activity::new()),
            alloc_seq: std::sync::atomic::AtomicU64::new(0),
        };
        rt.bootstrap.watch_peers(rt.health.clone());
        if !rt.config.hang_report.is_zero() {
            rt.bootstrap.watch_activity(
                rt.activity.clone(),
                HangPolicy {
                    report_after: rt.config.hang_report,
                    abort: rt.config.hang_abort,
                },
            );
        }
        shmem_log!(
            Info,
            "PE {my_pe}/{n_pes}: heap {size} bytes, routes {}",
            rt.route_summary()
        );
        if rt.config.info && my_pe == 0 {
            eprint!("{}", rt.config.info_table());
            eprintln!("  routes: {}", rt.route_summary());
        }
        // Everyone has mapped everyone before any data moves.
        rt.bootstrap.barrier()?;
        Ok(Arc::new(rt))
    }

    /// Engine used for each PE, e.g. `"HCCS x4"`.
    pub fn route_summary(&self) -> String {
        let mut parts = Vec::new();
        for (i, t) in self.transports.iter().enumerate() {
            let n = self.routes.iter().filter(|&&r| r as usize == i).count();
            if n > 0 {
                parts.push(format!("{} x{n}", t.name()));
            }
        }
        parts.join(", ")
    }

    /// Name of the engine routing to `pe`.
    pub fn engine_for(&self, pe: PeId) -> Result<&'static str> {
        self.check_pe(pe)?;
        Ok(self.transports[self.routes[pe] as usize].name())
    }

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

    // ----- checks -------------------------------------------------------

    #[inline]
    fn live(&self) -> Result<()> {
        if self.health.word() & PeerHealth::FINALIZED != 0 {
            return Err(Error::NotInitialized);
        }
        Ok(())
    }

    /// Like `live`, and fails naming `pe` once the control plane has
    /// reported it dead (one relaxed load while all is well).
    #[inline]
    fn live_for(&self, pe: PeId) -> Result<()> {
        if self.health.word() != 0 {
            self.health.check(Some(pe))?;
        }
        Ok(())
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

    /// Creates a stream on this runtime.
    pub fn create_stream(self: &Arc<Self>) -> Result<crate::stream::Stream> {
        self.live()?;
        crate::stream::Stream::new(self.clone())
    }

    /// Names of the engines in use (routes and bulk routes).
    pub fn engines(&self) -> Vec<&'static str> {
        self.transports.iter().map(|t| t.name()).collect()
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
    pub fn offset_of(&self, addr: *const u8) -> Option<usize> {
        let a = addr as usize;
        let b = self.base.as_ptr() as usize;
        (a >= b && a < b + self.size).then(|| a - b)
    }

    /// Like [`Runtime::offset_of`], as an error naming the address.
    pub fn require_offset(&self, addr: *const u8) -> Result<usize> {
        self.offset_of(addr).ok_or(Error::NotSymmetric {
            addr: addr as usize,
            base: self.base.as_ptr() as usize,
            heap_size: self.size,
        })
    }

    /// Local address of heap `offset`.
    pub fn local_ptr(&self, offset: usize) -> Result<NonNull<u8>> {
        self.check_range(offset, 0)?;
        // SAFETY: offset is within the heap mapping.
        Ok(unsafe { NonNull::new_unchecked(self.base.as_ptr().add(offset)) })
    }

    // ----- memory management (collective) --------------------------------

    #[track_caller]
    fn agree(&self, kind: CollectiveKind, a: u64, b: u64) -> Result<()> {
        let call = match kind {
            CollectiveKind::Malloc => "malloc",
            CollectiveKind::Free => "free",
            CollectiveKind::Realloc => "realloc",
        };
        let seq = self.alloc_seq.fetch_add(1, Ordering::Relaxed) + 1;
        let _in_call = self.activity.enter(call, "", seq);
        let mut msg = [0u8; 17];
        msg[0] = kind as u8;
        msg[1..9].copy_from_slice(&a.to_le_bytes());
        msg[9..17].copy_from_slice(&b.to_le_bytes());
        let all = self.bootstrap.allgather(&msg)?;
        let name = |k: u8| match k {
            1 => "malloc",
            2 => "free",
            3 => "realloc",
            _ => "?",
        };
        let describe = |m: &[u8]| -> String {
            if m.len() != 17 {
                return format!("{} bytes of garbage", m.len());
            }
            let a = u64::from_le_bytes(m[1..9].try_into().unwrap_or_default());
            let b = u64::from_le_bytes(m[9..17].try_into().unwrap_or_default());
            match m[0] {
                1 => format!("malloc(size {a}, align {b})"),
                2 => format!("free(offset {a:#x})"),
                3 => format!("realloc(offset {a:#x}, size {b})"),
                k => format!("unknown op {k}"),
            }
        };
        if all.iter().any(|m| m.as_slice() != msg) {
            let details = all
                .iter()
                .enumerate()
                .map(|(pe, m)| format!("PE {pe}: {}", describe(m)))
                .collect::<Vec<_>>()
                .join("; ");
            return Err(Error::CollectiveMismatch {
                op: name(kind as u8),
                details,
            });
        }
        Ok(())
    }

    fn allocator(&self) -> MutexGuard<'_, Allocator> {
        self.allocator.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Allocates `bytes` aligned to `align` (collective; every PE must pass
    /// the same arguments). Returns the heap offset.
    #[track_caller]
    pub fn malloc_bytes(&self, bytes: usize, align: usize) -> Result<usize> {
        self.live()?;
        self.agree(CollectiveKind::Malloc, bytes as u64, align as u64)?;
        self.allocator().alloc(bytes, align)
    }

    /// Like [`Runtime::malloc_bytes`], with the memory zeroed on every PE
    /// before any PE returns.
    #[track_caller]
    pub fn calloc_bytes(&self, bytes: usize, align: usize) -> Result<usize> {
        let off = self.malloc_bytes(bytes, align)?;
        let len = self.allocator().len_of(off).unwrap_or(bytes);
        // SAFETY: the allocation lies inside our heap mapping.
        unsafe { std::ptr::write_bytes(self.base.as_ptr().add(off), 0, len) };
        self.bootstrap.barrier()?;
        Ok(off)
    }

    /// Frees the allocation at heap `offset` (collective).
    #[track_caller]
    pub fn free_bytes(&self, offset: usize) -> Result<()> {
        self.live()?;
        self.agree(CollectiveKind::Free, offset as u64, 0)?;
        self.allocator().free(offset)?;
        self.gens.retire(offset);
        Ok(())
    }

    /// Resizes the allocation at `offset`, keeping its contents (collective).
    /// Returns the new offset.
    #[track_caller]
    pub fn realloc_bytes(&self, offset: usize, bytes: usize) -> Result<usize> {
        self.live()?;
        self.agree(CollectiveKind::Realloc, offset as u64, bytes as u64)?;
        let new = {
            let mut a = self.allocator();
            let old_len = a.len_of(offset).ok_or(Error::InvalidFree { offset })?;
            if a.resize_in_place(offset, bytes)? {
                offset
            } else {
                let new = a.alloc(bytes, crate::heap::MIN_ALIGN)?;
                // SAFETY: both ranges are live allocations inside our heap and
                // distinct allocations never overlap.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        self.base.as_ptr().add(offset),
                        self.base.as_ptr().add(new),
                        old_len.min(bytes),
                    )
                };
                a.free(offset)?;
                new
            }
        };
        // Old handles are stale even when the block stayed in place.
        self.gens.retire(offset);
        self.bootstrap.barrier()?;
        Ok(new)
    }

    /// Errors unless `[offset, offset + len)` lies inside one live
    /// allocation (a diagnostic check: it takes the allocator's lock).
    ///
    /// # Errors
    /// [`Error::NotAllocated`] for a freed or never-allocated range.
    pub fn check_allocated(&self, offset: usize, len: usize) -> Result<()> {
        if self.allocator().contains(offset, len.max(1)) {
            Ok(())
        } else {
            Err(Error::NotAllocated { offset, len })
        }
    }

    /// Bytes still free in the heap, and the largest free block.
    pub fn heap_free(&self) -> (usize, usize) {
        let a = self.allocator();
        (a.free_bytes(), a.largest_free())
    }

    /// Allocates `count` elements of `T` (collective).
    #[track_caller]
    pub fn malloc<T: Element>(&self, count: usize) -> Result<SymBuf<T>> {
        self.align_alloc(std::mem::align_of::<T>(), count)
    }

    /// Allocates `count` elements of `T` in memory of kind `mem_type`
    /// (collective). On a host without an accelerator both kinds are host
    /// memory in the symmetric heap; the parameter exists so that code
    /// written for device memory runs unchanged.
    #[track_caller]
    pub fn malloc_mem<T: Element>(&self, count: usize, mem_type: MemType) -> Result<SymBuf<T>> {
        let _host_only = mem_type;
        self.malloc(count)
    }

    /// Allocates `count` zeroed elements of `T` (collective).
    #[track_caller]
    pub fn calloc<T: Element>(&self, count: usize) -> Result<SymBuf<T>> {
        let bytes = elems_bytes::<T>(count)?;
        let off = self.calloc_bytes(bytes, std::mem::align_of::<T>())?;
        Ok(self.tagged(off, count))
    }

    /// Allocates `count` elements of `T` aligned to `alignment` bytes (collective).
    ///
    /// # Errors
    /// `alignment` is not a power of two (0 included), the heap is
    /// exhausted, or the PEs disagree on the arguments.
    #[track_caller]
    pub fn align_alloc<T: Element>(&self, alignment: usize, count: usize) -> Result<SymBuf<T>> {
        if !alignment.is_power_of_two() {
            return Err(Error::invalid(
                "alignment",
                format!("{alignment} is not a power of two"),
            ));
        }
        let bytes = elems_bytes::<T>(count)?;
        let off = self.malloc_bytes(bytes, alignment.max(std::mem::align_of::<T>()))?;
        Ok(self.tagged(off, count))
    }

    /// A handle to the allocation just made at `offset`, with a fresh
    /// generation tag.
    fn tagged<T: Element>(&self, offset: usize, count: usize) -> SymBuf<T> {
        SymBuf::from_raw_parts_tagged(offset, count, self.instance, self.gens.issue(offset))
    }

    /// Resizes a symmetric object to `count` elements, keeping its prefix (collective).
    #[track_caller]
    pub fn realloc<T: Element>(&self, buf: SymBuf<T>, count: usize) -> Result<SymBuf<T>> {
        self.check_instance(buf.instance())?;
        self.check_tag(buf.tag(), buf.offset())?;
        let off = self.realloc_bytes(buf.offset(), elems_bytes::<T>(count)?)?;
        Ok(self.tagged(off, count))
    }

    /// Frees a symmetric object (collective).
    #[track_caller]
    pub fn free<T: Element>(&self, buf: SymBuf<T>) -> Result<()> {
        self.check_instance(buf.instance())?;
        self.check_tag(buf.tag(), buf.offset())?;
        self.free_bytes(buf.offset())
    }

    // ----- RMA, bytes ---------------------------------------------------

    /// Base of `pe`'s heap when it is reached by load/store (see
    /// [`Capabilities::LOAD_STORE`]); `None` for other routes or a bad PE.
    #[inline]
    fn direct(&self, pe: PeId) -> Option<NonNull<u8>> {
        self.direct.get(pe).copied().flatten()
    }

    /// Copies `src` into `pe`'s heap at `dst`.
    #[inline]
    pub fn put_bytes(&self, pe: PeId, dst: usize, src: &[u8]) -> Result<()> {
        self.live_for(pe)?;
        self.check_range(dst, src.len())?;
        if let Some(base) = self.direct(pe) {
            // SAFETY: [dst, dst+len) lies in `pe`'s mapped heap (checked);
            // `src` is a live slice.
            unsafe { crate::loadstore::put(base.as_ptr(), dst, src.as_ptr(), src.len()) };
            return Ok(());
        }
        let t = self.route(pe)?;
        // SAFETY: `src` is a live slice for the duration of the blocking call.
        unsafe { t.put(pe, dst, src.as_ptr(), src.len()) }
    }

    /// Copies `pe`'s heap at `src` into `dst`.
    #[inline]
    pub fn get_bytes(&self, pe: PeId, src: usize, dst: &mut [u8]) -> Result<()> {
        self.live_for(pe)?;
        self.check_range(src, dst.len())?;
        if let Some(base) = self.direct(pe) {
            // SAFETY: [src, src+len) lies in `pe`'s mapped heap (checked);
            // `dst` is a live exclusive slice.
            unsafe {
                std::ptr::copy(base.as_ptr().add(src), dst.as_mut_ptr(), dst.len());
            }
            return Ok(());
        }
        let t = self.route(pe)?;
        // SAFETY: `dst` is a live exclusive slice for the blocking call.
        unsafe { t.get(pe, src, dst.as_mut_ptr(), dst.len()) }
    }

    /// Starts a put; completes at [`Runtime::quiet`].
    ///
    /// # Safety
    /// `src` must stay valid and unmodified for `len` bytes until `quiet` returns.
    pub unsafe fn put_nbi_raw(
        &self,
        pe: PeId,
        dst: usize,
        src: *const u8,
        len: usize,
    ) -> Result<()> {
        if len < self.async_threshold && self.direct(pe).is_some() {
            // A small copy on a load/store route is complete at once.
            // SAFETY: the caller keeps `src` valid for this call.
            return self.put_bytes(pe, dst, unsafe { std::slice::from_raw_parts(src, len) });
        }
        let t = if len >= self.async_threshold {
            self.async_route(pe)?
        } else {
            self.route(pe)?
        };
        self.check_range(dst, len)?;
        // SAFETY: forwarded contract.
        unsafe { t.put_nbi(pe, dst, src, len) }
    }

    /// Starts a get; `dst` holds the data after [`Runtime::quiet`].
    ///
    /// # Safety
    /// `dst` must stay valid for writes of `len` bytes until `quiet` returns.
    pub unsafe fn get_nbi_raw(&self, pe: PeId, src: usize, dst: *mut u8, len: usize) -> Result<()> {
        if len < self.async_threshold && self.direct(pe).is_some() {
            // SAFETY: the caller keeps `dst` valid and unaliased for this call.
            return self.get_bytes(pe, src, unsafe { std::slice::from_raw_parts_mut(dst, len) });
        }
        let t = if len >= self.async_threshold {
            self.async_route(pe)?
        } else {
            self.route(pe)?
        };
        self.check_range(src, len)?;
        // SAFETY: forwarded contract.
        unsafe { t.get_nbi(pe, src, dst, len) }
    }

    /// Starts a put on the bulk engine and returns its completion.
    ///
    /// # Safety
    /// `src` must stay valid for `len` bytes until the completion is done.
    pub unsafe fn put_async_raw(
        &self,
        pe: PeId,
        dst: usize,
        src: *const u8,
        len: usize,
    ) -> Result<Completion> {
        let t = self.async_route(pe)?;
        self.check_range(dst, len)?;
        // SAFETY: forwarded contract.
        let c = unsafe { t.put_async(pe, dst, src, len) }?;
        self.fail_if_dies(&c, pe);
        Ok(c)
    }

    /// Makes `c` end in an error naming `pe` if `pe` is known dead when the
    /// copy finishes.
    fn fail_if_dies(&self, c: &Completion, pe: PeId) {
        let health = self.health.clone();
        c.then(move || {
            if health.word() != 0 {
                health.check(Some(pe))?;
            }
            Ok(())
        });
    }

    /// Starts a get on the bulk engine and returns its completion.
    ///
    /// # Safety
    /// `dst` must stay valid for `len` bytes until the completion is done.
    pub unsafe fn get_async_raw(
        &self,
        pe: PeId,
        src: usize,
        dst: *mut u8,
        len: usize,
    ) -> Result<Completion> {
        let t = self.async_route(pe)?;
        self.check_range(src, len)?;
        // SAFETY: forwarded contract.
        let c = unsafe { t.get_async(pe, src, dst, len) }?;
        self.fail_if_dies(&c, pe);
        Ok(c)
    }

    /// Non-blocking put that owns its source: the handle gives the buffer
    /// back when the data has left it (`wait` or `.await`).
    pub fn put_handle<T: Element>(
        &self,
        dst: impl Into<SymSlice<T>>,
        src: Vec<T>,
        pe: PeId,
    ) -> Result<Handle<Vec<T>>> {
        let dst = dst.into();
        self.check_slice(&dst)?;
        fits(src.len(), dst.len())?;
        // SAFETY: the Vec's heap buffer does not move when the Vec is moved
        // into the handle, which keeps it alive until completion.
        let c = unsafe {
            self.put_async_raw(
                pe,
                dst.offset(),
                src.as_ptr() as *const u8,
                std::mem::size_of_val(&src[..]),
            )?
        };
        Ok(Handle::new(c, src))
    }

    /// Non-blocking get into an owned buffer (its length is the element
    /// count); the handle gives the filled buffer back.
    pub fn get_handle<T: Element>(
        &self,
        mut into: Vec<T>,
        src: impl Into<SymSlice<T>>,
        pe: PeId,
    ) -> Result<Handle<Vec<T>>> {
        let src = src.into();
        self.check_slice(&src)?;
        fits(into.len(), src.len())?;
        let len = std::mem::size_of_val(&into[..]);
        // SAFETY: as for put_handle; the buffer is written only by the engine
        // until the handle completes.
        let c = unsafe { self.get_async_raw(pe, src.offset(), into.as_mut_ptr() as *mut u8, len)? };
        Ok(Handle::new(c, into))
    }

    fn external_engine(&self, pe: PeId) -> Result<&dyn Transport> {
        self.live_for(pe)?;
        self.check_pe(pe)?;
        self.transports
            .iter()
            .find(|t| t.capabilities().contains(Capabilities::EXTERNAL_MEMORY) && t.can_reach(pe))
            .map(|t| t.as_ref())
            .ok_or_else(|| Error::Unsupported(format!(
                "no linked engine reaches PE {pe}'s memory outside the symmetric heap (the SDMA engine does, for same-node PEs)"
            )))
    }

    /// Copies `src` into `pe`'s process memory at virtual address `addr`
    /// (outside the symmetric heap, e.g. a peer's static data).
    ///
    /// # Safety
    /// `addr..addr+src.len()` must be memory of `pe` that the program allows
    /// to be written (the OS refuses unmapped addresses with an error).
    pub unsafe fn put_to_address(&self, pe: PeId, addr: usize, src: &[u8]) -> Result<()> {
        let t = self.external_engine(pe)?;
        // SAFETY: `src` is a live slice; the remote side is the caller's contract.
        unsafe { t.put_to_address(pe, addr, src.as_ptr(), src.len()) }
    }

    /// Copies from `pe`'s process memory at virtual address `addr` into `dst`.
    pub fn get_from_address(&self, pe: PeId, addr: usize, dst: &mut [u8]) -> Result<()> {
        let t = self.external_engine(pe)?;
        // SAFETY: `dst` is a live exclusive slice; reading a peer is harmless to it.
        unsafe { t.get_from_address(pe, addr, dst.as_mut_ptr(), dst.len()) }
    }

    // ----- RMA, typed ---------------------------------------------------

    /// Copies `src` into `dst` on `pe`. `src.len()` must not exceed `dst.len()`.
    pub fn put<T: Element>(&self, dst: impl Into<SymSlice<T>>, src: &[T], pe: PeId) -> Result<()> {
        let dst = dst.into();
        self.check_slice(&dst)?;
        fits(src.len(), dst.len())?;
        self.put_bytes(pe, dst.offset(), as_bytes(src))
    }

    /// Copies `src` on `pe` into `dst`. `dst.len()` must not exceed `src.len()`.
    pub fn get<T: Element>(
        &self,
        dst: &mut [T],
        src: impl Into<SymSlice<T>>,
        pe: PeId,
    ) -> Result<()> {
        let src = src.into();
        self.check_slice(&src)?;
        fits(dst.len(), src.len())?;
        self.get_bytes(pe, src.offset(), as_bytes_mut(dst))
    }

    /// Writes one element.
    pub fn p<T: Element>(&self, dst: SymRef<T>, value: T, pe: PeId) -> Result<()> {
        self.check_ref(&dst)?;
        self.put_bytes(pe, dst.offset(), as_bytes(std::slice::from_ref(&value)))
    }

    /// Reads one element.
    pub fn g<T: Element>(&self, src: SymRef<T>, pe: PeId) -> Result<T> {
        self.check_ref(&src)?;
        let mut v = std::mem::MaybeUninit::<T>::uninit();
        // SAFETY: a byte view of the uninitialised value, fully written by
        // get_bytes before being read (Element: every bit pattern is valid).
        let bytes = unsafe {
            std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut u8, std::mem::size_of::<T>())
        };
        self.get_bytes(pe, src.offset(), bytes)?;
        // SAFETY: all bytes written above.
        Ok(unsafe { v.assume_init() })
    }

    /// Strided put: `dst[i*dst_stride] = src[i*src_stride]` for `i < nelems`
    /// (strides in elements, at least 1).
    pub fn iput<T: Element>(
        &self,
        dst: impl Into<SymSlice<T>>,
        src: &[T],
        dst_stride: usize,
        src_stride: usize,
        nelems: usize,
        pe: PeId,
    ) -> Result<()> {
        let dst = dst.into();
        self.check_slice(&dst)?;
        strided_fits("src", src.len(), src_stride, nelems)?;
        strided_fits("dest", dst.len(), dst_stride, nelems)?;
        let sz = std::mem::size_of::<T>();
        for i in 0..nelems {
            self.put_bytes(
                pe,
                dst.offset() + i * dst_stride * sz,
                as_bytes(std::slice::from_ref(&src[i * src_stride])),
            )?;
        }
        Ok(())
    }

    /// Strided get: `dst[i*dst_stride] = src[i*src_stride]` for `i < nelems`.
    pub fn iget<T: Element>(
        &self,
        dst: &mut [T],
        src: impl Into<SymSlice<T>>,
        dst_stride: usize,
        src_stride: usize,
        nelems: usize,
        pe: PeId,
    ) -> Result<()> {
        let src = src.into();
        self.check_slice(&src)?;
        strided_fits("dest", dst.len(), dst_stride, nelems)?;
        strided_fits("src", src.len(), src_stride, nelems)?;
        let sz = std::mem::size_of::<T>();
        for i in 0..nelems {
            self.get_bytes(
                pe,
                src.offset() + i * src_stride * sz,
                as_bytes_mut(std::slice::from_mut(&mut dst[i * dst_stride])),
            )?;
        }
        Ok(())
    }

    /// Non-blocking put; `src` may be reused after [`Runtime::quiet`].
    ///
    /// # Safety
    /// `src` must stay alive and unmodified until `quiet` returns.
    pub unsafe fn put_nbi<T: Element>(
        &self,
        dst: impl Into<SymSlice<T>>,
        src: &[T],
        pe: PeId,
    ) -> Result<()> {
        let dst = dst.into();
        self.check_slice(&dst)?;
        fits(src.len(), dst.len())?;
        // SAFETY: forwarded contract.
        unsafe {
            self.put_nbi_raw(
                pe,
                dst.offset(),
                src.as_ptr() as *const u8,
                std::mem::size_of_val(src),
            )
        }
    }

    /// Non-blocking get; `dst` holds the data after [`Runtime::quiet`].
    ///
    /// # Safety
    /// `dst` must stay alive and untouched until `quiet` returns.
    pub unsafe fn get_nbi<T: Element>(
        &self,
        dst: &mut [T],
        src: impl Into<SymSlice<T>>,
        pe: PeId,
    ) -> Result<()> {
        let src = src.into();
        self.check_slice(&src)?;
        fits(dst.len(), src.len())?;
        // SAFETY: forwarded contract.
        unsafe {
            self.get_nbi_raw(
                pe,
                src.offset(),
                dst.as_mut_ptr() as *mut u8,
                std::mem::size_of_val(dst),
            )
        }
    }

    // ----- atomics --------------------------------------------------------

    /// Performs a raw atomic on `pe`'s heap at `offset` (bounds and alignment checked).
    #[inline]
    pub fn atomic_raw(&self, pe: PeId, offset: usize, width: AmoWidth, op: AmoOp) -> Result<u64> {
        self.live_for(pe)?;
        self.check_atomic(offset, width.bytes())?;
        if let Some(base) = self.direct(pe) {
            // SAFETY: in-heap, aligned word of `pe`'s mapped heap (checked).
            return Ok(unsafe { crate::loadstore::atomic(base.as_ptr(), offset, width, op) });
        }
        let t = self.route(pe)?;
        // SAFETY: `route` checked the PE, `check_atomic` the range and
        // alignment of the word.
        unsafe { t.atomic(pe, offset, width, op) }
    }

    fn amo<T: AtomicElement>(&self, target: SymRef<T>, pe: PeId, op: AmoOp) -> Result<T> {
        self.check_ref(&target)?;
        self.atomic_raw(pe, target.offset(), T::WIDTH, op)
            .map(T::from_bits)
    }

    /// Atomically reads the element.
    pub fn atomic_fetch<T: AtomicElement>(&self, target: SymRef<T>, pe: PeId) -> Result<T> {
        self.amo(target, pe, AmoOp::Fetch)
    }
    /// Atomically writes the element.
    pub fn atomic_set<T: AtomicElement>(
        &self,
        target: SymRef<T>,
        value: T,
        pe: PeId,
    ) -> Result<()> {
        self.amo(target, pe, AmoOp::Set(value.to_bits()))
            .map(|_| ())
    }
    /// Atomically writes the element and returns the old value.
    pub fn atomic_swap<T: AtomicElement>(
        &self,
        target: SymRef<T>,
        value: T,
        pe: PeId,
    ) -> Result<T> {
        self.amo(target, pe, AmoOp::Swap(value.to_bits()))
    }
    /// Writes `value` if the element equals `cond`; returns the old value.
    pub fn atomic_compare_swap<T: AtomicInteger>(
        &self,
        target: SymRef<T>,
        cond: T,
        value: T,
        pe: PeId,
    ) -> Result<T> {
        self.amo(
            target,
            pe,
            AmoOp::CompareSwap {
                cond: cond.to_bits(),
                value: value.to_bits(),
            },
        )
    }
    /// Adds `value` and returns the old value.
    pub fn atomic_fetch_add<T: AtomicInteger>(
        &self,
        target: SymRef<T>,
        value: T,
        pe: PeId,
    ) -> Result<T> {
        self.amo(target, pe, AmoOp::Add(value.to_bits()))
    }
    /// Adds `value`.
    pub fn atomic_add<T: AtomicInteger>(
        &self,
        target: SymRef<T>,
        value: T,
        pe: PeId,
    ) -> Result<()> {
        self.atomic_fetch_add(target, value, pe).map(|_| ())
    }
    /// Adds one and returns the old value.
    pub fn atomic_fetch_inc<T: AtomicInteger>(&self, target: SymRef<T>, pe: PeId) -> Result<T> {
        self.amo(target, pe, AmoOp::Add(1))
    }
    /// Adds one.
    pub fn atomic_inc<T: AtomicInteger>(&self, target: SymRef<T>, pe: PeId) -> Result<()> {
        self.atomic_fetch_inc(target, pe).map(|_| ())
    }
    /// Bitwise and; returns the old value.
    pub fn atomic_fetch_and<T: AtomicInteger>(
        &self,
        target: SymRef<T>,
        value: T,
        pe: PeId,
    ) -> Result<T> {
        self.amo(target, pe, AmoOp::And(value.to_bits()))
    }
    /// Bitwise and.
    pub fn atomic_and<T: AtomicInteger>(
        &self,
        target: SymRef<T>,
        value: T,
        pe: PeId,
    ) -> Result<()> {
        self.atomic_fetch_and(target, value, pe).map(|_| ())
    }
    /// Bitwise or; returns the old value.
    pub fn atomic_fetch_or<T: AtomicInteger>(
        &self,
        target: SymRef<T>,
        value: T,
        pe: PeId,
    ) -> Result<T> {
        self.amo(target, pe, AmoOp::Or(value.to_bits()))
    }
    /// Bitwise or.
    pub fn atomic_or<T: AtomicInteger>(&self, target: SymRef<T>, value: T, pe: PeId) -> Result<()> {
        self.atomic_fetch_or(target, value, pe).map(|_| ())
    }
    /// Bitwise xor; returns the old value.
    pub fn atomic_fetch_xor<T: AtomicInteger>(
        &self,
        target: SymRef<T>,
        value: T,
        pe: PeId,
    ) -> Result<T> {
        self.amo(target, pe, AmoOp::Xor(value.to_bits()))
    }
    /// Bitwise xor.
    pub fn atomic_xor<T: AtomicInteger>(
        &self,
        target: SymRef<T>,
        value: T,
        pe: PeId,
    ) -> Result<()> {
        self.atomic_fetch_xor(target, value, pe).map(|_| ())
    }

    // ----- signals --------------------------------------------------------

    fn check_signal(&self, sig: SymRef<u64>) -> Result<()> {
        self.check_ref(&sig)?;
        self.check_atomic(sig.offset(), 8)
    }

    /// Puts `src` into `dst` on `pe`, then updates `sig` on `pe`; the signal
    /// is observed only after the data.
    pub fn put_signal<T: Element>(
        &self,
        dst: impl Into<SymSlice<T>>,
        src: &[T],
        sig: SymRef<u64>,
        value: u64,
        op: SignalOp,
        pe: PeId,
    ) -> Result<()> {
        let dst = dst.into();
        self.check_slice(&dst)?;
        fits(src.len(), dst.len())?;
        self.check_signal(sig)?;
        let t = self.route(pe)?;
        let b = as_bytes(src);
        // SAFETY: `src` is live for this blocking call.
        unsafe {
            t.put_signal(
                pe,
                dst.offset(),
                b.as_ptr(),
                b.len(),
                sig.offset(),
                op,
                value,
                false,
            )
        }
    }

    /// Non-blocking [`Runtime::put_signal`].
    ///
    /// # Safety
    /// `src` must stay alive and unmodified until `quiet` returns.
    pub unsafe fn put_signal_nbi<T: Element>(
        &self,
        dst: impl Into<SymSlice<T>>,
        src: &[T],
        sig: SymRef<u64>,
        value: u64,
        op: SignalOp,
        pe: PeId,
    ) -> Result<()> {
        let dst = dst.into();
        self.check_slice(&dst)?;
        fits(src.len(), dst.len())?;
        self.check_signal(sig)?;
        let t = self.route(pe)?;
        let b = as_bytes(src);
        // SAFETY: forwarded contract.
        unsafe {
            t.put_signal(
                pe,
                dst.offset(),
                b.as_ptr(),
                b.len(),
                sig.offset(),
                op,
                value,
                true,
            )
        }
    }

    /// Updates `sig` on `pe` without data.
    #[inline]
    pub fn signal_op(&self, sig: SymRef<u64>, value: u64, op: SignalOp, pe: PeId) -> Result<()> {
        self.live_for(pe)?;
        self.check_signal(sig)?;
        if let Some(base) = self.direct(pe) {
            // SAFETY: in-heap, aligned signal word of `pe`'s mapped heap (checked).
            unsafe {
                crate::loadstore::signal(
                    base.as_ptr(),
                    sig.offset(),
                    op,
                    value,
                    wait::Span::bytes(0, 0),
                )
            };
            return Ok(());
        }
        let t = self.route(pe)?;
        // SAFETY: `route` checked the PE, `check_signal` the word.
        unsafe { t.signal(pe, sig.offset(), op, value) }
    }

    /// Reads this PE's signal word.
    pub fn signal_fetch(&self, sig: SymRef<u64>) -> Result<u64> {
        self.live()?;
        self.check_signal(sig)?;
        // SAFETY: in-heap, 8-byte aligned (checked).
        Ok(unsafe { u64::load(self.base.as_ptr().add(sig.offset())) })
    }

    /// Waits until this PE's `sig <cmp> value`; returns the signal's value.
    #[track_caller]
    pub fn signal_wait_until(&self, sig: SymRef<u64>, cmp: Cmp, value: u64) -> Result<u64> {
        self.live()?;
        self.check_signal(sig)?;
        // SAFETY: in-heap, 8-byte aligned (checked).
        let p = unsafe { self.base.as_ptr().add(sig.offset()) };
        let mut seen = 0;
        self.wait_on(sig.offset(), 8, || {
            // SAFETY: as above.
            seen = unsafe { u64::load(p) };
            cmp.eval(seen, value)
        })?;
        Ok(seen)
    }

    // ----- point-to-point synchronisation on local memory --------------------

    /// Blocks until `ready()` holds, spinning first and then sleeping; fails
    /// when a PE exits, the job is aborted, or `SHMEM_WAIT_TIMEOUT` passes.
    ///
    /// `ready` may read anything; a sleeping caller is woken by every write
    /// into this PE's memory. When the condition reads only one range of the
    /// heap, [`Runtime::wait_on`] is cheaper for everyone.
    ///
    /// # Errors
    /// [`Error::PeerExited`] or [`Error::Aborted`] when a PE dies or the job
    /// is aborted, [`Error::Timeout`] after `SHMEM_WAIT_TIMEOUT`.
    #[track_caller]
    pub fn wait_for(&self, ready: impl FnMut() -> bool) -> Result<()> {
        self.wait_watching(wait::Span::ALL, ready)
    }

    /// [`Runtime::wait_for`] for a condition that reads only `len` bytes at
    /// heap `offset` of this PE: while it sleeps, writers wake it only when
    /// they write into that range, so puts elsewhere cost them no system call
    /// and cost this PE no wake-up.
    ///
    /// # Errors
    /// As [`Runtime::wait_for`].
    #[track_caller]
    pub fn wait_on(&self, offset: usize, len: usize, ready: impl FnMut() -> bool) -> Result<()> {
        self.wait_watching(wait::Span::bytes(offset, len), ready)
    }

    /// [`Runtime::wait_on`] for a condition on `len` bytes at `offset` of
    /// `pe`'s heap, which must be mapped here (see [`Runtime::peer_ptr`]):
    /// the caller sleeps on `pe`'s doorbell, so one wake-up by a writer of
    /// that range releases every PE of the node waiting on it (a barrier's
    /// release word read by all).
    ///
    /// # Errors
    /// As [`Runtime::wait_for`]; [`Error::InvalidArgument`] when `pe`'s heap is not mapped here or the
    /// range is outside the heap.
    #[track_caller]
    pub fn wait_on_pe(
        &self,
        pe: PeId,
        offset: usize,
        len: usize,
        ready: impl FnMut() -> bool,
    ) -> Result<()> {
        self.live()?;
        self.check_pe(pe)?;
        self.check_range(offset, len)?;
        let base = if pe == self.my_pe {
            Some(self.base)
        } else {
            let t = self.route(pe)?;
            // SAFETY: `route` checked the PE; offset 0 is in every heap.
            unsafe { t.peer_ptr(pe, 0) }
        };
        let Some(base) = base else {
            return Err(Error::invalid(
                "pe",
                format!("PE {pe}'s heap is not mapped into this PE; wait on local memory instead"),
            ));
        };
        // SAFETY: a mapped heap starts with its control block and stays
        // mapped for the runtime's life.
        unsafe {
            self.wait_in(
                base.as_ptr() as *const ControlBlock,
                wait::Span::bytes(offset, len),
                Some(pe),
                ready,
            )
        }
    }

    /// `FUTEX_WAKE` system calls that writers (this PE's threads and its
    /// peers) made to wake this PE's waiters since the job started.
    pub fn wakeups_received(&self) -> u64 {
        // SAFETY: the control block sits at offset 0 of our live heap.
        unsafe { (*self.control_block()).wakeups.load(Ordering::Relaxed) }
    }

    #[track_caller]
    fn wait_watching(&self, watch: wait::Span, ready: impl FnMut() -> bool) -> Result<()> {
        // SAFETY: the control block sits at offset 0 of our live heap.
        unsafe { self.wait_in(self.control_block(), watch, None, ready) }
    }

    /// Waits on the heap whose control block is `cb` (ours, or mapped PE
    /// `peer`'s, which a timeout names).
    ///
    /// # Safety
    /// `cb` must be the control block of a heap mapped for the runtime's life.
    #[track_caller]
    unsafe fn wait_in(
        &self,
        cb: *const ControlBlock,
        watch: wait::Span,
        peer: Option<PeId>,
        ready: impl FnMut() -> bool,
    ) -> Result<()> {
        let bs = &self.bootstrap;
        // Recorded for the hang report once the wait starts sleeping (free
        // on the fast path); a collective's own entry takes precedence.
        let mut in_call = None;
        let location = std::panic::Location::caller();
        // SAFETY: guaranteed by the caller.
        unsafe {
            wait::wait_until(
                cb,
                self.policy,
                watch,
                ready,
                || {
                    in_call.get_or_insert_with(|| {
                        self.activity.enter_at("wait_until", "", 0, location)
                    });
                    bs.check_peers()
                },
                |d| {
                    let mut what = match peer {
                        Some(pe) => {
                            format!("wait on PE {pe}'s symmetric memory (SHMEM_WAIT_TIMEOUT)")
                        }
                        None => "wait on symmetric memory (SHMEM_WAIT_TIMEOUT)".to_string(),
                    };
                    if let Some(h) = bs.hang_summary() {
                        what.push_str(&format!("; last hang report: {h}"));
                    }
                    let e = Error::Timeout {
                        what,
                        secs: d.as_secs_f64(),
                    };
                    bs.note_failure(&e.to_string());
                    e
                },
            )
        }
    }

    fn wait_ptrs<T: WaitElement>(&self, ivars: SymSlice<T>) -> Result<*const u8> {
        self.live()?;
        self.check_slice(&ivars)?;
        let align = std::mem::align_of::<T>();
        if !ivars.offset().is_multiple_of(align) {
            return Err(Error::Misaligned {
                offset: ivars.offset(),
                width: align,
            });
        }
        // SAFETY: in-heap (checked).
        Ok(unsafe { self.base.as_ptr().add(ivars.offset()) })
    }

    fn read_at<T: WaitElement>(p: *const u8, i: usize) -> T {
        // SAFETY: callers only pass indices inside a checked, aligned slice.
        unsafe { T::load(p.add(i * std::mem::size_of::<T>())) }
    }

    fn status_ok(status: Option<&[bool]>, i: usize) -> bool {
        status.is_none_or(|s| !s.get(i).copied().unwrap_or(false))
    }

    fn check_status(status: Option<&[bool]>, n: usize) -> Result<()> {
        if let Some(s) = status {
            if s.len() != n {
                return Err(Error::invalid(
                    "status",
                    format!("has {} entries for {n} variables", s.len()),
                ));
            }
        }
        Ok(())
    }

    /// Waits until this PE's `ivar <cmp> value`.
    #[track_caller]
    pub fn wait_until<T: WaitElement>(&self, ivar: SymRef<T>, cmp: Cmp, value: T) -> Result<()> {
        self.check_ref(&ivar)?;
        let p = self.wait_ptrs(SymSlice::<T>::from_raw_parts(
            ivar.offset(),
            1,
            ivar.instance(),
        ))?;
        self.wait_on(ivar.offset(), std::mem::size_of::<T>(), || {
            cmp.eval(Self::read_at::<T>(p, 0), value)
        })
    }

    /// Whether `ivar <cmp> value` holds now.
    pub fn test<T: WaitElement>(&self, ivar: SymRef<T>, cmp: Cmp, value: T) -> Result<bool> {
        self.check_ref(&ivar)?;
        let p = self.wait_ptrs(SymSlice::<T>::from_raw_parts(
            ivar.offset(),
            1,
            ivar.instance(),
        ))?;
        Ok(cmp.eval(Self::read_at::<T>(p, 0), value))
    }

    /// Waits until every variable not masked by `status` (true = skip) satisfies the comparison.
    #[track_caller]
    pub fn wait_until_all<T: WaitElement>(
        &self,
        ivars: SymSlice<T>,
        status: Option<&[bool]>,
        cmp: Cmp,
        value: T,
    ) -> Result<()> {
        self.wait_until_all_vector(ivars, status, cmp, &vec![value; ivars.len()])
    }

    /// Waits until at least one unmasked variable satisfies the comparison;
    /// returns its index, or `None` if all are masked.
    #[track_caller]
    pub fn wait_until_any<T: WaitElement>(
        &self,
        ivars: SymSlice<T>,
        status: Option<&[bool]>,
        cmp: Cmp,
        value: T,
    ) -> Result<Option<usize>> {
        self.wait_until_any_vector(ivars, status, cmp, &vec![value; ivars.len()])
    }

    /// Waits until at least one unmasked variable satisfies the comparison;
    /// returns the indices of all that do.
    #[track_caller]
    pub fn wait_until_some<T: WaitElement>(
        &self,
        ivars: SymSlice<T>,
        status: Option<&[bool]>,
        cmp: Cmp,
        value: T,
    ) -> Result<Vec<usize>> {
        self.wait_until_some_vector(ivars, status, cmp, &vec![value; ivars.len()])
    }

    /// [`Runtime::wait_until_all`] with one comparison value per variable.
    #[track_caller]
    pub fn wait_until_all_vector<T: WaitElement>(
        &self,
        ivars: SymSlice<T>,
        status: Option<&[bool]>,
        cmp: Cmp,
        values: &[T],
    ) -> Result<()> {
        let p = self.vector_args(ivars, status, values)?;
        self.wait_on(ivars.offset(), ivars.byte_len(), || {
            (0..ivars.len()).all(|i| {
                !Self::status_ok(status, i) || cmp.eval(Self::read_at::<T>(p, i), values[i])
            })
        })
    }

    /// [`Runtime::wait_until_any`] with one comparison value per variable.
    #[track_caller]
    pub fn wait_until_any_vector<T: WaitElement>(
        &self,
        ivars: SymSlice<T>,
        status: Option<&[bool]>,
        cmp: Cmp,
        values: &[T],
    ) -> Result<Option<usize>> {
        let p = self.vector_args(ivars, status, values)?;
        if (0..ivars.len()).all(|i| !Self::status_ok(status, i)) {
            return Ok(None);
        }
        let mut found = None;
        self.wait_on(ivars.offset(), ivars.byte_len(), || {
            found = (0..ivars.len()).find(|&i| {
                Self::status_ok(status, i) && cmp.eval(Self::read_at::<T>(p, i), values[i])
            });
            found.is_some()
        })?;
        Ok(found)
    }

    /// [`Runtime::wait_until_some`] with one comparison value per variable.
    #[track_caller]
    pub fn wait_until_some_vector<T: WaitElement>(
        &self,
        ivars: SymSlice<T>,
        status: Option<&[bool]>,
        cmp: Cmp,
        values: &[T],
    ) -> Result<Vec<usize>> {
        let p = self.vector_args(ivars, status, values)?;
        if (0..ivars.len()).all(|i| !Self::status_ok(status, i)) {
            return Ok(Vec::new());
        }
        let mut found = Vec::new();
        self.wait_on(ivars.offset(), ivars.byte_len(), || {
            found = (0..ivars.len())
                .filter(|&i| {
                    Self::status_ok(status, i) && cmp.eval(Self::read_at::<T>(p, i), values[i])
                })
                .collect();
            !found.is_empty()
        })?;
        Ok(found)
    }

    /// Whether every unmasked variable satisfies the comparison now.
    pub fn test_all<T: WaitElement>(
        &self,
        ivars: SymSlice<T>,
        status: Option<&[bool]>,
        cmp: Cmp,
        value: T,
    ) -> Result<bool> {
        self.test_all_vector(ivars, status, cmp, &vec![value; ivars.len()])
    }

    /// The first unmasked variable satisfying the comparison now, if any.
    pub fn test_any<T: WaitElement>(
        &self,
        ivars: SymSlice<T>,
        status: Option<&[bool]>,
        cmp: Cmp,
        value: T,
    ) -> Result<Option<usize>> {
        self.test_any_vector(ivars, status, cmp, &vec![value; ivars.len()])
    }

    /// Every unmasked variable satisfying the comparison now.
    pub fn test_some<T: WaitElement>(
        &self,
        ivars: SymSlice<T>,
        status: Option<&[bool]>,
        cmp: Cmp,
        value: T,
    ) -> Result<Vec<usize>> {
        self.test_some_vector(ivars, status, cmp, &vec![value; ivars.len()])
    }

    /// [`Runtime::test_all`] with one value per variable.
    pub fn test_all_vector<T: WaitElement>(
        &self,
        ivars: SymSlice<T>,
        status: Option<&[bool]>,
        cmp: Cmp,
        values: &[T],
    ) -> Result<bool> {
        let p = self.vector_args(ivars, status, values)?;
        Ok((0..ivars.len())
            .all(|i| !Self::status_ok(status, i) || cmp.eval(Self::read_at::<T>(p, i), values[i])))
    }

    /// [`Runtime::test_any`] with one value per variable.
    pub fn test_any_vector<T: WaitElement>(
        &self,
        ivars: SymSlice<T>,
        status: Option<&[bool]>,
        cmp: Cmp,
        values: &[T],
    ) -> Result<Option<usize>> {
        let p = self.vector_args(ivars, status, values)?;
        Ok((0..ivars.len())
            .find(|&i| Self::status_ok(status, i) && cmp.eval(Self::read_at::<T>(p, i), values[i])))
    }

    /// [`Runtime::test_some`] with one value per variable.
    pub fn test_some_vector<T: WaitElement>(
        &self,
        ivars: SymSlice<T>,
        status: Option<&[bool]>,
        cmp: Cmp,
        values: &[T],
    ) -> Result<Vec<usize>> {
        let p = self.vector_args(ivars, status, values)?;
        Ok((0..ivars.len())
            .filter(|&i| {
                Self::status_ok(status, i) && cmp.eval(Self::read_at::<T>(p, i), values[i])
            })
            .collect())
    }

    fn vector_args<T: WaitElement>(
        &self,
        ivars: SymSlice<T>,
        status: Option<&[bool]>,
        values: &[T],
    ) -> Result<*const u8> {
        Self::check_status(status, ivars.len())?;
        if values.len() != ivars.len() {
            return Err(Error::invalid(
                "cmp_values",
                format!("has {} entries for {} variables", values.len(), ivars.len()),
            ));
        }
        self.wait_ptrs(ivars)
    }

    // ----- local access ---------------------------------------------------

    /// Copies this PE's part of a symmetric object into a `Vec`.
    pub fn read_local<T: Element>(&self, src: impl Into<SymSlice<T>>) -> Result<Vec<T>> {
        self.live()?;
        let src = src.into();
        self.check_slice(&src)?;
        let mut v = Vec::<T>::with_capacity(src.len());
        // SAFETY: the source range lies in our heap (checked); the
        // destination has capacity for len elements; Element allows any bits.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.base.as_ptr().add(src.offset()),
                v.as_mut_ptr() as *mut u8,
                src.byte_len(),
            );
            v.set_len(src.len());
        }
        Ok(v)
    }

    /// Copies `data` into this PE's part of a symmetric object.
    pub fn write_local<T: Element>(&self, dst: impl Into<SymSlice<T>>, data: &[T]) -> Result<()> {
        self.live()?;
        let dst = dst.into();
        self.check_slice(&dst)?;
        fits(data.len(), dst.len())?;
        // SAFETY: destination lies in our heap (checked) and cannot overlap a
        // Rust slice the caller borrows (ours is shared memory).
        unsafe {
            std::ptr::copy(
                data.as_ptr() as *const u8,
                self.base.as_ptr().add(dst.offset()),
                std::mem::size_of_val(data),
            )
        };
        Ok(())
    }

    /// A slice view of this PE's part of a symmetric object.
    ///
    /// # Safety
    /// No other PE (or thread) may write the range while the slice lives.
    pub unsafe fn local_slice<T: Element>(&self, src: impl Into<SymSlice<T>>) -> Result<&[T]> {
        self.live()?;
        let src = src.into();
        self.check_slice(&src)?;
        // SAFETY: in-heap range; element alignment holds because allocations
        // are aligned to at least align_of::<T>(); exclusivity is the caller's.
        Ok(unsafe {
            std::slice::from_raw_parts(self.base.as_ptr().add(src.offset()) as *const T, src.len())
        })
    }

    /// A mutable slice view of this PE's part of a symmetric object.
    ///
    /// # Safety
    /// Nothing else (other PEs, threads, views) may access the range while
    /// the slice lives.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn local_slice_mut<T: Element>(
        &self,
        dst: impl Into<SymSlice<T>>,
    ) -> Result<&mut [T]> {
        self.live()?;
        let dst = dst.into();
        self.check_slice(&dst)?;
        // SAFETY: as for `local_slice`; exclusivity is the caller's.
        Ok(unsafe {
            std::slice::from_raw_parts_mut(
                self.base.as_ptr().add(dst.offset()) as *mut T,
                dst.len(),
            )
        })
    }

    /// A load/store pointer to `offset` in `pe`'s heap, when `pe`'s memory
    /// is mapped into this process (`shmem_ptr`); `None` otherwise.
    pub fn peer_ptr(&self, offset: usize, pe: PeId) -> Result<Option<NonNull<u8>>> {
        let t = self.route(pe)?;
        self.check_range(offset, 0)?;
        if pe == self.my_pe {
            return self.local_ptr(offset).map(Some);
        }
        // SAFETY: `route` checked the PE, `check_range` the offset.
        Ok(unsafe { t.peer_ptr(pe, offset) })
    }

    /// Wakes `pe`'s blocked waiters after its memory changed outside the
    /// engines (e.g. through `put_to_address`); a no-op for a PE whose heap
    /// is not mapped here (its engine wakes it).
    pub fn wake_pe(&self, pe: PeId) -> Result<()> {
        let t = self.route(pe)?;
        let p = if pe == self.my_pe {
            Some(self.base)
        } else {
            // SAFETY: `route` checked the PE; offset 0 is in every heap.
            unsafe { t.peer_ptr(pe, 0) }
        };
        if let Some(p) = p {
            // SAFETY: offset 0 of a mapped heap is its control block.
            unsafe { wait::ring(p.as_ptr() as *const ControlBlock, &[wait::Span::ALL]) };
        }
        Ok(())
    }

    /// Typed [`Runtime::peer_ptr`].
    pub fn ptr<T: Element>(
        &self,
        obj: impl Into<SymSlice<T>>,
        pe: PeId,
    ) -> Result<Option<NonNull<T>>> {
        let obj = obj.into();
        self.check_instance(obj.instance())?;
        self.check_tag(obj.tag(), obj.offset())?;
        Ok(self.peer_ptr(obj.offset(), pe)?.map(|p| p.cast()))
    }

    /// Whether `pe` can be reached by this PE.
    pub fn pe_accessible(&self, pe: PeId) -> bool {
        pe < self.n_pes && !self.is_finalized()
    }

    /// Whether `addr` (a local address) is symmetric and `pe` can reach it.
    pub fn addr_accessible(&self, addr: *const u8, pe: PeId) -> bool {
        self.pe_accessible(pe) && self.offset_of(addr).is_some()
    }

    // ----- ordering and completion ----------------------------------------

    /// Orders puts/AMOs to each PE.
    pub fn fence(&self) -> Result<()> {
        self.live()?;
        self.in_use
            .iter()
            .try_for_each(|&i| self.transports[i as usize].fence())
    }

    /// Completes every outstanding operation of this PE.
    ///
    /// # Errors
    /// After finalize; when an engine fails; and once any PE has been
    /// reported dead (naming it), since operations to it cannot have
    /// completed.
    pub fn quiet(&self) -> Result<()> {
        self.live()?;
        let r = self
            .in_use
            .iter()
            .try_for_each(|&i| self.transports[i as usize].quiet());
        // One full fence for all engines: every store this PE made (copies
        // on mapped heaps included) is ordered before anything after quiet.
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.health.word() != 0 {
            self.health.check(None)?;
        }
        r
    }

    /// Ends the whole job with `status` (OpenSHMEM `global_exit`).
    pub fn global_exit(&self, status: i32, message: &str) -> ! {
        let _ = self.bootstrap.abort(status, message);
        std::process::exit(status)
    }

    /// Leaves the job (collective): completes outstanding work, waits for
    /// every PE, then releases mappings and the bootstrap.
    pub fn finalize(&self) -> Result<()> {
        if self.finalized.load(Ordering::Acquire) {
            return Err(Error::NotInitialized);
        }
        let q = self.quiet();
        let b = self.bootstrap.barrier();
        self.finalized.store(true, Ordering::Release);
        self.health.mark_finalized();
        let f = self.bootstrap.finalize();
        q.and(b).and(f)
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
