"""Python ranks that go wrong inside xspawn's module, by the mode in argv[1]:
  count    rank 1 all-reduces 11 elements where the others reduce 10 (DivergenceError)
  tag      rank 2 meets at another rendezvous tag than the others (DivergenceError)
  timeout  rank 1 arrives 30 s late; rank 0 gave its all_reduce timeout=1 (TimeoutError)
  kill     rank 1 SIGKILLs itself while the others wait in all_reduce (AbortedError)"""
import os
import signal
import sys
import time

import numpy as np

import xspawn

mode, rank = sys.argv[1], xspawn.get_ordinal()
data = np.ones(10, np.float32)
for step in range(3):
    xspawn.all_reduce(data)
if mode == "count":
    xspawn.all_reduce(np.ones(11 if rank == 1 else 10, np.float32))
elif mode == "tag":
    xspawn.rendezvous("checkpoint" if rank == 2 else "epoch_end", b"")
elif mode == "timeout":
    if rank == 1:
        time.sleep(30)
    try:
        xspawn.all_reduce(data, timeout=1.0 if rank == 0 else None)
    except TimeoutError as e:  # the builtin: xspawn.TimeoutError derives from it
        print(f"rank {rank} caught {type(e).__module__}.{type(e).__name__}", flush=True)
        raise
elif mode == "kill":
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        xspawn.all_reduce(data)
    except xspawn.AbortedError as e:
        print(f"rank {rank} caught {type(e).__name__}: {e}", flush=True)
        raise
print(f"rank {rank} got past the fault", flush=True)
