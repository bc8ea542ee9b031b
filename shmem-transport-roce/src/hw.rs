//! The hardware provider: RDMA NICs through the `ibverbs` crate.

/// Names of the RDMA devices on this host. A listing that fails (ENOSYS on
/// hosts without the RDMA subsystem) is reported as the error.
pub fn devices() -> Result<Vec<String>, String> {
    let list = ibverbs::devices().map_err(|e| format!("ibverbs device listing failed: {e}"))?;
    Ok(list
        .iter()
        .map(|d| {
            d.name()
                .map_or_else(|| "?".to_string(), |n| n.to_string_lossy().into_owned())
        })
        .collect())
}
