//! Global and `static` variables as symmetric objects.
//!
//! Every PE runs the same program, so its writable `PT_LOAD` segments (data
//! and bss) hold the same variables at the same offsets; only the load
//! address differs (ASLR). At init each PE finds its segments with
//! `dl_iterate_phdr` and the PEs allgather them; a static address then
//! translates to a peer's by segment offset.
//!
//! * At `shmem_init`, while the process has one thread, each writable
//!   segment is moved onto a memfd (copied, then mapped shared at the same
//!   address; the RELRO part is made read-only again), and the PEs of a
//!   node map each other's segments (opening `/proc/<pid>/fd/<fd>`, checked
//!   by device and inode). Puts, gets and atomics on a peer's static data
//!   are then plain loads, stores and CPU atomics, as on the heap. A program
//!   that `fork`s after `shmem_init` shares its static data with the child.
//! * Where that is not possible (other threads were running at init, no
//!   `/proc`, a peer on another node), puts and gets go through the SDMA
//!   engine's `process_vm_writev`/`readv` (same user, same node); either
//!   way the target's waits on static data are woken at once.
//! * A peer on another node (no mapping, no `process_vm_*`) is reached
//!   with the RoCE engine's own reads and writes (either provider): every
//!   PE exposes its static data at init ([`StaticData::exposable`],
//!   `Runtime::expose_memory`). Where no engine reaches it (a plugin
//!   engine, or a registration that failed), through its [`AmoService`]:
//!   a put is staged in the requester's own heap and the service gets it
//!   from there into its static data; a get is put by the service into the
//!   requester's staging area (at most [`STAGE_BYTES`] per round trip).
//! * Atomics without a mapping need the owner's CPU: on another node the
//!   RoCE engine's target applies them as CPU atomics where it can
//!   (`Runtime::atomic_at_address`: the `sw` provider, and libfabric's
//!   atomic messages); otherwise through the owner's [`AmoService`]
//!   thread (every PE runs one).
//!   A requester writes its operation into its own slot of the target's
//!   mailbox (in the symmetric heap) with `put_signal`, and waits on a reply
//!   word in its own heap; the service applies the operation with real CPU
//!   atomics, so it is atomic with respect to every other AMO and local
//!   atomic access on that variable.

use std::ffi::{c_int, c_void};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;

use shmem::{Cmp, Error, PeId, Result, Runtime, SignalOp, SymRef, SymSlice};
use shmem_core::transport::{AmoOp, AmoWidth};
use shmem_core::wire;

/// A writable segment of the main program: `[start, start + len)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// Load address on this PE.
    pub start: usize,
    /// Size in bytes (`p_memsz`, bss included).
    pub len: usize,
}

/// The main program's writable segments, as `dl_iterate_phdr` reports them.
pub fn program_segments() -> Vec<Segment> {
    program_layout().0
}

/// The main program's writable segments and its RELRO range (made
/// read-only by the dynamic linker after relocation), if it has one.
fn program_layout() -> (Vec<Segment>, Option<Segment>) {
    unsafe extern "C" fn first_object(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: `data` is the tuple passed below; `info` is valid for the
        // callback's duration, with `dlpi_phnum` program headers.
        unsafe {
            let out = &mut *(data as *mut (Vec<Segment>, Option<Segment>));
            let info = &*info;
            for i in 0..info.dlpi_phnum as usize {
                let ph = &*info.dlpi_phdr.add(i);
                let seg = Segment {
                    start: info.dlpi_addr as usize + ph.p_vaddr as usize,
                    len: ph.p_memsz as usize,
                };
                if ph.p_type == libc::PT_LOAD && ph.p_flags & libc::PF_W != 0 && ph.p_memsz > 0 {
                    out.0.push(seg);
                } else if ph.p_type == libc::PT_GNU_RELRO {
                    out.1 = Some(seg);
                }
            }
        }
        1 // the first object is the main program; stop there
    }
    let mut v: (Vec<Segment>, Option<Segment>) = (Vec::new(), None);
    // SAFETY: the callback only touches `v` through the pointer we pass.
    unsafe {
        libc::dl_iterate_phdr(
            Some(first_object),
            (&mut v as *mut (Vec<Segment>, Option<Segment>)).cast(),
        )
    };
    v
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

/// Page-aligned cover of `s`.
fn pages(s: &Segment, page: usize) -> (usize, usize) {
    let lo = s.start & !(page - 1);
    let hi = (s.start + s.len).div_ceil(page) * page;
    (lo, hi)
}

/// `segments` as (start, length) ranges without the pages that `relro`
/// touches.
fn without_relro(segments: &[Segment], relro: Option<Segment>, page: usize) -> Vec<(usize, usize)> {
    let relro = relro.map(|r| pages(&r, page));
    let mut out = Vec::new();
    for s in segments {
        let (lo, hi) = (s.start, s.start + s.len);
        match relro {
            Some((rlo, rhi)) if rlo < hi && rhi > lo => {
                if lo < rlo {
                    out.push((lo, rlo - lo));
                }
                if rhi < hi {
                    out.push((rhi, hi - rhi));
                }
            }
            _ => out.push((lo, s.len)),
        }
    }
    out
}

/// This process's static segments, each moved onto its own memfd.
struct SharedSegments {
    /// Per segment: the memfd and its device and inode (peers check them).
    fds: Vec<(OwnedFd, u64, u64)>,
}

/// Moves this process's writable segments onto shared memory, once per
/// process; `Err` says why they stay private (the C ABI then falls back to
/// `process_vm_writev`/`readv` and the AMO service).
fn shared_segments() -> &'static std::result::Result<SharedSegments, String> {
    static SHARED: OnceLock<std::result::Result<SharedSegments, String>> = OnceLock::new();
    SHARED.get_or_init(share_program_data)
}

/// Called by `shmem_init` before the runtime starts its threads.
pub(crate) fn prepare() {
    let _ = shared_segments();
}

fn threads_in_process() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(usize::MAX, |d| d.count())
}

fn share_program_data() -> std::result::Result<SharedSegments, String> {
    // Another thread could write a variable between the copy and the remap
    // below, and that write would be lost: only a single-threaded process
    // is moved.
    let threads = threads_in_process();
    if threads != 1 {
        return Err(format!(
            "the process had {} threads at shmem_init",
            if threads == usize::MAX {
                "an unknown number of".to_string()
            } else {
                threads.to_string()
            }
        ));
    }
    let (segs, relro) = program_layout();
    let page = page_size();
    let mut fds = Vec::with_capacity(segs.len());
    let mut last_hi = 0;
    for s in &segs {
        let (lo, hi) = pages(s, page);
        if lo < last_hi {
            return Err("two writable segments share a page".into());
        }
        last_hi = hi;
        // SAFETY: [lo, hi) covers a writable PT_LOAD segment of the main
        // program, mapped in full, and no other thread runs (checked).
        fds.push(unsafe { move_onto_memfd(lo, hi - lo)? });
    }
    if let Some(r) = relro {
        // The dynamic linker protects [floor(start), floor(end)).
        let lo = r.start & !(page - 1);
        let hi = (r.start + r.len) & !(page - 1);
        if hi > lo {
            // SAFETY: re-protects pages of our own RELRO range read-only,
            // as they were before the remap.
            unsafe { libc::mprotect(lo as *mut c_void, hi - lo, libc::PROT_READ) };
        }
    }
    Ok(SharedSegments { fds })
}

/// Replaces the private mapping `[lo, lo + len)` with a shared memfd
/// mapping of the same contents; returns the memfd, its device and inode.
///
/// # Safety
/// `[lo, lo + len)` must be page-aligned, mapped readable and writable (or
/// read-only RELRO), and not written by another thread meanwhile.
unsafe fn move_onto_memfd(
    lo: usize,
    len: usize,
) -> std::result::Result<(OwnedFd, u64, u64), String> {
    let os = |what: &str| format!("{what}: {}", std::io::Error::last_os_error());
    // SAFETY: a constant C string and flags.
    let raw = unsafe { libc::memfd_create(c"shmem-static-data".as_ptr(), libc::MFD_CLOEXEC) };
    if raw < 0 {
        return Err(os("memfd_create"));
    }
    // SAFETY: a fresh descriptor that we own.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: plain calls on our descriptor.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
        return Err(os("ftruncate"));
    }
    // SAFETY: a new shared mapping of our memfd, at an address of the
    // kernel's choice.
    let tmp = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if tmp == libc::MAP_FAILED {
        return Err(os("mmap"));
    }
    // Copy page by page, skipping pages of zeros (most of a large .bss):
    // the memfd stays sparse.
    let page = page_size();
    for p in (0..len).step_by(page) {
        // SAFETY: [lo, lo + len) is mapped readable (caller) and `tmp` is a
        // fresh mapping of `len` bytes.
        unsafe {
            let src = std::slice::from_raw_parts((lo + p) as *const u8, page);
            if src.iter().any(|&b| b != 0) {
                std::ptr::copy_nonoverlapping(src.as_ptr(), (tmp as *mut u8).add(p), page);
            }
        }
    }
    // SAFETY: `tmp` is our mapping of `len` bytes.
    unsafe { libc::munmap(tmp, len) };
    // SAFETY: replaces the caller's range with the same bytes, now shared.
    let at = unsafe {
        libc::mmap(
            lo as *mut c_void,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_FIXED,
            fd.as_raw_fd(),
            0,
        )
    };
    if at == libc::MAP_FAILED {
        return Err(os("mmap over the static data"));
    }
    let (dev, ino) = identity(&fd).map_err(|e| format!("fstat: {e}"))?;
    Ok((fd, dev, ino))
}

fn identity(fd: &OwnedFd) -> std::io::Result<(u64, u64)> {
    // SAFETY: an all-zero stat is a valid out-buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid descriptor and out-buffer.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((st.st_dev, st.st_ino))
}

/// A peer's static segment mapped into this process.
#[derive(Debug)]
struct PeerMap {
    /// Address here of the peer's segment start.
    start: usize,
}

/// Maps segment `fd` of process `pid` (device and inode as it reported
/// them) into this process: `map_len` bytes from its first page.
fn map_peer(pid: u64, fd: u64, dev: u64, ino: u64, map_len: usize) -> std::io::Result<usize> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("/proc/{pid}/fd/{fd}"))?;
    let fd = OwnedFd::from(file);
    if identity(&fd)? != (dev, ino) {
        return Err(std::io::Error::other(
            "not the peer's static data (another process has that pid)",
        ));
    }
    // SAFETY: a new shared mapping of a memfd that we hold open.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            map_len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    Ok(p as usize)
}

/// This PE's static segments and every PE's load addresses of them.
#[derive(Debug)]
pub(crate) struct StaticData {
    mine: Vec<Segment>,
    /// `starts[pe][seg]`.
    starts: Vec<Vec<usize>>,
    /// `maps[pe][seg]`: the peer's segment mapped here (node-local peers
    /// whose segments are shared; this PE's own are not listed).
    maps: Vec<Vec<Option<PeerMap>>>,
    /// Why static data cannot be used, if it cannot.
    unusable: Option<String>,
}

/// What each PE tells the others at init: its pid, and per segment its
/// start, length, memfd, device and inode.
type SegmentTable = (u64, Vec<(u64, u64, u64, u64, u64)>);

impl StaticData {
    /// Allgathers the segment tables (collective).
    pub(crate) fn exchange(rt: &Runtime) -> Result<StaticData> {
        let mine = program_segments();
        let shared = match shared_segments() {
            Ok(s) if s.fds.len() == mine.len() => Some(s),
            Ok(_) => None,
            Err(why) => {
                shmem_core::shmem_log!(
                    Info,
                    "static data stays private ({why}): puts, gets and atomics on it use \
                     process_vm_writev/readv and the AMO service"
                );
                None
            }
        };
        // The pid, then per segment: start, len, and the memfd (fd, device,
        // inode; `u64::MAX` for each when not shared).
        let table: SegmentTable = (
            u64::from(std::process::id()),
            mine.iter()
                .enumerate()
                .map(|(i, s)| {
                    let (fd, dev, ino) = shared.map_or((u64::MAX, u64::MAX, u64::MAX), |sh| {
                        let (fd, dev, ino) = &sh.fds[i];
                        (fd.as_raw_fd() as u64, *dev, *ino)
                    });
                    (s.start as u64, s.len as u64, fd, dev, ino)
                })
                .collect(),
        );
        let all = rt.bootstrap().allgather(&wire::encode(&table))?;
        let page = page_size();
        let mut starts = Vec::with_capacity(all.len());
        let mut maps = Vec::with_capacity(all.len());
        let mut unusable = None;
        for (pe, m) in all.iter().enumerate() {
            let (pid, segs): SegmentTable = wire::decode("static data segments", m)?;
            let same_shape = segs.len() == mine.len()
                && segs.iter().zip(&mine).all(|(s, m)| s.1 as usize == m.len);
            let mut row = Vec::with_capacity(segs.len());
            for &(start, len, fd, dev, ino) in &segs {
                let local = pe != rt.my_pe() && rt.topology().same_node(pe);
                let map = match (same_shape && local, fd) {
                    (true, fd) if fd != u64::MAX => {
                        let seg = Segment {
                            start: start as usize,
                            len: len as usize,
                        };
                        let (lo, hi) = pages(&seg, page);
                        match map_peer(pid, fd, dev, ino, hi - lo) {
                            Ok(at) => Some(PeerMap {
                                start: at + (seg.start - lo),
                            }),
                            Err(e) => {
                                shmem_core::shmem_log!(
                                    Info,
                                    "PE {pe}'s static data is not mapped here ({e}): \
                                     process_vm_writev/readv instead"
                                );
                                None
                            }
                        }
                    }
                    _ => None,
                };
                row.push(map);
            }
            maps.push(row);
            let segs: Vec<(usize, usize)> =
                segs.iter().map(|s| (s.0 as usize, s.1 as usize)).collect();
            if !same_shape && unusable.is_none() {
                unusable = Some(format!(
                    "PE {pe}'s program has different static data ({} segments) from PE {}'s ({}); \
                     run the same executable on every PE",
                    segs.len(),
                    rt.my_pe(),
                    mine.len()
                ));
            }
            starts.push(segs.iter().map(|s| s.0).collect());
        }
        Ok(StaticData {
            mine,
            starts,
            maps,
            unusable,
        })
    }

    /// Where offset `off` of segment `seg` of `pe` is mapped in this
    /// process, if `pe`'s static data is mapped here.
    #[inline]
    pub(crate) fn peer_ptr(&self, pe: PeId, seg: usize, off: usize) -> Option<*mut u8> {
        let m = self.maps.get(pe)?.get(seg)?.as_ref()?;
        Some((m.start + off) as *mut u8)
    }

    /// Segment index and offset of `[addr, addr + len)`, if it lies inside
    /// one of this PE's static segments.
    pub(crate) fn find(&self, addr: usize, len: usize) -> Option<(usize, usize)> {
        if self.unusable.is_some() {
            return None;
        }
        self.mine.iter().enumerate().find_map(|(i, s)| {
            let end = addr.checked_add(len)?;
            (addr >= s.start && end <= s.start + s.len).then(|| (i, addr - s.start))
        })
    }

    /// This PE's static data as (start, length) ranges that the other PEs
    /// may write: the segments without their RELRO part (read-only after
    /// relocation, which a NIC's registration for remote writes refuses);
    /// none when static data is not symmetric.
    pub(crate) fn exposable(&self) -> Vec<(usize, usize)> {
        if self.unusable.is_some() {
            return Vec::new();
        }
        without_relro(&self.mine, program_layout().1, page_size())
    }

    /// Bytes from `addr` to the end of its static segment, if it is in one.
    pub(crate) fn room_after(&self, addr: usize) -> Option<usize> {
        self.find(addr, 0).map(|(i, off)| self.mine[i].len - off)
    }

    /// Address on `pe` of offset `off` of segment `seg`.
    pub(crate) fn peer_addr(&self, pe: PeId, seg: usize, off: usize) -> usize {
        self.starts[pe][seg] + off
    }

    /// Address on this PE.
    pub(crate) fn local_addr(&self, seg: usize, off: usize) -> usize {
        self.mine[seg].start + off
    }

    /// A note for error messages.
    pub(crate) fn describe(&self) -> String {
        match &self.unusable {
            Some(why) => format!(" (static data is not symmetric: {why})"),
            None => {
                let segs: Vec<String> = self
                    .mine
                    .iter()
                    .map(|s| format!("[{:#x}, {:#x})", s.start, s.start + s.len))
                    .collect();
                format!(" {}", segs.join(" "))
            }
        }
    }
}

/// Wakes `pe`'s waiters after its memory changed behind the engines' back.
pub(crate) fn ring(rt: &Runtime, pe: PeId) {
    let _ = rt.wake_pe(pe);
}

// ----- atomics -------------------------------------------------------------

fn encode(op: AmoOp) -> [u64; 3] {
    match op {
        AmoOp::Fetch => [1, 0, 0],
        AmoOp::Set(v) => [2, v, 0],
        AmoOp::Swap(v) => [3, v, 0],
        AmoOp::CompareSwap { cond, value } => [4, cond, value],
        AmoOp::Add(v) => [5, v, 0],
        AmoOp::And(v) => [6, v, 0],
        AmoOp::Or(v) => [7, v, 0],
        AmoOp::Xor(v) => [8, v, 0],
    }
}

fn decode(w: [u64; 3]) -> Option<AmoOp> {
    Some(match w[0] {
        1 => AmoOp::Fetch,
        2 => AmoOp::Set(w[1]),
        3 => AmoOp::Swap(w[1]),
        4 => AmoOp::CompareSwap {
            cond: w[1],
            value: w[2],
        },
        5 => AmoOp::Add(w[1]),
        6 => AmoOp::And(w[1]),
        7 => AmoOp::Or(w[1]),
        8 => AmoOp::Xor(w[1]),
        _ => return None,
    })
}

macro_rules! apply_at {
    ($a:expr, $t:ty, $op:expr) => {{
        let a = $a;
        let o = Ordering::SeqCst;
        let old = match $op {
            AmoOp::Fetch => a.load(o),
            AmoOp::Set(v) => a.swap(v as $t, o),
            AmoOp::Swap(v) => a.swap(v as $t, o),
            AmoOp::CompareSwap { cond, value } => {
                match a.compare_exchange(cond as $t, value as $t, o, o) {
                    Ok(v) | Err(v) => v,
                }
            }
            AmoOp::Add(v) => a.fetch_add(v as $t, o),
            AmoOp::And(v) => a.fetch_and(v as $t, o),
            AmoOp::Or(v) => a.fetch_or(v as $t, o),
            AmoOp::Xor(v) => a.fetch_xor(v as $t, o),
        };
        old as u64
    }};
}

/// Applies `op` to this process's memory at `addr` with CPU atomics.
///
/// # Safety
/// `addr` must be valid, writable and aligned for `width`.
pub(crate) unsafe fn apply_local(addr: usize, width: AmoWidth, op: AmoOp) -> u64 {
    match width {
        // SAFETY: the caller vouches for a valid, aligned location.
        AmoWidth::W32 => apply_at!(unsafe { AtomicU32::from_ptr(addr as *mut u32) }, u32, op),
        // SAFETY: as above.
        AmoWidth::W64 => apply_at!(unsafe { AtomicU64::from_ptr(addr as *mut u64) }, u64, op),
    }
}

/// Words per mailbox slot: seq, op, a, b, width, addr (one cache line).
const SLOT_WORDS: usize = 8;
const SLOT_BYTES: usize = SLOT_WORDS * 8;
/// Bytes of each PE's staging area for puts and gets of static data on a
/// PE it cannot map or reach through the kernel (another node).
pub(crate) const STAGE_BYTES: usize = 256 * 1024;
/// Mailbox op codes of those requests (atomics use 1-8): `a` is the
/// length, `b` the requester's staging offset.
const OP_PUT: u64 = 100;
const OP_GET: u64 = 101;

/// Serves atomics on this PE's static data for the other PEs.
pub(crate) struct AmoService {
    /// Heap offset of the mailbox: one slot per requesting PE.
    mailbox: usize,
    /// Heap offset of this PE's reply words: seq, value.
    reply: usize,
    /// Heap offset of this PE's staging area ([`STAGE_BYTES`]).
    stage: usize,
    /// Serialises this PE's own requests (one reply word).
    requests: Mutex<u64>,
    stop: Arc<AtomicBool>,
    worker: Mutex<Option<JoinHandle<()>>>,
}

impl AmoService {
    /// Allocates the mailboxes (collective) and starts the service thread.
    pub(crate) fn start(rt: &Arc<Runtime>, statics: &StaticData) -> Result<AmoService> {
        let n = rt.n_pes();
        let mailbox = rt.calloc_bytes(n * SLOT_BYTES, 64)?;
        let reply = rt.calloc_bytes(SLOT_BYTES, 64)?;
        let stage = rt.calloc_bytes(STAGE_BYTES, 64)?;
        let stop = Arc::new(AtomicBool::new(false));
        let segments: Vec<Segment> = statics.mine.clone();
        let (rt2, stop2) = (rt.clone(), stop.clone());
        let worker = std::thread::Builder::new()
            .name("shmem-amo".into())
            .spawn(move || serve(&rt2, mailbox, reply, &segments, &stop2))
            .map_err(|e| Error::os("spawning the AMO service thread", e))?;
        Ok(AmoService {
            mailbox,
            reply,
            stage,
            requests: Mutex::new(0),
            stop,
            worker: Mutex::new(Some(worker)),
        })
    }

    /// Performs `op` on `pe`'s static data at `addr` (an address on `pe`).
    pub(crate) fn request(
        &self,
        rt: &Runtime,
        pe: PeId,
        addr: usize,
        width: AmoWidth,
        op: AmoOp,
    ) -> Result<u64> {
        let mut seq = self.requests.lock().unwrap_or_else(|p| p.into_inner());
        let [code, a, b] = encode(op);
        let body = [code, a, b, width.bytes() as u64, addr as u64];
        let (value, refused) = self.call(rt, pe, &mut seq, body)?;
        if refused {
            return Err(Error::invalid(
                "address",
                format!(
                    "PE {pe} refused an atomic on its static data at {addr:#x} \
                     (outside its static segments or misaligned)"
                ),
            ));
        }
        Ok(value)
    }

    /// Sends one request (`body`: op, a, b, width, addr) to `pe`'s service
    /// and waits for its reply; returns the reply's value and whether the
    /// service refused. `seq` is this PE's request counter (held locked).
    fn call(&self, rt: &Runtime, pe: PeId, seq: &mut u64, body: [u64; 5]) -> Result<(u64, bool)> {
        *seq += 1;
        let inst = rt.instance();
        let slot = self.mailbox + rt.my_pe() * SLOT_BYTES;
        rt.put_signal(
            SymSlice::<u64>::from_raw_parts(slot + 8, body.len(), inst),
            &body,
            SymRef::from_raw_parts(slot, inst),
            *seq,
            SignalOp::Set,
            pe,
        )?;
        let reply = SymRef::<u64>::from_raw_parts(self.reply, inst);
        rt.signal_wait_until(reply, Cmp::Ge, *seq)?;
        let value = rt.read_local(SymSlice::<u64>::from_raw_parts(self.reply + 8, 2, inst))?;
        Ok((value[0], value[1] != 0))
    }

    /// Copies `data` into `pe`'s static data at `addr` (an address on
    /// `pe`) through its service, [`STAGE_BYTES`] per round trip.
    pub(crate) fn put(&self, rt: &Runtime, pe: PeId, addr: usize, data: &[u8]) -> Result<()> {
        let mut seq = self.requests.lock().unwrap_or_else(|p| p.into_inner());
        let inst = rt.instance();
        for (k, chunk) in data.chunks(STAGE_BYTES).enumerate() {
            rt.write_local(
                SymSlice::<u8>::from_raw_parts(self.stage, chunk.len(), inst),
                chunk,
            )?;
            let at = addr + k * STAGE_BYTES;
            let body = [OP_PUT, chunk.len() as u64, self.stage as u64, 0, at as u64];
            if self.call(rt, pe, &mut seq, body)?.1 {
                return Err(refused(pe, "put", at, chunk.len()));
            }
        }
        Ok(())
    }

    /// Copies `pe`'s static data at `addr` into `out` through its service.
    pub(crate) fn get(&self, rt: &Runtime, pe: PeId, addr: usize, out: &mut [u8]) -> Result<()> {
        let mut seq = self.requests.lock().unwrap_or_else(|p| p.into_inner());
        for (k, chunk) in out.chunks_mut(STAGE_BYTES).enumerate() {
            let at = addr + k * STAGE_BYTES;
            let body = [OP_GET, chunk.len() as u64, self.stage as u64, 0, at as u64];
            if self.call(rt, pe, &mut seq, body)?.1 {
                return Err(refused(pe, "get", at, chunk.len()));
            }
            // The service put the bytes into our own staging area.
            rt.get_bytes(rt.my_pe(), self.stage, chunk)?;
        }
        Ok(())
    }

    /// Stops the service thread (after the finalize barrier: no request is
    /// in flight).
    pub(crate) fn stop(&self, rt: &Runtime) {
        self.stop.store(true, Ordering::Release);
        // The service sleeps watching its mailbox only.
        let _ = rt.wake_on(self.mailbox, rt.n_pes() * SLOT_BYTES);
        if let Some(w) = self.worker.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = w.join();
        }
    }
}

fn refused(pe: PeId, what: &str, addr: usize, len: usize) -> Error {
    Error::invalid(
        "address",
        format!(
            "PE {pe} refused a {what} of {len} bytes on its static data at {addr:#x} \
             (outside its static segments)"
        ),
    )
}

/// Whether `[addr, addr + len)` lies inside one of our writable static
/// `segments` (a requester's range is checked before it is touched).
fn in_segments(segments: &[Segment], addr: usize, len: usize) -> bool {
    addr.checked_add(len).is_some_and(|end| {
        segments
            .iter()
            .any(|s| addr >= s.start && end <= s.start + s.len)
    })
}

/// Serves an atomic (`w`: op, a, b, width, addr); returns the old value
/// and 1 when it refused (an unknown op or width, a misaligned word or one
/// outside our static segments), else 0.
fn serve_amo(w: &[u64], segments: &[Segment]) -> (u64, u64) {
    let width = match w[3] {
        4 => Some(AmoWidth::W32),
        8 => Some(AmoWidth::W64),
        _ => None,
    };
    let addr = w[4] as usize;
    let inside = width.is_some_and(|wd| {
        addr.is_multiple_of(wd.bytes()) && in_segments(segments, addr, wd.bytes())
    });
    match (width, decode([w[0], w[1], w[2]])) {
        (Some(wd), Some(op)) if inside => {
            // SAFETY: checked to lie inside our writable static segments and
            // to be aligned for the width.
            (unsafe { apply_local(addr, wd, op) }, 0)
        }
        _ => (0, 1),
    }
}

/// Serves a put (`OP_PUT`: gets the requester's staged bytes into our
/// static data) or a get (`OP_GET`: puts our static bytes into the
/// requester's staging area, fenced before the reply); returns whether it
/// refused (a range outside our static segments, or too long).
fn serve_rma(rt: &Runtime, from: PeId, w: &[u64], segments: &[Segment]) -> bool {
    let (len, stage, addr) = (w[1] as usize, w[2] as usize, w[4] as usize);
    if len > STAGE_BYTES || !in_segments(segments, addr, len) {
        return true;
    }
    let done = if w[0] == OP_PUT {
        // SAFETY: `addr..addr+len` lies inside our writable static segments
        // (checked above); the program's other threads may race on it as
        // with any remote put.
        let dst = unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, len) };
        rt.get_bytes(from, stage, dst)
    } else {
        // SAFETY: as above, read only.
        let src = unsafe { std::slice::from_raw_parts(addr as *const u8, len) };
        rt.put_bytes(from, stage, src).and_then(|()| rt.fence())
    };
    done.is_err()
}

fn serve(rt: &Runtime, mailbox: usize, reply: usize, segments: &[Segment], stop: &AtomicBool) {
    // Its endless wait for requests is not what the PE is doing.
    shmem_core::Activity::mute_this_thread();
    let n = rt.n_pes();
    let inst = rt.instance();
    let base = rt.heap_base().as_ptr() as usize;
    let seq_of = |i: usize| {
        // SAFETY: the slot's seq word lies in our heap, 8-byte aligned.
        unsafe { AtomicU64::from_ptr((base + mailbox + i * SLOT_BYTES) as *mut u64) }
            .load(Ordering::Acquire)
    };
    let mut served = vec![0u64; n];
    loop {
        // Watch only the mailbox: puts elsewhere in this PE's heap must not
        // wake this thread (stop() rings the mailbox's watchers).
        let r = rt.wait_on(mailbox, n * SLOT_BYTES, || {
            stop.load(Ordering::Acquire) || (0..n).any(|i| seq_of(i) > served[i])
        });
        match r {
            Ok(()) => {}
            Err(Error::Timeout { .. }) => continue,
            Err(_) => return, // the job is ending (a PE died or aborted)
        }
        if stop.load(Ordering::Acquire) {
            return;
        }
        for (i, done) in served.iter_mut().enumerate() {
            let seq = seq_of(i);
            if seq <= *done {
                continue;
            }
            *done = seq;
            let w: Vec<u64> = (1..6)
                .map(|k| {
                    // SAFETY: words of slot i in our heap; put_signal made
                    // them visible before the seq word we just read.
                    unsafe { *((base + mailbox + i * SLOT_BYTES + k * 8) as *const u64) }
                })
                .collect();
            let (value, refused) = if w[0] == OP_PUT || w[0] == OP_GET {
                (0, u64::from(serve_rma(rt, i, &w, segments)))
            } else {
                serve_amo(&w, segments)
            };
            ring(rt, rt.my_pe());
            let _ = rt.put_signal(
                SymSlice::<u64>::from_raw_parts(reply + 8, 2, inst),
                &[value, refused],
                SymRef::from_raw_parts(reply, inst),
                seq,
                SignalOp::Set,
                i,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposed_static_data_leaves_out_the_relro_pages() {
        let seg = |start, len| Segment { start, len };
        // RELRO at the start of the data segment, ending inside a page.
        let segs = [seg(0x10_e00, 0x3200), seg(0x20_000, 0x800)];
        assert_eq!(
            without_relro(&segs, Some(seg(0x10_e00, 0x1100)), 0x1000),
            vec![(0x12_000, 0x2000), (0x20_000, 0x800)]
        );
        // RELRO in the middle of a segment, and none at all.
        assert_eq!(
            without_relro(&[seg(0x1000, 0x5000)], Some(seg(0x3000, 0x10)), 0x1000),
            vec![(0x1000, 0x2000), (0x4000, 0x2000)]
        );
        assert_eq!(
            without_relro(&segs, None, 0x1000),
            vec![(0x10_e00, 0x3200), (0x20_000, 0x800)]
        );
        // A segment wholly inside the RELRO pages is left out.
        assert_eq!(
            without_relro(&[seg(0x5000, 0x100)], Some(seg(0x4f00, 0x1000)), 0x1000),
            vec![]
        );
    }

    #[test]
    fn the_service_touches_only_ranges_inside_its_static_segments() {
        let segs = [
            Segment {
                start: 0x1000,
                len: 0x100,
            },
            Segment {
                start: 0x4000,
                len: 0x2000,
            },
        ];
        assert!(in_segments(&segs, 0x1000, 0x100));
        assert!(in_segments(&segs, 0x5ff8, 8));
        assert!(
            !in_segments(&segs, 0x10f8, 16),
            "runs past the first segment's end"
        );
        assert!(!in_segments(&segs, 0x0ff8, 16), "starts before it");
        assert!(!in_segments(&segs, 0x2000, 8), "between segments");
        assert!(!in_segments(&segs, usize::MAX - 4, 8), "wraps around");
        // Atomics: misaligned or of an unknown width are refused too.
        let mut word = 0u64;
        let at = &mut word as *mut u64 as usize;
        let mine = [Segment { start: at, len: 8 }];
        let [code, a, b] = encode(AmoOp::Add(5));
        assert_eq!(serve_amo(&[code, a, b, 8, at as u64], &mine), (0, 0));
        assert_eq!(word, 5);
        assert_eq!(serve_amo(&[code, a, b, 8, at as u64 + 8], &mine).1, 1);
        assert_eq!(serve_amo(&[code, a, b, 3, at as u64], &mine).1, 1);
        assert_eq!(serve_amo(&[99, a, b, 8, at as u64], &mine).1, 1);
        assert_eq!(word, 5, "a refused request leaves the word alone");
    }
}
