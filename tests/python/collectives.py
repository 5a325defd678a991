"""xspawn's Python collectives against NumPy references, on every rank: all_reduce for every
type, op and algorithm and sizes across the staging chunks, broadcast from every root,
all_gather and reduce_scatter in both forms, arrays in the shared heap (shared_array), tensors
through xspawn.torch (bfloat16 included),
rendezvous and mesh_reduce; then the bad inputs, each a UsageError saying what is wrong."""
import sys

import numpy as np

import xspawn

RANK, WORLD = xspawn.get_ordinal(), xspawn.world_size()
TYPES = [np.float32, np.float64, np.int32, np.int64]
OPS = ["sum", "mean", "max", "min"]
SIZES = [1, 1000, 700_001]  # one element; a few KiB; past one 2 MiB staging buffer
ALGORITHMS = ["auto", "ring", "two-shot", "one-shot", "ps"]


def data(rank, n, dtype, salt=0):
    rng = np.random.default_rng(1000 * rank + salt)
    return (rng.integers(-500, 500, n) if np.issubdtype(dtype, np.integer) else rng.standard_normal(n)).astype(dtype)


def reference(arrays, op):
    acc = arrays[0].copy()
    for a in arrays[1:]:  # in rank order, in the element type, as xspawn reduces
        acc = acc + a if op in ("sum", "mean") else (np.maximum(acc, a) if op == "max" else np.minimum(acc, a))
    if op == "mean":
        acc = np.trunc(acc / WORLD).astype(acc.dtype) if np.issubdtype(acc.dtype, np.integer) else acc / acc.dtype.type(WORLD)
    return acc


def check(got, want, what):
    exact = np.issubdtype(want.dtype, np.integer)
    ok = np.array_equal(got, want) if exact else np.allclose(got, want, rtol=1e-6, atol=1e-6)
    if not ok:
        bad = np.flatnonzero(got != want)[:5]
        sys.exit(f"rank {RANK}: {what}: got {got[bad]} want {want[bad]} at {bad}")


def all_reduce_cases():
    salt = 0
    for dtype in TYPES:
        for op in OPS:
            for n in SIZES:
                for algorithm in ALGORITHMS if n == 1000 else ["auto"]:
                    salt += 1
                    mine = data(RANK, n, dtype, salt)
                    xspawn.all_reduce(mine, op, algorithm=algorithm)
                    want = reference([data(r, n, dtype, salt) for r in range(WORLD)], op)
                    check(mine, want, f"all_reduce {op} {np.dtype(dtype).name}[{n}] {algorithm}")
    return salt


def shared_heap_cases():
    """Arrays in the shared heap: reduced in place with no copy from 64 KiB, as any array below."""
    for dtype in (np.float32, np.int64):
        for n in (100, 300_000):
            heap = xspawn.shared_array((n // 100, 100), dtype)
            assert heap.shape == (n // 100, 100) and not heap.any()
            heap[:] = data(RANK, n, dtype, 31).reshape(heap.shape)
            xspawn.all_reduce(heap, "sum")
            check(heap.reshape(-1), reference([data(r, n, dtype, 31) for r in range(WORLD)], "sum"),
                  f"all_reduce of a shared_array {np.dtype(dtype).name}[{n}]")


def bfloat16_bits(x):
    bits = x.astype(np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)  # round to nearest even


def from_bits(b):
    return (b.astype(np.uint32) << 16).view(np.float32)


def bfloat16_case():
    n = 5000
    mine = bfloat16_bits(data(RANK, n, np.float32, 77))
    xspawn.all_reduce(mine, "sum", dtype="bfloat16")
    want = sum(from_bits(bfloat16_bits(data(r, n, np.float32, 77))) for r in range(WORLD))
    if not np.allclose(from_bits(mine), want, rtol=1e-2, atol=1e-2):
        sys.exit(f"rank {RANK}: all_reduce bfloat16: off by {np.abs(from_bits(mine) - want).max()}")


def broadcast_gather_scatter_cases():
    for dtype in TYPES:
        for root in range(WORLD):
            mine = data(RANK, 3001, dtype, 500 + root)
            xspawn.broadcast(mine, root)
            check(mine, data(root, 3001, dtype, 500 + root), f"broadcast {np.dtype(dtype).name} root {root}")
        for n in (WORLD - 1, 10_007, 600_000):
            full = np.concatenate([data(r, n, dtype, 900)[slice(*span(n, r))] for r in range(WORLD)])
            first, size = xspawn.slice_of(n)
            out = np.zeros(n, dtype)
            xspawn.all_gather(out, data(RANK, n, dtype, 900)[first:first + size])
            check(out, full, f"all_gather {np.dtype(dtype).name}[{n}]")
            inplace = np.zeros(n, dtype)
            inplace[first:first + size] = data(RANK, n, dtype, 900)[first:first + size]
            xspawn.all_gather(inplace)
            check(inplace, full, f"all_gather in place {np.dtype(dtype).name}[{n}]")
            want = reference([data(r, n, dtype, 901) for r in range(WORLD)], "sum")[first:first + size]
            out = np.zeros(size, dtype)
            xspawn.reduce_scatter(data(RANK, n, dtype, 901), out)
            check(out, want, f"reduce_scatter {np.dtype(dtype).name}[{n}]")
            inplace = data(RANK, n, dtype, 901)
            xspawn.reduce_scatter(inplace, op="sum")
            check(inplace[first:first + size], want, f"reduce_scatter in place {np.dtype(dtype).name}[{n}]")


def span(n, r):
    first, size = xspawn.slice_of(n, r)
    return first, first + size


def torch_cases():
    import torch
    import xspawn.torch as xt
    for dtype in (torch.float32, torch.float64, torch.int32, torch.int64, torch.bfloat16):
        t = torch.full((4, 5), RANK + 1, dtype=dtype)
        xt.all_reduce([t], "sum")
        if not torch.equal(t, torch.full((4, 5), WORLD * (WORLD + 1) // 2, dtype=dtype)):
            sys.exit(f"rank {RANK}: xspawn.torch.all_reduce {dtype}: {t}")
    b = torch.arange(6, dtype=torch.float32) * (RANK + 1)
    xt.broadcast(b, root=WORLD - 1)
    if not torch.equal(b, torch.arange(6, dtype=torch.float32) * WORLD):
        sys.exit(f"rank {RANK}: xspawn.torch.broadcast: {b}")


def meeting_cases():
    payloads = xspawn.rendezvous("hello", f"rank {RANK}".encode())
    assert payloads == [f"rank {r}".encode() for r in range(WORLD)], payloads
    assert xspawn.mesh_reduce("total", {"n": RANK}, lambda xs: sum(x["n"] for x in xs)) == WORLD * (WORLD - 1) // 2
    xspawn.barrier()


def expect_usage_error(call, words):
    try:
        call()
    except xspawn.UsageError as e:
        if words not in str(e):
            sys.exit(f"rank {RANK}: expected '{words}' in: {e}")
        return
    sys.exit(f"rank {RANK}: no UsageError for {words}")


def bad_input_cases():
    ro = np.zeros(4, np.float32)
    ro.flags.writeable = False
    expect_usage_error(lambda: xspawn.all_reduce(ro), "read-only")
    expect_usage_error(lambda: xspawn.all_reduce(np.zeros(8, np.float32)[::2]), "not C-contiguous")
    expect_usage_error(lambda: xspawn.all_reduce(np.zeros(4, np.uint8)), "format 'B'")
    expect_usage_error(lambda: xspawn.all_reduce(np.zeros(4, np.float32), "prod"), "op='prod'")
    expect_usage_error(lambda: xspawn.all_reduce(np.zeros(4, np.float32), dtype="bfloat16"), "2-byte")
    expect_usage_error(lambda: xspawn.all_reduce(np.zeros(4, np.float32), algorithm="tree"), "unknown algorithm")
    expect_usage_error(lambda: xspawn.all_reduce(np.zeros(4, np.float32), timeout=-1), "timeout=-1")
    expect_usage_error(lambda: xspawn.broadcast(np.zeros(4, np.float32), WORLD), f"root={WORLD}")
    expect_usage_error(lambda: xspawn.all_gather(np.zeros(100, np.float32), np.zeros(1, np.float32)), "slice")
    expect_usage_error(lambda: xspawn.reduce_scatter(np.zeros(100, np.float32), np.zeros(100, np.int32)), "same type")
    assert issubclass(xspawn.UsageError, ValueError) and issubclass(xspawn.DivergenceError, xspawn.AbortedError)
    assert issubclass(xspawn.TimeoutError, TimeoutError) and issubclass(xspawn.Error, RuntimeError)


def main():
    cases = all_reduce_cases()
    bfloat16_case()
    shared_heap_cases()
    broadcast_gather_scatter_cases()
    torch_cases()
    meeting_cases()
    bad_input_cases()
    xspawn.barrier("done")  # the failed calls above left every rank in step
    xspawn.master_print(f"collectives ok: {cases} all_reduce cases on {WORLD} ranks")


if __name__ == "__main__":
    main()
