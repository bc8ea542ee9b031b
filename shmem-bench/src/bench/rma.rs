//! Put and get, blocking and non-blocking, PE 0 to PE 1; and the memcpy
//! reference they are held against.

use crate::cli::Bench;
use crate::error::Result;
use crate::measure::{Ctx, Scope};
use crate::report::{RefKind, Reference, Row};
use crate::tcp::TcpKind;

use super::{row, size_label};

/// put, get, put-nbi, get-nbi: PE 0 moves `size` bytes to or from PE 1.
pub fn data_movement(ctx: &mut Ctx<'_>, bench: Bench) -> Result<Vec<Row>> {
    let pe = ctx.pe;
    let me = ctx.me;
    let sizes = ctx.opts.sizes_for(bench);
    let max = sizes.iter().copied().max().unwrap_or(8);
    let sym = pe.malloc::<u8>(max)?;
    let mut local = vec![0x5au8; if me == 0 { max } else { 0 }];
    let peer = 1;
    let mut rows = Vec::new();
    for size in sizes {
        let m = ctx.measure(Scope::Pair, |batch| {
            if me != 0 {
                return Ok(());
            }
            let remote = sym.slice(..size)?;
            let buf = &mut local[..size];
            match bench {
                Bench::Put => (0..batch).try_for_each(|_| pe.put(remote, buf, peer)),
                Bench::Get => (0..batch).try_for_each(|_| pe.get(buf, remote, peer)),
                Bench::PutNbi => {
                    for _ in 0..batch {
                        // SAFETY: `local` outlives the quiet below and is
                        // not written until it returns.
                        unsafe { pe.put_nbi(remote, buf, peer)? };
                    }
                    pe.quiet()
                }
                _ => {
                    for _ in 0..batch {
                        // SAFETY: `local` outlives the quiet below and is
                        // neither read nor written by us until it returns
                        // (the gets may land in it in any order: it is
                        // scratch space).
                        unsafe { pe.get_nbi(buf, remote, peer)? };
                    }
                    pe.quiet()
                }
            }
        })?;
        ctx.progress(bench.name(), &size_label(size), &m);
        let memcpy = ctx.memcpy_us(size)?;
        let mut refs = vec![Reference::new(
            RefKind::MemcpyBandwidth,
            m.stats.median_us,
            memcpy,
        )];
        if let Some(t) = ctx.tcp_us(TcpKind::Stream, size)? {
            refs.push(Reference::new(RefKind::TcpBandwidth, m.stats.median_us, t));
        }
        rows.push(row(size_label(size), size, size, &m, refs));
    }
    pe.free(sym)?;
    Ok(rows)
}

/// The memcpy reference as a benchmark of its own.
pub fn memcpy(ctx: &mut Ctx<'_>) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for size in ctx.opts.sizes_for(Bench::Memcpy) {
        let m = ctx.memcpy_measure(size)?;
        rows.push(row(size_label(size), size, size, &m, Vec::new()));
    }
    Ok(rows)
}
