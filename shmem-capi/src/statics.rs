//! Global and `static` variables as symmetric objects.
//!
//! Every PE runs the same program, so its writable `PT_LOAD` segments (data
//! and bss) hold the same variables at the same offsets; only the load
//! address differs (ASLR). At init each PE finds its segments with
//! `dl_iterate_phdr` and the PEs allgather them; a static address then
//! translates to a peer's by segment offset.
//!
//! * Puts and gets on static data go through the SDMA engine's
//!   `process_vm_writev`/`readv` (same user, same node), after which the
//!   target's futex doorbell is rung so its waits notice at once.
//! * Atomics need the owner's CPU: each PE runs an [`AmoService`] thread.
//!   A requester writes its operation into its own slot of the target's
//!   mailbox (in the symmetric heap) with `put_signal`, and waits on a reply
//!   word in its own heap; the service applies the operation with real CPU
//!   atomics, so it is atomic with respect to every other AMO and local
//!   atomic access on that variable.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
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
    unsafe extern "C" fn first_object(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: `data` is the Vec passed below; `info` is valid for the
        // callback's duration, with `dlpi_phnum` program headers.
        unsafe {
            let out = &mut *(data as *mut Vec<Segment>);
            let info = &*info;
            for i in 0..info.dlpi_phnum as usize {
                let ph = &*info.dlpi_phdr.add(i);
                if ph.p_type == libc::PT_LOAD && ph.p_flags & libc::PF_W != 0 && ph.p_memsz > 0 {
                    out.push(Segment {
                        start: info.dlpi_addr as usize + ph.p_vaddr as usize,
                        len: ph.p_memsz as usize,
                    });
                }
            }
        }
        1 // the first object is the main program; stop there
    }
    let mut v: Vec<Segment> = Vec::new();
    // SAFETY: the callback only touches `v` through the pointer we pass.
    unsafe { libc::dl_iterate_phdr(Some(first_object), (&mut v as *mut Vec<Segment>).cast()) };
    v
}

/// This PE's static segments and every PE's load addresses of them.
#[derive(Debug)]
pub(crate) struct StaticData {
    mine: Vec<Segment>,
    /// `starts[pe][seg]`.
    starts: Vec<Vec<usize>>,
    /// Why static data cannot be used, if it cannot.
    unusable: Option<String>,
}

impl StaticData {
    /// Allgathers the segment tables (collective).
    pub(crate) fn exchange(rt: &Runtime) -> Result<StaticData> {
        let mine = program_segments();
        let msg: Vec<(u64, u64)> = mine
            .iter()
            .map(|s| (s.start as u64, s.len as u64))
            .collect();
        let all = rt.bootstrap().allgather(&wire::encode(&msg))?;
        let mut starts = Vec::with_capacity(all.len());
        let mut unusable = None;
        for (pe, m) in all.iter().enumerate() {
            let segs: Vec<(u64, u64)> = wire::decode("static data segments", m)?;
            let segs: Vec<(usize, usize)> = segs
                .into_iter()
                .map(|(a, b)| (a as usize, b as usize))
                .collect();
            let same_shape =
                segs.len() == mine.len() && segs.iter().zip(&mine).all(|(s, m)| s.1 == m.len);
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
            unusable,
        })
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

/// Serves atomics on this PE's static data for the other PEs.
pub(crate) struct AmoService {
    /// Heap offset of the mailbox: one slot per requesting PE.
    mailbox: usize,
    /// Heap offset of this PE's reply words: seq, value.
    reply: usize,
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
        *seq += 1;
        let [code, a, b] = encode(op);
        let width_bytes = width.bytes() as u64;
        let me = rt.my_pe();
        let inst = rt.instance();
        let slot = self.mailbox + me * SLOT_BYTES;
        let body = [code, a, b, width_bytes, addr as u64];
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
        if value[1] != 0 {
            return Err(Error::invalid(
                "address",
                format!(
                    "PE {pe} refused an atomic on its static data at {addr:#x} \
                     (outside its static segments or misaligned)"
                ),
            ));
        }
        Ok(value[0])
    }

    /// Stops the service thread (after the finalize barrier: no request is
    /// in flight).
    pub(crate) fn stop(&self, rt: &Runtime) {
        self.stop.store(true, Ordering::Release);
        ring(rt, rt.my_pe());
        if let Some(w) = self.worker.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = w.join();
        }
    }
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
        // wake this thread (stop() rings for every watcher).
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
            let width = match w[3] {
                4 => Some(AmoWidth::W32),
                8 => Some(AmoWidth::W64),
                _ => None,
            };
            let addr = w[4] as usize;
            let inside = width.is_some_and(|wd| {
                addr.is_multiple_of(wd.bytes())
                    && segments
                        .iter()
                        .any(|s| addr >= s.start && addr + wd.bytes() <= s.start + s.len)
            });
            let (value, refused) = match (width, decode([w[0], w[1], w[2]])) {
                (Some(wd), Some(op)) if inside => {
                    // SAFETY: checked to lie inside our writable static
                    // segments and to be aligned for the width.
                    (unsafe { apply_local(addr, wd, op) }, 0)
                }
                _ => (0, 1),
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
