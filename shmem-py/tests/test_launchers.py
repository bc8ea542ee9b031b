"""The reference-style script under torchrun and the pip-installed
``shmemrun``; the installed launcher's CLI; loopback store for one-host UID
jobs."""

import os
import shutil
import socket
import subprocess
import sys

import pytest

from pes import PE_ENV

EXAMPLES = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "..", "examples", "python"))
SCRIPT = os.path.join(EXAMPLES, "reference_usage.py")


def venv_tool(name):
    here = os.path.join(os.path.dirname(sys.executable), name)
    return here if os.access(here, os.X_OK) else shutil.which(name)


def shmemrun():
    exe = venv_tool("shmemrun")
    assert exe is not None, "pip install ./shmem-py installs a shmemrun console script"
    return exe


def run(cmd, timeout=180):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, **PE_ENV))


def test_shmemrun_is_installed_with_the_package():
    exe = shmemrun()
    with open(exe, encoding="utf-8", errors="replace") as f:
        assert "shmem.run" in f.read()  # the package's entry point, not another MPI's
    r = run([exe, "--help"])
    assert r.returncode == 0 and "-n, -np, --np N" in r.stdout
    r = run([exe, "-n", "0", "true"])
    assert r.returncode == 2 and "at least 1" in r.stderr
    r = run([exe, "--bogus", "-n", "2", "true"])
    assert r.returncode == 2 and "unknown option --bogus" in r.stderr
    r = run([exe, "-n", "2", "--tag-output", "python", "-c",
             "import shmem.core as c; c.init(); print('pe', c.my_pe(), 'of', c.n_pes()); c.finalize()"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "[PE 0] pe 0 of 2" in r.stdout and "[PE 1] pe 1 of 2" in r.stdout


def test_reference_script_under_shmemrun():
    pytest.importorskip("torch")
    r = run([shmemrun(), "-n", "2", "python", SCRIPT])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "reference usage on 2 ranks: verified" in r.stdout


def test_reference_script_under_torchrun():
    pytest.importorskip("torch")
    torchrun = venv_tool("torchrun")
    if torchrun is None:
        pytest.skip("torchrun is not installed")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = run([torchrun, "--nproc_per_node", "2", "--master_port", str(port), SCRIPT])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "reference usage on 2 ranks: verified" in r.stdout


def test_one_host_uid_store_binds_loopback():
    code = ("import shmem, shmem.core as c; u = c.get_unique_id(); "
            "print(shmem.uid_address(u)); print(shmem.uid_address(c.get_unique_id(local=False)))")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHMEM_BOOTSTRAP")}
    env.update(LOCAL_WORLD_SIZE="2", WORLD_SIZE="2")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    one_host, forced = r.stdout.split()
    assert one_host.startswith("127.0.0.1:"), one_host
    env.update(LOCAL_WORLD_SIZE="2", WORLD_SIZE="4")  # spans hosts: reachable address (or 127.0.0.1 if none)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    env.update(LOCAL_WORLD_SIZE="2", WORLD_SIZE="2", SHMEM_BOOTSTRAP_ADDR="0.0.0.0")  # told otherwise
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0 and r.stdout.split()[0].startswith("0.0.0.0:"), r.stdout + r.stderr
