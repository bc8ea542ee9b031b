//! Reductions (`*_reduce`) and prefix scans over a team.
//!
//! Every PE first copies its source into private memory, so `dest` may be
//! the same array as `source` (in place). Two reduction algorithms:
//!
//! * recursive doubling: partners `i ^ 2^k` swap partial results through
//!   the staging buffer; non-power-of-two teams fold the extra PEs in first
//!   and hand them the result last. Chunks alternate between two halves of
//!   the staging buffer: a partner can be at most one chunk ahead, because
//!   finishing a chunk needs every PE's contribution to it.
//!   A two-PE team swaps whole contributions through the destinations
//!   instead (one transfer each way, however large).
//! * ring: a reduce-scatter (block `b` travels the ring collecting one
//!   contribution per PE, through the staging buffer when the array fits
//!   there, else through the destinations) then an allgather of the
//!   reduced blocks straight into the destinations; never in pieces.

use smallvec::SmallVec;

use shmem_core::{as_bytes, as_bytes_mut, Element, Error, Result, SymSlice};

use crate::collectives::{check_disjoint, check_sym, Call, Desc};
use crate::direct::{direct_allreduce, DIRECT_MIN_BYTES};
use crate::fold::Contrib;
use crate::reduce_op::{bitwise_on_float, BitwiseReducible, ReduceOp, Reducible, ScanKind};
use crate::{Collectives, ReduceAlgorithm, ScanAlgorithm, Team};

/// Reads `len` staged elements written by a peer.
fn staged<T: Element>(call: &Call<'_>, at: usize, len: usize) -> Result<Vec<T>> {
    call.rt.read_local(call.stage::<T>().slice(at..at + len)?)
}

/// Allreduce of `data` (private memory, same length everywhere) over the
/// call's team by recursive doubling; the result replaces `data`.
pub(crate) fn rd_allreduce<T: Reducible>(
    call: &mut Call<'_>,
    op: ReduceOp,
    data: &mut [T],
) -> Result<()> {
    let n = call.n;
    if n == 1 || data.is_empty() {
        return Ok(());
    }
    let me = call.me;
    let p2 = 1usize << (usize::BITS - 1 - n.leading_zeros());
    let rem = n - p2;
    let rounds = p2.trailing_zeros() as usize;
    // Slots: 0 = fold-in from an extra PE, 1..=rounds, rounds+1 = result
    // handed back to an extra PE; twice (chunk parity).
    let slots = rounds + 2;
    let slot_elems = call.coll.stage_bytes / (2 * slots) / std::mem::size_of::<T>();
    if slot_elems == 0 {
        return Err(Error::invalid(
            "stage_bytes",
            format!(
                "{} bytes cannot hold {} staging slots",
                call.coll.stage_bytes,
                2 * slots
            ),
        ));
    }
    let stage = call.stage::<T>();
    let slot = |parity: usize, s: usize| (parity * slots + s) * slot_elems;
    let to_pe = |newrank: usize| {
        if newrank < rem {
            newrank * 2 + 1
        } else {
            newrank + rem
        }
    };
    for (ci, chunk) in data.chunks_mut(slot_elems).enumerate() {
        let parity = ci % 2;
        let len = chunk.len();
        let newrank = if me < 2 * rem {
            if me & 1 == 0 {
                let at = slot(parity, 0);
                call.put_data(me + 1, stage.slice(at..at + len)?, chunk)?;
                call.wait_data(me + 1, 1)?;
                chunk.copy_from_slice(&staged::<T>(call, slot(parity, rounds + 1), len)?);
                continue;
            }
            call.wait_data(me - 1, 1)?;
            T::combine(op, chunk, &staged::<T>(call, slot(parity, 0), len)?)?;
            me / 2
        } else {
            me - rem
        };
        for r in 0..rounds {
            let partner = to_pe(newrank ^ (1 << r));
            let at = slot(parity, 1 + r);
            call.put_data(partner, stage.slice(at..at + len)?, chunk)?;
            call.wait_data(partner, 1)?;
            T::combine(op, chunk, &staged::<T>(call, at, len)?)?;
        }
        if me < 2 * rem {
            let at = slot(parity, rounds + 1);
            call.put_data(me - 1, stage.slice(at..at + len)?, chunk)?;
        }
    }
    Ok(())
}

/// Allreduce of a two-PE team: each PE puts its whole contribution into
/// the other's `dest` (one transfer and one signal each way) and combines
/// it with its own there. Through the staging buffer, recursive doubling
/// moves a large array in pieces of a few KiB, each a round trip: between
/// two nodes a 1 MiB sum cost 5.5 ms that way (OSU `osu_oshm_reduce`).
///
/// `dest` is free to land in: both PEs copied their sources into `acc`
/// before the call's entry handshake (so an in-place `dest` has been read),
/// and the partner writes it only during this call, which this PE leaves
/// after it has read what arrived. Each PE combines its own contribution
/// with the partner's, as the pairwise exchange of recursive doubling does.
fn pair_allreduce<T: Reducible>(
    call: &mut Call<'_>,
    op: ReduceOp,
    acc: &mut [T],
    dest: SymSlice<T>,
) -> Result<()> {
    let partner = 1 - call.me;
    let d = dest.slice(..acc.len())?;
    call.put_data(partner, d, acc)?;
    call.wait_data(partner, 1)?;
    // SAFETY: this PE's own dest, which the partner finished writing (its
    // signal came after the data) and nobody else writes now.
    T::combine(op, acc, unsafe { call.rt.local_slice(d)? })?;
    call.rt.write_local(d, acc)
}

/// Allreduce by ring reduce-scatter + allgather; the result lands in `dest`
/// on every PE. `acc` holds this PE's contribution and is consumed.
///
/// The whole array travels as `n` blocks in `2 (n - 1)` steps. Its
/// reduce-scatter lands in the staging buffer when it fits there, else in
/// `dest` (before, larger arrays went through staging in pieces of its
/// size, each `2 (n - 1)` steps: between two nodes, 2 + 2 PEs, a 1 MiB sum
/// cost 9-12 ms that way in OSU's `osu_oshm_reduce`, Open MPI's OSHMEM 1.0
/// ms). `dest` is free to land in: every PE copied its source into `acc`
/// before the call's entry handshake; each PE receives each block other
/// than its own once, from its predecessor, and combines it before the
/// step that follows; an inner barrier between the two phases keeps the
/// allgather's writes from overtaking a block its owner has not combined
/// yet.
fn ring_allreduce<T: Reducible>(
    call: &mut Call<'_>,
    op: ReduceOp,
    acc: &mut [T],
    dest: SymSlice<T>,
) -> Result<()> {
    let (n, me) = (call.n, call.me);
    let succ = (me + 1) % n;
    let pred = (me + n - 1) % n;
    let len = acc.len();
    let stage = call.stage::<T>();
    let through_dest = len > stage.len();
    let landing = if through_dest { dest } else { stage };
    let bs = len.div_ceil(n);
    let block = |b: usize| {
        let s = (b * bs).min(len);
        s..((b + 1) * bs).min(len)
    };
    // Reduce-scatter: after n - 1 steps block me+1 is complete here.
    for s in 0..n - 1 {
        let r = block((me + n - s) % n);
        call.put_data(succ, landing.slice(r.clone())?, &acc[r])?;
        let r = block((me + 2 * n - s - 1) % n);
        call.wait_data(pred, 1)?;
        // SAFETY: this PE's own block, which the predecessor finished
        // writing (its signal came after the data); nobody writes it again
        // before this PE's allgather sends (which the ring needs before
        // anyone gets further), nor, in `dest`, before the inner barrier.
        let incoming = unsafe { call.rt.local_slice(landing.slice(r.clone())?)? };
        T::combine(op, &mut acc[r], incoming)?;
    }
    if through_dest {
        call.sync()?;
    }
    // Allgather of the reduced blocks, straight into the destinations.
    let mine = block((me + 1) % n);
    call.rt.write_local(dest.slice(mine.clone())?, &acc[mine])?;
    for s in 0..n - 1 {
        let d = dest.slice(block((me + 1 + n - s) % n))?;
        // SAFETY: this block of this PE's dest was completed locally or
        // received before this step; the predecessor writes a different
        // block now and nobody else writes this PE's dest.
        let src = unsafe { call.rt.local_slice(d)? };
        call.put_data(succ, d, src)?;
        call.wait_data(pred, 1)?;
    }
    Ok(())
}

/// `bytes` as elements of `T`, when they are aligned for `T` and a whole
/// number of them.
fn typed<T: Element>(bytes: &[u8]) -> Option<&[T]> {
    let size = std::mem::size_of::<T>();
    if size == 0
        || !bytes.len().is_multiple_of(size)
        || !(bytes.as_ptr() as usize).is_multiple_of(std::mem::align_of::<T>())
    {
        return None;
    }
    // SAFETY: aligned and sized for `len / size` elements (checked); every
    // bit pattern is a valid `T` (`Element`), and the slice borrows `bytes`.
    Some(unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<T>(), bytes.len() / size) })
}

impl Collectives {
    /// Reduces `nreduce` elements of `source` across `team` with `op`; every
    /// member gets the result in `dest` (which may be `source` itself).
    ///
    /// # Errors
    /// As every collective (see [Errors](Collectives#errors));
    /// [`Error::InvalidArgument`] for a bitwise `op` on a float type, or `dest`
    /// overlapping `source` other than exactly.
    #[track_caller]
    pub fn reduce<T: Reducible>(
        &self,
        team: &Team,
        op: ReduceOp,
        dest: impl Into<SymSlice<T>>,
        source: impl Into<SymSlice<T>>,
        nreduce: usize,
    ) -> Result<()> {
        let (dest, source) = (dest.into(), source.into());
        let rt = &self.rt;
        let local = (|| {
            if op.is_bitwise() && !T::BITWISE {
                return Err(bitwise_on_float(op));
            }
            check_sym(rt, "source", &source, nreduce)?;
            check_sym(rt, "dest", &dest, nreduce)?;
            check_disjoint(&dest, nreduce, &source, nreduce, true)
        })();
        let bytes = nreduce.saturating_mul(std::mem::size_of::<T>());
        if self.algorithms.reduce.is_none()
            && self.all_mapped
            && team.n_pes() > 1
            && bytes >= DIRECT_MIN_BYTES
        {
            // Large, one node: combine straight out of the peers' memory.
            let desc = Desc::new("reduce-direct")
                .with_type::<T>()
                .with(op as u64)
                .with(nreduce as u64);
            let describe = || {
                format!(
                    "op {}, {nreduce} x {}",
                    op.name(),
                    std::any::type_name::<T>()
                )
            };
            let mut call = self.begin(team, "reduce", desc, local, &describe)?;
            return direct_allreduce(&mut call, op, source, dest, nreduce);
        }
        let algo = self.algorithms.reduce(team.n_pes(), bytes);
        let desc = Desc::new("reduce")
            .with_type::<T>()
            .with(op as u64)
            .with(nreduce as u64)
            .with(algo as u64);
        let describe = || {
            format!(
                "op {}, {nreduce} x {}",
                op.name(),
                std::any::type_name::<T>()
            )
        };
        let plan = self
            .algorithms
            .reduce
            .is_none()
            .then(|| Call::fold_plan(self, team, bytes, bytes))
            .flatten();
        if let Some(plan) = plan {
            // Small: the contributions ride on the handshake; everyone
            // combines them in team order, so every PE gets the same bits.
            let mine: &[u8] = match &local {
                // SAFETY: this PE's own source, in the heap (checked); a
                // collective's source is not written during the call.
                Ok(()) => as_bytes(unsafe { rt.local_slice(source.slice(..nreduce)?)? }),
                Err(_) => &[],
            };
            let finish = |parts: &[&[u8]], out: &mut [u8]| -> Result<()> {
                let mut res: SmallVec<[T; 8]> = SmallVec::from_elem(T::identity(op), nreduce);
                match parts {
                    // Two PEs: one pass over both operands, read in place
                    // when they are aligned for `T` (they are: a source
                    // of `T`s and a slot at a word boundary).
                    [a, b] => match (typed::<T>(a), typed::<T>(b)) {
                        (Some(a), Some(b)) => T::combine_into(op, &mut res, a, b)?,
                        _ => {
                            let mut next = res.clone();
                            as_bytes_mut(&mut res).copy_from_slice(a);
                            as_bytes_mut(&mut next).copy_from_slice(b);
                            T::combine(op, &mut res, &next)?;
                        }
                    },
                    _ => {
                        as_bytes_mut(&mut res).copy_from_slice(parts[0]);
                        let mut next = res.clone();
                        for p in &parts[1..] {
                            as_bytes_mut(&mut next).copy_from_slice(p);
                            T::combine(op, &mut res, &next)?;
                        }
                    }
                }
                out.copy_from_slice(as_bytes(&res));
                Ok(())
            };
            let contrib = Contrib::every(mine, bytes);
            return self.fold_to_dest(
                plan, team, "reduce", desc, local, &describe, contrib, &finish, dest, nreduce,
            );
        }
        let mut acc = match &local {
            Ok(()) => rt.read_local(source.slice(..nreduce)?)?,
            Err(_) => Vec::new(),
        };
        let mut call = self.begin(team, "reduce", desc, local, &describe)?;
        if nreduce == 0 {
            return Ok(());
        }
        match algo {
            ReduceAlgorithm::RecursiveDoubling if call.n == 2 => {
                pair_allreduce(&mut call, op, &mut acc, dest)
            }
            ReduceAlgorithm::RecursiveDoubling => {
                rd_allreduce(&mut call, op, &mut acc)?;
                rt.write_local(dest.slice(..nreduce)?, &acc)
            }
            ReduceAlgorithm::Ring if call.n == 1 => rt.write_local(dest.slice(..nreduce)?, &acc),
            ReduceAlgorithm::Ring => ring_allreduce(&mut call, op, &mut acc, dest),
        }
    }

    /// Sum reduction (`shmem_TYPE_sum_reduce`).
    ///
    /// # Errors
    /// As [`Collectives::reduce`].
    #[track_caller]
    pub fn sum_reduce<T: Reducible>(
        &self,
        team: &Team,
        dest: impl Into<SymSlice<T>>,
        source: impl Into<SymSlice<T>>,
        nreduce: usize,
    ) -> Result<()> {
        self.reduce(team, ReduceOp::Sum, dest, source, nreduce)
    }

    /// Product reduction (`shmem_TYPE_prod_reduce`).
    ///
    /// # Errors
    /// As [`Collectives::reduce`].
    #[track_caller]
    pub fn prod_reduce<T: Reducible>(
        &self,
        team: &Team,
        dest: impl Into<SymSlice<T>>,
        source: impl Into<SymSlice<T>>,
        nreduce: usize,
    ) -> Result<()> {
        self.reduce(team, ReduceOp::Prod, dest, source, nreduce)
    }

    /// Minimum reduction (`shmem_TYPE_min_reduce`).
    ///
    /// # Errors
    /// As [`Collectives::reduce`].
    #[track_caller]
    pub fn min_reduce<T: Reducible>(
        &self,
        team: &Team,
        dest: impl Into<SymSlice<T>>,
        source: impl Into<SymSlice<T>>,
        nreduce: usize,
    ) -> Result<()> {
        self.reduce(team, ReduceOp::Min, dest, source, nreduce)
    }

    /// Maximum reduction (`shmem_TYPE_max_reduce`).
    ///
    /// # Errors
    /// As [`Collectives::reduce`].
    #[track_caller]
    pub fn max_reduce<T: Reducible>(
        &self,
        team: &Team,
        dest: impl Into<SymSlice<T>>,
        source: impl Into<SymSlice<T>>,
        nreduce: usize,
    ) -> Result<()> {
        self.reduce(team, ReduceOp::Max, dest, source, nreduce)
    }

    /// Bitwise-and reduction (`shmem_TYPE_and_reduce`).
    ///
    /// # Errors
    /// As [`Collectives::reduce`].
    #[track_caller]
    pub fn and_reduce<T: BitwiseReducible>(
        &self,
        team: &Team,
        dest: impl Into<SymSlice<T>>,
        source: impl Into<SymSlice<T>>,
        nreduce: usize,
    ) -> Result<()> {
        self.reduce(team, ReduceOp::And, dest, source, nreduce)
    }

    /// Bitwise-or reduction (`shmem_TYPE_or_reduce`).
    ///
    /// # Errors
    /// As [`Collectives::reduce`].
    #[track_caller]
    pub fn or_reduce<T: BitwiseReducible>(
        &self,
        team: &Team,
        dest: impl Into<SymSlice<T>>,
        source: impl Into<SymSlice<T>>,
        nreduce: usize,
    ) -> Result<()> {
        self.reduce(team, ReduceOp::Or, dest, source, nreduce)
    }

    /// Bitwise-xor reduction (`shmem_TYPE_xor_reduce`).
    ///
    /// # Errors
    /// As [`Collectives::reduce`].
    #[track_caller]
    pub fn xor_reduce<T: BitwiseReducible>(
        &self,
        team: &Team,
        dest: impl Into<SymSlice<T>>,
        source: impl Into<SymSlice<T>>,
        nreduce: usize,
    ) -> Result<()> {
        self.reduce(team, ReduceOp::Xor, dest, source, nreduce)
    }

    /// Prefix scan of `nelems` elements across `team` in team PE order:
    /// PE i gets the combination of PEs 0..=i (inclusive) or 0..i
    /// (exclusive; PE 0 gets `op`'s identity). `dest` may be `source`.
    ///
    /// # Errors
    /// As [`Collectives::reduce`].
    #[track_caller]
    pub fn scan<T: Reducible>(
        &self,
        team: &Team,
        op: ReduceOp,
        kind: ScanKind,
        dest: impl Into<SymSlice<T>>,
        source: impl Into<SymSlice<T>>,
        nelems: usize,
    ) -> Result<()> {
        let (dest, source) = (dest.into(), source.into());
        let rt = &self.rt;
        let local = (|| {
            if op.is_bitwise() && !T::BITWISE {
                return Err(bitwise_on_float(op));
            }
            check_sym(rt, "source", &source, nelems)?;
            check_sym(rt, "dest", &dest, nelems)?;
            check_disjoint(&dest, nelems, &source, nelems, true)
        })();
        let x = match &local {
            Ok(()) => rt.read_local(source.slice(..nelems)?)?,
            Err(_) => Vec::new(),
        };
        let algo = self.algorithms.scan(team.n_pes());
        let desc = Desc::new("scan")
            .with_type::<T>()
            .with(op as u64)
            .with(kind as u64)
            .with(nelems as u64)
            .with(algo as u64);
        let describe = || {
            format!(
                "op {}, {kind:?}, {nelems} x {}",
                op.name(),
                std::any::type_name::<T>()
            )
        };
        let mut call = self.begin(team, "scan", desc, local, &describe)?;
        if nelems == 0 {
            return Ok(());
        }
        let dest = dest.slice(..nelems)?;
        match algo {
            ScanAlgorithm::Linear => linear_scan(&mut call, op, kind, dest, x),
            ScanAlgorithm::RecursiveDoubling => rd_scan(&mut call, op, kind, dest, x),
        }
    }

    /// Inclusive sum scan.
    ///
    /// # Errors
    /// As [`Collectives::scan`].
    #[track_caller]
    pub fn sum_inscan<T: Reducible>(
        &self,
        team: &Team,
        dest: impl Into<SymSlice<T>>,
        source: impl Into<SymSlice<T>>,
        nelems: usize,
    ) -> Result<()> {
        self.scan(
            team,
            ReduceOp::Sum,
            ScanKind::Inclusive,
            dest,
            source,
            nelems,
        )
    }

    /// Exclusive sum scan (PE 0 gets zeros).
    ///
    /// # Errors
    /// As [`Collectives::scan`].
    #[track_caller]
    pub fn sum_exscan<T: Reducible>(
        &self,
        team: &Team,
        dest: impl Into<SymSlice<T>>,
        source: impl Into<SymSlice<T>>,
        nelems: usize,
    ) -> Result<()> {
        self.scan(
            team,
            ReduceOp::Sum,
            ScanKind::Exclusive,
            dest,
            source,
            nelems,
        )
    }
}

/// PE i waits for PE i-1's inclusive prefix (put straight into its dest),
/// combines and passes its own on.
fn linear_scan<T: Reducible>(
    call: &mut Call<'_>,
    op: ReduceOp,
    kind: ScanKind,
    dest: SymSlice<T>,
    x: Vec<T>,
) -> Result<()> {
    let (me, n) = (call.me, call.n);
    let rt = call.rt;
    let (incl, excl) = if me == 0 {
        let id = vec![T::identity(op); x.len()];
        (x, id)
    } else {
        call.wait_data(me - 1, 1)?;
        let prefix = rt.read_local(dest)?;
        let mut incl = prefix.clone();
        T::combine(op, &mut incl, &x)?;
        (incl, prefix)
    };
    if me + 1 < n {
        call.put_data(me + 1, dest, &incl)?;
    }
    match kind {
        ScanKind::Inclusive => rt.write_local(dest, &incl),
        ScanKind::Exclusive => rt.write_local(dest, &excl),
    }
}

/// Hillis-Steele: in round k PE i sends its running prefix to PE i + 2^k.
/// Round k has its own staging slot; chunks are separated by a sync because
/// lower PEs never wait for higher ones and could otherwise run ahead.
fn rd_scan<T: Reducible>(
    call: &mut Call<'_>,
    op: ReduceOp,
    kind: ScanKind,
    dest: SymSlice<T>,
    x: Vec<T>,
) -> Result<()> {
    let (me, n) = (call.me, call.n);
    let rounds = crate::collectives::ceil_log2(n).max(1);
    let slot_elems = call.coll.stage_bytes / rounds / std::mem::size_of::<T>();
    if slot_elems == 0 {
        return Err(Error::invalid(
            "stage_bytes",
            "too small for a scan of this type",
        ));
    }
    let stage = call.stage::<T>();
    for (ci, chunk) in x.chunks(slot_elems).enumerate() {
        if ci > 0 {
            call.sync()?;
        }
        let len = chunk.len();
        let mut incl = chunk.to_vec();
        let mut excl: Option<Vec<T>> = None;
        let mut dist = 1;
        let mut k = 0;
        while dist < n {
            let at = k * slot_elems;
            if me + dist < n {
                call.put_data(me + dist, stage.slice(at..at + len)?, &incl)?;
            }
            if me >= dist {
                call.wait_data(me - dist, 1)?;
                let recv = staged::<T>(call, at, len)?;
                let mut v = recv.clone();
                T::combine(op, &mut v, &incl)?;
                incl = v;
                excl = Some(match excl {
                    None => recv,
                    Some(e) => {
                        let mut v = recv;
                        T::combine(op, &mut v, &e)?;
                        v
                    }
                });
            }
            dist <<= 1;
            k += 1;
        }
        let out = dest.slice(ci * slot_elems..ci * slot_elems + len)?;
        match kind {
            ScanKind::Inclusive => call.rt.write_local(out, &incl)?,
            ScanKind::Exclusive => {
                let e = excl.unwrap_or_else(|| vec![T::identity(op); len]);
                call.rt.write_local(out, &e)?
            }
        }
    }
    Ok(())
}

/// Team creation agrees on free team slots with the AND-allreduce here, so
/// that the collectives module does not depend on this one.
impl Collectives {
    /// Finds `count` slots free on every PE of `parent` (an AND-reduction of
    /// the free masks, which doubles as the argument check).
    #[track_caller]
    pub(crate) fn agree_free_slots(
        &self,
        parent: &Team,
        op: &'static str,
        desc: Desc,
        local: Result<()>,
        describe: &dyn Fn() -> String,
        count: usize,
    ) -> Result<Vec<usize>> {
        let mut mask = [*self.free_slots()];
        let mut call = self.begin(parent, op, desc, local, describe)?;
        rd_allreduce(&mut call, ReduceOp::And, &mut mask)?;
        let mut bits = mask[0];
        let mut out = Vec::with_capacity(count);
        for _ in 0..count {
            if bits == 0 {
                return Err(Error::invalid(
                    op,
                    format!(
                        "no free team slot common to the parent's PEs ({} teams at most; destroy unused teams)",
                        self.max_teams
                    ),
                ));
            }
            let s = bits.trailing_zeros() as usize;
            bits &= !(1 << s);
            out.push(s);
        }
        Ok(out)
    }
}
