//! Teams that span nodes: the handshake in two levels.
//!
//! Between nodes a signal costs a network trip (about 9 us over TCP here)
//! and within one a cache-line transfer. A flat handshake sends one message
//! per member across the network (linear) or makes every one of its
//! ceil(log2 n) rounds wait for a message that crosses a node boundary
//! (dissemination with consecutive PEs per node). So when a team spans
//! several nodes, some of them holding more than one of its PEs, and every
//! PE maps the heaps of its node's PEs, the handshake runs in two levels:
//!
//! * each node's first member (in team order) leads it; the others store
//!   their arrival (tag and fingerprint) in their word on the leader's heap
//!   and wait on the leader's release word, both by load and store;
//! * a leader waits for its node's arrivals (folding their fingerprints),
//!   sends its node's state to every other leader and waits for theirs (one
//!   network trip; `nodes - 1` messages per leader), and releases its node
//!   with one store that all its members wait on. The last leader to
//!   arrive finds the others' signals already there: it releases its node
//!   first, then sends (its members need nothing from its sends).
//!
//! A barrier across two nodes then costs one network trip whatever the
//! number of PEs per node. A team with one PE on each of three or more
//! nodes runs the same exchange, every PE leading itself.
//!
//! All-to-all costs each leader `nodes - 1` messages, which grows past a
//! few trips' worth as nodes are added: above `SHMEM_NODE_LEADERS_ALLTOALL`
//! nodes (8 by default) the leaders run a dissemination barrier among
//! themselves instead (`ceil(log2 nodes)` trips of one message each), and
//! small collectives no longer ride on it. The agreed fingerprint reaches every PE as in a
//! flat handshake: a leader's state is its node's (any difference there is
//! already a mismatch), and every leader hears every other's.
//!
//! Small collectives ride on the same exchange ([`Call::fold_nodes`]), on
//! the same words, so PEs that disagree on whether a call folds (different
//! arguments, or different collectives) meet and report the mismatch
//! instead of waiting for each other.
//!
//! A small broadcast's root does not wait for the other nodes: it leaves
//! their signals to its next call on the team ([`crate::fold::Owed`]). A
//! root that leads its node sends its data to the other leaders as it
//! enters, before it gathers its own node, unless its node's members may
//! still be reading its fold buffer from the call before (see
//! [`Call::fold_nodes`]).
//!
//! Word reuse follows the flat algorithms': a member rewrites its arrival
//! word only after it saw the release of the call before, which its leader
//! gave after reading every arrival; the leader rewrites its release word
//! only once every member arrived at the next call, past reading this one;
//! the leaders' words are reused by call parity
//! ([`Call::exchange_leaders`]).

use smallvec::SmallVec;

shmem_core::config_var!(
    "SHMEM_NODE_LEADERS_ALLTOALL",
    u64,
    "8",
    "Teams across nodes: up to this many nodes, the node leaders exchange all-to-all (one network trip; each leader sends nodes - 1 messages, and small collectives ride on the exchange); above it, they run a dissemination barrier (ceil(log2 nodes) trips of one message). Also the most nodes at which a team with one PE per node exchanges all-to-all. The same on every PE"
);

use shmem_core::{PeId, Result, SymSlice};

use crate::collectives::{fold_word, tag_of, Call, BAD_ARGS, MISMATCH};
use crate::fold::{Contrib, Finish, FoldBuf, Owed, HALF};

/// A team's members grouped by node, as seen from this PE.
#[derive(Debug)]
pub(crate) struct Nodes {
    /// Team PE that leads this PE's node (its first member there).
    pub(crate) leader: usize,
    /// When this PE leads: the other members of its node (team PEs,
    /// ascending).
    pub(crate) locals: Vec<usize>,
    /// Team PE of each node's leader, in team order.
    pub(crate) leaders: Vec<usize>,
    /// Where each team PE's contribution goes in a folded call's buffer
    /// (in slots): node by node, in leader order, so that each node's
    /// contributions are one range ([`crate::fold`]).
    pub(crate) pos: Vec<usize>,
    /// Per leader (in `leaders` order): its node's first slot and number of
    /// members.
    pub(crate) spans: Vec<(usize, usize)>,
    /// Whether the leaders exchange all-to-all (one trip, `leaders - 1`
    /// messages each, and small collectives ride on it); else they run a
    /// dissemination barrier among themselves (`ceil(log2 leaders)` trips
    /// of one message each) and nothing rides on it.
    pub(crate) alltoall: bool,
}

impl Nodes {
    /// Groups `members` (world PEs, in team order) by `node_of` (the node
    /// of each world PE); `me` is this PE's team index. The leaders
    /// exchange all-to-all when there are at most `alltoall_max` of them
    /// (`SHMEM_NODE_LEADERS_ALLTOALL`). `None` when the team is on one
    /// node, or has one PE per node and either two PEs (their exchange is
    /// already one trip) or more than `alltoall_max` (the flat handshake
    /// then serves).
    pub(crate) fn of(
        members: &[PeId],
        me: usize,
        node_of: &[usize],
        alltoall_max: usize,
    ) -> Option<Nodes> {
        let node = |j: usize| node_of.get(members[j]).copied();
        let mine = node(me)?;
        let mut leaders: Vec<usize> = Vec::new();
        // Members of each node, in leader order.
        let mut groups: Vec<(usize, Vec<usize>)> = Vec::new();
        for j in 0..members.len() {
            let k = node(j)?;
            match groups.iter_mut().find(|g| g.0 == k) {
                Some(g) => g.1.push(j),
                None => {
                    groups.push((k, vec![j]));
                    leaders.push(j);
                }
            }
        }
        let alltoall = leaders.len() <= alltoall_max;
        if leaders.len() < 2 || (leaders.len() == members.len() && (leaders.len() < 3 || !alltoall))
        {
            return None;
        }
        let mut pos = vec![0; members.len()];
        let mut spans = Vec::with_capacity(groups.len());
        let mut at = 0;
        for (_, g) in &groups {
            spans.push((at, g.len()));
            for &j in g {
                pos[j] = at;
                at += 1;
            }
        }
        let leader = (0..members.len()).find(|&j| node(j) == Some(mine))?;
        let locals = if leader == me {
            (me + 1..members.len())
                .filter(|&j| node(j) == Some(mine))
                .collect()
        } else {
            Vec::new()
        };
        Some(Nodes {
            leader,
            locals,
            leaders,
            pos,
            spans,
            alltoall,
        })
    }
}

impl Call<'_> {
    /// The two-level handshake (see the module comment) of call `seq` with
    /// fingerprint `value`; returns the agreed state or [`MISMATCH`].
    pub(crate) fn handshake_nodes(&self, nodes: &Nodes, seq: u64, value: u32) -> Result<u32> {
        let tag = tag_of(seq);
        let me = self.me;
        let release = self.word(self.coll.layout.release());
        if nodes.leader != me {
            let w = self.word(self.coll.layout.linear(me));
            self.set_word(self.pe(nodes.leader), w, tag | value as u64)?;
            return self.wait_tagged_on(self.pe(nodes.leader), release, tag);
        }
        let linear = |j| self.coll.layout.linear(j);
        let state = self.gather_from(&nodes.locals, linear, tag, value)?;
        if let Some(agreed) = self.leaders_arrived(nodes, seq, state)? {
            // The last leader to arrive releases its node before it sends.
            if !nodes.locals.is_empty() {
                self.set_word(self.pe(me), release, tag | agreed as u64)?;
            }
            self.send_leaders(nodes, seq, state, None)?;
            return Ok(agreed);
        }
        let state = self.exchange_leaders(nodes, seq, state, None)?;
        if !nodes.locals.is_empty() {
            // One store; the node's members all wait on this word.
            self.set_word(self.pe(me), release, tag | state as u64)?;
        }
        Ok(state)
    }

    /// `state` folded with the other leaders' states of call `seq` when
    /// every one of them has already arrived (their signals are here), else
    /// `None`; never waits. A leader that finds them all here releases its
    /// node before it sends its own signals: its members need nothing from
    /// those sends, which cost a network send each. Only where the leaders
    /// exchange all-to-all.
    fn leaders_arrived(&self, nodes: &Nodes, seq: u64, state: u32) -> Result<Option<u32>> {
        if !nodes.alltoall {
            return Ok(None);
        }
        let (tag, parity) = (tag_of(seq), (seq & 1) as usize);
        let mut state = state;
        for &j in nodes.leaders.iter().filter(|&&j| j != self.me) {
            let v = self
                .rt
                .signal_fetch(self.word(self.coll.layout.push_receipt(parity, j)))?;
            match fold_word(v, tag, state) {
                Some(folded) => state = folded,
                None => return Ok(None),
            }
        }
        Ok(Some(state))
    }

    /// The leaders' level of call `seq`: this leader sends its node's state
    /// (and `data`: bytes of its fold buffer, by heap range) to every other
    /// leader with one signal each, then waits for theirs; returns the
    /// state folded with theirs ([`MISMATCH`] on any difference). The plain
    /// handshake and the folded calls meet on the same words (the
    /// published-broadcast receipts, by call parity and sender, which only
    /// teams on one node use), so leaders that disagree on whether a call
    /// folds (different arguments, or different collectives) fail with a
    /// mismatch instead of waiting for each other. All-to-all instead of
    /// dissemination: one trip, and `nodes - 1` messages per leader.
    ///
    /// Reuse: a leader writes another's word (and fold buffer) of parity
    /// `p` for call `s + 2` only after that leader's signal of call `s + 1`,
    /// sent once its node was past call `s`.
    fn exchange_leaders(
        &self,
        nodes: &Nodes,
        seq: u64,
        state: u32,
        data: Option<(SymSlice<u8>, &[u8])>,
    ) -> Result<u32> {
        if !nodes.alltoall {
            // Never with data: nothing rides on this exchange.
            return self.disseminate_leaders(nodes, seq, state);
        }
        self.send_leaders(nodes, seq, state, data)?;
        self.gather_leaders(nodes, seq, state)
    }

    /// The leaders' level of call `seq` when there are too many leaders to
    /// exchange all-to-all: a dissemination barrier among them, on the
    /// same words (each leader writes another's word of its own index at
    /// most once per call: round `r` goes `2^r` leaders on, a different
    /// leader each round). Reuse by call parity as in the flat
    /// dissemination: a leader completes call `s + 1` only after every
    /// leader has entered it, so past reading its words of call `s`.
    fn disseminate_leaders(&self, nodes: &Nodes, seq: u64, state: u32) -> Result<u32> {
        let tag = tag_of(seq);
        let parity = (seq & 1) as usize;
        let receipt = |j| self.coll.layout.push_receipt(parity, j);
        let l = nodes.leaders.len();
        let k = nodes
            .leaders
            .iter()
            .position(|&j| j == self.me)
            .unwrap_or(0);
        let mut state = state;
        let mut dist = 1;
        while dist < l {
            let to = nodes.leaders[(k + dist) % l];
            let from = nodes.leaders[(k + l - dist) % l];
            self.set_word(self.pe(to), self.word(receipt(self.me)), tag | state as u64)?;
            state = self.gather_from(&[from], receipt, tag, state)?;
            dist <<= 1;
        }
        Ok(state)
    }

    /// The sending half of [`Call::exchange_leaders`].
    fn send_leaders(
        &self,
        nodes: &Nodes,
        seq: u64,
        state: u32,
        data: Option<(SymSlice<u8>, &[u8])>,
    ) -> Result<()> {
        let me = self.me;
        let w = self.word(self.coll.layout.push_receipt((seq & 1) as usize, me));
        for &to in nodes.leaders.iter().filter(|&&j| j != me) {
            self.put_and_set(self.pe(to), data, w, tag_of(seq) | state as u64)?;
        }
        Ok(())
    }

    /// The waiting half of [`Call::exchange_leaders`]: `state` folded with
    /// the other leaders' states of call `seq`.
    pub(crate) fn gather_leaders(&self, nodes: &Nodes, seq: u64, state: u32) -> Result<u32> {
        let parity = (seq & 1) as usize;
        let receipt = |j| self.coll.layout.push_receipt(parity, j);
        let others: SmallVec<[usize; 8]> = nodes
            .leaders
            .iter()
            .copied()
            .filter(|&j| j != self.me)
            .collect();
        self.gather_from(&others, receipt, tag_of(seq), state)
    }

    /// Waits until word `word(j)` of this PE carries `tag` for each of team
    /// PEs `from` (ascending; `word` increasing); returns `value` folded
    /// with their fingerprints ([`Call::gather_words`]).
    fn gather_from(
        &self,
        from: &[usize],
        word: impl Fn(usize) -> usize,
        tag: u64,
        value: u32,
    ) -> Result<u32> {
        self.gather_words(from.len(), |k| word(from[k]), tag, value)
    }

    /// A small collective folded into the two-level handshake of call
    /// `seq`: the contributions gather in each leader's fold buffer of the
    /// call's parity (node by node, [`Nodes::pos`]), members storing theirs
    /// before they arrive; each leader sends its node's range to every
    /// other leader with its signal (one network trip between two nodes),
    /// then releases its node; every PE computes the result from its
    /// leader's buffer. Returns the agreed state and, unless it is a
    /// mismatch or invalid arguments, the result in `out`. With `early`
    /// (a broadcast's root), this PE does not wait for the others: a
    /// member stores its data and arrival and returns, a leader sends to
    /// the other leaders, gathers its node and releases it with its node's
    /// agreed state; the rest waits for its next call ([`Owed`]). Such a
    /// leader sends before it gathers its node (its own state, not its
    /// node's: a member of its node whose call differs fails with the root,
    /// in the call, and the other nodes do not see it) unless its last call
    /// on the team left its node's members reading its fold buffer
    /// (`TeamState::locals_read_fold`); then it
    /// gathers first and sends its node's state.
    ///
    /// Reuse: a PE writes the buffer of parity `p` at call `s + 2` only
    /// after call `s + 1` showed that everyone who reads it had finished
    /// call `s`: a member writes its slot after the release of `s + 1`,
    /// which needs every member of its node past `s`; a leader's range
    /// reaches another leader after that one's signal of `s + 1`, sent once
    /// its node was past `s`, or, by a root that sent first, once its node
    /// had stopped reading its buffer of `s` (call `s` was not a folded
    /// call that its members read from it). The leaders' signal words are the
    /// published-broadcast receipts (by parity and sender), which only
    /// teams on one node use.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn fold_nodes(
        &mut self,
        nodes: &Nodes,
        seq: u64,
        value: u32,
        early: bool,
        contrib: Contrib<'_>,
        result_len: usize,
        finish: Finish<'_>,
        out: &mut FoldBuf,
    ) -> Result<u32> {
        let tag = tag_of(seq);
        let parity = (seq & 1) as usize;
        let (me, n, b) = (self.me, self.n, contrib.each);
        let buf = self
            .fold_area()
            .slice(parity * HALF..parity * HALF + n * b)?;
        let release = self.word(self.coll.layout.release());
        let leader = self.pe(nodes.leader);
        let at = |j: usize| buf.offset() + nodes.pos[j] * b;
        if !contrib.mine.is_empty() {
            self.mapped_write(leader, at(me), contrib.mine)?;
        }
        // A broadcast's root that leads its node releases its node before
        // it has heard from the other leaders (`early`), while a leader
        // whose call differs (another collective, another size) may still
        // be writing into this buffer: its members copy the root's data
        // from the published-broadcast area instead, which only this PE
        // writes on a team across nodes (rewritten two calls later, after
        // its members arrived at the call between).
        if contrib.only == Some(me) && nodes.leader == me && !contrib.mine.is_empty() {
            self.mapped_write(leader, self.push_area(parity), contrib.mine)?;
        }
        let state = if nodes.leader != me {
            let w = self.word(self.coll.layout.linear(me));
            self.set_word(leader, w, tag | value as u64)?;
            if early {
                self.owe(Owed::Release { seq, value });
                value
            } else {
                self.wait_tagged_on(leader, release, tag)?
            }
        } else {
            // A root that leads its node sends its bytes to the other
            // leaders before its node has arrived, unless its members may
            // still be reading its fold buffer of the call before (the
            // other leaders take this signal as leave to write the parity
            // of that call two calls later). The message then carries the
            // root's own state: a member of its node whose call differs
            // fails, and so does the root (below), but not the other
            // nodes, whose calls matched the root's.
            let sent_first = early && !self.state.locals_read_fold;
            self.state.locals_read_fold = !nodes.locals.is_empty() && contrib.only != Some(me);
            if sent_first {
                let at_root = nodes.pos[me] * b;
                let dst = buf.slice(at_root..at_root + b)?;
                self.send_leaders(nodes, seq, value, Some((dst, contrib.mine)))?;
            }
            let linear = |j| self.coll.layout.linear(j);
            let mut state = self.gather_from(&nodes.locals, linear, tag, value)?;
            // What this node can be released with before this leader sends
            // (its members need nothing from the sends): an early root's
            // node that agreed with it, or every node's agreed state when
            // the other leaders have all arrived already.
            let before = if sent_first {
                None
            } else if early {
                (state == value).then_some(state)
            } else {
                self.leaders_arrived(nodes, seq, state)?
            };
            if let (Some(agreed), false) = (before, nodes.locals.is_empty()) {
                self.set_word(self.pe(me), release, tag | agreed as u64)?;
            }
            if !sent_first {
                // This node's contributions: its whole range, or only the
                // root's slot when one member contributes.
                let rank = nodes.leaders.iter().position(|&j| j == me).unwrap_or(0);
                let (first, len) = nodes.spans[rank];
                let range = match contrib.only {
                    Some(r) if (first..first + len).contains(&nodes.pos[r]) => {
                        Some((nodes.pos[r] * b, b))
                    }
                    Some(_) => None,
                    None => Some((first * b, len * b)),
                };
                let data = match range {
                    // The root's own bytes, not its slot read back.
                    Some((off, len)) if len > 0 && state == value && contrib.only == Some(me) => {
                        Some((buf.slice(off..off + len)?, contrib.mine))
                    }
                    Some((off, len)) if len > 0 && state == value => {
                        let dst = buf.slice(off..off + len)?;
                        // SAFETY: this node's slots of this PE's own buffer,
                        // written by its members before they arrived (seen
                        // above) and not again before this call's release.
                        let bytes = unsafe { self.mapped_bytes(self.pe(me), dst.offset(), len)? };
                        Some((dst, bytes))
                    }
                    _ => None,
                };
                self.send_leaders(nodes, seq, state, data)?;
            }
            if early && state == value {
                // The node agreed with its root; the other nodes' states
                // matter to the root only (see [`Owed`]).
                self.owe(Owed::Leaders { seq, value });
            } else if let Some(agreed) = before {
                state = agreed;
            } else {
                state = self.gather_leaders(nodes, seq, state)?;
            }
            if before.is_none() && !nodes.locals.is_empty() {
                self.set_word(self.pe(me), release, tag | state as u64)?;
            }
            state
        };
        if state == MISMATCH || state == BAD_ARGS {
            return Ok(state);
        }
        let parts: SmallVec<[&[u8]; 8]> = match contrib.only {
            Some(r) => {
                let root_part: &[u8] = if early {
                    // The root has not waited for anyone: its own bytes.
                    contrib.mine
                } else if r == nodes.leader {
                    // SAFETY: the root wrote its bytes into its published-
                    // broadcast area before releasing this PE (seen above)
                    // and rewrites them two calls later, after this PE
                    // arrived at the next one.
                    unsafe { self.mapped_bytes(leader, self.push_area(parity), b)? }
                } else {
                    // SAFETY: the root's slot of the leader's buffer, written
                    // before the signals seen above and not rewritten before
                    // this PE's next call (see the reuse argument above).
                    unsafe { self.mapped_bytes(leader, at(r), b)? }
                };
                (0..n)
                    .map(|j| if j == r { root_part } else { &[][..] })
                    .collect()
            }
            None => {
                // SAFETY: every contribution landed in the leader's buffer
                // before the signals seen above, and none is rewritten
                // before this PE's next call (see the reuse argument above).
                let slots = unsafe { self.mapped_bytes(leader, buf.offset(), n * b)? };
                (0..n)
                    .map(|j| &slots[nodes.pos[j] * b..(nodes.pos[j] + 1) * b])
                    .collect()
            }
        };
        out.clear();
        out.resize(result_len, 0);
        finish(&parts, out)?;
        Ok(state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_group_by_node_with_the_first_leading() {
        // World PEs 0..6 on nodes 0,0,0,1,1,2; a team of all of them.
        let node_of = [0, 0, 0, 1, 1, 2];
        let members: Vec<PeId> = (0..6).collect();
        let lead = Nodes::of(&members, 0, &node_of, 8).expect("spans nodes");
        assert_eq!(lead.leader, 0);
        assert_eq!(lead.locals, vec![1, 2]);
        assert_eq!(lead.leaders, vec![0, 3, 5]);
        assert_eq!(lead.pos, vec![0, 1, 2, 3, 4, 5]);
        assert_eq!(lead.spans, vec![(0, 3), (3, 2), (5, 1)]);
        let member = Nodes::of(&members, 4, &node_of, 8).expect("spans nodes");
        assert_eq!(member.leader, 3);
        assert!(member.locals.is_empty());
        let alone = Nodes::of(&members, 5, &node_of, 8).expect("spans nodes");
        assert_eq!(alone.leader, 5);
        assert!(alone.locals.is_empty());
    }

    #[test]
    fn interleaved_members_lead_by_team_order() {
        // A strided team over PEs on alternating nodes.
        let node_of = [0, 1, 0, 1, 0, 1];
        let members: Vec<PeId> = vec![5, 0, 3, 2];
        let n = Nodes::of(&members, 0, &node_of, 8).expect("spans nodes");
        assert_eq!(n.leader, 0);
        assert_eq!(n.locals, vec![2]);
        assert_eq!(n.leaders, vec![0, 1]);
        // Node 1 (team PEs 0, 2) first, then node 0 (team PEs 1, 3).
        assert_eq!(n.pos, vec![0, 2, 1, 3]);
        assert_eq!(n.spans, vec![(0, 2), (2, 2)]);
        let m = Nodes::of(&members, 3, &node_of, 8).expect("spans nodes");
        assert_eq!(m.leader, 1);
    }

    #[test]
    fn one_level_teams_are_not_grouped() {
        let node_of = [0, 0, 1, 1];
        // One node.
        assert!(Nodes::of(&[0, 1], 0, &node_of, 8).is_none());
        // One PE on each of two nodes.
        assert!(Nodes::of(&[1, 2], 1, &node_of, 8).is_none());
        // A PE outside the job.
        assert!(Nodes::of(&[0, 9], 0, &node_of, 8).is_none());
    }

    #[test]
    fn one_pe_per_node_leads_itself_up_to_the_all_to_all_limit() {
        let node_of = [0, 1, 2, 3];
        let members: Vec<PeId> = (0..4).collect();
        let n = Nodes::of(&members, 2, &node_of, 8).expect("four nodes");
        assert_eq!(n.leader, 2);
        assert!(n.locals.is_empty());
        assert_eq!(n.leaders, vec![0, 1, 2, 3]);
        assert!(n.alltoall);
        // Past the limit the flat handshake is the leaders' dissemination.
        assert!(Nodes::of(&members, 2, &node_of, 3).is_none());
    }

    #[test]
    fn many_leaders_disseminate() {
        let node_of = [0, 0, 1, 1, 2, 2];
        let members: Vec<PeId> = (0..6).collect();
        let n = Nodes::of(&members, 1, &node_of, 2).expect("three nodes");
        assert_eq!(n.leader, 0);
        assert!(!n.alltoall);
        assert!(
            Nodes::of(&members, 1, &node_of, 3)
                .expect("three nodes")
                .alltoall
        );
    }
}
