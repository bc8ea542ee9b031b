"""Streams, events and handles."""

import numpy as np
import pytest

import shmem
import shmem.core as core
from pes import run_pes


def stream_ops(rank, n):
    right, left = (rank + 1) % n, (rank - 1) % n
    s = core.create_stream()
    buf = core.buffer(1 << 20)
    src = core.buffer(1 << 20)
    sig = core.calloc(1, 8)
    np.asarray(src)[:] = rank + 1
    core.barrier_all()
    # Symmetric source, then signal: all in stream order.
    core.put(buf, src, right, stream=s)
    core.signal_op(sig, 1, core.SignalOp.SIGNAL_SET, right, stream=s)
    core.signal_wait(sig, 1, core.ComparisonType.CMP_EQ, stream=s)
    s.synchronize()
    assert s.query()
    assert (np.asarray(buf) == left + 1).all()
    core.barrier_all_on_stream(s)
    s.synchronize()
    # Local (numpy) source and destination, put_signal on a stream.
    local = np.full(1 << 20, 50 + rank, np.uint8)
    core.put_signal(buf, local, sig, 2, core.SignalOp.SIGNAL_SET, right, stream=s)
    core.signal_wait(sig, 2, core.ComparisonType.CMP_EQ, stream=s)
    out = np.zeros(16, np.uint8)
    core.get(out, buf, rank, stream=s)
    core.quiet(stream=s)
    core.barrier_on_stream(shmem.TEAM_WORLD, s)
    s.synchronize()
    assert (out == 50 + left).all()
    # Events order one stream after another.
    s2 = core.create_stream()
    ev = core.Event()
    np.asarray(src)[:8] = 9
    core.put(buf, src, rank, stream=s, nbytes=8)
    s.record(ev)
    s2.wait_event(ev)
    got = np.zeros(8, np.uint8)
    core.get(got, buf, rank, stream=s2)
    s2.synchronize()
    ev.synchronize()
    assert ev.query() and (got == 9).all()
    shmem.putmem_on_stream(buf, np.full(4, 1, np.uint8), 4, rank, s)
    shmem.quiet_on_stream(s)
    s.synchronize()
    with pytest.raises(core.ShmemInvalid, match="read-only"):
        core.get(b"ro", buf, 0, stream=s)
    core.barrier_all()
    for b in (buf, src, sig):
        core.free(b)
    return True


def test_stream_ordered_operations():
    assert run_pes(stream_ops, 2) == [True, True]


def stream_error(rank, n):
    s = core.create_stream()
    sig = core.calloc(1, 8)
    core.signal_wait(sig, 1, core.ComparisonType.CMP_EQ, stream=s)  # nobody sets it
    with pytest.raises(core.ShmemError, match=r"stream operation #1 \(signal_wait_until Eq 1\) failed: timed out"):
        s.synchronize()
    core.put(sig, np.ones(1, np.uint64), rank, stream=s)
    s.synchronize()  # the stream is usable afterwards
    assert shmem.signal_fetch(sig) == 1
    core.free(sig)
    return True


def test_stream_errors_surface_at_synchronize():
    assert run_pes(stream_error, 1, env={"SHMEM_WAIT_TIMEOUT": "0.3"}) == [True]


def handles(rank, n):
    right = (rank + 1) % n
    buf = core.buffer(4 << 20)
    core.barrier_all()
    src = np.full(4 << 20, rank + 1, np.uint8)
    h = core.put_handle(buf, src, right)
    del src  # the handle keeps the source alive
    h.wait()
    assert h.done
    core.barrier_all()
    assert (np.asarray(buf) == (rank - 1) % n + 1).all()
    dst = np.zeros(1 << 20, np.uint8)
    h2 = core.get_handle(dst, buf, right)
    shmem.handle_wait(h2)  # the blocking form
    assert (dst == rank + 1).all()
    # Completed in stream order.
    s = core.create_stream()
    dst2 = np.zeros(1 << 20, np.uint8)
    core.handle_wait(core.get_handle(dst2, buf, rank), stream=s)
    s.synchronize()
    assert (dst2 == (rank - 1) % n + 1).all()
    core.barrier_all()
    core.free(buf)
    return True


def test_handles():
    assert run_pes(handles, 2) == [True, True]
