#!/usr/bin/env bash
# bench_torch.sh: PyTorch programs under `xspawn run`, Gloo against xspawn in the same script
# (scripts/bench_torch.py):
#   1. DDP training of seed 004's convnet on Fashion-MNIST, the gradient all-reduce by Gloo or
#      by xspawn's DDP communication hook, at each N of NPROCS, REPS rounds alternating which
#      goes first: median images/s and s/epoch (training loop only), the ratio, and the test
#      accuracy of both (they must agree);
#   2. all-reduce of float32 buffers, 4 KiB to 64 MiB: xspawn.all_reduce on NumPy arrays (ordinary
#      ones, and ones in the shared heap from xspawn.shared_array) against
#      torch.distributed.all_reduce with Gloo, alternating in the same processes: median time
#      and bus bandwidth (2(N-1)/N x bytes / time) of each, and the ratios.
#
#   scripts/bench_torch.sh                      # N = 2 and 8, batch 16 per worker, 1 epoch, 3 rounds
#   NPROCS=8 REPS=1 scripts/bench_torch.sh      # one quick round
#   PARTS=allreduce scripts/bench_torch.sh      # only the all-reduce sweep
#
# Needs a Release build with the Python module in $BUILD (default build/), Debian's python3-torch
# and python3-numpy, and Fashion-MNIST (dataset-fashion-mnist).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
NPROCS=${NPROCS:-"2 8"}
REPS=${REPS:-3}
BATCH=${BATCH:-16}
EPOCHS=${EPOCHS:-1}
PARTS=${PARTS:-"ddp allreduce"}
PY=/usr/bin/python3
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

[ -x "$BUILD/xspawn" ] && [ -d "$BUILD/python/xspawn" ] || { echo "bench_torch.sh: build first, with the Python module ($BUILD/python/xspawn: apt-get install python3-dev pybind11-dev)" >&2; exit 1; }
$PY -c 'import torch, numpy' 2>/dev/null || { echo "bench_torch.sh: /usr/bin/python3 needs torch and numpy: apt-get install python3-torch python3-numpy" >&2; exit 1; }

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "PyTorch $($PY -c 'import torch; print(torch.__version__)'), one thread per process; batch $BATCH per worker, $EPOCHS epoch(s), $REPS round(s)"
run() {  # run N OUTFILE args...
  local n=$1 out=$2
  shift 2
  "$BUILD/xspawn" --nprocs "$n" -q run -- $PY scripts/bench_torch.py "$@" >> "$out"
}
if [[ " $PARTS " == *" ddp "* ]]; then
  for n in $NPROCS; do
    for ((r = 0; r < REPS; r++)); do
      order="gloo xspawn"
      (( r % 2 )) && order="xspawn gloo"
      for comm in $order; do
        echo "DDP N=$n round $((r + 1)): $comm ..." >&2
        run "$n" "$OUT/ddp.jsonl" ddp --comm "$comm" --batch-size "$BATCH" --epochs "$EPOCHS"
      done
    done
  done
  $PY - "$OUT/ddp.jsonl" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
print("\nDDP, seed 004's convnet: medians of the rounds (last epoch)")
print(f"{'N':>3} {'gloo img/s':>11} {'xspawn img/s':>13} {'ratio':>6} {'gloo s/ep':>10} {'xspawn s/ep':>12} {'gloo acc':>9} {'xspawn acc':>11}")
for n in sorted({r["nprocs"] for r in runs}):
    m = {}
    for comm in ("gloo", "xspawn"):
        e = [r["epochs"][-1] for r in runs if r["nprocs"] == n and r["comm"] == comm]
        m[comm] = {k: statistics.median(x[k] for x in e) for k in ("images_per_second", "seconds", "test_accuracy")}
        m[comm]["all"] = [round(x["images_per_second"]) for x in e]
    g, x = m["gloo"], m["xspawn"]
    print(f"{n:>3} {g['images_per_second']:>11.0f} {x['images_per_second']:>13.0f} {x['images_per_second'] / g['images_per_second']:>5.2f}x "
          f"{g['seconds']:>10.1f} {x['seconds']:>12.1f} {100 * g['test_accuracy']:>8.2f}% {100 * x['test_accuracy']:>10.2f}%")
    print(f"    every round, images/s: gloo {g['all']}, xspawn {x['all']}")
PY
fi
if [[ " $PARTS " == *" allreduce "* ]]; then
  for n in $NPROCS; do
    echo "all-reduce sweep N=$n ..." >&2
    run "$n" "$OUT/allreduce.jsonl" allreduce
  done
  $PY - "$OUT/allreduce.jsonl" <<'PY'
import json, sys
print("\nall-reduce, float32: median of the slowest rank per call; busbw = 2(N-1)/N x bytes / time")
print("xspawn: an ordinary NumPy array (copied through the staging buffers); heap: one made by")
print("xspawn.shared_array (reduced in place, no copy); ratios: Gloo's time / xspawn's")
print(f"{'N':>3} {'bytes':>9} {'gloo us':>10} {'xspawn us':>10} {'heap us':>10} {'gloo GB/s':>10} {'xspawn GB/s':>12} "
      f"{'heap GB/s':>10} {'x gloo':>7} {'heap x gloo':>12}")
for l in open(sys.argv[1]):
    r = json.loads(l)
    b = r["bytes"]
    size = f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"
    h = r.get("xspawn_heap", {"seconds": float("nan"), "busbw_gbs": float("nan")})
    print(f"{r['nprocs']:>3} {size:>9} {r['gloo']['seconds'] * 1e6:>10.1f} {r['xspawn']['seconds'] * 1e6:>10.1f} "
          f"{h['seconds'] * 1e6:>10.1f} {r['gloo']['busbw_gbs']:>10.2f} {r['xspawn']['busbw_gbs']:>12.2f} "
          f"{h['busbw_gbs']:>10.2f} {r['ratio_xspawn']:>6.1f}x {r.get('ratio_xspawn_heap', float('nan')):>11.1f}x")
PY
fi
