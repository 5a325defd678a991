"""The smallest xspawn program in Python: every rank contributes its gradients, all_reduce
averages them in place over shared memory, and rank 0 prints the result; then a table the
machine keeps once for all its ranks.

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

# One copy per machine of data every rank only reads (a dataset, a lookup table): local rank 0
# fills it, the others read it, read-only, once the barrier says it is filled.
table = xspawn.shared_common_array(1000, "float32")
if table is None:  # no room in the shared heap or /dev/shm: a copy of this rank's own
    table = np.arange(1000, dtype=np.float32)
elif xspawn.get_local_ordinal() == 0:
    table[:] = np.arange(1000)
xspawn.barrier("table filled")
seen = xspawn.mesh_reduce("table", float(table.sum()), min)
xspawn.master_print(f"one table per machine, read by every rank: smallest sum {seen:.0f}")
