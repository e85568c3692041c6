#!/usr/bin/env bash
# Drives the web console in headless Chromium (js-tests/console.test.mjs,
# puppeteer-core pinned in js-tests/package-lock.json) against a release
# build of runnel; screenshots go to target/console-screenshots/.
#
# Usage: scripts/console-test.sh [path/to/runnel]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/target/release/runnel}
data=$(mktemp -d)
shots=$root/target/console-screenshots
mkdir -p "$shots"
port=$("$root/scripts/free-ports.sh" 1)
auth_port=$((port + 1))
token=console-admin-$RANDOM$RANDOM
cat >"$data/auth.toml" <<EOF
[[tokens]]
name = "admin"
sha256 = "$(printf %s "$token" | sha256sum | cut -d' ' -f1)"
grants = [{ prefix = "", allow = ["admin"] }]
[jwt]
hs256_secret = "console-test-secret-of-32-bytes-or-more"
EOF
"$bin" serve --listen "127.0.0.1:$port" --data-dir "$data/db" >"$data/server.log" 2>&1 &
pid=$!
"$bin" serve --listen "127.0.0.1:$auth_port" --data-dir "$data/auth-db" \
  --auth-file "$data/auth.toml" >"$data/auth-server.log" 2>&1 &
auth_pid=$!
cleanup() {
  kill "$pid" "$auth_pid" 2>/dev/null || true
  wait "$pid" "$auth_pid" 2>/dev/null || true
  rm -rf "$data"
}
trap cleanup EXIT
for p in "$port" "$auth_port"; do
  for _ in $(seq 100); do
    curl -s -o /dev/null "http://127.0.0.1:$p/health" && break
    sleep 0.1
  done
  curl -s -o /dev/null "http://127.0.0.1:$p/health" || {
    echo "console: the server on port $p did not start; its logs:" >&2
    cat "$data/server.log" "$data/auth-server.log" >&2
    exit 1
  }
done
cd "$root/js-tests"
CONSOLE_TEST_URL="http://127.0.0.1:$port" CONSOLE_AUTH_URL="http://127.0.0.1:$auth_port" \
  CONSOLE_AUTH_TOKEN="$token" SCREENSHOT_DIR="$shots" node console.test.mjs
echo "console: screenshots in $shots"
