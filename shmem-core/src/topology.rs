//! Which PEs share a node, learned with one bootstrap allgather at init.

use crate::bootstrap::Bootstrap;
use crate::error::Result;
use crate::wire::{self, NodeRecord};
use crate::PeId;

/// Node membership of every PE of the job.
#[derive(Debug, Clone)]
pub struct Topology {
    /// Node index of each PE (nodes numbered by first appearance).
    pub node_of: Vec<usize>,
    /// Process id of each PE.
    pub pid_of: Vec<u32>,
    /// User id of each PE.
    pub uid_of: Vec<u32>,
    /// This PE.
    pub my_pe: PeId,
}

/// Identity of this node: host name, boot id and network namespace, so that
/// PEs in different network namespaces count as different nodes.
pub fn node_key() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let netns = std::fs::read_link("/proc/self/ns/net")
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    format!("{}|{}|{}", host.trim(), boot.trim(), netns)
}

impl Topology {
    /// Exchanges node identities over the bootstrap (collective).
    ///
    /// # Errors
    /// A bootstrap error from the allgather; [`Error::Bootstrap`](crate::Error::Bootstrap) when a PE's record is
    /// malformed.
    pub fn discover(bootstrap: &dyn Bootstrap) -> Result<Topology> {
        let key = node_key();
        // SAFETY: getuid has no preconditions.
        let uid = unsafe { libc::getuid() };
        let mine = NodeRecord {
            pid: std::process::id(),
            uid,
            node_key: key,
        };
        let all = bootstrap.allgather(&wire::encode(&mine))?;
        let mut keys: Vec<String> = Vec::new();
        let mut node_of = Vec::with_capacity(all.len());
        let mut pid_of = Vec::with_capacity(all.len());
        let mut uid_of = Vec::with_capacity(all.len());
        for m in &all {
            let NodeRecord {
                pid,
                uid,
                node_key: k,
            } = wire::decode("topology record", m)?;
            pid_of.push(pid);
            uid_of.push(uid);
            let idx = match keys.iter().position(|x| *x == k) {
                Some(i) => i,
                None => {
                    keys.push(k);
                    keys.len() - 1
                }
            };
            node_of.push(idx);
        }
        Ok(Topology {
            node_of,
            pid_of,
            uid_of,
            my_pe: bootstrap.rank(),
        })
    }

    /// Whether `pe` runs on this PE's node.
    pub fn same_node(&self, pe: PeId) -> bool {
        self.node_of.get(pe) == self.node_of.get(self.my_pe)
    }

    /// PEs on this PE's node, ascending.
    pub fn local_pes(&self) -> Vec<PeId> {
        (0..self.node_of.len())
            .filter(|&p| self.same_node(p))
            .collect()
    }

    /// Number of distinct nodes.
    pub fn n_nodes(&self) -> usize {
        self.node_of.iter().max().map_or(0, |m| m + 1)
    }
}
