#!/usr/bin/env python3
"""What a call costs from Python on one PE (no peer to wait for).

    taskset -c 1 python shmem-py/bench/call_cost.py [--slices 200] [--calls 500]

Times ``--slices`` slices of ``--calls`` back-to-back calls of each row in
one process and prints the fastest slice and the first quartile, in us per
call: ``barrier_all``, an 8-byte ``shmem.put`` from a numpy array into a
numpy view of symmetric memory, and 8-byte ``broadcast``, ``fcollect`` and
sum ``reduce`` between numpy views. With one PE every collective is the
package's and the library's own bookkeeping, which is what this measures;
``coll_bench.py`` times the same calls across PEs. When torch imports,
the same rows run again with torch tensors (a CPU tensor as the private
source, tensor views of symmetric memory from ``torch.from_dlpack``).
"""

import argparse
import time

import numpy as np

import shmem
import shmem.core as core


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slices", type=int, default=200)
    ap.add_argument("--calls", type=int, default=500)
    args = ap.parse_args()
    core.init(uid=core.get_unique_id(), rank=0, nranks=1, mem_size=4 << 20,
              initializer_method="uid")
    world = shmem.TEAM_WORLD
    src, dst = core.buffer(64), core.buffer(64)
    s, d = src.numpy(np.int64)[:1], dst.numpy(np.int64)[:1]
    s[:] = 7
    private = np.full(1, 5, np.int64)
    rows = {
        "barrier_all": core.barrier_all,
        "put 8 B": lambda: shmem.put(d, private, 0),
        "broadcast 8 B": lambda: shmem.broadcast(world, d, s, 1, 0),
        "fcollect 8 B": lambda: shmem.fcollect(world, d, s, 1),
        "reduce sum 8 B": lambda: shmem.reduce(world, d, s, 1, "sum"),
    }
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        ts = torch.from_dlpack(src)[:8].view(torch.int64)
        td = torch.from_dlpack(dst)[:8].view(torch.int64)
        tp = torch.full((1,), 5, dtype=torch.int64)
        rows.update({
            "put 8 B (torch)": lambda: shmem.put(td, tp, 0),
            "broadcast (torch)": lambda: shmem.broadcast(world, td, ts, 1, 0),
            "fcollect (torch)": lambda: shmem.fcollect(world, td, ts, 1),
            "reduce sum (torch)": lambda: shmem.reduce(world, td, ts, 1, "sum"),
        })
    print("call               fastest   1st quartile (us per call)")
    for name, fn in rows.items():
        for _ in range(1000):
            fn()
        per = []
        for _ in range(args.slices):
            t = time.perf_counter()
            for _ in range(args.calls):
                fn()
            per.append((time.perf_counter() - t) / args.calls * 1e6)
        per.sort()
        print(f"{name:<18} {per[0]:8.3f} {per[len(per) // 4]:8.3f}")
    assert d[0] == 7, "the last reduce of one PE copies its source"
    core.finalize()


if __name__ == "__main__":
    main()
