"""``shmem``: symmetric-memory communication for Python (OpenSHMEM style,
modelled on CANN SHMEM), over the Rust library of the same name.

Two layers:

* ``shmem.core``: the reference's surface (``init``, ``buffer``, ``put``,
  ``get``, ``put_signal``, ``signal_wait``, streams, handles, barriers);
  its transfers and signals are stream-ordered (default stream 0).
* ``shmem`` (this module): that, with ``put``/``get``/``put_signal``/
  ``signal_op``/``signal_wait``/``quiet``/``handle_wait`` as blocking
  calls, plus the lower-level OpenSHMEM names:
  ``malloc``/``calloc``/``align``/``free``/``ptr``; typed transfers
  (``putmem``, ``put8``..``put128``, ``int32_put``, ``float_g``, ...);
  ``p``/``g``, ``iput``/``iget``, ``*_nbi``, ``putmem_signal``,
  ``*_on_stream``; ``wait_until*``/``test*``; atomics; teams
  (``team_split_strided``, ``team_split_2d``, ``team_translate_pe``,
  ``team_destroy``); collectives (``broadcast``, ``fcollect``,
  ``alltoall``, reductions, scans); ``global_exit``.
* ``shmem.torch``: ``Manager``, ``AllGather``, ``KVShuffle`` (also as
  ``ShmemOps.*``) on torch tensors, and the ``torch.ops.shmem.*`` operators.

Symmetric arguments are ``Buffer`` objects or numpy arrays / torch tensors
viewing them (``buf.numpy(np.float32)``, ``torch.from_dlpack(buf)``); the
local side of a transfer is any C-contiguous memory (numpy, bytes,
bytearray, memoryview, CPU tensors). Counts named ``nelems`` are elements,
``nbytes`` bytes. Every failure is a ``ShmemError`` (``ShmemInvalid`` for a
rejected argument) naming the PE and size involved.

Start PEs with ``shmemrun -n 4 python script.py`` (installed with the
package), ``python -m shmem.run -n 4 script.py`` or torchrun, and call
``shmem.init()`` in the script.
"""

from . import _shmem as _n
from ._api import *  # noqa: F401,F403
from ._api import __all__ as _core_all
from ._api import _team
from ._enums import (  # noqa: F401
    CMP_EQ, CMP_GE, CMP_GT, CMP_LE, CMP_LT, CMP_NE, SIGNAL_ADD, SIGNAL_SET,
    TEAM_INVALID, TEAM_SHARED, TEAM_WORLD,
)
from . import core  # noqa: F401

# The blocking forms of shmem.core's stream-ordered calls: with stream=None
# (the default) they complete before returning (a put's source may be
# reused, a get's destination holds the data, signal_wait returns the
# signal's value), after letting the default stream finish. A Stream or an
# int (0 = the default stream) makes them stream-ordered like shmem.core's.
put = _n.put
get = _n.get
#: ``uid_address(uid)``: "ip:port" where a unique id's config store listens.
uid_address = _n.uid_address
put_signal = _n.put_signal
signal_op = _n.signal_op
signal_wait = _n.signal_wait
quiet = _n.quiet
handle_wait = _n.handle_wait

__version__ = _n.version()

# ----- dtypes ------------------------------------------------------------------

#: OpenSHMEM type names and the numpy dtype each stands for.
TYPES = {
    "float": "float32", "double": "float64",
    "char": "int8", "schar": "int8", "short": "int16", "int": "int32",
    "long": "int64", "longlong": "int64",
    "uchar": "uint8", "ushort": "uint16", "uint": "uint32", "ulong": "uint64",
    "ulonglong": "uint64",
    "int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64",
    "uint8": "uint8", "uint16": "uint16", "uint32": "uint32", "uint64": "uint64",
    "size": "uint64", "ptrdiff": "int64",
}
_AMO_TYPES = {k for k, v in TYPES.items() if v in ("int32", "int64", "uint32", "uint64")}
_WAIT_TYPES = {k for k, v in TYPES.items() if v in ("int16", "uint16", "int32", "int64", "uint32", "uint64")}


# ----- memory --------------------------------------------------------------------

def malloc(size, mem_type=MemType.DEVICE_SIDE):
    """``size`` bytes of symmetric memory (collective); a ``Buffer``."""
    return _n.malloc(size, 0, False, False, True, mem_type)


ptr = _n.ptr
is_symmetric = _n.is_symmetric
heap_info = _n.heap_info
pe_accessible = _n.pe_accessible


def addr_accessible(obj, pe):
    """Whether ``obj`` is symmetric memory that PE ``pe`` can be reached at."""
    return _n.is_symmetric(obj) and _n.pe_accessible(pe)


# ----- RMA -----------------------------------------------------------------------

def putmem(dest, source, nbytes, pe):
    """Copy ``nbytes`` bytes of ``source`` into ``dest`` on ``pe``."""
    _n.put(dest, source, pe, None, nbytes)


def getmem(dest, source, nbytes, pe):
    """Copy ``nbytes`` bytes of ``source`` on ``pe`` into ``dest``."""
    _n.get(dest, source, pe, None, nbytes)


def putmem_nbi(dest, source, nbytes, pe):
    """Non-blocking ``putmem``; completes at ``quiet``."""
    _n.put_nbi(dest, source, pe, nbytes)


def getmem_nbi(dest, source, nbytes, pe):
    """Non-blocking ``getmem``; ``dest`` holds the data after ``quiet``."""
    _n.get_nbi(dest, source, pe, nbytes)


put_nbi = _n.put_nbi
get_nbi = _n.get_nbi
p = _n.p
g = _n.g
fence = _n.fence
signal_fetch = _n.signal_fetch


def iput(dest, source, dst, sst, nelems, pe, dtype=None):
    """Strided put: ``dest[i*dst] = source[i*sst]`` on ``pe``, ``i < nelems``."""
    _n.iput(dest, source, dst, sst, nelems, pe, dtype)


def iget(dest, source, dst, sst, nelems, pe, dtype=None):
    """Strided get: ``dest[i*dst] = source[i*sst]`` from ``pe``."""
    _n.iget(dest, source, dst, sst, nelems, pe, dtype)


def _sized(width):
    def put_w(dest, source, nelems, pe):
        _n.put(dest, source, pe, None, nelems * width)

    def get_w(dest, source, nelems, pe):
        _n.get(dest, source, pe, None, nelems * width)

    def iput_w(dest, source, dst, sst, nelems, pe):
        _n.iput(dest, source, dst, sst, nelems, pe, f"uint{width * 8}" if width <= 8 else None)

    def iget_w(dest, source, dst, sst, nelems, pe):
        _n.iget(dest, source, dst, sst, nelems, pe, f"uint{width * 8}" if width <= 8 else None)

    def put_nbi_w(dest, source, nelems, pe):
        _n.put_nbi(dest, source, pe, nelems * width)

    def get_nbi_w(dest, source, nelems, pe):
        _n.get_nbi(dest, source, pe, nelems * width)

    bits = width * 8
    out = {
        f"put{bits}": put_w, f"get{bits}": get_w,
        f"put{bits}_nbi": put_nbi_w, f"get{bits}_nbi": get_nbi_w,
    }
    if width <= 8:
        out[f"iput{bits}"] = iput_w
        out[f"iget{bits}"] = iget_w
    for name, fn in out.items():
        fn.__name__ = fn.__qualname__ = name
        fn.__doc__ = f"``{name}``: {name.rstrip('_nbi')} of {bits}-bit elements (nelems counts elements)."
    return out


for _w in (1, 2, 4, 8, 16):
    globals().update(_sized(_w))


def put_signal_nbi(dst, src, signal_var, signal_val, signal_operation, remote_pe):
    """Non-blocking ``put_signal``; completes at ``quiet``."""
    _n.put_signal(dst, src, signal_var, signal_val, signal_operation, remote_pe, None, None, True)


def putmem_signal(dest, source, nbytes, sig_addr, signal, sig_op, pe):
    """``nbytes`` of ``source`` into ``dest`` on ``pe``, then the signal update."""
    _n.put_signal(dest, source, sig_addr, signal, sig_op, pe, None, nbytes)


def putmem_signal_nbi(dest, source, nbytes, sig_addr, signal, sig_op, pe):
    """Non-blocking ``putmem_signal``."""
    _n.put_signal(dest, source, sig_addr, signal, sig_op, pe, None, nbytes, True)


def signal_wait_until(sig_addr, cmp, cmp_value):
    """Wait until this PE's signal satisfies the comparison; return its value."""
    return _n.signal_wait(sig_addr, cmp_value, cmp)


# ----- stream-ordered forms --------------------------------------------------------

def putmem_on_stream(dest, source, nbytes, pe, stream):
    """``putmem`` in ``stream`` order."""
    _n.put(dest, source, pe, stream, nbytes)


def getmem_on_stream(dest, source, nbytes, pe, stream):
    """``getmem`` in ``stream`` order."""
    _n.get(dest, source, pe, stream, nbytes)


def putmem_signal_on_stream(dest, source, nbytes, sig_addr, signal, sig_op, pe, stream):
    """``putmem_signal`` in ``stream`` order."""
    _n.put_signal(dest, source, sig_addr, signal, sig_op, pe, stream, nbytes)


def signal_op_on_stream(sig_addr, signal, sig_op, pe, stream):
    """``signal_op`` in ``stream`` order."""
    _n.signal_op(sig_addr, signal, sig_op, pe, stream)


def signal_wait_until_on_stream(sig_addr, cmp, cmp_value, stream):
    """Make ``stream`` wait until this PE's signal satisfies the comparison."""
    _n.signal_wait(sig_addr, cmp_value, cmp, stream)


def quiet_on_stream(stream):
    """Enqueue a ``quiet`` on ``stream``."""
    _n.quiet(stream)


# ----- waits and tests ------------------------------------------------------------

def wait_until(ivar, cmp, cmp_value, dtype=None):
    """Wait until this PE's ``ivar`` (its first element) ``cmp cmp_value``."""
    _n.wait_test(ivar, cmp, cmp_value, "one", None, False, dtype)


def test(ivar, cmp, cmp_value, dtype=None):
    """Whether ``ivar cmp cmp_value`` holds now."""
    return _n.wait_test(ivar, cmp, cmp_value, "one", None, True, dtype)


def _family(mode, test_, vector):
    value_name = "cmp_values" if vector else "cmp_value"

    def fn(ivars, cmp, value, status=None, dtype=None):
        return _n.wait_test(ivars, cmp, value, mode, status, test_, dtype)

    fn.__name__ = fn.__qualname__ = f"{'test' if test_ else 'wait_until'}_{mode}{'_vector' if vector else ''}"
    fn.__doc__ = (
        f"{'Test' if test_ else 'Wait until'} {mode} of this PE's ``ivars`` (not masked by "
        f"``status``, true = skip) compare true with ``{value_name}``"
        + (" (one value per variable)." if vector else ".")
    )
    return fn


for _test in (False, True):
    for _mode in ("all", "any", "some"):
        for _vector in (False, True):
            _f = _family(_mode, _test, _vector)
            globals()[_f.__name__] = _f

# ----- atomics ---------------------------------------------------------------------


def atomic_fetch(dest, pe, dtype=None):
    """Atomically read ``dest`` on ``pe``."""
    return _n.atomic("fetch", dest, pe, None, None, dtype)


def atomic_set(dest, value, pe, dtype=None):
    """Atomically write ``value`` to ``dest`` on ``pe``."""
    _n.atomic("set", dest, pe, value, None, dtype)


def atomic_swap(dest, value, pe, dtype=None):
    """Atomically swap; returns the old value."""
    return _n.atomic("swap", dest, pe, value, None, dtype)


def atomic_compare_swap(dest, cond, value, pe, dtype=None):
    """Write ``value`` if ``dest == cond``; returns the old value."""
    return _n.atomic("compare_swap", dest, pe, value, cond, dtype)


def atomic_fetch_inc(dest, pe, dtype=None):
    """Add one; returns the old value."""
    return _n.atomic("fetch_inc", dest, pe, None, None, dtype)


def atomic_inc(dest, pe, dtype=None):
    """Add one."""
    _n.atomic("inc", dest, pe, None, None, dtype)


def _amo(op, fetch):
    name = f"atomic_fetch_{op}" if fetch else f"atomic_{op}"
    amo = f"fetch_{op}" if fetch else op  # built once, not on every call

    def fn(dest, value, pe, dtype=None):
        return _n.atomic(amo, dest, pe, value, None, dtype)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"Atomic {op} of ``value`` into ``dest`` on ``pe``" + ("; returns the old value." if fetch else ".")
    return fn


for _op in ("add", "and", "or", "xor"):
    for _fetch in (False, True):
        _f = _amo(_op, _fetch)
        globals()[_f.__name__] = _f

# ----- teams ----------------------------------------------------------------------

team_world = _n.team_world
team_shared = _n.team_shared


def _num_contexts(config):
    if config is None:
        return None
    if isinstance(config, dict):
        return config.get("num_contexts")
    return getattr(config, "num_contexts", None)


def team_split_strided(parent_team, start, stride, size, config=None, config_mask=0):
    """Split ``parent_team`` (collective over it) into parent PEs ``start,
    start + stride, ...`` (``size`` of them). Returns the new ``Team``, or
    None on PEs left out (the reference's ``TEAM_INVALID``). ``config`` may
    carry ``num_contexts``; ``config_mask`` is accepted and unused."""
    del config_mask
    return _n.team_split_strided(parent_team, start, stride, size, _num_contexts(config))


def team_split_2d(parent_team, xrange, xaxis_config=None, xaxis_mask=0, yaxis_config=None, yaxis_mask=0):
    """Split ``parent_team`` into a 2-D grid with ``xrange`` columns
    (collective); returns ``(row_team, column_team)``."""
    del xaxis_mask, yaxis_mask, yaxis_config
    return _n.team_split_2d(parent_team, xrange, _num_contexts(xaxis_config))


def team_translate_pe(src_team, src_pe, dest_team):
    """The number in ``dest_team`` of ``src_team``'s PE ``src_pe``, or -1."""
    return _team(src_team).translate_pe(src_pe, dest_team)


team_destroy = _n.team_destroy

# ----- collectives -----------------------------------------------------------------


# The collectives are the native functions themselves (same signatures):
# a Python frame in between costs about a tenth of an 8-byte collective.
broadcast = _n.broadcast
fcollect = _n.fcollect
collect = _n.collect
alltoall = _n.alltoall


def broadcastmem(team, dest, source, nbytes, root=0):
    """``broadcast`` of bytes."""
    _n.broadcast(team, dest, source, nbytes, root, "uint8")


def fcollectmem(team, dest, source, nbytes):
    """``fcollect`` of bytes."""
    _n.fcollect(team, dest, source, nbytes, "uint8")


def alltoallmem(team, dest, source, nbytes):
    """``alltoall`` of bytes."""
    _n.alltoall(team, dest, source, nbytes, "uint8")


reduce = _n.reduce


for _op in ("and", "or", "xor", "min", "max", "sum", "prod"):
    # Native functions with the op fixed (no Python frame in between).
    globals()[f"{_op}_reduce"] = getattr(_n, f"{_op}_reduce")


def sum_inscan(team, dest, source, nelems=None, dtype=None):
    """Inclusive prefix sum in team order."""
    _n.scan(team, dest, source, nelems, "sum", True, dtype)


def sum_exscan(team, dest, source, nelems=None, dtype=None):
    """Exclusive prefix sum in team order (team PE 0 gets zeros)."""
    _n.scan(team, dest, source, nelems, "sum", False, dtype)


def kv_shuffle(shuffle_table, key_cache, value_cache, src_block_table, dst_block_table):
    """KV-cache shuffle over all PEs (collective) on numpy arrays (or tensors)
    viewing symmetric memory: ``shuffle_table`` rows ``[pair_pe, op]`` (0
    send, 1 receive); caches ``[blocks, kv_heads, page_size, head_dim]``;
    for each i a sender copies block ``src_block_table[i]`` of both caches
    into its receiver's block ``dst_block_table[i]``. See
    ``shmem.torch.KVShuffle`` for the torch operator with the reference's
    argument checks."""
    shape = tuple(int(d) for d in key_cache.shape)
    if len(shape) != 4:
        raise ShmemInvalid(f"key_cache must be 4-D [blocks, kv_heads, page_size, head_dim], not {len(shape)}-D")
    if tuple(int(d) for d in value_cache.shape) != shape:
        raise ShmemInvalid(f"value_cache shape {tuple(value_cache.shape)} differs from key_cache {shape}")
    table = [[int(a), int(b)] for a, b in (row for row in _tolist(shuffle_table))]
    _n.kv_shuffle(table, key_cache, value_cache, shape,
                  [int(x) for x in _tolist(src_block_table)], [int(x) for x in _tolist(dst_block_table)])


def _tolist(x):
    return x.tolist() if hasattr(x, "tolist") else list(x)


# ----- typed names (OpenSHMEM's shmem_TYPE_*) ---------------------------------------


def _typed(tname, dt):
    size = {"int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4,
            "float32": 4, "int64": 8, "uint64": 8, "float64": 8}[dt]
    fns = {}

    def put_t(dest, source, nelems, pe):
        _n.put(dest, source, pe, None, nelems * size)

    def get_t(dest, source, nelems, pe):
        _n.get(dest, source, pe, None, nelems * size)

    def put_nbi_t(dest, source, nelems, pe):
        _n.put_nbi(dest, source, pe, nelems * size)

    def get_nbi_t(dest, source, nelems, pe):
        _n.get_nbi(dest, source, pe, nelems * size)

    def p_t(dest, value, pe):
        _n.p(dest, value, pe, dt)

    def g_t(source, pe):
        return _n.g(source, pe, dt)

    def iput_t(dest, source, dst, sst, nelems, pe):
        _n.iput(dest, source, dst, sst, nelems, pe, dt)

    def iget_t(dest, source, dst, sst, nelems, pe):
        _n.iget(dest, source, dst, sst, nelems, pe, dt)

    def put_signal_t(dest, source, nelems, sig_addr, signal, sig_op, pe):
        _n.put_signal(dest, source, sig_addr, signal, sig_op, pe, None, nelems * size)

    def put_signal_nbi_t(dest, source, nelems, sig_addr, signal, sig_op, pe):
        _n.put_signal(dest, source, sig_addr, signal, sig_op, pe, None, nelems * size, True)

    fns.update(put=put_t, get=get_t, put_nbi=put_nbi_t, get_nbi=get_nbi_t, p=p_t, g=g_t,
               iput=iput_t, iget=iget_t, put_signal=put_signal_t, put_signal_nbi=put_signal_nbi_t)

    for op in ("and", "or", "xor", "min", "max", "sum", "prod"):
        if op in ("and", "or", "xor") and dt.startswith("float"):
            continue

        def red(team, dest, source, nreduce=None, _op=op):
            _n.reduce(team, dest, source, nreduce, _op, dt)
        fns[f"{op}_reduce"] = red

    if tname in _AMO_TYPES or dt.startswith("float"):
        def a_fetch(dest, pe):
            return _n.atomic("fetch", dest, pe, None, None, dt)

        def a_set(dest, value, pe):
            _n.atomic("set", dest, pe, value, None, dt)

        def a_swap(dest, value, pe):
            return _n.atomic("swap", dest, pe, value, None, dt)
        fns.update(atomic_fetch=a_fetch, atomic_set=a_set, atomic_swap=a_swap)
    if tname in _AMO_TYPES:
        def a_cswap(dest, cond, value, pe):
            return _n.atomic("compare_swap", dest, pe, value, cond, dt)

        def a_finc(dest, pe):
            return _n.atomic("fetch_inc", dest, pe, None, None, dt)

        def a_inc(dest, pe):
            _n.atomic("inc", dest, pe, None, None, dt)
        fns.update(atomic_compare_swap=a_cswap, atomic_fetch_inc=a_finc, atomic_inc=a_inc)
        for op in ("add", "and", "or", "xor"):
            def a_op(dest, value, pe, _op=op):
                _n.atomic(_op, dest, pe, value, None, dt)

            def a_fop(dest, value, pe, _op=op):
                return _n.atomic(f"fetch_{_op}", dest, pe, value, None, dt)
            fns[f"atomic_{op}"] = a_op
            fns[f"atomic_fetch_{op}"] = a_fop
    if tname in _WAIT_TYPES:
        def w(ivar, cmp, cmp_value):
            _n.wait_test(ivar, cmp, cmp_value, "one", None, False, dt)

        def t(ivar, cmp, cmp_value):
            return _n.wait_test(ivar, cmp, cmp_value, "one", None, True, dt)
        fns.update(wait_until=w, test=t)
        for mode in ("all", "any", "some"):
            for test_ in (False, True):
                def wm(ivars, cmp, value, status=None, _mode=mode, _test=test_):
                    return _n.wait_test(ivars, cmp, value, _mode, status, _test, dt)
                fns[f"{'test' if test_ else 'wait_until'}_{mode}"] = wm
                fns[f"{'test' if test_ else 'wait_until'}_{mode}_vector"] = wm

    out = {}
    for suffix, fn in fns.items():
        name = f"{tname}_{suffix}"
        fn.__name__ = fn.__qualname__ = name
        fn.__doc__ = f"``shmem_{name}``: {suffix.replace('_', ' ')} on {dt} elements (nelems counts elements)."
        out[name] = fn
    return out


for _tname, _dt in TYPES.items():
    globals().update(_typed(_tname, _dt))


# ----- job control ----------------------------------------------------------------

global_exit = _n.global_exit
route_summary = _n.route_summary


def info_get_version():
    """The OpenSHMEM specification version this API follows."""
    return (1, 5)


def info_get_name():
    """The library's name and version."""
    return f"shmem-rs {_n.version()}"


del _w, _test, _mode, _vector, _f, _op, _fetch, _tname, _dt
