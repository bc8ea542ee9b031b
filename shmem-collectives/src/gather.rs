//! Allgather: `fcollect` (the same count from every PE) and `collect`
//! (a count per PE), by direct puts or around a ring.

use std::ops::Range;

use shmem_core::{as_bytes, as_bytes_mut, Element, Error, PeId, Result, SymSlice};

use crate::collectives::{byte_len, check_disjoint, check_sym, local_copy, mul, Call, Desc};
use crate::fold::{Contrib, FoldBuf, FoldPlan, HALF, LINE_PAYLOAD};
use crate::{Collectives, GatherAlgorithm, Team};

/// Moves block `blocks[i]` of this PE's `dest` to every member's `dest`:
/// this PE's block is already in place locally.
fn gather_blocks<T: Element>(
    call: &mut Call<'_>,
    algo: GatherAlgorithm,
    dest: SymSlice<T>,
    blocks: &[Range<usize>],
) -> Result<()> {
    let (me, n) = (call.me, call.n);
    if n == 1 {
        return Ok(());
    }
    let rt = call.rt;
    match algo {
        GatherAlgorithm::Direct => {
            let mine = dest.slice(blocks[me].clone())?;
            // SAFETY: this PE's own block of dest is written only locally
            // (already done); peers write only their own blocks here.
            let src = unsafe { rt.local_slice(mine)? };
            for s in 1..n {
                call.put_data((me + s) % n, mine, src)?;
            }
            for s in 1..n {
                call.wait_data((me + n - s) % n, 1)?;
            }
        }
        GatherAlgorithm::Ring => {
            let succ = (me + 1) % n;
            let pred = (me + n - 1) % n;
            for s in 0..n - 1 {
                let b = dest.slice(blocks[(me + n - s) % n].clone())?;
                // SAFETY: block me - s is ours or arrived in the previous
                // step; the predecessor is now writing block me - s - 1.
                let src = unsafe { rt.local_slice(b)? };
                call.put_data(succ, b, src)?;
                call.wait_data(pred, 1)?;
            }
        }
    }
    Ok(())
}

impl Collectives {
    /// Concatenates `nelems` elements of every member's `source` into every
    /// member's `dest`, in team PE order (`shmem_fcollect`, allgather).
    /// `dest` holds `n_pes * nelems` elements and must not overlap `source`.
    ///
    /// # Errors
    /// As every collective (see [Errors](Collectives#errors)); here `dest` must hold
    /// `n_pes * nelems` elements and not overlap `source`.
    #[track_caller]
    pub fn fcollect<T: Element>(
        &self,
        team: &Team,
        dest: impl Into<SymSlice<T>>,
        source: impl Into<SymSlice<T>>,
        nelems: usize,
    ) -> Result<()> {
        let (dest, source) = (dest.into(), source.into());
        let rt = &self.rt;
        let n = team.n_pes();
        let local = (|| {
            let total = mul("nelems", n, nelems)?;
            byte_len::<T>(total)?;
            check_sym(rt, "source", &source, nelems)?;
            check_sym(rt, "dest", &dest, total)?;
            check_disjoint(&dest, total, &source, nelems, false)
        })();
        let algo = self
            .algorithms
            .fcollect(n, nelems.saturating_mul(std::mem::size_of::<T>()));
        let desc = Desc::new("fcollect")
            .with_type::<T>()
            .with(nelems as u64)
            .with(algo as u64);
        let describe = || format!("{nelems} x {}", std::any::type_name::<T>());
        let bytes = nelems.saturating_mul(std::mem::size_of::<T>());
        let plan = match (self.algorithms.fcollect, bytes.checked_mul(n)) {
            (None, Some(total)) => Call::fold_plan(self, team, bytes, total),
            _ => None,
        };
        if let Some(plan) = plan {
            // Small: every block rides on the handshake.
            let mine: &[u8] = match &local {
                // SAFETY: this PE's own source, in the heap (checked); a
                // collective's source is not written during the call.
                Ok(()) => as_bytes(unsafe { rt.local_slice(source.slice(..nelems)?)? }),
                Err(_) => &[],
            };
            let finish = |parts: &[&[u8]], out: &mut [u8]| -> Result<()> {
                for (i, p) in parts.iter().enumerate() {
                    out[i * bytes..(i + 1) * bytes].copy_from_slice(p);
                }
                Ok(())
            };
            let contrib = Contrib::every(mine, bytes);
            return self.fold_to_dest(
                plan,
                team,
                "fcollect",
                desc,
                local,
                &describe,
                contrib,
                &finish,
                dest,
                n * nelems,
            );
        }
        let mut call = self.begin(team, "fcollect", desc, local, &describe)?;
        if nelems == 0 {
            return Ok(());
        }
        let blocks: Vec<Range<usize>> = (0..n).map(|i| i * nelems..(i + 1) * nelems).collect();
        local_copy(
            rt,
            dest.slice(blocks[call.me].clone())?,
            source.slice(..nelems)?,
        )?;
        gather_blocks(&mut call, algo, dest, &blocks)
    }

    /// Concatenates every member's `source` into every member's `dest`, in
    /// team PE order, where each PE contributes its own `nelems`
    /// (`shmem_collect`). Returns the total number of elements gathered. An
    /// error on every PE if any member's `dest` is too small.
    ///
    /// # Errors
    /// As every collective (see [Errors](Collectives#errors));
    /// [`Error::CollectiveMismatch`] on every PE when some member's `dest` cannot hold
    /// all the contributions.
    #[track_caller]
    pub fn collect<T: Element>(
        &self,
        team: &Team,
        dest: impl Into<SymSlice<T>>,
        source: impl Into<SymSlice<T>>,
        nelems: usize,
    ) -> Result<usize> {
        let (dest, source) = (dest.into(), source.into());
        let rt = &self.rt;
        let local = (|| {
            check_sym(rt, "source", &source, nelems)?;
            check_sym(rt, "dest", &dest, 0)?;
            check_disjoint(&dest, dest.len(), &source, nelems, false)
        })();
        let desc = Desc::new("collect").with_type::<T>();
        let describe = || {
            format!(
                "{nelems} x {} (dest of {})",
                std::any::type_name::<T>(),
                dest.len()
            )
        };
        let n = team.n_pes();
        // Small blocks ride on the handshake: with two PEs in the signal's
        // own cache line, with the linear handshake up to a few hundred
        // bytes each (the result, which every member fills, stays small).
        let plan = if self.algorithms.collect.is_none() {
            Call::fold_plan(self, team, FOLD_HEADER + 8, HALF)
        } else {
            None
        };
        let slot = match plan {
            Some(FoldPlan::Pair) => LINE_PAYLOAD,
            _ => (HALF / n.max(1)).min(FOLD_SLOT_MAX) / 8 * 8,
        };
        if let Some(plan) = plan {
            return self.collect_folded(
                plan, team, dest, source, nelems, slot, desc, local, &describe,
            );
        }
        let call = self.begin(team, "collect", desc, local, &describe)?;
        collect_exchange(call, &self.algorithms, dest, source, nelems)
    }

    /// A small collect: each member's count, dest capacity and (when it
    /// fits its slot of `slot` bytes) its block ride on the handshake;
    /// team PE 0 (or, with two PEs, each PE) lays out the result, or tells
    /// everyone to fall back to the size exchange when some block or the
    /// total does not fit.
    #[allow(clippy::too_many_arguments)]
    fn collect_folded<T: Element>(
        &self,
        plan: FoldPlan,
        team: &Team,
        dest: SymSlice<T>,
        source: SymSlice<T>,
        nelems: usize,
        slot: usize,
        desc: Desc,
        local: Result<()>,
        describe: &dyn Fn() -> String,
    ) -> Result<usize> {
        let rt = &self.rt;
        let size = std::mem::size_of::<T>();
        let mut mine: FoldBuf = FoldBuf::new();
        if local.is_ok() {
            let bytes = nelems * size;
            let fits = FOLD_HEADER + bytes <= slot;
            for w in [nelems as u64, dest.len() as u64, fits as u64] {
                mine.extend_from_slice(&w.to_le_bytes());
            }
            if fits {
                // SAFETY: this PE's own source, in the heap (checked); a
                // collective's source is not written during the call.
                let src = unsafe { rt.local_slice(source.slice(..nelems)?)? };
                mine.extend_from_slice(as_bytes(src));
            }
        }
        let finish = |parts: &[&[u8]], out: &mut [u8]| -> Result<()> {
            let word = le_word;
            let put = |out: &mut [u8], k: usize, v: u64| {
                out[8 * k..8 * k + 8].copy_from_slice(&v.to_le_bytes())
            };
            let mut total = 0u64;
            let mut fit = true;
            for p in parts {
                fit &= word(p, 2) == 1;
                total = match total.checked_add(word(p, 0)) {
                    Some(t) => t,
                    None => {
                        fit = false;
                        0
                    }
                };
            }
            let n = parts.len();
            let need = (total as usize)
                .checked_mul(size)
                .and_then(|b| b.checked_add(8 * (n + 1)));
            if !fit || need.is_none_or(|b| b > out.len()) {
                put(out, 0, FOLD_FALLBACK);
                return Ok(());
            }
            if let Some(i) = parts.iter().position(|p| word(p, 1) < total) {
                put(out, 0, FOLD_SMALL_DEST);
                put(out, 1, i as u64);
                put(out, 2, word(parts[i], 1));
                put(out, 3, total);
                return Ok(());
            }
            put(out, 0, FOLD_OK);
            let mut at = 8 * (n + 1);
            for (i, p) in parts.iter().enumerate() {
                let b = word(p, 0) as usize * size;
                put(out, 1 + i, word(p, 0));
                out[at..at + b].copy_from_slice(&p[FOLD_HEADER..FOLD_HEADER + b]);
                at += b;
            }
            Ok(())
        };
        let contrib = Contrib::every(&mine, slot);
        let n = team.n_pes();
        let result_len = 8 * (n + 1) + n * (slot - FOLD_HEADER);
        // The call stays here (a fallback continues it): moving it out of
        // a helper with the result cost more than the bookkeeping.
        let mut call = self.open_call(team, "collect")?;
        let mut out = FoldBuf::new();
        self.fold_in(
            &mut call, plan, "collect", desc, local, describe, contrib, result_len, &finish,
            &mut out,
        )?;
        let word = |k: usize| le_word(&out, k);
        match word(0) {
            FOLD_OK => {
                let n = call.n;
                let total: usize = (0..n).map(|i| word(1 + i) as usize).sum();
                if total > 0 {
                    // SAFETY: this PE's own dest, in the heap (checked to
                    // hold `total` by team PE 0); nobody else writes it now.
                    let d = unsafe { rt.local_slice_mut(dest.slice(..total)?)? };
                    let at = 8 * (n + 1);
                    as_bytes_mut(d).copy_from_slice(&out[at..at + total * size]);
                }
                Ok(total)
            }
            FOLD_SMALL_DEST => {
                let i = word(1) as usize;
                Err(small_dest(i, call.pe(i), word(2), word(3)))
            }
            _ => collect_exchange(call, &self.algorithms, dest, source, nelems),
        }
    }
}

/// Largest slot (header and block) of one PE in a folded collect.
const FOLD_SLOT_MAX: usize = 256;
/// Header of a folded collect contribution: count, dest capacity, "block
/// included" (one `u64` each, little-endian).
const FOLD_HEADER: usize = 24;
/// Status words of a folded collect's result.
const FOLD_OK: u64 = 1;
const FOLD_SMALL_DEST: u64 = 2;
const FOLD_FALLBACK: u64 = 3;

/// Little-endian `u64` number `k` of `bytes`.
fn le_word(bytes: &[u8], k: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&bytes[8 * k..8 * k + 8]);
    u64::from_le_bytes(w)
}

fn small_dest(i: usize, pe: PeId, capacity: u64, total: u64) -> Error {
    Error::CollectiveMismatch {
        op: "collect",
        details: format!(
            "team PE {i} (PE {pe}) has a dest of {capacity} elements, the PEs contribute {total} in all"
        ),
    }
}

/// The collect after its opening handshake: every PE learns every count
/// and capacity, then the blocks move.
fn collect_exchange<T: Element>(
    mut call: Call<'_>,
    algorithms: &crate::AlgorithmChoice,
    dest: SymSlice<T>,
    source: SymSlice<T>,
    nelems: usize,
) -> Result<usize> {
    let rt = call.rt;
    let (me, n) = (call.me, call.n);
    // Everyone learns every PE's count and destination capacity.
    let meta = call.meta();
    let mine = [nelems as u64, dest.len() as u64];
    rt.write_local(meta.slice(2 * me..2 * me + 2)?, &mine)?;
    for s in 1..n {
        call.put_data((me + s) % n, meta.slice(2 * me..2 * me + 2)?, &mine)?;
    }
    for s in 1..n {
        call.wait_data((me + n - s) % n, 1)?;
    }
    let sizes = rt.read_local(meta.slice(..2 * n)?)?;
    let mut blocks = Vec::with_capacity(n);
    let mut total = 0usize;
    let mut largest = 0usize;
    for i in 0..n {
        let c = sizes[2 * i] as usize;
        blocks.push(total..total + c);
        total = total
            .checked_add(c)
            .ok_or_else(|| Error::invalid("nelems", "the counts of all PEs overflow"))?;
        largest = largest.max(c);
    }
    // Every PE sees the same table, so they all fail alike.
    if let Some(i) = (0..n).find(|&i| (sizes[2 * i + 1] as usize) < total) {
        return Err(small_dest(i, call.pe(i), sizes[2 * i + 1], total as u64));
    }
    let algo = algorithms.collect(n, largest.saturating_mul(std::mem::size_of::<T>()));
    local_copy(rt, dest.slice(blocks[me].clone())?, source.slice(..nelems)?)?;
    gather_blocks(&mut call, algo, dest, &blocks)?;
    Ok(total)
}
