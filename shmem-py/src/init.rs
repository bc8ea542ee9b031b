//! Joining and leaving a job, instances, the launcher, and small queries.

use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use shmem::{JoinMethod, UniqueId};

use crate::errors::{invalid, OrPy};
use crate::state;

/// Library version.
#[pyfunction]
pub(crate) fn version() -> &'static str {
    shmem::version()
}

/// Rank 0: starts the job's config store in this process and returns the
/// id (bytes) every PE passes to `init_uid`. `bind_addr` overrides the
/// address the store binds (else `SHMEM_BOOTSTRAP_ADDR` / `_IFNAME`, else
/// this host's first non-loopback IPv4).
#[pyfunction]
#[pyo3(signature = (bind_addr = None))]
pub(crate) fn get_unique_id(
    py: Python<'_>,
    bind_addr: Option<String>,
) -> PyResult<Bound<'_, PyBytes>> {
    let mut config = shmem::Config::from_env().py()?;
    if let Some(a) = bind_addr {
        config.bootstrap_addr = a;
        config.bootstrap_ifname = String::new();
    }
    let uid = py
        .detach(move || shmem_bootstrap::get_unique_id(&config))
        .py()?;
    Ok(PyBytes::new(py, &uid.to_bytes()))
}

/// `"ip:port"` where the config store of unique id `uid` listens.
#[pyfunction]
pub(crate) fn uid_address(uid: &[u8]) -> PyResult<String> {
    Ok(UniqueId::from_bytes(uid).py()?.addr.to_string())
}

/// Length in bytes of a unique id.
#[pyfunction]
pub(crate) fn unique_id_len() -> usize {
    shmem_bootstrap::ids::UID_LEN
}

fn join(
    py: Python<'_>,
    join: JoinMethod,
    mem_size: Option<usize>,
    instance_id: u32,
) -> PyResult<()> {
    // Registered by the worker, so that an init that completes after a
    // KeyboardInterrupt still leaves a usable, finalizable instance.
    crate::blocking::run_ordered(py, instance_id, move || {
        // A hang report should not name this package's glue code as the caller.
        shmem_core::Activity::hide_source_locations();
        let sh = shmem::init_with(join, mem_size, instance_id, None)?;
        state::register(&sh);
        Ok(())
    })?
    .py()
}

/// Joins with a unique id as `rank` of `nranks`.
#[pyfunction]
#[pyo3(signature = (uid, rank, nranks, mem_size = None, instance_id = 0))]
pub(crate) fn init_uid(
    py: Python<'_>,
    uid: &[u8],
    rank: usize,
    nranks: usize,
    mem_size: Option<usize>,
    instance_id: u32,
) -> PyResult<()> {
    let uid = UniqueId::from_bytes(uid).py()?;
    join(
        py,
        JoinMethod::UniqueId { rank, nranks, uid },
        mem_size,
        instance_id,
    )
}

/// Joins through `tcp://host:port` (rank 0 binds it).
#[pyfunction]
#[pyo3(signature = (rank, nranks, url, mem_size = None, instance_id = 0))]
pub(crate) fn init_attr(
    py: Python<'_>,
    rank: usize,
    nranks: usize,
    url: String,
    mem_size: Option<usize>,
    instance_id: u32,
) -> PyResult<()> {
    join(
        py,
        JoinMethod::Attributes { rank, nranks, url },
        mem_size,
        instance_id,
    )
}

/// Joins the job described by the environment (shmemrun / torchrun), or
/// starts a one-PE job when there is none.
#[pyfunction]
#[pyo3(signature = (mem_size = None, instance_id = 0))]
pub(crate) fn init_env(py: Python<'_>, mem_size: Option<usize>, instance_id: u32) -> PyResult<()> {
    join(py, JoinMethod::Environment, mem_size, instance_id)
}

/// Leaves the job (collective) for `instance_id`, or the current instance.
#[pyfunction]
#[pyo3(signature = (instance_id = None))]
pub(crate) fn finalize(py: Python<'_>, instance_id: Option<u32>) -> PyResult<()> {
    let sh = state::resolve(instance_id)?;
    let id = sh.instance();
    // An instance an interrupted collective left out of step can still be
    // finalized (see `blocking::check_in_step`).
    crate::blocking::forget_out_of_step(id);
    let r = crate::blocking::run_ordered(py, id, move || {
        crate::streams::settle_detached(id)?;
        sh.finalize()
    })?;
    state::unregister(id);
    crate::streams::forget_instance(id);
    r.py()
}

/// Whether `instance_id` (or the current instance) is initialised.
#[pyfunction]
#[pyo3(signature = (instance_id = None))]
pub(crate) fn is_initialized(instance_id: Option<u32>) -> bool {
    state::resolve(instance_id).is_ok()
}

/// The current instance's id, or None.
#[pyfunction]
pub(crate) fn current_instance() -> Option<u32> {
    state::current().ok().map(|s| s.instance())
}

/// Makes `instance_id` the one the module-level functions use.
#[pyfunction]
pub(crate) fn set_instance(instance_id: u32) -> PyResult<()> {
    shmem::set_instance(instance_id).map_err(|_| {
        crate::errors::error(format!(
            "shmem instance {instance_id} is not initialized (live: {:?})",
            state::ids()
        ))
    })
}

/// Ids of the initialised instances.
#[pyfunction]
pub(crate) fn instances() -> Vec<u32> {
    state::ids()
}

/// This PE's rank.
#[pyfunction]
#[pyo3(signature = (instance = None))]
pub(crate) fn my_pe(instance: Option<u32>) -> PyResult<usize> {
    Ok(state::resolve(instance)?.my_pe())
}

/// Number of PEs.
#[pyfunction]
#[pyo3(signature = (instance = None))]
pub(crate) fn n_pes(instance: Option<u32>) -> PyResult<usize> {
    Ok(state::resolve(instance)?.n_pes())
}

/// Heap size in bytes, free bytes, largest free block.
#[pyfunction]
#[pyo3(signature = (instance = None))]
pub(crate) fn heap_info(instance: Option<u32>) -> PyResult<(usize, usize, usize)> {
    let sh = state::resolve(instance)?;
    let (free, largest) = sh.heap_free();
    Ok((sh.heap_size(), free, largest))
}

/// Engine routing to each PE, e.g. "HCCS x4".
#[pyfunction]
#[pyo3(signature = (instance = None))]
pub(crate) fn route_summary(instance: Option<u32>) -> PyResult<String> {
    Ok(state::resolve(instance)?.route_summary())
}

/// Whether `pe` is reachable.
#[pyfunction]
pub(crate) fn pe_accessible(pe: i64) -> bool {
    usize::try_from(pe).is_ok_and(shmem::pe_accessible)
}

/// Ends the whole job with `status` on every PE (does not return).
#[pyfunction]
#[pyo3(signature = (status = 0))]
pub(crate) fn global_exit(py: Python<'_>, status: i32) -> PyResult<()> {
    // Flush what Python buffered: the process ends without unwinding.
    if let Ok(sys) = py.import("sys") {
        for s in ["stdout", "stderr"] {
            let _ = sys.getattr(s).and_then(|f| f.call_method0("flush"));
        }
    }
    shmem::global_exit(status)
}

/// Parses a byte size with an optional K/M/G suffix.
#[pyfunction]
pub(crate) fn parse_size(text: &str) -> PyResult<usize> {
    shmem::config_parse_size(text).map_err(|e| invalid(format!("size {text:?}: {e}")))
}

/// Runs `n` PEs of `program args...` on this machine (the `shmemrun`
/// logic); returns (exit code, failure line or None).
#[pyfunction]
#[pyo3(signature = (n, program, args, engine = None, tag_output = false, env = Vec::new(), timeout = None, bind = None, nnodes = 1, node_rank = 0, master = None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch(
    py: Python<'_>,
    n: usize,
    program: String,
    args: Vec<String>,
    engine: Option<String>,
    tag_output: bool,
    env: Vec<(String, String)>,
    timeout: Option<f64>,
    bind: Option<bool>,
    nnodes: usize,
    node_rank: usize,
    master: Option<(String, u16)>,
) -> PyResult<(i32, Option<String>)> {
    if n == 0 {
        return Err(invalid("the number of PEs must be at least 1"));
    }
    let mut opts = shmem::launch::LaunchOptions::new(n, program);
    opts.args = args.into_iter().map(Into::into).collect();
    opts.engine = engine;
    opts.tag_output = tag_output;
    opts.env = env;
    if let Some(t) = timeout {
        if !(t.is_finite() && t > 0.0) {
            return Err(invalid(format!(
                "timeout {t} must be a positive number of seconds"
            )));
        }
        opts.timeout = Some(Duration::from_secs_f64(t));
    }
    if let Some(b) = bind {
        opts.bind = b;
    }
    opts.nnodes = nnodes;
    opts.node_rank = node_rank;
    if let Some((host, port)) = master {
        use std::net::ToSocketAddrs;
        let addr = (host.as_str(), port)
            .to_socket_addrs()
            .map_err(|e| invalid(format!("--master-addr {host:?}: {e}")))?
            .next()
            .ok_or_else(|| invalid(format!("--master-addr {host:?}: no address")))?;
        opts.master = Some(addr);
    }
    let report = py.detach(move || shmem::launch::launch(&opts)).py()?;
    Ok((report.exit_code(), report.summary()))
}
