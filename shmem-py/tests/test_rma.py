"""put/get, p/g, strided, non-blocking and typed transfers, atomics."""

import numpy as np
import pytest

import shmem
import shmem.core as core
from pes import run_pes

DTYPES = [np.int8, np.uint16, np.int32, np.int64, np.float32, np.float64]


def put_get(rank, n):
    right, left = (rank + 1) % n, (rank - 1) % n
    for dt in DTYPES:
        buf = core.buffer(64 * np.dtype(dt).itemsize)
        arr = buf.numpy(dt)
        src = (np.arange(64) + rank).astype(dt)
        core.put(buf, src, right)  # Buffer as destination
        core.barrier_all()
        assert (arr == (np.arange(64) + left).astype(dt)).all(), dt
        got = np.empty(64, dt)
        shmem.get(got, arr, right)  # typed view as source (blocking form)
        assert (got == (np.arange(64) + rank).astype(dt)).all()
        core.barrier_all()
        core.free(buf)
    # Sub-ranges through numpy slices, bytes-like sources, nbytes.
    buf = core.buffer(64)
    a = np.asarray(buf)
    a[:] = 0
    core.barrier_all()
    core.put(a[8:16], bytes(range(8)), right)
    core.put(a[16:], bytearray(b"\x07" * 48), right, nbytes=4)
    core.barrier_all()
    assert a[8:16].tolist() == list(range(8)) and a[16:21].tolist() == [7, 7, 7, 7, 0]
    small = np.zeros(4, np.uint8)
    shmem.get(small, buf, right, nbytes=2)
    assert small.tolist() == [0, 0, 0, 0]
    shmem.getmem(small, a[8:], 4, right)
    assert small.tolist() == [0, 1, 2, 3]
    core.barrier_all()
    core.free(buf)
    return True


def test_put_get():
    assert run_pes(put_get, 3) == [True] * 3


def single_and_strided(rank, n):
    right, left = (rank + 1) % n, (rank - 1) % n
    buf = core.buffer(8 * 16)
    v = buf.numpy(np.int64)
    v[:] = 0
    core.barrier_all()
    shmem.p(v[rank:], rank + 1000, right)
    shmem.int64_p(v[8 + rank:], -rank, right)
    core.barrier_all()
    assert v[left] == left + 1000 and v[8 + left] == -left
    assert shmem.g(v[rank:], left) == rank + 1000
    assert shmem.long_g(buf, left) == (1000 if rank == 0 else 0)
    assert isinstance(shmem.g(v, rank), int)
    f = core.buffer(4)
    shmem.float_p(f, 1.5, rank)
    assert shmem.g(f, rank, dtype=np.float32) == 1.5
    core.barrier_all()
    # Strided: every other element of src into every third of dst.
    v[:] = 0
    core.barrier_all()
    shmem.iput(v, np.arange(10, dtype=np.int64), 3, 2, 4, right)
    core.barrier_all()
    assert v[[0, 3, 6, 9]].tolist() == [0, 2, 4, 6] and v[1] == 0
    got = np.zeros(8, np.int64)
    shmem.iget(got, v, 2, 3, 4, rank)
    assert got.tolist() == [0, 0, 2, 0, 4, 0, 6, 0]
    shmem.int32_iput(buf, np.array([5, 6], np.int32), 2, 1, 2, rank)
    assert buf.numpy(np.int32)[[0, 2]].tolist() == [5, 6]
    with pytest.raises(core.ShmemInvalid, match="need 31 elements"):
        shmem.iput(v, np.arange(20, dtype=np.int64), 10, 1, 4, right)
    with pytest.raises(core.ShmemInvalid, match="stride must be at least 1"):
        shmem.iget(got, v, 0, 1, 2, right)
    core.barrier_all()
    core.free(f)
    core.free(buf)
    return True


def numpy_arrays(rank, n):
    """numpy arrays are read from their fields (no buffer export): lengths,
    element types, flags and the cases left to the export must all hold."""
    right, left = (rank + 1) % n, (rank - 1) % n
    buf = core.buffer(256)
    a = np.asarray(buf)
    a[:] = 0
    core.barrier_all()
    # A 2-D C-contiguous source and a 0-d one: their whole bytes move.
    core.put(a[:24], np.arange(6, dtype=np.uint32).reshape(2, 3) + rank, right)
    core.put(buf.numpy(np.int64)[3:4], np.array(rank * 11, np.int64), right)
    # Element types met here first, a non-native byte order and a type the
    # library has no name for (complex): byte copies of the right length.
    core.put(a[32:40], np.array([1, 2], ">i4"), right)
    core.put(a[40:56], np.array([1 + 2j], np.complex128), right)
    core.barrier_all()
    assert (a[:24].view(np.uint32) == np.arange(6) + left).all()
    assert buf.numpy(np.int64)[3] == left * 11
    assert a[32:40].tolist() == [0, 0, 0, 1, 0, 0, 0, 2]
    assert a[40:56].view(np.complex128)[0] == 1 + 2j
    # A typed symmetric view located from its fields: a reduction over it.
    v = buf.numpy(np.uint16)[64:68]
    v[:] = rank + 1
    core.barrier_all()
    shmem.reduce(shmem.TEAM_WORLD, v, v, 4, "sum")
    assert v.tolist() == [n * (n + 1) // 2] * 4
    core.barrier_all()
    # A read-only destination and Fortran-ordered 2-D arrays are refused,
    # with the export's words.
    ro = np.zeros(8, np.uint8)
    ro.setflags(write=False)
    with pytest.raises(core.ShmemInvalid, match="read-only"):
        core.get(ro, buf, right)
    with pytest.raises(core.ShmemInvalid, match="C-contiguous"):
        core.put(a[:16], np.zeros((2, 2), np.int32, order="F"), right)
    with pytest.raises(core.ShmemInvalid, match="C-contiguous"):
        core.put(buf.numpy(np.int32)[:16].reshape(4, 4).T, b"x", right)
    # A writable destination that is not symmetric gets data.
    got = np.zeros(2, np.uint32)
    shmem.get(got, a[:8], right)
    assert got.tolist() == [rank, rank + 1]
    core.barrier_all()
    core.free(buf)
    return True


def test_numpy_arrays_read_from_their_fields():
    assert run_pes(numpy_arrays, 2) == [True, True]


def test_p_g_and_strided():
    assert run_pes(single_and_strided, 2) == [True, True]


def nbi_and_typed(rank, n):
    right, left = (rank + 1) % n, (rank - 1) % n
    buf = core.buffer(4096)
    a = buf.numpy(np.int32)
    a[:] = 0
    core.barrier_all()
    shmem.put_nbi(a[:256], np.full(256, rank + 1, np.int32), right)  # source kept alive until quiet
    shmem.putmem_nbi(a[256:], np.full(4, 9, np.int32), 8, right)
    shmem.quiet()
    core.barrier_all()
    assert (a[:256] == left + 1).all() and a[256:260].tolist() == [9, 9, 0, 0]
    out = np.zeros(256, np.int32)
    shmem.get_nbi(out, a, right)
    shmem.quiet()
    assert (out == rank + 1).all()
    core.barrier_all()
    shmem.int32_put(a[512:], np.arange(4, dtype=np.int32), 3, right)
    shmem.put32(a[600:], np.arange(4, dtype=np.int32), 2, right)
    shmem.put64(buf.numpy(np.int64)[400:], np.array([7, 8], np.int64), 1, right)
    core.barrier_all()
    assert a[512:516].tolist() == [0, 1, 2, 0] and a[600:603].tolist() == [0, 1, 0]
    assert buf.numpy(np.int64)[400:402].tolist() == [7, 0]
    got = np.zeros(3, np.int32)
    shmem.int32_get(got, a[512:], 3, right)
    assert got.tolist() == [0, 1, 2]
    shmem.get16(got.view(np.uint16), a[512:].view(np.uint16), 4, right)
    assert got[:2].tolist() == [0, 1]
    core.barrier_all()
    core.free(buf)
    return True


def test_nbi_and_typed_names():
    assert run_pes(nbi_and_typed, 2) == [True, True]


def atomics(rank, n):
    buf = core.calloc(4, 8)
    c64 = buf.numpy(np.int64)
    c32 = buf.numpy(np.uint32)
    core.barrier_all()
    for _ in range(10):
        shmem.atomic_fetch_add(c64[:1], 1, 0)
        shmem.uint32_atomic_inc(c32[2:], 0)
    shmem.atomic_or(c64[2:], 1 << rank, 0)
    core.barrier_all()
    if rank == 0:
        assert c64[0] == 10 * n and c32[2] == 10 * n and c64[2] == (1 << n) - 1
    assert shmem.atomic_fetch(c64, 0) == 10 * n
    core.barrier_all()
    old = shmem.atomic_compare_swap(c64[3:], 0, rank + 1, 0)
    core.barrier_all()
    winners = shmem.atomic_fetch(c64[3:], 0)
    assert winners in range(1, n + 1) and (old == 0) == (winners == rank + 1)
    core.barrier_all()
    f = core.calloc(1, 8)
    shmem.atomic_set(f, 2.5, rank, dtype=np.float64)
    assert shmem.atomic_swap(f, 3.5, rank, dtype="float64") == 2.5
    assert shmem.double_atomic_fetch(f, rank) == 3.5
    with pytest.raises(core.ShmemInvalid, match="integer element"):
        shmem.atomic_add(f, 1.0, rank, dtype=np.float64)
    with pytest.raises(core.ShmemInvalid, match="misaligned"):
        shmem.atomic_fetch(np.asarray(buf)[1:9].view(np.int64), 0)
    with pytest.raises(core.ShmemInvalid, match="atomics take"):
        shmem.atomic_fetch(np.asarray(buf)[:2].view(np.int16), 0)
    core.barrier_all()
    core.free(f)
    core.free(buf)
    return True


def test_atomics():
    assert run_pes(atomics, 3) == [True] * 3


def rma_errors(rank, n):
    buf = core.buffer(16)
    with pytest.raises(core.ShmemInvalid, match=r"PE 5 is out of range: the job has 2 PEs"):
        core.put(buf, b"x", 5)
    with pytest.raises(core.ShmemInvalid, match="PE -1 is out of range"):
        core.get(bytearray(1), buf, -1)
    with pytest.raises(core.ShmemInvalid, match=r"32 bytes do not fit `dst` \(16 bytes\)"):
        core.put(buf, np.zeros(4), 1 - rank)
    with pytest.raises(core.ShmemInvalid, match="requested but `src` holds 16 bytes"):
        core.get(np.zeros(4), buf, 1 - rank)
    with pytest.raises(core.ShmemInvalid, match="not in a symmetric heap"):
        core.put(np.zeros(2), b"x", 0)
    with pytest.raises(core.ShmemInvalid, match="C-contiguous"):
        core.put(buf, np.zeros(8, np.int8)[::2], 0)
    with pytest.raises(core.ShmemInvalid, match="read-only"):
        core.get(b"immutable!", buf, 0)
    with pytest.raises(TypeError, match="buffer protocol"):
        core.put(buf, 3.14, 0)
    with pytest.raises(core.ShmemInvalid, match="not a stream of this process"):
        core.put(buf, b"x", 0, stream=1234)
    with pytest.raises(TypeError, match="shmem Stream"):
        core.put(buf, b"x", 0, stream=3.5)
    with pytest.raises(core.ShmemInvalid, match="no element type"):
        shmem.p(buf, 1, 0)
    with pytest.raises(OverflowError):
        shmem.p(buf.numpy(np.int8), 1000, 0)
    core.barrier_all()
    core.free(buf)
    return True


def test_rma_errors_are_exceptions():
    assert run_pes(rma_errors, 2) == [True, True]
