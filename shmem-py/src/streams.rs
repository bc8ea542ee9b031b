//! Streams, events and handles of the core library as Python objects.
//!
//! A `Stream` runs what is enqueued on it in order on its own worker
//! thread; `stream=` parameters take one (None means a blocking call).
//! A `Handle` is one non-blocking copy in flight; it keeps the Python
//! memory it reads or writes alive until the copy has completed.

use std::sync::Mutex;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use shmem::{Completion, Shmem};

use crate::errors::{invalid, with_context, OrPy};
use crate::memory::{local, pe_arg, sym, Sym};
use crate::state::{self, Keep};

/// An ordered queue of communication on one instance, executed
/// asynchronously by its own worker thread (the reference's ACL stream).
/// Errors inside the stream surface at `synchronize()`, naming the
/// operation.
#[pyclass(module = "shmem.core", frozen)]
pub struct Stream {
    pub(crate) inner: shmem::Stream,
    pub(crate) sh: Shmem,
}

impl Stream {
    /// Errors unless `s` belongs to this stream's instance.
    pub(crate) fn check_same(&self, s: &Sym, arg: &str) -> PyResult<()> {
        if s.instance() != self.sh.instance() {
            return Err(invalid(format!(
                "`{arg}` belongs to instance {} but the stream to instance {}",
                s.instance(),
                self.sh.instance()
            )));
        }
        Ok(())
    }
}

#[pymethods]
impl Stream {
    /// Blocks (without the GIL) until everything enqueued so far has run;
    /// raises the first error since the last synchronize.
    fn synchronize(&self, py: Python<'_>) -> PyResult<()> {
        let s = self.inner.clone();
        py.detach(move || s.synchronize()).py()
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
        format!("<shmem {:?} instance={}>", self.inner, self.sh.instance())
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
        py.detach(move || e.synchronize()).py()
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
    completion: Completion,
    keep: Mutex<Option<Keep>>,
    what: String,
}

impl Handle {
    fn take_keep(&self) -> Option<Keep> {
        self.keep.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        if !self.completion.is_done() {
            let _ = self.completion.wait();
        }
    }
}

#[pymethods]
impl Handle {
    /// Blocks (without the GIL) until the copy has completed.
    fn wait(&self, py: Python<'_>) -> PyResult<()> {
        let c = self.completion.clone();
        let r = py.detach(move || c.wait());
        drop(self.take_keep());
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

/// `stream=` argument: None, or a `Stream`.
pub(crate) fn stream_arg<'py>(
    stream: Option<&Bound<'py, PyAny>>,
) -> PyResult<Option<Bound<'py, Stream>>> {
    match stream {
        None => Ok(None),
        Some(s) if s.is_none() => Ok(None),
        Some(s) => s.cast::<Stream>().map(|b| Some(b.clone())).map_err(|_| {
            PyTypeError::new_err(format!(
                "stream must be a shmem Stream (from create_stream()) or None, not {}; \
                 there are no ACL stream handles on this build",
                s.get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            ))
        }),
    }
}

/// Creates a stream on the current instance (or `instance`).
#[pyfunction]
#[pyo3(signature = (instance = None))]
pub(crate) fn create_stream(instance: Option<u32>) -> PyResult<Stream> {
    let sh = state::resolve(instance)?;
    let inner = sh.create_stream().py()?;
    Ok(Stream { inner, sh })
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
    match stream_arg(stream)? {
        None => h.wait(py),
        Some(st) => {
            let c = h.completion.clone();
            let keep = h.take_keep();
            st.get()
                .inner
                .enqueue(format!("wait for {}", h.what), move |_| {
                    let r = c.wait();
                    release(keep);
                    r
                })
                .py()
        }
    }
}

/// Drops kept Python memory from a worker thread, attached.
pub(crate) fn release(keep: Option<Keep>) {
    if keep.is_some() {
        let _ = Python::try_attach(move |_| drop(keep));
    }
}

/// Starts a put of `src` (any memory) into `dst` (symmetric) on `remote_pe`
/// through the bulk engine; returns its `Handle`.
#[pyfunction]
#[pyo3(signature = (dst, src, remote_pe, nbytes = None))]
pub(crate) fn put_handle(
    dst: &Bound<'_, PyAny>,
    src: &Bound<'_, PyAny>,
    remote_pe: i64,
    nbytes: Option<usize>,
) -> PyResult<Handle> {
    let d = sym(dst, "dst")?;
    let pe = pe_arg(remote_pe, d.sh.n_pes())?;
    let s = local(src, "src", false)?;
    let n = crate::rma::put_len(nbytes, s.len, d.len, pe)?;
    let what = format!("put of {n} bytes to PE {pe}");
    // SAFETY: `s.keep` holds the source memory in place until the handle
    // completes (Handle::wait / drop wait before releasing it).
    let c = unsafe { d.sh.put_async_raw(pe, d.offset, s.addr as *const u8, n) }
        .map_err(with_context(|| what.clone()))?;
    Ok(Handle {
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
    remote_pe: i64,
    nbytes: Option<usize>,
) -> PyResult<Handle> {
    let s = sym(src, "src")?;
    let pe = pe_arg(remote_pe, s.sh.n_pes())?;
    let d = local(dst, "dst", true)?;
    let n = crate::rma::get_len(nbytes, d.len, s.len, pe)?;
    let what = format!("get of {n} bytes from PE {pe}");
    // SAFETY: `d.keep` holds the destination in place until completion.
    let c = unsafe { s.sh.get_async_raw(pe, s.offset, d.addr as *mut u8, n) }
        .map_err(with_context(|| what.clone()))?;
    Ok(Handle {
        completion: c,
        keep: Mutex::new(Some(d.keep)),
        what,
    })
}
