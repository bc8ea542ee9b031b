//! Large reductions on one node, combined straight out of the peers'
//! mapped memory.
//!
//! When every PE maps every heap, a reduction needs no staging copies: each
//! PE combines its block of the result from every member's `source` (read
//! in place, a cache-sized chunk at a time) into its own `dest`, and after
//! one synchronisation copies the other blocks from their owners' `dest`.
//! Each PE reads the array about twice and writes it once, all PEs at the
//! same time, instead of passing partial results through a staging buffer.
//!
//! With two PEs and separate `source` and `dest`, each PE instead combines
//! the whole array (both sources, one pass) and there is no second phase.
//!
//! Concurrent access stays disjoint: in the first phase PE `i` writes only
//! block `i` of its own `dest` and reads only block `i` of the sources (an
//! in-place call's block `i` of `source` is the very range PE `i` owns); in
//! the second phase PE `i` reads block `j` of PE `j`'s `dest`, finished
//! before the synchronisation, and writes the other blocks of its own
//! `dest`. A final synchronisation keeps every PE's `dest` and `source`
//! untouched until all have finished reading them.

use shmem_core::{Element, Error, Result, SymSlice};

use crate::collectives::Call;
use crate::reduce_op::{ReduceOp, Reducible};

/// Reductions of at least this many bytes on a mapped team take this path.
pub(crate) const DIRECT_MIN_BYTES: usize = 64 << 10;
/// Elements combined per step: a chunk of every source stays in cache.
const CHUNK_BYTES: usize = 16 << 10;

/// Base of team PE `idx`'s copy of the symmetric object at heap `offset`.
fn peer_base<T: Element>(call: &Call<'_>, idx: usize, offset: usize) -> Result<*const T> {
    let pe = call.pe(idx);
    let p = call.rt.peer_ptr(offset, pe)?.ok_or_else(|| {
        Error::invalid(
            "team",
            format!("PE {pe}'s heap is not mapped here (direct reduction)"),
        )
    })?;
    Ok(p.as_ptr() as *const T)
}

/// `dest[..nreduce] = op over every member's source[..nreduce]`, in place
/// allowed (`dest == source`), on a team of at least two PEs (the only
/// caller takes this path only then).
pub(crate) fn direct_allreduce<T: Reducible>(
    call: &mut Call<'_>,
    op: ReduceOp,
    source: SymSlice<T>,
    dest: SymSlice<T>,
    nreduce: usize,
) -> Result<()> {
    let (n, me) = (call.n, call.me);
    if n < 2 {
        return Err(Error::invalid(
            "team",
            "a direct reduction needs two PEs or more",
        ));
    }
    let per = nreduce.div_ceil(n);
    let block = |b: usize| (b * per).min(nreduce)..((b + 1) * per).min(nreduce);
    let sources = (0..n)
        .map(|j| peer_base::<T>(call, j, source.offset()))
        .collect::<Result<Vec<_>>>()?;
    let dests = (0..n)
        .map(|j| peer_base::<T>(call, j, dest.offset()))
        .collect::<Result<Vec<_>>>()?;
    let mine = dests[me] as *mut T;
    let chunk = (CHUNK_BYTES / std::mem::size_of::<T>().max(1)).max(1);
    // In place, this PE's source block is the dest block it writes: a
    // member other than the first two keeps its chunk aside before the
    // first pass overwrites it.
    let in_place = source.offset() == dest.offset();
    // Two PEs, not in place: each combines the whole array in one pass and
    // needs no second phase (it reads the peer's source once either way;
    // 1 MiB of u64 sums here: 41-48 us against 49-54 in blocks).
    let whole = n == 2 && !in_place;
    let r = if whole { 0..nreduce } else { block(me) };
    let mut saved: Vec<T> = Vec::new();
    let mut start = r.start;
    while start < r.end {
        let len = chunk.min(r.end - start);
        // SAFETY: [start, start+len) lies in this PE's range `r` (block
        // `me`, or the whole array when `whole`) of member j's source
        // (checked in bounds by every member's argument checks, agreed in
        // the handshake); nobody writes it during this phase (in place,
        // this PE's own block is read below only before it is written).
        let src = |j: usize| unsafe { std::slice::from_raw_parts(sources[j].add(start), len) };
        if in_place && me >= 2 {
            saved.clear();
            saved.extend_from_slice(src(me));
        }
        // SAFETY: this PE's own dest; range `r` is written by this PE alone.
        // In place it is this PE's source block `me` too, which is then not
        // borrowed through `src` at the same time (see the branches).
        let out = unsafe { std::slice::from_raw_parts_mut(mine.add(start), len) };
        // One pass over the first two sources (in order: floats fold left to
        // right, as on every other path), then one per further source.
        match (in_place, me) {
            (true, 0) => T::combine(op, out, src(1))?,
            (true, 1) => T::combine_rev(op, out, src(0))?,
            _ => T::combine_into(op, out, src(0), src(1))?,
        }
        for j in 2..n {
            if in_place && j == me {
                T::combine(op, out, &saved)?;
            } else {
                T::combine(op, out, src(j))?;
            }
        }
        start += len;
    }
    if whole {
        // Nobody changes a source the other PE may still be reading.
        return call.sync();
    }
    call.sync()?;
    for j in (0..n).filter(|&j| j != me) {
        let b = block(j);
        // SAFETY: block j of member j's dest was completed before the sync
        // and nobody writes it now; this PE's other blocks are its own.
        unsafe { std::ptr::copy_nonoverlapping(dests[j].add(b.start), mine.add(b.start), b.len()) };
    }
    call.sync()
}
