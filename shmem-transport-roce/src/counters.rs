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
    /// Guards `cv`'s waits and counts the threads asleep on it: a
    /// completion wakes them only when there are some (a wake-up is a
    /// system call even with nobody to wake).
    pub(crate) lock: Mutex<usize>,
    /// Signalled by every completion.
    pub(crate) cv: Condvar,
}

impl Counters {
    /// Records one finished work request (and its error, if the first).
    pub(crate) fn complete(&self, error: Option<&str>) {
        if let Some(e) = error {
            self.record_error(e);
        }
        self.completed.fetch_add(1, Ordering::AcqRel);
        // A waiter counts itself and checks `completed` under the lock, so
        // one not counted yet sees this completion and does not sleep.
        let sleepers = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        if *sleepers > 0 {
            self.cv.notify_all();
        }
    }

    /// Keeps `e` for the next `quiet` unless an earlier failure is kept.
    pub(crate) fn record_error(&self, e: &str) {
        let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
        slot.get_or_insert_with(|| e.to_string());
    }

    /// Blocks until `completed` reaches `target`, re-checking every 20 ms.
    pub(crate) fn wait_for(&self, target: u64) {
        let mut g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        while self.completed.load(Ordering::Acquire) < target {
            *g += 1;
            g = self
                .cv
                .wait_timeout(g, std::time::Duration::from_millis(20))
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
            *g -= 1;
        }
    }
}
