//! AllGather across N PEs: every PE's block lands in slot `pe` of every
//! PE's output. Verified against golden data on every PE each iteration;
//! PE 0 prints the time per allgather and the bandwidth.
//!
//! ```text
//! cargo run --release --example allgather -- --pes 4 [--size 1M] [--iters 20]
//! shmemrun -n 4 target/release/examples/allgather
//! ```

use std::time::{Duration, Instant};

use shmem::{Error, Result};

fn golden(pe: usize, iter: usize, i: usize) -> u64 {
    ((pe as u64) << 48) ^ ((iter as u64) << 32) ^ (i as u64).wrapping_mul(0x9e37_79b9)
}

fn arg(name: &str, default: &str) -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| default.to_string())
}

fn run() -> Result<()> {
    let size = shmem_core_size(&arg("--size", "1M"))?;
    let iters: usize = arg("--iters", "20")
        .parse()
        .map_err(|_| Error::invalid("--iters", "not a number"))?;
    let warmup = 2;
    let pe = shmem::init()?;
    let (me, n) = (pe.my_pe(), pe.n_pes());
    let block = (size / 8).max(1);
    let output = pe.malloc::<u64>(block * n)?;
    let mut times = Vec::with_capacity(iters);
    for iter in 0..warmup + iters {
        let input: Vec<u64> = (0..block).map(|i| golden(me, iter, i)).collect();
        pe.barrier_all()?; // previous verification done everywhere
        let t0 = Instant::now();
        let my_slot = output.slice(me * block..(me + 1) * block)?;
        for k in 0..n {
            pe.put(my_slot, &input, (me + k) % n)?;
        }
        pe.barrier_all()?; // every block has landed everywhere
        let dt = t0.elapsed();
        if iter >= warmup {
            times.push(dt);
        }
        let got = pe.read_local(&output)?;
        for src in 0..n {
            for i in 0..block {
                let want = golden(src, iter, i);
                let have = got[src * block + i];
                if have != want {
                    return Err(Error::invalid(
                        "output",
                        format!("PE {me}, iteration {iter}: slot {src} element {i} is {have:#x}, expected {want:#x}"),
                    ));
                }
            }
        }
    }
    pe.free(output)?;
    if me == 0 {
        times.sort();
        let median = times[times.len() / 2];
        let mean = times.iter().sum::<Duration>() / times.len() as u32;
        let secs = median.as_secs_f64();
        let bytes = (block * 8) as f64;
        let algbw = bytes * n as f64 / secs / 1e9;
        let busbw = algbw * (n as f64 - 1.0) / n as f64;
        println!(
            "allgather: {n} PEs x {} bytes, {iters} iterations: median {:.1} us (mean {:.1} us), algbw {algbw:.2} GB/s, busbw {busbw:.2} GB/s, engine {}",
            block * 8,
            secs * 1e6,
            mean.as_secs_f64() * 1e6,
            pe.route_summary()
        );
        println!("allgather: golden data verified on all {n} PEs in every iteration");
    }
    pe.finalize()
}

fn shmem_core_size(text: &str) -> Result<usize> {
    shmem::config_parse_size(text).map_err(|r| Error::invalid("--size", r))
}

fn main() {
    if let Some(code) = shmem::launch::launch_self_if_requested() {
        std::process::exit(code);
    }
    if let Err(e) = run() {
        eprintln!("allgather failed: {e}");
        std::process::exit(1);
    }
}
