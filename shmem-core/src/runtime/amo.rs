//! Remote atomic memory operations.

use super::*;

impl Runtime {
    /// Performs a raw atomic on `pe`'s heap at `offset` (bounds and alignment checked).
    ///
    /// # Errors
    /// [`Error::PeOutOfRange`] for a bad `pe`; [`Error::OutOfHeap`] or
    /// [`Error::Misaligned`] for a word outside the heap or not aligned to its width;
    /// [`Error::NotInitialized`] after finalize; [`Error::PeerExited`] once `pe` is known
    /// dead; the engine's error ([`Error::Transport`]).
    #[inline(always)]
    pub fn atomic_raw(&self, pe: PeId, offset: usize, width: AmoWidth, op: AmoOp) -> Result<u64> {
        self.live_for(pe)?;
        self.check_atomic(offset, width.bytes())?;
        if let Some(base) = self.direct(pe) {
            // SAFETY: in-heap, aligned word of `pe`'s mapped heap (checked).
            return Ok(unsafe { crate::loadstore::atomic(base.as_ptr(), offset, width, op) });
        }
        let t = self.route(pe)?;
        // SAFETY: `route` checked the PE, `check_atomic` the range and
        // alignment of the word.
        unsafe { t.atomic(pe, offset, width, op) }
    }

    /// [`Runtime::atomic_raw`] for an op whose old value nobody reads
    /// (`Set`, `Add`, `And`, `Or`, `Xor`): the engine may return once the
    /// update is posted ([`Transport::atomic_post`]); it is complete at the
    /// target by the next `quiet`.
    ///
    /// # Errors
    /// As [`Runtime::atomic_raw`].
    pub fn atomic_post_raw(
        &self,
        pe: PeId,
        offset: usize,
        width: AmoWidth,
        op: AmoOp,
    ) -> Result<()> {
        self.live_for(pe)?;
        self.check_atomic(offset, width.bytes())?;
        if let Some(base) = self.direct(pe) {
            // SAFETY: in-heap, aligned word of `pe`'s mapped heap (checked).
            unsafe { crate::loadstore::atomic(base.as_ptr(), offset, width, op) };
            return Ok(());
        }
        let t = self.route(pe)?;
        // SAFETY: as in `atomic_raw`.
        unsafe { t.atomic_post(pe, offset, width, op) }
    }

    fn amo_post<T: AtomicElement>(&self, target: SymRef<T>, pe: PeId, op: AmoOp) -> Result<()> {
        self.check_ref(&target)?;
        self.atomic_post_raw(pe, target.offset(), T::WIDTH, op)
    }

    fn amo<T: AtomicElement>(&self, target: SymRef<T>, pe: PeId, op: AmoOp) -> Result<T> {
        self.check_ref(&target)?;
        self.atomic_raw(pe, target.offset(), T::WIDTH, op)
            .map(T::from_bits)
    }

    /// Atomically reads the element.
    ///
    /// # Errors
    /// [`Error::UseAfterFree`] or [`Error::WrongInstance`] for a freed object or one of
    /// another instance; [`Error::PeOutOfRange`] for a bad `pe`; [`Error::OutOfHeap`] or
    /// [`Error::Misaligned`] for a word outside the heap or not aligned to its width;
    /// [`Error::NotInitialized`] after finalize; [`Error::PeerExited`] once `pe` is known
    /// dead; the engine's error ([`Error::Transport`]).
    pub fn atomic_fetch<T: AtomicElement>(&self, target: SymRef<T>, pe: PeId) -> Result<T> {
        self.amo(target, pe, AmoOp::Fetch)
    }

    /// Atomically writes the element.
    ///
    /// # Errors
    /// [`Error::UseAfterFree`] or [`Error::WrongInstance`] for a freed object or one of
    /// another instance; [`Error::PeOutOfRange`] for a bad `pe`; [`Error::OutOfHeap`] or
    /// [`Error::Misaligned`] for a word outside the heap or not aligned to its width;
    /// [`Error::NotInitialized`] after finalize; [`Error::PeerExited`] once `pe` is known
    /// dead; the engine's error ([`Error::Transport`]).
    pub fn atomic_set<T: AtomicElement>(
        &self,
        target: SymRef<T>,
        value: T,
        pe: PeId,
    ) -> Result<()> {
        self.amo_post(target, pe, AmoOp::Set(value.to_bits()))
    }

    /// Atomically writes the element and returns the old value.
    ///
    /// # Errors
    /// [`Error::UseAfterFree`] or [`Error::WrongInstance`] for a freed object or one of
    /// another instance; [`Error::PeOutOfRange`] for a bad `pe`; [`Error::OutOfHeap`] or
    /// [`Error::Misaligned`] for a word outside the heap or not aligned to its width;
    /// [`Error::NotInitialized`] after finalize; [`Error::PeerExited`] once `pe` is known
    /// dead; the engine's error ([`Error::Transport`]).
    pub fn atomic_swap<T: AtomicElement>(
        &self,
        target: SymRef<T>,
        value: T,
        pe: PeId,
    ) -> Result<T> {
        self.amo(target, pe, AmoOp::Swap(value.to_bits()))
    }

    /// Writes `value` if the element equals `cond`; returns the old value.
    ///
    /// # Errors
    /// [`Error::UseAfterFree`] or [`Error::WrongInstance`] for a freed object or one of
    /// another instance; [`Error::PeOutOfRange`] for a bad `pe`; [`Error::OutOfHeap`] or
    /// [`Error::Misaligned`] for a word outside the heap or not aligned to its width;
    /// [`Error::NotInitialized`] after finalize; [`Error::PeerExited`] once `pe` is known
    /// dead; the engine's error ([`Error::Transport`]).
    pub fn atomic_compare_swap<T: AtomicInteger>(
        &self,
        target: SymRef<T>,
        cond: T,
        value: T,
        pe: PeId,
    ) -> Result<T> {
        self.amo(
            target,
            pe,
            AmoOp::CompareSwap {
                cond: cond.to_bits(),
                value: value.to_bits(),
            },
        )
    }

    /// Adds `value` and returns the old value.
    ///
    /// # Errors
    /// [`Error::UseAfterFree`] or [`Error::WrongInstance`] for a freed object or one of
    /// another instance; [`Error::PeOutOfRange`] for a bad `pe`; [`Error::OutOfHeap`] or
    /// [`Error::Misaligned`] for a word outside the heap or not aligned to its width;
    /// [`Error::NotInitialized`] after finalize; [`Error::PeerExited`] once `pe` is known
    /// dead; the engine's error ([`Error::Transport`]).
    pub fn atomic_fetch_add<T: AtomicInteger>(
        &self,
        target: SymRef<T>,
        value: T,
        pe: PeId,
    ) -> Result<T> {
        self.amo(target, pe, AmoOp::Add(value.to_bits()))
    }

    /// Adds `value`.
    ///
    /// # Errors
    /// [`Error::UseAfterFree`] or [`Error::WrongInstance`] for a freed object or one of
    /// another instance; [`Error::PeOutOfRange`] for a bad `pe`; [`Error::OutOfHeap`] or
    /// [`Error::Misaligned`] for a word outside the heap or not aligned to its width;
    /// [`Error::NotInitialized`] after finalize; [`Error::PeerExited`] once `pe` is known
    /// dead; the engine's error ([`Error::Transport`]).
    pub fn atomic_add<T: AtomicInteger>(
        &self,
        target: SymRef<T>,
        value: T,
        pe: PeId,
    ) -> Result<()> {
        self.amo_post(target, pe, AmoOp::Add(value.to_bits()))
    }

    /// Adds one and returns the old value.
    ///
    /// # Errors
    /// [`Error::UseAfterFree`] or [`Error::WrongInstance`] for a freed object or one of
    /// another instance; [`Error::PeOutOfRange`] for a bad `pe`; [`Error::OutOfHeap`] or
    /// [`Error::Misaligned`] for a word outside the heap or not aligned to its width;
    /// [`Error::NotInitialized`] after finalize; [`Error::PeerExited`] once `pe` is known
    /// dead; the engine's error ([`Error::Transport`]).
    pub fn atomic_fetch_inc<T: AtomicInteger>(&self, target: SymRef<T>, pe: PeId) -> Result<T> {
        self.amo(target, pe, AmoOp::Add(1))
    }

    /// Adds one.
    ///
    /// # Errors
    /// [`Error::UseAfterFree`] or [`Error::WrongInstance`] for a freed object or one of
    /// another instance; [`Error::PeOutOfRange`] for a bad `pe`; [`Error::OutOfHeap`] or
    /// [`Error::Misaligned`] for a word outside the heap or not aligned to its width;
    /// [`Error::NotInitialized`] after finalize; [`Error::PeerExited`] once `pe` is known
    /// dead; the engine's error ([`Error::Transport`]).
    pub fn atomic_inc<T: AtomicInteger>(&self, target: SymRef<T>, pe: PeId) -> Result<()> {
        self.amo_post(target, pe, AmoOp::Add(1))
    }

    /// Bitwise and; returns the old value.
    ///
    /// # Errors
    /// [`Error::UseAfterFree`] or [`Error::WrongInstance`] for a freed object or one of
    /// another instance; [`Error::PeOutOfRange`] for a bad `pe`; [`Error::OutOfHeap`] or
    /// [`Error::Misaligned`] for a word outside the heap or not aligned to its width;
    /// [`Error::NotInitialized`] after finalize; [`Error::PeerExited`] once `pe` is known
    /// dead; the engine's error ([`Error::Transport`]).
    pub fn atomic_fetch_and<T: AtomicInteger>(
        &self,
        target: SymRef<T>,
        value: T,
        pe: PeId,
    ) -> Result<T> {
        self.amo(target, pe, AmoOp::And(value.to_bits()))
    }

    /// Bitwise and.
    ///
    /// # Errors
    /// [`Error::UseAfterFree`] or [`Error::WrongInstance`] for a freed object or one of
    /// another instance; [`Error::PeOutOfRange`] for a bad `pe`; [`Error::OutOfHeap`] or
    /// [`Error::Misaligned`] for a word outside the heap or not aligned to its width;
    /// [`Error::NotInitialized`] after finalize; [`Error::PeerExited`] once `pe` is known
    /// dead; the engine's error ([`Error::Transport`]).
    pub fn atomic_and<T: AtomicInteger>(
        &self,
        target: SymRef<T>,
        value: T,
        pe: PeId,
    ) -> Result<()> {
        self.amo_post(target, pe, AmoOp::And(value.to_bits()))
    }

    /// Bitwise or; returns the old value.
    ///
    /// # Errors
    /// [`Error::UseAfterFree`] or [`Error::WrongInstance`] for a freed object or one of
    /// another instance; [`Error::PeOutOfRange`] for a bad `pe`; [`Error::OutOfHeap`] or
    /// [`Error::Misaligned`] for a word outside the heap or not aligned to its width;
    /// [`Error::NotInitialized`] after finalize; [`Error::PeerExited`] once `pe` is known
    /// dead; the engine's error ([`Error::Transport`]).
    pub fn atomic_fetch_or<T: AtomicInteger>(
        &self,
        target: SymRef<T>,
        value: T,
        pe: PeId,
    ) -> Result<T> {
        self.amo(target, pe, AmoOp::Or(value.to_bits()))
    }

    /// Bitwise or.
    ///
    /// # Errors
    /// [`Error::UseAfterFree`] or [`Error::WrongInstance`] for a freed object or one of
    /// another instance; [`Error::PeOutOfRange`] for a bad `pe`; [`Error::OutOfHeap`] or
    /// [`Error::Misaligned`] for a word outside the heap or not aligned to its width;
    /// [`Error::NotInitialized`] after finalize; [`Error::PeerExited`] once `pe` is known
    /// dead; the engine's error ([`Error::Transport`]).
    pub fn atomic_or<T: AtomicInteger>(&self, target: SymRef<T>, value: T, pe: PeId) -> Result<()> {
        self.amo_post(target, pe, AmoOp::Or(value.to_bits()))
    }

    /// Bitwise xor; returns the old value.
    ///
    /// # Errors
    /// [`Error::UseAfterFree`] or [`Error::WrongInstance`] for a freed object or one of
    /// another instance; [`Error::PeOutOfRange`] for a bad `pe`; [`Error::OutOfHeap`] or
    /// [`Error::Misaligned`] for a word outside the heap or not aligned to its width;
    /// [`Error::NotInitialized`] after finalize; [`Error::PeerExited`] once `pe` is known
    /// dead; the engine's error ([`Error::Transport`]).
    pub fn atomic_fetch_xor<T: AtomicInteger>(
        &self,
        target: SymRef<T>,
        value: T,
        pe: PeId,
    ) -> Result<T> {
        self.amo(target, pe, AmoOp::Xor(value.to_bits()))
    }

    /// Bitwise xor.
    ///
    /// # Errors
    /// [`Error::UseAfterFree`] or [`Error::WrongInstance`] for a freed object or one of
    /// another instance; [`Error::PeOutOfRange`] for a bad `pe`; [`Error::OutOfHeap`] or
    /// [`Error::Misaligned`] for a word outside the heap or not aligned to its width;
    /// [`Error::NotInitialized`] after finalize; [`Error::PeerExited`] once `pe` is known
    /// dead; the engine's error ([`Error::Transport`]).
    pub fn atomic_xor<T: AtomicInteger>(
        &self,
        target: SymRef<T>,
        value: T,
        pe: PeId,
    ) -> Result<()> {
        self.amo_post(target, pe, AmoOp::Xor(value.to_bits()))
    }
}
