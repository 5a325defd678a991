#!/usr/bin/env bash
# scripts/bench_launch.sh: time from launch to every rank past its first rendezvous, for
# `xspawn --nprocs N hello` (fork and exec start methods) against `mpirun -np N` of a trivial
# MPI program (MPI_Init + MPI_Barrier), alternating runs on the same machine; prints medians
# and ratios.
#
#   bash scripts/bench_launch.sh [N=8] [REPEATS=11] [BUILD_DIR=build]
set -euo pipefail
n=${1:-8}
repeats=${2:-11}
build=${3:-build}
xspawn="$build/xspawn"
probe="$build/xspawn-mpi-init-probe"
[[ -x $xspawn ]] || { echo "bench_launch.sh: $xspawn not built (run scripts/setup.sh)" >&2; exit 2; }

mpirun_args=(--oversubscribe --mca mpi_yield_when_idle 1)
[[ $(id -u) == 0 ]] && mpirun_args+=(--allow-run-as-root)

# Runs "$@" once; prints "<ms to all past init> <ms total>".
measure() {
  local t0 t1 out last
  t0=$(date +%s%N)
  out=$("$@" 2>/dev/null)
  t1=$(date +%s%N)
  last=$(grep -o 'past init at [0-9]*' <<<"$out" | awk '{print $4}' | sort -n | tail -1)
  local count
  count=$(grep -c 'past init at' <<<"$out" || true)
  if [[ $count != "$n" ]]; then echo "bench_launch.sh: expected $n ranks, got $count from: $*" >&2; exit 1; fi
  echo "$(( (last - t0) / 1000 )) $(( (t1 - t0) / 1000 ))"
}

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

declare -A init total
names=("xspawn-fork" "xspawn-exec")
have_mpi=0
if [[ -x $probe ]] && command -v mpirun >/dev/null; then names+=("mpirun"); have_mpi=1; fi

for ((i = 0; i < repeats; i++)); do
  for name in "${names[@]}"; do
    case $name in
      xspawn-fork) r=$(measure "$xspawn" -q -n "$n" hello --stamp) ;;
      xspawn-exec) r=$(measure "$xspawn" -q -n "$n" --start-method exec hello --stamp) ;;
      mpirun) r=$(measure mpirun "${mpirun_args[@]}" -np "$n" "$probe") ;;
    esac
    init[$name]+="${r% *} "
    total[$name]+="${r#* } "
  done
done

echo "# launch to all $n ranks past their first rendezvous; medians of $repeats runs, microseconds"
printf "%-14s %14s %14s %12s\n" "launcher" "past-init(us)" "total(us)" "vs mpirun"
ref=""
if [[ $have_mpi == 1 ]]; then ref=$(tr ' ' '\n' <<<"${init[mpirun]}" | grep . | median); fi
for name in "${names[@]}"; do
  mi=$(tr ' ' '\n' <<<"${init[$name]}" | grep . | median)
  mt=$(tr ' ' '\n' <<<"${total[$name]}" | grep . | median)
  ratio="-"
  if [[ -n $ref ]]; then ratio=$(awk -v a="$mi" -v b="$ref" 'BEGIN {printf "%.3fx", a / b}'); fi
  printf "%-14s %14s %14s %12s\n" "$name" "$mi" "$mt" "$ratio"
done
[[ $have_mpi == 1 ]] || echo "# mpirun left out: Open MPI or xspawn-mpi-init-probe not built"
