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


def test_torchrun_uid_example():
    pytest.importorskip("torch")
    torchrun = shutil.which("torchrun")
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
