//! SDMA engine of the `shmem` library: an asynchronous copy engine.
//!
//! Copies are cut into work descriptors and sent through a `crossbeam`
//! queue to engine threads (`SHMEM_SDMA_ENGINES`, default half the cores)
//! that move the bytes between this node's mapped heaps, so the calling
//! thread is free meanwhile. Large copies are cut into chunks of at most
//! 1 MiB, shared among the engines. Every descriptor is counted when issued
//! and when completed, and `quiet` waits for the two counts to meet, so it
//! is exact. A thread that waits for the engine (`quiet`, `fence`, a
//! blocking copy) first takes the chunks no engine has started and copies
//! them itself: where the engines have no core of their own (as many PEs as
//! cores) a wait then costs what copying inline costs, not an engine
//! thread's turn on a busy core, and where they do, the caller and the
//! engines copy side by side. Atomics and signals are CPU
//! atomics on the shared mapping (a copy engine has no atomic unit); a
//! non-blocking put-with-signal sets the signal from the engine thread that
//! finishes the data's last chunk, so the signal is seen after the data.
//!
//! The engine also reaches a same-node peer's memory outside the symmetric
//! heap (its static data) with `process_vm_writev`/`process_vm_readv`.
//!
//! It registers as `SDMA` (priority 50): with HCCS linked too, ordinary
//! operations go to HCCS and stream work plus large non-blocking copies come
//! here; `SHMEM_TEST_ENGINE=SDMA` sends everything here.
//!
//! ```
//! shmem_transport_sdma::link();
//! assert!(shmem_core::transport::registered().iter().any(|r| r.name == "SDMA"));
//! ```

#![warn(clippy::missing_errors_doc)]

use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use shmem_core::config::ByteSize;
use shmem_core::wait::Span;
use shmem_core::{
    AmoOp, AmoWidth, Capabilities, Completion, Error, PeId, PeerHealth, Result, SignalOp,
    Transport, TransportInit, TransportRegistration,
};
use shmem_shm::NodeHeaps;

/// Engine name.
pub const NAME: &str = "SDMA";

/// Blocking copies up to this size are done by the calling thread (an
/// engine round trip would only add latency).
const INLINE_MAX: usize = 64 * 1024;
/// Smallest piece a copy is split into.
const MIN_CHUNK: usize = 256 * 1024;
/// Largest piece: what a waiting thread may find an engine still copying.
const MAX_CHUNK: usize = 1024 * 1024;

/// Makes sure this crate is linked (its registration is then visible).
pub fn link() {}

shmem_core::inventory::submit! {
    TransportRegistration { name: NAME, priority: 50, create }
}

/// `SHMEM_SDMA_THRESHOLD`'s default, in bytes.
const DEFAULT_BULK_THRESHOLD: usize = 4 << 20;

shmem_core::config_var!(
    "SHMEM_SDMA_THRESHOLD",
    ByteSize,
    "4M",
    "Non-blocking copies of at least this size (and all stream copies) go through the SDMA engine when it reaches the PE"
);

shmem_core::config_var!(
    "SHMEM_SDMA_ENGINES",
    u64,
    "0",
    "Copy-engine threads of the SDMA transport (0: half the cores, at least 1, at most 8)"
);

struct Descriptor {
    /// The PE whose memory is read or written.
    pe: PeId,
    src: *const u8,
    dst: *mut u8,
    len: usize,
    /// Heap base of the PE whose memory is written (to wake its waiters).
    wake: Option<*mut u8>,
    done: Completion,
}

// SAFETY: descriptors carry raw pointers into mapped heaps or into buffers
// the issuer keeps alive until the completion is done (the transport's
// safety contract); the engine thread only copies through them.
unsafe impl Send for Descriptor {}

#[derive(Default)]
struct Counters {
    issued: AtomicU64,
    completed: AtomicU64,
    /// Descriptors queued and not yet completed, by the PE they touch (so
    /// that a quiet that gives up can name the PE).
    outstanding: Vec<AtomicU64>,
    quiet_waiters: AtomicUsize,
    lock: Mutex<()>,
    cv: Condvar,
}

/// What `quiet` watches while it waits for the engines.
#[derive(Default, Clone)]
struct QuietWatch {
    /// Which PEs are known dead (fed by the bootstrap).
    health: Option<Arc<PeerHealth>>,
    /// `SHMEM_WAIT_TIMEOUT`, if set.
    timeout: Option<Duration>,
}

impl Counters {
    fn new(n_pes: usize) -> Counters {
        Counters {
            outstanding: (0..n_pes).map(|_| AtomicU64::new(0)).collect(),
            ..Counters::default()
        }
    }

    /// PEs with descriptors outstanding, with their counts.
    fn busy_pes(&self) -> Vec<(PeId, u64)> {
        self.outstanding
            .iter()
            .enumerate()
            .map(|(pe, c)| (pe, c.load(Ordering::Acquire)))
            .filter(|&(_, c)| c > 0)
            .collect()
    }

    /// Waits until `target` descriptors have completed. Gives up when a PE
    /// with copies outstanding is known dead, or at the watch's timeout.
    fn wait_completed(&self, target: u64, watch: &QuietWatch) -> Result<()> {
        for _ in 0..1000 {
            if self.completed.load(Ordering::Acquire) >= target {
                return Ok(());
            }
            std::hint::spin_loop();
        }
        struct Waiting<'a>(&'a AtomicUsize);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        self.quiet_waiters.fetch_add(1, Ordering::SeqCst);
        let _waiting = Waiting(&self.quiet_waiters);
        let start = Instant::now();
        let mut g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        while self.completed.load(Ordering::Acquire) < target {
            if let Some(h) = watch.health.as_ref().filter(|h| h.word() != 0) {
                for (pe, _) in self.busy_pes() {
                    h.check(Some(pe))?;
                }
            }
            if let Some(t) = watch.timeout.filter(|t| start.elapsed() >= *t) {
                let busy = self
                    .busy_pes()
                    .iter()
                    .map(|(pe, n)| format!("{n} to or from PE {pe}"))
                    .collect::<Vec<_>>()
                    .join(", ");
                return Err(Error::Timeout {
                    what: format!(
                        "SDMA quiet: copies still outstanding ({busy}) (SHMEM_WAIT_TIMEOUT)"
                    ),
                    secs: t.as_secs_f64(),
                });
            }
            g = self
                .cv
                .wait_timeout(g, Duration::from_millis(10))
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
        Ok(())
    }
}

/// The copy engine.
pub struct Sdma {
    my_pe: PeId,
    heaps: Arc<NodeHeaps>,
    pids: Vec<u32>,
    tx: Option<Sender<Descriptor>>,
    /// The engines' queue, for threads that wait and help ([`help`]).
    rx: Receiver<Descriptor>,
    engines: usize,
    counters: Arc<Counters>,
    watch: QuietWatch,
    workers: Vec<JoinHandle<()>>,
    /// Non-blocking copies of at least this many bytes come here
    /// (`SHMEM_SDMA_THRESHOLD`).
    bulk_threshold: usize,
}

impl std::fmt::Debug for Sdma {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sdma")
            .field("engines", &self.engines)
            .field("issued", &self.counters.issued.load(Ordering::Relaxed))
            .field(
                "completed",
                &self.counters.completed.load(Ordering::Relaxed),
            )
            .finish()
    }
}

fn engine_count(configured: u64) -> usize {
    if configured > 0 {
        return configured.min(64) as usize;
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (cores / 2).clamp(1, 8)
}

fn create(init: &TransportInit<'_>) -> Result<Arc<dyn Transport>> {
    let heaps = Arc::new(NodeHeaps::map(init, NAME)?);
    let engines = engine_count(init.config.var::<u64>("SHMEM_SDMA_ENGINES")?);
    let threshold = init.config.var::<ByteSize>("SHMEM_SDMA_THRESHOLD")?.0;
    let health = Arc::new(PeerHealth::new());
    init.bootstrap.watch_peers(health.clone());
    let timeout = (!init.config.wait_timeout.is_zero()).then_some(init.config.wait_timeout);
    let mut sdma = Sdma::start(
        init.bootstrap.rank(),
        heaps,
        init.topology.pid_of.clone(),
        engines,
    )?
    .watching(health, timeout);
    sdma.bulk_threshold = threshold;
    Ok(Arc::new(sdma))
}

/// A copy engine must run beside the PE, not on its core: a launcher that
/// binds each PE to one core (as `shmemrun` does) would otherwise leave the
/// engine threads only the PE's own core, and a copy could never overlap
/// the PE's work. Widens this thread's CPU set to every online CPU; where
/// that is not allowed (a cpuset), the inherited set stays.
fn unbind() {
    // SAFETY: sysconf has no preconditions.
    let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    if online <= 1 {
        return;
    }
    // SAFETY: the set is a zeroed stack value filled with CPU_SET, and
    // sched_setaffinity(0) only changes the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for c in 0..(online as usize).min(libc::CPU_SETSIZE as usize) {
            libc::CPU_SET(c, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// Copies one descriptor and counts it complete (on an engine thread, or
/// on a thread that waits for the engine and helps it).
fn run(d: Descriptor, counters: &Counters) {
    // SAFETY: the issuer guarantees both ranges are valid for `len` bytes
    // until `done` completes; `copy` tolerates overlap.
    unsafe { std::ptr::copy(d.src, d.dst, d.len) };
    if let Some(base) = d.wake {
        // SAFETY: `base` is a heap mapped by the engine's NodeHeaps, which
        // outlives the engine threads and the engine itself; `dst` lies in it.
        unsafe { NodeHeaps::wake(base, d.dst as usize - base as usize, d.len) };
    }
    d.done.finish_part(Ok(()));
    if let Some(c) = counters.outstanding.get(d.pe) {
        c.fetch_sub(1, Ordering::AcqRel);
    }
    counters.completed.fetch_add(1, Ordering::AcqRel);
    if counters.quiet_waiters.load(Ordering::Acquire) > 0 {
        let _g = counters.lock.lock();
        counters.cv.notify_all();
    }
}

/// Copies, on the calling thread, every queued descriptor no engine has
/// taken yet (a thread about to wait for the engine has nothing better to
/// do); returns how many it copied.
fn help(rx: &Receiver<Descriptor>, counters: &Counters) -> usize {
    let mut n = 0;
    while let Ok(d) = rx.try_recv() {
        run(d, counters);
        n += 1;
    }
    n
}

/// Queues a copy of `len` bytes from `src` to `dst` (touching `pe`'s
/// memory) as descriptors of `chunk` bytes; returns its completion.
#[allow(clippy::too_many_arguments)]
fn enqueue(
    tx: &Sender<Descriptor>,
    counters: &Counters,
    chunk: usize,
    pe: PeId,
    src: *const u8,
    dst: *mut u8,
    len: usize,
    wake: Option<*mut u8>,
) -> Result<Completion> {
    let parts = len.div_ceil(chunk).max(1);
    let done = Completion::pending(parts);
    let mut off = 0;
    for _ in 0..parts {
        let n = chunk.min(len - off);
        counters.issued.fetch_add(1, Ordering::AcqRel);
        if let Some(c) = counters.outstanding.get(pe) {
            c.fetch_add(1, Ordering::AcqRel);
        }
        // SAFETY: offsets stay within the `len`-byte ranges of the caller.
        let d = unsafe {
            Descriptor {
                pe,
                src: src.add(off),
                dst: dst.add(off),
                len: n,
                wake,
                done: done.clone(),
            }
        };
        tx.send(d).map_err(|_| Error::Transport {
            engine: NAME,
            reason: "engine threads exited".into(),
        })?;
        off += n;
    }
    Ok(done)
}

fn worker(rx: Receiver<Descriptor>, counters: Arc<Counters>) {
    for d in rx {
        run(d, &counters);
    }
}

/// Bytes per descriptor for a copy of `len` bytes with `engines` engine
/// threads: one share for each engine and one for a waiting caller, at
/// least [`MIN_CHUNK`] and at most [`MAX_CHUNK`], page-aligned.
fn chunk_len(len: usize, engines: usize) -> usize {
    if len < 2 * MIN_CHUNK {
        return len.max(1);
    }
    (len / (engines + 1))
        .clamp(MIN_CHUNK, MAX_CHUNK)
        .next_multiple_of(4096)
}

impl Sdma {
    /// Starts `engines` engine threads over the given mapped heaps.
    ///
    /// # Errors
    /// [`Error::Os`] when an engine thread cannot be spawned.
    pub fn start(
        my_pe: PeId,
        heaps: Arc<NodeHeaps>,
        pids: Vec<u32>,
        engines: usize,
    ) -> Result<Sdma> {
        let (tx, rx) = crossbeam_channel::unbounded::<Descriptor>();
        let counters = Arc::new(Counters::new(pids.len()));
        let mut workers = Vec::with_capacity(engines);
        for i in 0..engines.max(1) {
            let (rx, c) = (rx.clone(), counters.clone());
            let h = std::thread::Builder::new()
                .name(format!("shmem-sdma-{i}"))
                .spawn(move || {
                    unbind();
                    worker(rx, c)
                })
                .map_err(|e| Error::os("spawning an SDMA engine thread", e))?;
            workers.push(h);
        }
        Ok(Sdma {
            my_pe,
            heaps,
            pids,
            tx: Some(tx),
            rx,
            engines: engines.max(1),
            counters,
            watch: QuietWatch::default(),
            workers,
            bulk_threshold: DEFAULT_BULK_THRESHOLD,
        })
    }

    /// Makes `quiet` give up, naming the PE, once a PE it has copies
    /// outstanding with is marked dead in `health`, or after `timeout`
    /// (`SHMEM_WAIT_TIMEOUT`).
    pub fn watching(mut self, health: Arc<PeerHealth>, timeout: Option<Duration>) -> Sdma {
        self.watch = QuietWatch {
            health: Some(health),
            timeout,
        };
        self
    }

    /// Number of engine threads.
    pub fn engines(&self) -> usize {
        self.engines
    }

    /// Waits for `done`, a copy this thread issued, helping the engines first.
    fn finish(&self, done: Completion) -> Result<()> {
        if !done.is_done() {
            help(&self.rx, &self.counters);
        }
        done.wait()
    }

    /// Splits a copy into descriptors and queues them; returns the completion.
    fn issue(
        &self,
        pe: PeId,
        src: *const u8,
        dst: *mut u8,
        len: usize,
        wake: Option<*mut u8>,
    ) -> Result<Completion> {
        let tx = self.tx.as_ref().ok_or_else(|| Error::Transport {
            engine: NAME,
            reason: "engine stopped".into(),
        })?;
        let chunk = chunk_len(len, self.engines);
        enqueue(tx, &self.counters, chunk, pe, src, dst, len, wake)
    }

    fn remote_vm(
        &self,
        pe: PeId,
        addr: usize,
        local: *mut u8,
        len: usize,
        write: bool,
    ) -> Result<()> {
        let pid = *self.pids.get(pe).ok_or(Error::PeOutOfRange {
            pe,
            n_pes: self.pids.len(),
        })?;
        let mut done = 0usize;
        while done < len {
            let liov = libc::iovec {
                iov_base: local.wrapping_add(done).cast(),
                iov_len: len - done,
            };
            let riov = libc::iovec {
                iov_base: (addr + done) as *mut libc::c_void,
                iov_len: len - done,
            };
            // SAFETY: the local iovec covers memory the caller vouches for;
            // the kernel validates the remote range and fails with EFAULT.
            let r = unsafe {
                if write {
                    libc::process_vm_writev(pid as libc::pid_t, &liov, 1, &riov, 1, 0)
                } else {
                    libc::process_vm_readv(pid as libc::pid_t, &liov, 1, &riov, 1, 0)
                }
            };
            if r <= 0 {
                let e = std::io::Error::last_os_error();
                return Err(Error::os(
                    format!(
                        "{} {len} bytes at address {addr:#x} of PE {pe} (pid {pid})",
                        if write {
                            "process_vm_writev of"
                        } else {
                            "process_vm_readv of"
                        }
                    ),
                    e,
                ));
            }
            done += r as usize;
        }
        Ok(())
    }
}

impl Drop for Sdma {
    fn drop(&mut self) {
        self.tx = None;
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

impl Transport for Sdma {
    fn name(&self) -> &'static str {
        NAME
    }

    fn bulk_threshold(&self) -> Option<usize> {
        Some(self.bulk_threshold)
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::RMA
            | Capabilities::AMO
            | Capabilities::SIGNAL
            | Capabilities::DIRECT_POINTER
            | Capabilities::ASYNC
            | Capabilities::EXTERNAL_MEMORY
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
        let base = self.heaps.require(pe)?;
        if len <= INLINE_MAX {
            // SAFETY: in-heap destination of a heap mapped by `self.heaps`
            // (checked by the runtime), valid source.
            unsafe { NodeHeaps::put(base, dst, src, len) };
            return Ok(());
        }
        // SAFETY: blocking: the source outlives the wait below.
        let done = unsafe { self.put_async(pe, dst, src, len)? };
        self.finish(done)
    }

    unsafe fn get(&self, pe: PeId, src: usize, dst: *mut u8, len: usize) -> Result<()> {
        let base = self.heaps.require(pe)?;
        if len <= INLINE_MAX {
            // SAFETY: as for put.
            unsafe { std::ptr::copy(base.add(src), dst, len) };
            return Ok(());
        }
        // SAFETY: blocking: the destination outlives the wait below.
        let done = unsafe { self.get_async(pe, src, dst, len)? };
        self.finish(done)
    }

    unsafe fn put_nbi(&self, pe: PeId, dst: usize, src: *const u8, len: usize) -> Result<()> {
        // SAFETY: forwarded contract (valid until quiet, which waits for the counts).
        unsafe { self.put_async(pe, dst, src, len) }.map(|_| ())
    }

    unsafe fn get_nbi(&self, pe: PeId, src: usize, dst: *mut u8, len: usize) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe { self.get_async(pe, src, dst, len) }.map(|_| ())
    }

    unsafe fn put_async(
        &self,
        pe: PeId,
        dst: usize,
        src: *const u8,
        len: usize,
    ) -> Result<Completion> {
        let base = self.heaps.require(pe)?;
        let wake = Some(base);
        // SAFETY: in-heap destination; the source's lifetime is the caller's contract.
        self.issue(pe, src, unsafe { base.add(dst) }, len, wake)
    }

    unsafe fn get_async(
        &self,
        pe: PeId,
        src: usize,
        dst: *mut u8,
        len: usize,
    ) -> Result<Completion> {
        let base = self.heaps.require(pe)?;
        // SAFETY: in-heap source; the destination's lifetime is the caller's contract.
        self.issue(pe, unsafe { base.add(src) }, dst, len, None)
    }

    unsafe fn put_to_address(
        &self,
        pe: PeId,
        addr: usize,
        src: *const u8,
        len: usize,
    ) -> Result<()> {
        if pe == self.my_pe {
            return Err(Error::invalid(
                "pe",
                "use a local copy for this PE's own memory",
            ));
        }
        self.remote_vm(pe, addr, src as *mut u8, len, true)
    }

    unsafe fn get_from_address(
        &self,
        pe: PeId,
        addr: usize,
        dst: *mut u8,
        len: usize,
    ) -> Result<()> {
        if pe == self.my_pe {
            return Err(Error::invalid(
                "pe",
                "use a local copy for this PE's own memory",
            ));
        }
        self.remote_vm(pe, addr, dst, len, false)
    }

    unsafe fn atomic(&self, pe: PeId, offset: usize, width: AmoWidth, op: AmoOp) -> Result<u64> {
        let base = self.heaps.require(pe)?;
        // SAFETY: offset in range and aligned (checked by the runtime).
        Ok(unsafe { NodeHeaps::atomic(base, offset, width, op) })
    }

    unsafe fn signal(&self, pe: PeId, sig: usize, op: SignalOp, value: u64) -> Result<()> {
        let base = self.heaps.require(pe)?;
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
        nbi: bool,
    ) -> Result<()> {
        let base = self.heaps.require(pe)?;
        if !nbi {
            // SAFETY: blocking put, then the signal.
            unsafe { self.put(pe, dst, src, len)? };
            fence(Ordering::Release);
            // SAFETY: aligned, in-heap signal word (checked by the runtime).
            unsafe { NodeHeaps::signal(base, sig, op, value, Span::bytes(dst, len)) };
            return Ok(());
        }
        // SAFETY: forwarded contract; the signal follows the last chunk.
        let done = unsafe { self.put_async(pe, dst, src, len)? };
        let base_addr = base as usize;
        done.then(move || {
            fence(Ordering::Release);
            // SAFETY: the heap stays mapped while the engine runs.
            unsafe {
                NodeHeaps::signal(base_addr as *mut u8, sig, op, value, Span::bytes(dst, len))
            };
            Ok(())
        });
        Ok(())
    }

    fn fence(&self) -> Result<()> {
        // Descriptors may run on different engines: order by completing them.
        self.quiet()?;
        fence(Ordering::SeqCst);
        Ok(())
    }

    /// Waits until every copy issued so far has completed.
    ///
    /// # Errors
    /// [`Error::PeerExited`] naming the PE once a PE with copies outstanding
    /// is known dead, and [`Error::Timeout`] naming the PEs with copies
    /// outstanding after `SHMEM_WAIT_TIMEOUT`; those copies may still be in
    /// flight then.
    fn quiet(&self) -> Result<()> {
        let target = self.counters.issued.load(Ordering::Acquire);
        if self.counters.completed.load(Ordering::Acquire) < target {
            help(&self.rx, &self.counters);
        }
        self.counters.wait_completed(target, &self.watch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counters with one copy to `pe` issued that never completes (an
    /// engine that cannot finish it).
    fn stuck(n_pes: usize, pe: PeId) -> Counters {
        let c = Counters::new(n_pes);
        c.issued.store(1, Ordering::SeqCst);
        c.outstanding[pe].store(1, Ordering::SeqCst);
        c
    }

    #[test]
    fn quiet_gives_up_on_a_dead_peer_and_names_it() {
        let c = stuck(4, 2);
        let health = Arc::new(PeerHealth::new());
        let watch = QuietWatch {
            health: Some(health.clone()),
            timeout: None,
        };
        // A PE that has nothing outstanding dying does not end the wait.
        health.mark_dead(3, "killed by signal 9");
        let h2 = health.clone();
        let t = std::thread::spawn(move || h2.mark_dead(2, "connection closed"));
        match c.wait_completed(1, &watch) {
            Err(Error::PeerExited { pe, detail }) => {
                // The first PE that died is named as the likely cause.
                assert_eq!(pe, 3, "{detail}");
                assert!(detail.contains("PE 2"), "{detail}");
            }
            other => panic!("{other:?}"),
        }
        t.join().unwrap();
        assert_eq!(c.quiet_waiters.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn quiet_gives_up_at_the_wait_timeout_naming_the_peer() {
        let c = stuck(2, 1);
        let watch = QuietWatch {
            health: Some(Arc::new(PeerHealth::new())),
            timeout: Some(Duration::from_millis(30)),
        };
        match c.wait_completed(1, &watch) {
            Err(Error::Timeout { what, .. }) => {
                assert!(what.contains("1 to or from PE 1"), "{what}");
                assert!(what.contains("SHMEM_WAIT_TIMEOUT"), "{what}");
            }
            other => panic!("{other:?}"),
        }
        // Once the copy completes, quiet succeeds.
        c.outstanding[1].store(0, Ordering::SeqCst);
        c.completed.store(1, Ordering::SeqCst);
        c.wait_completed(1, &watch).unwrap();
    }

    #[test]
    fn copies_are_cut_so_that_a_waiting_caller_has_a_share() {
        // Small copies stay whole.
        assert_eq!(chunk_len(0, 1), 1);
        assert_eq!(chunk_len(300 << 10, 1), 300 << 10);
        // One engine and the caller: halves, at most 1 MiB each.
        assert_eq!(chunk_len(1 << 20, 1), 512 << 10);
        assert_eq!(chunk_len(4 << 20, 1), 1 << 20);
        assert_eq!(chunk_len(64 << 20, 8), 1 << 20);
        // Never below 256 KiB, always whole pages.
        assert_eq!(chunk_len(1 << 20, 8), 256 << 10);
        assert_eq!(chunk_len((3 << 20) + 5, 2) % 4096, 0);
    }

    #[test]
    fn a_waiting_thread_copies_what_no_engine_took() {
        // A queue that no engine thread serves: only helping completes it.
        let (tx, rx) = crossbeam_channel::unbounded();
        let c = Counters::new(2);
        let src: Vec<u8> = (0..(3 << 20) + 100).map(|i| (i % 251) as u8).collect();
        let mut dst = vec![0u8; src.len()];
        let chunk = chunk_len(src.len(), 1);
        let done = enqueue(
            &tx,
            &c,
            chunk,
            1,
            src.as_ptr(),
            dst.as_mut_ptr(),
            src.len(),
            None,
        )
        .unwrap();
        assert!(!done.is_done());
        assert_eq!(c.outstanding[1].load(Ordering::SeqCst), 4);
        assert_eq!(help(&rx, &c), 4, "1 MiB chunks: three whole and the rest");
        assert!(done.is_done());
        done.wait().unwrap();
        assert!(dst == src, "every chunk copied in place");
        assert_eq!(c.outstanding[1].load(Ordering::SeqCst), 0);
        c.wait_completed(c.issued.load(Ordering::SeqCst), &QuietWatch::default())
            .unwrap();
        assert_eq!(help(&rx, &c), 0, "nothing left");
    }

    #[test]
    fn a_helper_and_an_engine_share_a_copy_and_each_chunk_runs_once() {
        let (tx, rx) = crossbeam_channel::unbounded();
        let c = Arc::new(Counters::new(1));
        let engine = {
            let (rx, c) = (rx.clone(), c.clone());
            std::thread::spawn(move || worker(rx, c))
        };
        for round in 0..20u8 {
            let src = vec![round; 8 << 20];
            let mut dst = vec![0u8; src.len()];
            let done = enqueue(
                &tx,
                &c,
                chunk_len(src.len(), 1),
                0,
                src.as_ptr(),
                dst.as_mut_ptr(),
                src.len(),
                None,
            )
            .unwrap();
            help(&rx, &c);
            c.wait_completed(c.issued.load(Ordering::SeqCst), &QuietWatch::default())
                .unwrap();
            assert!(done.is_done());
            assert!(dst.iter().all(|&b| b == round), "round {round}");
        }
        assert_eq!(
            c.completed.load(Ordering::SeqCst),
            c.issued.load(Ordering::SeqCst)
        );
        drop(tx);
        engine.join().unwrap();
    }
}
