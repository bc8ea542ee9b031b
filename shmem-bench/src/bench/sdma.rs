//! The SDMA copy engine: how much of the calling thread a large
//! non-blocking put leaves for computation (`sdma-overlap`), and how a
//! blocking put scales with engine threads (`sdma-engines`).

use std::hint::black_box;
use std::time::Instant;

use crate::cli::Bench;
use crate::error::{BenchError, Result};
use crate::measure::{Ctx, Scope};
use crate::report::{format_size, RefKind, Reference, Row};
use crate::stats::Summary;

use super::{row, size_label};

/// Multiply-add steps of one compute unit (about 2-4 us on one core).
const UNIT_STEPS: usize = 1024;
/// Most repetitions of an overlap sample (each moves 256 MiB four times).
const MAX_OVERLAP_REPS: usize = 20;

/// `units` units of register-resident floating-point work: eight
/// independent multiply-add chains, so it runs at the core's arithmetic
/// rate and touches no memory (the copy's memory traffic cannot slow it;
/// only losing the core, or the calling thread being blocked, can).
fn compute(units: usize, lanes: &mut [f64; 8]) {
    let (a, b) = (black_box(0.999_999_9), black_box(1e-7));
    let mut x = *lanes;
    for _ in 0..units {
        for _ in 0..UNIT_STEPS {
            for v in &mut x {
                *v = *v * a + b;
            }
        }
        x = black_box(x);
    }
    *lanes = x;
}

fn us_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e6
}

fn median(v: &[f64]) -> f64 {
    Summary::of(v).map_or(f64::NAN, |s| s.median_us)
}

fn summary(v: &[f64]) -> Result<Summary> {
    Summary::of(v).ok_or_else(|| BenchError::Job("no samples were taken".into()))
}

/// What PE 0 measured for one size.
#[derive(Default)]
struct Overlap {
    /// Solo compute, us per unit.
    solo: Vec<f64>,
    /// put_nbi + quiet with nothing else to do, us.
    alone: Vec<f64>,
    /// put_nbi, compute, quiet: transfer time (issue to quiet's return), us.
    nbi_xfer: Vec<f64>,
    /// Its compute rate / the solo rate of the same repetition.
    nbi_ratio: Vec<f64>,
    /// put_handle, compute until done: transfer time, us.
    handle_xfer: Vec<f64>,
    /// Its compute rate / the solo rate of the same repetition.
    handle_ratio: Vec<f64>,
    /// The ceiling: a plain thread copying `size` bytes (memcpy, private
    /// buffers) while this thread computes: the copy's time, us.
    thread_xfer: Vec<f64>,
    /// Compute rate beside that thread / the solo rate.
    thread_ratio: Vec<f64>,
}

/// sdma-overlap: PE 0 starts a large put to PE 1 and computes while the
/// copy engine moves it; PE 1 waits in a barrier (asleep, off the cores).
pub fn overlap(ctx: &mut Ctx<'_>) -> Result<Vec<Row>> {
    let pe = ctx.pe;
    let me = ctx.me;
    let reps = ctx.opts.iters.clamp(1, MAX_OVERLAP_REPS);
    let sizes = ctx.opts.sizes_for(Bench::SdmaOverlap);
    let max = sizes.iter().copied().max().unwrap_or(8);
    let sym = pe.malloc::<u8>(max)?;
    let peer = 1;
    let mut rows = Vec::new();
    for size in sizes {
        pe.barrier_all()?;
        let mut o = Overlap::default();
        let mut units_per_xfer = 0;
        if me == 0 {
            let remote = sym.slice(..size)?;
            let mut src = vec![0x5au8; size];
            // Touched once here, so the first reference copy pays no page faults.
            let mut scratch = src.clone();
            let mut lanes = [1.0f64; 8];
            // Warm-up: touch the destination pages once, and calibrate the
            // compute so that one solo batch lasts about one transfer.
            // SAFETY: `src` is neither moved nor written before the quiet.
            unsafe { pe.put_nbi(remote, &src, peer)? };
            pe.quiet()?;
            let t = Instant::now();
            // SAFETY: as above.
            unsafe { pe.put_nbi(remote, &src, peer)? };
            pe.quiet()?;
            let xfer_us = us_since(t);
            let t = Instant::now();
            compute(64, &mut lanes);
            let unit_us = us_since(t) / 64.0;
            units_per_xfer = ((xfer_us / unit_us).ceil() as usize).max(1);
            for _ in 0..reps {
                // Solo compute, right before the overlapped runs.
                let t = Instant::now();
                compute(units_per_xfer, &mut lanes);
                let solo = us_since(t) / units_per_xfer as f64;
                o.solo.push(solo);

                let t = Instant::now();
                // SAFETY: as above.
                unsafe { pe.put_nbi(remote, &src, peer)? };
                pe.quiet()?;
                o.alone.push(us_since(t));

                // put_nbi, then as much compute as a solo transfer lasts,
                // then quiet.
                let t0 = Instant::now();
                // SAFETY: as above.
                unsafe { pe.put_nbi(remote, &src, peer)? };
                let t1 = Instant::now();
                compute(units_per_xfer, &mut lanes);
                let per_unit = us_since(t1) / units_per_xfer as f64;
                pe.quiet()?;
                o.nbi_xfer.push(us_since(t0));
                o.nbi_ratio.push(solo / per_unit);

                // put_handle, computing one unit at a time until it is done.
                let buf = std::mem::take(&mut src);
                let t0 = Instant::now();
                let h = pe.put_handle(remote, buf, peer)?;
                let t1 = Instant::now();
                let mut units = 0usize;
                loop {
                    compute(1, &mut lanes);
                    units += 1;
                    if h.is_done() {
                        break;
                    }
                }
                let per_unit = us_since(t1) / units as f64;
                o.handle_xfer.push(us_since(t0));
                src = h.wait().map_err(shmem::Error::from)?;
                o.handle_ratio.push(solo / per_unit);

                // The ceiling on this machine: the same compute beside a
                // plain thread that copies the same bytes.
                let (from, to) = (&src, &mut scratch);
                let (copy_us, per_unit) = std::thread::scope(|s| {
                    let copier = s.spawn(move || {
                        let t = Instant::now();
                        to.copy_from_slice(from);
                        black_box(to);
                        us_since(t)
                    });
                    let t1 = Instant::now();
                    compute(units_per_xfer, &mut lanes);
                    let per_unit = us_since(t1) / units_per_xfer as f64;
                    (copier.join().unwrap_or(f64::NAN), per_unit)
                });
                o.thread_xfer.push(copy_us);
                o.thread_ratio.push(solo / per_unit);
            }
            black_box(lanes);
        }
        pe.barrier_all()?;
        if me != 0 {
            continue;
        }
        let label = size_label(size);
        let solo_us = median(&o.solo);
        let alone_us = median(&o.alone);
        let one = |label: String, bytes: usize, v: &[f64], refs: Vec<Reference>| -> Result<Row> {
            Ok(Row {
                label,
                size,
                bytes,
                batch: 1,
                stats: summary(v)?,
                refs,
            })
        };
        let with_compute = |xfer: &[f64], ratios: &[f64]| {
            vec![
                Reference {
                    kind: RefKind::ComputeRate,
                    ref_us: solo_us,
                    ratio: median(ratios),
                },
                Reference::new(RefKind::TransferAlone, median(xfer), alone_us),
            ]
        };
        rows.push(one(
            format!("compute solo ({units_per_xfer} units)"),
            0,
            &o.solo,
            Vec::new(),
        )?);
        rows.push(one(format!("put_nbi {label}"), size, &o.alone, Vec::new())?);
        rows.push(one(
            format!("put_nbi+compute {label}"),
            size,
            &o.nbi_xfer,
            with_compute(&o.nbi_xfer, &o.nbi_ratio),
        )?);
        rows.push(one(
            format!("put_handle+compute {label}"),
            size,
            &o.handle_xfer,
            with_compute(&o.handle_xfer, &o.handle_ratio),
        )?);
        rows.push(one(
            format!("memcpy thread+compute {label}"),
            size,
            &o.thread_xfer,
            with_compute(&o.thread_xfer, &o.thread_ratio),
        )?);
        if !ctx.opts.quiet {
            eprintln!(
                "shmem-bench: sdma-overlap {label}: transfer alone {:.1} ms; compute rate with put_nbi {:.2}, with put_handle {:.2}, beside a plain memcpy thread {:.2} of solo",
                alone_us / 1e3,
                median(&o.nbi_ratio),
                median(&o.handle_ratio),
                median(&o.thread_ratio)
            );
        }
    }
    pe.free(sym)?;
    Ok(rows)
}

/// The engine-thread count of this job, from `SHMEM_SDMA_ENGINES`.
fn engine_threads() -> Option<usize> {
    std::env::var("SHMEM_SDMA_ENGINES")
        .ok()?
        .trim()
        .parse()
        .ok()
        .filter(|&n| n > 0)
}

/// sdma-engines: blocking puts PE 0 to PE 1 (the driver runs one job per
/// engine-thread count, with every operation on SDMA); PE 1 sleeps in a
/// barrier meanwhile, so the engine threads have the cores.
pub fn engines(ctx: &mut Ctx<'_>) -> Result<Vec<Row>> {
    let pe = ctx.pe;
    let me = ctx.me;
    let sizes = ctx.opts.sizes_for(Bench::SdmaEngines);
    let max = sizes.iter().copied().max().unwrap_or(8);
    let sym = pe.malloc::<u8>(max)?;
    let local = vec![0x5au8; if me == 0 { max } else { 0 }];
    let threads = engine_threads();
    let mut rows = Vec::new();
    for size in sizes {
        let m = ctx.measure(Scope::Pair, |batch| {
            if me != 0 {
                return Ok(());
            }
            let remote = sym.slice(..size)?;
            (0..batch).try_for_each(|_| pe.put(remote, &local[..size], 1))
        })?;
        let label = match threads {
            Some(n) => format!("{} x{n}", format_size(size)),
            None => format!("{} x?", format_size(size)),
        };
        ctx.progress(Bench::SdmaEngines.name(), &label, &m);
        let memcpy = ctx.memcpy_us(size)?;
        let refs = vec![Reference::new(
            RefKind::MemcpyBandwidth,
            m.stats.median_us,
            memcpy,
        )];
        rows.push(row(label, size, size, &m, refs));
    }
    pe.free(sym)?;
    Ok(rows)
}
