//! Helpers for the multi-process integration tests: run the `shmem-test-pe`
//! program (or an example) as a job of N PEs with a hard timeout.

use std::time::Duration;

pub use shmem_launch::{launch, JobReport, LaunchOptions, PeEnd};

/// Hard limit for one job in the tests; a hang fails instead of stalling CI.
pub const JOB_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs `program args...` on `n` PEs with `env`, under [`JOB_TIMEOUT`].
pub fn run_job(program: &str, n: usize, args: &[&str], env: &[(&str, &str)]) -> JobReport {
    let mut o = LaunchOptions::new(n, program);
    o.args = args.iter().map(Into::into).collect();
    o.env = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    o.timeout = Some(JOB_TIMEOUT);
    o.tag_output = true;
    launch(&o).expect("job could not be started")
}

/// Asserts that a job succeeded, with its report in the message.
pub fn assert_ok(report: &JobReport, what: &str) {
    assert!(
        report.success(),
        "{what}: {:?} {:?}",
        report.summary(),
        report.ends
    );
}

/// The libfabric providers the tests force: `tcp` (`tcp;ofi_rxm`) and
/// `sockets`, and `net` (libfabric's own TCP RDM endpoint, which has no
/// atomics: every atomic and signal is a message) where this libfabric has
/// it under that name (1.17; from 1.18 it is `tcp` itself).
pub fn ofi_test_providers() -> Vec<&'static str> {
    let names = shmem_transport_roce::ofi::provider_names().unwrap_or_default();
    let mut v = vec!["tcp", "sockets"];
    if names.iter().any(|n| n == "net") {
        v.push("net");
    }
    v
}

/// Entries of /dev/shm whose name mentions shmem (there must be none).
pub fn shm_leftovers() -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.contains("shmem"))
                .collect()
        })
        .unwrap_or_default()
}
