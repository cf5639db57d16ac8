#!/usr/bin/env bash
# Renders a twin report (index.html written by `--report DIR`) to PNG with headless
# Chromium, as a person would see it at laptop width, to look at it or put it in a
# document.
#
#   scripts/render-report.sh DIR [OUT.png] [WIDTH] [HEIGHT]
#
# Chromium is Debian's `chromium` package (`apt-get install chromium`). WIDTH defaults
# to 1366 (a laptop), HEIGHT to 6000 (the page's length; the rest is cut).
set -euo pipefail
dir=${1:?usage: scripts/render-report.sh DIR [OUT.png] [WIDTH] [HEIGHT]}
out=${2:-$dir/index.png}
width=${3:-1366}
height=${4:-6000}
html=$(cd "$dir" && pwd)/index.html
[[ -f $html ]] || { echo "no index.html in $dir" >&2; exit 2; }
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
[[ -n $browser ]] || { echo "headless Chromium not found: apt-get install chromium" >&2; exit 2; }
out_abs=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars \
  --window-size="$width,$height" --screenshot="$out_abs" "file://$html" 2>/dev/null
echo "$out_abs"
