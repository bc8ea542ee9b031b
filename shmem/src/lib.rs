//! Symmetric-memory communication in the OpenSHMEM tradition.
//!
//! Every PE (process) of a job owns a symmetric heap; objects allocated
//! collectively sit at the same offset on every PE, so a [`SymBuf`] names
//! the same object everywhere. Data moves with one-sided [`put`]/[`get`],
//! remote atomics and signals; the target PE does not take part.
//!
//! ```no_run
//! fn main() -> shmem::Result<()> {
//!     // `shmemrun -n 4 prog`, or `prog --pes 4` with launch_self_if_requested().
//!     if let Some(code) = shmem::launch::launch_self_if_requested() {
//!         std::process::exit(code);
//!     }
//!     let pe = shmem::init()?;
//!     let (me, n) = (pe.my_pe(), pe.n_pes());
//!     let slots = pe.calloc::<u64>(n)?;              // collective
//!     for peer in 0..n {
//!         pe.put(slots.slice(me..me + 1)?, &[me as u64 * 10], peer)?;
//!     }
//!     pe.barrier_all()?;                              // completes and orders the puts
//!     assert_eq!(pe.read_local(&slots)?, (0..n as u64).map(|i| i * 10).collect::<Vec<_>>());
//!     pe.free(slots)?;
//!     pe.finalize()
//! }
//! ```
//!
//! Engines are chosen per peer at init from the transports linked through
//! Cargo features (`hccs` by default); `SHMEM_TEST_ENGINE=HCCS` forces one
//! for every peer. All `SHMEM_*` variables are listed by `SHMEM_INFO=1`.
//!
//! The free functions ([`put`], [`barrier_all`], ...) act on the current
//! instance (the last one initialised); the [`Shmem`] handle does the same
//! without the registry lookup.
//!
//! # Errors
//!
//! Every free function that acts on the current instance fails with
//! [`Error::NotInitialized`] when there is none (before `init`, after
//! `finalize`); otherwise it fails as the [`Runtime`] or [`Collectives`]
//! method it forwards to, whose documentation lists the errors.

#![warn(clippy::missing_errors_doc)]

use std::collections::BTreeMap;
use std::ops::Deref;
use std::sync::{Arc, RwLock};

pub use shmem_bootstrap::UniqueId;
pub use shmem_collectives as collectives;
pub use shmem_collectives::{Collectives, KvCacheLayout, ReduceOp, Team};
pub use shmem_core::config::{Config, VARIABLES};
pub use shmem_core::{
    AtomicElement, AtomicInteger, Bootstrap, Cmp, Completion, Element, Error, Event, Failed,
    Handle, Heap, MemType, MemfdHeap, PeId, Result, Runtime, Signal, SignalOp, Stream, SymBuf,
    SymRef, SymSlice, TransportRegistration, WaitElement,
};
pub use shmem_launch as launch;

/// Names of the transports linked into this build.
pub fn engines() -> Vec<&'static str> {
    link_transports();
    shmem_core::transport::registered()
        .iter()
        .map(|r| r.name)
        .collect()
}

fn link_transports() {
    #[cfg(feature = "hccs")]
    shmem_transport_hccs::link();
    #[cfg(feature = "sdma")]
    shmem_transport_sdma::link();
    #[cfg(feature = "roce")]
    shmem_transport_roce::link();
}

/// Library version.
pub fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

/// One initialised PE of a job: the runtime plus its collectives.
///
/// Cheap to clone. Derefs to [`Runtime`] for RMA, atomics, signals, waits
/// and memory management.
#[derive(Clone, Debug)]
pub struct Shmem {
    rt: Arc<Runtime>,
    coll: Arc<Collectives>,
}

impl Deref for Shmem {
    type Target = Runtime;
    fn deref(&self) -> &Runtime {
        &self.rt
    }
}

impl Shmem {
    /// The runtime.
    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.rt
    }
    /// Teams and collectives.
    pub fn collectives(&self) -> &Arc<Collectives> {
        &self.coll
    }
    /// Completes outstanding operations and waits for every PE.
    ///
    /// # Errors
    /// As [`Collectives::barrier_all`].
    #[track_caller]
    pub fn barrier_all(&self) -> Result<()> {
        self.coll.barrier_all()
    }
    /// Waits for every PE (no completion of outstanding operations).
    ///
    /// # Errors
    /// As [`Collectives::sync_all`].
    #[track_caller]
    pub fn sync_all(&self) -> Result<()> {
        self.coll.sync_all()
    }
    /// A new stream on this instance (its own worker thread; copies go
    /// through the SDMA engine when it is linked).
    ///
    /// # Errors
    /// As [`Runtime::create_stream`].
    pub fn create_stream(&self) -> Result<Stream> {
        self.rt.create_stream()
    }
    /// Enqueues a barrier over all PEs on `stream`.
    ///
    /// # Errors
    /// As [`Stream::enqueue`]: the barrier's own errors (see
    /// [`Collectives::barrier_all`]) are reported by [`Stream::synchronize`].
    pub fn barrier_all_on_stream(&self, stream: &Stream) -> Result<()> {
        let coll = self.coll.clone();
        stream.enqueue("barrier_all", move |_| coll.barrier_all())
    }
    /// Leaves the job (collective) and removes the instance from the registry.
    ///
    /// # Errors
    /// As [`Runtime::finalize`].
    pub fn finalize(&self) -> Result<()> {
        unregister(self.rt.instance());
        self.rt.finalize()
    }
}

struct Registry {
    instances: BTreeMap<u32, Shmem>,
    current: Option<u32>,
}

static REGISTRY: RwLock<Registry> = RwLock::new(Registry {
    instances: BTreeMap::new(),
    current: None,
});

fn registry_read() -> std::sync::RwLockReadGuard<'static, Registry> {
    REGISTRY.read().unwrap_or_else(|p| p.into_inner())
}

fn registry_write() -> std::sync::RwLockWriteGuard<'static, Registry> {
    REGISTRY.write().unwrap_or_else(|p| p.into_inner())
}

fn unregister(instance: u32) {
    let mut r = registry_write();
    r.instances.remove(&instance);
    if r.current == Some(instance) {
        r.current = r.instances.keys().next_back().copied();
    }
}

/// The current instance.
///
/// # Errors
/// [`Error::NotInitialized`] when no instance is initialised.
pub fn current() -> Result<Shmem> {
    let r = registry_read();
    r.current
        .and_then(|i| r.instances.get(&i).cloned())
        .ok_or(Error::NotInitialized)
}

/// The instance with id `instance`.
///
/// # Errors
/// [`Error::NotInitialized`] when no instance `instance` is initialised.
pub fn instance(instance: u32) -> Result<Shmem> {
    registry_read()
        .instances
        .get(&instance)
        .cloned()
        .ok_or(Error::NotInitialized)
}

/// Makes `instance` the one the free functions use.
///
/// # Errors
/// [`Error::NotInitialized`] when no instance `instance` is initialised.
pub fn set_instance(instance: u32) -> Result<()> {
    let mut r = registry_write();
    if !r.instances.contains_key(&instance) {
        return Err(Error::NotInitialized);
    }
    r.current = Some(instance);
    Ok(())
}

/// Whether the current instance is initialised.
pub fn is_initialized() -> bool {
    current().is_ok()
}

/// How a PE joins a job.
#[derive(Debug, Clone)]
pub enum JoinMethod {
    /// The launcher environment (`shmemrun`, torchrun), or a single PE.
    Environment,
    /// A UniqueId from rank 0's [`get_unique_id`].
    UniqueId {
        /// This PE's rank.
        rank: PeId,
        /// Number of PEs.
        nranks: usize,
        /// The id.
        uid: UniqueId,
    },
    /// `tcp://host:port` or `tcp6://[addr]:port`.
    Attributes {
        /// This PE's rank.
        rank: PeId,
        /// Number of PEs.
        nranks: usize,
        /// The URL rank 0 binds.
        url: String,
    },
}

/// Full-control initialisation: how to join, heap size (`None`:
/// `SHMEM_SYMMETRIC_SIZE`), instance id and configuration (`None`: read
/// the environment). [`Builder`] offers the same and more.
///
/// # Errors
/// As [`Builder::init`].
pub fn init_with(
    join: JoinMethod,
    mem_size: Option<usize>,
    instance_id: u32,
    config: Option<Config>,
) -> Result<Shmem> {
    let mut b = Builder::new().join(join).instance(instance_id);
    if let Some(m) = mem_size {
        b = b.mem_size(m);
    }
    if let Some(c) = config {
        b = b.config(c);
    }
    b.init()
}

/// Builds a PE from parts: any [`Bootstrap`] (or a [`JoinMethod`]), any
/// heap, engines beside the linked ones. [`init`] is
/// `Builder::new().init()`.
///
/// ```no_run
/// # fn demo(bootstrap: std::sync::Arc<dyn shmem::Bootstrap>) -> shmem::Result<()> {
/// let pe = shmem::Builder::new()
///     .bootstrap(bootstrap)                          // e.g. your own control plane
///     .heap(std::sync::Arc::new(shmem::MemfdHeap::new(64 << 20)?))
///     .init()?;
/// # pe.finalize() }
/// ```
#[derive(Default)]
pub struct Builder {
    join: Option<JoinMethod>,
    bootstrap: Option<Arc<dyn Bootstrap>>,
    parts: shmem_core::RuntimeParts,
    mem_size: Option<usize>,
    instance: u32,
    config: Option<Config>,
}

impl std::fmt::Debug for Builder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Builder")
            .field("join", &self.join)
            .field("bootstrap", &self.bootstrap.is_some())
            .field("parts", &self.parts)
            .field("mem_size", &self.mem_size)
            .field("instance", &self.instance)
            .finish()
    }
}

impl Builder {
    /// Everything default: join from the environment, a heap of kind
    /// `SHMEM_HEAP`, the linked engines, instance 0.
    pub fn new() -> Builder {
        Builder::default()
    }
    /// How to join when no [`Builder::bootstrap`] is given.
    pub fn join(mut self, join: JoinMethod) -> Builder {
        self.join = Some(join);
        self
    }
    /// A control plane of the caller's (replaces [`Builder::join`]).
    pub fn bootstrap(mut self, bootstrap: Arc<dyn Bootstrap>) -> Builder {
        self.bootstrap = Some(bootstrap);
        self
    }
    /// This PE's heap (its size is the job's heap size).
    pub fn heap(mut self, heap: Arc<dyn shmem_core::Heap>) -> Builder {
        self.parts.heap = Some(heap);
        self
    }
    /// An engine offered beside the linked ones (every PE must add the same).
    pub fn transport(mut self, engine: &'static shmem_core::TransportRegistration) -> Builder {
        self.parts.extra_engines.push(engine);
        self
    }
    /// Heap size when the heap is created here.
    pub fn mem_size(mut self, bytes: usize) -> Builder {
        self.mem_size = Some(bytes);
        self
    }
    /// Instance number (several may live in one process).
    pub fn instance(mut self, instance: u32) -> Builder {
        self.instance = instance;
        self
    }
    /// Configuration (default: read the environment).
    pub fn config(mut self, config: Config) -> Builder {
        self.config = Some(config);
        self
    }

    /// Joins the job (collective) and registers the instance.
    ///
    /// # Errors
    /// [`Error::AlreadyInitialized`] when the instance exists;
    /// [`Error::InvalidArgument`] for a zero `mem_size`; a configuration,
    /// bootstrap, heap or engine error from joining.
    pub fn init(self) -> Result<Shmem> {
        link_transports();
        let instance_id = self.instance;
        if registry_read().instances.contains_key(&instance_id) {
            return Err(Error::AlreadyInitialized(instance_id));
        }
        let config = match self.config {
            Some(c) => c,
            None => Config::from_env()?,
        };
        if let Some(0) = self.mem_size {
            return Err(Error::invalid("mem_size", "must be positive"));
        }
        let bs: Arc<dyn Bootstrap> =
            match (self.bootstrap, self.join.unwrap_or(JoinMethod::Environment)) {
                (Some(b), _) => b,
                (None, JoinMethod::Environment) => Arc::new(
                    shmem_bootstrap::init_instance_from_env(&config, instance_id)?,
                ),
                (None, JoinMethod::UniqueId { rank, nranks, uid }) => Arc::new(
                    shmem_bootstrap::init_with_unique_id(rank, nranks, &uid, &config)?,
                ),
                (None, JoinMethod::Attributes { rank, nranks, url }) => {
                    Arc::new(shmem_bootstrap::init_attr(rank, nranks, &url, &config)?)
                }
            };
        let rt = Runtime::with_parts(
            bs,
            shmem_core::RuntimeOptions {
                instance: instance_id,
                mem_size: self.mem_size,
                config,
            },
            self.parts,
        )?;
        let coll = Collectives::new(rt.clone())?;
        let s = Shmem { rt, coll };
        let mut r = registry_write();
        r.instances.insert(instance_id, s.clone());
        r.current = Some(instance_id);
        Ok(s)
    }
}

/// Joins the job described by the environment (`shmemrun`, torchrun), or
/// starts a single-PE job when there is none.
///
/// # Errors
/// As [`Builder::init`].
pub fn init() -> Result<Shmem> {
    init_with(JoinMethod::Environment, None, 0, None)
}

/// Rank 0: starts the config store and returns the id to hand to every PE.
///
/// # Errors
/// [`Error::Config`] for a `SHMEM_*` variable that does not parse; otherwise as
/// [`shmem_bootstrap::get_unique_id`].
pub fn get_unique_id() -> Result<UniqueId> {
    shmem_bootstrap::get_unique_id(&Config::from_env()?)
}

/// Joins with a UniqueId (every PE, rank 0 included).
///
/// # Errors
/// As [`Builder::init`].
pub fn init_with_unique_id(
    rank: PeId,
    nranks: usize,
    mem_size: Option<usize>,
    uid: &UniqueId,
) -> Result<Shmem> {
    init_with(
        JoinMethod::UniqueId {
            rank,
            nranks,
            uid: uid.clone(),
        },
        mem_size,
        0,
        None,
    )
}

/// Joins through `tcp://host:port` (rank 0 binds it).
///
/// # Errors
/// As [`Builder::init`].
pub fn init_attr(rank: PeId, nranks: usize, mem_size: Option<usize>, url: &str) -> Result<Shmem> {
    init_with(
        JoinMethod::Attributes {
            rank,
            nranks,
            url: url.to_string(),
        },
        mem_size,
        0,
        None,
    )
}

/// Leaves the job (collective) for the current instance.
///
/// # Errors
/// [`Error::NotInitialized`] without a current instance; otherwise as
/// [`Shmem::finalize`].
pub fn finalize() -> Result<()> {
    current()?.finalize()
}

/// This PE's rank in the current instance.
///
/// # Errors
/// [`Error::NotInitialized`] without a current instance.
pub fn my_pe() -> Result<PeId> {
    Ok(current()?.my_pe())
}

/// Number of PEs in the current instance.
///
/// # Errors
/// [`Error::NotInitialized`] without a current instance.
pub fn n_pes() -> Result<usize> {
    Ok(current()?.n_pes())
}

/// Ends the whole job with `status` on every PE.
pub fn global_exit(status: i32) -> ! {
    match current() {
        Ok(s) => s.global_exit(status, "global_exit called"),
        Err(_) => std::process::exit(status),
    }
}

/// Barrier over all PEs of the current instance (completes outstanding operations).
///
/// # Errors
/// [`Error::NotInitialized`] without a current instance; otherwise as
/// [`Collectives::barrier_all`].
#[track_caller]
pub fn barrier_all() -> Result<()> {
    current()?.barrier_all()
}

/// Synchronises all PEs of the current instance.
///
/// # Errors
/// [`Error::NotInitialized`] without a current instance; otherwise as
/// [`Collectives::sync_all`].
#[track_caller]
pub fn sync_all() -> Result<()> {
    current()?.sync_all()
}

macro_rules! forward {
    ($( $(#[$m:meta])* fn $name:ident [$($g:tt)*] ( $($a:ident : $t:ty),* ) -> $r:ty; )*) => { $(
        $(#[$m])*
        ///
        /// # Errors
        #[doc = concat!(
            "[`Error::NotInitialized`] without a current instance; otherwise as [`Runtime::",
            stringify!($name),
            "`]."
        )]
        #[track_caller]
        pub fn $name<$($g)*>($($a: $t),*) -> Result<$r> {
            current()?.$name($($a),*)
        }
    )* };
}

forward! {
    /// Allocates `count` elements (collective).
    fn malloc[T: Element](count: usize) -> SymBuf<T>;
    /// Allocates `count` zeroed elements (collective).
    fn calloc[T: Element](count: usize) -> SymBuf<T>;
    /// Allocates `count` elements aligned to `alignment` (collective).
    fn align_alloc[T: Element](alignment: usize, count: usize) -> SymBuf<T>;
    /// Resizes an object (collective).
    fn realloc[T: Element](buf: SymBuf<T>, count: usize) -> SymBuf<T>;
    /// Frees an object (collective).
    fn free[T: Element](buf: SymBuf<T>) -> ();
    /// Copies `src` into `dst` on `pe`.
    fn put[T: Element](dst: impl Into<SymSlice<T>>, src: &[T], pe: PeId) -> ();
    /// Copies `src` on `pe` into `dst`.
    fn get[T: Element](dst: &mut [T], src: impl Into<SymSlice<T>>, pe: PeId) -> ();
    /// Writes one element on `pe`.
    fn p[T: Element](dst: SymRef<T>, value: T, pe: PeId) -> ();
    /// Reads one element from `pe`.
    fn g[T: Element](src: SymRef<T>, pe: PeId) -> T;
    /// Strided put.
    fn iput[T: Element](dst: impl Into<SymSlice<T>>, src: &[T], dst_stride: usize, src_stride: usize, nelems: usize, pe: PeId) -> ();
    /// Strided get.
    fn iget[T: Element](dst: &mut [T], src: impl Into<SymSlice<T>>, dst_stride: usize, src_stride: usize, nelems: usize, pe: PeId) -> ();
    /// Atomic read.
    fn atomic_fetch[T: AtomicElement](target: SymRef<T>, pe: PeId) -> T;
    /// Atomic write.
    fn atomic_set[T: AtomicElement](target: SymRef<T>, value: T, pe: PeId) -> ();
    /// Atomic exchange.
    fn atomic_swap[T: AtomicElement](target: SymRef<T>, value: T, pe: PeId) -> T;
    /// Atomic compare-and-swap; returns the old value.
    fn atomic_compare_swap[T: AtomicInteger](target: SymRef<T>, cond: T, value: T, pe: PeId) -> T;
    /// Atomic add; returns the old value.
    fn atomic_fetch_add[T: AtomicInteger](target: SymRef<T>, value: T, pe: PeId) -> T;
    /// Atomic add.
    fn atomic_add[T: AtomicInteger](target: SymRef<T>, value: T, pe: PeId) -> ();
    /// Atomic increment; returns the old value.
    fn atomic_fetch_inc[T: AtomicInteger](target: SymRef<T>, pe: PeId) -> T;
    /// Atomic increment.
    fn atomic_inc[T: AtomicInteger](target: SymRef<T>, pe: PeId) -> ();
    /// Atomic and; returns the old value.
    fn atomic_fetch_and[T: AtomicInteger](target: SymRef<T>, value: T, pe: PeId) -> T;
    /// Atomic and.
    fn atomic_and[T: AtomicInteger](target: SymRef<T>, value: T, pe: PeId) -> ();
    /// Atomic or; returns the old value.
    fn atomic_fetch_or[T: AtomicInteger](target: SymRef<T>, value: T, pe: PeId) -> T;
    /// Atomic or.
    fn atomic_or[T: AtomicInteger](target: SymRef<T>, value: T, pe: PeId) -> ();
    /// Atomic xor; returns the old value.
    fn atomic_fetch_xor[T: AtomicInteger](target: SymRef<T>, value: T, pe: PeId) -> T;
    /// Atomic xor.
    fn atomic_xor[T: AtomicInteger](target: SymRef<T>, value: T, pe: PeId) -> ();
    /// Put, then update a signal on `pe` after the data.
    fn put_signal[T: Element](dst: impl Into<SymSlice<T>>, src: &[T], sig: SymRef<u64>, value: u64, op: SignalOp, pe: PeId) -> ();
    /// Update a signal on `pe`.
    fn signal_op[](sig: SymRef<u64>, value: u64, op: SignalOp, pe: PeId) -> ();
    /// Read this PE's signal.
    fn signal_fetch[](sig: SymRef<u64>) -> u64;
    /// Wait until this PE's signal satisfies the comparison; returns its value.
    fn signal_wait_until[](sig: SymRef<u64>, cmp: Cmp, value: u64) -> u64;
    /// Wait until this PE's variable satisfies the comparison.
    fn wait_until[T: WaitElement](ivar: SymRef<T>, cmp: Cmp, value: T) -> ();
    /// Wait until all unmasked variables satisfy the comparison.
    fn wait_until_all[T: WaitElement](ivars: SymSlice<T>, status: Option<&[bool]>, cmp: Cmp, value: T) -> ();
    /// Wait until any unmasked variable satisfies the comparison.
    fn wait_until_any[T: WaitElement](ivars: SymSlice<T>, status: Option<&[bool]>, cmp: Cmp, value: T) -> Option<usize>;
    /// Wait until some unmasked variables satisfy the comparison.
    fn wait_until_some[T: WaitElement](ivars: SymSlice<T>, status: Option<&[bool]>, cmp: Cmp, value: T) -> Vec<usize>;
    /// `wait_until_all` with a value per variable.
    fn wait_until_all_vector[T: WaitElement](ivars: SymSlice<T>, status: Option<&[bool]>, cmp: Cmp, values: &[T]) -> ();
    /// `wait_until_any` with a value per variable.
    fn wait_until_any_vector[T: WaitElement](ivars: SymSlice<T>, status: Option<&[bool]>, cmp: Cmp, values: &[T]) -> Option<usize>;
    /// `wait_until_some` with a value per variable.
    fn wait_until_some_vector[T: WaitElement](ivars: SymSlice<T>, status: Option<&[bool]>, cmp: Cmp, values: &[T]) -> Vec<usize>;
    /// Test one variable.
    fn test[T: WaitElement](ivar: SymRef<T>, cmp: Cmp, value: T) -> bool;
    /// Test all unmasked variables.
    fn test_all[T: WaitElement](ivars: SymSlice<T>, status: Option<&[bool]>, cmp: Cmp, value: T) -> bool;
    /// First unmasked variable that passes.
    fn test_any[T: WaitElement](ivars: SymSlice<T>, status: Option<&[bool]>, cmp: Cmp, value: T) -> Option<usize>;
    /// Every unmasked variable that passes.
    fn test_some[T: WaitElement](ivars: SymSlice<T>, status: Option<&[bool]>, cmp: Cmp, value: T) -> Vec<usize>;
    /// `test_all` with a value per variable.
    fn test_all_vector[T: WaitElement](ivars: SymSlice<T>, status: Option<&[bool]>, cmp: Cmp, values: &[T]) -> bool;
    /// `test_any` with a value per variable.
    fn test_any_vector[T: WaitElement](ivars: SymSlice<T>, status: Option<&[bool]>, cmp: Cmp, values: &[T]) -> Option<usize>;
    /// `test_some` with a value per variable.
    fn test_some_vector[T: WaitElement](ivars: SymSlice<T>, status: Option<&[bool]>, cmp: Cmp, values: &[T]) -> Vec<usize>;
    /// Copy of this PE's part of an object.
    fn read_local[T: Element](src: impl Into<SymSlice<T>>) -> Vec<T>;
    /// Write this PE's part of an object.
    fn write_local[T: Element](dst: impl Into<SymSlice<T>>, data: &[T]) -> ();
    /// Load/store pointer to an object on `pe` (`shmem_ptr`), if mapped here.
    fn ptr[T: Element](obj: impl Into<SymSlice<T>>, pe: PeId) -> Option<std::ptr::NonNull<T>>;
    /// Orders puts and atomics per target PE.
    fn fence[]() -> ();
    /// Completes all outstanding operations.
    fn quiet[]() -> ();
}

/// Non-blocking put on the current instance.
///
/// # Safety
/// `src` must stay alive and unmodified until [`quiet`] returns.
///
/// # Errors
/// [`Error::NotInitialized`] without a current instance; otherwise as
/// [`Runtime::put_nbi`].
pub unsafe fn put_nbi<T: Element>(dst: impl Into<SymSlice<T>>, src: &[T], pe: PeId) -> Result<()> {
    // SAFETY: forwarded contract.
    unsafe { current()?.put_nbi(dst, src, pe) }
}

/// Non-blocking get on the current instance.
///
/// # Safety
/// `dst` must stay alive and untouched until [`quiet`] returns.
///
/// # Errors
/// [`Error::NotInitialized`] without a current instance; otherwise as
/// [`Runtime::get_nbi`].
pub unsafe fn get_nbi<T: Element>(
    dst: &mut [T],
    src: impl Into<SymSlice<T>>,
    pe: PeId,
) -> Result<()> {
    // SAFETY: forwarded contract.
    unsafe { current()?.get_nbi(dst, src, pe) }
}

/// Non-blocking put with signal on the current instance.
///
/// # Safety
/// `src` must stay alive and unmodified until [`quiet`] returns.
///
/// # Errors
/// [`Error::NotInitialized`] without a current instance; otherwise as
/// [`Runtime::put_signal_nbi`].
pub unsafe fn put_signal_nbi<T: Element>(
    dst: impl Into<SymSlice<T>>,
    src: &[T],
    sig: SymRef<u64>,
    value: u64,
    op: SignalOp,
    pe: PeId,
) -> Result<()> {
    // SAFETY: forwarded contract.
    unsafe { current()?.put_signal_nbi(dst, src, sig, value, op, pe) }
}

/// Whether `pe` is reachable from the current instance.
pub fn pe_accessible(pe: PeId) -> bool {
    current().is_ok_and(|s| s.pe_accessible(pe))
}

/// Whether `addr` is symmetric and reachable on `pe`.
pub fn addr_accessible(addr: *const u8, pe: PeId) -> bool {
    current().is_ok_and(|s| s.addr_accessible(addr, pe))
}

/// Parses a byte size with an optional K/M/G suffix (`"1M"` = 1048576).
///
/// # Errors
/// A message naming the text when it is not a number with an optional K/M/G suffix, or
/// the size overflows.
pub fn config_parse_size(text: &str) -> std::result::Result<usize, String> {
    shmem_core::config::parse_size(text)
}
