//! Load/store on a mapped symmetric heap: the operations behind
//! [`crate::Capabilities::LOAD_STORE`].
//!
//! An engine that declares `LOAD_STORE` promises that its put, atomics and
//! signals are exactly these functions on the peer's mapped heap, so the
//! runtime may call them itself for blocking operations. Each writes, then
//! rings the target's wait doorbell ([`crate::wait::ring`]) for the bytes
//! it changed. How a peer's heap comes to be mapped here is the engine's
//! business (`shmem-shm` maps same-node heaps).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::transport::{AmoOp, AmoWidth, SignalOp};
use crate::wait::{ring, ring_after_seqcst, ControlBlock, Span};

/// Wakes the blocked waiters of the PE whose heap starts at `base` that
/// watch `len` bytes at `offset` (after this thread wrote them).
///
/// # Safety
/// `base` must be a mapped symmetric heap (it starts with its control
/// block) that stays mapped for the call.
#[inline]
pub unsafe fn wake(base: *mut u8, offset: usize, len: usize) {
    // SAFETY: guaranteed by the caller.
    unsafe { ring(base as *const ControlBlock, &[Span::bytes(offset, len)]) };
}

/// Copies `len` bytes from `src` to `dst` of the heap at `base` and
/// wakes that PE's waiters watching them (a load/store put).
///
/// # Safety
/// `base` must be a mapped heap (it starts with its control block),
/// `[dst, dst + len)` inside it, and `src` valid for `len` bytes (it may
/// overlap the destination when the heap is this PE's own).
#[inline]
pub unsafe fn put(base: *mut u8, dst: usize, src: *const u8, len: usize) {
    // SAFETY: guaranteed by the caller; `copy` allows overlap.
    unsafe {
        copy_small_or(src, base.add(dst), len);
        wake(base, dst, len);
    }
}

/// `std::ptr::copy`, with word-sized copies done by one load and one store
/// instead of a call into the C library (the call was about 20 of the 200
/// instructions an 8-byte `shmem_putmem` takes through the C ABI).
///
/// # Safety
/// As [`std::ptr::copy`].
#[inline(always)]
pub unsafe fn copy_small_or(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY: guaranteed by the caller: both ranges are valid for `len`
    // bytes; each arm reads all of `src` before it writes `dst`, so overlap
    // is allowed as for `copy`.
    unsafe {
        match len {
            8 => dst
                .cast::<u64>()
                .write_unaligned(src.cast::<u64>().read_unaligned()),
            4 => dst
                .cast::<u32>()
                .write_unaligned(src.cast::<u32>().read_unaligned()),
            16 => dst
                .cast::<u128>()
                .write_unaligned(src.cast::<u128>().read_unaligned()),
            _ => std::ptr::copy(src, dst, len),
        }
    }
}

/// Performs a CPU atomic on the word at `offset` of the heap at `base`
/// and wakes that PE's waiters if the word changed; returns the old value.
///
/// # Safety
/// `base` must be a mapped heap and `offset` in range and aligned to `width`.
// Always inlined: the C ABI's atomics pass a constant width and op, which
// then select one instruction instead of two matches at run time.
#[inline(always)]
pub unsafe fn atomic(base: *mut u8, offset: usize, width: AmoWidth, op: AmoOp) -> u64 {
    // SAFETY: guaranteed by the caller: an aligned, in-heap word only
    // accessed atomically.
    let old = unsafe { amo_word(base.add(offset), width, op) };
    if op != AmoOp::Fetch {
        // SAFETY: every mapped heap starts with its control block.
        unsafe {
            ring_after_seqcst(
                base as *const ControlBlock,
                &[Span::bytes(offset, width.bytes())],
            )
        };
    }
    old
}

/// The CPU atomic `op` on the `width`-wide word at `p`; returns the old
/// value.
///
/// # Safety
/// `p` valid, aligned to `width` and only accessed atomically.
#[inline(always)]
unsafe fn amo_word(p: *mut u8, width: AmoWidth, op: AmoOp) -> u64 {
    match width {
        // SAFETY: guaranteed by the caller.
        AmoWidth::W32 => amo32(unsafe { AtomicU32::from_ptr(p.cast()) }, op) as u64,
        // SAFETY: as above.
        AmoWidth::W64 => amo64(unsafe { AtomicU64::from_ptr(p.cast()) }, op),
    }
}

/// Applies `op` with a CPU atomic to the word at `addr`, outside the heap
/// at `base` (memory its PE exposed), and rings that heap's waiters that
/// watch everything (as waiters on such memory do); returns the previous
/// value.
///
/// # Safety
/// `base` a mapped heap; `addr` valid, aligned to `width` and only
/// accessed atomically.
#[inline]
pub unsafe fn atomic_outside(base: *mut u8, addr: *mut u8, width: AmoWidth, op: AmoOp) -> u64 {
    // SAFETY: guaranteed by the caller.
    let old = unsafe { amo_word(addr, width, op) };
    if op != AmoOp::Fetch {
        // SAFETY: every mapped heap starts with its control block.
        unsafe { ring_after_seqcst(base as *const ControlBlock, &[]) };
    }
    old
}

/// Copies `len` bytes from `src` to `dst` of the heap at `base`, then
/// updates its signal word at `sig` (a load/store put-with-signal): the
/// signal is seen only after the data, and waiters that watch either are
/// woken.
///
/// # Safety
/// As for [`put`] and [`signal`].
#[allow(clippy::too_many_arguments)]
#[inline]
pub unsafe fn put_signal(
    base: *mut u8,
    dst: usize,
    src: *const u8,
    len: usize,
    sig: usize,
    op: SignalOp,
    value: u64,
) {
    // SAFETY: guaranteed by the caller.
    unsafe { copy_small_or(src, base.add(dst), len) };
    // The data must be visible before the signal.
    std::sync::atomic::fence(Ordering::Release);
    // SAFETY: guaranteed by the caller.
    unsafe { signal(base, sig, op, value, Span::bytes(dst, len)) };
}

/// Updates the signal word at `sig` of the heap at `base` and wakes
/// that PE's waiters that watch it or `data` (the span a put-with-signal
/// just wrote; empty for a bare signal).
///
/// # Safety
/// `base` must be a mapped heap and `sig` in range and 8-byte aligned.
pub unsafe fn signal(base: *mut u8, sig: usize, op: SignalOp, value: u64, data: Span) {
    // SAFETY: guaranteed by the caller.
    let s = unsafe { AtomicU64::from_ptr(base.add(sig).cast()) };
    match op {
        SignalOp::Set => s.store(value, Ordering::SeqCst),
        SignalOp::Add => {
            s.fetch_add(value, Ordering::SeqCst);
        }
    }
    // SAFETY: every mapped heap starts with its control block.
    unsafe { ring_after_seqcst(base as *const ControlBlock, &[Span::bytes(sig, 8), data]) };
}

#[inline(always)]
fn amo32(p: &AtomicU32, op: AmoOp) -> u32 {
    let sc = Ordering::SeqCst;
    match op {
        AmoOp::Fetch => p.load(sc),
        AmoOp::Set(v) => {
            p.store(v as u32, sc);
            0
        }
        AmoOp::Swap(v) => p.swap(v as u32, sc),
        AmoOp::CompareSwap { cond, value } => {
            match p.compare_exchange(cond as u32, value as u32, sc, sc) {
                Ok(x) | Err(x) => x,
            }
        }
        AmoOp::Add(v) => p.fetch_add(v as u32, sc),
        AmoOp::And(v) => p.fetch_and(v as u32, sc),
        AmoOp::Or(v) => p.fetch_or(v as u32, sc),
        AmoOp::Xor(v) => p.fetch_xor(v as u32, sc),
    }
}

#[inline(always)]
fn amo64(p: &AtomicU64, op: AmoOp) -> u64 {
    let sc = Ordering::SeqCst;
    match op {
        AmoOp::Fetch => p.load(sc),
        AmoOp::Set(v) => {
            p.store(v, sc);
            0
        }
        AmoOp::Swap(v) => p.swap(v, sc),
        AmoOp::CompareSwap { cond, value } => match p.compare_exchange(cond, value, sc, sc) {
            Ok(x) | Err(x) => x,
        },
        AmoOp::Add(v) => p.fetch_add(v, sc),
        AmoOp::And(v) => p.fetch_and(v, sc),
        AmoOp::Or(v) => p.fetch_or(v, sc),
        AmoOp::Xor(v) => p.fetch_xor(v, sc),
    }
}
