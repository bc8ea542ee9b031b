"""A torchrun job across hosts, run by test_multihost.py (one torchrun per
host, each in its own network namespace).

    torchrun --nnodes 2 --node-rank I --nproc-per-node K \\
        --master-addr HOST0 --master-port P hosts_job.py

Every PE joins twice, the two ways a torchrun user starts shmem:

1. ``core.init()`` from torchrun's variables (RANK, WORLD_SIZE,
   MASTER_ADDR; the config store on MASTER_PORT+1, rank 0 hosting it);
2. ``initializer_method="uid"`` with rank 0's unique id broadcast over
   ``torch.distributed`` (gloo), as the reference's scripts do.

Each time it moves torch tensors between PEs on different hosts (put with
a signal of 4 KiB and 1 MiB, addressed with peer views as the reference
does, get, atomics from every PE, fcollect and sum reductions, the
``AllGather`` tensor operator) and checks every result against values it
computes itself. Each PE prints ``PE r/n node i: torchrun env verified``
and then ``... torchrun uid verified``; any mismatch raises, so the PE and
its torchrun exit non-zero.
"""

import os
import sys

import torch
import torch.distributed as dist

import shmem
import shmem.core as core
from shmem.torch import AllGather

SMALL = 1024          # float32 elements: 4 KiB, put-with-signal's atomic-write path
LARGE = 256 * 1024    # float32 elements: 1 MiB, data then signal


def pattern(rank, n, salt):
    """What PE ``rank`` sends: distinct per PE, size and round."""
    return torch.arange(n, dtype=torch.float32) * 0.5 + rank * 1000.0 + salt


def expect(cond, what):
    if not cond:
        raise AssertionError(f"PE {core.my_pe()}: {what}")


def say(line):
    """One line in one write: the node's PEs share torchrun's stdout."""
    os.write(1, (line + "\n").encode())


def tensor(buf, dtype):
    return torch.from_dlpack(buf).view(dtype)


def work(salt):
    me, n = core.my_pe(), core.n_pes()
    local = int(os.environ["LOCAL_WORLD_SIZE"])
    # The same local rank on the next host: always a PE on another host.
    peer, left = (me + local) % n, (me - local) % n
    expect(me // local != peer // local, "the peer must be on another host")

    for count in (SMALL, LARGE):
        src, dst, sig = core.buffer(count * 4), core.buffer(count * 4), core.buffer(8)
        s, d, g = tensor(src, torch.float32), tensor(dst, torch.float32), tensor(sig, torch.int64)
        s[:] = pattern(me, count, salt)
        d.zero_()
        g.zero_()
        core.barrier_all()
        # Put with a signal to the other host (shmem.core's stream-ordered
        # form, the destination named by a peer view as the reference's
        # scripts do), then wait for the left neighbour's.
        core.put_signal(core.get_peer_buffer(dst, peer), src, sig, 1, core.SignalOp.SIGNAL_SET, peer)
        shmem.signal_wait(g, 1, core.ComparisonType.CMP_EQ)
        expect(torch.equal(d, pattern(left, count, salt)), f"put_signal of {count * 4} B from PE {left}")
        # Get from the other host into a plain tensor.
        got = torch.zeros(count, dtype=torch.float32)
        shmem.get(got, s if count == SMALL else core.get_peer_buffer(src, peer), peer)
        expect(torch.equal(got, pattern(peer, count, salt)), f"get of {count * 4} B from PE {peer}")
        core.barrier_all()
        del s, d, g  # views of memory about to be freed
        core.free(sig)
        core.free(dst)
        core.free(src)

    # Atomics from every PE on counters of PE 0 (host 0) and PE n-1 (the last host).
    ctr = core.buffer(16)
    c = tensor(ctr, torch.int64)
    c.zero_()
    core.barrier_all()
    shmem.atomic_add(c[0:1], me + 1, 0)
    old = shmem.atomic_fetch_add(c[1:2], 10 * (me + 1), n - 1)
    expect(old % 10 == 0 and 0 <= old < 10 * n * (n + 1) // 2, f"atomic_fetch_add returned {old}")
    core.barrier_all()
    total = n * (n + 1) // 2
    expect(shmem.atomic_fetch(c[0:1], 0) == total, "atomic adds at PE 0")
    expect(shmem.atomic_fetch(c[1:2], n - 1) == 10 * total, f"atomic adds at PE {n - 1}")
    core.barrier_all()
    del c
    core.free(ctr)

    # Collectives on torch views of symmetric memory.
    a, b = core.buffer(64 * 8), core.buffer(64 * 8 * n)
    x, y = tensor(a, torch.int64), tensor(b, torch.int64)
    x[:] = torch.arange(64) + 100 * me + salt
    shmem.fcollect(shmem.TEAM_WORLD, y, x)
    expect(torch.equal(y, torch.cat([torch.arange(64) + 100 * r + salt for r in range(n)])), "fcollect")
    xf, yf = tensor(a, torch.float64), tensor(b, torch.float64)[:64]
    xf[:] = torch.arange(64, dtype=torch.float64) * (me + 1)
    shmem.sum_reduce(shmem.TEAM_WORLD, yf, xf)
    expect(torch.equal(yf, torch.arange(64, dtype=torch.float64) * total), f"sum_reduce gave {yf}")
    core.barrier_all()
    del x, y, xf, yf
    core.free(b)
    core.free(a)

    # The reference's tensor operator, on plain tensors.
    out = torch.zeros(16 * n)
    AllGather().compute(out, torch.full((16,), me + salt, dtype=torch.float32))
    expect(torch.equal(out, (torch.arange(n, dtype=torch.float32) + salt).repeat_interleave(16)),
           f"AllGather gave {out}")
    core.barrier_all()


def main():
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    node = int(os.environ["GROUP_RANK"])
    mem = 16 << 20

    # 1. torchrun's variables.
    core.init(mem_size=mem)
    expect((core.my_pe(), core.n_pes()) == (rank, world), "rank and size from torchrun")
    work(salt=1)
    core.finalize()
    say(f"PE {rank}/{world} node {node}: torchrun env verified")

    # 2. UID broadcast over torch.distributed.
    dist.init_process_group("gloo")
    raw = core.get_unique_id() if rank == 0 else core.get_unique_id(empty=True)
    uid = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
    dist.broadcast(uid, src=0)
    core.init(uid=uid, rank=rank, nranks=world, mem_size=mem, initializer_method="uid")
    work(salt=2)
    core.finalize()
    dist.barrier()
    dist.destroy_process_group()
    say(f"PE {rank}/{world} node {node}: torchrun uid verified")
    return 0


if __name__ == "__main__":
    sys.exit(main())
