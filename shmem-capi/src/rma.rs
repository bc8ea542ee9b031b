//! RMA: put, get, p, g, iput, iget, their `_nbi` forms and put-with-signal,
//! for every type, size and `mem`; generated from one generic body each.

use std::ffi::{c_int, c_long, c_ulong};

use shmem::{Error, PeId, Result, SignalOp, SymRef, SymSlice};
use shmem_core::loadstore;
use shmem_core::transport::{AmoOp, AmoWidth};

use crate::state::{self, Sym};
use crate::{ffi, statics, CtxHandle, State, CTX_DEFAULT};

/// `n` elements of `T` in bytes.
pub(crate) fn bytes<T>(n: usize) -> Result<usize> {
    n.checked_mul(std::mem::size_of::<T>())
        .ok_or_else(|| Error::invalid("nelems", format!("{n} elements overflow the address space")))
}

#[inline]
fn src_slice<'a>(src: *const u8, len: usize) -> Result<&'a [u8]> {
    if src.is_null() {
        return Err(Error::invalid("source", "is NULL"));
    }
    // SAFETY: the C caller passes `len` readable bytes at `src`.
    Ok(unsafe { std::slice::from_raw_parts(src, len) })
}

#[inline]
fn dst_slice<'a>(dst: *mut u8, len: usize) -> Result<&'a mut [u8]> {
    if dst.is_null() {
        return Err(Error::invalid("dest", "is NULL"));
    }
    // SAFETY: the C caller passes `len` writable bytes at `dst`.
    Ok(unsafe { std::slice::from_raw_parts_mut(dst, len) })
}

impl State {
    /// Copies `len` local bytes at `src` to symmetric `dest` on `pe`.
    #[inline]
    pub(crate) fn put(
        &self,
        ctx: CtxHandle,
        dest: *mut u8,
        src: *const u8,
        len: usize,
        pe: c_int,
        nbi: bool,
    ) -> Result<()> {
        let pe = self.target_pe(ctx, pe)?;
        self.put_world(dest, src, len, pe, nbi)
    }

    #[inline]
    pub(crate) fn put_world(
        &self,
        dest: *mut u8,
        src: *const u8,
        len: usize,
        pe: PeId,
        nbi: bool,
    ) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        match self.locate(dest, len)? {
            // SAFETY: C's contract for nbi: `src` stays valid until quiet.
            Sym::Heap(off) if nbi => unsafe {
                self.rt
                    .put_nbi_raw(pe, off, src_slice(src, len)?.as_ptr(), len)
            },
            Sym::Heap(off) => self.rt.put_bytes(pe, off, src_slice(src, len)?),
            Sym::Static(seg, off) => {
                let data = src_slice(src, len)?;
                if pe == self.rt.my_pe() {
                    // SAFETY: `dest` is our own static data (located above); copy allows overlap.
                    unsafe { std::ptr::copy(data.as_ptr(), dest, len) };
                    statics::ring(&self.rt, pe);
                    return Ok(());
                }
                if let Some(p) = self.statics.peer_ptr(pe, seg, off) {
                    // SAFETY: `p` is the same static object of `pe`, mapped
                    // here for the whole segment (len checked by locate).
                    unsafe { std::ptr::copy(data.as_ptr(), p, len) };
                } else {
                    let addr = self.statics.peer_addr(pe, seg, off);
                    // SAFETY: `addr` is the same static object on `pe` (same program).
                    match unsafe { self.rt.put_to_address(pe, addr, data) } {
                        // No engine reaches it (another node): its service.
                        Err(Error::Unsupported(_)) => self.amo.put(&self.rt, pe, addr, data)?,
                        r => r?,
                    }
                }
                statics::ring(&self.rt, pe);
                Ok(())
            }
        }
    }

    /// Copies `len` bytes of symmetric `src` on `pe` into local `dest`.
    #[inline]
    pub(crate) fn get(
        &self,
        ctx: CtxHandle,
        dest: *mut u8,
        src: *const u8,
        len: usize,
        pe: c_int,
        nbi: bool,
    ) -> Result<()> {
        let pe = self.target_pe(ctx, pe)?;
        self.get_world(dest, src, len, pe, nbi)
    }

    #[inline]
    pub(crate) fn get_world(
        &self,
        dest: *mut u8,
        src: *const u8,
        len: usize,
        pe: PeId,
        nbi: bool,
    ) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        match self.locate(src, len)? {
            // SAFETY: C's contract for nbi: `dest` stays valid until quiet.
            Sym::Heap(off) if nbi => unsafe {
                self.rt
                    .get_nbi_raw(pe, off, dst_slice(dest, len)?.as_mut_ptr(), len)
            },
            Sym::Heap(off) => self.rt.get_bytes(pe, off, dst_slice(dest, len)?),
            Sym::Static(seg, off) => {
                let out = dst_slice(dest, len)?;
                if pe == self.rt.my_pe() {
                    // SAFETY: `src` is our own static data; copy allows overlap.
                    unsafe { std::ptr::copy(src, out.as_mut_ptr(), len) };
                    return Ok(());
                }
                if let Some(p) = self.statics.peer_ptr(pe, seg, off) {
                    // SAFETY: `p` is the same static object of `pe`, mapped
                    // here for the whole segment (len checked by locate).
                    unsafe { std::ptr::copy(p, out.as_mut_ptr(), len) };
                    return Ok(());
                }
                let addr = self.statics.peer_addr(pe, seg, off);
                match self.rt.get_from_address(pe, addr, out) {
                    // No engine reaches it (another node): its service.
                    Err(Error::Unsupported(_)) => self.amo.get(&self.rt, pe, addr, out),
                    r => r,
                }
            }
        }
    }

    /// Strided put of `n` elements of `elem` bytes (strides in elements).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn iput(
        &self,
        ctx: CtxHandle,
        dest: *mut u8,
        src: *const u8,
        elem: usize,
        dst: isize,
        sst: isize,
        n: usize,
        pe: c_int,
    ) -> Result<()> {
        let pe = self.target_pe(ctx, pe)?;
        for i in 0..n as isize {
            let d = dest.wrapping_offset(i * dst * elem as isize);
            let s = src.wrapping_offset(i * sst * elem as isize);
            self.put_world(d, s, elem, pe, false)?;
        }
        Ok(())
    }

    /// Strided get.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn iget(
        &self,
        ctx: CtxHandle,
        dest: *mut u8,
        src: *const u8,
        elem: usize,
        dst: isize,
        sst: isize,
        n: usize,
        pe: c_int,
    ) -> Result<()> {
        let pe = self.target_pe(ctx, pe)?;
        for i in 0..n as isize {
            let d = dest.wrapping_offset(i * dst * elem as isize);
            let s = src.wrapping_offset(i * sst * elem as isize);
            self.get_world(d, s, elem, pe, false)?;
        }
        Ok(())
    }

    /// Atomic `op` on symmetric `target` on world PE `pe`.
    #[inline]
    pub(crate) fn amo_world(
        &self,
        target: *const u8,
        width: AmoWidth,
        op: AmoOp,
        pe: PeId,
    ) -> Result<u64> {
        match self.locate(target, width.bytes())? {
            Sym::Heap(off) => self.rt.atomic_raw(pe, off, width, op),
            Sym::Static(seg, off) => {
                if !(target as usize).is_multiple_of(width.bytes()) {
                    return Err(Error::Misaligned {
                        offset: target as usize,
                        width: width.bytes(),
                    });
                }
                if pe == self.rt.my_pe() {
                    let addr = self.statics.local_addr(seg, off);
                    // SAFETY: our own static data, aligned (checked).
                    let old = unsafe { statics::apply_local(addr, width, op) };
                    statics::ring(&self.rt, pe);
                    return Ok(old);
                }
                if let Some(p) = self.statics.peer_ptr(pe, seg, off) {
                    // SAFETY: the same static object of `pe`, mapped here;
                    // the local address is aligned (checked) and the
                    // mapping keeps the in-page offset.
                    let old = unsafe { statics::apply_local(p as usize, width, op) };
                    statics::ring(&self.rt, pe);
                    return Ok(old);
                }
                let addr = self.statics.peer_addr(pe, seg, off);
                // SAFETY: the same static object of `pe` (same program),
                // aligned (checked above).
                match unsafe { self.rt.atomic_at_address(pe, addr, width, op) } {
                    // No engine applies it as the owner's CPU atomic: the
                    // owner's service does.
                    Err(Error::Unsupported(_)) => self.amo.request(&self.rt, pe, addr, width, op),
                    r => r,
                }
            }
        }
    }

    /// Updates signal `sig` on world PE `pe`.
    pub(crate) fn signal_world(
        &self,
        sig: *mut u64,
        value: u64,
        op: SignalOp,
        pe: PeId,
    ) -> Result<()> {
        match self.locate(sig as *const u8, 8)? {
            Sym::Heap(off) => self.rt.signal_op(
                SymRef::from_raw_parts(off, self.rt.instance()),
                value,
                op,
                pe,
            ),
            Sym::Static(..) => {
                let op = match op {
                    SignalOp::Set => AmoOp::Set(value),
                    SignalOp::Add => AmoOp::Add(value),
                };
                self.amo_world(sig as *const u8, AmoWidth::W64, op, pe)
                    .map(|_| ())
            }
        }
    }

    /// Put, then a signal update observed only after the data.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn put_signal(
        &self,
        ctx: CtxHandle,
        dest: *mut u8,
        src: *const u8,
        len: usize,
        sig: *mut u64,
        value: u64,
        sig_op: c_int,
        pe: c_int,
        nbi: bool,
    ) -> Result<()> {
        let pe = self.target_pe(ctx, pe)?;
        let op = signal_op(sig_op)?;
        let inst = self.rt.instance();
        match (self.locate(dest, len)?, self.locate(sig as *const u8, 8)?) {
            (Sym::Heap(d), Sym::Heap(s)) if len > 0 => {
                let dst = SymSlice::<u8>::from_raw_parts(d, len, inst);
                let sref = SymRef::from_raw_parts(s, inst);
                let data = src_slice(src, len)?;
                if nbi {
                    // SAFETY: C's contract for nbi: `src` stays valid until quiet.
                    unsafe { self.rt.put_signal_nbi(dst, data, sref, value, op, pe) }
                } else {
                    self.rt.put_signal(dst, data, sref, value, op, pe)
                }
            }
            _ => {
                // Static data or signal: a blocking put is complete on
                // return, so the signal cannot overtake it.
                self.put_world(dest, src, len, pe, false)?;
                self.rt.fence()?;
                self.signal_world(sig, value, op, pe)
            }
        }
    }
}

pub(crate) fn signal_op(sig_op: c_int) -> Result<SignalOp> {
    match sig_op {
        0 => Ok(SignalOp::Set),
        1 => Ok(SignalOp::Add),
        _ => Err(Error::invalid(
            "sig_op",
            format!("{sig_op} is neither SHMEM_SIGNAL_SET nor SHMEM_SIGNAL_ADD"),
        )),
    }
}

// ----- generic bodies of the typed entry points ------------------------------

/// [`state::load_store`] for a copy of `n` elements of `T` at symmetric
/// `addr` to or from a local buffer (`local_ok`: its pointer is not NULL):
/// the target's mapped heap, the heap offset and the length in bytes.
#[inline(always)]
fn direct_copy<T>(
    ctx: CtxHandle,
    pe: c_int,
    addr: *const T,
    local_ok: bool,
    n: usize,
    nbi: bool,
) -> Option<(*mut u8, usize, usize)> {
    let len = n.checked_mul(size_of::<T>())?;
    if !local_ok {
        return None;
    }
    let (base, off) = state::load_store(ctx, pe, addr.cast(), len, 1, nbi)?;
    Some((base, off, len))
}

// Each body first tries the load/store case, outside the panic guard
// (`state::load_store` says what may run there), and otherwise makes the
// checked call, which also words every error.
#[inline(always)]
unsafe fn put_t<T>(ctx: CtxHandle, dest: *mut T, src: *const T, n: usize, pe: c_int) {
    if let Some((base, off, len)) = direct_copy(ctx, pe, dest, !src.is_null(), n, false) {
        // SAFETY: `[off, off + len)` lies in `pe`'s mapped heap (checked);
        // the C caller passes `len` readable bytes at `src`.
        unsafe { loadstore::put(base, off, src.cast(), len) };
        return;
    }
    ffi("shmem_put", move |st| {
        st.put(ctx, dest.cast(), src.cast(), bytes::<T>(n)?, pe, false)
    })
}
#[inline(always)]
unsafe fn get_t<T>(ctx: CtxHandle, dest: *mut T, src: *const T, n: usize, pe: c_int) {
    if let Some((base, off, len)) = direct_copy(ctx, pe, src, !dest.is_null(), n, false) {
        // SAFETY: as in `put_t`, with `len` writable bytes at `dest`.
        unsafe { loadstore::copy_small_or(base.add(off), dest.cast(), len) };
        return;
    }
    ffi("shmem_get", move |st| {
        st.get(ctx, dest.cast(), src.cast(), bytes::<T>(n)?, pe, false)
    })
}
#[inline(always)]
unsafe fn put_nbi_t<T>(ctx: CtxHandle, dest: *mut T, src: *const T, n: usize, pe: c_int) {
    if let Some((base, off, len)) = direct_copy(ctx, pe, dest, !src.is_null(), n, true) {
        // SAFETY: as in `put_t` (a copy done inline is complete at once).
        unsafe { loadstore::put(base, off, src.cast(), len) };
        return;
    }
    ffi("shmem_put_nbi", move |st| {
        st.put(ctx, dest.cast(), src.cast(), bytes::<T>(n)?, pe, true)
    })
}
#[inline(always)]
unsafe fn get_nbi_t<T>(ctx: CtxHandle, dest: *mut T, src: *const T, n: usize, pe: c_int) {
    if let Some((base, off, len)) = direct_copy(ctx, pe, src, !dest.is_null(), n, true) {
        // SAFETY: as in `get_t`.
        unsafe { loadstore::copy_small_or(base.add(off), dest.cast(), len) };
        return;
    }
    ffi("shmem_get_nbi", move |st| {
        st.get(ctx, dest.cast(), src.cast(), bytes::<T>(n)?, pe, true)
    })
}
unsafe fn iput_t<T>(
    ctx: CtxHandle,
    dest: *mut T,
    src: *const T,
    dst: isize,
    sst: isize,
    n: usize,
    pe: c_int,
) {
    ffi("shmem_iput", |st| {
        st.iput(
            ctx,
            dest.cast(),
            src.cast(),
            std::mem::size_of::<T>(),
            dst,
            sst,
            n,
            pe,
        )
    })
}
unsafe fn iget_t<T>(
    ctx: CtxHandle,
    dest: *mut T,
    src: *const T,
    dst: isize,
    sst: isize,
    n: usize,
    pe: c_int,
) {
    ffi("shmem_iget", |st| {
        st.iget(
            ctx,
            dest.cast(),
            src.cast(),
            std::mem::size_of::<T>(),
            dst,
            sst,
            n,
            pe,
        )
    })
}
#[allow(clippy::too_many_arguments)]
unsafe fn put_signal_t<T>(
    ctx: CtxHandle,
    dest: *mut T,
    src: *const T,
    n: usize,
    sig: *mut u64,
    value: u64,
    op: c_int,
    pe: c_int,
) {
    ffi("shmem_put_signal", |st| {
        st.put_signal(
            ctx,
            dest.cast(),
            src.cast(),
            bytes::<T>(n)?,
            sig,
            value,
            op,
            pe,
            false,
        )
    })
}
#[allow(clippy::too_many_arguments)]
unsafe fn put_signal_nbi_t<T>(
    ctx: CtxHandle,
    dest: *mut T,
    src: *const T,
    n: usize,
    sig: *mut u64,
    value: u64,
    op: c_int,
    pe: c_int,
) {
    ffi("shmem_put_signal_nbi", |st| {
        st.put_signal(
            ctx,
            dest.cast(),
            src.cast(),
            bytes::<T>(n)?,
            sig,
            value,
            op,
            pe,
            true,
        )
    })
}
#[inline(always)]
unsafe fn p_t<T: Copy>(ctx: CtxHandle, dest: *mut T, value: T, pe: c_int) {
    if let Some((base, off, len)) = direct_copy(ctx, pe, dest, true, 1, false) {
        // SAFETY: as in `put_t`; `value` is a live `T` of `len` bytes.
        unsafe { loadstore::put(base, off, (&value as *const T).cast(), len) };
        return;
    }
    ffi("shmem_p", |st| {
        st.put(
            ctx,
            dest.cast(),
            (&value as *const T).cast(),
            std::mem::size_of::<T>(),
            pe,
            false,
        )
    })
}
#[inline(always)]
unsafe fn g_t<T: Copy + Default>(ctx: CtxHandle, src: *const T, pe: c_int) -> T {
    let mut v = T::default();
    if let Some((base, off, len)) = direct_copy(ctx, pe, src, true, 1, false) {
        // SAFETY: as in `get_t`; `v` is a live, exclusively borrowed `T`.
        unsafe { loadstore::copy_small_or(base.add(off), (&mut v as *mut T).cast(), len) };
        return v;
    }
    // The operands travel into the body by value (`move`), and the value
    // comes back as its result.
    ffi("shmem_g", move |st| {
        st.get(
            ctx,
            (&mut v as *mut T).cast(),
            src.cast(),
            std::mem::size_of::<T>(),
            pe,
            false,
        )?;
        Ok(v)
    })
}

/// Exports a C function and its `ctx_` twin: `$plain` calls `$body` with
/// `SHMEM_CTX_DEFAULT`.
macro_rules! with_ctx {
    ($ctx_name:expr, $plain:expr, ($($a:ident : $at:ty),*) -> $r:ty = $body:expr) => {
        const _: () = {
            #[export_name = $ctx_name]
            unsafe extern "C" fn with_ctx(ctx: CtxHandle, $($a: $at),*) -> $r {
                // SAFETY: forwards the C caller's pointers unchanged.
                unsafe { ($body)(ctx, $($a),*) }
            }
            #[export_name = $plain]
            unsafe extern "C" fn plain($($a: $at),*) -> $r {
                // SAFETY: as above.
                unsafe { ($body)(CTX_DEFAULT, $($a),*) }
            }
        };
    };
}
pub(crate) use with_ctx;

macro_rules! typed_rma {
    ($($name:ident : $t:ty),* $(,)?) => { $(
        with_ctx!(concat!("shmem_ctx_", stringify!($name), "_put"), concat!("shmem_", stringify!($name), "_put"),
            (dest: *mut $t, src: *const $t, n: usize, pe: c_int) -> () = put_t::<$t>);
        with_ctx!(concat!("shmem_ctx_", stringify!($name), "_get"), concat!("shmem_", stringify!($name), "_get"),
            (dest: *mut $t, src: *const $t, n: usize, pe: c_int) -> () = get_t::<$t>);
        with_ctx!(concat!("shmem_ctx_", stringify!($name), "_put_nbi"), concat!("shmem_", stringify!($name), "_put_nbi"),
            (dest: *mut $t, src: *const $t, n: usize, pe: c_int) -> () = put_nbi_t::<$t>);
        with_ctx!(concat!("shmem_ctx_", stringify!($name), "_get_nbi"), concat!("shmem_", stringify!($name), "_get_nbi"),
            (dest: *mut $t, src: *const $t, n: usize, pe: c_int) -> () = get_nbi_t::<$t>);
        with_ctx!(concat!("shmem_ctx_", stringify!($name), "_iput"), concat!("shmem_", stringify!($name), "_iput"),
            (dest: *mut $t, src: *const $t, dst: isize, sst: isize, n: usize, pe: c_int) -> () = iput_t::<$t>);
        with_ctx!(concat!("shmem_ctx_", stringify!($name), "_iget"), concat!("shmem_", stringify!($name), "_iget"),
            (dest: *mut $t, src: *const $t, dst: isize, sst: isize, n: usize, pe: c_int) -> () = iget_t::<$t>);
        with_ctx!(concat!("shmem_ctx_", stringify!($name), "_put_signal"), concat!("shmem_", stringify!($name), "_put_signal"),
            (dest: *mut $t, src: *const $t, n: usize, sig: *mut u64, value: u64, op: c_int, pe: c_int) -> () = put_signal_t::<$t>);
        with_ctx!(concat!("shmem_ctx_", stringify!($name), "_put_signal_nbi"), concat!("shmem_", stringify!($name), "_put_signal_nbi"),
            (dest: *mut $t, src: *const $t, n: usize, sig: *mut u64, value: u64, op: c_int, pe: c_int) -> () = put_signal_nbi_t::<$t>);
    )* };
}

macro_rules! typed_pg {
    ($($name:ident : $t:ty),* $(,)?) => { $(
        with_ctx!(concat!("shmem_ctx_", stringify!($name), "_p"), concat!("shmem_", stringify!($name), "_p"),
            (dest: *mut $t, value: $t, pe: c_int) -> () = p_t::<$t>);
        with_ctx!(concat!("shmem_ctx_", stringify!($name), "_g"), concat!("shmem_", stringify!($name), "_g"),
            (src: *const $t, pe: c_int) -> $t = g_t::<$t>);
    )* };
}

/// The `SIZE` and `mem` forms: `$name` is the C name's infix (`put32` ...).
macro_rules! sized_rma {
    ($($bits:literal : $t:ty),* $(,)?) => { $(
        with_ctx!(concat!("shmem_ctx_put", $bits), concat!("shmem_put", $bits),
            (dest: *mut $t, src: *const $t, n: usize, pe: c_int) -> () = put_t::<$t>);
        with_ctx!(concat!("shmem_ctx_get", $bits), concat!("shmem_get", $bits),
            (dest: *mut $t, src: *const $t, n: usize, pe: c_int) -> () = get_t::<$t>);
        with_ctx!(concat!("shmem_ctx_put", $bits, "_nbi"), concat!("shmem_put", $bits, "_nbi"),
            (dest: *mut $t, src: *const $t, n: usize, pe: c_int) -> () = put_nbi_t::<$t>);
        with_ctx!(concat!("shmem_ctx_get", $bits, "_nbi"), concat!("shmem_get", $bits, "_nbi"),
            (dest: *mut $t, src: *const $t, n: usize, pe: c_int) -> () = get_nbi_t::<$t>);
        with_ctx!(concat!("shmem_ctx_put", $bits, "_signal"), concat!("shmem_put", $bits, "_signal"),
            (dest: *mut $t, src: *const $t, n: usize, sig: *mut u64, value: u64, op: c_int, pe: c_int) -> () = put_signal_t::<$t>);
        with_ctx!(concat!("shmem_ctx_put", $bits, "_signal_nbi"), concat!("shmem_put", $bits, "_signal_nbi"),
            (dest: *mut $t, src: *const $t, n: usize, sig: *mut u64, value: u64, op: c_int, pe: c_int) -> () = put_signal_nbi_t::<$t>);
    )* };
}

macro_rules! sized_strided {
    ($($bits:literal : $t:ty),* $(,)?) => { $(
        with_ctx!(concat!("shmem_ctx_iput", $bits), concat!("shmem_iput", $bits),
            (dest: *mut $t, src: *const $t, dst: isize, sst: isize, n: usize, pe: c_int) -> () = iput_t::<$t>);
        with_ctx!(concat!("shmem_ctx_iget", $bits), concat!("shmem_iget", $bits),
            (dest: *mut $t, src: *const $t, dst: isize, sst: isize, n: usize, pe: c_int) -> () = iget_t::<$t>);
    )* };
}

/// Every RMA type of the standard's table, as `C TYPENAME: Rust type`.
/// `long double` moves as 16 opaque bytes.
macro_rules! rma_types {
    ($m:ident) => {
        $m! {
            float: f32, double: f64, longdouble: [u8; 16], char: std::ffi::c_char, schar: i8,
            short: i16, int: c_int, long: c_long, longlong: i64, uchar: u8, ushort: u16,
            uint: u32, ulong: c_ulong, ulonglong: u64, int8: i8, int16: i16, int32: i32,
            int64: i64, uint8: u8, uint16: u16, uint32: u32, uint64: u64, size: usize,
            ptrdiff: isize,
        }
    };
}
pub(crate) use rma_types;

rma_types!(typed_rma);
typed_pg! {
    float: f32, double: f64, char: std::ffi::c_char, schar: i8, short: i16, int: c_int,
    long: c_long, longlong: i64, uchar: u8, ushort: u16, uint: u32, ulong: c_ulong,
    ulonglong: u64, int8: i8, int16: i16, int32: i32, int64: i64, uint8: u8, uint16: u16,
    uint32: u32, uint64: u64, size: usize, ptrdiff: isize,
}
sized_rma! { "8": u8, "16": u16, "32": u32, "64": u64, "128": [u64; 2], "mem": u8 }
sized_strided! { "8": u8, "16": u16, "32": u32, "64": u64, "128": [u64; 2] }
