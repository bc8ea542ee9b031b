"""Failures become exceptions with clear messages, never a dead interpreter."""

import os

import numpy as np
import pytest

import shmem
import shmem.core as core
from pes import run_pes


def peer_dies(rank, n):
    if rank == 1:
        os._exit(7)  # dies without finalize
    with pytest.raises(core.ShmemError, match="PE 1 exited"):
        core.barrier_all()
    with pytest.raises(core.ShmemError, match="PE 1 exited"):
        core.finalize()
    assert core.init_status() == core.InitStatus.NOT_INITIALIZED
    core.init(mem_size="4M")  # the interpreter is alive and can start over
    core.finalize()
    return True


def test_dead_peer_is_reported_not_hung():
    assert run_pes(peer_dies, 2, expect_fail=(1,), timeout=30)[0] is True


def before_init(rank, n):
    for call in (lambda: core.my_pe(), lambda: core.buffer(8), lambda: core.barrier_all(),
                 lambda: core.create_stream(), lambda: shmem.team_world(), lambda: core.quiet()):
        with pytest.raises(core.ShmemError, match="not initialized"):
            call()
    return True


def test_calls_before_init_raise():
    assert run_pes(before_init, 1, method="none") == [True]


def after_finalize(rank, n):
    buf = core.buffer(64, except_on_del=False)
    view = np.asarray(buf)
    s = core.create_stream()
    core.finalize()
    view[:] = 1  # the mapping outlives finalize: no crash
    with pytest.raises(core.ShmemError, match="not initialized"):
        core.put(buf, b"x", 0)
    with pytest.raises(core.ShmemError, match="not initialized"):
        core.barrier_all()
    del s
    return True


def test_use_after_finalize_raises():
    assert run_pes(after_finalize, 2) == [True, True]
