#!/usr/bin/env bash
# Scale, measured: each node's CPU time per acknowledged append in a
# 3-node and a 6-node cluster, both with replication factor 3 and the same
# groups, under the same open-loop write load through every node, in one
# run. With six nodes each node holds half the replicas, so its CPU per
# cluster-wide append should be about half.
#
# Each cluster is measured twice: with each stream's appends sent to a
# node round robin (most then take a forward hop to their group's leader:
# 2 of 3 with three nodes, 5 of 6 with six), and with each stream's
# appends sent to its group's leader (`bench multi-stream --to-leader`,
# as a leader-aware client or load balancer would). A third phase runs
# no load: each node's idle CPU (heartbeats, timers, polls), a cost per
# node rather than per append, is then taken off the loaded phases to
# give the marginal CPU per append.
#
#   scripts/scale-cpu.sh target/release/runnel [RATE] [SECS]
#
# RATE appends/s over 60 streams (default 1500), SECS measured seconds per
# phase (default 20). Prints a table and the 6:3 ratios. Needs curl and
# python3.
set -euo pipefail
bin=$(realpath "${1:?usage: scale-cpu.sh RUNNEL_BINARY [RATE] [SECS]}")
rate=${2:-1500}
secs=${3:-20}
# Group 0 (metadata, no streams) and 12 data groups: 36 replicas, 6 or 12
# per node.
groups=13
work=$(mktemp -d)
pids=()
targets=""
cleanup() {
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

# Log syncs (fsyncs) of every node of the cluster, summed.
syncs() {
  local total=0 url n
  for url in ${targets//,/ }; do
    n=$(curl -sf "$url/metrics" | awk '/^runnel_log_sync_duration_seconds_count/ {print $2}')
    total=$((total + ${n:-0}))
  done
  echo "$total"
}

# CPU time (user + system) of a process, in clock ticks.
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# Every node's CPU time over $secs seconds of no load, as a row in
# $work/idle-NODES: the mean per node per second, in ms.
measure_idle() {
  local nodes=$1
  local before=()
  for pid in "${pids[@]}"; do before+=("$(ticks "$pid")"); done
  sleep "$secs"
  local used=0
  for n in "${!pids[@]}"; do
    used=$((used + $(ticks "${pids[$n]}") - before[n]))
  done
  python3 -c "print(f'{$used / $(getconf CLK_TCK) * 1000 / $nodes / $secs:.1f}')" >"$work/idle-$nodes"
}

# One measured phase on the running cluster: every node's CPU time over a
# bench run (extra flags: $3), as a row in $work/row-NODES-MODE.
measure() {
  local nodes=$1 mode=$2 flags=$3
  local before=() synced
  synced=$(syncs)
  for pid in "${pids[@]}"; do before+=("$(ticks "$pid")"); done
  # shellcheck disable=SC2086 # $flags is empty or one flag
  "$bin" bench multi-stream --target "$targets" --streams 60 --rate "$rate" \
    --duration-secs "$secs" --quiet $flags --json "$work/run-$nodes-$mode.json"
  local used=0
  for n in "${!pids[@]}"; do
    used=$((used + $(ticks "${pids[$n]}") - before[n]))
  done
  synced=$(($(syncs) - synced))
  python3 - "$work/run-$nodes-$mode.json" "$nodes" "$used" "$(getconf CLK_TCK)" "$mode" "$synced" \
    >"$work/row-$nodes-$mode" <<'PY'
import json, sys
result = json.load(open(sys.argv[1]))
row = result[0] if isinstance(result, list) else result
nodes, ticks, hz, mode = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
syncs = int(sys.argv[6])
acked = row["counts"]["ok"]
per_node_ms = ticks / hz * 1000 / nodes
print(f"{nodes} {mode} {acked} {row['counts']['error']} {per_node_ms:.0f} {per_node_ms / acked * 1000:.1f} {syncs / nodes / acked * 1000:.1f}")
PY
}

run() {
  local nodes=$1
  local base=$((21000 + nodes * 100))
  local peers=""
  targets=""
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
  # A short warm-up; then the measured phases.
  "$bin" bench multi-stream --target "$targets" --streams 60 --rate "$rate" \
    --duration-secs 3 --quiet --json "$work/warm-$nodes.json"
  measure "$nodes" any ""
  measure "$nodes" leader --to-leader
  measure_idle "$nodes"
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}

run 3
run 6
echo "nodes  clients  acknowledged  errors  cpu-ms-per-node  per-1000-appends  syncs-per-node-per-1000"
for row in 3-any 6-any 3-leader 6-leader; do
  read -r nodes mode acked errors ms per synced <"$work/row-$row"
  printf "%-6s %-8s %-13s %-7s %-16s %-17s %s\n" "$nodes" "$mode" "$acked" "$errors" "$ms" "$per" "$synced"
done
python3 - "$work" "$secs" <<'PY'
import sys
def per(row):
    return float(open(f"{sys.argv[1]}/row-{row}").read().split()[5])
def row(name):
    return open(f"{sys.argv[1]}/row-{name}").read().split()
def idle(nodes):
    return float(open(f"{sys.argv[1]}/idle-{nodes}").read())
secs = float(sys.argv[2])
def marginal(nodes, mode):
    r = row(f"{nodes}-{mode}")
    return (float(r[4]) - idle(nodes) * secs) / int(r[2]) * 1000
print(f"idle CPU per node: 3 nodes {idle(3):.1f} ms/s, 6 nodes {idle(6):.1f} ms/s")
for mode, clients in (("any", "round robin over the nodes"), ("leader", "at each group's leader")):
    ratio = per("6-" + mode) / per("3-" + mode)
    print(f"6-node : 3-node CPU per node per append, clients {clients} = {ratio:.2f}")
    m3, m6 = marginal(3, mode), marginal(6, mode)
    print(f"  less idle CPU: {m3:.1f} and {m6:.1f} ms per node per 1000 appends = {m6 / m3:.2f}")
PY
