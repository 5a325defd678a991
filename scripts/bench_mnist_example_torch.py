#!/usr/bin/python3
"""PyTorch reference for seed 002: the classic PyTorch MNIST example network, data-parallel.

The network is the one of PyTorch's examples/mnist (two 3x3 convolutions, max-pool, dropout,
two linear layers) trained with Adadelta(lr=1.0) and StepLR(step_size=1, gamma=0.7), here on
Fashion-MNIST read from the gzipped IDX files of Debian's dataset-fashion-mnist package
(pixels / 255, then normalised with Fashion-MNIST's mean 0.2860 and std 0.3530).

Data parallel: --nprocs processes started by torch.multiprocessing.spawn, gloo process group
on 127.0.0.1, DistributedDataParallel, DistributedSampler (shuffled, re-seeded every epoch) and
--batch-size images per worker and step. Every worker runs with a single intra-op thread, so
one process stands for one core. With --nprocs 1 the training runs in this process, no DDP.

Output (stdout): one `EPOCH {json}` line per epoch (global mean training loss, seconds), then
one `RESULT {json}` line with nprocs, batch_size, epochs, train_seconds (training loop only),
wall_seconds (whole script including process start), images_per_second (training images of
all epochs / train_seconds), test_accuracy (whole test set), torch_version and threads.

Run:
    python3 scripts/bench_mnist_example_torch.py --nprocs 8 --epochs 10
    python3 scripts/bench_mnist_example_torch.py --nprocs 2 --epochs 1 --train-size 2048 --test-size 512
"""
import time

SCRIPT_START = time.perf_counter()

import argparse
import datetime
import gzip
import json
import os
import struct
import sys

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data.distributed import DistributedSampler

DEFAULT_DATA_DIR = "/usr/share/datasets/fashion-mnist"  # installed by dataset-fashion-mnist
MEAN, STD = 0.2860, 0.3530


def load_idx_gz(path):
    """Reads a gzipped IDX file: uint8 images (N, 1, rows, cols) or int64 labels (N,)."""
    with gzip.open(path, "rb") as f:
        raw = f.read()
    zero, dtype_code, ndim = struct.unpack(">HBB", raw[:4])
    if zero != 0 or dtype_code != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file")
    dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    values = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if values.size != int(np.prod(dims)):
        raise ValueError(f"{path}: expected {dims}, got {values.size} values")
    if ndim == 3:
        return values.reshape(dims[0], 1, dims[1], dims[2])
    if ndim == 1:
        return values.astype(np.int64)
    raise ValueError(f"{path}: unexpected IDX rank {ndim}")


def load_split(data_dir, prefix, limit):
    images = load_idx_gz(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz"))
    labels = load_idx_gz(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz"))
    if len(images) != len(labels):
        raise ValueError(f"{prefix}: {len(images)} images but {len(labels)} labels")
    if limit > 0:
        images, labels = images[:limit], labels[:limit]
    return images, labels


def to_tensors(images, labels):
    x = torch.from_numpy(images.astype(np.float32) / 255.0)
    x = (x - MEAN) / STD
    return x.contiguous(), torch.from_numpy(labels.copy())


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = self.dropout2(x)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


def rendezvous_store(world, port=0):
    """TCP key-value store used by the workers to find each other.

    The launching process hosts the server (is_master=True) and keeps it until every worker
    has exited. If rank 0 hosted it, as init_method="tcp://..." does, rank 0 could finish and
    close it while another rank is still inside destroy_process_group, which then never
    returns. Port 0 lets the kernel pick a free port; the workers are given store.port.
    """
    return dist.TCPStore("127.0.0.1", port, world, port == 0,
                         timeout=datetime.timedelta(seconds=300), wait_for_workers=False)


def all_reduce_sum(values, world):
    t = torch.tensor(values, dtype=torch.float64)
    if world > 1:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.tolist()


def worker(rank, world, port, args, train_np, test_np, results):
    # One intra-op (and inter-op) thread per process: each process emulates one core.
    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already fixed in this process (--nprocs 1 runs in the launcher)
        pass
    if world > 1:
        dist.init_process_group("gloo", store=rendezvous_store(world, port),
                                rank=rank, world_size=world)

    train_x, train_y = to_tensors(*train_np)
    test_x, test_y = to_tensors(*test_np)

    # Same seed on every rank before the model is built, so all ranks start from the same
    # weights (DDP also broadcasts rank 0's parameters when it wraps the module).
    torch.manual_seed(args.seed)
    net = Net()
    model = DistributedDataParallel(net) if world > 1 else net
    # Different dropout masks per rank from here on.
    torch.manual_seed(args.seed + rank)

    optimizer = torch.optim.Adadelta(model.parameters(), lr=args.lr)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=args.gamma)
    sampler = DistributedSampler(range(len(train_x)), num_replicas=world, rank=rank,
                                 shuffle=True, seed=args.seed)

    if world > 1:
        dist.barrier()
    train_start = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        epoch_start = time.perf_counter()
        sampler.set_epoch(epoch)
        order = torch.tensor(list(sampler), dtype=torch.int64)
        model.train()
        loss_sum, seen = 0.0, 0
        for start in range(0, len(order), args.batch_size):
            idx = order[start:start + args.batch_size]
            x, y = train_x[idx], train_y[idx]
            optimizer.zero_grad()
            loss = F.nll_loss(model(x), y)
            loss.backward()
            optimizer.step()
            loss_sum += loss.item() * len(idx)
            seen += len(idx)
        scheduler.step()
        total_loss, total_seen = all_reduce_sum([loss_sum, seen], world)
        if rank == 0:
            line = {"epoch": epoch, "train_loss": total_loss / total_seen,
                    "seconds": time.perf_counter() - epoch_start,
                    "lr": optimizer.param_groups[0]["lr"]}
            print("EPOCH " + json.dumps(line), flush=True)
    train_seconds = time.perf_counter() - train_start

    # Evaluation: rank r takes test images r, r + world, ... (no padding, no duplicates).
    net.eval()
    correct = 0
    with torch.no_grad():
        mine = torch.arange(rank, len(test_x), world)
        for start in range(0, len(mine), 1000):
            idx = mine[start:start + 1000]
            pred = net(test_x[idx]).argmax(dim=1)
            correct += int((pred == test_y[idx]).sum())
        total_correct, total = all_reduce_sum([correct, len(mine)], world)

    if rank == 0:
        results.put({
            "nprocs": world,
            "batch_size": args.batch_size,
            "epochs": args.epochs,
            "train_seconds": train_seconds,
            "images_per_second": len(train_x) * args.epochs / train_seconds,
            "test_accuracy": total_correct / total,
            "train_size": len(train_x),
            "test_size": int(total),
            "torch_version": torch.__version__,
            "threads": torch.get_num_threads(),
        })
    if world > 1:
        dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nprocs", type=int, default=8)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=64, help="images per worker and step")
    p.add_argument("--lr", type=float, default=1.0)
    p.add_argument("--gamma", type=float, default=0.7)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--data-dir", default=DEFAULT_DATA_DIR)
    p.add_argument("--train-size", type=int, default=0, help="first N training images (0 = all)")
    p.add_argument("--test-size", type=int, default=0, help="first N test images (0 = all)")
    args = p.parse_args()
    if args.nprocs < 1 or args.epochs < 1 or args.batch_size < 1:
        p.error("--nprocs, --epochs and --batch-size must be positive")

    train_np = load_split(args.data_dir, "train", args.train_size)
    test_np = load_split(args.data_dir, "t10k", args.test_size)

    if args.nprocs == 1:
        results = mp.get_context("spawn").SimpleQueue()
        worker(0, 1, 0, args, train_np, test_np, results)
    else:
        # Children inherit these; keeps OpenMP from starting a pool per process.
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        os.environ.setdefault("MKL_NUM_THREADS", "1")
        results = mp.get_context("spawn").SimpleQueue()
        store = rendezvous_store(args.nprocs)
        mp.spawn(worker, args=(args.nprocs, store.port, args, train_np, test_np, results),
                 nprocs=args.nprocs, join=True)
    result = results.get()
    result["wall_seconds"] = time.perf_counter() - SCRIPT_START
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
