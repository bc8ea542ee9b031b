//! Local views of the heap and load/store pointers to peers.

use super::*;

impl Runtime {
    /// Copies this PE's part of a symmetric object into a `Vec`.
    ///
    /// # Errors
    /// [`Error::UseAfterFree`] or [`Error::WrongInstance`] for a freed object or one of
    /// another instance; [`Error::OutOfHeap`] when the object leaves the heap;
    /// [`Error::NotInitialized`] after finalize.
    pub fn read_local<T: Element>(&self, src: impl Into<SymSlice<T>>) -> Result<Vec<T>> {
        self.live()?;
        let src = src.into();
        self.check_slice(&src)?;
        let mut v = Vec::<T>::with_capacity(src.len());
        // SAFETY: the source range lies in our heap (checked); the
        // destination has capacity for len elements; Element allows any bits.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.base.as_ptr().add(src.offset()),
                v.as_mut_ptr() as *mut u8,
                src.byte_len(),
            );
            v.set_len(src.len());
        }
        Ok(v)
    }

    /// Copies `data` into this PE's part of a symmetric object.
    ///
    /// # Errors
    /// [`Error::UseAfterFree`] or [`Error::WrongInstance`] for a freed object or one of
    /// another instance; [`Error::OutOfHeap`] when the object leaves the heap;
    /// [`Error::NotInitialized`] after finalize.
    pub fn write_local<T: Element>(&self, dst: impl Into<SymSlice<T>>, data: &[T]) -> Result<()> {
        self.live()?;
        let dst = dst.into();
        self.check_slice(&dst)?;
        fits(data.len(), dst.len())?;
        // SAFETY: destination lies in our heap (checked) and cannot overlap a
        // Rust slice the caller borrows (ours is shared memory).
        unsafe {
            std::ptr::copy(
                data.as_ptr() as *const u8,
                self.base.as_ptr().add(dst.offset()),
                std::mem::size_of_val(data),
            )
        };
        Ok(())
    }

    /// A slice view of this PE's part of a symmetric object.
    ///
    /// # Safety
    /// No other PE (or thread) may write the range while the slice lives.
    ///
    /// # Errors
    /// [`Error::UseAfterFree`] or [`Error::WrongInstance`] for a freed object or one of
    /// another instance; [`Error::OutOfHeap`] when the object leaves the heap;
    /// [`Error::NotInitialized`] after finalize.
    pub unsafe fn local_slice<T: Element>(&self, src: impl Into<SymSlice<T>>) -> Result<&[T]> {
        self.live()?;
        let src = src.into();
        self.check_slice(&src)?;
        // SAFETY: in-heap range; element alignment holds because allocations
        // are aligned to at least align_of::<T>(); exclusivity is the caller's.
        Ok(unsafe {
            std::slice::from_raw_parts(self.base.as_ptr().add(src.offset()) as *const T, src.len())
        })
    }

    /// A mutable slice view of this PE's part of a symmetric object.
    ///
    /// # Safety
    /// Nothing else (other PEs, threads, views) may access the range while
    /// the slice lives.
    ///
    /// # Errors
    /// [`Error::UseAfterFree`] or [`Error::WrongInstance`] for a freed object or one of
    /// another instance; [`Error::OutOfHeap`] when the object leaves the heap;
    /// [`Error::NotInitialized`] after finalize.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn local_slice_mut<T: Element>(
        &self,
        dst: impl Into<SymSlice<T>>,
    ) -> Result<&mut [T]> {
        self.live()?;
        let dst = dst.into();
        self.check_slice(&dst)?;
        // SAFETY: as for `local_slice`; exclusivity is the caller's.
        Ok(unsafe {
            std::slice::from_raw_parts_mut(
                self.base.as_ptr().add(dst.offset()) as *mut T,
                dst.len(),
            )
        })
    }

    /// A load/store pointer to `offset` in `pe`'s heap, when `pe`'s memory
    /// is mapped into this process (`shmem_ptr`); `None` otherwise.
    ///
    /// # Errors
    /// [`Error::PeOutOfRange`] for a bad `pe`; [`Error::OutOfHeap`] for an offset past the
    /// heap; [`Error::NotInitialized`] after finalize; [`Error::PeerExited`] once `pe` is
    /// known dead.
    pub fn peer_ptr(&self, offset: usize, pe: PeId) -> Result<Option<NonNull<u8>>> {
        let t = self.route(pe)?;
        self.check_range(offset, 0)?;
        if pe == self.my_pe {
            return self.local_ptr(offset).map(Some);
        }
        // SAFETY: `route` checked the PE, `check_range` the offset.
        Ok(unsafe { t.peer_ptr(pe, offset) })
    }

    /// Wakes `pe`'s blocked waiters that watch memory outside the heap
    /// (they publish "everything") after such memory changed (e.g. through
    /// `put_to_address`); waiters on heap words stay asleep, since no heap
    /// word changed. A no-op for a PE whose heap is not mapped here (its
    /// engine wakes it).
    ///
    /// # Errors
    /// [`Error::PeOutOfRange`] for a bad `pe`; [`Error::NotInitialized`] after finalize;
    /// [`Error::PeerExited`] once `pe` is known dead.
    pub fn wake_pe(&self, pe: PeId) -> Result<()> {
        let t = self.route(pe)?;
        let p = if pe == self.my_pe {
            Some(self.base)
        } else {
            // SAFETY: `route` checked the PE; offset 0 is in every heap.
            unsafe { t.peer_ptr(pe, 0) }
        };
        if let Some(p) = p {
            // SAFETY: offset 0 of a mapped heap is its control block; no
            // span: only the waiters that watch everything are rung.
            unsafe { wait::ring(p.as_ptr() as *const ControlBlock, &[]) };
        }
        Ok(())
    }

    /// Wakes this PE's own waiters on `len` bytes at heap `offset` (the
    /// counterpart of [`Runtime::wait_on`]) after a condition they check
    /// changed without a write there, e.g. a stop flag outside the heap.
    ///
    /// # Errors
    /// [`Error::OutOfHeap`] for a range outside the heap.
    pub fn wake_on(&self, offset: usize, len: usize) -> Result<()> {
        self.check_range(offset, len)?;
        // SAFETY: offset 0 of this PE's heap is its control block.
        unsafe {
            wait::ring(
                self.base.as_ptr() as *const ControlBlock,
                &[wait::Span::bytes(offset, len)],
            )
        };
        Ok(())
    }

    /// Typed [`Runtime::peer_ptr`].
    ///
    /// # Errors
    /// [`Error::UseAfterFree`] or [`Error::WrongInstance`] for a freed object or one of
    /// another instance; [`Error::PeOutOfRange`] for a bad `pe`; [`Error::OutOfHeap`] when
    /// the object leaves the heap; [`Error::NotInitialized`] after finalize.
    pub fn ptr<T: Element>(
        &self,
        obj: impl Into<SymSlice<T>>,
        pe: PeId,
    ) -> Result<Option<NonNull<T>>> {
        let obj = obj.into();
        self.check_instance(obj.instance())?;
        self.check_tag(obj.tag(), obj.offset())?;
        Ok(self.peer_ptr(obj.offset(), pe)?.map(|p| p.cast()))
    }

    /// Whether `pe` can be reached by this PE.
    pub fn pe_accessible(&self, pe: PeId) -> bool {
        pe < self.n_pes && !self.is_finalized()
    }

    /// Whether `addr` (a local address) is symmetric and `pe` can reach it.
    pub fn addr_accessible(&self, addr: *const u8, pe: PeId) -> bool {
        self.pe_accessible(pe) && self.offset_of(addr).is_some()
    }
}
