"""torch.library operators (torch.ops.shmem.*), torch.compile, the
reference's ShmemOps spelling, typed malloc_tensor, AllGather into a plain
tensor, and stale tensors after free_tensor (skipped without torch)."""

import pytest

torch = pytest.importorskip("torch")

import shmem  # noqa: E402
import shmem.core as core  # noqa: E402
from pes import run_pes  # noqa: E402


def compiled_allgather(rank, n):
    import shmem.torch  # noqa: F401 - registers torch.ops.shmem

    def step(x):
        return torch.ops.shmem.allgather(x * 2) + 1

    fn = torch.compile(step, fullgraph=True)
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3) + 10 * rank
    got = fn(x)
    want = torch.cat([(torch.arange(6, dtype=torch.float32).reshape(2, 3) + 10 * pe) * 2 + 1
                      for pe in range(n)])
    assert got.shape == (2 * n, 3) and torch.equal(got, want), got
    got2 = fn(x + 1)  # the compiled graph runs again, collectively
    assert torch.equal(got2, want + 2)
    return True


def test_torch_compile_fullgraph_allgather():
    assert run_pes(compiled_allgather, 2, timeout=240) == [True] * 2


ALL_DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
              torch.float16, torch.bfloat16, torch.float32, torch.float64,
              torch.complex64, torch.complex128]


def ops_and_manager(rank, n):
    from shmem.torch import AllGather, Manager, ShmemOps

    assert ShmemOps.Manager is Manager and ShmemOps.AllGather is AllGather
    mgr = ShmemOps.Manager()
    peer = (rank + 1) % n
    for dt in ALL_DTYPES + [getattr(torch, "float8_e4m3fn", torch.float32), torch.uint16]:
        t = mgr.malloc_tensor((3, 4), dt)
        assert t.shape == (3, 4) and t.dtype == dt
        assert shmem.is_symmetric(t)
        t.copy_(torch.ones(3, 4, dtype=dt))
        assert torch.equal(t, torch.ones(3, 4, dtype=dt))
        mgr.free_tensor(t)
    raw = mgr.malloc_tensor(16)
    assert raw.dtype == torch.uint8 and raw.shape == (16,)
    mgr.free_tensor(raw)
    # Operators, eagerly.
    dst = mgr.malloc_tensor((4,), torch.bfloat16)
    dst.zero_()
    sig = mgr.malloc_tensor((1,), torch.int64)
    sig.zero_()
    torch.ops.shmem.barrier(sig)
    torch.ops.shmem.put(dst, torch.full((4,), rank + 0.5, dtype=torch.bfloat16), peer)
    torch.ops.shmem.signal(sig, 1, 0, peer)
    torch.ops.shmem.barrier(sig)
    left = (rank - 1) % n
    assert torch.equal(dst, torch.full((4,), left + 0.5, dtype=torch.bfloat16))
    assert sig.item() == 1
    back = torch.empty(4, dtype=torch.bfloat16)
    torch.ops.shmem.get(back, dst, peer)
    assert torch.equal(back, torch.full((4,), rank + 0.5, dtype=torch.bfloat16))
    # AllGather into a plain output tensor, reference keyword.
    out = torch.zeros(3 * n)
    AllGather().compute(out, local_input=torch.full((3,), float(rank)))
    assert torch.equal(out, torch.arange(n, dtype=torch.float32).repeat_interleave(3))
    torch.ops.shmem.barrier(sig)
    # A tensor used after free_tensor is refused, also after re-allocation.
    mgr.free_tensor(dst)
    fresh = mgr.malloc_tensor((4,), torch.bfloat16)
    fresh.fill_(3)
    torch.ops.shmem.barrier(sig)
    with pytest.raises(core.ShmemError, match="freed"):
        core.put(dst, torch.full((4,), 4242.0, dtype=torch.bfloat16), peer, stream=None)
    with pytest.raises(core.ShmemError, match="freed"):
        torch.ops.shmem.put(dst[1:3], torch.ones(2, dtype=torch.bfloat16), peer)
    # A raw DLPack tensor of a freed Buffer cannot be traced to it: the
    # range is refused while such a view lives.
    b = core.buffer(32)
    stale = torch.from_dlpack(b)
    core.free(b)
    b2 = core.buffer(32)
    with pytest.raises(core.ShmemError, match="freed while views"):
        core.put(stale, torch.ones(32, dtype=torch.uint8), peer)
    del stale
    core.barrier_all()
    assert torch.equal(fresh, torch.full((4,), 3, dtype=torch.bfloat16))
    core.free(b2)
    mgr.free_tensor(fresh)
    mgr.free_tensor(sig)
    return True


def test_ops_manager_dtypes_and_stale_tensors():
    assert run_pes(ops_and_manager, 2) == [True] * 2
