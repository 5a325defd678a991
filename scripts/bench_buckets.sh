#!/usr/bin/env bash
# bench_buckets.sh: `xspawn train` with its gradients all-reduced in buckets during backward
# (--bucket-mb B, a communication thread per worker) against one all-reduce after backward
# (--bucket-mb 0), same model, data, batch, seed and steps, runs alternated. Prints the median
# images/s of each setting over REPS runs, the ratio to --bucket-mb 0, and the share of the step
# still spent in the all-reduce (the part backward did not hide).
#
#   scripts/bench_buckets.sh
#   CASES="convnet:100:64 alexnet:32:64" NPROCS="2 8" BUCKETS="0.1 1 25" REPS=3 STEPS=60 scripts/bench_buckets.sh
#
# CASES: model:batch-per-worker:image-size. Needs a Release build in $BUILD (default build/)
# and Fashion-MNIST (Debian's dataset-fashion-mnist).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
CASES=${CASES:-"convnet:100:28 convnet:16:28 alexnet:32:64"}
NPROCS=${NPROCS:-"2 8"}
BUCKETS=${BUCKETS:-"0.1 1 25"}
REPS=${REPS:-3}
STEPS=${STEPS:-60}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
[ -x "$BUILD/xspawn" ] || { echo "bench_buckets.sh: build first ($BUILD/xspawn)" >&2; exit 1; }

echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $STEPS steps per run, median of $REPS"
echo "| model | batch/worker | N | --bucket-mb | buckets/step | images/s (median) | vs 0 | all-reduce share |"
echo "|---|---|---|---|---|---|---|---|"
for c in $CASES; do
  IFS=: read -r model batch size <<< "$c"
  for n in $NPROCS; do
    for rep in $(seq "$REPS"); do
      for b in 0 $BUCKETS; do
        "$BUILD/xspawn" --nprocs "$n" -q train --model "$model" --batch-size "$batch" --image-size "$size" \
            --max-steps "$STEPS" --epochs 1 --eval-every 0 --test-size 100 --bucket-mb "$b" \
            --metrics "$OUT/$model-$batch-$n-$b-$rep.jsonl" > "$OUT/$model-$batch-$n-$b-$rep.log"
      done
    done
    /usr/bin/env python3 - "$OUT" "$model" "$batch" "$n" "$REPS" 0 $BUCKETS <<'PYEOF'
import json, re, statistics, sys
out, model, batch, n, reps, buckets = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6:]
def run(b, rep):
    base = f"{out}/{model}-{batch}-{n}-{b}-{rep}"
    summary = [json.loads(l) for l in open(base + ".jsonl") if '"summary"' in l][-1]
    log = open(base + ".log").read()
    share = re.search(r"all-reduce ([0-9.]+)%", log)
    count = re.search(r"in (\d+) buckets", log)
    return summary["images_per_second"], float(share.group(1)) if share else 0.0, int(count.group(1)) if count else 1
base = None
for b in buckets:
    runs = [run(b, r) for r in range(1, reps + 1)]
    ips = statistics.median(r[0] for r in runs)
    base = base or ips
    print(f"| {model} | {batch} | {n} | {b} | {runs[0][2]} | {ips:.0f} | {ips / base:.2f}x | "
          f"{statistics.median(r[1] for r in runs):.1f}% |")
PYEOF
  done
done
