"""Symmetric buffers: allocation, numpy/DLPack views, free, peer views."""

import gc
import sys

import numpy as np
import pytest

import shmem
import shmem.core as core
from pes import run_pes


def buffers(rank, n):
    buf = core.buffer(1024)
    assert (buf.length, len(buf), buf.offset % 64, buf.pe) == (1024, 1024, 0, rank)
    assert buf.mem_type == core.MemType.DEVICE_SIDE
    host = core.buffer(64, mem_type=core.MemType.HOST_SIDE)
    assert host.mem_type == core.MemType.HOST_SIDE
    # numpy views the same memory, writable, without a copy.
    a = np.asarray(buf)
    assert (a.dtype, a.shape, a.flags.writeable) == (np.uint8, (1024,), True)
    assert a.ctypes.data == buf.addr
    a[:] = rank
    assert np.from_dlpack(buf).ctypes.data == buf.addr
    assert buf.__array_interface__["data"] == (buf.addr, False)
    assert buf.__dlpack_device__() == (1, 0)
    for kw in ({}, {"max_version": (1, 0)}):
        cap = buf.__dlpack__(**kw)  # an unconsumed capsule frees its tensor
        del cap
    with pytest.raises(BufferError, match="without a copy"):
        buf.__dlpack__(copy=True)
    with pytest.raises(BufferError, match="CPU device"):
        buf.__dlpack__(dl_device=(2, 0))
    f = buf.numpy(np.float32, (16, 16))
    assert f.shape == (16, 16) and f.ctypes.data == buf.addr
    # Every PE's buffer sits at the same heap offset.
    offsets = core.buffer(8 * n)
    offsets.numpy(np.int64)[:] = 0
    core.barrier_all()
    core.put(offsets.numpy(np.int64)[rank:rank + 1], np.array([buf.offset]), 0)
    core.barrier_all()
    if rank == 0:
        assert len(set(offsets.numpy(np.int64).tolist())) == 1
    z = core.calloc(16, 4)
    assert not np.asarray(z).any() and z.length == 64
    al = core.align(4096, 100)
    assert al.offset % 4096 == 0
    with pytest.raises(core.ShmemInvalid, match="power of two"):
        core.align(100, 8)
    for b in (buf, host, offsets, z, al):
        core.free(b)
    return True


def test_buffers_and_views():
    assert run_pes(buffers, 2) == [True, True]


def double_free(rank, n):
    buf = core.buffer(64)
    view = np.asarray(buf)
    core.free(buf)
    assert buf.freed
    with pytest.raises(core.ShmemError, match=r"double free: Buffer of 64 bytes at heap offset 0x[0-9a-f]+ on PE \d"):
        core.free(buf)
    with pytest.raises(core.ShmemError, match="has been freed"):
        np.asarray(buf)
    with pytest.raises(core.ShmemError, match="has been freed"):
        core.put(buf, b"x", 0)
    view[0] = 1  # a stale view stays mapped: wrong data, no crash
    with pytest.raises(TypeError, match="shmem Buffer"):
        core.free(view)
    # The library is still consistent afterwards.
    again = core.buffer(64)
    core.free(again)
    return True


def test_double_free_raises():
    assert run_pes(double_free, 2) == [True, True]


def peers(rank, n):
    buf = core.buffer(8 * n)
    buf.numpy(np.int64)[:] = -1
    core.barrier_all()
    right = (rank + 1) % n
    peer = core.get_peer_buffer(buf, right)
    assert peer.is_peer and peer.pe == right and peer.offset == buf.offset and peer.addr != buf.addr
    peer.numpy(np.int64)[rank] = rank  # a store straight into the neighbour's heap
    assert shmem.ptr(buf, right) == peer.addr
    assert shmem.ptr(buf, rank) == buf.addr
    core.barrier_all()
    got = buf.numpy(np.int64).tolist()
    with pytest.raises(core.ShmemInvalid, match="view of PE"):
        core.free(peer)
    with pytest.raises(core.ShmemInvalid, match="view of PE"):
        shmem.put(peer, b"x", (right + 1) % n)  # a view of another PE than the call's
    with pytest.raises(core.ShmemInvalid, match="out of range"):
        core.get_peer_buffer(buf, n)
    core.free(buf)
    with pytest.raises(core.ShmemError, match="freed"):
        np.asarray(peer)
    return got[(rank - 1) % n]


def test_peer_buffers():
    assert run_pes(peers, 3) == [2, 0, 1]


def unmapped_peers(rank, n):
    buf = core.buffer(64)
    buf.numpy(np.int64)[:] = rank
    core.barrier_all()
    right = (rank + 1) % n
    peer = core.get_peer_buffer(buf, right)
    assert peer.is_peer and peer.pe == right and peer.offset == buf.offset and len(peer) == 64
    assert shmem.ptr(buf, right) is None
    # No memory to view or address here.
    for touch in (lambda: memoryview(peer), lambda: peer.numpy(np.int64), lambda: peer.addr,
                  lambda: peer.__array_interface__, lambda: peer.__dlpack__(),
                  lambda: shmem.put(buf, peer, right)):  # as a local source
        with pytest.raises(core.ShmemError, match=f"heap is not mapped into PE {rank} \\(engine ROCE\\)"):
            touch()
    # It names the object for calls to its PE.
    got = np.zeros(8, np.int64)
    shmem.get(got, peer, right)
    assert got.tolist() == [right] * 8
    core.barrier_all()
    shmem.put(peer, np.full(8, 10 + rank, np.int64), right)
    core.barrier_all()
    assert buf.numpy(np.int64).tolist() == [10 + (rank - 1) % n] * 8
    with pytest.raises(core.ShmemInvalid, match="view of PE"):
        shmem.put(peer, b"x", (right + 1) % n)
    core.barrier_all()
    core.free(buf)
    return True


def test_peer_views_of_unmapped_heaps():
    env = {"SHMEM_TEST_ENGINE": "ROCE", "SHMEM_ROCE_PROVIDER": "sw"}
    assert run_pes(unmapped_peers, 3, env=env) == [True] * 3


def leaks(rank, n):
    caught = []
    old = sys.unraisablehook
    sys.unraisablehook = lambda u: caught.append(str(u.exc_value))
    try:
        b = core.buffer(32)
        del b
        gc.collect()
        quiet = core.buffer(32, release=True)
        del quiet
        quiet2 = core.buffer(32, except_on_del=False)
        del quiet2
        gc.collect()
    finally:
        sys.unraisablehook = old
    assert len(caught) == 1, caught
    assert "garbage-collected without free()" in caught[0] and "32 bytes" in caught[0]
    return True


def test_unfreed_buffer_is_reported():
    assert run_pes(leaks, 1) == [True]


def exhaustion_and_mismatch(rank, n):
    with pytest.raises(core.ShmemError, match="symmetric heap exhausted: asked for"):
        core.buffer(1 << 40)
    with pytest.raises(core.ShmemError, match="different arguments"):
        core.buffer(64 * (rank + 1))
    ok = core.buffer(64)
    core.free(ok)
    return True


def test_heap_exhaustion_and_collective_mismatch():
    assert run_pes(exhaustion_and_mismatch, 2) == [True, True]
