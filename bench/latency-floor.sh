#!/usr/bin/env bash
# One writer's append latency, measured by three clients against the
# same servers in one script, so the benchmark client's own cost shows: a
# plain Python `http.client` loop, a minimal std-only Rust client
# (bench/minimal_client.rs, compiled here with rustc; it shares no code
# with runnel bench), each one keep-alive connection, 256-byte appends,
# closed loop, and `runnel bench multi-stream --streams 1`.
#
#   runnel    `runnel serve` (durable appends, --sync batch)
#   nosync    `runnel serve --sync never`
#   baseline  `runnel bench baseline-server` (answers without storing)
#
#   bench/latency-floor.sh [BINARY]    (COUNT appends per client, 3000)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
bin=${1:-$here/../target/release/runnel}
count=${COUNT:-3000}
port=${PORT:-4707}
use_work_dir

python_loop() { # PORT STREAM
  python3 - "$1" "$2" "$count" <<'PY'
import http.client, statistics, sys, time
port, stream, count = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
conn = http.client.HTTPConnection("127.0.0.1", port)
conn.request("PUT", f"/v1/stream/{stream}", headers={"content-type": "text/plain"})
conn.getresponse().read()
body = b"x" * 256
took = []
for _ in range(count):
    started = time.perf_counter()
    conn.request("POST", f"/v1/stream/{stream}", body=body, headers={"content-type": "text/plain"})
    response = conn.getresponse()
    response.read()
    took.append(time.perf_counter() - started)
    assert response.status in (200, 204), response.status
took.sort()
p = lambda q: took[min(len(took) - 1, int(q * len(took)))] * 1000
print(f"{p(0.5):.3f} {p(0.99):.3f}")
PY
}

rustc -O --edition 2021 -o "$work/minimal-client" "$here/minimal_client.rs"
minimal_client() { # PORT STREAM
  "$work/minimal-client" "$1" "$2" "$count"
}

bench_client() { # PORT LABEL
  "$bin" bench multi-stream --target "http://127.0.0.1:$1" --streams 1 \
    --duration-secs 5 --quiet --label "$2" --json "$work/$2.json" >/dev/null
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["latency"]; print("%.3f %.3f" % (r["p50_ms"], r["p99_ms"]))' "$work/$2.json"
}

printf '%-9s %-26s %-26s %-26s\n' server "python http.client p50/p99" "minimal client p50/p99" "runnel bench p50/p99 (ms)"
for setup in runnel nosync baseline; do
  # A port of its own per server: a closed server's port may still hold
  # connections in TIME_WAIT, which the baseline server cannot bind past.
  port=$((port + 1))
  case "$setup" in
    runnel) "$bin" serve --listen "127.0.0.1:$port" --data-dir "$work/$setup" --object-store none >"$work/server.log" 2>&1 & ;;
    nosync) "$bin" serve --listen "127.0.0.1:$port" --data-dir "$work/$setup" --object-store none --sync never >"$work/server.log" 2>&1 & ;;
    baseline) "$bin" bench baseline-server --listen "127.0.0.1:$port" >"$work/server.log" 2>&1 & ;;
  esac
  pid=$!
  wait_port "$port"
  py=$(python_loop "$port" "floor-$setup" | tail -1)
  mc=$(minimal_client "$port" "minimal-$setup" | tail -1)
  rb=$(bench_client "$port" "$setup" | tail -1)
  printf '%-9s %-26s %-26s %-26s\n' "$setup" "$py" "$mc" "$rb"
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  pid=
done
