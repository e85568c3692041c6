#!/usr/bin/env bash
# Drives the web console in headless Chromium (console/console.test.mjs,
# puppeteer-core pinned in console/package-lock.json) against a release
# build of runnel; screenshots go to target/console-screenshots/.
#
# Usage: scripts/console-test.sh [path/to/runnel]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/target/release/runnel}
data=$(mktemp -d)
shots=$root/target/console-screenshots
mkdir -p "$shots"
port=$((20000 + RANDOM % 20000))
"$bin" serve --listen "127.0.0.1:$port" --data-dir "$data/db" >"$data/server.log" 2>&1 &
pid=$!
cleanup() {
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  rm -rf "$data"
}
trap cleanup EXIT
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
  sleep 0.1
done
cd "$root/console"
CONSOLE_TEST_URL="http://127.0.0.1:$port" SCREENSHOT_DIR="$shots" node console.test.mjs
echo "console: screenshots in $shots"
