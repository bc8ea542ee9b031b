//! Two-PE synchronisation: put-with-signal ping-pong, remote atomics, and
//! the raw cache-line ping-pong they are held against.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};

use shmem::{Cmp, Shmem, SignalOp, SymRef};

use crate::cli::Bench;
use crate::error::Result;
use crate::measure::{atomic_at, Ctx, Scope};
use crate::report::{RefKind, Reference, Row};
use crate::tcp::TcpKind;

use super::{row, size_label};

/// put-signal ping-pong between PE 0 and PE 1: half round trip per size.
pub fn put_signal_pingpong(ctx: &mut Ctx<'_>) -> Result<Vec<Row>> {
    let pe = ctx.pe;
    let me = ctx.me;
    let sizes = ctx.opts.sizes_for(Bench::PutSignalPingpong);
    let max = sizes.iter().copied().max().unwrap_or(8);
    let buf = pe.calloc::<u8>(max)?;
    let sig = pe.calloc::<u64>(1)?;
    let s: SymRef<u64> = (&sig).into();
    let data = vec![0xabu8; if me < 2 { max } else { 0 }];
    // Both PEs count the same exchanges, so the signal only ever grows.
    let mut seq = 0u64;
    let mut rows = Vec::new();
    for size in sizes {
        let m = ctx.measure(Scope::Pair, |batch| {
            if me > 1 {
                return Ok(());
            }
            let dst = buf.slice(..size)?;
            let src = &data[..size];
            for _ in 0..batch {
                seq += 1;
                if me == 0 {
                    pe.put_signal(dst, src, s, seq, SignalOp::Set, 1)?;
                    pe.signal_wait_until(s, Cmp::Ge, seq)?;
                } else {
                    pe.signal_wait_until(s, Cmp::Ge, seq)?;
                    pe.put_signal(dst, src, s, seq, SignalOp::Set, 0)?;
                }
            }
            Ok(())
        })?;
        let m = m.scaled(0.5);
        ctx.progress(Bench::PutSignalPingpong.name(), &size_label(size), &m);
        let mut refs = ctx
            .cacheline_us()?
            .map(|c| vec![Reference::new(RefKind::Cacheline, m.stats.median_us, c)])
            .unwrap_or_default();
        if let Some(t) = ctx.tcp_us(TcpKind::PingPong, size)? {
            refs.push(Reference::new(RefKind::TcpLatency, m.stats.median_us, t));
        }
        rows.push(row(size_label(size), size, size, &m, refs));
    }
    pe.free(buf)?;
    pe.free(sig)?;
    Ok(rows)
}

/// A remote atomic operation on a `u64`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Amo {
    /// Atomic read.
    Fetch,
    /// Atomic write.
    Set,
    /// Exchange.
    Swap,
    /// Compare-and-swap.
    CompareSwap,
    /// Add, returning the old value.
    FetchAdd,
    /// Add.
    Add,
    /// Increment, returning the old value.
    FetchInc,
    /// Increment.
    Inc,
    /// And, returning the old value.
    FetchAnd,
    /// And.
    And,
    /// Or, returning the old value.
    FetchOr,
    /// Or.
    Or,
    /// Xor, returning the old value.
    FetchXor,
    /// Xor.
    Xor,
}

/// Every operation the `atomics` benchmark times, with its row label.
pub const AMOS: [(Amo, &str); 14] = [
    (Amo::Fetch, "fetch"),
    (Amo::Set, "set"),
    (Amo::Swap, "swap"),
    (Amo::CompareSwap, "compare_swap"),
    (Amo::FetchAdd, "fetch_add"),
    (Amo::Add, "add"),
    (Amo::FetchInc, "fetch_inc"),
    (Amo::Inc, "inc"),
    (Amo::FetchAnd, "fetch_and"),
    (Amo::And, "and"),
    (Amo::FetchOr, "fetch_or"),
    (Amo::Or, "or"),
    (Amo::FetchXor, "fetch_xor"),
    (Amo::Xor, "xor"),
];

/// The operation through the library. Values keep the word unchanged
/// except for add/inc, so every operation sees the same line state.
fn amo_library(pe: &Shmem, amo: Amo, t: SymRef<u64>, peer: usize) -> shmem::Result<u64> {
    Ok(match amo {
        Amo::Fetch => pe.atomic_fetch(t, peer)?,
        Amo::Set => pe.atomic_set(t, 7, peer).map(|_| 0)?,
        Amo::Swap => pe.atomic_swap(t, 7, peer)?,
        Amo::CompareSwap => pe.atomic_compare_swap(t, 7, 7, peer)?,
        Amo::FetchAdd => pe.atomic_fetch_add(t, 1, peer)?,
        Amo::Add => pe.atomic_add(t, 1, peer).map(|_| 0)?,
        Amo::FetchInc => pe.atomic_fetch_inc(t, peer)?,
        Amo::Inc => pe.atomic_inc(t, peer).map(|_| 0)?,
        Amo::FetchAnd => pe.atomic_fetch_and(t, !0, peer)?,
        Amo::And => pe.atomic_and(t, !0, peer).map(|_| 0)?,
        Amo::FetchOr => pe.atomic_fetch_or(t, 0, peer)?,
        Amo::Or => pe.atomic_or(t, 0, peer).map(|_| 0)?,
        Amo::FetchXor => pe.atomic_fetch_xor(t, 0, peer)?,
        Amo::Xor => pe.atomic_xor(t, 0, peer).map(|_| 0)?,
    })
}

/// The same operation as a plain CPU atomic on the peer's word.
fn amo_raw(a: &AtomicU64, amo: Amo) -> u64 {
    const O: Ordering = Ordering::SeqCst;
    match amo {
        Amo::Fetch => a.load(O),
        Amo::Set => {
            a.store(7, O);
            0
        }
        Amo::Swap => a.swap(7, O),
        Amo::CompareSwap => a.compare_exchange(7, 7, O, O).unwrap_or_else(|v| v),
        Amo::FetchAdd | Amo::Add | Amo::FetchInc | Amo::Inc => a.fetch_add(1, O),
        Amo::FetchAnd | Amo::And => a.fetch_and(!0, O),
        Amo::FetchOr | Amo::Or => a.fetch_or(0, O),
        Amo::FetchXor | Amo::Xor => a.fetch_xor(0, O),
    }
}

/// Every remote atomic, PE 0 on a word of PE 1, against the same CPU
/// atomic through a direct pointer to that word.
pub fn atomics(ctx: &mut Ctx<'_>) -> Result<Vec<Row>> {
    let pe = ctx.pe;
    let me = ctx.me;
    let target = pe.calloc::<u64>(8)?;
    let t: SymRef<u64> = (&target).into();
    let raw = if me == 0 { pe.ptr(&target, 1)? } else { None };
    let mapped = pe.bootstrap().broadcast(0, &[u8::from(raw.is_some())])?;
    let have_raw = mapped.first() == Some(&1);
    let mut rows = Vec::new();
    for (amo, name) in AMOS {
        let m = ctx.measure(Scope::Pair, |batch| {
            if me == 0 {
                for _ in 0..batch {
                    black_box(amo_library(pe, amo, t, 1)?);
                }
            }
            Ok(())
        })?;
        ctx.progress(Bench::Atomics.name(), name, &m);
        let mut refs = Vec::new();
        if have_raw {
            let r = ctx.measure(Scope::Pair, |batch| {
                if let Some(p) = raw {
                    // SAFETY: `target` is an 8-aligned symmetric object that
                    // lives until the free below; every access to it is atomic.
                    let a = unsafe { atomic_at(p) };
                    for _ in 0..batch {
                        black_box(amo_raw(a, amo));
                    }
                }
                Ok(())
            })?;
            refs.push(Reference::new(
                RefKind::RawAtomic,
                m.stats.median_us,
                r.stats.median_us,
            ));
        }
        if let Some(c) = ctx.cacheline_us()? {
            refs.push(Reference::new(RefKind::Cacheline, m.stats.median_us, c));
        }
        rows.push(row(name.to_string(), 8, 0, &m, refs));
    }
    pe.free(target)?;
    Ok(rows)
}

/// The cache-line ping-pong reference as a benchmark of its own.
pub fn cacheline(ctx: &mut Ctx<'_>) -> Result<Vec<Row>> {
    match ctx.cacheline_measure()? {
        Some(m) => Ok(vec![row("8 B".into(), 8, 0, &m, Vec::new())]),
        None => Err(crate::error::BenchError::Job(
            "cacheline: PE 1's heap is not mapped into PE 0 (no direct pointer); the engine gives no load/store access".into(),
        )),
    }
}
