//! The control-plane contract: how PEs find each other and exchange small data.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

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
    /// peer such as `quiet`), when any PE is dead.
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
        let hit = match target {
            Some(pe) => dead.iter().find(|(p, _)| *p == pe),
            None => dead.first(),
        };
        match hit {
            Some((pe, detail)) => Err(Error::PeerExited {
                pe: *pe,
                detail: detail.clone(),
            }),
            None => Ok(()),
        }
    }
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
    fn allgather(&self, data: &[u8]) -> Result<Vec<Vec<u8>>>;
    /// Returns once every PE has entered the barrier.
    fn barrier(&self) -> Result<()> {
        self.allgather(&[]).map(|_| ())
    }
    /// Returns `root`'s `data` on every PE (non-roots' `data` is ignored).
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
    fn check_peers(&self) -> Result<()>;
    /// Ends the whole job: every PE exits with `status` (OpenSHMEM `global_exit`).
    /// Returns only if the message could not be delivered.
    fn abort(&self, status: i32, message: &str) -> Result<()>;
    /// The local IP address this PE uses to reach the job's control plane:
    /// an address its peers can reach it at (engines bind their listeners
    /// there). `None` if unknown.
    fn local_ip(&self) -> Option<std::net::IpAddr> {
        None
    }
    /// Leaves the job cleanly (collective). Later calls fail.
    fn finalize(&self) -> Result<()>;
    /// Asks the control plane to mark PEs dead in `health` as soon as it
    /// learns of their death (including deaths already known). The default
    /// does nothing: such a bootstrap only reports deaths through
    /// [`Bootstrap::check_peers`].
    fn watch_peers(&self, health: std::sync::Arc<PeerHealth>) {
        let _ = health;
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
        h.mark_finalized();
        assert!(matches!(h.check(Some(1)), Err(Error::NotInitialized)));
    }
}
