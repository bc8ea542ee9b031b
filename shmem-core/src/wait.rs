//! Waiting on symmetric memory: spin briefly, then block on a futex.
//!
//! Every heap starts with a [`ControlBlock`]. A thread about to block
//! publishes what it waits on: a [`Span`] of that heap in one of
//! [`WATCH_SLOTS`] slots (threads waiting on the same span share a slot), or
//! "anything" when it cannot say. It registers in `waiters`, reads its
//! doorbell's sequence (the slot's, or the block's own for "anything"),
//! re-checks its condition and sleeps on that doorbell with `FUTEX_WAIT`. A
//! writer that changed the heap calls [`ring`] with the spans it wrote: one
//! load when nobody sleeps (see below for the fence it needs); when someone
//! does, it rings only
//! the doorbells whose watchers watch what it wrote. So a put into a PE that
//! sleeps in a barrier costs the writer no system call and the sleeper no
//! wake-up, and one release word that all PEs of a node sleep on is one
//! `FUTEX_WAKE` for all of them. The futex is on shared memory (no
//! `FUTEX_PRIVATE_FLAG`), so it works across processes that map the same
//! heap.
//!
//! The writer's store and its load of `waiters`, and the waiter's increment
//! of `waiters` and its load of the data, are a Dekker pair: each side
//! needs a full fence between its two accesses, or the writer reads no
//! waiter while the waiter reads old data and sleeps through the write.
//! Writers are the hot side (every put, a fence is a locked instruction:
//! 5 ns of an 8-byte put that otherwise costs 5), waiters the cold side
//! (they only get here after spinning). So the fence is asymmetric: a
//! process that registered for `membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED)`
//! ([`setup_light_writes`]) has its waiters issue one after they register
//! and before their last check, which runs a full barrier on every CPU
//! that is running a thread of a registered process at that moment (a
//! thread that is not running passed one in the context switch), and its
//! writers then need only a compiler fence. Either a writer's store came
//! before that barrier on its CPU, and the waiter's check sees it, or its
//! load of `waiters` came after it, and it sees the waiter. A process that
//! cannot register (or opted out with `SHMEM_WAIT_MEMBARRIER=0`) fences on
//! every write, and marks every control block it may wait on `strict`, so
//! that writers of all processes fence for those.

use std::sync::atomic::{
    compiler_fence, fence, AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering,
};
use std::time::{Duration, Instant};

/// Slots for published watch spans; a waiter that finds none free watches
/// everything (it is woken by every write, as before slots existed).
pub const WATCH_SLOTS: usize = 8;

/// One published watch: the span (with a count of the waiters sharing it)
/// and the doorbell they sleep on.
#[repr(C)]
#[derive(Debug)]
pub struct WatchSlot {
    /// `Span::pack` plus the waiter count; 0 is a free slot.
    pub key: AtomicU64,
    /// Incremented by writers that wake this slot's sleepers.
    pub doorbell: AtomicU32,
    /// Set by the first writer that rings the doorbell, cleared by a
    /// waiter before it sleeps again: later writers skip the system call.
    pub wake_pending: AtomicU32,
}

/// Per-PE control words at offset 0 of the symmetric heap.
#[repr(C, align(64))]
#[derive(Debug)]
pub struct ControlBlock {
    /// Doorbell of the waiters that watch everything.
    pub doorbell: AtomicU32,
    /// Number of threads blocked (or about to block) on this heap.
    pub waiters: AtomicU32,
    /// [`WatchSlot::wake_pending`] for `doorbell`.
    pub wake_pending: AtomicU32,
    /// Blocked waiters that watch every write (no span, or no free slot).
    pub watch_all: AtomicU32,
    /// Nonzero when a process that may wait on this heap does not issue
    /// the waiter's side of the asymmetric fence (module docs): every
    /// writer fences before it reads `waiters`. Set before the job's first
    /// write and never cleared.
    pub strict: AtomicU32,
    /// `FUTEX_WAKE` calls writers made for this heap's waiters (statistics).
    pub wakeups: AtomicU64,
    /// Every zone any slot has ever watched (`Span::zones`; bits are
    /// only ever added): a writer whose zones miss it skips the slot scan.
    pub zones: AtomicU64,
    /// Lowest start and highest end (bytes) of every span ever watched (only
    /// ever widened): writes outside skip the slot scan too.
    pub watched_lo: AtomicU64,
    /// See `watched_lo`.
    pub watched_hi: AtomicU64,
    /// Published watch spans.
    pub watch: [WatchSlot; WATCH_SLOTS],
}

impl ControlBlock {
    /// A control block with no waiters (for heaps and tests).
    pub const fn new() -> ControlBlock {
        ControlBlock {
            doorbell: AtomicU32::new(0),
            waiters: AtomicU32::new(0),
            wake_pending: AtomicU32::new(0),
            watch_all: AtomicU32::new(0),
            strict: AtomicU32::new(0),
            wakeups: AtomicU64::new(0),
            zones: AtomicU64::new(0),
            watched_lo: AtomicU64::new(u64::MAX),
            watched_hi: AtomicU64::new(0),
            watch: [const {
                WatchSlot {
                    key: AtomicU64::new(0),
                    doorbell: AtomicU32::new(0),
                    wake_pending: AtomicU32::new(0),
                }
            }; WATCH_SLOTS],
        }
    }

    /// The doorbell and pending flag of watch slot `slot` (`None`: the
    /// block's own, for waiters that watch everything).
    fn bell(&self, slot: Option<usize>) -> (&AtomicU32, &AtomicU32) {
        match slot.and_then(|i| self.watch.get(i)) {
            Some(w) => (&w.doorbell, &w.wake_pending),
            None => (&self.doorbell, &self.wake_pending),
        }
    }
}

impl Default for ControlBlock {
    fn default() -> Self {
        ControlBlock::new()
    }
}

/// A byte range of a PE's symmetric heap that a writer changed or a waiter
/// watches. [`Span::ALL`] stands for "unknown": memory outside the heap, or
/// a condition that reads words scattered over it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    start: usize,
    end: usize,
}

/// Granule of published spans: 8 bytes, so a packed slot covers 32 GiB.
const GRANULE: u32 = 3;

impl Span {
    /// Every byte (matches every watch and every write).
    pub const ALL: Span = Span {
        start: 0,
        end: usize::MAX,
    };

    /// `len` bytes at heap `offset` (saturating; an empty span matches
    /// nothing).
    #[inline]
    pub fn bytes(offset: usize, len: usize) -> Span {
        Span {
            start: offset,
            end: offset.saturating_add(len),
        }
    }

    /// The slot key: start (32 bits) and length (16 bits) in 8-byte
    /// granules, rounded outwards, above a 16-bit count of the waiters that
    /// share the slot; `None` for [`Span::ALL`], an empty span, beyond
    /// 32 GiB or longer than 512 KiB (such waiters watch everything).
    fn pack(self) -> Option<u64> {
        let s = self.start >> GRANULE;
        let e = self.end.checked_add((1 << GRANULE) - 1)? >> GRANULE;
        if self.end <= self.start || s > u32::MAX as usize || e - s > 0xFFFF {
            return None;
        }
        Some(((s as u64) << 32) | (((e - s) as u64) << 16))
    }

    /// Whether this span intersects the occupied slot value `w`.
    #[inline]
    fn hits(self, w: u64) -> bool {
        let ws = (w >> 32) as usize;
        let we = ws + ((w >> 16) & 0xFFFF) as usize;
        let s = self.start >> GRANULE;
        let e = self.end.saturating_add((1 << GRANULE) - 1) >> GRANULE;
        self.end > self.start && s < we && ws < e
    }
}

impl Span {
    /// The span's zones as bits: the heap is cut into 512-byte regions,
    /// region `r` maps to bit `r % 64` (all bits for a span over 64 regions
    /// or an unknown one).
    #[inline]
    fn zones(self) -> u64 {
        if self.end <= self.start {
            return 0;
        }
        let first = self.start >> ZONE_SHIFT;
        let last = (self.end - 1) >> ZONE_SHIFT;
        if last - first >= 63 {
            return u64::MAX;
        }
        let (a, b) = ((first % 64) as u32, (last % 64) as u32);
        let run = |lo: u32, hi: u32| (u64::MAX >> (63 - (hi - lo))) << lo;
        if a <= b {
            run(a, b)
        } else {
            run(a, 63) | run(0, b)
        }
    }
}

/// Zones are 512-byte regions of the heap.
const ZONE_SHIFT: u32 = 9;

/// The waiter count in a slot value.
const SLOT_COUNT: u64 = 0xFFFF;

/// Wakes the waiters of the PE whose control block is `cb` that watch any
/// of `spans` (after this thread wrote them in that PE's memory). Waiters
/// that watch everything are woken by every call, even one without spans
/// (a write outside the heap).
///
/// # Safety
/// `cb` must point to the live control block of a mapped heap.
#[inline]
pub unsafe fn ring(cb: *const ControlBlock, spans: &[Span]) {
    // Pairs with the waiter's increment of `waiters` and its membarrier (or
    // its fence, for a strict block): either we see the waiter (and its
    // published span), or the waiter sees our data (module docs).
    // SAFETY: guaranteed by the caller.
    let strict = unsafe { (*cb).strict.load(Ordering::Relaxed) };
    if WRITES.load(Ordering::Relaxed) == WRITES_LIGHT && strict == 0 {
        compiler_fence(Ordering::SeqCst);
    } else {
        fence(Ordering::SeqCst);
    }
    // SAFETY: guaranteed by the caller.
    unsafe { ring_after_seqcst(cb, spans) }
}

/// How this process's writers order their data before reading `waiters`
/// (module docs): not decided yet (fence), light (compiler fence for
/// blocks that are not strict), or fenced for good.
static WRITES: AtomicU8 = AtomicU8::new(WRITES_UNSET);
const WRITES_UNSET: u8 = 0;
const WRITES_LIGHT: u8 = 1;
const WRITES_FENCED: u8 = 2;
/// This process registered for `MEMBARRIER_CMD_GLOBAL_EXPEDITED`: its
/// waiters issue one before their last check.
static REGISTERED: AtomicBool = AtomicBool::new(false);

// From <linux/membarrier.h>.
const MEMBARRIER_CMD_GLOBAL_EXPEDITED: libc::c_int = 1 << 1;
const MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED: libc::c_int = 1 << 2;

fn membarrier(cmd: libc::c_int) -> bool {
    // SAFETY: membarrier takes two integers and touches no memory of ours.
    unsafe { libc::syscall(libc::SYS_membarrier, cmd, 0, 0) == 0 }
}

/// Chooses how this process's writers order their data before they read
/// a heap's `waiters` (module docs), for a runtime that `allow`s the light
/// way (`SHMEM_WAIT_MEMBARRIER`): registers the process for
/// `membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED)` once. Returns `true` when
/// the process's waiters issue the waiter's side of the asymmetric fence;
/// `false` when they do not, and then the caller must mark every control
/// block this process may wait on with [`mark_strict`] before any peer
/// writes to it. Once one runtime of the process said no, its writers
/// fence for good.
pub fn setup_light_writes(allow: bool) -> bool {
    if !allow {
        WRITES.store(WRITES_FENCED, Ordering::SeqCst);
        return REGISTERED.load(Ordering::SeqCst);
    }
    if !REGISTERED.load(Ordering::SeqCst) {
        if !membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) {
            WRITES.store(WRITES_FENCED, Ordering::SeqCst);
            return false;
        }
        REGISTERED.store(true, Ordering::SeqCst);
    }
    let _ = WRITES.compare_exchange(
        WRITES_UNSET,
        WRITES_LIGHT,
        Ordering::SeqCst,
        Ordering::SeqCst,
    );
    true
}

/// A registered process's membarrier failed (it should not): from now on
/// this process's writers fence, and so do all writers of the heap `cb`
/// belongs to; a wake-up missed before that is one poll late
/// (`WaitPolicy::poll`), never lost.
#[cold]
fn membarrier_failed(cb: &ControlBlock) {
    let e = std::io::Error::last_os_error();
    WRITES.store(WRITES_FENCED, Ordering::SeqCst);
    cb.strict.store(1, Ordering::SeqCst);
    static SAID: AtomicBool = AtomicBool::new(false);
    if !SAID.swap(true, Ordering::SeqCst) {
        crate::shmem_log!(
            Warn,
            "membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) failed ({e}); writes fence from now on"
        );
    }
}

/// Whether this process's writers skip the full fence before reading a
/// heap's `waiters` (for heaps that are not strict), and whether its
/// waiters issue a membarrier before they sleep: for `SHMEM_INFO`.
pub fn light_writes() -> (bool, bool) {
    (
        WRITES.load(Ordering::SeqCst) == WRITES_LIGHT,
        REGISTERED.load(Ordering::SeqCst),
    )
}

/// Marks the heap whose control block is `cb` as waited on by a process
/// whose waiters issue no membarrier: every writer fences for it.
///
/// # Safety
/// `cb` must point to the live control block of a mapped heap.
pub unsafe fn mark_strict(cb: *const ControlBlock) {
    // SAFETY: guaranteed by the caller.
    unsafe { (*cb).strict.store(1, Ordering::SeqCst) };
}

/// [`ring`] for a writer whose change was itself a `SeqCst` atomic (a
/// remote atomic or a signal update): the atomic already orders the write
/// before the `SeqCst` load of `waiters`, so the separate fence is skipped.
///
/// # Safety
/// As for [`ring`].
#[inline]
pub unsafe fn ring_after_seqcst(cb: *const ControlBlock, spans: &[Span]) {
    // SAFETY: guaranteed by the caller.
    let cb = unsafe { &*cb };
    if cb.waiters.load(Ordering::SeqCst) != 0 {
        ring_watchers(cb, spans);
    }
}

#[cold]
#[inline(never)]
fn ring_watchers(cb: &ControlBlock, spans: &[Span]) {
    if cb.watch_all.load(Ordering::SeqCst) != 0 {
        ring_bell(cb, &cb.doorbell, &cb.wake_pending);
    }
    let (lo, hi) = (
        cb.watched_lo.load(Ordering::SeqCst),
        cb.watched_hi.load(Ordering::SeqCst),
    );
    let zones = cb.zones.load(Ordering::SeqCst);
    let near = |s: &Span| {
        s.end > s.start && (s.start as u64) < hi && (s.end as u64) > lo && s.zones() & zones != 0
    };
    if !spans.iter().any(near) {
        return;
    }
    for slot in &cb.watch {
        let w = slot.key.load(Ordering::SeqCst);
        if w != 0 && spans.iter().any(|s| s.hits(w)) {
            ring_bell(cb, &slot.doorbell, &slot.wake_pending);
        }
    }
}

fn ring_bell(cb: &ControlBlock, bell: &AtomicU32, pending: &AtomicU32) {
    if pending.swap(1, Ordering::SeqCst) == 0 {
        bell.fetch_add(1, Ordering::SeqCst);
        cb.wakeups.fetch_add(1, Ordering::Relaxed);
        futex_wake(bell);
    }
}

/// A waiter's published watch, withdrawn on drop.
struct Watch<'a> {
    cb: &'a ControlBlock,
    slot: Option<usize>,
}

impl<'a> Watch<'a> {
    fn publish(cb: &'a ControlBlock, span: Span) -> Watch<'a> {
        // Zones first (before the slot and the waiter count): a writer that
        // sees this waiter also sees its zones.
        let z = span.zones();
        if cb.zones.load(Ordering::SeqCst) & z != z {
            cb.zones.fetch_or(z, Ordering::SeqCst);
        }
        let (start, end) = (span.start as u64, span.end.min(u64::MAX as usize) as u64);
        if cb.watched_lo.load(Ordering::SeqCst) > start {
            cb.watched_lo.fetch_min(start, Ordering::SeqCst);
        }
        if cb.watched_hi.load(Ordering::SeqCst) < end {
            cb.watched_hi.fetch_max(end, Ordering::SeqCst);
        }
        let slot = span.pack().and_then(|key| {
            // Share a slot with waiters on the same span (all PEs of a node
            // waiting for one release word), else take a free one.
            let shared = cb.watch.iter().position(|w| {
                let s = &w.key;
                let mut cur = s.load(Ordering::SeqCst);
                while cur & !SLOT_COUNT == key && cur & SLOT_COUNT < SLOT_COUNT {
                    match s.compare_exchange(cur, cur + 1, Ordering::SeqCst, Ordering::SeqCst) {
                        Ok(_) => return true,
                        Err(now) => cur = now,
                    }
                }
                false
            });
            shared.or_else(|| {
                cb.watch.iter().position(|w| {
                    w.key
                        .compare_exchange(0, key | 1, Ordering::SeqCst, Ordering::Relaxed)
                        .is_ok()
                })
            })
        });
        if slot.is_none() {
            cb.watch_all.fetch_add(1, Ordering::SeqCst);
        }
        Watch { cb, slot }
    }
}

impl Drop for Watch<'_> {
    fn drop(&mut self) {
        match self.slot {
            Some(i) => {
                let s = &self.cb.watch[i].key;
                let mut cur = s.load(Ordering::SeqCst);
                loop {
                    let next = if cur & SLOT_COUNT <= 1 { 0 } else { cur - 1 };
                    match s.compare_exchange(cur, next, Ordering::SeqCst, Ordering::SeqCst) {
                        Ok(_) => break,
                        Err(now) => cur = now,
                    }
                }
            }
            None => {
                self.cb.watch_all.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }
}

fn futex_wake(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE on a valid, aligned u32; no memory is written by the kernel.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
        );
    }
}

fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: FUTEX_WAIT on a valid, aligned u32 with a valid timespec; it
    // returns at once if the word no longer holds `expected`.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
        );
    }
}

/// A sleep of an adaptive wait ([`WaitPolicy::adapt`]) shorter than this
/// says that spinning on would have been cheaper.
pub const SPIN_ADAPT_TRIGGER: Duration = Duration::from_millis(2);
/// The spin of an adaptive wait after such a sleep.
pub const SPIN_ADAPTED: Duration = Duration::from_millis(20);

/// The spin of adaptive waits ([`WaitPolicy::adapt`]): `adapted` after a
/// sleep shorter than `trigger`, else the policy's own.
#[derive(Debug)]
pub struct SpinAdapt {
    trigger: Duration,
    adapted: Duration,
    /// The spin learnt, in nanoseconds (0: the policy's own).
    now_ns: AtomicU64,
}

impl SpinAdapt {
    /// Nothing learnt yet: the policy's own spin.
    pub const fn new(trigger: Duration, adapted: Duration) -> SpinAdapt {
        SpinAdapt {
            trigger,
            adapted,
            now_ns: AtomicU64::new(0),
        }
    }

    /// The spin a wait whose policy says `base` uses now.
    pub fn spin(&self, base: Duration) -> Duration {
        base.max(Duration::from_nanos(self.now_ns.load(Ordering::Relaxed)))
    }

    /// Learns from a wait with policy spin `base` that slept for `slept`.
    fn after_sleep(&self, base: Duration, slept: Duration) {
        let next = if slept < self.trigger {
            self.adapted.max(base)
        } else {
            base
        };
        self.now_ns.store(next.as_nanos() as u64, Ordering::Relaxed);
    }
}

/// This process's [`SpinAdapt`] ([`SPIN_ADAPT_TRIGGER`], [`SPIN_ADAPTED`]),
/// which every runtime instance in it shares: what it learns is how this
/// machine schedules and wakes the process's threads.
pub static PROCESS_SPIN: SpinAdapt = SpinAdapt::new(SPIN_ADAPT_TRIGGER, SPIN_ADAPTED);

/// How long a wait spins, how often it checks that the job is still alive,
/// and when it gives up.
#[derive(Debug, Clone, Copy)]
pub struct WaitPolicy {
    /// Spin before blocking.
    pub spin: Duration,
    /// Spin longer after a sleep that ended soon after it began. Waking a
    /// sleeping PE can take longer than `spin` (70-250 us for an idle vCPU
    /// of a virtual machine), and then two PEs that answer each other find
    /// each other asleep, and sleep too, on every call: a 2-PE barrier loop
    /// (OSU's `osu_oshm_barrier`) measured 50-130 us per barrier in that
    /// state against 0.2 us. So a sleep shorter than
    /// [`SPIN_ADAPT_TRIGGER`] makes the waits of this process spin for
    /// [`SPIN_ADAPTED`] (yielding the core now and then, as every spin
    /// does), and a longer sleep (a PE that really waits) restores
    /// `spin`. Meant for PEs with cores of their own (PEs that outnumber
    /// cores yield instead of spinning); `None`: `spin` as it is.
    pub adapt: Option<&'static SpinAdapt>,
    /// After spinning, yield the core for this long before blocking.
    pub yield_for: Duration,
    /// Longest single sleep; liveness is checked after each.
    pub poll: Duration,
    /// Give up after this long (None: never).
    pub timeout: Option<Duration>,
}

thread_local! {
    /// The check [`interruptible`] installed for this thread's waits.
    static INTERRUPT: std::cell::Cell<Option<fn() -> bool>> = const { std::cell::Cell::new(None) };
}

/// Runs `f` with `check` consulted by every wait on symmetric memory that
/// this thread makes inside it, each time the wait is about to sleep (once
/// it has spun, then after every sleep: at least every `SHMEM_WAIT_POLL`),
/// never on the fast path. A wait whose `check` returns true ends with
/// [`crate::Error::Interrupted`], and so does the call that made it: a
/// binding that runs blocking calls on the thread that takes signals (Python's
/// main thread) lets a signal handler end them this way. Nests: the outer
/// check comes back when `f` returns or unwinds.
pub fn interruptible<R>(check: fn() -> bool, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<fn() -> bool>);
    impl Drop for Restore {
        fn drop(&mut self) {
            INTERRUPT.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(INTERRUPT.with(|c| c.replace(Some(check))));
    f()
}

/// Whether the check [`interruptible`] installed on this thread (if any)
/// asks the current wait to end.
pub fn interrupt_requested() -> bool {
    INTERRUPT.with(|c| c.get()).is_some_and(|check| check())
}

/// Polls of a spinning wait before it first reads the clock.
const FIRST_BURST: u32 = 64;

/// Waits until `ready()` holds. `ready` may read only memory inside
/// `watch` (pass [`Span::ALL`] when it reads anything else): writers wake
/// the sleeping waiter only for writes that touch `watch`. `alive()` is
/// called between sleeps and its error ends the wait (a peer exited, the
/// job was aborted).
///
/// # Safety
/// `cb` must point to the live control block of this PE's heap.
///
/// # Errors
/// `alive()`'s error, which ends the wait; `timeout_err(elapsed)` once `policy.timeout` has
/// passed.
pub unsafe fn wait_until<E>(
    cb: *const ControlBlock,
    policy: WaitPolicy,
    watch: Span,
    mut ready: impl FnMut() -> bool,
    mut alive: impl FnMut() -> Result<(), E>,
    timeout_err: impl FnOnce(Duration) -> E,
) -> Result<(), E> {
    if ready() {
        return Ok(());
    }
    if !policy.spin.is_zero() {
        // A first burst of polls before the clock is read: a clock read
        // costs 22 ns on this kind of VM, half a cache-line transfer, and
        // it would delay noticing a condition met right after the first
        // poll (a 2-PE barrier's usual case). The burst (about 1.5 us of
        // `pause` here) is added to the spin.
        for _ in 0..FIRST_BURST {
            std::hint::spin_loop();
            if ready() {
                return Ok(());
            }
        }
    }
    let start = Instant::now();
    let mut spins = 0u32;
    let adapt = policy.adapt.filter(|_| !policy.spin.is_zero());
    let spin = adapt.map_or(policy.spin, |a| a.spin(policy.spin));
    // No spin at all (PEs outnumber cores): straight to yielding.
    while !spin.is_zero() {
        for _ in 0..64 {
            if ready() {
                return Ok(());
            }
            std::hint::spin_loop();
        }
        spins += 1;
        if start.elapsed() >= spin {
            break;
        }
        if spins.is_multiple_of(16) {
            std::thread::yield_now();
        }
    }
    // With more runnable PEs than cores, the PE we wait for is usually
    // runnable but not running: handing it the core is faster than a sleep.
    while start.elapsed() < spin + policy.yield_for {
        if ready() {
            return Ok(());
        }
        std::thread::yield_now();
    }
    // SAFETY: guaranteed by the caller.
    let cb = unsafe { &*cb };
    // Publish the span before registering: a writer that sees the waiter
    // count also sees the span.
    let published = Watch::publish(cb, watch);
    let (bell, pending) = cb.bell(published.slot);
    cb.waiters.fetch_add(1, Ordering::SeqCst);
    // The waiter's side of the asymmetric fence (module docs): after this,
    // every writer that skipped its fence either sees `waiters` or has its
    // data visible to the first check below.
    if REGISTERED.load(Ordering::Relaxed) && !membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) {
        membarrier_failed(cb);
    }
    // When it first slept (a condition met before then is no verdict on
    // the spin window).
    let mut slept_at = None;
    let result = loop {
        // Read the doorbell first, then re-arm: a writer that finds the
        // flag already set implies an earlier writer bumps the doorbell
        // after `seq` was read, so the futex wait below cannot miss it.
        let seq = bell.load(Ordering::SeqCst);
        pending.store(0, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if ready() {
            break Ok(());
        }
        if let Err(e) = alive() {
            break Err(e);
        }
        let elapsed = start.elapsed();
        if let Some(limit) = policy.timeout {
            if elapsed >= limit {
                break Err(timeout_err(elapsed));
            }
        }
        slept_at.get_or_insert_with(Instant::now);
        futex_wait(bell, seq, policy.poll);
    };
    cb.waiters.fetch_sub(1, Ordering::SeqCst);
    if let (Some(a), Ok(()), Some(at)) = (adapt, &result, slept_at) {
        a.after_sleep(policy.spin, at.elapsed());
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn policy(spin: Duration, poll: Duration, timeout: Option<Duration>) -> WaitPolicy {
        WaitPolicy {
            spin,
            adapt: None,
            yield_for: Duration::ZERO,
            poll,
            timeout,
        }
    }

    /// Starts a thread that waits on `flag` (heap "offset" `at`, 8 bytes)
    /// until it holds `want`; returns once the thread is registered asleep.
    fn sleeper(
        cb: &Arc<ControlBlock>,
        flag: &Arc<AtomicU64>,
        at: usize,
        want: u64,
    ) -> std::thread::JoinHandle<Result<(), ()>> {
        sleeper_on(cb, flag, Span::bytes(at, 8), want)
    }

    /// [`sleeper`] publishing `watch`.
    fn sleeper_on(
        cb: &Arc<ControlBlock>,
        flag: &Arc<AtomicU64>,
        watch: Span,
        want: u64,
    ) -> std::thread::JoinHandle<Result<(), ()>> {
        let p = policy(
            Duration::from_micros(1),
            Duration::from_secs(5),
            Some(Duration::from_secs(20)),
        );
        sleeper_with(cb, flag, watch, want, p)
    }

    /// [`sleeper_on`] with wait policy `p`.
    fn sleeper_with(
        cb: &Arc<ControlBlock>,
        flag: &Arc<AtomicU64>,
        watch: Span,
        want: u64,
        p: WaitPolicy,
    ) -> std::thread::JoinHandle<Result<(), ()>> {
        let before = cb.waiters.load(Ordering::SeqCst);
        let (cb2, flag2) = (cb.clone(), flag.clone());
        let tid = Arc::new(std::sync::atomic::AtomicI32::new(0));
        let tid2 = tid.clone();
        let t = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tid2.store(unsafe { libc::gettid() }, Ordering::SeqCst);
            // SAFETY: the control block lives in an Arc held by this closure.
            unsafe {
                wait_until(
                    &*cb2,
                    p,
                    watch,
                    || flag2.load(Ordering::SeqCst) == want,
                    || Ok::<(), ()>(()),
                    |_| (),
                )
            }
        });
        while cb.waiters.load(Ordering::SeqCst) == before {
            std::thread::yield_now();
        }
        // Registered is not yet asleep: between counting itself and
        // blocking, the waiter re-checks its condition, and a flag set in
        // that window is seen without a wake-up. Its only blocking call
        // from here is the futex wait, so wait for the kernel to report
        // the thread sleeping.
        let stat = format!("/proc/self/task/{}/stat", tid.load(Ordering::SeqCst));
        let start = std::time::Instant::now();
        loop {
            let state = std::fs::read_to_string(&stat)
                .ok()
                .and_then(|s| {
                    s.rsplit_once(')')
                        .map(|(_, rest)| rest.trim_start().chars().next())
                })
                .flatten();
            if state == Some('S') {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "the waiter did not go to sleep ({stat}: {state:?})"
            );
            std::thread::yield_now();
        }
        t
    }

    #[test]
    fn a_short_sleep_lengthens_the_spin_and_a_long_one_restores_it() {
        let base = Duration::from_micros(50);
        let adapted = Duration::from_millis(2);
        // The rule itself.
        let rule = SpinAdapt::new(Duration::from_millis(2), adapted);
        assert_eq!(rule.spin(base), base);
        rule.after_sleep(base, Duration::from_micros(150));
        assert_eq!(rule.spin(base), adapted);
        rule.after_sleep(base, Duration::from_millis(2));
        assert_eq!(rule.spin(base), base);
        // Through real waits, with triggers no scheduling delay can cross:
        // a waiter woken as soon as it slept (well within 60 s) lengthens
        // the spin...
        static QUICK: SpinAdapt = SpinAdapt::new(Duration::from_secs(60), Duration::from_millis(2));
        let policy_with = |a: &'static SpinAdapt| WaitPolicy {
            adapt: Some(a),
            ..policy(base, Duration::from_secs(5), Some(Duration::from_secs(20)))
        };
        let cb = Arc::new(ControlBlock::new());
        let flag = Arc::new(AtomicU64::new(0));
        let wake = |want: u64, after: Duration, a: &'static SpinAdapt| {
            let t = sleeper_with(&cb, &flag, Span::bytes(4096, 8), want, policy_with(a));
            std::thread::sleep(after);
            flag.store(want, Ordering::SeqCst);
            // SAFETY: live control block.
            unsafe { ring(&*cb, &[Span::bytes(4096, 8)]) };
            assert!(t.join().unwrap().is_ok());
        };
        wake(1, Duration::ZERO, &QUICK);
        assert_eq!(QUICK.spin(base), adapted);
        // ... and one woken 6 ms after it slept (a PE that really waits,
        // for a 1-ms trigger) restores it, after spinning the adapted
        // 2 ms first.
        static SLOW: SpinAdapt = SpinAdapt::new(Duration::from_millis(1), Duration::from_millis(2));
        SLOW.after_sleep(base, Duration::ZERO);
        assert_eq!(SLOW.spin(base), adapted);
        wake(2, Duration::from_millis(6), &SLOW);
        assert_eq!(SLOW.spin(base), base);
    }

    #[test]
    fn wakes_a_blocked_waiter() {
        let cb = Arc::new(ControlBlock::new());
        let flag = Arc::new(AtomicU64::new(0));
        let t = sleeper(&cb, &flag, 4096, 1);
        flag.store(1, Ordering::SeqCst);
        // SAFETY: live control block.
        unsafe { ring(&*cb, &[Span::bytes(4096, 8)]) };
        assert!(t.join().unwrap().is_ok());
        assert_eq!(cb.wakeups.load(Ordering::SeqCst), 1);
        assert_eq!(cb.watch_all.load(Ordering::SeqCst), 0);
        assert!(cb.watch.iter().all(|w| w.key.load(Ordering::SeqCst) == 0));
    }

    #[test]
    fn writes_elsewhere_make_no_wakeup() {
        let cb = Arc::new(ControlBlock::new());
        let flag = Arc::new(AtomicU64::new(0));
        let t = sleeper(&cb, &flag, 8192, 1);
        for i in 0..1000 {
            // Neighbours on both sides, never the watched word.
            // SAFETY: live control block.
            unsafe { ring(&*cb, &[Span::bytes(8192 - 64 + (i % 8) * 8, 8)]) };
            // SAFETY: as above.
            unsafe { ring(&*cb, &[Span::bytes(8200, 4096)]) };
        }
        assert_eq!(cb.wakeups.load(Ordering::SeqCst), 0);
        flag.store(1, Ordering::SeqCst);
        // A span that covers the word among others wakes it.
        // SAFETY: as above.
        unsafe { ring(&*cb, &[Span::bytes(100_000, 8), Span::bytes(8000, 200)]) };
        assert!(t.join().unwrap().is_ok());
        assert_eq!(cb.wakeups.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn unknown_writes_and_unknown_watches_always_match() {
        let cb = Arc::new(ControlBlock::new());
        let flag = Arc::new(AtomicU64::new(0));
        let t = sleeper(&cb, &flag, 4096, 1);
        flag.store(1, Ordering::SeqCst);
        // SAFETY: live control block.
        unsafe { ring(&*cb, &[Span::ALL]) };
        assert!(t.join().unwrap().is_ok());
        // A waiter with no span is woken by any write.
        assert!(Span::ALL.pack().is_none());
        assert!(Span::bytes(1 << 40, 8).pack().is_none());
        assert!(Span::bytes(0, 1 << 20).pack().is_none());
        assert!(Span::bytes(64, 0).pack().is_none());
        assert!(!Span::bytes(64, 0).hits(Span::bytes(0, 128).pack().unwrap()));
        assert!(Span::bytes(7, 2).hits(Span::bytes(8, 1).pack().unwrap()));
        assert!(!Span::bytes(16, 8).hits(Span::bytes(8, 8).pack().unwrap()));
    }

    #[test]
    fn a_ring_without_spans_wakes_only_the_waiters_that_watch_everything() {
        // A write outside the heap (C static data) changes no heap word.
        let cb = Arc::new(ControlBlock::new());
        let (on_heap, outside) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let heap_waiter = sleeper(&cb, &on_heap, 4096, 1);
        let all_waiter = sleeper_on(&cb, &outside, Span::ALL, 1);
        outside.store(1, Ordering::SeqCst);
        // SAFETY: live control block.
        unsafe { ring(&*cb, &[]) };
        assert!(all_waiter.join().unwrap().is_ok());
        assert_eq!(cb.wakeups.load(Ordering::SeqCst), 1);
        on_heap.store(1, Ordering::SeqCst);
        // SAFETY: as above.
        unsafe { ring(&*cb, &[Span::bytes(4096, 8)]) };
        assert!(heap_waiter.join().unwrap().is_ok());
        assert_eq!(cb.wakeups.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn zones_cover_their_spans() {
        assert_eq!(Span::bytes(0, 8).zones(), 1);
        assert_eq!(Span::bytes(512, 8).zones(), 2);
        assert_eq!(Span::bytes(500, 20).zones(), 3);
        assert_eq!(Span::bytes(63 * 512, 1024).zones(), (1 << 63) | 1);
        assert_eq!(Span::bytes(0, 64 * 512).zones(), u64::MAX);
        assert_eq!(Span::ALL.zones(), u64::MAX);
        assert_eq!(Span::bytes(64, 0).zones(), 0);
        // Region 64 shares bit 0 with region 0.
        assert_eq!(Span::bytes(64 * 512, 8).zones(), 1);
    }

    #[test]
    fn waiters_on_one_word_share_a_slot() {
        let cb = Arc::new(ControlBlock::new());
        let flag = Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..WATCH_SLOTS + 4)
            .map(|_| sleeper(&cb, &flag, 4096, 1))
            .collect();
        let used = cb
            .watch
            .iter()
            .filter(|w| w.key.load(Ordering::SeqCst) != 0)
            .count();
        assert_eq!(used, 1);
        assert_eq!(cb.watch_all.load(Ordering::SeqCst), 0);
        // SAFETY: live control block.
        unsafe { ring(&*cb, &[Span::bytes(4104, 8)]) };
        assert_eq!(cb.wakeups.load(Ordering::SeqCst), 0);
        flag.store(1, Ordering::SeqCst);
        // SAFETY: as above.
        unsafe { ring(&*cb, &[Span::bytes(4096, 8)]) };
        for t in threads {
            assert!(t.join().unwrap().is_ok());
        }
        assert!(cb.watch.iter().all(|w| w.key.load(Ordering::SeqCst) == 0));
    }

    #[test]
    fn more_waiters_than_slots_watch_everything() {
        let cb = Arc::new(ControlBlock::new());
        let flags: Vec<Arc<AtomicU64>> = (0..WATCH_SLOTS + 3)
            .map(|_| Arc::new(AtomicU64::new(0)))
            .collect();
        let threads: Vec<_> = flags
            .iter()
            .enumerate()
            .map(|(i, f)| sleeper(&cb, f, 4096 + 64 * i, 1))
            .collect();
        assert_eq!(cb.watch_all.load(Ordering::SeqCst), 3);
        for (i, f) in flags.iter().enumerate() {
            f.store(1, Ordering::SeqCst);
            // SAFETY: live control block.
            unsafe { ring(&*cb, &[Span::bytes(4096 + 64 * i, 8)]) };
        }
        for t in threads {
            assert!(t.join().unwrap().is_ok());
        }
        assert_eq!(cb.waiters.load(Ordering::SeqCst), 0);
        assert_eq!(cb.watch_all.load(Ordering::SeqCst), 0);
    }

    /// A thread that, for rounds 1 to `rounds`, waits with `p` until
    /// `words[i]` reaches the round (watching its 8 bytes at `64 * (i + 1)`)
    /// and then stores the round in `acks[i]`; a wait that times out is
    /// reported as the missed wake-up it is.
    fn round_waiter(
        cb: &Arc<ControlBlock>,
        words: &Arc<Vec<AtomicU64>>,
        acks: &Arc<Vec<AtomicU64>>,
        i: usize,
        rounds: u64,
        p: WaitPolicy,
    ) -> std::thread::JoinHandle<Result<(), String>> {
        let (cb, words, acks) = (cb.clone(), words.clone(), acks.clone());
        std::thread::spawn(move || {
            for r in 1..=rounds {
                // SAFETY: the control block lives in the Arc.
                unsafe {
                    wait_until(
                        &*cb,
                        p,
                        Span::bytes(64 * (i + 1), 8),
                        || words[i].load(Ordering::Acquire) >= r,
                        || Ok::<(), ()>(()),
                        |_| (),
                    )
                }
                .map_err(|()| format!("waiter {i}: round {r} missed its wake-up"))?;
                acks[i].store(r, Ordering::Release);
            }
            Ok(())
        })
    }

    /// Several waiters on neighbouring words and writers that hit them in
    /// random order: every wait must end (no lost wake-up), for many rounds.
    #[test]
    fn no_lost_wakeup_under_contention() {
        const WAITERS: usize = 4;
        const ROUNDS: u64 = 2000;
        let cb = Arc::new(ControlBlock::new());
        let words: Arc<Vec<AtomicU64>> =
            Arc::new((0..WAITERS).map(|_| AtomicU64::new(0)).collect());
        let acks: Arc<Vec<AtomicU64>> = Arc::new((0..WAITERS).map(|_| AtomicU64::new(0)).collect());
        // Short spin so most rounds go to sleep.
        let p = policy(
            Duration::ZERO,
            Duration::from_secs(5),
            Some(Duration::from_secs(60)),
        );
        let waiters: Vec<_> = (0..WAITERS)
            .map(|i| round_waiter(&cb, &words, &acks, i, ROUNDS, p))
            .collect();
        // Two writers: one bumps the words, one writes next to them.
        let noise = {
            let cb = cb.clone();
            let stop = Arc::new(AtomicU32::new(0));
            let s2 = stop.clone();
            (
                std::thread::spawn(move || {
                    while s2.load(Ordering::Relaxed) == 0 {
                        // SAFETY: live control block.
                        unsafe { ring(&*cb, &[Span::bytes(64 * 100, 64)]) };
                    }
                }),
                stop,
            )
        };
        for r in 1..=ROUNDS {
            // Lockstep, so that the waiters go to sleep between rounds.
            for a in acks.iter() {
                while a.load(Ordering::SeqCst) < r - 1 {
                    std::thread::yield_now();
                }
            }
            for i in 0..WAITERS {
                words[i].store(r, Ordering::SeqCst);
                // SAFETY: live control block.
                unsafe { ring(&*cb, &[Span::bytes(64 * (i + 1), 8)]) };
            }
        }
        for w in waiters {
            w.join().unwrap().unwrap();
        }
        noise.1.store(1, Ordering::Relaxed);
        noise.0.join().unwrap();
    }

    /// Writers that store with plain (relaxed) stores and ring with no
    /// fence of their own (the light way, once this test process has
    /// registered for membarrier; a full fence where it cannot), against
    /// waiters that go to sleep on every round: a missed wake-up is a wait
    /// that times out, since its one sleep is as long as its timeout.
    #[test]
    fn light_writers_never_miss_a_sleeper() {
        const WAITERS: usize = 4;
        const ROUNDS: u64 = 3000;
        let light = setup_light_writes(true);
        assert_eq!(light_writes().1, light);
        let cb = Arc::new(ControlBlock::new());
        let words: Arc<Vec<AtomicU64>> =
            Arc::new((0..WAITERS).map(|_| AtomicU64::new(0)).collect());
        let acks: Arc<Vec<AtomicU64>> = Arc::new((0..WAITERS).map(|_| AtomicU64::new(0)).collect());
        let long = Duration::from_secs(20);
        let p = policy(Duration::ZERO, long, Some(long));
        let waiters: Vec<_> = (0..WAITERS)
            .map(|i| round_waiter(&cb, &words, &acks, i, ROUNDS, p))
            .collect();
        // Two writers, two words each, in lockstep with the acks so that
        // the waiters are asleep (or falling asleep) when the words change.
        let writers: Vec<_> = (0..2)
            .map(|w| {
                let (cb, words, acks) = (cb.clone(), words.clone(), acks.clone());
                std::thread::spawn(move || {
                    for r in 1..=ROUNDS {
                        for i in [2 * w, 2 * w + 1] {
                            while acks[i].load(Ordering::Acquire) < r - 1 {
                                std::hint::spin_loop();
                                std::thread::yield_now();
                            }
                            words[i].store(r, Ordering::Relaxed);
                            // SAFETY: live control block.
                            unsafe { ring(&*cb, &[Span::bytes(64 * (i + 1), 8)]) };
                        }
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        for w in waiters {
            w.join().unwrap().unwrap();
        }
        assert_eq!(cb.waiters.load(Ordering::SeqCst), 0);
    }

    /// What a failed membarrier leaves: writers of this process fence, and
    /// the heap the waiter slept on is strict for every writer.
    #[test]
    fn a_failed_membarrier_makes_writes_fence() {
        let cb = ControlBlock::new();
        membarrier_failed(&cb);
        assert_eq!(cb.strict.load(Ordering::SeqCst), 1);
        assert!(!light_writes().0);
        // Fenced writers still wake their sleepers.
        let flag = AtomicU64::new(0);
        std::thread::scope(|s| {
            let t = s.spawn(|| {
                let long = Duration::from_secs(20);
                // SAFETY: `cb` outlives the scope.
                unsafe {
                    wait_until(
                        &cb,
                        policy(Duration::ZERO, long, Some(long)),
                        Span::bytes(4096, 8),
                        || flag.load(Ordering::Acquire) == 1,
                        || Ok::<(), ()>(()),
                        |_| (),
                    )
                }
            });
            while cb.waiters.load(Ordering::SeqCst) == 0 {
                std::thread::yield_now();
            }
            flag.store(1, Ordering::Relaxed);
            // SAFETY: live control block.
            unsafe { ring(&cb, &[Span::bytes(4096, 8)]) };
            assert!(t.join().unwrap().is_ok());
        });
    }

    #[test]
    fn liveness_error_ends_the_wait() {
        let cb = ControlBlock::new();
        let mut n = 0;
        // SAFETY: live control block on the stack.
        let r = unsafe {
            wait_until(
                &cb,
                policy(Duration::ZERO, Duration::from_millis(1), None),
                Span::ALL,
                || false,
                || {
                    n += 1;
                    if n > 3 {
                        Err("gone")
                    } else {
                        Ok(())
                    }
                },
                |_| "timeout",
            )
        };
        assert_eq!(r, Err("gone"));
        assert_eq!(cb.watch_all.load(Ordering::SeqCst), 0);
    }
}
