"""``shmem.torch``: the reference's tensor operators on CPU torch tensors
backed by symmetric memory. torch is imported when this module is.

Every PE runs the same calls in the same order (allocation and the
operators are collective)::

    import torch
    from shmem.torch import Manager, AllGather

    mgr = Manager()
    mgr.attr_init(my_pe, n_pes, 1 << 28, "tcp://127.0.0.1:29600")
    inp = mgr.malloc_like(torch.full((1024,), float(my_pe)))
    out = mgr.malloc_like(torch.empty(1024 * n_pes))
    AllGather().compute(out, inp)          # out[i*1024:(i+1)*1024] == i
    mgr.free_tensor(out); mgr.free_tensor(inp); mgr.finalize()
"""

import torch

from . import _api
from . import _shmem as _n
from ._shmem import ShmemInvalid

__all__ = ["Manager", "AllGather", "KVShuffle", "ShmemOps", "allgather", "kv_shuffle", "put", "get", "signal", "barrier"]


def _check_tensor(name, t):
    if not isinstance(t, torch.Tensor):
        raise ShmemInvalid(f"{name} must be a torch.Tensor, not {type(t).__name__}")
    if t.device.type != "cpu":
        raise ShmemInvalid(f"{name} is on {t.device}; shmem tensors are CPU tensors on symmetric memory")


class Manager:
    """Initialisation and symmetric-memory tensors (the reference's Manager).

    Tensors from ``malloc_tensor``/``malloc_like`` view symmetric memory
    through DLPack; ``free_tensor`` returns it (collective).
    """

    def __init__(self):
        self._buffers = {}

    def attr_init(self, my_pe, n_pes, local_mem_size, ip_port, instance_id=0):
        """Join the job of ``n_pes`` PEs as ``my_pe`` through
        ``"tcp://ip:port"`` (rank 0 binds it), with a heap of
        ``local_mem_size`` bytes per PE."""
        _api.init(initializer_method="attr", rank=my_pe, nranks=n_pes,
                  mem_size=local_mem_size, url=ip_port, instance_id=instance_id)

    def uid_init(self, uid, my_pe, n_pes, local_mem_size, instance_id=0):
        """Join with a unique id from rank 0's ``shmem.core.get_unique_id()``."""
        _api.init(initializer_method="uid", uid=uid, rank=my_pe, nranks=n_pes,
                  mem_size=local_mem_size, instance_id=instance_id)

    def finalize(self):
        """Leave the job. Tensors still alive keep their memory mapped but
        must not be used for communication any more."""
        self._buffers.clear()
        _api.finalize()

    def malloc_tensor(self, size, dtype=None):
        """A tensor on symmetric memory (collective).

        ``malloc_tensor(nbytes)``: the reference's form, a ``uint8`` tensor
        of ``nbytes`` bytes. ``malloc_tensor(shape, dtype)``: a tensor of that
        shape (an int or a sequence) and any torch dtype (bfloat16, float8,
        complex, bool ...), contents undefined.
        """
        if dtype is None and isinstance(size, int) and not isinstance(size, bool):
            shape, dtype = (size,), torch.uint8
            if size <= 0:
                raise ShmemInvalid(f"malloc_tensor size must be positive, got {size}")
        else:
            if isinstance(size, bool):
                raise ShmemInvalid("malloc_tensor shape must be ints, not a bool")
            shape = (size,) if isinstance(size, int) else tuple(int(d) for d in size)
            dtype = torch.uint8 if dtype is None else dtype
            if not isinstance(dtype, torch.dtype):
                raise ShmemInvalid(f"malloc_tensor dtype must be a torch.dtype, not {dtype!r}")
            if any(d < 0 for d in shape):
                raise ShmemInvalid(f"malloc_tensor shape {list(shape)} has a negative dimension")
        numel = 1
        for d in shape:
            numel *= d
        itemsize = torch.empty((), dtype=dtype).element_size()
        nbytes = numel * itemsize
        buf = _n.malloc(max(nbytes, 1), 0, False, True, False, 1)
        # A DLPack view whose storage shmem remembers: this tensor and its
        # views are refused after free_tensor.
        raw = _n.torch_view(buf)
        t = raw[:nbytes].view(dtype).view(shape) if (dtype != torch.uint8 or shape != (nbytes,)) else raw
        self._buffers[raw.data_ptr()] = buf
        return t

    def malloc_like(self, t):
        """A tensor of ``t``'s shape and dtype on symmetric memory, holding a
        copy of ``t`` (collective)."""
        if not isinstance(t, torch.Tensor):
            raise ShmemInvalid(f"malloc_like takes a torch.Tensor, not {type(t).__name__}")
        out = self.malloc_tensor(tuple(t.shape), t.dtype)
        out.copy_(t.detach().cpu())
        return out

    def free_tensor(self, t):
        """Free a tensor from ``malloc_tensor``/``malloc_like`` (collective)."""
        buf = self._buffers.pop(t.data_ptr(), None)
        if buf is None:
            raise ShmemInvalid(
                "free_tensor: this tensor was not allocated by this Manager (or was already freed)"
            )
        for k in [k for k, v in self._buffers.items() if v is buf]:
            del self._buffers[k]
        _n.free(buf)


class AllGather:
    """``compute(output, local_input)``: PE i's ``local_input`` lands in
    slice i of every PE's ``output`` (``output.numel() == local_input.numel()
    * n_pes``).

    A symmetric ``output`` (``Manager.malloc_tensor``/``malloc_like``) is
    written in place: by the library's fcollect when ``local_input`` is
    symmetric too, else by puts between two barriers. A plain ``output``
    tensor (the reference demo's) is staged: the op gathers into a
    symmetric scratch pair kept per size (allocated collectively on first
    use) and copies the result out, one extra copy of ``local_input`` and
    one of ``output`` per call.
    """

    def compute(self, output, local_input=None, *, input=None):  # noqa: A002 - the old keyword
        if local_input is None:
            local_input = input
        _check_tensor("output", output)
        _check_tensor("local_input", local_input)
        n = _n.n_pes()
        if output.dtype != local_input.dtype:
            raise ShmemInvalid(f"output is {output.dtype} but local_input is {local_input.dtype}")
        if output.numel() != local_input.numel() * n:
            raise ShmemInvalid(
                f"output has {output.numel()} elements; it needs local_input.numel() * n_pes = "
                f"{local_input.numel()} * {n} = {local_input.numel() * n}"
            )
        if not output.is_contiguous() or not local_input.is_contiguous():
            raise ShmemInvalid("output and local_input must be contiguous")
        if not _n.is_symmetric(output):
            output.view(-1).copy_(_allgather_impl(local_input).view(-1))
            return output
        nbytes = local_input.numel() * local_input.element_size()
        if _n.is_symmetric(local_input):
            _n.fcollect(None, output, local_input, nbytes, "uint8")
            return output
        me = _n.my_pe()
        flat = output.view(-1)
        k = local_input.numel()
        _n.barrier(None)  # every PE is done reading its previous output
        for pe in range(n):
            _n.put(flat[me * k:(me + 1) * k], local_input, pe)
        _n.barrier(None)
        return output


# Symmetric scratch for gathers into plain tensors, by (instance, bytes):
# allocated collectively the first time a size is used (every PE makes the
# same calls in the same order), freed at finalize.
_scratch = {}


def _forget_scratch(instance):
    for k in [k for k in _scratch if k[0] == instance]:
        del _scratch[k]


_api._on_finalize.append(_forget_scratch)


def _scratch_pair(nbytes, n):
    key = (_n.current_instance(), nbytes)
    pair = _scratch.get(key)
    if pair is None or pair[0].freed:
        src = _n.malloc(max(nbytes, 1), 0, False, True, False, 1)
        dst = _n.malloc(max(nbytes * n, 1), 0, False, True, False, 1)
        pair = _scratch[key] = (src, dst)
    return pair


def _allgather_impl(local_input):
    n = _n.n_pes()
    x = local_input.detach().contiguous()
    nbytes = x.numel() * x.element_size()
    src, dst = _scratch_pair(nbytes, n)
    if nbytes:
        _n.torch_view(src)[:nbytes].copy_(x.reshape(-1).view(torch.uint8))
    _n.fcollect(None, dst, src, nbytes, "uint8")
    out = torch.empty((n * x.shape[0],) + tuple(x.shape[1:]) if x.dim() else (n,), dtype=x.dtype)
    if nbytes:
        out.view(-1).view(torch.uint8).copy_(_n.torch_view(dst)[:nbytes * n])
    return out


class KVShuffle:
    """``compute(shuffle_table, key_cache, value_cache, src_block_table,
    dst_block_table)``: paired PEs copy KV-cache blocks.

    ``shuffle_table``: int64 ``[n_pes, 2]``, rows ``[pair_pe, op]`` (0 send,
    1 receive), pairing symmetric. ``key_cache``/``value_cache``: symmetric
    ``[blocks, kv_heads, page_size, head_dim]`` tensors of one dtype and
    shape. For each i, a sender copies its block ``src_block_table[i]`` of
    both caches into the receiver's block ``dst_block_table[i]``; the
    receiver returns once the data has arrived. PEs not in a pair do nothing.
    """

    def compute(self, shuffle_table, key_cache, value_cache, src_block_table, dst_block_table):
        n = _n.n_pes()
        _check_tensor("shuffle_table", shuffle_table)
        if shuffle_table.dtype != torch.int64:
            raise ShmemInvalid(f"shuffle_table must be int64, not {shuffle_table.dtype}")
        if shuffle_table.dim() != 2 or tuple(shuffle_table.shape) != (n, 2):
            raise ShmemInvalid(
                f"shuffle_table must have shape [n_pes, 2] = [{n}, 2], not {list(shuffle_table.shape)}"
            )
        for name, c in (("key_cache", key_cache), ("value_cache", value_cache)):
            _check_tensor(name, c)
            if c.dim() != 4:
                raise ShmemInvalid(
                    f"{name} must be 4-D [blocks, kv_heads, page_size, head_dim], not {c.dim()}-D"
                )
            if not c.is_contiguous():
                raise ShmemInvalid(f"{name} must be contiguous")
            if not _n.is_symmetric(c):
                raise ShmemInvalid(f"{name} must be on symmetric memory (Manager.malloc_like)")
        if key_cache.shape != value_cache.shape:
            raise ShmemInvalid(
                f"key_cache {list(key_cache.shape)} and value_cache {list(value_cache.shape)} differ in shape"
            )
        if key_cache.dtype != value_cache.dtype:
            raise ShmemInvalid(f"key_cache is {key_cache.dtype} but value_cache is {value_cache.dtype}")
        for name, b in (("src_block_table", src_block_table), ("dst_block_table", dst_block_table)):
            _check_tensor(name, b)
            if b.dtype != torch.int64:
                raise ShmemInvalid(f"{name} must be int64, not {b.dtype}")
            if b.dim() != 1:
                raise ShmemInvalid(f"{name} must be 1-D, not {b.dim()}-D")
        if src_block_table.numel() != dst_block_table.numel():
            raise ShmemInvalid(
                f"src_block_table has {src_block_table.numel()} entries, dst_block_table {dst_block_table.numel()}"
            )
        _n.kv_shuffle(
            shuffle_table.tolist(), key_cache, value_cache, tuple(key_cache.shape),
            src_block_table.tolist(), dst_block_table.tolist(),
        )


class ShmemOps:
    """The reference's ``torch.classes.ShmemOps`` namespace, ported:
    ``shmem.torch.ShmemOps.Manager``, ``.AllGather``, ``.KVShuffle`` are
    the classes above (TorchScript custom classes need a C++ extension, so
    they are not registered under ``torch.classes``)."""

    Manager = Manager
    AllGather = AllGather
    KVShuffle = KVShuffle


# ----- torch.library operators (torch.ops.shmem.*) ------------------------------
#
# Registered in the ``shmem`` namespace with fake (meta) kernels, so that
# torch.compile (fullgraph=True) traces through them. They are collective
# where their eager counterparts are.

@torch.library.custom_op("shmem::allgather", mutates_args=())
def allgather(local_input: torch.Tensor) -> torch.Tensor:
    """Every PE's ``local_input`` stacked along dim 0 (PE order):
    shape ``[n_pes * d0, ...]``. Collective; any CPU tensor (staged through
    symmetric scratch, see ``AllGather``)."""
    _check_tensor("local_input", local_input)
    return _allgather_impl(local_input)


@allgather.register_fake
def _(local_input):
    n = _n.n_pes()
    if local_input.dim() == 0:
        return local_input.new_empty((n,))
    return local_input.new_empty((n * local_input.shape[0],) + tuple(local_input.shape[1:]))


@torch.library.custom_op("shmem::put", mutates_args=("dst",))
def put(dst: torch.Tensor, src: torch.Tensor, pe: int) -> None:
    """Blocking put of ``src`` into the symmetric tensor ``dst`` on ``pe``."""
    _n.put(dst, src.contiguous(), pe)


@put.register_fake
def _(dst, src, pe):
    return None


@torch.library.custom_op("shmem::get", mutates_args=("dst",))
def get(dst: torch.Tensor, src: torch.Tensor, pe: int) -> None:
    """Blocking get of the symmetric tensor ``src`` on ``pe`` into ``dst``."""
    _n.get(dst, src, pe)


@get.register_fake
def _(dst, src, pe):
    return None


@torch.library.custom_op("shmem::signal", mutates_args=("sig",))
def signal(sig: torch.Tensor, value: int, op: int, pe: int) -> None:
    """Update the symmetric signal word ``sig`` (8 bytes) on ``pe``
    (``op``: 0 set, 1 add)."""
    _n.signal_op(sig, value, op, pe)


@signal.register_fake
def _(sig, value, op, pe):
    return None


@torch.library.custom_op("shmem::barrier", mutates_args=("token",))
def barrier(token: torch.Tensor) -> None:
    """Barrier over all PEs. ``token`` is any tensor: it orders the
    barrier in a traced graph (the op is recorded as writing it)."""
    _n.barrier(None)


@barrier.register_fake
def _(token):
    return None


@torch.library.custom_op("shmem::kv_shuffle", mutates_args=("key_cache", "value_cache"))
def kv_shuffle(shuffle_table: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
               src_block_table: torch.Tensor, dst_block_table: torch.Tensor) -> None:
    """``KVShuffle.compute`` as an operator."""
    KVShuffle().compute(shuffle_table, key_cache, value_cache, src_block_table, dst_block_table)


@kv_shuffle.register_fake
def _(shuffle_table, key_cache, value_cache, src_block_table, dst_block_table):
    return None
