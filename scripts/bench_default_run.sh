#!/usr/bin/env bash
# bench_default_run.sh: the command people run, `xspawn --nprocs 8 train`, timed from its start
# to its exit (ROUNDS times, median), its accuracy over SEEDS, and the time to 91% test accuracy
# against PyTorch DDP with its best settings on this machine (gloo, one process per core, one
# thread each, the same recipe: Adam with a one-cycle schedule, the same betas and label
# smoothing, global batch 128, fp32), both
# as whole commands from start to exit with their evaluations, stopping at the first epoch
# that reaches 91%. Rounds alternate which side goes first.
#
#   scripts/bench_default_run.sh                    # 3 rounds, seeds 1 2 3
#   ROUNDS=1 SEEDS="" scripts/bench_default_run.sh  # one round, no seed sweep
#
# Needs a Release build in $BUILD (default build/) and Debian's python3-torch (/usr/bin/python3).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
ROUNDS=${ROUNDS:-3}
SEEDS=${SEEDS-"1 2 3"}
TORCH_NPROCS=${TORCH_NPROCS:-$(nproc)}
PY=/usr/bin/python3
DATA=/usr/share/datasets/fashion-mnist
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
[ -x "$BUILD/xspawn" ] || { echo "bench_default_run.sh: build first ($BUILD/xspawn)" >&2; exit 1; }

now() { date +%s.%N; }
torch_batch=$((128 / TORCH_NPROCS))
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load $(cut -d' ' -f1-3 /proc/loadavg)"

xspawn_run() {  # $1: extra args; prints "wall accuracy"
  local t0 t1 acc
  t0=$(now)
  "$BUILD/xspawn" -q --nprocs 8 train $1 > "$OUT/last.log"
  t1=$(now)
  acc=$(sed -n 's/^final training loss .*, test accuracy \([0-9.]*\)%.*/\1/p' "$OUT/last.log")
  echo "$(echo "$t1 - $t0" | bc) $acc"
}
torch_run() {  # prints "wall accuracy"
  local t0 t1 acc
  t0=$(now)
  acc=$($PY scripts/bench_train_torch.py --nprocs "$TORCH_NPROCS" --batch-size "$torch_batch" --optimizer adam \
        --lr "$lr" --betas "$betas" --label-smoothing "$smoothing" --lr-schedule onecycle --epochs "$epochs" --target 0.91 --stop-at-target --data-dir "$DATA" |
        tail -1 | $PY -c 'import json,sys; print(100 * json.loads(sys.stdin.read())["epochs"][-1]["test_accuracy"])')
  t1=$(now)
  echo "$(echo "$t1 - $t0" | bc) $acc"
}

: > "$OUT/default"; : > "$OUT/x91"; : > "$OUT/t91"
for r in $(seq 1 "$ROUNDS"); do
  echo "round $r ..." >&2
  xspawn_run "" >> "$OUT/default"
  if [ "$r" -eq 1 ]; then  # the default run's settings, from the trainer itself, for PyTorch's side
    settings=$(grep -m1 '^training' "$OUT/last.log")
    epochs=$(sed -n 's/.* \([0-9]*\) epochs,.*/\1/p' <<<"$settings")
    lr=$(sed -n 's/.*adam lr \([0-9.e-]*\) .*/\1/p' <<<"$settings")
    betas=$(sed -n 's/.* betas \([0-9.]*,[0-9.]*\) .*/\1/p' <<<"$settings")
    smoothing=$(sed -n 's/.*label smoothing \([0-9.]*\),.*/\1/p' <<<"$settings")
    smoothing=${smoothing:-0}
    echo "xspawn default: $settings"
    echo "PyTorch DDP: N=$TORCH_NPROCS, batch $torch_batch, adam betas $betas one-cycle lr $lr, label smoothing $smoothing, $epochs epochs, fp32"
  fi
  if [ $((r % 2)) -eq 1 ]; then
    xspawn_run "--stop-at-accuracy 91" >> "$OUT/x91"; torch_run >> "$OUT/t91"
  else
    torch_run >> "$OUT/t91"; xspawn_run "--stop-at-accuracy 91" >> "$OUT/x91"
  fi
done
for s in $SEEDS; do
  echo "seed $s ..." >&2
  echo "$s $(xspawn_run "--seed $s")" >> "$OUT/seeds"
done

$PY - "$OUT" <<'PYEOF'
import statistics, sys, os
out = sys.argv[1]
rows = lambda f: [l.split() for l in open(f"{out}/{f}") if l.strip()]
def summary(name):
    r = rows(name)
    walls = [float(x[0]) for x in r]
    accs = [x[1] for x in r]
    return statistics.median(walls), walls, accs
d, dw, da = summary("default")
x, xw, xa = summary("x91")
t, tw, ta = summary("t91")
print("| run | median wall (s) | runs (s) | final test accuracy |")
print("|---|---|---|---|")
print(f"| `xspawn --nprocs 8 train` (the default, to its exit) | **{d:.1f}** | {', '.join(f'{w:.1f}' for w in dw)} | {', '.join(a + '%' for a in da)} |")
print(f"| xspawn, stop at 91% | {x:.1f} | {', '.join(f'{w:.1f}' for w in xw)} | {', '.join(a + '%' for a in xa)} |")
print(f"| PyTorch DDP, stop at 91% | {t:.1f} | {', '.join(f'{w:.1f}' for w in tw)} | {', '.join(f'{float(a):.2f}%' for a in ta)} |")
print(f"\ntime to 91%: PyTorch DDP / xspawn = **{t / x:.2f}x**")
if os.path.exists(f"{out}/seeds"):
    print("\n| seed | wall (s) | final test accuracy |\n|---|---|---|")
    for s, w, a in rows("seeds"):
        print(f"| {s} | {float(w):.1f} | {a}% |")
PYEOF
