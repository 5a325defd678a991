#!/usr/bin/env python3
"""make_engine_fixtures.py: writes the golden fixtures of the engine tests with PyTorch.

For every op (forward and backward), the optimizers (a few steps) and every model (logits,
loss, gradient samples, one SGD step), it records PyTorch's results in small JSON files under
tests/engine/fixtures/, committed so the tests run without torch.

Inputs and weights come from a deterministic pattern that the C++ tests recompute bit for bit
(xs::engine::fillPattern): value_i = scale * (2 * u24(splitmix64(seed * 0x100000001b3 + i)) - 1).

    /usr/bin/python3 scripts/make_engine_fixtures.py   # needs python3-torch, python3-numpy
"""
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_engine_torch import build  # noqa: E402  (the engine's layouts in PyTorch)

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "engine", "fixtures")
M64 = (1 << 64) - 1


def mix64(z):
    z = z + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def pattern(shape, seed, scale=1.0):
    n = int(np.prod(shape))
    base = np.uint64((seed * 0x100000001B3) & M64)
    with np.errstate(over="ignore"):
        bits = mix64(base + np.arange(n, dtype=np.uint64))
    u = (bits >> np.uint64(40)).astype(np.float32) * np.float32(1.0 / 16777216.0)
    v = np.float32(scale) * (np.float32(2.0) * u - np.float32(1.0))
    return torch.from_numpy(v.astype(np.float32).reshape(shape))


def flat(t):
    """Shortest float32 text of every element, as JSON numbers."""
    return [float(str(v)) for v in t.detach().contiguous().view(-1).numpy().astype(np.float32)]


def grad_of(fn, inputs, dy_seed):
    """Forward fn(*inputs), backward with a pattern dy; returns (y, [d input])."""
    ins = [t.clone().requires_grad_(True) for t in inputs]
    y = fn(*ins)
    dy = pattern(tuple(y.shape), dy_seed)
    y.backward(dy)
    return y, dy, [t.grad for t in ins]


def op_cases():
    cases = {}

    def add(name, params, inputs, fn, seed):
        y, dy, grads = grad_of(fn, inputs, seed)
        case = {"params": params, "y": flat(y), "y_shape": list(y.shape), "dy": flat(dy)}
        for i, (t, g) in enumerate(zip(inputs, grads)):
            case[f"in{i}"] = flat(t)
            case[f"in{i}_shape"] = list(t.shape)
            case[f"grad{i}"] = flat(g)
        cases[name] = case

    x = pattern((4, 9), 1)
    add("linear", {}, [x, pattern((5, 9), 2, 0.3), pattern((5,), 3)], F.linear, 4)
    for i, (c, h, w, oc, k, s, p) in enumerate([(3, 9, 8, 4, 3, 1, 1), (3, 11, 10, 4, 5, 2, 2),
                                                (5, 7, 7, 6, 1, 2, 0), (1, 12, 12, 8, 5, 1, 1)]):
        add(f"conv2d_{i}", {"stride": s, "pad": p},
            [pattern((2, c, h, w), 10 + i), pattern((oc, c, k, k), 20 + i, 0.3), pattern((oc,), 30 + i)],
            lambda a, b, bias, s=s, p=p: F.conv2d(a, b, bias, stride=s, padding=p), 40 + i)
    for i, (k, s, p) in enumerate([(2, 2, 0), (2, 1, 0), (3, 2, 1), (3, 2, 0)]):
        add(f"maxpool_{i}", {"k": k, "stride": s, "pad": p}, [pattern((2, 3, 7, 7), 50 + i)],
            lambda a, k=k, s=s, p=p: F.max_pool2d(a, k, s, p), 60 + i)
    for i, (k, s, p) in enumerate([(2, 2, 0), (3, 2, 1)]):
        add(f"avgpool_{i}", {"k": k, "stride": s, "pad": p}, [pattern((2, 3, 7, 6), 70 + i)],
            lambda a, k=k, s=s, p=p: F.avg_pool2d(a, k, s, p), 80 + i)
    for i, (h, w, oh, ow) in enumerate([(7, 5, 3, 2), (13, 13, 6, 6), (4, 4, 1, 1)]):
        add(f"adaptive_avgpool_{i}", {"oh": oh, "ow": ow}, [pattern((2, 2, h, w), 90 + i)],
            lambda a, oh=oh, ow=ow: F.adaptive_avg_pool2d(a, (oh, ow)), 100 + i)
    add("relu", {}, [pattern((3, 4, 5), 110)], F.relu, 111)
    add("log_softmax", {}, [pattern((4, 10), 112, 3.0)], lambda a: F.log_softmax(a, 1), 113)
    for train in (True, False):
        xb = pattern((3, 4, 5, 5), 120, 2.0)
        rm, rv = pattern((4,), 121, 0.5), pattern((4,), 122, 0.5) + 1.0
        g, b = pattern((4,), 123) + 1.0, pattern((4,), 124)
        rm2, rv2 = rm.clone(), rv.clone()
        y, dy, grads = grad_of(lambda a, gg, bb: F.batch_norm(a, rm2, rv2, gg, bb, train, 0.1, 1e-5),
                               [xb, g, b], 125)
        cases["batchnorm_" + ("train" if train else "eval")] = {
            "params": {"train": train}, "in0": flat(xb), "in0_shape": list(xb.shape), "in1": flat(g),
            "in2": flat(b), "running_mean": flat(rm), "running_var": flat(rv), "y": flat(y),
            "dy": flat(dy), "grad0": flat(grads[0]), "grad1": flat(grads[1]), "grad2": flat(grads[2]),
            "running_mean_after": flat(rm2), "running_var_after": flat(rv2)}
    logits = pattern((5, 7), 130, 3.0)
    labels = [3, 0, 6, 6, 1]
    lg = logits.clone().requires_grad_(True)
    loss = F.cross_entropy(lg, torch.tensor(labels))
    loss.backward()
    lp = logits.clone().requires_grad_(True)
    nll = F.nll_loss(F.log_softmax(lp, 1), torch.tensor(labels))
    nll.backward()
    cases["cross_entropy"] = {"logits": flat(logits), "labels": labels, "loss": float(loss),
                              "grad": flat(lg.grad), "nll_loss": float(nll), "nll_grad": flat(lp.grad)}
    return cases


def optim_cases():
    cases = {}
    configs = {
        "sgd_momentum_nesterov_wd": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4),
        "sgd_momentum_dampening": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, dampening=0.1),
        "sgd_plain_wd": lambda p: torch.optim.SGD(p, lr=0.1, weight_decay=0.01),
        "adam_wd": lambda p: torch.optim.Adam(p, lr=1e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.01),
        "adam_default": lambda p: torch.optim.Adam(p, lr=1e-3),
    }
    for i, (name, make) in enumerate(configs.items()):
        p = torch.nn.Parameter(pattern((37,), 200 + i))
        opt = make([p])
        case = {"p0": flat(p), "grads": [], "after": []}
        for step in range(3):
            g = pattern((37,), 300 + 10 * i + step)
            p.grad = g.clone()
            opt.step()
            case["grads"].append(flat(g))
            case["after"].append(flat(p))
        cases[name] = case
    return cases


def sample_idx(n, k=6):
    return sorted({(j * n) // k for j in range(k)} | {n - 1})


def model_case(name, size, batch, classes=10):
    torch.manual_seed(0)
    model = build(torch, name, image_size=size, classes=classes, dropout=0.0)
    init = []
    with torch.no_grad():
        for i, (pname, p) in enumerate(model.named_parameters()):
            fan_in = int(np.prod(p.shape[1:])) if p.dim() > 1 else 0
            if pname.endswith("bn1.weight") or pname.endswith("bn2.weight"):
                scale, offset = 0.1, 1.0
            elif p.dim() > 1:
                scale, offset = 1.0 / np.sqrt(fan_in), 0.0
            else:
                scale, offset = 0.05, 0.0
            p.copy_(pattern(tuple(p.shape), 1000 + i, scale) + offset)
            init.append({"name": pname, "seed": 1000 + i, "scale": float(np.float32(scale)), "offset": offset,
                         "shape": list(p.shape)})
    c = 3 if name in ("alexnet", "resnet18") else 1
    s = size or 28
    x = pattern((batch, c, s, s), 7)
    labels = [(3 * b + 1) % classes for b in range(batch)]
    y = torch.tensor(labels)
    model.train()
    logits = model(x)
    loss = F.cross_entropy(logits, y)
    loss.backward()
    case = {"name": name, "image_size": s, "channels": c, "batch": batch, "labels": labels, "init": init,
            "logits": flat(logits), "loss": float(loss), "grads": {}, "buffers": {}, "after_step": {}}
    for pname, p in model.named_parameters():
        g = p.grad.view(-1)
        idx = sample_idx(g.numel())
        case["grads"][pname] = {"sum": float(g.double().sum()), "abs_sum": float(g.double().abs().sum()),
                                "idx": idx, "val": flat(g[idx])}
    for bname, b in model.named_buffers():
        if b.dtype == torch.float32:
            case["buffers"][bname] = flat(b)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    opt.step()
    for pname, p in model.named_parameters():
        v = p.detach().view(-1)
        idx = sample_idx(v.numel())
        case["after_step"][pname] = {"idx": idx, "val": flat(v[idx])}
    with torch.no_grad():
        case["loss_after_step"] = float(F.cross_entropy(model(x), y))
        model.eval()
        case["eval_logits"] = flat(model(x))
    return case


def main():
    torch.set_num_threads(1)
    os.makedirs(OUT, exist_ok=True)
    files = {
        "ops.json": op_cases(),
        "optim.json": optim_cases(),
        "models.json": {n: model_case(n, s, b) for n, s, b in [
            ("mlp", 0, 4), ("convnet", 0, 3), ("lenet5", 0, 3), ("alexnet", 63, 2), ("resnet18", 32, 2)]},
    }
    for fname, data in files.items():
        data["_meta"] = {"torch": torch.__version__, "generator": "scripts/make_engine_fixtures.py"}
        with open(os.path.join(OUT, fname), "w") as f:
            json.dump(data, f, separators=(",", ":"))
        print(f"wrote {fname}: {os.path.getsize(os.path.join(OUT, fname))} bytes")


if __name__ == "__main__":
    main()
