//! Process-wide state of the bindings: the initialised instances (so that
//! a numpy view can be traced back to the heap it lives in) and the Python
//! buffers that non-blocking operations still use.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use pyo3::buffer::PyUntypedBuffer;
use pyo3::prelude::*;
use shmem::Shmem;

use crate::errors::{error, OrPy};
use crate::memory::Allocation;

/// Something a non-blocking operation reads or writes, kept alive (and,
/// for a buffer export, pinned) until the operation has completed.
pub(crate) enum Keep {
    /// A buffer-protocol export (numpy, bytes, memoryview ...).
    Export(#[allow(dead_code)] PyUntypedBuffer),
    /// The same, taken with the flags of a byte copy.
    Raw(#[allow(dead_code)] crate::memory::RawExport),
    /// A Python object whose memory does not move while it lives (a shmem
    /// Buffer, a torch tensor).
    Object(#[allow(dead_code)] Py<PyAny>),
}

static INSTANCES: Mutex<BTreeMap<u32, Shmem>> = Mutex::new(BTreeMap::new());
static PENDING: Mutex<BTreeMap<u32, Vec<Keep>>> = Mutex::new(BTreeMap::new());

fn instances() -> std::sync::MutexGuard<'static, BTreeMap<u32, Shmem>> {
    INSTANCES.lock().unwrap_or_else(|p| p.into_inner())
}

fn pending() -> std::sync::MutexGuard<'static, BTreeMap<u32, Vec<Keep>>> {
    PENDING.lock().unwrap_or_else(|p| p.into_inner())
}

/// Records a newly initialised instance.
pub(crate) fn register(sh: &Shmem) {
    instances().insert(sh.instance(), sh.clone());
}

/// Forgets a finalised instance (and whatever its operations kept alive).
pub(crate) fn unregister(instance: u32) {
    instances().remove(&instance);
    forget_stale(instance);
    let kept = pending().remove(&instance);
    drop(kept);
}

/// The current instance, or a `ShmemError` saying that init comes first.
pub(crate) fn current() -> PyResult<Shmem> {
    shmem::current().py()
}

/// Instance `id`, or the current one.
pub(crate) fn resolve(id: Option<u32>) -> PyResult<Shmem> {
    match id {
        None => current(),
        Some(i) => instances()
            .get(&i)
            .cloned()
            .ok_or_else(|| error(format!("shmem instance {i} is not initialized"))),
    }
}

/// Ids of the live instances.
pub(crate) fn ids() -> Vec<u32> {
    instances().keys().copied().collect()
}

/// The instance whose symmetric heap holds `addr`, and the heap offset.
pub(crate) fn owner_of(addr: usize) -> Option<(Shmem, usize)> {
    if let Ok(sh) = shmem::current() {
        if let Some(off) = sh.offset_of(addr as *const u8) {
            return Some((sh, off));
        }
    }
    instances()
        .values()
        .find_map(|sh| sh.offset_of(addr as *const u8).map(|off| (sh.clone(), off)))
}

/// Keeps `keep` alive until the instance's next `quiet` (or barrier).
pub(crate) fn keep_until_quiet(instance: u32, keep: Keep) {
    pending().entry(instance).or_default().push(keep);
    ANY_PENDING.store(true, Ordering::SeqCst);
}

/// Whether `PENDING` may hold something (skips its lock on every quiet and
/// barrier).
static ANY_PENDING: AtomicBool = AtomicBool::new(false);

/// Releases what completed non-blocking operations kept alive.
pub(crate) fn quieted(instance: u32) {
    if !ANY_PENDING.load(Ordering::SeqCst) {
        return;
    }
    let kept = {
        let mut p = pending();
        let kept = p.remove(&instance);
        if p.is_empty() {
            ANY_PENDING.store(false, Ordering::SeqCst);
        }
        kept
    };
    drop(kept);
}

// ----- freed allocations whose views are still alive -------------------------

/// An allocation freed while numpy/DLPack views of it were alive.
struct Stale {
    instance: u32,
    offset: usize,
    len: usize,
    alloc: Arc<Allocation>,
}

static STALE: Mutex<Vec<Stale>> = Mutex::new(Vec::new());
/// Whether `STALE` may be non-empty (skips the lock on the hot path).
static ANY_STALE: AtomicBool = AtomicBool::new(false);

/// Whether some freed range may still have live views (cheap).
pub(crate) fn any_stale() -> bool {
    ANY_STALE.load(Ordering::Acquire)
}

/// Records that `offset..offset+len` of `instance` was freed while views of
/// it were still exported.
pub(crate) fn add_stale(instance: u32, offset: usize, len: usize, alloc: Arc<Allocation>) {
    let mut s = STALE.lock().unwrap_or_else(|p| p.into_inner());
    s.push(Stale {
        instance,
        offset,
        len,
        alloc,
    });
    ANY_STALE.store(true, Ordering::Release);
}

/// If `offset..offset+len` of `instance` overlaps memory freed while views
/// of it are still alive, a description of it (the views of the freed
/// allocation cannot be told apart from views of a new one there).
pub(crate) fn stale_overlap(instance: u32, offset: usize, len: usize) -> Option<String> {
    if !ANY_STALE.load(Ordering::Acquire) {
        return None;
    }
    let mut s = STALE.lock().unwrap_or_else(|p| p.into_inner());
    s.retain(|z| z.alloc.exports() > 0);
    if s.is_empty() {
        ANY_STALE.store(false, Ordering::Release);
        return None;
    }
    let end = offset.saturating_add(len.max(1));
    s.iter()
        .find(|z| z.instance == instance && z.offset < end && offset < z.offset + z.len.max(1))
        .map(|z| {
            format!(
                "{} bytes at heap offset {:#x} (instance {}) were freed while {} view(s) of them \
                 were still alive",
                z.len,
                z.offset,
                z.instance,
                z.alloc.exports()
            )
        })
}

/// Forgets the stale ranges of a finalised instance.
fn forget_stale(instance: u32) {
    let mut s = STALE.lock().unwrap_or_else(|p| p.into_inner());
    s.retain(|z| z.instance != instance);
}
