//! Point-to-point synchronisation on this PE's symmetric variables:
//! `wait_until` and `test` with their `_all`, `_any`, `_some` and
//! `_vector` forms.

use pyo3::prelude::*;
use pyo3::IntoPyObjectExt;
use shmem::{Cmp, Shmem, SymRef, SymSlice, WaitElement};
use shmem_core::Runtime;

use crate::args::CmpArg;
use crate::dtype::{with_wait, PyNum};
use crate::errors::{invalid, with_context};
use crate::memory::sym;
use crate::rma::cmp_arg;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    One,
    All,
    Any,
    Some,
}

fn values<T: WaitElement + PyNum>(v: &Bound<'_, PyAny>, n: usize) -> PyResult<Vec<T>> {
    if let Ok(x) = T::extract_num(v) {
        return Ok(vec![x; n]);
    }
    let mut out = Vec::with_capacity(n);
    for item in v.try_iter()? {
        out.push(T::extract_num(&item?)?);
    }
    if out.len() != n {
        return Err(invalid(format!(
            "cmp_values has {} entries for {n} variables",
            out.len()
        )));
    }
    Ok(out)
}

#[allow(clippy::too_many_arguments)]
fn run<T>(
    py: Python<'_>,
    sh: &Shmem,
    ivars: SymSlice<T>,
    cmp: Cmp,
    vals: Vec<T>,
    status: Option<Vec<bool>>,
    mode: Mode,
    test: bool,
) -> PyResult<Py<PyAny>>
where
    T: WaitElement + for<'py> IntoPyObject<'py>,
{
    let rt: &Runtime = sh;
    let owned_status = status.clone();
    let status = status.as_deref();
    let what = || {
        format!(
            "{} on PE {} ({cmp:?}, {} variables)",
            if test { "test" } else { "wait_until" },
            rt.my_pe(),
            ivars.len()
        )
    };
    match (mode, test) {
        (Mode::One, false) => {
            let v = vals[0];
            let sh = sh.clone();
            let one = SymRef::from(ivars);
            // Met already: no GIL release, no hand-off.
            if rt.test(one, cmp, v).map_err(with_context(what))? {
                return Ok(py.None());
            }
            if !crate::blocking::poll_briefly(py, || sh.test(one, cmp, v))
                .map_err(with_context(what))?
            {
                crate::blocking::run_waiting(py, move || sh.wait_until(one, cmp, v))?
                    .map_err(with_context(what))?;
            }
            Ok(py.None())
        }
        (Mode::One, true) => rt
            .test(SymRef::from(ivars), cmp, vals[0])
            .map_err(with_context(what))?
            .into_py_any(py),
        (Mode::All, false) => {
            let sh = sh.clone();
            crate::blocking::run_waiting(py, move || {
                sh.wait_until_all_vector(ivars, owned_status.as_deref(), cmp, &vals)
            })?
            .map_err(with_context(what))?;
            Ok(py.None())
        }
        (Mode::All, true) => rt
            .test_all_vector(ivars, status, cmp, &vals)
            .map_err(with_context(what))?
            .into_py_any(py),
        (Mode::Any, false) => {
            let sh = sh.clone();
            crate::blocking::run_waiting(py, move || {
                sh.wait_until_any_vector(ivars, owned_status.as_deref(), cmp, &vals)
            })?
        }
        .map_err(with_context(what))?
        .into_py_any(py),
        (Mode::Any, true) => rt
            .test_any_vector(ivars, status, cmp, &vals)
            .map_err(with_context(what))?
            .into_py_any(py),
        (Mode::Some, false) => {
            let sh = sh.clone();
            crate::blocking::run_waiting(py, move || {
                sh.wait_until_some_vector(ivars, owned_status.as_deref(), cmp, &vals)
            })?
        }
        .map_err(with_context(what))?
        .into_py_any(py),
        (Mode::Some, true) => rt
            .test_some_vector(ivars, status, cmp, &vals)
            .map_err(with_context(what))?
            .into_py_any(py),
    }
}

/// The engine behind `wait_until*` and `test*`. `ivars` is a symmetric
/// array of int16/uint16/int32/uint32/int64/uint64 (or a Buffer with
/// `dtype=`); `value` a number, or one per variable; `status` masks
/// variables (true = skip); `mode` is "one", "all", "any" or "some".
/// Waits return None ("one", "all"), an index or None ("any"), or a list of
/// indices ("some"); tests return a bool ("one", "all"), an index or None,
/// or a list.
#[pyfunction]
#[pyo3(signature = (ivars, comparison, value, mode = "one", status = None, test = false, dtype = None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn wait_test(
    py: Python<'_>,
    ivars: &Bound<'_, PyAny>,
    comparison: CmpArg,
    value: &Bound<'_, PyAny>,
    mode: &str,
    status: Option<Vec<bool>>,
    test: bool,
    dtype: Option<&Bound<'_, PyAny>>,
) -> PyResult<Py<PyAny>> {
    let s = sym(ivars, "ivars")?.with_dtype(dtype)?;
    let cmp = cmp_arg(comparison.0)?;
    let mode = match mode {
        "one" => Mode::One,
        "all" => Mode::All,
        "any" => Mode::Any,
        "some" => Mode::Some,
        _ => return Err(invalid(format!("unknown wait mode {mode:?}"))),
    };
    let dt = s.require_dtype("ivars", "wait_until/test")?;
    let n = if mode == Mode::One { 1 } else { s.count() };
    if n == 0 || s.count() < n {
        return Err(invalid(format!(
            "`ivars` holds no whole {} element ({} bytes)",
            dt.name(),
            s.len
        )));
    }
    if let Some(st) = &status {
        if st.len() != n {
            return Err(invalid(format!(
                "status has {} entries for {n} variables",
                st.len()
            )));
        }
    }
    let sh = s.sh.clone();
    if !test {
        crate::streams::settle(py, &sh)?;
    }
    with_wait!(dt, T => {
        let vals = values::<T>(value, n)?;
        let slice = SymSlice::<T>::from_raw_parts(s.offset, n, s.instance());
        run::<T>(py, &sh, slice, cmp, vals, status, mode, test)
    }, Err(invalid(format!(
        "wait_until/test watch int16, uint16, int32, uint32, int64 or uint64 variables, not {}",
        dt.name()
    ))))
}
