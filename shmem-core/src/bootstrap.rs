//! The control-plane contract: how PEs find each other and exchange small data.

use std::sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::PeId;

/// What the data plane knows about the job's health, readable on every
/// operation for the price of one relaxed atomic load.
///
/// The control plane marks a PE dead as soon as it learns of the death (the
/// PE's store connection closed, or a launcher reaped it); the runtime marks
/// itself finalized. While [`PeerHealth::word`] is zero nothing needs a
/// closer look; otherwise [`PeerHealth::check`] tells whether an operation
/// may proceed.
#[derive(Debug, Default)]
pub struct PeerHealth {
    word: AtomicU64,
    dead: Mutex<Vec<(PeId, String)>>,
}

impl PeerHealth {
    /// Bit of [`PeerHealth::word`]: the runtime has been finalized.
    pub const FINALIZED: u64 = 1;
    /// Bit of [`PeerHealth::word`]: at least one PE is dead.
    pub const PEER_DEAD: u64 = 2;

    /// A record with every PE alive.
    pub fn new() -> PeerHealth {
        PeerHealth::default()
    }

    /// Zero while every PE is alive and the runtime live (one relaxed load).
    #[inline]
    pub fn word(&self) -> u64 {
        self.word.load(Ordering::Relaxed)
    }

    /// Records that `pe` exited (`detail`: what is known of how). The first
    /// detail recorded for a PE is kept.
    pub fn mark_dead(&self, pe: PeId, detail: &str) {
        let mut dead = self.dead.lock().unwrap_or_else(|p| p.into_inner());
        if !dead.iter().any(|(p, _)| *p == pe) {
            dead.push((pe, detail.to_string()));
        }
        self.word.fetch_or(Self::PEER_DEAD, Ordering::Release);
    }

    /// Records that the runtime was finalized.
    pub fn mark_finalized(&self) {
        self.word.fetch_or(Self::FINALIZED, Ordering::Release);
    }

    /// The PEs known dead, in the order they were reported.
    pub fn dead(&self) -> Vec<(PeId, String)> {
        self.dead.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The slow path behind a non-zero [`PeerHealth::word`].
    ///
    /// # Errors
    /// [`Error::NotInitialized`] after finalize; [`Error::PeerExited`] when
    /// `target` is a dead PE, or, for `target == None` (an operation on every
    /// peer such as `quiet`), when any PE is dead. The error names the first
    /// PE that died, the likely cause of the later deaths, and says so when
    /// that is not `target`.
    #[cold]
    pub fn check(&self, target: Option<PeId>) -> Result<()> {
        let w = self.word.load(Ordering::Acquire);
        if w & Self::FINALIZED != 0 {
            return Err(Error::NotInitialized);
        }
        if w & Self::PEER_DEAD == 0 {
            return Ok(());
        }
        let dead = self.dead.lock().unwrap_or_else(|p| p.into_inner());
        let Some((first, why)) = dead.first() else {
            return Ok(());
        };
        match target {
            // A target that died after another PE most likely stopped
            // because of that death: name the first one, the cause.
            Some(pe) if pe != *first => match dead.iter().any(|(p, _)| *p == pe) {
                true => Err(Error::PeerExited {
                    pe: *first,
                    detail: format!("{why} (PE {pe}, the one this call needed, exited after it)"),
                }),
                false => Ok(()),
            },
            _ => Err(Error::PeerExited {
                pe: *first,
                detail: why.clone(),
            }),
        }
    }
}

/// What this PE is blocked in, for the hang report: the outermost
/// collective, allocation or wait it has entered. Entering costs a few
/// atomic stores (a sequence lock); the control plane reads it from another
/// thread.
#[derive(Debug, Default)]
pub struct Activity {
    /// Nesting depth of entered calls (only the outermost is recorded).
    depth: AtomicUsize,
    /// Sequence lock over the fields below: odd while they are written,
    /// bumped by two on every outermost entry, so a watcher that sees the
    /// same even value far apart knows the PE stayed in one call.
    generation: AtomicU64,
    call_ptr: AtomicPtr<u8>,
    call_len: AtomicUsize,
    team_ptr: AtomicPtr<u8>,
    team_len: AtomicUsize,
    seq: AtomicU64,
    /// Source location of the outermost call (`#[track_caller]`), or null.
    location: AtomicPtr<std::panic::Location<'static>>,
}

/// Front ends whose callers' locations mean nothing to their users (the C
/// ABI, Python) turn the locations off for the process.
static HIDE_LOCATIONS: AtomicBool = AtomicBool::new(false);

/// Leaves the call entered with [`Activity::enter`] when dropped.
#[derive(Debug)]
pub struct ActivityGuard<'a>(Option<&'a Activity>);

impl Drop for ActivityGuard<'_> {
    fn drop(&mut self) {
        if let Some(a) = self.0 {
            a.depth.fetch_sub(1, Ordering::Release);
        }
    }
}

thread_local! {
    /// Set on service threads whose endless waits are not the PE's calls.
    static MUTED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// The outermost call this thread deferred ([`Activity::defer`]).
    static DEFERRED: std::cell::Cell<Option<Deferred>> = const { std::cell::Cell::new(None) };
}

/// A call to record once one of its waits starts sleeping.
#[derive(Debug, Clone, Copy)]
struct Deferred {
    /// The activity it belongs to (only compared, never dereferenced).
    activity: *const Activity,
    call: &'static str,
    team: &'static str,
    seq: u64,
    location: &'static std::panic::Location<'static>,
}

/// Forgets the call deferred with [`Activity::defer`] when dropped.
#[derive(Debug)]
pub struct DeferGuard {
    /// This guard deferred the thread's outermost call.
    set: bool,
    /// Not `Send`: the record is the creating thread's.
    _thread: std::marker::PhantomData<*const ()>,
}

impl Drop for DeferGuard {
    fn drop(&mut self) {
        if self.set {
            DEFERRED.with(|d| d.set(None));
        }
    }
}

/// A snapshot of [`Activity`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActivityState {
    /// Changes whenever the PE enters a new outermost call.
    pub generation: u64,
    /// `call #seq (team T)`, or `None` when the PE is in no blocking call.
    pub label: Option<String>,
    /// `file:line` of the user's call, where the front end records it.
    pub location: Option<String>,
}

impl Activity {
    /// Nothing entered yet.
    pub fn new() -> Activity {
        Activity::default()
    }

    /// Records entry into `call` number `seq` (on `team`, if not empty).
    /// Only the outermost call is recorded; the guard leaves it.
    #[inline]
    #[track_caller]
    pub fn enter(&self, call: &'static str, team: &'static str, seq: u64) -> ActivityGuard<'_> {
        self.enter_at(call, team, seq, std::panic::Location::caller())
    }

    /// [`Activity::enter`] with the source location to report.
    #[inline]
    pub fn enter_at(
        &self,
        call: &'static str,
        team: &'static str,
        seq: u64,
        location: &'static std::panic::Location<'static>,
    ) -> ActivityGuard<'_> {
        if MUTED.with(|m| m.get()) {
            return ActivityGuard(None);
        }
        if self.depth.fetch_add(1, Ordering::AcqRel) == 0 {
            let g = self.generation.load(Ordering::Relaxed);
            self.generation.store(g | 1, Ordering::Relaxed);
            fence(Ordering::Release);
            self.call_ptr
                .store(call.as_ptr() as *mut u8, Ordering::Relaxed);
            self.call_len.store(call.len(), Ordering::Relaxed);
            self.team_ptr
                .store(team.as_ptr() as *mut u8, Ordering::Relaxed);
            self.team_len.store(team.len(), Ordering::Relaxed);
            self.seq.store(seq, Ordering::Relaxed);
            let loc = if HIDE_LOCATIONS.load(Ordering::Relaxed) {
                std::ptr::null_mut()
            } else {
                location as *const std::panic::Location<'static> as *mut _
            };
            self.location.store(loc, Ordering::Relaxed);
            self.generation.store((g | 1) + 1, Ordering::Release);
        }
        ActivityGuard(Some(self))
    }

    /// Notes that this thread is in `call` number `seq` (on `team`, if not
    /// empty) without recording it: the call is recorded, as by
    /// [`Activity::enter`], only when a wait inside it starts sleeping
    /// ([`Activity::enter_waiting`]). A call that never blocks (a
    /// collective whose peers are there) then costs no atomic operation
    /// here, where `enter` costs two (5 ns each on this kind of VM), and
    /// a PE stuck in it is still named in the hang report: what keeps it
    /// there is a wait. Only the thread's outermost deferred call counts;
    /// the guard forgets it.
    #[inline]
    #[track_caller]
    pub fn defer(&self, call: &'static str, team: &'static str, seq: u64) -> DeferGuard {
        self.defer_at(call, team, seq, std::panic::Location::caller())
    }

    /// [`Activity::defer`] with the source location to report.
    #[inline]
    pub fn defer_at(
        &self,
        call: &'static str,
        team: &'static str,
        seq: u64,
        location: &'static std::panic::Location<'static>,
    ) -> DeferGuard {
        let set = DEFERRED.with(|d| {
            if d.get().is_some() {
                return false;
            }
            d.set(Some(Deferred {
                activity: self,
                call,
                team,
                seq,
                location,
            }));
            true
        });
        DeferGuard {
            set,
            _thread: std::marker::PhantomData,
        }
    }

    /// Where the user made the call this thread deferred on this activity
    /// ([`Activity::defer`]), if any.
    pub fn deferred_location(&self) -> Option<&'static std::panic::Location<'static>> {
        DEFERRED
            .with(|d| d.get())
            .filter(|d| std::ptr::eq(d.activity, self))
            .map(|d| d.location)
    }

    /// Records, for a wait that starts sleeping, the call this thread
    /// deferred on this activity ([`Activity::defer`]), or else `call`
    /// itself (number `seq`, called at `location`).
    pub fn enter_waiting(
        &self,
        call: &'static str,
        seq: u64,
        location: &'static std::panic::Location<'static>,
    ) -> ActivityGuard<'_> {
        match DEFERRED.with(|d| d.get()) {
            Some(d) if std::ptr::eq(d.activity, self) => {
                self.enter_at(d.call, d.team, d.seq, d.location)
            }
            _ => self.enter_at(call, "", seq, location),
        }
    }

    /// Leaves source locations out of every hang report of this process:
    /// for front ends (C, Python) where the location would name the
    /// library's own glue code rather than the user's call.
    pub fn hide_source_locations() {
        HIDE_LOCATIONS.store(true, Ordering::Relaxed);
    }

    /// Keeps the calling thread's calls out of every [`Activity`]: for a
    /// library service thread whose waits are not what the PE is doing.
    pub fn mute_this_thread() {
        MUTED.with(|m| m.set(true));
    }

    /// Changes whenever the PE enters a new outermost call.
    #[inline]
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire) & !1
    }

    /// Whether the PE is inside a recorded call (one relaxed load).
    #[inline]
    pub fn busy(&self) -> bool {
        self.depth.load(Ordering::Relaxed) != 0
    }

    /// What the PE is in now.
    pub fn state(&self) -> ActivityState {
        loop {
            let g = self.generation.load(Ordering::Acquire);
            let busy = self.depth.load(Ordering::Acquire) != 0;
            let fields = (
                self.call_ptr.load(Ordering::Relaxed),
                self.call_len.load(Ordering::Relaxed),
                self.team_ptr.load(Ordering::Relaxed),
                self.team_len.load(Ordering::Relaxed),
                self.seq.load(Ordering::Relaxed),
                self.location.load(Ordering::Relaxed),
            );
            fence(Ordering::Acquire);
            if g & 1 == 1 || self.generation.load(Ordering::Relaxed) != g {
                std::hint::spin_loop();
                continue;
            }
            let (cp, cl, tp, tl, seq, loc) = fields;
            if !busy || cp.is_null() {
                return ActivityState {
                    generation: g,
                    label: None,
                    location: None,
                };
            }
            // SAFETY: a consistent snapshot (the sequence lock held still)
            // of pointer and length pairs taken from `&'static str`s.
            let (call, team) = unsafe {
                (
                    std::str::from_utf8_unchecked(std::slice::from_raw_parts(cp, cl)),
                    if tp.is_null() {
                        ""
                    } else {
                        std::str::from_utf8_unchecked(std::slice::from_raw_parts(tp, tl))
                    },
                )
            };
            let mut label = call.to_string();
            if seq != 0 {
                label.push_str(&format!(" #{seq}"));
            }
            if !team.is_empty() {
                label.push_str(&format!(" (team {team})"));
            }
            // SAFETY: null or a `&'static Location` stored by `enter_at`.
            let location = unsafe { loc.as_ref() }.map(|l| format!("{}:{}", l.file(), l.line()));
            return ActivityState {
                generation: g,
                label: Some(label),
                location,
            };
        }
    }
}

/// When and how the control plane reports a PE stuck in one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HangPolicy {
    /// Report after this long in one call (`SHMEM_HANG_REPORT`).
    pub report_after: Duration,
    /// End the job after printing the report (`SHMEM_HANG_ABORT`).
    pub abort: bool,
}

/// Control plane of one job: rank, size and a few slow collectives over bytes.
///
/// Implementations must bound every call by a timeout, and must fail fast
/// (naming the PE) once a member of the job has exited: [`Bootstrap::check_peers`]
/// is cheap and is polled by every blocking wait of the data plane.
pub trait Bootstrap: Send + Sync {
    /// This PE's rank in `0..size()`.
    fn rank(&self) -> PeId;
    /// Number of PEs in the job.
    fn size(&self) -> usize;
    /// Every PE contributes `data`; returns all contributions indexed by rank.
    ///
    /// # Errors
    /// When a PE has exited or the job was aborted (naming the PE), or the call times out.
    fn allgather(&self, data: &[u8]) -> Result<Vec<Vec<u8>>>;
    /// Returns once every PE has entered the barrier.
    ///
    /// # Errors
    /// As [`Bootstrap::allgather`].
    fn barrier(&self) -> Result<()> {
        self.allgather(&[]).map(|_| ())
    }
    /// Returns `root`'s `data` on every PE (non-roots' `data` is ignored).
    ///
    /// # Errors
    /// [`crate::Error::PeOutOfRange`] for a bad `root`; as [`Bootstrap::allgather`].
    fn broadcast(&self, root: PeId, data: &[u8]) -> Result<Vec<u8>> {
        let mut all = self.allgather(data)?;
        if root >= all.len() {
            return Err(crate::Error::PeOutOfRange {
                pe: root,
                n_pes: all.len(),
            });
        }
        Ok(std::mem::take(&mut all[root]))
    }
    /// `Ok` while every PE is alive; the error names a PE that has exited
    /// (or the PE that aborted the job). Must be cheap: waits poll it.
    ///
    /// # Errors
    /// [`crate::Error::PeerExited`] or [`crate::Error::Aborted`] naming the PE.
    fn check_peers(&self) -> Result<()>;
    /// Ends the whole job: every PE exits with `status` (OpenSHMEM `global_exit`).
    /// Returns only if the message could not be delivered.
    ///
    /// # Errors
    /// When the message could not be delivered to the job.
    fn abort(&self, status: i32, message: &str) -> Result<()>;
    /// The local IP address this PE uses to reach the job's control plane:
    /// an address its peers can reach it at (engines bind their listeners
    /// there). `None` if unknown.
    fn local_ip(&self) -> Option<std::net::IpAddr> {
        None
    }
    /// Leaves the job cleanly (collective). Later calls fail.
    ///
    /// # Errors
    /// When leaving fails: a PE died, the job was aborted, or the final exchange timed out.
    fn finalize(&self) -> Result<()>;
    /// Asks the control plane to mark PEs dead in `health` as soon as it
    /// learns of their death (including deaths already known). The default
    /// does nothing: such a bootstrap only reports deaths through
    /// [`Bootstrap::check_peers`].
    fn watch_peers(&self, health: std::sync::Arc<PeerHealth>) {
        let _ = health;
    }
    /// Asks the control plane to watch `activity` and, when this PE stays
    /// in one call longer than `policy.report_after`, to have every PE
    /// report what it is doing and one PE print the table. The default does
    /// nothing (no hang report).
    fn watch_activity(&self, activity: std::sync::Arc<Activity>, policy: HangPolicy) {
        let _ = (activity, policy);
    }
    /// One-line summary of the last hang report, if one ran (timeouts cite
    /// it: it names the PEs that diverged or did not answer).
    fn hang_summary(&self) -> Option<String> {
        None
    }
    /// Tells the job why this PE is failing (a timeout, say), so that if it
    /// exits, the others hear the cause rather than only that it exited.
    fn note_failure(&self, what: &str) {
        let _ = what;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_names_the_dead_pe_only_for_operations_aimed_at_it() {
        let h = PeerHealth::new();
        assert_eq!(h.word(), 0);
        assert!(h.check(Some(1)).is_ok());
        h.mark_dead(2, "killed by signal 9");
        h.mark_dead(2, "a later report");
        assert_ne!(h.word(), 0);
        assert!(h.check(Some(1)).is_ok());
        let e = h.check(Some(2)).unwrap_err().to_string();
        assert_eq!(e, "PE 2 exited: killed by signal 9");
        let e = h.check(None).unwrap_err().to_string();
        assert!(e.contains("PE 2 exited"), "{e}");
        // A later death points at the first one, its likely cause.
        h.mark_dead(0, "connection closed");
        assert!(h.check(Some(1)).is_ok());
        let e = h.check(Some(0)).unwrap_err().to_string();
        assert_eq!(
            e,
            "PE 2 exited: killed by signal 9 (PE 0, the one this call needed, exited after it)"
        );
        h.mark_finalized();
        assert!(matches!(h.check(Some(1)), Err(Error::NotInitialized)));
    }

    #[test]
    fn activity_records_the_outermost_call() {
        let a = Activity::new();
        assert_eq!(a.state().label, None);
        {
            let _outer = a.enter("barrier", "WORLD", 7);
            let g = a.state().generation;
            {
                let _inner = a.enter("wait_until", "", 1);
                assert_eq!(a.state().label.as_deref(), Some("barrier #7 (team WORLD)"));
                assert_eq!(a.state().generation, g);
                // The outermost call's location: the `enter` above.
                let at = a.state().location.unwrap_or_default();
                assert!(at.starts_with("shmem-core/src/bootstrap.rs:"), "{at}");
            }
            assert!(a.busy());
        }
        assert!(!a.busy());
        assert_eq!(a.state().label, None);
        let w = a.enter("wait_until", "", 2);
        assert_eq!(a.state().label.as_deref(), Some("wait_until #2"));
        drop(w);
        // A deferred call is recorded only by a wait that sleeps, with its
        // own label and location; another activity's waits do not see it.
        {
            let _deferred = a.defer("fcollect", "SHARED", 9);
            let _inner = a.defer("barrier", "WORLD", 10);
            assert!(!a.busy());
            let other = Activity::new();
            drop(other.enter_waiting("wait_until", 0, std::panic::Location::caller()));
            let w = a.enter_waiting("wait_until", 0, std::panic::Location::caller());
            assert_eq!(
                a.state().label.as_deref(),
                Some("fcollect #9 (team SHARED)")
            );
            let at = a.state().location.unwrap_or_default();
            assert!(at.starts_with("shmem-core/src/bootstrap.rs:"), "{at}");
            drop(w);
            assert!(!a.busy());
        }
        let w = a.enter_waiting("wait_until", 3, std::panic::Location::caller());
        assert_eq!(a.state().label.as_deref(), Some("wait_until #3"));
        drop(w);
        // A muted service thread's calls are not the PE's.
        std::thread::scope(|s| {
            s.spawn(|| {
                Activity::mute_this_thread();
                let _svc = a.enter("service", "", 1);
                assert!(!a.busy());
                assert_eq!(a.state().label, None);
            });
        });
    }
}
