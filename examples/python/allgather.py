#!/usr/bin/env python3
"""AllGather over symmetric memory, verified against golden data.

    python examples/python/allgather.py --pes 4 [--elems 262144] [--backend auto|torch|numpy] [--tool 1]

Starts its own PEs (one process each, attribute init on a free local
port), gathers every PE's block into every PE's output (with
``shmem.torch.AllGather`` when torch is installed, else ``shmem.fcollect``
on numpy views), checks the result on every PE and prints the bandwidth.
Exits 0 when every PE saw the right data. ``--tool 1`` (the reference's
profiler switch) runs the timed loop under ``torch.profiler`` and writes a
Chrome trace per PE (``--trace-dir``, default ``shmem_trace/pe<rank>.json``).
"""

import argparse
import multiprocessing as mp
import socket
import sys
import time


def golden(np, pe, elems):
    return (np.arange(elems, dtype=np.float32) + pe * 1000.0).astype(np.float32)


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


def pe_main(rank, n, url, elems, iters, backend, results, tool=0, trace_dir="shmem_trace"):
    try:
        import numpy as np
        import shmem
        import shmem.core as core

        if backend == "torch":
            import torch
            from shmem.torch import AllGather, Manager

            mgr = Manager()
            mgr.attr_init(rank, n, 64 << 20 if elems * n * 8 < (48 << 20) else elems * n * 12, url)
            inp = mgr.malloc_like(torch.from_numpy(golden(np, rank, elems)))
            out = mgr.malloc_like(torch.zeros(elems * n, dtype=torch.float32))
            op = AllGather()
            run = lambda: op.compute(out, inp)  # noqa: E731
            check = lambda: out.numpy()  # noqa: E731
        else:
            core.init(initializer_method="attr", rank=rank, nranks=n, url=url,
                      mem_size=max(64 << 20, elems * n * 12))
            src_buf, dst_buf = core.buffer(elems * 4), core.buffer(elems * 4 * n)
            inp, out = src_buf.numpy(np.float32), dst_buf.numpy(np.float32)
            inp[:] = golden(np, rank, elems)
            run = lambda: shmem.fcollect(shmem.TEAM_WORLD, out, inp)  # noqa: E731
            check = lambda: out  # noqa: E731

        run()  # warm-up, and the checked result
        want = np.concatenate([golden(np, pe, elems) for pe in range(n)])
        ok = bool((check() == want).all())
        core.barrier_all()
        def loop():
            t = time.perf_counter()
            for _ in range(iters):
                run()
            return time.perf_counter() - t

        dt = profiled(tool, trace_dir, rank, loop) / iters
        ok = ok and bool((check() == want).all())
        if backend == "torch":
            mgr.free_tensor(out)
            mgr.free_tensor(inp)
            mgr.finalize()
        else:
            core.free(dst_buf)
            core.free(src_buf)
            core.finalize()
        results.put((rank, ok, dt, None))
    except BaseException as e:  # noqa: BLE001 - reported by the parent
        results.put((rank, False, 0.0, f"{type(e).__name__}: {e}"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pes", type=pes_arg, default=4)
    ap.add_argument("--elems", type=int, default=256 * 1024, help="float32 elements per PE")
    ap.add_argument("--iters", type=int, default=10)
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
    results = ctx.Queue()
    url = f"tcp://127.0.0.1:{free_port()}"
    procs = [ctx.Process(target=pe_main, args=(r, a.pes, url, a.elems, a.iters, backend, results,
                                                         a.tool, a.trace_dir))
             for r in range(a.pes)]
    for p in procs:
        p.start()
    got = {}
    deadline = time.monotonic() + a.timeout
    while len(got) < a.pes and time.monotonic() < deadline:
        try:
            rank, ok, dt, err = results.get(timeout=1)
            got[rank] = (ok, dt, err)
        except Exception:  # noqa: BLE001 - queue.Empty
            if not any(p.is_alive() for p in procs) and results.empty():
                break
    for p in procs:
        p.join(timeout=5)
        if p.is_alive():
            p.kill()
    failed = [r for r in range(a.pes) if r not in got or not got[r][0]]
    for r in failed:
        why = got[r][2] if r in got else "no result (crashed or timed out)"
        print(f"PE {r}: FAILED: {why or 'wrong data'}", file=sys.stderr)
    if failed:
        return 1
    dt = max(v[1] for v in got.values())
    nbytes = a.elems * 4 * a.pes
    print(f"allgather ({backend}) of {a.elems} float32 per PE on {a.pes} PEs: verified on every PE; "
          f"{dt * 1e6:.1f} us per call, {nbytes / dt / 1e9:.2f} GB/s gathered per PE")
    return 0


if __name__ == "__main__":
    sys.exit(main())
