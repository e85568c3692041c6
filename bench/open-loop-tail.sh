#!/usr/bin/env bash
# The tail of the latency distribution at half of each system's capacity,
# as the proxy benchmarks report it: per system, a closed-loop run of
# `runnel bench multi-stream` finds its capacity (appends/s with STREAMS
# writers), then an open-loop run at half that rate reports p50, p99,
# p99.9, p99.99 and the standard deviation. Durable appends of 256 bytes;
# each system on fresh data; ROUNDS rounds in rotating order.
#
# Runnel checkpoints every CHECKPOINT_SECS (10 by default: with the 8 s
# capacity run, checkpoints fall 2 s and 12 s into the open-loop window),
# so the window holds the stalls a checkpoint could cause. `runnel-nosync`
# is the same server with `--sync never`: the floor without fsyncs. When
# both ran, each round's Runnel p99 and p99.9 are printed as multiples of
# that round's `runnel-nosync` p99, against the bounds of 3x and 5x.
#
#   bench/open-loop-tail.sh [SYSTEM...]
#   (default: runnel runnel-nosync durable-streams-0.1.5)
#   systems: runnel runnel-nosync durable-streams-0.1.5 durable-rust
#   durable-node ursula s2 (peers installed into PEERS when missing; see
#   bench/lib.sh)
#   STREAMS=100 CAP_SECS=8 OPEN_SECS=20 ROUNDS=2 CHECKPOINT_SECS=10
#   PEERS=/opt/runnel-peers OUT=<summary file, optional>
#   RATE=N: every system at N appends/s instead (the same load for all;
#   the capacity run is skipped).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
RUNNEL=${RUNNEL:-$here/../target/release/runnel}
PEERS=${PEERS:-/opt/runnel-peers}
checkpoint_secs=${CHECKPOINT_SECS:-10}
streams=${STREAMS:-100}
cap_secs=${CAP_SECS:-8}
open_secs=${OPEN_SECS:-20}
rounds=${ROUNDS:-2}
port=${PORT:-4800}
systems=("$@")
[ ${#systems[@]} -gt 0 ] || systems=(runnel runnel-nosync durable-streams-0.1.5)
use_work_dir

start() { # SYSTEM DATA: sets pid and api
  case "$1" in
    runnel | runnel-nosync)
      api=runnel
      local sync=batch
      [ "$1" = runnel ] || sync=never
      "$RUNNEL" serve --listen "127.0.0.1:$port" --data-dir "$2" --object-store none \
        --sync "$sync" --checkpoint-interval-secs "$checkpoint_secs" >"$2.log" 2>&1 & ;;
    durable-streams-0.1.5)
      api=durable-root
      "$(durable_streams_015 "$PEERS")" --host 127.0.0.1 --port "$port" --data-dir "$2" >"$2.log" 2>&1 & ;;
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
  local window_start checkpointed=-
  window_start=$(date +%s)
  "$RUNNEL" bench multi-stream --target "http://127.0.0.1:$port" --api-style "$api" \
    --streams "$streams" --duration-secs "$open_secs" --payload-bytes 256 --rate "$rate" --quiet \
    --label "$system-open" --json "$data-open.json" >/dev/null
  # Runnel's checkpoint file, rewritten by every checkpoint: the last one
  # fell in the window when it is newer than the window's start.
  if [ "$api" = runnel ]; then
    checkpointed=no
    [ "$(stat -c %Y "$data/checkpoint" 2>/dev/null || echo 0)" -ge "$window_start" ] && checkpointed=yes
  fi
  printf '| %s | %s | %s | %s | %s | %s |\n' "$system" "$round" "$capacity" "$rate" \
    "$(field "$data-open.json" '"%.2f | %.2f | %.2f | %.2f | %.2f | %d" % (r["latency"]["p50_ms"], r["latency"]["p99_ms"], r["latency"]["p999_ms"], r["latency"]["p9999_ms"], r["latency"]["stddev_ms"], r["counts"]["error"])')" \
    "$checkpointed"
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  pid=
}

{
  echo "| system | round | capacity appends/s | open-loop rate | p50 ms | p99 ms | p99.9 ms | p99.99 ms | stddev ms | errors | checkpoint in the window |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|"
  run_rounds "$rounds" "${systems[@]}"
  # Runnel's tail against the floor without fsyncs, round by round.
  python3 - "$work" "$rounds" <<'PY'
import json, os, sys
work, rounds = sys.argv[1], int(sys.argv[2])
def latency(system, r):
    path = f"{work}/{system}-{r}-open.json"
    return json.load(open(path))["latency"] if os.path.exists(path) else None
for r in range(1, rounds + 1):
    durable, floor = latency("runnel", r), latency("runnel-nosync", r)
    if durable is None or floor is None:
        continue
    p99 = durable["p99_ms"] / floor["p99_ms"]
    p999 = durable["p999_ms"] / floor["p99_ms"]
    verdict = "within" if p99 <= 3 and p999 <= 5 else "OUTSIDE"
    print(f"- round {r}: Runnel p99 {p99:.2f}x and p99.9 {p999:.2f}x the --sync never p99 "
          f"({floor['p99_ms']:.2f} ms); bounds 3x and 5x: {verdict}")
PY
} | tee "${OUT:-/dev/null}"
