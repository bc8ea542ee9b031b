//! Memory outside the heap that the PEs exposed
//! ([`Transport::expose_memory`](shmem_core::Transport::expose_memory): the
//! C ABI's static data), as both providers keep it: this PE's own regions,
//! and every PE's as the runtime's allgather handed them over.

use std::sync::RwLock;

use serde::{Deserialize, Serialize};
use shmem_core::{Error, PeId, Result};

/// A region of a PE's memory outside its heap, registered by that PE for
/// the others' reads, writes and atomics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExposedRegion {
    /// Virtual address of its first byte on its PE.
    pub start: u64,
    /// Bytes.
    pub len: u64,
    /// Its key (the provider's remote key, or the `sw` request key).
    pub key: u64,
}

impl ExposedRegion {
    /// Whether `[addr, addr + len)` lies inside the region.
    pub fn holds(&self, addr: u64, len: u64) -> bool {
        addr >= self.start
            && addr
                .checked_add(len)
                .is_some_and(|end| end <= self.start.saturating_add(self.len))
    }
}

/// Regions, per PE (index: PE) or this PE's own (one list).
#[derive(Debug, Default)]
pub(crate) struct Regions(RwLock<Vec<Vec<ExposedRegion>>>);

impl Regions {
    /// The card of `regions` for [`Regions::learn`] (empty for none).
    pub(crate) fn card(regions: &[ExposedRegion]) -> Vec<u8> {
        if regions.is_empty() {
            return Vec::new();
        }
        shmem_core::wire::encode(regions)
    }

    /// Adds every PE's regions from its card (index: PE; empty: none).
    pub(crate) fn learn(&self, cards: &[&[u8]]) -> Result<()> {
        let mut learnt = Vec::with_capacity(cards.len());
        for (pe, c) in cards.iter().enumerate() {
            learnt.push(if c.is_empty() {
                Vec::new()
            } else {
                shmem_core::wire::decode::<Vec<ExposedRegion>>("exposed regions", c).map_err(
                    |e| Error::Transport {
                        engine: crate::NAME,
                        reason: format!("PE {pe} sent a bad list of exposed regions: {e}"),
                    },
                )?
            });
        }
        let mut all = self.0.write().unwrap_or_else(|e| e.into_inner());
        let n = learnt.len().max(all.len());
        all.resize(n, Vec::new());
        for (mine, theirs) in all.iter_mut().zip(learnt) {
            mine.extend(theirs);
        }
        Ok(())
    }

    /// Adds `region` to the list of PE `pe` (this PE's own list: 0).
    pub(crate) fn add(&self, pe: PeId, region: ExposedRegion) {
        let mut all = self.0.write().unwrap_or_else(|e| e.into_inner());
        if all.len() <= pe {
            all.resize(pe + 1, Vec::new());
        }
        all[pe].push(region);
    }

    /// The region of `pe` that holds `len` bytes at `addr`, if any.
    pub(crate) fn holding(&self, pe: PeId, addr: u64, len: u64) -> Option<ExposedRegion> {
        let all = self.0.read().unwrap_or_else(|e| e.into_inner());
        all.get(pe)?.iter().find(|r| r.holds(addr, len)).copied()
    }

    /// The region of `pe` with key `key`, if any.
    pub(crate) fn keyed(&self, pe: PeId, key: u64) -> Option<ExposedRegion> {
        let all = self.0.read().unwrap_or_else(|e| e.into_inner());
        all.get(pe)?.iter().find(|r| r.key == key).copied()
    }

    /// Every key of `pe`'s regions.
    pub(crate) fn keys(&self, pe: PeId) -> Vec<u64> {
        let all = self.0.read().unwrap_or_else(|e| e.into_inner());
        all.get(pe)
            .map_or_else(Vec::new, |rs| rs.iter().map(|r| r.key).collect())
    }

    /// [`Regions::holding`], or the error a transfer outside them gets.
    pub(crate) fn find(&self, pe: PeId, addr: usize, len: usize) -> Result<ExposedRegion> {
        self.holding(pe, addr as u64, len as u64).ok_or_else(|| {
            Error::Unsupported(format!(
                "PE {pe}'s {len} bytes at {addr:#x} are outside the symmetric heap and \
                 outside what PE {pe} exposed"
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_are_learnt_per_pe_and_found_by_range_and_key() {
        let r = |start, len, key| ExposedRegion { start, len, key };
        let all = Regions::default();
        let one = Regions::card(&[r(0x1000, 64, 7), r(0x8000, 16, 8)]);
        all.learn(&[&[], &one]).unwrap();
        assert_eq!(all.holding(1, 0x1000, 64), Some(r(0x1000, 64, 7)));
        assert_eq!(all.holding(1, 0x1038, 8), Some(r(0x1000, 64, 7)));
        assert_eq!(all.holding(1, 0x1039, 8), None);
        assert_eq!(all.holding(1, u64::MAX - 2, 8), None);
        assert_eq!(all.holding(0, 0x1000, 8), None);
        assert_eq!(all.keyed(1, 8), Some(r(0x8000, 16, 8)));
        assert_eq!(all.keys(1), vec![7, 8]);
        assert!(all
            .find(2, 0x1000, 8)
            .unwrap_err()
            .to_string()
            .contains("outside what PE 2"));
        // A second exposure adds to the first.
        all.learn(&[&Regions::card(&[r(0x40, 8, 9)]), &[]]).unwrap();
        assert_eq!(all.keys(0), vec![9]);
        assert_eq!(all.keys(1), vec![7, 8]);
        assert!(all.learn(&[&[1, 2, 3]]).is_err());
        all.add(3, r(0x10, 8, 1));
        assert_eq!(all.keyed(3, 1), Some(r(0x10, 8, 1)));
    }
}
