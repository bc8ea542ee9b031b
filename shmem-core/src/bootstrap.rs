//! The control-plane contract: how PEs find each other and exchange small data.

use crate::error::Result;
use crate::PeId;

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
}
