//! Teams, contexts and collectives (team-based 1.5 forms and the deprecated
//! active-set forms; see [`crate::active`] for how those use `pSync`).
//!
//! Collectives run on the symmetric heap; when an argument is static data
//! it is staged through a heap area the library allocated at init (every PE
//! takes the same path, because static data is symmetric too).

use std::ffi::{c_int, c_long, c_ulong};

use shmem::collectives::{ReduceOp, Reducible, TeamConfig};
use shmem::{Element, Error, Result, SymSlice, Team};

use crate::active::{active_set, ActiveSet, SetCall};
use crate::rma::{bytes, rma_types};
use crate::state::{new_ctx, new_team_handle, Sym};
use crate::sync::export;
use crate::types::{ComplexD, ComplexF, LongDouble};
use crate::{ffi, ffi_status, CtxHandle, State, TeamHandle, TEAM_INVALID, TEAM_WORLD};

/// C's `shmem_team_config_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct TeamConfigC {
    /// Number of contexts the team expects.
    pub num_contexts: c_int,
}

const TEAM_NUM_CONTEXTS: c_long = 1;

fn config_of(config: *const TeamConfigC, mask: c_long) -> Option<TeamConfig> {
    if config.is_null() || mask & TEAM_NUM_CONTEXTS == 0 {
        return None;
    }
    // SAFETY: non-null config from the C caller.
    let c = unsafe { *config };
    Some(TeamConfig {
        num_contexts: c.num_contexts.max(0) as usize,
    })
}

fn set_out<T>(out: *mut T, v: T) {
    if !out.is_null() {
        // SAFETY: non-null output pointer from the C caller.
        unsafe { out.write(v) }
    }
}

fn arg(v: c_int) -> usize {
    // Negative counts become huge, which the collectives reject on every PE.
    if v < 0 {
        usize::MAX / 2
    } else {
        v as usize
    }
}

// ----- teams -------------------------------------------------------------------

export!("shmem_team_my_pe", fn(team: TeamHandle) -> c_int {
    ffi("shmem_team_my_pe", |st| Ok(st.team(team).map_or(-1, |t| t.my_pe() as c_int)))
});
export!("shmem_team_n_pes", fn(team: TeamHandle) -> c_int {
    ffi("shmem_team_n_pes", |st| Ok(st.team(team).map_or(-1, |t| t.n_pes() as c_int)))
});
export!("shmem_team_get_config", fn(team: TeamHandle, mask: c_long, config: *mut TeamConfigC) -> c_int {
    if team == TEAM_INVALID {
        // The standard's answer for an invalid team: nonzero, nothing to report.
        return ffi("shmem_team_get_config", |_| Ok(-1));
    }
    ffi_status("shmem_team_get_config", |st| {
        let t = st.team(team)?;
        if mask & TEAM_NUM_CONTEXTS != 0 && !config.is_null() {
            // SAFETY: non-null output from the C caller.
            unsafe { (*config).num_contexts = t.config().num_contexts as c_int };
        }
        Ok(())
    })
});
export!("shmem_team_translate_pe", fn(src: TeamHandle, pe: c_int, dest: TeamHandle) -> c_int {
    ffi("shmem_team_translate_pe", |st| {
        Ok(match (st.team(src), st.team(dest)) {
            (Ok(s), Ok(d)) if pe >= 0 => s.translate_pe(pe as usize, d).map_or(-1, |p| p as c_int),
            _ => -1,
        })
    })
});
export!("shmem_team_split_strided", fn(parent: TeamHandle, start: c_int, stride: c_int, size: c_int,
        config: *const TeamConfigC, mask: c_long, new_team: *mut TeamHandle) -> c_int {
    set_out(new_team, TEAM_INVALID);
    if parent == TEAM_INVALID {
        // Defined by the standard: no new team and a nonzero return.
        return ffi("shmem_team_split_strided", |_| Ok(-1));
    }
    ffi_status("shmem_team_split_strided", |st| {
        let parent = st.team(parent)?;
        let t = st.coll.team_split_strided(parent, arg(start), stride as isize, arg(size), config_of(config, mask))?;
        set_out(new_team, t.map_or(TEAM_INVALID, new_team_handle));
        Ok(())
    })
});
export!("shmem_team_split_2d", fn(parent: TeamHandle, xrange: c_int,
        xconfig: *const TeamConfigC, xmask: c_long, xteam: *mut TeamHandle,
        yconfig: *const TeamConfigC, ymask: c_long, yteam: *mut TeamHandle) -> c_int {
    set_out(xteam, TEAM_INVALID);
    set_out(yteam, TEAM_INVALID);
    if parent == TEAM_INVALID {
        // Defined by the standard: no new teams and a nonzero return.
        return ffi("shmem_team_split_2d", |_| Ok(-1));
    }
    ffi_status("shmem_team_split_2d", |st| {
        let parent = st.team(parent)?;
        let (x, y) = st.coll.team_split_2d(parent, arg(xrange), config_of(xconfig, xmask), config_of(yconfig, ymask))?;
        set_out(xteam, new_team_handle(x));
        set_out(yteam, new_team_handle(y));
        Ok(())
    })
});
export!("shmem_team_destroy", fn(team: TeamHandle) -> () {
    ffi("shmem_team_destroy", |st| {
        if team == TEAM_INVALID {
            return Ok(());
        }
        let t = st.team(team)?;
        if t.is_world() || t.is_shared() {
            return Err(Error::invalid("team", "SHMEM_TEAM_WORLD and SHMEM_TEAM_SHARED cannot be destroyed"));
        }
        st.coll.team_destroy(t.clone())?;
        st.forget_team(team);
        Ok(())
    })
});

// ----- contexts ----------------------------------------------------------------

export!("shmem_ctx_create", fn(options: c_long, ctx: *mut CtxHandle) -> c_int {
    ffi_status("shmem_ctx_create", |_| {
        set_out(ctx, new_ctx(None, TEAM_WORLD, options));
        Ok(())
    })
});
export!("shmem_team_create_ctx", fn(team: TeamHandle, options: c_long, ctx: *mut CtxHandle) -> c_int {
    set_out(ctx, std::ptr::null_mut());
    if team == TEAM_INVALID {
        return -1; // defined: no context for the invalid team
    }
    ffi_status("shmem_team_create_ctx", |st| {
        let t = st.team(team)?;
        set_out(ctx, new_ctx(Some(t.clone()), team, options));
        Ok(())
    })
});
export!("shmem_ctx_destroy", fn(ctx: CtxHandle) -> () {
    if ctx.is_null() {
        return; // SHMEM_CTX_INVALID: a no-op (OpenSHMEM 1.5)
    }
    ffi("shmem_ctx_destroy", |st| {
        st.rt.quiet()?;
        st.destroy_ctx(ctx)
    })
});
export!("shmem_ctx_get_team", fn(ctx: CtxHandle, team: *mut TeamHandle) -> c_int {
    ffi("shmem_ctx_get_team", |st| {
        if team.is_null() {
            return Ok(-1);
        }
        match st.ctx(ctx) {
            Ok(None) => set_out(team, TEAM_WORLD),
            Ok(Some(c)) => set_out(team, c.team_handle),
            Err(_) => {
                set_out(team, TEAM_INVALID);
                return Ok(-1);
            }
        }
        Ok(0)
    })
});

// ----- synchronisation ---------------------------------------------------------

export!("shmem_barrier_all", fn() -> () {
    ffi("shmem_barrier_all", |st| st.coll.barrier_all())
});
export!("shmem_sync_all", fn() -> () {
    ffi("shmem_sync_all", |st| st.coll.sync_all())
});
export!("shmem_sync", fn(team: TeamHandle) -> c_int {
    ffi("shmem_sync", |st| st.coll.sync(st.team(team)?).map(|_| 0))
});
export!("shmem_team_sync", fn(team: TeamHandle) -> c_int {
    ffi("shmem_team_sync", |st| st.coll.sync(st.team(team)?).map(|_| 0))
});

// ----- staging -------------------------------------------------------------------

impl State {
    /// Runs `f` on heap views of `dest` (`dest_n` elements) and `src`
    /// (`src_n`), staging static data through the library's heap area.
    /// `f` returns how many elements of `dest` it wrote.
    fn staged<T: Element, R>(
        &self,
        dest: *mut T,
        dest_n: usize,
        src: *const T,
        src_n: usize,
        f: impl FnOnce(SymSlice<T>, SymSlice<T>) -> Result<(R, usize)>,
    ) -> Result<R> {
        let inst = self.rt.instance();
        let (db, sb) = (bytes::<T>(dest_n)?, bytes::<T>(src_n)?);
        let d = if db == 0 {
            None
        } else {
            Some(self.locate(dest.cast(), db)?)
        };
        let s = if sb == 0 {
            None
        } else {
            Some(self.locate(src.cast(), sb)?)
        };
        let heap = |x: Option<Sym>| matches!(x, Some(Sym::Heap(_)) | None);
        let (d_staged, s_staged) = (!heap(d), !heap(s));
        if !d_staged && !s_staged {
            let off = |x: Option<Sym>| match x {
                Some(Sym::Heap(o)) => o,
                _ => self.stage.0,
            };
            return f(
                SymSlice::from_raw_parts(off(d), dest_n, inst),
                SymSlice::from_raw_parts(off(s), src_n, inst),
            )
            .map(|r| r.0);
        }
        let _guard = self.stage_lock.lock().unwrap_or_else(|p| p.into_inner());
        let (stage, cap) = self.stage;
        // Fixed halves: the destination sits at the same offset on every PE
        // even when the source sizes differ (broadcast, collect).
        let half = cap / 2 / 64 * 64;
        let (s_off, d_off) = (stage, stage + half);
        // Only a buffer that is copied through the stage must fit it (a heap
        // destination of `collect` is sized by the heap itself).
        if (s_staged && sb > half) || (d_staged && db > half) {
            return Err(Error::invalid(
                "nelems",
                format!(
                    "a collective on global or static variables is staged through {half} bytes of \
                     heap per buffer and needs {}; use shmem_malloc'd buffers for large collectives",
                    if s_staged && sb > half { sb } else { db }
                ),
            ));
        }
        let base = self.rt.heap_base().as_ptr();
        let src_view = match s {
            Some(Sym::Heap(o)) => SymSlice::from_raw_parts(o, src_n, inst),
            _ => {
                // SAFETY: the stage lies in our heap; `src` holds `sb` bytes.
                unsafe { std::ptr::copy_nonoverlapping(src.cast::<u8>(), base.add(s_off), sb) };
                SymSlice::from_raw_parts(s_off, src_n, inst)
            }
        };
        let dest_view = match d {
            Some(Sym::Heap(o)) => SymSlice::from_raw_parts(o, dest_n, inst),
            Some(Sym::Static(..)) => {
                // What the collective does not write (alltoalls' gaps) keeps
                // the destination's contents.
                // SAFETY: `dest` holds `db` bytes of our static data (located
                // above); the stage half holds `db` bytes too (checked).
                unsafe { std::ptr::copy_nonoverlapping(dest.cast::<u8>(), base.add(d_off), db) };
                SymSlice::from_raw_parts(d_off, dest_n, inst)
            }
            None => SymSlice::from_raw_parts(d_off, dest_n, inst),
        };
        let (r, written) = f(dest_view, src_view)?;
        if !matches!(d, Some(Sym::Heap(_)) | None) {
            let n = bytes::<T>(written.min(dest_n))?;
            // SAFETY: the stage holds `n` valid bytes; `dest` is our own static data.
            unsafe { std::ptr::copy(base.add(dest_view.offset()), dest.cast::<u8>(), n) };
        }
        Ok(r)
    }

    fn heap_room<T>(&self, dest: *const T, src: *const T) -> usize {
        // For `collect` the destination's size is not passed; a valid
        // program's destination ends before a source placed after it.
        let (d, s) = (dest as usize, src as usize);
        match self.rt.offset_of(dest.cast()) {
            Some(off) => {
                let end = if s > d && self.rt.offset_of(src.cast()).is_some() {
                    s - d
                } else {
                    self.rt.heap_size() - off
                };
                end / std::mem::size_of::<T>().max(1)
            }
            None => {
                let room = self.statics.room_after(d).unwrap_or(0);
                room.min(self.stage.1 / 2 / 64 * 64) / std::mem::size_of::<T>().max(1)
            }
        }
    }
}

// ----- typed collectives -----------------------------------------------------------

fn broadcast_w<T: Element>(
    st: &State,
    team: &Team,
    dest: *mut T,
    src: *const T,
    n: usize,
    root: c_int,
) -> Result<()> {
    let is_root = team.my_pe() as c_int == root;
    st.staged(dest, n, src, if is_root { n } else { 0 }, |d, s| {
        st.coll.broadcast(team, d, s, n, arg(root)).map(|_| ((), n))
    })
}

fn broadcast_t<T: Element>(
    team: TeamHandle,
    dest: *mut T,
    src: *const T,
    n: usize,
    root: c_int,
) -> c_int {
    ffi("shmem_broadcast", |st| {
        broadcast_w(st, st.team(team)?, dest, src, n, root).map(|_| 0)
    })
}

fn collect_w<T: Element>(
    st: &State,
    team: &Team,
    dest: *mut T,
    src: *const T,
    n: usize,
) -> Result<()> {
    let room = st.heap_room(dest, src);
    st.staged(dest, room, src, n, |d, s| {
        st.coll.collect(team, d, s, n).map(|total| ((), total))
    })
}

fn collect_t<T: Element>(team: TeamHandle, dest: *mut T, src: *const T, n: usize) -> c_int {
    ffi("shmem_collect", |st| {
        collect_w(st, st.team(team)?, dest, src, n).map(|_| 0)
    })
}

fn fcollect_w<T: Element>(
    st: &State,
    team: &Team,
    dest: *mut T,
    src: *const T,
    n: usize,
) -> Result<()> {
    let total = n.saturating_mul(team.n_pes());
    st.staged(dest, total, src, n, |d, s| {
        st.coll.fcollect(team, d, s, n).map(|_| ((), total))
    })
}

fn fcollect_t<T: Element>(team: TeamHandle, dest: *mut T, src: *const T, n: usize) -> c_int {
    ffi("shmem_fcollect", |st| {
        fcollect_w(st, st.team(team)?, dest, src, n).map(|_| 0)
    })
}

fn alltoall_w<T: Element>(
    st: &State,
    team: &Team,
    dest: *mut T,
    src: *const T,
    n: usize,
) -> Result<()> {
    let total = n.saturating_mul(team.n_pes());
    st.staged(dest, total, src, total, |d, s| {
        st.coll.alltoall(team, d, s, n).map(|_| ((), total))
    })
}

fn alltoall_t<T: Element>(team: TeamHandle, dest: *mut T, src: *const T, n: usize) -> c_int {
    ffi("shmem_alltoall", |st| {
        alltoall_w(st, st.team(team)?, dest, src, n).map(|_| 0)
    })
}

/// The elements `0, s, 2s, ...` an alltoalls stride `s` spans for `count`
/// elements (a stride below 1 reads as 0: every element in one place).
fn strided_extent(count: usize, s: usize) -> usize {
    if count == 0 {
        0
    } else {
        (count - 1).saturating_mul(s.max(1)) + 1
    }
}

fn stride_of(s: isize) -> usize {
    if s < 1 {
        0
    } else {
        s as usize
    }
}

fn alltoalls_w<T: Element>(
    st: &State,
    team: &Team,
    dest: *mut T,
    src: *const T,
    dst: isize,
    sst: isize,
    n: usize,
) -> Result<()> {
    let (dst, sst) = (stride_of(dst), stride_of(sst));
    let count = n.saturating_mul(team.n_pes());
    let (dn, sn) = (strided_extent(count, dst), strided_extent(count, sst));
    st.staged(dest, dn, src, sn, |d, s| {
        st.coll.alltoalls(team, d, s, dst, sst, n).map(|_| ((), dn))
    })
}

fn alltoalls_t<T: Element>(
    team: TeamHandle,
    dest: *mut T,
    src: *const T,
    dst: isize,
    sst: isize,
    n: usize,
) -> c_int {
    ffi("shmem_alltoalls", |st| {
        alltoalls_w(st, st.team(team)?, dest, src, dst, sst, n).map(|_| 0)
    })
}

fn reduce_w<T: Reducible>(
    st: &State,
    team: &Team,
    op: ReduceOp,
    dest: *mut T,
    src: *const T,
    n: usize,
) -> Result<()> {
    st.staged(dest, n, src, n, |d, s| {
        st.coll.reduce(team, op, d, s, n).map(|_| ((), n))
    })
}

fn reduce_t<T: Reducible>(
    team: TeamHandle,
    op: ReduceOp,
    dest: *mut T,
    src: *const T,
    n: usize,
) -> c_int {
    ffi("shmem_reduce", |st| {
        reduce_w(st, st.team(team)?, op, dest, src, n).map(|_| 0)
    })
}

macro_rules! typed_coll {
    ($($name:ident : $t:ty),* $(,)?) => { $(
        export!(concat!("shmem_", stringify!($name), "_broadcast"),
            fn(team: TeamHandle, dest: *mut $t, src: *const $t, n: usize, root: c_int) -> c_int {
            broadcast_t(team, dest, src, n, root)
        });
        export!(concat!("shmem_", stringify!($name), "_collect"),
            fn(team: TeamHandle, dest: *mut $t, src: *const $t, n: usize) -> c_int { collect_t(team, dest, src, n) });
        export!(concat!("shmem_", stringify!($name), "_fcollect"),
            fn(team: TeamHandle, dest: *mut $t, src: *const $t, n: usize) -> c_int { fcollect_t(team, dest, src, n) });
        export!(concat!("shmem_", stringify!($name), "_alltoall"),
            fn(team: TeamHandle, dest: *mut $t, src: *const $t, n: usize) -> c_int { alltoall_t(team, dest, src, n) });
        export!(concat!("shmem_", stringify!($name), "_alltoalls"),
            fn(team: TeamHandle, dest: *mut $t, src: *const $t, dst: isize, sst: isize, n: usize) -> c_int {
            alltoalls_t(team, dest, src, dst, sst, n)
        });
    )* };
}
rma_types!(typed_coll);

// `shmem_<T>mem` names differ: `shmem_broadcastmem`, not `shmem_mem_broadcast`.
export!("shmem_broadcastmem", fn(team: TeamHandle, dest: *mut u8, src: *const u8, n: usize, root: c_int) -> c_int {
    broadcast_t(team, dest, src, n, root)
});
export!("shmem_collectmem", fn(team: TeamHandle, dest: *mut u8, src: *const u8, n: usize) -> c_int {
    collect_t(team, dest, src, n)
});
export!("shmem_fcollectmem", fn(team: TeamHandle, dest: *mut u8, src: *const u8, n: usize) -> c_int {
    fcollect_t(team, dest, src, n)
});
export!("shmem_alltoallmem", fn(team: TeamHandle, dest: *mut u8, src: *const u8, n: usize) -> c_int {
    alltoall_t(team, dest, src, n)
});
export!("shmem_alltoallsmem", fn(team: TeamHandle, dest: *mut u8, src: *const u8, dst: isize, sst: isize, n: usize) -> c_int {
    alltoalls_t(team, dest, src, dst, sst, n)
});

macro_rules! typed_reduce {
    ($op:ident, $rop:ident; $($name:ident : $t:ty),* $(,)?) => { $(
        export!(concat!("shmem_", stringify!($name), "_", stringify!($op), "_reduce"),
            fn(team: TeamHandle, dest: *mut $t, src: *const $t, n: usize) -> c_int {
            reduce_t(team, ReduceOp::$rop, dest, src, n)
        });
    )* };
}

macro_rules! bitwise_types {
    ($m:ident, $($pre:tt)*) => {
        $m! { $($pre)*; uchar: u8, ushort: u16, uint: u32, ulong: c_ulong, ulonglong: u64,
              int8: i8, int16: i16, int32: i32, int64: i64, uint8: u8, uint16: u16,
              uint32: u32, uint64: u64, size: usize }
    };
}
macro_rules! arith_types {
    ($m:ident, $($pre:tt)*) => {
        $m! { $($pre)*; char: std::ffi::c_char, schar: i8, short: i16, int: c_int, long: c_long,
              longlong: i64, ptrdiff: isize, uchar: u8, ushort: u16, uint: u32, ulong: c_ulong,
              ulonglong: u64, int8: i8, int16: i16, int32: i32, int64: i64, uint8: u8,
              uint16: u16, uint32: u32, uint64: u64, size: usize, float: f32, double: f64 }
    };
}
bitwise_types!(typed_reduce, and, And);
bitwise_types!(typed_reduce, or, Or);
bitwise_types!(typed_reduce, xor, Xor);
arith_types!(typed_reduce, min, Min);
arith_types!(typed_reduce, max, Max);
arith_types!(typed_reduce, sum, Sum);
arith_types!(typed_reduce, prod, Prod);
typed_reduce!(min, Min; longdouble: LongDouble);
typed_reduce!(max, Max; longdouble: LongDouble);
typed_reduce!(sum, Sum; longdouble: LongDouble, complexf: ComplexF, complexd: ComplexD);
typed_reduce!(prod, Prod; longdouble: LongDouble, complexf: ComplexF, complexd: ComplexD);

// ----- deprecated active-set collectives ---------------------------------------------

/// A collective over the calling PE alone: dest receives its own `n`
/// elements of src, and earlier puts complete as a barrier would make them.
fn only_me<T: Copy>(st: &State, dest: *mut T, src: *const T, n: usize) -> Result<()> {
    st.rt.quiet()?;
    if n == 0 || std::ptr::eq(dest as *const T, src) {
        return Ok(());
    }
    if n > isize::MAX as usize / std::mem::size_of::<T>().max(1) {
        return Err(Error::invalid("nelems", "negative or too large"));
    }
    if dest.is_null() || src.is_null() {
        return Err(Error::invalid(
            "dest/source",
            "null pointer with a non-zero count",
        ));
    }
    // SAFETY: both hold `n` elements (C contract); `copy` allows overlap.
    unsafe { std::ptr::copy(src, dest, n) };
    Ok(())
}

/// [`only_me`] for alltoalls: dest element `j * dst` gets src element
/// `j * sst`, for `j < n`.
fn only_me_strided<T: Copy>(
    st: &State,
    dest: *mut T,
    src: *const T,
    dst: isize,
    sst: isize,
    n: usize,
) -> Result<()> {
    st.rt.quiet()?;
    if n == 0 {
        return Ok(());
    }
    if dest.is_null() || src.is_null() {
        return Err(Error::invalid(
            "dest/source",
            "null pointer with a non-zero count",
        ));
    }
    let (dst, sst) = (stride_of(dst), stride_of(sst));
    for j in 0..n {
        // SAFETY: dest and src span `n` elements at their strides (C contract).
        unsafe { dest.add(j * dst).write(src.add(j * sst).read()) };
    }
    Ok(())
}

export!("shmem_barrier", fn(start: c_int, log_stride: c_int, size: c_int, psync: *mut c_long) -> () {
    ffi("shmem_barrier", |st| match active_set(st, start, log_stride, size)? {
        ActiveSet::All(team) => st.coll.barrier(team),
        ActiveSet::OnlyMe => st.rt.quiet(),
        ActiveSet::Members(m, me) => SetCall::new(st, m, me, psync)?.barrier(),
    })
});

// The deprecated active-set `shmem_sync(PE_start, logPE_stride, PE_size,
// pSync)` (shmem.h picks it by argument count): `shmem_barrier` without
// the quiet.
export!("shmem_sync_deprecated", fn(start: c_int, log_stride: c_int, size: c_int, psync: *mut c_long) -> () {
    ffi("shmem_sync", |st| match active_set(st, start, log_stride, size)? {
        ActiveSet::All(team) => st.coll.sync(team),
        ActiveSet::OnlyMe => Ok(()),
        ActiveSet::Members(m, me) => SetCall::new(st, m, me, psync)?.sync(),
    })
});

/// `shmem_pcontrol(level, ...)`: profiling control, which this library
/// does not act on (the standard lets it ignore the call). The variadic
/// tail is never read, so a plain C function receives the call correctly.
#[no_mangle]
pub extern "C" fn shmem_pcontrol(_level: c_int) {}

#[allow(clippy::too_many_arguments)]
fn old_broadcast<T: Element>(
    dest: *mut T,
    src: *const T,
    n: usize,
    root: c_int,
    start: c_int,
    log_stride: c_int,
    size: c_int,
    psync: *mut c_long,
) {
    ffi("shmem_broadcast32/64", |st| {
        let team = match active_set(st, start, log_stride, size)? {
            ActiveSet::All(team) => team,
            // The root is the only PE, and its dest is left untouched.
            ActiveSet::OnlyMe if root == 0 => return st.rt.quiet(),
            ActiveSet::OnlyMe => {
                return Err(Error::invalid(
                    "PE_root",
                    format!("{root} is not in an active set of 1 PE"),
                ))
            }
            ActiveSet::Members(m, me) => {
                return SetCall::new(st, m, me, psync)?.broadcast(
                    dest.cast(),
                    src.cast(),
                    bytes::<T>(n)?,
                    root,
                )
            }
        };
        // The old interface leaves the root's dest untouched (nothing to
        // keep when it is the source itself, as in OSU's in-place calls).
        let is_root = team.my_pe() as c_int == root;
        let keep: Vec<T> = if is_root && n > 0 && dest.cast_const() != src {
            // SAFETY: the root's dest holds `n` elements (C contract).
            unsafe { std::slice::from_raw_parts(dest, n).to_vec() }
        } else {
            Vec::new()
        };
        broadcast_w(st, team, dest, src, n, root)?;
        if !keep.is_empty() {
            // SAFETY: as above.
            unsafe { std::ptr::copy_nonoverlapping(keep.as_ptr(), dest, n) };
        }
        Ok(())
    })
}

macro_rules! old_sized {
    ($($bits:literal : $t:ty),*) => { $(
        export!(concat!("shmem_broadcast", $bits), fn(dest: *mut $t, src: *const $t, n: usize, root: c_int,
                start: c_int, log_stride: c_int, size: c_int, psync: *mut c_long) -> () {
            old_broadcast(dest, src, n, root, start, log_stride, size, psync)
        });
        export!(concat!("shmem_collect", $bits), fn(dest: *mut $t, src: *const $t, n: usize,
                start: c_int, log_stride: c_int, size: c_int, psync: *mut c_long) -> () {
            ffi("shmem_collect32/64", |st| match active_set(st, start, log_stride, size)? {
                ActiveSet::All(team) => collect_w(st, &team, dest, src, n),
                ActiveSet::OnlyMe => only_me(st, dest, src, n),
                ActiveSet::Members(m, me) => SetCall::new(st, m, me, psync)?
                    .collect(dest.cast(), src.cast(), n, std::mem::size_of::<$t>()),
            })
        });
        export!(concat!("shmem_fcollect", $bits), fn(dest: *mut $t, src: *const $t, n: usize,
                start: c_int, log_stride: c_int, size: c_int, psync: *mut c_long) -> () {
            ffi("shmem_fcollect32/64", |st| match active_set(st, start, log_stride, size)? {
                ActiveSet::All(team) => fcollect_w(st, &team, dest, src, n),
                ActiveSet::OnlyMe => only_me(st, dest, src, n),
                ActiveSet::Members(m, me) => SetCall::new(st, m, me, psync)?
                    .fcollect(dest.cast(), src.cast(), bytes::<$t>(n)?),
            })
        });
        export!(concat!("shmem_alltoall", $bits), fn(dest: *mut $t, src: *const $t, n: usize,
                start: c_int, log_stride: c_int, size: c_int, psync: *mut c_long) -> () {
            ffi("shmem_alltoall32/64", |st| match active_set(st, start, log_stride, size)? {
                ActiveSet::All(team) => alltoall_w(st, &team, dest, src, n),
                ActiveSet::OnlyMe => only_me(st, dest, src, n),
                ActiveSet::Members(m, me) => SetCall::new(st, m, me, psync)?
                    .alltoall(dest.cast(), src.cast(), bytes::<$t>(n)?),
            })
        });
        export!(concat!("shmem_alltoalls", $bits), fn(dest: *mut $t, src: *const $t, dst: isize, sst: isize,
                n: usize, start: c_int, log_stride: c_int, size: c_int, psync: *mut c_long) -> () {
            ffi("shmem_alltoalls32/64", |st| match active_set(st, start, log_stride, size)? {
                ActiveSet::All(team) => alltoalls_w(st, &team, dest, src, dst, sst, n),
                ActiveSet::OnlyMe => only_me_strided(st, dest, src, dst, sst, n),
                ActiveSet::Members(m, me) => SetCall::new(st, m, me, psync)?
                    .alltoalls(dest.cast(), src.cast(), stride_of(dst), stride_of(sst), n, std::mem::size_of::<$t>()),
            })
        });
    )* };
}
old_sized! { "32": u32, "64": u64 }

macro_rules! typed_to_all {
    ($op:ident, $rop:ident; $($name:ident : $t:ty),* $(,)?) => { $(
        export!(concat!("shmem_", stringify!($name), "_", stringify!($op), "_to_all"),
            fn(dest: *mut $t, src: *const $t, n: c_int, start: c_int, log_stride: c_int, size: c_int,
               _pwrk: *mut $t, psync: *mut c_long) -> () {
            ffi("shmem_*_to_all", |st| {
                match active_set(st, start, log_stride, size)? {
                    ActiveSet::All(team) => reduce_w(st, &team, ReduceOp::$rop, dest, src, arg(n)),
                    ActiveSet::OnlyMe => only_me(st, dest, src, arg(n)),
                    ActiveSet::Members(m, me) => SetCall::new(st, m, me, psync)?
                        .reduce(ReduceOp::$rop, dest, src, arg(n)),
                }
            })
        });
    )* };
}
macro_rules! to_all_int {
    ($m:ident, $($pre:tt)*) => { $m! { $($pre)*; short: i16, int: c_int, long: c_long, longlong: i64 } };
}
macro_rules! to_all_minmax {
    ($m:ident, $($pre:tt)*) => {
        $m! { $($pre)*; short: i16, int: c_int, long: c_long, longlong: i64, float: f32, double: f64,
              longdouble: LongDouble }
    };
}
macro_rules! to_all_arith {
    ($m:ident, $($pre:tt)*) => {
        $m! { $($pre)*; short: i16, int: c_int, long: c_long, longlong: i64, float: f32, double: f64,
              longdouble: LongDouble, complexf: ComplexF, complexd: ComplexD }
    };
}
to_all_int!(typed_to_all, and, And);
to_all_int!(typed_to_all, or, Or);
to_all_int!(typed_to_all, xor, Xor);
to_all_minmax!(typed_to_all, min, Min);
to_all_minmax!(typed_to_all, max, Max);
to_all_arith!(typed_to_all, sum, Sum);
to_all_arith!(typed_to_all, prod, Prod);
