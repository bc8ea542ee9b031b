//! Broadcasts on one node: published by the root, copied by the members.
//!
//! OpenSHMEM lets a broadcast's root return as soon as its data is on its
//! way (every member's `dest` must be ready before any PE calls the
//! broadcast), and that is what users measure: the root's time and the
//! members' time, averaged. A handshake first would make the root wait a
//! round trip for nothing. So on a team whose PEs map each other's heaps,
//! every broadcast is published by its root and copied by its members:
//!
//! * the root stores the call's tag and fingerprint in its published word
//!   for the call's parity (one store; members asleep on it share one
//!   wake-up). Up to [`PUSH_MAX`] bytes it first copies the data into its
//!   own buffer of that parity (the word's cache line up to
//!   [`LINE_PAYLOAD`] bytes) and returns at once; above, the word's line
//!   carries the heap offset of its `source`, which the members copy from,
//!   and the root waits for their receipts before it returns (its
//!   `source` must stay untouched until then). The root fills its own
//!   `dest` after publishing, while the members copy.
//! * a member first records, in its own heap, that it entered the call as
//!   a member; then it waits until the PE it names as the root has either
//!   published this call (it checks the fingerprint against its own call:
//!   a different count, type or root is a mismatch, and nothing is copied)
//!   or recorded that it entered as a member too (the PEs disagree on the
//!   root: a mismatch, not a hang). It copies the data out of the root's
//!   memory into its own `dest` and writes its receipt (tag and its own
//!   fingerprint) into its slot of the root's receipt array.
//!
//! Nobody writes into another PE's `dest`, so a member that is still
//! reading its `dest` from an earlier call is never overwritten.
//!
//! A small broadcast's root checks the receipts when it opens a later
//! call on the team: its next call of any other kind, or, when it
//! publishes the next small broadcast itself, the one after (that
//! publish uses the other parity's buffer, so the root needs only the
//! receipts of the publish before, and a loop of broadcasts from one root
//! pays one line transfer per call instead of the receipt's round trip).
//! The check waits until every member has finished, which also frees the
//! parity buffer for the publish two later, and a receipt with another
//! fingerprint (a member that passed different arguments) makes the
//! checking call fail with [`shmem_core::Error::CollectiveMismatch`] on
//! the root; when that call opens with a plain handshake, the root joins
//! it as a PE with invalid arguments, so its other members fail too
//! rather than wait (a small collective folded into its handshake, whole
//! once the handshake is, completes on every PE instead and fails on the
//! root only: see [`crate::fold::Owed`]). A PE that named another root, or published the call
//! itself, sends no receipt: the root reads that PE's own words instead
//! (seen at its next poll, since they do not ring it). A mismatch is thus
//! reported on every PE whose call differed from its root's, and on the
//! root (one or two calls late for a small broadcast, in the call for a
//! large one); a member never copies data from a call that differs from
//! its own. A PE that calls a
//! different collective while the others broadcast leaves them waiting
//! until the hang report names the diverged PEs (`SHMEM_HANG_REPORT`); a
//! forced algorithm (`SHMEM_BROADCAST_ALGORITHM`) keeps the handshake,
//! which fails such calls at once.
//!
//! Publishes count in their own sequence ([`crate::team::TeamState`]'s
//! `published`): the handshakes reuse their words by the parity of a
//! count that only synchronising calls advance.
//!
//! Reuse: the root rewrites its parity buffer and published word two
//! publishes later, and by then it has seen every member's receipt of the
//! earlier one (or evidence that the member did not take part). A member
//! writes its receipt into a root's slot only after that PE has reached
//! the same publish (it waits for the root's word first, even when its own
//! arguments are invalid), so the root has read the slot's previous
//! receipt by then. A PE's "entered" word of one parity is rewritten two
//! publishes later; whoever reads it late (a root checking receipts, a
//! member waiting on a named root) also treats any newer tag on that PE's
//! words as "it moved past this publish without taking part as expected".

use shmem_core::{as_bytes, as_bytes_mut, Element, Error, Result, SymSlice};

use crate::collectives::{local_copy, tag_of, Call, Desc, BAD_ARGS};
use crate::{Collectives, Team};

/// Largest broadcast (bytes) whose root copies it into its own buffer and
/// returns at once; above this, members copy from the root's `source`.
pub(crate) const PUSH_MAX: usize = 2048;
/// Bytes that travel in the published word's own cache line.
pub(crate) const LINE_PAYLOAD: usize = 56;

/// Whether `word`'s tag is that of a publish after `seq` (wrapping).
fn after(word: u64, seq: u64) -> bool {
    ((word >> 32) as u32).wrapping_sub(seq as u32) as i32 > 0
}

/// A PE's four publish words (both published lines, both "entered"
/// words), read to see whether it has moved past a publish.
fn words_of<'c>(call: &'c Call<'_>, pe: usize) -> Result<[&'c std::sync::atomic::AtomicU64; 4]> {
    let l = &call.coll.layout;
    let word = |w: usize| {
        let w = call.word(w);
        match call.direct_word(pe, w) {
            Some(word) => Ok(word),
            None => call.mapped_word(pe, w),
        }
    };
    Ok([
        word(l.push_line(0))?,
        word(l.push_line(1))?,
        word(l.push_entered(0))?,
        word(l.push_entered(1))?,
    ])
}

/// What a member found on the PE it names as the root.
enum Found {
    /// The root published this call with this fingerprint.
    Published(u32),
    /// That PE entered this call as a member itself.
    NotRoot,
}

impl Collectives {
    /// Whether broadcasts on a team of `n` are published.
    pub(crate) fn publishes(&self, n: usize) -> bool {
        self.all_mapped && n > 1 && self.algorithms.broadcast.is_none()
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
        let bytes = nelems.saturating_mul(std::mem::size_of::<T>());
        let small = bytes <= PUSH_MAX;
        // A root publishing again leaves its newest publish pending: only
        // the one before it shares this call's buffer.
        let mut call = self.open_call_keeping(team, "broadcast", small && team.my_pe() == root)?;
        let late = call.late.take().map(|e| *e);
        call.state.published += 1;
        let seq = call.state.published;
        let parity = (seq & 1) as usize;
        let line = call.word(self.layout.push_line(parity));
        let payload = if bytes <= LINE_PAYLOAD {
            line.offset() + 8
        } else {
            call.push_area(parity)
        };
        let me_pe = rt.my_pe();
        if call.me == root {
            // A root that owes an earlier mismatch fails this call on every
            // member too, as a handshake call would.
            let mut value = match (&local, &late) {
                (Ok(()), None) => desc.value(),
                _ => BAD_ARGS,
            };
            let staged = if value != BAD_ARGS && bytes > 0 {
                (|| {
                    let src = source.slice(..nelems)?;
                    if small {
                        // SAFETY: this PE's own source, in the heap
                        // (checked); a collective's source is not written
                        // during the call.
                        let data = as_bytes(unsafe { rt.local_slice(src)? });
                        let buf = SymSlice::<u8>::from_raw_parts(payload, bytes, line.instance());
                        rt.write_local(buf, data)
                    } else {
                        let at =
                            SymSlice::<u64>::from_raw_parts(line.offset() + 8, 1, line.instance());
                        rt.write_local(at, &[src.offset() as u64])
                    }
                })()
            } else {
                Ok(())
            };
            if staged.is_err() {
                value = BAD_ARGS;
            }
            // Data before the word (a release store): members that see the
            // tag see the data.
            call.set_word(me_pe, line, tag_of(seq) | value as u64)?;
            // The root fills its own dest after publishing, while the
            // members copy (from the buffer, or from `source`, which is
            // `dest` itself or disjoint from it): the copies overlap.
            let copied = if value != BAD_ARGS && bytes > 0 {
                source
                    .slice(..nelems)
                    .and_then(|src| local_copy(rt, dest.slice(..nelems)?, src))
            } else {
                Ok(())
            };
            let differed = if small {
                call.state.push_pending.push(seq, value);
                None
            } else {
                // Members copy from `source`: it must outlive their copies.
                check_receipts(&call, seq, value, false)?
            };
            local?;
            staged?;
            copied?;
            if let Some(e) = late {
                return Err(e);
            }
            return differed.map_or(Ok(()), Err);
        }
        let value = match local {
            Ok(()) => desc.value(),
            Err(_) => BAD_ARGS,
        };
        let entered = call.word(self.layout.push_entered(parity));
        call.set_word(me_pe, entered, tag_of(seq) | value as u64)?;
        if root >= call.n {
            // `local` says so: no PE is the root.
            return local;
        }
        let root_pe = call.pe(root);
        let slot = call.word(self.layout.push_receipt(parity, call.me));
        // Also with invalid arguments of its own: the receipt slot is free
        // once the named PE has reached this publish (it checked its
        // receipts of two publishes ago when it opened it).
        let found = wait_for_root(&call, root_pe, parity, seq)?;
        if let Err(e) = local {
            // The root (if it is one) waits for every receipt.
            call.set_word(root_pe, slot, tag_of(seq) | BAD_ARGS as u64)?;
            return Err(e);
        }
        let copied = match found {
            Found::Published(v) if v == value && bytes > 0 => (|| {
                // SAFETY: this PE's own dest, in the heap (checked); only
                // this PE writes it during the call.
                let d = unsafe { rt.local_slice_mut(dest.slice(..nelems)?)? };
                let from = if small {
                    payload
                } else {
                    let mut at = [0u8; 8];
                    rt.get_bytes(root_pe, line.offset() + 8, &mut at)?;
                    u64::from_le_bytes(at) as usize
                };
                // The root wrote these bytes (or left its source) before the
                // word just seen, and keeps them until this PE's receipt.
                rt.get_bytes(root_pe, from, as_bytes_mut(d))
            })(),
            _ => Ok(()),
        };
        let receipt = if copied.is_ok() { value } else { BAD_ARGS };
        call.set_word(root_pe, slot, tag_of(seq) | receipt as u64)?;
        copied?;
        match found {
            Found::Published(v) if v == value => late.map_or(Ok(()), Err),
            _ => Err(self.mismatch("broadcast", &call, describe)),
        }
    }
}

/// Small publishes of this PE's whose receipts are still to be checked,
/// oldest first: at most two (a root publishing again checks all but its
/// newest, which uses the other parity's buffer, before it publishes).
#[derive(Debug, Default)]
pub(crate) struct Pending([Option<(u64, u32)>; 2]);

impl Pending {
    /// Records publish `seq` (fingerprint `value`) as the newest.
    pub(crate) fn push(&mut self, seq: u64, value: u32) {
        let entry = Some((seq, value));
        if self.0[0].is_none() {
            self.0[0] = entry;
        } else {
            // Never three: every opening takes all but the newest first.
            debug_assert!(self.0[1].is_none());
            self.0[1] = entry;
        }
    }

    /// The oldest pending publish, removed.
    pub(crate) fn take_oldest(&mut self) -> Option<(u64, u32)> {
        let oldest = self.0[0].take();
        self.0[0] = self.0[1].take();
        oldest
    }

    /// The newest pending publish, removed.
    pub(crate) fn take_newest(&mut self) -> Option<(u64, u32)> {
        self.0[1].take().or_else(|| self.0[0].take())
    }
}

/// A member's wait on the PE it names as the root: until that PE has
/// published publish `seq` or entered it as a member.
fn wait_for_root(call: &Call<'_>, root_pe: usize, parity: usize, seq: u64) -> Result<Found> {
    let layout = &call.coll.layout;
    let span_start = call.word(layout.push_line(0)).offset();
    let span_end = call.word(layout.push_span_end()).offset();
    let all = words_of(call, root_pe)?;
    let (published, member) = (all[parity], all[2 + parity]);
    let tag = tag_of(seq);
    let load = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Acquire);
    let mut found = None;
    // One span covers all four words; the named PE rings it for each.
    call.rt
        .wait_on_pe(root_pe, span_start, span_end - span_start, || {
            let w = load(published);
            if w & !0xFFFF_FFFF == tag {
                found = Some(Found::Published(w as u32));
                return true;
            }
            // It entered this publish as a member, or has moved past it
            // without publishing it. A root may have published the next
            // publish already (it waits only for the receipts of the one
            // before this), but not the one after: it published this one
            // first, so the word read again now shows it.
            if load(member) & !0xFFFF_FFFF == tag || all.iter().any(|a| after(load(a), seq)) {
                let w = load(published);
                found = Some(if w & !0xFFFF_FFFF == tag {
                    Found::Published(w as u32)
                } else {
                    Found::NotRoot
                });
                return true;
            }
            false
        })?;
    Ok(found.unwrap_or(Found::NotRoot))
}

/// The root's check of its publish `seq` (fingerprint `value`): waits for
/// every member's receipt (in this PE's own heap) and returns the mismatch
/// to report, if a member's call differed and this PE's own was valid.
/// A PE that published this call itself (it believes it is the root too)
/// or entered it naming another root sends no receipt here: its own words
/// say so, and it counts as differing (seen when its receipt is missing;
/// such a PE does not ring this one, so the wait notices at its next poll).
/// `later`: the check runs at the opening of the root's next call.
pub(crate) fn check_receipts(
    call: &Call<'_>,
    seq: u64,
    value: u32,
    later: bool,
) -> Result<Option<Error>> {
    let parity = (seq & 1) as usize;
    let layout = &call.coll.layout;
    let first = call.word(layout.push_receipt(parity, 0));
    let me_pe = call.rt.my_pe();
    // This PE's receipt slots: `n` consecutive words of its own heap.
    let receipts = call
        .mapped_ptr(me_pe, first.offset(), call.n * 8)?
        .as_ptr()
        .cast::<u64>();
    let tag = tag_of(seq);
    let load = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Acquire);
    let mut differed = None;
    let mut failed = None;
    // The words of the member whose receipt is awaited, found once.
    let mut own_words = None;
    let mut next = 0;
    call.rt.wait_on(first.offset(), call.n * 8, || {
        while next < call.n {
            if next != call.me {
                // SAFETY: slot `next` of the `n` consecutive receipt words
                // (mapped for the runtime's life, written only atomically).
                let slot = unsafe { std::sync::atomic::AtomicU64::from_ptr(receipts.add(next)) };
                let receipted = |got: u64| got & !0xFFFF_FFFF == tag;
                // The common case: the member's receipt of this publish,
                // read without touching the member's own words.
                let mut got = load(slot);
                if !receipted(got) {
                    // Its own words, then the receipt again: a receipt
                    // written before the words changed is seen then.
                    let words = match own_words {
                        Some((j, w)) if j == next => w,
                        _ => match words_of(call, call.pe(next)) {
                            Ok(w) => {
                                own_words = Some((next, w));
                                w
                            }
                            Err(e) => {
                                failed = Some(e);
                                return true;
                            }
                        },
                    };
                    let w = words.map(load);
                    got = load(slot);
                    if !receipted(got) {
                        let other_root = w[parity] & !0xFFFF_FFFF == tag;
                        let e = w[2 + parity];
                        // Entered naming another root, or with invalid
                        // arguments of its own (it fails by itself; a
                        // receipt may follow).
                        let elsewhere =
                            e & !0xFFFF_FFFF == tag && (e as u32 != value || e as u32 == BAD_ARGS);
                        // Moved past this publish without a receipt here.
                        let gone = w.iter().any(|&x| after(x, seq));
                        if !(other_root || elsewhere || gone) {
                            return false;
                        }
                    }
                }
                // No receipt (the PE did not take part as a member), or
                // the receipt of a call with other arguments.
                if !receipted(got) || got as u32 != value {
                    differed.get_or_insert(next);
                }
            }
            next += 1;
        }
        true
    })?;
    if let Some(e) = failed {
        return Err(e);
    }
    if value == BAD_ARGS {
        // This PE's own call was invalid and failed already.
        return Ok(None);
    }
    Ok(differed.map(|j| Error::CollectiveMismatch {
        op: "broadcast",
        details: format!(
            "team PE {j} (PE {}) did not make the same call as this PE's published broadcast \
             #{seq} on the team, of which this PE was the root: it passed different arguments, \
             invalid ones, or named another root{}",
            call.pe(j),
            if later {
                " (reported at a later call of this PE on the team: the root of a small \
                 broadcast does not wait for its members)"
            } else {
                ""
            }
        ),
    }))
}
