#!/usr/bin/env bash
# History bounded by the bucket, not the node: fills TOTAL bytes (default
# 20 GiB) of PAYLOAD-byte appends (256) round-robin over STREAMS streams
# (10,000) into one `runnel serve` with a small hot window (HOT, 256 MiB),
# tiering to a bucket in a local directory, then prints the server's
# resident memory (peak and final), the local disk its data directory
# uses, the bytes in the bucket, and checks a sample of streams byte for
# byte (`runnel bench fill` regenerates what it wrote).
#
#   bench/tier-fill.sh [BINARY]
#   TOTAL=$((1<<30)) STREAMS=1000 bench/tier-fill.sh     # a quick run
#
# BATCH (default 1) payloads go in one request; each request is one append.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
bin=${1:-$here/../target/release/runnel}
total=${TOTAL:-$((20 << 30))}
streams=${STREAMS:-10000}
hot=${HOT:-$((256 << 20))}
payload=${PAYLOAD:-256}
batch=${BATCH:-1}
port=${PORT:-4702}
work=${WORK:-$(mktemp -d)}
mkdir -p "$work"
pid=
sampler=
cleanup() {
  [ -n "$sampler" ] && kill "$sampler" 2>/dev/null
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  [ -n "${KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT

segment=$((hot / 4))
"$bin" serve --listen "127.0.0.1:$port" --data-dir "$work/data" \
  --object-store "file://$work/bucket" --hot-bytes "$hot" \
  --segment-bytes "$segment" --checkpoint-bytes "$segment" \
  --max-untiered-bytes $((hot * 2)) --tier-max-age-secs 30 \
  >"$work/server.log" 2>&1 &
pid=$!
wait_port "$port"

# Peak resident memory, sampled every 5 s.
(
  peak=0
  while kill -0 "$pid" 2>/dev/null; do
    rss=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
    [ "$rss" -gt "$peak" ] && peak=$rss && echo "$peak" >"$work/peak-rss-kib"
    sleep 5
  done
) &
sampler=$!

started=$(date +%s)
"$bin" bench fill --target "http://127.0.0.1:$port" --streams "$streams" \
  --total-bytes "$total" --payload-bytes "$payload" --batch "$batch" --verify-streams 0
filled=$(date +%s)

status() { curl -s "http://127.0.0.1:$port/_runnel/status"; }
field() { python3 -c "import json,sys; print(json.load(sys.stdin)['tiering']['$1'])"; }
# Let the tierer bring the untiered bytes under the hot window, and a
# checkpoint free the log behind them.
for _ in $(seq 120); do
  untiered=$(status | field untiered_bytes)
  [ "$untiered" -le "$hot" ] && break
  sleep 5
done
sleep 10

kib() { du -sk "$1" | cut -f1; }
rss=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
peak=$(cat "$work/peak-rss-kib" 2>/dev/null || echo "$rss")
echo "filled $((total >> 20)) MiB over $streams streams in $((filled - started)) s"
echo "resident memory: $((rss / 1024)) MiB now, $((peak / 1024)) MiB at most (sampled every 5 s)"
echo "local disk (data directory): $(($(kib "$work/data") / 1024)) MiB, hot window $((hot >> 20)) MiB"
echo "bucket: $(($(kib "$work/bucket") / 1024)) MiB in $(find "$work/bucket" -name '*.rnc' | wc -l) chunk objects"
status | python3 -c "import json,sys; t=json.load(sys.stdin)['tiering']; print('tiered', t['tiered_bytes'] >> 20, 'MiB; untiered', t['untiered_bytes'] >> 20, 'MiB')"
"$bin" bench fill --target "http://127.0.0.1:$port" --streams "$streams" \
  --total-bytes "$total" --payload-bytes "$payload" --batch "$batch" \
  --verify-only --verify-streams "${VERIFY:-50}"
