#!/usr/bin/env bash
# scripts/fault_soak.sh: many small training jobs, each with a random injected fault
# (--inject-fault: every kind, at a random rank and step, rendezvous or collective) or an
# external signal at a random moment (SIGKILL or SIGSEGV to a worker, SIGINT or SIGTERM to the
# launcher), half of them with --max-restarts 1 and checkpoints. After every job it checks
# the exit status, the report's root cause, what is left behind (processes of the job, its
# /dev/shm segment, temporary files, partial checkpoints) and, with restarts, that the final
# weights are the uninterrupted run's, bit for bit. Prints a summary; exits 1 on any failure.
#
#   bash scripts/fault_soak.sh                     # 60 jobs
#   bash scripts/fault_soak.sh --jobs 12 --seed 7  # the short version the test suite runs
#   options: --jobs N, --seed S, --build DIR (default: build), --keep (keep the work directory)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
jobs=60
seed=$RANDOM
build="$here/build"
keep=0
while (( $# )); do
  case "$1" in
    --jobs) jobs="$2"; shift 2 ;;
    --seed) seed="$2"; shift 2 ;;
    --build) build="$(cd "$2" && pwd)"; shift 2 ;;
    --keep) keep=1; shift ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "fault_soak.sh: unknown option '$1' (try --help)" >&2; exit 2 ;;
  esac
done
xspawn="$build/xspawn"
[[ -x "$xspawn" ]] || { echo "fault_soak.sh: $xspawn not found: build first (scripts/setup.sh)" >&2; exit 2; }

work="$(mktemp -d "${TMPDIR:-/tmp}/xspawn-soak.XXXXXX")"
cleanup() { if [[ $keep == 0 ]]; then rm -rf "$work"; else echo "work directory kept: $work"; fi; }
trap cleanup EXIT
RANDOM=$seed

# 128 steps: 6144 images / (32 x 3 ranks) per epoch, 2 epochs (about half a second).
nprocs=3
steps=128
train=(train --model mlp --dataset synthetic --train-size 6144 --test-size 192 --optimizer sgd --lr 0.05
       --momentum 0.9 --batch-size 32 --epochs 2 --eval-every 0)
kinds=(crash segv abort exit throw hang spin stop slow oom kill-worker segv-worker int-launcher term-launcher)

reference="$("$xspawn" --nprocs $nprocs -q "${train[@]}" --metrics "$work/reference.jsonl" >/dev/null &&
             python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1])][-1]["weights_hash"])' "$work/reference.jsonl")"

declare -A count
failures=0
fail() { echo "  FAILED: $*"; failures=$((failures + 1)); }

# Pids of the processes whose environment says XSPAWN_JOB_ID=$1.
job_pids() {
  local id=$1 p
  for p in /proc/[0-9]*; do
    if { tr '\0' '\n' < "$p/environ"; } 2>/dev/null | grep -qx "XSPAWN_JOB_ID=$id"; then echo "${p#/proc/}"; fi
  done
}

# What is left of job $1 (processes, segment, files in its temporary and checkpoint dirs).
leftovers() {
  local id=$1 dir=$2 left=""
  local pids; pids="$(job_pids "$id" | tr '\n' ' ')"
  [[ -n "${pids// }" ]] && left+="processes: $pids; "
  compgen -G "/dev/shm/xspawn-*-$id" >/dev/null && left+="segment: $(ls /dev/shm/xspawn-*-"$id"); "
  [[ -n "$(ls -A "$dir/tmp")" ]] && left+="temporary files: $(ls -A "$dir/tmp"); "
  compgen -G "$dir/ck/*.tmp" >/dev/null && left+="partial checkpoints: $(ls "$dir"/ck/*.tmp); "
  echo "$left"
}

field() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); v=eval("d"+sys.argv[2]); print("" if v is None else v)' "$1" "$2" 2>/dev/null || true; }

echo "fault soak: $jobs jobs of $nprocs ranks x $steps steps, seed $seed, reference weights $reference"
start=$SECONDS
for (( j = 1; j <= jobs; j++ )); do
  kind=${kinds[RANDOM % ${#kinds[@]}]}
  rank=$(( RANDOM % nprocs ))
  restarts=$(( RANDOM % 2 ))
  id="soak$$-$j"
  dir="$work/$j"
  mkdir -p "$dir/tmp"
  count[$kind]=$(( ${count[$kind]:-0} + 1 ))
  # The fault's trigger: a step, the first rendezvous, a collective, or the worker's start.
  case $(( RANDOM % 4 )) in
    0|1) trigger="step=$(( 1 + RANDOM % steps ))" ;;
    2) trigger="collective=$(( 1 + RANDOM % steps ))" ;;
    3) trigger="at=train_start" ;;
  esac
  code=$(( 3 + RANDOM % 7 ))
  spec=""
  case $kind in
    exit) spec="rank=$rank,$trigger,kind=exit:$code" ;;
    slow) spec="rank=$rank,$trigger,kind=slow:$(( 20 + RANDOM % 200 ))ms" ;;
    crash|segv|abort|throw|hang|spin|stop|oom) spec="rank=$rank,$trigger,kind=$kind" ;;
  esac
  args=(--nprocs $nprocs -q --timeout 2 --kill-grace 2 --job-id "$id" --log-dir "$dir/logs")
  [[ -n "$spec" ]] && args+=(--inject-fault "$spec")
  [[ $restarts == 1 ]] && args+=(--max-restarts 1)
  TMPDIR="$dir/tmp" "$xspawn" "${args[@]}" "${train[@]}" --checkpoint-dir "$dir/ck" --checkpoint-every 10 \
    --metrics "$dir/metrics.jsonl" > "$dir/out" 2> "$dir/err" &
  launcher=$!
  signalled=""
  if [[ -z "$spec" ]]; then
    sleep "$(printf "0.%02d" $(( 5 + RANDOM % 60 )))"  # 0.05 to 0.64 s: while the job starts or trains
    case $kind in
      kill-worker|segv-worker)
        victim=$(job_pids "$id" | shuf -n 1 --random-source=<(yes "$RANDOM") || true)
        sig=$([[ $kind == kill-worker ]] && echo KILL || echo SEGV)
        if [[ -n "$victim" ]] && kill -s "$sig" "$victim" 2>/dev/null; then signalled=$sig; fi ;;
      int-launcher|term-launcher)
        sig=$([[ $kind == int-launcher ]] && echo INT || echo TERM)
        if kill -s "$sig" "$launcher" 2>/dev/null; then signalled=$sig; fi ;;
    esac
  fi
  set +e; wait $launcher; status=$?; set -e

  # What the job must have ended with.
  want=0
  case $kind in
    crash) want=137 ;; segv) want=139 ;; abort) want=134 ;; exit) want=$code ;;
    throw|oom) want=1 ;; hang|spin|stop) want=124 ;; slow) want=0 ;;
    kill-worker) [[ -n "$signalled" ]] && want=137 ;;
    segv-worker) [[ -n "$signalled" ]] && want=139 ;;
    int-launcher) [[ -n "$signalled" ]] && want=130 ;;
    term-launcher) [[ -n "$signalled" ]] && want=143 ;;
  esac
  interrupted=$([[ $kind == *-launcher ]] && echo 1 || echo 0)
  if [[ $restarts == 1 && $interrupted == 0 ]]; then want=0; fi
  # A signal that reached the job after it had finished changes nothing.
  if [[ -n "$signalled" && $status == 0 && -z "$(field "$dir/logs/report.json" '["headline"]')" ]]; then
    grep -q "weights identical" "$dir/out" && want=0
  fi
  note=""
  [[ $restarts == 1 ]] && note=", --max-restarts 1"
  [[ -z "$spec" && -z "$signalled" ]] && note+=" (the job had ended before the signal)"
  echo "job $j: ${spec:-$kind${signalled:+ (SIG$signalled)}}$note: exit $status"
  [[ $status == "$want" ]] || fail "exit status $status, expected $want ($(head -c 600 "$dir/err"))"
  report="$dir/logs/report.json"
  if [[ $status != 0 && -n "$spec" && $restarts == 0 ]]; then
    root=$(field "$report" '["root_cause"]["rank"]')
    [[ "$root" == "$rank" ]] || fail "root cause rank '$root', the fault was on rank $rank"
  fi
  if [[ $status == 0 ]]; then
    hash=$(python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1])][-1].get("weights_hash",""))' "$dir/metrics.jsonl" 2>/dev/null || true)
    [[ "$hash" == "$reference" ]] || fail "final weights $hash, the uninterrupted run has $reference"
  fi
  left="$(leftovers "$id" "$dir")"
  [[ -z "$left" ]] || fail "left behind: $left"
  rm -rf "$dir"
done

echo
echo "fault soak: $jobs jobs in $(( SECONDS - start )) s, seed $seed; by kind:"
for k in "${kinds[@]}"; do printf "  %-14s %d\n" "$k" "${count[$k]:-0}"; done
if (( failures )); then
  echo "fault soak: $failures check(s) FAILED"
  exit 1
fi
echo "fault soak: all $jobs jobs ended as expected and left nothing behind"
