//! `capi`: the OSU OpenSHMEM patterns through the C ABI against the same
//! loops through the Rust API, in one run.
//!
//! The driver builds `shmem-capi/bench/osu_patterns.c` with the project's
//! `oshcc` (against the `libshmem_capi.so` next to this program), runs it
//! with `oshrun` on the same number of PEs, and turns each Rust row of the
//! `capi` benchmark into a C ABI row whose references are the Rust time
//! (`C/rust`) and memcpy of the bytes received (`t/memcpy`).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::bench::osu::base_iters;
use crate::cli::{Bench, Options};
use crate::error::{BenchError, Result};
use crate::report::{RefKind, Reference, RunResult};

/// The C program's source and the `oshcc`/`oshrun` wrappers.
fn capi_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shmem-capi")
}

/// Builds the C program; its path.
fn build(libdir: &Path) -> Result<PathBuf> {
    if !libdir.join("libshmem_capi.so").exists() {
        return Err(BenchError::Job(format!(
            "capi: {} has no libshmem_capi.so (build it: cargo build --release -p shmem-capi -p shmem-launch)",
            libdir.display()
        )));
    }
    let out = std::env::temp_dir().join(format!("shmem-bench-osu-{}", std::process::id()));
    let src = capi_dir().join("bench/osu_patterns.c");
    let r = Command::new(capi_dir().join("bin/oshcc"))
        .env("SHMEM_LIBDIR", libdir)
        .args(["-O2", "-std=gnu11", "-o"])
        .arg(&out)
        .arg(&src)
        .output()
        .map_err(|e| BenchError::io("running oshcc for", &src, e))?;
    if !r.status.success() {
        return Err(BenchError::Job(format!(
            "capi: oshcc failed on {}: {}",
            src.display(),
            String::from_utf8_lossy(&r.stderr).trim()
        )));
    }
    Ok(out)
}

/// Runs the C program; its `(pattern, bytes, us)` rows.
fn run_c(opts: &Options, prog: &Path, libdir: &Path) -> Result<Vec<(String, usize, f64)>> {
    let max = opts
        .sizes
        .as_ref()
        .and_then(|s| s.iter().copied().max())
        .unwrap_or(1 << 20);
    let r = Command::new(capi_dir().join("bin/oshrun"))
        .env("SHMEMRUN", libdir.join("shmemrun"))
        .args(["-np", &opts.pes.to_string()])
        .arg(prog)
        .args([max.to_string(), base_iters(opts.iters).to_string()])
        .output()
        .map_err(|e| BenchError::io("running oshrun for", prog, e))?;
    if !r.status.success() {
        return Err(BenchError::Job(format!(
            "capi: the C program failed ({}): {}",
            r.status,
            String::from_utf8_lossy(&r.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&r.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            match f.as_slice() {
                ["row", name, bytes, us] => {
                    Some((name.to_string(), bytes.parse().ok()?, us.parse().ok()?))
                }
                _ => None,
            }
        })
        .collect())
}

/// Turns the `capi` rows of `run` (the Rust loops) into C ABI rows with the
/// Rust time and memcpy as references. A Rust row without a C twin stays
/// out (and a C row without a Rust twin).
pub fn merge(opts: &Options, run: &mut RunResult) -> Result<()> {
    let Some(b) = run.benches.iter_mut().find(|b| b.bench == Bench::Capi) else {
        return Ok(());
    };
    let exe = std::env::current_exe()
        .map_err(|e| BenchError::Job(format!("capi: cannot find this program: {e}")))?;
    let libdir = exe
        .parent()
        .ok_or_else(|| BenchError::Job("capi: this program has no directory".into()))?
        .to_path_buf();
    let prog = build(&libdir)?;
    let c_rows = run_c(opts, &prog, &libdir);
    let _ = std::fs::remove_file(&prog);
    let c_rows = c_rows?;
    let rust_rows = std::mem::take(&mut b.rows);
    for mut r in rust_rows {
        let Some(&(_, _, c_us)) = c_rows
            .iter()
            .find(|(name, bytes, _)| *name == r.label && *bytes == r.size)
        else {
            continue;
        };
        let rust_us = r.stats.median_us;
        let memcpy = r
            .refs
            .iter()
            .find(|x| x.kind == RefKind::MemcpyTime)
            .map(|x| x.ref_us);
        r.stats.median_us = c_us;
        r.stats.min_us = c_us;
        r.stats.p99_us = c_us;
        r.stats.mean_us = c_us;
        r.label = format!("{} {}", r.label, crate::report::format_size(r.size));
        r.refs = vec![Reference::new(RefKind::RustApi, c_us, rust_us)];
        if let Some(m) = memcpy {
            r.refs.push(Reference::new(RefKind::MemcpyTime, c_us, m));
        }
        b.rows.push(r);
    }
    Ok(())
}
