#!/usr/bin/env bash
# deb_test.sh BUILD_DIR SOURCE_DIR [PYTHON PYDIR:PTHDIR]: builds the Debian package with `cpack -G DEB`, checks its
# declared dependencies, installs it with dpkg (as root, when no xspawn package is installed
# already), runs `xspawn --nprocs 2 hello`, one example built against it and, when built, the
# Python package from Debian's python3, and removes it.
set -euo pipefail
build=$(cd "$1" && pwd); src=$(cd "$2" && pwd)
python=${3:-}  # the Python the module is built for ("": not built)
pyrel=${4%%:*}; pthrel=${4#*:}  # where the package and xspawn.pth go, relative to the prefix
work=$(mktemp -d "${TMPDIR:-/tmp}/xspawn-deb-test.XXXXXX")
installed=0
cleanup() {
  if [ "$installed" = 1 ]; then dpkg -r xspawn > /dev/null; fi
  rm -rf "$work"
}
trap cleanup EXIT

(cd "$work" && cpack -G DEB --config "$build/CPackConfig.cmake" -B "$work/out" > "$work/cpack.log")
deb=$(ls "$work"/out/xspawn_*.deb)
echo "built $(basename "$deb")"
depends=$(dpkg-deb -f "$deb" Depends)
echo "Depends: $depends"
for lib in libdnnl libopenblas libfmt-dev libspdlog libboost-program-options libgomp; do
  echo "$depends" | grep -q "$lib" || { echo "the package does not declare $lib"; exit 1; }
done
dpkg-deb -c "$deb" > "$work/contents"
grep -q "./usr/bin/xspawn$" "$work/contents"
grep -q "./usr/libexec/xspawn/xspawn-train$" "$work/contents"
grep -q "./usr/lib/cmake/xspawn/xspawnConfig.cmake$" "$work/contents"
if [ -n "$python" ]; then
  grep -q "./usr/$pyrel/xspawn/__init__.py$" "$work/contents"
  grep -q "./usr/$pyrel/xspawn/_xspawn.*\.so$" "$work/contents"
  grep -q "./usr/$pthrel/xspawn.pth$" "$work/contents"
fi

if [ "$(id -u)" != 0 ]; then
  echo "not root: the package is built and checked, not installed"; exit 0
fi
if dpkg-query -W -f='${Status}' xspawn 2>/dev/null | grep -q "install ok installed"; then
  echo "an xspawn package is installed already: left as it is, not replaced"; exit 0
fi
dpkg -i "$deb" > "$work/dpkg.log"
installed=1
/usr/bin/xspawn --nprocs 2 -q hello > "$work/hello.log"
grep -q "identical on all 2 ranks" "$work/hello.log"
cmake -S "$src/examples" -B "$work/examples" > "$work/examples.log"
cmake --build "$work/examples" --target mnist >> "$work/examples.log"
"$work/examples/mnist" --nprocs 2 --epochs 1 --max-steps 3 > "$work/mnist.log"
grep -q "RESULT" "$work/mnist.log"
if [ -n "$python" ]; then  # Debian's python3 finds the package's module through xspawn.pth, with no PYTHONPATH
  (cd "$work" && env -u PYTHONPATH /usr/bin/python3 -c "import xspawn; print(xspawn.__file__)") | grep -q "^/usr/$pyrel/xspawn/"
  (cd "$work" && /usr/bin/xspawn --nprocs 2 -q run -- /usr/bin/python3 "$src/examples/python/allreduce.py") | grep -q "= 0.5"
fi
echo "deb test passed"
