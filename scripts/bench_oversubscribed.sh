#!/usr/bin/env bash
# bench_oversubscribed.sh: MANY ranks on this machine's cores (default 8) against FEW ranks
# (default one a core) at the same global batch, xspawn and PyTorch DDP in the same run: the
# throughput each keeps when ranks outnumber cores (the target: xspawn's MANY within 10% of its
# FEW). Rounds alternate which size goes first; prints every round, the medians' ratio and the
# median of each round's ratio (the steadier of the two when the machine's speed drifts).
#
# xspawn: `xspawn -q --nprocs N train --epochs 1 --eval-every 0 --test-size 1000 --batch-size
# GLOBAL/N` (the default recipe and data, one epoch), its own images/s of training. PyTorch DDP
# (gloo, one thread a process, scripts/bench_train_torch.py): TORCH_STEPS steps of the same
# global batch, fp32, its images/s of training.
#
#   scripts/bench_oversubscribed.sh                       # 8 against 2 (on 2 cores), 3 rounds
#   ROUNDS=6 TORCH=0 scripts/bench_oversubscribed.sh      # xspawn alone, 6 rounds
#   MANY=4 scripts/bench_oversubscribed.sh                # 4 against 2
#   TRAIN_ARGS="--max-steps 50" TORCH=0 ROUNDS=1 scripts/bench_oversubscribed.sh  # a quick look
#
# Needs a Release build in $BUILD (default build/) and, for TORCH=1, Debian's python3-torch.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
MANY=${MANY:-8}
FEW=${FEW:-$(nproc)}
GLOBAL=${GLOBAL:-128}
ROUNDS=${ROUNDS:-3}
TORCH=${TORCH:-1}
TORCH_STEPS=${TORCH_STEPS:-150}
TRAIN_ARGS=${TRAIN_ARGS:-}  # more `xspawn train` options for both sizes
PY=/usr/bin/python3
DATA=/usr/share/datasets/fashion-mnist
[ -x "$BUILD/xspawn" ] || { echo "bench_oversubscribed.sh: build first ($BUILD/xspawn)" >&2; exit 1; }
for n in "$MANY" "$FEW"; do
  [ "$n" -ge 1 ] && [ $((GLOBAL % n)) -eq 0 ] ||
    { echo "bench_oversubscribed.sh: GLOBAL=$GLOBAL does not split into $n ranks: pick sizes that divide it" >&2; exit 1; }
done
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "global batch $GLOBAL: $MANY ranks x $((GLOBAL / MANY)) against $FEW x $((GLOBAL / FEW)), $ROUNDS rounds"

xspawn_run() {  # $1: ranks; prints images/s
  # shellcheck disable=SC2086  # TRAIN_ARGS: options, split on purpose
  "$BUILD/xspawn" -q --nprocs "$1" train --epochs 1 --eval-every 0 --test-size 1000 --batch-size $((GLOBAL / $1)) \
      $TRAIN_ARGS |
    sed -n 's/^training done: .*, \([0-9]*\) images\/s$/\1/p'
}
torch_run() {  # $1: ranks; prints images/s
  $PY scripts/bench_train_torch.py --nprocs "$1" --batch-size $((GLOBAL / $1)) --epochs 1 --max-steps "$TORCH_STEPS" \
      --data-dir "$DATA" | tail -1 | $PY -c 'import json,sys; print(round(json.load(sys.stdin)["epochs"][-1]["images_per_second"]))'
}

for r in $(seq 1 "$ROUNDS"); do
  order="$MANY $FEW"
  [ $((r % 2)) -eq 0 ] && order="$FEW $MANY"
  for n in $order; do
    v=$(xspawn_run "$n")
    [ -n "$v" ] || { echo "bench_oversubscribed.sh: xspawn at $n ranks printed no images/s" >&2; exit 1; }
    echo "$v" >> "$OUT/xspawn-$n"
    echo "round $r: xspawn $n ranks $v images/s" >&2
    if [ "$TORCH" = 1 ]; then
      v=$(torch_run "$n")
      [ -n "$v" ] || { echo "bench_oversubscribed.sh: PyTorch DDP at $n ranks printed no images/s (TORCH=0 leaves it out)" >&2; exit 1; }
      echo "$v" >> "$OUT/torch-$n"
      echo "round $r: PyTorch DDP $n ranks $v images/s" >&2
    fi
  done
done

$PY - "$OUT" "$MANY" "$FEW" <<'PYEOF'
import os, statistics, sys
out, many, few = sys.argv[1], sys.argv[2], sys.argv[3]
print(f"| | {many} ranks, images/s | {few} ranks, images/s | {many} / {few} (medians) | each round's ratio (their median) |")
print("|---|---|---|---|---|")
for side, name in (("xspawn", "xspawn"), ("torch", "PyTorch DDP")):
    if not os.path.exists(f"{out}/{side}-{many}"):
        continue
    m = [float(x) for x in open(f"{out}/{side}-{many}")]
    f = [float(x) for x in open(f"{out}/{side}-{few}")]
    ratios = [a / b for a, b in zip(m, f)]
    rounds = ", ".join(f"{x:.3f}" for x in ratios) + f" ({statistics.median(ratios):.3f}x)"
    print(f"| {name} | {statistics.median(m):,.0f} ({', '.join(f'{x:,.0f}' for x in m)}) | "
          f"{statistics.median(f):,.0f} ({', '.join(f'{x:,.0f}' for x in f)}) | "
          f"**{statistics.median(m) / statistics.median(f):.3f}x** | {rounds} |")
PYEOF
