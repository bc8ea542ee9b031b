"""The reference's documented calls as written (issue 16): peer views as
put/get targets, integer and default streams, typed enum and PE
arguments, Ctrl-C during blocking calls, and stale views after free."""

import enum
import sys
import threading

import numpy as np
import pytest

import shmem
import shmem.core as core
from pes import run_pes


def reference_snippet(rank, n):
    # As in the reference's docs: a peer view naming the call's PE.
    buf = core.buffer(64)
    arr = buf.numpy(np.int64)
    arr[:] = rank * 100 + np.arange(8)
    core.barrier_all()
    peer = (rank + 1) % n
    peer_buf = core.get_peer_buffer(buf, peer)
    inbox = core.buffer(64)
    core.put(dst=core.get_peer_buffer(inbox, peer), src=buf, remote_pe=peer)
    core.barrier_all()  # drains the default stream first
    left = (rank - 1) % n
    assert inbox.numpy(np.int64).tolist() == [left * 100 + i for i in range(8)]
    got = np.zeros(8, np.int64)
    core.get(dst=got, src=peer_buf, remote_pe=peer)
    core.stream_synchronize(0)
    assert got.tolist() == [peer * 100 + i for i in range(8)]
    h = core.put_handle(peer_buf, np.full(8, 7, np.int64), peer)
    h.wait()
    core.barrier_all()
    assert arr.tolist() == [7] * 8
    if n > 2:
        other = (rank + 2) % n
        with pytest.raises(core.ShmemInvalid, match=f"view of PE {peer}'s memory .* targets PE {other}"):
            core.put(dst=peer_buf, src=buf, remote_pe=other)
    else:
        with pytest.raises(core.ShmemInvalid, match="view of PE"):
            core.put(dst=peer_buf, src=buf, remote_pe=rank)
    # A signal_op / signal_wait pair on the default stream (stream=None or 0).
    sig = core.buffer(8)
    sig.numpy(np.uint64)[:] = 0
    core.barrier_all()
    core.signal_op(sig, 5, core.SignalOp.SIGNAL_SET, peer)
    core.signal_wait(sig, 5, core.ComparisonType.CMP_EQ, stream=0)
    core.stream_synchronize()
    assert sig.numpy(np.uint64)[0] == 5
    core.barrier_all()
    for b in (sig, inbox, buf):
        core.free(b)
    return True


def test_reference_snippet_peer_views_and_default_stream():
    assert run_pes(reference_snippet, 3) == [True] * 3


def test_reference_snippet_with_peers_on_other_nodes():
    # Every peer reached through the ROCE engine, as PEs on other nodes are:
    # their heaps are not mapped here, and peer views still name the objects
    # for the calls to them.
    env = {"SHMEM_TEST_ENGINE": "ROCE", "SHMEM_ROCE_PROVIDER": "sw"}
    assert run_pes(reference_snippet, 3, env=env) == [True] * 3


def stream_ordered(rank, n):
    # A wait enqueued on the default stream returns at once: PE 0 tells PE 1
    # it got past the call (on another stream, not behind the wait), and only
    # then does PE 1 set the signal the wait is for. A blocking wait would
    # never get there.
    sig = core.buffer(8)
    flag = core.buffer(8)
    sig.numpy(np.uint64)[:] = 0
    flag.numpy(np.uint64)[:] = 0
    side = core.create_stream()
    assert isinstance(side.handle, int) and side.handle != 0
    core.barrier_all()
    if rank == 0:
        assert core.signal_wait(sig, 1, core.ComparisonType.CMP_EQ) is None
        core.signal_op(flag, 1, core.SignalOp.SIGNAL_SET, 1, stream=side.handle)
        core.stream_synchronize(0)  # now the wait has been satisfied
        assert sig.numpy(np.uint64)[0] == 1
    else:
        assert shmem.signal_wait(flag, 1, core.ComparisonType.CMP_EQ) == 1  # blocking form
        shmem.signal_op(sig, 1, core.SignalOp.SIGNAL_SET, 0)
    side.synchronize()
    core.barrier_all()
    with pytest.raises(core.ShmemInvalid, match="not a stream of this process"):
        core.put(sig, b"x", 0, stream=side.handle + 1000)
    with pytest.raises(TypeError, match="bool"):
        core.put(sig, b"x", 0, stream=True)
    core.free(flag)
    core.free(sig)
    return True


def test_int_streams_enqueue_and_return():
    assert run_pes(stream_ordered, 2) == [True] * 2


def typed_args(rank, n):
    sig = core.buffer(8)
    with pytest.raises(TypeError, match="ComparisonType"):
        core.signal_wait(sig, 1, core.SignalOp.SIGNAL_ADD)
    with pytest.raises(TypeError, match="ComparisonType"):
        shmem.signal_wait(sig, 1, core.SignalOp.SIGNAL_ADD)
    with pytest.raises(TypeError, match="SignalOp"):
        core.signal_op(sig, 1, core.ComparisonType.CMP_NE, 0)
    with pytest.raises(TypeError, match="SignalOp"):
        shmem.put_signal(sig, b"", sig, 1, True, 0)
    with pytest.raises(TypeError, match="ComparisonType"):
        shmem.wait_until(sig.numpy(np.uint64), core.SignalOp.SIGNAL_SET, 0)
    with pytest.raises(TypeError, match="MemType"):
        core.buffer(8, mem_type=core.SignalOp.SIGNAL_SET)
    # An enum of the same name from another module is refused too.
    class ComparisonType(enum.IntEnum):
        CMP_EQ = 0

    with pytest.raises(TypeError, match="ComparisonType"):
        shmem.signal_wait(sig, 1, ComparisonType.CMP_EQ)
    # documented ints still work
    shmem.signal_op(sig, 3, 0, rank)
    assert shmem.signal_wait(sig, 3, 0) == 3
    # ...and so do the members (a condition already met returns at once).
    shmem.signal_op(sig, 1, core.SignalOp.SIGNAL_ADD, rank)
    assert shmem.signal_wait_until(sig, core.ComparisonType.CMP_EQ, 4) == 4
    shmem.wait_until(sig.numpy(np.uint64), shmem.CMP_GE, 4)
    with pytest.raises(TypeError, match="bool"):
        core.put(sig, b"x", True)
    with pytest.raises(TypeError, match="bool"):
        shmem.p(sig.numpy(np.int64), 1, False)
    with pytest.raises(TypeError, match="bool"):
        core.get_peer_buffer(sig, True)
    # A numpy integer is a PE number; an enum member (an int too) is not.
    shmem.p(sig.numpy(np.int64), 9, np.int32(rank))
    assert shmem.g(sig.numpy(np.int64), np.int64(rank)) == 9
    with pytest.raises(TypeError, match="enum member"):
        shmem.p(sig.numpy(np.int64), 1, core.SignalOp.SIGNAL_SET)
    core.barrier_all()
    core.free(sig)
    return True


def test_enum_and_pe_arguments_are_typed():
    assert run_pes(typed_args, 2) == [True] * 2


def _interrupt_inside(call, real_signal=False):
    """Runs ``call`` with a KeyboardInterrupt arriving while it blocks:
    simulated (``_thread.interrupt_main``, no system call is interrupted),
    or with ``real_signal`` a SIGINT sent to the main thread, as Ctrl-C
    does (it also interrupts the futex the call sleeps on).

    The switch interval is made huge so that the helper thread gets the GIL
    only when the main thread releases it, which it does inside the blocking
    call: the interrupt cannot land before the call starts.
    """
    import _thread
    import signal

    gate = threading.Lock()
    gate.acquire()
    main = threading.main_thread().ident

    def fire():
        with gate:
            if real_signal:
                signal.pthread_kill(main, signal.SIGINT)
            else:
                _thread.interrupt_main()

    old = sys.getswitchinterval()
    sys.setswitchinterval(1000.0)
    t = threading.Thread(target=fire)
    t.start()
    try:
        gate.release()
        call()
    except KeyboardInterrupt:
        return True
    finally:
        sys.setswitchinterval(old)
        t.join()
    return False


def interrupted(rank, n, hand_off):
    # PE 0's instance ends out of step in place, so nothing can be freed.
    sig = core.buffer(8, except_on_del=hand_off)
    go = core.buffer(8, except_on_del=hand_off)
    sig.numpy(np.uint64)[:] = 0
    go.numpy(np.uint64)[:] = 0
    core.barrier_all()
    out = {}
    if rank == 0:
        # Nobody ever sets `sig`: only the interrupt ends these waits.
        out["signal_wait"] = _interrupt_inside(lambda: shmem.signal_wait(sig, 1, core.ComparisonType.CMP_EQ))
        out["wait_until"] = _interrupt_inside(lambda: shmem.wait_until(sig.numpy(np.uint64), core.ComparisonType.CMP_EQ, 1))
        out["signal_wait, SIGINT"] = _interrupt_inside(
            lambda: shmem.signal_wait(sig, 1, core.ComparisonType.CMP_EQ), real_signal=True)
        s = core.create_stream()
        core.signal_wait(sig, 1, core.ComparisonType.CMP_EQ, stream=s)
        out["stream.synchronize"] = _interrupt_inside(s.synchronize)
        # An allocation (handed off in every mode) that PE 1 joins only
        # later: abandoned to its worker, it completes then. A barrier
        # behind it is handed off too (so waiting for it stays
        # interruptible), and the PEs stay in step.
        out["malloc"] = _interrupt_inside(lambda: core.buffer(64, except_on_del=False))
        out["barrier behind it"] = _interrupt_inside(core.barrier_all)
        shmem.signal_op(go, 1, core.SignalOp.SIGNAL_SET, 1)
        core.barrier_all()  # pairs with PE 1's second
        # PE 1 is not in the barrier: only the interrupt ends it here.
        out["barrier"] = _interrupt_inside(core.barrier_all)
        if not hand_off:
            # Interrupted in place: this PE left the barrier half way, so
            # its later collectives refuse to run (they would pair with the
            # wrong call of PE 1's); puts, signals and waits still work.
            for call in (core.barrier_all, lambda: core.free(go),
                         lambda: shmem.reduce(shmem.TEAM_WORLD, go.numpy(np.int64), sig.numpy(np.int64), 1, "sum")):
                with pytest.raises(core.ShmemError, match="out of step.*interrupted.*finalize"):
                    call()
            out["out of step"] = True
        shmem.signal_op(go, 2, core.SignalOp.SIGNAL_SET, 1)
        shmem.signal_op(sig, 1, core.SignalOp.SIGNAL_SET, 0)  # lets the stream finish
        s.synchronize()
    else:
        shmem.signal_wait(go, 1, core.ComparisonType.CMP_EQ)
        core.buffer(64, except_on_del=False)  # pairs with PE 0's interrupted allocation
        core.barrier_all()  # with its barrier behind it
        core.barrier_all()
        shmem.signal_wait(go, 2, core.ComparisonType.CMP_EQ)
    if hand_off:
        if rank == 1:
            core.barrier_all()  # pairs with PE 0's barrier, which completes in the background
        # The next one runs after it on PE 0.
        core.barrier_all()
        core.free(go)
        core.free(sig)
    # Else both finalize: PE 0's instance is out of step, and finalize
    # still leaves the job.
    return out


@pytest.mark.parametrize("hand_off", [False, True], ids=["in place", "SHMEM_PY_HAND_OFF=1"])
def test_blocking_calls_raise_keyboard_interrupt(hand_off):
    env = {"SHMEM_PY_HAND_OFF": "1"} if hand_off else {}
    out = run_pes(interrupted, 2, hand_off, env=env)
    want = {"signal_wait": True, "wait_until": True, "signal_wait, SIGINT": True, "stream.synchronize": True,
            "malloc": True, "barrier behind it": True, "barrier": True}
    if not hand_off:
        want["out of step"] = True
    assert out[0] == want


def interrupted_over_libfabric(rank, n):
    sig = core.buffer(8)
    sig.numpy(np.uint64)[:] = 0
    core.barrier_all()
    ok = True
    if rank == 0:
        ok = _interrupt_inside(lambda: shmem.signal_wait(sig, 1, core.ComparisonType.CMP_EQ), real_signal=True)
    core.barrier_all()
    core.free(sig)
    return ok


def test_ctrl_c_still_interrupts_once_libfabric_is_loaded():
    """Debian's libfabric links PSM, whose libinfinipath replaces the SIGINT
    handler when it is loaded (with one that exits with status 1); the
    library puts Python's back, so Ctrl-C still raises KeyboardInterrupt."""
    import ctypes.util
    import os

    if ctypes.util.find_library("fabric") is None:
        assert not os.environ.get("CI"), "CI must run this test with libfabric installed"
        pytest.skip("libfabric is not installed")
    env = {"SHMEM_TEST_ENGINE": "ROCE", "SHMEM_ROCE_PROVIDER": "ofi", "FI_PROVIDER": "tcp"}
    assert run_pes(interrupted_over_libfabric, 2, env=env) == [True, True]


def interrupted_init(rank, n, uid):
    # rank 0 of a 2-PE job whose rank 1 never comes: init retries until interrupted.
    ok = _interrupt_inside(lambda: core.init(uid=uid, rank=0, nranks=2, mem_size=1 << 20,
                                             initializer_method="uid"))
    return ok


def test_init_is_interruptible():
    assert run_pes(_init_body, 1, method="none") == [True]


def _init_body(rank, n):
    return interrupted_init(rank, n, core.get_unique_id())


def stale_views(rank, n):
    peer = (rank + 1) % n
    buf = core.buffer(64)
    stale = buf.numpy(np.int64)
    raw = np.asarray(buf)
    core.free(buf)
    fresh = core.buffer(64)  # same size: same heap offset
    assert fresh.offset == buf.offset
    fresh.numpy(np.int64)[:] = 11
    core.barrier_all()
    with pytest.raises(core.ShmemError, match="freed"):
        core.put(stale, np.full(8, 4242, np.int64), peer)
    with pytest.raises(core.ShmemError, match="freed"):
        shmem.put(raw[8:16], np.full(8, 7, np.uint8), peer)
    with pytest.raises(core.ShmemError, match="freed"):
        shmem.get(stale, fresh, peer)  # as a local destination
    with pytest.raises(core.ShmemError, match="freed"):
        shmem.p(stale[3:4], 777, peer)
    # A view of the new Buffer is fine.
    shmem.put(fresh.numpy(np.int64)[:1], np.array([5], np.int64), peer)
    core.barrier_all()
    assert fresh.numpy(np.int64).tolist() == [5] + [11] * 7
    del stale, raw
    core.barrier_all()
    core.free(fresh)
    return True


def test_stale_view_after_free_and_remalloc_is_an_error():
    assert run_pes(stale_views, 2) == [True] * 2
