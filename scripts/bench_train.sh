#!/usr/bin/env bash
# bench_train.sh: `xspawn train` against PyTorch DDP (gloo backend, torch.multiprocessing.spawn,
# one thread per process) on the same machine, model (seed 004's convnet), data (Fashion-MNIST),
# per-worker batch, optimizer and number of workers. Prints images/s, training time per epoch
# and training time to the target test accuracy for both, with the ratios, and xspawn's scaling
# from 1 to 2 workers (N = 1 runs SCALE_EPOCHS epochs, only for that; SCALE_EPOCHS=0 skips it).
#
# Both sides evaluate on the whole test set after every epoch and stop at the first evaluation
# that reaches TARGET (or after EPOCHS). Evaluation time is EXCLUDED on both sides: images/s,
# s/epoch and time to target count the training loops only.
#
#   scripts/bench_train.sh                  # N = 2 and 8, batch 100, Adam 1e-3, up to 10 epochs
#   NPROCS="2" EPOCHS=1 scripts/bench_train.sh
#   KEEP=bench-out NPROCS=8 EPOCHS=3 SCALE_EPOCHS=0 scripts/bench_train.sh   # keep the raw files
#   PRECISION=bf16 scripts/bench_train.sh   # xspawn's default for the convnet (the emulated
#                                           # TPU's bf16 matrix unit) against PyTorch's fp32
#   PRECISION=bf16 TORCH_PRECISION=bf16 scripts/bench_train.sh   # both in bf16 (torch.autocast)
#
# Needs a Release build in $BUILD (default build/) and Debian's python3-torch (/usr/bin/python3).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
NPROCS=${NPROCS:-"2 8"}
EPOCHS=${EPOCHS:-10}
SCALE_EPOCHS=${SCALE_EPOCHS:-1}
BATCH=${BATCH:-100}
LR=${LR:-1e-3}
PRECISION=${PRECISION:-fp32}
TORCH_PRECISION=${TORCH_PRECISION:-fp32}
TARGET=${TARGET:-0.90}
DATA=${DATA:-/usr/share/datasets/fashion-mnist}
PY=/usr/bin/python3
if [ -n "${KEEP:-}" ]; then  # KEEP=DIR keeps the logs and per-epoch metrics there
  OUT=$KEEP
  mkdir -p "$OUT"
else
  OUT=$(mktemp -d)
  trap 'rm -rf "$OUT"' EXIT
fi

[ -x "$BUILD/xspawn" ] && [ -x "$BUILD/xspawn-train" ] || { echo "bench_train.sh: build first ($BUILD/xspawn, $BUILD/xspawn-train)" >&2; exit 1; }
$PY -c 'import torch' 2>/dev/null || { echo "bench_train.sh: /usr/bin/python3 has no torch: apt-get install python3-torch" >&2; exit 1; }
[ -f "$DATA/train-images-idx3-ubyte.gz" ] || { echo "bench_train.sh: Fashion-MNIST not in $DATA: apt-get install dataset-fashion-mnist" >&2; exit 1; }

common="--model convnet --dataset fashion-mnist --data-dir $DATA --batch-size $BATCH --optimizer adam --lr $LR --lr-step 0 --precision $PRECISION --seed 1234"
pct=$($PY -c "print($TARGET * 100)")
echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); settings: $common, up to $EPOCHS epochs, stop at $pct%; PyTorch in $TORCH_PRECISION"
if [ "$SCALE_EPOCHS" -gt 0 ]; then
  echo "xspawn, N=1 ($SCALE_EPOCHS epochs, for the scaling) ..." >&2
  "$BUILD/xspawn" --nprocs 1 -q train $common --epochs "$SCALE_EPOCHS" --metrics "$OUT/xspawn-1.jsonl" > "$OUT/xspawn-1.log"
fi
for n in $NPROCS; do
  echo "xspawn, N=$n ..." >&2
  "$BUILD/xspawn" --nprocs "$n" -q train $common --epochs "$EPOCHS" --stop-at-accuracy "$pct" \
      --metrics "$OUT/xspawn-$n.jsonl" > "$OUT/xspawn-$n.log"
  echo "load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
done
for n in $NPROCS; do
  echo "PyTorch DDP, N=$n ..." >&2
  $PY scripts/bench_train_torch.py --nprocs "$n" --batch-size "$BATCH" --optimizer adam --lr "$LR" \
      --epochs "$EPOCHS" --target "$TARGET" --stop-at-target --precision "$TORCH_PRECISION" --data-dir "$DATA" \
      > "$OUT/torch-$n.json"
  echo "load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
done

$PY - "$OUT" "$TARGET" "$EPOCHS" $NPROCS <<'PYEOF'
import json, sys
out, target, epochs, nprocs = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), [int(n) for n in sys.argv[4:]]

def xspawn(n):
    epochs, evals = [], []
    for line in open(f"{out}/xspawn-{n}.jsonl"):
        j = json.loads(line)
        if j["event"] == "epoch": epochs.append(j)
        if j["event"] == "eval": evals.append(j)
    ttt, t = None, 0.0
    for e, v in zip(epochs, evals):
        t += e["seconds"]
        if ttt is None and v["test_accuracy"] >= target: ttt = t
    ips = sum(e["images_per_second"] for e in epochs) / len(epochs)
    sec = sum(e["seconds"] for e in epochs) / len(epochs)
    return ips, sec, ttt, evals[-1]["test_accuracy"], len(epochs)

def torch(n):
    j = json.loads(open(f"{out}/torch-{n}.json").read().strip().splitlines()[-1])
    ep = j["epochs"]
    return (sum(e["images_per_second"] for e in ep) / len(ep), sum(e["seconds"] for e in ep) / len(ep),
            j["time_to_target"], ep[-1]["test_accuracy"], len(ep))

fmt = lambda v: f"not reached in {epochs} epochs" if v is None else f"{v:.1f} s"
ratio = lambda a, b: "n/a" if a is None or b is None else f"{a / b:.2f}x"
print(f"| N | xspawn images/s | PyTorch DDP images/s | ratio | xspawn s/epoch | DDP s/epoch | xspawn to {target:.0%} | DDP to {target:.0%} | ratio to target | epochs xspawn / DDP | last acc xspawn / DDP |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for n in nprocs:
    x, t = xspawn(n), torch(n)
    print(f"| {n} | {x[0]:.0f} | {t[0]:.0f} | **{x[0] / t[0]:.2f}x** | {x[1]:.1f} | {t[1]:.1f} | {fmt(x[2])} | {fmt(t[2])} | "
          f"{ratio(t[2], x[2])} | {x[4]} / {t[4]} | {100 * x[3]:.2f}% / {100 * t[3]:.2f}% |")
import os
if 2 in nprocs and os.path.exists(f"{out}/xspawn-1.jsonl"):
    one = xspawn(1)
    print(f"\nxspawn scaling 1 -> 2 workers: {one[0]:.0f} -> {xspawn(2)[0]:.0f} images/s = {xspawn(2)[0] / one[0]:.2f}x")
PYEOF
