//! What each PE runs: join the job, run the benchmarks, and on PE 0 hand
//! the results to the driver (or print them, when started by `shmemrun`).

use shmem::JoinMethod;
use shmem_bootstrap::env;

use crate::bench;
use crate::cli::{Bench, Options};
use crate::error::{BenchError, Result};
use crate::measure::Ctx;
use crate::report::RunResult;

/// Where PE 0 writes its results for the driver (set by the driver).
pub const RESULTS_VAR: &str = "SHMEM_BENCH_RESULTS";

/// Set by the driver for jobs that run only some of the benchmarks asked
/// for (`sdma-engines` runs in jobs of its own): a comma-separated list.
pub const ONLY_VAR: &str = "SHMEM_BENCH_ONLY";

/// Slack on top of the largest buffers, for the library's own objects.
const HEAP_SLACK: usize = 16 << 20;

/// Whether this process is a PE of a job (started by the driver,
/// `shmemrun` or torchrun) rather than the driver itself.
pub fn is_pe() -> bool {
    std::env::var_os(env::RANK).is_some()
        || (std::env::var_os(env::TORCH_RANK).is_some()
            && std::env::var_os(env::TORCH_WORLD_SIZE).is_some())
}

fn job_size(opts: &Options) -> usize {
    [env::NRANKS, env::TORCH_WORLD_SIZE]
        .iter()
        .find_map(|v| std::env::var(v).ok()?.parse().ok())
        .unwrap_or(opts.pes)
}

/// Runs the benchmarks in this PE; returns the results on PE 0.
pub fn run(opts: &Options) -> Result<Option<RunResult>> {
    let narrowed;
    let opts = match std::env::var(ONLY_VAR) {
        Ok(list) if !list.is_empty() => {
            let mut o = opts.clone();
            o.benches = list
                .split(',')
                .map(|n| {
                    Bench::parse(n).ok_or_else(|| {
                        BenchError::Job(format!("{ONLY_VAR}: unknown benchmark {n:?}"))
                    })
                })
                .collect::<Result<_>>()?;
            narrowed = o;
            &narrowed
        }
        _ => opts,
    };
    let config = shmem::Config::from_env()?;
    // Every PE derives the heap size from the same arguments and job size,
    // so they agree on it.
    let needed = opts
        .benches
        .iter()
        .map(|&b| bench::heap_bytes(opts, b, job_size(opts)))
        .max()
        .unwrap_or(0)
        .saturating_add(HEAP_SLACK);
    let heap = needed
        .max(config.symmetric_size.0)
        .next_multiple_of(1 << 20);
    let pe = shmem::init_with(JoinMethod::Environment, Some(heap), 0, Some(config))?;
    let mut ctx = Ctx::new(&pe, opts)?;
    let mut benches = Vec::with_capacity(opts.benches.len());
    for &b in &opts.benches {
        benches.push(bench::run(&mut ctx, b)?);
    }
    let (cacheline_us, memcpy) = ctx.references();
    ctx.finish()?;
    let run = RunResult {
        engine: std::env::var(env::TEST_ENGINE)
            .ok()
            .filter(|e| !e.is_empty())
            .unwrap_or_else(|| "auto".into()),
        routes: pe.route_summary(),
        pes: pe.n_pes(),
        iters: opts.iters,
        warmup: opts.warmup,
        cacheline_us,
        memcpy,
        benches,
    };
    let me = pe.my_pe();
    pe.finalize()?;
    Ok((me == 0).then_some(run))
}

/// PE 0's results: to the driver's file, or printed when there is no driver.
pub fn deliver(run: RunResult, opts: &Options) -> Result<()> {
    match std::env::var_os(RESULTS_VAR) {
        Some(path) => std::fs::write(&path, crate::report::encode(&run))
            .map_err(|e| BenchError::io("writing results to", path, e)),
        None => crate::output(opts, &[run], &[]),
    }
}
