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
//! Providers (`SHMEM_ROCE_PROVIDER=auto|hw|sw`):
//! * `sw`: a software verbs provider over TCP, with a progress thread at the
//!   target that checks the remote key and the heap bounds before touching
//!   a byte. It runs on any Linux host and is what CI tests, including
//!   across network namespaces.
//! * `hw`: real NICs through the `ibverbs` crate (Cargo feature `ibverbs`).
//!   Device discovery is implemented: a listing that fails (ENOSYS) or finds
//!   nothing means "no RDMA device". The hardware data path is not written
//!   yet, so `auto` uses `sw` and says so at INFO level, and `hw` is an
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

#[cfg(feature = "ibverbs")]
pub mod hw;
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
    "RoCE provider: auto (hw when an RDMA device is found, else sw), hw (ibverbs) or sw (software verbs over TCP)"
);

/// RDMA devices found by the `hw` provider (`Ok(vec![])`: none).
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

fn create(init: &TransportInit<'_>) -> Result<Arc<dyn Transport>> {
    let n = init.bootstrap.size();
    let forced = init.config.test_engine.trim().eq_ignore_ascii_case(NAME);
    let reach: Vec<bool> = (0..n)
        .map(|pe| forced || !init.topology.same_node(pe))
        .collect();
    let needed = forced || init.topology.n_nodes() > 1;
    let provider = init
        .config
        .var::<String>("SHMEM_ROCE_PROVIDER")?
        .trim()
        .to_ascii_lowercase();
    match provider.as_str() {
        "auto" | "" => {
            if needed {
                match rdma_devices() {
                    Ok(d) if !d.is_empty() => shmem_log!(
                        Info,
                        "ROCE: RDMA device(s) {d:?} found, but the hw data path is not in this build; using the sw provider"
                    ),
                    Ok(_) => shmem_log!(Info, "ROCE: no RDMA device; using the sw provider"),
                    Err(e) => shmem_log!(Info, "ROCE: no RDMA device ({e}); using the sw provider"),
                }
            }
        }
        "sw" => {}
        "hw" => {
            let found = rdma_devices();
            return Err(Error::EngineUnavailable {
                requested: "ROCE (SHMEM_ROCE_PROVIDER=hw)".into(),
                reason: match found {
                    Ok(d) if d.is_empty() => "no RDMA device".into(),
                    Ok(d) => format!("RDMA device(s) {d:?} found, but the hw data path is not implemented yet; use sw"),
                    Err(e) => format!("no RDMA device: {e}"),
                },
                available: shmem_core::transport::registered_names(),
            });
        }
        other => {
            return Err(Error::Config {
                name: "SHMEM_ROCE_PROVIDER",
                value: other.to_string(),
                reason: "expected auto, hw or sw".into(),
            })
        }
    }
    if !needed {
        return Ok(Arc::new(sw::SwVerbs::unconnected(init)));
    }
    Ok(Arc::new(sw::SwVerbs::create(init, reach)?))
}
