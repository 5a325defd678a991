#!/usr/bin/python3
"""PyTorch DDP counterpart of `xspawn train` for scripts/bench_train.sh.

Seed 004's convnet on Fashion-MNIST with DistributedDataParallel (gloo backend), started by
torch.multiprocessing.spawn with one thread per process, DistributedSampler and a per-worker
batch, the same normalisation as xspawn. Prints one JSON line (rank 0): images/s per epoch,
training seconds per epoch, test accuracy after each epoch (whole test set split across ranks)
and the training time until the test accuracy first reached the target.
"""
import argparse
import gzip
import json
import os
import struct
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic = struct.unpack(">I", data[:4])[0]
    if magic == 0x803:
        n, rows, cols = struct.unpack(">III", data[4:16])
        return np.frombuffer(data, np.uint8, offset=16).reshape(n, 1, rows, cols)
    n = struct.unpack(">I", data[4:8])[0]
    return np.frombuffer(data, np.uint8, offset=8).astype(np.int64)


class ConvNet(nn.Module):
    """Seed 004: conv 1->32 k5 p1, pool 2, conv 32->64 k3, pool k2 s1, conv 64->128 k3, pool 2, fc 2048->10."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 5, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3)
        self.conv3 = nn.Conv2d(64, 128, 3)
        self.fc1 = nn.Linear(2048, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2, 1)
        x = F.max_pool2d(F.relu(self.conv3(x)), 2)
        return self.fc1(torch.flatten(x, 1))


def worker(rank, args):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=rank, world_size=args.nprocs)
    torch.manual_seed(args.seed)
    d = args.data_dir
    norm = lambda x: (torch.from_numpy(x.astype(np.float32) / 255.0) - 0.2860) / 0.3530
    train_x = norm(read_idx(f"{d}/train-images-idx3-ubyte.gz"))
    train_y = torch.from_numpy(read_idx(f"{d}/train-labels-idx1-ubyte.gz"))
    test_x = norm(read_idx(f"{d}/t10k-images-idx3-ubyte.gz"))
    test_y = torch.from_numpy(read_idx(f"{d}/t10k-labels-idx1-ubyte.gz"))
    dataset = torch.utils.data.TensorDataset(train_x, train_y)
    sampler = torch.utils.data.distributed.DistributedSampler(dataset, args.nprocs, rank, shuffle=True, seed=args.seed)
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, num_workers=0)
    model = nn.parallel.DistributedDataParallel(ConvNet())
    if args.optimizer == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    n = len(test_y)
    first, last = n * rank // args.nprocs, n * (rank + 1) // args.nprocs
    result = {"nprocs": args.nprocs, "epochs": [], "time_to_target": None}
    trained = 0.0
    steps = 0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        model.train()
        dist.barrier()
        t0 = time.perf_counter()
        images = 0
        for x, y in loader:
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            images += len(y)
            steps += 1
            if args.max_steps and steps >= args.max_steps:
                break
        dist.barrier()
        seconds = time.perf_counter() - t0
        trained += seconds
        model.eval()
        with torch.no_grad():
            correct = torch.zeros(2)
            for i in range(first, last, 500):
                xb, yb = test_x[i:min(i + 500, last)], test_y[i:min(i + 500, last)]
                correct[0] += (model(xb).argmax(1) == yb).sum()
                correct[1] += len(yb)
            dist.all_reduce(correct)
        acc = float(correct[0] / correct[1])
        result["epochs"].append({"seconds": seconds, "images_per_second": images * args.nprocs / seconds, "test_accuracy": acc})
        if result["time_to_target"] is None and acc >= args.target:
            result["time_to_target"] = trained
        if args.max_steps and steps >= args.max_steps:
            break
    if rank == 0:
        print(json.dumps(result), flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--nprocs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=100)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--optimizer", default="adam")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--momentum", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--target", type=float, default=0.90)
    p.add_argument("--max-steps", type=int, default=0)
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--port", type=int, default=29517)
    args = p.parse_args()
    os.environ["OMP_NUM_THREADS"] = "1"
    mp.spawn(worker, args=(args,), nprocs=args.nprocs, join=True)


if __name__ == "__main__":
    main()
