"""A PyTorch DDP program whose gradients are averaged over xspawn's shared memory instead of
Gloo's TCP: one line added to a torchrun program (register_comm_hook). Without DDP, the same
comes from xspawn.torch.optimizer_step(opt) in place of opt.step() (--no-ddp).

    xspawn --nprocs 4 run -- python3 examples/python/ddp_hook.py
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn

import xspawn
import xspawn.torch

dist.init_process_group("gloo")  # env:// rendezvous: xspawn run sets RANK, MASTER_PORT, ...
torch.manual_seed(0)
net = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 2))
ddp = "--no-ddp" not in sys.argv
if ddp:
    model = nn.parallel.DistributedDataParallel(net)
    model.register_comm_hook(None, xspawn.torch.allreduce_hook)
else:
    model = net
    xspawn.torch.broadcast(list(model.parameters()))  # the same start on every rank
opt = torch.optim.SGD(model.parameters(), lr=0.05)
gen = torch.Generator().manual_seed(xspawn.get_ordinal())  # each rank its own data
for step in range(50):
    x = torch.randn(32, 20, generator=gen)
    y = (x[:, 0] > 0).long()
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    if ddp:
        opt.step()
    else:
        xspawn.torch.optimizer_step(opt)
xspawn.master_print(f"{'DDP + xspawn hook' if ddp else 'optimizer_step'}: loss {loss.item():.3f} after 50 steps")
del model
dist.destroy_process_group()
