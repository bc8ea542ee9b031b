//! put_signal ping-pong between PE 0 and PE 1; prints the half round-trip
//! latency. Other PEs (if any) only take part in the barriers.
//!
//! ```text
//! cargo run --release --example ping_pong -- --pes 2 [--size 8] [--iters 20000]
//! ```

use std::time::Instant;

use shmem::{Cmp, Error, Result, SignalOp};

fn arg(name: &str, default: &str) -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| default.to_string())
}

fn run() -> Result<()> {
    let size =
        shmem::config_parse_size(&arg("--size", "8")).map_err(|r| Error::invalid("--size", r))?;
    let iters: u64 = arg("--iters", "20000")
        .parse()
        .map_err(|_| Error::invalid("--iters", "not a number"))?;
    let pe = shmem::init()?;
    let me = pe.my_pe();
    if pe.n_pes() < 2 {
        return Err(Error::invalid("--pes", "ping_pong needs at least 2 PEs"));
    }
    let buf = pe.calloc::<u8>(size.max(1))?;
    let sig = pe.calloc::<u64>(1)?;
    let s = shmem::Signal::from(&sig);
    let data = vec![0xabu8; size];
    let warmup = iters / 10;
    pe.barrier_all()?;
    let mut t0 = Instant::now();
    if me < 2 {
        let peer = 1 - me;
        for i in 1..=warmup + iters {
            if i == warmup + 1 {
                t0 = Instant::now();
            }
            if me == 0 {
                pe.put_signal(&buf, &data, s, i, SignalOp::Set, peer)?;
                pe.signal_wait_until(s, Cmp::Ge, i)?;
            } else {
                pe.signal_wait_until(s, Cmp::Ge, i)?;
                pe.put_signal(&buf, &data, s, i, SignalOp::Set, peer)?;
            }
        }
    }
    let dt = t0.elapsed();
    pe.barrier_all()?;
    if me == 1 {
        let got = pe.read_local(&buf)?;
        if got.iter().any(|&b| b != 0xab) {
            return Err(Error::invalid("buffer", "PE 1 received wrong bytes"));
        }
    }
    if me == 0 {
        let half_rtt_us = dt.as_secs_f64() * 1e6 / iters as f64 / 2.0;
        println!(
            "ping_pong: {size} bytes, {iters} round trips: half round trip {half_rtt_us:.3} us, engine {}",
            pe.engine_for(1)?
        );
    }
    pe.free(buf)?;
    pe.free(sig)?;
    pe.finalize()
}

fn main() {
    if let Some(code) = shmem::launch::launch_self_if_requested() {
        std::process::exit(code);
    }
    if let Err(e) = run() {
        eprintln!("ping_pong failed: {e}");
        std::process::exit(1);
    }
}
