//! Runs a job of N PEs as N threads of the test process, over the HCCS
//! (shared-memory) engine, with a watchdog.

#![allow(dead_code)]

use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use shmem_collectives::Collectives;
use shmem_core::{Config, Result, Runtime, RuntimeOptions};

/// PE counts every collective is checked at.
pub const PE_COUNTS: [usize; 6] = [1, 2, 3, 4, 5, 8];

/// How long one job may take before the test fails.
pub const WATCHDOG: Duration = Duration::from_secs(90);

/// One job at a time: the CI machine has two cores, and jobs of 8 PEs
/// running side by side would only slow each other down.
static JOBS: Mutex<()> = Mutex::new(());

/// A configuration with a 16 MiB heap, changed by `tweak`.
pub fn config(tweak: impl Fn(&mut Config)) -> Config {
    let mut cfg = Config::from_lookup(|_| None).expect("default config");
    cfg.symmetric_size = shmem_core::config::ByteSize(16 << 20);
    cfg.bootstrap_addr = "127.0.0.1".into();
    tweak(&mut cfg);
    cfg
}

/// Runs `body` on `n` PEs (threads) and returns each PE's result, indexed
/// by PE. Set-up failures and panics fail the test; so does the watchdog.
pub fn run<R, F>(n: usize, cfg: Config, body: F) -> Vec<Result<R>>
where
    R: Send + 'static,
    F: Fn(&Arc<Runtime>, &Collectives) -> Result<R> + Send + Sync + 'static,
{
    run_each(vec![cfg; n], body)
}

/// [`run`] with a configuration per PE (`configs.len()` PEs).
pub fn run_each<R, F>(configs: Vec<Config>, body: F) -> Vec<Result<R>>
where
    R: Send + 'static,
    F: Fn(&Arc<Runtime>, &Collectives) -> Result<R> + Send + Sync + 'static,
{
    shmem_transport_hccs::link();
    let n = configs.len();
    let _guard = JOBS.lock().unwrap_or_else(|p| p.into_inner());
    let uid = shmem_bootstrap::get_unique_id(&configs[0]).expect("unique id");
    let body = Arc::new(body);
    let (tx, rx) = mpsc::channel();
    for (rank, cfg) in configs.into_iter().enumerate() {
        let (uid, body, tx) = (uid.clone(), body.clone(), tx.clone());
        std::thread::Builder::new()
            .name(format!("pe{rank}"))
            .spawn(move || {
                let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    let bs = shmem_bootstrap::init_with_unique_id(rank, n, &uid, &cfg)
                        .expect("bootstrap");
                    let rt = Runtime::new(
                        Arc::new(bs),
                        RuntimeOptions {
                            instance: 0,
                            mem_size: None,
                            config: cfg.clone(),
                        },
                    )
                    .expect("runtime");
                    let r = Collectives::new(rt.clone()).and_then(|coll| body(&rt, &coll));
                    rt.finalize().expect("finalize");
                    r
                }));
                let _ = tx.send((rank, out));
            })
            .expect("spawn PE thread");
    }
    drop(tx);
    let deadline = Instant::now() + WATCHDOG;
    let mut results: Vec<Option<Result<R>>> = (0..n).map(|_| None).collect();
    for _ in 0..n {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((rank, Ok(r))) => results[rank] = Some(r),
            Ok((rank, Err(panic))) => {
                let msg = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                panic!("PE {rank} of {n} panicked: {msg}");
            }
            Err(_) => {
                let missing: Vec<usize> = (0..n).filter(|&r| results[r].is_none()).collect();
                panic!("job of {n} PEs hung: PEs {missing:?} did not finish within {WATCHDOG:?}");
            }
        }
    }
    results
        .into_iter()
        .map(|r| r.expect("every PE reported"))
        .collect()
}

/// [`run`], failing the test if any PE returned an error.
pub fn run_ok<R, F>(n: usize, cfg: Config, body: F) -> Vec<R>
where
    R: Send + 'static,
    F: Fn(&Arc<Runtime>, &Collectives) -> Result<R> + Send + Sync + 'static,
{
    run(n, cfg, body)
        .into_iter()
        .enumerate()
        .map(|(pe, r)| r.unwrap_or_else(|e| panic!("PE {pe} of {n} failed: {e}")))
        .collect()
}
