#!/usr/bin/python3
"""PyTorch under `xspawn run`: Gloo against xspawn's shared memory, in one job's processes.

  ddp        seed 004's convnet on Fashion-MNIST with DistributedDataParallel (env:// rendezvous,
             gloo process group), the gradient all-reduce by Gloo (--comm gloo) or by xspawn's
             DDP communication hook (--comm xspawn). Rank 0 prints one JSON line: images/s and
             seconds of each epoch's training loop (evaluation excluded) and the test accuracy
             after it (whole test set split across ranks).
  allreduce  the all-reduce of float32 buffers from 4 KiB to 64 MiB: xspawn.all_reduce on NumPy
             arrays, ordinary ones and ones in xspawn's shared heap (xspawn.shared_array, reduced
             with no copy), against torch.distributed.all_reduce on tensors with Gloo,
             alternating, the same sizes in the same processes. Rank 0 prints one JSON line per size: median
             seconds per call of each and the bus bandwidth, 2(N-1)/N x bytes / time.

Run by scripts/bench_torch.sh, e.g. xspawn --nprocs 8 run -- python3 scripts/bench_torch.py ddp --comm xspawn
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_train_torch import ConvNet, read_idx, test_accuracy  # noqa: E402  (as bench_train.sh has them)

import xspawn  # noqa: E402
import xspawn.torch  # noqa: E402


def ddp(args, rank, world):
    torch.manual_seed(args.seed)
    d = args.data_dir
    norm = lambda x: (torch.from_numpy(x.astype(np.float32) / 255.0) - 0.2860) / 0.3530
    train_x, train_y = norm(read_idx(f"{d}/train-images-idx3-ubyte.gz")), torch.from_numpy(read_idx(f"{d}/train-labels-idx1-ubyte.gz"))
    test_x, test_y = norm(read_idx(f"{d}/t10k-images-idx3-ubyte.gz")), torch.from_numpy(read_idx(f"{d}/t10k-labels-idx1-ubyte.gz"))
    dataset = torch.utils.data.TensorDataset(train_x, train_y)
    sampler = torch.utils.data.distributed.DistributedSampler(dataset, world, rank, shuffle=True, seed=args.seed)
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, num_workers=0)
    model = torch.nn.parallel.DistributedDataParallel(ConvNet())
    if args.comm == "xspawn":
        model.register_comm_hook(None, xspawn.torch.allreduce_hook)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    result = {"comm": args.comm, "nprocs": world, "batch_size": args.batch_size, "epochs": []}
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        model.train()
        dist.barrier()
        t0 = time.perf_counter()
        images = 0
        for x, y in loader:  # the DDP step of bench_train_torch.py, in fp32
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
            images += len(y)
        dist.barrier()
        seconds = time.perf_counter() - t0
        model.eval()
        result["epochs"].append({"seconds": seconds, "images_per_second": images * world / seconds,
                                 "test_accuracy": test_accuracy(model, test_x, test_y, rank, world)})
    if rank == 0:
        print(json.dumps(result), flush=True)
    del model  # its reducer holds the process group: gone before the group is


def allreduce(args, rank, world):
    sizes = [4 << 10 << (2 * i) for i in range(8)]  # 4 KiB .. 64 MiB
    for size in sizes:
        count = size // 4
        array = np.ones(count, np.float32)
        heap = xspawn.shared_array(count, np.float32) if args.shared_heap else None
        tensor = torch.ones(count)
        who_all = ("xspawn", "gloo") + (("xspawn_heap",) if heap is not None else ())
        times = {who: [] for who in who_all}
        reps = max(3, min(args.reps, int(args.budget_bytes // size)))
        calls = {"xspawn": lambda: xspawn.all_reduce(array), "gloo": lambda: dist.all_reduce(tensor),
                 "xspawn_heap": lambda: xspawn.all_reduce(heap)}
        for _ in range(2):  # warm up every one
            for who in who_all:
                calls[who]()
        for i in range(reps):
            for who in who_all if i % 2 == 0 else who_all[::-1]:
                xspawn.barrier("bench")
                t0 = time.perf_counter()
                calls[who]()
                times[who].append(time.perf_counter() - t0)
        # The slowest rank's time decides a collective: the max over ranks, per repetition.
        line = {"bytes": size, "nprocs": world, "reps": reps}
        for who in who_all:
            per_rep = np.array(times[who])
            xspawn.all_reduce(per_rep, "max")
            median = statistics.median(per_rep.tolist())
            line[who] = {"seconds": median, "busbw_gbs": 2 * (world - 1) / world * size / median / 1e9}
        for who in who_all[::2]:
            line[f"ratio_{who}"] = line["gloo"]["seconds"] / line[who]["seconds"]
        if rank == 0:
            print(json.dumps(line), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=["ddp", "allreduce"])
    p.add_argument("--comm", choices=["gloo", "xspawn"], default="xspawn", help="ddp: who all-reduces the gradients")
    p.add_argument("--batch-size", type=int, default=16, help="ddp: per worker")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--reps", type=int, default=50, help="allreduce: repetitions per size at most")
    p.add_argument("--budget-bytes", type=float, default=2e9, help="allreduce: fewer repetitions for large sizes")
    p.add_argument("--no-shared-heap", dest="shared_heap", action="store_false",
                   help="allreduce: leave out the arrays in xspawn's shared heap (xspawn.shared_array)")
    args = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert rank == xspawn.get_ordinal() and world == xspawn.world_size()
    (ddp if args.what == "ddp" else allreduce)(args, rank, world)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
