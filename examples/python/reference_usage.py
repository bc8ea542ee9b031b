#!/usr/bin/env python3
"""The reference's documented usage of ``shmem.core``, line by line.

    torchrun --nproc_per_node 2 examples/python/reference_usage.py
    shmemrun -n 2 python examples/python/reference_usage.py

Written from the reference's documentation (only the imports differ): UID
init with the id broadcast by torch.distributed, a symmetric ``buffer``,
``get_peer_buffer``, ``put(dst=peer_buf, src=buf, remote_pe=...)`` and a
``signal_op`` / ``signal_wait`` pair on the default stream, ``barrier_all``,
``free`` and ``finalize``. Every rank checks golden data; rank 0 prints
"verified" and the job exits 0 on success.
"""

import sys

import numpy as np
import torch
import torch.distributed as dist

import shmem.core as core


def main():
    dist.init_process_group("gloo")
    rank, nranks = dist.get_rank(), dist.get_world_size()

    # UID init: rank 0 makes the id, torch.distributed broadcasts it.
    uid = core.get_unique_id() if rank == 0 else core.get_unique_id(empty=True)
    uid_tensor = torch.frombuffer(bytearray(uid), dtype=torch.uint8)
    dist.broadcast(uid_tensor, src=0)
    core.init(uid=uid_tensor, rank=rank, nranks=nranks, mem_size=32 << 20, initializer_method="uid")
    assert core.init_status() == core.InitStatus.INITIALIZED

    n = 1024
    buf = core.buffer(n * 4)                       # symmetric, this PE's source
    recv = core.buffer(n * 4)                      # symmetric, filled by the left neighbour
    signal = core.buffer(8)
    torch.from_dlpack(buf).view(torch.float32)[:] = torch.arange(n, dtype=torch.float32) + rank * n
    torch.from_dlpack(signal).view(torch.int64)[:] = 0
    core.barrier_all()

    peer = (rank + 1) % nranks
    peer_buf = core.get_peer_buffer(recv, peer)    # the same object on the peer
    core.put(dst=peer_buf, src=buf, remote_pe=peer)                       # default stream
    core.signal_op(signal, 1, core.SignalOp.SIGNAL_SET, peer)             # after the put
    core.signal_wait(signal, 1, core.ComparisonType.CMP_EQ)               # stream-ordered wait
    core.barrier_all()                             # the default stream has run by now

    left = (rank - 1) % nranks
    got = torch.from_dlpack(recv).view(torch.float32)
    ok = torch.equal(got, torch.arange(n, dtype=torch.float32) + left * n)
    ok = ok and int(np.asarray(signal).view(np.int64)[0]) == 1

    core.barrier_all()
    core.free(signal)
    core.free(recv)
    core.free(buf)
    core.finalize()

    flag = torch.tensor([int(ok)])
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    dist.destroy_process_group()
    if rank == 0:
        print(f"reference usage on {nranks} ranks: {'verified' if flag.item() else 'FAILED'}")
    return 0 if flag.item() else 1


if __name__ == "__main__":
    sys.exit(main())
