//! Waiting on symmetric memory: spin briefly, then block on a futex.
//!
//! Every heap starts with a [`ControlBlock`]. A PE about to block registers
//! itself in `waiters`, reads the `doorbell` sequence, re-checks its
//! condition and sleeps on the doorbell with `FUTEX_WAIT`. A writer that
//! changed a PE's memory calls [`ring`]: one fence and one load when nobody
//! sleeps, an increment and `FUTEX_WAKE` when someone does. The futex is on
//! shared memory (no `FUTEX_PRIVATE_FLAG`), so it works across processes that
//! map the same heap.

use std::sync::atomic::{fence, AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Per-PE control words at offset 0 of the symmetric heap.
#[repr(C, align(64))]
#[derive(Debug)]
pub struct ControlBlock {
    /// Incremented by writers when waiters are present.
    pub doorbell: AtomicU32,
    /// Number of threads of the owning PE blocked (or about to block).
    pub waiters: AtomicU32,
    /// Set by the first writer that wakes the sleepers, cleared by a waiter
    /// before it sleeps again: later writers skip the system call meanwhile.
    pub wake_pending: AtomicU32,
}

/// Wakes the waiters of the PE whose control block is `cb` (after a write to
/// that PE's memory).
///
/// # Safety
/// `cb` must point to the live control block of a mapped heap.
#[inline]
pub unsafe fn ring(cb: *const ControlBlock) {
    // Pairs with the waiter's SeqCst increment of `waiters`: either we see
    // the waiter, or the waiter sees our data.
    fence(Ordering::SeqCst);
    // SAFETY: guaranteed by the caller.
    unsafe { ring_after_seqcst(cb) }
}

/// [`ring`] for a writer whose change was itself a `SeqCst` atomic (a
/// remote atomic or a signal update): the atomic already orders the write
/// before the `SeqCst` load of `waiters`, so the separate fence is skipped.
///
/// # Safety
/// As for [`ring`].
#[inline]
pub unsafe fn ring_after_seqcst(cb: *const ControlBlock) {
    // SAFETY: guaranteed by the caller.
    let cb = unsafe { &*cb };
    if cb.waiters.load(Ordering::SeqCst) != 0 && cb.wake_pending.swap(1, Ordering::SeqCst) == 0 {
        cb.doorbell.fetch_add(1, Ordering::SeqCst);
        futex_wake(&cb.doorbell);
    }
}

fn futex_wake(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE on a valid, aligned u32; no memory is written by the kernel.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
        );
    }
}

fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: FUTEX_WAIT on a valid, aligned u32 with a valid timespec; it
    // returns at once if the word no longer holds `expected`.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
        );
    }
}

/// How long a wait spins, how often it checks that the job is still alive,
/// and when it gives up.
#[derive(Debug, Clone, Copy)]
pub struct WaitPolicy {
    /// Spin before blocking.
    pub spin: Duration,
    /// After spinning, yield the core for this long before blocking.
    pub yield_for: Duration,
    /// Longest single sleep; liveness is checked after each.
    pub poll: Duration,
    /// Give up after this long (None: never).
    pub timeout: Option<Duration>,
}

/// Waits until `ready()` holds. `alive()` is called between sleeps and its
/// error ends the wait (a peer exited, the job was aborted).
///
/// # Safety
/// `cb` must point to the live control block of this PE's heap.
pub unsafe fn wait_until<E>(
    cb: *const ControlBlock,
    policy: WaitPolicy,
    mut ready: impl FnMut() -> bool,
    mut alive: impl FnMut() -> Result<(), E>,
    timeout_err: impl FnOnce(Duration) -> E,
) -> Result<(), E> {
    if ready() {
        return Ok(());
    }
    let start = Instant::now();
    let mut spins = 0u32;
    loop {
        for _ in 0..64 {
            if ready() {
                return Ok(());
            }
            std::hint::spin_loop();
        }
        spins += 1;
        if start.elapsed() >= policy.spin {
            break;
        }
        if spins.is_multiple_of(16) {
            std::thread::yield_now();
        }
    }
    // With more runnable PEs than cores, the PE we wait for is usually
    // runnable but not running: handing it the core is faster than a sleep.
    while start.elapsed() < policy.spin + policy.yield_for {
        if ready() {
            return Ok(());
        }
        std::thread::yield_now();
    }
    // SAFETY: guaranteed by the caller.
    let cb = unsafe { &*cb };
    cb.waiters.fetch_add(1, Ordering::SeqCst);
    let result = loop {
        // Read the doorbell first, then re-arm: a writer that finds the
        // flag already set implies an earlier writer bumps the doorbell
        // after `seq` was read, so the futex wait below cannot miss it.
        let seq = cb.doorbell.load(Ordering::SeqCst);
        cb.wake_pending.store(0, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if ready() {
            break Ok(());
        }
        if let Err(e) = alive() {
            break Err(e);
        }
        let elapsed = start.elapsed();
        if let Some(limit) = policy.timeout {
            if elapsed >= limit {
                break Err(timeout_err(elapsed));
            }
        }
        futex_wait(&cb.doorbell, seq, policy.poll);
    };
    cb.waiters.fetch_sub(1, Ordering::SeqCst);
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;

    #[test]
    fn wakes_a_blocked_waiter() {
        let cb = Arc::new(ControlBlock {
            doorbell: AtomicU32::new(0),
            waiters: AtomicU32::new(0),
            wake_pending: AtomicU32::new(0),
        });
        let flag = Arc::new(AtomicU64::new(0));
        let (cb2, flag2) = (cb.clone(), flag.clone());
        let t = std::thread::spawn(move || {
            let policy = WaitPolicy {
                spin: Duration::from_micros(1),
                yield_for: Duration::ZERO,
                poll: Duration::from_secs(5),
                timeout: Some(Duration::from_secs(20)),
            };
            // SAFETY: the control block lives in an Arc held by this closure.
            unsafe {
                wait_until(
                    &*cb2,
                    policy,
                    || flag2.load(Ordering::SeqCst) == 1,
                    || Ok::<(), ()>(()),
                    |_| (),
                )
            }
        });
        while cb.waiters.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        flag.store(1, Ordering::SeqCst);
        // SAFETY: live control block.
        unsafe { ring(&*cb) };
        assert!(t.join().unwrap().is_ok());
    }

    #[test]
    fn liveness_error_ends_the_wait() {
        let cb = ControlBlock {
            doorbell: AtomicU32::new(0),
            waiters: AtomicU32::new(0),
            wake_pending: AtomicU32::new(0),
        };
        let policy = WaitPolicy {
            spin: Duration::ZERO,
            yield_for: Duration::ZERO,
            poll: Duration::from_millis(1),
            timeout: None,
        };
        let mut n = 0;
        // SAFETY: live control block on the stack.
        let r = unsafe {
            wait_until(
                &cb,
                policy,
                || false,
                || {
                    n += 1;
                    if n > 3 {
                        Err("gone")
                    } else {
                        Ok(())
                    }
                },
                |_| "timeout",
            )
        };
        assert_eq!(r, Err("gone"));
    }
}
