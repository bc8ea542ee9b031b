//! Runs the real binary with two PEs and checks what it writes (never the
//! timings: machines differ).

use std::path::PathBuf;
use std::process::Command;

fn bench() -> Command {
    Command::new(env!("CARGO_BIN_EXE_shmem-bench"))
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("shmem-bench-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create a scratch directory");
    dir.join(name)
}

#[test]
fn put_writes_a_json_row_per_size() {
    let json = scratch("out.json");
    let out = bench()
        .args([
            "put", "--pes", "2", "--sizes", "8,4K", "--iters", "10", "--warmup", "2", "--quiet",
            "--json",
        ])
        .arg(&json)
        .output()
        .expect("run shmem-bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("# put: 2 PEs") && stdout.contains("4 KiB"),
        "{stdout}"
    );
    let text = std::fs::read_to_string(&json).expect("the JSON file");
    let doc: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    let run = &doc["runs"][0];
    assert_eq!(run["pes"], 2, "{text}");
    let bench = &run["benchmarks"][0];
    assert_eq!(bench["name"], "put", "{text}");
    let rows = bench["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 2, "{text}");
    for (row, (label, size)) in rows.iter().zip([("8 B", 8), ("4 KiB", 4096)]) {
        assert_eq!(row["label"], label, "{text}");
        assert_eq!(row["size"], size, "{text}");
        assert_eq!(row["samples"], 10, "{text}");
        assert!(row["median_us"].as_f64().is_some_and(|t| t > 0.0), "{text}");
        assert_eq!(row["refs"][0]["kind"], "memcpy_bandwidth", "{text}");
    }
    assert_eq!(
        run["memcpy"].as_array().map(Vec::len),
        Some(2),
        "two memcpy references:\n{text}"
    );
    let _ = std::fs::remove_file(json);
}

#[test]
fn bad_sizes_and_unlinked_engines_are_clear_errors() {
    let out = bench()
        .args(["put", "--sizes", "8,lots"])
        .output()
        .expect("run shmem-bench");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--sizes") && err.contains("lots"), "{err}");

    let out = bench()
        .args([
            "compare",
            "barrier",
            "--engines",
            "NO-SUCH-ENGINE",
            "--iters",
            "2",
            "--quiet",
        ])
        .output()
        .expect("run shmem-bench");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("engine NO-SUCH-ENGINE: not linked"), "{err}");
}

#[test]
fn copy_engine_benchmarks_report_their_rows() {
    let out = bench()
        .args([
            "sdma-overlap,sdma-engines",
            "--pes",
            "2",
            "--sizes",
            "1M",
            "--iters",
            "2",
            "--warmup",
            "1",
            "--sdma-engines",
            "1,2",
            "--quiet",
        ])
        .output()
        .expect("run shmem-bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for needle in [
        "# sdma-overlap: 2 PEs",
        "compute solo",
        "put_nbi+compute 1 MiB",
        "put_handle+compute 1 MiB",
        "memcpy thread+compute 1 MiB",
        "compute/solo",
        "# sdma-engines: 2 PEs",
        "1 MiB x1",
        "1 MiB x2",
        "bw/memcpy",
    ] {
        assert!(stdout.contains(needle), "{needle} missing from\n{stdout}");
    }
}

#[test]
fn hosts_option_is_checked() {
    let out = bench()
        .args(["sdma-overlap", "--hosts", "2"])
        .output()
        .expect("run shmem-bench");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("without --hosts"), "{err}");
    let out = bench()
        .args(["put", "--pes", "3", "--hosts", "2"])
        .output()
        .expect("run shmem-bench");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("multiple of the number of hosts"), "{err}");
}
