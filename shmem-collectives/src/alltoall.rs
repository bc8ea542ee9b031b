//! Alltoall: block `j` of PE `i`'s source becomes block `i` of PE `j`'s
//! dest. Every block is one put with a signal into its final place.

use shmem_core::{as_bytes, Element, Error, Result, SymSlice};

use crate::collectives::{byte_len, check_disjoint, check_sym, local_copy, mul, Call, Desc};
use crate::fold::{Contrib, FoldPlan};
use crate::{AlltoallAlgorithm, Collectives, Team};

/// Sends one block per peer with `send(call, to)` in the order the
/// algorithm dictates and waits for the peers' blocks.
fn exchange(
    call: &mut Call<'_>,
    algo: AlltoallAlgorithm,
    mut send: impl FnMut(&Call<'_>, usize) -> Result<()>,
) -> Result<()> {
    let (me, n) = (call.me, call.n);
    match algo {
        AlltoallAlgorithm::Direct => {
            // Staggered order so that PEs do not all target PE 0 first.
            for s in 1..n {
                send(call, (me + s) % n)?;
            }
            for s in 1..n {
                call.wait_data((me + n - s) % n, 1)?;
            }
        }
        AlltoallAlgorithm::Pairwise => {
            for s in 1..n {
                send(call, (me + s) % n)?;
                call.wait_data((me + n - s) % n, 1)?;
            }
        }
    }
    Ok(())
}

impl Collectives {
    /// Exchanges `nelems`-element blocks between every pair of members
    /// (`shmem_alltoall`): block `j` of this PE's `source` lands in block
    /// `my_pe` of team PE `j`'s `dest`. Both hold `n_pes * nelems` elements
    /// and must not overlap.
    ///
    /// # Errors
    /// As every collective (see [Errors](Collectives#errors)); here `dest` and `source`
    /// must each hold `n_pes * nelems` elements and must not overlap.
    #[track_caller]
    pub fn alltoall<T: Element>(
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
            check_sym(rt, "source", &source, total)?;
            check_sym(rt, "dest", &dest, total)?;
            check_disjoint(&dest, total, &source, total, false)
        })();
        let algo = self
            .algorithms
            .alltoall(n, nelems.saturating_mul(std::mem::size_of::<T>()));
        let desc = Desc::new("alltoall")
            .with_type::<T>()
            .with(nelems as u64)
            .with(algo as u64);
        let describe = || format!("{nelems} x {}", std::any::type_name::<T>());
        let block = |i: usize| i * nelems..(i + 1) * nelems;
        let bytes = nelems.saturating_mul(std::mem::size_of::<T>());
        let plan = match self.algorithms.alltoall {
            None => Call::fold_plan(self, team, bytes, bytes.saturating_mul(n)),
            Some(_) => None,
        };
        if plan == Some(FoldPlan::Pair) {
            // Two PEs: the block for the other PE rides on the handshake
            // (a gather at team PE 0 would give every PE the same result;
            // here each gets its own).
            let me = team.my_pe();
            let src: &[T] = match &local {
                // SAFETY: this PE's own source, in the heap (checked); a
                // collective's source is not written during the call.
                Ok(()) => unsafe { rt.local_slice(source.slice(..n * nelems)?)? },
                Err(_) => &[],
            };
            let mine = src.get(block(1 - me)).map_or(&[][..], as_bytes);
            let finish = |parts: &[&[u8]], out: &mut [u8]| -> Result<()> {
                // Called only with this PE's valid arguments (src holds
                // both blocks) and the peer's block of the agreed size.
                let own = src
                    .get(block(me))
                    .ok_or_else(|| Error::invalid("source", "holds no block for this PE"))?;
                let (first, second) = out.split_at_mut(bytes);
                let (to_me, to_other) = if me == 0 {
                    (first, second)
                } else {
                    (second, first)
                };
                to_me.copy_from_slice(as_bytes(own));
                to_other.copy_from_slice(parts[1 - me]);
                Ok(())
            };
            let contrib = Contrib::every(mine, bytes);
            return self.fold_to_dest(
                FoldPlan::Pair,
                team,
                "alltoall",
                desc,
                local,
                &describe,
                contrib,
                &finish,
                dest,
                n * nelems,
            );
        }
        let mut call = self.begin(team, "alltoall", desc, local, &describe)?;
        if nelems == 0 {
            return Ok(());
        }
        let me = call.me;
        local_copy(rt, dest.slice(block(me))?, source.slice(block(me))?)?;
        // SAFETY: source is never a target of this call.
        let src = unsafe { rt.local_slice(source.slice(..n * nelems)?)? };
        exchange(&mut call, algo, |call, to| {
            call.put_data(to, dest.slice(block(me))?, &src[block(to)])
        })
    }

    /// Strided alltoall (`shmem_alltoalls`): element `k` of the block for
    /// team PE `j` is `source[sst * (j * nelems + k)]`, and it lands in
    /// `dest[dst * (my_pe * nelems + k)]` on PE `j`. Strides are in elements
    /// and at least 1.
    ///
    /// # Errors
    /// As every collective (see [Errors](Collectives#errors));
    /// [`Error::InvalidArgument`] for a zero stride, or buffers too short for `n_pes *
    /// nelems` strided elements or overlapping.
    #[allow(clippy::too_many_arguments)]
    #[track_caller]
    pub fn alltoalls<T: Element>(
        &self,
        team: &Team,
        dest: impl Into<SymSlice<T>>,
        source: impl Into<SymSlice<T>>,
        dst: usize,
        sst: usize,
        nelems: usize,
    ) -> Result<()> {
        let (dest, source) = (dest.into(), source.into());
        let rt = &self.rt;
        let n = team.n_pes();
        let extent = |stride: usize| -> Result<usize> {
            let count = mul("nelems", n, nelems)?;
            if count == 0 {
                return Ok(0);
            }
            Ok(mul("stride", count - 1, stride)? + 1)
        };
        let local = (|| {
            if dst == 0 || sst == 0 {
                return Err(Error::invalid("stride", "dst and sst must be at least 1"));
            }
            let (dlen, slen) = (extent(dst)?, extent(sst)?);
            byte_len::<T>(dlen.max(slen))?;
            check_sym(rt, "source", &source, slen)?;
            check_sym(rt, "dest", &dest, dlen)?;
            check_disjoint(&dest, dlen, &source, slen, false)
        })();
        let algo = self
            .algorithms
            .alltoall(n, nelems.saturating_mul(std::mem::size_of::<T>()));
        let desc = Desc::new("alltoalls")
            .with_type::<T>()
            .with(nelems as u64)
            .with(dst as u64)
            .with(sst as u64)
            .with(algo as u64);
        let describe = || {
            format!(
                "{nelems} x {}, dst {dst}, sst {sst}",
                std::any::type_name::<T>()
            )
        };
        let mut call = self.begin(team, "alltoalls", desc, local, &describe)?;
        if nelems == 0 {
            return Ok(());
        }
        let me = call.me;
        // SAFETY: source is never a target of this call.
        let src = unsafe { rt.local_slice(source.slice(..extent(sst)?)?)? };
        let pack =
            |j: usize| -> Vec<T> { (0..nelems).map(|k| src[sst * (j * nelems + k)]).collect() };
        let first = dst * me * nelems;
        let to_dest = dest.slice(first..)?;
        let own = pack(me);
        if dst == 1 {
            rt.write_local(dest.slice(first..first + nelems)?, &own)?;
        } else {
            for (k, v) in own.iter().enumerate() {
                rt.write_local(
                    dest.slice(first + k * dst..first + k * dst + 1)?,
                    std::slice::from_ref(v),
                )?;
            }
        }
        exchange(&mut call, algo, |call, to| {
            let block = pack(to);
            if dst == 1 {
                call.put_data(to, dest.slice(first..first + nelems)?, &block)
            } else {
                let pe = call.pe(to);
                call.rt.iput(to_dest, &block, dst, 1, nelems, pe)?;
                // The count must not overtake the strided puts.
                call.rt.fence()?;
                call.notify(to)
            }
        })
    }
}
