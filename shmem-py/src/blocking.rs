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
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

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
                match rx.recv() {
                    Ok(j) => job = j,
                    Err(_) => return,
                }
            }
        })
        .map(|_| ())
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

/// Runs `f` on a worker thread and waits for it, interruptibly (see the
/// module docs). Returns `f`'s result, or the exception a signal handler
/// raised (`KeyboardInterrupt`).
pub(crate) fn run<T, F>(py: Python<'_>, f: F) -> PyResult<T>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let (tx, rx) = mpsc::sync_channel::<T>(1);
    submit(Box::new(move || {
        let _ = tx.send(f());
    }))?;
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
