#!/usr/bin/env bash
# install_test.sh BUILD_DIR SOURCE_DIR [PYTHON PYDIR:PTHDIR]: installs xspawn from BUILD_DIR into a temporary prefix,
# moves the prefix elsewhere (the install must be relocatable), builds examples/ against it as a
# separate CMake project with find_package(xspawn) and a program with pkg-config, then runs them
# for a few steps, directly and under the installed `xspawn`; and, when built, the Python package
# from the moved prefix with the Python examples. Leaves nothing behind.
set -euo pipefail
build=$(cd "$1" && pwd); src=$(cd "$2" && pwd)
python=${3:-}  # the Python the module is built for ("": not built)
pyrel=${4%%:*}; pthrel=${4#*:}  # where the package and xspawn.pth go, relative to the prefix
work=$(mktemp -d "${TMPDIR:-/tmp}/xspawn-install-test.XXXXXX")
trap 'rm -rf "$work"' EXIT
step() { echo "== $*"; }

step "install into a prefix, then move it"
cmake --install "$build" --prefix "$work/first" > "$work/install.log"
mv "$work/first" "$work/prefix"
prefix="$work/prefix"
test -x "$prefix/bin/xspawn" && test -x "$prefix/libexec/xspawn/xspawn-train"
test -f "$prefix/lib/cmake/xspawn/xspawnConfig.cmake" && test -f "$prefix/lib/cmake/xspawn/xspawnConfigVersion.cmake"
test -f "$prefix/lib/pkgconfig/xspawn.pc" && test -f "$prefix/include/xspawn/train.hpp"
if [ -e "$build/libxspawn_mpi.so" ]; then test -f "$prefix/lib/xspawn/libxspawn_mpi.so"; fi
# Internals stay out of the installed headers.
for internal in engine/ops.hpp engine/gemm.hpp engine/rng.hpp segment.hpp control.hpp grad_sync.hpp bucket_reducer.hpp; do
  if [ -e "$prefix/include/xspawn/$internal" ]; then echo "internal header $internal installed"; exit 1; fi
done

step "the installed command and its helper program"
"$prefix/bin/xspawn" --nprocs 2 -q hello | grep "identical on all 2 ranks"
"$prefix/bin/xspawn" --nprocs 2 -q train --model mlp --dataset synthetic --epochs 1 --max-steps 3 | grep "weights identical"

step "the examples, built against the installed package"
cmake -S "$src/examples" -B "$work/examples" -DCMAKE_PREFIX_PATH="$prefix" > "$work/examples.log"
cmake --build "$work/examples" -j 2 >> "$work/examples.log"

step "the README and docs/api.md show examples/minimal.cpp as it is"
python3 - "$src" <<'PY'
import sys
src = sys.argv[1]
code = open(f"{src}/examples/minimal.cpp").read()
code = code[code.index("#include"):]
for doc in ("README.md", "docs/api.md"):
    if "```cpp\n" + code + "```" not in open(f"{src}/{doc}").read():
        sys.exit(f"{doc} does not show examples/minimal.cpp as it is")
PY
"$work/examples/minimal" --nprocs 2 --epochs 1 | grep "epoch 1: loss"

step "pkg-config"
cat > "$work/tiny.cpp" <<'CPP'
#include <xspawn/error.hpp>
#include <xspawn/xspawn.hpp>
int main() {
  xs::init();
  xs::master_print("world of {}", xs::world_size());
  try { XS_THROW(xs::UsageError, "expected"); } catch (const xs::Error& e) { return e.line() > 0 ? 0 : 1; }
}
CPP
PKG_CONFIG_PATH="$prefix/lib/pkgconfig" c++ "$work/tiny.cpp" -o "$work/tiny" $(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs xspawn)
"$work/tiny" | grep "world of 1"

step "seed 002's example for a few steps, and seed 000's under the installed xspawn"
"$work/examples/mnist" --nprocs 2 --epochs 1 --max-steps 5 | grep '"nprocs": 2'
"$prefix/bin/xspawn" --nprocs 2 -q run -- "$work/examples/alexnet" --image-size 64 --max-steps 2 --batch-size 8 \
  | grep "master's share"
alone=$("$work/examples/alexnet" --nprocs 1 --image-size 64 --max-steps 1 --batch-size 8 --huge-pages 0 \
  --step-in-backward 1)
grep "advised for 2 MiB pages: no" <<< "$alone"
grep "optimizer step: inside backward" <<< "$alone"
grep "master's share" <<< "$alone"

step "the custom network: resumed from its checkpoint, the same weights as without a stop"
ck="$work/ck.xsckpt"
"$work/examples/custom_network" --nprocs 2 --epochs 3 --stop-after 2 --checkpoint "$ck" > /dev/null
resumed=$("$work/examples/custom_network" --nprocs 2 --epochs 3 --checkpoint "$ck" --resume 1 | grep "weights hash")
straight=$("$prefix/bin/xspawn" --nprocs 2 -q --trace "$work/trace.json" run -- "$work/examples/custom_network" \
  --nprocs 2 --epochs 3 | grep "weights hash")
echo "resumed: $resumed; uninterrupted: $straight"
test "$resumed" = "$straight"
"$work/examples/custom_network" --nprocs 2 --epochs 1 > "$work/one_epoch.txt"
grep "training set: 2048 images, 1572864 bytes of pixels shared by the machine" "$work/one_epoch.txt"
grep "read through a read-only mapping on 1 ranks" "$work/one_epoch.txt"  # rank 1's xs::shared_view

step "the custom network in bf16: its own layers carry the tensors' bf16 flags, the run ends in one set of weights"
"$work/examples/custom_network" --nprocs 2 --epochs 1 --precision bf16 | grep "weights hash"

step "the custom network's modules timed (Model::setModuleTimes): a block's convolutions apart from it"
"$work/examples/custom_network" --nprocs 2 --epochs 1 --module-times 1 > "$work/modules.txt"
grep -E "^module block1\.conv1 +forward +[0-9.]+ ms, backward +[0-9.]+ ms, [0-9.]+ MFLOP an image" "$work/modules.txt"
grep -E "^module features " "$work/modules.txt"
test "$(grep "weights hash" "$work/modules.txt")" = "$(grep "weights hash" "$work/one_epoch.txt")"  # timing changes nothing
"$work/examples/custom_network" --nprocs 2 --epochs 1 --module-times cpu > "$work/modules_cpu.txt"
grep -E "^module block1\.conv1 +forward +[0-9.]+ ms, backward +[0-9.]+ ms, [0-9.]+ MFLOP an image \(CPU time\)" \
  "$work/modules_cpu.txt"

step "the custom network's own xs::Trace spans in the installed xspawn's trace"
test "$(grep -c '"name":"epoch end","cat":"user"' "$work/trace.json")" = 6  # 3 epochs x 2 ranks

step "the custom network: rank 1 killed in epoch 2, the restarted gang resumes by itself, the same weights"
rm -f "$ck"
restarted=$("$work/examples/custom_network" --nprocs 2 --epochs 3 --checkpoint "$ck" --max-restarts 1 \
  --inject-fault rank=1,step=40,kind=crash | grep "weights hash")
echo "restarted: $restarted; uninterrupted: $straight"
test "$restarted" = "$straight"
step "an optimizer of one's own: after backward on 2 cores; alone, inside backward to the same weights"
"$work/examples/own_optimizer" --nprocs 2 --max-steps 5 | grep "optimizer signsgd: step after backward"
after=$("$work/examples/own_optimizer" --nprocs 1 --max-steps 20 | grep "weights hash")
inside=$("$work/examples/own_optimizer" --nprocs 1 --max-steps 20 --step-in-backward 1)
grep "optimizer signsgd: step inside backward" <<< "$inside"
echo "after: $after; inside: $(grep "weights hash" <<< "$inside")"
test "$after" = "$(grep "weights hash" <<< "$inside")"
step "the job's report read by its caller: utilisation, a C++ root cause, a Python traceback"
"$work/examples/job_report" | grep -E "^rank 1: 40 steps in .* compute [0-9]+%"
taskset -c 0 "$work/examples/job_report" | grep -E "^2 ranks on 1 usable cores \(oversubscribed\)"
if out=$("$work/examples/job_report" --fail-rank 1 2> /dev/null); then echo "a failed job reported success"; exit 1; fi
echo "$out" | grep "rank 1 exited with code 1: xs::UsageError: rank asked to fail at step 5"
if out=$("$work/examples/job_report" --python /usr/bin/python3 2> /dev/null); then echo "a failed job reported success"; exit 1; fi
echo "$out" | grep "traceback | KeyError: 'labels'"

if [ -n "$python" ]; then
  step "the Python package: imported from the moved prefix, and found by the installed xspawn run by itself"
  pydir="$prefix/$pyrel"
  test -f "$pydir/xspawn/__init__.py" && test -f "$pydir/xspawn/torch.py" && ls "$pydir"/xspawn/_xspawn*.so > /dev/null
  test "$(cat "$prefix/$pthrel/xspawn.pth")" = "$(realpath --relative-to="$prefix/$pthrel" "$pydir")"
  test "$(ls "$pydir")" = xspawn  # a directory of its own: on PYTHONPATH it brings nothing else along
  PYTHONPATH="$pydir" "$python" -c "import xspawn; assert xspawn.world_size() == 1; print(xspawn.__file__)" \
    | grep -q "^$pydir/xspawn/__init__.py"
  out=$(cd "$work" && env -u PYTHONPATH "$prefix/bin/xspawn" --nprocs 2 -q run -- "$python" "$src/examples/python/allreduce.py")
  grep "mean of ranks 0..1 = 0.5" <<< "$out"
  grep "one table per machine, read by every rank: smallest sum 499500" <<< "$out"
  if "$python" -c "import torch" 2> /dev/null; then
    "$prefix/bin/xspawn" --nprocs 2 -q run -- "$python" "$src/examples/python/ddp_hook.py" | grep "DDP + xspawn hook: loss"
    "$prefix/bin/xspawn" --nprocs 2 -q run -- "$python" "$src/examples/python/ddp_hook.py" --no-ddp | grep "optimizer_step: loss"
  fi
fi
echo "install test passed"
