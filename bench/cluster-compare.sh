#!/usr/bin/env bash
# Multi-stream durable appends: a 3-node Runnel cluster on loopback
# against a single Runnel node and against a 3-node Ursula cluster (behind
# its gateway, WAL fsync always and, as published, never), same client.
#
#   bench/cluster-compare.sh
#   SIZES="100 500" DURATION=10 SYSTEMS="runnel-1 runnel-3" bench/cluster-compare.sh
#
# Results: $OUT/cluster-*.json, and the table and charts in $OUT/cluster/
# (default bench/results/latest). Not part of CI.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/bench/lib.sh"
cd "$root"

PEERS=${RUNNEL_PEERS_DIR:-/opt/runnel-peers}
OUT=${OUT:-$root/bench/results/latest}
SYSTEMS=${SYSTEMS:-runnel-1 runnel-3 ursula-3-fsync ursula-3-nofsync}
SIZES=${SIZES:-100 500}
DURATION=${DURATION:-10}
BASE=${BASE:-4700}
RUNNEL=$root/target/dist/runnel

mkdir -p "$OUT" "$PEERS"
cargo build --profile dist --locked -p runnel >&2
case " $SYSTEMS " in
  *" ursula-"*) [ -x "$PEERS/bin/ursula" ] || cargo install --locked --root "$PEERS" ursula@0.11.5 ;;
esac

pids=()
stop_all() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  pids=()
}
trap stop_all EXIT

# A node that does not come up ends the script (see its log).
wait_node() {
  wait_port "$1" || { echo "see $data/*.log" >&2; exit 1; }
}

# Node i (1-based) of a cluster listens on BASE + 10i (Runnel's Raft port
# is that + 1).
port() { echo $((BASE + 10 * $1)); }

# Starts $1 with data under $2; sets $targets and $api.
start_system() {
  local name=$1 data=$2
  api=runnel
  case "$name" in
    runnel-1)
      "$RUNNEL" serve --listen "127.0.0.1:$(port 1)" --data-dir "$data/n1" >"$data/n1.log" 2>&1 &
      pids+=($!)
      wait_node "$(port 1)"
      targets="http://127.0.0.1:$(port 1)" ;;
    runnel-3)
      local peers="1=127.0.0.1:$(port 1),2=127.0.0.1:$(port 2),3=127.0.0.1:$(port 3)"
      for i in 1 2 3; do
        "$RUNNEL" serve --node-id "$i" --peers "$peers" --data-dir "$data/n$i" >"$data/n$i.log" 2>&1 &
        pids+=($!)
      done
      for i in 1 2 3; do wait_node "$(port "$i")"; done
      # Wait until every group has its leader.
      for _ in $(seq 100); do
        "$RUNNEL" ctl status --target "http://127.0.0.1:$(port 1)" | awk 'NR>7 && $2=="-"{bad=1} END{exit bad}' && break
        sleep 0.1
      done
      "$RUNNEL" ctl status --target "http://127.0.0.1:$(port 1)" >&2
      targets="http://127.0.0.1:$(port 1),http://127.0.0.1:$(port 2),http://127.0.0.1:$(port 3)" ;;
    ursula-3-fsync | ursula-3-nofsync)
      api=ursula
      local fsync=always
      [ "$name" = ursula-3-nofsync ] && fsync=never
      for i in 1 2 3; do
        cat >"$data/n$i.toml" <<TOML
[server]
listen = "127.0.0.1:$(port "$i")"
admin_listen = "127.0.0.1:$(( $(port "$i") + 5 ))"
cluster_id = "runnel-bench"
[raft]
group_count = 32 # its default for this 2-core host, which a cluster must state
[raft.wal]
path = "$data/n$i"
fsync = "$fsync"
[[raft.peers]]
node_id = 1
url = "http://127.0.0.1:$(port 1)"
[[raft.peers]]
node_id = 2
url = "http://127.0.0.1:$(port 2)"
[[raft.peers]]
node_id = 3
url = "http://127.0.0.1:$(port 3)"
[storage.cold]
backend = "none"
TOML
        "$PEERS/bin/ursula" server --config "$data/n$i.toml" --node-id "$i" >"$data/n$i.log" 2>&1 &
        pids+=($!)
      done
      for i in 1 2 3; do wait_node "$(port "$i")"; done
      "$PEERS/bin/ursula" gateway --listen "127.0.0.1:$(port 4)" \
        --upstream "http://127.0.0.1:$(port 1)" --upstream "http://127.0.0.1:$(port 2)" \
        --upstream "http://127.0.0.1:$(port 3)" >"$data/gateway.log" 2>&1 &
      pids+=($!)
      wait_node "$(port 4)"
      sleep 5 # leaders elected, gateway probes done
      targets="http://127.0.0.1:$(port 4)" ;;
    *) echo "unknown system $name" >&2; exit 2 ;;
  esac
}

for system in $SYSTEMS; do
  for size in $SIZES; do
    data=$(mktemp -d)
    start_system "$system" "$data"
    if ! "$RUNNEL" bench multi-stream --target "$targets" --api-style "$api" --quiet \
      --streams "$size" --duration-secs "$DURATION" --label "$system" \
      --json "$OUT/cluster-$system-$size.json"; then
      tail -n 20 "$data"/*.log >&2
      exit 1
    fi
    stop_all
    rm -rf "$data"
  done
done
"$RUNNEL" bench report --out "$OUT/cluster" --reference runnel-3 "$OUT"/cluster-*.json
echo "results in $OUT/cluster" >&2
