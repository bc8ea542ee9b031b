//! The driver: starts one job of `--pes N` PEs per engine, collects PE 0's
//! results and reports them.

use std::path::PathBuf;

use shmem::launch::{launch, LaunchOptions};

use crate::cli::Options;
use crate::error::{BenchError, Result};
use crate::pe::RESULTS_VAR;
use crate::report::{decode, RunResult};

/// An engine that produced no results, and why.
pub type Failure = (String, String);

/// Runs one job of this program per requested engine; returns the results
/// of those that ran and a line for each that did not.
pub fn run_jobs(opts: &Options, args: &[String]) -> Result<(Vec<RunResult>, Vec<Failure>)> {
    let exe = std::env::current_exe()
        .map_err(|e| BenchError::Job(format!("cannot find this program to start its PEs: {e}")))?;
    let linked = shmem::engines();
    let engines: Vec<Option<String>> = if opts.engines.is_empty() {
        vec![None]
    } else {
        opts.engines.iter().cloned().map(Some).collect()
    };
    let (mut runs, mut failures) = (Vec::new(), Vec::new());
    for (i, engine) in engines.into_iter().enumerate() {
        let name = engine.clone().unwrap_or_else(|| "auto".into());
        if let Some(e) = &engine {
            if !linked.iter().any(|l| l.eq_ignore_ascii_case(e)) {
                let why = format!(
                    "not linked into this shmem-bench (linked: {}); skipped",
                    linked.join(", ")
                );
                eprintln!("shmem-bench: engine {e}: {why}");
                failures.push((name, why));
                continue;
            }
        }
        let results = results_path(i);
        let mut lo = LaunchOptions::new(opts.pes, &exe);
        lo.args = args.iter().map(Into::into).collect();
        lo.engine = engine;
        lo.timeout = Some(opts.timeout);
        lo.env
            .push((RESULTS_VAR.into(), results.to_string_lossy().into_owned()));
        let report = launch(&lo)?;
        let outcome = if report.success() {
            std::fs::read_to_string(&results)
                .map_err(|e| BenchError::io("reading results from", &results, e))
                .and_then(|text| decode(&text))
        } else {
            Err(BenchError::Job(report.summary().unwrap_or_else(|| {
                format!("the job failed with exit code {}", report.exit_code())
            })))
        };
        let _ = std::fs::remove_file(&results);
        match outcome {
            Ok(run) => runs.push(run),
            Err(e) => {
                eprintln!("shmem-bench: engine {name}: {e}");
                failures.push((name, e.to_string()));
            }
        }
    }
    Ok((runs, failures))
}

fn results_path(i: usize) -> PathBuf {
    std::env::temp_dir().join(format!("shmem-bench-{}-{i}.results", std::process::id()))
}
