#!/usr/bin/env bash
# Runs the Durable Streams conformance suite (npm package pinned in
# conformance/package-lock.json) against a release build of runnel on
# durable storage. Usage: scripts/conformance.sh [path/to/runnel]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/target/release/runnel}
[ -x "$bin" ] || { echo "conformance: no runnel binary at $bin (cargo build --release)" >&2; exit 1; }

(cd "$root/conformance" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)

data=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
log="$data/server.log"
"$bin" serve --listen "127.0.0.1:$port" --data-dir "$data/db" --long-poll-timeout-ms 500 >"$log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$data"' EXIT
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
  sleep 0.1
done
curl -sf "http://127.0.0.1:$port/health" >/dev/null || { cat "$log" >&2; echo "conformance: server did not start" >&2; exit 1; }

cd "$root/conformance"
CONFORMANCE_TEST_URL="http://127.0.0.1:$port" npx vitest run conformance.test.mjs --reporter=dot
