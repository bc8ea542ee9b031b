//! Remote memory access: put and get, blocking, non-blocking and with handles.

use super::*;

impl Runtime {
    /// Copies `src` into `pe`'s heap at `dst`.
    ///
    /// # Errors
    /// [`Error::PeOutOfRange`] for a bad `pe`; [`Error::OutOfHeap`] when the range leaves
    /// the heap (or touches its reserved first page); [`Error::NotInitialized`] after
    /// finalize; [`Error::PeerExited`] once `pe` is known dead; the engine's error
    /// ([`Error::Transport`]).
    #[inline(always)]
    pub fn put_bytes(&self, pe: PeId, dst: usize, src: &[u8]) -> Result<()> {
        self.live_for(pe)?;
        self.check_range(dst, src.len())?;
        if let Some(base) = self.direct(pe) {
            // SAFETY: [dst, dst+len) lies in `pe`'s mapped heap (checked);
            // `src` is a live slice.
            unsafe { crate::loadstore::put(base.as_ptr(), dst, src.as_ptr(), src.len()) };
            return Ok(());
        }
        let t = self.route(pe)?;
        // SAFETY: `src` is a live slice for the duration of the blocking call.
        unsafe { t.put(pe, dst, src.as_ptr(), src.len()) }
    }

    /// Copies `pe`'s heap at `src` into `dst`.
    ///
    /// # Errors
    /// [`Error::PeOutOfRange`] for a bad `pe`; [`Error::OutOfHeap`] when the range leaves
    /// the heap (or touches its reserved first page); [`Error::NotInitialized`] after
    /// finalize; [`Error::PeerExited`] once `pe` is known dead; the engine's error
    /// ([`Error::Transport`]).
    #[inline(always)]
    pub fn get_bytes(&self, pe: PeId, src: usize, dst: &mut [u8]) -> Result<()> {
        self.live_for(pe)?;
        self.check_range(src, dst.len())?;
        if let Some(base) = self.direct(pe) {
            // SAFETY: [src, src+len) lies in `pe`'s mapped heap (checked);
            // `dst` is a live exclusive slice.
            unsafe {
                crate::loadstore::copy_small_or(
                    base.as_ptr().add(src),
                    dst.as_mut_ptr(),
                    dst.len(),
                );
            }
            return Ok(());
        }
        let t = self.route(pe)?;
        // SAFETY: `dst` is a live exclusive slice for the blocking call.
        unsafe { t.get(pe, src, dst.as_mut_ptr(), dst.len()) }
    }

    /// Starts a put; completes at [`Runtime::quiet`].
    ///
    /// # Safety
    /// `src` must stay valid and unmodified for `len` bytes until `quiet` returns.
    ///
    /// # Errors
    /// [`Error::PeOutOfRange`] for a bad `pe`; [`Error::OutOfHeap`] when the range leaves
    /// the heap (or touches its reserved first page); [`Error::NotInitialized`] after
    /// finalize; [`Error::PeerExited`] once `pe` is known dead; the engine's error
    /// ([`Error::Transport`]).
    pub unsafe fn put_nbi_raw(
        &self,
        pe: PeId,
        dst: usize,
        src: *const u8,
        len: usize,
    ) -> Result<()> {
        if len < self.async_threshold && self.direct(pe).is_some() {
            // A small copy on a load/store route is complete at once.
            // SAFETY: the caller keeps `src` valid for this call.
            return self.put_bytes(pe, dst, unsafe { std::slice::from_raw_parts(src, len) });
        }
        let t = if len >= self.async_threshold {
            self.async_route(pe)?
        } else {
            self.route(pe)?
        };
        self.check_range(dst, len)?;
        // SAFETY: forwarded contract.
        unsafe { t.put_nbi(pe, dst, src, len) }
    }

    /// Starts a get; `dst` holds the data after [`Runtime::quiet`].
    ///
    /// # Safety
    /// `dst` must stay valid for writes of `len` bytes until `quiet` returns.
    ///
    /// # Errors
    /// [`Error::PeOutOfRange`] for a bad `pe`; [`Error::OutOfHeap`] when the range leaves
    /// the heap (or touches its reserved first page); [`Error::NotInitialized`] after
    /// finalize; [`Error::PeerExited`] once `pe` is known dead; the engine's error
    /// ([`Error::Transport`]).
    pub unsafe fn get_nbi_raw(&self, pe: PeId, src: usize, dst: *mut u8, len: usize) -> Result<()> {
        if len < self.async_threshold && self.direct(pe).is_some() {
            // SAFETY: the caller keeps `dst` valid and unaliased for this call.
            return self.get_bytes(pe, src, unsafe { std::slice::from_raw_parts_mut(dst, len) });
        }
        let t = if len >= self.async_threshold {
            self.async_route(pe)?
        } else {
            self.route(pe)?
        };
        self.check_range(src, len)?;
        // SAFETY: forwarded contract.
        unsafe { t.get_nbi(pe, src, dst, len) }
    }

    /// Starts a put on the bulk engine and returns its completion.
    ///
    /// # Safety
    /// `src` must stay valid for `len` bytes until the completion is done.
    ///
    /// # Errors
    /// [`Error::PeOutOfRange`] for a bad `pe`; [`Error::OutOfHeap`] when the range leaves
    /// the heap (or touches its reserved first page); [`Error::NotInitialized`] after
    /// finalize; [`Error::PeerExited`] once `pe` is known dead; the engine's error
    /// ([`Error::Transport`]).
    pub unsafe fn put_async_raw(
        &self,
        pe: PeId,
        dst: usize,
        src: *const u8,
        len: usize,
    ) -> Result<Completion> {
        let t = self.async_route(pe)?;
        self.check_range(dst, len)?;
        // SAFETY: forwarded contract.
        let c = unsafe { t.put_async(pe, dst, src, len) }?;
        self.fail_if_dies(&c, pe);
        Ok(c)
    }

    /// Makes `c` end in an error naming `pe` if `pe` is known dead when the
    /// copy finishes.
    fn fail_if_dies(&self, c: &Completion, pe: PeId) {
        let health = self.health.clone();
        let check = move || {
            if health.word() != 0 {
                health.check(Some(pe))?;
            }
            Ok(())
        };
        c.then(check.clone());
        // Waits give up on a dead peer, and at SHMEM_WAIT_TIMEOUT.
        c.watch(pe, check, self.policy.timeout);
    }

    /// Starts a get on the bulk engine and returns its completion.
    ///
    /// # Safety
    /// `dst` must stay valid for `len` bytes until the completion is done.
    ///
    /// # Errors
    /// [`Error::PeOutOfRange`] for a bad `pe`; [`Error::OutOfHeap`] when the range leaves
    /// the heap (or touches its reserved first page); [`Error::NotInitialized`] after
    /// finalize; [`Error::PeerExited`] once `pe` is known dead; the engine's error
    /// ([`Error::Transport`]).
    pub unsafe fn get_async_raw(
        &self,
        pe: PeId,
        src: usize,
        dst: *mut u8,
        len: usize,
    ) -> Result<Completion> {
        let t = self.async_route(pe)?;
        self.check_range(src, len)?;
        // SAFETY: forwarded contract.
        let c = unsafe { t.get_async(pe, src, dst, len) }?;
        self.fail_if_dies(&c, pe);
        Ok(c)
    }

    /// Non-blocking put that owns its source: the handle gives the buffer
    /// back when the data has left it (`wait` or `.await`).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the data does not fit the object;
    /// [`Error::UseAfterFree`] or [`Error::WrongInstance`] for a freed object or one of
    /// another instance; [`Error::PeOutOfRange`] for a bad `pe`; [`Error::OutOfHeap`] when
    /// the range leaves the heap (or touches its reserved first page);
    /// [`Error::NotInitialized`] after finalize; [`Error::PeerExited`] once `pe` is known
    /// dead; the engine's error ([`Error::Transport`]).
    pub fn put_handle<T: Element>(
        &self,
        dst: impl Into<SymSlice<T>>,
        src: Vec<T>,
        pe: PeId,
    ) -> Result<Handle<Vec<T>>> {
        let dst = dst.into();
        self.check_slice(&dst)?;
        fits(src.len(), dst.len())?;
        // SAFETY: the Vec's heap buffer does not move when the Vec is moved
        // into the handle, which keeps it alive until completion.
        let c = unsafe {
            self.put_async_raw(
                pe,
                dst.offset(),
                src.as_ptr() as *const u8,
                std::mem::size_of_val(&src[..]),
            )?
        };
        Ok(Handle::new(c, src))
    }

    /// Non-blocking get into an owned buffer (its length is the element
    /// count); the handle gives the filled buffer back.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the data does not fit the object;
    /// [`Error::UseAfterFree`] or [`Error::WrongInstance`] for a freed object or one of
    /// another instance; [`Error::PeOutOfRange`] for a bad `pe`; [`Error::OutOfHeap`] when
    /// the range leaves the heap (or touches its reserved first page);
    /// [`Error::NotInitialized`] after finalize; [`Error::PeerExited`] once `pe` is known
    /// dead; the engine's error ([`Error::Transport`]).
    pub fn get_handle<T: Element>(
        &self,
        mut into: Vec<T>,
        src: impl Into<SymSlice<T>>,
        pe: PeId,
    ) -> Result<Handle<Vec<T>>> {
        let src = src.into();
        self.check_slice(&src)?;
        fits(into.len(), src.len())?;
        let len = std::mem::size_of_val(&into[..]);
        // SAFETY: as for put_handle; the buffer is written only by the engine
        // until the handle completes.
        let c = unsafe { self.get_async_raw(pe, src.offset(), into.as_mut_ptr() as *mut u8, len)? };
        Ok(Handle::new(c, into))
    }

    fn external_engine(&self, pe: PeId) -> Result<&dyn Transport> {
        self.live_for(pe)?;
        self.check_pe(pe)?;
        self.transports
            .iter()
            .find(|t| t.capabilities().contains(Capabilities::EXTERNAL_MEMORY) && t.can_reach(pe))
            .map(|t| t.as_ref())
            .ok_or_else(|| Error::Unsupported(format!(
                "no engine in use reaches PE {pe}'s memory outside the symmetric heap (that takes an engine with external-memory access to PE {pe})"
            )))
    }

    /// Copies `src` into `pe`'s process memory at virtual address `addr`
    /// (outside the symmetric heap, e.g. a peer's static data).
    ///
    /// # Safety
    /// `addr..addr+src.len()` must be memory of `pe` that the program allows
    /// to be written (the OS refuses unmapped addresses with an error).
    ///
    /// # Errors
    /// [`Error::Unsupported`] when no linked engine reaches `pe`'s memory outside the heap;
    /// [`Error::PeOutOfRange`] for a bad `pe`; [`Error::NotInitialized`] after finalize;
    /// [`Error::PeerExited`] once `pe` is known dead; the OS error when the address is not
    /// mapped there.
    pub unsafe fn put_to_address(&self, pe: PeId, addr: usize, src: &[u8]) -> Result<()> {
        let t = self.external_engine(pe)?;
        // SAFETY: `src` is a live slice; the remote side is the caller's contract.
        unsafe { t.put_to_address(pe, addr, src.as_ptr(), src.len()) }
    }

    /// Copies from `pe`'s process memory at virtual address `addr` into `dst`.
    ///
    /// # Errors
    /// [`Error::Unsupported`] when no linked engine reaches `pe`'s memory outside the heap;
    /// [`Error::PeOutOfRange`] for a bad `pe`; [`Error::NotInitialized`] after finalize;
    /// [`Error::PeerExited`] once `pe` is known dead; the OS error when the address is not
    /// mapped there.
    pub fn get_from_address(&self, pe: PeId, addr: usize, dst: &mut [u8]) -> Result<()> {
        let t = self.external_engine(pe)?;
        // SAFETY: `dst` is a live exclusive slice; reading a peer is harmless to it.
        unsafe { t.get_from_address(pe, addr, dst.as_mut_ptr(), dst.len()) }
    }

    /// Performs `op` on the `width`-wide word at virtual address `addr` of
    /// `pe`, in memory outside its heap that `pe` exposed
    /// ([`Runtime::expose_memory`]), atomically with the CPU atomics of
    /// `pe`'s node on it; returns the previous value.
    ///
    /// # Safety
    /// `addr..addr+width` must be memory of `pe` that the program allows to
    /// be updated.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a misaligned `addr`;
    /// [`Error::Unsupported`] when no engine in use updates that word of
    /// `pe` (not exposed, or an engine whose atomics are not the owner's
    /// CPU atomics); [`Error::PeOutOfRange`], [`Error::NotInitialized`],
    /// [`Error::PeerExited`] as for [`Runtime::put_to_address`].
    pub unsafe fn atomic_at_address(
        &self,
        pe: PeId,
        addr: usize,
        width: AmoWidth,
        op: AmoOp,
    ) -> Result<u64> {
        if !addr.is_multiple_of(width.bytes()) {
            return Err(Error::invalid(
                "address",
                format!("{addr:#x} is not aligned to its {} bytes", width.bytes()),
            ));
        }
        let t = self.external_engine(pe)?;
        // SAFETY: aligned (checked); the remote word is the caller's contract.
        unsafe { t.atomic_at_address(pe, addr, width, op) }
    }

    /// Makes `regions` (start, length) of this process's memory outside the
    /// symmetric heap (its static data, say) reachable by the other PEs'
    /// [`Runtime::put_to_address`] and [`Runtime::get_from_address`] through
    /// engines that need it to be registered (libfabric's). Collective:
    /// every PE calls it, with its own regions (none is fine). An engine
    /// that fails to expose them is logged and left out: peers then reach
    /// that memory through another engine, or get [`Error::Unsupported`].
    ///
    /// # Safety
    /// `regions` must stay mapped and writable until finalize: the peers
    /// write into them without this process taking part.
    ///
    /// # Errors
    /// [`Error::NotInitialized`] after finalize; the bootstrap's failure; a
    /// peer's card that an engine cannot read.
    pub unsafe fn expose_memory(&self, regions: &[(usize, usize)]) -> Result<()> {
        self.live()?;
        let mut cards: Vec<(String, Vec<u8>)> = Vec::with_capacity(self.transports.len());
        for t in &self.transports {
            // SAFETY: the caller keeps the regions mapped, as required.
            match unsafe { t.expose_memory(regions) } {
                Ok(card) if !card.is_empty() => cards.push((t.name().to_string(), card)),
                Ok(_) => {}
                Err(e) => crate::shmem_log!(
                    Warn,
                    "engine {} cannot expose memory outside the symmetric heap ({e}); \
                     other PEs reach it another way, if any",
                    t.name()
                ),
            }
        }
        // Engines are matched by name: the PEs of a job may use different sets.
        let all = self.bootstrap.allgather(&crate::wire::encode(&cards))?;
        let all: Vec<Vec<(String, Vec<u8>)>> = all
            .iter()
            .map(|m| crate::wire::decode("exposed memory", m))
            .collect::<Result<_>>()?;
        for t in &self.transports {
            let of_t: Vec<&[u8]> = all
                .iter()
                .map(|c| {
                    c.iter()
                        .find(|(name, _)| name == t.name())
                        .map_or(&[][..], |(_, card)| card.as_slice())
                })
                .collect();
            if of_t.iter().any(|c| !c.is_empty()) {
                t.learn_exposed_memory(&of_t)?;
            }
        }
        Ok(())
    }

    /// Copies `src` into `dst` on `pe`. `src.len()` must not exceed `dst.len()`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the data does not fit the object;
    /// [`Error::UseAfterFree`] or [`Error::WrongInstance`] for a freed object or one of
    /// another instance; [`Error::PeOutOfRange`] for a bad `pe`; [`Error::OutOfHeap`] when
    /// the range leaves the heap (or touches its reserved first page);
    /// [`Error::NotInitialized`] after finalize; [`Error::PeerExited`] once `pe` is known
    /// dead; the engine's error ([`Error::Transport`]).
    pub fn put<T: Element>(&self, dst: impl Into<SymSlice<T>>, src: &[T], pe: PeId) -> Result<()> {
        let dst = dst.into();
        self.check_slice(&dst)?;
        fits(src.len(), dst.len())?;
        self.put_bytes(pe, dst.offset(), as_bytes(src))
    }

    /// Copies `src` on `pe` into `dst`. `dst.len()` must not exceed `src.len()`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the data does not fit the object;
    /// [`Error::UseAfterFree`] or [`Error::WrongInstance`] for a freed object or one of
    /// another instance; [`Error::PeOutOfRange`] for a bad `pe`; [`Error::OutOfHeap`] when
    /// the range leaves the heap (or touches its reserved first page);
    /// [`Error::NotInitialized`] after finalize; [`Error::PeerExited`] once `pe` is known
    /// dead; the engine's error ([`Error::Transport`]).
    pub fn get<T: Element>(
        &self,
        dst: &mut [T],
        src: impl Into<SymSlice<T>>,
        pe: PeId,
    ) -> Result<()> {
        let src = src.into();
        self.check_slice(&src)?;
        fits(dst.len(), src.len())?;
        self.get_bytes(pe, src.offset(), as_bytes_mut(dst))
    }

    /// Writes one element.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the data does not fit the object;
    /// [`Error::UseAfterFree`] or [`Error::WrongInstance`] for a freed object or one of
    /// another instance; [`Error::PeOutOfRange`] for a bad `pe`; [`Error::OutOfHeap`] when
    /// the range leaves the heap (or touches its reserved first page);
    /// [`Error::NotInitialized`] after finalize; [`Error::PeerExited`] once `pe` is known
    /// dead; the engine's error ([`Error::Transport`]).
    pub fn p<T: Element>(&self, dst: SymRef<T>, value: T, pe: PeId) -> Result<()> {
        self.check_ref(&dst)?;
        self.put_bytes(pe, dst.offset(), as_bytes(std::slice::from_ref(&value)))
    }

    /// Reads one element.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the data does not fit the object;
    /// [`Error::UseAfterFree`] or [`Error::WrongInstance`] for a freed object or one of
    /// another instance; [`Error::PeOutOfRange`] for a bad `pe`; [`Error::OutOfHeap`] when
    /// the range leaves the heap (or touches its reserved first page);
    /// [`Error::NotInitialized`] after finalize; [`Error::PeerExited`] once `pe` is known
    /// dead; the engine's error ([`Error::Transport`]).
    pub fn g<T: Element>(&self, src: SymRef<T>, pe: PeId) -> Result<T> {
        self.check_ref(&src)?;
        let mut v = std::mem::MaybeUninit::<T>::uninit();
        // SAFETY: a byte view of the uninitialised value, fully written by
        // get_bytes before being read (Element: every bit pattern is valid).
        let bytes = unsafe {
            std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut u8, std::mem::size_of::<T>())
        };
        self.get_bytes(pe, src.offset(), bytes)?;
        // SAFETY: all bytes written above.
        Ok(unsafe { v.assume_init() })
    }

    /// Strided put: `dst[i*dst_stride] = src[i*src_stride]` for `i < nelems`
    /// (strides in elements, at least 1).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a stride of 0 or strides that run past either array;
    /// [`Error::UseAfterFree`] or [`Error::WrongInstance`] for a freed object or one of
    /// another instance; [`Error::PeOutOfRange`] for a bad `pe`; [`Error::OutOfHeap`] when
    /// the range leaves the heap (or touches its reserved first page);
    /// [`Error::NotInitialized`] after finalize; [`Error::PeerExited`] once `pe` is known
    /// dead; the engine's error ([`Error::Transport`]).
    pub fn iput<T: Element>(
        &self,
        dst: impl Into<SymSlice<T>>,
        src: &[T],
        dst_stride: usize,
        src_stride: usize,
        nelems: usize,
        pe: PeId,
    ) -> Result<()> {
        let dst = dst.into();
        self.check_slice(&dst)?;
        strided_fits("src", src.len(), src_stride, nelems)?;
        strided_fits("dest", dst.len(), dst_stride, nelems)?;
        let sz = std::mem::size_of::<T>();
        for i in 0..nelems {
            self.put_bytes(
                pe,
                dst.offset() + i * dst_stride * sz,
                as_bytes(std::slice::from_ref(&src[i * src_stride])),
            )?;
        }
        Ok(())
    }

    /// Strided get: `dst[i*dst_stride] = src[i*src_stride]` for `i < nelems`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a stride of 0 or strides that run past either array;
    /// [`Error::UseAfterFree`] or [`Error::WrongInstance`] for a freed object or one of
    /// another instance; [`Error::PeOutOfRange`] for a bad `pe`; [`Error::OutOfHeap`] when
    /// the range leaves the heap (or touches its reserved first page);
    /// [`Error::NotInitialized`] after finalize; [`Error::PeerExited`] once `pe` is known
    /// dead; the engine's error ([`Error::Transport`]).
    pub fn iget<T: Element>(
        &self,
        dst: &mut [T],
        src: impl Into<SymSlice<T>>,
        dst_stride: usize,
        src_stride: usize,
        nelems: usize,
        pe: PeId,
    ) -> Result<()> {
        let src = src.into();
        self.check_slice(&src)?;
        strided_fits("dest", dst.len(), dst_stride, nelems)?;
        strided_fits("src", src.len(), src_stride, nelems)?;
        let sz = std::mem::size_of::<T>();
        for i in 0..nelems {
            self.get_bytes(
                pe,
                src.offset() + i * src_stride * sz,
                as_bytes_mut(std::slice::from_mut(&mut dst[i * dst_stride])),
            )?;
        }
        Ok(())
    }

    /// Non-blocking put; `src` may be reused after [`Runtime::quiet`].
    ///
    /// # Safety
    /// `src` must stay alive and unmodified until `quiet` returns.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the data does not fit the object;
    /// [`Error::UseAfterFree`] or [`Error::WrongInstance`] for a freed object or one of
    /// another instance; [`Error::PeOutOfRange`] for a bad `pe`; [`Error::OutOfHeap`] when
    /// the range leaves the heap (or touches its reserved first page);
    /// [`Error::NotInitialized`] after finalize; [`Error::PeerExited`] once `pe` is known
    /// dead; the engine's error ([`Error::Transport`]).
    pub unsafe fn put_nbi<T: Element>(
        &self,
        dst: impl Into<SymSlice<T>>,
        src: &[T],
        pe: PeId,
    ) -> Result<()> {
        let dst = dst.into();
        self.check_slice(&dst)?;
        fits(src.len(), dst.len())?;
        // SAFETY: forwarded contract.
        unsafe {
            self.put_nbi_raw(
                pe,
                dst.offset(),
                src.as_ptr() as *const u8,
                std::mem::size_of_val(src),
            )
        }
    }

    /// Non-blocking get; `dst` holds the data after [`Runtime::quiet`].
    ///
    /// # Safety
    /// `dst` must stay alive and untouched until `quiet` returns.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the data does not fit the object;
    /// [`Error::UseAfterFree`] or [`Error::WrongInstance`] for a freed object or one of
    /// another instance; [`Error::PeOutOfRange`] for a bad `pe`; [`Error::OutOfHeap`] when
    /// the range leaves the heap (or touches its reserved first page);
    /// [`Error::NotInitialized`] after finalize; [`Error::PeerExited`] once `pe` is known
    /// dead; the engine's error ([`Error::Transport`]).
    pub unsafe fn get_nbi<T: Element>(
        &self,
        dst: &mut [T],
        src: impl Into<SymSlice<T>>,
        pe: PeId,
    ) -> Result<()> {
        let src = src.into();
        self.check_slice(&src)?;
        fits(dst.len(), src.len())?;
        // SAFETY: forwarded contract.
        unsafe {
            self.get_nbi_raw(
                pe,
                src.offset(),
                dst.as_mut_ptr() as *mut u8,
                std::mem::size_of_val(dst),
            )
        }
    }
}
