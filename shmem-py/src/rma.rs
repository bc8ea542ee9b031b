//! One-sided communication: put/get (blocking, stream-ordered and
//! non-blocking), single elements, strided transfers, signals, atomics,
//! fence and quiet.
//!
//! Destinations of puts and sources of gets are symmetric (a `Buffer`, or
//! a numpy array / torch tensor viewing one); the local side is any memory
//! Python exposes. Sizes are bytes unless a dtype says otherwise.

use pyo3::prelude::*;
use pyo3::IntoPyObjectExt;
use shmem::{AtomicElement, Cmp, SignalOp, SymRef, SymSlice};
use shmem_core::{AmoOp, Runtime};

use crate::args::{CmpArg, Pe, SigOpArg};
use crate::dtype::{with_numeric, Dtype, PyNum};
use crate::errors::{invalid, with_context, OrPy};
use crate::memory::{local, local_bytes, pe_arg, sym, sym_peer, sym_peer_bytes, Local, Sym};
use crate::state;
use crate::streams::{release, settle, stream_arg, StreamSel};

/// [`settle`] from a function that holds no `Python` token.
fn settle_now(sh: &shmem::Shmem) -> PyResult<()> {
    Python::attach(|py| settle(py, sh))
}

/// Blocking copies at least this large release the GIL (below it the copy
/// is shorter than handing the GIL over).
const DETACH_BYTES: usize = 64 << 10;

/// Bytes a put moves: `nbytes` or all of `src`; must fit `dst`.
pub(crate) fn put_len(nbytes: Option<usize>, src: usize, dst: usize, pe: usize) -> PyResult<usize> {
    let n = nbytes.unwrap_or(src);
    if n > src {
        return Err(invalid(format!(
            "put to PE {pe}: nbytes {n} is more than `src`'s {src} bytes"
        )));
    }
    if n > dst {
        return Err(invalid(format!(
            "put to PE {pe}: {n} bytes do not fit `dst` ({dst} bytes)"
        )));
    }
    Ok(n)
}

/// Bytes a get moves: `nbytes` or all of `dst`; `src` must hold them.
pub(crate) fn get_len(nbytes: Option<usize>, dst: usize, src: usize, pe: usize) -> PyResult<usize> {
    let n = nbytes.unwrap_or(dst);
    if n > dst {
        return Err(invalid(format!(
            "get from PE {pe}: {n} bytes do not fit `dst` ({dst} bytes)"
        )));
    }
    if n > src {
        return Err(invalid(format!(
            "get from PE {pe}: {n} bytes requested but `src` holds {src} bytes"
        )));
    }
    Ok(n)
}

fn signal_op_arg(op: u32) -> PyResult<SignalOp> {
    match op {
        0 => Ok(SignalOp::Set),
        1 => Ok(SignalOp::Add),
        _ => Err(invalid(format!(
            "signal operation {op} is not a SignalOp (SIGNAL_SET = 0, SIGNAL_ADD = 1)"
        ))),
    }
}

/// A comparison from its OpenSHMEM number.
pub(crate) fn cmp_arg(cmp: u32) -> PyResult<Cmp> {
    Ok(match cmp {
        0 => Cmp::Eq,
        1 => Cmp::Ne,
        2 => Cmp::Gt,
        3 => Cmp::Ge,
        4 => Cmp::Lt,
        5 => Cmp::Le,
        _ => {
            return Err(invalid(format!(
                "comparison {cmp} is not a ComparisonType (CMP_EQ 0, NE 1, GT 2, GE 3, LT 4, LE 5)"
            )))
        }
    })
}

fn signal_sym(obj: &Bound<'_, PyAny>, arg: &str, peer_ok: bool) -> PyResult<Sym> {
    let s = if peer_ok {
        sym_peer(obj, arg)?
    } else {
        sym(obj, arg)?
    };
    if s.len < 8 {
        return Err(invalid(format!(
            "`{arg}` must hold a uint64 signal (8 bytes); it has {} bytes",
            s.len
        )));
    }
    Ok(s)
}

fn same_instance(a: &Sym, b: &Sym, what: &str) -> PyResult<()> {
    if a.instance() != b.instance() {
        return Err(invalid(format!(
            "{what}: the objects belong to different instances ({} and {})",
            a.instance(),
            b.instance()
        )));
    }
    Ok(())
}

/// Runs `f`, without the GIL when `bytes` is large.
fn maybe_detach<T: Send>(py: Python<'_>, bytes: usize, f: impl FnOnce() -> T + Send) -> T {
    if bytes >= DETACH_BYTES {
        py.detach(f)
    } else {
        f()
    }
}

/// Copies `src` (any memory) into `dst` (symmetric) on `remote_pe`: at once
/// (stream None) or in stream order.
#[pyfunction]
#[pyo3(signature = (dst, src, remote_pe, stream = None, nbytes = None))]
pub(crate) fn put(
    py: Python<'_>,
    dst: &Bound<'_, PyAny>,
    src: &Bound<'_, PyAny>,
    remote_pe: Pe,
    stream: Option<&Bound<'_, PyAny>>,
    nbytes: Option<usize>,
) -> PyResult<()> {
    let d = sym_peer_bytes(dst, "dst")?;
    let pe = pe_arg(remote_pe.0, d.sh.n_pes())?;
    let d = d.for_pe(pe, "dst")?;
    if let Some(st) = stream_arg(stream)?.stream(&d.sh, "dst")? {
        return put_on_stream(py, &st, &d, src, pe, nbytes, None);
    }
    settle(py, &d.sh)?;
    let s = local_bytes(src, "src", false)?;
    let n = put_len(nbytes, s.len, d.len, pe)?;
    if n == 0 {
        return Ok(());
    }
    let rt: &Runtime = &d.sh;
    let (off, addr) = (d.offset, s.addr);
    maybe_detach(py, n, || {
        // SAFETY: `s` holds the source export (or object) until we return,
        // so `addr..addr+n` stays valid and in place.
        let src = unsafe { std::slice::from_raw_parts(addr as *const u8, n) };
        rt.put_bytes(pe, off, src)
    })
    .map_err(with_context(|| format!("put of {n} bytes to PE {pe}")))?;
    drop(s);
    Ok(())
}

/// Enqueues a put (and, with `signal`, the signal update after it).
fn put_on_stream(
    py: Python<'_>,
    st: &shmem::Stream,
    d: &Sym,
    src: &Bound<'_, PyAny>,
    pe: usize,
    nbytes: Option<usize>,
    signal: Option<(SymRef<u64>, u64, SignalOp)>,
) -> PyResult<()> {
    let l: Local = local_bytes(src, "src", false)?;
    let (addr, len) = (l.addr, l.len);
    // Symmetric memory of the instance stays mapped while its runtime
    // lives: nothing to keep alive.
    let keep = match d.sh.offset_of(addr as *const u8) {
        Some(_) => None,
        None => Some(l.keep),
    };
    let n = put_len(nbytes, len, d.len, pe)?;
    let off = d.offset;
    crate::streams::drop_released(py);
    // A small put to a load/store PE on an idle stream runs at once.
    crate::streams::enqueue_transfer(
        st,
        pe,
        n,
        || format!("put of {n} bytes to PE {pe}"),
        move |rt| {
            let r = (|| {
                if n > 0 {
                    // SAFETY: the source is symmetric memory (mapped while the
                    // runtime lives) or a Python export held by `keep` until
                    // this closure ends.
                    let src = unsafe { std::slice::from_raw_parts(addr as *const u8, n) };
                    // The stream's worker is the asynchronous part: a plain
                    // copy here avoids a second hand-off to the bulk engine.
                    rt.put_bytes(pe, off, src)?;
                }
                if let Some((sig, value, op)) = signal {
                    rt.signal_op(sig, value, op, pe)?;
                }
                Ok(())
            })();
            release(keep);
            r
        },
    )
    .py()
}

/// Copies `src` (symmetric) on `remote_pe` into `dst` (any writable memory):
/// at once (stream None) or in stream order.
#[pyfunction]
#[pyo3(signature = (dst, src, remote_pe, stream = None, nbytes = None))]
pub(crate) fn get(
    py: Python<'_>,
    dst: &Bound<'_, PyAny>,
    src: &Bound<'_, PyAny>,
    remote_pe: Pe,
    stream: Option<&Bound<'_, PyAny>>,
    nbytes: Option<usize>,
) -> PyResult<()> {
    let s = sym_peer_bytes(src, "src")?;
    let pe = pe_arg(remote_pe.0, s.sh.n_pes())?;
    let s = s.for_pe(pe, "src")?;
    let d = local_bytes(dst, "dst", true)?;
    let n = get_len(nbytes, d.len, s.len, pe)?;
    if let Some(st) = stream_arg(stream)?.stream(&s.sh, "src")? {
        let (off, addr, keep) = (s.offset, d.addr, Some(d.keep));
        crate::streams::drop_released(py);
        return crate::streams::enqueue_transfer(
            &st,
            pe,
            n,
            || format!("get of {n} bytes from PE {pe}"),
            move |rt| {
                let r = if n > 0 {
                    // SAFETY: `keep` holds the writable destination in place
                    // until this closure ends.
                    let dst = unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, n) };
                    rt.get_bytes(pe, off, dst)
                } else {
                    Ok(())
                };
                release(keep);
                r
            },
        )
        .py();
    }
    settle(py, &s.sh)?;
    if n == 0 {
        return Ok(());
    }
    let rt: &Runtime = &s.sh;
    let (off, addr) = (s.offset, d.addr);
    maybe_detach(py, n, || {
        // SAFETY: `d` holds a writable export of the destination until we
        // return; nothing else in this process writes it meanwhile.
        let dst = unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, n) };
        rt.get_bytes(pe, off, dst)
    })
    .map_err(with_context(|| format!("get of {n} bytes from PE {pe}")))?;
    drop(d);
    Ok(())
}

/// Starts a put; `src` is kept alive until the next `quiet` (or barrier).
#[pyfunction]
#[pyo3(signature = (dst, src, remote_pe, nbytes = None))]
pub(crate) fn put_nbi(
    dst: &Bound<'_, PyAny>,
    src: &Bound<'_, PyAny>,
    remote_pe: Pe,
    nbytes: Option<usize>,
) -> PyResult<()> {
    let d = sym_peer_bytes(dst, "dst")?;
    let pe = pe_arg(remote_pe.0, d.sh.n_pes())?;
    let d = d.for_pe(pe, "dst")?;
    settle_now(&d.sh)?;
    let s = local_bytes(src, "src", false)?;
    let n = put_len(nbytes, s.len, d.len, pe)?;
    if n == 0 {
        return Ok(());
    }
    // SAFETY: the source stays exported until quiet (keep_until_quiet).
    unsafe { d.sh.put_nbi_raw(pe, d.offset, s.addr as *const u8, n) }
        .map_err(with_context(|| format!("put_nbi of {n} bytes to PE {pe}")))?;
    state::keep_until_quiet(d.instance(), s.keep);
    Ok(())
}

/// Starts a get; `dst` holds the data after the next `quiet` (or barrier).
#[pyfunction]
#[pyo3(signature = (dst, src, remote_pe, nbytes = None))]
pub(crate) fn get_nbi(
    dst: &Bound<'_, PyAny>,
    src: &Bound<'_, PyAny>,
    remote_pe: Pe,
    nbytes: Option<usize>,
) -> PyResult<()> {
    let s = sym_peer_bytes(src, "src")?;
    let pe = pe_arg(remote_pe.0, s.sh.n_pes())?;
    let s = s.for_pe(pe, "src")?;
    settle_now(&s.sh)?;
    let d = local_bytes(dst, "dst", true)?;
    let n = get_len(nbytes, d.len, s.len, pe)?;
    if n == 0 {
        return Ok(());
    }
    // SAFETY: the destination stays exported until quiet (keep_until_quiet).
    unsafe { s.sh.get_nbi_raw(pe, s.offset, d.addr as *mut u8, n) }.map_err(with_context(
        || format!("get_nbi of {n} bytes from PE {pe}"),
    ))?;
    state::keep_until_quiet(s.instance(), d.keep);
    Ok(())
}

fn elem_dtype(s: &Sym, arg: &str, what: &str) -> PyResult<Dtype> {
    let dt = s.require_dtype(arg, what)?;
    if s.len < dt.size() {
        return Err(invalid(format!(
            "`{arg}` holds {} bytes, less than one {}",
            s.len,
            dt.name()
        )));
    }
    Ok(dt)
}

/// Writes one element (`dtype`, or the dtype of `dst`) on `remote_pe`.
#[pyfunction]
#[pyo3(signature = (dst, value, remote_pe, dtype = None))]
pub(crate) fn p(
    dst: &Bound<'_, PyAny>,
    value: &Bound<'_, PyAny>,
    remote_pe: Pe,
    dtype: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    let d = sym_peer(dst, "dst")?.with_dtype(dtype)?;
    let pe = pe_arg(remote_pe.0, d.sh.n_pes())?;
    let d = d.for_pe(pe, "dst")?;
    settle_now(&d.sh)?;
    let dt = elem_dtype(&d, "dst", "p")?;
    let ctx = || format!("p of one {} to PE {pe}", dt.name());
    if dt == Dtype::Bool {
        let v = [u8::from(value.is_truthy()?)];
        return d.sh.put_bytes(pe, d.offset, &v).map_err(with_context(ctx));
    }
    with_numeric!(dt, T => {
        let v = T::extract_num(value)?;
        d.sh.put_bytes(pe, d.offset, shmem_core::as_bytes(std::slice::from_ref(&v)))
            .map_err(with_context(ctx))
    }, Err(invalid(format!("p does not support dtype {}", dt.name()))))
}

/// Reads one element (`dtype`, or the dtype of `src`) from `remote_pe`.
#[pyfunction]
#[pyo3(signature = (src, remote_pe, dtype = None))]
pub(crate) fn g(
    py: Python<'_>,
    src: &Bound<'_, PyAny>,
    remote_pe: Pe,
    dtype: Option<&Bound<'_, PyAny>>,
) -> PyResult<Py<PyAny>> {
    let s = sym_peer(src, "src")?.with_dtype(dtype)?;
    let pe = pe_arg(remote_pe.0, s.sh.n_pes())?;
    let s = s.for_pe(pe, "src")?;
    settle_now(&s.sh)?;
    let dt = elem_dtype(&s, "src", "g")?;
    let ctx = || format!("g of one {} from PE {pe}", dt.name());
    if dt == Dtype::Bool {
        let mut v = [0u8];
        s.sh.get_bytes(pe, s.offset, &mut v)
            .map_err(with_context(ctx))?;
        return (v[0] != 0).into_py_any(py);
    }
    with_numeric!(dt, T => {
        let mut v = [<T>::default()];
        s.sh.get_bytes(pe, s.offset, shmem_core::as_bytes_mut(&mut v)).map_err(with_context(ctx))?;
        v[0].into_py_any(py)
    }, Err(invalid(format!("g does not support dtype {}", dt.name()))))
}

fn strided_check(arg: &str, count: usize, stride: usize, nelems: usize) -> PyResult<()> {
    if stride == 0 {
        return Err(invalid(format!("`{arg}` stride must be at least 1")));
    }
    if nelems == 0 {
        return Ok(());
    }
    let need = (nelems - 1)
        .checked_mul(stride)
        .and_then(|v| v.checked_add(1))
        .ok_or_else(|| invalid("stride * nelems overflows"))?;
    if need > count {
        return Err(invalid(format!(
            "{nelems} elements with stride {stride} need {need} elements of `{arg}`, it has {count}"
        )));
    }
    Ok(())
}

fn strided_itemsize(sym: &Sym, l: &Local, explicit: bool) -> PyResult<usize> {
    if explicit {
        return Ok(sym.itemsize);
    }
    match (sym.dtype, l.dtype) {
        (Some(a), Some(b)) if a.size() != b.size() => Err(invalid(format!(
            "element types differ: {} and {}",
            a.name(),
            b.name()
        ))),
        (Some(a), _) => Ok(a.size()),
        (None, Some(b)) => Ok(b.size()),
        (None, None) => Ok(l.itemsize.max(sym.itemsize)),
    }
}

/// Strided put: `dst[i*dst_stride] = src[i*src_stride]` on `remote_pe` for
/// `i < nelems` (strides in elements).
#[pyfunction]
#[pyo3(signature = (dst, src, dst_stride, src_stride, nelems, remote_pe, dtype = None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn iput(
    py: Python<'_>,
    dst: &Bound<'_, PyAny>,
    src: &Bound<'_, PyAny>,
    dst_stride: usize,
    src_stride: usize,
    nelems: usize,
    remote_pe: Pe,
    dtype: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    let d = sym_peer(dst, "dst")?.with_dtype(dtype)?;
    let pe = pe_arg(remote_pe.0, d.sh.n_pes())?;
    let d = d.for_pe(pe, "dst")?;
    settle_now(&d.sh)?;
    let s = local(src, "src", false)?;
    let sz = strided_itemsize(&d, &s, dtype.is_some())?;
    strided_check("src", s.len / sz, src_stride, nelems)?;
    strided_check("dst", d.len / sz, dst_stride, nelems)?;
    let rt: &Runtime = &d.sh;
    let (off, addr) = (d.offset, s.addr);
    maybe_detach(py, nelems * sz, || {
        for i in 0..nelems {
            // SAFETY: element i*src_stride lies in the exported source
            // (strided_check), held by `s` until we return.
            let e = unsafe {
                std::slice::from_raw_parts((addr + i * src_stride * sz) as *const u8, sz)
            };
            rt.put_bytes(pe, off + i * dst_stride * sz, e)?;
        }
        Ok(())
    })
    .map_err(with_context(|| {
        format!("iput of {nelems} elements to PE {pe}")
    }))?;
    drop(s);
    Ok(())
}

/// Strided get: `dst[i*dst_stride] = src[i*src_stride]` from `remote_pe`.
#[pyfunction]
#[pyo3(signature = (dst, src, dst_stride, src_stride, nelems, remote_pe, dtype = None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn iget(
    py: Python<'_>,
    dst: &Bound<'_, PyAny>,
    src: &Bound<'_, PyAny>,
    dst_stride: usize,
    src_stride: usize,
    nelems: usize,
    remote_pe: Pe,
    dtype: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    let s = sym_peer(src, "src")?.with_dtype(dtype)?;
    let pe = pe_arg(remote_pe.0, s.sh.n_pes())?;
    let s = s.for_pe(pe, "src")?;
    settle_now(&s.sh)?;
    let d = local(dst, "dst", true)?;
    let sz = strided_itemsize(&s, &d, dtype.is_some())?;
    strided_check("dst", d.len / sz, dst_stride, nelems)?;
    strided_check("src", s.len / sz, src_stride, nelems)?;
    let rt: &Runtime = &s.sh;
    let (off, addr) = (s.offset, d.addr);
    maybe_detach(py, nelems * sz, || {
        for i in 0..nelems {
            // SAFETY: element i*dst_stride lies in the writable exported
            // destination (strided_check), held by `d` until we return.
            let e = unsafe {
                std::slice::from_raw_parts_mut((addr + i * dst_stride * sz) as *mut u8, sz)
            };
            rt.get_bytes(pe, off + i * src_stride * sz, e)?;
        }
        Ok(())
    })
    .map_err(with_context(|| {
        format!("iget of {nelems} elements from PE {pe}")
    }))?;
    drop(d);
    Ok(())
}

// ----- signals ----------------------------------------------------------------

/// Puts `src` into `dst` on `remote_pe`, then updates the signal there (the
/// signal is seen only after the data): blocking, non-blocking (`nbi`,
/// completed by quiet) or in stream order.
#[pyfunction]
#[pyo3(signature = (dst, src, signal_var, signal_val, signal_operation, remote_pe, stream = None, nbytes = None, nbi = false))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn put_signal(
    py: Python<'_>,
    dst: &Bound<'_, PyAny>,
    src: &Bound<'_, PyAny>,
    signal_var: &Bound<'_, PyAny>,
    signal_val: u64,
    signal_operation: SigOpArg,
    remote_pe: Pe,
    stream: Option<&Bound<'_, PyAny>>,
    nbytes: Option<usize>,
    nbi: bool,
) -> PyResult<()> {
    let d = sym_peer_bytes(dst, "dst")?;
    let sig = signal_sym(signal_var, "signal_var", true)?;
    same_instance(&d, &sig, "put_signal")?;
    let op = signal_op_arg(signal_operation.0)?;
    let pe = pe_arg(remote_pe.0, d.sh.n_pes())?;
    let d = d.for_pe(pe, "dst")?;
    let sig = sig.for_pe(pe, "signal_var")?;
    let sref = SymRef::<u64>::from_raw_parts(sig.offset, sig.instance());
    let sel = if nbi {
        StreamSel::Now
    } else {
        stream_arg(stream)?
    };
    if let Some(st) = sel.stream(&d.sh, "dst")? {
        return put_on_stream(py, &st, &d, src, pe, nbytes, Some((sref, signal_val, op)));
    }
    settle(py, &d.sh)?;
    let s = local_bytes(src, "src", false)?;
    let n = put_len(nbytes, s.len, d.len, pe)?;
    let dslice = SymSlice::<u8>::from_raw_parts(d.offset, n, d.instance());
    let ctx = || format!("put_signal of {n} bytes to PE {pe}");
    if n == 0 {
        return d
            .sh
            .signal_op(sref, signal_val, op, pe)
            .map_err(with_context(ctx));
    }
    if nbi {
        // SAFETY: the export stays alive until quiet (keep_until_quiet).
        let src = unsafe { std::slice::from_raw_parts(s.addr as *const u8, n) };
        // SAFETY: as above, the source outlives the operation.
        unsafe { d.sh.put_signal_nbi(dslice, src, sref, signal_val, op, pe) }
            .map_err(with_context(ctx))?;
        state::keep_until_quiet(d.instance(), s.keep);
        return Ok(());
    }
    let rt: &Runtime = &d.sh;
    let addr = s.addr;
    maybe_detach(py, n, || {
        // SAFETY: `s` holds the source until we return.
        let src = unsafe { std::slice::from_raw_parts(addr as *const u8, n) };
        rt.put_signal(dslice, src, sref, signal_val, op, pe)
    })
    .map_err(with_context(ctx))?;
    drop(s);
    Ok(())
}

/// Updates `signal_var` on `remote_pe` (now, or in stream order).
#[pyfunction]
#[pyo3(signature = (signal_var, signal_val, signal_operation, remote_pe, stream = None))]
pub(crate) fn signal_op(
    signal_var: &Bound<'_, PyAny>,
    signal_val: u64,
    signal_operation: SigOpArg,
    remote_pe: Pe,
    stream: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    let sig = signal_sym(signal_var, "signal_var", true)?;
    let op = signal_op_arg(signal_operation.0)?;
    let pe = pe_arg(remote_pe.0, sig.sh.n_pes())?;
    let sig = sig.for_pe(pe, "signal_var")?;
    let sref = SymRef::<u64>::from_raw_parts(sig.offset, sig.instance());
    match stream_arg(stream)?.stream(&sig.sh, "signal_var")? {
        Some(st) => st.signal_op(sref, signal_val, op, pe).py(),
        None => {
            settle_now(&sig.sh)?;
            sig.sh
                .signal_op(sref, signal_val, op, pe)
                .map_err(with_context(|| format!("signal_op on PE {pe}")))
        }
    }
}

/// Reads this PE's signal word.
#[pyfunction]
pub(crate) fn signal_fetch(signal_var: &Bound<'_, PyAny>) -> PyResult<u64> {
    let sig = signal_sym(signal_var, "signal_var", false)?;
    sig.sh
        .signal_fetch(SymRef::from_raw_parts(sig.offset, sig.instance()))
        .py()
}

/// Waits until this PE's `signal_var <comparison> signal_val`; returns the
/// signal's value (blocking), or enqueues the wait on `stream` (None).
#[pyfunction]
#[pyo3(signature = (signal_var, signal_val, comparison, stream = None))]
pub(crate) fn signal_wait(
    py: Python<'_>,
    signal_var: &Bound<'_, PyAny>,
    signal_val: u64,
    comparison: CmpArg,
    stream: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<u64>> {
    let sig = signal_sym(signal_var, "signal_var", false)?;
    let cmp = cmp_arg(comparison.0)?;
    let sref = SymRef::<u64>::from_raw_parts(sig.offset, sig.instance());
    if let Some(st) = stream_arg(stream)?.stream(&sig.sh, "signal_var")? {
        st.signal_wait_until(sref, cmp, signal_val).py()?;
        return Ok(None);
    }
    settle(py, &sig.sh)?;
    let sh = sig.sh.clone();
    // Met already: no GIL release, no hand-off.
    let mut seen = sh.signal_fetch(sref).py()?;
    if cmp.eval(seen, signal_val) {
        return Ok(Some(seen));
    }
    let quick = crate::blocking::poll_briefly(py, || -> shmem::Result<bool> {
        seen = sh.signal_fetch(sref)?;
        Ok(cmp.eval(seen, signal_val))
    });
    if let Ok(true) = quick {
        return Ok(Some(seen));
    }
    crate::blocking::run_waiting(py, move || sh.signal_wait_until(sref, cmp, signal_val))?
        .map(Some)
        .map_err(with_context(|| {
            format!(
                "signal_wait ({cmp:?} {signal_val}) on PE {}",
                sig.sh.my_pe()
            )
        }))
}

/// Orders puts and atomics to each PE.
#[pyfunction]
#[pyo3(signature = (instance = None))]
pub(crate) fn fence(instance: Option<u32>) -> PyResult<()> {
    state::resolve(instance)?.fence().py()
}

/// Completes every outstanding operation (stream None), or enqueues a quiet
/// on `stream`.
#[pyfunction]
#[pyo3(signature = (stream = None, instance = None))]
pub(crate) fn quiet(
    py: Python<'_>,
    stream: Option<&Bound<'_, PyAny>>,
    instance: Option<u32>,
) -> PyResult<()> {
    let sh = state::resolve(instance)?;
    if let Some(st) = stream_arg(stream)?.stream(&sh, "stream")? {
        return st.quiet().py();
    }
    settle(py, &sh)?;
    if sh.quiet_is_local() {
        // Nothing a peer could hold up: no hand-off (and no Ctrl-C
        // needed), the GIL released for the copies it may wait for.
        py.detach(|| sh.quiet()).py()?;
    } else {
        let sh2 = sh.clone();
        crate::blocking::run(py, move || sh2.quiet())?.py()?;
    }
    state::quieted(sh.instance());
    Ok(())
}

// ----- atomics ------------------------------------------------------------------

macro_rules! with_atomic {
    ($dt:expr, $T:ident => $body:expr, $other:expr) => {
        match $dt {
            Dtype::I32 => {
                type $T = i32;
                $body
            }
            Dtype::U32 => {
                type $T = u32;
                $body
            }
            Dtype::I64 => {
                type $T = i64;
                $body
            }
            Dtype::U64 => {
                type $T = u64;
                $body
            }
            Dtype::F32 => {
                type $T = f32;
                $body
            }
            Dtype::F64 => {
                type $T = f64;
                $body
            }
            _ => $other,
        }
    };
}

fn bits<T: AtomicElement + PyNum>(
    v: Option<&Bound<'_, PyAny>>,
    name: &str,
    op: &str,
) -> PyResult<u64> {
    let v = v.ok_or_else(|| invalid(format!("atomic {op} needs `{name}`")))?;
    let t: T = T::extract_num(v).map_err(|e| invalid(format!("atomic {op}: `{name}`: {e}")))?;
    Ok(t.to_bits())
}

/// A remote atomic on the element at `dst` (`dtype`, or the dtype of `dst`:
/// int32, uint32, int64, uint64; float32/float64 for fetch, set, swap) of
/// `remote_pe`. `op` is one of fetch, set, swap, compare_swap, fetch_add,
/// add, fetch_inc, inc, fetch_and, and, fetch_or, or, fetch_xor, xor.
/// Returns the old value for fetching operations, else None.
#[pyfunction]
#[pyo3(signature = (op, dst, remote_pe, value = None, cond = None, dtype = None))]
pub(crate) fn atomic(
    py: Python<'_>,
    op: &str,
    dst: &Bound<'_, PyAny>,
    remote_pe: Pe,
    value: Option<&Bound<'_, PyAny>>,
    cond: Option<&Bound<'_, PyAny>>,
    dtype: Option<&Bound<'_, PyAny>>,
) -> PyResult<Py<PyAny>> {
    let d = sym_peer(dst, "dst")?.with_dtype(dtype)?;
    let pe = pe_arg(remote_pe.0, d.sh.n_pes())?;
    let d = d.for_pe(pe, "dst")?;
    settle_now(&d.sh)?;
    let dt = elem_dtype(&d, "dst", "atomics")?;
    let float = matches!(dt, Dtype::F32 | Dtype::F64);
    with_atomic!(dt, T => {
        let amo = match op {
            "fetch" => AmoOp::Fetch,
            "set" => AmoOp::Set(bits::<T>(value, "value", op)?),
            "swap" => AmoOp::Swap(bits::<T>(value, "value", op)?),
            _ if float => {
                return Err(invalid(format!(
                    "atomic {op} needs an integer element, not {}", dt.name()
                )))
            }
            "compare_swap" => AmoOp::CompareSwap {
                cond: bits::<T>(cond, "cond", op)?,
                value: bits::<T>(value, "value", op)?,
            },
            "fetch_add" | "add" => AmoOp::Add(bits::<T>(value, "value", op)?),
            "fetch_inc" | "inc" => AmoOp::Add(1),
            "fetch_and" | "and" => AmoOp::And(bits::<T>(value, "value", op)?),
            "fetch_or" | "or" => AmoOp::Or(bits::<T>(value, "value", op)?),
            "fetch_xor" | "xor" => AmoOp::Xor(bits::<T>(value, "value", op)?),
            _ => return Err(invalid(format!("unknown atomic operation {op:?}"))),
        };
        let old = d
            .sh
            .atomic_raw(pe, d.offset, T::WIDTH, amo)
            .map_err(with_context(|| format!("atomic {op} ({}) on PE {pe}", dt.name())))?;
        let returns = matches!(op, "fetch" | "swap" | "compare_swap") || op.starts_with("fetch_");
        if returns {
            <T as AtomicElement>::from_bits(old).into_py_any(py)
        } else {
            Ok(py.None())
        }
    }, Err(invalid(format!(
        "atomics take int32, uint32, int64, uint64 (and float32/float64 for fetch, set, swap), not {}",
        dt.name()
    ))))
}
