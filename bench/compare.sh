#!/usr/bin/env bash
# Side-by-side benchmark of Runnel and its peers on this machine, with the
# same client (`runnel bench`) and durable storage everywhere. Installs
# the peers at pinned versions from their registries on first use.
#
#   bench/compare.sh                       # runnel, durable-rust, durable-node
#   SYSTEMS="runnel durable-rust" bench/compare.sh
#   QUICK=1 bench/compare.sh               # smaller sizes, shorter runs
#
# Results: $OUT/*.json, $OUT/results.md and SVG charts (default
# bench/results/latest). Not part of CI: it takes many minutes.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/bench/lib.sh"
cd "$root"

PEERS=${RUNNEL_PEERS_DIR:-/opt/runnel-peers}
OUT=${OUT:-$root/bench/results/latest}
SYSTEMS=${SYSTEMS:-runnel durable-rust durable-node}
DURATION=${DURATION:-10}
if [ "${QUICK:-0}" = 1 ]; then
  MS_SIZES=${MS_SIZES:-"100 500"}; FO_SIZES=${FO_SIZES:-"100 1000"}; RP_SIZES=${RP_SIZES:-"100"}; DURATION=5
else
  MS_SIZES=${MS_SIZES:-"100 500 2000"}; FO_SIZES=${FO_SIZES:-"100 1000 10000"}; RP_SIZES=${RP_SIZES:-"100 1000"}
fi
PORT=${PORT:-4599}
RUNNEL=$root/target/dist/runnel

mkdir -p "$OUT" "$PEERS"
cargo build --profile dist --locked -p runnel >&2

# Starts a system on $PORT with its data in $1; sets $server_pid and $api.
start_system() {
  local name=$1 data=$2
  api=runnel
  case "$name" in
    runnel)
      "$RUNNEL" serve --listen "127.0.0.1:$PORT" --data-dir "$data" >"$data.log" 2>&1 & ;;
    *)
      start_peer "$name" "$PEERS" "$PORT" "$data" "$data.log" ;;
  esac
  server_pid=$!
  wait_port "$PORT" && return 0
  echo "$name did not start; see $data.log" >&2
  exit 1
}

stop_system() {
  kill "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
}

bench() { "$RUNNEL" bench "$@" --target "http://127.0.0.1:$PORT" --api-style "$api" --quiet; }

for system in $SYSTEMS; do
  install_peer "$system" "$PEERS"
  for size in $MS_SIZES; do
    data=$(mktemp -d); start_system "$system" "$data/db"
    bench multi-stream --streams "$size" --duration-secs "$DURATION" --label "$system" --json "$OUT/multi-stream-$system-$size.json"
    stop_system; rm -rf "$data"
  done
  for size in $FO_SIZES; do
    rate=50; [ "$size" -ge 10000 ] && rate=5
    data=$(mktemp -d); start_system "$system" "$data/db"
    bench fan-out --subscribers "$size" --writer-rate "$rate" --duration-secs "$DURATION" --label "$system" \
      --json "$OUT/fan-out-$system-$size.json" || echo "fan-out $system $size failed" >&2
    stop_system; rm -rf "$data"
  done
  for size in $RP_SIZES; do
    data=$(mktemp -d); start_system "$system" "$data/db"
    bench replay --clients "$size" --pre-events 200 --event-bytes 1024 --label "$system" --json "$OUT/replay-$system-$size.json"
    stop_system; rm -rf "$data"
    # The same reconnect storm over State Protocol events (200 updates of
    # 10 keys per stream): Runnel serves its compacted bootstrap, peers
    # without one replay the whole stream.
    data=$(mktemp -d); start_system "$system" "$data/db"
    boot=""; [ "$system" = runnel ] && boot="--bootstrap --settle-secs 3"
    # shellcheck disable=SC2086
    bench replay --clients "$size" --pre-events 200 --event-bytes 1024 --state-keys 10 $boot --label "$system" \
      --json "$OUT/replay-state-$system-$size.json"
    stop_system; rm -rf "$data"
  done
done

"$RUNNEL" bench report "$OUT"/*.json --out "$OUT" --reference runnel
# PNG copies of the charts where librsvg is installed (Debian: librsvg2-bin).
if command -v rsvg-convert >/dev/null; then
  for svg in "$OUT"/*.svg; do rsvg-convert -w 720 "$svg" -o "${svg%.svg}.png"; done
fi
echo "results in $OUT" >&2
