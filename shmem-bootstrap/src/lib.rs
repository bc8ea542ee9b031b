//! Control plane of the `shmem` library: the TCP config store and the three
//! ways a PE joins a job.
//!
//! * **Launcher environment** ([`init_from_env`]): `shmemrun` (or torchrun,
//!   or nothing at all for a single PE) sets rank, size, store address and a
//!   job secret in the environment.
//! * **UniqueId** ([`get_unique_id`] on rank 0, then
//!   [`init_with_unique_id`] everywhere): rank 0 starts the store and returns
//!   opaque bytes (format version, address, 128-bit secret) that the user
//!   distributes by any means.
//! * **Attributes** ([`init_attr`]): `tcp://host:port` or
//!   `tcp6://[addr]:port`; rank 0 binds, the others connect with retry until
//!   `SHMEM_INIT_TIMEOUT`.
//!
//! All three end in a [`TcpBootstrap`], the [`shmem_core::Bootstrap`] of the
//! job. A single-PE job needs no set-up:
//!
//! ```
//! use shmem_core::{Bootstrap, Config};
//! let config = Config::from_lookup(|_| None).unwrap();
//! let bs = shmem_bootstrap::init_from_lookup(&config, |_| None).unwrap();
//! assert_eq!((bs.rank(), bs.size()), (0, 1));
//! assert_eq!(bs.allgather(b"hi").unwrap(), vec![b"hi".to_vec()]);
//! bs.finalize().unwrap();
//! ```
//!
//! # Errors
//!
//! Joining a job (every `init_*` function and [`TcpBootstrap::join`]) fails
//! with [`Error::InvalidArgument`] for a rank outside `0..nranks` or a job of
//! no PEs; [`Error::Config`] for a launcher variable or `SHMEM_*` setting that
//! does not parse or resolve; [`Error::Os`] when rank 0's store cannot bind
//! its address or a system call fails; [`Error::Timeout`] when the store
//! cannot be reached, or not every PE joins, within `SHMEM_INIT_TIMEOUT`;
//! [`Error::Bootstrap`] when the store refuses this PE (wrong secret or job
//! size, duplicate rank) and [`Error::ProtocolMismatch`] when it speaks
//! another protocol version; [`Error::PeerExited`] or [`Error::Aborted`] when
//! a PE dies or aborts the job while the others wait.

#![warn(clippy::missing_errors_doc)]

pub mod client;
pub mod ids;
pub mod protocol;
pub mod store;

use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

use shmem_core::{shmem_log, Config, Error, PeId, Result};

pub use client::{check_rank, JoinParams, TcpBootstrap};
pub use ids::{parse_url, UniqueId};
pub use store::{StoreLimits, StoreServer};

/// Waits on `changed` with `guard` for at most `timeout` (a poisoned lock
/// is taken as it is); returns the guard, whatever woke the wait.
pub(crate) fn wait_changed<'a, T>(
    changed: &Condvar,
    guard: MutexGuard<'a, T>,
    timeout: Duration,
) -> MutexGuard<'a, T> {
    changed
        .wait_timeout(guard, timeout)
        .map(|(g, _)| g)
        .unwrap_or_else(|p| p.into_inner().0)
}

/// Environment variables a launcher sets for each PE.
pub mod env {
    /// This PE's rank.
    pub const RANK: &str = "SHMEM_RANK";
    /// Number of PEs.
    pub const NRANKS: &str = "SHMEM_NRANKS";
    /// `host:port` of the config store.
    pub const STORE_ADDR: &str = "SHMEM_STORE_ADDR";
    /// `1` when the launcher hosts the store.
    pub const STORE_EXTERNAL: &str = "SHMEM_STORE_EXTERNAL";
    /// Hex job secret.
    pub const JOB_SECRET: &str = "SHMEM_JOB_SECRET";
    /// Forced engine.
    pub const TEST_ENGINE: &str = "SHMEM_TEST_ENGINE";
    /// torchrun's names, also set by shmemrun.
    pub const TORCH_RANK: &str = "RANK";
    /// torchrun: job size.
    pub const TORCH_WORLD_SIZE: &str = "WORLD_SIZE";
    /// torchrun: rank on this node.
    pub const TORCH_LOCAL_RANK: &str = "LOCAL_RANK";
    /// torchrun: PEs on this node.
    pub const TORCH_LOCAL_WORLD_SIZE: &str = "LOCAL_WORLD_SIZE";
    /// torchrun: rank 0's host.
    pub const TORCH_MASTER_ADDR: &str = "MASTER_ADDR";
    /// torchrun: rank 0's port (torch's own store; ours uses the next port).
    pub const TORCH_MASTER_PORT: &str = "MASTER_PORT";
}

/// How a launcher told this PE to join.
#[derive(Debug, Clone)]
pub struct LaunchEnv {
    /// Rank.
    pub rank: PeId,
    /// Job size.
    pub nranks: usize,
    /// Where the store listens.
    pub store_addr: SocketAddr,
    /// Job secret.
    pub secret: Vec<u8>,
    /// Whether the launcher hosts the store (otherwise rank 0 binds it).
    pub external_store: bool,
}

fn parse_num(name: &'static str, v: &str) -> Result<usize> {
    v.trim().parse().map_err(|_| Error::Config {
        name,
        value: v.to_string(),
        reason: "not a non-negative integer".into(),
    })
}

/// `SHMEM_BOOTSTRAP_PORT`, if set.
fn configured_port(config: &Config) -> Result<Option<u16>> {
    let text = config.bootstrap_port.trim();
    if text.is_empty() {
        return Ok(None);
    }
    text.parse().map(Some).map_err(|_| Error::Config {
        name: "SHMEM_BOOTSTRAP_PORT",
        value: config.bootstrap_port.clone(),
        reason: "not a port number".into(),
    })
}

fn resolve(name: &'static str, host: &str, port: u16) -> Result<SocketAddr> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    (host, port)
        .to_socket_addrs()
        .map_err(|e| Error::Config {
            name,
            value: host.to_string(),
            reason: format!("cannot resolve: {e}"),
        })?
        .next()
        .ok_or_else(|| Error::Config {
            name,
            value: host.to_string(),
            reason: "resolves to no address".into(),
        })
}

/// Reads the launcher environment through `lookup`. `Ok(None)` when no
/// launcher variables are present (a single-PE job).
///
/// # Errors
/// [`Error::Config`] for a rank, size, store address, port or Slurm node list that does
/// not parse or resolve, and [`Error::Malformed`] for a `SHMEM_JOB_SECRET` that is not
/// hex; [`Error::InvalidArgument`] when only one of rank and size is set, the rank is
/// outside `0..nranks`, or a job of several PEs names no store address.
pub fn launch_env(
    config: &Config,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<Option<LaunchEnv>> {
    let pick = |names: &[&'static str]| -> Option<(&'static str, String)> {
        names
            .iter()
            .find_map(|n| lookup(n).filter(|v| !v.trim().is_empty()).map(|v| (*n, v)))
    };
    let rank = pick(&[env::RANK, env::TORCH_RANK, "SLURM_PROCID"]);
    let nranks = pick(&[env::NRANKS, env::TORCH_WORLD_SIZE, "SLURM_NTASKS"]);
    let (rank, nranks) = match (rank, nranks) {
        (None, None) => return Ok(None),
        (Some((rn, r)), Some((nn, n))) => (parse_num(rn, &r)?, parse_num(nn, &n)?),
        (Some((rn, _)), None) => {
            return Err(Error::invalid(
                "nranks",
                format!("{rn} is set but neither SHMEM_NRANKS nor WORLD_SIZE is"),
            ))
        }
        (None, Some((nn, _))) => {
            return Err(Error::invalid(
                "rank",
                format!("{nn} is set but neither SHMEM_RANK nor RANK is"),
            ))
        }
    };
    check_rank(rank, nranks)?;
    let (store_addr, torch) = if let Some(a) = lookup(env::STORE_ADDR).filter(|s| !s.is_empty()) {
        let (h, p) = a.rsplit_once(':').ok_or_else(|| Error::Config {
            name: env::STORE_ADDR,
            value: a.clone(),
            reason: "expected host:port".into(),
        })?;
        let p: u16 = p.parse().map_err(|_| Error::Config {
            name: env::STORE_ADDR,
            value: a.clone(),
            reason: "bad port".into(),
        })?;
        (
            resolve(
                env::STORE_ADDR,
                h.trim_start_matches('[').trim_end_matches(']'),
                p,
            )?,
            false,
        )
    } else if nranks == 1 {
        (SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0), false)
    } else if lookup(env::TORCH_MASTER_ADDR).is_none() && lookup("SLURM_PROCID").is_some() {
        // Slurm: rank 0 runs on the first node of the allocation.
        let list = lookup("SLURM_JOB_NODELIST")
            .or_else(|| lookup("SLURM_NODELIST"))
            .ok_or_else(|| {
                Error::invalid(
                    "SLURM_JOB_NODELIST",
                    "srun set SLURM_PROCID but no node list",
                )
            })?;
        let host = first_host(&list).ok_or_else(|| Error::Config {
            name: "SLURM_JOB_NODELIST",
            value: list.clone(),
            reason: "no host in the node list".into(),
        })?;
        let port = match configured_port(config)? {
            Some(p) => p,
            None => {
                let job: u64 = lookup("SLURM_JOB_ID")
                    .and_then(|j| j.trim().parse().ok())
                    .unwrap_or(0);
                20000 + (job % 20000) as u16
            }
        };
        (resolve("SLURM_JOB_NODELIST", &host, port)?, true)
    } else {
        let host = lookup(env::TORCH_MASTER_ADDR).ok_or_else(|| {
            Error::invalid(
                "MASTER_ADDR",
                "rank and size are set but no store address (SHMEM_STORE_ADDR or MASTER_ADDR)",
            )
        })?;
        let port = if let Some(p) = configured_port(config)? {
            p
        } else {
            let mp = lookup(env::TORCH_MASTER_PORT).unwrap_or_else(|| "29500".into());
            let mp: u16 = mp.trim().parse().map_err(|_| Error::Config {
                name: "MASTER_PORT",
                value: mp.clone(),
                reason: "not a port number".into(),
            })?;
            mp.checked_add(1).ok_or_else(|| Error::Config {
                name: "MASTER_PORT",
                value: mp.to_string(),
                reason: "no port above it for the shmem store; set SHMEM_BOOTSTRAP_PORT".into(),
            })?
        };
        (resolve(env::TORCH_MASTER_ADDR, host.trim(), port)?, true)
    };
    let secret = match lookup(env::JOB_SECRET).filter(|s| !s.trim().is_empty()) {
        Some(hex) => ids::from_hex(&hex)?,
        None => {
            let run = lookup("TORCHELASTIC_RUN_ID")
                .or_else(|| lookup("SLURM_JOB_ID"))
                .unwrap_or_default();
            ids::derived_secret(&format!("{run}|{store_addr}|{nranks}|{torch}"))
        }
    };
    let external_store = lookup(env::STORE_EXTERNAL)
        .map(|v| v.trim() == "1")
        .unwrap_or(false);
    Ok(Some(LaunchEnv {
        rank,
        nranks,
        store_addr,
        secret,
        external_store,
    }))
}

/// The first host of a Slurm host list (`node[01-04,07],gpu5` -> `node01`).
pub fn first_host(list: &str) -> Option<String> {
    let mut depth = 0;
    let end = list
        .char_indices()
        .find(|&(_, c)| {
            match c {
                '[' => depth += 1,
                ']' => depth -= 1,
                ',' if depth == 0 => return true,
                _ => {}
            }
            false
        })
        .map_or(list.len(), |(i, _)| i);
    let entry = list[..end].trim();
    if entry.is_empty() {
        return None;
    }
    match entry.split_once('[') {
        None => Some(entry.to_string()),
        Some((prefix, rest)) => {
            let (inner, suffix) = rest.split_once(']')?;
            let first = inner.split(',').next()?.split('-').next()?.trim();
            if first.is_empty() {
                return None;
            }
            Some(format!("{prefix}{first}{suffix}"))
        }
    }
}

fn params(
    config: &Config,
    rank: PeId,
    nranks: usize,
    store_addr: SocketAddr,
    secret: Vec<u8>,
) -> JoinParams {
    JoinParams {
        rank,
        nranks,
        store_addr,
        secret,
        init_timeout: config.init_timeout,
        call_timeout: config.bootstrap_timeout,
        link_timeout: config.link_timeout,
    }
}

/// Joins the job described by the launcher environment, or starts a
/// single-PE job when there is none.
///
/// # Errors
/// As every join (see the [crate-level errors](crate#errors)).
pub fn init_from_env(config: &Config) -> Result<TcpBootstrap> {
    init_from_lookup(config, |n| std::env::var(n).ok())
}

/// [`init_from_env`] with an explicit variable lookup.
///
/// # Errors
/// As every join (see the [crate-level errors](crate#errors)).
pub fn init_from_lookup(
    config: &Config,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<TcpBootstrap> {
    init_instance_from_lookup(config, 0, lookup)
}

/// Joins runtime instance `instance` of the job described by the launcher
/// environment. Instance 0 uses the launcher's store; instance k > 0 has rank
/// 0 host a store on port `start + k - 1` of `SHMEM_INSTANCE_PORT_RANGE`.
///
/// # Errors
/// As every join (see the [crate-level errors](crate#errors)); [`Error::Config`] when
/// `instance > 0` in a launched job and `SHMEM_INSTANCE_PORT_RANGE` is unset, malformed
/// or too short.
pub fn init_instance_from_env(config: &Config, instance: u32) -> Result<TcpBootstrap> {
    init_instance_from_lookup(config, instance, |n| std::env::var(n).ok())
}

fn instance_port(config: &Config, instance: u32) -> Result<u16> {
    let bad = |reason: String| Error::Config {
        name: "SHMEM_INSTANCE_PORT_RANGE",
        value: config.instance_port_range.clone(),
        reason,
    };
    let text = config.instance_port_range.trim();
    if text.is_empty() {
        return Err(bad(format!(
            "instance {instance} of a launched job needs a port for its config store; set SHMEM_INSTANCE_PORT_RANGE=start:end"
        )));
    }
    let (a, b) = text
        .split_once(':')
        .ok_or_else(|| bad("expected start:end".into()))?;
    let start: u16 = a
        .trim()
        .parse()
        .map_err(|_| bad(format!("{a:?} is not a port")))?;
    let end: u16 = b
        .trim()
        .parse()
        .map_err(|_| bad(format!("{b:?} is not a port")))?;
    if start == 0 || end < start {
        return Err(bad("the range must be non-empty and start above 0".into()));
    }
    let port = start as u64 + instance as u64 - 1;
    if port > end as u64 {
        return Err(bad(format!(
            "instance {instance} needs port {port}, past the end of the range"
        )));
    }
    Ok(port as u16)
}

/// [`init_instance_from_env`] with an explicit variable lookup.
///
/// # Errors
/// As [`init_instance_from_env`].
pub fn init_instance_from_lookup(
    config: &Config,
    instance: u32,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<TcpBootstrap> {
    let le = match launch_env(config, lookup)? {
        Some(mut le) if instance > 0 => {
            le.store_addr.set_port(instance_port(config, instance)?);
            le.external_store = false;
            le.secret =
                ids::derived_secret(&format!("{}|instance {instance}", ids::to_hex(&le.secret)));
            Some(le)
        }
        other => other,
    };
    let Some(le) = le else {
        let secret = ids::new_secret()?;
        let server = StoreServer::bind(
            SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0),
            Some(1),
            secret.clone(),
        )?;
        let addr = server.addr();
        return TcpBootstrap::join(params(config, 0, 1, addr, secret), Some(server));
    };
    let mut addr = le.store_addr;
    let hosted = if le.rank == 0 && !le.external_store {
        let s = StoreServer::bind(addr, Some(le.nranks), le.secret.clone())?;
        addr = connect_addr(s.addr());
        Some(s)
    } else {
        None
    };
    shmem_log!(
        Debug,
        "joining job of {} PEs as rank {} via store {addr}",
        le.nranks,
        le.rank
    );
    TcpBootstrap::join(params(config, le.rank, le.nranks, addr, le.secret), hosted)
}

/// Address to connect to for a store bound to `bound` (a wildcard bind is
/// reached through loopback).
fn connect_addr(bound: SocketAddr) -> SocketAddr {
    if bound.ip().is_unspecified() {
        let ip = if bound.is_ipv6() {
            IpAddr::V6(std::net::Ipv6Addr::LOCALHOST)
        } else {
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        };
        SocketAddr::new(ip, bound.port())
    } else {
        bound
    }
}

static PENDING: Mutex<Vec<StoreServer>> = Mutex::new(Vec::new());

/// Starts a config store on this process (rank 0) and returns the id the
/// other PEs need. Binds `SHMEM_BOOTSTRAP_ADDR` (or this host's first
/// interface) on a free port.
///
/// # Errors
/// [`Error::Config`] for a `SHMEM_BOOTSTRAP_ADDR` that is not an IP address or a
/// `SHMEM_BOOTSTRAP_IFNAME` with no IPv4 address up; [`Error::Os`] when the kernel
/// gives no random secret or the store cannot bind.
pub fn get_unique_id(config: &Config) -> Result<UniqueId> {
    let ip = ids::default_bind_ip(&config.bootstrap_addr, &config.bootstrap_ifname)?;
    let secret = ids::new_secret()?;
    let server = StoreServer::bind(SocketAddr::new(ip, 0), None, secret.clone())?;
    let uid = UniqueId {
        addr: server.addr(),
        secret,
    };
    PENDING
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(server);
    Ok(uid)
}

/// Joins the job named by `uid` as `rank` of `nranks`. On rank 0 this uses
/// the store [`get_unique_id`] started (or starts one at the id's address).
///
/// # Errors
/// As every join (see the [crate-level errors](crate#errors)).
pub fn init_with_unique_id(
    rank: PeId,
    nranks: usize,
    uid: &UniqueId,
    config: &Config,
) -> Result<TcpBootstrap> {
    check_rank(rank, nranks)?;
    let hosted = if rank == 0 {
        let mut pending = PENDING.lock().unwrap_or_else(|p| p.into_inner());
        match pending.iter().position(|s| s.addr() == uid.addr) {
            Some(i) => Some(pending.swap_remove(i)),
            None => Some(StoreServer::bind(
                uid.addr,
                Some(nranks),
                uid.secret.clone(),
            )?),
        }
    } else {
        None
    };
    TcpBootstrap::join(
        params(config, rank, nranks, uid.addr, uid.secret.clone()),
        hosted,
    )
}

/// Joins via `tcp://host:port` / `tcp6://[addr]:port`: rank 0 binds the
/// address, everyone connects. The secret is `SHMEM_JOB_SECRET` if set,
/// otherwise derived from the URL and job size.
///
/// # Errors
/// As every join (see the [crate-level errors](crate#errors)); [`Error::Malformed`] for
/// a bad URL or a `SHMEM_JOB_SECRET` that is not hex.
pub fn init_attr(rank: PeId, nranks: usize, url: &str, config: &Config) -> Result<TcpBootstrap> {
    check_rank(rank, nranks)?;
    let addr = parse_url(url)?;
    let secret = if config.job_secret.trim().is_empty() {
        ids::derived_secret(&format!("attr|{addr}|{nranks}"))
    } else {
        ids::from_hex(&config.job_secret)?
    };
    let hosted = if rank == 0 {
        Some(StoreServer::bind(addr, Some(nranks), secret.clone())?)
    } else {
        None
    };
    TcpBootstrap::join(
        params(config, rank, nranks, connect_addr(addr), secret),
        hosted,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use shmem_core::Bootstrap;
    use std::collections::HashMap;
    use std::time::Duration;

    fn cfg() -> Config {
        let mut c = Config::from_lookup(|_| None).unwrap();
        c.init_timeout = std::time::Duration::from_secs(10);
        c.bootstrap_timeout = std::time::Duration::from_secs(10);
        c
    }

    fn lookup<'a>(m: &'a HashMap<&'static str, String>) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| m.get(k).cloned()
    }

    #[test]
    fn launch_env_reads_shmem_and_torch_names() {
        let c = cfg();
        let m: HashMap<&str, String> = [
            ("SHMEM_RANK", "2"),
            ("SHMEM_NRANKS", "4"),
            ("SHMEM_STORE_ADDR", "127.0.0.1:5000"),
            ("SHMEM_JOB_SECRET", "00ff"),
        ]
        .into_iter()
        .map(|(a, b)| (a, b.to_string()))
        .collect();
        let le = launch_env(&c, lookup(&m)).unwrap().unwrap();
        assert_eq!(
            (le.rank, le.nranks, le.store_addr.port(), le.secret.clone()),
            (2, 4, 5000, vec![0, 255])
        );
        let t: HashMap<&str, String> = [
            ("RANK", "1"),
            ("WORLD_SIZE", "3"),
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", "29500"),
        ]
        .into_iter()
        .map(|(a, b)| (a, b.to_string()))
        .collect();
        let le = launch_env(&c, lookup(&t)).unwrap().unwrap();
        assert_eq!((le.rank, le.nranks, le.store_addr.port()), (1, 3, 29501));
        assert!(launch_env(&c, |_| None).unwrap().is_none());
    }

    #[test]
    fn slurm_variables_start_a_job() {
        assert_eq!(first_host("node[01-04,07],gpu5").as_deref(), Some("node01"));
        assert_eq!(first_host("gpu5,node[1-2]").as_deref(), Some("gpu5"));
        assert_eq!(first_host("rack[3]-n"), Some("rack3-n".to_string()));
        assert_eq!(first_host(""), None);
        let c = cfg();
        let m: HashMap<&str, String> = [
            ("SLURM_PROCID", "3"),
            ("SLURM_NTASKS", "8"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_JOB_NODELIST", "localhost"),
            ("SLURM_JOB_ID", "12345"),
        ]
        .into_iter()
        .map(|(a, b)| (a, b.to_string()))
        .collect();
        let le = launch_env(&c, lookup(&m)).unwrap().unwrap();
        assert_eq!(
            (le.rank, le.nranks, le.store_addr.port()),
            (3, 8, 20000 + 12345)
        );
        assert!(!le.external_store);
    }

    #[test]
    fn launch_env_errors_name_the_argument() {
        let c = cfg();
        let bad = |pairs: &[(&'static str, &str)]| {
            let m: HashMap<&str, String> = pairs.iter().map(|(a, b)| (*a, b.to_string())).collect();
            launch_env(&c, lookup(&m)).unwrap_err().to_string()
        };
        assert!(bad(&[
            ("SHMEM_RANK", "4"),
            ("SHMEM_NRANKS", "4"),
            ("SHMEM_STORE_ADDR", "127.0.0.1:1")
        ])
        .contains("rank"));
        assert!(bad(&[
            ("SHMEM_RANK", "0"),
            ("SHMEM_NRANKS", "0"),
            ("SHMEM_STORE_ADDR", "127.0.0.1:1")
        ])
        .contains("nranks"));
        assert!(bad(&[("SHMEM_RANK", "x"), ("SHMEM_NRANKS", "2")]).contains("SHMEM_RANK"));
        assert!(bad(&[("SHMEM_RANK", "0")]).contains("nranks"));
        assert!(bad(&[("RANK", "0"), ("WORLD_SIZE", "2")]).contains("MASTER_ADDR"));
    }

    #[test]
    fn threads_as_pes_allgather_barrier_broadcast() {
        let c = cfg();
        let uid = get_unique_id(&c).unwrap();
        let n = 4;
        let handles: Vec<_> = (0..n)
            .map(|r| {
                let (uid, c) = (uid.clone(), c.clone());
                std::thread::spawn(move || {
                    let bs = init_with_unique_id(r, n, &uid, &c).unwrap();
                    let all = bs.allgather(&[r as u8; 3]).unwrap();
                    assert_eq!(all, (0..n).map(|i| vec![i as u8; 3]).collect::<Vec<_>>());
                    bs.barrier().unwrap();
                    assert_eq!(bs.broadcast(2, &[r as u8]).unwrap(), vec![2]);
                    bs.set(format!("k{r}").as_bytes(), &[r as u8]).unwrap();
                    assert_eq!(
                        bs.get(format!("k{}", (r + 1) % n).as_bytes()).unwrap(),
                        vec![((r + 1) % n) as u8]
                    );
                    bs.finalize().unwrap();
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    }

    #[test]
    fn a_store_host_sees_which_members_are_still_connected() {
        let c = cfg();
        let secret = vec![7u8; 16];
        let store =
            StoreServer::bind("127.0.0.1:0".parse().unwrap(), Some(2), secret.clone()).unwrap();
        let addr = store.addr();
        // Nobody joined yet: nothing to wait for.
        let t = std::time::Instant::now();
        assert!(store.wait_members_gone(Duration::from_secs(5)).is_empty());
        assert!(t.elapsed() < Duration::from_secs(1));
        let members: Vec<_> = (0..2)
            .map(|r| {
                let (c, secret) = (c.clone(), secret.clone());
                std::thread::spawn(move || {
                    TcpBootstrap::join(params(&c, r, 2, addr, secret), None).unwrap()
                })
            })
            .collect();
        let mut members: Vec<TcpBootstrap> =
            members.into_iter().map(|h| h.join().unwrap()).collect();
        assert_eq!(
            store.wait_members_gone(Duration::from_millis(50)),
            vec![0, 1]
        );
        // Rank 0 leaves; rank 1 is still connected, for as long as asked.
        members.remove(0).finalize().unwrap();
        let t = std::time::Instant::now();
        assert_eq!(store.wait_members_gone(Duration::from_millis(300)), vec![1]);
        assert!(t.elapsed() >= Duration::from_millis(300));
        // Rank 1's connection closes (it exits without leaving): the
        // wait ends then, not at its limit.
        let last = members.remove(0);
        let closer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            drop(last);
        });
        let t = std::time::Instant::now();
        assert!(store.wait_members_gone(Duration::from_secs(30)).is_empty());
        assert!(t.elapsed() < Duration::from_secs(10));
        closer.join().unwrap();
    }

    #[test]
    fn attr_port_in_use_is_a_clear_error() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("tcp://{}", l.local_addr().unwrap());
        let err = init_attr(0, 2, &url, &cfg()).unwrap_err().to_string();
        assert!(err.contains("already in use"), "{err}");
        assert!(err.contains(&l.local_addr().unwrap().to_string()), "{err}");
    }

    #[test]
    fn unreachable_store_times_out() {
        let mut c = cfg();
        c.init_timeout = std::time::Duration::from_millis(500);
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("tcp://{}", l.local_addr().unwrap());
        drop(l);
        let t = std::time::Instant::now();
        let err = init_attr(1, 2, &url, &c).unwrap_err().to_string();
        assert!(err.contains("could not reach the config store"), "{err}");
        assert!(t.elapsed() < std::time::Duration::from_secs(5));
    }

    #[test]
    fn bad_arguments_are_named() {
        let c = cfg();
        assert!(init_attr(2, 2, "tcp://127.0.0.1:1", &c)
            .unwrap_err()
            .to_string()
            .contains("rank"));
        assert!(init_attr(0, 0, "tcp://127.0.0.1:1", &c)
            .unwrap_err()
            .to_string()
            .contains("nranks"));
        assert!(init_attr(0, 1, "http://x:1", &c)
            .unwrap_err()
            .to_string()
            .contains("URL"));
    }

    #[test]
    fn strangers_are_rejected_and_the_job_goes_on() {
        use std::io::{Read, Write};
        let c = cfg();
        let uid = get_unique_id(&c).unwrap();
        // Garbage bytes.
        let mut g = std::net::TcpStream::connect(uid.addr).unwrap();
        g.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
        let mut sink = Vec::new();
        let _ = g.read_to_end(&mut sink);
        // A well-formed HELLO with the wrong secret is told why and dropped.
        let mut w = std::net::TcpStream::connect(uid.addr).unwrap();
        let hello = protocol::Request::Hello {
            rank: 0,
            nranks: 2,
            secret: vec![0; 16],
        };
        protocol::write_frame(&mut w, &hello.encode()).unwrap();
        let reply = protocol::read_frame(&mut w).unwrap().unwrap();
        assert_eq!(
            protocol::Reply::decode(&reply).unwrap(),
            protocol::Reply::Reject("wrong job secret".into())
        );
        // The real job is unaffected (rank 0 was not taken by the stranger).
        let handles: Vec<_> = (0..2)
            .map(|r| {
                let (uid, c) = (uid.clone(), c.clone());
                std::thread::spawn(move || {
                    let bs = init_with_unique_id(r, 2, &uid, &c).unwrap();
                    assert_eq!(bs.allgather(&[r as u8]).unwrap(), vec![vec![0], vec![1]]);
                    bs.finalize().unwrap();
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    }

    #[test]
    fn duplicate_rank_is_refused() {
        let mut c = cfg();
        c.init_timeout = std::time::Duration::from_secs(2);
        let uid = get_unique_id(&c).unwrap();
        // Two processes both claim rank 0 of a 2-PE job.
        let claims: Vec<_> = (0..2)
            .map(|_| {
                let (u, c) = (uid.clone(), c.clone());
                std::thread::spawn(move || {
                    let p = JoinParams {
                        rank: 0,
                        nranks: 2,
                        store_addr: u.addr,
                        secret: u.secret.clone(),
                        init_timeout: c.init_timeout,
                        call_timeout: c.bootstrap_timeout,
                        link_timeout: c.link_timeout,
                    };
                    TcpBootstrap::join(p, None)
                        .map(|_| ())
                        .unwrap_err()
                        .to_string()
                })
            })
            .collect();
        let mut errs: Vec<String> = claims.into_iter().map(|h| h.join().unwrap()).collect();
        errs.sort_by_key(|e| !e.contains("already joined"));
        // One is refused at once; the other times out waiting for rank 1.
        assert!(
            errs[0].contains("rank 0 has already joined (duplicate rank)"),
            "{errs:?}"
        );
        assert!(errs[1].contains("timed out"), "{errs:?}");
    }

    fn free_port_url() -> String {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("tcp://{}", l.local_addr().unwrap())
    }

    #[test]
    fn tcp_start_up_with_a_different_pe_count_is_named_and_the_join_timeout_names_its_variable() {
        let url = free_port_url();
        let mut c0 = cfg();
        c0.init_timeout = std::time::Duration::from_millis(1500);
        let (u0, cc) = (url.clone(), c0.clone());
        let root = std::thread::spawn(move || init_attr(0, 2, &u0, &cc).map(|_| ()));
        // PE 1 believes in 3 PEs; its default secret differs too, but the
        // count is what it must hear about.
        let err = init_attr(1, 3, &url, &cfg()).unwrap_err().to_string();
        assert!(
            err.contains("PE 1 says the job has 3 PEs, the others say 2"),
            "{err}"
        );
        assert!(!err.contains("secret"), "{err}");
        // Rank 0 waits in vain for rank 1; its timeout names the variable
        // that governs joining.
        let err = root.join().unwrap().unwrap_err().to_string();
        assert!(err.contains("waiting for all PEs to join"), "{err}");
        assert!(err.contains("SHMEM_INIT_TIMEOUT"), "{err}");
        assert!(!err.contains("SHMEM_BOOTSTRAP_TIMEOUT"), "{err}");
    }

    fn limited_store(limits: StoreLimits) -> (StoreServer, Vec<u8>) {
        let secret = vec![9u8; 16];
        let s = StoreServer::bind_with_limits(
            "127.0.0.1:0".parse().unwrap(),
            Some(1),
            secret.clone(),
            limits,
        )
        .unwrap();
        (s, secret)
    }

    /// Reads until the store answers or closes; `Some(reply)` if it answered.
    fn answer(s: &mut std::net::TcpStream) -> Option<protocol::Reply> {
        s.set_read_timeout(Some(std::time::Duration::from_secs(30)))
            .unwrap();
        match protocol::read_frame(s) {
            Ok(Some(f)) => protocol::Reply::decode(&f).ok(),
            _ => None,
        }
    }

    #[test]
    fn a_hello_trickled_past_its_deadline_is_dropped() {
        use std::io::Write;
        let (store, secret) = limited_store(StoreLimits {
            hello_timeout: std::time::Duration::from_millis(300),
            max_unauthenticated: 8,
        });
        let mut frame = Vec::new();
        let hello = protocol::Request::Hello {
            rank: 0,
            nranks: 1,
            secret: secret.clone(),
        };
        protocol::write_frame(&mut frame, &hello.encode()).unwrap();
        // A valid HELLO, one byte every 40 ms (each byte well inside any
        // per-read timeout, the whole far beyond the deadline).
        let mut s = std::net::TcpStream::connect(store.addr()).unwrap();
        let mut sent = 0;
        for b in &frame {
            if s.write_all(&[*b]).is_err() {
                break;
            }
            sent += 1;
            std::thread::sleep(std::time::Duration::from_millis(40));
        }
        let reply = answer(&mut s);
        assert_eq!(reply, None, "sent {sent} of {} bytes", frame.len());
        // The same HELLO sent at once is welcome.
        let mut s = std::net::TcpStream::connect(store.addr()).unwrap();
        s.write_all(&frame).unwrap();
        assert_eq!(answer(&mut s), Some(protocol::Reply::Welcome));
    }

    #[test]
    fn a_large_frame_before_hello_is_refused_without_reading_it() {
        use std::io::Write;
        let (store, _secret) = limited_store(StoreLimits {
            hello_timeout: std::time::Duration::from_secs(30),
            max_unauthenticated: 8,
        });
        let mut s = std::net::TcpStream::connect(store.addr()).unwrap();
        // Announce 256 MiB and send the first 64 KiB of it.
        s.write_all(&(protocol::MAX_FRAME as u32).to_le_bytes())
            .unwrap();
        let _ = s.write_all(&[1u8; 64 << 10]);
        // The store hangs up without an answer (well before its 30-s HELLO
        // deadline, which would also fail this test by timing out the read).
        assert_eq!(answer(&mut s), None);
        // A frame just above the HELLO limit is refused the same way.
        let mut s = std::net::TcpStream::connect(store.addr()).unwrap();
        let len = protocol::MAX_HELLO_FRAME as u32 + 1;
        s.write_all(&len.to_le_bytes()).unwrap();
        assert_eq!(answer(&mut s), None);
    }

    /// A HELLO body as a PE of protocol version `v` would send it.
    fn hello_of_version(v: u16, secret: Vec<u8>) -> Vec<u8> {
        let mut body = protocol::Request::Hello {
            rank: 0,
            nranks: 1,
            secret,
        }
        .encode();
        body[2..4].copy_from_slice(&v.to_le_bytes());
        body
    }

    #[test]
    fn a_client_of_another_protocol_version_is_told_both_versions() {
        use shmem_core::wire::PROTOCOL_VERSION;
        let (store, secret) = limited_store(StoreLimits::default());
        let mut s = std::net::TcpStream::connect(store.addr()).unwrap();
        let theirs = PROTOCOL_VERSION + 1;
        protocol::write_frame(&mut s, &hello_of_version(theirs, secret.clone())).unwrap();
        match answer(&mut s) {
            Some(protocol::Reply::Reject(why)) => {
                assert!(why.contains(&format!("version {theirs}")), "{why}");
                assert!(
                    why.contains(&format!("version {PROTOCOL_VERSION}")),
                    "{why}"
                );
            }
            other => panic!("{other:?}"),
        }
        // The store still takes a PE of its own version.
        let mut s = std::net::TcpStream::connect(store.addr()).unwrap();
        protocol::write_frame(&mut s, &hello_of_version(PROTOCOL_VERSION, secret)).unwrap();
        assert_eq!(answer(&mut s), Some(protocol::Reply::Welcome));
    }

    #[test]
    fn a_store_of_another_protocol_version_is_named_by_the_joining_pe() {
        use shmem_core::wire::PROTOCOL_VERSION;
        // A fake store that answers every HELLO in version + 1.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let fake = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let _ = protocol::read_frame(&mut s).unwrap();
            let mut body = protocol::Reply::Welcome.encode();
            body[2..4].copy_from_slice(&(PROTOCOL_VERSION + 1).to_le_bytes());
            protocol::write_frame(&mut s, &body).unwrap();
        });
        let p = JoinParams {
            rank: 0,
            nranks: 1,
            store_addr: addr,
            secret: vec![1; 16],
            init_timeout: std::time::Duration::from_secs(20),
            call_timeout: std::time::Duration::from_secs(20),
            link_timeout: std::time::Duration::from_secs(5),
        };
        let e = TcpBootstrap::join(p, None).map(|_| ()).unwrap_err();
        fake.join().unwrap();
        assert!(
            matches!(e, shmem_core::Error::ProtocolMismatch { theirs, ours, .. }
                if theirs == PROTOCOL_VERSION + 1 && ours == PROTOCOL_VERSION),
            "{e}"
        );
        assert!(e.to_string().contains("config store reply"), "{e}");
    }

    #[test]
    fn garbage_frames_after_a_valid_hello_do_not_take_the_store_down() {
        // Random bodies from a joined PE: the store drops that PE (it is
        // reported exited) and keeps serving others.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for round in 0..20 {
            let (store, secret) = limited_store(StoreLimits::default());
            let mut s = std::net::TcpStream::connect(store.addr()).unwrap();
            protocol::write_frame(
                &mut s,
                &hello_of_version(shmem_core::wire::PROTOCOL_VERSION, secret.clone()),
            )
            .unwrap();
            assert_eq!(answer(&mut s), Some(protocol::Reply::Welcome));
            let mut body = protocol::Request::Bye.encode();
            body.truncate(shmem_core::wire::HEADER_LEN);
            for _ in 0..(1 + round * 3) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                body.push(x as u8);
            }
            let _ = protocol::write_frame(&mut s, &body);
            let _ = answer(&mut s);
            drop(s);
            // A fresh PE of rank 0 is either welcome (the first left) or
            // refused as a duplicate: in both cases the store answered.
            let mut t = std::net::TcpStream::connect(store.addr()).unwrap();
            protocol::write_frame(
                &mut t,
                &hello_of_version(shmem_core::wire::PROTOCOL_VERSION, secret),
            )
            .unwrap();
            assert!(answer(&mut t).is_some(), "round {round}");
        }
    }

    #[test]
    fn unauthenticated_connections_are_capped() {
        let (store, secret) = limited_store(StoreLimits {
            hello_timeout: std::time::Duration::from_secs(30),
            max_unauthenticated: 3,
        });
        // The cap is the limit plus the job's PE count (1 here).
        let silent: Vec<_> = (0..4)
            .map(|_| std::net::TcpStream::connect(store.addr()).unwrap())
            .collect();
        let mut extra = std::net::TcpStream::connect(store.addr()).unwrap();
        assert_eq!(
            answer(&mut extra),
            Some(protocol::Reply::Reject(store::BUSY.into()))
        );
        // Once the silent ones go, a real PE gets in (it retries while the
        // store is still busy).
        drop(silent);
        let p = JoinParams {
            rank: 0,
            nranks: 1,
            store_addr: store.addr(),
            secret,
            init_timeout: std::time::Duration::from_secs(20),
            call_timeout: std::time::Duration::from_secs(20),
            link_timeout: std::time::Duration::from_secs(5),
        };
        let bs = TcpBootstrap::join(p, None).unwrap();
        assert_eq!(bs.allgather(b"x").unwrap(), vec![b"x".to_vec()]);
        bs.finalize().unwrap();
    }
}
