//! Typed extraction of the small arguments every call takes: PE numbers
//! (ints, never bools) and the enumerations (`SignalOp`, `ComparisonType`,
//! `MemType`), which accept their own enum or its documented int values
//! and refuse another enum's members.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyInt, PyType};

use crate::errors::invalid;

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

/// A PE number: an int (or an object with `__index__`, like a numpy
/// integer), never a bool.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pe(pub(crate) i64);

impl<'a, 'py> FromPyObject<'a, 'py> for Pe {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let obj = obj.to_owned();
        if obj.is_instance_of::<PyBool>() {
            return Err(PyTypeError::new_err(format!(
                "a PE number must be an int, not the bool {obj}"
            )));
        }
        if !obj.is_exact_instance_of::<PyInt>() && is_enum(&obj) {
            return Err(PyTypeError::new_err(format!(
                "a PE number must be an int, not the enum member {obj}"
            )));
        }
        obj.extract::<i64>().map(Pe).map_err(|_| {
            PyTypeError::new_err(format!(
                "a PE number must be an int, not {}",
                type_name(&obj)
            ))
        })
    }
}

/// Whether `obj` is a member of some `enum.Enum` class: its type derives
/// from `enum.Enum` (looked up once). Asking the type for an enum-only
/// attribute instead cost a failed lookup (an `AttributeError` made and
/// cleared) on every call with a numpy integer PE number, 0.8-1.5 us.
fn is_enum(obj: &Bound<'_, PyAny>) -> bool {
    static ENUM: ClassCell = PyOnceLock::new();
    let py = obj.py();
    match class(&ENUM, py, "enum", "Enum") {
        // SAFETY: both are live type objects and we are attached;
        // PyType_IsSubtype only walks the first one's MRO.
        Some(e) => unsafe {
            pyo3::ffi::PyType_IsSubtype(obj.get_type().as_type_ptr(), e.as_type_ptr()) != 0
        },
        None => obj
            .get_type()
            .hasattr("_value2member_map_")
            .unwrap_or(false),
    }
}

/// A class looked up once (None: its module or name was not found).
type ClassCell = PyOnceLock<Option<Py<PyType>>>;

/// `module.name` as kept in `cell`, imported on first use.
fn class<'a, 'py>(
    cell: &'a ClassCell,
    py: Python<'py>,
    module: &str,
    name: &str,
) -> Option<&'a Bound<'py, PyType>> {
    cell.get_or_init(py, || {
        let c = py.import(module).ok()?.getattr(name).ok()?;
        c.cast_into::<PyType>().ok().map(Bound::unbind)
    })
    .as_ref()
    .map(|c| c.bind(py))
}

/// Whether `obj`'s type is `shmem._enums.<name>` itself: one pointer
/// comparison once the class is known, where telling it by its module and
/// name (below) costs several attribute reads and string builds per call
/// (about 0.3 us of a 0.9-us `put_signal` on the test VM).
fn is_own_enum(obj: &Bound<'_, PyAny>, name: &str) -> bool {
    static SIGNAL_OP: ClassCell = PyOnceLock::new();
    static COMPARISON: ClassCell = PyOnceLock::new();
    static MEM_TYPE: ClassCell = PyOnceLock::new();
    let cell = match name {
        "SignalOp" => &SIGNAL_OP,
        "ComparisonType" => &COMPARISON,
        "MemType" => &MEM_TYPE,
        _ => return false,
    };
    class(cell, obj.py(), "shmem._enums", name).is_some_and(|c| obj.get_type().is(c))
}

/// The value of an enum argument `arg`: a member of `shmem._enums.<name>`,
/// or a plain int in `0..=max`. Bools and other enums' members are a
/// `TypeError`, ints out of range a `ShmemInvalid`.
fn enum_arg(obj: &Bound<'_, PyAny>, name: &str, max: u32, values: &str) -> PyResult<u32> {
    let refuse = || {
        PyTypeError::new_err(format!(
            "expected a {name} ({values}), not {} {obj}",
            type_name(obj)
        ))
    };
    if obj.is_instance_of::<PyBool>() {
        return Err(refuse());
    }
    if !obj.is_exact_instance_of::<PyInt>() && !is_own_enum(obj, name) && is_enum(obj) {
        let ty = obj.get_type();
        let module = ty.module().map(|m| m.to_string()).unwrap_or_default();
        let tname = ty.name().map(|n| n.to_string()).unwrap_or_default();
        if module != "shmem._enums" || tname != name {
            return Err(refuse());
        }
    }
    let v: i64 = obj.extract().map_err(|_| refuse())?;
    if v < 0 || v > i64::from(max) {
        return Err(invalid(format!("{v} is not a {name} ({values})")));
    }
    Ok(v as u32)
}

macro_rules! enum_type {
    ($(#[$doc:meta])* $ty:ident, $name:literal, $max:literal, $values:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug)]
        pub(crate) struct $ty(pub(crate) u32);

        impl<'a, 'py> FromPyObject<'a, 'py> for $ty {
            type Error = PyErr;

            fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
                enum_arg(&obj.to_owned(), $name, $max, $values).map($ty)
            }
        }
    };
}

enum_type!(
    /// A `SignalOp` argument.
    SigOpArg,
    "SignalOp",
    1,
    "SIGNAL_SET = 0, SIGNAL_ADD = 1"
);
enum_type!(
    /// A `ComparisonType` argument.
    CmpArg,
    "ComparisonType",
    5,
    "CMP_EQ 0, CMP_NE 1, CMP_GT 2, CMP_GE 3, CMP_LT 4, CMP_LE 5"
);
enum_type!(
    /// A `MemType` argument.
    MemTypeArg,
    "MemType",
    1,
    "HOST_SIDE = 0, DEVICE_SIDE = 1"
);
