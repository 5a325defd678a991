#!/usr/bin/env bash
# scripts/bench_runtime.sh: the launcher's and the collectives' benchmarks that
# docs/benchmarks.md quotes, in one go, each with its command echoed before its output.
#
#   bash scripts/bench_runtime.sh [BUILD_DIR=build] [OUT_DIR=bench-results]
# Writes every table to stdout and the JSON files to OUT_DIR.
set -euo pipefail
build=${1:-build}
out=${2:-bench-results}
mkdir -p "$out"
x="$build/xspawn"

run() {
  echo
  echo "\$ $*"
  "$@"
}

# Barrier latency: spin-then-futex against spin only and futex only.
for n in 2 4 8; do
  # Spin-only at N > cores costs milliseconds per barrier: fewer iterations there.
  iters=2000; [[ $n -gt $(nproc) ]] && iters=200
  run "$x" -q -n "$n" bench barrier --iters "$iters" --repeats 7 --json "$out/barrier-n$n.json"
done

# What a hand-over of one core between ranks costs here, as processes and as threads.
run "$x" bench switch --workers 2,4,8 --touch-kb 0,256,1024 --repeats 5 --json "$out/switch.json"

# Launch to every rank past 'init': xspawn hello against mpirun of a trivial MPI program.
run bash "$(dirname "$0")/bench_launch.sh" 8 11 "$build"

# All-reduce at N=2 and N=8 beside Open MPI and Gloo; in place in the shared heap (zero-copy).
for n in 2 8; do
  run "$x" -q -n "$n" bench allreduce --check --json "$out/allreduce-n$n.json"
  run "$x" -q -n "$n" bench allreduce --zero-copy --check --peers mpi --json "$out/allreduce-zc-n$n.json"
done

# The algorithms against each other (seed 003's parameter server, one and sharded; seed 004's ring).
for algo in one-shot two-shot ring ps; do
  run "$x" -q -n 8 bench allreduce --algo "$algo" --min-bytes 64K --max-bytes 16M --peers none --check \
    --json "$out/allreduce-n8-$algo.json"
done
run "$x" -q -n 8 bench allreduce --algo ps --ps-servers 4 --min-bytes 64K --max-bytes 16M --peers none \
  --check --json "$out/allreduce-n8-ps4.json"

# The other collectives at N=8.
for op in broadcast allgather reducescatter; do
  run "$x" -q -n 8 bench "$op" --max-bytes 64M --check --json "$out/$op-n8.json"
done
