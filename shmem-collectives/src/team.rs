//! Teams: ordered subsets of the job's PEs that run collectives together.
//!
//! A [`Team`] is a cheap, cloneable handle. It lists its members (team PE
//! `i` is world PE `members[i]`) and owns one slot of the collective scratch
//! pool (signal words and a staging buffer at the same heap offset on every
//! PE). Splitting a team is collective over the parent; a PE left out of the
//! new team gets `None`, the Rust spelling of `SHMEM_TEAM_INVALID`.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use shmem_core::PeId;

/// Options of a new team (OpenSHMEM `shmem_team_config_t`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TeamConfig {
    /// Number of communication contexts the team expects to create. Recorded
    /// and returned by [`Team::config`]; contexts are not limited here.
    pub num_contexts: usize,
}

/// Which predefined team a handle is, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TeamKind {
    World,
    Shared,
    Split,
}

/// Mutable per-team progress, touched only by the PE's collective calls.
#[derive(Debug)]
pub(crate) struct TeamState {
    /// Number of handshakes run so far (identical on every member); their
    /// words are reused by its parity, so only calls that synchronise the
    /// team advance it.
    pub(crate) seq: u64,
    /// Number of published broadcasts so far (identical on every member;
    /// see [`crate::push`]).
    pub(crate) published: u64,
    /// Per source team PE: how many data signals from it were consumed.
    pub(crate) consumed: Vec<u64>,
    /// Small broadcasts this PE published as their root without waiting
    /// for their receipts (see [`crate::push`]): sequence numbers and
    /// fingerprints, checked against the members' records when later calls
    /// open.
    pub(crate) push_pending: crate::push::Pending,
    /// The rest of the handshake of a folded broadcast this PE returned
    /// from as its root (see [`crate::fold::Owed`]), waited for when its
    /// next call on the team opens.
    pub(crate) owed: Option<crate::fold::Owed>,
    /// Where the user made the call that left `owed` (for the hang report).
    pub(crate) owed_at: Option<&'static std::panic::Location<'static>>,
    /// On a team across nodes: whether this PE's last call on the team
    /// left its node's members reading its fold buffer (it led its node
    /// through a folded call it was not the root of). A broadcast's root
    /// that leads its node sends to the other leaders before its node has
    /// arrived only when this is false ([`crate::nodes`]).
    pub(crate) locals_read_fold: bool,
}

#[derive(Debug)]
pub(crate) struct TeamInner {
    /// Identity of the [`crate::Collectives`] that created it.
    pub(crate) owner: u64,
    pub(crate) kind: TeamKind,
    /// Scratch slot in the pool.
    pub(crate) slot: usize,
    /// World PE of each team PE.
    pub(crate) members: Vec<PeId>,
    /// Team PE of each world PE (`u32::MAX`: not a member).
    index_of: Vec<u32>,
    pub(crate) my_index: usize,
    pub(crate) config: TeamConfig,
    pub(crate) state: StateLock,
    pub(crate) destroyed: AtomicBool,
    /// The team's members grouped by node, when its handshake runs in two
    /// levels ([`crate::nodes`]); worked out at its first handshake.
    pub(crate) nodes: std::sync::OnceLock<Option<crate::nodes::Nodes>>,
}

/// A team handle: cheap to clone, compared by identity.
///
/// Team PE numbers run `0..n_pes()` in the order the team was defined
/// (for a strided split, team PE `i` is parent PE `start + i * stride`).
#[derive(Debug, Clone)]
pub struct Team {
    pub(crate) inner: Arc<TeamInner>,
}

impl PartialEq for Team {
    fn eq(&self, other: &Team) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}
impl Eq for Team {}

impl Team {
    pub(crate) fn new(
        owner: u64,
        kind: TeamKind,
        slot: usize,
        members: Vec<PeId>,
        world_size: usize,
        my_world_pe: PeId,
        config: TeamConfig,
    ) -> Option<Team> {
        let mut index_of = vec![u32::MAX; world_size];
        for (i, &pe) in members.iter().enumerate() {
            index_of[pe] = i as u32;
        }
        let my_index = *index_of.get(my_world_pe)?;
        if my_index == u32::MAX {
            return None;
        }
        let n = members.len();
        Some(Team {
            inner: Arc::new(TeamInner {
                owner,
                kind,
                slot,
                members,
                index_of,
                my_index: my_index as usize,
                config,
                state: StateLock::new(TeamState {
                    seq: 0,
                    published: 0,
                    consumed: vec![0; n],
                    push_pending: crate::push::Pending::default(),
                    owed: None,
                    owed_at: None,
                    locals_read_fold: false,
                }),
                destroyed: AtomicBool::new(false),
                nodes: std::sync::OnceLock::new(),
            }),
        })
    }

    /// This PE's number in the team (`shmem_team_my_pe`).
    pub fn my_pe(&self) -> usize {
        self.inner.my_index
    }

    /// Number of PEs in the team (`shmem_team_n_pes`).
    pub fn n_pes(&self) -> usize {
        self.inner.members.len()
    }

    /// The options the team was created with (`shmem_team_get_config`).
    pub fn config(&self) -> TeamConfig {
        self.inner.config
    }

    /// World PE numbers of the members, indexed by team PE.
    pub fn members(&self) -> &[PeId] {
        &self.inner.members
    }

    /// World PE of team PE `pe`, if it is in range.
    pub fn world_pe(&self, pe: usize) -> Option<PeId> {
        self.inner.members.get(pe).copied()
    }

    /// Team PE of world PE `pe`, if it is a member.
    pub fn team_pe(&self, world_pe: PeId) -> Option<usize> {
        match self.inner.index_of.get(world_pe) {
            Some(&i) if i != u32::MAX => Some(i as usize),
            _ => None,
        }
    }

    /// The number in `dest` of this team's PE `pe` (`shmem_team_translate_pe`);
    /// `None` (OpenSHMEM's -1) when `pe` is out of range or not in `dest`.
    pub fn translate_pe(&self, pe: usize, dest: &Team) -> Option<usize> {
        dest.team_pe(self.world_pe(pe)?)
    }

    /// Whether this is the world team.
    pub fn is_world(&self) -> bool {
        self.inner.kind == TeamKind::World
    }

    /// Whether this is the node-local team (`SHMEM_TEAM_SHARED`).
    pub fn is_shared(&self) -> bool {
        self.inner.kind == TeamKind::Shared
    }

    /// Whether [`crate::Collectives::team_destroy`] has run on it.
    pub fn is_destroyed(&self) -> bool {
        self.inner.destroyed.load(Ordering::Acquire)
    }

    /// The team's name in the hang report.
    pub(crate) fn hang_label(&self) -> &'static str {
        match self.inner.kind {
            TeamKind::World => "WORLD",
            TeamKind::Shared => "SHARED",
            TeamKind::Split => "split",
        }
    }

    pub(crate) fn lock_state(&self) -> StateGuard<'_> {
        self.inner.state.lock()
    }
}

/// The lock over a team's [`TeamState`], held for a whole collective call.
///
/// Taking it is one compare-and-swap and leaving it one plain store
/// (`std::sync::Mutex` spends a second locked instruction on leaving, to
/// find sleepers; each costs 5 ns here, a tenth of a 2-PE barrier). It is
/// contended only when threads of one PE call collectives on the same team
/// at once, which OpenSHMEM leaves to the program to avoid; the later
/// thread then spins, yields, and finally sleeps in steps of up to 1 ms
/// until the call in progress ends.
#[derive(Debug)]
pub(crate) struct StateLock {
    locked: AtomicBool,
    state: UnsafeCell<TeamState>,
}

// SAFETY: the state is reached only through a `StateGuard`, and at most one
// exists at a time (`locked`); `TeamState` is `Send`.
unsafe impl Sync for StateLock {}

impl StateLock {
    fn new(state: TeamState) -> StateLock {
        StateLock {
            locked: AtomicBool::new(false),
            state: UnsafeCell::new(state),
        }
    }

    fn try_lock(&self) -> Option<StateGuard<'_>> {
        self.locked
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
            .then_some(StateGuard(self))
    }

    fn lock(&self) -> StateGuard<'_> {
        if let Some(g) = self.try_lock() {
            return g;
        }
        let backoff = crossbeam_utils::Backoff::new();
        let mut nap = Duration::from_micros(20);
        loop {
            if !self.locked.load(Ordering::Relaxed) {
                if let Some(g) = self.try_lock() {
                    return g;
                }
            }
            if backoff.is_completed() {
                std::thread::sleep(nap);
                nap = (nap * 2).min(Duration::from_millis(1));
            } else {
                backoff.snooze();
            }
        }
    }
}

/// Exclusive access to a team's state; leaving it unlocks.
#[derive(Debug)]
pub(crate) struct StateGuard<'a>(&'a StateLock);

impl Deref for StateGuard<'_> {
    type Target = TeamState;
    fn deref(&self) -> &TeamState {
        // SAFETY: this guard is the only one (see `StateLock`).
        unsafe { &*self.0.state.get() }
    }
}

impl DerefMut for StateGuard<'_> {
    fn deref_mut(&mut self) -> &mut TeamState {
        // SAFETY: this guard is the only one (see `StateLock`).
        unsafe { &mut *self.0.state.get() }
    }
}

impl Drop for StateGuard<'_> {
    fn drop(&mut self) {
        self.0.locked.store(false, Ordering::Release);
    }
}

/// Members of a strided split: parent PEs `start + i * stride`, `i < size`,
/// as world PEs; an error text when one falls outside the parent.
pub(crate) fn strided_members(
    parent: &Team,
    start: usize,
    stride: isize,
    size: usize,
) -> Result<Vec<PeId>, String> {
    let n = parent.n_pes();
    if size == 0 {
        return Err("size must be at least 1".into());
    }
    if stride == 0 && size > 1 {
        return Err(format!(
            "stride 0 is only valid for a team of size 1, not {size}"
        ));
    }
    let mut out = Vec::with_capacity(size);
    for i in 0..size {
        let idx = (start as i128) + (i as i128) * (stride as i128);
        if idx < 0 || idx >= n as i128 {
            return Err(format!(
                "member {i} would be parent PE {idx}, outside the parent team of {n} PEs \
                 (start {start}, stride {stride}, size {size})"
            ));
        }
        out.push(parent.inner.members[idx as usize]);
    }
    Ok(out)
}
