"""Teams and collectives."""

import numpy as np
import pytest

import shmem
import shmem.core as core
from pes import run_pes


def collectives(rank, n):
    W = shmem.TEAM_WORLD
    src = core.buffer(8 * 64)
    dst = core.buffer(8 * 64 * n)
    s, d = src.numpy(np.int64), dst.numpy(np.int64)
    s[:] = np.arange(64) + 100 * rank
    core.barrier_all()
    shmem.broadcast(W, d, s, 64, root=1)
    assert (d[:64] == np.arange(64) + 100).all()
    shmem.fcollect(W, d, s[:8])
    assert d[:8 * n].tolist() == [i * 100 + j for i in range(n) for j in range(8)]
    shmem.alltoall(W, d, s, 2)
    # Block j of PE i's source (2 elements) lands in block i of PE j's dest.
    assert d[:2 * n].tolist() == [i * 100 + 2 * rank + k for i in range(n) for k in range(2)]
    total = shmem.collect(W, d, s[:rank + 1])
    assert total == n * (n + 1) // 2
    assert d[:total].tolist() == [i * 100 + j for i in range(n) for j in range(i + 1)]
    # Reductions over dtypes, in place too.
    for dt in (np.int32, np.int64, np.float32, np.float64, np.uint8):
        a = src.numpy(dt)[:8]
        r = dst.numpy(dt)[:8]
        a[:] = np.arange(8) + rank
        shmem.sum_reduce(W, r, a)
        assert (r == sum(np.arange(8) + i for i in range(n)).astype(dt)).all(), dt
        shmem.max_reduce(W, r, a)
        assert (r == np.arange(8) + n - 1).all()
        shmem.min_reduce(W, r, a, 4)
        assert (r[:4] == np.arange(4)).all()
        shmem.reduce(W, a, a, op="prod")
        assert a[1] == np.prod([1 + i for i in range(n)]).astype(dt)
    b = src.numpy(np.uint32)[:2]
    b[:] = [1 << rank, 0xFF]
    shmem.or_reduce(W, dst.numpy(np.uint32)[:2], b)
    assert dst.numpy(np.uint32)[0] == (1 << n) - 1
    shmem.xor_reduce(W, dst.numpy(np.uint32)[:2], b)
    assert dst.numpy(np.uint32)[1] == (0xFF if n % 2 else 0)
    shmem.int32_and_reduce(W, dst, b.view(np.int32))
    assert dst.numpy(np.int32)[1] == 0xFF
    with pytest.raises(core.ShmemInvalid, match="integer type"):
        shmem.and_reduce(W, dst.numpy(np.float64)[:1], src.numpy(np.float64)[:1])
    # Scans.
    x = src.numpy(np.int64)[:3]
    x[:] = rank + 1
    shmem.sum_inscan(W, d[:3], x)
    assert d[:3].tolist() == [(rank + 1) * (rank + 2) // 2] * 3
    shmem.sum_exscan(W, d[:3], x)
    assert d[:3].tolist() == [rank * (rank + 1) // 2] * 3
    # Byte forms and Buffer arguments.
    np.asarray(src)[:4] = rank
    shmem.fcollectmem(W, dst, src, 4)
    assert np.asarray(dst)[:4 * n].tolist() == [i for i in range(n) for _ in range(4)]
    core.barrier_all()
    core.sync_all()
    core.free(dst)
    core.free(src)
    return True


def test_collectives():
    assert run_pes(collectives, 3) == [True] * 3


def teams(rank, n):
    world = shmem.team_world()
    assert (world.my_pe(), world.n_pes()) == (rank, n)
    evens = shmem.team_split_strided(shmem.TEAM_WORLD, 0, 2, (n + 1) // 2)
    if rank % 2:
        assert evens is None
    else:
        assert evens.my_pe() == rank // 2 and evens.members == list(range(0, n, 2))
        assert shmem.team_translate_pe(evens, 1, shmem.TEAM_WORLD) == 2
        assert shmem.team_translate_pe(shmem.TEAM_WORLD, 1, evens) == -1
        assert core.team_my_pe(evens) == rank // 2 and core.team_n_pes(evens) == len(evens.members)
        buf = None
    buf = core.buffer(8 * n)
    v = buf.numpy(np.int64)
    v[:] = rank
    if evens is not None:
        shmem.sum_reduce(evens, v[1:2], v[:1])
        assert v[1] == sum(range(0, n, 2))
        core.barrier(evens)
        shmem.team_destroy(evens)
        assert evens.destroyed
        with pytest.raises(core.ShmemInvalid, match="destroyed"):
            core.barrier(evens)
    row, col = shmem.team_split_2d(shmem.TEAM_WORLD, 2)
    assert row.members == [m for m in range(n) if m // 2 == rank // 2]
    assert col.members == [m for m in range(n) if m % 2 == rank % 2]
    shmem.fcollect(col, v[:col.n_pes()], v[n - 1:n])
    assert v[:col.n_pes()].tolist() == col.members
    shmem.team_destroy(row)
    shmem.team_destroy(col)
    with pytest.raises(core.ShmemInvalid, match="cannot be destroyed"):
        shmem.team_destroy(world)
    with pytest.raises(core.ShmemInvalid, match="outside the parent team"):
        shmem.team_split_strided(None, 0, 1, n + 1)
    shared = shmem.team_shared()
    assert shared.n_pes() == n and core.team_n_pes(shmem.TEAM_SHARED) == n
    core.barrier_all()
    core.free(buf)
    return True


def test_teams():
    assert run_pes(teams, 4) == [True] * 4


def mismatch(rank, n):
    src = core.buffer(64)
    dst = core.buffer(64 * n)
    with pytest.raises(core.ShmemError, match="fcollect.*different arguments"):
        shmem.fcollect(None, dst.numpy(np.int64), src.numpy(np.int64), 2 + rank)
    with pytest.raises(core.ShmemInvalid, match="holds 8 elements, the call needs 9"):
        shmem.broadcast(None, dst.numpy(np.int64)[:8], src.numpy(np.int64), 9)
    for _ in range(2):  # the second time from the dtypes seen before (memory.rs)
        with pytest.raises(core.ShmemInvalid, match="dest is int64 but source is float64"):
            shmem.broadcast(None, dst.numpy(np.int64), src.numpy(np.float64))
        with pytest.raises(core.ShmemInvalid, match="reduce needs typed arrays or dtype="):
            shmem.reduce(None, dst.numpy(">i8")[:1], src.numpy(">i8")[:1], 1, "sum")
    # Same size, other type: reduced as what it is.
    f, i = src.numpy(np.float64)[:1], src.numpy(np.int64)[1:2]
    f[:] = 0.5
    i[:] = 3
    shmem.reduce(None, dst.numpy(np.float64)[:1], f, 1, "sum")
    shmem.reduce(None, dst.numpy(np.int64)[1:2], i, 1, "sum")
    assert dst.numpy(np.float64)[0] == 0.5 * n and dst.numpy(np.int64)[1] == 3 * n
    shmem.barrier_all()  # still in step afterwards
    core.free(dst)
    core.free(src)
    return True


def test_collective_errors_reach_every_pe():
    assert run_pes(mismatch, 2) == [True, True]


def kv(rank, n):
    blocks, heads, page, dim = 4, 2, 3, 5
    shape = (blocks, heads, page, dim)
    nbytes = int(np.prod(shape)) * 2
    kb, vb = core.buffer(nbytes), core.buffer(nbytes)
    k, v = kb.numpy(np.float16, shape), vb.numpy(np.float16, shape)
    k[:] = rank * 10 + np.arange(blocks)[:, None, None, None]
    v[:] = -k
    table = [[1, 0], [0, 1]] + [[-1, 0]] * (n - 2)  # PE 0 sends to PE 1
    core.barrier_all()
    shmem._n.kv_shuffle(table, k, v, shape, [0, 2], [3, 1])
    if rank == 1:
        assert (k[3] == 0).all() and (k[1] == 2).all() and (v[1] == -2).all()
        assert (k[0] == 10).all() and (k[2] == 12).all()
    else:
        assert (k == rank * 10 + np.arange(blocks)[:, None, None, None]).all()
    with pytest.raises(core.ShmemInvalid, match="shuffle_table"):
        shmem._n.kv_shuffle([[1, 0], [1, 1]] + [[-1, 0]] * (n - 2), k, v, shape, [0], [0])
    core.barrier_all()
    core.free(kb)
    core.free(vb)
    return True


def test_kv_shuffle_on_numpy():
    assert run_pes(kv, 3) == [True] * 3


def on_the_calling_thread(rank, n):
    """Collectives, signal waits and a wait that times out (see
    ``blocking.rs`` for how each mode runs them)."""
    from test_signals import signalled_ring

    assert collectives(rank, n)
    assert signalled_ring(rank, n)
    sig = core.calloc(1, 8)
    core.barrier_all()
    # Nobody signals: SHMEM_WAIT_TIMEOUT (2 s here) still ends the wait.
    with pytest.raises(core.ShmemError, match="timed out"):
        shmem.signal_wait(sig, 1, core.ComparisonType.CMP_EQ)
    core.barrier_all()
    core.free(sig)
    return True


def from_a_thread(rank, n):
    """``on_the_calling_thread`` on a thread that is not Python's main one
    (whose blocking calls never hand off: no signal handler runs there)."""
    import threading

    out = {}

    def body():
        try:
            out["ok"] = on_the_calling_thread(rank, n)
        except BaseException as e:  # noqa: BLE001 - re-raised on the main thread
            out["error"] = e

    t = threading.Thread(target=body)
    t.start()
    t.join(50)
    assert not t.is_alive(), "the PE's thread did not finish"
    if "error" in out:
        raise out["error"]
    return out["ok"]


@pytest.mark.parametrize("how", ["SHMEM_PY_INTERRUPTIBLE=0", "another thread", "SHMEM_PY_HAND_OFF=1"])
def test_blocking_calls_in_every_mode(how):
    """Every other test runs the default (waits and collectives in place,
    interruptible); here the same calls without interruption, on a thread
    other than the main one, and all handed off to worker threads."""
    env = {"SHMEM_WAIT_TIMEOUT": "2"}
    if how == "another thread":
        assert run_pes(from_a_thread, 3, env=env) == [True] * 3
    else:
        name, value = how.split("=")
        env[name] = value
        assert run_pes(on_the_calling_thread, 3, env=env) == [True] * 3
