//! Blocking calls that Ctrl-C can interrupt.
//!
//! A blocking library call (a wait, a barrier, a collective, init,
//! synchronisation) runs on a worker thread while the calling thread waits
//! for it in slices of [`SLICE`] with the GIL released, running Python's
//! signal handlers between slices. A `KeyboardInterrupt` (or any exception
//! a handler raises) propagates at once; the call itself is abandoned to
//! its worker:
//!
//! * a wait keeps watching its variable until the condition holds, the job
//!   ends, or the process exits (it changes nothing);
//! * a collective (barrier, allocation, free, reductions, init, finalize)
//!   still completes when the other PEs take part, and every later ordered
//!   call of this process runs after it ([`run_ordered`]), so the PEs stay
//!   in step: retrying the call would run it twice.

use std::collections::BTreeMap;
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
static ORDER: Mutex<BTreeMap<u32, Arc<Mutex<()>>>> = Mutex::new(BTreeMap::new());

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
static MAIN_THREAD: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

shmem_core::config_var!(
    "SHMEM_PY_INTERRUPTIBLE",
    bool,
    "1",
    "Python: a blocking call on the main thread runs on a worker thread so that Ctrl-C interrupts it; 0 runs it on the calling thread (faster, not interruptible); other threads always run their calls in place"
);

/// Whether `SHMEM_PY_INTERRUPTIBLE=0` turned the hand-off off (read once;
/// a value that does not parse keeps the default and fails init, which
/// parses every variable).
fn hand_off_disabled() -> bool {
    static OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OFF.get_or_init(|| {
        shmem_core::Config::from_env()
            .and_then(|c| c.var::<bool>("SHMEM_PY_INTERRUPTIBLE"))
            .is_ok_and(|on| !on)
    })
}

/// Whether a blocking call from this thread goes to a worker: only on
/// Python's main thread (elsewhere no signal handler would run between
/// slices, so the hand-off would buy nothing) and unless
/// `SHMEM_PY_INTERRUPTIBLE=0`.
fn hands_off(py: Python<'_>) -> bool {
    if hand_off_disabled() {
        return false;
    }
    use std::sync::atomic::Ordering;
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
/// when it was, `Ok(false)` when the caller should block through [`run`].
pub(crate) fn poll_briefly<E: Send>(
    py: Python<'_>,
    ready: impl FnMut() -> Result<bool, E> + Send,
) -> Result<bool, E> {
    if !hands_off(py) {
        // [`run`] waits on this thread anyway.
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
pub(crate) fn run_ordered<T, F>(py: Python<'_>, instance: u32, f: F) -> PyResult<T>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let lock = ORDER
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .entry(instance)
        .or_default()
        .clone();
    run(py, move || {
        let _order = lock.lock().unwrap_or_else(|p| p.into_inner());
        f()
    })
}
