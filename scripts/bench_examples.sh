#!/usr/bin/env bash
# bench_examples.sh: the user-program path measured against its references, in one run:
#  1. custom: `xspawn --nprocs 8 train` (the built-in convnet) against examples/convnet.cpp (the
#     same network written by hand against the installed package), ROUNDS rounds alternating;
#     training images/s (evaluations left out on both), medians and ratio, weights hashes.
#  2. seed002: examples/mnist.cpp (seed 002: PyTorch's MNIST network, Adadelta, batch 64 per
#     core, EPOCHS epochs, NPROCS workers) against the same network and recipe in PyTorch DDP
#     (gloo, NPROCS processes, scripts/bench_mnist_example_torch.py); training seconds, wall
#     seconds and test accuracy of both, and the seed's own figures (32.9 s on 8 TPU cores).
#
#   scripts/bench_examples.sh                   # both parts
#   PARTS=custom ROUNDS=3 scripts/bench_examples.sh
#   PARTS=seed002 EPOCHS=1 scripts/bench_examples.sh
#   PARTS=seed002 TORCH=0 scripts/bench_examples.sh   # xspawn alone (PyTorch takes ~2.5 min/epoch)
#
# Needs a Release build in $BUILD (default build/) and, for seed002, Debian's python3-torch.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
PARTS=${PARTS:-"custom seed002"}
ROUNDS=${ROUNDS:-3}
EPOCHS=${EPOCHS:-10}
NPROCS=${NPROCS:-8}
work=$(mktemp -d "${TMPDIR:-/tmp}/xspawn-bench-examples.XXXXXX")
trap 'rm -rf "$work"' EXIT

cmake --install "$BUILD" --prefix "$work/prefix" > /dev/null
cmake -S examples -B "$work/examples" -DCMAKE_PREFIX_PATH="$work/prefix" > /dev/null
cmake --build "$work/examples" -j 2 > /dev/null
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"

median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
json() { /usr/bin/python3 -c "import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])" "$1" "$2"; }

if [[ " $PARTS " == *" custom "* ]]; then
  echo "== custom network against the built-in one: convnet, 8 workers, the default run"
  : > "$work/builtin"; : > "$work/custom"
  for r in $(seq "$ROUNDS"); do
    "$work/prefix/bin/xspawn" --nprocs 8 -q train > "$work/b.log"
    b=$(grep -o 'wall time, [0-9.]* images/s' "$work/b.log" | grep -o '[0-9.]*')
    bh=$(grep -o 'FNV-1a 0x[0-9a-f]*' "$work/b.log" | grep -o '[0-9a-f]*$')
    line=$("$work/examples/convnet" --nprocs 8 | grep '^RESULT' | cut -d' ' -f2-)
    c=$(json "$line" images_per_second); ch=$(json "$line" weights_hash)
    echo "round $r: built-in $b images/s (hash $bh), custom $c images/s (hash $ch)"
    echo "$b" >> "$work/builtin"; echo "$c" >> "$work/custom"
    [ "$bh" = "$ch" ] || echo "  the weights differ"
  done
  mb=$(median < "$work/builtin"); mc=$(median < "$work/custom")
  echo "median: built-in $mb images/s, custom $mc images/s, custom / built-in $(awk -v a="$mc" -v b="$mb" 'BEGIN {printf "%.3f", a / b}')"
fi

if [[ " $PARTS " == *" seed002 "* ]]; then
  echo "== seed 002: the MNIST example network, $NPROCS workers, $EPOCHS epochs, batch 64 per worker"
  start=$(date +%s.%N)
  x=$("$work/examples/mnist" --nprocs "$NPROCS" --epochs "$EPOCHS" | grep '^RESULT' | cut -d' ' -f2-)
  xwall=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN {printf "%.1f", e - s}')
  echo "xspawn: RESULT $x (wall $xwall s)"
  [ "${TORCH:-1}" = 1 ] || exit 0
  t=$(/usr/bin/python3 scripts/bench_mnist_example_torch.py --nprocs "$NPROCS" --epochs "$EPOCHS" | grep '^RESULT' | cut -d' ' -f2-)
  xs=$(json "$x" train_seconds); xa=$(json "$x" test_accuracy)
  ts=$(json "$t" train_seconds); tw=$(json "$t" wall_seconds); ta=$(json "$t" test_accuracy)
  printf "xspawn:  training %.1f s, wall %.1f s, test accuracy %.2f%%\n" "$xs" "$xwall" "$(awk -v a="$xa" 'BEGIN {print 100 * a}')"
  printf "PyTorch: training %.1f s, wall %.1f s, test accuracy %.2f%% (DDP, gloo)\n" "$ts" "$tw" "$(awk -v a="$ta" 'BEGIN {print 100 * a}')"
  printf "PyTorch / xspawn training time: %.2fx; the seed: 32.9 s on 8 TPU cores, 81.6 s on one, 54.4 s on a GPU\n" \
    "$(awk -v a="$ts" -v b="$xs" 'BEGIN {print a / b}')"
fi
