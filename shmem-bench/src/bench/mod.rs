//! The benchmarks, one function per family; each is collective (every PE
//! runs it) and returns its rows (meaningful on PE 0).

mod collective;
pub mod osu;
mod rma;
mod sdma;
mod sync;

use crate::cli::{Bench, Options};
use crate::error::Result;
use crate::measure::{Ctx, Measured};
use crate::report::{format_size, BenchResult, Reference, Row};

/// Runs one benchmark on every PE.
pub fn run(ctx: &mut Ctx<'_>, bench: Bench) -> Result<BenchResult> {
    let rows = match bench {
        Bench::Put | Bench::Get | Bench::PutNbi | Bench::GetNbi => rma::data_movement(ctx, bench)?,
        Bench::PutSignalPingpong => sync::put_signal_pingpong(ctx)?,
        Bench::Atomics => sync::atomics(ctx)?,
        Bench::Cacheline => sync::cacheline(ctx)?,
        Bench::Memcpy => rma::memcpy(ctx)?,
        Bench::Barrier => collective::barrier(ctx)?,
        Bench::Broadcast | Bench::Fcollect | Bench::Alltoall | Bench::Reduce | Bench::KvShuffle => {
            collective::sized(ctx, bench)?
        }
        Bench::SdmaOverlap => sdma::overlap(ctx)?,
        Bench::SdmaEngines => sdma::engines(ctx)?,
        Bench::Capi => osu::patterns(ctx)?,
    };
    Ok(BenchResult { bench, rows })
}

/// Symmetric bytes `bench` allocates at most, on `n` PEs.
pub fn heap_bytes(opts: &Options, bench: Bench, n: usize) -> usize {
    let max = opts.sizes_for(bench).last().copied().unwrap_or(8);
    match bench {
        Bench::Fcollect => max.saturating_mul(n + 1),
        Bench::Alltoall => max.saturating_mul(2 * n),
        Bench::KvShuffle => max.saturating_mul(2 * collective::KV_BLOCKS),
        Bench::SdmaOverlap | Bench::SdmaEngines => max,
        Bench::Capi => max.saturating_mul(3 * n + 2),
        _ => max.saturating_mul(2),
    }
}

/// A row from a measurement.
fn row(label: String, size: usize, bytes: usize, m: &Measured, refs: Vec<Reference>) -> Row {
    Row {
        label,
        size,
        bytes,
        batch: m.batch,
        stats: m.stats,
        refs,
    }
}

/// The usual label of a sized row.
fn size_label(size: usize) -> String {
    format_size(size)
}
