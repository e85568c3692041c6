#!/usr/bin/env bash
# What a leader's death costs writers, measured (the tests assert only
# that nothing fails or is lost; how long writes pause is measured here).
#
# A 3-node cluster on loopback; `runnel bench multi-stream` appends at a
# steady open-loop rate through nodes 2 and 3 only. Two rounds of the same
# length: a control with no fault, then a round in which node 1 (which
# leads a share of the groups) is SIGKILLed a few seconds in. The report:
# each round's p99, p99.9 and max latency and errors, and the kill round's
# max over the control's (the pause a failover adds). In-cluster retries
# mean an append that meets the election waits instead of failing.
#
#   bench/failover.sh [BINARY] [RATE] [SECS]      # defaults: target/release/runnel 400 12
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/target/release/runnel}
rate=${2:-400}
secs=${3:-12}
work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

round() { # NAME KILL(0|1)
  local name=$1 kill=$2 base=$((21000 + RANDOM % 9000)) peers="" id
  for id in 1 2 3; do peers="$peers${peers:+,}$id=127.0.0.1:$((base + 2 * id))"; done
  pids=()
  for id in 1 2 3; do
    "$bin" serve --node-id "$id" --peers "$peers" --groups 7 --data-dir "$work/$name/n$id" \
      --listen "127.0.0.1:$((base + 2 * id))" >"$work/$name-n$id.log" 2>&1 &
    pids+=($!)
  done
  for id in 1 2 3; do
    until curl -sf "http://127.0.0.1:$((base + 2 * id))/ready" >/dev/null; do sleep 0.1; done
  done
  local targets="http://127.0.0.1:$((base + 4)),http://127.0.0.1:$((base + 6))"
  "$bin" bench multi-stream --target "$targets" --streams 40 --rate "$rate" \
    --duration-secs "$secs" --quiet --json "$work/$name.json" &
  local bench=$!
  if [ "$kill" = 1 ]; then
    sleep $((secs / 3))
    kill -9 "${pids[0]}"
  fi
  wait "$bench"
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait "${pids[@]}" 2>/dev/null || true
}

round control 0
round kill 1
python3 - "$work/control.json" "$work/kill.json" <<'PY'
import json, sys
control, kill = (json.load(open(p)) for p in sys.argv[1:])
for name, r in (("control", control), ("leader killed", kill)):
    l = r["latency"]
    print(f"{name:>14}: {r['counts']['ok']} ok, {r['counts']['error']} errors, "
          f"p99 {l['p99_ms']:.1f} ms, p99.9 {l['p999_ms']:.1f} ms, max {l['max_ms']:.1f} ms")
print(f"failover pause (max, kill over control): {kill['latency']['max_ms'] / control['latency']['max_ms']:.1f}x, "
      f"{kill['latency']['max_ms'] - control['latency']['max_ms']:.0f} ms more")
PY
