#!/usr/bin/env python3
"""UniqueId start-up under torchrun, with torch.distributed (gloo)
broadcasting the id.

    torchrun --nproc_per_node 4 examples/python/torchrun_uid.py

Rank 0 makes the id; every rank receives it through a gloo broadcast of a
uint8 tensor and joins with ``initializer_method="uid"``. The job then
allgathers each rank's number over symmetric memory and checks it.
"""

import sys

import numpy as np
import torch
import torch.distributed as dist

import shmem
import shmem.core as core


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    raw = core.get_unique_id() if rank == 0 else core.get_unique_id(empty=True)
    uid = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
    dist.broadcast(uid, src=0)
    core.init(uid=uid, rank=rank, nranks=world, mem_size=32 << 20, initializer_method="uid")

    src, dst = core.buffer(8), core.buffer(8 * world)
    src.numpy(np.int64)[0] = rank * 7
    shmem.fcollect(shmem.TEAM_WORLD, dst.numpy(np.int64), src.numpy(np.int64))
    ok = dst.numpy(np.int64).tolist() == [r * 7 for r in range(world)]
    core.free(dst)
    core.free(src)
    core.finalize()

    flag = torch.tensor([int(ok)])
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    dist.destroy_process_group()
    if rank == 0:
        print(f"torchrun + UID init on {world} ranks: {'verified' if flag.item() else 'FAILED'}")
    return 0 if flag.item() else 1


if __name__ == "__main__":
    sys.exit(main())
