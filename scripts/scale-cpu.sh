#!/usr/bin/env bash
# Scale, measured: each node's CPU time per acknowledged append in a
# 3-node and a 6-node cluster, both with replication factor 3 and the same
# groups, under the same open-loop write load through every node, in one
# run. With six nodes each node holds half the replicas, so its CPU per
# cluster-wide append should be about half.
#
#   scripts/scale-cpu.sh target/release/runnel [RATE] [SECS]
#
# RATE appends/s over 60 streams (default 1500), SECS measured seconds
# (default 20). Prints a table and the 6:3 ratio. Needs curl and python3.
set -euo pipefail
bin=$(realpath "${1:?usage: scale-cpu.sh RUNNEL_BINARY [RATE] [SECS]}")
rate=${2:-1500}
secs=${3:-20}
groups=13
work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

# CPU time (user + system) of a process, in clock ticks.
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

run() {
  local nodes=$1
  local base=$((21000 + nodes * 100))
  local peers="" targets=""
  for i in $(seq 1 "$nodes"); do
    peers+="${peers:+,}$i=127.0.0.1:$((base + i * 2))"
    targets+="${targets:+,}http://127.0.0.1:$((base + i * 2))"
  done
  pids=()
  for i in $(seq 1 "$nodes"); do
    RUNNEL_LOG=error "$bin" serve --node-id "$i" --peers "$peers" \
      --replication-factor 3 --groups "$groups" \
      --data-dir "$work/n$nodes-$i" >/dev/null 2>"$work/n$nodes-$i.log" &
    pids+=($!)
  done
  for i in $(seq 1 "$nodes"); do
    local deadline=$((SECONDS + 60))
    until curl -sf "http://127.0.0.1:$((base + i * 2))/ready" >/dev/null; do
      if ((SECONDS > deadline)); then
        echo "scale-cpu: node $i of $nodes never became ready" >&2
        exit 1
      fi
      sleep 0.2
    done
  done
  # A short warm-up creates the streams; then the measured phase.
  "$bin" bench multi-stream --target "$targets" --streams 60 --rate "$rate" \
    --duration-secs 3 --quiet --json "$work/warm-$nodes.json"
  local before=()
  for pid in "${pids[@]}"; do before+=("$(ticks "$pid")"); done
  "$bin" bench multi-stream --target "$targets" --streams 60 --rate "$rate" \
    --duration-secs "$secs" --quiet --json "$work/run-$nodes.json"
  local used=0
  for n in "${!pids[@]}"; do
    used=$((used + $(ticks "${pids[$n]}") - before[n]))
  done
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  python3 - "$work/run-$nodes.json" "$nodes" "$used" "$(getconf CLK_TCK)" >"$work/row-$nodes" <<'EOF'
import json, sys
result = json.load(open(sys.argv[1]))
row = result[0] if isinstance(result, list) else result
nodes, ticks, hz = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
acked = row["counts"]["ok"]
per_node_ms = ticks / hz * 1000 / nodes
print(f"{nodes} {acked} {row['counts']['error']} {per_node_ms:.0f} {per_node_ms / acked * 1000:.1f}")
EOF
}

run 3
run 6
echo "nodes  acknowledged  errors  cpu-ms-per-node  cpu-ms-per-node-per-1000-appends"
for n in 3 6; do
  read -r nodes acked errors ms per < "$work/row-$n"
  printf "%-6s %-13s %-7s %-16s %s\n" "$nodes" "$acked" "$errors" "$ms" "$per"
done
python3 - "$work/row-3" "$work/row-6" <<'EOF'
import sys
three = float(open(sys.argv[1]).read().split()[4])
six = float(open(sys.argv[2]).read().split()[4])
print(f"6-node : 3-node CPU per node per append = {six / three:.2f}")
EOF
