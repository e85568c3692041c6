#!/usr/bin/env bash
# What empty streams cost: resident memory of one `runnel serve` before
# and after creating N empty streams (default 1,000,000), and again after
# a restart (the streams recovered from the log).
#
#   bench/tier-memory.sh [BINARY]        STREAMS=1000000 by default
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
bin=${1:-$here/../target/release/runnel}
streams=${STREAMS:-1000000}
port=${PORT:-4701}
use_work_dir

rss_kib() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
start() {
  "$bin" serve --listen "127.0.0.1:$port" --data-dir "$work/data" >>"$work/server.log" 2>&1 &
  pid=$!
  wait_port "$port"
}

start
before=$(rss_kib "$pid")
"$bin" bench create --target "http://127.0.0.1:$port" --streams "$streams" --concurrency 32
sleep 2
after=$(rss_kib "$pid")
kill "$pid"
wait "$pid" 2>/dev/null || true
start
restarted=$(rss_kib "$pid")
# The recovered figure counts only if the streams are there.
for i in 0 $((streams / 2)) $((streams - 1)); do
  code=$(curl -s -o /dev/null -w '%{http_code}' -I "http://127.0.0.1:$port/v1/stream/idle-$i")
  [ "$code" = 200 ] || { echo "stream idle-$i missing after the restart (HTTP $code)" >&2; exit 1; }
done
echo "streams: $streams"
echo "resident memory: $((before / 1024)) MiB empty, $((after / 1024)) MiB with the streams, $((restarted / 1024)) MiB after a restart"
echo "per stream: $(((after - before) * 1024 / streams)) bytes (created), $(((restarted - before) * 1024 / streams)) bytes (recovered)"
