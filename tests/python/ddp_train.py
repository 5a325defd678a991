"""An unchanged PyTorch DDP program, as torchrun runs it: the env:// rendezvous, the gloo
backend, DistributedSampler-style sharding by rank. It trains a small network on synthetic
data and checks that every replica ends with the same weights.

--hook: trains the same network twice more, with xspawn's DDP communication hook
(xspawn.torch.allreduce_hook) and without DDP through xspawn.torch.optimizer_step, and checks
that each one's replicas agree bit for bit and end where Gloo's do (to float32 rounding)."""
import hashlib
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def train(rank, hook=None):
    """hook: None (Gloo), "ddp" (xspawn's DDP hook) or "step" (no DDP: xspawn.torch.optimizer_step)."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    if hook == "step":
        import xspawn.torch
        model = net
        xspawn.torch.broadcast(list(model.parameters()))  # as DDP does when it wraps the net
    else:
        model = DDP(net)
    if hook == "ddp":
        import xspawn.torch
        model.register_comm_hook(None, xspawn.torch.allreduce_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(1000 + rank)  # each rank its own shard
    for step in range(30):
        x = torch.randn(8, 16, generator=gen)
        y = torch.randint(0, 4, (8,), generator=gen)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        if hook == "step":
            xspawn.torch.optimizer_step(opt)
        else:
            opt.step()
    weights = [p.detach().clone() for p in model.parameters()]
    del model  # its reducer holds the process group: gone before the group is
    return weights, loss.item()


def distinct_replicas(weights, world):
    digest = hashlib.sha256(b"".join(w.numpy().tobytes() for w in weights)).hexdigest()
    digests = [None] * world
    dist.all_gather_object(digests, digest)
    return len(set(digests))


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert rank == int(os.environ["RANK"]) and world == int(os.environ["WORLD_SIZE"])
    weights, loss = train(rank)
    distinct = distinct_replicas(weights, world)
    if rank == 0:
        print(f"replicas: {distinct} distinct of {world}; loss {loss:.4f}", flush=True)
    for hook in ("ddp", "step") if "--hook" in sys.argv else ():
        hooked, hooked_loss = train(rank, hook)
        hooked_distinct = distinct_replicas(hooked, world)
        gap = max(float((a - b).abs().max()) for a, b in zip(weights, hooked))
        if rank == 0:
            print(f"xspawn {hook}: replicas {hooked_distinct} distinct of {world}; loss {hooked_loss:.4f}; "
                  f"largest weight difference to gloo {gap:.2e}", flush=True)
        distinct = max(distinct, hooked_distinct) if gap < 1e-4 else world + 1
    dist.barrier()
    dist.destroy_process_group()
    return 0 if distinct == 1 else 3


if __name__ == "__main__":
    raise SystemExit(main())
