//! Process-wide state of the bindings: the initialised instances (so that
//! a numpy view can be traced back to the heap it lives in) and the Python
//! buffers that non-blocking operations still use.

use std::collections::BTreeMap;
use std::sync::Mutex;

use pyo3::buffer::PyUntypedBuffer;
use pyo3::prelude::*;
use shmem::Shmem;

use crate::errors::{error, OrPy};

/// Something a non-blocking operation reads or writes, kept alive (and,
/// for a buffer export, pinned) until the operation has completed.
pub(crate) enum Keep {
    /// A buffer-protocol export (numpy, bytes, memoryview ...).
    Export(#[allow(dead_code)] PyUntypedBuffer),
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
}

/// Releases what completed non-blocking operations kept alive.
pub(crate) fn quieted(instance: u32) {
    let kept = pending().remove(&instance);
    drop(kept);
}
