//! The OSU OpenSHMEM patterns of `shmem-capi/bench/osu_patterns.c`, with
//! the same loops through the Rust API: `capi` runs both and reports the C
//! ABI's time against these (and against memcpy) row by row.
//!
//! Two-PE rows: PE 0 loops while PE 1 waits in `barrier_all`; collective
//! rows: every PE loops and the slowest PE's average counts. Iteration
//! counts, warm-up and sizes follow the C program exactly.

use std::time::Instant;

use shmem::{Shmem, SymSlice};

use crate::error::Result;
use crate::measure::Ctx;
use crate::report::{RefKind, Reference, Row};
use crate::stats::Summary;

/// Message sizes of the C program (those up to the largest `--sizes`).
pub const SIZES: [usize; 8] = [8, 64, 512, 4096, 32768, 262_144, 1 << 20, 4 << 20];

/// Iterations at `bytes` for a base count (as `iters_for` in the C program).
fn iters_for(bytes: usize, base: usize) -> usize {
    let n = if bytes >= 1 << 20 {
        base / 50
    } else if bytes >= 65536 {
        base / 10
    } else {
        base
    };
    n.max(20)
}

/// The C program's `iters` argument for `--iters` (samples per row there
/// are this many operations).
pub fn base_iters(iters: usize) -> usize {
    (iters * 50).max(1000)
}

/// A row of one measured average (references are added at the end).
fn row(label: String, size: usize, us: f64) -> Row {
    let stats = Summary {
        median_us: us,
        min_us: us,
        p99_us: us,
        mean_us: us,
        samples: 1,
    };
    Row {
        label,
        size,
        bytes: size,
        batch: 1,
        stats,
        refs: Vec::new(),
    }
}

/// PE 0 runs `op` `n + skip` times while the others wait in `barrier_all`;
/// PE 0's average per operation (microseconds).
fn two_pe(
    pe: &Shmem,
    bytes: usize,
    base: usize,
    mut op: impl FnMut() -> shmem::Result<()>,
) -> Result<f64> {
    let n = iters_for(bytes, base);
    let skip = n / 10 + 1;
    pe.barrier_all()?;
    let mut us = 0.0;
    if pe.my_pe() == 0 {
        let mut t0 = Instant::now();
        for i in 0..n + skip {
            if i == skip {
                t0 = Instant::now();
            }
            op()?;
        }
        us = t0.elapsed().as_secs_f64() * 1e6 / n as f64;
    }
    pe.barrier_all()?;
    Ok(us)
}

/// Every PE runs `op`; the slowest PE's average (microseconds).
fn collective(
    pe: &Shmem,
    bytes: usize,
    base: usize,
    mut op: impl FnMut(usize) -> shmem::Result<()>,
) -> Result<f64> {
    let n = iters_for(bytes, base / 10);
    let skip = n / 10 + 1;
    pe.barrier_all()?;
    let mut t0 = Instant::now();
    for i in 0..n + skip {
        if i == skip {
            t0 = Instant::now();
        }
        op(i)?;
    }
    let mine = t0.elapsed().as_secs_f64() * 1e6 / n as f64;
    let all = pe.bootstrap().allgather(&mine.to_le_bytes())?;
    Ok(all
        .iter()
        .filter_map(|b| b.get(..8)?.try_into().ok().map(f64::from_le_bytes))
        .fold(mine, f64::max))
}

/// Runs every pattern on every PE; rows labelled `pattern` (sizes apart).
pub fn patterns(ctx: &mut Ctx<'_>) -> Result<Vec<Row>> {
    let pe = ctx.pe;
    let (me, npes) = (ctx.me, ctx.n);
    let max = ctx
        .opts
        .sizes
        .as_ref()
        .and_then(|s| s.iter().copied().max())
        .unwrap_or(1 << 20);
    let sizes: Vec<usize> = SIZES.iter().copied().filter(|&s| s <= max).collect();
    let base = base_iters(ctx.opts.iters);
    let coll = pe.collectives().clone();
    let world = coll.world();
    // At least the 64 x 8 bytes of the message-rate row.
    let big = (max * npes).max(512);
    let src = pe.malloc::<u8>(big)?;
    let dst = pe.malloc::<u8>(big)?;
    let fsrc = pe.malloc::<f32>(max / 4)?;
    let fdst = pe.malloc::<f32>(max / 4)?;
    let word = pe.calloc::<i64>(1)?;
    let iword = pe.calloc::<i32>(1)?;
    pe.write_local(&src, &vec![me as u8; big])?;
    let floats: Vec<f32> = (0..max / 4).map(|i| (i % 7) as f32).collect();
    pe.write_local(&fsrc, &floats)?;
    let mut local = vec![1u8; max];
    let mut rows = Vec::new();
    let mut sink = 0i64;

    if npes >= 2 {
        for &b in &sizes {
            let d = dst.slice(..b)?;
            let us = two_pe(pe, b, base, || {
                pe.put(d, &local[..b], 1)?;
                pe.quiet()
            })?;
            rows.push(row("put".into(), b, us));
            let us = two_pe(pe, b, base, || pe.get(&mut local[..b], d, 1))?;
            rows.push(row("get".into(), b, us));
            let us = two_pe(pe, b, base, || {
                // SAFETY: `local` is neither freed nor written before the
                // quiet just below.
                unsafe { pe.put_nbi(d, &local[..b], 1)? };
                pe.quiet()
            })?;
            rows.push(row("put_nbi".into(), b, us));
        }
        let w = word.at(0)?;
        let iw = iword.at(0)?;
        let us = two_pe(pe, 8, base, || pe.p(w, 1, 1))?;
        rows.push(row("p".into(), 8, us));
        let us = two_pe(pe, 8, base, || {
            sink = sink.wrapping_add(pe.g(w, 1)?);
            Ok(())
        })?;
        rows.push(row("g".into(), 8, us));
        let us = two_pe(pe, 0, base, || pe.quiet())?;
        rows.push(row("quiet".into(), 0, us));
        let us = two_pe(pe, 4, base, || {
            sink = sink.wrapping_add(pe.atomic_fetch_add(iw, 1, 1)? as i64);
            Ok(())
        })?;
        rows.push(row("atomic_fetch_add_int".into(), 4, us));
        let us = two_pe(pe, 4, base, || pe.atomic_add(iw, 1, 1))?;
        rows.push(row("atomic_add_int".into(), 4, us));
        let us = two_pe(pe, 8, base, || {
            sink = sink.wrapping_add(pe.atomic_fetch_add(w, 1, 1)?);
            Ok(())
        })?;
        rows.push(row("atomic_fetch_add_long".into(), 8, us));
        let us = two_pe(pe, 8, base, || {
            sink = sink.wrapping_add(pe.atomic_compare_swap(w, 0, 1, 1)?);
            Ok(())
        })?;
        rows.push(row("atomic_compare_swap_long".into(), 8, us));
        let us = two_pe(pe, 8, base, || {
            for k in 0..64 {
                // SAFETY: as for put_nbi above.
                unsafe { pe.put_nbi(dst.slice(8 * k..8 * k + 8)?, &local[..8], 1)? };
            }
            pe.quiet()
        })?;
        rows.push(row("put_rate_8x64".into(), 8, us));
    }

    let us = collective(pe, 0, base, |_| pe.barrier_all())?;
    rows.push(row("barrier_all".into(), 0, us));
    for &b in &sizes {
        let n32 = b / 4;
        let d32 = dst.slice(..b)?;
        let us = collective(pe, b, base, |_| {
            let d: SymSlice<u32> = SymSlice::from_raw_parts(d32.offset(), n32, d32.instance());
            coll.broadcast(&world, d, d, n32, 0)
        })?;
        rows.push(row("broadcast32".into(), b, us));
        let us = collective(pe, b, base, |_| {
            coll.broadcast(&world, dst.slice(..b)?, src.slice(..b)?, b, 0)
        })?;
        rows.push(row("broadcast".into(), b, us));
        let us = collective(pe, b, base, |_| {
            coll.fcollect(&world, dst.slice(..b * npes)?, src.slice(..b)?, b)
        })?;
        rows.push(row("fcollect".into(), b, us));
        let us = collective(pe, b, base, |_| {
            coll.collect(&world, dst.slice(..b * npes)?, src.slice(..b)?, b)
                .map(|_| ())
        })?;
        rows.push(row("collect".into(), b, us));
        let us = collective(pe, b, base, |_| {
            coll.alltoall(&world, dst.slice(..b * npes)?, src.slice(..b * npes)?, b)
        })?;
        rows.push(row("alltoall".into(), b, us));
        let us = collective(pe, b, base, |_| {
            coll.sum_reduce(&world, fdst.slice(..n32)?, fsrc.slice(..n32)?, n32)
        })?;
        rows.push(row("float_sum_reduce".into(), b, us));
    }
    // Make sure the fetched values are used.
    if sink == i64::MIN {
        eprintln!("shmem-bench: {sink}");
    }
    for f in [src, dst] {
        pe.free(f)?;
    }
    pe.free(fsrc)?;
    pe.free(fdst)?;
    pe.free(word)?;
    pe.free(iword)?;
    // memcpy of the bytes each PE receives, for the data rows.
    for r in rows.iter_mut() {
        let received = match r.label.as_str() {
            "put" | "get" | "put_nbi" | "broadcast32" | "broadcast" => r.size,
            "fcollect" | "collect" | "alltoall" => r.size * npes,
            "float_sum_reduce" => r.size,
            _ => 0,
        };
        if received >= 4096 {
            let m = ctx.memcpy_us(received)?;
            r.refs = vec![Reference::new(RefKind::MemcpyTime, r.stats.median_us, m)];
        }
    }
    Ok(rows)
}
