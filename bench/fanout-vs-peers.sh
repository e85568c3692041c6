#!/usr/bin/env bash
# SSE fan-out: Runnel against durable-streams 0.1.5 (the protocol authors'
# Rust server, WAL durability), in one run, alternating rounds, the same
# load generator for both (`runnel bench fan-out`, a process of its own on
# the same cores). Then long-poll readers through nginx (the setup of
# scripts/cache-proxy.sh), beside direct SSE.
#
# Usage: bench/fanout-vs-peers.sh
#   ROUNDS=2 SIZES="1000 10000" SECS=10 PEERS=/opt/runnel-peers
#   OUT=bench/results/fanout-vs-peers LONG_POLL_READERS=10000
#
# Rate: 50 events/s up to 1,000 readers, 5 events/s from 10,000 (two
# cores cannot send 500,000 deliveries a second and also receive them).
# Server CPU is the server process's user+system time over the measured
# phase (`--server-pid`: read from /proc when the subscribers are all
# connected and when the last deliveries arrived), divided by the
# deliveries the client counted; cost per billion deliveries is that CPU
# in core-hours.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
rounds=${ROUNDS:-2}
sizes=${SIZES:-1000 10000}
secs=${SECS:-10}
peers=${PEERS:-/opt/runnel-peers}
out=${OUT:-bench/results/fanout-vs-peers}
runnel=target/release/runnel
. bench/lib.sh
mkdir -p "$out"
[ -x "$runnel" ] || cargo build --release --locked -p runnel
peer=$(durable_streams_015 "$peers")
port=4599

for round in $(seq "$rounds"); do
  for n in $sizes; do
    rate=50; [ "$n" -ge 10000 ] && rate=5
    for sys in runnel durable-streams-0.1.5; do
      data=$(mktemp -d)
      start_vs_peer "$sys" $port "$data"
      pid=$server_pid
      result=$out/sse-$sys-$n-r$round.json
      "$runnel" bench fan-out --target "http://127.0.0.1:$port" --api-style $api_style --label "$sys" \
        --subscribers "$n" --writer-rate $rate --duration-secs "$secs" --server-pid $pid \
        --quiet --json "$result" >/dev/null 2>&1
      kill $pid; wait $pid 2>/dev/null || true
      rm -rf "$data"
    done
  done
done

echo "| system | readers | events/s | deliveries | p50 ms | p99 ms | server CPU per delivery | core-hours per billion |"
echo "|---|---|---|---|---|---|---|---|"
for f in "$out"/sse-*.json; do
  python3 - "$f" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
us = r["params"]["server_cpu_us_per_delivery"]
print(f"| {r['system']} | {r['size']} | {r['params']['writer_rate']:g} | {r['params']['deliveries']} of {r['params']['deliveries_expected']} "
      f"| {r['latency']['p50_ms']:.2f} | {r['latency']['p99_ms']:.2f} | {us:.2f} us | {us * 1e9 / 1e6 / 3600:.2f} |")
PY
done

n=${LONG_POLL_READERS:-10000}
echo
echo "Long-poll readers through nginx, $n readers, 10 events/s, $secs s:"
READERS=$n SECS=$secs scripts/cache-proxy.sh "$runnel" --only collapse | grep -E "^collapse|FAIL"
