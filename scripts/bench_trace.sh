#!/usr/bin/env bash
# scripts/bench_trace.sh: what `--trace` costs on the default training run. ROUNDS rounds of
# `xspawn --nprocs 8 train` untraced and `xspawn --nprocs 8 --trace FILE train`, alternating
# which goes first, one at a time; medians of wall time (command start to exit) and of the
# trainer's images/s, their ratios, the trace's size, and whether the weights are the same.
#
#   bash scripts/bench_trace.sh              # ROUNDS=3, the default run
#   ROUNDS=5 ARGS="--epochs 2" bash scripts/bench_trace.sh
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
xspawn="${XSPAWN:-$here/build/xspawn}"
rounds=${ROUNDS:-3}
read -r -a args <<< "${ARGS:-}"
work="$(mktemp -d "${TMPDIR:-/tmp}/xspawn-trace-bench.XXXXXX")"
trap 'rm -rf "$work"' EXIT

summary() { python3 -c 'import json,sys; d=[json.loads(l) for l in open(sys.argv[1])][-1]; print(d[sys.argv[2]])' "$@"; }
median() { python3 -c 'import statistics,sys; print(f"{statistics.median(float(x) for x in sys.argv[1:]):.2f}")' "$@"; }
ratio() { python3 -c 'import sys; print(f"{float(sys.argv[1]) / float(sys.argv[2]):.4f}")' "$1" "$2"; }

# run NAME ROUND [launcher options]: one default run; prints "wall images/s hash".
run() {
  local name=$1 round=$2; shift 2
  local m="$work/$name.$round.jsonl" t0 t1
  t0=$(date +%s.%N)
  "$xspawn" --nprocs 8 -q "$@" train "${args[@]}" --metrics "$m" > /dev/null
  t1=$(date +%s.%N)
  python3 -c 'import sys; print(f"{float(sys.argv[2]) - float(sys.argv[1]):.2f}")' "$t0" "$t1"
  summary "$m" images_per_second
  summary "$m" weights_hash
}

echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $rounds rounds, untraced and traced alternating"
plain_wall=() plain_ips=() traced_wall=() traced_ips=() hashes=()
for (( r = 1; r <= rounds; r++ )); do
  order=(plain traced)
  (( r % 2 == 0 )) && order=(traced plain)
  for which in "${order[@]}"; do
    if [[ $which == plain ]]; then
      mapfile -t out < <(run plain "$r")
      plain_wall+=("${out[0]}") plain_ips+=("${out[1]}")
    else
      mapfile -t out < <(run traced "$r" --trace "$work/trace.$r.json")
      traced_wall+=("${out[0]}") traced_ips+=("${out[1]}")
      size=$(stat -c %s "$work/trace.$r.json")
    fi
    hashes+=("${out[2]}")
    printf 'round %d %-6s: wall %7.2f s, %7.0f images/s, weights %s\n' "$r" "$which" "${out[0]}" "${out[1]}" "${out[2]}"
  done
done
pw=$(median "${plain_wall[@]}") tw=$(median "${traced_wall[@]}")
pi=$(median "${plain_ips[@]}") ti=$(median "${traced_ips[@]}")
same=$([[ $(printf '%s\n' "${hashes[@]}" | sort -u | wc -l) == 1 ]] && echo "the same weights in every run" || echo "DIFFERENT weights")
echo "medians: wall $pw s untraced, $tw s traced (ratio $(ratio "$tw" "$pw"));" \
     "$pi images/s untraced, $ti traced (ratio $(ratio "$ti" "$pi")); trace $((size / 1000000)) MB; $same"
