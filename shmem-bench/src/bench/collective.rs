//! Collectives over every PE: barrier, broadcast, fcollect, alltoall,
//! reduce and the KV-cache shuffle.

use shmem::collectives::{KvCacheLayout, ReduceOp};

use crate::cli::Bench;
use crate::error::Result;
use crate::measure::{Ctx, Scope};
use crate::report::{RefKind, Reference, Row};

use super::{row, size_label};

/// Blocks moved by each sender of the `kv-shuffle` benchmark (the size is
/// one block of the key cache; the value cache moves as many bytes again).
pub const KV_BLOCKS: usize = 8;

/// barrier_all over every PE.
pub fn barrier(ctx: &mut Ctx<'_>) -> Result<Vec<Row>> {
    let pe = ctx.pe;
    let m = ctx.measure(Scope::All, |batch| {
        (0..batch).try_for_each(|_| pe.barrier_all())
    })?;
    ctx.progress(Bench::Barrier.name(), "barrier_all", &m);
    let refs = ctx
        .cacheline_us()?
        .map(|c| vec![Reference::new(RefKind::Cacheline, m.stats.median_us, c)])
        .unwrap_or_default();
    Ok(vec![row("barrier_all".into(), 0, 0, &m, refs)])
}

/// Bytes each PE receives in one call of `bench` with message size `size`
/// on `n` PEs: what the memcpy reference copies.
pub fn received_bytes(bench: Bench, size: usize, n: usize) -> usize {
    match bench {
        Bench::Fcollect | Bench::Alltoall => size * n.saturating_sub(1),
        Bench::KvShuffle => size * 2 * KV_BLOCKS,
        _ => size,
    }
}

/// broadcast, fcollect, alltoall, reduce or kv-shuffle over the sizes.
pub fn sized(ctx: &mut Ctx<'_>, bench: Bench) -> Result<Vec<Row>> {
    let pe = ctx.pe;
    let coll = pe.collectives().clone();
    let world = coll.world();
    let (me, n) = (ctx.me, ctx.n);
    let sizes = ctx.opts.sizes_for(bench);
    let max = sizes.iter().copied().max().unwrap_or(8);
    // Source and destination for the largest size; smaller sizes use a prefix.
    let (src_len, dst_len) = match bench {
        Bench::Fcollect => (max, max * n),
        Bench::Alltoall => (max * n, max * n),
        Bench::KvShuffle => (max * KV_BLOCKS, max * KV_BLOCKS),
        _ => (max, max),
    };
    let src = pe.malloc::<u8>(src_len)?;
    let dst = pe.malloc::<u8>(dst_len)?;
    pe.write_local(&src, &vec![me as u8; src_len])?;
    let words_src = pe.malloc::<u64>(if bench == Bench::Reduce { max / 8 } else { 1 })?;
    let words_dst = pe.malloc::<u64>(if bench == Bench::Reduce { max / 8 } else { 1 })?;
    // KV shuffle: PE 2i sends to PE 2i+1; an odd last PE sits out.
    let table: Vec<[i64; 2]> = (0..n)
        .map(|i| match (i % 2, i + 1 < n) {
            (0, true) => [i as i64 + 1, 0],
            (1, _) => [i as i64 - 1, 1],
            _ => [-1, 0],
        })
        .collect();
    let src_blocks: Vec<i64> = (0..KV_BLOCKS as i64).collect();
    let dst_blocks: Vec<i64> = (0..KV_BLOCKS as i64).rev().collect();
    let mut rows = Vec::new();
    for size in sizes {
        let m = ctx.measure(Scope::All, |batch| {
            for _ in 0..batch {
                match bench {
                    Bench::Broadcast => {
                        coll.broadcast(&world, dst.slice(..size)?, src.slice(..size)?, size, 0)?
                    }
                    Bench::Fcollect => {
                        coll.fcollect(&world, dst.slice(..size * n)?, src.slice(..size)?, size)?
                    }
                    Bench::Alltoall => {
                        coll.alltoall(&world, dst.slice(..size * n)?, src.slice(..size * n)?, size)?
                    }
                    Bench::Reduce => {
                        let k = size / 8;
                        coll.reduce(
                            &world,
                            ReduceOp::Sum,
                            words_dst.slice(..k)?,
                            words_src.slice(..k)?,
                            k,
                        )?
                    }
                    _ => {
                        let layout = KvCacheLayout {
                            blocks: KV_BLOCKS,
                            kv_heads: 1,
                            page_size: 1,
                            head_dim: size,
                        };
                        // The key cache goes to `dst`, the value cache to `src`:
                        // both are caches of KV_BLOCKS blocks on every PE.
                        coll.kv_shuffle(
                            &table,
                            dst.slice(..size * KV_BLOCKS)?,
                            src.slice(..size * KV_BLOCKS)?,
                            layout,
                            &src_blocks,
                            &dst_blocks,
                        )?
                    }
                }
            }
            Ok(())
        })?;
        ctx.progress(bench.name(), &size_label(size), &m);
        let received = received_bytes(bench, size, n);
        let mut refs = Vec::new();
        if let Some(c) = ctx.cacheline_us()? {
            refs.push(Reference::new(RefKind::Cacheline, m.stats.median_us, c));
        }
        if received > 0 {
            let memcpy = ctx.memcpy_us(received)?;
            refs.push(Reference::new(
                RefKind::MemcpyTime,
                m.stats.median_us,
                memcpy,
            ));
        }
        rows.push(row(size_label(size), size, received, &m, refs));
    }
    pe.free(words_dst)?;
    pe.free(words_src)?;
    pe.free(dst)?;
    pe.free(src)?;
    Ok(rows)
}
