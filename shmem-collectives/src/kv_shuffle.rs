//! KV-cache shuffle: paired PEs copy paged K and V cache blocks from the
//! sender's cache into the receiver's, as one library call.

use shmem_core::{Element, Error, Result, SymSlice};

use crate::collectives::{check_sym, mul, Desc};
use crate::Collectives;

/// Shape of a paged KV cache: `[blocks, kv_heads, page_size, head_dim]`
/// elements, one block contiguous.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvCacheLayout {
    /// Number of blocks (pages) in the cache.
    pub blocks: usize,
    /// KV heads per block.
    pub kv_heads: usize,
    /// Tokens per block.
    pub page_size: usize,
    /// Elements per head and token.
    pub head_dim: usize,
}

impl KvCacheLayout {
    /// Elements in one block.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the product overflows `usize`.
    pub fn block_elems(&self) -> Result<usize> {
        mul(
            "kv_heads * page_size * head_dim",
            mul("kv_heads * page_size", self.kv_heads, self.page_size)?,
            self.head_dim,
        )
    }

    /// Elements in the whole cache.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the product overflows `usize`.
    pub fn cache_elems(&self) -> Result<usize> {
        mul("blocks", self.blocks, self.block_elems()?)
    }
}

/// The role of a PE in a shuffle table row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvRole {
    /// Not paired: does nothing.
    Idle,
    /// Sends its blocks to the paired PE.
    Send(usize),
    /// Receives blocks from the paired PE.
    Receive(usize),
}

/// Checks that `table` (one `[pair_pe, op]` row per PE, op 0 = send,
/// 1 = receive; a negative `pair_pe` or the PE itself = not paired) pairs
/// PEs symmetrically, and returns every PE's role.
///
/// # Errors
/// [`Error::InvalidArgument`] naming `shuffle_table` when it does not have `n_pes`
/// rows, pairs a PE with one outside `0..n_pes`, pairs PEs asymmetrically, or gives a
/// pair other than one sender (0) and one receiver (1).
pub fn kv_shuffle_roles(table: &[[i64; 2]], n_pes: usize) -> Result<Vec<KvRole>> {
    if table.len() != n_pes {
        return Err(Error::invalid(
            "shuffle_table",
            format!(
                "has {} rows, the job has {n_pes} PEs (one [pair_pe, op] row per PE)",
                table.len()
            ),
        ));
    }
    let pair_of = |i: usize| -> Result<Option<usize>> {
        let p = table[i][0];
        if p < 0 || p as u64 == i as u64 {
            return Ok(None);
        }
        if p as u64 >= n_pes as u64 {
            return Err(Error::invalid(
                "shuffle_table",
                format!("row {i} pairs PE {i} with PE {p}, outside 0..{n_pes}"),
            ));
        }
        Ok(Some(p as usize))
    };
    let mut roles = Vec::with_capacity(n_pes);
    for i in 0..n_pes {
        let Some(p) = pair_of(i)? else {
            roles.push(KvRole::Idle);
            continue;
        };
        if pair_of(p)? != Some(i) {
            return Err(Error::invalid(
                "shuffle_table",
                format!(
                    "row {i} pairs PE {i} with PE {p}, but row {p} pairs PE {p} with {}",
                    table[p][0]
                ),
            ));
        }
        let (op, their) = (table[i][1], table[p][1]);
        let role = match (op, their) {
            (0, 1) => KvRole::Send(p),
            (1, 0) => KvRole::Receive(p),
            _ => {
                return Err(Error::invalid(
                    "shuffle_table",
                    format!(
                        "PEs {i} and {p} have ops {op} and {their}; a pair needs one sender (0) and one receiver (1)"
                    ),
                ))
            }
        };
        roles.push(role);
    }
    Ok(roles)
}

impl Collectives {
    /// KV-cache shuffle over all PEs (every PE calls it with the same
    /// `shuffle_table` and cache layout). For each `i`, a sender copies its
    /// block `src_block_table[i]` of `key_cache` and `value_cache` into
    /// block `dst_block_table[i]` of its receiver's caches: the data first,
    /// then the receiver's arrival flag (a put with signal), which the
    /// receiver waits for before returning. It is a copy: the sender's
    /// blocks are unchanged. Unpaired PEs only take part in the handshake.
    /// Only senders read the block tables. An asymmetric table, or tables
    /// and layouts that differ across PEs, are errors on every PE.
    ///
    /// # Errors
    /// As every collective (see [Errors](Collectives#errors));
    /// [`Error::InvalidArgument`] for a table that [`kv_shuffle_roles`] rejects, caches
    /// smaller than `layout`, or (on a sender) block tables of different lengths or
    /// with a block outside `0..layout.blocks`.
    #[allow(clippy::too_many_arguments)]
    #[track_caller]
    pub fn kv_shuffle<T: Element>(
        &self,
        shuffle_table: &[[i64; 2]],
        key_cache: impl Into<SymSlice<T>>,
        value_cache: impl Into<SymSlice<T>>,
        layout: KvCacheLayout,
        src_block_table: &[i64],
        dst_block_table: &[i64],
    ) -> Result<()> {
        let (key_cache, value_cache) = (key_cache.into(), value_cache.into());
        let rt = &self.rt;
        let team = &self.world_ref();
        let me = rt.my_pe();
        let (role, table_error) = match kv_shuffle_roles(shuffle_table, rt.n_pes()) {
            Ok(roles) => (roles[me], None),
            Err(e) => (KvRole::Idle, Some(e)),
        };
        let local = (|| {
            if let Some(e) = table_error {
                return Err(e);
            }
            let elems = layout.cache_elems()?;
            check_sym(rt, "key_cache", &key_cache, elems)?;
            check_sym(rt, "value_cache", &value_cache, elems)?;
            if let KvRole::Send(_) = role {
                if src_block_table.len() != dst_block_table.len() {
                    return Err(Error::invalid(
                        "dst_block_table",
                        format!(
                            "has {} entries, src_block_table has {}",
                            dst_block_table.len(),
                            src_block_table.len()
                        ),
                    ));
                }
                for (name, t) in [
                    ("src_block_table", src_block_table),
                    ("dst_block_table", dst_block_table),
                ] {
                    if let Some((i, b)) = t
                        .iter()
                        .enumerate()
                        .find(|(_, &b)| b < 0 || b as u64 >= layout.blocks as u64)
                    {
                        return Err(Error::invalid(
                            name,
                            format!(
                                "entry {i} is block {b}, outside 0..{} (PE {me})",
                                layout.blocks
                            ),
                        ));
                    }
                }
            }
            Ok(())
        })();
        let mut desc = Desc::new("kv_shuffle")
            .with_type::<T>()
            .with(layout.blocks as u64)
            .with(layout.kv_heads as u64)
            .with(layout.page_size as u64)
            .with(layout.head_dim as u64);
        for row in shuffle_table {
            desc = desc.with(row[0] as u64).with(row[1] as u64);
        }
        let describe = || {
            format!(
                "a {}-row shuffle table and layout {layout:?}",
                shuffle_table.len()
            )
        };
        let mut call = self.begin(team, "kv_shuffle", desc, local, &describe)?;
        match role {
            KvRole::Idle => Ok(()),
            KvRole::Receive(from) => call.wait_data(from, 1),
            KvRole::Send(to) => {
                let be = layout.block_elems()?;
                let pe = call.pe(to);
                let blk = |b: i64| b as usize * be..(b as usize + 1) * be;
                let count = src_block_table.len();
                for i in 0..count {
                    let (s, d) = (blk(src_block_table[i]), blk(dst_block_table[i]));
                    for (c, last) in [(key_cache, false), (value_cache, true)] {
                        // SAFETY: a sender's caches are not written by anyone
                        // during the call (it is nobody's receiver).
                        let src = unsafe { rt.local_slice(c.slice(s.clone())?)? };
                        if last && i + 1 == count {
                            // Earlier blocks must be visible before the flag.
                            rt.fence()?;
                            call.put_data(to, c.slice(d.clone())?, src)?;
                        } else {
                            rt.put(c.slice(d.clone())?, src, pe)?;
                        }
                    }
                }
                if count == 0 {
                    call.notify(to)?;
                }
                Ok(())
            }
        }
    }
}
