#!/usr/bin/env bash
# scripts/setup.sh: installs every build, test and run dependency of xspawn with
# apt-get (only what is missing, so it is idempotent) and builds it in Release.
#
#   bash scripts/setup.sh            # dependencies + Release build in ./build
#   bash scripts/setup.sh --no-build # dependencies only
#   bash scripts/setup.sh --bench    # also the peers the benchmarks compare with
#                                    # (hyperfine)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build=1
bench=0
for arg in "$@"; do
  case "$arg" in
    --no-build) build=0 ;;
    --bench) bench=1 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown option '$arg' (try --help)" >&2; exit 2 ;;
  esac
done

packages=(
  build-essential cmake ninja-build pkg-config
  libboost-dev libboost-program-options-dev
  libspdlog-dev libfmt-dev nlohmann-json3-dev
  libgtest-dev googletest zlib1g-dev libdeflate-dev
  libopenmpi-dev openmpi-bin libgloo-dev
  libdnnl-dev libopenblas-dev
  dataset-fashion-mnist
  procps python3
  elfutils   # eu-stack: the stacks of stalled ranks in failure reports
  gnuplot-nox  # xspawn plot draws its pictures (png, svg) with gnuplot
  python3-dev pybind11-dev  # the xspawn Python module (python/)
  python3-torch python3-numpy  # the tests of Python and PyTorch programs under xspawn run (tests/python)
)
if [[ $bench == 1 ]]; then
  packages+=(hyperfine)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if (( ${#missing[@]} )); then
  echo "setup.sh: installing ${missing[*]}"
  sudo=""
  if [[ $(id -u) != 0 ]]; then sudo="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup.sh: all dependencies present"
fi

if [[ $build == 1 ]]; then
  cmake -S "$here" -B "$here/build" -G Ninja -DCMAKE_BUILD_TYPE=Release
  cmake --build "$here/build"
fi
