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


class _Tagged(torch.Tensor):
    """A tensor subclass: read through its attributes, not torch's C shim."""


def torch_kinds(rank, n):
    import shmem
    import shmem.torch  # noqa: F401  (torch_view)

    peer = (rank + 1) % n
    buf = core.buffer(256)
    sym = shmem._shmem.torch_view(buf)[:256].view(torch.int64)  # 32 symmetric int64
    sym.zero_()
    core.barrier_all()
    base = torch.arange(40, dtype=torch.int64) + 1000 * rank
    # A contiguous slice with a storage offset, a Parameter, a subclass, a
    # zero-element tensor and a 2-D tensor each put their own bytes.
    shmem.put(sym[0:8], base[5:13], peer)
    shmem.put(sym[8:12], torch.nn.Parameter(base[20:24].clone(), requires_grad=False), peer)
    shmem.put(sym[12:16], base[30:34].clone().as_subclass(_Tagged), peer)
    shmem.put(sym[16:20], torch.empty(0, dtype=torch.int64), peer)
    shmem.put(sym[20:26], base[:6].reshape(2, 3), peer)
    core.barrier_all()
    o = 1000 * ((rank - 1) % n)
    want = torch.zeros(32, dtype=torch.int64)
    want[0:8] = torch.arange(5, 13) + o
    want[8:12] = torch.arange(20, 24) + o
    want[12:16] = torch.arange(30, 34) + o
    want[20:26] = torch.arange(0, 6) + o
    assert torch.equal(sym, want), sym
    # Gets into a slice with an offset and into a subclass.
    got = torch.zeros(12, dtype=torch.int64)
    shmem.get(got[4:12], sym[0:8], peer)
    assert got[4:12].tolist() == (torch.arange(5, 13) + 1000 * rank).tolist(), got
    tag = torch.zeros(4, dtype=torch.int64).as_subclass(_Tagged)
    shmem.get(tag, sym[12:16], peer)
    assert tag.tolist() == (torch.arange(30, 34) + 1000 * rank).tolist(), tag
    # Typed calls read the element type the same way: p/g of a float32
    # view, and a reduction over torch tensors.
    f = sym[26:28].view(torch.float32)  # 4 symmetric float32
    core.barrier_all()
    shmem.p(f[1:2], 2.5 + rank, peer)
    core.barrier_all()
    assert f[1].item() == 2.5 + (rank - 1) % n
    assert shmem.g(f[1:2], peer) == 2.5 + rank
    # Refused on either path: strided, sparse, another device.
    for bad in (base[::2], base[::2].as_subclass(_Tagged)):
        with pytest.raises(core.ShmemInvalid, match="contiguous tensor"):
            shmem.put(sym[:4], bad, peer)
    with pytest.raises(Exception, match="(?i)sparse|layout|contiguous"):
        shmem.put(sym[:4], torch.zeros(4).to_sparse(), peer)
    with pytest.raises(core.ShmemInvalid, match="on device"):
        shmem.put(sym[:4], torch.empty(4, device="meta").as_subclass(_Tagged), peer)
    # Plain tensors went through torch's C shim, checked against the
    # attributes on the first one (torch 2.15 exports every function).
    assert shmem._shmem._torch_shim_state() == "agrees"
    # ...and found each tensor inside its Python object instead of reading
    # `_cdata` (the layout learnt from the first tensor).
    assert shmem._shmem._torch_layout() in ("direct", "maybe-owned")
    core.barrier_all()
    core.free(buf)
    return True


def test_torch_tensor_kinds_read_through_shim_and_attributes():
    assert run_pes(torch_kinds, 2) == [True, True]
