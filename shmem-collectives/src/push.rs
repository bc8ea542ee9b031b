//! Small broadcasts on one node, published by the root without waiting.
//!
//! OpenSHMEM lets a broadcast's root return as soon as its data is on its
//! way (every member's `dest` must be ready before any PE calls the
//! broadcast), and that is what users measure: the root's time and the
//! members' time, averaged. A handshake first would make the root wait a
//! round trip for nothing. So when every PE maps every heap and the data
//! is small, the root publishes instead:
//!
//! * the root copies its data into its own buffer for this call's parity
//!   (the tagged word's cache line for up to [`LINE_PAYLOAD`] bytes, else
//!   a [`PUSH_MAX`]-byte area), copies it into its own `dest`, stores the
//!   call's tag and fingerprint in its published word (one store; members
//!   asleep on it share one wake-up) and returns;
//! * a member waits for the root's word to carry this call's tag, checks
//!   the fingerprint against its own call (a different count, type, root or
//!   collective is a mismatch, and nothing is copied), copies the data out
//!   of the root's memory into its own `dest`, and records "done" with its
//!   own fingerprint in a receipt word of its own.
//!
//! Nobody writes into another PE's `dest`, so a member that is still
//! reading its `dest` from an earlier call is never overwritten.
//!
//! The root checks the receipts when it opens its next call on the team
//! (of any kind): it waits until every member has finished this broadcast,
//! which also frees the parity buffer for the call after next, and a
//! receipt with another fingerprint (a member that passed different
//! arguments or called another collective) makes that next call fail with
//! [`shmem_core::Error::CollectiveMismatch`] on the root, after joining
//! its handshake as a PE with invalid arguments, so the other members of
//! that call fail too instead of waiting. A mismatch is thus reported on
//! every PE whose call differed, and on the root one call late; a member
//! never copies data from a call that differs from its own. A member that
//! waits on a root that is in another collective stays waiting until the
//! hang report names the diverged PEs (`SHMEM_HANG_REPORT`).
//!
//! Reuse: the root writes its parity buffer again two calls later, and by
//! then it has seen every member's receipt (at the opening of the next
//! call), so no member is still copying from it. A member's receipt word
//! of one parity is rewritten only two calls later, after the root has
//! read it (the root's next call cannot complete without it) or moved
//! past it.

use shmem_core::{as_bytes, as_bytes_mut, Element, Error, Result, SignalOp, SymSlice};

use crate::collectives::{local_copy, Call, Desc, BAD_ARGS};
use crate::{Collectives, Team};

/// Largest broadcast (bytes) that is published rather than sent.
pub(crate) const PUSH_MAX: usize = 2048;
/// Bytes that travel in the published word's own cache line.
pub(crate) const LINE_PAYLOAD: usize = 56;

/// The tag of call `seq` in a signal word's upper half.
fn tag_of(seq: u64) -> u64 {
    (seq & 0xFFFF_FFFF) << 32
}

/// Whether the tag in `word` is that of call `seq` or a later one.
fn at_or_after(word: u64, seq: u64) -> bool {
    ((word >> 32) as u32).wrapping_sub(seq as u32) as i32 >= 0
}

impl Collectives {
    /// Whether a broadcast of `bytes` on a team of `n` is published.
    pub(crate) fn publishes(&self, n: usize, bytes: usize) -> bool {
        self.all_mapped && n > 1 && bytes <= PUSH_MAX && self.algorithms.broadcast.is_none()
    }

    /// The published broadcast (see the module comment). `local` is this
    /// PE's own argument check; `desc` the call's fingerprint.
    #[allow(clippy::too_many_arguments)]
    #[track_caller]
    pub(crate) fn publish_broadcast<T: Element>(
        &self,
        team: &Team,
        dest: SymSlice<T>,
        source: SymSlice<T>,
        nelems: usize,
        root: usize,
        desc: Desc,
        local: Result<()>,
        describe: &dyn Fn() -> String,
    ) -> Result<()> {
        let rt = &self.rt;
        let mut call = self.open_call(team, "broadcast")?;
        let local = match call.late.take() {
            Some(e) => Err(e),
            None => local,
        };
        let value = match local {
            Ok(()) => desc.value(),
            Err(_) => BAD_ARGS,
        };
        call.state.seq += 1;
        let seq = call.state.seq;
        let signal = tag_of(seq) | value as u64;
        let parity = (seq & 1) as usize;
        let line = call.word(self.layout.push_line(parity));
        let done = call.word(self.layout.push_done(parity));
        let me_pe = rt.my_pe();
        let bytes = nelems.saturating_mul(std::mem::size_of::<T>());
        let payload = if bytes <= LINE_PAYLOAD {
            line.offset() + 8
        } else {
            call.push_area(parity)
        };
        if call.me == root {
            if local.is_ok() && bytes > 0 {
                let src = source.slice(..nelems)?;
                // SAFETY: this PE's own source, in the heap (checked); a
                // collective's source is not written during the call.
                let data = as_bytes(unsafe { rt.local_slice(src)? });
                let buf = SymSlice::<u8>::from_raw_parts(payload, bytes, line.instance());
                rt.write_local(buf, data)?;
                local_copy(rt, dest.slice(..nelems)?, src)?;
            }
            // Data before the word (a release store): members that see the
            // tag see the data.
            rt.signal_op(line, signal, SignalOp::Set, me_pe)?;
            // A PE that also believes it is the root checks this receipt.
            rt.signal_op(done, signal, SignalOp::Set, me_pe)?;
            if local.is_ok() {
                call.state.push_pending = Some((seq, value));
            }
            return local;
        }
        if let Err(e) = local {
            rt.signal_op(done, tag_of(seq) | BAD_ARGS as u64, SignalOp::Set, me_pe)?;
            return Err(e);
        }
        let root_pe = call.pe(root);
        let got = call.wait_tagged_on(root_pe, line, tag_of(seq))?;
        if got == value && bytes > 0 {
            // SAFETY: this PE's own dest, in the heap (checked); only this
            // PE writes it during the call.
            let d = unsafe { rt.local_slice_mut(dest.slice(..nelems)?)? };
            // The root wrote these bytes before the word just seen, and
            // rewrites them only after this PE's receipt.
            rt.get_bytes(root_pe, payload, as_bytes_mut(d))?;
        }
        rt.signal_op(done, signal, SignalOp::Set, me_pe)?;
        if got != value {
            return Err(self.mismatch("broadcast", &call, describe));
        }
        Ok(())
    }
}

/// The root's check of broadcast `seq` (fingerprint `value`), run when it
/// opens its next call on the team: waits for every member's receipt and
/// returns the mismatch to report, if a member's call differed.
pub(crate) fn check_receipts(call: &Call<'_>, seq: u64, value: u32) -> Result<Option<Error>> {
    let parity = (seq & 1) as usize;
    let done = call.word(call.coll.layout.push_done(parity));
    let mut differed = None;
    for j in (0..call.n).filter(|&j| j != call.me) {
        let pe = call.pe(j);
        let p = call
            .rt
            .peer_ptr(done.offset(), pe)?
            .ok_or_else(|| Error::invalid("team", format!("PE {pe}'s heap is not mapped here")))?;
        // SAFETY: an 8-aligned word of a heap mapped for the runtime's
        // life, written only with atomics.
        let word = unsafe { std::sync::atomic::AtomicU64::from_ptr(p.as_ptr().cast()) };
        let mut got = 0;
        call.rt.wait_on_pe(pe, done.offset(), 8, || {
            got = word.load(std::sync::atomic::Ordering::Acquire);
            at_or_after(got, seq)
        })?;
        // A later tag: the member has moved on past a later call already
        // (under other roots); this receipt can no longer be read.
        if got & !0xFFFF_FFFF == tag_of(seq) && got as u32 != value && differed.is_none() {
            differed = Some((j, pe));
        }
    }
    Ok(differed.map(|(j, pe)| Error::CollectiveMismatch {
        op: "broadcast",
        details: format!(
            "team PE {j} (PE {pe}) did not make the same call as this PE's previous collective on \
             the team, a broadcast with this PE as the root (#{seq}): it passed different \
             arguments, invalid ones, or called a different collective; reported at this PE's next \
             collective call, since the root of a small broadcast does not wait"
        ),
    }))
}
