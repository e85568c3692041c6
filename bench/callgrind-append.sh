#!/usr/bin/env bash
# Instructions per durable append, a figure the machine's noise does not
# move: runs `runnel serve` under valgrind's callgrind, warms up with 3 s
# of wrk appends over 50 streams, zeroes the counters, runs wrk 10 s more
# and divides the user-space instructions of the whole process by the
# requests wrk counted. Needs valgrind and wrk.
#
#   bench/callgrind-append.sh [path/to/runnel]   # default target/dist/runnel
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "${1:-target/dist/runnel}")
port=${PORT:-4596}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" \
  "$bin" serve --listen "127.0.0.1:$port" --data-dir "$work/db" > "$work/log" 2>&1 &
for _ in $(seq 300); do
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
  sleep 0.2
done
for i in $(seq 0 49); do
  curl -s -o /dev/null -X PUT -H 'content-type: text/plain' "http://127.0.0.1:$port/v1/stream/wrk-$i"
done
STREAMS=50 wrk -t1 -c50 -d3s -s bench/wrk-append.lua "http://127.0.0.1:$port" > /dev/null
callgrind_control -z > /dev/null 2>&1
requests=$(STREAMS=50 wrk -t1 -c50 -d10s -s bench/wrk-append.lua "http://127.0.0.1:$port" |
  awk '/requests in/ {print $1}')
callgrind_control -d > /dev/null 2>&1
sleep 1
instructions=$(for f in "$work"/cg.out.*; do
  callgrind_annotate "$f" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}'
done | awk '{s += $1} END {print s}')
echo "requests $requests instructions $instructions per append $((instructions / requests))"
