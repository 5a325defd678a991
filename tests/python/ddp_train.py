"""An unchanged PyTorch DDP program, as torchrun runs it: the env:// rendezvous, the gloo
backend, DistributedSampler-style sharding by rank. It trains a small network on synthetic
data and checks that every replica ends with the same weights."""
import hashlib
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert rank == int(os.environ["RANK"]) and world == int(os.environ["WORLD_SIZE"])
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(1000 + rank)  # each rank its own shard
    for step in range(30):
        x = torch.randn(8, 16, generator=gen)
        y = torch.randint(0, 4, (8,), generator=gen)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()
    digests = [None] * world
    dist.all_gather_object(digests, digest)
    if rank == 0:
        print(f"replicas: {len(set(digests))} distinct of {world}; loss {loss.item():.4f}", flush=True)
    del model  # its reducer holds the process group: gone before the group is
    dist.barrier()
    dist.destroy_process_group()
    return 0 if len(set(digests)) == 1 else 3


if __name__ == "__main__":
    raise SystemExit(main())
