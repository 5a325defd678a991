#!/usr/bin/env bash
# scripts/bench_restart.sh: what a restart costs on the default training run (`xspawn --nprocs
# 8 train`, cut to STEPS steps): the time from the failure to the new gang up again (every
# rank at its first rendezvous, after loading the data and the checkpoint), the work lost
# (steps since the last checkpoint), the cost of checkpointing every EVERY steps, and the
# final weights against the uninterrupted run's. Medians of ROUNDS rounds.
#
#   bash scripts/bench_restart.sh                       # ROUNDS=3 STEPS=1000 EVERY=100 KILL=550
#   ROUNDS=5 EVERY=50 bash scripts/bench_restart.sh
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
xspawn="${XSPAWN:-$here/build/xspawn}"
rounds=${ROUNDS:-3}
steps=${STEPS:-1000}
every=${EVERY:-100}
kill=${KILL:-550}
work="$(mktemp -d "${TMPDIR:-/tmp}/xspawn-restart.XXXXXX")"
trap 'rm -rf "$work"' EXIT

json() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$@"; }
hash_of() { python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1])][-1]["weights_hash"])' "$1"; }
minus() { python3 -c 'import sys; print(f"{float(sys.argv[1]) - float(sys.argv[2]):.2f}")' "$1" "$2"; }
median() { python3 -c 'import statistics,sys; print(f"{statistics.median(float(x) for x in sys.argv[1:]):.2f}")' "$@"; }

echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $rounds rounds of $steps steps, checkpoint every $every, rank 3 killed at step $kill"
plain=() every_wall=() restarted=() up=() lost=()
for (( r = 1; r <= rounds; r++ )); do
  d="$work/$r"; mkdir -p "$d"
  t0=$(date +%s.%N)
  "$xspawn" --nprocs 8 -q train --max-steps "$steps" --metrics "$d/plain.jsonl" > /dev/null
  t1=$(date +%s.%N)
  "$xspawn" --nprocs 8 -q train --max-steps "$steps" --checkpoint-dir "$d/ck1" --checkpoint-every "$every" \
    --metrics "$d/every.jsonl" > /dev/null
  t2=$(date +%s.%N)
  "$xspawn" --nprocs 8 -q --log-dir "$d/logs" --max-restarts 1 --inject-fault "rank=3,step=$kill,kind=crash" \
    train --max-steps "$steps" --checkpoint-dir "$d/ck2" --checkpoint-every "$every" --metrics "$d/restarted.jsonl" \
    > "$d/out" 2> /dev/null
  t3=$(date +%s.%N)
  plain+=("$(minus "$t1" "$t0")") every_wall+=("$(minus "$t2" "$t1")") restarted+=("$(minus "$t3" "$t2")")
  up+=("$(json "$d/logs/report.json" 'round(d["attempts"][1]["ready_seconds"] - d["attempts"][0]["failure_seconds"], 2)')")
  from=$(sed -n 's/.*resumed from .* at step \([0-9]*\).*/\1/p' "$d/out")
  lost+=("$(( kill - 1 - from ))")
  same=$([[ "$(hash_of "$d/plain.jsonl")" == "$(hash_of "$d/restarted.jsonl")" ]] && echo same || echo DIFFERENT)
  echo "round $r: wall ${plain[-1]} s plain, ${every_wall[-1]} s with checkpoints, ${restarted[-1]} s restarted;" \
       "gang up ${up[-1]} s after the failure; resumed at step $from (${lost[-1]} steps lost); weights $same"
done
echo "medians: plain $(median "${plain[@]}") s, checkpoint every $every $(median "${every_wall[@]}") s," \
     "killed + restarted $(median "${restarted[@]}") s; failure to gang up $(median "${up[@]}") s;" \
     "steps lost $(median "${lost[@]}")"
