//! Completion of asynchronous operations: what a non-blocking handle waits
//! on, and what an engine signals when the bytes have moved.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use crate::error::{Error, Result};

type Then = Box<dyn FnOnce() -> Result<()> + Send>;

#[derive(Default)]
struct Slot {
    done: bool,
    error: Option<String>,
    wakers: Vec<Waker>,
    then: Option<Then>,
}

struct State {
    remaining: AtomicUsize,
    slot: Mutex<Slot>,
    cv: Condvar,
}

/// Completion of one operation that may be split into several parts
/// (chunks given to different engine threads). Cheap to clone.
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
                self.lock().error.get_or_insert(e.to_string());
            }
        } else {
            // Continuations run in the order they were added.
            slot.then = Some(match slot.then.take() {
                None => Box::new(then),
                Some(first) => Box::new(move || first().and_then(|_| then())),
            });
        }
    }

    fn lock(&self) -> MutexGuard<'_, Slot> {
        self.state.slot.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks one part finished (with its result).
    pub fn finish_part(&self, result: Result<()>) {
        if let Err(e) = result {
            self.lock().error.get_or_insert(e.to_string());
        }
        if self.state.remaining.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        // "No continuation left" and "done" must be one step: a `then`
        // registered in between would otherwise never run.
        let wakers = loop {
            let mut slot = self.lock();
            match slot.then.take() {
                Some(then) => {
                    drop(slot);
                    if let Err(e) = then() {
                        self.lock().error.get_or_insert(e.to_string());
                    }
                }
                None => {
                    slot.done = true;
                    break std::mem::take(&mut slot.wakers);
                }
            }
        };
        self.state.cv.notify_all();
        for w in wakers {
            w.wake();
        }
    }

    /// Whether every part has finished.
    pub fn is_done(&self) -> bool {
        self.state.remaining.load(Ordering::Acquire) == 0 && self.lock().done
    }

    fn outcome(slot: &Slot) -> Result<()> {
        match &slot.error {
            None => Ok(()),
            Some(e) => Err(Error::Transport {
                engine: "async",
                reason: e.clone(),
            }),
        }
    }

    /// Blocks until done; returns the operation's result.
    ///
    /// # Errors
    /// The error the operation ended with: the engine's, or one naming a PE that died
    /// before the copy finished.
    pub fn wait(&self) -> Result<()> {
        for _ in 0..2000 {
            if self.state.remaining.load(Ordering::Acquire) == 0 {
                break;
            }
            std::hint::spin_loop();
        }
        let mut slot = self.lock();
        while !slot.done {
            slot = self
                .state
                .cv
                .wait_timeout(slot, Duration::from_millis(100))
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
        Self::outcome(&slot)
    }
}

impl Future for Completion {
    type Output = Result<()>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let mut slot = self.lock();
        if slot.done {
            return Poll::Ready(Self::outcome(&slot));
        }
        if !slot.wakers.iter().any(|w| w.will_wake(cx.waker())) {
            slot.wakers.push(cx.waker().clone());
        }
        Poll::Pending
    }
}

/// A non-blocking operation in flight, holding the buffer it reads from or
/// writes into until it completes. `wait` (or `.await`) gives the buffer back.
#[derive(Debug)]
pub struct Handle<B> {
    completion: Completion,
    buffer: Option<B>,
}

impl<B> Handle<B> {
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

    /// Blocks until the operation completes; returns the buffer.
    ///
    /// # Errors
    /// The error the operation ended with: the engine's, or one naming a PE that died
    /// before the copy finished.
    pub fn wait(mut self) -> Result<B> {
        self.completion.wait()?;
        self.buffer
            .take()
            .ok_or_else(|| Error::invalid("handle", "already completed"))
    }
}

impl<B: Unpin> Future for Handle<B> {
    type Output = Result<B>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<B>> {
        match Pin::new(&mut self.completion).poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Ready(Ok(())) => Poll::Ready(
                self.buffer
                    .take()
                    .ok_or_else(|| Error::invalid("handle", "polled after completion")),
            ),
        }
    }
}

impl<B> Drop for Handle<B> {
    fn drop(&mut self) {
        // The engine may still read or write the buffer: keep it alive until done.
        if self.buffer.is_some() && !self.completion.is_done() {
            let _ = self.completion.wait();
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
