//! Point-to-point synchronisation on local memory: waits and tests.

use super::*;

impl Runtime {
    /// Blocks until `ready()` holds, spinning first and then sleeping; fails
    /// when a PE exits, the job is aborted, or `SHMEM_WAIT_TIMEOUT` passes.
    ///
    /// `ready` may read anything; a sleeping caller is woken by every write
    /// into this PE's memory. When the condition reads only one range of the
    /// heap, [`Runtime::wait_on`] is cheaper for everyone.
    ///
    /// # Errors
    /// [`Error::PeerExited`] or [`Error::Aborted`] when a PE dies or the job
    /// is aborted, [`Error::Timeout`] after `SHMEM_WAIT_TIMEOUT`.
    #[track_caller]
    pub fn wait_for(&self, ready: impl FnMut() -> bool) -> Result<()> {
        self.wait_watching(wait::Span::ALL, ready)
    }

    /// [`Runtime::wait_for`] for a condition that reads only `len` bytes at
    /// heap `offset` of this PE: while it sleeps, writers wake it only when
    /// they write into that range, so puts elsewhere cost them no system call
    /// and cost this PE no wake-up.
    ///
    /// # Errors
    /// As [`Runtime::wait_for`].
    #[track_caller]
    pub fn wait_on(&self, offset: usize, len: usize, ready: impl FnMut() -> bool) -> Result<()> {
        self.wait_watching(wait::Span::bytes(offset, len), ready)
    }

    /// [`Runtime::wait_on`] for a condition on `len` bytes at `offset` of
    /// `pe`'s heap, which must be mapped here (see [`Runtime::peer_ptr`]):
    /// the caller sleeps on `pe`'s doorbell, so one wake-up by a writer of
    /// that range releases every PE of the node waiting on it (a barrier's
    /// release word read by all).
    ///
    /// # Errors
    /// As [`Runtime::wait_for`]; [`Error::InvalidArgument`] when `pe`'s heap is not mapped here or the
    /// range is outside the heap.
    #[track_caller]
    pub fn wait_on_pe(
        &self,
        pe: PeId,
        offset: usize,
        len: usize,
        ready: impl FnMut() -> bool,
    ) -> Result<()> {
        self.live()?;
        self.check_pe(pe)?;
        self.check_range(offset, len)?;
        let Some(base) = self.mapped_heap(pe)? else {
            return Err(Error::invalid(
                "pe",
                format!("PE {pe}'s heap is not mapped into this PE; wait on local memory instead"),
            ));
        };
        // SAFETY: a mapped heap starts with its control block and stays
        // mapped for the runtime's life.
        unsafe {
            self.wait_in(
                base.as_ptr() as *const ControlBlock,
                wait::Span::bytes(offset, len),
                Some(pe),
                ready,
            )
        }
    }

    /// Where `pe`'s heap (its control block first) is mapped here, if it
    /// is: this PE's own, a load/store peer's, or one its engine maps.
    ///
    /// # Errors
    /// [`Error::PeOutOfRange`] for a bad `pe`.
    pub(crate) fn mapped_heap(&self, pe: PeId) -> Result<Option<NonNull<u8>>> {
        if pe == self.my_pe {
            return Ok(Some(self.base));
        }
        if let Some(base) = self.direct(pe) {
            return Ok(Some(base));
        }
        let t = self.route(pe)?;
        // SAFETY: `route` checked the PE; offset 0 is in every heap.
        Ok(unsafe { t.peer_ptr(pe, 0) })
    }

    /// `FUTEX_WAKE` system calls that writers (this PE's threads and its
    /// peers) made to wake this PE's waiters since the job started.
    pub fn wakeups_received(&self) -> u64 {
        // SAFETY: the control block sits at offset 0 of our live heap.
        unsafe { (*self.control_block()).wakeups.load(Ordering::Relaxed) }
    }

    #[track_caller]
    fn wait_watching(&self, watch: wait::Span, ready: impl FnMut() -> bool) -> Result<()> {
        // SAFETY: the control block sits at offset 0 of our live heap.
        unsafe { self.wait_in(self.control_block(), watch, None, ready) }
    }

    /// Waits on the heap whose control block is `cb` (ours, or mapped PE
    /// `peer`'s, which a timeout names).
    ///
    /// # Safety
    /// `cb` must be the control block of a heap mapped for the runtime's life.
    #[track_caller]
    unsafe fn wait_in(
        &self,
        cb: *const ControlBlock,
        watch: wait::Span,
        peer: Option<PeId>,
        mut ready: impl FnMut() -> bool,
    ) -> Result<()> {
        if !self.driven.is_empty() {
            // The waiting thread drives the engines that need it between its
            // checks: what it waits for is then handled here, not handed
            // over from a progress thread (an 8-byte put-with-signal
            // ping-pong over libfabric's tcp provider, medians of five
            // interleaved runs: 30.5 -> 26.7 us).
            let driven = &self.driven;
            let ready = move || {
                for t in driven {
                    t.progress();
                }
                ready()
            };
            // SAFETY: guaranteed by the caller.
            return unsafe { self.wait_checked(cb, watch, peer, ready) };
        }
        // SAFETY: guaranteed by the caller.
        unsafe { self.wait_checked(cb, watch, peer, ready) }
    }

    /// [`Runtime::wait_in`] with `ready` as it will be polled (driving
    /// engines included).
    ///
    /// # Safety
    /// As [`Runtime::wait_in`].
    #[track_caller]
    unsafe fn wait_checked(
        &self,
        cb: *const ControlBlock,
        watch: wait::Span,
        peer: Option<PeId>,
        ready: impl FnMut() -> bool,
    ) -> Result<()> {
        let bs = &self.bootstrap;
        // Recorded for the hang report once the wait starts sleeping (free
        // on the fast path), under the name of the call this thread deferred
        // (a collective), if any.
        let mut in_call = None;
        let location = std::panic::Location::caller();
        // SAFETY: guaranteed by the caller.
        unsafe {
            wait::wait_until(
                cb,
                self.policy,
                watch,
                ready,
                || {
                    in_call.get_or_insert_with(|| {
                        self.activity.enter_waiting("wait_until", 0, location)
                    });
                    bs.check_peers()?;
                    if wait::interrupt_requested() {
                        return Err(Error::Interrupted {
                            what: match peer {
                                Some(pe) => format!("a wait on PE {pe}'s symmetric memory"),
                                None => "a wait on symmetric memory".to_string(),
                            },
                        });
                    }
                    Ok(())
                },
                |d| {
                    let mut what = match peer {
                        Some(pe) => {
                            format!("wait on PE {pe}'s symmetric memory (SHMEM_WAIT_TIMEOUT)")
                        }
                        None => "wait on symmetric memory (SHMEM_WAIT_TIMEOUT)".to_string(),
                    };
                    if let Some(h) = bs.hang_summary() {
                        what.push_str(&format!("; last hang report: {h}"));
                    }
                    let e = Error::Timeout {
                        what,
                        secs: d.as_secs_f64(),
                    };
                    bs.note_failure(&e.to_string());
                    e
                },
            )
        }
    }

    fn wait_ptrs<T: WaitElement>(&self, ivars: SymSlice<T>) -> Result<*const u8> {
        self.live()?;
        self.check_slice(&ivars)?;
        let align = std::mem::align_of::<T>();
        if !ivars.offset().is_multiple_of(align) {
            return Err(Error::Misaligned {
                offset: ivars.offset(),
                width: align,
            });
        }
        // SAFETY: in-heap (checked).
        Ok(unsafe { self.base.as_ptr().add(ivars.offset()) })
    }

    fn read_at<T: WaitElement>(p: *const u8, i: usize) -> T {
        // SAFETY: callers only pass indices inside a checked, aligned slice.
        unsafe { T::load(p.add(i * std::mem::size_of::<T>())) }
    }

    fn status_ok(status: Option<&[bool]>, i: usize) -> bool {
        status.is_none_or(|s| !s.get(i).copied().unwrap_or(false))
    }

    fn check_status(status: Option<&[bool]>, n: usize) -> Result<()> {
        if let Some(s) = status {
            if s.len() != n {
                return Err(Error::invalid(
                    "status",
                    format!("has {} entries for {n} variables", s.len()),
                ));
            }
        }
        Ok(())
    }

    /// Waits until this PE's `ivar <cmp> value`.
    ///
    /// # Errors
    /// As every wait on variables (see [tests and waits](Runtime#errors-of-tests-and-waits)).
    #[track_caller]
    pub fn wait_until<T: WaitElement>(&self, ivar: SymRef<T>, cmp: Cmp, value: T) -> Result<()> {
        self.check_ref(&ivar)?;
        let p = self.wait_ptrs(SymSlice::<T>::from_raw_parts(
            ivar.offset(),
            1,
            ivar.instance(),
        ))?;
        self.wait_on(ivar.offset(), std::mem::size_of::<T>(), || {
            cmp.eval(Self::read_at::<T>(p, 0), value)
        })
    }

    /// Whether `ivar <cmp> value` holds now.
    ///
    /// # Errors
    /// As every test of variables (see [tests and waits](Runtime#errors-of-tests-and-waits)).
    pub fn test<T: WaitElement>(&self, ivar: SymRef<T>, cmp: Cmp, value: T) -> Result<bool> {
        self.check_ref(&ivar)?;
        let p = self.wait_ptrs(SymSlice::<T>::from_raw_parts(
            ivar.offset(),
            1,
            ivar.instance(),
        ))?;
        Ok(cmp.eval(Self::read_at::<T>(p, 0), value))
    }

    /// Waits until every variable not masked by `status` (true = skip) satisfies the comparison.
    ///
    /// # Errors
    /// As every wait on variables (see [tests and waits](Runtime#errors-of-tests-and-waits)).
    #[track_caller]
    pub fn wait_until_all<T: WaitElement>(
        &self,
        ivars: SymSlice<T>,
        status: Option<&[bool]>,
        cmp: Cmp,
        value: T,
    ) -> Result<()> {
        self.wait_until_all_vector(ivars, status, cmp, &vec![value; ivars.len()])
    }

    /// Waits until at least one unmasked variable satisfies the comparison;
    /// returns its index, or `None` if all are masked.
    ///
    /// # Errors
    /// As every wait on variables (see [tests and waits](Runtime#errors-of-tests-and-waits)).
    #[track_caller]
    pub fn wait_until_any<T: WaitElement>(
        &self,
        ivars: SymSlice<T>,
        status: Option<&[bool]>,
        cmp: Cmp,
        value: T,
    ) -> Result<Option<usize>> {
        self.wait_until_any_vector(ivars, status, cmp, &vec![value; ivars.len()])
    }

    /// Waits until at least one unmasked variable satisfies the comparison;
    /// returns the indices of all that do.
    ///
    /// # Errors
    /// As every wait on variables (see [tests and waits](Runtime#errors-of-tests-and-waits)).
    #[track_caller]
    pub fn wait_until_some<T: WaitElement>(
        &self,
        ivars: SymSlice<T>,
        status: Option<&[bool]>,
        cmp: Cmp,
        value: T,
    ) -> Result<Vec<usize>> {
        self.wait_until_some_vector(ivars, status, cmp, &vec![value; ivars.len()])
    }

    /// [`Runtime::wait_until_all`] with one comparison value per variable.
    ///
    /// # Errors
    /// As every wait on variables (see [tests and waits](Runtime#errors-of-tests-and-waits)).
    #[track_caller]
    pub fn wait_until_all_vector<T: WaitElement>(
        &self,
        ivars: SymSlice<T>,
        status: Option<&[bool]>,
        cmp: Cmp,
        values: &[T],
    ) -> Result<()> {
        let p = self.vector_args(ivars, status, values)?;
        self.wait_on(ivars.offset(), ivars.byte_len(), || {
            (0..ivars.len()).all(|i| {
                !Self::status_ok(status, i) || cmp.eval(Self::read_at::<T>(p, i), values[i])
            })
        })
    }

    /// [`Runtime::wait_until_any`] with one comparison value per variable.
    ///
    /// # Errors
    /// As every wait on variables (see [tests and waits](Runtime#errors-of-tests-and-waits)).
    #[track_caller]
    pub fn wait_until_any_vector<T: WaitElement>(
        &self,
        ivars: SymSlice<T>,
        status: Option<&[bool]>,
        cmp: Cmp,
        values: &[T],
    ) -> Result<Option<usize>> {
        let p = self.vector_args(ivars, status, values)?;
        if (0..ivars.len()).all(|i| !Self::status_ok(status, i)) {
            return Ok(None);
        }
        let mut found = None;
        self.wait_on(ivars.offset(), ivars.byte_len(), || {
            found = (0..ivars.len()).find(|&i| {
                Self::status_ok(status, i) && cmp.eval(Self::read_at::<T>(p, i), values[i])
            });
            found.is_some()
        })?;
        Ok(found)
    }

    /// [`Runtime::wait_until_some`] with one comparison value per variable.
    ///
    /// # Errors
    /// As every wait on variables (see [tests and waits](Runtime#errors-of-tests-and-waits)).
    #[track_caller]
    pub fn wait_until_some_vector<T: WaitElement>(
        &self,
        ivars: SymSlice<T>,
        status: Option<&[bool]>,
        cmp: Cmp,
        values: &[T],
    ) -> Result<Vec<usize>> {
        let p = self.vector_args(ivars, status, values)?;
        if (0..ivars.len()).all(|i| !Self::status_ok(status, i)) {
            return Ok(Vec::new());
        }
        let mut found = Vec::new();
        self.wait_on(ivars.offset(), ivars.byte_len(), || {
            found = (0..ivars.len())
                .filter(|&i| {
                    Self::status_ok(status, i) && cmp.eval(Self::read_at::<T>(p, i), values[i])
                })
                .collect();
            !found.is_empty()
        })?;
        Ok(found)
    }

    /// Whether every unmasked variable satisfies the comparison now.
    ///
    /// # Errors
    /// As every test of variables (see [tests and waits](Runtime#errors-of-tests-and-waits)).
    pub fn test_all<T: WaitElement>(
        &self,
        ivars: SymSlice<T>,
        status: Option<&[bool]>,
        cmp: Cmp,
        value: T,
    ) -> Result<bool> {
        self.test_all_vector(ivars, status, cmp, &vec![value; ivars.len()])
    }

    /// The first unmasked variable satisfying the comparison now, if any.
    ///
    /// # Errors
    /// As every test of variables (see [tests and waits](Runtime#errors-of-tests-and-waits)).
    pub fn test_any<T: WaitElement>(
        &self,
        ivars: SymSlice<T>,
        status: Option<&[bool]>,
        cmp: Cmp,
        value: T,
    ) -> Result<Option<usize>> {
        self.test_any_vector(ivars, status, cmp, &vec![value; ivars.len()])
    }

    /// Every unmasked variable satisfying the comparison now.
    ///
    /// # Errors
    /// As every test of variables (see [tests and waits](Runtime#errors-of-tests-and-waits)).
    pub fn test_some<T: WaitElement>(
        &self,
        ivars: SymSlice<T>,
        status: Option<&[bool]>,
        cmp: Cmp,
        value: T,
    ) -> Result<Vec<usize>> {
        self.test_some_vector(ivars, status, cmp, &vec![value; ivars.len()])
    }

    /// [`Runtime::test_all`] with one value per variable.
    ///
    /// # Errors
    /// As every test of variables (see [tests and waits](Runtime#errors-of-tests-and-waits)).
    pub fn test_all_vector<T: WaitElement>(
        &self,
        ivars: SymSlice<T>,
        status: Option<&[bool]>,
        cmp: Cmp,
        values: &[T],
    ) -> Result<bool> {
        let p = self.vector_args(ivars, status, values)?;
        Ok((0..ivars.len())
            .all(|i| !Self::status_ok(status, i) || cmp.eval(Self::read_at::<T>(p, i), values[i])))
    }

    /// [`Runtime::test_any`] with one value per variable.
    ///
    /// # Errors
    /// As every test of variables (see [tests and waits](Runtime#errors-of-tests-and-waits)).
    pub fn test_any_vector<T: WaitElement>(
        &self,
        ivars: SymSlice<T>,
        status: Option<&[bool]>,
        cmp: Cmp,
        values: &[T],
    ) -> Result<Option<usize>> {
        let p = self.vector_args(ivars, status, values)?;
        Ok((0..ivars.len())
            .find(|&i| Self::status_ok(status, i) && cmp.eval(Self::read_at::<T>(p, i), values[i])))
    }

    /// [`Runtime::test_some`] with one value per variable.
    ///
    /// # Errors
    /// As every test of variables (see [tests and waits](Runtime#errors-of-tests-and-waits)).
    pub fn test_some_vector<T: WaitElement>(
        &self,
        ivars: SymSlice<T>,
        status: Option<&[bool]>,
        cmp: Cmp,
        values: &[T],
    ) -> Result<Vec<usize>> {
        let p = self.vector_args(ivars, status, values)?;
        Ok((0..ivars.len())
            .filter(|&i| {
                Self::status_ok(status, i) && cmp.eval(Self::read_at::<T>(p, i), values[i])
            })
            .collect())
    }

    fn vector_args<T: WaitElement>(
        &self,
        ivars: SymSlice<T>,
        status: Option<&[bool]>,
        values: &[T],
    ) -> Result<*const u8> {
        Self::check_status(status, ivars.len())?;
        if values.len() != ivars.len() {
            return Err(Error::invalid(
                "cmp_values",
                format!("has {} entries for {} variables", values.len(), ivars.len()),
            ));
        }
        self.wait_ptrs(ivars)
    }
}
