//! Blocking calls that Ctrl-C can interrupt.
//!
//! Two ways, both only on Python's main thread (the one whose signal
//! handlers run) and unless `SHMEM_PY_INTERRUPTIBLE=0`:
//!
//! * In place ([`run_waiting`], [`run_ordered_waiting`]): calls that block
//!   only in the core's waits on symmetric memory (waits, signal waits,
//!   barriers, collectives) run on the calling thread with the GIL
//!   released, and their waits run Python's signal handlers each time they
//!   are about to sleep ([`shmem_core::wait::interruptible`]): never on
//!   the fast path, and at least every `SHMEM_WAIT_POLL` while they sleep.
//!   An exception a handler raises (`KeyboardInterrupt`) ends the call. A
//!   wait changed nothing; a collective (or barrier) stopped half way on
//!   this PE, so its instance is out of step with the other PEs and its
//!   later collectives raise ([`check_in_step`]) until it is finalized.
//!   `SHMEM_PY_HAND_OFF=1` hands these calls off as below instead.
//! * Handed off ([`run`], [`run_ordered`]): the other blocking calls (init,
//!   allocation and free, finalize, stream and handle synchronisation,
//!   a quiet that waits for a remote engine), which can block outside those
//!   waits, run on a worker thread while the calling thread waits for it in
//!   slices of [`SLICE`] with the GIL released, running Python's signal
//!   handlers between slices. An exception a handler raises propagates at
//!   once; the call itself is abandoned to its worker:
//!   - a wait keeps watching its variable until the condition holds, the
//!     job ends, or the process exits (it changes nothing);
//!   - a collective (barrier, allocation, free, reductions, init, finalize)
//!     still completes when the other PEs take part, and every later
//!     ordered call of this process runs after it ([`run_ordered`]), so
//!     the PEs stay in step: retrying the call would run it twice.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, Sender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pyo3::prelude::*;

use crate::errors::error;

/// Longest time between two checks for signals.
pub(crate) const SLICE: Duration = Duration::from_millis(20);

/// Idle workers kept for reuse.
const MAX_IDLE: usize = 8;

type Job = Box<dyn FnOnce() + Send + 'static>;

static IDLE: Mutex<Vec<Sender<Job>>> = Mutex::new(Vec::new());

/// Serialises the collectives of each instance (see the module docs).
static ORDER: Mutex<BTreeMap<u32, Arc<Order>>> = Mutex::new(BTreeMap::new());

/// The order of an instance's collectives in this process: each call takes
/// a ticket on the calling thread when it starts, so the order is the
/// order of the calls whichever thread (a worker, or the caller) runs them.
/// Taking a ticket whose turn is now and passing the turn on are two
/// atomic additions; the lock and condition variable serve only threads
/// that wait for an earlier call.
#[derive(Default)]
struct Order {
    /// Next ticket to hand out.
    next: AtomicU64,
    /// Ticket whose call may run now.
    now: AtomicU64,
    /// Threads waiting for their turn (changed under `lock`).
    waiting: AtomicU32,
    lock: Mutex<()>,
    turn: std::sync::Condvar,
}

impl Order {
    /// A ticket, and whether its turn is now (no earlier call pending).
    fn take(self: &Arc<Self>) -> (Ticket, bool) {
        let t = self.next.fetch_add(1, Ordering::SeqCst);
        (
            Ticket {
                order: self.clone(),
                number: t,
            },
            self.now.load(Ordering::SeqCst) == t,
        )
    }
}

/// A place in an [`Order`]; dropping it (the call ended, or unwound) lets
/// the next call run.
struct Ticket {
    order: Arc<Order>,
    number: u64,
}

impl Ticket {
    /// Blocks until every earlier call of the order has ended.
    fn wait_turn(&self) {
        let o = &self.order;
        if o.now.load(Ordering::SeqCst) == self.number {
            return;
        }
        let mut g = o.lock.lock().unwrap_or_else(|p| p.into_inner());
        // Counted before the check below: a thread passing the turn on
        // after this either sees the count (and notifies under the lock)
        // or made its change visible to the check.
        o.waiting.fetch_add(1, Ordering::SeqCst);
        while o.now.load(Ordering::SeqCst) != self.number {
            g = o.turn.wait(g).unwrap_or_else(|p| p.into_inner());
        }
        o.waiting.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        // A ticket whose call never ran (its job was never submitted)
        // still passes the turn on once it is its own.
        self.wait_turn();
        let o = &self.order;
        o.now.store(self.number + 1, Ordering::SeqCst);
        // Only when someone waits: a notification is a system call.
        if o.waiting.load(Ordering::SeqCst) > 0 {
            let _g = o.lock.lock().unwrap_or_else(|p| p.into_inner());
            o.turn.notify_all();
        }
    }
}

fn idle() -> std::sync::MutexGuard<'static, Vec<Sender<Job>>> {
    IDLE.lock().unwrap_or_else(|p| p.into_inner())
}

fn worker(first: Job) -> std::io::Result<()> {
    let (tx, rx) = mpsc::channel::<Job>();
    std::thread::Builder::new()
        .name("shmem-py-blocking".into())
        .spawn(move || {
            let mut job = first;
            loop {
                job();
                {
                    let mut pool = idle();
                    if pool.len() >= MAX_IDLE {
                        return;
                    }
                    pool.push(tx.clone());
                }
                match next_job(&rx) {
                    Some(j) => job = j,
                    None => return,
                }
            }
        })
        .map(|_| ())
}

/// How long an idle worker keeps the core with `yield_now` before sleeping
/// on its queue: back-to-back calls then skip a futex wake-up.
const YIELD_FOR: Duration = Duration::from_micros(50);

/// A worker's next job: yields briefly (back-to-back calls), then sleeps.
/// How long the calling thread yields before sleeping on the result (a
/// 2-PE barrier then costs about 5 us instead of 11).
const CALLER_YIELD_FOR: Duration = Duration::from_micros(50);

fn next_job(rx: &mpsc::Receiver<Job>) -> Option<Job> {
    let start = Instant::now();
    while start.elapsed() < YIELD_FOR {
        match rx.try_recv() {
            Ok(j) => return Some(j),
            Err(TryRecvError::Empty) => std::thread::yield_now(),
            Err(TryRecvError::Disconnected) => return None,
        }
    }
    rx.recv().ok()
}

fn submit(job: Job) -> PyResult<()> {
    let mut job = job;
    loop {
        let Some(tx) = idle().pop() else { break };
        match tx.send(job) {
            Ok(()) => return Ok(()),
            Err(e) => job = e.0,
        }
    }
    worker(job).map_err(|e| error(format!("cannot start a worker thread: {e}")))
}

/// Python's main thread (`PyThread_get_thread_ident`), the only one whose
/// signal handlers run; 0 until known.
static MAIN_THREAD: AtomicU64 = AtomicU64::new(0);

shmem_core::config_var!(
    "SHMEM_PY_INTERRUPTIBLE",
    bool,
    "1",
    "Python: Ctrl-C (a signal handler's exception) interrupts blocking calls on the main thread; 0 runs every call to its end on the calling thread (other threads always do)"
);

shmem_core::config_var!(
    "SHMEM_PY_HAND_OFF",
    bool,
    "0",
    "Python: 1 runs waits, barriers and collectives of the main thread on a worker thread too, so that an interrupted collective completes later and its instance stays usable (costs microseconds per call); 0 runs them in place, their waits running signal handlers when they sleep"
);

/// A boolean variable of this module, read once (a value that does not
/// parse keeps the default and fails init, which parses every variable).
fn flag(name: &'static str, default: bool) -> bool {
    shmem_core::Config::from_env()
        .and_then(|c| c.var::<bool>(name))
        .unwrap_or(default)
}

/// Whether `SHMEM_PY_INTERRUPTIBLE=0` turned interruption off.
fn interruption_disabled() -> bool {
    static OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OFF.get_or_init(|| !flag("SHMEM_PY_INTERRUPTIBLE", true))
}

/// Whether `SHMEM_PY_HAND_OFF=1` asked for waits and collectives to be
/// handed off too.
fn hand_off_all() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| flag("SHMEM_PY_HAND_OFF", false))
}

/// Whether blocking calls from this thread are made interruptible: only on
/// Python's main thread (elsewhere no signal handler runs) and unless
/// `SHMEM_PY_INTERRUPTIBLE=0`.
fn hands_off(py: Python<'_>) -> bool {
    if interruption_disabled() {
        return false;
    }
    let mut main = MAIN_THREAD.load(Ordering::Relaxed);
    if main == 0 {
        main = py
            .import("threading")
            .and_then(|t| t.call_method0("main_thread"))
            .and_then(|m| m.getattr("ident"))
            .and_then(|i| i.extract::<u64>())
            .unwrap_or(u64::MAX);
        MAIN_THREAD.store(main, Ordering::Relaxed);
    }
    // SAFETY: a plain query of the calling thread's identity.
    let me = unsafe { pyo3::ffi::PyThread_get_thread_ident() };
    // c_ulong is u64 here, u32 on other targets.
    #[allow(clippy::useless_conversion)]
    let me = u64::from(me);
    me == main
}

/// Runs `f` on a worker thread and waits for it, interruptibly (see the
/// module docs). Returns `f`'s result, or the exception a signal handler
/// raised (`KeyboardInterrupt`). From a thread other than Python's main
/// one, or with `SHMEM_PY_INTERRUPTIBLE=0`, `f` runs on the calling thread
/// with the GIL released instead (no hand-off; not interruptible).
pub(crate) fn run<T, F>(py: Python<'_>, f: F) -> PyResult<T>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    if !hands_off(py) {
        return Ok(py.detach(f));
    }
    let (tx, rx) = mpsc::sync_channel::<T>(1);
    submit(Box::new(move || {
        let _ = tx.send(f());
    }))?;
    // Short calls: yield the core to the worker (and the peers) briefly.
    let (quick, rx) = py.detach(move || {
        let start = Instant::now();
        while start.elapsed() < CALLER_YIELD_FOR {
            match rx.try_recv() {
                Ok(v) => return (Some(Ok(v)), rx),
                Err(TryRecvError::Empty) => std::thread::yield_now(),
                Err(TryRecvError::Disconnected) => return (Some(Err(())), rx),
            }
        }
        (None, rx)
    });
    match quick {
        Some(Ok(v)) => return Ok(v),
        Some(Err(())) => {
            return Err(error(
                "a blocking shmem call failed on its worker thread (it panicked)",
            ))
        }
        None => {}
    }
    let mut rx = rx;
    loop {
        let (got, back) = py.detach(move || (rx.recv_timeout(SLICE), rx));
        rx = back;
        match got {
            Ok(v) => return Ok(v),
            Err(RecvTimeoutError::Timeout) => py.check_signals()?,
            Err(RecvTimeoutError::Disconnected) => {
                return Err(error(
                    "a blocking shmem call failed on its worker thread (it panicked)",
                ))
            }
        }
    }
}

/// Polls `ready` (a non-blocking test) on the calling thread, without the
/// GIL, yielding the core in between, for a short while: a wait that is
/// about to be satisfied then avoids the hand-off to a worker. `Ok(true)`
/// when it was, `Ok(false)` when the caller should block through
/// [`run_waiting`].
pub(crate) fn poll_briefly<E: Send>(
    py: Python<'_>,
    ready: impl FnMut() -> Result<bool, E> + Send,
) -> Result<bool, E> {
    if !hands_off(py) || !hand_off_all() {
        // [`run_waiting`] waits on this thread anyway.
        return Ok(false);
    }
    let mut ready = ready;
    py.detach(move || {
        let start = Instant::now();
        loop {
            if ready()? {
                return Ok(true);
            }
            if start.elapsed() >= CALLER_YIELD_FOR {
                return Ok(false);
            }
            std::thread::yield_now();
        }
    })
}

/// [`run`] for collectives of `instance`: runs after every ordered call of
/// that instance this process started before, including interrupted ones
/// still in progress.
///
/// # Errors
/// A `ShmemError` when an interrupted call left the instance out of step
/// (see [`check_in_step`]); the exception a signal handler raised.
pub(crate) fn run_ordered<T, F>(py: Python<'_>, instance: u32, f: F) -> PyResult<T>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    check_in_step(instance)?;
    let (ticket, _) = order(instance).take();
    run(py, move || {
        ticket.wait_turn();
        let out = f();
        drop(ticket);
        out
    })
}

thread_local! {
    /// The order this thread used last (orders are never removed from
    /// `ORDER`, so it stays the instance's).
    static LAST_ORDER: std::cell::RefCell<Option<(u32, Arc<Order>)>> =
        const { std::cell::RefCell::new(None) };
}

fn order(instance: u32) -> Arc<Order> {
    if let Some(o) = LAST_ORDER.with_borrow(|l| {
        l.as_ref()
            .filter(|(i, _)| *i == instance)
            .map(|(_, o)| o.clone())
    }) {
        return o;
    }
    let o = ORDER
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .entry(instance)
        .or_default()
        .clone();
    LAST_ORDER.set(Some((instance, o.clone())));
    o
}

thread_local! {
    /// The exception a signal handler raised inside a wait of this thread.
    static RAISED: std::cell::RefCell<Option<PyErr>> = const { std::cell::RefCell::new(None) };
}

/// The check the core's waits make before they sleep in [`run_waiting`]:
/// runs Python's signal handlers; true (end the wait) when one raised.
fn signal_raised() -> bool {
    Python::attach(|py| match py.check_signals() {
        Ok(()) => false,
        Err(e) => {
            RAISED.with(|r| *r.borrow_mut() = Some(e));
            true
        }
    })
}

/// Runs `f` on this thread without the GIL, its sleeping waits running
/// signal handlers (see the module docs). `Err(exception)` when a handler
/// raised, else `f`'s result.
fn in_place_interruptibly<T, F>(py: Python<'_>, f: F) -> PyResult<T>
where
    T: Send,
    F: FnOnce() -> T + Send,
{
    RAISED.with(|r| r.borrow_mut().take());
    let out = py.detach(|| shmem_core::wait::interruptible(signal_raised, f));
    match RAISED.with(|r| r.borrow_mut().take()) {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// Runs a call that blocks only in the core's waits on symmetric memory
/// (a wait, a signal wait): in place on every thread, interruptibly on
/// Python's main thread (see the module docs); handed off like [`run`]
/// with `SHMEM_PY_HAND_OFF=1`. Interrupted, it changed nothing.
pub(crate) fn run_waiting<T, F>(py: Python<'_>, f: F) -> PyResult<T>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    if !hands_off(py) {
        return Ok(py.detach(f));
    }
    if hand_off_all() {
        return run(py, f);
    }
    in_place_interruptibly(py, f)
}

/// Instances whose collective was interrupted half way on this PE, with
/// what the interruption said.
static OUT_OF_STEP: Mutex<BTreeMap<u32, String>> = Mutex::new(BTreeMap::new());

/// Whether `OUT_OF_STEP` may be non-empty (skips its lock on every call).
static ANY_OUT_OF_STEP: AtomicBool = AtomicBool::new(false);

fn out_of_step() -> std::sync::MutexGuard<'static, BTreeMap<u32, String>> {
    OUT_OF_STEP.lock().unwrap_or_else(|p| p.into_inner())
}

/// Records that a collective of `instance` was interrupted half way.
fn mark_out_of_step(instance: u32, why: String) {
    let mut m = out_of_step();
    m.insert(instance, why);
    ANY_OUT_OF_STEP.store(true, Ordering::SeqCst);
}

/// Fails when a collective of `instance` was interrupted on this PE before
/// it completed (in place, see the module docs): the other PEs may still
/// be inside it, so a later collective would pair with the wrong call of
/// theirs. Only finalize is left (then init again), or ending the process.
pub(crate) fn check_in_step(instance: u32) -> PyResult<()> {
    if !ANY_OUT_OF_STEP.load(Ordering::SeqCst) {
        return Ok(());
    }
    match out_of_step().get(&instance) {
        None => Ok(()),
        Some(why) => Err(error(format!(
            "shmem instance {instance} is out of step with the other PEs: a collective call on \
             this PE was interrupted before it completed ({why}), and the other PEs may still \
             be inside it; only finalize (then init again) or ending the process is left for \
             this instance (SHMEM_PY_HAND_OFF=1 lets interrupted collectives complete in the \
             background instead)"
        ))),
    }
}

/// Forgets that `instance` was out of step (it is being finalized).
pub(crate) fn forget_out_of_step(instance: u32) {
    let mut m = out_of_step();
    m.remove(&instance);
    if m.is_empty() {
        ANY_OUT_OF_STEP.store(false, Ordering::SeqCst);
    }
}

/// [`run_waiting`] for a collective of `instance` (a barrier, a
/// reduction): in order with the instance's other collectives like
/// [`run_ordered`]. Interrupted in place, it leaves the instance out of
/// step ([`check_in_step`]). While an earlier call of the instance that
/// an interrupt abandoned to a worker still runs, this one is handed off
/// too (so that waiting for it stays interruptible).
///
/// # Errors
/// As [`run_ordered`].
pub(crate) fn run_ordered_waiting<T, F>(py: Python<'_>, instance: u32, f: F) -> PyResult<T>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    if hands_off(py) && hand_off_all() {
        return run_ordered(py, instance, f);
    }
    check_in_step(instance)?;
    let (ticket, now) = order(instance).take();
    if !hands_off(py) {
        return Ok(py.detach(move || {
            ticket.wait_turn();
            let out = f();
            drop(ticket);
            out
        }));
    }
    if !now {
        // An earlier call (one an interrupt abandoned to its worker) is
        // still running: wait for it, and run this one, on a worker too.
        return run(py, move || {
            ticket.wait_turn();
            let out = f();
            drop(ticket);
            out
        });
    }
    let ran = in_place_interruptibly(py, move || {
        let out = f();
        drop(ticket);
        out
    });
    if let Err(e) = &ran {
        mark_out_of_step(instance, e.to_string());
    }
    ran
}
