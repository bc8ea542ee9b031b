//! Broadcast: the root's `source` lands in every member's `dest` (the
//! root's included), directly or down a binomial tree.

use shmem_core::{as_bytes, Element, Error, Result, SymSlice};

use crate::collectives::{byte_len, check_disjoint, check_sym, local_copy, Call, Desc};
use crate::fold::Contrib;
use crate::{BroadcastAlgorithm, Collectives, Team};

impl Collectives {
    /// Copies `nelems` elements of `source` on team PE `root` into `dest` on
    /// every member of `team` (`shmem_broadcast`). `source` is read only on
    /// the root; on the root `dest` may be `source` itself. Every member must
    /// pass the same `root` and `nelems`.
    ///
    /// On a team whose PEs map each other's heaps (one node, load/store
    /// engines) the root publishes and the members copy (as OpenSHMEM
    /// allows: `dest` must be ready on every member before any PE calls):
    /// up to 2 KiB the root copies the data into a buffer of its own and
    /// returns without waiting; above, the members copy from the root's
    /// `source` and the root waits for them. Across nodes, or with an
    /// algorithm forced (`SHMEM_BROADCAST_ALGORITHM=direct` or
    /// `binomial`), the call opens with the argument handshake like every
    /// collective, so mismatches fail on every PE before data moves. A
    /// small broadcast (the team's contributions fit 2 KiB) across nodes,
    /// or on a team of two PEs in a job whose PEs do not all map each
    /// other, carries its data on that handshake, and its root returns
    /// once its data is on its way: the root checks the others' calls when
    /// its next call on the team opens.
    ///
    /// # Errors
    /// As every collective (see [Errors](Collectives#errors)); [`Error::PeOutOfRange`]
    /// for a `root` outside the team. A published broadcast fails with
    /// [`Error::CollectiveMismatch`] on each member whose call differs from
    /// its root's (nothing is copied), and on a root one of whose members
    /// differed: in the call for a large broadcast, at the root's next call
    /// on the team for a small one, or at the call after when the next is
    /// another small broadcast from the same root (the failing call, when
    /// it opens with a plain handshake, then fails on its other members
    /// too; a small collective that rides on its handshake completes on
    /// every PE and fails on the root only).
    /// The same holds for a small broadcast across nodes (whose root does
    /// not wait either): its members fail in the call, its root at its next
    /// call on the team (as above), and PEs that each
    /// named themselves the root at their next calls. A root that leads
    /// its node may send its data to the other nodes before its own node
    /// has arrived; when a PE of its node then differs, that PE and the
    /// root fail in the call, and the other nodes' PEs, whose calls
    /// matched the root's, complete with its data.
    #[track_caller]
    pub fn broadcast<T: Element>(
        &self,
        team: &Team,
        dest: impl Into<SymSlice<T>>,
        source: impl Into<SymSlice<T>>,
        nelems: usize,
        root: usize,
    ) -> Result<()> {
        let (dest, source) = (dest.into(), source.into());
        let rt = &self.rt;
        let n = team.n_pes();
        let is_root = team.my_pe() == root;
        let local = (|| {
            if root >= n {
                return Err(Error::PeOutOfRange { pe: root, n_pes: n });
            }
            byte_len::<T>(nelems)?;
            check_sym(rt, "dest", &dest, nelems)?;
            if is_root {
                check_sym(rt, "source", &source, nelems)?;
                check_disjoint(&dest, nelems, &source, nelems, true)?;
            }
            Ok(())
        })();
        let algo = self
            .algorithms
            .broadcast(n, nelems.saturating_mul(std::mem::size_of::<T>()));
        let desc = Desc::new("broadcast")
            .with_type::<T>()
            .with(nelems as u64)
            .with(root as u64)
            .with(algo as u64);
        let describe = || format!("root {root}, {nelems} x {}", std::any::type_name::<T>());
        let bytes = nelems.saturating_mul(std::mem::size_of::<T>());
        if self.publishes(n) {
            return self
                .publish_broadcast(team, dest, source, nelems, root, desc, local, &describe);
        }
        let plan = self
            .algorithms
            .broadcast
            .is_none()
            .then(|| Call::fold_plan(self, team, bytes, bytes))
            .flatten();
        if let Some(plan) = plan {
            // Small: the root's data rides on the handshake; the others
            // send only their signal.
            let mine: &[u8] = match (&local, is_root) {
                // SAFETY: this PE's own source, in the heap (checked); a
                // collective's source is not written during the call.
                (Ok(()), true) => as_bytes(unsafe { rt.local_slice(source.slice(..nelems)?)? }),
                _ => &[],
            };
            let finish = |parts: &[&[u8]], out: &mut [u8]| -> Result<()> {
                out.copy_from_slice(parts[root]);
                Ok(())
            };
            let contrib = Contrib {
                mine,
                each: bytes,
                only: Some(root),
            };
            return self.fold_to_dest(
                plan,
                team,
                "broadcast",
                desc,
                local,
                &describe,
                contrib,
                &finish,
                dest,
                nelems,
            );
        }
        let mut call = self.begin(team, "broadcast", desc, local, &describe)?;
        if nelems == 0 {
            return Ok(());
        }
        let dest = dest.slice(..nelems)?;
        let (me, n) = (call.me, call.n);
        // The root sends from `source`; everyone else from its own dest,
        // once the data has arrived.
        let from = if is_root {
            local_copy(rt, dest, source.slice(..nelems)?)?;
            source.slice(..nelems)?
        } else {
            dest
        };
        match algo {
            BroadcastAlgorithm::Direct => {
                if is_root {
                    // SAFETY: the root's source is not a target of this call.
                    let src = unsafe { rt.local_slice(from)? };
                    for s in 1..n {
                        call.put_data((me + s) % n, dest, src)?;
                    }
                } else {
                    call.wait_data(root, 1)?;
                }
            }
            BroadcastAlgorithm::Binomial => {
                // Virtual rank v: the root is 0; v's parent clears v's lowest
                // set bit; its children are v + 2^k for 2^k below that bit.
                let v = (me + n - root) % n;
                let mut mask = 1;
                while mask < n {
                    if v & mask != 0 {
                        call.wait_data((v - mask + root) % n, 1)?;
                        break;
                    }
                    mask <<= 1;
                }
                // SAFETY: `from` is the root's source or this PE's dest after
                // its parent's single put has arrived; nothing writes it now.
                let src = unsafe { rt.local_slice(from)? };
                mask >>= 1;
                while mask > 0 {
                    if v + mask < n {
                        call.put_data((v + mask + root) % n, dest, src)?;
                    }
                    mask >>= 1;
                }
            }
        }
        Ok(())
    }
}
