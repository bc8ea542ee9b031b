//! The two Python exception types and the mapping from library errors.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

create_exception!(
    shmem,
    ShmemError,
    PyException,
    "A shmem call failed. The message names the PE, heap offset or size involved."
);
create_exception!(
    shmem,
    ShmemInvalid,
    ShmemError,
    "A shmem call rejected an argument (a PE out of range, a size that does not fit, \
     memory that is not symmetric, a missing init parameter, ...)."
);

fn is_invalid(e: &shmem::Error) -> bool {
    use shmem::Error as E;
    matches!(
        e,
        E::InvalidArgument { .. }
            | E::PeOutOfRange { .. }
            | E::OutOfHeap { .. }
            | E::NotSymmetric { .. }
            | E::Misaligned { .. }
            | E::WrongInstance { .. }
            | E::Malformed { .. }
            | E::Config { .. }
    )
}

/// A library error as a Python exception: argument errors become
/// `ShmemInvalid`, everything else `ShmemError`.
pub(crate) fn to_py(e: shmem::Error) -> PyErr {
    if is_invalid(&e) {
        ShmemInvalid::new_err(e.to_string())
    } else {
        ShmemError::new_err(e.to_string())
    }
}

/// Like [`to_py`], with the failing call named first ("put of 8 bytes to PE 3: ...").
pub(crate) fn with_context(what: impl FnOnce() -> String) -> impl FnOnce(shmem::Error) -> PyErr {
    move |e| {
        let msg = format!("{}: {e}", what());
        if is_invalid(&e) {
            ShmemInvalid::new_err(msg)
        } else {
            ShmemError::new_err(msg)
        }
    }
}

/// `shmem::Result` into `PyResult`.
pub(crate) trait OrPy<T> {
    /// Maps the error with [`to_py`].
    fn py(self) -> PyResult<T>;
}

impl<T> OrPy<T> for shmem::Result<T> {
    fn py(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}

/// A `ShmemInvalid` with `msg`.
pub(crate) fn invalid(msg: impl Into<String>) -> PyErr {
    ShmemInvalid::new_err(msg.into())
}

/// A `ShmemError` with `msg`.
pub(crate) fn error(msg: impl Into<String>) -> PyErr {
    ShmemError::new_err(msg.into())
}
