#!/usr/bin/env bash
# deb_test.sh BUILD_DIR SOURCE_DIR: builds the Debian package with `cpack -G DEB`, checks its
# declared dependencies, installs it with dpkg (as root, when no xspawn package is installed
# already), runs `xspawn --nprocs 2 hello` and one example built against it, and removes it.
set -euo pipefail
build=$(cd "$1" && pwd); src=$(cd "$2" && pwd)
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
echo "deb test passed"
