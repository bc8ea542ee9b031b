//! `--hosts H`: the PEs run in H network namespaces ("hosts") joined by a
//! bridge, so each host is a node of its own and PEs on different hosts
//! reach each other through the RoCE engine (software verbs over TCP when
//! there is no RDMA hardware). The same set-up as `tests/tests/multihost.rs`.
//!
//! Namespaces are `shb<pid>-h0..` plus `shb<pid>-sw` holding the bridge;
//! host i has `10.77.<x>.(i+1)/24` on its veth (the 10.x addresses exist
//! only inside those namespaces). [`Hosts`] deletes them when dropped, on
//! success, on error and after a signal that stopped the job; namespaces
//! left behind by a `shmem-bench` that was killed outright are deleted by
//! the next `--hosts` run.

use std::ffi::OsString;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::Command;

use shmem::launch::LaunchOptions;

use crate::error::{BenchError, Result};
use crate::tcp;

/// Prefix of every name this module creates.
const TAG: &str = "shb";
/// Second octet of the hosts' addresses.
const NET: u8 = 77;

fn ip(args: &[&str]) -> std::result::Result<String, String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run `ip` (iproute2): {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn hosts_error(why: impl std::fmt::Display) -> BenchError {
    BenchError::Job(format!("--hosts: {why}"))
}

/// The pid in a name this module gave, e.g. `shb1234-h0` -> 1234.
fn owner_pid(name: &str) -> Option<u32> {
    name.strip_prefix(TAG)?.split_once('-')?.0.parse().ok()
}

/// Deletes namespaces left by `shmem-bench` processes that no longer exist.
fn sweep_stale() {
    let Ok(list) = ip(&["netns", "list"]) else {
        return;
    };
    for name in list.lines().filter_map(|l| l.split_whitespace().next()) {
        if let Some(pid) = owner_pid(name) {
            if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                eprintln!("shmem-bench: deleting namespace {name} left by process {pid}");
                let _ = ip(&["netns", "del", name]);
            }
        }
    }
}

/// Network namespaces joined by a bridge; deleted on drop.
#[derive(Debug)]
pub struct Hosts {
    tag: String,
    n: usize,
    subnet: u8,
    /// Namespaces created so far (deleted in reverse order).
    created: Vec<String>,
    /// veth ends created in this namespace not yet moved out of it.
    loose: Vec<String>,
}

impl Hosts {
    /// Creates `n` hosts, or says why it cannot (not root, no iproute2).
    pub fn new(n: usize) -> Result<Hosts> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err(hosts_error(
                "creating network namespaces needs root (run shmem-bench as root, e.g. with sudo)",
            ));
        }
        ip(&["-V"]).map_err(|e| {
            hosts_error(format!(
                "{e}; install iproute2 (e.g. apt-get install iproute2)"
            ))
        })?;
        if n > 64 {
            return Err(hosts_error("at most 64 hosts"));
        }
        sweep_stale();
        let pid = std::process::id();
        let mut hosts = Hosts {
            tag: format!("{TAG}{pid}"),
            n,
            subnet: (pid % 250) as u8,
            created: Vec::new(),
            loose: Vec::new(),
        };
        hosts.build().map_err(hosts_error)?;
        Ok(hosts)
    }

    fn build(&mut self) -> std::result::Result<(), String> {
        let sw = self.switch();
        ip(&["netns", "add", &sw])?;
        self.created.push(sw.clone());
        ip(&["-n", &sw, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &sw, "link", "set", "br0", "up"])?;
        for i in 0..self.n {
            let h = self.host(i);
            ip(&["netns", "add", &h])?;
            self.created.push(h.clone());
            let (a, b) = (format!("{}v{i}", self.tag), format!("{}p{i}", self.tag));
            ip(&["link", "add", &a, "type", "veth", "peer", "name", &b])?;
            self.loose = vec![a.clone(), b.clone()];
            ip(&["link", "set", &a, "netns", &h])?;
            self.loose = vec![b.clone()];
            ip(&["link", "set", &b, "netns", &sw])?;
            self.loose.clear();
            ip(&["-n", &sw, "link", "set", &b, "master", "br0"])?;
            ip(&["-n", &sw, "link", "set", &b, "up"])?;
            let addr = format!("{}/24", self.addr(i));
            ip(&["-n", &h, "addr", "add", &addr, "dev", &a])?;
            ip(&["-n", &h, "link", "set", &a, "up"])?;
            ip(&["-n", &h, "link", "set", "lo", "up"])?;
        }
        Ok(())
    }

    fn switch(&self) -> String {
        format!("{}-sw", self.tag)
    }

    fn host(&self, i: usize) -> String {
        format!("{}-h{i}", self.tag)
    }

    fn addr(&self, i: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, NET, self.subnet, i as u8 + 1)
    }

    /// Puts the PEs of `lo` on the hosts, `lo.n_pes / n` consecutive ranks
    /// each, with rank 0 (on host 0) holding the job's store.
    pub fn place(&self, lo: &mut LaunchOptions) {
        let per_host = (lo.n_pes / self.n).max(1);
        lo.prefix = (0..lo.n_pes)
            .map(|pe| {
                [
                    "ip",
                    "netns",
                    "exec",
                    &self.host((pe / per_host).min(self.n - 1)),
                ]
                .iter()
                .map(OsString::from)
                .collect()
            })
            .collect();
        let port = 20000 + (std::process::id() % 20000) as u16;
        lo.store_on_rank0 = Some(SocketAddr::new(IpAddr::V4(self.addr(0)), port));
        let addrs: Vec<String> = (0..lo.n_pes)
            .map(|pe| self.addr((pe / per_host).min(self.n - 1)).to_string())
            .collect();
        lo.env.push((tcp::ADDRS_VAR.into(), addrs.join(",")));
        lo.env.push((tcp::PORT_VAR.into(), (port + 1).to_string()));
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for link in self.loose.drain(..) {
            let _ = ip(&["link", "del", &link]);
        }
        // Deleting a namespace deletes the veth ends in it, and their peers.
        while let Some(ns) = self.created.pop() {
            if let Err(e) = ip(&["netns", "del", &ns]) {
                eprintln!("shmem-bench: could not delete network namespace {ns}: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_pids_are_read_from_our_names_only() {
        assert_eq!(owner_pid("shb1234-h0"), Some(1234));
        assert_eq!(owner_pid("shb99-sw"), Some(99));
        assert_eq!(owner_pid("shm1234-h0"), None);
        assert_eq!(owner_pid("shbx-h0"), None);
        assert_eq!(owner_pid("shb1234"), None);
    }
}
