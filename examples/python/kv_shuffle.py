#!/usr/bin/env python3
"""KV-cache shuffle between paired PEs, verified against golden data.

    python examples/python/kv_shuffle.py --pes 4 [--backend auto|torch|numpy] [--tool 1]

Starts its own PEs (UID init: PE 0 makes the unique id and hands it to the
others). PEs are paired (0 -> 1, 2 -> 3, ...; the last PE of an odd job is
idle); each sender copies some of its paged K/V cache blocks into chosen
blocks of its receiver's caches (``shmem.torch.KVShuffle`` when torch is
installed, else ``shmem.kv_shuffle`` on numpy views). Every PE checks its
caches against golden data. Exits 0 on success. ``--tool 1`` runs the
shuffle under ``torch.profiler`` and writes a Chrome trace per PE
(``--trace-dir``, default ``shmem_trace/pe<rank>.json``).
"""

import argparse
import multiprocessing as mp
import sys
import time

BLOCKS, HEADS, PAGE, DIM = 16, 4, 16, 64


def block_value(pe, b):
    return pe * 32 + b  # exact in float16 and bfloat16


def plan(n):
    table = []
    for pe in range(n):
        if pe % 2 == 0 and pe + 1 < n:
            table.append([pe + 1, 0])
        elif pe % 2 == 1:
            table.append([pe - 1, 1])
        else:
            table.append([-1, 0])
    src = [1, 4, 7, 10]
    dst = [15, 0, 3, 8]
    return table, src, dst


def expected(np, rank, n):
    table, src, dst = plan(n)
    vals = np.array([block_value(rank, b) for b in range(BLOCKS)], dtype=np.float32)
    pair, op = table[rank]
    if op == 1 and pair >= 0:
        for s, d in zip(src, dst):
            vals[d] = block_value(pair, s)
    return vals


def pes_arg(text):
    """``--pes``: a positive number of PEs (argparse reports anything else)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--pes takes a number of PEs, not {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"--pes must be at least 1, not {n}")
    return n


def profiled(tool, trace_dir, rank, fn):
    """Runs ``fn``; with ``--tool 1`` under torch.profiler, writing a Chrome
    trace to ``trace_dir/pe<rank>.json`` (open it in chrome://tracing or
    Perfetto)."""
    if not tool:
        return fn()
    import os

    import torch

    os.makedirs(trace_dir, exist_ok=True)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        with torch.profiler.record_function(f"shmem PE {rank}"):
            out = fn()
    prof.export_chrome_trace(os.path.join(trace_dir, f"pe{rank}.json"))
    return out


def check_tool(ap, a):
    if a.tool:
        try:
            import torch  # noqa: F401
        except ImportError:
            ap.error("--tool 1 attaches torch.profiler: install torch")


def pe_main(rank, n, uid_q, backend, results, tool=0, trace_dir="shmem_trace"):
    try:
        import numpy as np
        import shmem
        import shmem.core as core

        if rank == 0:
            uid = core.get_unique_id()
            for _ in range(n - 1):
                uid_q.put(uid)
        else:
            uid = uid_q.get(timeout=60)
        core.init(uid=uid, rank=rank, nranks=n, mem_size=64 << 20, initializer_method="uid")
        table, src, dst = plan(n)
        shape = (BLOCKS, HEADS, PAGE, DIM)
        if backend == "torch":
            import torch
            from shmem.torch import KVShuffle, Manager

            mgr = Manager()
            key = mgr.malloc_like(torch.zeros(shape, dtype=torch.float16))
            val = mgr.malloc_like(torch.zeros(shape, dtype=torch.float16))
            for b in range(BLOCKS):
                key[b] = block_value(rank, b)
                val[b] = -block_value(rank, b)
            core.barrier_all()
            profiled(tool, trace_dir, rank, lambda: KVShuffle().compute(
                torch.tensor(table, dtype=torch.int64), key, val,
                torch.tensor(src, dtype=torch.int64), torch.tensor(dst, dtype=torch.int64)))
            k = key.float().numpy()
            v = val.float().numpy()
        else:
            nbytes = int(np.prod(shape)) * 2
            kb, vb = core.buffer(nbytes), core.buffer(nbytes)
            key, val = kb.numpy(np.float16, shape), vb.numpy(np.float16, shape)
            for b in range(BLOCKS):
                key[b] = block_value(rank, b)
                val[b] = -block_value(rank, b)
            core.barrier_all()
            profiled(tool, trace_dir, rank, lambda: shmem.kv_shuffle(table, key, val, src, dst))
            k, v = key.astype(np.float32), val.astype(np.float32)
        want = expected(np, rank, n)
        ok = bool((k == want[:, None, None, None]).all() and (v == -want[:, None, None, None]).all())
        core.barrier_all()
        if backend == "torch":
            mgr.free_tensor(val)
            mgr.free_tensor(key)
        else:
            core.free(vb)
            core.free(kb)
        core.finalize()
        results.put((rank, ok, None))
    except BaseException as e:  # noqa: BLE001 - reported by the parent
        results.put((rank, False, f"{type(e).__name__}: {e}"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pes", type=pes_arg, default=4)
    ap.add_argument("--backend", choices=["auto", "torch", "numpy"], default="auto")
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--tool", type=int, choices=[0, 1], default=0,
                    help="1: run under torch.profiler and write a Chrome trace per PE to --trace-dir")
    ap.add_argument("--trace-dir", default="shmem_trace", help="where --tool 1 writes pe<rank>.json")
    a = ap.parse_args()
    check_tool(ap, a)
    backend = a.backend
    if backend == "auto":
        try:
            import torch  # noqa: F401
            backend = "torch"
        except ImportError:
            backend = "numpy"
    ctx = mp.get_context("spawn")
    results, uid_q = ctx.Queue(), ctx.Queue()
    procs = [ctx.Process(target=pe_main, args=(r, a.pes, uid_q, backend, results, a.tool, a.trace_dir)) for r in range(a.pes)]
    for p in procs:
        p.start()
    got = {}
    deadline = time.monotonic() + a.timeout
    while len(got) < a.pes and time.monotonic() < deadline:
        try:
            rank, ok, err = results.get(timeout=1)
            got[rank] = (ok, err)
        except Exception:  # noqa: BLE001 - queue.Empty
            if not any(p.is_alive() for p in procs) and results.empty():
                break
    for p in procs:
        p.join(timeout=5)
        if p.is_alive():
            p.kill()
    failed = [r for r in range(a.pes) if r not in got or not got[r][0]]
    for r in failed:
        why = got[r][1] if r in got else "no result (crashed or timed out)"
        print(f"PE {r}: FAILED: {why or 'wrong data'}", file=sys.stderr)
    if failed:
        return 1
    print(f"kv_shuffle ({backend}) on {a.pes} PEs: caches verified on every PE")
    return 0


if __name__ == "__main__":
    sys.exit(main())
