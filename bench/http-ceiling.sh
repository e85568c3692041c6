#!/usr/bin/env bash
# Durable HTTP appends against the HTTP ceiling, in one loop on this
# machine: wrk (-t2 -c500, 256-byte POSTs over 500 streams,
# bench/wrk-append.lua) against nginx answering 204 to every POST, runnel
# (durable appends, --sync batch), and runnel's no-op baseline server,
# ROUNDS times in turn. Needs wrk and nginx (apt-get install wrk
# nginx-light); builds runnel's dist profile (RUNNEL_BIN picks another
# binary).
#
#   bench/http-ceiling.sh            # ROUNDS=2 DURATION=10 by default
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
ROUNDS=${ROUNDS:-2}
DURATION=${DURATION:-10}
PORT=${PORT:-4597}
bin=${RUNNEL_BIN:-target/dist/runnel}
[ -n "${RUNNEL_BIN:-}" ] || cargo build --profile dist --locked -p runnel >&2
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

cat > "$work/nginx.conf" <<EOF
worker_processes auto;
pid $work/nginx.pid;
error_log $work/nginx-error.log;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $work/body;
  keepalive_requests 1000000;
  server {
    listen 127.0.0.1:$PORT;
    location / { return 204; }
  }
}
EOF

run_wrk() {
  wrk -t2 -c500 -d"${DURATION}s" -s bench/wrk-append.lua "http://127.0.0.1:$PORT" |
    awk '/Requests\/sec/ {print $2} /Non-2xx/ {print "non-2xx " $4 > "/dev/stderr"}'
}

for round in $(seq "$ROUNDS"); do
  nginx -c "$work/nginx.conf" -p "$work" -g 'daemon off;' &
  pid=$!; wait_port "$PORT"
  echo "round $round nginx-204 $(run_wrk)"
  kill $pid; wait $pid 2>/dev/null || true

  rm -rf "$work/db"
  $bin serve --listen 127.0.0.1:$PORT --data-dir "$work/db" > "$work/runnel.log" 2>&1 &
  pid=$!; wait_port "$PORT"
  create_wrk_streams "$PORT" 500
  echo "round $round runnel $(run_wrk)"
  kill $pid; wait $pid 2>/dev/null || true

  $bin bench baseline-server --listen 127.0.0.1:$PORT > /dev/null 2>&1 &
  pid=$!; wait_port "$PORT"
  echo "round $round baseline $(run_wrk)"
  kill $pid; wait $pid 2>/dev/null || true
done
