//! Memory management: collective allocation, agreed on by every PE.

use super::*;

impl Runtime {
    #[track_caller]
    fn agree(&self, mine: wire::AllocCall) -> Result<()> {
        let call = mine.name();
        let seq = self.alloc_seq.fetch_add(1, Ordering::Relaxed) + 1;
        let _in_call = self.activity.enter(call, "", seq);
        let all = self.bootstrap.allgather(&wire::encode(&mine))?;
        let theirs: Vec<Result<wire::AllocCall>> = all
            .iter()
            .map(|m| wire::decode("allocation agreement", m))
            .collect();
        if theirs.iter().any(|t| t.as_ref().ok() != Some(&mine)) {
            let details = theirs
                .iter()
                .enumerate()
                .map(|(pe, t)| match t {
                    Ok(c) => format!("PE {pe}: {c}"),
                    Err(e) => format!("PE {pe}: {e}"),
                })
                .collect::<Vec<_>>()
                .join("; ");
            return Err(Error::CollectiveMismatch { op: call, details });
        }
        Ok(())
    }

    fn allocator(&self) -> MutexGuard<'_, Allocator> {
        self.allocator.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Allocates `bytes` aligned to `align` (collective; every PE must pass
    /// the same arguments). Returns the heap offset.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] when no free block fits (naming the free space);
    /// [`Error::InvalidArgument`] for an alignment that is not a power of two or a count
    /// whose bytes overflow; [`Error::CollectiveMismatch`] when the PEs asked for different
    /// things; a bootstrap error when a PE dies or the agreement times out;
    /// [`Error::NotInitialized`] after finalize.
    #[track_caller]
    pub fn malloc_bytes(&self, bytes: usize, align: usize) -> Result<usize> {
        self.live()?;
        self.agree(wire::AllocCall::Malloc {
            size: bytes as u64,
            align: align as u64,
        })?;
        self.allocator().alloc(bytes, align)
    }

    /// Like [`Runtime::malloc_bytes`], with the memory zeroed on every PE
    /// before any PE returns.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] when no free block fits (naming the free space);
    /// [`Error::InvalidArgument`] for an alignment that is not a power of two or a count
    /// whose bytes overflow; [`Error::CollectiveMismatch`] when the PEs asked for different
    /// things; a bootstrap error when a PE dies or the agreement times out;
    /// [`Error::NotInitialized`] after finalize.
    #[track_caller]
    pub fn calloc_bytes(&self, bytes: usize, align: usize) -> Result<usize> {
        let off = self.malloc_bytes(bytes, align)?;
        let len = self.allocator().len_of(off).unwrap_or(bytes);
        // SAFETY: the allocation lies inside our heap mapping.
        unsafe { std::ptr::write_bytes(self.base.as_ptr().add(off), 0, len) };
        self.bootstrap.barrier()?;
        Ok(off)
    }

    /// Frees the allocation at heap `offset` (collective).
    ///
    /// # Errors
    /// [`Error::UseAfterFree`] or [`Error::WrongInstance`] for a freed object or one of
    /// another instance; [`Error::InvalidFree`] for an offset that is not a live
    /// allocation; [`Error::CollectiveMismatch`] when the PEs free different objects; a
    /// bootstrap error when a PE dies or the agreement times out; [`Error::NotInitialized`]
    /// after finalize.
    #[track_caller]
    pub fn free_bytes(&self, offset: usize) -> Result<()> {
        self.live()?;
        self.agree(wire::AllocCall::Free {
            offset: offset as u64,
        })?;
        self.allocator().free(offset)?;
        self.gens.retire(offset);
        Ok(())
    }

    /// Resizes the allocation at `offset`, keeping its contents (collective).
    /// Returns the new offset.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] when no free block fits (naming the free space);
    /// [`Error::InvalidArgument`] for an alignment that is not a power of two or a count
    /// whose bytes overflow; [`Error::InvalidFree`] for an offset that is not a live
    /// allocation; [`Error::CollectiveMismatch`] when the PEs asked for different things; a
    /// bootstrap error when a PE dies or the agreement times out; [`Error::NotInitialized`]
    /// after finalize.
    #[track_caller]
    pub fn realloc_bytes(&self, offset: usize, bytes: usize) -> Result<usize> {
        self.live()?;
        self.agree(wire::AllocCall::Realloc {
            offset: offset as u64,
            size: bytes as u64,
        })?;
        let new = {
            let mut a = self.allocator();
            let old_len = a.len_of(offset).ok_or(Error::InvalidFree { offset })?;
            if a.resize_in_place(offset, bytes)? {
                offset
            } else {
                let new = a.alloc(bytes, crate::heap::MIN_ALIGN)?;
                // SAFETY: both ranges are live allocations inside our heap and
                // distinct allocations never overlap.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        self.base.as_ptr().add(offset),
                        self.base.as_ptr().add(new),
                        old_len.min(bytes),
                    )
                };
                a.free(offset)?;
                new
            }
        };
        // Old handles are stale even when the block stayed in place.
        self.gens.retire(offset);
        self.bootstrap.barrier()?;
        Ok(new)
    }

    /// Errors unless `[offset, offset + len)` lies inside one live
    /// allocation (a diagnostic check: it takes the allocator's lock).
    ///
    /// # Errors
    /// [`Error::NotAllocated`] for a freed or never-allocated range.
    pub fn check_allocated(&self, offset: usize, len: usize) -> Result<()> {
        if self.allocator().contains(offset, len.max(1)) {
            Ok(())
        } else {
            Err(Error::NotAllocated { offset, len })
        }
    }

    /// Bytes still free in the heap, and the largest free block.
    pub fn heap_free(&self) -> (usize, usize) {
        let a = self.allocator();
        (a.free_bytes(), a.largest_free())
    }

    /// Allocates `count` elements of `T` (collective).
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] when no free block fits (naming the free space);
    /// [`Error::InvalidArgument`] for an alignment that is not a power of two or a count
    /// whose bytes overflow; [`Error::CollectiveMismatch`] when the PEs asked for different
    /// things; a bootstrap error when a PE dies or the agreement times out;
    /// [`Error::NotInitialized`] after finalize.
    #[track_caller]
    pub fn malloc<T: Element>(&self, count: usize) -> Result<SymBuf<T>> {
        self.align_alloc(std::mem::align_of::<T>(), count)
    }

    /// Allocates `count` elements of `T` in memory of kind `mem_type`
    /// (collective). On a host without an accelerator both kinds are host
    /// memory in the symmetric heap; the parameter exists so that code
    /// written for device memory runs unchanged.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] when no free block fits (naming the free space);
    /// [`Error::InvalidArgument`] for an alignment that is not a power of two or a count
    /// whose bytes overflow; [`Error::CollectiveMismatch`] when the PEs asked for different
    /// things; a bootstrap error when a PE dies or the agreement times out;
    /// [`Error::NotInitialized`] after finalize.
    #[track_caller]
    pub fn malloc_mem<T: Element>(&self, count: usize, mem_type: MemType) -> Result<SymBuf<T>> {
        let _host_only = mem_type;
        self.malloc(count)
    }

    /// Allocates `count` zeroed elements of `T` (collective).
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] when no free block fits (naming the free space);
    /// [`Error::InvalidArgument`] for an alignment that is not a power of two or a count
    /// whose bytes overflow; [`Error::CollectiveMismatch`] when the PEs asked for different
    /// things; a bootstrap error when a PE dies or the agreement times out;
    /// [`Error::NotInitialized`] after finalize.
    #[track_caller]
    pub fn calloc<T: Element>(&self, count: usize) -> Result<SymBuf<T>> {
        let bytes = elems_bytes::<T>(count)?;
        let off = self.calloc_bytes(bytes, std::mem::align_of::<T>())?;
        Ok(self.tagged(off, count))
    }

    /// Allocates `count` elements of `T` aligned to `alignment` bytes (collective).
    ///
    /// # Errors
    /// `alignment` is not a power of two (0 included), the heap is
    /// exhausted, or the PEs disagree on the arguments.
    #[track_caller]
    pub fn align_alloc<T: Element>(&self, alignment: usize, count: usize) -> Result<SymBuf<T>> {
        if !alignment.is_power_of_two() {
            return Err(Error::invalid(
                "alignment",
                format!("{alignment} is not a power of two"),
            ));
        }
        let bytes = elems_bytes::<T>(count)?;
        let off = self.malloc_bytes(bytes, alignment.max(std::mem::align_of::<T>()))?;
        Ok(self.tagged(off, count))
    }

    /// A handle to the allocation just made at `offset`, with a fresh
    /// generation tag.
    fn tagged<T: Element>(&self, offset: usize, count: usize) -> SymBuf<T> {
        SymBuf::from_raw_parts_tagged(offset, count, self.instance, self.gens.issue(offset))
    }

    /// Resizes a symmetric object to `count` elements, keeping its prefix (collective).
    ///
    /// # Errors
    /// [`Error::UseAfterFree`] or [`Error::WrongInstance`] for a freed object or one of
    /// another instance; [`Error::OutOfMemory`] when no free block fits (naming the free
    /// space); [`Error::InvalidArgument`] for an alignment that is not a power of two or a
    /// count whose bytes overflow; [`Error::InvalidFree`] for an object that is not live;
    /// [`Error::CollectiveMismatch`] when the PEs asked for different things; a bootstrap
    /// error when a PE dies or the agreement times out; [`Error::NotInitialized`] after
    /// finalize.
    #[track_caller]
    pub fn realloc<T: Element>(&self, buf: SymBuf<T>, count: usize) -> Result<SymBuf<T>> {
        self.check_instance(buf.instance())?;
        self.check_tag(buf.tag(), buf.offset())?;
        let off = self.realloc_bytes(buf.offset(), elems_bytes::<T>(count)?)?;
        Ok(self.tagged(off, count))
    }

    /// Frees a symmetric object (collective).
    ///
    /// # Errors
    /// [`Error::UseAfterFree`] or [`Error::WrongInstance`] for a freed object or one of
    /// another instance; [`Error::InvalidFree`] for an offset that is not a live
    /// allocation; [`Error::CollectiveMismatch`] when the PEs free different objects; a
    /// bootstrap error when a PE dies or the agreement times out; [`Error::NotInitialized`]
    /// after finalize.
    #[track_caller]
    pub fn free<T: Element>(&self, buf: SymBuf<T>) -> Result<()> {
        self.check_instance(buf.instance())?;
        self.check_tag(buf.tag(), buf.offset())?;
        self.free_bytes(buf.offset())
    }
}
