#!/usr/bin/python3
"""PyTorch DDP counterpart of `xspawn train` for scripts/bench_train.sh.

Seed 004's convnet on Fashion-MNIST with DistributedDataParallel (gloo backend), started by
torch.multiprocessing.spawn with one thread per process, DistributedSampler and a per-worker
batch, the same normalisation as xspawn. Prints one JSON line (rank 0): images/s per epoch,
training seconds per epoch, test accuracy after each epoch (whole test set split across ranks)
and the training time until the test accuracy first reached the target; with --stop-at-target
the run ends at the first evaluation that reaches it.

`--model alexnet --image-size S` is seed 000's network (torchvision's AlexNet layout and default
initialisation, written out here) on seed 000's preprocessing: bilinear resize of the grey image
to SxS, rounded to 8 bits as PIL does, repeated to RGB, ImageNet normalisation; the last partial
batch is dropped (drop_last=True), as in seed 000.
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


class AlexNet(nn.Module):
    """torchvision.models.alexnet(num_classes=10): the same layers, names and default init."""

    def __init__(self, classes=10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, 11, 4, 2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2),
            nn.Conv2d(64, 192, 5, padding=2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2),
            nn.Conv2d(192, 384, 3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(384, 256, 3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2))
        self.avgpool = nn.AdaptiveAvgPool2d((6, 6))
        self.classifier = nn.Sequential(
            nn.Dropout(0.5), nn.Linear(256 * 6 * 6, 4096), nn.ReLU(inplace=True),
            nn.Dropout(0.5), nn.Linear(4096, 4096), nn.ReLU(inplace=True), nn.Linear(4096, classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


IMAGENET_MEAN = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
IMAGENET_STD = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)


def seed000_transform(x, size):
    """[B,1,28,28] in [0,1] -> Resize((size,size)) (bilinear, 8-bit result), RGB, ImageNet normalisation."""
    x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False)
    x = torch.round(x * 255.0).clamp(0, 255) / 255.0
    return (x.expand(-1, 3, -1, -1) - IMAGENET_MEAN) / IMAGENET_STD


def seed000_share_accuracy(model, test_x, test_y, prep):
    """The accuracy seed 000 printed: its master's share of the test set, DistributedSampler(8 replicas,
    shuffle=False) rank 0, i.e. indices 0, 8, 16, ..., in batches of 32 with drop_last: 1248 images."""
    index = torch.arange(0, 8 * 1248, 8)
    correct = 0
    with torch.no_grad():
        for i in range(0, len(index), 32):
            j = index[i:i + 32]
            correct += int((model(prep(test_x[j])).argmax(1) == test_y[j]).sum())
    return correct / len(index)


def test_accuracy(model, test_x, test_y, rank, world, prep=lambda x: x):
    """The whole test set's accuracy, each rank evaluating its contiguous share in batches of 500."""
    n = len(test_y)
    first, last = n * rank // world, n * (rank + 1) // world
    with torch.no_grad():
        correct = torch.zeros(2)
        for i in range(first, last, 500):
            xb, yb = test_x[i:min(i + 500, last)], test_y[i:min(i + 500, last)]
            correct[0] += (model(prep(xb)).argmax(1) == yb).sum()
            correct[1] += len(yb)
        dist.all_reduce(correct)
    return float(correct[0] / correct[1])


def worker(rank, args):
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=rank, world_size=args.nprocs)
    torch.manual_seed(args.seed)
    d = args.data_dir
    alexnet = args.model == "alexnet"
    if alexnet:  # resized per batch: the whole set at SxSx3 would not fit in memory
        norm = lambda x: torch.from_numpy(x.astype(np.float32) / 255.0)
        prep = lambda x: seed000_transform(x, args.image_size)
    else:
        norm = lambda x: (torch.from_numpy(x.astype(np.float32) / 255.0) - 0.2860) / 0.3530
        prep = lambda x: x
    train_x = norm(read_idx(f"{d}/train-images-idx3-ubyte.gz"))
    train_y = torch.from_numpy(read_idx(f"{d}/train-labels-idx1-ubyte.gz"))
    test_x = norm(read_idx(f"{d}/t10k-images-idx3-ubyte.gz"))
    test_y = torch.from_numpy(read_idx(f"{d}/t10k-labels-idx1-ubyte.gz"))
    dataset = torch.utils.data.TensorDataset(train_x, train_y)
    sampler = torch.utils.data.distributed.DistributedSampler(dataset, args.nprocs, rank, shuffle=True, seed=args.seed)
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, num_workers=0,
                                         drop_last=alexnet)
    model = nn.parallel.DistributedDataParallel(AlexNet() if alexnet else ConvNet())
    if args.optimizer == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=args.lr, betas=tuple(float(b) for b in args.betas.split(",")))
    else:
        opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    # --precision bf16: CPU autocast, PyTorch's mixed precision (bf16 convolutions and matmuls,
    # fp32 weights, gradients and optimizer), the counterpart of xspawn's --precision bf16.
    autocast = lambda: torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16")
    # --lr-schedule onecycle: xspawn train's (torch's OneCycleLR, no momentum cycling), stepped
    # after every optimizer step over the whole run.
    sched = None
    if args.lr_schedule == "onecycle":
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.lr, total_steps=len(loader) * args.epochs,
                                                    cycle_momentum=False)
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
            with autocast():
                loss = F.cross_entropy(model(prep(x)), y, label_smoothing=args.label_smoothing)
            loss.backward()
            opt.step()
            if sched:
                sched.step()
            images += len(y)
            steps += 1
            if args.progress and rank == 0 and steps % args.progress == 0:
                print(json.dumps({"step": steps, "loss": float(loss), "seconds": time.perf_counter() - t0}), flush=True)
            if args.max_steps and steps >= args.max_steps:
                break
        dist.barrier()
        seconds = time.perf_counter() - t0
        trained += seconds
        model.eval()
        with autocast():
            acc = test_accuracy(model, test_x, test_y, rank, args.nprocs, prep)
        entry = {"seconds": seconds, "images_per_second": images * args.nprocs / seconds, "test_accuracy": acc}
        if alexnet and rank == 0:
            entry["seed000_share_accuracy"] = seed000_share_accuracy(model, test_x, test_y, prep)
        result["epochs"].append(entry)
        result["precision"] = args.precision
        if result["time_to_target"] is None and acc >= args.target:
            result["time_to_target"] = trained
            if args.stop_at_target:
                break
        if args.max_steps and steps >= args.max_steps:
            break
    if rank == 0:
        print(json.dumps(result), flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--nprocs", type=int, default=2)
    p.add_argument("--model", choices=["convnet", "alexnet"], default="convnet")
    p.add_argument("--image-size", type=int, default=64, help="alexnet only")
    p.add_argument("--threads", type=int, default=1, help="torch threads per process")
    p.add_argument("--stop-at-target", action="store_true")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32", help="bf16: torch.autocast on the CPU")
    p.add_argument("--progress", type=int, default=0, help="print the loss every N steps (rank 0)")
    p.add_argument("--batch-size", type=int, default=100)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--optimizer", default="adam")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--lr-schedule", choices=["constant", "onecycle"], default="constant")
    p.add_argument("--momentum", type=float, default=0.0)
    p.add_argument("--betas", default="0.9,0.999", help="Adam's B1,B2")
    p.add_argument("--label-smoothing", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--target", type=float, default=0.90)
    p.add_argument("--max-steps", type=int, default=0)
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--port", type=int, default=29517)
    args = p.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    mp.spawn(worker, args=(args,), nprocs=args.nprocs, join=True)


if __name__ == "__main__":
    main()
