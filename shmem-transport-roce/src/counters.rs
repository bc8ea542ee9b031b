//! Issued and completed work requests of one engine, which `quiet` waits
//! on (shared by the software and libfabric providers).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};

/// Counts of one engine's work requests, the first error among them, and a
/// condition variable that every completion signals.
#[derive(Default)]
pub(crate) struct Counters {
    /// Work requests posted.
    pub(crate) issued: AtomicU64,
    /// Work requests finished (well or not).
    pub(crate) completed: AtomicU64,
    /// The first failure since the last `quiet` took it.
    pub(crate) error: Mutex<Option<String>>,
    /// Guards `cv`'s waits.
    pub(crate) lock: Mutex<()>,
    /// Signalled by every completion.
    pub(crate) cv: Condvar,
}

impl Counters {
    /// Records one finished work request (and its error, if the first).
    pub(crate) fn complete(&self, error: Option<&str>) {
        if let Some(e) = error {
            let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
            slot.get_or_insert_with(|| e.to_string());
        }
        self.completed.fetch_add(1, Ordering::AcqRel);
        let _g = self.lock.lock();
        self.cv.notify_all();
    }
}
