"""xspawn from Python: the worker API torch_xla's xm/xmp give a TPU program, for a Python
program started by ``xspawn run`` (one process per emulated core), over xspawn's shared memory.

    import numpy as np, xspawn
    rank, world = xspawn.get_ordinal(), xspawn.world_size()
    grads = np.full(1000, rank, np.float32)
    xspawn.all_reduce(grads, "mean")          # in place, on every rank
    xspawn.master_print("mean", grads[0])     # printed once, by rank 0

Every call attaches to the job by itself (``init()`` does it explicitly); outside xspawn, a
program runs as a world of one. The calls check the ranks agree: ranks at different points
raise DivergenceError saying who is where, instead of hanging. Errors are one class per
xspawn error kind, all ``xspawn.Error`` (a RuntimeError) with ``.where``.

Identity:     init, initialized, get_ordinal, get_local_ordinal, world_size,
              local_world_size, is_master_ordinal, device, job_id, restart_count
Meeting:      rendezvous, barrier, mesh_reduce, master_print
Collectives:  all_reduce, broadcast, all_gather, reduce_scatter, slice_of, shared_array,
              shared_common_array
PyTorch:      xspawn.torch (a DDP communication hook, optimizer_step, tensor collectives)
See docs/pytorch.md.
"""
import pickle as _pickle
import sys as _sys

from ._xspawn import (  # noqa: F401  (the public API, documented in the extension)
    AbortedError, BackendError, CheckpointError, DataError, DeviceInfo, DivergenceError, Error,
    FaultInjectedError, FileNotFoundError, FormatError, LabelRangeError, MismatchError,
    NotInitializedError, OutOfMemoryError, SegmentError, ShapeError, ShmSpaceError, SystemError,
    TimeoutError, TruncatedError, UsageError, all_gather, all_reduce, barrier, broadcast, device,
    get_local_ordinal, get_ordinal, init, initialized, is_master_ordinal, job_id,
    local_world_size, reduce_scatter, rendezvous, restart_count, slice_of, world_size)
from ._xspawn import _shared_buffer, _shared_common_buffer

__all__ = [
    "init", "initialized", "get_ordinal", "get_local_ordinal", "world_size", "local_world_size",
    "is_master_ordinal", "device", "job_id", "restart_count", "rendezvous", "barrier",
    "mesh_reduce", "master_print", "all_reduce", "broadcast", "all_gather", "reduce_scatter",
    "slice_of", "shared_array", "shared_common_array", "DeviceInfo", "Error", "UsageError", "ShapeError", "ShmSpaceError",
    "SegmentError", "NotInitializedError", "AbortedError", "DivergenceError",
    "FaultInjectedError", "OutOfMemoryError", "BackendError", "CheckpointError", "DataError",
    "FormatError", "TruncatedError", "MismatchError", "LabelRangeError",
]  # xspawn.SystemError, .TimeoutError, .FileNotFoundError too, kept out of `import *`: they
#    would hide Python's own (which they also derive from, but not the other way round)


def shared_array(shape, dtype="float32"):
    """A NumPy array of zeros in this rank's region of the job's shared heap (xs::shared_alloc):
    all_reduce of it in place reduces straight in the ranks' arrays, with no copy in or out
    (from 64 KiB; 2-4x the bandwidth of an ordinary array at N = 8, docs/benchmarks.md). Make
    the same arrays in the same order on every rank (DivergenceError otherwise); the memory
    lasts as long as the process, so keep such arrays for long-lived buffers (gradients)."""
    import numpy as np
    if job_id() == "standalone":  # a world of one has no shared heap (and nothing to share)
        return np.zeros(shape, dtype)
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    array = np.frombuffer(_shared_buffer(max(count * dtype.itemsize, 1)), dtype, count=count).reshape(shape)
    array.fill(0)
    return array


def shared_common_array(shape, dtype="float32", owner=0):
    """One NumPy array that every rank of the machine shares (xs::shared_alloc_common), not one
    per rank: read-mostly data the machine needs once, such as a dataset. Collective: every
    rank calls it at the same point with the same shape, dtype and owner (UsageError on every
    rank otherwise). Rank `owner` (a local ordinal) gets it writable and zeroed and fills it;
    the others get it read-only (through a mapping without write access where the system gives
    one: first reads cost less, docs/collectives.md) and read it after a barrier that follows
    the owner's writes. None on every rank when the shared heap (--shared-heap) or /dev/shm has
    no room for it: keep a private array then. Its pages come from the owner's region only;
    they last as long as the job. A world of one gets an ordinary array."""
    import numpy as np
    if job_id() == "standalone":  # a world of one has no shared heap (and nothing to share)
        return np.zeros(shape, dtype)
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    buffer = _shared_common_buffer(max(count * dtype.itemsize, 1), owner)
    if buffer is None:
        return None
    array = np.frombuffer(buffer, dtype, count=count).reshape(shape)
    if array.flags.writeable:
        array.fill(0)
    return array


def master_print(*args, file=None, **kwargs):
    """print() on the job's master ordinal only (torch_xla: xm.master_print), flushed at once."""
    if is_master_ordinal(local=False):
        print(*args, file=file if file is not None else _sys.stdout, flush=True, **kwargs)


def mesh_reduce(tag, data, reduce_fn):
    """Every rank's `data` (any picklable object), reduced by reduce_fn(list in rank order), on
    every rank (torch_xla: xm.mesh_reduce), e.g. mesh_reduce("acc", correct, sum)."""
    payloads = rendezvous(tag, _pickle.dumps(data, protocol=_pickle.HIGHEST_PROTOCOL))
    return reduce_fn([_pickle.loads(p) for p in payloads])
