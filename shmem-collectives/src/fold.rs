//! Small collectives folded into the opening handshake.
//!
//! A small broadcast, reduction or gather needs one synchronisation, not
//! two: the handshake that checks every PE's arguments can carry each PE's
//! contribution, and its release can carry the result. The signal words,
//! tags and fingerprints are the handshake's own, so a PE that folds and one
//! that does not (different arguments, or another collective) still meet
//! on the same words and both report the mismatch.
//!
//! With the linear handshake (PEs outnumber cores) every PE puts its
//! contribution into its slot of team PE 0's fold area. When every PE maps
//! every heap the handshake is counted ([`Call::count_arrival`]): the last
//! PE to count itself in computes the result into PE 0's fold area and
//! releases, and everyone reads the result there. Otherwise each member's
//! contribution travels with its arrival signal, PE 0 computes the result
//! and puts it to each member with its release signal. Where PEs must be
//! scheduled in turn, one arrival and release instead of a handshake plus
//! log2(n) data rounds is what makes a small allreduce cost about one
//! barrier.
//!
//! With two PEs and cores to spare (the dissemination handshake is one
//! exchange) each PE puts its contribution into the other's fold area,
//! double-buffered by call parity, with its handshake signal: one trip for
//! both instead of the handshake plus a data trip, which is what a timed
//! call after a barrier (the OSU pattern) pays. A PE writes the other's
//! half `p` at call `s` only after the other entered call `s - 1`, so it
//! has consumed call `s - 2`'s data there.
//!
//! A broadcast's root needs nothing from the others, so where the
//! exchange is by message (two PEs, or the leaders of a team across
//! nodes) it returns once its data is on its way, and its next call on the
//! team first waits for what it skipped ([`Owed`]).
//!
//! Reuse of the fold areas is safe without extra trips: a member arrives at
//! call `s` only after it saw call `s - 1` released, which PE 0 does only
//! after reading every contribution of `s - 1`; PE 0 rewrites its result
//! only at the release of a later call, which needs every member to have
//! arrived there, i.e. to have read this result. The gathered
//! contributions and the result live in separate halves, so calls of
//! different sizes never overlap.

use smallvec::SmallVec;

use shmem_core::{Result, SymSlice};

use crate::algorithm::BarrierAlgorithm;
use crate::collectives::{tag_of, Call, BAD_ARGS, MISMATCH};

/// A two-level wait on a team that is not (never happens: the plans that
/// leave one are chosen only for teams across nodes).
fn not_across_nodes() -> shmem_core::Error {
    shmem_core::Error::invalid("team", "a folded call across nodes on a team within one")
}

/// Bytes of fold area per team slot: two fixed halves (gathered
/// contributions, result), so that calls of different sizes never overlap,
/// then the two parity buffers of published broadcasts ([`crate::push`]).
pub(crate) const FOLD_BYTES: usize = 4 * HALF;
/// Bytes of each half: a folded call's contributions, and its result.
pub(crate) const HALF: usize = 2048;
/// Bytes that fit beside a handshake word in its cache line.
pub(crate) const LINE_PAYLOAD: usize = 56;

/// Computes the result (`out`) from every member's contribution, in team
/// order.
pub(crate) type Finish<'f> = &'f dyn Fn(&[&[u8]], &mut [u8]) -> Result<()>;

/// A folded call's result: inline up to two cache lines, so that a small
/// collective allocates nothing (a 2-PE collect's result, with its header,
/// is 88 bytes).
pub(crate) type FoldBuf = SmallVec<[u8; 128]>;

/// What each member contributes to a folded call.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Contrib<'m> {
    /// This PE's bytes: `each` of them, or none when `only` names another
    /// member (or this PE's own arguments were invalid).
    pub(crate) mine: &'m [u8],
    /// Bytes of one contribution (the slot size; agreed by the fingerprint).
    pub(crate) each: usize,
    /// Only this team member contributes (a broadcast's root); the others
    /// send just their handshake signal.
    pub(crate) only: Option<usize>,
}

impl<'m> Contrib<'m> {
    /// Every member contributes `each` bytes; this PE's are `mine`.
    pub(crate) fn every(mine: &'m [u8], each: usize) -> Contrib<'m> {
        Contrib {
            mine,
            each,
            only: None,
        }
    }

    /// Bytes that team member `j` contributes.
    pub(crate) fn len_of(&self, j: usize) -> usize {
        match self.only {
            Some(r) if r != j => 0,
            _ => self.each,
        }
    }
}

/// What [`Call::fold_plan`] decided for a call: its data rides on the
/// linear handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FoldPlan {
    /// Gather to team PE 0, release with the result.
    Linear,
    /// Two PEs exchange their contributions in the dissemination
    /// handshake's one round.
    Pair,
    /// A team across nodes: gathered at each node's leader, exchanged
    /// between leaders ([`Call::fold_nodes`]).
    Nodes,
}

/// The rest of a folded broadcast's handshake, left by its root.
///
/// OpenSHMEM lets a broadcast's root return once its data is on its way
/// (every member's `dest` must be ready before any PE calls), and the
/// root of a folded broadcast needs nothing from the others: its own
/// `dest` is a copy of its `source`. So it sends its data with its signal
/// and returns; the wait for the others' signals, which checks their
/// fingerprints and lets it reuse the words and buffers of the call's
/// parity, runs when its next call on the team opens
/// ([`Call::settle`]), before that call sends anything. Every reuse
/// argument of the handshakes then holds as if the root had waited in
/// the call itself. A member whose call differed from its root's still
/// fails in the call (it waits for the root's signal, as before; a root
/// that leads its node and sent its data before gathering its node
/// fails in the call too when a PE of its node differed, and then the
/// other nodes, whose calls matched the root's, complete), unless
/// it believes it is the root too: then both return, and each reports
/// the other at its next call. The root reports the difference at its
/// next call on the team. When that call opens with a handshake, it
/// takes part as a call with invalid arguments, so that its other members
/// fail too (as a published broadcast's root does, [`crate::push`]); a
/// folded call, which is whole once its handshake is, completes on every
/// PE and fails on this one only (taking part as invalid arguments would
/// make a root of that call that did not wait report it in turn, and so
/// on). A mismatch is not reported when the team sees no further call.
/// The hang report names the wait "end of broadcast" with that
/// broadcast's call number.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Owed {
    /// Two PEs ([`FoldPlan::Pair`]): the other PE's signal of call `seq`.
    Pair { seq: u64, value: u32 },
    /// A root that does not lead its node: its leader's release of call
    /// `seq`.
    Release { seq: u64, value: u32 },
    /// A root that leads its node (released already with the node's own
    /// agreed state): the other leaders' signals of call `seq`.
    Leaders { seq: u64, value: u32 },
}

impl Call<'_> {
    /// Waits for what this PE's previous call on the team left owing
    /// ([`Owed`]); returns the mismatch to report if the others' calls
    /// differed from it.
    pub(crate) fn settle(&self, owed: Owed) -> Result<Option<shmem_core::Error>> {
        let team_pe = |j: usize| format!("team PE {j} (PE {})", self.pe(j));
        let (seq, who) = match owed {
            Owed::Pair { seq, value } => {
                let w = self.word(self.coll.layout.entry((seq & 1) as usize, 0));
                let got = self.wait_tagged(w, tag_of(seq))?;
                (seq, (got != value).then(|| team_pe(1 - self.me)))
            }
            Owed::Release { seq, value } => {
                let nodes = self.nodes().ok_or_else(not_across_nodes)?;
                let release = self.word(self.coll.layout.release());
                let got = self.wait_tagged_on(self.pe(nodes.leader), release, tag_of(seq))?;
                let who = (got != value).then(|| {
                    format!(
                        "a PE of this node (as its leader, {}, found) or of another node",
                        team_pe(nodes.leader)
                    )
                });
                (seq, who)
            }
            Owed::Leaders { seq, value } => {
                let nodes = self.nodes().ok_or_else(not_across_nodes)?;
                let got = self.gather_leaders(nodes, seq, value)?;
                let who = (got != value).then(|| {
                    // The leaders whose nodes' states differed (read again
                    // only on this error path).
                    let word = |j| self.word(self.coll.layout.push_receipt((seq & 1) as usize, j));
                    let differed: Vec<String> = nodes
                        .leaders
                        .iter()
                        .filter(|&&j| j != self.me)
                        .filter(|&&j| !matches!(self.rt.signal_fetch(word(j)), Ok(v) if v as u32 == value))
                        .map(|&j| team_pe(j))
                        .collect();
                    if differed.is_empty() {
                        "a member of the team".to_string()
                    } else {
                        format!("a PE of the node led by {}", differed.join(" or of the node led by "))
                    }
                });
                (seq, who)
            }
        };
        Ok(who.map(|who| shmem_core::Error::CollectiveMismatch {
            op: "broadcast",
            details: format!(
                "{who} did not make the same call as this PE's broadcast #{seq} on the team, of \
                 which this PE was the root: it passed different arguments, invalid ones, or \
                 named another root, or called another collective (reported at a later call \
                 of this PE on the team: the root of a small broadcast does not wait for its \
                 members)"
            ),
        }))
    }

    /// Whether a call whose contributions are `each` bytes and whose result
    /// is `result` bytes can be folded on `team`; the same on every PE that
    /// passed the same arguments (team size and layout over nodes, sizes
    /// and configuration only).
    pub(crate) fn fold_plan(
        coll: &crate::Collectives,
        team: &crate::Team,
        each: usize,
        result: usize,
    ) -> Option<FoldPlan> {
        let n = team.n_pes();
        if n < 2 {
            return None;
        }
        if let Some(nodes) = coll.nodes_of(team) {
            return (nodes.alltoall && each.checked_mul(n)? <= HALF && result <= HALF)
                .then_some(FoldPlan::Nodes);
        }
        match coll.algorithms.barrier_for(coll.oversubscribed) {
            BarrierAlgorithm::Linear => {
                (each.checked_mul(n)? <= HALF && result <= HALF).then_some(FoldPlan::Linear)
            }
            BarrierAlgorithm::Dissemination if n == 2 => {
                (each <= HALF && result <= HALF).then_some(FoldPlan::Pair)
            }
            BarrierAlgorithm::Dissemination => None,
        }
    }

    /// This team slot's fold area on any PE (heap offset range): the
    /// folded calls' two halves.
    pub(crate) fn fold_area(&self) -> SymSlice<u8> {
        let off = self.coll.fold.offset() + self.team.inner.slot * FOLD_BYTES;
        SymSlice::from_raw_parts(off, 2 * HALF, self.coll.fold.instance())
    }

    /// Heap offset of this team slot's published-broadcast buffer for call
    /// parity `parity` ([`crate::push::PUSH_MAX`] bytes).
    pub(crate) fn push_area(&self, parity: usize) -> usize {
        self.coll.fold.offset() + self.team.inner.slot * FOLD_BYTES + (2 + parity) * HALF
    }

    /// The handshake of a folded call: sends `mine`, returns the agreed
    /// fingerprint state and, unless it is a mismatch, the result.
    pub(crate) fn fold_handshake(
        &mut self,
        plan: FoldPlan,
        value: u32,
        contrib: Contrib<'_>,
        result_len: usize,
        finish: Finish<'_>,
        out: &mut FoldBuf,
    ) -> Result<u32> {
        self.state.seq += 1;
        let seq = self.state.seq;
        let tag = tag_of(seq);
        out.clear();
        // A broadcast's root (with valid arguments) needs nothing from the
        // others: it returns once its data is on its way ([`Owed`]).
        let early = contrib.only == Some(self.me) && value != BAD_ARGS;
        let (state, result) = match plan {
            FoldPlan::Linear if self.counted() => {
                self.fold_counted(seq, tag, value, contrib, result_len, finish)?
            }
            FoldPlan::Linear => self.fold_linear(tag, value, contrib, result_len, finish)?,
            FoldPlan::Pair => {
                return self.fold_pair(seq, tag, value, early, contrib, result_len, finish, out)
            }
            FoldPlan::Nodes => {
                return match self.nodes() {
                    Some(nodes) => {
                        self.fold_nodes(nodes, seq, value, early, contrib, result_len, finish, out)
                    }
                    // Never: the plan is Nodes only for such teams.
                    None => Err(not_across_nodes()),
                };
            }
        };
        *out = result;
        Ok(state)
    }

    /// Two PEs: each puts its contribution into the other's fold area
    /// (half `seq & 1`) with its handshake signal, waits for the other's,
    /// and both compute the result from the two in team order. With
    /// `early` (a broadcast's root) this PE leaves the wait to its next
    /// call ([`Owed::Pair`]).
    #[allow(clippy::too_many_arguments)]
    fn fold_pair(
        &mut self,
        seq: u64,
        tag: u64,
        value: u32,
        early: bool,
        contrib: Contrib<'_>,
        result_len: usize,
        finish: Finish<'_>,
        out: &mut FoldBuf,
    ) -> Result<u32> {
        let me = self.me;
        let mine = contrib.mine;
        let parity = (seq & 1) as usize;
        let w = self.word(self.coll.layout.entry(parity, 0));
        // Up to 56 bytes travel in the signal word's own cache line (its
        // other seven words are unused): the peer gets data and signal in
        // one line transfer.
        let area = self.fold_area();
        let slot = move |len: usize| -> Result<SymSlice<u8>> {
            if contrib.each <= LINE_PAYLOAD {
                Ok(SymSlice::from_raw_parts(w.offset() + 8, len, w.instance()))
            } else {
                area.slice(parity * HALF..parity * HALF + len)
            }
        };
        self.put_and_set(
            self.pe(1 - me),
            Some((slot(mine.len())?, mine)),
            w,
            tag | value as u64,
        )?;
        let got = if early {
            self.owe(Owed::Pair { seq, value });
            value
        } else {
            self.wait_tagged(w, tag)?
        };
        if got != value {
            return Ok(MISMATCH);
        }
        if value == BAD_ARGS {
            return Ok(value);
        }
        // SAFETY: the other PE wrote this slot before the signal just seen
        // and writes it again only two calls from now, after this PE has
        // entered the next call (see the module comment). (An early root
        // reads none of it: the other contributes nothing.)
        let theirs = unsafe { self.rt.local_slice(slot(contrib.len_of(1 - me))?)? };
        let parts: [&[u8]; 2] = if me == 0 {
            [mine, theirs]
        } else {
            [theirs, mine]
        };
        out.resize(result_len, 0);
        finish(&parts, out)?;
        Ok(value)
    }

    /// The counted handshake ([`Call::count_arrival`]) carrying data: every
    /// PE puts its contribution into its slot of team PE 0's fold area,
    /// then counts itself in; the last arrival computes the result from the
    /// slots into PE 0's result half and releases; everyone reads the
    /// result there. Slots and result are reused safely as in
    /// [`Call::fold_linear`]: a PE writes its slot again only after this
    /// call's release (made after the last arrival read every slot), and
    /// the result is rewritten only by a later call's last arrival, which
    /// needs every PE to have arrived there, past reading this one.
    fn fold_counted(
        &mut self,
        seq: u64,
        tag: u64,
        value: u32,
        contrib: Contrib<'_>,
        result_len: usize,
        finish: Finish<'_>,
    ) -> Result<(u32, FoldBuf)> {
        let (me, n, b) = (self.me, self.n, contrib.each);
        let root = self.pe(0);
        let area = self.fold_area();
        let result = area.slice(HALF..HALF + result_len)?;
        if !contrib.mine.is_empty() {
            self.mapped_write(root, area.offset() + me * b, contrib.mine)?;
        }
        let (mut state, last) = self.count_arrival(seq, value)?;
        if !last {
            state = self.wait_tagged_on(root, self.word(self.coll.layout.release()), tag)?;
            if state == MISMATCH || state == BAD_ARGS {
                return Ok((state, FoldBuf::new()));
            }
            let mut out = FoldBuf::from_elem(0, result_len);
            self.rt.get_bytes(root, result.offset(), &mut out)?;
            return Ok((state, out));
        }
        let mut out = FoldBuf::from_elem(0, result_len);
        let mut failed = None;
        if state != MISMATCH && state != BAD_ARGS {
            // SAFETY: every PE wrote its slot before counting itself in,
            // which this last arrival has seen; none writes it again before
            // the release below.
            let computed = unsafe { self.mapped_bytes(root, area.offset(), n * b) }
                .and_then(|slots| {
                    let parts: SmallVec<[&[u8]; 8]> = (0..n)
                        .map(|j| &slots[j * b..j * b + contrib.len_of(j)])
                        .collect();
                    finish(&parts, &mut out)
                })
                .and_then(|()| self.mapped_write(root, result.offset(), &out));
            if let Err(e) = computed {
                // Release the others anyway (they see "invalid arguments"),
                // then report it here.
                state = BAD_ARGS;
                failed = Some(e);
            }
        }
        self.release_counted(tag, state)?;
        match failed {
            Some(e) => Err(e),
            None => Ok((state, out)),
        }
    }

    fn fold_linear(
        &mut self,
        tag: u64,
        value: u32,
        contrib: Contrib<'_>,
        result_len: usize,
        finish: Finish<'_>,
    ) -> Result<(u32, FoldBuf)> {
        let (me, n, b) = (self.me, self.n, contrib.each);
        let mine = contrib.mine;
        let area = self.fold_area();
        let result = area.slice(HALF..HALF + result_len)?;
        let release = self.word(self.coll.layout.release());
        if me != 0 {
            let w = self.word(self.coll.layout.linear(me));
            self.put_and_set(
                self.pe(0),
                Some((area.slice(me * b..me * b + mine.len())?, mine)),
                w,
                tag | value as u64,
            )?;
            let root = self.pe(0);
            let state = if self.coll.all_mapped {
                self.wait_tagged_on(root, release, tag)?
            } else {
                self.wait_tagged(release, tag)?
            };
            if state == MISMATCH || state == BAD_ARGS {
                return Ok((state, FoldBuf::new()));
            }
            let out = if self.coll.all_mapped {
                let mut out = FoldBuf::from_elem(0, result_len);
                self.rt.get_bytes(root, result.offset(), &mut out)?;
                out
            } else {
                FoldBuf::from_vec(self.rt.read_local(result)?)
            };
            return Ok((state, out));
        }
        let mut state = self.gather_arrivals(tag, value)?;
        let mut out = FoldBuf::from_elem(0, result_len);
        let mut failed = None;
        if state != MISMATCH && state != BAD_ARGS {
            // SAFETY: members wrote their slots before their arrival signals,
            // which `gather_arrivals` has seen; nobody writes them until
            // this call is released.
            let others = unsafe { self.rt.local_slice(area.slice(..n * b)?)? };
            let parts: SmallVec<[&[u8]; 8]> = (0..n)
                .map(|j| {
                    if j == 0 {
                        mine
                    } else {
                        &others[j * b..j * b + contrib.len_of(j)]
                    }
                })
                .collect();
            if let Err(e) = finish(&parts, &mut out) {
                // Release the members anyway (they see "invalid
                // arguments"), then report it here.
                state = BAD_ARGS;
                failed = Some(e);
            }
        }
        let signal = tag | state as u64;
        if self.coll.all_mapped {
            self.rt.write_local(result, &out)?;
            self.set_word(self.pe(0), release, signal)?;
        } else {
            for j in 1..n {
                self.put_and_set(self.pe(j), Some((result, &out)), release, signal)?;
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok((state, out)),
        }
    }
}
