//! Point-to-point synchronisation (`wait_until`, `test` and their
//! `_all/_any/_some/_vector` forms), signals, ordering (`fence`, `quiet`)
//! and distributed locks.

use std::ffi::{c_int, c_long, c_ulong};
use std::time::Duration;

use shmem::{Cmp, Error, Result, SignalOp, WaitElement};
use shmem_core::transport::{AmoOp, AmoWidth};

use crate::rma::with_ctx;
use crate::state::Sym;
use crate::{ffi, CtxHandle, State, CTX_DEFAULT};

pub(crate) fn cmp_of(cmp: c_int) -> Result<Cmp> {
    Ok(match cmp {
        1 => Cmp::Eq,
        2 => Cmp::Ne,
        3 => Cmp::Gt,
        4 => Cmp::Le,
        5 => Cmp::Lt,
        6 => Cmp::Ge,
        _ => {
            return Err(Error::invalid(
                "cmp",
                format!("{cmp} is not a SHMEM_CMP_* constant"),
            ))
        }
    })
}

/// The checked arguments of a wait or test over `n` variables.
struct Watch<T: WaitElement> {
    ivars: *const T,
    n: usize,
    status: *const c_int,
    cmp: Cmp,
    /// Heap range of the variables (`None`: static data, or no variables).
    heap: Option<(usize, usize)>,
}

impl<T: WaitElement> Watch<T> {
    fn new(
        st: &State,
        ivars: *const T,
        n: usize,
        status: *const c_int,
        cmp: c_int,
    ) -> Result<Self> {
        let cmp = cmp_of(cmp)?;
        let mut heap = None;
        if n > 0 {
            if !(ivars as usize).is_multiple_of(std::mem::align_of::<T>()) {
                return Err(Error::Misaligned {
                    offset: ivars as usize,
                    width: std::mem::align_of::<T>(),
                });
            }
            let len = n * std::mem::size_of::<T>();
            if let Sym::Heap(off) = st.locate(ivars.cast(), len)? {
                heap = Some((off, len));
            }
        }
        Ok(Watch {
            ivars,
            n,
            status,
            cmp,
            heap,
        })
    }
    /// Blocks until `ready()`; a sleeping caller is woken only by writes to
    /// the variables (any write, for variables in static data).
    fn wait(&self, st: &State, ready: impl FnMut() -> bool) -> Result<()> {
        match self.heap {
            Some((off, len)) => st.rt.wait_on(off, len, ready),
            None => st.rt.wait_for(ready),
        }
    }
    fn masked(&self, i: usize) -> bool {
        // SAFETY: a non-null status array has `n` entries (C contract).
        !self.status.is_null() && unsafe { *self.status.add(i) } != 0
    }
    fn holds(&self, i: usize, value: T) -> bool {
        // SAFETY: `ivars` holds `n` aligned, symmetric (checked) elements.
        let v = unsafe { T::load(self.ivars.add(i).cast()) };
        self.cmp.eval(v, value)
    }
    fn all_masked(&self) -> bool {
        (0..self.n).all(|i| self.masked(i))
    }
}

fn value_at<T: Copy>(values: *const T, i: usize) -> T {
    // SAFETY: the C caller passes `n` comparison values.
    unsafe { *values.add(i) }
}

unsafe fn wait_until_t<T: WaitElement>(ivar: *mut T, cmp: c_int, value: T) {
    ffi("shmem_wait_until", |st| {
        let w = Watch::new(st, ivar, 1, std::ptr::null(), cmp)?;
        w.wait(st, || w.holds(0, value))
    })
}

unsafe fn test_t<T: WaitElement>(ivar: *mut T, cmp: c_int, value: T) -> c_int {
    ffi("shmem_test", |st| {
        Ok(Watch::new(st, ivar, 1, std::ptr::null(), cmp)?.holds(0, value) as c_int)
    })
}

/// The comparison value of variable `i`: one for all, or one each.
#[derive(Clone, Copy)]
enum Values<T> {
    One(T),
    Each(*const T),
}

impl<T: Copy> Values<T> {
    fn at(self, i: usize) -> T {
        match self {
            Values::One(v) => v,
            Values::Each(p) => value_at(p, i),
        }
    }
}

fn wait_all<T: WaitElement>(
    name: &'static str,
    ivars: *mut T,
    n: usize,
    status: *const c_int,
    cmp: c_int,
    v: Values<T>,
) {
    ffi(name, |st| {
        let w = Watch::new(st, ivars, n, status, cmp)?;
        w.wait(st, || (0..n).all(|i| w.masked(i) || w.holds(i, v.at(i))))
    })
}

/// Where the next `_any` scan starts: one past the index the last one
/// returned, so repeated calls over several ready entries take turns
/// instead of always returning the lowest (per thread, like the calls).
fn any_start(n: usize) -> usize {
    ANY_NEXT.with(|c| c.get() % n.max(1))
}

fn any_found(i: usize) {
    ANY_NEXT.with(|c| c.set(i.wrapping_add(1)));
}

thread_local! {
    static ANY_NEXT: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// The first index, scanning from `start` and wrapping, that `ready` accepts.
fn find_from(n: usize, start: usize, mut ready: impl FnMut(usize) -> bool) -> Option<usize> {
    (0..n).map(|k| (start + k) % n).find(|&i| ready(i))
}

fn wait_any<T: WaitElement>(
    name: &'static str,
    ivars: *mut T,
    n: usize,
    status: *const c_int,
    cmp: c_int,
    v: Values<T>,
) -> usize {
    ffi(name, |st| {
        let w = Watch::new(st, ivars, n, status, cmp)?;
        if w.all_masked() {
            return Ok(usize::MAX);
        }
        let mut found = usize::MAX;
        let start = any_start(n);
        w.wait(st, || {
            match find_from(n, start, |i| !w.masked(i) && w.holds(i, v.at(i))) {
                Some(i) => {
                    found = i;
                    true
                }
                None => false,
            }
        })?;
        any_found(found);
        Ok(found)
    })
}

fn some_now<T: WaitElement>(w: &Watch<T>, indices: *mut usize, v: Values<T>) -> usize {
    let mut k = 0;
    for i in 0..w.n {
        if !w.masked(i) && w.holds(i, v.at(i)) {
            // SAFETY: the C caller's `indices` has room for `n` entries.
            unsafe { *indices.add(k) = i };
            k += 1;
        }
    }
    k
}

#[allow(clippy::too_many_arguments)]
fn wait_some<T: WaitElement>(
    name: &'static str,
    ivars: *mut T,
    n: usize,
    indices: *mut usize,
    status: *const c_int,
    cmp: c_int,
    v: Values<T>,
) -> usize {
    ffi(name, |st| {
        let w = Watch::new(st, ivars, n, status, cmp)?;
        if w.all_masked() {
            return Ok(0);
        }
        if indices.is_null() {
            return Err(Error::invalid("indices", "is NULL"));
        }
        let mut k = 0;
        w.wait(st, || {
            k = some_now(&w, indices, v);
            k > 0
        })?;
        Ok(k)
    })
}

fn test_all<T: WaitElement>(
    ivars: *mut T,
    n: usize,
    status: *const c_int,
    cmp: c_int,
    v: Values<T>,
) -> c_int {
    ffi("shmem_test_all", |st| {
        let w = Watch::new(st, ivars, n, status, cmp)?;
        Ok((0..n).all(|i| w.masked(i) || w.holds(i, v.at(i))) as c_int)
    })
}

fn test_any<T: WaitElement>(
    ivars: *mut T,
    n: usize,
    status: *const c_int,
    cmp: c_int,
    v: Values<T>,
) -> usize {
    ffi("shmem_test_any", |st| {
        let w = Watch::new(st, ivars, n, status, cmp)?;
        Ok(
            match find_from(n, any_start(n), |i| !w.masked(i) && w.holds(i, v.at(i))) {
                Some(i) => {
                    any_found(i);
                    i
                }
                None => usize::MAX,
            },
        )
    })
}

fn test_some<T: WaitElement>(
    ivars: *mut T,
    n: usize,
    indices: *mut usize,
    status: *const c_int,
    cmp: c_int,
    v: Values<T>,
) -> usize {
    ffi("shmem_test_some", |st| {
        let w = Watch::new(st, ivars, n, status, cmp)?;
        if indices.is_null() && !w.all_masked() {
            return Err(Error::invalid("indices", "is NULL"));
        }
        Ok(some_now(&w, indices, v))
    })
}

/// Exports one C function.
macro_rules! export {
    ($cname:expr, fn($($a:ident : $at:ty),*) -> $r:ty $body:block) => {
        const _: () = {
            #[export_name = $cname]
            unsafe extern "C" fn f($($a: $at),*) -> $r $body
        };
    };
}
pub(crate) use export;

macro_rules! typed_wait {
    ($($name:ident : $t:ty),* $(,)?) => { $(
        export!(concat!("shmem_", stringify!($name), "_wait_until"), fn(ivar: *mut $t, cmp: c_int, value: $t) -> () {
            // SAFETY: forwarded C pointer.
            unsafe { wait_until_t(ivar, cmp, value) }
        });
        export!(concat!("shmem_", stringify!($name), "_wait"), fn(ivar: *mut $t, value: $t) -> () {
            // SAFETY: forwarded C pointer.
            unsafe { wait_until_t(ivar, 2, value) }
        });
        export!(concat!("shmem_", stringify!($name), "_test"), fn(ivar: *mut $t, cmp: c_int, value: $t) -> c_int {
            // SAFETY: forwarded C pointer.
            unsafe { test_t(ivar, cmp, value) }
        });
        export!(concat!("shmem_", stringify!($name), "_wait_until_all"),
            fn(ivars: *mut $t, n: usize, status: *const c_int, cmp: c_int, value: $t) -> () {
            wait_all("shmem_wait_until_all", ivars, n, status, cmp, Values::One(value))
        });
        export!(concat!("shmem_", stringify!($name), "_wait_until_any"),
            fn(ivars: *mut $t, n: usize, status: *const c_int, cmp: c_int, value: $t) -> usize {
            wait_any("shmem_wait_until_any", ivars, n, status, cmp, Values::One(value))
        });
        export!(concat!("shmem_", stringify!($name), "_wait_until_some"),
            fn(ivars: *mut $t, n: usize, indices: *mut usize, status: *const c_int, cmp: c_int, value: $t) -> usize {
            wait_some("shmem_wait_until_some", ivars, n, indices, status, cmp, Values::One(value))
        });
        export!(concat!("shmem_", stringify!($name), "_wait_until_all_vector"),
            fn(ivars: *mut $t, n: usize, status: *const c_int, cmp: c_int, values: *const $t) -> () {
            wait_all("shmem_wait_until_all_vector", ivars, n, status, cmp, Values::Each(values))
        });
        export!(concat!("shmem_", stringify!($name), "_wait_until_any_vector"),
            fn(ivars: *mut $t, n: usize, status: *const c_int, cmp: c_int, values: *const $t) -> usize {
            wait_any("shmem_wait_until_any_vector", ivars, n, status, cmp, Values::Each(values))
        });
        export!(concat!("shmem_", stringify!($name), "_wait_until_some_vector"),
            fn(ivars: *mut $t, n: usize, indices: *mut usize, status: *const c_int, cmp: c_int, values: *const $t) -> usize {
            wait_some("shmem_wait_until_some_vector", ivars, n, indices, status, cmp, Values::Each(values))
        });
        export!(concat!("shmem_", stringify!($name), "_test_all"),
            fn(ivars: *mut $t, n: usize, status: *const c_int, cmp: c_int, value: $t) -> c_int {
            test_all(ivars, n, status, cmp, Values::One(value))
        });
        export!(concat!("shmem_", stringify!($name), "_test_any"),
            fn(ivars: *mut $t, n: usize, status: *const c_int, cmp: c_int, value: $t) -> usize {
            test_any(ivars, n, status, cmp, Values::One(value))
        });
        export!(concat!("shmem_", stringify!($name), "_test_some"),
            fn(ivars: *mut $t, n: usize, indices: *mut usize, status: *const c_int, cmp: c_int, value: $t) -> usize {
            test_some(ivars, n, indices, status, cmp, Values::One(value))
        });
        export!(concat!("shmem_", stringify!($name), "_test_all_vector"),
            fn(ivars: *mut $t, n: usize, status: *const c_int, cmp: c_int, values: *const $t) -> c_int {
            test_all(ivars, n, status, cmp, Values::Each(values))
        });
        export!(concat!("shmem_", stringify!($name), "_test_any_vector"),
            fn(ivars: *mut $t, n: usize, status: *const c_int, cmp: c_int, values: *const $t) -> usize {
            test_any(ivars, n, status, cmp, Values::Each(values))
        });
        export!(concat!("shmem_", stringify!($name), "_test_some_vector"),
            fn(ivars: *mut $t, n: usize, indices: *mut usize, status: *const c_int, cmp: c_int, values: *const $t) -> usize {
            test_some(ivars, n, indices, status, cmp, Values::Each(values))
        });
    )* };
}

typed_wait! {
    short: i16, int: c_int, long: c_long, longlong: i64, ushort: u16, uint: u32, ulong: c_ulong,
    ulonglong: u64, int32: i32, int64: i64, uint32: u32, uint64: u64, size: usize, ptrdiff: isize,
}

export!("shmem_wait", fn(ivar: *mut c_long, value: c_long) -> () {
    // SAFETY: forwarded C pointer.
    unsafe { wait_until_t(ivar, 2, value) }
});
export!("shmem_wait_until", fn(ivar: *mut c_long, cmp: c_int, value: c_long) -> () {
    // SAFETY: forwarded C pointer.
    unsafe { wait_until_t(ivar, cmp, value) }
});

// ----- signals ---------------------------------------------------------------

export!("shmem_signal_fetch", fn(sig: *const u64) -> u64 {
    ffi("shmem_signal_fetch", |st| {
        let w = Watch::new(st, sig, 1, std::ptr::null(), 1)?;
        // SAFETY: checked symmetric and aligned by Watch::new.
        Ok(unsafe { u64::load(w.ivars.cast()) })
    })
});

export!("shmem_signal_wait_until", fn(sig: *mut u64, cmp: c_int, value: u64) -> u64 {
    ffi("shmem_signal_wait_until", |st| {
        let w = Watch::new(st, sig, 1, std::ptr::null(), cmp)?;
        w.wait(st, || w.holds(0, value))?;
        // SAFETY: as above.
        Ok(unsafe { u64::load(w.ivars.cast()) })
    })
});

unsafe fn signal_t(ctx: CtxHandle, sig: *mut u64, value: u64, op: SignalOp, pe: c_int) {
    ffi("shmem_signal_set/add", |st| {
        let pe = st.target_pe(ctx, pe)?;
        st.signal_world(sig, value, op, pe)
    })
}
unsafe fn signal_set_t(ctx: CtxHandle, sig: *mut u64, value: u64, pe: c_int) {
    // SAFETY: forwarded C pointer.
    unsafe { signal_t(ctx, sig, value, SignalOp::Set, pe) }
}
unsafe fn signal_add_t(ctx: CtxHandle, sig: *mut u64, value: u64, pe: c_int) {
    // SAFETY: forwarded C pointer.
    unsafe { signal_t(ctx, sig, value, SignalOp::Add, pe) }
}
with_ctx!("shmem_ctx_signal_set", "shmem_signal_set", (sig: *mut u64, value: u64, pe: c_int) -> () = signal_set_t);
with_ctx!("shmem_ctx_signal_add", "shmem_signal_add", (sig: *mut u64, value: u64, pe: c_int) -> () = signal_add_t);

// ----- ordering ----------------------------------------------------------------

// SHMEM_CTX_INVALID makes fence and quiet no-ops (OpenSHMEM 1.5).
unsafe fn fence_t(ctx: CtxHandle) {
    if ctx.is_null() {
        return;
    }
    ffi("shmem_fence", |st| {
        st.ctx(ctx)?;
        st.rt.fence()
    })
}
unsafe fn quiet_t(ctx: CtxHandle) {
    if ctx.is_null() {
        return;
    }
    ffi("shmem_quiet", |st| {
        st.ctx(ctx)?;
        st.rt.quiet()
    })
}
with_ctx!("shmem_ctx_fence", "shmem_fence", () -> () = fence_t);
with_ctx!("shmem_ctx_quiet", "shmem_quiet", () -> () = quiet_t);

// ----- locks -------------------------------------------------------------------
//
// A lock is a symmetric `long`; PE 0's copy holds 0 (free) or owner + 1.

fn lock_cas(st: &State, lock: *mut c_long) -> Result<bool> {
    let me = st.rt.my_pe() as u64 + 1;
    let old = st.amo_world(
        lock as *const u8,
        AmoWidth::W64,
        AmoOp::CompareSwap { cond: 0, value: me },
        0,
    )?;
    if old == me {
        return Err(Error::invalid(
            "lock",
            "this PE already holds it (shmem_set_lock twice)",
        ));
    }
    Ok(old == 0)
}

export!("shmem_set_lock", fn(lock: *mut c_long) -> () {
    ffi("shmem_set_lock", |st| {
        let mut backoff = Duration::from_micros(1);
        while !lock_cas(st, lock)? {
            std::thread::sleep(backoff);
            backoff = (backoff * 2).min(Duration::from_micros(200));
            st.rt.bootstrap().check_peers()?;
        }
        Ok(())
    })
});

export!("shmem_test_lock", fn(lock: *mut c_long) -> c_int {
    ffi("shmem_test_lock", |st| Ok(if lock_cas(st, lock)? { 0 } else { 1 }))
});

export!("shmem_clear_lock", fn(lock: *mut c_long) -> () {
    ffi("shmem_clear_lock", |st| {
        st.rt.quiet()?;
        let me = st.rt.my_pe() as u64 + 1;
        let old = st.amo_world(lock as *const u8, AmoWidth::W64, AmoOp::CompareSwap { cond: me, value: 0 }, 0)?;
        if old != me {
            return Err(Error::invalid("lock", format!("is not held by this PE (holder: {})", match old {
                0 => "nobody".to_string(),
                h => format!("PE {}", h - 1),
            })));
        }
        Ok(())
    })
});
