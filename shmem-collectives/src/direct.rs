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
/// allowed (`dest == source`).
pub(crate) fn direct_allreduce<T: Reducible>(
    call: &mut Call<'_>,
    op: ReduceOp,
    source: SymSlice<T>,
    dest: SymSlice<T>,
    nreduce: usize,
) -> Result<()> {
    let (n, me) = (call.n, call.me);
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
    let r = block(me);
    let mut acc: Vec<T> = Vec::with_capacity(chunk.min(r.len()));
    let mut start = r.start;
    while start < r.end {
        let len = chunk.min(r.end - start);
        acc.clear();
        // SAFETY: [start, start+len) lies in block `me` of member 0's source
        // (checked in bounds by every member's argument checks, agreed in
        // the handshake); nobody writes it during this phase.
        acc.extend_from_slice(unsafe { std::slice::from_raw_parts(sources[0].add(start), len) });
        for src in &sources[1..] {
            // SAFETY: as above, member j's source.
            let other = unsafe { std::slice::from_raw_parts(src.add(start), len) };
            T::combine(op, &mut acc, other)?;
        }
        // SAFETY: this PE's own dest; block `me` is written by this PE alone,
        // and its sources' chunk was copied into `acc` above (in place).
        unsafe { std::ptr::copy_nonoverlapping(acc.as_ptr(), mine.add(start), len) };
        start += len;
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
