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

__all__ = ["Manager", "AllGather", "KVShuffle"]


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

    def malloc_tensor(self, size):
        """A ``uint8`` tensor of ``size`` bytes on symmetric memory (collective)."""
        if size <= 0:
            raise ShmemInvalid(f"malloc_tensor size must be positive, got {size}")
        buf = _n.malloc(int(size), 0, False, True, False, 1)
        t = torch.from_dlpack(buf)
        self._buffers[t.data_ptr()] = buf
        return t

    def malloc_like(self, t):
        """A tensor of ``t``'s shape and dtype on symmetric memory, holding a
        copy of ``t`` (collective)."""
        if not isinstance(t, torch.Tensor):
            raise ShmemInvalid(f"malloc_like takes a torch.Tensor, not {type(t).__name__}")
        nbytes = t.numel() * t.element_size()
        raw = self.malloc_tensor(max(nbytes, 1))
        out = raw[:nbytes].view(t.dtype).view(t.shape)
        out.copy_(t.detach().cpu())
        self._buffers[out.data_ptr()] = self._buffers[raw.data_ptr()]
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
    """``compute(output, input)``: PE i's ``input`` lands in slice i of
    every PE's ``output`` (``output.numel() == input.numel() * n_pes``).
    ``output`` must be symmetric; a symmetric ``input`` goes through the
    library's fcollect, any other CPU tensor through puts and barriers."""

    def compute(self, output, input):
        _check_tensor("output", output)
        _check_tensor("input", input)
        n = _n.n_pes()
        if output.dtype != input.dtype:
            raise ShmemInvalid(f"output is {output.dtype} but input is {input.dtype}")
        if output.numel() != input.numel() * n:
            raise ShmemInvalid(
                f"output has {output.numel()} elements; it needs input.numel() * n_pes = "
                f"{input.numel()} * {n} = {input.numel() * n}"
            )
        if not output.is_contiguous() or not input.is_contiguous():
            raise ShmemInvalid("output and input must be contiguous")
        if not _n.is_symmetric(output):
            raise ShmemInvalid("output must be on symmetric memory (Manager.malloc_tensor / malloc_like)")
        nbytes = input.numel() * input.element_size()
        if _n.is_symmetric(input):
            _n.fcollect(None, output, input, nbytes, "uint8")
            return output
        me = _n.my_pe()
        flat = output.view(-1)
        k = input.numel()
        _n.barrier(None)  # every PE is done reading its previous output
        for pe in range(n):
            _n.put(flat[me * k:(me + 1) * k], input, pe)
        _n.barrier(None)
        return output


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
