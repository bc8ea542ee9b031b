//! Transport engines loaded at run time from shared libraries.
//!
//! `SHMEM_TRANSPORT_PLUGINS=/path/libfoo.so[:/path/libbar.so]` makes every
//! PE load those files at init (with `libloading`) and offer their engines
//! beside the linked ones, so `libshmem.so` and the Python package gain a
//! fabric without a rebuild. The boundary is a C ABI, because a plugin is
//! built separately and Rust types have no stable layout across builds:
//!
//! * the plugin exports `shmem_transport_plugin`, a function returning a
//!   pointer to a [`PluginVtable`] whose first two fields are
//!   [`PLUGIN_ABI_VERSION`] and the table's size; the loader refuses a
//!   plugin whose version or size differs, naming the file and both values;
//! * the host calls `create` with a [`PluginHost`]: rank, PE count, this
//!   PE's heap (base, size, `memfd`), the node map, the effective
//!   configuration and bootstrap callbacks (allgather, barrier, liveness);
//! * every data operation is a vtable call over (PE, heap offset, bytes);
//!   a failure is a non-zero status with a message written into a buffer.
//!
//! A plugin written in Rust implements [`Transport`] as a linked engine
//! would and exports it with [`crate::export_transport_plugin!`]: the guest
//! side of this module turns the [`PluginHost`] back into a
//! [`TransportInit`] and the vtable calls back into the `Transport`. The
//! plugin's copy of this crate must have the same ABI version as the host's:
//! the wake-up protocol on the heap's control block ([`crate::wait`]) is
//! part of it.

use std::ffi::{c_char, c_void, CStr};
use std::path::Path;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use crate::bootstrap::Bootstrap;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::heap::{Heap, HeapExport};
use crate::topology::Topology;
use crate::transport::{AmoOp, AmoWidth, Capabilities, SignalOp, Transport, TransportInit};
use crate::PeId;

/// Version of the plugin ABI ([`PluginVtable`], [`PluginHost`] and the
/// heap control block). Bumped on every incompatible change.
pub const PLUGIN_ABI_VERSION: u32 = 1;

/// Name of the function a plugin exports:
/// `extern "C" fn shmem_transport_plugin() -> *const PluginVtable`.
pub const PLUGIN_ENTRY: &str = "shmem_transport_plugin";

/// Bytes of the error buffer handed to every fallible call.
pub const ERROR_BUFFER: usize = 512;

/// Status of a successful call.
pub const OK: i32 = 0;
/// Status of a failed call (the message is in the error buffer).
pub const FAILED: i32 = -1;

/// Op codes of [`PluginVtable::atomic`].
pub mod amo_code {
    /// Read.
    pub const FETCH: u32 = 0;
    /// Store.
    pub const SET: u32 = 1;
    /// Swap.
    pub const SWAP: u32 = 2;
    /// Compare and swap (`cond`, operand).
    pub const COMPARE_SWAP: u32 = 3;
    /// Add.
    pub const ADD: u32 = 4;
    /// And.
    pub const AND: u32 = 5;
    /// Or.
    pub const OR: u32 = 6;
    /// Xor.
    pub const XOR: u32 = 7;
}

/// Op codes of signal updates: 0 sets, 1 adds.
pub mod signal_code {
    /// `signal = value`.
    pub const SET: u32 = 0;
    /// `signal += value`.
    pub const ADD: u32 = 1;
}

/// What the host hands a plugin's `create` (valid only during that call).
#[repr(C)]
#[derive(Debug)]
pub struct PluginHost {
    /// [`PLUGIN_ABI_VERSION`] of the host.
    pub abi_version: u32,
    /// `size_of::<PluginHost>()` of the host.
    pub struct_size: u32,
    /// This PE.
    pub rank: usize,
    /// PEs in the job.
    pub n_pes: usize,
    /// This PE's heap in this process.
    pub heap_base: *mut u8,
    /// Bytes of every PE's heap.
    pub heap_size: usize,
    /// A descriptor mapping the heap (`memfd`), or -1.
    pub heap_fd: i32,
    /// Node index of every PE (`n_pes` entries).
    pub node_of: *const usize,
    /// Process id of every PE (`n_pes` entries).
    pub pid_of: *const u32,
    /// User id of every PE (`n_pes` entries).
    pub uid_of: *const u32,
    /// Effective configuration, `NAME=value` lines, NUL-terminated.
    pub config: *const c_char,
    /// Host context for the callbacks below.
    pub ctx: *mut c_void,
    /// Every PE contributes `len` bytes; on success `*out` is a buffer of
    /// `*out_len` bytes holding, per PE in rank order, an 8-byte
    /// little-endian length and the bytes. Free it with `free_buffer`.
    pub allgather: unsafe extern "C" fn(
        ctx: *mut c_void,
        data: *const u8,
        len: usize,
        out: *mut *mut u8,
        out_len: *mut usize,
        err: *mut c_char,
        err_len: usize,
    ) -> i32,
    /// Frees a buffer returned by `allgather`.
    pub free_buffer: unsafe extern "C" fn(ctx: *mut c_void, buf: *mut u8, len: usize),
    /// Returns once every PE has entered.
    pub barrier: unsafe extern "C" fn(ctx: *mut c_void, err: *mut c_char, err_len: usize) -> i32,
    /// [`OK`] while every PE lives; else the message names the dead PE.
    pub check_peers:
        unsafe extern "C" fn(ctx: *mut c_void, err: *mut c_char, err_len: usize) -> i32,
}

/// A plugin's engine, as the host calls it. `engine` is the pointer
/// `create` returned. Offsets have been checked by the host's runtime
/// (inside the heap, atomics aligned); `src`/`dst` are valid for `len`
/// bytes (until `quiet` when `nbi` is non-zero).
#[repr(C)]
#[derive(Debug)]
pub struct PluginVtable {
    /// [`PLUGIN_ABI_VERSION`] the plugin was built for.
    pub abi_version: u32,
    /// `size_of::<PluginVtable>()` in the plugin.
    pub struct_size: u32,
    /// Engine name, upper case, NUL-terminated, static.
    pub name: *const c_char,
    /// Routing priority (higher wins).
    pub priority: u32,
    /// Builds the engine (collective): `*engine` on [`OK`].
    pub create: unsafe extern "C" fn(
        host: *const PluginHost,
        engine: *mut *mut c_void,
        err: *mut c_char,
        err_len: usize,
    ) -> i32,
    /// Releases the engine.
    pub destroy: unsafe extern "C" fn(engine: *mut c_void),
    /// [`Capabilities`] bits.
    pub capabilities: unsafe extern "C" fn(engine: *mut c_void) -> u32,
    /// Non-zero when the engine reaches `pe`.
    pub can_reach: unsafe extern "C" fn(engine: *mut c_void, pe: usize) -> i32,
    /// A load/store pointer to `offset` of `pe`'s heap, or null.
    pub peer_ptr: unsafe extern "C" fn(engine: *mut c_void, pe: usize, offset: usize) -> *mut u8,
    /// put (`nbi` non-zero: may complete at `quiet`).
    pub put: unsafe extern "C" fn(
        engine: *mut c_void,
        pe: usize,
        dst: usize,
        src: *const u8,
        len: usize,
        nbi: i32,
        err: *mut c_char,
        err_len: usize,
    ) -> i32,
    /// get (`nbi` non-zero: may complete at `quiet`).
    pub get: unsafe extern "C" fn(
        engine: *mut c_void,
        pe: usize,
        src: usize,
        dst: *mut u8,
        len: usize,
        nbi: i32,
        err: *mut c_char,
        err_len: usize,
    ) -> i32,
    /// Atomic `op` ([`amo_code`]) on the `width`-byte word at `offset`;
    /// the previous value goes to `*old`.
    pub atomic: unsafe extern "C" fn(
        engine: *mut c_void,
        pe: usize,
        offset: usize,
        width: u32,
        op: u32,
        operand: u64,
        cond: u64,
        old: *mut u64,
        err: *mut c_char,
        err_len: usize,
    ) -> i32,
    /// Signal update ([`signal_code`]) of the 64-bit word at `sig`.
    pub signal: unsafe extern "C" fn(
        engine: *mut c_void,
        pe: usize,
        sig: usize,
        op: u32,
        value: u64,
        err: *mut c_char,
        err_len: usize,
    ) -> i32,
    /// put, then signal; the signal lands after the data.
    pub put_signal: unsafe extern "C" fn(
        engine: *mut c_void,
        pe: usize,
        dst: usize,
        src: *const u8,
        len: usize,
        sig: usize,
        op: u32,
        value: u64,
        nbi: i32,
        err: *mut c_char,
        err_len: usize,
    ) -> i32,
    /// Orders earlier operations to each PE before later ones.
    pub fence: unsafe extern "C" fn(engine: *mut c_void, err: *mut c_char, err_len: usize) -> i32,
    /// Completes every outstanding operation.
    pub quiet: unsafe extern "C" fn(engine: *mut c_void, err: *mut c_char, err_len: usize) -> i32,
}

/// The two fields every ABI version starts with, read before anything else.
#[repr(C)]
struct AbiHeader {
    abi_version: u32,
    struct_size: u32,
}

/// Checks a plugin's declared ABI against this build's.
///
/// # Errors
/// [`Error::Plugin`] naming `path` and both versions (or sizes) on a mismatch.
pub fn check_abi(path: &str, abi_version: u32, struct_size: u32) -> Result<()> {
    if abi_version != PLUGIN_ABI_VERSION {
        return Err(Error::Plugin {
            path: path.to_string(),
            reason: format!(
                "built for plugin ABI version {abi_version}, this library speaks version {PLUGIN_ABI_VERSION}; rebuild the plugin against this shmem-core"
            ),
        });
    }
    let ours = std::mem::size_of::<PluginVtable>();
    if struct_size as usize != ours {
        return Err(Error::Plugin {
            path: path.to_string(),
            reason: format!(
                "its engine table is {struct_size} bytes, this library's (ABI version {PLUGIN_ABI_VERSION}) is {ours}; rebuild the plugin against this shmem-core"
            ),
        });
    }
    Ok(())
}

// ----- host side -------------------------------------------------------

/// A plugin loaded into this process (kept loaded until exit).
pub struct LoadedPlugin {
    path: String,
    name: &'static str,
    priority: u32,
    vtable: &'static PluginVtable,
    _lib: libloading::Library,
}

impl std::fmt::Debug for LoadedPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedPlugin")
            .field("path", &self.path)
            .field("name", &self.name)
            .field("priority", &self.priority)
            .finish()
    }
}

// SAFETY: the vtable is an immutable table in a library that stays loaded
// for the life of the process; the ABI requires its functions to be
// callable from any thread.
unsafe impl Send for LoadedPlugin {}
// SAFETY: as above.
unsafe impl Sync for LoadedPlugin {}

static LOADED: Mutex<Vec<Arc<LoadedPlugin>>> = Mutex::new(Vec::new());

impl LoadedPlugin {
    /// Engine name.
    pub fn name(&self) -> &'static str {
        self.name
    }
    /// Routing priority.
    pub fn priority(&self) -> u32 {
        self.priority
    }
    /// The file it came from.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Builds the engine for this PE (collective, like a linked engine's
    /// constructor).
    ///
    /// # Errors
    /// What the plugin's `create` reports, as [`Error::Transport`].
    pub fn create(self: &Arc<Self>, init: &TransportInit<'_>) -> Result<Arc<dyn Transport>> {
        let topo = init.topology;
        let config_text = std::ffi::CString::new(
            init.config
                .effective()
                .into_iter()
                .map(|(k, v, _)| format!("{k}={}\n", v.replace('\n', " ")))
                .collect::<String>(),
        )
        .map_err(|_| self.error("the configuration holds a NUL byte"))?;
        let mut ctx = HostCtx {
            bootstrap: init.bootstrap,
        };
        let host = PluginHost {
            abi_version: PLUGIN_ABI_VERSION,
            struct_size: std::mem::size_of::<PluginHost>() as u32,
            rank: init.bootstrap.rank(),
            n_pes: init.bootstrap.size(),
            heap_base: init.heap.base().as_ptr(),
            heap_size: init.heap.size(),
            heap_fd: match init.heap.export() {
                HeapExport::Fd(fd) => fd,
                _ => -1,
            },
            node_of: topo.node_of.as_ptr(),
            pid_of: topo.pid_of.as_ptr(),
            uid_of: topo.uid_of.as_ptr(),
            config: config_text.as_ptr(),
            ctx: (&mut ctx as *mut HostCtx<'_>).cast(),
            allgather: host_allgather,
            free_buffer: host_free_buffer,
            barrier: host_barrier,
            check_peers: host_check_peers,
        };
        let mut engine: *mut c_void = std::ptr::null_mut();
        let mut err = ErrBuf::new();
        // SAFETY: `host` and everything it points to live across the call;
        // the vtable comes from a plugin whose ABI was checked at load.
        let status = unsafe { (self.vtable.create)(&host, &mut engine, err.ptr(), err.len()) };
        if status != OK || engine.is_null() {
            return Err(self.error(err.message("create failed")));
        }
        Ok(Arc::new(PluginTransport {
            plugin: self.clone(),
            engine,
            _heap: init.heap.clone(),
        }))
    }

    fn error(&self, reason: impl Into<String>) -> Error {
        Error::Transport {
            engine: self.name,
            reason: reason.into(),
        }
    }
}

/// Loads the plugin at `path` (once per process; later calls return the
/// same plugin).
///
/// # Errors
/// [`Error::Plugin`] naming the file when it cannot be opened, exports no
/// `shmem_transport_plugin`, or was built for another ABI version.
pub fn load(path: &str) -> Result<Arc<LoadedPlugin>> {
    let mut loaded = LOADED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(p) = loaded.iter().find(|p| p.path == path) {
        return Ok(p.clone());
    }
    let fail = |reason: String| Error::Plugin {
        path: path.to_string(),
        reason,
    };
    if !Path::new(path).is_absolute() {
        return Err(fail(
            "plugin paths must be absolute (the dynamic loader would search for a bare name)"
                .into(),
        ));
    }
    // SAFETY: loading a library runs its initialisers; the user named this
    // file as a shmem transport plugin, which is the trust decision.
    let lib = unsafe { libloading::Library::new(path) }.map_err(|e| fail(e.to_string()))?;
    // SAFETY: the symbol's type is the documented entry point.
    let entry: libloading::Symbol<'_, unsafe extern "C" fn() -> *const AbiHeader> =
        unsafe { lib.get(PLUGIN_ENTRY.as_bytes()) }.map_err(|e| {
            fail(format!(
                "it exports no `{PLUGIN_ENTRY}` (not a shmem transport plugin): {e}"
            ))
        })?;
    // SAFETY: calling the plugin's entry point, which takes no arguments.
    let header = unsafe { entry() };
    if header.is_null() {
        return Err(fail(format!("`{PLUGIN_ENTRY}` returned null")));
    }
    // SAFETY: every ABI version starts with the two u32 of AbiHeader.
    let (version, size) = unsafe { ((*header).abi_version, (*header).struct_size) };
    check_abi(path, version, size)?;
    // SAFETY: version and size match this build's PluginVtable; the table
    // is static in the library, which stays loaded (kept in LOADED).
    let vtable: &'static PluginVtable = unsafe { &*(header as *const PluginVtable) };
    // SAFETY: the ABI says `name` is a static NUL-terminated string.
    let name = unsafe { CStr::from_ptr(vtable.name) }
        .to_str()
        .map_err(|_| fail("its engine name is not UTF-8".into()))?;
    if name.is_empty() || name != name.to_ascii_uppercase() {
        return Err(fail(format!(
            "engine name {name:?} must be non-empty upper case"
        )));
    }
    let name: &'static str = Box::leak(name.to_string().into_boxed_str());
    let plugin = Arc::new(LoadedPlugin {
        path: path.to_string(),
        name,
        priority: vtable.priority,
        vtable,
        _lib: lib,
    });
    loaded.push(plugin.clone());
    Ok(plugin)
}

/// Loads every plugin named in `SHMEM_TRANSPORT_PLUGINS` (colon-separated).
///
/// # Errors
/// The first plugin that cannot be loaded ([`load`]).
pub fn load_configured(config: &Config) -> Result<Vec<Arc<LoadedPlugin>>> {
    config
        .transport_plugins
        .split(':')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(load)
        .collect()
}

/// Names of the plugins loaded so far.
pub fn loaded_names() -> Vec<&'static str> {
    LOADED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .map(|p| p.name)
        .collect()
}

struct HostCtx<'a> {
    bootstrap: &'a dyn Bootstrap,
}

/// An error buffer for one call.
struct ErrBuf([u8; ERROR_BUFFER]);

impl ErrBuf {
    fn new() -> ErrBuf {
        ErrBuf([0; ERROR_BUFFER])
    }
    fn ptr(&mut self) -> *mut c_char {
        self.0.as_mut_ptr().cast()
    }
    fn len(&self) -> usize {
        self.0.len()
    }
    fn message(&self, fallback: &str) -> String {
        let end = self.0.iter().position(|&b| b == 0).unwrap_or(self.0.len());
        match String::from_utf8_lossy(&self.0[..end]).into_owned() {
            m if m.is_empty() => fallback.to_string(),
            m => m,
        }
    }
}

/// Writes `msg` NUL-terminated into `err` (truncated to `err_len`).
///
/// # Safety
/// `err` must be valid for `err_len` bytes of writes (or null).
pub unsafe fn write_error(err: *mut c_char, err_len: usize, msg: &str) {
    if err.is_null() || err_len == 0 {
        return;
    }
    let mut n = msg.len().min(err_len - 1);
    while !msg.is_char_boundary(n) {
        n -= 1;
    }
    // SAFETY: `n + 1 <= err_len` bytes of the caller's buffer.
    unsafe {
        std::ptr::copy_nonoverlapping(msg.as_ptr(), err.cast::<u8>(), n);
        *err.add(n) = 0;
    }
}

unsafe fn status(r: Result<()>, err: *mut c_char, err_len: usize) -> i32 {
    match r {
        Ok(()) => OK,
        Err(e) => {
            // SAFETY: forwarded contract of the ABI's error buffers.
            unsafe { write_error(err, err_len, &e.to_string()) };
            FAILED
        }
    }
}

unsafe extern "C" fn host_allgather(
    ctx: *mut c_void,
    data: *const u8,
    len: usize,
    out: *mut *mut u8,
    out_len: *mut usize,
    err: *mut c_char,
    err_len: usize,
) -> i32 {
    // SAFETY: `ctx` is the HostCtx of the `create` call in progress; `data`
    // holds `len` bytes per the ABI.
    let (ctx, data) = unsafe {
        (
            &*(ctx as *const HostCtx<'_>),
            std::slice::from_raw_parts(data, len),
        )
    };
    let r = ctx.bootstrap.allgather(data).map(|all| {
        let mut buf = Vec::with_capacity(all.iter().map(|v| v.len() + 8).sum());
        for v in &all {
            buf.extend_from_slice(&(v.len() as u64).to_le_bytes());
            buf.extend_from_slice(v);
        }
        let buf = buf.into_boxed_slice();
        // SAFETY: `out`/`out_len` are valid out-pointers per the ABI.
        unsafe {
            *out_len = buf.len();
            *out = Box::into_raw(buf).cast();
        }
    });
    // SAFETY: forwarded.
    unsafe { status(r, err, err_len) }
}

unsafe extern "C" fn host_free_buffer(_ctx: *mut c_void, buf: *mut u8, len: usize) {
    if !buf.is_null() {
        // SAFETY: `buf`/`len` came from `host_allgather`'s boxed slice.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(buf, len)) });
    }
}

unsafe extern "C" fn host_barrier(ctx: *mut c_void, err: *mut c_char, err_len: usize) -> i32 {
    // SAFETY: as in host_allgather.
    let ctx = unsafe { &*(ctx as *const HostCtx<'_>) };
    // SAFETY: forwarded.
    unsafe { status(ctx.bootstrap.barrier(), err, err_len) }
}

unsafe extern "C" fn host_check_peers(ctx: *mut c_void, err: *mut c_char, err_len: usize) -> i32 {
    // SAFETY: as in host_allgather.
    let ctx = unsafe { &*(ctx as *const HostCtx<'_>) };
    // SAFETY: forwarded.
    unsafe { status(ctx.bootstrap.check_peers(), err, err_len) }
}

/// A plugin's engine seen as a [`Transport`].
struct PluginTransport {
    plugin: Arc<LoadedPlugin>,
    engine: *mut c_void,
    /// The heap the engine was built on outlives it.
    _heap: Arc<dyn Heap>,
}

// SAFETY: the ABI requires engines to be callable from any thread at once
// (the same contract as `Transport: Send + Sync`).
unsafe impl Send for PluginTransport {}
// SAFETY: as above.
unsafe impl Sync for PluginTransport {}

impl std::fmt::Debug for PluginTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginTransport")
            .field("plugin", &self.plugin)
            .finish()
    }
}

impl Drop for PluginTransport {
    fn drop(&mut self) {
        // SAFETY: `engine` came from this plugin's `create` and is released once.
        unsafe { (self.plugin.vtable.destroy)(self.engine) }
    }
}

impl PluginTransport {
    fn call(&self, f: impl FnOnce(*mut c_char, usize) -> i32) -> Result<()> {
        let mut err = ErrBuf::new();
        if f(err.ptr(), err.len()) == OK {
            Ok(())
        } else {
            Err(self.plugin.error(err.message("operation failed")))
        }
    }
}

fn signal_op_code(op: SignalOp) -> u32 {
    match op {
        SignalOp::Set => signal_code::SET,
        SignalOp::Add => signal_code::ADD,
    }
}

impl Transport for PluginTransport {
    fn name(&self) -> &'static str {
        self.plugin.name
    }
    fn capabilities(&self) -> Capabilities {
        // SAFETY: a live engine of this plugin.
        Capabilities(unsafe { (self.plugin.vtable.capabilities)(self.engine) })
    }
    fn can_reach(&self, pe: PeId) -> bool {
        // SAFETY: as above.
        unsafe { (self.plugin.vtable.can_reach)(self.engine, pe) != 0 }
    }
    unsafe fn peer_ptr(&self, pe: PeId, offset: usize) -> Option<NonNull<u8>> {
        // SAFETY: a live engine; the caller's contract (PE and offset
        // checked) is the plugin's.
        NonNull::new(unsafe { (self.plugin.vtable.peer_ptr)(self.engine, pe, offset) })
    }
    unsafe fn put(&self, pe: PeId, dst: usize, src: *const u8, len: usize) -> Result<()> {
        // SAFETY: forwarded contract (src valid for len bytes).
        self.call(|e, el| unsafe {
            (self.plugin.vtable.put)(self.engine, pe, dst, src, len, 0, e, el)
        })
    }
    unsafe fn get(&self, pe: PeId, src: usize, dst: *mut u8, len: usize) -> Result<()> {
        // SAFETY: forwarded contract (dst valid for len bytes).
        self.call(|e, el| unsafe {
            (self.plugin.vtable.get)(self.engine, pe, src, dst, len, 0, e, el)
        })
    }
    unsafe fn put_nbi(&self, pe: PeId, dst: usize, src: *const u8, len: usize) -> Result<()> {
        // SAFETY: forwarded contract (src valid until quiet).
        self.call(|e, el| unsafe {
            (self.plugin.vtable.put)(self.engine, pe, dst, src, len, 1, e, el)
        })
    }
    unsafe fn get_nbi(&self, pe: PeId, src: usize, dst: *mut u8, len: usize) -> Result<()> {
        // SAFETY: forwarded contract (dst valid until quiet).
        self.call(|e, el| unsafe {
            (self.plugin.vtable.get)(self.engine, pe, src, dst, len, 1, e, el)
        })
    }
    unsafe fn atomic(&self, pe: PeId, offset: usize, width: AmoWidth, op: AmoOp) -> Result<u64> {
        let (code, operand, cond) = match op {
            AmoOp::Fetch => (amo_code::FETCH, 0, 0),
            AmoOp::Set(v) => (amo_code::SET, v, 0),
            AmoOp::Swap(v) => (amo_code::SWAP, v, 0),
            AmoOp::CompareSwap { cond, value } => (amo_code::COMPARE_SWAP, value, cond),
            AmoOp::Add(v) => (amo_code::ADD, v, 0),
            AmoOp::And(v) => (amo_code::AND, v, 0),
            AmoOp::Or(v) => (amo_code::OR, v, 0),
            AmoOp::Xor(v) => (amo_code::XOR, v, 0),
        };
        let mut old = 0u64;
        // SAFETY: a live engine; `old` is a valid out-pointer.
        self.call(|e, el| unsafe {
            (self.plugin.vtable.atomic)(
                self.engine,
                pe,
                offset,
                width.bytes() as u32,
                code,
                operand,
                cond,
                &mut old,
                e,
                el,
            )
        })?;
        Ok(old)
    }
    unsafe fn signal(&self, pe: PeId, sig: usize, op: SignalOp, value: u64) -> Result<()> {
        // SAFETY: a live engine.
        self.call(|e, el| unsafe {
            (self.plugin.vtable.signal)(self.engine, pe, sig, signal_op_code(op), value, e, el)
        })
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
        nbi: bool,
    ) -> Result<()> {
        // SAFETY: forwarded contract.
        self.call(|e, el| unsafe {
            (self.plugin.vtable.put_signal)(
                self.engine,
                pe,
                dst,
                src,
                len,
                sig,
                signal_op_code(op),
                value,
                nbi as i32,
                e,
                el,
            )
        })
    }
    fn fence(&self) -> Result<()> {
        // SAFETY: a live engine.
        self.call(|e, el| unsafe { (self.plugin.vtable.fence)(self.engine, e, el) })
    }
    fn quiet(&self) -> Result<()> {
        // SAFETY: a live engine.
        self.call(|e, el| unsafe { (self.plugin.vtable.quiet)(self.engine, e, el) })
    }
}

// ----- guest side (inside a plugin) --------------------------------------

/// Exports a Rust [`Transport`] as a plugin: defines the
/// `shmem_transport_plugin` entry point of a `cdylib`.
///
/// ```ignore
/// fn create(init: &shmem_core::TransportInit<'_>) -> shmem_core::Result<std::sync::Arc<dyn shmem_core::Transport>> { ... }
/// shmem_core::export_transport_plugin!(name: "MYFABRIC", priority: 50, create: create);
/// ```
#[macro_export]
macro_rules! export_transport_plugin {
    (name: $name:literal, priority: $prio:expr, create: $create:path $(,)?) => {
        unsafe extern "C" fn __shmem_plugin_create(
            host: *const $crate::plugin::PluginHost,
            engine: *mut *mut ::std::ffi::c_void,
            err: *mut ::std::ffi::c_char,
            err_len: usize,
        ) -> i32 {
            // SAFETY: the host calls with the arguments the ABI describes.
            unsafe { $crate::plugin::guest::create(host, engine, err, err_len, $create) }
        }

        struct __ShmemPluginTable($crate::plugin::PluginVtable);
        // SAFETY: the table is immutable; its name pointer is a static string.
        unsafe impl Sync for __ShmemPluginTable {}

        static __SHMEM_PLUGIN_TABLE: __ShmemPluginTable =
            __ShmemPluginTable($crate::plugin::guest::vtable(
                concat!($name, "\0").as_ptr().cast(),
                $prio,
                __shmem_plugin_create,
            ));

        /// The plugin's entry point (see `shmem_core::plugin`).
        #[no_mangle]
        pub extern "C" fn shmem_transport_plugin() -> *const $crate::plugin::PluginVtable {
            &__SHMEM_PLUGIN_TABLE.0
        }
    };
}

/// The plugin half: turns the C ABI back into Rust calls. Used through
/// [`crate::export_transport_plugin!`].
pub mod guest {
    use super::*;

    type Create =
        unsafe extern "C" fn(*const PluginHost, *mut *mut c_void, *mut c_char, usize) -> i32;

    /// A vtable calling into [`Transport`] objects made by `create`.
    pub const fn vtable(name: *const c_char, priority: u32, create: Create) -> PluginVtable {
        PluginVtable {
            abi_version: PLUGIN_ABI_VERSION,
            struct_size: std::mem::size_of::<PluginVtable>() as u32,
            name,
            priority,
            create,
            destroy,
            capabilities,
            can_reach,
            peer_ptr,
            put,
            get,
            atomic,
            signal,
            put_signal,
            fence,
            quiet,
        }
    }

    /// The host's bootstrap, through its callbacks.
    struct GuestBootstrap<'a> {
        host: &'a PluginHost,
    }

    // SAFETY: the host's callbacks forward to its `Bootstrap`, which is
    // Send + Sync; the data `host` points to is not changed during `create`,
    // the only time this value exists.
    unsafe impl Send for GuestBootstrap<'_> {}
    // SAFETY: as above.
    unsafe impl Sync for GuestBootstrap<'_> {}

    impl GuestBootstrap<'_> {
        fn call(&self, f: impl FnOnce(*mut c_char, usize) -> i32) -> Result<()> {
            let mut err = ErrBuf::new();
            if f(err.ptr(), err.len()) == OK {
                Ok(())
            } else {
                Err(Error::Bootstrap(err.message("host bootstrap call failed")))
            }
        }
    }

    impl Bootstrap for GuestBootstrap<'_> {
        fn rank(&self) -> PeId {
            self.host.rank
        }
        fn size(&self) -> usize {
            self.host.n_pes
        }
        fn allgather(&self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
            let mut out: *mut u8 = std::ptr::null_mut();
            let mut out_len = 0usize;
            // SAFETY: the host's callback with valid buffers.
            self.call(|e, el| unsafe {
                (self.host.allgather)(
                    self.host.ctx,
                    data.as_ptr(),
                    data.len(),
                    &mut out,
                    &mut out_len,
                    e,
                    el,
                )
            })?;
            // SAFETY: on success the host returned `out_len` bytes at `out`.
            let bytes = unsafe { std::slice::from_raw_parts(out, out_len) }.to_vec();
            // SAFETY: returning the host's buffer to it, once.
            unsafe { (self.host.free_buffer)(self.host.ctx, out, out_len) };
            let mut all = Vec::with_capacity(self.host.n_pes);
            let mut rest = &bytes[..];
            while rest.len() >= 8 {
                let (len, tail) = rest.split_at(8);
                let len = u64::from_le_bytes(len.try_into().unwrap_or([0; 8])) as usize;
                if tail.len() < len {
                    break;
                }
                all.push(tail[..len].to_vec());
                rest = &tail[len..];
            }
            if all.len() != self.host.n_pes || !rest.is_empty() {
                return Err(Error::Bootstrap(format!(
                    "the host's allgather returned {} records for {} PEs",
                    all.len(),
                    self.host.n_pes
                )));
            }
            Ok(all)
        }
        fn barrier(&self) -> Result<()> {
            // SAFETY: the host's callback.
            self.call(|e, el| unsafe { (self.host.barrier)(self.host.ctx, e, el) })
        }
        fn check_peers(&self) -> Result<()> {
            // SAFETY: the host's callback.
            self.call(|e, el| unsafe { (self.host.check_peers)(self.host.ctx, e, el) })
        }
        fn abort(&self, _status: i32, _message: &str) -> Result<()> {
            Err(Error::Unsupported(
                "a plugin engine cannot end the job".into(),
            ))
        }
        fn finalize(&self) -> Result<()> {
            Ok(())
        }
    }

    /// The host's heap: memory it owns and keeps mapped while the engine lives.
    #[derive(Debug)]
    struct HostHeap {
        base: NonNull<u8>,
        size: usize,
        fd: i32,
    }

    // SAFETY: plain shared memory owned by the host, reached by raw pointers.
    unsafe impl Send for HostHeap {}
    // SAFETY: as above.
    unsafe impl Sync for HostHeap {}

    // SAFETY: `base`/`size` describe the host's live heap mapping, which
    // outlives every engine built on it (the host keeps it).
    unsafe impl Heap for HostHeap {
        fn base(&self) -> NonNull<u8> {
            self.base
        }
        fn size(&self) -> usize {
            self.size
        }
        fn export(&self) -> HeapExport {
            if self.fd >= 0 {
                HeapExport::Fd(self.fd)
            } else {
                HeapExport::None
            }
        }
    }

    /// `create` of the exported table: rebuilds a [`TransportInit`] from
    /// `host` and calls the plugin's Rust constructor.
    ///
    /// # Safety
    /// `host` must be a valid [`PluginHost`] for the call, `engine` a valid
    /// out-pointer and `err` valid for `err_len` bytes.
    pub unsafe fn create(
        host: *const PluginHost,
        engine: *mut *mut c_void,
        err: *mut c_char,
        err_len: usize,
        make: fn(&TransportInit<'_>) -> Result<Arc<dyn Transport>>,
    ) -> i32 {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(
            || -> Result<*mut c_void> {
                // SAFETY: guaranteed by the caller.
                let host = unsafe { &*host };
                if host.abi_version != PLUGIN_ABI_VERSION
                    || host.struct_size as usize != std::mem::size_of::<PluginHost>()
                {
                    return Err(Error::Unsupported(format!(
                    "the host speaks plugin ABI version {} ({} bytes), this plugin version {PLUGIN_ABI_VERSION} ({} bytes)",
                    host.abi_version,
                    host.struct_size,
                    std::mem::size_of::<PluginHost>()
                )));
                }
                let n = host.n_pes;
                // SAFETY: the ABI gives `n_pes` entries in each array and a
                // NUL-terminated configuration, valid during `create`.
                let (node_of, pid_of, uid_of, config) = unsafe {
                    (
                        std::slice::from_raw_parts(host.node_of, n).to_vec(),
                        std::slice::from_raw_parts(host.pid_of, n).to_vec(),
                        std::slice::from_raw_parts(host.uid_of, n).to_vec(),
                        CStr::from_ptr(host.config).to_string_lossy().into_owned(),
                    )
                };
                let values: std::collections::HashMap<&str, &str> =
                    config.lines().filter_map(|l| l.split_once('=')).collect();
                let config = Config::from_lookup(|k| values.get(k).map(|v| v.to_string()))?;
                // The ABI carries nodes only; a plugin sees each node as
                // its own machine.
                let topology = Topology {
                    machine_of: node_of.clone(),
                    node_of,
                    pid_of,
                    uid_of,
                    my_pe: host.rank,
                };
                let heap: Arc<dyn Heap> = Arc::new(HostHeap {
                    base: NonNull::new(host.heap_base)
                        .ok_or_else(|| Error::Unsupported("the host gave a null heap".into()))?,
                    size: host.heap_size,
                    fd: host.heap_fd,
                });
                let bootstrap = GuestBootstrap { host };
                let init = TransportInit {
                    bootstrap: &bootstrap,
                    heap: &heap,
                    topology: &topology,
                    config: &config,
                };
                let t = make(&init)?;
                Ok(Box::into_raw(Box::new(t)).cast())
            },
        ));
        let r =
            r.unwrap_or_else(|_| Err(Error::Unsupported("the plugin's create panicked".into())));
        match r {
            Ok(p) => {
                // SAFETY: valid out-pointer per the caller.
                unsafe { *engine = p };
                OK
            }
            // SAFETY: forwarded.
            Err(e) => unsafe { status(Err(e), err, err_len) },
        }
    }

    /// # Safety
    /// `engine` must come from [`create`].
    unsafe fn this<'a>(engine: *mut c_void) -> &'a Arc<dyn Transport> {
        // SAFETY: guaranteed by the caller.
        unsafe { &*(engine as *const Arc<dyn Transport>) }
    }

    unsafe extern "C" fn destroy(engine: *mut c_void) {
        // SAFETY: made by `create` with Box::into_raw; released once.
        drop(unsafe { Box::from_raw(engine as *mut Arc<dyn Transport>) });
    }
    unsafe extern "C" fn capabilities(engine: *mut c_void) -> u32 {
        // SAFETY: the host passes an engine from `create`.
        unsafe { this(engine) }.capabilities().0
    }
    unsafe extern "C" fn can_reach(engine: *mut c_void, pe: usize) -> i32 {
        // SAFETY: as above.
        unsafe { this(engine) }.can_reach(pe) as i32
    }
    unsafe extern "C" fn peer_ptr(engine: *mut c_void, pe: usize, offset: usize) -> *mut u8 {
        // SAFETY: a live engine; the host's runtime checked PE and offset
        // (the ABI's contract for every call).
        unsafe { this(engine).peer_ptr(pe, offset) }.map_or(std::ptr::null_mut(), |p| p.as_ptr())
    }
    #[allow(clippy::too_many_arguments)]
    unsafe extern "C" fn put(
        engine: *mut c_void,
        pe: usize,
        dst: usize,
        src: *const u8,
        len: usize,
        nbi: i32,
        err: *mut c_char,
        err_len: usize,
    ) -> i32 {
        // SAFETY: the host's runtime checked the range; `src` per the ABI.
        let t = unsafe { this(engine) };
        let r = if nbi != 0 {
            // SAFETY: as above.
            unsafe { t.put_nbi(pe, dst, src, len) }
        } else {
            // SAFETY: as above.
            unsafe { t.put(pe, dst, src, len) }
        };
        // SAFETY: forwarded.
        unsafe { status(r, err, err_len) }
    }
    #[allow(clippy::too_many_arguments)]
    unsafe extern "C" fn get(
        engine: *mut c_void,
        pe: usize,
        src: usize,
        dst: *mut u8,
        len: usize,
        nbi: i32,
        err: *mut c_char,
        err_len: usize,
    ) -> i32 {
        // SAFETY: as in put.
        let t = unsafe { this(engine) };
        let r = if nbi != 0 {
            // SAFETY: as above.
            unsafe { t.get_nbi(pe, src, dst, len) }
        } else {
            // SAFETY: as above.
            unsafe { t.get(pe, src, dst, len) }
        };
        // SAFETY: forwarded.
        unsafe { status(r, err, err_len) }
    }
    #[allow(clippy::too_many_arguments)]
    unsafe extern "C" fn atomic(
        engine: *mut c_void,
        pe: usize,
        offset: usize,
        width: u32,
        op: u32,
        operand: u64,
        cond: u64,
        old: *mut u64,
        err: *mut c_char,
        err_len: usize,
    ) -> i32 {
        let width = match width {
            4 => AmoWidth::W32,
            8 => AmoWidth::W64,
            w => {
                // SAFETY: forwarded.
                return unsafe {
                    status(
                        Err(Error::invalid("width", format!("{w} bytes"))),
                        err,
                        err_len,
                    )
                };
            }
        };
        let op = match op {
            amo_code::FETCH => AmoOp::Fetch,
            amo_code::SET => AmoOp::Set(operand),
            amo_code::SWAP => AmoOp::Swap(operand),
            amo_code::COMPARE_SWAP => AmoOp::CompareSwap {
                cond,
                value: operand,
            },
            amo_code::ADD => AmoOp::Add(operand),
            amo_code::AND => AmoOp::And(operand),
            amo_code::OR => AmoOp::Or(operand),
            amo_code::XOR => AmoOp::Xor(operand),
            o => {
                // SAFETY: forwarded.
                return unsafe {
                    status(
                        Err(Error::invalid("atomic op", format!("code {o}"))),
                        err,
                        err_len,
                    )
                };
            }
        };
        // SAFETY: as in put: the host's runtime checked PE, range and alignment.
        let r = unsafe { this(engine).atomic(pe, offset, width, op) }.map(|v| {
            // SAFETY: valid out-pointer per the ABI.
            unsafe { *old = v };
        });
        // SAFETY: forwarded.
        unsafe { status(r, err, err_len) }
    }
    fn signal_op(op: u32) -> Result<SignalOp> {
        match op {
            signal_code::SET => Ok(SignalOp::Set),
            signal_code::ADD => Ok(SignalOp::Add),
            o => Err(Error::invalid("signal op", format!("code {o}"))),
        }
    }
    unsafe extern "C" fn signal(
        engine: *mut c_void,
        pe: usize,
        sig: usize,
        op: u32,
        value: u64,
        err: *mut c_char,
        err_len: usize,
    ) -> i32 {
        // SAFETY: as in put: the host's runtime checked PE and signal word.
        let r = signal_op(op).and_then(|op| unsafe { this(engine).signal(pe, sig, op, value) });
        // SAFETY: forwarded.
        unsafe { status(r, err, err_len) }
    }
    #[allow(clippy::too_many_arguments)]
    unsafe extern "C" fn put_signal(
        engine: *mut c_void,
        pe: usize,
        dst: usize,
        src: *const u8,
        len: usize,
        sig: usize,
        op: u32,
        value: u64,
        nbi: i32,
        err: *mut c_char,
        err_len: usize,
    ) -> i32 {
        let r = signal_op(op).and_then(|op| {
            // SAFETY: as in put.
            unsafe { this(engine).put_signal(pe, dst, src, len, sig, op, value, nbi != 0) }
        });
        // SAFETY: forwarded.
        unsafe { status(r, err, err_len) }
    }
    unsafe extern "C" fn fence(engine: *mut c_void, err: *mut c_char, err_len: usize) -> i32 {
        // SAFETY: as in put; forwarded error buffer.
        unsafe { status(this(engine).fence(), err, err_len) }
    }
    unsafe extern "C" fn quiet(engine: *mut c_void, err: *mut c_char, err_len: usize) -> i32 {
        // SAFETY: as in put; forwarded error buffer.
        unsafe { status(this(engine).quiet(), err, err_len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mismatched_abi_is_refused_naming_file_and_versions() {
        let e = check_abi("/x/libfoo.so", PLUGIN_ABI_VERSION + 1, 0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("/x/libfoo.so"), "{e}");
        assert!(
            e.contains(&format!("version {}", PLUGIN_ABI_VERSION + 1)),
            "{e}"
        );
        assert!(e.contains(&format!("version {PLUGIN_ABI_VERSION}")), "{e}");
        let e = check_abi("/x/libfoo.so", PLUGIN_ABI_VERSION, 8)
            .unwrap_err()
            .to_string();
        assert!(e.contains("8 bytes") && e.contains("/x/libfoo.so"), "{e}");
        check_abi(
            "/x",
            PLUGIN_ABI_VERSION,
            std::mem::size_of::<PluginVtable>() as u32,
        )
        .unwrap();
    }

    #[test]
    fn files_that_are_not_plugins_are_refused_by_name() {
        let e = load("relative/libfoo.so").unwrap_err().to_string();
        assert!(
            e.contains("relative/libfoo.so") && e.contains("absolute"),
            "{e}"
        );
        let e = load("/nonexistent/libfoo.so").unwrap_err().to_string();
        assert!(e.contains("/nonexistent/libfoo.so"), "{e}");
        // A real shared library without the entry point.
        let libc = [
            "/lib/x86_64-linux-gnu/libc.so.6",
            "/usr/lib64/libc.so.6",
            "/lib64/libc.so.6",
        ]
        .into_iter()
        .find(|p| Path::new(p).exists());
        if let Some(libc) = libc {
            let e = load(libc).unwrap_err().to_string();
            assert!(e.contains(PLUGIN_ENTRY) && e.contains(libc), "{e}");
        }
    }

    #[test]
    fn error_buffers_truncate_on_char_boundaries() {
        let mut buf = [0x55u8; 6];
        // SAFETY: a 6-byte buffer.
        unsafe { write_error(buf.as_mut_ptr().cast(), buf.len(), "abcdé") };
        assert_eq!(&buf[..5], b"abcd\0");
    }
}
