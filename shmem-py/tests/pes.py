"""Run a test function on N PEs, each a spawned process with a hard timeout.

``run_pes(fn, n)`` starts ``n`` processes; each joins a job (``method``:
"uid" with the id handed out by rank 0 through a queue, "attr" on a free
port, or "none" to let ``fn`` do it), runs ``fn(rank, n, *args)``,
finalizes, and sends back the return value or its traceback. PEs
synchronise only through the library; the parent just collects.
"""

import importlib
import multiprocessing as mp
import os
import queue
import socket
import time
import traceback

CTX = mp.get_context("spawn")
MEM = 32 << 20
TIMEOUT = 60.0

#: Bounds every blocking call inside the PEs, so a bug fails instead of hanging.
PE_ENV = {"SHMEM_INIT_TIMEOUT": "30", "SHMEM_WAIT_TIMEOUT": "30"}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _child(mod, name, rank, n, method, uid_q, url, results, args, env, mem):
    os.environ.update(env)
    try:
        import shmem.core as core

        if method == "uid":
            if rank == 0:
                uid = core.get_unique_id()
                for _ in range(n - 1):
                    uid_q.put(uid)
            else:
                uid = uid_q.get(timeout=30)
            core.init(uid=uid, rank=rank, nranks=n, mem_size=mem, initializer_method="uid")
        elif method == "attr":
            core.init(initializer_method="attr", rank=rank, nranks=n, url=url, mem_size=mem)
        fn = getattr(importlib.import_module(mod), name)
        out = fn(rank, n, *args)
        while core.current_instance() is not None:
            core.finalize()
        results.put((rank, True, out))
    except BaseException:  # noqa: BLE001 - report everything to the parent
        results.put((rank, False, traceback.format_exc()))


def run_pes(fn, n=2, *args, method="uid", timeout=TIMEOUT, env=None, mem=MEM, expect_fail=()):
    """Runs ``fn`` on ``n`` PEs; returns the list of their return values.

    ``expect_fail``: ranks allowed to die without reporting (e.g. a PE that
    exits on purpose).
    """
    results = CTX.Queue()
    uid_q = CTX.Queue()
    url = f"tcp://127.0.0.1:{free_port()}"
    full_env = dict(PE_ENV, **(env or {}))
    procs = [
        CTX.Process(
            target=_child,
            args=(fn.__module__, fn.__name__, r, n, method, uid_q, url, results, args, full_env, mem),
            daemon=True,
        )
        for r in range(n)
    ]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout
    got = {}
    want = n - len(expect_fail)
    while len([r for r in got if r not in expect_fail]) < want:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        try:
            rank, ok, out = results.get(timeout=min(left, 0.5))
            got[rank] = (ok, out)
        except queue.Empty:
            if all(not p.is_alive() for p in procs) and results.empty():
                break
    for p in procs:
        p.join(timeout=max(0.1, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()
    problems = []
    for r, p in enumerate(procs):
        if r in expect_fail:
            continue
        if r not in got:
            problems.append(f"PE {r}: no result (exit code {p.exitcode}; timed out or crashed)")
        elif not got[r][0]:
            problems.append(f"PE {r} raised:\n{got[r][1]}")
    if problems:
        raise AssertionError("\n".join(problems))
    return [got[r][1] if r in got else None for r in range(n)]
