#!/usr/bin/env bash
# Render a local HTML page (a --cudaperf-html report, a dashboard page) in headless Chromium,
# offline, and save a PNG:
#   bash scripts/screenshot-report.sh PAGE.html[#ANCHOR] OUT.png [WIDTH,HEIGHT]
# (default window 1100,1500). Needs Debian's chromium (apt-get install chromium). The page loads
# nothing from the network: Chromium runs with networking features off, and the pages are files.
set -euo pipefail
page=$1
anchor=""
if [[ "$page" == *"#"* ]]; then anchor="#${page#*#}"; page=${page%%#*}; fi
page=$(realpath "$page")
out=$(realpath -m "$2")
size=${3:-1100,1500}
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync \
  --user-data-dir="$profile" --hide-scrollbars --window-size="$size" \
  --screenshot="$out" "file://$page$anchor" 2>/dev/null
echo "wrote $out"
