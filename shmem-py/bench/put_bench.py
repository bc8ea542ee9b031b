#!/usr/bin/env python3
"""Time a Python ``put`` (8 MiB and 8 bytes) from PE 0 to PE 1.

    python shmem-py/bench/put_bench.py [--iters 200] [--small-iters 200000]

Prints the median time of one blocking 8 MiB put (``shmem.put``, and its
bandwidth) and the mean time of one blocking 8-byte put from a numpy
array, from ``bytes`` and from a torch tensor (when torch is installed),
i.e. the per-call overhead of the binding plus the copy; and the cost of
enqueueing an 8-byte ``shmem.core.put`` on the default stream (the
stream's worker runs it; the figure includes draining the stream at the
end). Compare with the same loop in Rust (README, "Performance").
"""

import argparse
import multiprocessing as mp
import statistics
import time


def pe(rank, n, uid_q, out_q, iters, small_iters):
    import numpy as np
    import shmem
    import shmem.core as core

    if rank == 0:
        uid = core.get_unique_id()
        uid_q.put(uid)
    else:
        uid = uid_q.get(timeout=60)
    core.init(uid=uid, rank=rank, nranks=n, mem_size=64 << 20, initializer_method="uid")
    big = 8 << 20
    buf = core.buffer(big)
    src = np.full(big, 7, np.uint8)
    small = np.zeros(1, np.int64)
    core.barrier_all()
    if rank == 0:
        for _ in range(10):
            shmem.put(buf, src, 1)
        times = []
        for _ in range(iters):
            t = time.perf_counter()
            shmem.put(buf, src, 1)
            times.append(time.perf_counter() - t)
        per_call = {}

        def loop(name, fn, dst, source, n=small_iters):
            for _ in range(1000):
                fn(dst, source, 1)
            t = time.perf_counter()
            for _ in range(n):
                fn(dst, source, 1)
            if fn is core.put:
                core.stream_synchronize(0)
            per_call[name] = (time.perf_counter() - t) / n

        view = buf.numpy(np.int64)[:1]
        loop("numpy", shmem.put, view, small)
        loop("bytes", shmem.put, view, bytes(8))
        try:
            import torch

            loop("torch", shmem.put, view, torch.zeros(1, dtype=torch.int64))
            import shmem.torch  # noqa: F401

            tdst = shmem._shmem.torch_view(buf)[:8].view(torch.int64)  # symmetric tensor
            loop("torch into a torch destination", shmem.put, tdst, torch.zeros(1, dtype=torch.int64))
        except ImportError:
            pass
        loop("numpy, core.put on the default stream", core.put, view, small, max(1, small_iters // 10))
        out_q.put((statistics.median(times), min(times), per_call))
    core.barrier_all()
    core.free(buf)
    core.finalize()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--small-iters", type=int, default=200000)
    a = ap.parse_args()
    ctx = mp.get_context("spawn")
    uid_q, out_q = ctx.Queue(), ctx.Queue()
    ps = [ctx.Process(target=pe, args=(r, 2, uid_q, out_q, a.iters, a.small_iters)) for r in range(2)]
    for p in ps:
        p.start()
    med, best, small = out_q.get(timeout=600)
    for p in ps:
        p.join(60)
    print(f"python put 8 MiB: median {med * 1e6:.1f} us ({(8 << 20) / med / 1e9:.2f} GB/s), best {best * 1e6:.1f} us")
    for name, t in small.items():
        print(f"python put 8 B from {name}: {t * 1e9:.0f} ns per call")


if __name__ == "__main__":
    main()
