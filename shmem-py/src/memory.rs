//! Symmetric memory as Python sees it: the `Buffer` class, allocation and
//! free, peer views, and the conversion of any Python object that exposes
//! memory (a `Buffer`, a numpy array or other buffer-protocol object, a CPU
//! torch tensor) into an address range.

use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use pyo3::buffer::PyUntypedBuffer;
use pyo3::exceptions::{PyBufferError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use pyo3::{ffi, IntoPyObjectExt};
use shmem::Shmem;

use crate::args::{MemTypeArg, Pe};
use crate::dlpack;
use crate::dtype::Dtype;
use crate::errors::{error, invalid, with_context, OrPy, ShmemError};
use crate::state::{self, Keep};
use crate::torch_shim;

/// One symmetric allocation, shared by its `Buffer` and the peer views of it.
#[derive(Debug)]
pub(crate) struct Allocation {
    freed: AtomicBool,
    release: bool,
    except_on_del: bool,
    /// Live exports of the memory: buffer-protocol views (numpy) and
    /// DLPack tensors. A free while some are alive leaves the range marked
    /// stale until they are gone (see [`state::stale_overlap`]).
    exports: AtomicUsize,
}

impl Allocation {
    /// Number of live exported views.
    pub(crate) fn exports(&self) -> usize {
        self.exports.load(Ordering::Acquire)
    }
}

/// Counts one exported view of an allocation while it lives; for a torch
/// tensor made by [`torch_view`], also names its storage in [`TENSORS`].
pub(crate) struct ExportGuard {
    alloc: Arc<Allocation>,
    storage: Option<Arc<AtomicUsize>>,
}

impl ExportGuard {
    pub(crate) fn new(alloc: &Arc<Allocation>) -> ExportGuard {
        alloc.exports.fetch_add(1, Ordering::AcqRel);
        ExportGuard {
            alloc: alloc.clone(),
            storage: None,
        }
    }
}

impl Drop for ExportGuard {
    fn drop(&mut self) {
        self.alloc.exports.fetch_sub(1, Ordering::AcqRel);
        if let Some(cell) = &self.storage {
            let key = cell.load(Ordering::Acquire);
            if key != 0 {
                let mut t = tensors();
                if t.get(&key).is_some_and(|a| Arc::ptr_eq(a, &self.alloc)) {
                    t.remove(&key);
                }
            }
        }
    }
}

/// The allocation behind each live torch storage made by [`torch_view`],
/// by the storage's `_cdata` (its StorageImpl address, unique while it
/// lives): how a tensor is traced to its allocation.
static TENSORS: std::sync::Mutex<std::collections::BTreeMap<usize, Arc<Allocation>>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

fn tensors() -> std::sync::MutexGuard<'static, std::collections::BTreeMap<usize, Arc<Allocation>>> {
    TENSORS.lock().unwrap_or_else(|p| p.into_inner())
}

/// A 1-D `uint8` CPU torch tensor over `buf` (DLPack), whose storage is
/// remembered so that its views used after `free` are refused.
#[pyfunction]
pub(crate) fn torch_view<'py>(buf: &Bound<'py, Buffer>) -> PyResult<Bound<'py, PyAny>> {
    let py = buf.py();
    let b = buf.get();
    b.check_live()?;
    let addr = b.mapped_addr()?;
    let cell = Arc::new(AtomicUsize::new(0));
    let mut guard = ExportGuard::new(&b.alloc);
    guard.storage = Some(cell.clone());
    let cap = dlpack::export(
        buf.clone().into_any().unbind(),
        guard,
        addr,
        b.length,
        false,
        py,
    )?;
    let t = py.import("torch")?.getattr("from_dlpack")?.call1((cap,))?;
    let key: usize = t
        .call_method0("untyped_storage")?
        .getattr("_cdata")?
        .extract()?;
    tensors().insert(key, b.alloc.clone());
    cell.store(key, Ordering::Release);
    Ok(t)
}

/// A range of symmetric memory: an allocation on this PE (from `buffer`,
/// `calloc`, `align`, `malloc`) or, from `get_peer_buffer`, the same object
/// in another PE's heap: mapped into this process when the PE is on this
/// node, else (a PE on another node) a name for the object that the calls
/// naming that PE accept, with no memory to view here.
///
/// numpy and torch view it without a copy: `numpy.asarray(buf)` (buffer
/// protocol, or `__array_interface__`) and `torch.from_dlpack(buf)` (DLPack)
/// give a writable `uint8` array of `length` bytes at `addr`. The memory stays
/// mapped while any view of it lives, even after `free` or `finalize`, so a
/// stale view reads stale data but never crashes the interpreter.
#[pyclass(module = "shmem.core", frozen, weakref)]
pub struct Buffer {
    pub(crate) sh: Shmem,
    pub(crate) offset: usize,
    pub(crate) length: usize,
    /// Where the memory is in this process; 0 for a view of a PE whose heap
    /// is not mapped here (see [`Buffer::mapped_addr`]).
    pub(crate) addr: usize,
    pub(crate) mem_type: u32,
    /// `Some(pe)` for a view of another PE's copy (`get_peer_buffer`).
    pub(crate) peer: Option<usize>,
    pub(crate) alloc: Arc<Allocation>,
}

impl Buffer {
    fn check_live(&self) -> PyResult<()> {
        if self.alloc.freed.load(Ordering::Acquire) {
            return Err(error(format!(
                "{} has been freed; allocate a new one",
                self.describe()
            )));
        }
        Ok(())
    }

    fn describe(&self) -> String {
        let whose = match self.peer {
            Some(pe) => format!(" (view of PE {pe}'s copy)"),
            None => String::new(),
        };
        format!(
            "Buffer of {} bytes at heap offset {:#x} on PE {} (instance {}){whose}",
            self.length,
            self.offset,
            self.sh.my_pe(),
            self.sh.instance()
        )
    }

    /// The address of the memory in this process, or an error for a view
    /// of a PE whose heap is not mapped here (a PE on another node): such a
    /// view only names the object for put/get/signals/atomics to that PE.
    pub(crate) fn mapped_addr(&self) -> PyResult<usize> {
        match self.peer {
            Some(pe) if self.addr == 0 => Err(error(format!(
                "{} names the object on PE {pe}, whose heap is not mapped into PE {} (engine {}): \
                 pass it to put/get/signal calls for PE {pe}; its memory cannot be viewed or \
                 addressed here",
                self.describe(),
                self.sh.my_pe(),
                self.sh.engine_for(pe).unwrap_or("?")
            ))),
            _ => Ok(self.addr),
        }
    }

    /// Whether `free` has run on it (or on the buffer it views).
    pub(crate) fn is_freed(&self) -> bool {
        self.alloc.freed.load(Ordering::Acquire)
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        let leaked = self.peer.is_none()
            && !self.alloc.release
            && self.alloc.except_on_del
            && !self.alloc.freed.load(Ordering::Acquire)
            && !self.sh.is_finalized();
        if leaked {
            let msg = format!(
                "{} was garbage-collected without free(); free is collective, so call \
                 shmem.core.free(buf) on every PE (or allocate with release=True or \
                 except_on_del=False to opt out of this check)",
                self.describe()
            );
            // A pyclass is dropped from tp_dealloc or with the interpreter
            // attached; try_attach is a no-op re-entry then, and skips the
            // report if the interpreter is already gone.
            Python::try_attach(|py| ShmemError::new_err(msg).write_unraisable(py, None));
        }
    }
}

#[pymethods]
impl Buffer {
    /// Address of the first byte in this process (an error for a view of a
    /// PE on another node, whose memory is not mapped here).
    #[getter]
    fn addr(&self) -> PyResult<usize> {
        self.mapped_addr()
    }
    /// Size in bytes.
    #[getter]
    fn length(&self) -> usize {
        self.length
    }
    /// The `MemType` it was allocated with (an int: 0 host, 1 device).
    #[getter]
    fn mem_type(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let v = self.mem_type;
        match py
            .import("shmem._enums")
            .and_then(|m| m.getattr("MemType"))
            .and_then(|t| t.call1((v,)))
        {
            Ok(e) => Ok(e.unbind()),
            Err(_) => v.into_py_any(py),
        }
    }
    /// Offset in the symmetric heap (the same on every PE).
    #[getter]
    fn offset(&self) -> usize {
        self.offset
    }
    /// The PE whose memory this is: this PE, or the peer of a peer view.
    #[getter]
    fn pe(&self) -> usize {
        self.peer.unwrap_or_else(|| self.sh.my_pe())
    }
    /// Whether this is a view of another PE's copy (`get_peer_buffer`).
    #[getter]
    fn is_peer(&self) -> bool {
        self.peer.is_some()
    }
    /// The instance that allocated it.
    #[getter]
    fn instance(&self) -> u32 {
        self.sh.instance()
    }
    /// Whether it has been freed.
    #[getter]
    fn freed(&self) -> bool {
        self.is_freed()
    }
    fn __len__(&self) -> usize {
        self.length
    }
    fn __repr__(&self) -> String {
        format!(
            "<shmem Buffer addr={:#x} length={} offset={:#x} pe={} instance={}{}>",
            self.addr,
            self.length,
            self.offset,
            self.pe(),
            self.sh.instance(),
            if self.is_freed() { " freed" } else { "" }
        )
    }

    /// A numpy array viewing the memory (no copy): `dtype` elements, 1-D
    /// unless `shape` is given.
    #[pyo3(signature = (dtype = None, shape = None))]
    fn numpy<'py>(
        slf: &Bound<'py, Self>,
        dtype: Option<&Bound<'py, PyAny>>,
        shape: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let np = py.import("numpy")?;
        let dt = match dtype {
            Some(d) => d.clone(),
            None => "uint8".into_bound_py_any(py)?,
        };
        let arr = np.call_method1("frombuffer", (slf, dt))?;
        match shape {
            Some(s) => arr.call_method1("reshape", (s,)),
            None => Ok(arr),
        }
    }

    /// Buffer protocol: a writable, contiguous `uint8` view.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        let b = slf.get();
        b.check_live()?;
        let addr = b.mapped_addr()?;
        let len = isize::try_from(b.length).map_err(|_| invalid("buffer too large"))?;
        // SAFETY: `view` is the Py_buffer CPython handed us; the range is
        // mapped for as long as `slf` lives (it holds the runtime, which holds
        // the mapping), and PyBuffer_FillInfo stores a new reference to
        // `slf` in view->obj.
        let rc = unsafe {
            ffi::PyBuffer_FillInfo(
                view,
                slf.as_ptr(),
                addr as *mut std::ffi::c_void,
                len,
                0,
                flags,
            )
        };
        if rc == -1 {
            return Err(PyErr::fetch(slf.py()));
        }
        b.alloc.exports.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// Ends one buffer-protocol export (counted for use-after-free checks).
    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {
        self.alloc.exports.fetch_sub(1, Ordering::AcqRel);
    }

    /// numpy's array interface (version 3): `length` bytes of `uint8`.
    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        self.check_live()?;
        let addr = self.mapped_addr()?;
        let d = PyDict::new(py);
        d.set_item("shape", (self.length,))?;
        d.set_item("typestr", "|u1")?;
        d.set_item("data", (addr, false))?;
        d.set_item("strides", py.None())?;
        d.set_item("version", 3)?;
        Ok(d)
    }

    /// DLPack export (`torch.from_dlpack(buf)`, `numpy.from_dlpack(buf)`): a
    /// 1-D `uint8` CPU tensor over the memory. `stream` must be None (CPU
    /// memory needs no synchronisation); `copy=True` is refused.
    #[pyo3(signature = (*, stream = None, max_version = None, dl_device = None, copy = None))]
    fn __dlpack__<'py>(
        slf: &Bound<'py, Self>,
        stream: Option<&Bound<'py, PyAny>>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let b = slf.get();
        b.check_live()?;
        if let Some(s) = stream {
            if !s.is_none() && s.extract::<i64>().ok() != Some(-1) {
                return Err(PyBufferError::new_err(
                    "shmem Buffers are CPU memory: __dlpack__ takes stream=None",
                ));
            }
        }
        if let Some(dev) = dl_device {
            if dev != dlpack::CPU_DEVICE {
                return Err(PyBufferError::new_err(format!(
                    "shmem Buffers live on the CPU device {:?}, not {dev:?}",
                    dlpack::CPU_DEVICE
                )));
            }
        }
        if copy == Some(true) {
            return Err(PyBufferError::new_err(
                "shmem Buffers are exported without a copy (copy=True is not supported)",
            ));
        }
        let versioned = max_version.is_some_and(|(major, _)| major >= 1);
        let addr = b.mapped_addr()?;
        dlpack::export(
            slf.clone().into_any().unbind(),
            ExportGuard::new(&b.alloc),
            addr,
            b.length,
            versioned,
            slf.py(),
        )
    }

    /// `(kDLCPU, 0)`: the memory is host memory whatever its `mem_type`.
    fn __dlpack_device__(&self) -> (i32, i32) {
        dlpack::CPU_DEVICE
    }
}

// ----- converting Python objects to memory ranges ---------------------------

/// A range of this process's memory taken from a Python object.
pub(crate) struct Local {
    pub(crate) addr: usize,
    pub(crate) len: usize,
    pub(crate) itemsize: usize,
    pub(crate) dtype: Option<Dtype>,
    /// Keeps the memory alive and in place while the range is used.
    pub(crate) keep: Keep,
}

fn describe_type(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

/// The memory of `obj`: a shmem `Buffer` (own or peer view), a C-contiguous
/// buffer-protocol object (writable when `writable`), or a contiguous CPU
/// torch tensor. A numpy array or tensor viewing a freed `Buffer` is an
/// error (see [`check_not_stale`]).
pub(crate) fn local(obj: &Bound<'_, PyAny>, arg: &str, writable: bool) -> PyResult<Local> {
    local_as(obj, arg, writable, true)
}

/// [`local`] for calls that move bytes and never look at the element type
/// (put, get and their variants): a torch tensor's `dtype` is not read
/// (one attribute read and a lookup fewer per call).
pub(crate) fn local_bytes(obj: &Bound<'_, PyAny>, arg: &str, writable: bool) -> PyResult<Local> {
    local_as(obj, arg, writable, false)
}

/// [`local`], with the element type found only when `typed`.
fn local_as(obj: &Bound<'_, PyAny>, arg: &str, writable: bool, typed: bool) -> PyResult<Local> {
    if let Ok(b) = obj.cast::<Buffer>() {
        let b = b.get();
        b.check_live()?;
        return Ok(Local {
            addr: b.mapped_addr()?,
            len: b.length,
            itemsize: 1,
            dtype: None,
            keep: Keep::Object(obj.clone().unbind()),
        });
    }
    if let Some((addr, len, dtype)) = ndarray_range(obj, writable) {
        check_not_stale(obj, array_owner(obj), addr, len, arg)?;
        // An ndarray's memory stays in place while the array lives (only
        // `resize(refcheck=False)`, which numpy documents as unsafe while
        // anything else refers to the array, moves it; an export would not
        // stop that either).
        return Ok(Local {
            addr,
            len,
            itemsize: dtype.size(),
            dtype: typed.then_some(dtype),
            keep: Keep::Object(obj.clone().unbind()),
        });
    }
    // SAFETY: obj is a valid object and we are attached.
    if unsafe { ffi::PyObject_CheckBuffer(obj.as_ptr()) } == 1 {
        if !typed {
            if let Some(x) = RawExport::c_contiguous(obj, writable) {
                let (addr, len, itemsize) = x.range();
                check_not_stale(obj, array_owner(obj), addr, len, arg)?;
                return Ok(Local {
                    addr,
                    len,
                    itemsize,
                    dtype: None,
                    keep: Keep::Raw(x),
                });
            }
        } else if let Some(l) = typed_ndarray(obj, writable, arg)? {
            return Ok(l);
        }
        let buf = PyUntypedBuffer::get(obj)
            .map_err(|e| invalid(format!("`{arg}`: cannot read its memory: {e}")))?;
        if !buf.is_c_contiguous() {
            return Err(invalid(format!(
                "`{arg}` must be C-contiguous (got a strided view of shape {:?}); \
                 pass numpy.ascontiguousarray(...) or a contiguous slice",
                buf.shape()
            )));
        }
        if writable && buf.readonly() {
            return Err(invalid(format!(
                "`{arg}` is read-only ({}); it receives data, so pass a writable array",
                describe_type(obj)
            )));
        }
        let dtype = buf.format().to_str().ok().and_then(Dtype::from_format);
        if typed {
            learn_dtype(obj, dtype);
        }
        let (addr, len) = (buf.buf_ptr() as usize, buf.len_bytes());
        check_not_stale(obj, array_owner(obj), addr, len, arg)?;
        return Ok(Local {
            addr,
            len,
            itemsize: buf.item_size().max(1),
            dtype,
            keep: Keep::Export(buf),
        });
    }
    if is_plain_tensor(obj) {
        return torch_local(obj, arg, typed, true);
    }
    if is_torch_tensor(obj) || obj.hasattr(pyo3::intern!(obj.py(), "data_ptr"))? {
        return torch_local(obj, arg, typed, false);
    }
    Err(PyTypeError::new_err(format!(
        "`{arg}` must be a shmem Buffer, an object with the buffer protocol (numpy array, \
         bytes, bytearray, memoryview) or a contiguous CPU torch tensor, not {}",
        describe_type(obj)
    )))
}

/// `numpy.ndarray`, once an array has been seen (numpy is imported then).
static NDARRAY: pyo3::sync::PyOnceLock<Py<pyo3::types::PyType>> = pyo3::sync::PyOnceLock::new();

/// Whether `obj` is exactly a `numpy.ndarray` (not a subclass), without
/// importing numpy.
fn is_ndarray(obj: &Bound<'_, PyAny>) -> bool {
    let py = obj.py();
    let ty = obj.get_type();
    if let Some(t) = NDARRAY.get(py) {
        return ty.is(t.bind(py));
    }
    if !ty.name().is_ok_and(|n| n == "ndarray") {
        return false;
    }
    let numpy = py
        .import("sys")
        .and_then(|sys| sys.getattr("modules"))
        .and_then(|m| m.get_item("numpy"))
        .and_then(|np| np.getattr("ndarray"))
        .and_then(|t| Ok(t.cast_into::<pyo3::types::PyType>()?.unbind()));
    match numpy {
        Ok(t) => ty.is(NDARRAY.get_or_init(py, || t).bind(py)),
        Err(_) => false,
    }
}

/// Element types of numpy dtype objects seen before, by identity (most
/// arrays share a few dtype objects: numpy's built-in ones, and a view's
/// is its base's). Each entry holds a reference to its dtype object, which
/// therefore lives on (and keeps its address): at most [`DTYPES_KNOWN`].
static DTYPES: std::sync::Mutex<Vec<(usize, Option<Dtype>)>> = std::sync::Mutex::new(Vec::new());
const DTYPES_KNOWN: usize = 32;

/// What the full export of the array whose dtype object is `descr` said.
fn known_dtype(descr: &Bound<'_, PyAny>) -> Option<Option<Dtype>> {
    let p = descr.as_ptr() as usize;
    let known = DTYPES.lock().unwrap_or_else(|e| e.into_inner());
    known.iter().find(|(q, _)| *q == p).map(|(_, d)| *d)
}

/// Whether the table of dtype objects has no room left.
fn dtypes_full() -> bool {
    DTYPES.lock().unwrap_or_else(|e| e.into_inner()).len() >= DTYPES_KNOWN
}

/// Remembers the element type a full export of numpy array `obj` found
/// (from its format string) for `obj`'s dtype object.
fn learn_dtype(obj: &Bound<'_, PyAny>, dtype: Option<Dtype>) {
    if !is_ndarray(obj) {
        return;
    }
    let Ok(descr) = obj.getattr(pyo3::intern!(obj.py(), "dtype")) else {
        return;
    };
    let mut known = DTYPES.lock().unwrap_or_else(|e| e.into_inner());
    let p = descr.as_ptr() as usize;
    if known.len() < DTYPES_KNOWN && !known.iter().any(|(q, _)| *q == p) {
        // The reference stays with the table (see DTYPES).
        known.push((descr.into_ptr() as usize, dtype));
    }
}

/// The typed export of a numpy array (exactly `numpy.ndarray`) whose dtype
/// object a full export has met before, for what [`ndarray_range`] leaves
/// (an element type this module does not know, so no item size to read
/// the fields with): the element type from the table, the memory through
/// the cheap export a byte copy takes ([`RawExport`]: numpy builds no
/// format string for it), about 150 ns less per array than the full one.
/// None: take the full export.
fn typed_ndarray(obj: &Bound<'_, PyAny>, writable: bool, arg: &str) -> PyResult<Option<Local>> {
    if !is_ndarray(obj) {
        return Ok(None);
    }
    let descr = obj.getattr(pyo3::intern!(obj.py(), "dtype"))?;
    let Some(dtype) = known_dtype(&descr) else {
        return Ok(None);
    };
    let Some(x) = RawExport::c_contiguous(obj, writable) else {
        return Ok(None);
    };
    let (addr, len, itemsize) = x.range();
    check_not_stale(obj, array_owner(obj), addr, len, arg)?;
    Ok(Some(Local {
        addr,
        len,
        itemsize,
        dtype,
        keep: Keep::Raw(x),
    }))
}

/// The head of numpy's array object as its C API lays it out
/// (`PyArrayObject_fields` in `numpy/ndarraytypes.h`, the same in numpy 1.x
/// and 2.x; numpy's own `PyArray_DATA`, `PyArray_DIMS`, `PyArray_DESCR` and
/// `PyArray_FLAGS` macros read these fields).
#[repr(C)]
struct NdArrayHead {
    ob_base: ffi::PyObject,
    data: *mut std::ffi::c_char,
    nd: c_int,
    dimensions: *const ffi::Py_ssize_t,
    strides: *const ffi::Py_ssize_t,
    base: *mut ffi::PyObject,
    descr: *mut ffi::PyObject,
    flags: c_int,
}

/// `NPY_ARRAY_C_CONTIGUOUS` and `NPY_ARRAY_WRITEABLE`.
const NPY_C_CONTIGUOUS: c_int = 0x0001;
const NPY_WRITEABLE: c_int = 0x0400;

/// Address, length in bytes and element type of `obj` when it is exactly a
/// C-contiguous `numpy.ndarray` (writable when `writable`) of an element
/// type this module knows, read from the array's fields: no buffer export
/// and no attribute lookup, about 100 ns less per array than the export.
/// The element type comes from the table of dtype objects
/// ([`known_dtype`]); a dtype object not met before is learnt once from a
/// full export. None: take the export path, which also words any error.
fn ndarray_range(obj: &Bound<'_, PyAny>, writable: bool) -> Option<(usize, usize, Dtype)> {
    if !is_ndarray(obj) {
        return None;
    }
    // SAFETY: `obj` is exactly a numpy.ndarray (checked above), whose
    // object starts with NdArrayHead; we are attached, so nothing changes
    // the fields while they are read.
    let head = unsafe { &*(obj.as_ptr() as *const NdArrayHead) };
    let need = NPY_C_CONTIGUOUS | if writable { NPY_WRITEABLE } else { 0 };
    if head.flags & need != need || head.descr.is_null() || head.nd < 0 {
        return None;
    }
    // SAFETY: an ndarray's descr is a live dtype object it holds.
    let descr = unsafe { Bound::from_borrowed_ptr(obj.py(), head.descr) };
    let dtype = match known_dtype(&descr) {
        Some(known) => known?,
        // A table already full would not keep what an export learns.
        None if dtypes_full() => return None,
        None => {
            let buf = PyUntypedBuffer::get(obj).ok()?;
            let dtype = buf.format().to_str().ok().and_then(Dtype::from_format);
            learn_dtype(obj, dtype);
            dtype?
        }
    };
    let dims: &[ffi::Py_ssize_t] = if head.nd == 0 || head.dimensions.is_null() {
        &[]
    } else {
        // SAFETY: `dimensions` holds `nd` extents for the array's life.
        unsafe { std::slice::from_raw_parts(head.dimensions, head.nd as usize) }
    };
    let mut len = dtype.size();
    for &d in dims {
        len = len.checked_mul(usize::try_from(d).ok()?)?;
    }
    Some((head.data as usize, len, dtype))
}

/// The allocation of the shmem `Buffer` that a buffer-protocol object
/// views. Views of a freed Buffer keep an export counted, so tracing is
/// needed only while some freed range still has live exports.
fn array_owner(obj: &Bound<'_, PyAny>) -> Option<Arc<Allocation>> {
    if !state::any_stale() {
        return None;
    }
    viewed_by_array(obj).and_then(|o| o.cast::<Buffer>().ok().map(|b| b.get().alloc.clone()))
}

/// A buffer-protocol export taken with only what a byte copy needs: a
/// C-contiguous range (`PyBUF_ND`: no strides, so the exporter refuses a
/// strided view) and, for a destination, writable, without the element
/// format (numpy builds and compares a format string for every export that
/// asks for one).
pub(crate) struct RawExport(ffi::Py_buffer);

// SAFETY: the export is a plain description of memory that stays valid
// until it is released, which Drop does with the interpreter attached (as
// pyo3's own buffer type, which is Send and Sync, does).
unsafe impl Send for RawExport {}
// SAFETY: as for Send; shared references only read the description.
unsafe impl Sync for RawExport {}

impl RawExport {
    /// The export, or None (with the exporter's error cleared) when `obj`
    /// is not C-contiguous, not writable while `writable` is asked, or
    /// refuses these flags: the full export then words the error.
    fn c_contiguous(obj: &Bound<'_, PyAny>, writable: bool) -> Option<RawExport> {
        let flags = ffi::PyBUF_ND | if writable { ffi::PyBUF_WRITABLE } else { 0 };
        let mut view = std::mem::MaybeUninit::<ffi::Py_buffer>::zeroed();
        // SAFETY: obj is a valid object, we are attached, and `view` is
        // writable memory for one Py_buffer.
        if unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), view.as_mut_ptr(), flags) } != 0 {
            drop(PyErr::take(obj.py()));
            return None;
        }
        // SAFETY: a successful PyObject_GetBuffer filled the view; CPython
        // itself copies a filled Py_buffer by value (PyMemoryView_FromBuffer).
        Some(RawExport(unsafe { view.assume_init() }))
    }

    /// Address, length in bytes and item size of the exported memory.
    fn range(&self) -> (usize, usize, usize) {
        let v = &self.0;
        (
            v.buf as usize,
            usize::try_from(v.len).unwrap_or(0),
            usize::try_from(v.itemsize).unwrap_or(1).max(1),
        )
    }
}

impl Drop for RawExport {
    fn drop(&mut self) {
        // SAFETY: the view was filled by PyObject_GetBuffer and is released
        // once, attached.
        Python::attach(|_| unsafe { ffi::PyBuffer_Release(&mut self.0) });
    }
}

/// torch's `Tensor` and `nn.Parameter` types, found once torch has been
/// imported by the program (this module never imports it).
struct TorchTypes {
    tensor: Py<PyAny>,
    parameter: Option<Py<PyAny>>,
}

fn torch_types(py: Python<'_>) -> Option<&'static TorchTypes> {
    static TYPES: pyo3::sync::PyOnceLock<TorchTypes> = pyo3::sync::PyOnceLock::new();
    if let Some(t) = TYPES.get(py) {
        return Some(t);
    }
    let torch = py
        .import("sys")
        .and_then(|sys| sys.getattr("modules"))
        .ok()
        .and_then(|m| m.get_item("torch").ok())?;
    let tensor = torch.getattr("Tensor").ok()?;
    let parameter = torch
        .getattr("nn")
        .and_then(|nn| nn.getattr("Parameter"))
        .ok();
    Some(TYPES.get_or_init(py, || TorchTypes {
        tensor: tensor.unbind(),
        parameter: parameter.map(Bound::unbind),
    }))
}

/// Whether `obj` is a `torch.Tensor` (or a subclass): one type check once
/// torch has been imported, instead of looking up an attribute on every
/// call.
fn is_torch_tensor(obj: &Bound<'_, PyAny>) -> bool {
    torch_types(obj.py()).is_some_and(|t| obj.is_instance(t.tensor.bind(obj.py())).unwrap_or(false))
}

/// Whether `obj`'s type is exactly `torch.Tensor` or `torch.nn.Parameter`
/// (no `__torch_function__` of a subclass to honour).
fn is_plain_tensor(obj: &Bound<'_, PyAny>) -> bool {
    let Some(t) = torch_types(obj.py()) else {
        return false;
    };
    let ty = obj.get_type().into_any();
    ty.is(t.tensor.bind(obj.py()))
        || t.parameter
            .as_ref()
            .is_some_and(|p| ty.is(p.bind(obj.py())))
}

/// numpy's `ndarray` type.
fn ndarray_type(py: Python<'_>) -> Option<&Py<PyAny>> {
    static NDARRAY: pyo3::sync::PyOnceLock<Py<PyAny>> = pyo3::sync::PyOnceLock::new();
    NDARRAY
        .get_or_try_init(py, || -> PyResult<Py<PyAny>> {
            Ok(py.import("numpy")?.getattr("ndarray")?.unbind())
        })
        .ok()
}

/// The shmem `Buffer` a numpy array (or memoryview) views, found through
/// its `base` chain, or None when it cannot be told.
fn viewed_by_array<'py>(obj: &Bound<'py, PyAny>) -> Option<Bound<'py, PyAny>> {
    let py = obj.py();
    let mut cur = obj.clone();
    for _ in 0..16 {
        if cur.cast::<Buffer>().is_ok() {
            return Some(cur);
        }
        // SAFETY: cur is a valid object and we are attached.
        let next = if unsafe { ffi::PyMemoryView_Check(cur.as_ptr()) } != 0 {
            cur.getattr(pyo3::intern!(py, "obj")).ok()?
        } else if cur.is_instance(ndarray_type(py)?.bind(py)).ok()? {
            cur.getattr(pyo3::intern!(py, "base")).ok()?
        } else {
            return None;
        };
        if next.is_none() {
            return None;
        }
        cur = next;
    }
    None
}

/// The allocation a torch tensor views, when it came from [`torch_view`]
/// (`shmem.torch`); looked up only while some freed range has live views.
fn viewed_by_tensor(t: &Bound<'_, PyAny>) -> Option<Arc<Allocation>> {
    if !state::any_stale() {
        return None;
    }
    let key: usize = t
        .call_method0(pyo3::intern!(t.py(), "untyped_storage"))
        .ok()?
        .getattr(pyo3::intern!(t.py(), "_cdata"))
        .ok()?
        .extract()
        .ok()?;
    tensors().get(&key).cloned()
}

/// Refuses memory of a freed allocation: `owner` (the Buffer that `obj`
/// views, when known) must not be freed, and memory that cannot be traced
/// must not overlap a range freed while views of it were alive.
fn check_not_stale(
    obj: &Bound<'_, PyAny>,
    owner: Option<Arc<Allocation>>,
    addr: usize,
    len: usize,
    arg: &str,
) -> PyResult<()> {
    if let Some(a) = owner {
        if a.freed.load(Ordering::Acquire) {
            let where_ = state::owner_of(addr)
                .map(|(sh, off)| {
                    format!(
                        " ({len} bytes at heap offset {off:#x} on PE {})",
                        sh.my_pe()
                    )
                })
                .unwrap_or_default();
            return Err(error(format!(
                "`{arg}` ({}{where_}) views an allocation that has been freed (free / \
                 free_tensor); a view of freed symmetric memory cannot be used: the memory may \
                 belong to a newer allocation now",
                describe_type(obj)
            )));
        }
        return Ok(());
    }
    if !state::any_stale() {
        return Ok(());
    }
    if let Some((sh, off)) = state::owner_of(addr) {
        if let Some(what) = state::stale_overlap(sh.instance(), off, len) {
            return Err(error(format!(
                "`{arg}` ({}, {len} bytes at heap offset {off:#x}) overlaps memory that was freed \
                 while views of it were alive ({what}); such a view cannot be told from a view of \
                 a newer allocation, so neither is accepted until the old views are gone. Pass the \
                 Buffer, or a view from buf.numpy() / shmem.torch",
                describe_type(obj)
            )));
        }
    }
    Ok(())
}

/// `plain`: `t`'s type is exactly `torch.Tensor` or `torch.nn.Parameter`.
fn torch_local(t: &Bound<'_, PyAny>, arg: &str, typed: bool, plain: bool) -> PyResult<Local> {
    let m = tensor_range(t, arg, typed, plain)?;
    Ok(Local {
        addr: m.addr,
        len: m.len,
        itemsize: m.itemsize.max(1),
        dtype: m.dtype,
        keep: Keep::Object(t.clone().unbind()),
    })
}

/// A tensor's memory (through the shim when `plain`, else or failing that
/// from its attributes), refused if it views freed symmetric memory.
fn tensor_range(
    t: &Bound<'_, PyAny>,
    arg: &str,
    typed: bool,
    plain: bool,
) -> PyResult<torch_shim::TensorMem> {
    let m = match plain.then(|| shim_tensor_mem(t, arg, typed)).flatten() {
        Some(m) => m,
        None => torch_attrs(t, arg, typed)?,
    };
    check_not_stale(t, viewed_by_tensor(t), m.addr, m.len, arg)?;
    Ok(m)
}

/// A plain tensor's memory through torch's C shim (None: take the
/// attribute path); the element type only when `typed`, as there.
fn shim_tensor_mem(t: &Bound<'_, PyAny>, arg: &str, typed: bool) -> Option<torch_shim::TensorMem> {
    let m = torch_shim::tensor_mem(t)
        .filter(|m| torch_shim::checked(*m, || torch_attrs(t, arg, true).ok()))?;
    Some(if typed {
        m
    } else {
        // Byte calls ignore the element type, as the attribute path does.
        torch_shim::TensorMem {
            itemsize: 1,
            dtype: None,
            ..m
        }
    })
}

/// A tensor's memory from its Python attributes (any tensor type; words
/// the errors). The element type is read only when `typed`.
fn torch_attrs(t: &Bound<'_, PyAny>, arg: &str, typed: bool) -> PyResult<torch_shim::TensorMem> {
    let py = t.py();
    if !t.getattr(pyo3::intern!(py, "is_cpu"))?.is_truthy()? {
        let device = t.getattr(pyo3::intern!(py, "device"))?.str()?.to_string();
        return Err(invalid(format!(
            "`{arg}` is a torch tensor on device {device:?}; shmem memory is host memory, use a CPU tensor"
        )));
    }
    if !t
        .call_method0(pyo3::intern!(py, "is_contiguous"))?
        .is_truthy()?
    {
        return Err(invalid(format!(
            "`{arg}` must be a contiguous tensor (call .contiguous())"
        )));
    }
    let (dtype, itemsize) = if typed {
        crate::dtype::torch_dtype(&t.getattr(pyo3::intern!(py, "dtype"))?)?
    } else {
        (None, 1)
    };
    let len: usize = t.getattr(pyo3::intern!(py, "nbytes"))?.extract()?;
    let addr: usize = t.call_method0(pyo3::intern!(py, "data_ptr"))?.extract()?;
    Ok(torch_shim::TensorMem {
        addr,
        len,
        itemsize,
        dtype,
    })
}

/// A symmetric object named from Python: the instance it belongs to, its
/// heap offset and size, and its element type when the object carries one.
pub(crate) struct Sym {
    pub(crate) sh: Shmem,
    pub(crate) offset: usize,
    pub(crate) len: usize,
    pub(crate) itemsize: usize,
    pub(crate) dtype: Option<Dtype>,
    /// `Some(pe)` when named through a view of PE `pe`'s copy
    /// (`get_peer_buffer`).
    pub(crate) peer: Option<usize>,
}

impl Sym {
    /// Applies an explicit `dtype=` argument (a numpy dtype or type, a
    /// torch dtype, or a name).
    pub(crate) fn with_dtype(mut self, dtype: Option<&Bound<'_, PyAny>>) -> PyResult<Sym> {
        if let Some(dt) = dtype_arg(dtype)? {
            self.dtype = Some(dt);
            self.itemsize = dt.size();
        }
        Ok(self)
    }

    /// Number of whole elements.
    pub(crate) fn count(&self) -> usize {
        self.len / self.itemsize.max(1)
    }

    /// The element type, or an error asking for `dtype=`.
    pub(crate) fn require_dtype(&self, arg: &str, what: &str) -> PyResult<Dtype> {
        self.dtype.ok_or_else(|| {
            invalid(format!(
                "`{arg}` carries no element type that {what} understands; view it as a typed \
                 numpy array (buf.numpy(dtype)) or pass dtype="
            ))
        })
    }

    pub(crate) fn instance(&self) -> u32 {
        self.sh.instance()
    }

    /// A peer view must name the PE of the call it is passed to.
    pub(crate) fn for_pe(self, pe: usize, arg: &str) -> PyResult<Sym> {
        match self.peer {
            Some(p) if p != pe => Err(invalid(format!(
                "`{arg}` is a view of PE {p}'s memory (get_peer_buffer) but the call targets PE {pe}; pass get_peer_buffer(buf, {pe}) or the local Buffer"
            ))),
            _ => Ok(self),
        }
    }
}

/// `obj` as a symmetric object of this PE: a `Buffer`, or a numpy array /
/// torch tensor viewing symmetric memory (any instance's heap). Peer views
/// are refused: use [`sym_peer`] where the call names a PE.
pub(crate) fn sym(obj: &Bound<'_, PyAny>, arg: &str) -> PyResult<Sym> {
    sym_near(obj, arg, None)
}

/// [`sym`], looking first in the heap of `near` (the instance the call
/// works on, such as its team's), which spares the lookup of the current
/// instance.
pub(crate) fn sym_near(obj: &Bound<'_, PyAny>, arg: &str, near: Option<&Shmem>) -> PyResult<Sym> {
    let s = sym_peer_as(obj, arg, true, near)?;
    if let Some(pe) = s.peer {
        return Err(invalid(format!(
            "`{arg}` is a view of PE {pe}'s memory (get_peer_buffer); this call works on this \
             PE's own copy, so pass the local Buffer"
        )));
    }
    Ok(s)
}

/// Like [`sym`], also accepting a peer view (`get_peer_buffer(buf, pe)`),
/// which the caller checks against its PE with [`Sym::for_pe`].
pub(crate) fn sym_peer(obj: &Bound<'_, PyAny>, arg: &str) -> PyResult<Sym> {
    sym_peer_as(obj, arg, true, None)
}

/// [`sym_peer`] for calls that move bytes (see [`local_bytes`]).
pub(crate) fn sym_peer_bytes(obj: &Bound<'_, PyAny>, arg: &str) -> PyResult<Sym> {
    sym_peer_as(obj, arg, false, None)
}

fn sym_peer_as(
    obj: &Bound<'_, PyAny>,
    arg: &str,
    typed: bool,
    near: Option<&Shmem>,
) -> PyResult<Sym> {
    if let Ok(b) = obj.cast::<Buffer>() {
        let b = b.get();
        b.check_live()?;
        return Ok(Sym {
            sh: b.sh.clone(),
            offset: b.offset,
            len: b.length,
            itemsize: 1,
            dtype: None,
            peer: b.peer,
        });
    }
    // What local_as would find, without the reference its Local keeps (a
    // symmetric object's memory is the heap's): about 20 ns less per array.
    if let Some((addr, len, dtype)) = ndarray_range(obj, false) {
        check_not_stale(obj, array_owner(obj), addr, len, arg)?;
        return sym_at(addr, len, arg, near).map(|mut s| {
            s.itemsize = dtype.size();
            s.dtype = typed.then_some(dtype);
            s
        });
    }
    // The same for a plain torch tensor.
    if is_plain_tensor(obj) {
        let m = tensor_range(obj, arg, typed, true)?;
        return sym_at(m.addr, m.len, arg, near).map(|mut s| {
            s.itemsize = m.itemsize.max(1);
            s.dtype = m.dtype;
            s
        });
    }
    let l = local_as(obj, arg, false, typed)?;
    sym_at(l.addr, l.len, arg, near).map(|mut s| {
        s.itemsize = l.itemsize;
        s.dtype = l.dtype;
        s
    })
}

/// The symmetric object at `addr..addr+len` of this process (looked for
/// first in `near`'s heap).
pub(crate) fn sym_at(addr: usize, len: usize, arg: &str, near: Option<&Shmem>) -> PyResult<Sym> {
    let found = near
        .and_then(|sh| Some((sh.clone(), sh.offset_of(addr as *const u8)?)))
        .or_else(|| state::owner_of(addr));
    let Some((sh, offset)) = found else {
        return Err(invalid(format!(
            "`{arg}` ({len} bytes at address {addr:#x}) is not in a symmetric heap of this \
             process; allocate it with shmem.core.buffer()/shmem.malloc() (or Manager.malloc_tensor) \
             and view it with numpy.asarray / torch.from_dlpack"
        )));
    };
    sh.check_range(offset, len)
        .map_err(with_context(|| format!("`{arg}`")))?;
    Ok(Sym {
        sh,
        offset,
        len,
        itemsize: 1,
        dtype: None,
        peer: None,
    })
}

/// `sym` if `obj` is symmetric memory of this PE, else `None`.
pub(crate) fn try_sym(obj: &Bound<'_, PyAny>) -> Option<Sym> {
    if let Ok(b) = obj.cast::<Buffer>() {
        if b.get().peer.is_some() {
            return None;
        }
    }
    sym(obj, "obj").ok()
}

// ----- allocation ---------------------------------------------------------

/// Allocates `size` bytes on every PE (collective; same arguments everywhere).
#[pyfunction]
#[pyo3(signature = (size, alignment = 0, zero = false, release = false, except_on_del = true, mem_type = MemTypeArg(1), instance = None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn malloc(
    py: Python<'_>,
    size: usize,
    alignment: usize,
    zero: bool,
    release: bool,
    except_on_del: bool,
    mem_type: MemTypeArg,
    instance: Option<u32>,
) -> PyResult<Buffer> {
    let mem_type = mem_type.0;
    let sh = state::resolve(instance)?;
    let align = if alignment == 0 {
        shmem_core::heap::MIN_ALIGN
    } else {
        alignment
    };
    if !align.is_power_of_two() {
        return Err(invalid(format!(
            "alignment {alignment} is not a power of two"
        )));
    }
    crate::streams::settle(py, &sh)?;
    let sh2 = sh.clone();
    let offset = crate::blocking::run_ordered(py, sh.instance(), move || {
        if zero {
            sh2.calloc_bytes(size, align)
        } else {
            sh2.malloc_bytes(size, align)
        }
    })?
    .map_err(with_context(|| {
        format!(
            "allocating {size} bytes (alignment {align}) on PE {}",
            sh.my_pe()
        )
    }))?;
    let addr = sh.local_ptr(offset).py()?.as_ptr() as usize;
    Ok(Buffer {
        sh,
        offset,
        length: size,
        addr,
        mem_type,
        peer: None,
        alloc: Arc::new(Allocation {
            freed: AtomicBool::new(false),
            release,
            except_on_del,
            exports: AtomicUsize::new(0),
        }),
    })
}

/// Frees a Buffer on every PE (collective). A second free of the same
/// Buffer raises `ShmemError`.
#[pyfunction]
pub(crate) fn free(py: Python<'_>, buf: &Bound<'_, PyAny>) -> PyResult<()> {
    let b = buf.cast::<Buffer>().map_err(|_| {
        PyTypeError::new_err(format!(
            "free() takes a shmem Buffer, not {}",
            describe_type(buf)
        ))
    })?;
    let b = b.get();
    if let Some(pe) = b.peer {
        return Err(invalid(format!(
            "cannot free a view of PE {pe}'s memory (get_peer_buffer); free the Buffer it was taken from"
        )));
    }
    let sh = b.sh.clone();
    crate::streams::settle(py, &sh)?;
    if b.alloc.freed.load(Ordering::Acquire) {
        // Still take part in the collective (with an offset no allocation
        // has) so that PEs freeing something else fail instead of waiting.
        let sh2 = sh.clone();
        let _ =
            crate::blocking::run_ordered(py, sh.instance(), move || sh2.free_bytes(usize::MAX))?;
        return Err(error(format!(
            "double free: {} was already freed",
            b.describe()
        )));
    }
    let off = b.offset;
    let sh2 = sh.clone();
    crate::blocking::run_ordered(py, sh.instance(), move || sh2.free_bytes(off))?
        .map_err(with_context(|| format!("free of {}", b.describe())))?;
    b.alloc.freed.store(true, Ordering::Release);
    if b.alloc.exports() > 0 {
        state::add_stale(sh.instance(), off, b.length, b.alloc.clone());
    }
    Ok(())
}

/// The same object in PE `pe`'s heap: mapped into this process when `pe` is
/// on this node; for a PE on another node, a view without local memory that
/// the calls naming `pe` accept (`put(dst=peer_buf, src, pe)`, as the
/// reference's scripts write it).
#[pyfunction]
pub(crate) fn get_peer_buffer(buf: &Bound<'_, Buffer>, pe: Pe) -> PyResult<Buffer> {
    let b = buf.get();
    b.check_live()?;
    if let Some(p) = b.peer {
        return Err(invalid(format!(
            "this Buffer is already a view of PE {p}'s memory; pass the local Buffer"
        )));
    }
    let pe = pe_arg(pe.0, b.sh.n_pes())?;
    let ptr =
        b.sh.peer_ptr(b.offset, pe)
            .map_err(with_context(|| format!("get_peer_buffer(PE {pe})")))?;
    Ok(Buffer {
        sh: b.sh.clone(),
        offset: b.offset,
        length: b.length,
        addr: ptr.map_or(0, |p| p.as_ptr() as usize),
        mem_type: b.mem_type,
        peer: Some(pe),
        alloc: b.alloc.clone(),
    })
}

/// `shmem_ptr`: the address of `obj` (symmetric) in PE `pe`'s heap as
/// mapped here, or None when `pe`'s memory is not mapped into this process.
#[pyfunction]
pub(crate) fn ptr(obj: &Bound<'_, PyAny>, pe: Pe) -> PyResult<Option<usize>> {
    let s = sym(obj, "obj")?;
    let pe = pe_arg(pe.0, s.sh.n_pes())?;
    Ok(s.sh
        .peer_ptr(s.offset, pe)
        .py()?
        .map(|p| p.as_ptr() as usize))
}

/// Whether `obj` is symmetric memory of this process.
#[pyfunction]
pub(crate) fn is_symmetric(obj: &Bound<'_, PyAny>) -> bool {
    try_sym(obj).is_some()
}

/// `(instance, offset, length)` of a symmetric object.
#[pyfunction]
pub(crate) fn sym_info(obj: &Bound<'_, PyAny>) -> PyResult<(u32, usize, usize)> {
    let s = sym(obj, "obj")?;
    Ok((s.instance(), s.offset, s.len))
}

/// A PE number from Python (negative numbers get a clear message).
pub(crate) fn pe_arg(pe: i64, n_pes: usize) -> PyResult<usize> {
    if pe < 0 || pe as u64 >= n_pes as u64 {
        return Err(invalid(format!(
            "PE {pe} is out of range: the job has {n_pes} PEs (valid 0..{n_pes})"
        )));
    }
    Ok(pe as usize)
}

/// A `dtype=` argument: None, a name, a torch dtype, or anything
/// `numpy.dtype()` accepts.
pub(crate) fn dtype_arg(dtype: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Dtype>> {
    let Some(d) = dtype.filter(|d| !d.is_none()) else {
        return Ok(None);
    };
    let name: String = if let Ok(s) = d.extract::<String>() {
        s
    } else if d.get_type().module().is_ok_and(|m| m == "torch") {
        d.str()?.extract()?
    } else {
        let np = d.py().import("numpy")?;
        np.call_method1("dtype", (d,))
            .and_then(|t| t.getattr("name"))
            .and_then(|n| n.extract())
            .map_err(|_| invalid(format!("{d} is not a dtype")))?
    };
    let parsed = Dtype::from_name(&name).or_else(|| {
        // numpy spellings like "<f4" or "i8".
        let py = d.py();
        py.import("numpy")
            .and_then(|np| np.call_method1("dtype", (name.as_str(),)))
            .and_then(|t| t.getattr("name"))
            .and_then(|n| n.extract::<String>())
            .ok()
            .and_then(|n| Dtype::from_name(&n))
    });
    parsed
        .map(Some)
        .ok_or_else(|| invalid(format!("dtype {name:?} is not supported")))
}
