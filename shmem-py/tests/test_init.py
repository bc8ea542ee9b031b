"""Ways to join a job, instances, and what happens around init/finalize."""

import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import shmem
import shmem.core as core
from pes import PE_ENV, free_port, run_pes


def ring(rank, n):
    buf = core.buffer(8 * n)
    arr = buf.numpy(np.int64)
    for pe in range(n):
        core.put(arr[rank:rank + 1], np.array([rank * 10], dtype=np.int64), pe)
    core.barrier_all()
    out = arr.tolist()
    core.free(buf)
    assert core.direct.my_pe() == rank and core.direct.n_pes() == n
    assert core.init_status() == core.InitStatus.INITIALIZED
    return out


def test_uid_init():
    assert run_pes(ring, 2, method="uid") == [[0, 10]] * 2


def test_attr_init():
    assert run_pes(ring, 3, method="attr") == [[0, 10, 20]] * 3


SCRIPT = textwrap.dedent("""
    import numpy as np, shmem
    shmem.init()
    me, n = shmem.my_pe(), shmem.n_pes()
    buf = shmem.malloc(8 * n)
    arr = buf.numpy(np.int64)
    shmem.int64_put(arr[me:], np.array([me + 100]), 1, (me + 1) % n)
    shmem.barrier_all()
    assert arr[(me - 1) % n] == (me - 1) % n + 100, arr
    shmem.free(buf)
    shmem.finalize()
    print(f"PE {me} of {n} ok")
""")


def test_launcher_env_via_shmem_run(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    r = subprocess.run(
        [sys.executable, "-m", "shmem.run", "-n", "3", "--timeout", "60", str(script)],
        capture_output=True, text=True, timeout=90, env=dict(os.environ, **PE_ENV),
    )
    assert r.returncode == 0, r.stderr
    assert sorted(re.findall(r"PE \d of 3 ok", r.stdout)) == [f"PE {i} of 3 ok" for i in range(3)]


def test_launcher_reports_failing_pe(tmp_path):
    script = tmp_path / "fail.py"
    script.write_text(textwrap.dedent("""
        import sys, shmem
        shmem.init()
        if shmem.my_pe() == 1:
            sys.exit(3)
        shmem.barrier_all()
    """))
    r = subprocess.run(
        [sys.executable, "-m", "shmem.run", "-n", "2", "--timeout", "60", str(script)],
        capture_output=True, text=True, timeout=90, env=dict(os.environ, **PE_ENV),
    )
    assert r.returncode == 3
    assert "PE 1 exited with code 3" in r.stderr


def _shmemrun():
    here = os.path.dirname(os.path.abspath(__file__))
    for p in ("../../target/release/shmemrun", "../../target/debug/shmemrun"):
        path = os.path.normpath(os.path.join(here, p))
        if os.path.exists(path):
            return path
    return None


@pytest.mark.skipif(_shmemrun() is None, reason="the shmemrun binary is not built (cargo build -p shmem-launch)")
def test_launcher_env_via_shmemrun_binary(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    r = subprocess.run(
        [_shmemrun(), "-n", "2", "--timeout", "60", sys.executable, str(script)],
        capture_output=True, text=True, timeout=90, env=dict(os.environ, **PE_ENV),
    )
    assert r.returncode == 0, r.stderr
    assert sorted(re.findall(r"PE \d of 2 ok", r.stdout)) == [f"PE {i} of 2 ok" for i in range(2)]


def test_torchrun_env(tmp_path):
    """torchrun's variables alone (RANK, WORLD_SIZE, MASTER_ADDR/PORT) are enough."""
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    port, store_port = free_port(), free_port()
    procs = []
    for rank in range(2):
        env = dict(os.environ, **PE_ENV, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), SHMEM_BOOTSTRAP_PORT=str(store_port))
        procs.append(subprocess.Popen([sys.executable, str(script)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=60)
        finally:
            p.kill()
        assert p.returncode == 0, err
        outs.append(out.strip())
    assert sorted(outs) == ["PE 0 of 2 ok", "PE 1 of 2 ok"]


def single_pe_default(rank, n):
    core.init(mem_size="16M")
    assert (core.my_pe(), core.n_pes()) == (0, 1)
    buf = core.calloc(4, 8)
    assert not np.asarray(buf).any()
    core.free(buf)
    core.finalize()
    assert core.init_status() == core.InitStatus.NOT_INITIALIZED
    with pytest.raises(core.ShmemError, match="not initialized"):
        core.my_pe()
    with pytest.raises(core.ShmemError, match="not initialized"):
        core.buffer(8)
    with pytest.raises(core.ShmemError):
        core.finalize()
    return True


def test_no_launcher_is_a_single_pe():
    assert run_pes(single_pe_default, 1, method="none") == [True]


def init_errors(rank, n):
    with pytest.raises(core.ShmemInvalid, match="missing: uid, rank, nranks, mem_size"):
        core.init(initializer_method="uid")
    with pytest.raises(core.ShmemInvalid, match="missing: mem_size"):
        core.init(initializer_method="uid", uid=core.get_unique_id(empty=True), rank=0, nranks=1)
    with pytest.raises(core.ShmemInvalid, match="UniqueId"):
        core.init(initializer_method="uid", uid=b"garbage", rank=0, nranks=1, mem_size=1 << 20)
    with pytest.raises(core.ShmemInvalid, match="bad magic"):
        core.init(initializer_method="uid", uid=core.get_unique_id(empty=True), rank=0, nranks=1, mem_size=1 << 20)
    with pytest.raises(core.ShmemInvalid, match="missing: url"):
        core.init(initializer_method="attr", rank=0, nranks=1)
    with pytest.raises(core.ShmemInvalid, match="unknown initializer_method"):
        core.init(initializer_method="carrier-pigeon")
    with pytest.raises(core.ShmemInvalid, match="mem_size"):
        core.init(mem_size=-5)
    with pytest.raises(core.ShmemInvalid, match="rank"):
        core.init(initializer_method="uid", uid=core.get_unique_id(), rank=3, nranks=2, mem_size=1 << 20)
    assert len(core.get_unique_id(empty=True)) == len(core.get_unique_id())
    assert core.init_status() == core.InitStatus.NOT_INITIALIZED
    # The reference's accelerator id is accepted and ignored.
    core.init(device=0, mem_size=1 << 22)
    with pytest.raises(core.ShmemError, match="already initialized"):
        core.init(mem_size=1 << 22)
    core.finalize()
    return True


def test_init_errors_are_exceptions():
    assert run_pes(init_errors, 1, method="none") == [True]


def two_instances(rank, n, uids):
    core.init(uid=uids[1], rank=rank, nranks=n, mem_size=8 << 20, initializer_method="uid", instance_id=1)
    assert core.current_instance() == 1
    b1 = core.buffer(8)
    core.set_instance(0)
    b0 = core.buffer(8)
    assert (b0.instance, b1.instance) == (0, 1)
    with core.multi_instance(1):
        assert core.current_instance() == 1
        core.put(b1, np.array([rank + 1], dtype=np.int64), (rank + 1) % n)
        core.barrier_all()
    assert core.current_instance() == 0
    core.put(b0, np.array([rank + 100], dtype=np.int64), (rank + 1) % n)
    core.barrier_all()
    got = (int(b0.numpy(np.int64)[0]), int(b1.numpy(np.int64)[0]))
    # An object of one instance used with a stream of the other is refused.
    s1 = core.create_stream()
    with pytest.raises(core.ShmemInvalid, match="instance"):
        core.put(b1, np.zeros(1), 0, stream=s1)
    core.free(b0)
    with core.multi_instance(1):
        core.free(b1)
    core.finalize(1)
    assert core.current_instance() == 0
    return got


def two_instances_entry(rank, n):
    # Rank 0 makes a second id for instance 1 and shares it through instance 0.
    buf = core.buffer(64)
    if rank == 0:
        uid = core.get_unique_id()
        np.asarray(buf)[:len(uid)] = np.frombuffer(uid, np.uint8)
        for pe in range(1, n):
            core.put(buf, np.asarray(buf), pe)
    core.barrier_all()
    uid1 = bytes(np.asarray(buf)[:len(core.get_unique_id(empty=True))])
    core.free(buf)
    return two_instances(rank, n, [None, uid1])


def test_multi_instance():
    assert run_pes(two_instances_entry, 2) == [(101, 2), (100, 1)]


def mpi_like(rank, n):
    class Comm:  # the subset of an mpi4py communicator init uses
        def Get_rank(self):
            return 0

        def Get_size(self):
            return 1

        def bcast(self, obj, root=0):
            return obj

    core.init(mpi_comm=Comm(), mem_size="4M")
    assert core.n_pes() == 1
    core.finalize()
    return True


def test_mpi_comm_parameter():
    assert run_pes(mpi_like, 1, method="none") == [True]


def test_version_and_enums():
    assert core.get_version() == shmem.__version__
    assert int(core.SignalOp.SIGNAL_ADD) == 1 and int(core.ComparisonType.CMP_GE) == 3
    assert int(core.MemType.DEVICE_SIDE) == 1
    assert issubclass(core.ShmemInvalid, core.ShmemError)
