//! RoCE engine of the `shmem` library: the RDMA verbs model between nodes.
//!
//! Per job: the symmetric heap registered under a remote key, one
//! reliable-connected queue pair per remote peer, endpoints and keys
//! exchanged with one bootstrap allgather. put = RDMA WRITE, get = RDMA
//! READ, atomics = remote atomics executed at the target, put_signal = write
//! then signal on the same queue pair (so the signal lands after the data);
//! transfers above 1 MiB are split and pipelined; `quiet` waits until every
//! posted work request has completed; `fence` is free because a queue pair
//! is served in order.
//!
//! Providers (`SHMEM_ROCE_PROVIDER=auto|ofi|sw|hw`):
//! * `ofi`: libfabric, loaded at run time (see [`ofi`]): verbs on RoCE and
//!   InfiniBand, EFA, cxi, psm2/opx, and `tcp;ofi_rxm` or `sockets` on any
//!   Ethernet host. `FI_PROVIDER` selects the libfabric provider. `auto`
//!   picks it when every PE finds a provider with `FI_RMA|FI_ATOMIC` on
//!   `FI_EP_RDM` (and says which at INFO level), else falls back to `sw`
//!   and says why.
//! * `sw`: a software verbs provider over TCP, with a progress thread at the
//!   target that checks the remote key and the heap bounds before touching
//!   a byte. It runs on any Linux host and is what CI tests, including
//!   across network namespaces.
//! * `hw`: real NICs through the `ibverbs` crate (Cargo feature `ibverbs`).
//!   Device discovery is implemented: a listing that fails (ENOSYS) or finds
//!   nothing means "no RDMA device". The direct data path is not written
//!   (libfabric's verbs provider is the way to RDMA NICs), so `hw` is an
//!   error naming what was found.
//!
//! The engine registers as `ROCE` (priority 10): by default it serves only
//! PEs on other nodes (hosts or network namespaces); `SHMEM_TEST_ENGINE=ROCE`
//! forces it for every peer, loopback included.
//!
//! ```
//! shmem_transport_roce::link();
//! assert!(shmem_core::transport::registered().iter().any(|r| r.name == "ROCE"));
//! ```
#![warn(clippy::missing_errors_doc)]

mod counters;
mod exposed;
#[cfg(feature = "ibverbs")]
pub mod hw;
pub mod ofi;
pub mod sw;
pub mod wire;

use std::sync::Arc;

use shmem_core::{shmem_log, Error, Result, Transport, TransportInit, TransportRegistration};

/// Engine name.
pub const NAME: &str = "ROCE";

/// Makes sure this crate is linked (its registration is then visible).
pub fn link() {}

shmem_core::inventory::submit! {
    TransportRegistration { name: NAME, priority: 10, create }
}

shmem_core::config_var!(
    "SHMEM_ROCE_PROVIDER",
    String,
    "auto",
    "RoCE provider: auto (libfabric when every PE finds a provider with FI_RMA|FI_ATOMIC, else sw), ofi (libfabric, loaded at run time; FI_PROVIDER picks its provider), sw (software verbs over TCP) or hw (ibverbs device discovery only: an error naming the devices)"
);

shmem_core::config_var!(
    "SHMEM_ROCE_OFI_SIGNAL_MSG",
    u64,
    "512",
    "libfabric providers without write-after-write ordering (tcp;ofi_rxm): put-with-signal data up to this many bytes (at most 512) travels with its signal in one message that the target's progress thread applies and acknowledges; larger data is written first and its signal follows as such a message. 0: data as writes (or ordered byte atomics) and signals as provider atomics"
);

shmem_core::config_var!(
    "SHMEM_ROCE_OFI_REMOTE_DATA",
    u64,
    "1",
    "1: a libfabric write into a PE whose provider reports remote CQ data carries its heap range in the write (FI_REMOTE_CQ_DATA), and the target rings its waiters when the write lands; 0: a wake message follows each completed write instead"
);

shmem_core::config_var!(
    "SHMEM_ROCE_OFI_AMO_MSG",
    u64,
    "1",
    "1: where signals travel as messages (libfabric providers without write-after-write ordering, whose atomics are software, with manual progress), atomics on other nodes' memory are messages too, which the target applies with CPU atomics and answers (one message each way); 0: provider atomics. Must be the same on every PE"
);

shmem_core::config_var!(
    "SHMEM_ROCE_OFI_DIRECT_PUT",
    shmem_core::config::ByteSize,
    "256K",
    "Blocking libfabric puts of at least this many bytes (K/M suffixes) write straight from the caller's buffer and return once the data is in the target's memory; smaller ones copy it into a bounce buffer and return at once (0: always copy)"
);

shmem_core::config_var!(
    "SHMEM_ROCE_OFI_CHUNK",
    String,
    "auto",
    "libfabric RMA transfers are posted in pieces of at most this many bytes (K/M suffixes; taken as at least 4K, and never more than the provider's max_msg_size), back to back, so that delivery acknowledgements overlap the next piece and the target sees the data land piece by piece; auto: 128K on manual-progress providers (tcp;ofi_rxm, net, verbs;ofi_rxm), as large as the provider allows (up to 4M) on auto-progress ones (sockets); 0: as large as the provider allows"
);

shmem_core::config_var!(
    "SHMEM_ROCE_OFI_MR_LOCAL",
    u64,
    "0",
    "1: register every local buffer of a libfabric data transfer (FI_MR_LOCAL) even when the provider does not require it, to exercise that path; providers that require it (verbs, for one) always get registered buffers"
);

/// RDMA devices found by the `hw` provider (`Ok(vec![])`: none).
///
/// # Errors
/// Why no device list could be read (no `ibverbs` feature in this build,
/// or the verbs library failed).
pub fn rdma_devices() -> std::result::Result<Vec<String>, String> {
    #[cfg(feature = "ibverbs")]
    {
        hw::devices()
    }
    #[cfg(not(feature = "ibverbs"))]
    {
        Err("this build has no `ibverbs` feature".into())
    }
}

/// The provider `SHMEM_ROCE_PROVIDER` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    /// libfabric when every PE has it, else `sw`.
    Auto,
    /// libfabric, or an error.
    Ofi,
    /// The software verbs provider.
    Sw,
    /// The ibverbs device path (an error: discovery only).
    Hw,
}

impl Provider {
    /// Parses `SHMEM_ROCE_PROVIDER` (case-insensitive, blank = auto).
    ///
    /// # Errors
    /// [`Error::Config`] for any other value.
    pub fn parse(s: &str) -> Result<Provider> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" | "" => Ok(Provider::Auto),
            "ofi" | "libfabric" => Ok(Provider::Ofi),
            "sw" => Ok(Provider::Sw),
            "hw" => Ok(Provider::Hw),
            other => Err(Error::Config {
                name: "SHMEM_ROCE_PROVIDER",
                value: other.to_string(),
                reason: "expected auto, ofi, sw or hw".into(),
            }),
        }
    }
}

/// `auto`'s choice, made alike on every PE: libfabric only when every PE
/// found a provider (one byte per PE in a bootstrap allgather).
fn auto_picks_ofi(init: &TransportInit<'_>) -> Result<bool> {
    let found = ofi::probe(init.bootstrap.local_ip());
    let all = init.bootstrap.allgather(&[u8::from(found.is_ok())])?;
    let missing: Vec<usize> = (0..all.len())
        .filter(|&pe| all[pe].first() != Some(&1))
        .collect();
    match found {
        Ok(f) if missing.is_empty() => {
            shmem_log!(
                Info,
                "ROCE: using libfabric provider {} (fabric {}, domain {})",
                f.provider,
                f.fabric,
                f.domain
            );
            Ok(true)
        }
        Ok(_) => {
            shmem_log!(
                Info,
                "ROCE: PEs {missing:?} found no usable libfabric provider; using the sw provider"
            );
            Ok(false)
        }
        Err(why) => {
            shmem_log!(Info, "ROCE: {why}; using the sw provider");
            Ok(false)
        }
    }
}

fn create(init: &TransportInit<'_>) -> Result<Arc<dyn Transport>> {
    let n = init.bootstrap.size();
    let forced = init.config.test_engine.trim().eq_ignore_ascii_case(NAME);
    let reach: Vec<bool> = (0..n)
        .map(|pe| forced || !init.topology.same_node(pe))
        .collect();
    let needed = forced || init.topology.n_nodes() > 1;
    let provider = Provider::parse(&init.config.var::<String>("SHMEM_ROCE_PROVIDER")?)?;
    if provider == Provider::Hw {
        let found = rdma_devices();
        return Err(Error::EngineUnavailable {
            requested: "ROCE (SHMEM_ROCE_PROVIDER=hw)".into(),
            reason: match found {
                Ok(d) if d.is_empty() => "no RDMA device".into(),
                Ok(d) => format!("RDMA device(s) {d:?} found, but the direct ibverbs data path is not implemented; use SHMEM_ROCE_PROVIDER=ofi with FI_PROVIDER=verbs"),
                Err(e) => format!("no RDMA device: {e}"),
            },
            available: shmem_core::transport::registered_names(),
        });
    }
    if !needed {
        return Ok(Arc::new(sw::SwVerbs::unconnected(init)));
    }
    let use_ofi = match provider {
        Provider::Ofi => true,
        Provider::Auto => auto_picks_ofi(init)?,
        Provider::Sw | Provider::Hw => false,
    };
    if use_ofi {
        return Ok(Arc::new(ofi::Ofi::create(init, reach)?));
    }
    if init.config.info && init.bootstrap.rank() == 0 {
        eprintln!("shmem ROCE engine: software verbs provider over TCP");
    }
    Ok(Arc::new(sw::SwVerbs::create(init, reach)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_names_parse() {
        assert_eq!(Provider::parse("").unwrap(), Provider::Auto);
        assert_eq!(Provider::parse(" AUTO ").unwrap(), Provider::Auto);
        assert_eq!(Provider::parse("ofi").unwrap(), Provider::Ofi);
        assert_eq!(Provider::parse("Libfabric").unwrap(), Provider::Ofi);
        assert_eq!(Provider::parse("sw").unwrap(), Provider::Sw);
        assert_eq!(Provider::parse("hw").unwrap(), Provider::Hw);
        let e = Provider::parse("verbs").unwrap_err().to_string();
        assert!(
            e.contains("SHMEM_ROCE_PROVIDER") && e.contains("ofi"),
            "{e}"
        );
    }

    #[test]
    fn auto_skips_host_local_providers() {
        assert!(!ofi::auto_may_pick("shm"));
        assert!(!ofi::auto_may_pick("sm2"));
        assert!(ofi::auto_may_pick("tcp;ofi_rxm"));
        assert!(ofi::auto_may_pick("verbs;ofi_rxm"));
        assert!(ofi::auto_may_pick("sockets"));
        assert!(ofi::auto_may_pick("efa"));
    }
}
