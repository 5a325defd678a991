"""The smallest xspawn program in Python: every rank contributes its gradients, all_reduce
averages them in place over shared memory, and rank 0 prints the result.

    xspawn --nprocs 4 run -- python3 examples/python/allreduce.py
"""
import numpy as np

import xspawn

rank, world = xspawn.get_ordinal(), xspawn.world_size()
grads = np.full(1_000_000, float(rank), np.float32)  # this rank's "gradients"
xspawn.all_reduce(grads, "mean")                      # in place, on every rank
xspawn.master_print(f"{xspawn.device().name} of {world}: mean of ranks 0..{world - 1} = {grads[0]}")

# Any picklable value, reduced on every rank (torch_xla's xm.mesh_reduce).
total = xspawn.mesh_reduce("total", {"images": 100 * (rank + 1)}, lambda all: sum(d["images"] for d in all))
xspawn.master_print(f"images seen by all ranks: {total}")
