//! Streams: ordered queues of communication executed asynchronously.
//!
//! Operations enqueued on one [`Stream`] run in order on the stream's own
//! worker thread; different streams run concurrently. Copies go through the
//! runtime's bulk engine (the SDMA copy engine when it is linked), so the
//! enqueuing thread is free meanwhile. A small copy or signal to a PE
//! reached by load and store, enqueued while the stream is idle, runs at
//! once on the enqueuing thread instead (`SHMEM_STREAM_INLINE`): it is over
//! before a worker could have been woken for it, and nothing enqueued
//! before it is pending, so the order is the same. [`Stream::synchronize`] is what makes
//! completion observable; an error inside the stream surfaces there, naming
//! the operation that failed, the operations queued behind it up to that
//! point are skipped, and the stream stays usable afterwards. [`Event`]s
//! mark points in a stream that the host or another stream can wait for.

use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::runtime::{as_bytes, Runtime};
use crate::sym::{Element, SymRef, SymSlice};
use crate::transport::{Cmp, SignalOp};
use crate::PeId;

type Work = Box<dyn FnOnce(&Runtime) -> Result<()> + Send>;

struct Job {
    desc: String,
    seq: u64,
    /// Runs even after a failure (event records).
    always: bool,
    work: Work,
}

#[derive(Default)]
struct State {
    enqueued: u64,
    executed: u64,
    failed: Option<(u64, String, String)>,
    /// Threads waiting on `cv` (synchronize, or the worker waiting for an
    /// operation run at once ahead of its job): completions notify only
    /// then (a notification is a system call).
    waiting: u32,
}

impl State {
    /// Records that operation `seq` ended with `result`; whether a thread
    /// waits to hear it.
    fn executed(&mut self, seq: u64, result: Result<()>, desc: impl FnOnce() -> String) -> bool {
        if let Err(e) = result {
            self.failed
                .get_or_insert_with(|| (seq, desc(), e.to_string()));
        }
        self.executed = seq;
        self.waiting > 0
    }
}

/// Runs one operation of a stream, turning a panic into its error.
fn run_work(work: impl FnOnce(&Runtime) -> Result<()>, rt: &Runtime) -> Result<()> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(rt)))
        .unwrap_or_else(|_| Err(Error::invalid("stream", "the operation panicked")))
}

/// State shared by the handles and the worker (which holds it strongly, so
/// work queued before the last handle is dropped still runs).
struct Inner {
    id: u64,
    state: Mutex<State>,
    cv: Condvar,
    worker: Mutex<Option<JoinHandle<()>>>,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// An ordered queue of operations on one runtime. Cheap to clone; the
/// worker exits once every clone is dropped and the queue is drained.
#[derive(Clone)]
pub struct Stream {
    /// One reference count for every clone (a clone is one atomic add).
    h: Arc<Handle>,
}

/// What the clones of a [`Stream`] share.
struct Handle {
    inner: Arc<Inner>,
    /// The queue; the worker exits once every handle (and so this sender)
    /// is gone and the queue is drained.
    tx: Mutex<mpsc::Sender<Job>>,
    rt: Arc<Runtime>,
    /// `SHMEM_STREAM_INLINE`: the largest transfer run at once.
    inline_max: usize,
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.h.inner.lock();
        f.debug_struct("Stream")
            .field("id", &self.h.inner.id)
            .field("enqueued", &st.enqueued)
            .field("executed", &st.executed)
            .finish()
    }
}

impl Runtime {
    /// Creates a stream on this runtime (its own worker thread).
    ///
    /// # Errors
    /// [`crate::Error::NotInitialized`] after finalize; an OS error when the
    /// worker thread cannot be started.
    pub fn create_stream(self: &Arc<Self>) -> Result<Stream> {
        self.live()?;
        Stream::new(self.clone())
    }
}

static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Stream {
    /// Creates a stream with its own worker thread.
    ///
    /// # Errors
    /// [`Error::Os`] when the worker thread cannot be started.
    pub fn new(rt: Arc<Runtime>) -> Result<Stream> {
        let (tx, rx) = mpsc::channel::<Job>();
        let inner = Arc::new(Inner {
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            state: Mutex::new(State::default()),
            cv: Condvar::new(),
            worker: Mutex::new(None),
        });
        let (i2, rt2) = (inner.clone(), rt.clone());
        let handle = std::thread::Builder::new()
            .name(format!("shmem-stream-{}", inner.id))
            .spawn(move || {
                for job in rx {
                    let skip = {
                        let mut st = i2.lock();
                        // An operation run at once on an enqueuing thread
                        // ([`Stream::enqueue_transfer`]) may still be running
                        // ahead of this job.
                        if st.executed + 1 < job.seq {
                            st.waiting += 1;
                            while st.executed + 1 < job.seq {
                                st = i2.cv.wait(st).unwrap_or_else(|p| p.into_inner());
                            }
                            st.waiting -= 1;
                        }
                        // Event records always run, so that waiters on an
                        // event are released even behind a failed operation.
                        st.failed.is_some() && !job.always
                    };
                    let result = if skip {
                        Ok(())
                    } else {
                        run_work(job.work, &rt2)
                    };
                    let (seq, desc) = (job.seq, job.desc);
                    if i2.lock().executed(seq, result, || desc) {
                        i2.cv.notify_all();
                    }
                }
            })
            .map_err(|e| Error::os("spawning a stream worker", e))?;
        *inner.worker.lock().unwrap_or_else(|p| p.into_inner()) = Some(handle);
        let inline_max = rt.config().stream_inline.0;
        Ok(Stream {
            h: Arc::new(Handle {
                inner,
                tx: Mutex::new(tx),
                rt,
                inline_max,
            }),
        })
    }

    /// Enqueues an arbitrary operation; `desc` names it in errors.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (`stream`) when the stream's worker has stopped. Errors
    /// of the operation itself are reported by [`Stream::synchronize`].
    pub fn enqueue(
        &self,
        desc: impl Into<String>,
        work: impl FnOnce(&Runtime) -> Result<()> + Send + 'static,
    ) -> Result<()> {
        self.push(desc.into(), false, Box::new(work))
    }

    /// Enqueues an operation that moves `bytes` bytes to or from `pe` (or
    /// updates a signal there) and ends without waiting for anything: run
    /// at once on the calling thread, in stream order, when `pe` is reached
    /// by load and store, `bytes` is at most `SHMEM_STREAM_INLINE` and
    /// every operation enqueued before has run; else enqueued as
    /// [`Stream::enqueue`] does (`desc` is built only then, or for an
    /// error). Either way an error of the operation is reported by
    /// [`Stream::synchronize`], and after an earlier failure the operation
    /// is skipped until then.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (`stream`) when the stream's worker has stopped.
    pub fn enqueue_transfer(
        &self,
        pe: PeId,
        bytes: usize,
        desc: impl FnOnce() -> String,
        work: impl FnOnce(&Runtime) -> Result<()> + Send + 'static,
    ) -> Result<()> {
        if bytes > self.h.inline_max || self.h.rt.load_store_base(pe).is_none() {
            return self.push(desc(), false, Box::new(work));
        }
        let seq = {
            let mut st = self.h.inner.lock();
            if st.executed != st.enqueued {
                drop(st);
                return self.push(desc(), false, Box::new(work));
            }
            st.enqueued += 1;
            if st.failed.is_some() {
                let seq = st.enqueued;
                if st.executed(seq, Ok(()), String::new) {
                    self.h.inner.cv.notify_all();
                }
                return Ok(());
            }
            st.enqueued
        };
        // Others enqueue behind it meanwhile; the worker waits for it.
        let result = run_work(work, &self.h.rt);
        if self.h.inner.lock().executed(seq, result, desc) {
            self.h.inner.cv.notify_all();
        }
        Ok(())
    }

    fn push(&self, desc: String, always: bool, work: Work) -> Result<()> {
        let tx = self.h.tx.lock().unwrap_or_else(|p| p.into_inner());
        let mut st = self.h.inner.lock();
        st.enqueued += 1;
        let job = Job {
            desc,
            seq: st.enqueued,
            always,
            work,
        };
        if tx.send(job).is_err() {
            st.enqueued -= 1;
            return Err(Error::invalid("stream", "the stream worker has stopped"));
        }
        Ok(())
    }

    /// Blocks until every operation enqueued so far has run. Returns the
    /// first error since the last synchronize, naming the operation.
    ///
    /// # Errors
    /// [`Error::StreamOp`] naming the first operation that failed since the
    /// last synchronize; [`Error::InvalidArgument`] (`stream`) when the worker has stopped.
    pub fn synchronize(&self) -> Result<()> {
        let mut st = self.h.inner.lock();
        let target = st.enqueued;
        while st.executed < target {
            let gone = self
                .h
                .inner
                .worker
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_ref()
                .is_none_or(|w| w.is_finished());
            if gone {
                return Err(Error::invalid("stream", "the stream worker has stopped"));
            }
            self.h.rt.bootstrap().check_peers()?;
            st.waiting += 1;
            st = self
                .h
                .inner
                .cv
                .wait_timeout(st, Duration::from_millis(50))
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
            st.waiting -= 1;
        }
        match st.failed.take() {
            None => Ok(()),
            Some((seq, op, reason)) => Err(Error::StreamOp { seq, op, reason }),
        }
    }

    /// Whether every enqueued operation has run.
    pub fn query(&self) -> bool {
        let st = self.h.inner.lock();
        st.executed == st.enqueued
    }

    fn check_local<T: Element>(&self, s: &SymSlice<T>) -> Result<()> {
        if s.instance() != self.h.rt.instance() {
            return Err(Error::WrongInstance {
                object: s.instance(),
                runtime: self.h.rt.instance(),
            });
        }
        self.h.rt.check_range(s.offset(), s.byte_len())
    }

    /// Puts this PE's `src` (symmetric) into `dst` on `pe`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (`stream`) when the stream's worker has stopped. Errors
    /// of the operation itself are reported by [`Stream::synchronize`].
    pub fn put<T: Element>(
        &self,
        dst: impl Into<SymSlice<T>>,
        src: impl Into<SymSlice<T>>,
        pe: PeId,
    ) -> Result<()> {
        let (dst, src) = (dst.into(), src.into());
        self.check_local(&dst)?;
        self.check_local(&src)?;
        fits(src.len(), dst.len())?;
        let bytes = src.byte_len();
        self.enqueue_transfer(
            pe,
            bytes,
            || format!("put of {bytes} bytes to PE {pe}"),
            move |rt| {
                let p = rt.local_ptr(src.offset())?;
                // SAFETY: symmetric memory lives as long as the runtime the worker holds.
                unsafe { rt.put_async_raw(pe, dst.offset(), p.as_ptr(), bytes)? }.wait()
            },
        )
    }

    /// Puts an owned buffer into `dst` on `pe`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (`stream`) when the stream's worker has stopped. Errors
    /// of the operation itself are reported by [`Stream::synchronize`].
    pub fn put_owned<T: Element>(
        &self,
        dst: impl Into<SymSlice<T>>,
        src: Vec<T>,
        pe: PeId,
    ) -> Result<()> {
        let dst = dst.into();
        self.check_local(&dst)?;
        fits(src.len(), dst.len())?;
        let bytes = std::mem::size_of_val(&src[..]);
        self.enqueue_transfer(
            pe,
            bytes,
            || format!("put of {bytes} bytes to PE {pe}"),
            move |rt| {
                let b = as_bytes(&src);
                // SAFETY: `src` is owned by this closure until the wait
                // returns, and by the completion after a wait that gave up.
                let c = unsafe { rt.put_async_raw(pe, dst.offset(), b.as_ptr(), b.len())? };
                let r = c.wait();
                if r.is_err() {
                    // A dead peer or a timeout: the engine may still read it.
                    c.keep_until_done(src);
                }
                r
            },
        )
    }

    /// Gets `src` from `pe` into this PE's `dst` (symmetric).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (`stream`) when the stream's worker has stopped. Errors
    /// of the operation itself are reported by [`Stream::synchronize`].
    pub fn get<T: Element>(
        &self,
        dst: impl Into<SymSlice<T>>,
        src: impl Into<SymSlice<T>>,
        pe: PeId,
    ) -> Result<()> {
        let (dst, src) = (dst.into(), src.into());
        self.check_local(&dst)?;
        self.check_local(&src)?;
        fits(dst.len(), src.len())?;
        let bytes = dst.byte_len();
        self.enqueue_transfer(
            pe,
            bytes,
            || format!("get of {bytes} bytes from PE {pe}"),
            move |rt| {
                let p = rt.local_ptr(dst.offset())?;
                // SAFETY: as for `put`.
                unsafe { rt.get_async_raw(pe, src.offset(), p.as_ptr(), bytes)? }.wait()
            },
        )
    }

    /// Puts `src` into `dst` on `pe`, then updates `sig` on `pe`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (`stream`) when the stream's worker has stopped. Errors
    /// of the operation itself are reported by [`Stream::synchronize`].
    pub fn put_signal<T: Element>(
        &self,
        dst: impl Into<SymSlice<T>>,
        src: impl Into<SymSlice<T>>,
        sig: SymRef<u64>,
        value: u64,
        op: SignalOp,
        pe: PeId,
    ) -> Result<()> {
        let (dst, src) = (dst.into(), src.into());
        self.check_local(&dst)?;
        self.check_local(&src)?;
        fits(src.len(), dst.len())?;
        let bytes = src.byte_len();
        self.enqueue_transfer(
            pe,
            bytes,
            || format!("put_signal of {bytes} bytes to PE {pe}"),
            move |rt| {
                let p = rt.local_ptr(src.offset())?;
                // SAFETY: as for `put`.
                unsafe { rt.put_async_raw(pe, dst.offset(), p.as_ptr(), bytes)? }.wait()?;
                rt.signal_op(sig, value, op, pe)
            },
        )
    }

    /// Updates `sig` on `pe`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (`stream`) when the stream's worker has stopped. Errors
    /// of the operation itself are reported by [`Stream::synchronize`].
    pub fn signal_op(&self, sig: SymRef<u64>, value: u64, op: SignalOp, pe: PeId) -> Result<()> {
        self.enqueue_transfer(
            pe,
            8,
            || format!("signal_op on PE {pe}"),
            move |rt| rt.signal_op(sig, value, op, pe),
        )
    }

    /// Waits (in the stream) until this PE's `sig <cmp> value`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (`stream`) when the stream's worker has stopped. Errors
    /// of the operation itself are reported by [`Stream::synchronize`].
    pub fn signal_wait_until(&self, sig: SymRef<u64>, cmp: Cmp, value: u64) -> Result<()> {
        self.enqueue(format!("signal_wait_until {cmp:?} {value}"), move |rt| {
            rt.signal_wait_until(sig, cmp, value).map(|_| ())
        })
    }

    /// Completes this PE's outstanding operations (in stream order).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (`stream`) when the stream's worker has stopped. Errors
    /// of the operation itself are reported by [`Stream::synchronize`].
    pub fn quiet(&self) -> Result<()> {
        self.enqueue("quiet", |rt| rt.quiet())
    }

    /// Runs `f` on the stream's thread, in order.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (`stream`) when the stream's worker has stopped. Errors
    /// of the operation itself are reported by [`Stream::synchronize`].
    pub fn host_fn(&self, f: impl FnOnce() -> Result<()> + Send + 'static) -> Result<()> {
        self.enqueue("host callback", move |_| f())
    }

    /// Marks this point of the stream in `event`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (`stream`) when the stream's worker has stopped. Errors
    /// of the operation itself are reported by [`Stream::synchronize`].
    pub fn record(&self, event: &Event) -> Result<()> {
        let generation = event.arm();
        let ev = event.clone();
        self.push(
            "event record".into(),
            true,
            Box::new(move |_| {
                ev.complete(generation);
                Ok(())
            }),
        )
    }

    /// Makes this stream wait until `event`'s latest recording has been reached.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (`stream`) when the stream's worker has stopped. Errors
    /// of the operation itself are reported by [`Stream::synchronize`].
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        let generation = event.armed();
        let ev = event.clone();
        self.enqueue("wait for event", move |rt| {
            ev.wait_for(generation, Some(rt))
        })
    }
}

fn fits(n: usize, capacity: usize) -> Result<()> {
    if n > capacity {
        return Err(Error::invalid(
            "nelems",
            format!("{n} elements do not fit a symmetric object of {capacity} elements"),
        ));
    }
    Ok(())
}

#[derive(Default)]
struct EventState {
    armed: u64,
    completed: u64,
}

/// A point in a stream that the host or other streams can wait for.
#[derive(Clone, Default)]
pub struct Event {
    inner: Arc<(Mutex<EventState>, Condvar)>,
}

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Event")
            .field("done", &self.query())
            .finish()
    }
}

impl Event {
    /// A new event (already "reached": nothing recorded yet).
    pub fn new() -> Event {
        Event::default()
    }

    fn lock(&self) -> MutexGuard<'_, EventState> {
        self.inner.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn arm(&self) -> u64 {
        let mut st = self.lock();
        st.armed += 1;
        st.armed
    }

    fn armed(&self) -> u64 {
        self.lock().armed
    }

    fn complete(&self, generation: u64) {
        let mut st = self.lock();
        st.completed = st.completed.max(generation);
        self.inner.1.notify_all();
    }

    fn wait_for(&self, generation: u64, rt: Option<&Runtime>) -> Result<()> {
        let mut st = self.lock();
        while st.completed < generation {
            if let Some(rt) = rt {
                rt.bootstrap().check_peers()?;
            }
            st = self
                .inner
                .1
                .wait_timeout(st, Duration::from_millis(50))
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
        Ok(())
    }

    /// Whether the latest recording has been reached.
    pub fn query(&self) -> bool {
        let st = self.lock();
        st.completed >= st.armed
    }

    /// Blocks the host until the latest recording has been reached.
    ///
    /// # Errors
    /// As the wait it ends: [`Error::PeerExited`] or [`Error::Aborted`] when the job fails
    /// while waiting.
    pub fn synchronize(&self) -> Result<()> {
        self.wait_for(self.armed(), None)
    }
}
