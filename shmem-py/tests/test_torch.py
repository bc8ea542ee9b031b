"""shmem.torch: Manager, AllGather, KVShuffle and DLPack views (skipped without torch)."""

import pytest

torch = pytest.importorskip("torch")

import shmem.core as core  # noqa: E402
from pes import free_port, run_pes  # noqa: E402


def manager_allgather(rank, n, url):
    from shmem.torch import AllGather, Manager

    mgr = Manager()
    mgr.attr_init(rank, n, 32 << 20, url)
    raw = mgr.malloc_tensor(64)
    assert raw.dtype == torch.uint8 and raw.numel() == 64
    buf_view = torch.from_dlpack(core.buffer(16, release=True))
    assert buf_view.numel() == 16
    inp = mgr.malloc_like(torch.full((3, 5), float(rank), dtype=torch.float32))
    assert inp.shape == (3, 5) and (inp == rank).all()
    out = mgr.malloc_like(torch.zeros(15 * n))
    AllGather().compute(out, inp)
    assert torch.equal(out, torch.arange(n, dtype=torch.float32).repeat_interleave(15))
    # A plain (non-symmetric) input goes through puts.
    out.zero_()
    AllGather().compute(out, torch.full((15,), rank + 0.5))
    assert torch.equal(out, (torch.arange(n, dtype=torch.float32) + 0.5).repeat_interleave(15)), out
    with pytest.raises(core.ShmemInvalid, match="needs local_input.numel"):
        AllGather().compute(out, inp[:2])
    plain = torch.zeros(15 * n)  # not symmetric: staged through scratch
    AllGather().compute(plain, inp)
    assert torch.equal(plain, torch.arange(n, dtype=torch.float32).repeat_interleave(15))
    # torch tensors work with the core API as well.
    core.barrier_all()  # every PE has checked its output before it changes
    core.put(out[:4], torch.ones(4), (rank + 1) % n)
    core.barrier_all()
    assert torch.equal(out[:4], torch.ones(4))
    mgr.free_tensor(out)
    mgr.free_tensor(inp)
    mgr.free_tensor(raw)
    with pytest.raises(core.ShmemInvalid, match="not allocated by this Manager"):
        mgr.free_tensor(raw)
    mgr.finalize()
    return True


def test_manager_and_allgather():
    url = f"tcp://127.0.0.1:{free_port()}"
    assert run_pes(manager_allgather, 3, url, method="none") == [True] * 3


def kv_shuffle(rank, n):
    from shmem.torch import KVShuffle, Manager

    mgr = Manager()
    blocks, heads, page, dim = 6, 2, 4, 8
    key = mgr.malloc_like(torch.zeros(blocks, heads, page, dim, dtype=torch.bfloat16))
    val = mgr.malloc_like(torch.zeros(blocks, heads, page, dim, dtype=torch.bfloat16))
    for b in range(blocks):
        key[b] = rank * 16 + b
        val[b] = -(rank * 16 + b)
    # Pairs (0 -> 1), (3 -> 2).
    table = torch.tensor([[1, 0], [0, 1], [3, 1], [2, 0]], dtype=torch.int64)
    src = torch.tensor([0, 1, 5], dtype=torch.int64)
    dst = torch.tensor([2, 3, 4], dtype=torch.int64)
    core.barrier_all()
    KVShuffle().compute(table, key, val, src, dst)
    expect_k = torch.tensor([rank * 16 + b for b in range(blocks)], dtype=torch.float32)
    if rank in (1, 2):
        sender = {1: 0, 2: 3}[rank]
        for s, d in zip(src.tolist(), dst.tolist()):
            expect_k[d] = sender * 16 + s
    got = key.float().amax(dim=(1, 2, 3))
    assert torch.equal(got, expect_k), (got, expect_k)
    assert torch.equal(val.float().amin(dim=(1, 2, 3)), -expect_k)
    shuffle = KVShuffle()
    with pytest.raises(core.ShmemInvalid, match="int64"):
        shuffle.compute(table.int(), key, val, src, dst)
    with pytest.raises(core.ShmemInvalid, match=r"shape \[n_pes, 2\]"):
        shuffle.compute(table[:2], key, val, src, dst)
    with pytest.raises(core.ShmemInvalid, match="4-D"):
        shuffle.compute(table, key[0], val, src, dst)
    with pytest.raises(core.ShmemInvalid, match="differ in shape"):
        shuffle.compute(table, key, val[:3], src, dst)
    with pytest.raises(core.ShmemInvalid, match="symmetric"):
        shuffle.compute(table, key.clone(), val, src, dst)
    with pytest.raises(core.ShmemInvalid, match="entries"):
        shuffle.compute(table, key, val, src, dst[:2])
    core.barrier_all()
    mgr.free_tensor(val)
    mgr.free_tensor(key)
    return True


def test_kv_shuffle():
    assert run_pes(kv_shuffle, 4) == [True] * 4


def torch_bytes(rank, n):
    import shmem
    import shmem.torch  # noqa: F401  (torch_view)

    peer = (rank + 1) % n
    buf = core.buffer(64)
    sym = shmem._shmem.torch_view(buf)[:64].view(torch.int32)  # 16 symmetric int32
    sym.zero_()
    core.barrier_all()
    # Byte-moving calls take any dtype and size: a blocking put from torch
    # into a torch destination, blocking and stream-ordered gets into
    # torch tensors of another dtype.
    src = torch.arange(16, dtype=torch.int32) + 100 * rank
    shmem.put(sym, src, peer)
    core.barrier_all()
    want = torch.arange(16, dtype=torch.int32) + 100 * ((rank - 1) % n)
    assert torch.equal(sym, want), sym
    theirs = (torch.arange(16, dtype=torch.int32) + 100 * rank).tolist()
    got = torch.zeros(8, dtype=torch.float64)  # 64 bytes
    shmem.get(got, sym, peer)
    assert got.view(torch.int32).tolist() == theirs, got.view(torch.int32)
    got = torch.zeros(32, dtype=torch.int16)
    core.get(got, sym, peer)  # on the default stream
    core.stream_synchronize(0)
    assert got.view(torch.int32).tolist() == theirs, got.view(torch.int32)
    core.barrier_all()
    # Refused sources and destinations, on the byte path as on the typed one.
    with pytest.raises(core.ShmemInvalid, match="contiguous tensor"):
        shmem.put(sym, torch.zeros(8, dtype=torch.int32)[::2], peer)
    with pytest.raises(core.ShmemInvalid, match="contiguous tensor"):
        shmem.get(torch.zeros(32, dtype=torch.int32)[::2], sym, peer)
    with pytest.raises(core.ShmemInvalid, match="on device"):
        shmem.put(sym, torch.empty(4, dtype=torch.int32, device="meta"), peer)
    with pytest.raises(core.ShmemInvalid, match="not in a symmetric heap"):
        shmem.put(torch.zeros(4, dtype=torch.int32), src[:4], peer)
    core.barrier_all()
    core.free(buf)
    return True


def test_torch_sources_and_destinations_of_byte_calls():
    assert run_pes(torch_bytes, 2) == [True, True]
