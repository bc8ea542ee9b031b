//! Completion of asynchronous operations: what a non-blocking handle waits
//! on, and what an engine signals when the bytes have moved.

use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::PeId;

type Then = Box<dyn FnOnce() -> Result<()> + Send>;
type Check = Arc<dyn Fn() -> Result<()> + Send + Sync>;

/// What a wait on a completion watches besides the completion itself.
#[derive(Clone)]
struct Watch {
    pe: PeId,
    check: Check,
    timeout: Option<Duration>,
}

#[derive(Default)]
struct Slot {
    done: bool,
    error: Option<Error>,
    wakers: Vec<Waker>,
    then: Option<Then>,
    watch: Option<Watch>,
    /// Values kept alive until the operation completes (buffers an engine
    /// may still use after a wait gave up).
    keep: Vec<Box<dyn Any + Send>>,
    /// Threads asleep on the condition variable: finishing wakes it only
    /// when there are some (a wake-up is a system call even with nobody to
    /// wake, and most operations are waited for by polling or not at all).
    sleepers: usize,
}

struct State {
    remaining: AtomicUsize,
    slot: Mutex<Slot>,
    cv: Condvar,
}

/// Completion of one operation that may be split into several parts
/// (chunks given to different engine threads). Cheap to clone.
///
/// The operation's error keeps its kind ([`Error::PeerExited`] stays
/// `PeerExited`). A completion the runtime hands out also watches the peer
/// it moves data with: [`Completion::wait`] gives up with an error naming
/// that PE once it is known dead, or after `SHMEM_WAIT_TIMEOUT`.
#[derive(Clone)]
pub struct Completion {
    state: Arc<State>,
}

impl std::fmt::Debug for Completion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Completion")
            .field("done", &self.is_done())
            .finish()
    }
}

impl Completion {
    /// A completion that is already done.
    pub fn done() -> Completion {
        Completion {
            state: Arc::new(State {
                remaining: AtomicUsize::new(0),
                slot: Mutex::new(Slot {
                    done: true,
                    ..Slot::default()
                }),
                cv: Condvar::new(),
            }),
        }
    }

    /// A completion that is done after `parts` calls of [`Completion::finish_part`]
    /// (at least one).
    pub fn pending(parts: usize) -> Completion {
        Completion {
            state: Arc::new(State {
                remaining: AtomicUsize::new(parts.max(1)),
                slot: Mutex::new(Slot::default()),
                cv: Condvar::new(),
            }),
        }
    }

    /// Runs `then` when the last part finishes (before waiters are released);
    /// its error becomes the operation's error. Runs at once if already done.
    /// Several continuations run in the order they were added.
    pub fn then(&self, then: impl FnOnce() -> Result<()> + Send + 'static) {
        let mut slot = self.lock();
        if slot.done {
            drop(slot);
            if let Err(e) = then() {
                self.lock().error.get_or_insert(e);
            }
        } else {
            // Continuations run in the order they were added.
            slot.then = Some(match slot.then.take() {
                None => Box::new(then),
                Some(first) => Box::new(move || first().and_then(|_| then())),
            });
        }
    }

    /// Makes waits on this completion watch the data's peer `pe`: `check`
    /// (polled while waiting, so it must be cheap) fails once the peer is
    /// known dead, and `timeout` bounds each wait. Replaces an earlier watch.
    pub fn watch(
        &self,
        pe: PeId,
        check: impl Fn() -> Result<()> + Send + Sync + 'static,
        timeout: Option<Duration>,
    ) {
        self.lock().watch = Some(Watch {
            pe,
            check: Arc::new(check),
            timeout,
        });
    }

    /// Keeps `value` alive until the operation completes (drops it at once
    /// if it has): for memory an engine may still read or write after a
    /// wait gave up on a dead peer or at its timeout.
    pub fn keep_until_done<T: Send + 'static>(&self, value: T) {
        let mut slot = self.lock();
        if slot.done {
            drop(slot);
            drop(value);
        } else {
            slot.keep.push(Box::new(value));
        }
    }

    fn lock(&self) -> MutexGuard<'_, Slot> {
        self.state.slot.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks one part finished (with its result). The first error of the
    /// operation is the one its waiters see, with its kind.
    pub fn finish_part(&self, result: Result<()>) {
        if let Err(e) = result {
            self.lock().error.get_or_insert(e);
        }
        if self.state.remaining.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        // "No continuation left" and "done" must be one step: a `then`
        // registered in between would otherwise never run.
        let (wakers, kept, sleepers) = loop {
            let mut slot = self.lock();
            match slot.then.take() {
                Some(then) => {
                    drop(slot);
                    if let Err(e) = then() {
                        self.lock().error.get_or_insert(e);
                    }
                }
                None => {
                    slot.done = true;
                    break (
                        std::mem::take(&mut slot.wakers),
                        std::mem::take(&mut slot.keep),
                        slot.sleepers,
                    );
                }
            }
        };
        // A waiter counts itself under the lock before it sleeps and checks
        // `done` under the same lock, so one that was not counted here sees
        // `done` and does not sleep.
        if sleepers > 0 {
            self.state.cv.notify_all();
        }
        for w in wakers {
            w.wake();
        }
        drop(kept);
    }

    /// Whether every part has finished.
    pub fn is_done(&self) -> bool {
        self.state.remaining.load(Ordering::Acquire) == 0 && self.lock().done
    }

    fn outcome(slot: &Slot) -> Result<()> {
        match &slot.error {
            None => Ok(()),
            Some(e) => Err(e.clone()),
        }
    }

    /// Blocks until done; returns the operation's result.
    ///
    /// # Errors
    /// The operation's own error, with its kind. For a watched completion
    /// (every one the runtime hands out): [`Error::PeerExited`] naming the
    /// peer once it is known dead, and [`Error::Timeout`] naming it after
    /// `SHMEM_WAIT_TIMEOUT`. Then the operation may still be in flight
    /// ([`Completion::is_done`] is false): its buffers must stay valid until
    /// it is done, which [`Completion::keep_until_done`] arranges.
    pub fn wait(&self) -> Result<()> {
        for _ in 0..2000 {
            if self.state.remaining.load(Ordering::Acquire) == 0 {
                break;
            }
            std::hint::spin_loop();
        }
        let start = Instant::now();
        let mut slot = self.lock();
        loop {
            if slot.done {
                return Self::outcome(&slot);
            }
            if let Some(w) = slot.watch.clone() {
                drop(slot);
                (w.check)()?;
                if let Some(t) = w.timeout.filter(|t| start.elapsed() >= *t) {
                    return Err(Error::Timeout {
                        what: format!(
                            "completion of a transfer with PE {} (SHMEM_WAIT_TIMEOUT)",
                            w.pe
                        ),
                        secs: t.as_secs_f64(),
                    });
                }
                slot = self.lock();
                if slot.done {
                    continue;
                }
            }
            slot.sleepers += 1;
            slot = self
                .state
                .cv
                .wait_timeout(slot, Duration::from_millis(100))
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
            slot.sleepers -= 1;
        }
    }
}

impl Future for Completion {
    type Output = Result<()>;
    /// Ready with the operation's result, or with the watched peer's death
    /// (checked on every poll; the timeout applies to [`Completion::wait`]
    /// only).
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let mut slot = self.lock();
        if slot.done {
            return Poll::Ready(Self::outcome(&slot));
        }
        if let Some(w) = slot.watch.clone() {
            drop(slot);
            if let Err(e) = (w.check)() {
                return Poll::Ready(Err(e));
            }
            slot = self.lock();
            if slot.done {
                return Poll::Ready(Self::outcome(&slot));
            }
        }
        if !slot.wakers.iter().any(|w| w.will_wake(cx.waker())) {
            slot.wakers.push(cx.waker().clone());
        }
        Poll::Pending
    }
}

/// A failed non-blocking operation: its error, and its buffer when the
/// operation is over (it failed). A wait that gave up while the operation
/// may still use the buffer (dead peer, timeout) has no buffer to give: the
/// completion keeps it until the engine lets go of it.
pub struct Failed<B> {
    /// Why the operation failed.
    pub error: Error,
    /// The buffer, when no engine can touch it any more.
    pub buffer: Option<B>,
}

impl<B> std::fmt::Debug for Failed<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Failed")
            .field("error", &self.error)
            .field("buffer", &self.buffer.as_ref().map(|_| "<buffer>"))
            .finish()
    }
}

impl<B> std::fmt::Display for Failed<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

impl<B> std::error::Error for Failed<B> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl<B> From<Failed<B>> for Error {
    fn from(f: Failed<B>) -> Error {
        f.error
    }
}

/// A non-blocking operation in flight, holding the buffer it reads from or
/// writes into until it completes. `wait` (or `.await`) gives the buffer
/// back, on failure too (inside [`Failed`]).
#[derive(Debug)]
pub struct Handle<B: Send + 'static> {
    completion: Completion,
    buffer: Option<B>,
}

impl<B: Send + 'static> Handle<B> {
    /// Wraps a completion and the buffer it owns.
    pub fn new(completion: Completion, buffer: B) -> Handle<B> {
        Handle {
            completion,
            buffer: Some(buffer),
        }
    }

    /// Whether the operation has completed.
    pub fn is_done(&self) -> bool {
        self.completion.is_done()
    }

    /// The result of a finished wait: the buffer, or the error with the
    /// buffer when the operation is over.
    fn settle(&mut self, r: Result<()>) -> Result<B, Failed<B>> {
        let Some(buffer) = self.buffer.take() else {
            return Err(Failed {
                error: r
                    .err()
                    .unwrap_or_else(|| Error::invalid("handle", "already completed")),
                buffer: None,
            });
        };
        match r {
            Ok(()) => Ok(buffer),
            Err(error) if self.completion.is_done() => Err(Failed {
                error,
                buffer: Some(buffer),
            }),
            Err(error) => {
                // Given up while the engine may still use the buffer.
                self.completion.keep_until_done(buffer);
                Err(Failed {
                    error,
                    buffer: None,
                })
            }
        }
    }

    /// Blocks until the operation completes; returns the buffer.
    ///
    /// # Errors
    /// [`Failed`] with the operation's error (its kind intact) and the
    /// buffer; or, when the wait gave up on a dead peer or at
    /// `SHMEM_WAIT_TIMEOUT` while the operation may still be in flight,
    /// with no buffer (it is freed once the engine lets go of it).
    /// `Failed` converts into [`Error`] for `?`.
    pub fn wait(mut self) -> Result<B, Failed<B>> {
        let r = self.completion.wait();
        self.settle(r)
    }
}

impl<B: Send + Unpin + 'static> Future for Handle<B> {
    type Output = Result<B, Failed<B>>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match Pin::new(&mut self.completion).poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(r) => Poll::Ready(self.settle(r)),
        }
    }
}

impl<B: Send + 'static> Drop for Handle<B> {
    fn drop(&mut self) {
        // The engine may still read or write the buffer: keep it alive until
        // done, without blocking the thread that drops the handle.
        if let Some(b) = self.buffer.take() {
            if !self.completion.is_done() {
                self.completion.keep_until_done(b);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    #[test]
    fn parts_then_and_wait() {
        let c = Completion::pending(3);
        let ran = Arc::new(AtomicBool::new(false));
        let r2 = ran.clone();
        c.then(move || {
            r2.store(true, Ordering::SeqCst);
            Ok(())
        });
        let c2 = c.clone();
        let t = std::thread::spawn(move || {
            for _ in 0..3 {
                c2.finish_part(Ok(()));
            }
        });
        c.wait().unwrap();
        t.join().unwrap();
        assert!(ran.load(Ordering::SeqCst));
        assert!(c.is_done());
    }

    #[test]
    fn errors_surface() {
        let c = Completion::pending(2);
        c.finish_part(Err(Error::invalid("x", "bad chunk")));
        c.finish_part(Ok(()));
        assert!(c.wait().unwrap_err().to_string().contains("bad chunk"));
    }

    #[test]
    fn errors_keep_their_kind() {
        let c = Completion::pending(1);
        c.finish_part(Err(Error::PeerExited {
            pe: 3,
            detail: "killed by signal 9".into(),
        }));
        // Every wait (and a second one) sees the same kind.
        for _ in 0..2 {
            assert!(matches!(c.wait(), Err(Error::PeerExited { pe: 3, .. })));
        }
        let c = Completion::pending(1);
        c.then(|| Err(Error::os("write", std::io::ErrorKind::BrokenPipe.into())));
        c.finish_part(Ok(()));
        match c.wait() {
            Err(Error::Os { source, .. }) => {
                assert_eq!(source.kind(), std::io::ErrorKind::BrokenPipe)
            }
            other => panic!("{other:?}"),
        }
    }

    /// A check that fails once `dead` is set, as the runtime's peer-health
    /// check does once the store reports the peer gone.
    fn health(dead: &Arc<AtomicBool>, pe: PeId) -> impl Fn() -> Result<()> + Send + Sync {
        let dead = dead.clone();
        move || match dead.load(Ordering::SeqCst) {
            true => Err(Error::PeerExited {
                pe,
                detail: "connection closed".into(),
            }),
            false => Ok(()),
        }
    }

    #[test]
    fn a_wait_on_a_dead_peer_gives_up_naming_it() {
        let dead = Arc::new(AtomicBool::new(false));
        let c = Completion::pending(1);
        c.watch(5, health(&dead, 5), None);
        // Marked dead while the waiter sleeps; no part ever finishes.
        let d2 = dead.clone();
        let t = std::thread::spawn(move || d2.store(true, Ordering::SeqCst));
        let e = c.wait().unwrap_err();
        t.join().unwrap();
        assert!(matches!(e, Error::PeerExited { pe: 5, .. }), "{e}");
        assert!(!c.is_done());
        // As a future too.
        let mut cx = Context::from_waker(Waker::noop());
        let mut f = Box::pin(c.clone());
        assert!(matches!(
            f.as_mut().poll(&mut cx),
            Poll::Ready(Err(Error::PeerExited { pe: 5, .. }))
        ));
    }

    #[test]
    fn a_wait_gives_up_at_its_timeout_naming_the_peer() {
        let dead = Arc::new(AtomicBool::new(false));
        let c = Completion::pending(1);
        c.watch(2, health(&dead, 2), Some(Duration::from_millis(20)));
        match c.wait() {
            Err(Error::Timeout { what, .. }) => {
                assert!(what.contains("PE 2"), "{what}");
                assert!(what.contains("SHMEM_WAIT_TIMEOUT"), "{what}");
            }
            other => panic!("{other:?}"),
        }
        // A completion that finishes is not affected by the watch.
        c.finish_part(Ok(()));
        c.wait().unwrap();
    }

    /// Sets its flag when dropped.
    #[derive(Debug)]
    struct Tracked(Arc<AtomicBool>);
    impl Drop for Tracked {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_failed_handle_gives_its_buffer_back() {
        let c = Completion::pending(1);
        let h = Handle::new(c.clone(), vec![7u8; 4]);
        c.finish_part(Err(Error::Timeout {
            what: "x".into(),
            secs: 1.0,
        }));
        let f = h.wait().unwrap_err();
        assert!(matches!(f.error, Error::Timeout { .. }));
        assert_eq!(f.buffer, Some(vec![7u8; 4]));
        // `?` turns it into the library's error.
        let as_error: Error = f.into();
        assert!(matches!(as_error, Error::Timeout { .. }));
    }

    #[test]
    fn a_handle_that_gave_up_keeps_its_buffer_until_the_engine_is_done() {
        let dead = Arc::new(AtomicBool::new(true));
        let dropped = Arc::new(AtomicBool::new(false));
        let c = Completion::pending(1);
        c.watch(1, health(&dead, 1), None);
        let h = Handle::new(c.clone(), Tracked(dropped.clone()));
        let f = h.wait().unwrap_err();
        assert!(matches!(f.error, Error::PeerExited { pe: 1, .. }));
        assert!(f.buffer.is_none());
        drop(f);
        assert!(!dropped.load(Ordering::SeqCst), "freed while in flight");
        c.finish_part(Ok(()));
        assert!(dropped.load(Ordering::SeqCst));
        // Dropping a handle in flight does not block, and frees late too.
        let dropped = Arc::new(AtomicBool::new(false));
        let c = Completion::pending(1);
        drop(Handle::new(c.clone(), Tracked(dropped.clone())));
        assert!(!dropped.load(Ordering::SeqCst));
        c.finish_part(Ok(()));
        assert!(dropped.load(Ordering::SeqCst));
    }

    #[test]
    fn handle_is_a_future() {
        let c = Completion::pending(1);
        let h = Handle::new(c.clone(), vec![1u8, 2]);
        let waker = Waker::noop();
        let mut cx = Context::from_waker(waker);
        let mut h = Box::pin(h);
        assert!(h.as_mut().poll(&mut cx).is_pending());
        c.finish_part(Ok(()));
        match h.as_mut().poll(&mut cx) {
            Poll::Ready(Ok(v)) => assert_eq!(v, vec![1, 2]),
            other => panic!("{other:?}"),
        }
    }
}
