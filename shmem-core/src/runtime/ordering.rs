//! Ordering and completion (`fence`, `quiet`) and leaving the job.

use super::*;

impl Runtime {
    /// Orders puts/AMOs to each PE.
    ///
    /// # Errors
    /// [`Error::NotInitialized`] after finalize; an engine's error.
    pub fn fence(&self) -> Result<()> {
        self.live()?;
        self.in_use
            .iter()
            .try_for_each(|&i| self.transports[i as usize].fence())
    }

    /// Completes every outstanding operation of this PE.
    ///
    /// # Errors
    /// After finalize; when an engine fails; and once any PE has been
    /// reported dead (naming it), since operations to it cannot have
    /// completed.
    #[inline]
    pub fn quiet(&self) -> Result<()> {
        let r = self.quiet_engines();
        // One full fence for all engines: every store this PE made (copies
        // on mapped heaps included) is ordered before anything after quiet.
        std::sync::atomic::fence(Ordering::SeqCst);
        self.quiet_outcome(r)
    }

    /// Whether [`Runtime::quiet`] waits only for this node: every engine
    /// this PE uses reaches its PEs through mapped memory
    /// ([`Capabilities::DIRECT_POINTER`]), so quiet is a fence plus, at
    /// most, the end of this node's own asynchronous copies; never a peer
    /// or a link. A binding that hands blocking calls to another thread
    /// (Python's, for Ctrl-C) can run such a quiet in place.
    #[inline]
    pub fn quiet_is_local(&self) -> bool {
        self.quiet_is_local
    }

    /// [`Runtime::quiet`] without its closing fence, for a caller whose
    /// next access to shared memory is a sequentially consistent store or
    /// read-modify-write made by this thread (a barrier's first handshake
    /// signal to a PE it reaches by load and store): that fences as quiet
    /// would, and a second fence costs a locked instruction (5 ns here).
    ///
    /// # Errors
    /// As [`Runtime::quiet`].
    #[inline]
    pub fn quiet_before_seqcst(&self) -> Result<()> {
        let r = self.quiet_engines();
        self.quiet_outcome(r)
    }

    #[inline]
    fn quiet_engines(&self) -> Result<()> {
        self.live()?;
        self.in_use
            .iter()
            .try_for_each(|&i| self.transports[i as usize].quiet())
    }

    #[inline]
    fn quiet_outcome(&self, r: Result<()>) -> Result<()> {
        // An engine's own error names the peer it lost: the most specific
        // cause, reported before the job's list of dead PEs (whose order
        // can put a survivor that already exited first).
        r?;
        if self.health.word() != 0 {
            self.health.check(None)?;
        }
        Ok(())
    }

    /// Ends the whole job with `status` (OpenSHMEM `global_exit`).
    pub fn global_exit(&self, status: i32, message: &str) -> ! {
        let _ = self.bootstrap.abort(status, message);
        std::process::exit(status)
    }

    /// Leaves the job (collective): completes outstanding work, waits for
    /// every PE, then releases mappings and the bootstrap.
    ///
    /// # Errors
    /// [`Error::NotInitialized`] when already finalized; otherwise the first of: `quiet`'s
    /// error (a dead PE, an engine), the final barrier's, the bootstrap's.
    pub fn finalize(&self) -> Result<()> {
        if self.finalized.load(Ordering::Acquire) {
            return Err(Error::NotInitialized);
        }
        let q = self.quiet();
        let b = self.bootstrap.barrier();
        self.finalized.store(true, Ordering::Release);
        self.health.mark_finalized();
        let f = self.bootstrap.finalize();
        q.and(b).and(f)
    }
}
