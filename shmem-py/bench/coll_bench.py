#!/usr/bin/env python3
"""Time the collectives from Python, the OSU way (every PE in the call).

    python shmem-py/bench/coll_bench.py [--pes 2] [--iters 20000] [--big-iters 200] [--rounds 5]

For each call (``barrier_all``, and ``broadcast``, ``fcollect``,
``alltoall`` and a sum ``reduce`` of 8 bytes and of 1 MiB per PE over
``TEAM_WORLD``) every PE runs the call back to back; each round times
``--iters`` calls (``--big-iters`` at 1 MiB) and the figure is the
median over ``--rounds`` rounds of PE 0's mean time per call, with the
range. Run it with and without ``SHMEM_PY_INTERRUPTIBLE=0`` or
``SHMEM_PY_HAND_OFF=1`` to compare how blocking calls run (see the
README, "Ctrl-C").
"""

import argparse
import json
import multiprocessing as mp
import statistics
import time

MIB = 1 << 20


def pe(rank, n, uid_q, out_q, args):
    import numpy as np
    import shmem
    import shmem.core as core

    if rank == 0:
        uid = core.get_unique_id()
        for _ in range(n - 1):
            uid_q.put(uid)
    else:
        uid = uid_q.get(timeout=60)
    core.init(uid=uid, rank=rank, nranks=n, mem_size=(8 * n + 8) * MIB, initializer_method="uid")
    world = shmem.TEAM_WORLD
    src = core.buffer(n * MIB)
    dst = core.buffer(n * MIB)
    s64 = src.numpy(np.int64)
    d64 = dst.numpy(np.int64)
    s64[:] = rank + 1
    results = {}

    def calls(elems):
        return {
            "broadcast": lambda: shmem.broadcast(world, d64[:elems], s64[:elems], elems, 0),
            "fcollect": lambda: shmem.fcollect(world, d64[: n * elems], s64[:elems], elems),
            "alltoall": lambda: shmem.alltoall(world, d64[: n * elems], s64[: n * elems], elems),
            "reduce sum": lambda: shmem.reduce(world, d64[:elems], s64[:elems], elems, "sum"),
        }

    rows = [("barrier_all", core.barrier_all, args.iters)]
    for size, iters in ((8, args.iters), (MIB, args.big_iters)):
        for name, fn in calls(size // 8).items():
            rows.append((f"{name} {'8 B' if size == 8 else '1 MiB'}", fn, iters))
    for name, fn, iters in rows:
        per_round = []
        for _ in range(args.rounds):
            for _ in range(max(iters // 10, 10)):
                fn()
            core.barrier_all()
            t = time.perf_counter()
            for _ in range(iters):
                fn()
            per_round.append((time.perf_counter() - t) / iters)
        results[name] = per_round
    # Golden checks of the last results: a reduce of 8 bytes ran last at
    # 8 B, the 1 MiB reduce last of all.
    want = n * (n + 1) // 2
    assert (d64[: MIB // 8] == want).all(), "reduce result"
    core.barrier_all()
    core.finalize()
    if rank == 0:
        out_q.put(results)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pes", type=int, default=2)
    ap.add_argument("--iters", type=int, default=20000)
    ap.add_argument("--big-iters", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", help="also write the per-round figures here")
    args = ap.parse_args()
    if args.pes < 1:
        ap.error("--pes must be at least 1")
    ctx = mp.get_context("spawn")
    uid_q, out_q = ctx.Queue(), ctx.Queue()
    procs = [ctx.Process(target=pe, args=(r, args.pes, uid_q, out_q, args)) for r in range(args.pes)]
    for p in procs:
        p.start()
    results = out_q.get(timeout=1800)
    for p in procs:
        p.join(60)
        if p.exitcode != 0:
            raise SystemExit(f"a PE exited with status {p.exitcode}")
    print(f"{args.pes} PEs, median of {args.rounds} rounds (range), us per call")
    for name, per_round in results.items():
        us = [t * 1e6 for t in per_round]
        print(f"{name:<20} {statistics.median(us):9.2f} ({min(us):.2f}-{max(us):.2f})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f)


if __name__ == "__main__":
    main()
