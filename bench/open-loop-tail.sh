#!/usr/bin/env bash
# The tail of the latency distribution at half of each system's capacity,
# as the proxy benchmarks report it: per system, a closed-loop run of
# `runnel bench multi-stream` finds its capacity (appends/s with STREAMS
# writers), then an open-loop run at half that rate reports p50, p99,
# p99.9, p99.99 and the standard deviation. Durable appends of 256 bytes;
# each system on fresh data; ROUNDS rounds in rotating order.
#
#   bench/open-loop-tail.sh [SYSTEM...]   (default: runnel durable-rust)
#   systems: runnel durable-rust durable-node ursula s2 (peers installed
#   into PEERS when missing; see bench/lib.sh)
#   STREAMS=100 CAP_SECS=8 OPEN_SECS=20 ROUNDS=2 PEERS=/tmp/peers
#   RATE=N: every system at N appends/s instead (the same load for all;
#   the capacity run is skipped).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
RUNNEL=${RUNNEL:-$here/../target/release/runnel}
PEERS=${PEERS:-/tmp/peers}
streams=${STREAMS:-100}
cap_secs=${CAP_SECS:-8}
open_secs=${OPEN_SECS:-20}
rounds=${ROUNDS:-2}
port=${PORT:-4800}
systems=("$@")
[ ${#systems[@]} -gt 0 ] || systems=(runnel durable-rust)
work=$(mktemp -d)
pid=
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

start() { # SYSTEM DATA: sets pid and api
  case "$1" in
    runnel)
      api=runnel
      "$RUNNEL" serve --listen "127.0.0.1:$port" --data-dir "$2" --object-store none >"$2.log" 2>&1 & ;;
    *)
      start_peer "$1" "$PEERS" "$port" "$2" "$2.log" ;;
  esac
  pid=$!
  wait_port "$port"
}

field() { python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$@"; }

run() { # SYSTEM ROUND
  local system=$1 round=$2 data=$work/$1-$2
  port=$((port + 1))
  start "$system" "$data"
  [ -n "${RATE:-}" ] || "$RUNNEL" bench multi-stream --target "http://127.0.0.1:$port" --api-style "$api" \
    --streams "$streams" --duration-secs "$cap_secs" --payload-bytes 256 --quiet \
    --label "$system-cap" --json "$data-cap.json" >/dev/null
  local capacity rate
  if [ -n "${RATE:-}" ]; then
    capacity=-
    rate=$RATE
  else
    capacity=$(field "$data-cap.json" 'int(r["throughput_per_sec"])')
    rate=$((capacity / 2))
  fi
  "$RUNNEL" bench multi-stream --target "http://127.0.0.1:$port" --api-style "$api" \
    --streams "$streams" --duration-secs "$open_secs" --payload-bytes 256 --rate "$rate" --quiet \
    --label "$system-open" --json "$data-open.json" >/dev/null
  printf '| %s | %s | %s | %s | %s |\n' "$system" "$round" "$capacity" "$rate" \
    "$(field "$data-open.json" '"%.2f | %.2f | %.2f | %.2f | %.2f | %d" % (r["latency"]["p50_ms"], r["latency"]["p99_ms"], r["latency"]["p999_ms"], r["latency"]["p9999_ms"], r["latency"]["stddev_ms"], r["counts"]["error"])')"
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  pid=
}

echo "| system | round | capacity appends/s | open-loop rate | p50 ms | p99 ms | p99.9 ms | p99.99 ms | stddev ms | errors |"
echo "|---|---|---|---|---|---|---|---|---|---|"
run_rounds "$rounds" "${systems[@]}"
