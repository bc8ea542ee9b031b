//! The driver: starts one job of `--pes N` PEs per engine (and one per
//! engine-thread count for `sdma-engines`), collects PE 0's results and
//! reports them. With `--hosts H` every job runs on H network namespaces.

use std::path::PathBuf;

use shmem::launch::{launch, LaunchOptions};

use crate::cli::{Bench, Options};
use crate::error::{BenchError, Result};
use crate::hosts::Hosts;
use crate::pe::{ONLY_VAR, RESULTS_VAR};
use crate::report::{decode, RunResult};

/// An engine that produced no results, and why.
pub type Failure = (String, String);

/// One job to start.
struct Job {
    /// Name in error lines.
    name: String,
    /// `SHMEM_TEST_ENGINE`, if forced.
    engine: Option<String>,
    /// Extra environment.
    env: Vec<(String, String)>,
    /// Whether this is an `sdma-engines` job (merged into one result).
    engines_job: bool,
}

fn jobs(opts: &Options) -> Vec<Job> {
    let mut jobs = Vec::new();
    let regular: Vec<&str> = opts
        .benches
        .iter()
        .filter(|&&b| b != Bench::SdmaEngines)
        .map(|b| b.name())
        .collect();
    let split = regular.len() < opts.benches.len();
    if !regular.is_empty() {
        let engines: Vec<Option<String>> = if opts.engines.is_empty() {
            vec![None]
        } else {
            opts.engines.iter().cloned().map(Some).collect()
        };
        for engine in engines {
            let mut env = Vec::new();
            if split {
                env.push((ONLY_VAR.to_string(), regular.join(",")));
            }
            jobs.push(Job {
                name: engine.clone().unwrap_or_else(|| "auto".into()),
                engine,
                env,
                engines_job: false,
            });
        }
    }
    if split {
        for &k in &opts.sdma_engines {
            jobs.push(Job {
                name: format!("SDMA with {k} engine threads"),
                engine: Some("SDMA".into()),
                env: vec![
                    (ONLY_VAR.into(), Bench::SdmaEngines.name().into()),
                    ("SHMEM_SDMA_ENGINES".into(), k.to_string()),
                ],
                engines_job: true,
            });
        }
    }
    jobs
}

/// The `sdma-engines` jobs' results as one run: their rows in one table.
fn merge_engine_runs(mut runs: Vec<RunResult>) -> Option<RunResult> {
    let mut merged = runs.first().cloned()?;
    merged.engine = "SDMA".into();
    for run in runs.drain(1..) {
        let rows = run.benches.into_iter().flat_map(|b| b.rows);
        if let Some(b) = merged.benches.first_mut() {
            b.rows.extend(rows);
        }
    }
    Some(merged)
}

/// Runs the jobs `opts` asks for; returns the results of those that ran
/// and a line for each that did not.
pub fn run_jobs(opts: &Options, args: &[String]) -> Result<(Vec<RunResult>, Vec<Failure>)> {
    let exe = std::env::current_exe()
        .map_err(|e| BenchError::Job(format!("cannot find this program to start its PEs: {e}")))?;
    // Created before the first job, deleted when this function returns
    // (whether the jobs succeeded, failed or were interrupted).
    let hosts = if opts.hosts > 1 {
        let h = Hosts::new(opts.hosts)?;
        if !opts.quiet {
            // The PEs inherit the environment: SHMEM_ROCE_PROVIDER=ofi|sw
            // (and FI_PROVIDER) pick the RoCE engine's provider.
            let var = |k: &str| std::env::var(k).unwrap_or_default();
            let fi = var("FI_PROVIDER");
            eprintln!(
                "shmem-bench: {} PEs on {} network-namespace hosts, RoCE provider {}{}",
                opts.pes,
                opts.hosts,
                match var("SHMEM_ROCE_PROVIDER").trim() {
                    "" => "auto",
                    p => p,
                },
                if fi.is_empty() {
                    String::new()
                } else {
                    format!(" (FI_PROVIDER={fi})")
                }
            );
        }
        Some(h)
    } else {
        None
    };
    let linked = shmem::engines();
    let (mut runs, mut failures) = (Vec::new(), Vec::new());
    let mut engine_runs = Vec::new();
    for (i, job) in jobs(opts).into_iter().enumerate() {
        if let Some(e) = &job.engine {
            if !linked.iter().any(|l| l.eq_ignore_ascii_case(e)) {
                let why = format!(
                    "not linked into this shmem-bench (linked: {}); skipped",
                    linked.join(", ")
                );
                eprintln!("shmem-bench: engine {e}: {why}");
                failures.push((job.name, why));
                continue;
            }
        }
        let results = results_path(i);
        let mut lo = LaunchOptions::new(opts.pes, &exe);
        lo.args = args.iter().map(Into::into).collect();
        lo.engine = job.engine.clone();
        lo.timeout = Some(opts.timeout);
        lo.env = job.env;
        lo.env
            .push((RESULTS_VAR.into(), results.to_string_lossy().into_owned()));
        if let Some(h) = &hosts {
            h.place(&mut lo);
        }
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
            Ok(run) if job.engines_job => engine_runs.push(run),
            Ok(mut run) => match crate::capi::merge(opts, &mut run) {
                Ok(()) => runs.push(run),
                Err(e) => {
                    eprintln!("shmem-bench: engine {}: {e}", job.name);
                    failures.push((job.name, e.to_string()));
                }
            },
            Err(e) => {
                eprintln!("shmem-bench: engine {}: {e}", job.name);
                failures.push((job.name, e.to_string()));
            }
        }
    }
    runs.extend(merge_engine_runs(engine_runs));
    drop(hosts);
    Ok((runs, failures))
}

fn results_path(i: usize) -> PathBuf {
    std::env::temp_dir().join(format!("shmem-bench-{}-{i}.results", std::process::id()))
}
