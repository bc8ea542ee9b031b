//! Active sets of the deprecated collectives: `(PE_start, logPE_stride,
//! PE_size)` names world PEs `PE_start + i * 2^logPE_stride`, `i < PE_size`.
//!
//! The set of all PEs runs on the world team (fast path) and a set of the
//! calling PE alone runs locally. Any other set runs here, among its
//! members only, synchronised through the caller's `pSync` as the standard
//! intends: `pSync[0]` on the set's first PE counts arrivals, `pSync[1]` on
//! every other member is its release flag and `pSync[2]` carries a PE's
//! element count for `collect`. Each word is back at `SHMEM_SYNC_VALUE` (0)
//! when the call returns, so the same `pSync` may serve the next call.
//! Data moves with blocking gets into the caller's own buffers (heap or
//! static), between an entry and an exit synchronisation; reductions gather
//! every member's source first, so in-place calls are safe.

use std::ffi::{c_int, c_long};
use std::sync::atomic::{AtomicU64, Ordering};

use shmem::collectives::{ReduceOp, Reducible};
use shmem::{Error, PeId, Result, SignalOp, Team};

use crate::rma::bytes;
use crate::State;

/// Words of `pSync` this module uses (`SHMEM_*_SYNC_SIZE` is larger).
const PSYNC_WORDS: usize = 3;

/// What an active set names.
pub(crate) enum ActiveSet<'a> {
    /// Every PE: the world team.
    All(&'a Team),
    /// The calling PE alone: the collective is local.
    OnlyMe,
    /// Another set: its world PEs in set order and the caller's index.
    Members(Vec<PeId>, usize),
}

/// Resolves an active set; an error (the standard leaves it undefined) when
/// it is malformed, leaves the job, or does not hold the calling PE.
pub(crate) fn active_set(
    st: &State,
    start: c_int,
    log_stride: c_int,
    size: c_int,
) -> Result<ActiveSet<'_>> {
    let n = st.rt.n_pes();
    let me = st.rt.my_pe();
    let what =
        || format!("active set (PE_start {start}, logPE_stride {log_stride}, PE_size {size})");
    if size < 1 || start < 0 || !(0..31).contains(&log_stride) {
        return Err(Error::invalid(
            "active set",
            format!(
                "{}: PE_size must be at least 1, PE_start at least 0 and logPE_stride in 0..31",
                what()
            ),
        ));
    }
    // A set of one PE: the stride is not used.
    if size == 1 && start as usize == me {
        return Ok(ActiveSet::OnlyMe);
    }
    let stride = 1usize << log_stride;
    if start == 0 && size as usize == n && stride == 1 {
        return Ok(ActiveSet::All(st.coll.world_ref()));
    }
    let mut members = Vec::with_capacity(size as usize);
    for i in 0..size as usize {
        let pe = (start as usize)
            .checked_add(i.saturating_mul(stride))
            .filter(|&pe| pe < n);
        match pe {
            Some(pe) => members.push(pe),
            None => {
                return Err(Error::invalid(
                    "active set",
                    format!("{}: member {i} falls outside the job's {n} PEs", what()),
                ))
            }
        }
    }
    match members.iter().position(|&pe| pe == me) {
        Some(idx) => Ok(ActiveSet::Members(members, idx)),
        None => Err(Error::invalid(
            "active set",
            format!(
                "{}: PE {me} called a collective on a set it is not in",
                what()
            ),
        )),
    }
}

/// One collective call over an active set of more than one PE.
pub(crate) struct SetCall<'a> {
    st: &'a State,
    members: Vec<PeId>,
    me: usize,
    psync: *mut c_long,
}

impl<'a> SetCall<'a> {
    pub(crate) fn new(
        st: &'a State,
        members: Vec<PeId>,
        me: usize,
        psync: *mut c_long,
    ) -> Result<Self> {
        if psync.is_null() {
            return Err(Error::invalid("pSync", "is NULL"));
        }
        if !(psync as usize).is_multiple_of(8) {
            return Err(Error::Misaligned {
                offset: psync as usize,
                width: 8,
            });
        }
        st.locate(psync.cast(), PSYNC_WORDS * 8)?;
        Ok(SetCall {
            st,
            members,
            me,
            psync,
        })
    }

    /// Members in the set.
    pub(crate) fn n(&self) -> usize {
        self.members.len()
    }

    fn word(&self, i: usize) -> &AtomicU64 {
        // SAFETY: pSync holds PSYNC_WORDS aligned, symmetric longs (checked
        // in `new`); peers change them only with atomics.
        unsafe { &*(self.psync.add(i) as *const AtomicU64) }
    }

    /// Waits until `ready()`; sleeping, it is woken only by writes to pSync
    /// word `i` when pSync is in the heap (by any write when it is static).
    fn wait_word(&self, i: usize, ready: impl FnMut() -> bool) -> Result<()> {
        let rt = &self.st.rt;
        match self.st.locate(self.remote_word(i) as *const u8, 8)? {
            crate::state::Sym::Heap(off) => rt.wait_on(off, 8, ready),
            crate::state::Sym::Static(..) => rt.wait_for(ready),
        }
    }

    fn remote_word(&self, i: usize) -> *mut u64 {
        self.psync.wrapping_add(i).cast()
    }

    /// Waits until every member has arrived (the set's barrier without quiet).
    pub(crate) fn sync(&self) -> Result<()> {
        let n = self.n();
        if n == 1 {
            return Ok(());
        }
        if self.me == 0 {
            let arrived = self.word(0);
            self.wait_word(0, || arrived.load(Ordering::Acquire) >= (n - 1) as u64)?;
            // No member can arrive again before it is released below.
            arrived.store(0, Ordering::Release);
            for &pe in &self.members[1..] {
                self.st
                    .signal_world(self.remote_word(1), 1, SignalOp::Set, pe)?;
            }
        } else {
            self.st
                .signal_world(self.remote_word(0), 1, SignalOp::Add, self.members[0])?;
            let released = self.word(1);
            self.wait_word(1, || released.load(Ordering::Acquire) != 0)?;
            released.store(0, Ordering::Release);
        }
        Ok(())
    }

    /// `shmem_barrier`: completes this PE's puts, then synchronises.
    pub(crate) fn barrier(&self) -> Result<()> {
        self.st.rt.quiet()?;
        self.sync()
    }

    /// Checks that `len` bytes at `dest` are symmetric (a buffer too small
    /// for the call is refused, not overrun).
    fn check_dest(&self, dest: *mut u8, len: usize) -> Result<()> {
        if len > 0 {
            self.st.locate(dest, len)?;
        }
        Ok(())
    }

    fn get(&self, dest: *mut u8, src: *const u8, len: usize, idx: usize) -> Result<()> {
        self.st.get_world(dest, src, len, self.members[idx], false)
    }

    /// Broadcast of `len` bytes from set member `root`; the root's `dest`
    /// is left untouched.
    pub(crate) fn broadcast(
        &self,
        dest: *mut u8,
        src: *const u8,
        len: usize,
        root: c_int,
    ) -> Result<()> {
        let root = usize::try_from(root)
            .ok()
            .filter(|&r| r < self.n())
            .ok_or_else(|| {
                Error::invalid("PE_root", format!("{root} is not in 0..{}", self.n()))
            })?;
        self.check_dest(dest, len)?;
        self.st.rt.quiet()?;
        self.sync()?;
        if self.me != root {
            self.get(dest, src, len, root)?;
        }
        self.sync()
    }

    /// Concatenates every member's `len` bytes (fcollect).
    pub(crate) fn fcollect(&self, dest: *mut u8, src: *const u8, len: usize) -> Result<()> {
        let total = len
            .checked_mul(self.n())
            .ok_or_else(|| Error::invalid("nelems", "too large"))?;
        self.check_dest(dest, total)?;
        self.st.rt.quiet()?;
        self.sync()?;
        for j in 0..self.n() {
            self.get(dest.wrapping_add(j * len), src, len, j)?;
        }
        self.sync()
    }

    /// Concatenates every member's `n` elements of `elem` bytes, the counts
    /// differing by PE (collect).
    pub(crate) fn collect(
        &self,
        dest: *mut u8,
        src: *const u8,
        n: usize,
        elem: usize,
    ) -> Result<()> {
        let count = self.word(2);
        count.store(n as u64, Ordering::Release);
        self.st.rt.quiet()?;
        self.sync()?;
        let mut counts = Vec::with_capacity(self.n());
        for j in 0..self.n() {
            let mut c = 0u64;
            self.get(
                (&mut c as *mut u64).cast(),
                self.remote_word(2).cast(),
                8,
                j,
            )?;
            counts.push(c as usize);
        }
        let total = counts.iter().try_fold(0usize, |a, &c| a.checked_add(c));
        let total_bytes = total.and_then(|t| t.checked_mul(elem));
        let checked = match total_bytes {
            Some(b) => self.check_dest(dest, b),
            None => Err(Error::invalid("nelems", "the counts overflow")),
        };
        if let Err(e) = checked {
            // The others still finish; this PE reports why it stopped.
            let _ = self.sync();
            count.store(0, Ordering::Release);
            return Err(e);
        }
        let mut at = 0usize;
        for (j, &c) in counts.iter().enumerate() {
            self.get(dest.wrapping_add(at * elem), src, c * elem, j)?;
            at += c;
        }
        self.sync()?;
        count.store(0, Ordering::Release);
        Ok(())
    }

    /// Block `j` of `dest` gets block `me` of member `j`'s `src` (alltoall).
    pub(crate) fn alltoall(&self, dest: *mut u8, src: *const u8, len: usize) -> Result<()> {
        let total = len
            .checked_mul(self.n())
            .ok_or_else(|| Error::invalid("nelems", "too large"))?;
        self.check_dest(dest, total)?;
        self.st.rt.quiet()?;
        self.sync()?;
        for j in 0..self.n() {
            self.get(
                dest.wrapping_add(j * len),
                src.wrapping_add(self.me * len),
                len,
                j,
            )?;
        }
        self.sync()
    }

    /// alltoall with element strides `dst` and `sst` (in elements).
    pub(crate) fn alltoalls(
        &self,
        dest: *mut u8,
        src: *const u8,
        dst: usize,
        sst: usize,
        n: usize,
        elem: usize,
    ) -> Result<()> {
        let count = n
            .checked_mul(self.n())
            .ok_or_else(|| Error::invalid("nelems", "too large"))?;
        if count > 0 {
            let span = |stride: usize, what: &'static str| {
                (count - 1)
                    .checked_mul(stride.max(1))
                    .and_then(|x| x.checked_add(1))
                    .and_then(|x| x.checked_mul(elem))
                    .ok_or_else(|| Error::invalid(what, "the strided extent overflows"))
            };
            self.check_dest(dest, span(dst, "dst")?)?;
            span(sst, "sst")?;
        }
        self.st.rt.quiet()?;
        self.sync()?;
        for j in 0..self.n() {
            for k in 0..n {
                let d = dest.wrapping_add((j * n + k) * dst * elem);
                let s = src.wrapping_add((self.me * n + k) * sst * elem);
                self.get(d, s, elem, j)?;
            }
        }
        self.sync()
    }

    /// Reduces `n` elements of every member's `src` in set order; every
    /// member gets the same result in `dest` (which may be `src`).
    pub(crate) fn reduce<T: Reducible>(
        &self,
        op: ReduceOp,
        dest: *mut T,
        src: *const T,
        n: usize,
    ) -> Result<()> {
        let len = bytes::<T>(n)?;
        self.check_dest(dest.cast(), len)?;
        self.st.rt.quiet()?;
        self.sync()?;
        let mut all: Vec<Vec<T>> = Vec::with_capacity(self.n());
        for j in 0..self.n() {
            let mut v = vec![T::identity(op); n];
            self.get(v.as_mut_ptr().cast(), src.cast(), len, j)?;
            all.push(v);
        }
        // Every member has read every source: dest (maybe src) is free.
        self.sync()?;
        let mut it = all.into_iter();
        let mut acc = it.next().unwrap_or_default();
        for v in it {
            T::combine(op, &mut acc, &v)?;
        }
        if n > 0 {
            // SAFETY: dest holds `n` elements (checked symmetric above).
            unsafe { std::ptr::copy_nonoverlapping(acc.as_ptr(), dest, n) };
        }
        Ok(())
    }
}
