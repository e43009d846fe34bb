#!/usr/bin/env bash
# Render a --cudaperf-html report in headless Chromium (offline) and save a PNG:
#   bash scripts/screenshot-report.sh REPORT.html OUT.png
# Needs Debian's chromium (apt-get install chromium). The page loads nothing from the network:
# Chromium runs with networking features off, and the report is one self-contained file.
set -euo pipefail
report=$(realpath "$1")
out=$(realpath -m "$2")
profile=$(mktemp -d)
chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync \
  --user-data-dir="$profile" --hide-scrollbars --window-size=1100,1500 \
  --screenshot="$out" "file://$report" 2>/dev/null
rm -rf "$profile"
echo "wrote $out"
