//! DLPack export of symmetric memory (`__dlpack__`), so that torch, numpy
//! and other array libraries view a `Buffer` without a copy.
//!
//! The structs follow `dlpack.h` (v1.0). A capsule owns its tensor until a
//! consumer renames it (`used_dltensor`); from then on the consumer calls
//! the deleter, which drops our reference to the exporting `Buffer`.

use std::ffi::{c_void, CStr};

use pyo3::ffi;
use pyo3::prelude::*;

/// `(kDLCPU, 0)`.
pub(crate) const CPU_DEVICE: (i32, i32) = (1, 0);

const LEGACY_NAME: &CStr = c"dltensor";
const VERSIONED_NAME: &CStr = c"dltensor_versioned";

#[repr(C)]
struct DLDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
struct DLDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct DLTensor {
    data: *mut c_void,
    device: DLDevice,
    ndim: i32,
    dtype: DLDataType,
    shape: *mut i64,
    strides: *mut i64,
    byte_offset: u64,
}

#[repr(C)]
struct DLManagedTensor {
    dl_tensor: DLTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

#[repr(C)]
struct DLPackVersion {
    major: u32,
    minor: u32,
}

#[repr(C)]
struct DLManagedTensorVersioned {
    version: DLPackVersion,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    flags: u64,
    dl_tensor: DLTensor,
}

/// What a tensor owns: its shape array and a reference to the exporter.
struct Ctx {
    shape: [i64; 1],
    owner: Option<Py<PyAny>>,
    /// Counts the export on its allocation until the consumer lets go.
    _guard: crate::memory::ExportGuard,
}

fn drop_ctx(ctx: *mut c_void) {
    if ctx.is_null() {
        return;
    }
    // SAFETY: `ctx` came from Box::into_raw in `export` and the deleter that
    // calls this runs once (DLPack contract).
    let mut ctx = unsafe { Box::from_raw(ctx as *mut Ctx) };
    let owner = ctx.owner.take();
    // The deleter may run on any thread: release the reference attached.
    // If the interpreter is gone, pyo3 defers (and in effect leaks) it.
    let _ = Python::try_attach(move |_| drop(owner));
}

unsafe extern "C" fn delete_legacy(t: *mut DLManagedTensor) {
    if t.is_null() {
        return;
    }
    // SAFETY: `t` came from Box::into_raw in `export`; called once.
    let t = unsafe { Box::from_raw(t) };
    drop_ctx(t.manager_ctx);
}

unsafe extern "C" fn delete_versioned(t: *mut DLManagedTensorVersioned) {
    if t.is_null() {
        return;
    }
    // SAFETY: as for `delete_legacy`.
    let t = unsafe { Box::from_raw(t) };
    drop_ctx(t.manager_ctx);
}

unsafe extern "C" fn capsule_legacy(capsule: *mut ffi::PyObject) {
    // SAFETY: CPython calls this with the capsule being destroyed, attached.
    // Only a capsule that was never consumed still carries our name and
    // owns the tensor.
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, LEGACY_NAME.as_ptr()) == 1 {
            let t = ffi::PyCapsule_GetPointer(capsule, LEGACY_NAME.as_ptr());
            delete_legacy(t as *mut DLManagedTensor);
        }
    }
}

unsafe extern "C" fn capsule_versioned(capsule: *mut ffi::PyObject) {
    // SAFETY: as for `capsule_legacy`.
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, VERSIONED_NAME.as_ptr()) == 1 {
            let t = ffi::PyCapsule_GetPointer(capsule, VERSIONED_NAME.as_ptr());
            delete_versioned(t as *mut DLManagedTensorVersioned);
        }
    }
}

/// A DLPack capsule for `len` bytes at `addr` (1-D `uint8`, CPU), keeping
/// `owner` alive until the consumer's tensor is deleted.
pub(crate) fn export<'py>(
    owner: Py<PyAny>,
    guard: crate::memory::ExportGuard,
    addr: usize,
    len: usize,
    versioned: bool,
    py: Python<'py>,
) -> PyResult<Bound<'py, PyAny>> {
    let len_i64 = i64::try_from(len)
        .map_err(|_| crate::errors::invalid(format!("{len} bytes is too large for DLPack")))?;
    let ctx = Box::into_raw(Box::new(Ctx {
        shape: [len_i64],
        owner: Some(owner),
        _guard: guard,
    }));
    let tensor = DLTensor {
        data: addr as *mut c_void,
        device: DLDevice {
            device_type: CPU_DEVICE.0,
            device_id: CPU_DEVICE.1,
        },
        ndim: 1,
        dtype: DLDataType {
            code: 1, // kDLUInt
            bits: 8,
            lanes: 1,
        },
        // SAFETY: `ctx` is a live allocation that outlives the tensor (freed
        // by the deleter together with it).
        shape: unsafe { (*ctx).shape.as_mut_ptr() },
        strides: std::ptr::null_mut(),
        byte_offset: 0,
    };
    let (ptr, name, destructor): (*mut c_void, &CStr, ffi::PyCapsule_Destructor) = if versioned {
        let t = Box::into_raw(Box::new(DLManagedTensorVersioned {
            version: DLPackVersion { major: 1, minor: 0 },
            manager_ctx: ctx as *mut c_void,
            deleter: Some(delete_versioned),
            flags: 0,
            dl_tensor: tensor,
        }));
        (
            t as *mut c_void,
            VERSIONED_NAME,
            capsule_versioned as ffi::PyCapsule_Destructor,
        )
    } else {
        let t = Box::into_raw(Box::new(DLManagedTensor {
            dl_tensor: tensor,
            manager_ctx: ctx as *mut c_void,
            deleter: Some(delete_legacy),
        }));
        (
            t as *mut c_void,
            LEGACY_NAME,
            capsule_legacy as ffi::PyCapsule_Destructor,
        )
    };
    // SAFETY: `ptr` is a live tensor whose ownership passes to the capsule
    // (its destructor deletes it unless a consumer took it); `name` is a
    // static C string, as the capsule API requires.
    let cap = unsafe { ffi::PyCapsule_New(ptr, name.as_ptr(), Some(destructor)) };
    if cap.is_null() {
        // SAFETY: the capsule was not created, so we still own the tensor.
        unsafe {
            if versioned {
                delete_versioned(ptr as *mut DLManagedTensorVersioned);
            } else {
                delete_legacy(ptr as *mut DLManagedTensor);
            }
        }
        return Err(PyErr::fetch(py));
    }
    // SAFETY: `cap` is a new, owned reference.
    Ok(unsafe { Bound::from_owned_ptr(py, cap) })
}
