//! Hand-written declarations of the part of the libfabric 1.x ABI this
//! provider uses, from the 1.17 headers (`rdma/fabric.h`, `fi_domain.h`,
//! `fi_endpoint.h`, `fi_rma.h`, `fi_atomic.h`, `fi_cm.h`, `fi_eq.h`,
//! `fi_errno.h`).
//!
//! Only a handful of functions are exported by `libfabric.so.1`
//! ([`Api`]); everything else (`fi_domain`, `fi_write`, `fi_cq_read`, ...)
//! is a `static inline` in the headers that calls through the operation
//! tables of the objects, so those tables are replicated here field by
//! field. libfabric only appends to these structures within 1.x, so a newer
//! library is compatible. The unit tests compare every size and the offsets
//! that matter with a C program compiled against the installed headers.

#![allow(non_camel_case_types, missing_docs)]

use std::ffi::{c_char, c_int, c_void};

pub type fi_addr_t = u64;
pub type ssize_t = isize;

pub const fn fi_version(major: u32, minor: u32) -> u32 {
    (major << 16) | minor
}

// Capabilities and operation flags (fabric.h).
pub const FI_MSG: u64 = 1 << 1;
pub const FI_RMA: u64 = 1 << 2;
pub const FI_ATOMIC: u64 = 1 << 4;
pub const FI_READ: u64 = 1 << 8;
pub const FI_WRITE: u64 = 1 << 9;
pub const FI_RECV: u64 = 1 << 10;
pub const FI_SEND: u64 = 1 << 11;
pub const FI_TRANSMIT: u64 = FI_SEND;
pub const FI_REMOTE_READ: u64 = 1 << 12;
pub const FI_REMOTE_WRITE: u64 = 1 << 13;
pub const FI_REMOTE_CQ_DATA: u64 = 1 << 17;
pub const FI_FENCE: u64 = 1 << 21;
pub const FI_COMPLETION: u64 = 1 << 24;
pub const FI_DELIVERY_COMPLETE: u64 = 1 << 28;
pub const FI_CONTEXT: u64 = 1 << 59;
pub const FI_CONTEXT2: u64 = 1 << 52;
pub const FI_RX_CQ_DATA: u64 = 1 << 56;

// Memory-registration modes.
pub const FI_MR_BASIC: c_int = 1;
pub const FI_MR_SCALABLE: c_int = 2;
pub const FI_MR_LOCAL: c_int = 1 << 2;
pub const FI_MR_RAW: c_int = 1 << 3;
pub const FI_MR_VIRT_ADDR: c_int = 1 << 4;
pub const FI_MR_ALLOCATED: c_int = 1 << 5;
pub const FI_MR_PROV_KEY: c_int = 1 << 6;
pub const FI_MR_MMU_NOTIFY: c_int = 1 << 7;
pub const FI_MR_RMA_EVENT: c_int = 1 << 8;
pub const FI_MR_ENDPOINT: c_int = 1 << 9;
pub const FI_MR_HMEM: c_int = 1 << 10;

// Message ordering.
pub const FI_ORDER_WAW: u64 = 1 << 4;
pub const FI_ORDER_SAW: u64 = 1 << 7;
pub const FI_ORDER_RMA_WAW: u64 = 1 << 35;
pub const FI_ORDER_ATOMIC_RAW: u64 = 1 << 37;
pub const FI_ORDER_ATOMIC_WAW: u64 = 1 << 39;

// Enumerations (C `enum`s are `int`-sized).
pub const FI_EP_RDM: c_int = 3;
pub const FI_THREAD_SAFE: c_int = 1;
pub const FI_PROGRESS_AUTO: c_int = 1;
pub const FI_PROGRESS_MANUAL: c_int = 2;
pub const FI_AV_MAP: c_int = 1;
/// `enum fi_proto` value of libfabric's own TCP RDM protocol (the `net`
/// provider of 1.17, `tcp` from 1.18).
pub const FI_PROTO_XNET: u32 = 25;
pub const FI_AV_TABLE: c_int = 2;
pub const FI_CQ_FORMAT_CONTEXT: c_int = 1;
pub const FI_CQ_FORMAT_DATA: c_int = 3;
pub const FI_WAIT_NONE: c_int = 0;
pub const FI_WAIT_UNSPEC: c_int = 1;
pub const FI_WAIT_FD: c_int = 3;
/// `fi_control` command that returns a wait object (its file descriptor).
pub const FI_GETWAIT: c_int = 5;
pub const FI_CQ_COND_NONE: c_int = 0;
/// `fi_control` command that enables an endpoint or memory region.
pub const FI_ENABLE: c_int = 6;

// Atomic data types and operations (fi_domain.h).
pub const FI_UINT8: c_int = 1;
pub const FI_UINT32: c_int = 5;
pub const FI_UINT64: c_int = 7;
pub const FI_SUM: c_int = 2;
pub const FI_BOR: c_int = 6;
pub const FI_BAND: c_int = 7;
pub const FI_BXOR: c_int = 9;
pub const FI_ATOMIC_READ: c_int = 10;
pub const FI_ATOMIC_WRITE: c_int = 11;
pub const FI_CSWAP: c_int = 12;

// Errors (fi_errno.h: positive values, returned negated).
pub const FI_EAGAIN: c_int = libc::EAGAIN;
pub const FI_ENODATA: c_int = libc::ENODATA;
pub const FI_EAVAIL: c_int = 259;

/// `struct fi_context2`: provider scratch space at the start of every
/// operation context when the provider asks for `FI_CONTEXT`/`FI_CONTEXT2`.
#[repr(C)]
#[derive(Debug, Default)]
pub struct fi_context2 {
    pub internal: [usize; 8],
}

#[repr(C)]
pub struct fi_tx_attr {
    pub caps: u64,
    pub mode: u64,
    pub op_flags: u64,
    pub msg_order: u64,
    pub comp_order: u64,
    pub inject_size: usize,
    pub size: usize,
    pub iov_limit: usize,
    pub rma_iov_limit: usize,
    pub tclass: u32,
}

#[repr(C)]
pub struct fi_rx_attr {
    pub caps: u64,
    pub mode: u64,
    pub op_flags: u64,
    pub msg_order: u64,
    pub comp_order: u64,
    pub total_buffered_recv: usize,
    pub size: usize,
    pub iov_limit: usize,
}

#[repr(C)]
pub struct fi_ep_attr {
    pub type_: c_int,
    pub protocol: u32,
    pub protocol_version: u32,
    pub max_msg_size: usize,
    pub msg_prefix_size: usize,
    pub max_order_raw_size: usize,
    pub max_order_war_size: usize,
    pub max_order_waw_size: usize,
    pub mem_tag_format: u64,
    pub tx_ctx_cnt: usize,
    pub rx_ctx_cnt: usize,
    pub auth_key_size: usize,
    pub auth_key: *mut u8,
}

#[repr(C)]
pub struct fi_domain_attr {
    pub domain: *mut fid_domain,
    pub name: *mut c_char,
    pub threading: c_int,
    pub control_progress: c_int,
    pub data_progress: c_int,
    pub resource_mgmt: c_int,
    pub av_type: c_int,
    pub mr_mode: c_int,
    pub mr_key_size: usize,
    pub cq_data_size: usize,
    pub cq_cnt: usize,
    pub ep_cnt: usize,
    pub tx_ctx_cnt: usize,
    pub rx_ctx_cnt: usize,
    pub max_ep_tx_ctx: usize,
    pub max_ep_rx_ctx: usize,
    pub max_ep_stx_ctx: usize,
    pub max_ep_srx_ctx: usize,
    pub cntr_cnt: usize,
    pub mr_iov_limit: usize,
    pub caps: u64,
    pub mode: u64,
    pub auth_key: *mut u8,
    pub auth_key_size: usize,
    pub max_err_data: usize,
    pub mr_cnt: usize,
    pub tclass: u32,
}

#[repr(C)]
pub struct fi_fabric_attr {
    pub fabric: *mut fid_fabric,
    pub name: *mut c_char,
    pub prov_name: *mut c_char,
    pub prov_version: u32,
    pub api_version: u32,
}

#[repr(C)]
pub struct fi_info {
    pub next: *mut fi_info,
    pub caps: u64,
    pub mode: u64,
    pub addr_format: u32,
    pub src_addrlen: usize,
    pub dest_addrlen: usize,
    pub src_addr: *mut c_void,
    pub dest_addr: *mut c_void,
    pub handle: *mut fid,
    pub tx_attr: *mut fi_tx_attr,
    pub rx_attr: *mut fi_rx_attr,
    pub ep_attr: *mut fi_ep_attr,
    pub domain_attr: *mut fi_domain_attr,
    pub fabric_attr: *mut fi_fabric_attr,
    pub nic: *mut c_void,
}

#[repr(C)]
pub struct fid {
    pub fclass: usize,
    pub context: *mut c_void,
    pub ops: *mut fi_ops,
}

type Opaque = Option<unsafe extern "C" fn()>;

#[repr(C)]
pub struct fi_ops {
    pub size: usize,
    pub close: unsafe extern "C" fn(*mut fid) -> c_int,
    pub bind: unsafe extern "C" fn(*mut fid, *mut fid, u64) -> c_int,
    pub control: unsafe extern "C" fn(*mut fid, c_int, *mut c_void) -> c_int,
    pub ops_open: Opaque,
    pub tostr: Opaque,
    pub ops_set: Opaque,
}

#[repr(C)]
pub struct fi_ops_fabric {
    pub size: usize,
    pub domain: unsafe extern "C" fn(
        *mut fid_fabric,
        *mut fi_info,
        *mut *mut fid_domain,
        *mut c_void,
    ) -> c_int,
    pub passive_ep: Opaque,
    pub eq_open: Opaque,
    pub wait_open: Opaque,
    pub trywait: Option<unsafe extern "C" fn(*mut fid_fabric, *mut *mut fid, c_int) -> c_int>,
    pub domain2: Opaque,
}

#[repr(C)]
pub struct fid_fabric {
    pub fid: fid,
    pub ops: *mut fi_ops_fabric,
    pub api_version: u32,
}

#[repr(C)]
pub struct fi_atomic_attr {
    pub count: usize,
    pub size: usize,
}

#[repr(C)]
pub struct fi_av_attr {
    pub type_: c_int,
    pub rx_ctx_bits: c_int,
    pub count: usize,
    pub ep_per_node: usize,
    pub name: *const c_char,
    pub map_addr: *mut c_void,
    pub flags: u64,
}

#[repr(C)]
pub struct fi_cq_attr {
    pub size: usize,
    pub flags: u64,
    pub format: c_int,
    pub wait_obj: c_int,
    pub signaling_vector: c_int,
    pub wait_cond: c_int,
    pub wait_set: *mut c_void,
}

#[repr(C)]
pub struct fi_ops_domain {
    pub size: usize,
    pub av_open: unsafe extern "C" fn(
        *mut fid_domain,
        *mut fi_av_attr,
        *mut *mut fid_av,
        *mut c_void,
    ) -> c_int,
    pub cq_open: unsafe extern "C" fn(
        *mut fid_domain,
        *mut fi_cq_attr,
        *mut *mut fid_cq,
        *mut c_void,
    ) -> c_int,
    pub endpoint:
        unsafe extern "C" fn(*mut fid_domain, *mut fi_info, *mut *mut fid_ep, *mut c_void) -> c_int,
    pub scalable_ep: Opaque,
    pub cntr_open: Opaque,
    pub poll_open: Opaque,
    pub stx_ctx: Opaque,
    pub srx_ctx: Opaque,
    pub query_atomic:
        unsafe extern "C" fn(*mut fid_domain, c_int, c_int, *mut fi_atomic_attr, u64) -> c_int,
    pub query_collective: Opaque,
    pub endpoint2: Opaque,
}

#[repr(C)]
pub struct fi_ops_mr {
    pub size: usize,
    #[allow(clippy::type_complexity)]
    pub reg: unsafe extern "C" fn(
        *mut fid,
        *const c_void,
        usize,
        u64,
        u64,
        u64,
        u64,
        *mut *mut fid_mr,
        *mut c_void,
    ) -> c_int,
    pub regv: Opaque,
    pub regattr: Opaque,
}

#[repr(C)]
pub struct fid_domain {
    pub fid: fid,
    pub ops: *mut fi_ops_domain,
    pub mr: *mut fi_ops_mr,
}

#[repr(C)]
pub struct fid_mr {
    pub fid: fid,
    pub mem_desc: *mut c_void,
    pub key: u64,
}

#[repr(C)]
pub struct fi_ops_av {
    pub size: usize,
    pub insert: unsafe extern "C" fn(
        *mut fid_av,
        *const c_void,
        usize,
        *mut fi_addr_t,
        u64,
        *mut c_void,
    ) -> c_int,
    pub insertsvc: Opaque,
    pub insertsym: Opaque,
    pub remove: Opaque,
    pub lookup: Opaque,
    pub straddr: Opaque,
    pub av_set: Opaque,
}

#[repr(C)]
pub struct fid_av {
    pub fid: fid,
    pub ops: *mut fi_ops_av,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_cq_data_entry {
    pub op_context: *mut c_void,
    pub flags: u64,
    pub len: usize,
    pub buf: *mut c_void,
    pub data: u64,
}

#[repr(C)]
pub struct fi_cq_err_entry {
    pub op_context: *mut c_void,
    pub flags: u64,
    pub len: usize,
    pub buf: *mut c_void,
    pub data: u64,
    pub tag: u64,
    pub olen: usize,
    pub err: c_int,
    pub prov_errno: c_int,
    pub err_data: *mut c_void,
    pub err_data_size: usize,
}

#[repr(C)]
pub struct fi_ops_cq {
    pub size: usize,
    pub read: unsafe extern "C" fn(*mut fid_cq, *mut c_void, usize) -> ssize_t,
    pub readfrom: Opaque,
    pub readerr: unsafe extern "C" fn(*mut fid_cq, *mut fi_cq_err_entry, u64) -> ssize_t,
    pub sread:
        unsafe extern "C" fn(*mut fid_cq, *mut c_void, usize, *const c_void, c_int) -> ssize_t,
    pub sreadfrom: Opaque,
    pub signal: Opaque,
    pub strerror: unsafe extern "C" fn(
        *mut fid_cq,
        c_int,
        *const c_void,
        *mut c_char,
        usize,
    ) -> *const c_char,
}

#[repr(C)]
pub struct fid_cq {
    pub fid: fid,
    pub ops: *mut fi_ops_cq,
}

#[repr(C)]
pub struct fi_ops_ep {
    pub size: usize,
    pub cancel: Opaque,
    pub getopt: Opaque,
    pub setopt: Opaque,
    pub tx_ctx: Opaque,
    pub rx_ctx: Opaque,
    pub rx_size_left: Opaque,
    pub tx_size_left: Opaque,
}

#[repr(C)]
pub struct fi_ops_cm {
    pub size: usize,
    pub setname: Opaque,
    pub getname: unsafe extern "C" fn(*mut fid, *mut c_void, *mut usize) -> c_int,
    pub getpeer: Opaque,
    pub connect: Opaque,
    pub listen: Opaque,
    pub accept: Opaque,
    pub reject: Opaque,
    pub shutdown: Opaque,
    pub join: Opaque,
}

#[repr(C)]
pub struct fi_ops_msg {
    pub size: usize,
    pub recv: unsafe extern "C" fn(
        *mut fid_ep,
        *mut c_void,
        usize,
        *mut c_void,
        fi_addr_t,
        *mut c_void,
    ) -> ssize_t,
    pub recvv: Opaque,
    pub recvmsg: Opaque,
    pub send: unsafe extern "C" fn(
        *mut fid_ep,
        *const c_void,
        usize,
        *mut c_void,
        fi_addr_t,
        *mut c_void,
    ) -> ssize_t,
    pub sendv: Opaque,
    pub sendmsg: Opaque,
    pub inject: unsafe extern "C" fn(*mut fid_ep, *const c_void, usize, fi_addr_t) -> ssize_t,
    pub senddata: Opaque,
    pub injectdata: Opaque,
}

/// `struct iovec`.
#[repr(C)]
pub struct iovec {
    pub iov_base: *mut c_void,
    pub iov_len: usize,
}

#[repr(C)]
pub struct fi_rma_iov {
    pub addr: u64,
    pub len: usize,
    pub key: u64,
}

#[repr(C)]
pub struct fi_msg_rma {
    pub msg_iov: *const iovec,
    pub desc: *mut *mut c_void,
    pub iov_count: usize,
    pub addr: fi_addr_t,
    pub rma_iov: *const fi_rma_iov,
    pub rma_iov_count: usize,
    pub context: *mut c_void,
    pub data: u64,
}

#[repr(C)]
pub struct fi_ops_rma {
    pub size: usize,
    #[allow(clippy::type_complexity)]
    pub read: unsafe extern "C" fn(
        *mut fid_ep,
        *mut c_void,
        usize,
        *mut c_void,
        fi_addr_t,
        u64,
        u64,
        *mut c_void,
    ) -> ssize_t,
    pub readv: Opaque,
    pub readmsg: Opaque,
    #[allow(clippy::type_complexity)]
    pub write: unsafe extern "C" fn(
        *mut fid_ep,
        *const c_void,
        usize,
        *mut c_void,
        fi_addr_t,
        u64,
        u64,
        *mut c_void,
    ) -> ssize_t,
    pub writev: Opaque,
    pub writemsg: unsafe extern "C" fn(*mut fid_ep, *const fi_msg_rma, u64) -> ssize_t,
    pub inject: Opaque,
    pub writedata: Opaque,
    pub injectdata: Opaque,
}

#[repr(C)]
pub struct fi_ioc {
    pub addr: *mut c_void,
    pub count: usize,
}

#[repr(C)]
pub struct fi_rma_ioc {
    pub addr: u64,
    pub count: usize,
    pub key: u64,
}

#[repr(C)]
pub struct fi_msg_atomic {
    pub msg_iov: *const fi_ioc,
    pub desc: *mut *mut c_void,
    pub iov_count: usize,
    pub addr: fi_addr_t,
    pub rma_iov: *const fi_rma_ioc,
    pub rma_iov_count: usize,
    pub datatype: c_int,
    pub op: c_int,
    pub context: *mut c_void,
    pub data: u64,
}

#[repr(C)]
pub struct fi_ops_atomic {
    pub size: usize,
    #[allow(clippy::type_complexity)]
    pub write: unsafe extern "C" fn(
        *mut fid_ep,
        *const c_void,
        usize,
        *mut c_void,
        fi_addr_t,
        u64,
        u64,
        c_int,
        c_int,
        *mut c_void,
    ) -> ssize_t,
    pub writev: Opaque,
    pub writemsg: unsafe extern "C" fn(*mut fid_ep, *const fi_msg_atomic, u64) -> ssize_t,
    pub inject: Opaque,
    #[allow(clippy::type_complexity)]
    pub readwrite: unsafe extern "C" fn(
        *mut fid_ep,
        *const c_void,
        usize,
        *mut c_void,
        *mut c_void,
        *mut c_void,
        fi_addr_t,
        u64,
        u64,
        c_int,
        c_int,
        *mut c_void,
    ) -> ssize_t,
    pub readwritev: Opaque,
    pub readwritemsg: Opaque,
    #[allow(clippy::type_complexity)]
    pub compwrite: unsafe extern "C" fn(
        *mut fid_ep,
        *const c_void,
        usize,
        *mut c_void,
        *const c_void,
        *mut c_void,
        *mut c_void,
        *mut c_void,
        fi_addr_t,
        u64,
        u64,
        c_int,
        c_int,
        *mut c_void,
    ) -> ssize_t,
    pub compwritev: Opaque,
    pub compwritemsg: Opaque,
    pub writevalid: Opaque,
    pub readwritevalid: Opaque,
    pub compwritevalid: Opaque,
}

#[repr(C)]
pub struct fid_ep {
    pub fid: fid,
    pub ops: *mut fi_ops_ep,
    pub cm: *mut fi_ops_cm,
    pub msg: *mut fi_ops_msg,
    pub rma: *mut fi_ops_rma,
    pub tagged: *mut c_void,
    pub atomic: *mut fi_ops_atomic,
    pub collective: *mut c_void,
}

pub type FiGetinfo = unsafe extern "C" fn(
    u32,
    *const c_char,
    *const c_char,
    u64,
    *const fi_info,
    *mut *mut fi_info,
) -> c_int;
pub type FiFreeinfo = unsafe extern "C" fn(*mut fi_info);
pub type FiDupinfo = unsafe extern "C" fn(*const fi_info) -> *mut fi_info;
pub type FiFabric =
    unsafe extern "C" fn(*mut fi_fabric_attr, *mut *mut fid_fabric, *mut c_void) -> c_int;
pub type FiStrerror = unsafe extern "C" fn(c_int) -> *const c_char;
pub type FiVersion = unsafe extern "C" fn() -> u32;

/// The exported entry points of `libfabric.so.1`, resolved at run time.
pub struct Api {
    pub getinfo: FiGetinfo,
    pub freeinfo: FiFreeinfo,
    pub dupinfo: FiDupinfo,
    pub fabric: FiFabric,
    pub strerror: FiStrerror,
    pub version: FiVersion,
    /// Keeps the library mapped for as long as the pointers above are used.
    _lib: libloading::Library,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api").finish_non_exhaustive()
    }
}

/// Names tried, in order, when loading libfabric.
pub const LIBRARY_NAMES: &[&str] = &["libfabric.so.1", "libfabric.so"];

impl Api {
    /// libfabric's entry points, loaded once per process and kept: loading
    /// it initialises every provider (a tenth of a second or more here), so
    /// the probe that picks the provider and the engine that opens it share
    /// one load, and a process that opens several runtime instances loads
    /// it once. It is never unloaded (its providers may keep threads).
    ///
    /// # Errors
    /// A message naming the library when it cannot be loaded or lacks a symbol
    /// (found once, then returned again).
    pub fn load() -> Result<&'static Api, String> {
        static API: std::sync::OnceLock<Result<Api, String>> = std::sync::OnceLock::new();
        API.get_or_init(Api::open).as_ref().map_err(Clone::clone)
    }

    /// Loads libfabric and resolves its entry points.
    ///
    /// The application's signal handlers survive the load. Debian's
    /// libfabric links PSM, whose `libinfinipath` installs its own SIGINT,
    /// SIGTERM, SIGSEGV and SIGBUS handlers when it is loaded, over whatever
    /// the process had: Python's KeyboardInterrupt, a program's SIGTERM
    /// handler or `SIG_IGN`, Rust's stack-overflow report. Its SIGINT
    /// handler exits with status 1. The dispositions the process had before
    /// the load are put back after it. (At exit, `libinfinipath`'s
    /// destructor sets those four signals to their defaults; that window
    /// lies inside `exit` and is out of our reach.)
    fn open() -> Result<Api, String> {
        let mut why = Vec::new();
        for name in LIBRARY_NAMES {
            let kept = Dispositions::save();
            // SAFETY: loading libfabric runs its initialisers, which have no
            // preconditions beyond a sane process (no unusual global state).
            let loaded = unsafe { libloading::Library::new(name) };
            let changed = kept.restore();
            if !changed.is_empty() {
                shmem_core::shmem_log!(
                    Debug,
                    "ROCE/ofi: loading {name} replaced the handlers of signals {changed:?}; the process's own are back"
                );
            }
            match loaded {
                Ok(lib) => return Api::resolve(lib, name),
                Err(e) => why.push(format!("{name}: {e}")),
            }
        }
        Err(format!("libfabric not found ({})", why.join("; ")))
    }

    fn resolve(lib: libloading::Library, name: &str) -> Result<Api, String> {
        macro_rules! sym {
            ($s:literal, $t:ty) => {{
                // SAFETY: the symbol has the C signature `$t` declared by the
                // libfabric headers; the pointer is used only while `_lib`
                // keeps the library mapped.
                let f: libloading::Symbol<'_, $t> = unsafe { lib.get($s) }
                    .map_err(|e| format!("{name} has no {}: {e}", String::from_utf8_lossy($s)))?;
                *f
            }};
        }
        let getinfo = sym!(b"fi_getinfo", FiGetinfo);
        let freeinfo = sym!(b"fi_freeinfo", FiFreeinfo);
        let dupinfo = sym!(b"fi_dupinfo", FiDupinfo);
        let fabric = sym!(b"fi_fabric", FiFabric);
        let strerror = sym!(b"fi_strerror", FiStrerror);
        let version = sym!(b"fi_version", FiVersion);
        Ok(Api {
            getinfo,
            freeinfo,
            dupinfo,
            fabric,
            strerror,
            version,
            _lib: lib,
        })
    }

    /// `fi_strerror` of a (positive or negated) libfabric error code.
    pub fn error(&self, code: isize) -> String {
        let c = code.unsigned_abs().min(i32::MAX as usize) as c_int;
        // SAFETY: fi_strerror returns a static NUL-terminated string for any code.
        let p = unsafe { (self.strerror)(c) };
        if p.is_null() {
            return format!("error {c}");
        }
        // SAFETY: non-null static C string from libfabric.
        let s = unsafe { std::ffi::CStr::from_ptr(p) };
        format!("{} ({c})", s.to_string_lossy())
    }
}

/// The dispositions of the process's standard signals (1 to 31, less
/// SIGKILL and SIGSTOP), saved to be put back after a library load.
struct Dispositions(Vec<(c_int, libc::sigaction)>);

impl Dispositions {
    fn save() -> Self {
        let mut v = Vec::new();
        for sig in 1..32 {
            if sig == libc::SIGKILL || sig == libc::SIGSTOP {
                continue;
            }
            // SAFETY: sigaction with a null new action only reads the
            // disposition into `old`, a zeroed sigaction we own.
            unsafe {
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, std::ptr::null(), &mut old) == 0 {
                    v.push((sig, old));
                }
            }
        }
        Dispositions(v)
    }

    /// Puts back every disposition that differs from the saved one; returns
    /// the signals it put back.
    fn restore(self) -> Vec<c_int> {
        let mut changed = Vec::new();
        for (sig, old) in self.0 {
            // SAFETY: as in `save`, then setting a disposition that this
            // process had installed before (a valid handler or SIG_DFL/IGN).
            unsafe {
                let mut now: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, std::ptr::null(), &mut now) != 0 {
                    continue;
                }
                if now.sa_sigaction != old.sa_sigaction || now.sa_flags != old.sa_flags {
                    libc::sigaction(sig, &old, std::ptr::null_mut());
                    changed.push(sig);
                }
            }
        }
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};
    use std::process::Command;

    /// `(C expression, Rust value)` pairs checked against the installed headers.
    fn rust_layout() -> Vec<(&'static str, usize)> {
        vec![
            ("sizeof(struct fi_tx_attr)", size_of::<fi_tx_attr>()),
            ("sizeof(struct fi_rx_attr)", size_of::<fi_rx_attr>()),
            ("sizeof(struct fi_ep_attr)", size_of::<fi_ep_attr>()),
            ("sizeof(struct fi_domain_attr)", size_of::<fi_domain_attr>()),
            ("sizeof(struct fi_fabric_attr)", size_of::<fi_fabric_attr>()),
            ("sizeof(struct fi_info)", size_of::<fi_info>()),
            ("sizeof(struct fid)", size_of::<fid>()),
            ("sizeof(struct fi_ops)", size_of::<fi_ops>()),
            ("sizeof(struct fi_ops_fabric)", size_of::<fi_ops_fabric>()),
            ("sizeof(struct fid_fabric)", size_of::<fid_fabric>()),
            ("sizeof(struct fi_ops_domain)", size_of::<fi_ops_domain>()),
            ("sizeof(struct fi_ops_mr)", size_of::<fi_ops_mr>()),
            ("sizeof(struct fid_domain)", size_of::<fid_domain>()),
            ("sizeof(struct fid_mr)", size_of::<fid_mr>()),
            ("sizeof(struct fi_av_attr)", size_of::<fi_av_attr>()),
            ("sizeof(struct fi_ops_av)", size_of::<fi_ops_av>()),
            ("sizeof(struct fid_av)", size_of::<fid_av>()),
            ("sizeof(struct fi_cq_attr)", size_of::<fi_cq_attr>()),
            ("sizeof(struct fi_ops_cq)", size_of::<fi_ops_cq>()),
            ("sizeof(struct fid_cq)", size_of::<fid_cq>()),
            (
                "sizeof(struct fi_cq_err_entry)",
                size_of::<fi_cq_err_entry>(),
            ),
            (
                "sizeof(struct fi_cq_data_entry)",
                size_of::<fi_cq_data_entry>(),
            ),
            (
                "offsetof(struct fi_cq_data_entry, data)",
                offset_of!(fi_cq_data_entry, data),
            ),
            ("sizeof(struct fi_ops_ep)", size_of::<fi_ops_ep>()),
            ("sizeof(struct fi_ops_cm)", size_of::<fi_ops_cm>()),
            ("sizeof(struct fi_ops_msg)", size_of::<fi_ops_msg>()),
            ("sizeof(struct fi_ops_rma)", size_of::<fi_ops_rma>()),
            ("sizeof(struct fi_rma_iov)", size_of::<fi_rma_iov>()),
            ("sizeof(struct fi_msg_rma)", size_of::<fi_msg_rma>()),
            ("sizeof(struct fi_ops_atomic)", size_of::<fi_ops_atomic>()),
            ("sizeof(struct fi_ioc)", size_of::<fi_ioc>()),
            ("sizeof(struct fi_rma_ioc)", size_of::<fi_rma_ioc>()),
            ("sizeof(struct fi_msg_atomic)", size_of::<fi_msg_atomic>()),
            ("sizeof(struct fi_atomic_attr)", size_of::<fi_atomic_attr>()),
            ("sizeof(struct fid_ep)", size_of::<fid_ep>()),
            ("sizeof(struct fi_context2)", size_of::<fi_context2>()),
            (
                "offsetof(struct fi_info, fabric_attr)",
                offset_of!(fi_info, fabric_attr),
            ),
            ("offsetof(struct fi_info, nic)", offset_of!(fi_info, nic)),
            (
                "offsetof(struct fi_tx_attr, inject_size)",
                offset_of!(fi_tx_attr, inject_size),
            ),
            (
                "offsetof(struct fi_ep_attr, max_msg_size)",
                offset_of!(fi_ep_attr, max_msg_size),
            ),
            (
                "offsetof(struct fi_domain_attr, mr_mode)",
                offset_of!(fi_domain_attr, mr_mode),
            ),
            (
                "offsetof(struct fi_domain_attr, tclass)",
                offset_of!(fi_domain_attr, tclass),
            ),
            (
                "offsetof(struct fid_fabric, ops)",
                offset_of!(fid_fabric, ops),
            ),
            (
                "offsetof(struct fid_domain, mr)",
                offset_of!(fid_domain, mr),
            ),
            ("offsetof(struct fid_mr, key)", offset_of!(fid_mr, key)),
            ("offsetof(struct fid_ep, rma)", offset_of!(fid_ep, rma)),
            (
                "offsetof(struct fid_ep, atomic)",
                offset_of!(fid_ep, atomic),
            ),
            (
                "offsetof(struct fi_ops_domain, query_atomic)",
                offset_of!(fi_ops_domain, query_atomic),
            ),
            (
                "offsetof(struct fi_ops_rma, writemsg)",
                offset_of!(fi_ops_rma, writemsg),
            ),
            (
                "offsetof(struct fi_ops_atomic, readwrite)",
                offset_of!(fi_ops_atomic, readwrite),
            ),
            (
                "offsetof(struct fi_ops_atomic, compwrite)",
                offset_of!(fi_ops_atomic, compwrite),
            ),
            (
                "offsetof(struct fi_ops_msg, inject)",
                offset_of!(fi_ops_msg, inject),
            ),
            (
                "offsetof(struct fi_ops_cq, sread)",
                offset_of!(fi_ops_cq, sread),
            ),
            (
                "offsetof(struct fi_ops_cq, strerror)",
                offset_of!(fi_ops_cq, strerror),
            ),
            (
                "offsetof(struct fi_ops_cm, getname)",
                offset_of!(fi_ops_cm, getname),
            ),
            (
                "offsetof(struct fi_cq_err_entry, err)",
                offset_of!(fi_cq_err_entry, err),
            ),
            (
                "offsetof(struct fi_msg_atomic, context)",
                offset_of!(fi_msg_atomic, context),
            ),
            (
                "offsetof(struct fi_msg_rma, context)",
                offset_of!(fi_msg_rma, context),
            ),
            // Enumerators and flags.
            ("FI_EP_RDM", FI_EP_RDM as usize),
            ("FI_THREAD_SAFE", FI_THREAD_SAFE as usize),
            ("FI_PROGRESS_MANUAL", FI_PROGRESS_MANUAL as usize),
            ("FI_PROTO_XNET", FI_PROTO_XNET as usize),
            ("FI_AV_TABLE", FI_AV_TABLE as usize),
            ("FI_CQ_FORMAT_CONTEXT", FI_CQ_FORMAT_CONTEXT as usize),
            ("FI_CQ_FORMAT_DATA", FI_CQ_FORMAT_DATA as usize),
            ("FI_REMOTE_CQ_DATA", FI_REMOTE_CQ_DATA as usize),
            ("FI_WAIT_UNSPEC", FI_WAIT_UNSPEC as usize),
            ("FI_ENABLE", FI_ENABLE as usize),
            ("FI_UINT8", FI_UINT8 as usize),
            ("FI_UINT32", FI_UINT32 as usize),
            ("FI_UINT64", FI_UINT64 as usize),
            ("FI_SUM", FI_SUM as usize),
            ("FI_BOR", FI_BOR as usize),
            ("FI_BAND", FI_BAND as usize),
            ("FI_BXOR", FI_BXOR as usize),
            ("FI_ATOMIC_READ", FI_ATOMIC_READ as usize),
            ("FI_ATOMIC_WRITE", FI_ATOMIC_WRITE as usize),
            ("FI_CSWAP", FI_CSWAP as usize),
            ("FI_EAVAIL", FI_EAVAIL as usize),
            ("FI_MR_ENDPOINT", FI_MR_ENDPOINT as usize),
            ("FI_MR_VIRT_ADDR", FI_MR_VIRT_ADDR as usize),
            ("FI_ORDER_WAW", FI_ORDER_WAW as usize),
            ("FI_DELIVERY_COMPLETE", FI_DELIVERY_COMPLETE as usize),
            ("FI_CONTEXT2", FI_CONTEXT2 as usize),
        ]
    }

    /// Compiles a C program that prints each expression with the installed
    /// headers and compares. Without a C compiler or the headers the test
    /// says why it did not compare (and fails in CI, which installs both).
    #[test]
    fn layouts_match_the_installed_headers() {
        let rust = rust_layout();
        let have_headers = std::path::Path::new("/usr/include/rdma/fabric.h").exists();
        let dir = std::env::temp_dir().join(format!("shmem-fi-layout-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut c = String::from(
            "#include <stdio.h>\n#include <stddef.h>\n#include <rdma/fabric.h>\n#include <rdma/fi_domain.h>\n\
             #include <rdma/fi_endpoint.h>\n#include <rdma/fi_rma.h>\n#include <rdma/fi_atomic.h>\n\
             #include <rdma/fi_cm.h>\n#include <rdma/fi_eq.h>\n#include <rdma/fi_errno.h>\nint main(void) {\n",
        );
        for (expr, _) in &rust {
            c.push_str(&format!("printf(\"%zu\\n\", (size_t)({expr}));\n"));
        }
        c.push_str("return 0; }\n");
        std::fs::write(dir.join("l.c"), c).unwrap();
        let exe = dir.join("l");
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let built = have_headers
            && Command::new(&cc)
                .arg(dir.join("l.c"))
                .arg("-o")
                .arg(&exe)
                .status()
                .is_ok_and(|s| s.success());
        if !built {
            let _ = std::fs::remove_dir_all(&dir);
            eprintln!("layout check not run: no C compiler `{cc}` or no libfabric headers (libfabric-dev)");
            assert!(
                std::env::var_os("CI").is_none(),
                "CI installs libfabric-dev and a C compiler"
            );
            return;
        }
        let out = Command::new(&exe).output().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let text = String::from_utf8(out.stdout).unwrap();
        let c_values: Vec<usize> = text.lines().map(|l| l.parse().unwrap()).collect();
        assert_eq!(c_values.len(), rust.len());
        let bad: Vec<String> = rust
            .iter()
            .zip(&c_values)
            .filter(|((_, r), c)| r != *c)
            .map(|((e, r), c)| format!("{e}: Rust {r}, C {c}"))
            .collect();
        assert!(bad.is_empty(), "layout mismatches: {bad:#?}");
    }

    #[test]
    fn version_packs_major_and_minor() {
        assert_eq!(fi_version(1, 17), 0x1_0011);
    }
}
