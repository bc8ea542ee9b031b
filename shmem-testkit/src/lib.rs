//! Test kit of the `shmem` library: PEs as threads of one process, and the
//! conformance suite every engine crate runs against itself.
//!
//! * [`InProcessJob`] / [`InProcessBootstrap`]: a [`shmem_core::Bootstrap`]
//!   whose PEs are threads sharing one in-memory rendezvous (no TCP store,
//!   no launcher). Engines still do what they do between processes: same
//!   user, same node, so HCCS and SDMA map each PE's `memfd` heap over
//!   `SCM_RIGHTS`, and the ROCE software provider talks TCP on loopback.
//! * [`run_pes`]: starts `n` PEs with one engine forced for every peer
//!   (`SHMEM_TEST_ENGINE`), runs a scenario on each, finalizes, and returns
//!   every PE's failure. A watchdog ends a hung scenario with an error.
//! * [`conformance`]: the scenarios (put/get at many sizes and alignments,
//!   every atomic op and width, signals, waits, ordering, non-blocking
//!   operations, error cases), and [`conformance_tests!`], which expands to
//!   one `#[test]` per scenario.
//!
//! An engine crate proves itself alone with one file in its `tests/`:
//!
//! ```ignore
//! // shmem-transport-foo/tests/conformance.rs
//! shmem_testkit::conformance_tests!("FOO", shmem_transport_foo::link());
//! ```
//!
//! A scenario of one's own:
//!
//! ```no_run
//! use shmem_testkit::{check, run_pes, sync};
//! # fn link_some_engine() {}
//! link_some_engine();
//! run_pes(2, "HCCS", |rt| {
//!     let x = rt.calloc::<u64>(1)?;
//!     let peer = (rt.my_pe() + 1) % rt.n_pes();
//!     rt.p(x.at(0)?, 7 + rt.my_pe() as u64, peer)?;
//!     sync(rt)?;
//!     let got = rt.read_local(&x)?[0];
//!     check!(got == 7 + peer as u64, "PE {} read {got}", rt.my_pe());
//!     rt.free(x)?;
//!     Ok(())
//! })
//! .unwrap();
//! ```

#![warn(clippy::missing_errors_doc)]

mod bootstrap;
pub mod conformance;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

pub use bootstrap::{InProcessBootstrap, InProcessJob};
use shmem_core::{Config, Runtime, RuntimeOptions};

/// Why a scenario failed on one PE: a library error or a failed check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure(pub String);

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Failure {}

impl From<shmem_core::Error> for Failure {
    fn from(e: shmem_core::Error) -> Failure {
        Failure(e.to_string())
    }
}

/// What a scenario returns on each PE.
pub type Outcome = std::result::Result<(), Failure>;

/// Returns a [`Failure`] with the formatted message unless `cond` holds.
#[macro_export]
macro_rules! check {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err($crate::Failure(format!(
                "{}:{}: check `{}` failed: {}",
                file!(),
                line!(),
                stringify!($cond),
                format!($($fmt)+)
            )));
        }
    };
}

/// Completes this PE's operations and waits for every PE (`quiet`, then a
/// bootstrap barrier): what every PE wrote before is visible after it.
///
/// # Errors
/// When `quiet` or the barrier fails (a PE died, the watchdog fired).
pub fn sync(rt: &Runtime) -> Outcome {
    rt.quiet()?;
    rt.bootstrap().barrier()?;
    Ok(())
}

/// How [`Job::run`] starts its PEs.
#[derive(Debug, Clone)]
pub struct Job {
    /// Number of PEs (threads).
    pub n_pes: usize,
    /// Engine forced for every peer (`SHMEM_TEST_ENGINE`); empty routes
    /// automatically over the linked engines.
    pub engine: String,
    /// Symmetric heap per PE.
    pub heap_size: usize,
    /// After this long the watchdog fails the job's waits and collectives;
    /// after twice as long it aborts the process (a hang must fail).
    pub timeout: Duration,
    /// `SHMEM_*` settings of the job, over the process environment (e.g.
    /// `SHMEM_TRANSPORT_PLUGINS`).
    pub env: Vec<(String, String)>,
}

/// The PEs of a job that failed, each with its failure.
#[derive(Debug, Clone)]
pub struct JobFailed {
    /// Engine the job forced.
    pub engine: String,
    /// `(PE, failure)`, by PE.
    pub failures: Vec<(usize, Failure)>,
}

impl fmt::Display for JobFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "engine {:?}:", self.engine)?;
        for (pe, why) in &self.failures {
            write!(f, "\n  PE {pe}: {why}")?;
        }
        Ok(())
    }
}

impl std::error::Error for JobFailed {}

impl Job {
    /// `n_pes` PEs on `engine`, 16 MiB heaps, a 120 s watchdog.
    pub fn new(n_pes: usize, engine: &str) -> Job {
        Job {
            n_pes,
            engine: engine.to_string(),
            heap_size: 16 << 20,
            timeout: Duration::from_secs(120),
            env: Vec::new(),
        }
    }

    /// Runs `scenario` on every PE (each a thread with its own
    /// [`Runtime`]), then finalizes them.
    ///
    /// # Errors
    /// [`JobFailed`] naming every PE whose start-up, scenario or finalize
    /// failed (or panicked); a PE that fails ends the others' waits.
    pub fn run<F>(&self, scenario: F) -> std::result::Result<(), JobFailed>
    where
        F: Fn(&Runtime) -> Outcome + Sync,
    {
        let job = InProcessJob::new(self.n_pes, self.timeout);
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let watchdog = {
            let job = job.clone();
            let timeout = self.timeout;
            std::thread::spawn(move || {
                if done_rx.recv_timeout(timeout).is_ok() {
                    return;
                }
                let why = format!(
                    "the scenario ran past its {} s limit (testkit watchdog)",
                    timeout.as_secs()
                );
                job.mark_dead(0, &why);
                if done_rx.recv_timeout(timeout).is_err() {
                    eprintln!(
                        "shmem-testkit: PEs still hung {} s after the watchdog fired; aborting",
                        timeout.as_secs()
                    );
                    std::process::abort();
                }
            })
        };
        let results: Vec<Outcome> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..self.n_pes)
                .map(|pe| {
                    let job = job.clone();
                    let scenario = &scenario;
                    std::thread::Builder::new()
                        .name(format!("pe{pe}"))
                        .spawn_scoped(s, move || {
                            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                                self.one_pe(&job, pe, scenario)
                            }))
                            .unwrap_or_else(|p| {
                                let msg = p
                                    .downcast_ref::<String>()
                                    .cloned()
                                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                                    .unwrap_or_else(|| "a panic".into());
                                Err(Failure(format!("panicked: {msg}")))
                            });
                            if let Err(e) = &r {
                                job.mark_dead(pe, &format!("PE {pe} failed: {e}"));
                            }
                            r
                        })
                        .map_err(|e| Failure(format!("spawning PE {pe}: {e}")))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| match h {
                    Ok(h) => h
                        .join()
                        .unwrap_or_else(|_| Err(Failure("thread panicked".into()))),
                    Err(e) => Err(e),
                })
                .collect()
        });
        let _ = done_tx.send(());
        let _ = watchdog.join();
        let failures: Vec<(usize, Failure)> = results
            .into_iter()
            .enumerate()
            .filter_map(|(pe, r)| r.err().map(|e| (pe, e)))
            .collect();
        if failures.is_empty() {
            Ok(())
        } else {
            Err(JobFailed {
                engine: self.engine.clone(),
                failures,
            })
        }
    }

    fn one_pe<F>(&self, job: &Arc<InProcessJob>, pe: usize, scenario: &F) -> Outcome
    where
        F: Fn(&Runtime) -> Outcome,
    {
        let mut config =
            Config::from_lookup(
                |k| match self.env.iter().rev().find(|(name, _)| name == k) {
                    Some((_, v)) => Some(v.clone()),
                    None => std::env::var(k).ok(),
                },
            )?;
        config.test_engine = self.engine.clone();
        let rt = Runtime::new(
            Arc::new(job.member(pe)?),
            RuntimeOptions {
                instance: 0,
                mem_size: Some(self.heap_size),
                config,
            },
        )?;
        // A suite that ran on some other engine would prove nothing.
        if !self.engine.is_empty() {
            for peer in 0..self.n_pes {
                let used = rt.engine_for(peer)?;
                if !used.eq_ignore_ascii_case(&self.engine) {
                    return Err(Failure(format!(
                        "PE {pe} reaches PE {peer} through {used}, not the forced {}",
                        self.engine
                    )));
                }
            }
        }
        scenario(&rt)?;
        rt.finalize()?;
        Ok(())
    }
}

/// Runs `scenario` on `n` PEs with `engine` forced for every peer
/// (see [`Job::run`]).
///
/// # Errors
/// [`JobFailed`] naming every PE that failed.
pub fn run_pes<F>(n: usize, engine: &str, scenario: F) -> std::result::Result<(), JobFailed>
where
    F: Fn(&Runtime) -> Outcome + Sync,
{
    Job::new(n, engine).run(scenario)
}
