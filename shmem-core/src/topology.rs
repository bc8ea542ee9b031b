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
    /// Machine index of each PE: PEs that share a kernel (the same boot id)
    /// share its cores even when network namespaces make them different
    /// nodes. Numbered by first appearance.
    pub machine_of: Vec<usize>,
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

/// The part of a [`node_key`] that names the machine: the boot id, or the
/// whole key when the boot id could not be read.
fn machine_key(key: &str) -> &str {
    match key.split('|').nth(1) {
        Some(boot) if !boot.is_empty() => boot,
        _ => key,
    }
}

/// Index of `key` in `keys`, appended when new.
fn index_of(keys: &mut Vec<String>, key: String) -> usize {
    match keys.iter().position(|x| *x == key) {
        Some(i) => i,
        None => {
            keys.push(key);
            keys.len() - 1
        }
    }
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
        let mut machines: Vec<String> = Vec::new();
        let mut node_of = Vec::with_capacity(all.len());
        let mut machine_of = Vec::with_capacity(all.len());
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
            let machine = machine_key(&k).to_owned();
            machine_of.push(index_of(&mut machines, machine));
            node_of.push(index_of(&mut keys, k));
        }
        Ok(Topology {
            node_of,
            machine_of,
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

    /// Number of PEs on this PE's machine (its node's PEs, and those in other
    /// network namespaces of the same kernel): the PEs that compete for its
    /// cores.
    pub fn machine_pes(&self) -> usize {
        let mine = self.machine_of.get(self.my_pe);
        self.machine_of.iter().filter(|&m| Some(m) == mine).count()
    }

    /// Number of distinct nodes.
    pub fn n_nodes(&self) -> usize {
        self.node_of.iter().max().map_or(0, |m| m + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_of_one_kernel_share_a_machine() {
        assert_eq!(machine_key("h|boot-1|net:[4026531840]"), "boot-1");
        assert_eq!(machine_key("h||net:[1]"), "h||net:[1]");
        assert_eq!(machine_key("odd"), "odd");
        // Two namespace "hosts" of 2 PEs each on one kernel, then a host of
        // its own.
        let t = Topology {
            node_of: vec![0, 0, 1, 1, 2],
            machine_of: vec![0, 0, 0, 0, 1],
            pid_of: vec![1, 2, 3, 4, 5],
            uid_of: vec![0; 5],
            my_pe: 2,
        };
        assert_eq!(t.local_pes(), vec![2, 3]);
        assert_eq!(t.machine_pes(), 4);
        assert_eq!(Topology { my_pe: 4, ..t }.machine_pes(), 1);
    }
}
