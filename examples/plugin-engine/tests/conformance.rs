//! The plugin, loaded with `dlopen` from its built `.so` (not linked into
//! this test), passes the whole conformance suite with its engine forced.

use std::path::PathBuf;

/// `target/<profile>/deps/libshmem_plugin_example.so`: the package's
/// cdylib, which cargo builds beside this test binary.
fn plugin_path() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .expect("target/<profile>/deps/<test>")
        .join("libshmem_plugin_example.so")
}

#[test]
fn the_loaded_plugin_passes_the_conformance_suite() {
    let so = plugin_path();
    assert!(so.exists(), "{} was not built", so.display());
    let mut job = shmem_testkit::Job::new(2, "MEMCPY");
    job.env
        .push(("SHMEM_TRANSPORT_PLUGINS".into(), so.display().to_string()));
    shmem_testkit::conformance::run_all_with(&job).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn without_the_plugin_the_engine_is_unknown() {
    let e = shmem_testkit::run_pes(1, "MEMCPY", |_| Ok(()))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("MEMCPY") && e.contains("SHMEM_TRANSPORT_PLUGINS"),
        "{e}"
    );
}
