#!/usr/bin/env python3
"""bench_engine_torch.py: the PyTorch peer of xspawn-bench-engine, and the PyTorch twins of the
engine's models (imported by make_engine_fixtures.py).

Trains the same model on the same batch on one thread (forward, backward, SGD step with momentum)
and prints one JSON line: {"images_per_s": ..., "ms_per_step": ..., "wall_ms_per_step": ...,
"torch": "1.13.1"}; the per-step figures are the main thread's CPU time (median).
bf16 runs the forward under torch.autocast (bf16 matrix products, fp32 master weights).

    python3 scripts/bench_engine_torch.py --model convnet --batch 100 --precision fp32
"""
import argparse
import collections
import json
import statistics
import sys
import time


def build(torch, name, channels=None, image_size=None, classes=10, dropout=0.5):
    """The engine's layout of `name`, with the engine's parameter names."""
    nn = torch.nn
    colour = name in ("alexnet", "resnet18")
    c = channels or (3 if colour else 1)
    s = image_size or {"alexnet": 224, "resnet18": 32}.get(name, 28)

    def seq(*pairs):
        return nn.Sequential(collections.OrderedDict(pairs))

    def flat_size(features):
        with torch.no_grad():
            return features(torch.zeros(1, c, s, s)).numel()

    if name == "mlp":
        return seq(("flatten", nn.Flatten()), ("fc1", nn.Linear(c * s * s, 256)), ("relu1", nn.ReLU()),
                   ("fc2", nn.Linear(256, 128)), ("relu2", nn.ReLU()), ("fc3", nn.Linear(128, classes)))
    if name == "convnet":
        f = [("conv1", nn.Conv2d(c, 32, 5, 1, 1)), ("relu1", nn.ReLU()), ("maxpool1", nn.MaxPool2d(2, 2)),
             ("conv2", nn.Conv2d(32, 64, 3)), ("relu2", nn.ReLU()), ("maxpool2", nn.MaxPool2d(2, 1)),
             ("conv3", nn.Conv2d(64, 128, 3)), ("relu3", nn.ReLU()), ("maxpool3", nn.MaxPool2d(2, 2))]
        n = flat_size(seq(*f))
        return seq(*f, ("flatten", nn.Flatten()), ("fc1", nn.Linear(n, classes)))
    if name == "lenet5":
        f = [("conv1", nn.Conv2d(c, 6, 5, 1, 2)), ("relu1", nn.ReLU()), ("pool1", nn.AvgPool2d(2, 2)),
             ("conv2", nn.Conv2d(6, 16, 5)), ("relu2", nn.ReLU()), ("pool2", nn.AvgPool2d(2, 2))]
        n = flat_size(seq(*f))
        return seq(*f, ("flatten", nn.Flatten()), ("fc1", nn.Linear(n, 120)), ("relu3", nn.ReLU()),
                   ("fc2", nn.Linear(120, 84)), ("relu4", nn.ReLU()), ("fc3", nn.Linear(84, classes)))
    if name == "alexnet":
        features = nn.Sequential(
            nn.Conv2d(c, 64, 11, 4, 2), nn.ReLU(), nn.MaxPool2d(3, 2),
            nn.Conv2d(64, 192, 5, 1, 2), nn.ReLU(), nn.MaxPool2d(3, 2),
            nn.Conv2d(192, 384, 3, 1, 1), nn.ReLU(), nn.Conv2d(384, 256, 3, 1, 1), nn.ReLU(),
            nn.Conv2d(256, 256, 3, 1, 1), nn.ReLU(), nn.MaxPool2d(3, 2))
        classifier = nn.Sequential(
            nn.Dropout(dropout), nn.Linear(256 * 6 * 6, 4096), nn.ReLU(),
            nn.Dropout(dropout), nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, classes))
        return seq(("features", features), ("avgpool", nn.AdaptiveAvgPool2d((6, 6))),
                   ("flatten", nn.Flatten()), ("classifier", classifier))
    if name == "resnet18":
        class Block(nn.Module):
            def __init__(self, cin, cout, stride):
                super().__init__()
                self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1)
                self.bn1 = nn.BatchNorm2d(cout)
                self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1)
                self.bn2 = nn.BatchNorm2d(cout)
                self.conv3 = nn.Conv2d(cin, cout, 1, stride) if stride != 1 or cin != cout else None

            def forward(self, x):
                y = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
                return torch.relu(y + (self.conv3(x) if self.conv3 is not None else x))

        layers = [("conv1", nn.Conv2d(c, 64, 3, 1, 1)), ("bn1", nn.BatchNorm2d(64)), ("relu", nn.ReLU())]
        cin = 64
        for i, w in enumerate((64, 128, 256, 512)):
            layers.append((f"layer{i + 1}", nn.Sequential(Block(cin, w, 1 if i == 0 else 2), Block(w, w, 1))))
            cin = w
        layers += [("avgpool", nn.AdaptiveAvgPool2d(1)), ("flatten", nn.Flatten()), ("fc", nn.Linear(512, classes))]
        return seq(*layers)
    raise SystemExit(f"bench_engine_torch.py: unknown model '{name}'")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="convnet")
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--image-size", type=int, default=0)
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    ap.add_argument("--iters", type=int, default=10)
    a = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("bench_engine_torch.py: torch is not installed (apt-get install python3-torch)", file=sys.stderr)
        return 3
    torch.set_num_threads(1)
    torch.manual_seed(1234)
    model = build(torch, a.model, image_size=a.image_size or None)
    c = 3 if a.model in ("alexnet", "resnet18") else 1
    s = a.image_size or {"alexnet": 224, "resnet18": 32}.get(a.model, 28)
    x = torch.rand(a.batch, c, s, s) * 2 - 1
    y = torch.arange(a.batch) % 10
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    model.train()
    times, wall = [], []  # thread CPU time per step (robust on a shared machine), wall time
    for it in range(a.iters + 2):
        c0, t0 = time.thread_time(), time.perf_counter()
        opt.zero_grad()
        if a.precision == "bf16":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = model(x)
            loss = loss_fn(out.float(), y)
        else:
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        if it >= 2:
            times.append(time.thread_time() - c0)
            wall.append(time.perf_counter() - t0)
    t = statistics.median(times)
    print(json.dumps({"images_per_s": a.batch / t, "ms_per_step": t * 1e3,
                      "wall_ms_per_step": statistics.median(wall) * 1e3, "torch": torch.__version__}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
