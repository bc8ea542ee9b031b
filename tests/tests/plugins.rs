//! A Rust program (`shmem-test-pe`, real processes under the launcher) on
//! an engine loaded at run time: the example plugin
//! (`examples/plugin-engine`) forced with `SHMEM_TEST_ENGINE`.

use std::path::{Path, PathBuf};
use std::process::Command;

use shmem_tests::{assert_ok, run_job};

const PE: &str = env!("CARGO_BIN_EXE_shmem-test-pe");

/// Builds the plugin in this test's profile (a no-op when fresh); its `.so`.
fn plugin_engine() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>")
        .to_path_buf();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .args(["build", "-p", "shmem-plugin-example"]);
    if profile_dir.ends_with("release") {
        cmd.arg("--release");
    }
    let o = cmd.output().expect("running cargo build");
    assert!(
        o.status.success(),
        "cargo build -p shmem-plugin-example: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    profile_dir.join("libshmem_plugin_example.so")
}

#[test]
fn rust_program_runs_on_a_run_time_plugin_engine() {
    let so = plugin_engine();
    let so = so.display().to_string();
    let env = [
        ("SHMEM_TRANSPORT_PLUGINS", so.as_str()),
        ("SHMEM_TEST_ENGINE", "MEMCPY"),
    ];
    for scenario in ["rma", "atomics", "signals", "waits"] {
        for n in [2, 3] {
            let r = run_job(PE, n, &[scenario], &env);
            assert_ok(&r, &format!("{scenario} at {n} PEs on the MEMCPY plugin"));
        }
    }
    // The same job without the plugin cannot force its engine.
    let r = run_job(PE, 2, &["rma"], &[("SHMEM_TEST_ENGINE", "MEMCPY")]);
    assert!(!r.success(), "MEMCPY forced without its plugin must fail");
}
