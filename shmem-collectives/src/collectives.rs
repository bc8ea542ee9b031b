//! [`Collectives`]: the per-runtime state (scratch pool, predefined teams)
//! and the handshake that opens every collective call.
//!
//! Every collective starts with a barrier over its team that also compares a
//! 31-bit fingerprint of the call (operation, element type, counts, root,
//! algorithm). After it, every member is inside the same call with
//! the same arguments, so:
//!
//! * data may be put straight into other PEs' destination buffers (the
//!   owner is no longer reading them), and the scratch of the previous call
//!   is free everywhere;
//! * a mismatch (a different root or count, or another collective) is
//!   reported on every PE before any data moves, so it is an error and
//!   never corruption or a hang.
//!
//! Broadcasts on a team whose PEs map each other's heaps are the exception:
//! their root publishes without a handshake ([`crate::push`]).
//!
//! Handshake words carry `seq << 32 | fingerprint` (one writer per word,
//! double-buffered by `seq` parity); data arrivals are counted with
//! `SignalOp::Add` and each PE remembers how many it has consumed, so no
//! word is ever reset while in use.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use shmem_core::wait::Span;
use shmem_core::{
    wire, Cmp, Element, Error, PeId, Result, Runtime, SignalOp, SymBuf, SymRef, SymSlice,
};

use crate::algorithm::{AlgorithmChoice, BarrierAlgorithm};
use crate::nodes::Nodes;
use crate::team::{strided_members, StateGuard, Team, TeamConfig, TeamKind};

/// Fingerprint value sent by a PE whose own arguments were invalid.
pub(crate) const BAD_ARGS: u32 = 0x8000_0000;
/// Handshake state once two different fingerprints have met.
pub(crate) const MISMATCH: u32 = 0xFFFF_FFFF;

/// The tag of call (or publish) `seq` in a signal word's upper half; the
/// lower half carries a fingerprint.
pub(crate) fn tag_of(seq: u64) -> u64 {
    (seq & 0xFFFF_FFFF) << 32
}

/// `state` folded with signal word `v` if `v` carries `tag` (its
/// fingerprint differing from `state`: [`MISMATCH`]); `None` if it does not
/// carry `tag` yet.
pub(crate) fn fold_word(v: u64, tag: u64, state: u32) -> Option<u32> {
    (v & !0xFFFF_FFFF == tag).then_some(if v as u32 == state { state } else { MISMATCH })
}
/// Words in a cache line; latency-critical words get one each.
const LINE_WORDS: usize = 8;
/// First heap offset open to users (any mapped PE has it).
const RESERVED: usize = shmem_core::heap::RESERVED_BYTES;

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Sizing of the collective scratch pool (identical on every PE).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CollectivesOptions {
    /// Teams that may exist at once, the two predefined ones included
    /// (2..=64).
    pub max_teams: usize,
    /// Staging bytes per team (reductions and scans move data through it in
    /// chunks of this size); `None` picks heap size / 512, clamped to
    /// 4 KiB..64 KiB.
    pub stage_bytes: Option<usize>,
}

impl Default for CollectivesOptions {
    fn default() -> Self {
        CollectivesOptions {
            max_teams: 32,
            stage_bytes: None,
        }
    }
}

/// Where a slot's words live, in `u64` words from the slot's start.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SlotLayout {
    rounds: usize,
    world: usize,
    words: usize,
}

impl SlotLayout {
    fn new(world: usize) -> SlotLayout {
        let rounds = ceil_log2(world).max(1);
        // Dissemination entries (two parities), the release line, the
        // published-broadcast lines (two parities) and the line of their
        // "entered as a member" words, then the per-PE words (arrivals,
        // data counts, metadata, broadcast receipts).
        let words = (2 * rounds + 4) * LINE_WORDS + 6 * world;
        SlotLayout {
            rounds,
            world,
            words: words.div_ceil(LINE_WORDS) * LINE_WORDS,
        }
    }
    pub(crate) fn entry(&self, parity: usize, round: usize) -> usize {
        (parity * self.rounds + round) * LINE_WORDS
    }
    pub(crate) fn release(&self) -> usize {
        2 * self.rounds * LINE_WORDS
    }
    /// On team PE 0: the arrival count and agreed fingerprint of the
    /// counted handshake of call parity `parity` (in the release line).
    pub(crate) fn counter(&self, parity: usize) -> usize {
        self.release() + 2 + parity
    }
    /// The line a broadcast root publishes call parity `parity` in: the
    /// tagged word, then [`crate::push::LINE_PAYLOAD`] bytes of data.
    pub(crate) fn push_line(&self, parity: usize) -> usize {
        (2 * self.rounds + 1 + parity) * LINE_WORDS
    }
    /// Where a PE records that it entered the published broadcast of
    /// parity `parity` as a member (tag and fingerprint; read by the PE it
    /// names as the root). Its line follows the two published lines, so a
    /// member watches one span for both.
    pub(crate) fn push_entered(&self, parity: usize) -> usize {
        (2 * self.rounds + 3) * LINE_WORDS + parity
    }
    /// End (in words) of the span a member watches on its root.
    pub(crate) fn push_span_end(&self) -> usize {
        (2 * self.rounds + 4) * LINE_WORDS
    }
    /// On a root: member `from`'s receipt for its published broadcast of
    /// parity `parity` (tag and the member's fingerprint).
    pub(crate) fn push_receipt(&self, parity: usize, from: usize) -> usize {
        (2 * self.rounds + 4) * LINE_WORDS + 4 * self.world + parity * self.world + from
    }
    pub(crate) fn linear(&self, from: usize) -> usize {
        (2 * self.rounds + 4) * LINE_WORDS + from
    }
    fn data(&self, from: usize) -> usize {
        (2 * self.rounds + 4) * LINE_WORDS + self.world + from
    }
    fn meta(&self) -> usize {
        (2 * self.rounds + 4) * LINE_WORDS + 2 * self.world
    }
}

/// What every PE sends when collectives start, to check that all agree:
/// (algorithm fingerprint, staging bytes, teams, the leaders' all-to-all
/// limit), then whether its node is
/// crowded, whether it maps every heap, whether it maps its node's heaps.
type Agreement = ((u64, u64, u64, u64), bool, bool, bool);

pub(crate) fn ceil_log2(n: usize) -> usize {
    if n <= 1 {
        0
    } else {
        (usize::BITS - (n - 1).leading_zeros()) as usize
    }
}

/// Collective state of one runtime: the scratch pool, the predefined teams
/// and the forced algorithms. Create it once per runtime, on every PE; the
/// pool (`max_teams` slots of signal words and `stage_bytes` of staging)
/// stays allocated for the runtime's life.
///
/// # Errors
///
/// Collective calls fail in the same few ways, and a failure on one member
/// reaches every member instead of leaving them waiting:
///
/// * [`Error::InvalidArgument`] for a team that has been destroyed or
///   belongs to another [`Collectives`], and for this PE's own bad
///   arguments: a count that overflows or exceeds a buffer, `dest`
///   overlapping `source`, a zero stride, a bitwise operation on floats;
///   [`Error::PeOutOfRange`] for a root outside the team;
///   [`Error::WrongInstance`], [`Error::Misaligned`] or [`Error::OutOfHeap`]
///   for a buffer of another runtime instance, unaligned for its element
///   type, or outside the heap. A PE whose arguments fail these checks still
///   takes part in the handshake, so the others fail too;
/// * [`Error::CollectiveMismatch`] (on the other members) when members pass
///   different arguments (root, count, element type, operation), invalid
///   ones, or call a different collective; a broadcast on one node is
///   published by its root instead, and the root of a small broadcast
///   across nodes does not wait, so such a root reports the mismatch at
///   its next call on the team (see [`Collectives::broadcast`]);
/// * while waiting, [`Error::PeerExited`] or [`Error::Aborted`] when a PE
///   dies or the job is aborted, and [`Error::Timeout`] after
///   `SHMEM_WAIT_TIMEOUT`;
/// * [`Error::NotInitialized`] once the runtime is finalized, and an engine's
///   own error (such as [`Error::Transport`]) from the puts and signals
///   underneath.
pub struct Collectives {
    pub(crate) rt: Arc<Runtime>,
    id: u64,
    pub(crate) algorithms: AlgorithmChoice,
    pub(crate) layout: SlotLayout,
    signals: SymBuf<u64>,
    /// Per team slot, [`crate::fold::FOLD_BYTES`] for small collectives
    /// folded into their handshake.
    pub(crate) fold: SymBuf<u8>,
    stage: SymBuf<u8>,
    pub(crate) stage_bytes: usize,
    pub(crate) max_teams: usize,
    /// Some node runs more PEs than it has cores (agreed by every PE).
    pub(crate) oversubscribed: bool,
    /// Every PE maps every PE's heap (one node, load/store engines; agreed
    /// by every PE): a linear barrier's release is one word on team PE 0
    /// that all members sleep on, woken by one system call, and large
    /// broadcasts and reductions read peers' memory directly.
    pub(crate) all_mapped: bool,
    /// Node of each world PE where teams that span nodes synchronise in two
    /// levels ([`crate::nodes`]): the job spans nodes, every PE maps its
    /// node's heaps and no barrier algorithm is forced.
    node_of: Option<Vec<usize>>,
    /// Most node leaders that exchange all-to-all
    /// (`SHMEM_NODE_LEADERS_ALLTOALL`, [`crate::nodes`]).
    leaders_alltoall: usize,
    /// Per world PE: its heap as mapped here when this PE reaches it by
    /// load and store ([`Runtime::load_store_base`]; this PE's own too).
    /// Handshake words of such PEs are stored and polled directly.
    direct: Vec<Option<MappedHeap>>,
    /// Bit `s` set: slot `s` is free on this PE.
    free_slots: Mutex<u64>,
    world: Team,
    shared: Team,
}

/// The start of a heap that the runtime mapped here (see
/// [`Runtime::load_store_base`]).
#[derive(Debug, Clone, Copy)]
struct MappedHeap(std::ptr::NonNull<u8>);

// SAFETY: only an address. It is dereferenced through the `Collectives`
// that holds it, whose runtime keeps the mapping for its own life, and only
// for atomics on handshake words and for bytes the protocols own.
unsafe impl Send for MappedHeap {}
// SAFETY: as above.
unsafe impl Sync for MappedHeap {}

impl std::fmt::Debug for Collectives {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Collectives")
            .field("my_pe", &self.rt.my_pe())
            .field("n_pes", &self.rt.n_pes())
            .field("max_teams", &self.max_teams)
            .field("stage_bytes", &self.stage_bytes)
            .field("algorithms", &self.algorithms)
            .finish()
    }
}

/// The fingerprint of a call, built field by field: one multiply and a
/// shift per 8 bytes (it is computed on every call, so a byte-wise hash
/// showed up in the profile of 8-byte collectives).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Desc(u64);

impl Desc {
    pub(crate) fn new(op: &str) -> Desc {
        Desc(0xcbf2_9ce4_8422_2325).bytes(op.as_bytes())
    }
    #[inline]
    fn word(self, v: u64) -> Desc {
        let h = (self.0 ^ v).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        Desc(h ^ (h >> 29))
    }
    fn bytes(mut self, b: &[u8]) -> Desc {
        let mut chunks = b.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self = self.word(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        let mut w = [0u8; 8];
        w[..rest.len()].copy_from_slice(rest);
        // The length keeps "ab" + "c" apart from "a" + "bc".
        self.word(u64::from_le_bytes(w) ^ ((b.len() as u64) << 56))
    }
    pub(crate) fn with(self, v: u64) -> Desc {
        self.word(v)
    }
    pub(crate) fn with_type<T: 'static>(self) -> Desc {
        self.with(std::mem::size_of::<T>() as u64)
            .bytes(std::any::type_name::<T>().as_bytes())
    }
    pub(crate) fn value(self) -> u32 {
        ((self.0 ^ (self.0 >> 32)) as u32) & 0x7FFF_FFFF
    }
}

/// One collective call in progress on one team: the team's state is locked
/// for its duration, so calls on a team never interleave within a process.
pub(crate) struct Call<'a> {
    pub(crate) coll: &'a Collectives,
    pub(crate) rt: &'a Runtime,
    pub(crate) team: &'a Team,
    pub(crate) state: StateGuard<'a>,
    /// This PE's team index.
    pub(crate) me: usize,
    /// Team size.
    pub(crate) n: usize,
    /// Names the call in the hang report should one of its waits sleep
    /// (set once what the previous call left owing is settled).
    _in_call: Option<shmem_core::DeferGuard>,
    /// A mismatch found in this PE's previous call (a broadcast it
    /// published, or returned from as its root, without waiting); this call
    /// fails with it, after taking part in its handshake as a PE with
    /// invalid arguments.
    /// (Boxed: a call is moved on every collective, and an inline
    /// `Error` would double its size.)
    pub(crate) late: Option<Box<Error>>,
}

impl<'a> Call<'a> {
    /// The team's members grouped by node, when its handshake runs in two
    /// levels.
    pub(crate) fn nodes(&self) -> Option<&'a Nodes> {
        let (coll, team): (&'a Collectives, &'a Team) = (self.coll, self.team);
        coll.nodes_of(team)
    }

    /// World PE of team PE `idx`.
    pub(crate) fn pe(&self, idx: usize) -> PeId {
        self.team.inner.members[idx]
    }

    pub(crate) fn word(&self, w: usize) -> SymRef<u64> {
        self.coll.word(self.team.inner.slot, w)
    }

    /// This slot's staging buffer viewed as elements of `T`.
    pub(crate) fn stage<T: Element>(&self) -> SymSlice<T> {
        let off = self.coll.stage.offset() + self.team.inner.slot * self.coll.stage_bytes;
        SymSlice::from_raw_parts(
            off,
            self.coll.stage_bytes / std::mem::size_of::<T>().max(1),
            self.coll.stage.instance(),
        )
    }

    /// `2 * world_size` words of per-call metadata (collect's sizes).
    pub(crate) fn meta(&self) -> SymSlice<u64> {
        let l = &self.coll.layout;
        let off = self.coll.signals.offset() + (self.team.inner.slot * l.words + l.meta()) * 8;
        SymSlice::from_raw_parts(off, 2 * l.world, self.coll.signals.instance())
    }

    /// Puts `src` into `dst` on team PE `to`, then counts one arrival in
    /// `to`'s data word for this PE ([`Runtime::put_signal_collective`]).
    pub(crate) fn put_data<T: Element>(
        &self,
        to: usize,
        dst: SymSlice<T>,
        src: &[T],
    ) -> Result<()> {
        let sig = self.word(self.coll.layout.data(self.me));
        self.rt
            .put_signal_collective(dst, src, sig, 1, SignalOp::Add, self.pe(to))
    }

    /// Counts one arrival at team PE `to` without data (after a fence, it
    /// also publishes earlier puts to `to`).
    pub(crate) fn notify(&self, to: usize) -> Result<()> {
        let sig = self.word(self.coll.layout.data(self.me));
        self.rt
            .signal_op_collective(sig, 1, SignalOp::Add, self.pe(to))
    }

    /// Waits for `count` more arrivals from team PE `from`.
    pub(crate) fn wait_data(&mut self, from: usize, count: u64) -> Result<()> {
        let target = self.state.consumed[from] + count;
        let sig = self.word(self.coll.layout.data(from));
        self.rt.signal_wait_until(sig, Cmp::Ge, target)?;
        self.state.consumed[from] = target;
        Ok(())
    }

    /// A barrier inside a call (between chunks that reuse the staging buffer).
    pub(crate) fn sync(&mut self) -> Result<()> {
        let v = Desc::new("inner-sync").value();
        self.handshake(v, self.coll.all_mapped).map(|_| ())
    }

    /// Runs the handshake barrier with fingerprint `value`; returns the
    /// agreed value, or [`MISMATCH`].
    fn handshake(&mut self, value: u32, shared_release: bool) -> Result<u32> {
        self.state.seq += 1;
        if self.n == 1 {
            return Ok(value);
        }
        let seq = self.state.seq;
        if let Some(nodes) = self.nodes() {
            // No member reads a fold buffer after a plain handshake.
            self.state.locals_read_fold = false;
            return self.handshake_nodes(nodes, seq, value);
        }
        let tag = tag_of(seq);
        let (me, n) = (self.me, self.n);
        match self.coll.algorithms.barrier_for(self.coll.oversubscribed) {
            BarrierAlgorithm::Dissemination => {
                let parity = (seq & 1) as usize;
                let mut state = value;
                let (mut round, mut dist) = (0, 1);
                while dist < n {
                    let w = self.word(self.coll.layout.entry(parity, round));
                    self.set_word(self.pe((me + dist) % n), w, tag | state as u64)?;
                    if self.wait_tagged(w, tag)? != state {
                        state = MISMATCH;
                    }
                    round += 1;
                    dist <<= 1;
                }
                Ok(state)
            }
            BarrierAlgorithm::Linear if self.coll.all_mapped => {
                let (state, last) = self.count_arrival(seq, value)?;
                if last {
                    self.release_counted(tag, state)?;
                    return Ok(state);
                }
                self.wait_tagged_on(self.pe(0), self.word(self.coll.layout.release()), tag)
            }
            BarrierAlgorithm::Linear => {
                let release = self.word(self.coll.layout.release());
                if me != 0 {
                    let w = self.word(self.coll.layout.linear(me));
                    self.set_word(self.pe(0), w, tag | value as u64)?;
                    if shared_release {
                        return self.wait_tagged_on(self.pe(0), release, tag);
                    }
                    return self.wait_tagged(release, tag);
                }
                let state = self.gather_arrivals(tag, value)?;
                if shared_release {
                    // One store here; every member sleeps on this word.
                    self.set_word(self.pe(0), release, tag | state as u64)?;
                } else {
                    for j in 1..n {
                        self.set_word(self.pe(j), release, tag | state as u64)?;
                    }
                }
                Ok(state)
            }
        }
    }

    /// Leaves `owed` to this PE's next call on the team ([`Owed`](crate::fold::Owed)).
    pub(crate) fn owe(&mut self, owed: crate::fold::Owed) {
        self.state.owed = Some(owed);
        self.state.owed_at = self.rt.activity().deferred_location();
    }

    /// Whether this team's handshakes are counted ([`Call::count_arrival`]).
    pub(crate) fn counted(&self) -> bool {
        self.coll.all_mapped
            && self.coll.algorithms.barrier_for(self.coll.oversubscribed)
                == BarrierAlgorithm::Linear
    }

    /// The counted handshake, used when PEs outnumber cores and every PE
    /// maps every heap: each PE adds itself to a count on team PE 0 (one
    /// compare-and-swap that also folds its fingerprint into the agreed
    /// one), and the PE that arrives last releases everyone. No PE waits for
    /// a particular other PE to be scheduled: where PEs take turns on the
    /// cores, a gather at team PE 0 cost PE 0 a turn after the last arrival
    /// (and wasted turns before it) on every call; here the last arrival
    /// releases in its own turn, and each PE needs one turn per call (an
    /// 8-PE barrier on 2 cores: about 21 us gathered, 6-9 us counted).
    ///
    /// Returns the agreed fingerprint state (this PE's `value`, or
    /// [`MISMATCH`] when the PEs disagree) and whether this PE arrived last
    /// (it must then call [`Call::release_counted`]). The count of parity
    /// `seq & 1` is reset by the last arrival before its release; it is
    /// used again two handshakes later, after every PE saw that release.
    pub(crate) fn count_arrival(&self, seq: u64, value: u32) -> Result<(u32, bool)> {
        let root = self.pe(0);
        let counter = self.word(self.coll.layout.counter((seq & 1) as usize));
        let word = match self.direct_word(root, counter) {
            Some(word) => word,
            None => self.mapped_word(root, counter)?,
        };
        let n = self.n as u64;
        let mut old = word.load(Ordering::Acquire);
        loop {
            let (count, agreed) = (old & 0xFFFF_FFFF, (old >> 32) as u32);
            let state = if count == 0 || agreed == value {
                value
            } else {
                MISMATCH
            };
            let new = (state as u64) << 32 | (count + 1);
            match word.compare_exchange_weak(old, new, Ordering::SeqCst, Ordering::Acquire) {
                Ok(_) if count + 1 == n => {
                    word.store(0, Ordering::Relaxed);
                    return Ok((state, true));
                }
                Ok(_) => return Ok((state, false)),
                Err(now) => old = now,
            }
        }
    }

    /// The last arrival of a counted handshake releases every PE with the
    /// agreed `state` (one word on team PE 0 that they all watch).
    pub(crate) fn release_counted(&self, tag: u64, state: u32) -> Result<()> {
        let release = self.word(self.coll.layout.release());
        self.set_word(self.pe(0), release, tag | state as u64)
    }

    /// Team PE 0 of a linear handshake: waits for every member's arrival
    /// word to carry `tag`; returns `value`, or [`MISMATCH`] if an arrival
    /// carried another fingerprint.
    pub(crate) fn gather_arrivals(&self, tag: u64, value: u32) -> Result<u32> {
        let linear = |k: usize| self.coll.layout.linear(k + 1);
        self.gather_words(self.n - 1, linear, tag, value)
    }

    /// Waits until `count` words of this PE, `word(0)`, `word(1)`, ...
    /// (indices into the team slot's words, increasing), each carry `tag`;
    /// returns `value` folded with the fingerprints they carry (any
    /// difference: [`MISMATCH`]).
    pub(crate) fn gather_words(
        &self,
        count: usize,
        word: impl Fn(usize) -> usize,
        tag: u64,
        value: u32,
    ) -> Result<u32> {
        if count == 0 {
            return Ok(value);
        }
        let first = self.word(word(0));
        let span = (word(count - 1) - word(0) + 1) * 8;
        let mut state = value;
        let mut arrived = 0;
        let mut failed = None;
        // One wait over the span of all the words.
        self.rt.wait_on(first.offset(), span, || {
            while arrived < count {
                match self.rt.signal_fetch(self.word(word(arrived))) {
                    Ok(v) => match fold_word(v, tag, state) {
                        Some(folded) => {
                            state = folded;
                            arrived += 1;
                        }
                        None => return false,
                    },
                    Err(e) => {
                        failed = Some(e);
                        return true;
                    }
                }
            }
            true
        })?;
        match failed {
            Some(e) => Err(e),
            None => Ok(state),
        }
    }

    /// `local`, unless this call owes a mismatch of this PE's previous call
    /// ([`Call::late`]): then that error, so that the call's handshake
    /// carries "invalid arguments".
    fn with_late(&mut self, local: Result<()>) -> Result<()> {
        match self.late.take() {
            Some(e) => Err(*e),
            None => local,
        }
    }

    /// Where heap offset `off..off + len` of world PE `pe` is mapped here
    /// (checked to be inside the heap).
    pub(crate) fn mapped_ptr(
        &self,
        pe: PeId,
        off: usize,
        len: usize,
    ) -> Result<std::ptr::NonNull<u8>> {
        self.rt.check_range(off, len)?;
        self.rt
            .peer_ptr(off, pe)?
            .ok_or_else(|| Error::invalid("team", format!("PE {pe}'s heap is not mapped here")))
    }

    /// `w` on world PE `pe`, whose heap is mapped here.
    pub(crate) fn mapped_word(&self, pe: PeId, w: SymRef<u64>) -> Result<&AtomicU64> {
        let p = self.mapped_ptr(pe, w.offset(), 8)?;
        // SAFETY: an 8-aligned word of a heap mapped for the runtime's life
        // (which outlives `self`), written only with atomics.
        Ok(unsafe { AtomicU64::from_ptr(p.as_ptr().cast()) })
    }

    /// `len` bytes at heap offset `off` of world PE `pe`, whose heap is
    /// mapped here, as a slice.
    ///
    /// # Safety
    /// Nobody may write those bytes while the slice lives (the protocol
    /// that calls this guarantees it).
    pub(crate) unsafe fn mapped_bytes(&self, pe: PeId, off: usize, len: usize) -> Result<&[u8]> {
        let p = self.mapped_ptr(pe, off, len)?;
        // SAFETY: `off..off + len` is inside a heap mapped for the runtime's
        // life (checked above); the caller guarantees no concurrent writes.
        Ok(unsafe { std::slice::from_raw_parts(p.as_ptr(), len) })
    }

    /// Stores `bytes` at heap offset `off` of world PE `pe`, whose heap is
    /// mapped here, with the CPU: unlike an engine's put (which promises
    /// only that the source is reusable), the bytes are visible to any PE
    /// that later sees a store this PE makes after it.
    pub(crate) fn mapped_write(&self, pe: PeId, off: usize, bytes: &[u8]) -> Result<()> {
        let p = self.mapped_ptr(pe, off, bytes.len())?;
        // SAFETY: `off..off + len` is inside a heap mapped for the runtime's
        // life (checked above); the protocols that call this own those
        // bytes until their next release.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), p.as_ptr(), bytes.len()) };
        Ok(())
    }

    /// World PE `pe`'s heap as mapped here, when this PE reaches it by
    /// load and store.
    #[inline]
    fn direct_base(&self, pe: PeId) -> Option<*mut u8> {
        Some(self.coll.direct.get(pe).copied().flatten()?.0.as_ptr())
    }

    /// Word `w` of world PE `pe`, when this PE reaches `pe` by load and
    /// store and `w` is a word of the collectives' signal pool (which every
    /// handshake word is); `None` otherwise.
    #[inline]
    pub(crate) fn direct_word(&self, pe: PeId, w: SymRef<u64>) -> Option<&AtomicU64> {
        let base = self.direct_base(pe)?;
        if !self.coll.in_pool(w) {
            return None;
        }
        // SAFETY: a word of the signal pool is inside every heap and
        // 8-aligned (the pool is 64-aligned), and only accessed atomically;
        // the heap stays mapped for the runtime's life, which outlives
        // `self`.
        Some(unsafe { AtomicU64::from_ptr(base.add(w.offset()).cast()) })
    }

    /// Sets handshake word `w` on world PE `pe` to `value`, as
    /// [`Runtime::signal_op_collective`] does (see [`Call::put_and_set`]).
    #[inline]
    pub(crate) fn set_word(&self, pe: PeId, w: SymRef<u64>, value: u64) -> Result<()> {
        self.put_and_set(pe, None, w, value)
    }

    /// Puts `data` (bytes, and where they go) on world PE `pe`, then sets
    /// handshake word `w` there to `value`: [`Runtime::put_signal_collective`]
    /// with [`SignalOp::Set`], or [`Runtime::signal_op_collective`] without
    /// data (a later `quiet` need not wait for them: only `pe` does, and this
    /// PE hears from `pe` before it reuses anything they touched). When this
    /// PE reaches `pe` by load and store (the runtime would do the same
    /// stores inline), it stores directly, without the checks and the
    /// route lookup that the runtime makes on every call.
    pub(crate) fn put_and_set(
        &self,
        pe: PeId,
        data: Option<(SymSlice<u8>, &[u8])>,
        w: SymRef<u64>,
        value: u64,
    ) -> Result<()> {
        let base = match self.direct_base(pe) {
            Some(base) if self.coll.in_pool(w) => base,
            _ => {
                return match data {
                    Some((dst, bytes)) => {
                        self.rt
                            .put_signal_collective(dst, bytes, w, value, SignalOp::Set, pe)
                    }
                    None => self.rt.signal_op_collective(w, value, SignalOp::Set, pe),
                }
            }
        };
        self.rt.live_for(pe)?;
        match data {
            Some((dst, bytes)) => {
                if bytes.len() > dst.len() {
                    return Err(Error::invalid(
                        "data",
                        format!(
                            "{} bytes for PE {pe} do not fit {} bytes at heap offset {:#x}",
                            bytes.len(),
                            dst.len(),
                            dst.offset()
                        ),
                    ));
                }
                self.rt.check_range(dst.offset(), bytes.len())?;
                // SAFETY: `base` is `pe`'s heap, mapped for the runtime's
                // life, the data range is inside it (checked) and `w` is a
                // word of the signal pool (in range, 8-aligned); the
                // protocols that call this own those bytes until the signal.
                unsafe {
                    shmem_core::loadstore::put_signal(
                        base,
                        dst.offset(),
                        bytes.as_ptr(),
                        bytes.len(),
                        w.offset(),
                        SignalOp::Set,
                        value,
                    )
                };
            }
            // SAFETY: `base` is `pe`'s mapped heap and `w` a word of the
            // signal pool (in range, 8-aligned).
            None => unsafe {
                shmem_core::loadstore::signal(
                    base,
                    w.offset(),
                    SignalOp::Set,
                    value,
                    Span::bytes(0, 0),
                )
            },
        }
        Ok(())
    }

    /// Waits until `w` on world PE `pe` (mapped here) carries `tag` in its
    /// upper half; returns the lower half.
    pub(crate) fn wait_tagged_on(&self, pe: PeId, w: SymRef<u64>, tag: u64) -> Result<u32> {
        let word = match self.direct_word(pe, w) {
            Some(word) => word,
            None => self.mapped_word(pe, w)?,
        };
        let mut got = 0u64;
        self.rt.wait_on_pe(pe, w.offset(), 8, || {
            got = word.load(Ordering::Acquire);
            got & !0xFFFF_FFFF == tag
        })?;
        Ok(got as u32)
    }

    /// Waits until this PE's `w` carries `tag` in its upper half; returns the
    /// lower half.
    pub(crate) fn wait_tagged(&self, w: SymRef<u64>, tag: u64) -> Result<u32> {
        let mut got = 0u64;
        if let Some(word) = self.direct_word(self.rt.my_pe(), w) {
            self.rt.wait_on(w.offset(), 8, || {
                got = word.load(Ordering::Acquire);
                got & !0xFFFF_FFFF == tag
            })?;
            return Ok(got as u32);
        }
        let mut failed = None;
        self.rt
            .wait_on(w.offset(), 8, || match self.rt.signal_fetch(w) {
                Ok(v) => {
                    got = v;
                    v & !0xFFFF_FFFF == tag
                }
                Err(e) => {
                    failed = Some(e);
                    true
                }
            })?;
        match failed {
            Some(e) => Err(e),
            None => Ok(got as u32),
        }
    }
}

impl Collectives {
    /// Sets up collectives on `rt` with default sizing (collective over all
    /// PEs: allocates the scratch pool, builds `TEAM_WORLD` and `TEAM_SHARED`).
    ///
    /// # Errors
    /// As [`Collectives::with_options`].
    pub fn new(rt: Arc<Runtime>) -> Result<Arc<Collectives>> {
        Collectives::with_options(rt, CollectivesOptions::default())
    }

    /// [`Collectives::new`] with explicit pool sizing (same options on every PE).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `max_teams` is outside 2..=64, `stage_bytes` is
    /// below 4 KiB or the pool size overflows; [`Error::Config`] for an unknown
    /// `SHMEM_*_ALGORITHM` name; [`Error::CollectiveMismatch`] when PEs differ in those
    /// settings or in `opts`; [`Error::OutOfMemory`] when the heap cannot hold the
    /// pool; the bootstrap's error from the allgather that compares them (a dead PE,
    /// [`Error::Timeout`]).
    pub fn with_options(rt: Arc<Runtime>, opts: CollectivesOptions) -> Result<Arc<Collectives>> {
        if !(2..=64).contains(&opts.max_teams) {
            return Err(Error::invalid(
                "max_teams",
                format!("{} is outside 2..=64", opts.max_teams),
            ));
        }
        let algorithms = AlgorithmChoice::from_config(rt.config())?;
        let n = rt.n_pes();
        let stage_bytes = opts
            .stage_bytes
            .unwrap_or_else(|| (rt.heap_size() / 512).clamp(4 << 10, 64 << 10));
        let stage_bytes = stage_bytes / 64 * 64;
        if stage_bytes < 4 << 10 {
            return Err(Error::invalid(
                "stage_bytes",
                format!("{stage_bytes} bytes is below the 4 KiB minimum"),
            ));
        }
        // Forced algorithms and pool sizing must match everywhere: the
        // handshake itself depends on them. Checked once, on the slow path.
        // Each PE sends an `Agreement`.
        let leaders_alltoall = rt.config().var::<u64>("SHMEM_NODE_LEADERS_ALLTOALL")?;
        let mine = (
            algorithms.fingerprint(),
            stage_bytes as u64,
            opts.max_teams as u64,
            leaders_alltoall,
        );
        let cores = rt.config().cores();
        let crowded = rt.topology().machine_pes() > cores;
        let maps_all = (0..n).all(|pe| matches!(rt.peer_ptr(RESERVED, pe), Ok(Some(_))));
        // Whether this PE stores into its node's heaps directly (the two-level
        // handshake of teams across nodes needs it on every PE).
        let maps_node = rt
            .topology()
            .local_pes()
            .into_iter()
            .all(|pe| rt.load_store_base(pe).is_some());
        let all = rt
            .bootstrap()
            .allgather(&wire::encode(&(mine, crowded, maps_all, maps_node)))?;
        let all: Vec<Agreement> = all
            .iter()
            .map(|m| wire::decode("collectives agreement", m))
            .collect::<Result<_>>()?;
        let oversubscribed = all.iter().any(|m| m.1);
        let all_mapped = all.iter().all(|m| m.2);
        let node_of = (!all_mapped
            && algorithms.barrier.is_none()
            && rt.topology().n_nodes() > 1
            && all.iter().all(|m| m.3))
        .then(|| rt.topology().node_of.clone());
        if let Some(pe) = all.iter().position(|m| m.0 != mine) {
            return Err(Error::CollectiveMismatch {
                op: "Collectives::new",
                details: format!(
                    "PE {pe} and PE {} differ in SHMEM_*_ALGORITHM settings, \
                     SHMEM_NODE_LEADERS_ALLTOALL or collective options (this PE: {algorithms:?}, \
                     leaders all-to-all up to {leaders_alltoall}, {stage_bytes} staging bytes, {} \
                     teams); use the same on every PE",
                    rt.my_pe(),
                    opts.max_teams
                ),
            });
        }
        let layout = SlotLayout::new(n);
        let stage_total = stage_bytes
            .checked_mul(opts.max_teams)
            .ok_or_else(|| Error::invalid("stage_bytes", "stage_bytes * max_teams overflows"))?;
        let stage_off = rt.malloc_bytes(stage_total, 64)?;
        let stage = SymBuf::from_raw_parts(stage_off, stage_total, rt.instance());
        let fold_total = crate::fold::FOLD_BYTES * opts.max_teams;
        let fold =
            SymBuf::from_raw_parts(rt.malloc_bytes(fold_total, 64)?, fold_total, rt.instance());
        // Zeroed, then a barrier inside calloc: no PE signals a word before
        // its owner has cleared it.
        // Cache-line aligned: each latency-critical word owns its line.
        let words = layout
            .words
            .checked_mul(opts.max_teams)
            .ok_or_else(|| Error::invalid("max_teams", "the signal pool size overflows"))?;
        let signals = SymBuf::from_raw_parts(rt.calloc_bytes(words * 8, 64)?, words, rt.instance());
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let me = rt.my_pe();
        let world = Team::new(
            id,
            TeamKind::World,
            0,
            (0..n).collect(),
            n,
            me,
            TeamConfig::default(),
        )
        .ok_or_else(|| Error::invalid("rank", format!("PE {me} is not in 0..{n}")))?;
        let local = rt.topology().local_pes();
        let shared = Team::new(id, TeamKind::Shared, 1, local, n, me, TeamConfig::default())
            .ok_or_else(|| Error::invalid("topology", format!("PE {me} is not on its own node")))?;
        let all = if opts.max_teams == 64 {
            u64::MAX
        } else {
            (1u64 << opts.max_teams) - 1
        };
        let direct = (0..n)
            .map(|pe| rt.load_store_base(pe).map(MappedHeap))
            .collect();
        Ok(Arc::new(Collectives {
            rt,
            id,
            algorithms,
            layout,
            signals,
            fold,
            stage,
            stage_bytes,
            max_teams: opts.max_teams,
            oversubscribed,
            all_mapped,
            node_of,
            leaders_alltoall: usize::try_from(leaders_alltoall).unwrap_or(usize::MAX),
            direct,
            free_slots: Mutex::new(all & !0b11),
            world,
            shared,
        }))
    }

    /// The runtime underneath.
    #[track_caller]
    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.rt
    }

    /// The algorithms forced by `SHMEM_*_ALGORITHM` (`None`: chosen per call).
    #[track_caller]
    pub fn algorithms(&self) -> AlgorithmChoice {
        self.algorithms
    }

    /// Staging bytes per team.
    #[track_caller]
    pub fn stage_bytes(&self) -> usize {
        self.stage_bytes
    }

    /// All PEs of the job (`SHMEM_TEAM_WORLD`).
    #[track_caller]
    pub fn world(&self) -> Team {
        self.world.clone()
    }

    /// The PEs on this PE's node (`SHMEM_TEAM_SHARED`).
    #[track_caller]
    pub fn shared(&self) -> Team {
        self.shared.clone()
    }

    /// [`Collectives::world`] borrowed: no handle is cloned (cloning one
    /// costs two atomic operations, a call's worth of a small collective).
    pub fn world_ref(&self) -> &Team {
        &self.world
    }

    /// [`Collectives::shared`] borrowed.
    pub fn shared_ref(&self) -> &Team {
        &self.shared
    }

    /// Whether the handshake on `team` makes its first access to shared
    /// memory with a sequentially consistent store or read-modify-write
    /// of this thread's (a counted arrival, or a signal to a PE reached by
    /// load and store), which fences as `quiet`'s own fence would.
    fn opens_with_seqcst_store(&self, team: &Team) -> bool {
        let (me, n) = (team.my_pe(), team.n_pes());
        if n < 2 {
            return false;
        }
        if let Some(nodes) = self.nodes_of(team) {
            // A member stores its arrival on its node's leader.
            return nodes.leader != me;
        }
        let first = match self.algorithms.barrier_for(self.oversubscribed) {
            BarrierAlgorithm::Dissemination => team.inner.members[(me + 1) % n],
            BarrierAlgorithm::Linear if self.all_mapped => return true,
            // Team PE 0 reads the arrivals first.
            BarrierAlgorithm::Linear if me == 0 => return false,
            BarrierAlgorithm::Linear => team.inner.members[0],
        };
        self.direct.get(first).copied().flatten().is_some()
    }

    /// `team`'s members grouped by node when its handshake runs in two
    /// levels ([`crate::nodes`]).
    pub(crate) fn nodes_of<'t>(&self, team: &'t Team) -> Option<&'t Nodes> {
        let node_of = self.node_of.as_deref()?;
        team.inner
            .nodes
            .get_or_init(|| {
                Nodes::of(
                    &team.inner.members,
                    team.inner.my_index,
                    node_of,
                    self.leaders_alltoall,
                )
            })
            .as_ref()
    }

    /// Whether `w` is a word of the signal pool.
    #[inline]
    fn in_pool(&self, w: SymRef<u64>) -> bool {
        let start = self.signals.offset();
        w.offset() >= start
            && w.offset() < start + self.signals.len() * 8
            && w.offset().is_multiple_of(8)
    }

    #[track_caller]
    fn word(&self, slot: usize, w: usize) -> SymRef<u64> {
        let off = self.signals.offset() + (slot * self.layout.words + w) * 8;
        SymRef::from_raw_parts(off, self.signals.instance())
    }

    #[track_caller]
    pub(crate) fn free_slots(&self) -> MutexGuard<'_, u64> {
        self.free_slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Opens a collective on `team`: checks the handle, then runs the
    /// handshake with this call's fingerprint. `local` is the outcome of this
    /// PE's own argument checks; a failure there still joins the handshake
    /// (so the other PEs fail too instead of waiting) and is returned.
    #[track_caller]
    pub(crate) fn begin<'a>(
        &'a self,
        team: &'a Team,
        op: &'static str,
        desc: Desc,
        local: Result<()>,
        describe: &dyn Fn() -> String,
    ) -> Result<Call<'a>> {
        self.begin_release(team, op, desc, local, describe, self.all_mapped)
    }

    /// Checks `team`, locks its state and records the call for the hang
    /// report (until the returned call is dropped); then finishes what this
    /// PE's previous call left as a broadcast's root: the rest of a folded
    /// broadcast's handshake ([`crate::fold::Owed`]), or the check of a
    /// broadcast it published ([`crate::push`]). A mismatch found there
    /// lands in [`Call::late`].
    #[track_caller]
    pub(crate) fn open_call<'a>(&'a self, team: &'a Team, op: &'static str) -> Result<Call<'a>> {
        self.open_call_keeping(team, op, false)
    }

    /// [`Collectives::open_call`]; with `keep_newest` (a small broadcast
    /// this PE publishes as the root), the receipts of its newest pending
    /// publish stay unchecked until a later call: its buffer is the other
    /// parity's, so this call need not wait for them (see [`crate::push`]).
    #[track_caller]
    pub(crate) fn open_call_keeping<'a>(
        &'a self,
        team: &'a Team,
        op: &'static str,
        keep_newest: bool,
    ) -> Result<Call<'a>> {
        self.check_team(team)?;
        let state = team.lock_state();
        let at = std::panic::Location::caller();
        let number = state.seq + state.published + 1;
        // Named at once unless the previous call left something owing
        // (then once that is settled, below).
        let in_call = state.owed.is_none().then(|| {
            self.rt
                .activity()
                .defer_at(op, team.hang_label(), number, at)
        });
        let mut call = Call {
            coll: self,
            rt: &self.rt,
            team,
            state,
            me: team.my_pe(),
            n: team.n_pes(),
            _in_call: in_call,
            late: None,
        };
        if let Some(owed) = call.state.owed {
            // The end of this PE's previous call on the team (a broadcast
            // it rooted, the last call): the hang report names that call,
            // and where it was made, not the one opening.
            let end = self.rt.activity().defer_at(
                "end of broadcast",
                team.hang_label(),
                number - 1,
                call.state.owed_at.unwrap_or(at),
            );
            // Owed until settled: after a failure (a timeout, a dead PE) the
            // team's next call waits again instead of reusing its words.
            call.late = call.settle(owed)?.map(Box::new);
            call.state.owed = None;
            call.state.owed_at = None;
            drop(end);
            call._in_call = Some(
                self.rt
                    .activity()
                    .defer_at(op, team.hang_label(), number, at),
            );
        }
        let kept = if keep_newest {
            call.state.push_pending.take_newest()
        } else {
            None
        };
        while let Some((seq, value)) = call.state.push_pending.take_oldest() {
            let differed = crate::push::check_receipts(&call, seq, value, true)?;
            if call.late.is_none() {
                call.late = differed.map(Box::new);
            }
        }
        if let Some((seq, value)) = kept {
            call.state.push_pending.push(seq, value);
        }
        Ok(call)
    }

    /// [`Collectives::begin`] choosing the linear handshake's release:
    /// `shared` reads team PE 0's release word (one wake-up for all), else
    /// team PE 0 signals each member's own word. `team_destroy` needs the
    /// latter: it clears the slot's words right after the handshake, and a
    /// shared release word could be cleared before a slow member read it.
    #[track_caller]
    fn begin_release<'a>(
        &'a self,
        team: &'a Team,
        op: &'static str,
        desc: Desc,
        local: Result<()>,
        describe: &dyn Fn() -> String,
        shared: bool,
    ) -> Result<Call<'a>> {
        let mut call = self.open_call(team, op)?;
        self.handshake_in(&mut call, op, desc, local, describe, shared)?;
        Ok(call)
    }

    /// The opening handshake of the open `call` (see
    /// [`Collectives::begin`]).
    fn handshake_in(
        &self,
        call: &mut Call<'_>,
        op: &'static str,
        desc: Desc,
        local: Result<()>,
        describe: &dyn Fn() -> String,
        shared: bool,
    ) -> Result<()> {
        let local = call.with_late(local);
        let mine = match local {
            Ok(()) => desc.value(),
            Err(_) => BAD_ARGS,
        };
        let agreed = call.handshake(mine, shared)?;
        local?;
        if agreed != mine {
            return Err(self.mismatch(op, call, describe));
        }
        Ok(())
    }

    /// A call that is only its handshake (`sync`, `barrier`): the call is
    /// not moved out to the caller (moving it cost a barrier more than its
    /// own bookkeeping).
    #[track_caller]
    fn handshake_only(&self, team: &Team, op: &'static str) -> Result<()> {
        let mut call = self.open_call(team, op)?;
        self.handshake_in(
            &mut call,
            op,
            Desc::new("sync"),
            Ok(()),
            &|| "no arguments".into(),
            self.all_mapped,
        )
    }

    /// [`Collectives::begin`] for a small collective whose data rides on
    /// the handshake (see [`crate::fold`]), run to the end: `contrib` is
    /// this PE's contribution and the agreed sizes, `finish` computes the
    /// result (`count` elements of `T`, which land in `dest`) from all
    /// contributions in team order. `plan` comes from [`Call::fold_plan`]
    /// (when it gives none, the caller runs [`Collectives::begin`] and its
    /// own algorithm instead). Neither the call nor the result is moved out
    /// of here: moving them cost a small collective more than its own
    /// bookkeeping.
    #[allow(clippy::too_many_arguments)]
    #[track_caller]
    pub(crate) fn fold_to_dest<T: Element>(
        &self,
        plan: crate::fold::FoldPlan,
        team: &Team,
        op: &'static str,
        desc: Desc,
        local: Result<()>,
        describe: &dyn Fn() -> String,
        contrib: crate::fold::Contrib<'_>,
        finish: crate::fold::Finish<'_>,
        dest: SymSlice<T>,
        count: usize,
    ) -> Result<()> {
        let result_len = count.saturating_mul(std::mem::size_of::<T>());
        let mut out = crate::fold::FoldBuf::new();
        let mut call = self.open_call(team, op)?;
        self.fold_in(
            &mut call, plan, op, desc, local, describe, contrib, result_len, finish, &mut out,
        )?;
        if count == 0 {
            return Ok(());
        }
        // SAFETY: this PE's own dest, in the heap (checked by the caller
        // before the handshake); no other PE writes it during a folded call.
        let d = unsafe { self.rt.local_slice_mut(dest.slice(..count)?)? };
        shmem_core::as_bytes_mut(d).copy_from_slice(&out);
        Ok(())
    }

    /// The folded handshake of the open `call` (see
    /// [`Collectives::fold_to_dest`]); the result lands in `out`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn fold_in(
        &self,
        call: &mut Call<'_>,
        plan: crate::fold::FoldPlan,
        op: &'static str,
        desc: Desc,
        local: Result<()>,
        describe: &dyn Fn() -> String,
        contrib: crate::fold::Contrib<'_>,
        result_len: usize,
        finish: crate::fold::Finish<'_>,
        out: &mut crate::fold::FoldBuf,
    ) -> Result<()> {
        // A mismatch of this PE's earlier call does not spoil this one: a
        // folded call is whole once its handshake is, and the PEs whose
        // calls differed back then failed then (see `Owed`). It takes part
        // with its own arguments and reports the earlier mismatch after.
        // (Taking part as "invalid arguments" would make a root that did
        // not wait report this call in turn, and so on with every root
        // after it.)
        let late = call.late.take();
        let value = match local {
            Ok(()) => desc.value(),
            Err(_) => BAD_ARGS,
        };
        let agreed = call.fold_handshake(plan, value, contrib, result_len, finish, out)?;
        let now = match (local, agreed == value) {
            (Err(e), _) => Err(e),
            (Ok(()), false) => Err(self.mismatch(op, call, describe)),
            (Ok(()), true) => Ok(()),
        };
        match (now, late) {
            (now, None) => now,
            (Ok(()), Some(e)) => Err(*e),
            (Err(Error::CollectiveMismatch { op, details }), Some(e)) => {
                Err(Error::CollectiveMismatch {
                    op,
                    details: format!("{details}; and earlier: {e}"),
                })
            }
            (Err(now), Some(_)) => Err(now),
        }
    }

    #[track_caller]
    pub(crate) fn mismatch(
        &self,
        op: &'static str,
        call: &Call<'_>,
        describe: &dyn Fn() -> String,
    ) -> Error {
        Error::CollectiveMismatch {
            op,
            details: format!(
                "PE {} (team PE {} of {}) called {op} with {}; another PE of the team passed \
                 different arguments, invalid ones, or called a different collective",
                self.rt.my_pe(),
                call.me,
                call.n,
                describe()
            ),
        }
    }

    #[track_caller]
    pub(crate) fn check_team(&self, team: &Team) -> Result<()> {
        if team.inner.owner != self.id {
            return Err(Error::invalid(
                "team",
                "belongs to another runtime instance",
            ));
        }
        if team.is_destroyed() {
            return Err(Error::invalid("team", "has been destroyed"));
        }
        Ok(())
    }

    // ----- synchronisation ----------------------------------------------

    /// Waits until every member of `team` has called `sync` (no memory
    /// ordering beyond the signals; see [`Collectives::barrier`]).
    ///
    /// # Errors
    /// As every collective (see [Errors](Collectives#errors)): a destroyed or foreign
    /// team, a member in another collective, a dead PE, a timeout.
    #[track_caller]
    pub fn sync(&self, team: &Team) -> Result<()> {
        self.handshake_only(team, "sync")
    }

    /// Completes this PE's outstanding puts and AMOs ([`Runtime::quiet`]),
    /// then synchronises `team`.
    ///
    /// # Errors
    /// The error of [`Runtime::quiet`] (a dead PE, an engine's failure), then as
    /// [`Collectives::sync`].
    #[track_caller]
    pub fn barrier(&self, team: &Team) -> Result<()> {
        if self.opens_with_seqcst_store(team) {
            self.rt.quiet_before_seqcst()?;
        } else {
            self.rt.quiet()?;
        }
        self.handshake_only(team, "barrier")
    }

    /// [`Collectives::barrier`] over all PEs.
    ///
    /// # Errors
    /// As [`Collectives::barrier`].
    #[track_caller]
    pub fn barrier_all(&self) -> Result<()> {
        self.barrier(&self.world)
    }

    /// [`Collectives::sync`] over all PEs.
    ///
    /// # Errors
    /// As [`Collectives::sync`].
    #[track_caller]
    pub fn sync_all(&self) -> Result<()> {
        self.sync(&self.world)
    }

    // ----- team management ----------------------------------------------

    /// Splits `parent` (collective over it): the new team holds parent PEs
    /// `start, start + stride, ...` (`size` of them). PEs outside it get
    /// `None`. Every parent PE must pass the same arguments.
    ///
    /// # Errors
    /// As every collective (see [Errors](Collectives#errors));
    /// [`Error::InvalidArgument`] when `size` is 0, `stride` is 0 for more than one PE
    /// or the strided PEs leave `parent`, or when no team slot is free on every parent
    /// PE (`max_teams` teams exist).
    #[track_caller]
    pub fn team_split_strided(
        &self,
        parent: &Team,
        start: usize,
        stride: isize,
        size: usize,
        config: Option<TeamConfig>,
    ) -> Result<Option<Team>> {
        let members = strided_members(parent, start, stride, size);
        let local = members
            .as_ref()
            .map(|_| ())
            .map_err(|reason| Error::invalid("team_split_strided", reason.clone()));
        let desc = Desc::new("split_strided")
            .with(start as u64)
            .with(stride as u64)
            .with(size as u64);
        let describe = || format!("start {start}, stride {stride}, size {size}");
        let slots =
            self.agree_free_slots(parent, "team_split_strided", desc, local, &describe, 1)?;
        let members = members.map_err(|reason| Error::invalid("team_split_strided", reason))?;
        Ok(self.make_team(slots[0], members, config.unwrap_or_default()))
    }

    /// Splits `parent` into a 2-D grid with `xrange` columns (collective over
    /// it). Returns this PE's row team (consecutive parent PEs) and column
    /// team (parent PEs `xrange` apart). The last row may be short.
    ///
    /// # Errors
    /// As every collective (see [Errors](Collectives#errors));
    /// [`Error::InvalidArgument`] when `xrange` is 0 or fewer than two team slots are
    /// free on every parent PE.
    #[track_caller]
    pub fn team_split_2d(
        &self,
        parent: &Team,
        xrange: usize,
        xconfig: Option<TeamConfig>,
        yconfig: Option<TeamConfig>,
    ) -> Result<(Team, Team)> {
        let n = parent.n_pes();
        let local = if xrange == 0 {
            Err(Error::invalid("xrange", "must be at least 1"))
        } else {
            Ok(())
        };
        let xr = xrange.clamp(1, n);
        let desc = Desc::new("split_2d").with(xrange as u64);
        let describe = || format!("xrange {xrange}");
        let slots = self.agree_free_slots(parent, "team_split_2d", desc, local, &describe, 2)?;
        let me = parent.my_pe();
        let row = me / xr;
        let col = me % xr;
        let xs: Vec<PeId> = (row * xr..((row + 1) * xr).min(n))
            .map(|i| parent.inner.members[i])
            .collect();
        let ys: Vec<PeId> = (col..n)
            .step_by(xr)
            .map(|i| parent.inner.members[i])
            .collect();
        let x = self.make_team(slots[0], xs, xconfig.unwrap_or_default());
        let y = self.make_team(slots[1], ys, yconfig.unwrap_or_default());
        match (x, y) {
            (Some(x), Some(y)) => Ok((x, y)),
            _ => Err(Error::invalid(
                "team_split_2d",
                "this PE fell outside its own row or column",
            )),
        }
    }

    /// Destroys a team (collective over its members): synchronises them,
    /// then returns its scratch slot to the pool. Every clone of the handle
    /// becomes unusable. The predefined teams cannot be destroyed.
    ///
    /// # Errors
    /// As every collective (see [Errors](Collectives#errors));
    /// [`Error::InvalidArgument`] for `TEAM_WORLD` or `TEAM_SHARED`.
    #[track_caller]
    pub fn team_destroy(&self, team: Team) -> Result<()> {
        self.check_team(&team)?;
        if team.inner.kind != TeamKind::Split {
            return Err(Error::invalid(
                "team",
                "TEAM_WORLD and TEAM_SHARED cannot be destroyed",
            ));
        }
        let call = self.begin_release(
            &team,
            "team_destroy",
            Desc::new("destroy"),
            Ok(()),
            &|| "no arguments".into(),
            false,
        )?;
        // With a counted handshake every member reads the release word on
        // team PE 0: PE 0 clears its words only once all have said they
        // left (a count in its first arrival word, unused by that handshake).
        if call.counted() && call.n > 1 {
            let left = call.word(self.layout.linear(0));
            if call.me == 0 {
                self.rt
                    .signal_wait_until(left, Cmp::Ge, call.n as u64 - 1)?;
            } else {
                self.rt.signal_op(left, 1, SignalOp::Add, call.pe(0))?;
            }
        }
        // Likewise on a team across nodes, whose members read their
        // leader's release word: the leader's own arrival word, which that
        // handshake leaves unused, counts its members out.
        if let Some(nodes) = call.nodes() {
            let left = call.word(self.layout.linear(nodes.leader));
            if nodes.leader == call.me {
                if !nodes.locals.is_empty() {
                    self.rt
                        .signal_wait_until(left, Cmp::Ge, nodes.locals.len() as u64)?;
                }
            } else {
                self.rt
                    .signal_op(left, 1, SignalOp::Add, call.pe(nodes.leader))?;
            }
        }
        // Every member has entered destroy and every signal sent to this PE
        // has been consumed, so nothing is in flight to these words: clear
        // them for the slot's next team.
        let slot = team.inner.slot;
        let words = SymSlice::<u64>::from_raw_parts(
            self.signals.offset() + slot * self.layout.words * 8,
            self.layout.words,
            self.signals.instance(),
        );
        self.rt.write_local(words, &vec![0u64; self.layout.words])?;
        team.inner.destroyed.store(true, Ordering::Release);
        drop(call);
        *self.free_slots() |= 1 << slot;
        Ok(())
    }

    #[track_caller]
    fn make_team(&self, slot: usize, members: Vec<PeId>, config: TeamConfig) -> Option<Team> {
        let t = Team::new(
            self.id,
            TeamKind::Split,
            slot,
            members,
            self.rt.n_pes(),
            self.rt.my_pe(),
            config,
        )?;
        *self.free_slots() &= !(1 << slot);
        Some(t)
    }
}

// ----- argument checks shared by the collectives ---------------------------

/// Checks that `s` belongs to this runtime, holds at least `need` elements,
/// lies in the heap and is aligned for `T`.
pub(crate) fn check_sym<T: Element>(
    rt: &Runtime,
    arg: &'static str,
    s: &SymSlice<T>,
    need: usize,
) -> Result<()> {
    if s.instance() != rt.instance() {
        return Err(Error::WrongInstance {
            object: s.instance(),
            runtime: rt.instance(),
        });
    }
    if s.len() < need {
        return Err(Error::invalid(
            arg,
            format!("holds {} elements, the call needs {need}", s.len()),
        ));
    }
    if s.offset() & (std::mem::align_of::<T>() - 1) != 0 {
        return Err(Error::Misaligned {
            offset: s.offset(),
            width: std::mem::align_of::<T>(),
        });
    }
    rt.check_range(s.offset(), s.byte_len())
}

/// Errors if the first `a_len` elements of `a` overlap the first `b_len` of
/// `b` (exact aliasing is allowed only when `same_ok`).
pub(crate) fn check_disjoint<T: Element>(
    a: &SymSlice<T>,
    a_len: usize,
    b: &SymSlice<T>,
    b_len: usize,
    same_ok: bool,
) -> Result<()> {
    let sz = std::mem::size_of::<T>();
    let (a0, a1) = (a.offset(), a.offset() + a_len * sz);
    let (b0, b1) = (b.offset(), b.offset() + b_len * sz);
    if a_len == 0 || b_len == 0 || a1 <= b0 || b1 <= a0 {
        return Ok(());
    }
    if same_ok && a0 == b0 && a_len == b_len {
        return Ok(());
    }
    Err(Error::invalid(
        "dest",
        format!(
            "heap range [{a0:#x}, {a1:#x}) overlaps source range [{b0:#x}, {b1:#x}){}",
            if same_ok {
                " (only an exact in-place call is allowed)"
            } else {
                ""
            }
        ),
    ))
}

/// Bytes of `nelems` elements of `T`, or an error naming `nelems` when the
/// size does not fit the address space.
pub(crate) fn byte_len<T>(nelems: usize) -> Result<usize> {
    nelems.checked_mul(std::mem::size_of::<T>()).ok_or_else(|| {
        Error::invalid(
            "nelems",
            format!(
                "{nelems} elements of {} bytes overflow the address space",
                std::mem::size_of::<T>()
            ),
        )
    })
}

/// `a * b`, or an error naming `arg`.
pub(crate) fn mul(arg: &'static str, a: usize, b: usize) -> Result<usize> {
    a.checked_mul(b)
        .ok_or_else(|| Error::invalid(arg, format!("{a} * {b} overflows")))
}

/// Copies `len` elements within this PE's heap (`copy` semantics: may overlap).
pub(crate) fn local_copy<T: Element>(
    rt: &Runtime,
    dst: SymSlice<T>,
    src: SymSlice<T>,
) -> Result<()> {
    if dst.offset() == src.offset() || src.is_empty() {
        return Ok(());
    }
    rt.check_range(dst.offset(), src.byte_len())?;
    rt.check_range(src.offset(), src.byte_len())?;
    let base = rt.heap_base().as_ptr();
    // SAFETY: both ranges lie in this PE's heap (checked just above); `copy`
    // allows overlap; no other PE writes these ranges during the call (the
    // handshake has run and the algorithms never target them remotely).
    unsafe {
        std::ptr::copy(
            base.add(src.offset()),
            base.add(dst.offset()),
            src.byte_len(),
        )
    };
    Ok(())
}
