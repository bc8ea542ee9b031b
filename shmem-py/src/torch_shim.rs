//! A CPU tensor's memory range read through torch's C shim instead of four
//! Python attribute reads.
//!
//! torch exports a C ABI for ahead-of-time compiled code (AOTInductor's
//! `aoti_torch_*` functions in `libtorch_cpu`, declared in
//! `torch/csrc/inductor/aoti_torch/c/shim.h`): given a tensor handle it
//! answers the device type, layout, contiguity, element count, dtype and
//! data pointer as plain calls. A handle is an `at::Tensor*`, and an
//! `at::Tensor` is one pointer to its `TensorImpl`, which is what a
//! tensor's `_cdata` attribute gives; so one attribute read and six C calls
//! (about 20 ns) replace `is_cpu`, `is_contiguous()`, `nbytes` and
//! `data_ptr()` (each a Python call through torch's argument handling,
//! 150-300 ns together on the test VM).
//!
//! The shim is used only for tensors whose type is exactly `torch.Tensor`
//! or `torch.nn.Parameter` (a subclass may override any of these through
//! `__torch_function__`), only when `libtorch_cpu` is already loaded and
//! exports every function, and only after its answer for the first tensor
//! of the process matched the attribute reads ([`checked`]). Anything it
//! does not answer plainly (a tensor that is not a contiguous strided CPU
//! tensor, an error code) goes to the attribute path, which also words the
//! errors.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

use libloading::os::unix::Library;
use pyo3::prelude::*;
use pyo3::{ffi, intern};

use crate::dtype::Dtype;

/// An `at::Tensor*`: the address of a word holding the `TensorImpl*`.
type Handle = *const *mut c_void;
type GetI32 = unsafe extern "C" fn(Handle, *mut i32) -> i32;
type GetI64 = unsafe extern "C" fn(Handle, *mut i64) -> i32;
type GetBool = unsafe extern "C" fn(Handle, *mut bool) -> i32;
type GetPtr = unsafe extern "C" fn(Handle, *mut *mut c_void) -> i32;
type Code = unsafe extern "C" fn() -> i32;
type ElementSize = unsafe extern "C" fn(i32) -> usize;

struct Shim {
    device_type: GetI32,
    layout: GetI32,
    is_contiguous: GetBool,
    numel: GetI64,
    dtype: GetI32,
    data_ptr: GetPtr,
    element_size: ElementSize,
    cpu: i32,
    strided: i32,
    /// torch's dtype codes of the element types this package computes with.
    dtypes: Vec<(i32, Dtype)>,
    /// Keeps the functions' library loaded (it is torch's own, loaded
    /// before us; this only holds one more reference).
    _lib: Library,
}

/// What the shim found: the same fields as the attribute path's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TensorMem {
    pub(crate) addr: usize,
    pub(crate) len: usize,
    pub(crate) itemsize: usize,
    pub(crate) dtype: Option<Dtype>,
}

static SHIM: OnceLock<Option<Shim>> = OnceLock::new();

const UNCHECKED: u8 = 0;
const AGREES: u8 = 1;
const OFF: u8 = 2;
/// Whether the shim's answer has been compared with the attribute path's.
static CHECK: AtomicU8 = AtomicU8::new(UNCHECKED);

fn load() -> Option<Shim> {
    // SAFETY: RTLD_NOLOAD only looks up a library already loaded (torch
    // loaded it, so its initialisers have run); nothing new is loaded.
    let lib = unsafe {
        Library::open(
            Some("libtorch_cpu.so"),
            libc::RTLD_NOLOAD | libc::RTLD_LAZY | libc::RTLD_LOCAL,
        )
    }
    .ok()?;
    // SAFETY: each symbol is looked up with the C signature shim.h declares
    // for it (AOTITorchError is int32_t; handles and out-parameters are
    // pointers; dtype, device and layout codes are int32_t).
    unsafe {
        let code = |name: &[u8]| -> Option<i32> { Some(lib.get::<Code>(name).ok()?()) };
        let mut dtypes = Vec::new();
        for (name, d) in [
            (&b"aoti_torch_dtype_bool\0"[..], Dtype::Bool),
            (b"aoti_torch_dtype_int8\0", Dtype::I8),
            (b"aoti_torch_dtype_uint8\0", Dtype::U8),
            (b"aoti_torch_dtype_int16\0", Dtype::I16),
            (b"aoti_torch_dtype_uint16\0", Dtype::U16),
            (b"aoti_torch_dtype_int32\0", Dtype::I32),
            (b"aoti_torch_dtype_uint32\0", Dtype::U32),
            (b"aoti_torch_dtype_int64\0", Dtype::I64),
            (b"aoti_torch_dtype_uint64\0", Dtype::U64),
            (b"aoti_torch_dtype_float16\0", Dtype::F16),
            (b"aoti_torch_dtype_bfloat16\0", Dtype::BF16),
            (b"aoti_torch_dtype_float32\0", Dtype::F32),
            (b"aoti_torch_dtype_float64\0", Dtype::F64),
        ] {
            dtypes.push((code(name)?, d));
        }
        Some(Shim {
            device_type: *lib.get::<GetI32>(b"aoti_torch_get_device_type\0").ok()?,
            layout: *lib.get::<GetI32>(b"aoti_torch_get_layout\0").ok()?,
            is_contiguous: *lib.get::<GetBool>(b"aoti_torch_is_contiguous\0").ok()?,
            numel: *lib.get::<GetI64>(b"aoti_torch_get_numel\0").ok()?,
            dtype: *lib.get::<GetI32>(b"aoti_torch_get_dtype\0").ok()?,
            data_ptr: *lib.get::<GetPtr>(b"aoti_torch_get_data_ptr\0").ok()?,
            element_size: *lib
                .get::<ElementSize>(b"aoti_torch_dtype_element_size\0")
                .ok()?,
            cpu: code(b"aoti_torch_device_type_cpu\0")?,
            strided: code(b"aoti_torch_layout_strided\0")?,
            dtypes,
            _lib: lib,
        })
    }
}

/// The memory of `t`, a tensor whose type is exactly `torch.Tensor` or
/// `torch.nn.Parameter`, when it is a contiguous strided CPU tensor and the
/// shim is usable; None sends the caller to the attribute path.
pub(crate) fn tensor_mem(t: &Bound<'_, PyAny>) -> Option<TensorMem> {
    if CHECK.load(Ordering::Relaxed) == OFF {
        return None;
    }
    let shim = SHIM.get_or_init(load).as_ref()?;
    // The `TensorImpl*` read through `_cdata`, when the object's layout
    // does not give the `at::Tensor` directly.
    let impl_ptr: *mut c_void;
    let handle: Handle = match tensor_in_object(t) {
        Some(h) => h,
        None => {
            impl_ptr = cdata(t)?;
            &impl_ptr
        }
    };
    let (mut device, mut layout, mut contiguous) = (-1i32, -1i32, false);
    let (mut numel, mut dtype, mut data) = (-1i64, -1i32, std::ptr::null_mut());
    // SAFETY: `handle` points at the TensorImpl pointer of `t`, which we
    // hold (so the impl lives), laid out as the `at::Tensor` the shim
    // takes; each call writes only its out-parameter and reports errors
    // (a C++ exception inside torch) as a non-zero code.
    unsafe {
        if (shim.device_type)(handle, &mut device) != 0 || device != shim.cpu {
            return None;
        }
        if (shim.layout)(handle, &mut layout) != 0 || layout != shim.strided {
            return None;
        }
        if (shim.is_contiguous)(handle, &mut contiguous) != 0 || !contiguous {
            return None;
        }
        if (shim.numel)(handle, &mut numel) != 0 || (shim.dtype)(handle, &mut dtype) != 0 {
            return None;
        }
        if (shim.data_ptr)(handle, &mut data) != 0 {
            return None;
        }
    }
    // SAFETY: a plain function of the dtype code.
    let itemsize = unsafe { (shim.element_size)(dtype) };
    let len = usize::try_from(numel).ok()?.checked_mul(itemsize)?;
    Some(TensorMem {
        addr: data as usize,
        len,
        itemsize,
        dtype: shim
            .dtypes
            .iter()
            .find(|(c, _)| *c == dtype)
            .map(|(_, d)| *d),
    })
}

/// The `TensorImpl*` of `t` from its `_cdata` attribute (None, with the
/// error cleared, when it has none).
fn cdata(t: &Bound<'_, PyAny>) -> Option<*mut c_void> {
    let cdata = t.getattr(intern!(t.py(), "_cdata")).ok()?;
    // SAFETY: cdata is a valid object and we are attached.
    let impl_ptr = unsafe { ffi::PyLong_AsVoidPtr(cdata.as_ptr()) };
    if impl_ptr.is_null() {
        // An error (cleared: the attribute path will answer) or no impl.
        let _ = PyErr::take(t.py());
        return None;
    }
    Some(impl_ptr)
}

/// Where a plain tensor object holds its `at::Tensor` (torch's
/// `THPVariable`: the object header, then the tensor), learnt from the
/// first tensor: reading it there spares the `_cdata` attribute, whose
/// getter runs torch's `__torch_function__` and warning-handler machinery
/// (about 50 ns of the 70 a read costs on the test VM).
static LAYOUT: AtomicU8 = AtomicU8::new(LAYOUT_UNKNOWN);
const LAYOUT_UNKNOWN: u8 = 0;
/// `at::Tensor cdata` right after the header (recent torch, 2.15 here).
const LAYOUT_DIRECT: u8 = 1;
/// `c10::MaybeOwned<at::Tensor> cdata` after the header: an `isBorrowed_`
/// flag, then the tensor when it is owned (earlier torch).
const LAYOUT_MAYBE_OWNED: u8 = 2;
/// Neither matched: `_cdata` is read on every call.
const LAYOUT_ATTR: u8 = 3;

/// The `at::Tensor` inside `t` (a tensor whose type is exactly
/// `torch.Tensor` or `torch.nn.Parameter`), or None to read `_cdata`.
fn tensor_in_object(t: &Bound<'_, PyAny>) -> Option<Handle> {
    let head = std::mem::size_of::<ffi::PyObject>();
    let obj = t.as_ptr().cast::<u8>().cast_const();
    // SAFETY: `t` is a live object of a type whose instances are at least
    // `tp_basicsize` bytes; every read below is checked against it.
    let size = unsafe { (*ffi::Py_TYPE(t.as_ptr())).tp_basicsize } as usize;
    let word = |off: usize| -> Option<usize> {
        // SAFETY: in bounds of the object (checked); unaligned-safe read.
        (off + 8 <= size).then(|| unsafe { obj.add(off).cast::<usize>().read_unaligned() })
    };
    // The offsets below were found to hold this type's `at::Tensor` (a word
    // holding the `TensorImpl*`); `t` keeps its tensor alive while the
    // caller uses the handle.
    // An undefined tensor (a null `TensorImpl*`) goes to `_cdata` too,
    // which answers None for it.
    match LAYOUT.load(Ordering::Relaxed) {
        LAYOUT_DIRECT => word(head)
            .filter(|&w| w != 0)
            .map(|_| obj.wrapping_add(head).cast()),
        LAYOUT_MAYBE_OWNED => {
            // A borrowed tensor's slot is a pointer to it, not the tensor.
            let owned = word(head).is_some_and(|w| w & 0xff == 0);
            word(head + 8)
                .filter(|&w| owned && w != 0)
                .map(|_| obj.wrapping_add(head + 8).cast())
        }
        LAYOUT_UNKNOWN => {
            let c = cdata(t)? as usize;
            let learnt = if word(head) == Some(c) {
                LAYOUT_DIRECT
            } else if word(head + 8) == Some(c) && word(head).is_some_and(|w| w & 0xff == 0) {
                LAYOUT_MAYBE_OWNED
            } else {
                LAYOUT_ATTR
            };
            LAYOUT.store(learnt, Ordering::Relaxed);
            None
        }
        _ => None,
    }
}

/// How a plain tensor's `at::Tensor` is found: "direct", "maybe-owned",
/// "attribute" or "unknown" (no tensor seen yet). For tests.
#[pyfunction]
pub(crate) fn _torch_layout() -> &'static str {
    match LAYOUT.load(Ordering::Relaxed) {
        LAYOUT_DIRECT => "direct",
        LAYOUT_MAYBE_OWNED => "maybe-owned",
        LAYOUT_ATTR => "attribute",
        _ => "unknown",
    }
}

/// Whether the shim's answers are trusted: the first call compares
/// `fast` (the shim's answer) with `slow()` (the attribute path's, typed)
/// and turns the shim off for the process if they differ.
pub(crate) fn checked(fast: TensorMem, slow: impl FnOnce() -> Option<TensorMem>) -> bool {
    match CHECK.load(Ordering::Relaxed) {
        AGREES => true,
        OFF => false,
        _ => {
            let agrees = slow() == Some(fast);
            CHECK.store(if agrees { AGREES } else { OFF }, Ordering::Relaxed);
            agrees
        }
    }
}

/// Whether the shim is in use: "agrees" (checked against the attribute
/// reads and used), "off" (it disagreed), "unchecked" (no plain tensor
/// seen yet) or "absent" (torch's library does not export it). For tests
/// and `shmem.info()`-style diagnostics.
#[pyfunction]
pub(crate) fn _torch_shim_state() -> &'static str {
    match SHIM.get() {
        Some(None) => "absent",
        _ => match CHECK.load(Ordering::Relaxed) {
            AGREES => "agrees",
            OFF => "off",
            _ => "unchecked",
        },
    }
}
