"""The example scripts run and verify their golden data."""

import os
import shutil
import socket
import subprocess
import sys

import pytest

from pes import PE_ENV

EXAMPLES = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "..", "examples", "python"))


def run(args, timeout=120):
    r = subprocess.run([sys.executable] + args, capture_output=True, text=True, timeout=timeout,
                       env=dict(os.environ, **PE_ENV))
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_allgather_example():
    out = run([os.path.join(EXAMPLES, "allgather.py"), "--pes", "2", "--backend", "numpy", "--iters", "2"])
    assert "verified on every PE" in out


def test_kv_shuffle_example():
    out = run([os.path.join(EXAMPLES, "kv_shuffle.py"), "--pes", "3", "--backend", "numpy"])
    assert "caches verified on every PE" in out


def test_pes_zero_is_a_clean_error():
    for ex in ("allgather.py", "kv_shuffle.py"):
        r = subprocess.run([sys.executable, os.path.join(EXAMPLES, ex), "--pes", "0"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and "--pes must be at least 1" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr


def test_tool_1_writes_a_profiler_trace(tmp_path):
    pytest.importorskip("torch")
    out = run([os.path.join(EXAMPLES, "allgather.py"), "--pes", "2", "--backend", "torch", "--iters", "2",
               "--elems", "1024", "--tool", "1", "--trace-dir", str(tmp_path)])
    assert "verified on every PE" in out
    import json
    for pe in range(2):
        trace = json.load(open(tmp_path / f"pe{pe}.json"))
        names = {e.get("name") for e in trace["traceEvents"]}
        assert f"shmem PE {pe}" in names


def venv_tool(name):
    """``name`` on PATH, or installed next to this interpreter (a venv's bin/)."""
    here = os.path.join(os.path.dirname(sys.executable), name)
    return here if os.access(here, os.X_OK) else shutil.which(name)


def test_torchrun_uid_example():
    pytest.importorskip("torch")
    torchrun = venv_tool("torchrun")
    if torchrun is None:
        pytest.skip("torchrun is not on PATH")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = subprocess.run([torchrun, "--nproc_per_node", "2", "--master_port", str(port),
                        os.path.join(EXAMPLES, "torchrun_uid.py")],
                       capture_output=True, text=True, timeout=180, env=dict(os.environ, **PE_ENV))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "verified" in r.stdout
