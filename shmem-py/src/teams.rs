//! Teams and collectives: `Team` objects, splits, barriers, broadcast,
//! fcollect/collect, alltoall, reductions, scans and the KV-cache shuffle.
//!
//! Where OpenSHMEM takes a team, these functions take a `Team`, the
//! integers `TEAM_WORLD` (0) / `TEAM_SHARED` (1), or None (world).
//! Symmetric arguments are `Buffer`s (with `dtype=`) or numpy arrays /
//! torch tensors viewing symmetric memory; counts are in elements and
//! default to what the source holds.

use std::sync::Arc;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use shmem::collectives::{KvCacheLayout, ReduceOp, ScanKind, TeamConfig};
use shmem::{Collectives, Shmem, SymSlice};

use crate::dtype::{with_numeric, with_width, Dtype};
use crate::errors::{invalid, with_context, OrPy};
use crate::memory::{sym_near, Sym};
use crate::state;
use crate::streams::stream_arg;

/// A team: an ordered subset of the PEs that runs collectives together.
#[pyclass(module = "shmem", frozen)]
pub struct Team {
    pub(crate) team: shmem::Team,
    pub(crate) sh: Shmem,
}

#[pymethods]
impl Team {
    /// This PE's number in the team.
    fn my_pe(&self) -> usize {
        self.team.my_pe()
    }
    /// Number of PEs in the team.
    fn n_pes(&self) -> usize {
        self.team.n_pes()
    }
    /// World PE numbers of the members, by team PE.
    #[getter]
    fn members(&self) -> Vec<usize> {
        self.team.members().to_vec()
    }
    /// The number in `dest` of this team's PE `pe`, or -1.
    fn translate_pe(&self, pe: i64, dest: &Bound<'_, PyAny>) -> PyResult<i64> {
        let dest = resolve_team(Some(dest))?;
        Ok(usize::try_from(pe)
            .ok()
            .and_then(|p| self.team.translate_pe(p, &dest.0))
            .map_or(-1, |p| p as i64))
    }
    /// Whether it has been destroyed.
    #[getter]
    fn destroyed(&self) -> bool {
        self.team.is_destroyed()
    }
    /// The instance it belongs to.
    #[getter]
    fn instance(&self) -> u32 {
        self.sh.instance()
    }
    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<Team>()
            .is_ok_and(|o| o.get().team == self.team)
    }
    fn __hash__(&self) -> u64 {
        self.team
            .members()
            .iter()
            .fold(self.sh.instance() as u64, |h, &m| {
                h.wrapping_mul(1_000_003).wrapping_add(m as u64)
            })
    }
    fn __repr__(&self) -> String {
        let kind = if self.team.is_world() {
            "TEAM_WORLD"
        } else if self.team.is_shared() {
            "TEAM_SHARED"
        } else {
            "team"
        };
        format!(
            "<shmem {kind} my_pe={} n_pes={} members={:?}>",
            self.team.my_pe(),
            self.team.n_pes(),
            self.team.members()
        )
    }
}

/// A team argument: a `Team`, 0 (world), 1 (shared) or None (world).
pub(crate) fn resolve_team(team: Option<&Bound<'_, PyAny>>) -> PyResult<(shmem::Team, Shmem)> {
    match team {
        None => {
            let sh = state::current()?;
            Ok((sh.collectives().world(), sh))
        }
        Some(t) if t.is_none() => resolve_team(None),
        Some(t) => {
            if let Ok(t) = t.cast::<Team>() {
                let t = t.get();
                return Ok((t.team.clone(), t.sh.clone()));
            }
            match t.extract::<i64>() {
                Ok(0) => resolve_team(None),
                Ok(1) => {
                    let sh = state::current()?;
                    Ok((sh.collectives().shared(), sh))
                }
                Ok(-1) => Err(invalid(
                    "TEAM_INVALID (-1): this PE is not a member of that team",
                )),
                Ok(v) => Err(invalid(format!(
                    "team {v} is not TEAM_WORLD (0) or TEAM_SHARED (1); pass a Team object"
                ))),
                Err(_) => Err(PyTypeError::new_err(format!(
                    "team must be a shmem Team, TEAM_WORLD, TEAM_SHARED or None, not {}",
                    t.get_type()
                        .name()
                        .map(|n| n.to_string())
                        .unwrap_or_default()
                ))),
            }
        }
    }
}

fn coll(sh: &Shmem) -> Arc<Collectives> {
    sh.collectives().clone()
}

/// The world team of the current instance (or `instance`).
#[pyfunction]
#[pyo3(signature = (instance = None))]
pub(crate) fn team_world(instance: Option<u32>) -> PyResult<Team> {
    let sh = state::resolve(instance)?;
    Ok(Team {
        team: sh.collectives().world(),
        sh,
    })
}

/// The node-local team of the current instance (or `instance`).
#[pyfunction]
#[pyo3(signature = (instance = None))]
pub(crate) fn team_shared(instance: Option<u32>) -> PyResult<Team> {
    let sh = state::resolve(instance)?;
    Ok(Team {
        team: sh.collectives().shared(),
        sh,
    })
}

fn config(num_contexts: Option<usize>) -> Option<TeamConfig> {
    num_contexts.map(|n| TeamConfig { num_contexts: n })
}

/// Splits `parent` (collective over it): parent PEs start, start+stride,
/// ... (`size` of them). Returns the new Team, or None on PEs left out.
#[pyfunction]
#[pyo3(signature = (parent, start, stride, size, num_contexts = None))]
pub(crate) fn team_split_strided(
    py: Python<'_>,
    parent: Option<&Bound<'_, PyAny>>,
    start: usize,
    stride: isize,
    size: usize,
    num_contexts: Option<usize>,
) -> PyResult<Option<Team>> {
    let (parent, sh) = resolve_team(parent)?;
    let c = coll(&sh);
    let cfg = config(num_contexts);
    let t = blk_handed_off(py, &sh, move || {
        c.team_split_strided(&parent, start, stride, size, cfg)
    })?
    .map_err(with_context(|| {
        format!("team_split_strided(start {start}, stride {stride}, size {size})")
    }))?;
    Ok(t.map(|team| Team { team, sh }))
}

/// Splits `parent` into a 2-D grid with `xrange` columns (collective over
/// it); returns this PE's (row team, column team).
#[pyfunction]
#[pyo3(signature = (parent, xrange, num_contexts = None))]
pub(crate) fn team_split_2d(
    py: Python<'_>,
    parent: Option<&Bound<'_, PyAny>>,
    xrange: usize,
    num_contexts: Option<usize>,
) -> PyResult<(Team, Team)> {
    let (parent, sh) = resolve_team(parent)?;
    let c = coll(&sh);
    let cfg = config(num_contexts);
    let (x, y) = blk_handed_off(py, &sh, move || c.team_split_2d(&parent, xrange, cfg, cfg))?
        .map_err(with_context(|| format!("team_split_2d(xrange {xrange})")))?;
    Ok((
        Team {
            team: x,
            sh: sh.clone(),
        },
        Team { team: y, sh },
    ))
}

/// Destroys a team (collective over its members).
#[pyfunction]
pub(crate) fn team_destroy(py: Python<'_>, team: &Bound<'_, Team>) -> PyResult<()> {
    let t = team.get();
    let (c, tm) = (coll(&t.sh), t.team.clone());
    blk_handed_off(py, &t.sh, move || c.team_destroy(tm))?.py()
}

/// Completes outstanding operations and synchronises the team (now, or in
/// stream order).
#[pyfunction]
#[pyo3(signature = (team = None, stream = None))]
pub(crate) fn barrier(
    py: Python<'_>,
    team: Option<&Bound<'_, PyAny>>,
    stream: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    let (t, sh) = resolve_team(team)?;
    let c = coll(&sh);
    if let Some(st) = stream_arg(stream)?.stream(&sh, "team")? {
        return st.enqueue("barrier", move |_| c.barrier(&t)).py();
    }
    blk(py, &sh, move || c.barrier(&t))?
        .map_err(with_context(|| format!("barrier on PE {}", sh.my_pe())))?;
    state::quieted(sh.instance());
    Ok(())
}

/// Completes outstanding operations and synchronises all PEs (``barrier``
/// over ``TEAM_WORLD``).
#[pyfunction]
pub(crate) fn barrier_all(py: Python<'_>) -> PyResult<()> {
    barrier(py, None, None)
}

/// Synchronises all PEs (``sync`` over ``TEAM_WORLD``; no completion of
/// outstanding operations).
#[pyfunction]
pub(crate) fn sync_all(py: Python<'_>) -> PyResult<()> {
    sync(py, None)
}

/// Synchronises the team without completing outstanding operations.
#[pyfunction]
#[pyo3(signature = (team = None))]
pub(crate) fn sync(py: Python<'_>, team: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
    let (t, sh) = resolve_team(team)?;
    let c = coll(&sh);
    blk(py, &sh, move || c.sync(&t))?.map_err(with_context(|| format!("sync on PE {}", sh.my_pe())))
}

fn pair(
    team: Option<&Bound<'_, PyAny>>,
    dest: &Bound<'_, PyAny>,
    source: &Bound<'_, PyAny>,
    dtype: Option<&Bound<'_, PyAny>>,
) -> PyResult<(shmem::Team, Shmem, Sym, Sym, usize)> {
    let (t, sh) = resolve_team(team)?;
    let d = sym_near(dest, "dest", Some(&sh))?.with_dtype(dtype)?;
    let s = sym_near(source, "source", Some(&sh))?.with_dtype(dtype)?;
    for (x, arg) in [(&d, "dest"), (&s, "source")] {
        if x.instance() != sh.instance() {
            return Err(invalid(format!(
                "`{arg}` belongs to instance {} but the team to instance {}",
                x.instance(),
                sh.instance()
            )));
        }
    }
    let size = match (d.dtype, s.dtype) {
        (Some(a), Some(b)) if a != b => {
            return Err(invalid(format!(
                "dest is {} but source is {}",
                a.name(),
                b.name()
            )))
        }
        (Some(a), _) | (None, Some(a)) => a.size(),
        (None, None) => d.itemsize.max(s.itemsize),
    };
    Ok((t, sh, d, s, size))
}

fn slice<T: shmem::Element>(s: &Sym, size: usize) -> SymSlice<T> {
    SymSlice::from_raw_parts(s.offset, s.len / size, s.instance())
}

/// Which copy collective to run.
#[derive(Clone, Copy)]
enum Copy {
    Broadcast(usize),
    Fcollect,
    Collect,
    Alltoall,
}

fn copy_collective(
    py: Python<'_>,
    which: Copy,
    team: Option<&Bound<'_, PyAny>>,
    dest: &Bound<'_, PyAny>,
    source: &Bound<'_, PyAny>,
    nelems: Option<usize>,
    dtype: Option<&Bound<'_, PyAny>>,
) -> PyResult<usize> {
    let (t, sh, d, s, size) = pair(team, dest, source, dtype)?;
    let n = match (nelems, which) {
        (Some(n), _) => n,
        (None, Copy::Alltoall) => s.len / size / t.n_pes().max(1),
        (None, _) => s.len / size,
    };
    let c = coll(&sh);
    let name = match which {
        Copy::Broadcast(_) => "broadcast",
        Copy::Fcollect => "fcollect",
        Copy::Collect => "collect",
        Copy::Alltoall => "alltoall",
    };
    with_width!(size, T => {
        let (ds, ss) = (slice::<T>(&d, size), slice::<T>(&s, size));
        blk(py, &sh, move || match which {
            Copy::Broadcast(root) => c.broadcast(&t, ds, ss, n, root).map(|_| n),
            Copy::Fcollect => c.fcollect(&t, ds, ss, n).map(|_| n),
            Copy::Collect => c.collect(&t, ds, ss, n),
            Copy::Alltoall => c.alltoall(&t, ds, ss, n).map(|_| n),
        })?
        .map_err(with_context(|| format!("{name} of {n} elements of {size} bytes on PE {}", sh.my_pe())))
    }, Err(invalid(format!("{name}: elements of {size} bytes are not supported"))))
}

/// Copies `nelems` elements of `source` on team PE `root` into `dest` on
/// every member.
#[pyfunction]
#[pyo3(signature = (team, dest, source, nelems = None, root = 0, dtype = None))]
pub(crate) fn broadcast(
    py: Python<'_>,
    team: Option<&Bound<'_, PyAny>>,
    dest: &Bound<'_, PyAny>,
    source: &Bound<'_, PyAny>,
    nelems: Option<usize>,
    root: usize,
    dtype: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    copy_collective(py, Copy::Broadcast(root), team, dest, source, nelems, dtype).map(|_| ())
}

/// Concatenates `nelems` elements of every member's `source` into every
/// member's `dest`, in team order (allgather).
#[pyfunction]
#[pyo3(signature = (team, dest, source, nelems = None, dtype = None))]
pub(crate) fn fcollect(
    py: Python<'_>,
    team: Option<&Bound<'_, PyAny>>,
    dest: &Bound<'_, PyAny>,
    source: &Bound<'_, PyAny>,
    nelems: Option<usize>,
    dtype: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    copy_collective(py, Copy::Fcollect, team, dest, source, nelems, dtype).map(|_| ())
}

/// Like fcollect with a count per PE; returns the total gathered.
#[pyfunction]
#[pyo3(signature = (team, dest, source, nelems = None, dtype = None))]
pub(crate) fn collect(
    py: Python<'_>,
    team: Option<&Bound<'_, PyAny>>,
    dest: &Bound<'_, PyAny>,
    source: &Bound<'_, PyAny>,
    nelems: Option<usize>,
    dtype: Option<&Bound<'_, PyAny>>,
) -> PyResult<usize> {
    copy_collective(py, Copy::Collect, team, dest, source, nelems, dtype)
}

/// Block `j` (of `nelems` elements) of every member's `source` goes to
/// block `i` of member `j`'s `dest`, where `i` is the sender.
#[pyfunction]
#[pyo3(signature = (team, dest, source, nelems = None, dtype = None))]
pub(crate) fn alltoall(
    py: Python<'_>,
    team: Option<&Bound<'_, PyAny>>,
    dest: &Bound<'_, PyAny>,
    source: &Bound<'_, PyAny>,
    nelems: Option<usize>,
    dtype: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    copy_collective(py, Copy::Alltoall, team, dest, source, nelems, dtype).map(|_| ())
}

fn reduce_op(op: &str) -> PyResult<ReduceOp> {
    ReduceOp::ALL
        .into_iter()
        .find(|o| o.name() == op)
        .ok_or_else(|| {
            invalid(format!(
                "unknown reduction {op:?} (and, or, xor, min, max, sum, prod)"
            ))
        })
}

fn numeric(d: &Sym, s: &Sym, what: &str) -> PyResult<Dtype> {
    let dt = d
        .dtype
        .or(s.dtype)
        .ok_or_else(|| invalid(format!("{what} needs typed arrays or dtype=")))?;
    Ok(dt)
}

/// Reduces `nreduce` elements of `source` across the team with `op`
/// ("sum", "prod", "min", "max", "and", "or", "xor"); every member gets
/// the result in `dest` (which may be `source`).
#[pyfunction]
#[pyo3(signature = (team, dest, source, nreduce = None, op = "sum", dtype = None))]
pub(crate) fn reduce(
    py: Python<'_>,
    team: Option<&Bound<'_, PyAny>>,
    dest: &Bound<'_, PyAny>,
    source: &Bound<'_, PyAny>,
    nreduce: Option<usize>,
    op: &str,
    dtype: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    let rop = reduce_op(op)?;
    let (t, sh, d, s, size) = pair(team, dest, source, dtype)?;
    let dt = numeric(&d, &s, "reduce")?;
    let n = nreduce.unwrap_or(s.len / size);
    let c = coll(&sh);
    with_numeric!(dt, T => {
        let (ds, ss) = (slice::<T>(&d, size), slice::<T>(&s, size));
        blk(py, &sh, move || c.reduce(&t, rop, ds, ss, n))?
            .map_err(with_context(|| format!("{op}_reduce of {n} x {} on PE {}", dt.name(), sh.my_pe())))
    }, Err(invalid(format!("reductions do not support dtype {}", dt.name()))))
}

/// The named reductions (`sum_reduce`, ...): [`reduce`] with its `op`
/// fixed, as native functions (no Python frame in between).
macro_rules! named_reductions {
    ($($name:ident => $op:literal),* $(,)?) => {$(
        #[doc = concat!("``", $op, "`` reduction of ``nreduce`` elements over ``team`` into every member's ``dest``.")]
        #[pyfunction]
        #[pyo3(signature = (team, dest, source, nreduce = None, dtype = None))]
        pub(crate) fn $name(
            py: Python<'_>,
            team: Option<&Bound<'_, PyAny>>,
            dest: &Bound<'_, PyAny>,
            source: &Bound<'_, PyAny>,
            nreduce: Option<usize>,
            dtype: Option<&Bound<'_, PyAny>>,
        ) -> PyResult<()> {
            reduce(py, team, dest, source, nreduce, $op, dtype)
        }
    )*};
}

named_reductions!(
    and_reduce => "and",
    or_reduce => "or",
    xor_reduce => "xor",
    min_reduce => "min",
    max_reduce => "max",
    sum_reduce => "sum",
    prod_reduce => "prod",
);

/// Prefix scan (`inclusive` or exclusive) of `nelems` elements in team order.
#[pyfunction]
#[pyo3(signature = (team, dest, source, nelems = None, op = "sum", inclusive = true, dtype = None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn scan(
    py: Python<'_>,
    team: Option<&Bound<'_, PyAny>>,
    dest: &Bound<'_, PyAny>,
    source: &Bound<'_, PyAny>,
    nelems: Option<usize>,
    op: &str,
    inclusive: bool,
    dtype: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    let rop = reduce_op(op)?;
    let (t, sh, d, s, size) = pair(team, dest, source, dtype)?;
    let dt = numeric(&d, &s, "scan")?;
    let n = nelems.unwrap_or(s.len / size);
    let kind = if inclusive {
        ScanKind::Inclusive
    } else {
        ScanKind::Exclusive
    };
    let c = coll(&sh);
    with_numeric!(dt, T => {
        let (ds, ss) = (slice::<T>(&d, size), slice::<T>(&s, size));
        blk(py, &sh, move || c.scan(&t, rop, kind, ds, ss, n))?
            .map_err(with_context(|| format!("{op} scan of {n} x {} on PE {}", dt.name(), sh.my_pe())))
    }, Err(invalid(format!("scans do not support dtype {}", dt.name()))))
}

/// KV-cache shuffle over all PEs: `shuffle_table` rows `[pair_pe, op]`
/// (0 send, 1 receive), caches `[blocks, kv_heads, page_size, head_dim]`
/// symmetric arrays of the same element size, block tables lists of ints.
#[pyfunction]
#[pyo3(signature = (shuffle_table, key_cache, value_cache, layout, src_block_table, dst_block_table))]
pub(crate) fn kv_shuffle(
    py: Python<'_>,
    shuffle_table: Vec<[i64; 2]>,
    key_cache: &Bound<'_, PyAny>,
    value_cache: &Bound<'_, PyAny>,
    layout: (usize, usize, usize, usize),
    src_block_table: Vec<i64>,
    dst_block_table: Vec<i64>,
) -> PyResult<()> {
    let (_, sh, k, v, size) = pair(None, key_cache, value_cache, None)?;
    let layout = KvCacheLayout {
        blocks: layout.0,
        kv_heads: layout.1,
        page_size: layout.2,
        head_dim: layout.3,
    };
    let c = coll(&sh);
    with_width!(size, T => {
        let (ks, vs) = (slice::<T>(&k, size), slice::<T>(&v, size));
        blk(py, &sh, move || c.kv_shuffle(&shuffle_table, ks, vs, layout, &src_block_table, &dst_block_table))?
            .map_err(with_context(|| format!("kv_shuffle on PE {}", sh.my_pe())))
    }, Err(invalid(format!("kv_shuffle: elements of {size} bytes are not supported"))))
}

/// Runs a collective of `sh`'s instance in place and interruptibly, in
/// order with the instance's other collectives (see `blocking`).
/// The instance's default stream finishes first.
fn blk<T, F>(py: Python<'_>, sh: &Shmem, f: F) -> PyResult<shmem::Result<T>>
where
    T: Send + 'static,
    F: FnOnce() -> shmem::Result<T> + Send + 'static,
{
    let inst = sh.instance();
    crate::blocking::run_ordered_waiting(py, inst, move || {
        crate::streams::settle_detached(inst)?;
        f()
    })
}

/// [`blk`] for team creation and destruction (rare, and they allocate):
/// handed off to a worker, so that an interrupted one still completes
/// and the instance stays in step.
fn blk_handed_off<T, F>(py: Python<'_>, sh: &Shmem, f: F) -> PyResult<shmem::Result<T>>
where
    T: Send + 'static,
    F: FnOnce() -> shmem::Result<T> + Send + 'static,
{
    let inst = sh.instance();
    crate::blocking::run_ordered(py, inst, move || {
        crate::streams::settle_detached(inst)?;
        f()
    })
}
