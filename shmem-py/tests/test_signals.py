"""put_signal, signal_op, signal_wait and the wait_until / test family."""

import numpy as np
import pytest

import shmem
import shmem.core as core
from pes import run_pes


def signalled_ring(rank, n):
    right, left = (rank + 1) % n, (rank - 1) % n
    data = core.buffer(1024)
    sig = core.calloc(1, 8)
    core.barrier_all()
    for it in range(1, 6):
        payload = np.full(1024, (rank * 10 + it) % 256, np.uint8)
        core.put_signal(data, payload, sig, 1, core.SignalOp.SIGNAL_ADD, right)
        assert shmem.signal_wait(sig, it, core.ComparisonType.CMP_GE) == it
        assert (np.asarray(data) == (left * 10 + it) % 256).all()
        core.barrier_all()  # the next round's put must not overwrite data still being read
    core.signal_op(sig, 0, core.SignalOp.SIGNAL_SET, right)
    core.barrier_all()
    assert shmem.signal_fetch(sig) == 0
    core.barrier_all()  # everyone has read its 0 before the next signal arrives
    # putmem_signal with a byte count, and the nbi form.
    shmem.putmem_signal(data, np.full(16, 3, np.uint8), 8, sig, 7, shmem.SIGNAL_SET, right)
    assert shmem.signal_wait_until(sig, shmem.CMP_EQ, 7) == 7
    assert np.asarray(data)[:9].tolist() == [3] * 8 + [(left * 10 + 5) % 256]
    core.barrier_all()
    shmem.put_signal_nbi(data, np.full(4, 4, np.uint8), sig, 8, shmem.SIGNAL_SET, right)
    shmem.quiet()
    assert shmem.signal_wait(sig, 8, core.ComparisonType.CMP_EQ) == 8
    core.barrier_all()
    with pytest.raises(core.ShmemInvalid, match="uint64 signal"):
        core.signal_op(np.asarray(data)[:4], 1, core.SignalOp.SIGNAL_SET, 0)
    with pytest.raises(core.ShmemInvalid, match="not a SignalOp"):
        core.signal_op(sig, 1, 7, 0)
    with pytest.raises(core.ShmemInvalid, match="not a ComparisonType"):
        core.signal_wait(sig, 1, 9)
    core.free(sig)
    core.free(data)
    return True


def test_put_signal_and_waits():
    assert run_pes(signalled_ring, 3) == [True] * 3


def wait_family(rank, n):
    flags = core.calloc(n, 8)
    f = flags.numpy(np.int64)
    core.barrier_all()
    # Everyone sets its own slot on every PE; each waits for all slots.
    for pe in range(n):
        shmem.atomic_set(f[rank:], rank + 1, pe)
    shmem.wait_until_all(f, shmem.CMP_GT, 0)
    assert f.tolist() == list(range(1, n + 1))
    assert shmem.test_all(f, shmem.CMP_GT, 0)
    assert shmem.test_all_vector(f, shmem.CMP_EQ, list(range(1, n + 1)))
    assert not shmem.test_all_vector(f, shmem.CMP_EQ, [0] * n)
    assert shmem.test_any(f, shmem.CMP_EQ, 2) == 1
    assert shmem.test_any(f, shmem.CMP_EQ, 99) is None
    assert shmem.test_some(f, shmem.CMP_GE, 2) == list(range(1, n))
    assert shmem.wait_until_any(f, shmem.CMP_EQ, 1) == 0
    assert shmem.wait_until_some_vector(f, shmem.CMP_EQ, [1, 0, 3][:n]) == [0] + ([2] if n > 2 else [])
    # A masked variable is ignored (status true = skip).
    status = [False] * n
    status[0] = True
    assert shmem.test_all(f, shmem.CMP_GT, 1, status=status)
    assert shmem.wait_until_any(f, shmem.CMP_GT, 0, status=[True] * n) is None
    shmem.wait_until(f[1:], shmem.CMP_EQ, 2)
    assert shmem.test(f, shmem.CMP_NE, 0)
    assert shmem.int64_test(f, shmem.CMP_EQ, 1)
    with pytest.raises(core.ShmemInvalid, match="status has"):
        shmem.test_all(f, shmem.CMP_EQ, 0, status=[True])
    with pytest.raises(core.ShmemInvalid, match="cmp_values has"):
        shmem.test_all_vector(f, shmem.CMP_EQ, [1])
    with pytest.raises(core.ShmemInvalid, match="watch int16"):
        shmem.wait_until(flags.numpy(np.float64), shmem.CMP_EQ, 0)
    core.barrier_all()
    core.free(flags)
    return True


def test_wait_until_and_test_family():
    assert run_pes(wait_family, 3) == [True] * 3


def gil_released(rank, n):
    import threading

    sig = core.calloc(1, 8)
    started = threading.Event()
    seen = []

    def waiter():
        started.set()
        seen.append(shmem.signal_wait(sig, 1, core.ComparisonType.CMP_EQ))

    t = threading.Thread(target=waiter)
    t.start()
    started.wait()
    # If signal_wait held the GIL, this thread could not run and the wait
    # would time out (SHMEM_WAIT_TIMEOUT) instead of seeing the signal.
    core.signal_op(sig, 1, core.SignalOp.SIGNAL_SET, rank)
    t.join(30)
    assert seen == [1]
    core.free(sig)
    return True


def test_waits_release_the_gil():
    assert run_pes(gil_released, 1, env={"SHMEM_WAIT_TIMEOUT": "10"}) == [True]
