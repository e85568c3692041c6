#!/usr/bin/env bash
# Instructions per durable append, a figure the machine's noise does not
# move. Runs `runnel serve` (durable appends, --sync batch) and runnel's
# no-op baseline server (hyper through axum, 204 to every POST) in turn
# under valgrind's callgrind, warms each up with 3 s of wrk appends over
# 50 streams (-t1 -c50, bench/wrk-append.lua), zeroes the counters, runs
# wrk DURATION seconds more and divides the user-space instructions of
# the whole process by the requests wrk counted. Kernel work (the TCP
# stack, fsync) is not counted. Needs valgrind and wrk (apt-get install
# valgrind wrk).
#
#   bench/callgrind-append.sh [path/to/runnel]   # default target/dist/runnel
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
DURATION=${DURATION:-10}
PORT=${PORT:-4596}
bin=$(realpath "${1:-target/dist/runnel}")
work=$(mktemp -d)
trap 'pkill -f "callgrind.*127.0.0.1:$PORT" 2>/dev/null || true; rm -rf "$work"' EXIT

# count NAME ARGS...: runs `$bin ARGS... --listen` under callgrind and
# prints NAME, requests, instructions and instructions per request.
count() {
  local name=$1
  shift
  rm -rf "$work/out" "$work/db" && mkdir "$work/out"
  valgrind --tool=callgrind --callgrind-out-file="$work/out/cg.%p" \
    "$bin" "$@" --listen "127.0.0.1:$PORT" > "$work/server.log" 2>&1 &
  local pid=$!
  wait_port "$PORT"
  create_wrk_streams "$PORT" 50
  STREAMS=50 wrk -t1 -c50 -d3s -s bench/wrk-append.lua "http://127.0.0.1:$PORT" > /dev/null
  callgrind_control -z "$pid" > /dev/null 2>&1
  local requests
  requests=$(STREAMS=50 wrk -t1 -c50 -d"${DURATION}s" -s bench/wrk-append.lua "http://127.0.0.1:$PORT" |
    awk '/requests in/ {print $1}')
  callgrind_control -d "$pid" > /dev/null 2>&1
  sleep 1
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  # The dump holds what ran since the counters were zeroed.
  local instructions=0 file total
  for file in "$work"/out/cg.*; do
    grep -q '^desc: Trigger: Program termination' "$file" && continue
    total=$(callgrind_annotate "$file" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
    instructions=$((instructions + ${total:-0}))
  done
  echo "$name $requests $instructions $((instructions / requests))"
}

runnel=$(count runnel serve --data-dir "$work/db")
baseline=$(count baseline bench baseline-server)
echo "| server | requests | instructions | per request |"
echo "|---|---|---|---|"
for line in "$runnel" "$baseline"; do
  read -r name requests instructions per <<< "$line"
  echo "| $name | $requests | $instructions | $per |"
done
read -r _ _ _ runnel_per <<< "$runnel"
read -r _ _ _ baseline_per <<< "$baseline"
awk -v r="$runnel_per" -v b="$baseline_per" \
  'BEGIN {printf "runnel runs %.2fx the instructions of the no-op baseline per request\n", r / b}'
