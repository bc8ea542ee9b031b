//! Atomic memory operations: standard, extended and bitwise, blocking and
//! `_nbi`, with `ctx_` forms, and the deprecated names (`fadd`, `finc`,
//! `cswap`, ...). On the heap they use the engines' atomics; on static
//! data the owner's AMO service (see [`crate::statics`]).

use std::ffi::{c_int, c_long, c_ulong};

use shmem::{AtomicElement, Error, Result};
use shmem_core::loadstore;
use shmem_core::transport::{AmoOp, AmoWidth};

use crate::rma::with_ctx;
use crate::{ffi, state, CtxHandle, State, CTX_DEFAULT};

impl State {
    /// Atomic `op` on `target` on `pe` (numbered by `ctx`); the old value.
    pub(crate) fn amo(
        &self,
        ctx: CtxHandle,
        target: *const u8,
        width: AmoWidth,
        op: AmoOp,
        pe: c_int,
    ) -> Result<u64> {
        let pe = self.target_pe(ctx, pe)?;
        self.amo_world(target, width, op, pe)
    }
}

// Inlined into each exported function; `make` builds the op from the two
// operand words inside the closure, so that every function gets its own
// monomorphised body with the op a constant there (one shared body per
// type, with the op passed at run time, dispatched on it twice per call).
#[inline(always)]
fn amo_t<T: AtomicElement>(
    name: &'static str,
    ctx: CtxHandle,
    target: *const T,
    (a, b): (u64, u64),
    make: impl Fn(u64, u64) -> AmoOp,
    pe: c_int,
) -> T {
    let w = T::WIDTH.bytes();
    // The load/store case, outside the panic guard (see `state::load_store`).
    if let Some((base, off)) = state::load_store(ctx, pe, target.cast(), w, w, false) {
        // SAFETY: an aligned word in `pe`'s mapped heap (checked).
        return T::from_bits(unsafe { loadstore::atomic(base, off, T::WIDTH, make(a, b)) });
    }
    // `move`: the operands travel by value, not as pointers to the
    // caller's stack that the body would load through.
    ffi(name, move |st| {
        let op = make(a, b);
        // A heap word in world numbering (the runtime checks range and
        // alignment).
        if let Some(off) = st.fast_heap_offset(ctx, target.cast()) {
            let pe = st.target_pe(ctx, pe)?;
            return st.rt.atomic_raw(pe, off, T::WIDTH, op).map(T::from_bits);
        }
        st.amo(ctx, target.cast(), T::WIDTH, op, pe)
            .map(T::from_bits)
    })
}

/// [`amo_t`] for an op whose old value nobody reads: on the common path
/// the engine may return once the update is posted (complete by `quiet`,
/// as a put is; `Runtime::atomic_post_raw`).
#[inline(always)]
fn post_t<T: AtomicElement>(
    name: &'static str,
    ctx: CtxHandle,
    target: *const T,
    a: u64,
    make: impl Fn(u64) -> AmoOp,
    pe: c_int,
) {
    let w = T::WIDTH.bytes();
    if let Some((base, off)) = state::load_store(ctx, pe, target.cast(), w, w, false) {
        // SAFETY: as in `amo_t`.
        unsafe { loadstore::atomic(base, off, T::WIDTH, make(a)) };
        return;
    }
    ffi(name, move |st| {
        let op = make(a);
        if let Some(off) = st.fast_heap_offset(ctx, target.cast()) {
            let pe = st.target_pe(ctx, pe)?;
            return st.rt.atomic_post_raw(pe, off, T::WIDTH, op);
        }
        st.amo(ctx, target.cast(), T::WIDTH, op, pe).map(|_| ())
    })
}

fn store<T>(name: &'static str, fetch: *mut T, value: T) {
    if fetch.is_null() {
        ffi(name, |_| Err::<(), _>(Error::invalid("fetch", "is NULL")));
    }
    // SAFETY: a non-null fetch pointer from the C caller, valid for a T.
    unsafe { fetch.write(value) }
}

#[inline(always)]
unsafe fn fetch_t<T: AtomicElement>(ctx: CtxHandle, src: *const T, pe: c_int) -> T {
    amo_t(
        "shmem_atomic_fetch",
        ctx,
        src,
        (0, 0),
        |_, _| AmoOp::Fetch,
        pe,
    )
}
#[inline(always)]
unsafe fn set_t<T: AtomicElement>(ctx: CtxHandle, dest: *mut T, value: T, pe: c_int) {
    post_t::<T>(
        "shmem_atomic_set",
        ctx,
        dest,
        value.to_bits(),
        AmoOp::Set,
        pe,
    );
}
#[inline(always)]
unsafe fn swap_t<T: AtomicElement>(ctx: CtxHandle, dest: *mut T, value: T, pe: c_int) -> T {
    amo_t(
        "shmem_atomic_swap",
        ctx,
        dest,
        (value.to_bits(), 0),
        |a, _| AmoOp::Swap(a),
        pe,
    )
}
#[inline(always)]
unsafe fn cswap_t<T: AtomicElement>(
    ctx: CtxHandle,
    dest: *mut T,
    cond: T,
    value: T,
    pe: c_int,
) -> T {
    amo_t(
        "shmem_atomic_compare_swap",
        ctx,
        dest,
        (cond.to_bits(), value.to_bits()),
        |cond, value| AmoOp::CompareSwap { cond, value },
        pe,
    )
}
#[inline(always)]
unsafe fn fetch_add_t<T: AtomicElement>(ctx: CtxHandle, dest: *mut T, value: T, pe: c_int) -> T {
    amo_t(
        "shmem_atomic_fetch_add",
        ctx,
        dest,
        (value.to_bits(), 0),
        |a, _| AmoOp::Add(a),
        pe,
    )
}
#[inline(always)]
unsafe fn add_t<T: AtomicElement>(ctx: CtxHandle, dest: *mut T, value: T, pe: c_int) {
    post_t::<T>(
        "shmem_atomic_add",
        ctx,
        dest,
        value.to_bits(),
        AmoOp::Add,
        pe,
    );
}
#[inline(always)]
unsafe fn fetch_inc_t<T: AtomicElement>(ctx: CtxHandle, dest: *mut T, pe: c_int) -> T {
    amo_t(
        "shmem_atomic_fetch_inc",
        ctx,
        dest,
        (1, 0),
        |a, _| AmoOp::Add(a),
        pe,
    )
}
#[inline(always)]
unsafe fn inc_t<T: AtomicElement>(ctx: CtxHandle, dest: *mut T, pe: c_int) {
    post_t::<T>("shmem_atomic_inc", ctx, dest, 1, AmoOp::Add, pe);
}
#[inline(always)]
unsafe fn fetch_and_t<T: AtomicElement>(ctx: CtxHandle, dest: *mut T, value: T, pe: c_int) -> T {
    amo_t(
        "shmem_atomic_fetch_and",
        ctx,
        dest,
        (value.to_bits(), 0),
        |a, _| AmoOp::And(a),
        pe,
    )
}
#[inline(always)]
unsafe fn and_t<T: AtomicElement>(ctx: CtxHandle, dest: *mut T, value: T, pe: c_int) {
    post_t::<T>(
        "shmem_atomic_and",
        ctx,
        dest,
        value.to_bits(),
        AmoOp::And,
        pe,
    );
}
#[inline(always)]
unsafe fn fetch_or_t<T: AtomicElement>(ctx: CtxHandle, dest: *mut T, value: T, pe: c_int) -> T {
    amo_t(
        "shmem_atomic_fetch_or",
        ctx,
        dest,
        (value.to_bits(), 0),
        |a, _| AmoOp::Or(a),
        pe,
    )
}
#[inline(always)]
unsafe fn or_t<T: AtomicElement>(ctx: CtxHandle, dest: *mut T, value: T, pe: c_int) {
    post_t::<T>("shmem_atomic_or", ctx, dest, value.to_bits(), AmoOp::Or, pe);
}
#[inline(always)]
unsafe fn fetch_xor_t<T: AtomicElement>(ctx: CtxHandle, dest: *mut T, value: T, pe: c_int) -> T {
    amo_t(
        "shmem_atomic_fetch_xor",
        ctx,
        dest,
        (value.to_bits(), 0),
        |a, _| AmoOp::Xor(a),
        pe,
    )
}
#[inline(always)]
unsafe fn xor_t<T: AtomicElement>(ctx: CtxHandle, dest: *mut T, value: T, pe: c_int) {
    post_t::<T>(
        "shmem_atomic_xor",
        ctx,
        dest,
        value.to_bits(),
        AmoOp::Xor,
        pe,
    );
}

// Non-blocking forms complete at once; the result lands in `fetch`.
#[inline(always)]
unsafe fn fetch_nbi_t<T: AtomicElement>(ctx: CtxHandle, fetch: *mut T, src: *const T, pe: c_int) {
    // SAFETY: forwarded C pointers.
    store("shmem_atomic_fetch_nbi", fetch, unsafe {
        fetch_t(ctx, src, pe)
    })
}
#[inline(always)]
unsafe fn swap_nbi_t<T: AtomicElement>(
    ctx: CtxHandle,
    fetch: *mut T,
    dest: *mut T,
    value: T,
    pe: c_int,
) {
    // SAFETY: forwarded C pointers.
    store("shmem_atomic_swap_nbi", fetch, unsafe {
        swap_t(ctx, dest, value, pe)
    })
}
#[inline(always)]
unsafe fn cswap_nbi_t<T: AtomicElement>(
    ctx: CtxHandle,
    fetch: *mut T,
    dest: *mut T,
    cond: T,
    value: T,
    pe: c_int,
) {
    // SAFETY: forwarded C pointers.
    store("shmem_atomic_compare_swap_nbi", fetch, unsafe {
        cswap_t(ctx, dest, cond, value, pe)
    })
}
#[inline(always)]
unsafe fn fetch_inc_nbi_t<T: AtomicElement>(
    ctx: CtxHandle,
    fetch: *mut T,
    dest: *mut T,
    pe: c_int,
) {
    // SAFETY: forwarded C pointers.
    store("shmem_atomic_fetch_inc_nbi", fetch, unsafe {
        fetch_inc_t(ctx, dest, pe)
    })
}
#[inline(always)]
unsafe fn fetch_add_nbi_t<T: AtomicElement>(
    ctx: CtxHandle,
    fetch: *mut T,
    dest: *mut T,
    value: T,
    pe: c_int,
) {
    // SAFETY: forwarded C pointers.
    store("shmem_atomic_fetch_add_nbi", fetch, unsafe {
        fetch_add_t(ctx, dest, value, pe)
    })
}
#[inline(always)]
unsafe fn fetch_and_nbi_t<T: AtomicElement>(
    ctx: CtxHandle,
    fetch: *mut T,
    dest: *mut T,
    value: T,
    pe: c_int,
) {
    // SAFETY: forwarded C pointers.
    store("shmem_atomic_fetch_and_nbi", fetch, unsafe {
        fetch_and_t(ctx, dest, value, pe)
    })
}
#[inline(always)]
unsafe fn fetch_or_nbi_t<T: AtomicElement>(
    ctx: CtxHandle,
    fetch: *mut T,
    dest: *mut T,
    value: T,
    pe: c_int,
) {
    // SAFETY: forwarded C pointers.
    store("shmem_atomic_fetch_or_nbi", fetch, unsafe {
        fetch_or_t(ctx, dest, value, pe)
    })
}
#[inline(always)]
unsafe fn fetch_xor_nbi_t<T: AtomicElement>(
    ctx: CtxHandle,
    fetch: *mut T,
    dest: *mut T,
    value: T,
    pe: c_int,
) {
    // SAFETY: forwarded C pointers.
    store("shmem_atomic_fetch_xor_nbi", fetch, unsafe {
        fetch_xor_t(ctx, dest, value, pe)
    })
}

macro_rules! amo_fn {
    ($name:ident, $op:literal, ($($a:ident : $at:ty),*) -> $r:ty = $body:expr) => {
        with_ctx!(concat!("shmem_ctx_", stringify!($name), "_atomic_", $op),
                  concat!("shmem_", stringify!($name), "_atomic_", $op),
                  ($($a: $at),*) -> $r = $body);
    };
}

macro_rules! typed_amo_extended {
    ($($name:ident : $t:ty),* $(,)?) => { $(
        amo_fn!($name, "fetch", (src: *const $t, pe: c_int) -> $t = fetch_t::<$t>);
        amo_fn!($name, "set", (dest: *mut $t, value: $t, pe: c_int) -> () = set_t::<$t>);
        amo_fn!($name, "swap", (dest: *mut $t, value: $t, pe: c_int) -> $t = swap_t::<$t>);
        amo_fn!($name, "fetch_nbi", (fetch: *mut $t, src: *const $t, pe: c_int) -> () = fetch_nbi_t::<$t>);
        amo_fn!($name, "swap_nbi", (fetch: *mut $t, dest: *mut $t, value: $t, pe: c_int) -> () = swap_nbi_t::<$t>);
    )* };
}

macro_rules! typed_amo_standard {
    ($($name:ident : $t:ty),* $(,)?) => { $(
        amo_fn!($name, "compare_swap", (dest: *mut $t, cond: $t, value: $t, pe: c_int) -> $t = cswap_t::<$t>);
        amo_fn!($name, "fetch_inc", (dest: *mut $t, pe: c_int) -> $t = fetch_inc_t::<$t>);
        amo_fn!($name, "inc", (dest: *mut $t, pe: c_int) -> () = inc_t::<$t>);
        amo_fn!($name, "fetch_add", (dest: *mut $t, value: $t, pe: c_int) -> $t = fetch_add_t::<$t>);
        amo_fn!($name, "add", (dest: *mut $t, value: $t, pe: c_int) -> () = add_t::<$t>);
        amo_fn!($name, "compare_swap_nbi", (fetch: *mut $t, dest: *mut $t, cond: $t, value: $t, pe: c_int) -> () = cswap_nbi_t::<$t>);
        amo_fn!($name, "fetch_inc_nbi", (fetch: *mut $t, dest: *mut $t, pe: c_int) -> () = fetch_inc_nbi_t::<$t>);
        amo_fn!($name, "fetch_add_nbi", (fetch: *mut $t, dest: *mut $t, value: $t, pe: c_int) -> () = fetch_add_nbi_t::<$t>);
    )* };
}

macro_rules! typed_amo_bitwise {
    ($($name:ident : $t:ty),* $(,)?) => { $(
        amo_fn!($name, "fetch_and", (dest: *mut $t, value: $t, pe: c_int) -> $t = fetch_and_t::<$t>);
        amo_fn!($name, "and", (dest: *mut $t, value: $t, pe: c_int) -> () = and_t::<$t>);
        amo_fn!($name, "fetch_or", (dest: *mut $t, value: $t, pe: c_int) -> $t = fetch_or_t::<$t>);
        amo_fn!($name, "or", (dest: *mut $t, value: $t, pe: c_int) -> () = or_t::<$t>);
        amo_fn!($name, "fetch_xor", (dest: *mut $t, value: $t, pe: c_int) -> $t = fetch_xor_t::<$t>);
        amo_fn!($name, "xor", (dest: *mut $t, value: $t, pe: c_int) -> () = xor_t::<$t>);
        amo_fn!($name, "fetch_and_nbi", (fetch: *mut $t, dest: *mut $t, value: $t, pe: c_int) -> () = fetch_and_nbi_t::<$t>);
        amo_fn!($name, "fetch_or_nbi", (fetch: *mut $t, dest: *mut $t, value: $t, pe: c_int) -> () = fetch_or_nbi_t::<$t>);
        amo_fn!($name, "fetch_xor_nbi", (fetch: *mut $t, dest: *mut $t, value: $t, pe: c_int) -> () = fetch_xor_nbi_t::<$t>);
    )* };
}

/// Exports a deprecated name that has no `ctx_` form.
macro_rules! export_plain {
    ($cname:expr, ($($a:ident : $at:ty),*) -> $r:ty = $body:expr) => {
        const _: () = {
            #[export_name = $cname]
            unsafe extern "C" fn plain($($a: $at),*) -> $r {
                // SAFETY: forwards the C caller's pointers unchanged.
                unsafe { ($body)(CTX_DEFAULT, $($a),*) }
            }
        };
    };
}

macro_rules! deprecated_amo_int {
    ($($name:ident : $t:ty),* $(,)?) => { $(
        export_plain!(concat!("shmem_", stringify!($name), "_fadd"), (dest: *mut $t, value: $t, pe: c_int) -> $t = fetch_add_t::<$t>);
        export_plain!(concat!("shmem_", stringify!($name), "_finc"), (dest: *mut $t, pe: c_int) -> $t = fetch_inc_t::<$t>);
        export_plain!(concat!("shmem_", stringify!($name), "_add"), (dest: *mut $t, value: $t, pe: c_int) -> () = add_t::<$t>);
        export_plain!(concat!("shmem_", stringify!($name), "_inc"), (dest: *mut $t, pe: c_int) -> () = inc_t::<$t>);
        export_plain!(concat!("shmem_", stringify!($name), "_cswap"), (dest: *mut $t, cond: $t, value: $t, pe: c_int) -> $t = cswap_t::<$t>);
    )* };
}

macro_rules! deprecated_amo_ext {
    ($($name:ident : $t:ty),* $(,)?) => { $(
        export_plain!(concat!("shmem_", stringify!($name), "_swap"), (dest: *mut $t, value: $t, pe: c_int) -> $t = swap_t::<$t>);
        export_plain!(concat!("shmem_", stringify!($name), "_fetch"), (src: *const $t, pe: c_int) -> $t = fetch_t::<$t>);
        export_plain!(concat!("shmem_", stringify!($name), "_set"), (dest: *mut $t, value: $t, pe: c_int) -> () = set_t::<$t>);
    )* };
}

typed_amo_standard! {
    int: c_int, long: c_long, longlong: i64, uint: u32, ulong: c_ulong, ulonglong: u64,
    int32: i32, int64: i64, uint32: u32, uint64: u64, size: usize, ptrdiff: isize,
}
typed_amo_extended! {
    int: c_int, long: c_long, longlong: i64, uint: u32, ulong: c_ulong, ulonglong: u64,
    int32: i32, int64: i64, uint32: u32, uint64: u64, size: usize, ptrdiff: isize,
    float: f32, double: f64,
}
typed_amo_bitwise! {
    uint: u32, ulong: c_ulong, ulonglong: u64, int32: i32, int64: i64, uint32: u32, uint64: u64,
}
deprecated_amo_int! { int: c_int, long: c_long, longlong: i64 }
deprecated_amo_ext! { int: c_int, long: c_long, longlong: i64, float: f32, double: f64 }
export_plain!("shmem_swap", (dest: *mut c_long, value: c_long, pe: c_int) -> c_long = swap_t::<c_long>);
