//! `shmem-bench`: OSU-style latency, bandwidth and collective benchmarks of
//! the shmem library, each held against a reference measured in the same
//! run: a one-core `memcpy` of the same bytes for data movement, and a raw
//! cache-line ping-pong between two PEs for synchronisation.
//!
//! ```text
//! shmem-bench put --pes 2 --sizes 8:4M --json put.json --plot put.png
//! shmem-bench all --pes 2
//! shmem-bench compare put,get --engines HCCS,SDMA
//! ```
//!
//! The program is its own launcher: the driver process starts `--pes N`
//! copies of itself (with `SHMEM_TEST_ENGINE` set per `--engine`); every PE
//! runs the same benchmarks through its [`shmem::Shmem`] handle; PE 0 hands
//! the summaries back to the driver, which prints the tables and writes the
//! JSON and the plot. Started by `shmemrun` instead, PE 0 prints them itself.

mod bench;
mod capi;
mod cli;
mod driver;
mod error;
mod hosts;
mod measure;
mod pe;
// Without the `plot` feature only the error path of `plot::draw` is used.
#[cfg_attr(not(feature = "plot"), allow(dead_code))]
mod plot;
mod report;
mod stats;
mod tcp;

use cli::{Command, Options};
use error::{BenchError, Result};
use report::RunResult;

/// Prints the tables and writes the JSON and the plot that `opts` asks for.
fn output(opts: &Options, runs: &[RunResult], failures: &[driver::Failure]) -> Result<()> {
    if opts.compare {
        print!("{}", report::compare_tables(runs));
    } else {
        for run in runs {
            for b in &run.benches {
                println!("{}", report::table(run, b));
            }
        }
    }
    if let Some(path) = &opts.json {
        std::fs::write(path, report::json(runs, failures))
            .map_err(|e| BenchError::io("writing", path, e))?;
        eprintln!("shmem-bench: wrote {}", path.display());
    }
    if let Some(path) = &opts.plot {
        if !runs.is_empty() {
            plot::draw(path, runs)?;
            eprintln!("shmem-bench: wrote {}", path.display());
        }
    }
    Ok(())
}

fn main_inner(args: &[String]) -> Result<i32> {
    let opts = match cli::parse(args)? {
        Command::Help => {
            print!("{}", cli::usage());
            return Ok(0);
        }
        Command::Run(opts) => opts,
    };
    if pe::is_pe() {
        if let Some(run) = pe::run(&opts)? {
            pe::deliver(run, &opts)?;
        }
        return Ok(0);
    }
    let (runs, failures) = driver::run_jobs(&opts, args)?;
    output(&opts, &runs, &failures)?;
    Ok(if failures.is_empty() { 0 } else { 1 })
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match main_inner(&args) {
        Ok(code) => code,
        Err(BenchError::Usage(msg)) => {
            eprintln!("shmem-bench: {msg}");
            2
        }
        Err(e) => {
            match shmem::my_pe() {
                Ok(me) => eprintln!("shmem-bench: PE {me}: {e}"),
                Err(_) => eprintln!("shmem-bench: {e}"),
            }
            1
        }
    };
    std::process::exit(code);
}
