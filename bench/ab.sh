#!/usr/bin/env bash
# Two builds of Runnel side by side on this machine, in alternating
# rounds, with one client (the NEW build's `runnel bench`): durable
# appends (500 streams x 256 B, closed loop) and catch-up reads (the
# replay workload: 100 clients each fetching its own 200 KiB stream).
# Each round starts each server on a fresh data directory. Prints every
# round, then each workload's median for both and the ratio NEW/BASE:
# this is how a refactor shows its write and read figures unchanged.
#
#   bench/ab.sh BASE_BINARY NEW_BINARY          # 3 rounds, 10 s appends
#   ROUNDS=5 DURATION=20 bench/ab.sh old/runnel target/release/runnel
#
# Not part of CI: the machine is shared and noisy, so read ratios near
# 1.0 as "within noise" only when the rounds overlap.
set -euo pipefail
[ $# = 2 ] || { echo "usage: bench/ab.sh BASE_BINARY NEW_BINARY" >&2; exit 2; }
base=$(realpath "$1")
new=$(realpath "$2")
rounds=${ROUNDS:-3}
duration=${DURATION:-10}
port=${PORT:-4598}
work=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$work"' EXIT
pid=

serve() {
  "$1" serve --listen "127.0.0.1:$port" --data-dir "$work/data" >"$work/server.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null && return
    sleep 0.1
  done
  echo "ab.sh: $1 did not start:" >&2
  tail "$work/server.log" >&2
  exit 1
}

stop() {
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  rm -rf "$work/data"
}

# rate FILE: the throughput a `runnel bench --json` file recorded.
rate() { python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["throughput_per_sec"]))' "$1"; }

for round in $(seq "$rounds"); do
  for side in base new; do
    binary=$base
    [ $side = new ] && binary=$new
    serve "$binary"
    "$new" bench multi-stream --target "http://127.0.0.1:$port" --streams 500 \
      --duration-secs "$duration" --quiet --json "$work/$side-appends-$round.json" >/dev/null 2>>"$work/bench.log"
    "$new" bench replay --target "http://127.0.0.1:$port" --clients 100 --pre-events 200 \
      --event-bytes 1024 --quiet --json "$work/$side-reads-$round.json" >/dev/null 2>>"$work/bench.log"
    stop
    echo "round $round $side: $(rate "$work/$side-appends-$round.json") appends/s," \
      "$(rate "$work/$side-reads-$round.json") replays/s"
  done
done

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR + 1) / 2)]}'; }
for workload in appends reads; do
  b=$(for f in "$work"/base-$workload-*.json; do rate "$f"; done | median)
  n=$(for f in "$work"/new-$workload-*.json; do rate "$f"; done | median)
  echo "$workload: median base $b/s, new $n/s, new/base $(python3 -c "print(f'{$n / $b:.3f}')")"
done
