"""A DDP-style loop of gloo all-reduces; rank 1 SIGKILLs itself after a few steps, leaving
the others blocked in gloo."""
import os
import signal

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.ones(1 << 16)
for step in range(100000):
    dist.all_reduce(t)
    if step == 5:
        print(f"rank {dist.get_rank()} at step 5", flush=True)
        if dist.get_rank() == 1:
            os.kill(os.getpid(), signal.SIGKILL)
