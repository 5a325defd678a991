"""xspawn.shared_common_array: one array per machine, written by its owner, read by every rank
through a read-only array; None on every rank when there is no room; a mismatch of sizes is a
UsageError on every rank; a world of one gets an ordinary array. Prints one line on success."""
import numpy as np

import xspawn

rank, world = xspawn.get_local_ordinal(), xspawn.local_world_size()
owner = 1 % world

a = xspawn.shared_common_array((1000, 3), "float32", owner=owner)
assert a is not None and a.shape == (1000, 3) and a.dtype == np.float32
if rank == owner:
    assert a.flags.writeable and not a.any(), "the owner's array is writable and zeroed"
    a[:] = np.arange(3000, dtype=np.float32).reshape(1000, 3)
elif world > 1:
    assert not a.flags.writeable, "another rank's array is read-only"
    try:
        a[0, 0] = 1
        raise SystemExit("rank %d wrote into the owner's array" % rank)
    except ValueError:
        pass
xspawn.barrier("filled")
assert a[999, 2] == 2999 and float(a.sum(dtype=np.float64)) == 2999 * 3000 / 2, "rank %d reads the owner's values" % rank

# The same pages: what the owner writes next (once every rank has read), every rank reads
# after the next barrier.
xspawn.barrier("read")
if rank == owner:
    a[5, 1] = -1
xspawn.barrier("changed")
assert a[5, 1] == -1

b = xspawn.shared_common_array(7, "int64")  # owner 0, its own pages
xspawn.barrier("made")  # the owner's zeroing of b happens in the call: not after another's read
if rank == 0:
    b[:] = 7
xspawn.barrier("second")
assert b.tolist() == [7] * 7 and a[999, 2] == 2999, "a second array leaves the first as it was"

if world > 1:
    # More than the shared heap holds: None on every rank, and the job goes on.
    assert xspawn.shared_common_array((1 << 40,), "uint8") is None
    # Sizes that differ between ranks: UsageError on every rank, saying what each asked for.
    try:
        xspawn.shared_common_array(8 if rank == 0 else 16, "uint8")
        raise SystemExit("rank %d: no error for different sizes" % rank)
    except xspawn.UsageError as e:
        assert "every rank must pass the same size and owner" in str(e), str(e)
    xspawn.barrier("after")

xspawn.master_print("shared_common ok on %d ranks" % world)
