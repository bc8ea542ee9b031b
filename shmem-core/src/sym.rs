//! Typed handles to symmetric objects and the element traits behind them.
//!
//! A [`SymBuf<T>`] names `len` elements of `T` at the same offset of every
//! PE's symmetric heap. It is a handle, not a pointer: data moves through the
//! runtime's put/get, and local access goes through explicit copies or the
//! `unsafe` views whose contract the caller states.

use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};
use std::sync::atomic::{
    AtomicI16, AtomicI32, AtomicI64, AtomicU16, AtomicU32, AtomicU64, Ordering,
};

use crate::error::{Error, Result};
use crate::transport::AmoWidth;

/// A type whose values may be copied byte for byte between PEs.
///
/// # Safety
/// Every bit pattern of `size_of::<Self>()` bytes must be a valid value, and
/// the type must hold no pointers or references (they mean nothing in
/// another process).
pub unsafe trait Element: Copy + Send + Sync + 'static {}

macro_rules! elements {
    ($($t:ty),*) => { $(
        // SAFETY: plain numbers: every bit pattern is valid, no pointers.
        unsafe impl Element for $t {}
    )* };
}
elements!(u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize, f32, f64);
// SAFETY: arrays of elements are elements.
unsafe impl<T: Element, const N: usize> Element for [T; N] {}

/// An element that remote atomics accept (32- or 64-bit).
pub trait AtomicElement: Element {
    /// Operand width.
    const WIDTH: AmoWidth;
    /// Bit pattern, zero-extended to 64 bits.
    fn to_bits(self) -> u64;
    /// Value from a bit pattern produced by [`AtomicElement::to_bits`].
    fn from_bits(bits: u64) -> Self;
}

/// An integer element: arithmetic and bitwise remote atomics apply.
pub trait AtomicInteger: AtomicElement {}

macro_rules! atomic_int {
    ($($t:ty => $u:ty, $w:ident);*) => { $(
        impl AtomicElement for $t {
            const WIDTH: AmoWidth = AmoWidth::$w;
            fn to_bits(self) -> u64 { self as $u as u64 }
            fn from_bits(bits: u64) -> Self { bits as $u as $t }
        }
        impl AtomicInteger for $t {}
    )* };
}
atomic_int!(i32 => u32, W32; u32 => u32, W32; i64 => u64, W64; u64 => u64, W64;
            isize => u64, W64; usize => u64, W64);

impl AtomicElement for f32 {
    const WIDTH: AmoWidth = AmoWidth::W32;
    fn to_bits(self) -> u64 {
        f32::to_bits(self) as u64
    }
    fn from_bits(bits: u64) -> Self {
        f32::from_bits(bits as u32)
    }
}
impl AtomicElement for f64 {
    const WIDTH: AmoWidth = AmoWidth::W64;
    fn to_bits(self) -> u64 {
        f64::to_bits(self)
    }
    fn from_bits(bits: u64) -> Self {
        f64::from_bits(bits)
    }
}

/// An integer that `wait_until` / `test` can watch (16-, 32- or 64-bit).
pub trait WaitElement: Element + PartialOrd {
    /// Reads the value atomically.
    ///
    /// # Safety
    /// `ptr` must be valid and aligned for `Self`.
    unsafe fn load(ptr: *const u8) -> Self;
}

macro_rules! wait_elem {
    ($($t:ty => $a:ty);*) => { $(
        impl WaitElement for $t {
            unsafe fn load(ptr: *const u8) -> Self {
                // SAFETY: caller guarantees a valid, aligned location.
                unsafe { (*(ptr as *const $a)).load(Ordering::Acquire) as $t }
            }
        }
    )* };
}
wait_elem!(i16 => AtomicI16; u16 => AtomicU16; i32 => AtomicI32; u32 => AtomicU32;
           i64 => AtomicI64; u64 => AtomicU64; isize => AtomicI64; usize => AtomicU64);

/// The tag of a handle made from raw parts: no use-after-free check applies.
pub const UNTRACKED: u64 = u64::MAX;

/// An owning handle to `len` elements of `T` in the symmetric heap.
///
/// It is not `Clone`: `free` consumes it, so a double free cannot be written
/// in Rust (the C and Python layers detect it in the allocator instead).
/// Dropping it without `free` leaks the heap space but is otherwise harmless,
/// because `free` is collective and cannot run from `Drop`.
#[derive(Debug)]
pub struct SymBuf<T: Element> {
    offset: usize,
    len: usize,
    instance: u32,
    tag: u64,
    _t: PhantomData<fn() -> T>,
}

/// A borrowed, copyable view of part of a symmetric object.
#[derive(Debug)]
pub struct SymSlice<T: Element> {
    offset: usize,
    len: usize,
    instance: u32,
    tag: u64,
    _t: PhantomData<fn() -> T>,
}

impl<T: Element> Clone for SymSlice<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: Element> Copy for SymSlice<T> {}

/// One element of a symmetric object (the target of atomics, signals, waits).
#[derive(Debug)]
pub struct SymRef<T: Element> {
    offset: usize,
    instance: u32,
    tag: u64,
    _t: PhantomData<fn() -> T>,
}

impl<T: Element> Clone for SymRef<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: Element> Copy for SymRef<T> {}

/// A 64-bit signal word in the symmetric heap.
pub type Signal = SymRef<u64>;

fn range_of(r: impl RangeBounds<usize>, len: usize) -> Result<(usize, usize)> {
    let start = match r.start_bound() {
        Bound::Included(&s) => s,
        Bound::Excluded(&s) => s.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let end = match r.end_bound() {
        Bound::Included(&e) => e.saturating_add(1),
        Bound::Excluded(&e) => e,
        Bound::Unbounded => len,
    };
    if start > end || end > len {
        return Err(Error::invalid(
            "range",
            format!("{start}..{end} is outside a symmetric object of {len} elements"),
        ));
    }
    Ok((start, end))
}

macro_rules! view_methods {
    () => {
        /// Number of elements.
        pub fn len(&self) -> usize {
            self.len
        }
        /// Whether it has no elements.
        pub fn is_empty(&self) -> bool {
            self.len == 0
        }
        /// Byte offset of the first element in the symmetric heap.
        pub fn offset(&self) -> usize {
            self.offset
        }
        /// Size in bytes.
        pub fn byte_len(&self) -> usize {
            self.len * std::mem::size_of::<T>()
        }
        /// Runtime instance that allocated it.
        pub fn instance(&self) -> u32 {
            self.instance
        }
        /// Generation tag of the allocation it belongs to ([`UNTRACKED`]
        /// for handles made from raw parts).
        pub fn tag(&self) -> u64 {
            self.tag
        }
        /// A sub-range; an error if it runs past the end.
        ///
        /// # Errors
        /// [`Error::InvalidArgument`] when the range is reversed or runs past the object.
        pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<SymSlice<T>> {
            let (s, e) = range_of(range, self.len)?;
            Ok(SymSlice {
                offset: self.offset + s * std::mem::size_of::<T>(),
                len: e - s,
                instance: self.instance,
                tag: self.tag,
                _t: PhantomData,
            })
        }
        /// Element `index`; an error if out of range.
        ///
        /// # Errors
        /// [`Error::InvalidArgument`] when `index` is past the object.
        pub fn at(&self, index: usize) -> Result<SymRef<T>> {
            if index >= self.len {
                return Err(Error::invalid(
                    "index",
                    format!(
                        "{index} is outside a symmetric object of {} elements",
                        self.len
                    ),
                ));
            }
            Ok(SymRef {
                offset: self.offset + index * std::mem::size_of::<T>(),
                instance: self.instance,
                tag: self.tag,
                _t: PhantomData,
            })
        }
    };
}

impl<T: Element> SymBuf<T> {
    /// Wraps an allocation (used by the runtime and by language bindings);
    /// its uses are not checked against later frees.
    pub fn from_raw_parts(offset: usize, len: usize, instance: u32) -> SymBuf<T> {
        Self::from_raw_parts_tagged(offset, len, instance, UNTRACKED)
    }
    /// Wraps an allocation whose generation tag the allocator issued: every
    /// use of it, or of a view of it, fails once it has been freed.
    pub fn from_raw_parts_tagged(offset: usize, len: usize, instance: u32, tag: u64) -> SymBuf<T> {
        SymBuf {
            offset,
            len,
            instance,
            tag,
            _t: PhantomData,
        }
    }
    /// The whole object as a copyable view.
    pub fn as_sym(&self) -> SymSlice<T> {
        SymSlice {
            offset: self.offset,
            len: self.len,
            instance: self.instance,
            tag: self.tag,
            _t: PhantomData,
        }
    }
    view_methods!();
}

impl<T: Element> SymSlice<T> {
    /// A view of `len` elements at heap `offset` (bounds are checked at use).
    pub fn from_raw_parts(offset: usize, len: usize, instance: u32) -> SymSlice<T> {
        SymSlice {
            offset,
            len,
            instance,
            tag: UNTRACKED,
            _t: PhantomData,
        }
    }
    view_methods!();
}

impl<T: Element> SymRef<T> {
    /// A reference to the element at heap `offset` (bounds are checked at use).
    pub fn from_raw_parts(offset: usize, instance: u32) -> SymRef<T> {
        SymRef {
            offset,
            instance,
            tag: UNTRACKED,
            _t: PhantomData,
        }
    }
    /// Generation tag of the allocation it belongs to ([`UNTRACKED`] for
    /// references made from raw parts).
    pub fn tag(&self) -> u64 {
        self.tag
    }
    /// Byte offset in the symmetric heap.
    pub fn offset(&self) -> usize {
        self.offset
    }
    /// Runtime instance that allocated it.
    pub fn instance(&self) -> u32 {
        self.instance
    }
}

impl<T: Element> From<&SymBuf<T>> for SymSlice<T> {
    fn from(b: &SymBuf<T>) -> Self {
        b.as_sym()
    }
}

/// The first element of an object (the usual way to name a signal or counter
/// allocated with one element).
impl<T: Element> From<&SymBuf<T>> for SymRef<T> {
    fn from(b: &SymBuf<T>) -> Self {
        SymRef {
            offset: b.offset,
            instance: b.instance,
            tag: b.tag,
            _t: PhantomData,
        }
    }
}

impl<T: Element> From<SymSlice<T>> for SymRef<T> {
    fn from(s: SymSlice<T>) -> Self {
        SymRef {
            offset: s.offset,
            instance: s.instance,
            tag: s.tag,
            _t: PhantomData,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slicing_checks_bounds() {
        let b: SymBuf<u32> = SymBuf::from_raw_parts(4096, 10, 0);
        let s = b.slice(2..5).unwrap();
        assert_eq!((s.offset(), s.len()), (4096 + 8, 3));
        assert_eq!(b.slice(..).unwrap().len(), 10);
        assert_eq!(b.slice(9..=9).unwrap().len(), 1);
        assert!(b.slice(5..11).is_err());
        #[allow(clippy::reversed_empty_ranges)]
        let backwards = 6..5;
        assert!(b.slice(backwards).is_err());
        assert_eq!(b.at(9).unwrap().offset(), 4096 + 36);
        assert!(b.at(10).is_err());
        assert!(s.at(3).is_err());
    }

    #[test]
    fn atomic_bits_round_trip() {
        assert_eq!(<i32 as AtomicElement>::to_bits(-1), 0xffff_ffff);
        assert_eq!(<i32 as AtomicElement>::from_bits(0xffff_ffff), -1);
        assert_eq!(
            <f64 as AtomicElement>::from_bits(AtomicElement::to_bits(1.5f64)),
            1.5
        );
    }
}
