"""A Python torchrun job across two "hosts" (network namespaces joined by a
bridge, as tests/tests/multihost.rs builds them): one torchrun per host
(``ip netns exec``), 2 PEs each, so same-host peers use HCCS and the hosts
talk through the ROCE engine, under each of its providers: libfabric
forced over ``tcp;ofi_rxm`` and over ``sockets``, libfabric as it picks
without ``FI_PROVIDER``, and the software provider; torchrun's static
rendezvous for the first three, and its c10d rendezvous for the default. What the PEs do and check: ``hosts_job.py``. Each job has a hard
timeout, after which every process left in the namespaces is killed.

Needs root, iproute2, torch and (for the libfabric runs) libfabric; it
skips saying why where one is missing, except under CI, which has them
all and fails instead.
"""

import ctypes
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from pes import PE_ENV

JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hosts_job.py")
PER_HOST = 2
HOSTS = 2
#: Hard limit for one job (both torchruns), in seconds.
JOB_TIMEOUT = 90


def cannot_run(why):
    """Skip with ``why``; in CI, fail instead."""
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the multi-host torchrun test: {why}")
    pytest.skip(why)


def ip(*args):
    r = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {r.stderr.strip()}")


class Hosts:
    """Namespaces ``<tag>-h0..`` with ``10.<a>.<b>.(i+1)/24`` on a bridge in
    ``<tag>-sw``; ``close()`` (also on a failed setup) deletes them all."""

    def __init__(self, n):
        pid = os.getpid()
        self.tag = f"shp{pid % 100000}"
        # 10.150-199.x.x: apart from the Rust multi-host tests' 10.200-249.x.x.
        self.subnet = (150 + pid % 50, (pid // 50) % 250)
        self.n = n
        self.close()  # leftovers of a run killed before its cleanup
        try:
            sw = self.switch
            ip("netns", "add", sw)
            ip("-n", sw, "link", "add", "br0", "type", "bridge")
            ip("-n", sw, "link", "set", "br0", "up")
            for i in range(n):
                h, a, b = self.host(i), self.ifname(i), f"{self.tag}p{i}"
                ip("netns", "add", h)
                ip("link", "add", a, "type", "veth", "peer", "name", b)
                ip("link", "set", a, "netns", h)
                ip("link", "set", b, "netns", sw)
                ip("-n", sw, "link", "set", b, "master", "br0")
                ip("-n", sw, "link", "set", b, "up")
                ip("-n", h, "addr", "add", f"{self.addr(i)}/24", "dev", a)
                ip("-n", h, "link", "set", a, "up")
                ip("-n", h, "link", "set", "lo", "up")
        except BaseException:
            self.close()
            raise

    @property
    def switch(self):
        return f"{self.tag}-sw"

    def host(self, i):
        return f"{self.tag}-h{i}"

    def ifname(self, i):
        return f"{self.tag}v{i}"

    def addr(self, i):
        return f"10.{self.subnet[0]}.{self.subnet[1]}.{i + 1}"

    def kill_all(self):
        """SIGKILL every process left in the namespaces (torchrun starts its
        PEs in sessions of their own, out of reach of its process group)."""
        for name in [self.host(i) for i in range(self.n)] + [self.switch]:
            r = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True, timeout=30)
            for pid in r.stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass

    def close(self):
        self.kill_all()
        for name in [self.host(i) for i in range(self.n)] + [self.switch]:
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)


@pytest.fixture(scope="module")
def hosts():
    if os.geteuid() != 0:
        cannot_run("not root: network namespaces need it")
    if shutil.which("ip") is None:
        cannot_run("no `ip` (iproute2)")
    if importlib.util.find_spec("torch") is None or torchrun() is None:
        cannot_run("torch (with its torchrun) is not installed")
    try:
        h = Hosts(HOSTS)
    except (RuntimeError, OSError) as e:
        cannot_run(f"cannot create network namespaces ({e})")
    try:
        yield h
    finally:
        h.close()


def libfabric():
    try:
        ctypes.CDLL("libfabric.so.1")
        return None
    except OSError as e:
        return str(e)


PROVIDERS = {
    "sw": ({"SHMEM_ROCE_PROVIDER": "sw"}, "software verbs provider"),
    "ofi-tcp": ({"SHMEM_ROCE_PROVIDER": "ofi", "FI_PROVIDER": "tcp"}, "libfabric provider tcp;ofi_rxm"),
    # No FI_PROVIDER: the provider libfabric picks (`tcp;ofi_rxm` here).
    "ofi-default": ({"SHMEM_ROCE_PROVIDER": "ofi"}, "libfabric provider"),
    # sockets' progress threads spin 10 ms by default.
    "ofi-sockets": ({"SHMEM_ROCE_PROVIDER": "ofi", "FI_PROVIDER": "sockets", "FI_SOCKETS_PE_WAITTIME": "0"},
                    "libfabric provider sockets"),
}


def torchrun():
    here = os.path.join(os.path.dirname(sys.executable), "torchrun")
    return here if os.access(here, os.X_OK) else shutil.which("torchrun")


def run_job(hosts, provider_env, rendezvous, port):
    """One torchrun per host; returns [(returncode, stdout, stderr)] per host.
    Both are killed (whole process groups) at JOB_TIMEOUT.

    ``rendezvous``: "static" (``--node-rank`` and ``--master-addr``) or
    "c10d" (``--rdzv-endpoint`` on host 0; every namespace shares the
    machine's host name, so each agent is told its address with
    ``--local-addr``, which torch hands the PEs as MASTER_ADDR, and host 0
    that it hosts the rendezvous store)."""
    exe = torchrun()
    procs = []
    try:
        for i in range(hosts.n):
            env = dict(os.environ, **PE_ENV, **provider_env)
            env.update(
                SHMEM_INFO="1",
                OMP_NUM_THREADS="1",
                # gloo (torch.distributed) picks its interface from the host
                # name, which every namespace shares; name the host's own.
                GLOO_SOCKET_IFNAME=hosts.ifname(i),
                PYTHONUNBUFFERED="1",
            )
            cmd = ["ip", "netns", "exec", hosts.host(i), exe,
                   "--nnodes", str(hosts.n), "--nproc-per-node", str(PER_HOST)]
            if rendezvous == "static":
                cmd += ["--node-rank", str(i), "--master-addr", hosts.addr(0), "--master-port", str(port)]
            else:
                cmd += ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"{hosts.addr(0)}:{port}",
                        "--rdzv-id", f"job{port}", "--rdzv-conf", f"is_host={int(i == 0)}",
                        "--local-addr", hosts.addr(i)]
            cmd.append(JOB)
            procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True))
        deadline = time.monotonic() + JOB_TIMEOUT
        out = []
        for p in procs:
            try:
                o, e = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
                out.append((p.returncode, o, e))
            except subprocess.TimeoutExpired:
                hosts.kill_all()  # the PEs too, which hold the pipes open
                o, e = p.communicate(timeout=30)
                out.append((f"timed out after {JOB_TIMEOUT} s", o, e))
        return out
    finally:
        hosts.kill_all()
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()


RUNS = [("sw", "static"), ("ofi-tcp", "static"), ("ofi-sockets", "static"), ("ofi-default", "c10d")]


@pytest.mark.parametrize("provider,rendezvous", RUNS)
def test_torchrun_job_across_hosts(hosts, provider, rendezvous):
    env, banner = PROVIDERS[provider]
    if provider.startswith("ofi"):
        why = libfabric()
        if why is not None:
            cannot_run(f"libfabric not found ({why})")
    port = 29500 + 10 * RUNS.index((provider, rendezvous))  # fresh ports for each job
    results = run_job(hosts, env, rendezvous, port)
    report = "\n".join(f"--- host {i}: {rc}\n{o}\n{e[-6000:]}" for i, (rc, o, e) in enumerate(results))
    assert [rc for rc, _, _ in results] == [0] * hosts.n, report
    n = hosts.n * PER_HOST
    for i, (_, o, _) in enumerate(results):
        for mode in ("env", "uid"):
            want = sorted(f"PE {r}/{n} node {i}: torchrun {mode} verified"
                          for r in range(i * PER_HOST, (i + 1) * PER_HOST))
            got = sorted(line for line in o.splitlines() if f"torchrun {mode} verified" in line)
            assert got == want, report
    # Rank 0 (host 0) says which ROCE provider carried the job, once per init.
    assert results[0][2].count(f"shmem ROCE engine: {banner}") == 2, report
