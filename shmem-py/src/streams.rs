//! Streams, events and handles of the core library as Python objects.
//!
//! A `Stream` runs what is enqueued on it in order on its own worker
//! thread; `stream=` parameters take one (None means a blocking call).
//! A `Handle` is one non-blocking copy in flight; it keeps the Python
//! memory it reads or writes alive until the copy has completed.

use std::collections::BTreeMap;
use std::sync::Mutex;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use shmem::{Completion, Shmem};

use crate::args::Pe;
use crate::errors::{invalid, with_context, OrPy};
use crate::memory::{local_bytes, pe_arg, sym_peer_bytes};
use crate::state::{self, Keep};

/// An ordered queue of communication on one instance, executed
/// asynchronously by its own worker thread (the reference's ACL stream).
/// Errors inside the stream surface at `synchronize()`, naming the
/// operation.
#[pyclass(module = "shmem.core", frozen)]
pub struct Stream {
    pub(crate) inner: shmem::Stream,
    pub(crate) sh: Shmem,
    /// The integer that names it in `stream=` arguments (0: the instance's
    /// default stream).
    pub(crate) id: i64,
}

/// Streams by integer id: 0 is each instance's default stream, created on
/// first use; other ids name streams from `create_stream()`.
struct Registry {
    defaults: BTreeMap<u32, shmem::Stream>,
    named: BTreeMap<i64, (shmem::Stream, Shmem)>,
    next: i64,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    defaults: BTreeMap::new(),
    named: BTreeMap::new(),
    next: 1,
});

/// Whether some instance has a default stream (set once one is created):
/// before, host calls have no stream work to wait for.
static ANY_DEFAULT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn registry() -> std::sync::MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(|p| p.into_inner())
}

/// The default stream (stream 0) of `sh`'s instance.
pub(crate) fn default_stream(sh: &Shmem) -> PyResult<shmem::Stream> {
    let mut r = registry();
    if let Some(s) = r.defaults.get(&sh.instance()) {
        return Ok(s.clone());
    }
    let s = sh.create_stream().py()?;
    r.defaults.insert(sh.instance(), s.clone());
    ANY_DEFAULT.store(true, std::sync::atomic::Ordering::SeqCst);
    Ok(s)
}

/// Forgets the streams of a finalised instance.
pub(crate) fn forget_instance(instance: u32) {
    let mut r = registry();
    r.defaults.remove(&instance);
    r.named.retain(|_, (_, sh)| sh.instance() != instance);
}

/// Blocking calls on `sh`'s instance first let its default stream finish
/// (host calls never overtake stream-0 work); raises the stream's error.
pub(crate) fn settle(py: Python<'_>, sh: &Shmem) -> PyResult<()> {
    drop_released(py);
    if !ANY_DEFAULT.load(std::sync::atomic::Ordering::SeqCst) {
        return Ok(());
    }
    let s = {
        let r = registry();
        match r.defaults.get(&sh.instance()) {
            Some(s) if !s.query() => s.clone(),
            _ => return Ok(()),
        }
    };
    crate::blocking::run(py, move || s.synchronize())?
        .map_err(with_context(|| "default stream (0)".to_string()))
}

/// [`settle`] from a worker thread (for ordered collectives).
pub(crate) fn settle_detached(instance: u32) -> shmem::Result<()> {
    if !ANY_DEFAULT.load(std::sync::atomic::Ordering::SeqCst) {
        return Ok(());
    }
    let s = registry().defaults.get(&instance).cloned();
    match s {
        Some(s) => s.synchronize(),
        None => Ok(()),
    }
}

#[pymethods]
impl Stream {
    /// Blocks (without the GIL) until everything enqueued so far has run;
    /// raises the first error since the last synchronize.
    fn synchronize(&self, py: Python<'_>) -> PyResult<()> {
        let s = self.inner.clone();
        let r = crate::blocking::run(py, move || s.synchronize())?.py();
        drop_released(py);
        r
    }
    /// The integer naming this stream in `stream=` arguments.
    #[getter]
    fn handle(&self) -> i64 {
        self.id
    }
    fn __int__(&self) -> i64 {
        self.id
    }
    fn __index__(&self) -> i64 {
        self.id
    }
    /// Whether everything enqueued has run.
    fn query(&self) -> bool {
        self.inner.query()
    }
    /// Marks this point of the stream in `event`.
    fn record(&self, event: &Event) -> PyResult<()> {
        self.inner.record(&event.inner).py()
    }
    /// Makes the stream wait until `event`'s latest recording is reached.
    fn wait_event(&self, event: &Event) -> PyResult<()> {
        self.inner.wait_event(&event.inner).py()
    }
    /// The instance the stream belongs to.
    #[getter]
    fn instance(&self) -> u32 {
        self.sh.instance()
    }
    fn __repr__(&self) -> String {
        format!(
            "<shmem {:?} id={} instance={}>",
            self.inner,
            self.id,
            self.sh.instance()
        )
    }
}

/// A point in a stream that the host or another stream can wait for.
#[pyclass(module = "shmem.core", frozen)]
pub struct Event {
    inner: shmem::Event,
}

#[pymethods]
impl Event {
    #[new]
    fn new() -> Event {
        Event {
            inner: shmem::Event::new(),
        }
    }
    /// Blocks (without the GIL) until the latest recording is reached.
    fn synchronize(&self, py: Python<'_>) -> PyResult<()> {
        let e = self.inner.clone();
        crate::blocking::run(py, move || e.synchronize())?.py()
    }
    /// Whether the latest recording has been reached.
    fn query(&self) -> bool {
        self.inner.query()
    }
}

/// A non-blocking copy in flight (`put_handle`, `get_handle`). `wait()` or
/// `handle_wait(h)` completes it; dropping it waits too, because the
/// engine may still be using the memory.
#[pyclass(module = "shmem.core", frozen)]
pub struct Handle {
    sh: Shmem,
    completion: Completion,
    keep: Mutex<Option<Keep>>,
    what: String,
}

impl Handle {
    fn take_keep(&self) -> Option<Keep> {
        self.keep.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// Releases the memory once the copy is over; a wait that gave up (dead
    /// peer, SHMEM_WAIT_TIMEOUT) leaves it to the instance's next quiet,
    /// since the engine may still use it.
    fn release(&self) {
        if let Some(k) = self.take_keep() {
            if !self.completion.is_done() {
                crate::state::keep_until_quiet(self.sh.instance(), k);
            }
        }
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        if !self.completion.is_done() {
            let _ = self.completion.wait();
        }
        self.release();
    }
}

#[pymethods]
impl Handle {
    /// Blocks (without the GIL) until the copy has completed.
    fn wait(&self, py: Python<'_>) -> PyResult<()> {
        let c = self.completion.clone();
        let r = crate::blocking::run(py, move || c.wait())?;
        self.release();
        r.map_err(with_context(|| self.what.clone()))
    }
    /// Whether the copy has completed.
    #[getter]
    fn done(&self) -> bool {
        self.completion.is_done()
    }
    fn __repr__(&self) -> String {
        format!(
            "<shmem Handle {} {}>",
            self.what,
            if self.completion.is_done() {
                "done"
            } else {
                "in flight"
            }
        )
    }
}

/// A `stream=` argument resolved: run the call now, or enqueue it.
pub(crate) enum StreamSel {
    /// None: the blocking form.
    Now,
    /// 0: the default stream of the instance of the call's memory.
    Default,
    /// A `Stream` or the integer of one.
    On(shmem::Stream, Shmem),
}

impl StreamSel {
    /// The stream to enqueue on, for memory of `sh`'s instance (`arg`
    /// names it in errors); None for the blocking form.
    pub(crate) fn stream(&self, sh: &Shmem, arg: &str) -> PyResult<Option<shmem::Stream>> {
        match self {
            StreamSel::Now => Ok(None),
            StreamSel::Default => default_stream(sh).map(Some),
            StreamSel::On(s, owner) => {
                if owner.instance() != sh.instance() {
                    return Err(invalid(format!(
                        "`{arg}` belongs to instance {} but the stream to instance {}",
                        sh.instance(),
                        owner.instance()
                    )));
                }
                Ok(Some(s.clone()))
            }
        }
    }
}

/// `stream=` argument: None (blocking), a `Stream`, 0 (the instance's
/// default stream) or the integer of a stream from `create_stream()`.
pub(crate) fn stream_arg(stream: Option<&Bound<'_, PyAny>>) -> PyResult<StreamSel> {
    let Some(s) = stream.filter(|s| !s.is_none()) else {
        return Ok(StreamSel::Now);
    };
    if let Ok(b) = s.cast::<Stream>() {
        let b = b.get();
        return Ok(StreamSel::On(b.inner.clone(), b.sh.clone()));
    }
    if s.is_instance_of::<pyo3::types::PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "stream must be a shmem Stream, an int naming one (0 = the default stream) or None, not the bool {s}"
        )));
    }
    let Ok(id) = s.extract::<i64>() else {
        return Err(PyTypeError::new_err(format!(
            "stream must be a shmem Stream, an int naming one (0 = the default stream) or None, not {}",
            s.get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default()
        )));
    };
    if id == 0 {
        return Ok(StreamSel::Default);
    }
    let r = registry();
    match r.named.get(&id) {
        Some((st, sh)) => Ok(StreamSel::On(st.clone(), sh.clone())),
        None => Err(invalid(format!(
            "stream {id} is not a stream of this process: use 0 (the default stream) or a \
             stream from create_stream() (live: {:?})",
            r.named.keys().collect::<Vec<_>>()
        ))),
    }
}

/// Blocks (interruptibly) until `stream` (a Stream, its int, or 0 for the
/// current instance's default stream) has run what was enqueued.
#[pyfunction]
pub(crate) fn stream_synchronize(py: Python<'_>, stream: &Bound<'_, PyAny>) -> PyResult<()> {
    let sh = state::current()?;
    let Some(st) = (match stream_arg(Some(stream))? {
        StreamSel::On(s, _) => Some(s),
        _ => Some(default_stream(&sh)?),
    }) else {
        return Ok(());
    };
    let r = crate::blocking::run(py, move || st.synchronize())?.py();
    drop_released(py);
    r
}

/// The default stream of the current instance (or `instance`): stream 0.
#[pyfunction]
#[pyo3(signature = (instance = None))]
pub(crate) fn get_default_stream(instance: Option<u32>) -> PyResult<Stream> {
    let sh = state::resolve(instance)?;
    let inner = default_stream(&sh)?;
    Ok(Stream { inner, sh, id: 0 })
}

/// Creates a stream on the current instance (or `instance`).
#[pyfunction]
#[pyo3(signature = (instance = None))]
pub(crate) fn create_stream(instance: Option<u32>) -> PyResult<Stream> {
    let sh = state::resolve(instance)?;
    let inner = sh.create_stream().py()?;
    let mut r = registry();
    let id = r.next;
    r.next += 1;
    r.named.insert(id, (inner.clone(), sh.clone()));
    Ok(Stream { inner, sh, id })
}

/// Completes `handle`: now (stream None) or when `stream` reaches this point.
#[pyfunction]
#[pyo3(signature = (handle, stream = None))]
pub(crate) fn handle_wait(
    py: Python<'_>,
    handle: &Bound<'_, Handle>,
    stream: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    let h = handle.get();
    let st = match stream_arg(stream)? {
        StreamSel::Now => None,
        StreamSel::Default => Some(default_stream(&h.sh)?),
        StreamSel::On(s, _) => Some(s),
    };
    match st {
        None => h.wait(py),
        Some(st) => {
            let c = h.completion.clone();
            let keep = h.take_keep();
            st.enqueue(format!("wait for {}", h.what), move |_| {
                let r = c.wait();
                release(keep);
                r
            })
            .py()
        }
    }
}

/// Drops kept Python memory from a worker thread, attached.
///
/// Stream workers do not take the GIL for this: what they release waits in
/// a queue that the next stream-ordered call (or synchronisation) of a
/// Python thread empties, with the GIL it holds anyway.
pub(crate) fn release(keep: Option<Keep>) {
    if let Some(k) = keep {
        if AT_ONCE.get() {
            // This thread holds the GIL (see [`enqueue_transfer`]).
            drop(k);
            return;
        }
        RELEASED.lock().unwrap_or_else(|p| p.into_inner()).push(k);
        RELEASED_ANY.store(true, std::sync::atomic::Ordering::Release);
    }
}

thread_local! {
    /// Set while this thread, holding the GIL, may run a stream operation
    /// at once ([`enqueue_transfer`]): what the operation kept alive is
    /// dropped right there instead of being handed back to the GIL.
    static AT_ONCE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// [`shmem::Stream::enqueue_transfer`] from a thread holding the GIL: when
/// the operation runs at once here, its [`release`] drops what it kept.
pub(crate) fn enqueue_transfer(
    st: &shmem::Stream,
    pe: usize,
    bytes: usize,
    desc: impl FnOnce() -> String,
    work: impl FnOnce(&shmem::Runtime) -> shmem::Result<()> + Send + 'static,
) -> shmem::Result<()> {
    AT_ONCE.set(true);
    let r = st.enqueue_transfer(pe, bytes, desc, work);
    AT_ONCE.set(false);
    r
}

static RELEASED: Mutex<Vec<Keep>> = Mutex::new(Vec::new());
static RELEASED_ANY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Drops what stream workers released (see [`release`]); needs the GIL.
pub(crate) fn drop_released(_py: Python<'_>) {
    if !RELEASED_ANY.load(std::sync::atomic::Ordering::Acquire) {
        return;
    }
    let kept = {
        let mut r = RELEASED.lock().unwrap_or_else(|p| p.into_inner());
        RELEASED_ANY.store(false, std::sync::atomic::Ordering::Release);
        std::mem::take(&mut *r)
    };
    drop(kept);
}

/// Starts a put of `src` (any memory) into `dst` (symmetric) on `remote_pe`
/// through the bulk engine; returns its `Handle`.
#[pyfunction]
#[pyo3(signature = (dst, src, remote_pe, nbytes = None))]
pub(crate) fn put_handle(
    dst: &Bound<'_, PyAny>,
    src: &Bound<'_, PyAny>,
    remote_pe: Pe,
    nbytes: Option<usize>,
) -> PyResult<Handle> {
    let d = sym_peer_bytes(dst, "dst")?;
    let pe = pe_arg(remote_pe.0, d.sh.n_pes())?;
    let d = d.for_pe(pe, "dst")?;
    let s = local_bytes(src, "src", false)?;
    let n = crate::rma::put_len(nbytes, s.len, d.len, pe)?;
    let what = format!("put of {n} bytes to PE {pe}");
    // SAFETY: `s.keep` holds the source memory in place until the handle
    // completes (Handle::wait / drop wait before releasing it).
    let c = unsafe { d.sh.put_async_raw(pe, d.offset, s.addr as *const u8, n) }
        .map_err(with_context(|| what.clone()))?;
    Ok(Handle {
        sh: d.sh.clone(),
        completion: c,
        keep: Mutex::new(Some(s.keep)),
        what,
    })
}

/// Starts a get of `src` (symmetric) on `remote_pe` into `dst` (any
/// writable memory) through the bulk engine; returns its `Handle`.
#[pyfunction]
#[pyo3(signature = (dst, src, remote_pe, nbytes = None))]
pub(crate) fn get_handle(
    dst: &Bound<'_, PyAny>,
    src: &Bound<'_, PyAny>,
    remote_pe: Pe,
    nbytes: Option<usize>,
) -> PyResult<Handle> {
    let s = sym_peer_bytes(src, "src")?;
    let pe = pe_arg(remote_pe.0, s.sh.n_pes())?;
    let s = s.for_pe(pe, "src")?;
    let d = local_bytes(dst, "dst", true)?;
    let n = crate::rma::get_len(nbytes, d.len, s.len, pe)?;
    let what = format!("get of {n} bytes from PE {pe}");
    // SAFETY: `d.keep` holds the destination in place until completion.
    let c = unsafe { s.sh.get_async_raw(pe, s.offset, d.addr as *mut u8, n) }
        .map_err(with_context(|| what.clone()))?;
    Ok(Handle {
        sh: s.sh.clone(),
        completion: c,
        keep: Mutex::new(Some(d.keep)),
        what,
    })
}
