"""The ``shmem.core`` API (re-exported by ``shmem.core`` and ``shmem``).

Everything here is a thin layer over the native module ``shmem._shmem``;
hot-path functions (``put``, ``get``, ...) *are* the native functions.
"""

import contextlib

from . import _shmem as _n
from ._enums import (
    ComparisonType,
    InitStatus,
    MemType,
    SignalOp,
    TEAM_SHARED,
    TEAM_WORLD,
)
from ._shmem import Buffer, Event, Handle, ShmemError, ShmemInvalid, Stream, Team

__all__ = [
    "Buffer", "ComparisonType", "Event", "Handle", "InitStatus", "MemType",
    "ShmemError", "ShmemInvalid", "SignalOp", "Stream", "Team",
    "align", "barrier", "barrier_all", "barrier_all_on_stream", "barrier_on_stream",
    "buffer", "calloc", "create_stream", "current_instance", "finalize", "free",
    "get", "get_handle", "get_peer_buffer", "get_unique_id", "get_version",
    "get_default_stream", "handle_wait", "init", "init_status", "multi_instance", "my_pe", "n_pes",
    "put", "put_handle", "put_signal", "quiet", "set_instance", "signal_op",
    "signal_wait", "stream_synchronize", "sync", "sync_all", "team_my_pe", "team_n_pes",
]


def get_version():
    """The library version, e.g. ``"0.1.0"``."""
    return _n.version()


def _single_host():
    """Whether the launcher environment says every PE runs on this host
    (torchrun's or shmemrun's LOCAL_WORLD_SIZE == WORLD_SIZE)."""
    import os

    local, world = os.environ.get("LOCAL_WORLD_SIZE"), os.environ.get("WORLD_SIZE")
    return local is not None and world is not None and local == world


def get_unique_id(empty=False, local=None):
    """Rank 0: start the job's config store in this process and return the
    unique id (``bytes``, picklable) to hand to every PE's ``init``.

    ``empty=True`` returns a zero-filled id of the right length without
    starting anything: a receive buffer for broadcasting the real one (for
    example with ``torch.distributed.broadcast``).

    Where the store listens: ``SHMEM_BOOTSTRAP_ADDR`` / ``SHMEM_BOOTSTRAP_IFNAME``
    when set; else loopback (127.0.0.1) when ``local=True`` or when the
    launcher says all PEs are on this host (torchrun / shmemrun with
    ``LOCAL_WORLD_SIZE == WORLD_SIZE``); else this host's first
    non-loopback IPv4 address, so that PEs on other hosts can reach it
    (``local=False`` forces that).
    """
    import os

    if empty:
        return bytes(_n.unique_id_len())
    told = os.environ.get("SHMEM_BOOTSTRAP_ADDR") or os.environ.get("SHMEM_BOOTSTRAP_IFNAME")
    if not told and (local is True or (local is None and _single_host())):
        return _n.get_unique_id("127.0.0.1")
    return _n.get_unique_id()


def _uid_bytes(uid):
    if isinstance(uid, (bytes, bytearray, memoryview)):
        return bytes(uid)
    if hasattr(uid, "detach") and hasattr(uid, "numpy"):  # a torch tensor
        uid = uid.detach().cpu().numpy()
    try:
        return bytes(memoryview(uid).cast("B"))
    except TypeError:
        pass
    try:
        return bytes(uid)
    except (TypeError, ValueError) as e:
        raise ShmemInvalid(f"uid must be the bytes from get_unique_id(), not {type(uid).__name__}: {e}") from None


def _mem_size(mem_size):
    if mem_size is None:
        return None
    if isinstance(mem_size, str):
        return _n.parse_size(mem_size)
    if isinstance(mem_size, bool) or not isinstance(mem_size, int):
        try:
            mem_size = int(mem_size)
        except (TypeError, ValueError):
            raise ShmemInvalid(f"mem_size must be a number of bytes or a size like '1G', not {mem_size!r}") from None
    if mem_size <= 0:
        raise ShmemInvalid(f"mem_size must be positive, got {mem_size}")
    return mem_size


def _require(method, **args):
    missing = [k for k, v in args.items() if v is None]
    if missing:
        raise ShmemInvalid(
            f"initializer_method {method!r} needs {', '.join(args)}; missing: {', '.join(missing)}"
        )


def init(device=None, uid=None, rank=None, nranks=None, mpi_comm=None,
         initializer_method="", mem_size=None, instance_id=0, url=None):
    """Join a job (collective over its PEs).

    * ``initializer_method="uid"``: every PE passes the ``uid`` from rank 0's
      ``get_unique_id()``, its ``rank``, ``nranks`` and ``mem_size`` (bytes,
      or a string like ``"1G"``).
    * ``initializer_method="attr"``: ``url="tcp://ip:port"`` (or
      ``uid="tcp://ip:port"``), ``rank`` and ``nranks``; rank 0 binds the
      address. ``mem_size`` defaults to ``SHMEM_SYMMETRIC_SIZE``.
    * ``initializer_method="mpi"`` or ``mpi_comm=comm``: rank and size come
      from the communicator (mpi4py or anything with ``Get_rank``,
      ``Get_size`` and ``bcast``), which also broadcasts the unique id.
    * no method and no uid: the launcher environment (``shmemrun``,
      ``python -m shmem.run``, torchrun's RANK/WORLD_SIZE/MASTER_ADDR), or a
      one-PE job when there is none.

    ``device`` is the reference's accelerator id; this build has none, so it
    is accepted and ignored. ``instance_id`` starts an additional,
    independent instance (see ``multi_instance``).

    Missing or malformed arguments raise ``ShmemInvalid``; failures to join
    raise ``ShmemError``.
    """
    del device  # no accelerator on this build; accepted for compatibility
    method = (initializer_method or "").strip().lower()
    if isinstance(instance_id, bool) or not isinstance(instance_id, int) or instance_id < 0:
        raise ShmemInvalid(f"instance_id must be a non-negative int, not {instance_id!r}")
    size = _mem_size(mem_size)
    if mpi_comm is not None or method == "mpi":
        comm = mpi_comm
        if comm is None:
            try:
                from mpi4py import MPI  # type: ignore
            except ImportError:
                raise ShmemInvalid("initializer_method 'mpi' needs mpi_comm or mpi4py installed") from None
            comm = MPI.COMM_WORLD
        r, n = comm.Get_rank(), comm.Get_size()
        the_uid = comm.bcast(_n.get_unique_id() if r == 0 else None, root=0)
        _n.init_uid(_uid_bytes(the_uid), r, n, size, instance_id)
        return
    if method in ("attr", "tcp", "url") or (method == "" and (url is not None or (isinstance(uid, str) and "://" in uid))):
        url = url if url is not None else uid
        _require(method or "attr", url=url, rank=rank, nranks=nranks)
        _n.init_attr(int(rank), int(nranks), str(url), size, instance_id)
        return
    if method == "uid" or (method == "" and uid is not None):
        _require("uid", uid=uid, rank=rank, nranks=nranks, mem_size=mem_size)
        _n.init_uid(_uid_bytes(uid), int(rank), int(nranks), size, instance_id)
        return
    if method in ("", "env", "default", "launcher", "torchrun"):
        _n.init_env(size, instance_id)
        return
    raise ShmemInvalid(
        f"unknown initializer_method {initializer_method!r} (use 'uid', 'attr', 'mpi', or '' for the launcher environment)"
    )


#: Callbacks run (with the instance id) after an instance is finalised.
_on_finalize = []


def finalize(instance_id=None):
    """Leave the job (collective) for ``instance_id`` or the current instance."""
    inst = _n.current_instance() if instance_id is None else instance_id
    _n.finalize(instance_id)
    for cb in list(_on_finalize):
        cb(inst)


def init_status(instance_id=None):
    """``InitStatus.INITIALIZED`` or ``InitStatus.NOT_INITIALIZED``."""
    return InitStatus.INITIALIZED if _n.is_initialized(instance_id) else InitStatus.NOT_INITIALIZED


my_pe = _n.my_pe
n_pes = _n.n_pes
current_instance = _n.current_instance
set_instance = _n.set_instance


@contextlib.contextmanager
def multi_instance(instance_id):
    """Within the block, module-level calls use instance ``instance_id``
    (when it is initialised; an ``init(..., instance_id=...)`` inside the
    block makes it current anyway). The previous instance is current again
    afterwards."""
    prev = _n.current_instance()
    if instance_id in _n.instances():
        _n.set_instance(instance_id)
    try:
        yield instance_id
    finally:
        if prev is not None and prev in _n.instances():
            _n.set_instance(prev)


def _team(team):
    if isinstance(team, Team):
        return team
    if team is None or team == TEAM_WORLD:
        return _n.team_world()
    if team == TEAM_SHARED:
        return _n.team_shared()
    raise ShmemInvalid(f"team {team!r} is not a Team, TEAM_WORLD or TEAM_SHARED")


def team_my_pe(team):
    """This PE's number in ``team``."""
    return _team(team).my_pe()


def team_n_pes(team):
    """Number of PEs in ``team``."""
    return _team(team).n_pes()


def buffer(size, release=False, except_on_del=True, mem_type=MemType.DEVICE_SIDE):
    """Allocate ``size`` bytes of symmetric memory on every PE (collective).

    ``release=True``: the Buffer does not track the allocation, so dropping
    it unfreed is silent (the heap goes at finalize). Otherwise, with
    ``except_on_del`` (the default), a Buffer garbage-collected without
    ``free`` reports a ``ShmemError`` (free is collective and cannot run
    from a destructor). ``mem_type`` is accepted for compatibility: both
    kinds are host memory here.
    """
    return _n.malloc(size, 0, False, release, except_on_del, mem_type)


def calloc(count, size, mem_type=MemType.DEVICE_SIDE):
    """``count * size`` zeroed bytes (collective)."""
    return _n.malloc(count * size, 0, True, False, True, mem_type)


def align(alignment, size, mem_type=MemType.DEVICE_SIDE):
    """``size`` bytes aligned to ``alignment`` (a power of two; collective)."""
    return _n.malloc(size, alignment, False, False, True, mem_type)


free = _n.free
get_peer_buffer = _n.get_peer_buffer

create_stream = _n.create_stream
get_default_stream = _n.get_default_stream
put_handle = _n.put_handle
get_handle = _n.get_handle

# Stream-ordered calls, as the reference documents them: ``stream`` is a
# ``Stream``, the int of one, or 0 / None for the instance's default stream.
# They enqueue and return; the stream's own worker runs them in order.
# Host calls (barriers, collectives, free, finalize, the blocking forms in
# the top-level ``shmem`` module) first let the default stream finish, and
# ``get_default_stream().synchronize()`` (or ``stream_synchronize(0)``)
# waits for it explicitly.


def put(dst, src, remote_pe, stream=None, nbytes=None):
    """Enqueue a copy of ``src`` (any memory) into ``dst`` on ``remote_pe``
    (stream-ordered; ``dst`` is symmetric: the local Buffer, a view of it,
    or ``get_peer_buffer(buf, remote_pe)``). ``shmem.put`` is the blocking
    form."""
    _n.put(dst, src, remote_pe, 0 if stream is None else stream, nbytes)


def get(dst, src, remote_pe, stream=None, nbytes=None):
    """Enqueue a copy of ``src`` (symmetric, or ``get_peer_buffer(buf,
    remote_pe)``) on ``remote_pe`` into ``dst`` (stream-ordered: ``dst``
    holds the data once the stream has reached it). ``shmem.get`` is the
    blocking form."""
    _n.get(dst, src, remote_pe, 0 if stream is None else stream, nbytes)


def put_signal(dst, src, signal_var, signal_val, signal_operation, remote_pe, stream=None, nbytes=None):
    """Enqueue a put followed by a signal update on ``remote_pe``
    (stream-ordered). ``shmem.put_signal`` is the blocking form."""
    _n.put_signal(dst, src, signal_var, signal_val, signal_operation, remote_pe,
                  0 if stream is None else stream, nbytes)


def signal_op(signal_var, signal_val, signal_operation, remote_pe, stream=None):
    """Enqueue an update (``SignalOp``) of ``signal_var`` on ``remote_pe``
    (stream-ordered). ``shmem.signal_op`` is the blocking form."""
    _n.signal_op(signal_var, signal_val, signal_operation, remote_pe, 0 if stream is None else stream)


def signal_wait(signal_var, signal_val, comparison, stream=None):
    """Enqueue a wait until this PE's ``signal_var <comparison> signal_val``
    (``ComparisonType``): later work on the stream runs after it. Returns
    None. ``shmem.signal_wait`` blocks the host instead and returns the
    signal's value."""
    _n.signal_wait(signal_var, signal_val, comparison, 0 if stream is None else stream)


def quiet(stream=None):
    """Enqueue the completion of every outstanding operation on the stream
    (stream-ordered). ``shmem.quiet`` is the blocking form."""
    _n.quiet(0 if stream is None else stream)


def handle_wait(handle, stream=None):
    """Complete ``handle`` in stream order (``handle.wait()`` blocks)."""
    _n.handle_wait(handle, 0 if stream is None else stream)


def stream_synchronize(stream=None):
    """Block (interruptibly) until ``stream`` (a ``Stream``, its int, or
    0 / None for the default stream) has run everything enqueued; raises
    the first error it met."""
    _n.stream_synchronize(0 if stream is None else stream)


def barrier(team=TEAM_WORLD):
    """Complete outstanding operations and synchronise ``team``."""
    _n.barrier(team)


# Bound to the native functions directly: a Python frame in between costs
# about as much as the rest of a barrier's bookkeeping.
barrier_all = _n.barrier_all


def sync(team=TEAM_WORLD):
    """Synchronise ``team`` (no completion of outstanding operations)."""
    _n.sync(team)


sync_all = _n.sync_all


def barrier_on_stream(team, stream):
    """Enqueue a barrier over ``team`` on ``stream``."""
    _n.barrier(team, stream)


def barrier_all_on_stream(stream):
    """Enqueue a barrier over all PEs on ``stream``."""
    _n.barrier(None, stream)
