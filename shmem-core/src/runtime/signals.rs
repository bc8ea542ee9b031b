//! Signals: put-with-signal, signal updates and waits on a signal word.

use super::*;

impl Runtime {
    fn check_signal(&self, sig: SymRef<u64>) -> Result<()> {
        self.check_ref(&sig)?;
        self.check_atomic(sig.offset(), 8)
    }

    /// Checks a put-with-signal's arguments, then hands `post` the engine
    /// that reaches `pe`, the destination's heap offset, the source bytes
    /// and the signal's heap offset.
    fn checked_put_signal<T: Element>(
        &self,
        dst: SymSlice<T>,
        src: &[T],
        sig: SymRef<u64>,
        pe: PeId,
        post: impl FnOnce(&dyn Transport, usize, &[u8], usize) -> Result<()>,
    ) -> Result<()> {
        self.check_slice(&dst)?;
        fits(src.len(), dst.len())?;
        self.check_signal(sig)?;
        let t = self.route(pe)?;
        post(t, dst.offset(), as_bytes(src), sig.offset())
    }

    /// Puts `src` into `dst` on `pe`, then updates `sig` on `pe`; the signal
    /// is observed only after the data.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the data does not fit the object;
    /// [`Error::UseAfterFree`] or [`Error::WrongInstance`] for a freed object or one of
    /// another instance; [`Error::PeOutOfRange`] for a bad `pe`; [`Error::OutOfHeap`] or
    /// [`Error::Misaligned`] for a word outside the heap or not aligned to its width;
    /// [`Error::NotInitialized`] after finalize; [`Error::PeerExited`] once `pe` is known
    /// dead; the engine's error ([`Error::Transport`]).
    pub fn put_signal<T: Element>(
        &self,
        dst: impl Into<SymSlice<T>>,
        src: &[T],
        sig: SymRef<u64>,
        value: u64,
        op: SignalOp,
        pe: PeId,
    ) -> Result<()> {
        self.checked_put_signal(dst.into(), src, sig, pe, |t, dst, b, sig| {
            // SAFETY: `src` is live for this blocking call; the PE, the
            // range and the word are checked.
            unsafe { t.put_signal(pe, dst, b.as_ptr(), b.len(), sig, op, value, false) }
        })
    }

    /// [`Runtime::put_signal`] for a collective's signal: only `pe` waits
    /// for it, and this PE never needs to know that it arrived (it learns
    /// what it needs from `pe`'s own later signals), so `quiet` need not
    /// wait for its completion ([`Transport::put_signal_collective`]). Over
    /// an engine whose completions come back from the target (libfabric's),
    /// a barrier then pays no wait for the acknowledgement of the previous
    /// collective's signal. Puts and AMOs completed by an earlier `fence` or
    /// `quiet` arrive before it, as with `put_signal`.
    ///
    /// # Errors
    /// As [`Runtime::put_signal`].
    pub fn put_signal_collective<T: Element>(
        &self,
        dst: impl Into<SymSlice<T>>,
        src: &[T],
        sig: SymRef<u64>,
        value: u64,
        op: SignalOp,
        pe: PeId,
    ) -> Result<()> {
        self.checked_put_signal(dst.into(), src, sig, pe, |t, dst, b, sig| {
            // SAFETY: as in `put_signal`.
            unsafe { t.put_signal_collective(pe, dst, b.as_ptr(), b.len(), sig, op, value) }
        })
    }

    /// Non-blocking [`Runtime::put_signal`].
    ///
    /// # Safety
    /// `src` must stay alive and unmodified until `quiet` returns.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the data does not fit the object;
    /// [`Error::UseAfterFree`] or [`Error::WrongInstance`] for a freed object or one of
    /// another instance; [`Error::PeOutOfRange`] for a bad `pe`; [`Error::OutOfHeap`] or
    /// [`Error::Misaligned`] for a word outside the heap or not aligned to its width;
    /// [`Error::NotInitialized`] after finalize; [`Error::PeerExited`] once `pe` is known
    /// dead; the engine's error ([`Error::Transport`]).
    pub unsafe fn put_signal_nbi<T: Element>(
        &self,
        dst: impl Into<SymSlice<T>>,
        src: &[T],
        sig: SymRef<u64>,
        value: u64,
        op: SignalOp,
        pe: PeId,
    ) -> Result<()> {
        self.checked_put_signal(dst.into(), src, sig, pe, |t, dst, b, sig| {
            // SAFETY: forwarded contract (`src` outlives the operation).
            unsafe { t.put_signal(pe, dst, b.as_ptr(), b.len(), sig, op, value, true) }
        })
    }

    /// Updates `sig` on `pe` without data.
    ///
    /// # Errors
    /// [`Error::UseAfterFree`] or [`Error::WrongInstance`] for a freed object or one of
    /// another instance; [`Error::PeOutOfRange`] for a bad `pe`; [`Error::OutOfHeap`] or
    /// [`Error::Misaligned`] for a word outside the heap or not aligned to its width;
    /// [`Error::NotInitialized`] after finalize; [`Error::PeerExited`] once `pe` is known
    /// dead; the engine's error ([`Error::Transport`]).
    #[inline]
    pub fn signal_op(&self, sig: SymRef<u64>, value: u64, op: SignalOp, pe: PeId) -> Result<()> {
        self.signal_update(sig, value, op, pe, false)
    }

    /// [`Runtime::signal_op`] for a collective's signal (see
    /// [`Runtime::put_signal_collective`]).
    ///
    /// # Errors
    /// As [`Runtime::signal_op`].
    #[inline]
    pub fn signal_op_collective(
        &self,
        sig: SymRef<u64>,
        value: u64,
        op: SignalOp,
        pe: PeId,
    ) -> Result<()> {
        self.signal_update(sig, value, op, pe, true)
    }

    /// [`Runtime::signal_op`], or with `collective` its collective form.
    #[inline]
    fn signal_update(
        &self,
        sig: SymRef<u64>,
        value: u64,
        op: SignalOp,
        pe: PeId,
        collective: bool,
    ) -> Result<()> {
        self.live_for(pe)?;
        self.check_signal(sig)?;
        if let Some(base) = self.direct(pe) {
            // SAFETY: in-heap, aligned signal word of `pe`'s mapped heap (checked).
            unsafe {
                crate::loadstore::signal(
                    base.as_ptr(),
                    sig.offset(),
                    op,
                    value,
                    wait::Span::bytes(0, 0),
                )
            };
            return Ok(());
        }
        let t = self.route(pe)?;
        if collective {
            let none = std::ptr::NonNull::<u8>::dangling().as_ptr();
            // SAFETY: `route` checked the PE, `check_signal` the word; no data.
            unsafe { t.put_signal_collective(pe, 0, none, 0, sig.offset(), op, value) }
        } else {
            // SAFETY: `route` checked the PE, `check_signal` the word.
            unsafe { t.signal(pe, sig.offset(), op, value) }
        }
    }

    /// Reads this PE's signal word.
    ///
    /// # Errors
    /// [`Error::UseAfterFree`] or [`Error::WrongInstance`] for a freed object or one of
    /// another instance; [`Error::OutOfHeap`] or [`Error::Misaligned`] for a signal word
    /// outside the heap or unaligned; [`Error::NotInitialized`] after finalize.
    pub fn signal_fetch(&self, sig: SymRef<u64>) -> Result<u64> {
        self.live()?;
        self.check_signal(sig)?;
        // SAFETY: in-heap, 8-byte aligned (checked).
        Ok(unsafe { u64::load(self.base.as_ptr().add(sig.offset())) })
    }

    /// Waits until this PE's `sig <cmp> value`; returns the signal's value.
    ///
    /// # Errors
    /// [`Error::UseAfterFree`] or [`Error::WrongInstance`] for a freed object or one of
    /// another instance, or [`Error::OutOfHeap`] / [`Error::Misaligned`] for variables
    /// outside the heap or unaligned; [`Error::InvalidArgument`] for a status mask or value
    /// list whose length is not the variables'; [`Error::NotInitialized`] after finalize;
    /// while waiting, [`Error::PeerExited`] or [`Error::Aborted`] when a PE dies or the job
    /// is aborted, and [`Error::Timeout`] after `SHMEM_WAIT_TIMEOUT`.
    #[track_caller]
    pub fn signal_wait_until(&self, sig: SymRef<u64>, cmp: Cmp, value: u64) -> Result<u64> {
        self.live()?;
        self.check_signal(sig)?;
        // SAFETY: in-heap, 8-byte aligned (checked).
        let p = unsafe { self.base.as_ptr().add(sig.offset()) };
        let mut seen = 0;
        self.wait_on(sig.offset(), 8, || {
            // SAFETY: as above.
            seen = unsafe { u64::load(p) };
            cmp.eval(seen, value)
        })?;
        Ok(seen)
    }
}
