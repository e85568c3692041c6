#!/usr/bin/env bash
# Resident memory through one workload: Runnel against durable-streams
# 0.1.5 (the protocol authors' Rust server, WAL durability), in one run,
# alternating rounds, the same client (`runnel bench`, a process of its
# own on the same cores). The server's resident memory (VmRSS) is read
# after each phase:
#
#   started    the server up, nothing done
#   writes     500 streams x 256 B appends for SECS s (multi-stream)
#   reads      100 clients each catching up a stream of 200 x 1 KiB (replay)
#   sse        1,000 SSE readers of one stream at 50 events/s for SECS s
#   storm      200 clients catching up 200 x 1 KiB each at once (replay)
#   streams    STREAMS empty streams created (15,000: the peer keeps a file
#              open per stream, and this machine allows 20,000 open files)
#   idle       IDLE s later, with nothing to do
#
# Usage: bench/memory-vs-peers.sh
#   ROUNDS=2 SECS=10 IDLE=10 STREAMS=15000 PEERS=/opt/runnel-peers
#   OUT=bench/results/memory-vs-peers
#   RUNNEL_ENV="NAME=VALUE ..." (environment for Runnel's server only)
#   RUNNEL_BASELINE=PATH (another build of runnel, run as system
#   runnel-baseline in each round: a before-and-after in one run)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
rounds=${ROUNDS:-2}
secs=${SECS:-10}
idle=${IDLE:-10}
streams=${STREAMS:-15000}
peers=${PEERS:-/opt/runnel-peers}
out=${OUT:-bench/results/memory-vs-peers}
runnel=target/release/runnel
. bench/lib.sh
mkdir -p "$out"
[ -x "$runnel" ] || cargo build --release --locked -p runnel
peer=$(durable_streams_015 "$peers")
port=4599
target=http://127.0.0.1:$port

# Resident memory in MB, and in brackets its anonymous part.
rss_mb() {
  local rss anon
  read -r rss anon <<<"$(resident_mb "$1")"
  echo "$rss ($anon)"
}

bench() {
  if ! "$runnel" bench "$@" --target "$target" --api-style "$api_style" >"$data/bench.log" 2>&1; then
    echo "runnel bench $1 against $sys failed:" >&2
    tail -5 "$data/bench.log" >&2
    exit 1
  fi
}

results=$out/results.tsv
printf 'round\tsystem\tstarted\twrites\treads\tsse\tstorm\tstreams\tidle\n' >"$results"
for round in $(seq "$rounds"); do
  for sys in runnel ${RUNNEL_BASELINE:+runnel-baseline} durable-streams-0.1.5; do
    data=$(mktemp -d)
    start_vs_peer "$sys" $port "$data"
    pid=$server_pid
    trap 'kill $pid 2>/dev/null || true' EXIT
    sleep 1
    row="$round	$sys	$(rss_mb $pid)"
    bench multi-stream --streams 500 --payload-bytes 256 --duration-secs "$secs"
    row="$row	$(rss_mb $pid)"
    bench replay --clients 100 --pre-events 200 --event-bytes 1024
    row="$row	$(rss_mb $pid)"
    bench fan-out --subscribers 1000 --writer-rate 50 --duration-secs "$secs"
    row="$row	$(rss_mb $pid)"
    bench replay --clients 200 --pre-events 200 --event-bytes 1024
    row="$row	$(rss_mb $pid)"
    bench create --streams "$streams"
    row="$row	$(rss_mb $pid)"
    sleep "$idle"
    row="$row	$(rss_mb $pid)"
    echo "$row" >>"$results"
    kill $pid; wait $pid 2>/dev/null || true
    rm -rf "$data"
  done
done

echo "Resident memory (MB) after each phase, and in brackets its anonymous part:"
echo
echo "| round | system | started | writes | reads | sse | storm | $streams streams | idle |"
echo "|---|---|---|---|---|---|---|---|---|"
tail -n +2 "$results" | while IFS=$'\t' read -r r s a b c d e f g; do
  echo "| $r | $s | $a | $b | $c | $d | $e | $f | $g |"
done
