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
# A control runs last: two 3-node clusters side by side, each at half the
# rate. Its six nodes each carry what a node of the 6-node cluster
# carries, with as many processes sharing the machine; the 6-node
# cluster's CPU per node against it separates how Runnel scales from
# what running twice the processes costs on this machine.
#
#   scripts/scale-cpu.sh target/release/runnel [RATE] [SECS]
#
# RATE appends/s over 60 streams (default 1500), SECS measured seconds per
# phase (default 20). Prints a table, the 6:3 ratios and the control's. Needs curl and
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

# Context switches (voluntary and not) of every thread of every node.
switches() {
  local pid
  for pid in "${pids[@]}"; do cat /proc/"$pid"/task/*/status 2>/dev/null; done |
    awk '/ctxt_switches/ {n += $2} END {print n + 0}'
}

# Every node's CPU time over $secs seconds of no load, as a row in
# $work/idle-LABEL: the mean per node per second, in ms.
measure_idle() {
  local label=$1 nodes=${#pids[@]}
  local before=()
  for pid in "${pids[@]}"; do before+=("$(ticks "$pid")"); done
  sleep "$secs"
  local used=0
  for n in "${!pids[@]}"; do
    used=$((used + $(ticks "${pids[$n]}") - before[n]))
  done
  python3 -c "print(f'{$used / $(getconf CLK_TCK) * 1000 / $nodes / $secs:.1f}')" >"$work/idle-$label"
}

# One measured phase on the running clusters: every node's CPU time over
# a bench run per cluster (targets: $4...; together at RATE, extra flags:
# $3), as a row in $work/row-LABEL-MODE.
measure() {
  local label=$1 mode=$2 flags=$3
  shift 3
  local clusters=("$@") before=() synced switched k
  local share=$((rate / ${#clusters[@]}))
  synced=$(syncs)
  switched=$(switches)
  for pid in "${pids[@]}"; do before+=("$(ticks "$pid")"); done
  local benches=()
  for k in "${!clusters[@]}"; do
    # shellcheck disable=SC2086 # $flags is empty or one flag
    "$bin" bench multi-stream --target "${clusters[$k]}" --streams $((60 / ${#clusters[@]})) \
      --rate "$share" --duration-secs "$secs" --quiet $flags \
      --json "$work/run-$label-$mode-$k.json" &
    benches+=($!)
  done
  for k in "${benches[@]}"; do wait "$k"; done
  local used=0
  for n in "${!pids[@]}"; do
    used=$((used + $(ticks "${pids[$n]}") - before[n]))
  done
  synced=$(($(syncs) - synced))
  switched=$(($(switches) - switched))
  python3 - "$work" "$label-$mode" "${#pids[@]}" "$used" "$(getconf CLK_TCK)" "$mode" "$synced" \
    "$switched" "$label" >"$work/row-$label-$mode" <<'PY'
import glob, json, sys
work, run = sys.argv[1], sys.argv[2]
nodes, ticks, hz, mode = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
syncs, switched, label = int(sys.argv[7]), int(sys.argv[8]), sys.argv[9]
acked = errors = 0
for path in glob.glob(f"{work}/run-{run}-*.json"):
    result = json.load(open(path))
    row = result[0] if isinstance(result, list) else result
    acked += row["counts"]["ok"]
    errors += row["counts"]["error"]
per_node_ms = ticks / hz * 1000 / nodes
print(f"{label} {mode} {acked} {errors} {per_node_ms:.0f} {per_node_ms / acked * 1000:.1f} {syncs / nodes / acked * 1000:.1f} {switched / nodes / acked * 1000:.0f}")
PY
}

# Starts a cluster of $1 nodes on ports from $2 with data under
# $work/$3-*: its processes join `pids`, its base URLs (comma-separated)
# go to `$targets`.
start_cluster() {
  local nodes=$1 base=$2 name=$3 peers=""
  targets=""
  for i in $(seq 1 "$nodes"); do
    peers+="${peers:+,}$i=127.0.0.1:$((base + i * 2))"
    targets+="${targets:+,}http://127.0.0.1:$((base + i * 2))"
  done
  for i in $(seq 1 "$nodes"); do
    RUNNEL_LOG=error "$bin" serve --node-id "$i" --peers "$peers" \
      --replication-factor 3 --groups "$groups" \
      --data-dir "$work/$name-$i" >/dev/null 2>"$work/$name-$i.log" &
    pids+=($!)
  done
  for i in $(seq 1 "$nodes"); do
    local deadline=$((SECONDS + 60))
    until curl -sf "http://127.0.0.1:$((base + i * 2))/ready" >/dev/null; do
      if ((SECONDS > deadline)); then
        echo "scale-cpu: node $i of cluster $name never became ready" >&2
        exit 1
      fi
      sleep 0.2
    done
  done
  # A short warm-up.
  "$bin" bench multi-stream --target "$targets" --streams 60 --rate "$rate" \
    --duration-secs 3 --quiet --json "$work/warm-$name.json"
}

# Measures clusters (label $1) started by the commands that follow
# (`start_cluster` calls, separated by `--`): with round-robin clients,
# leader-direct clients, and idle.
run() {
  local label=$1 clusters=()
  shift
  pids=()
  while [ $# -gt 0 ]; do
    start_cluster "$1" "$2" "$3"
    clusters+=("$targets")
    shift 3
  done
  measure "$label" any "" "${clusters[@]}"
  measure "$label" leader --to-leader "${clusters[@]}"
  measure_idle "$label"
  # Group 0's membership at the end (five voters at most, the rest learners).
  for targets in "${clusters[@]}"; do
    curl -sf "${targets%%,*}/_runnel/status" | python3 -c '
import json, sys
zero = json.load(sys.stdin)["groups"][0]
voters, learners = zero["voters"], zero["learners"]
print(f"group 0 of a {sys.argv[1]}-node cluster: voters {voters} learners {learners}")' "$label"
  done
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}

run 3 3 21300 n3
run 6 6 21600 n6
# The control: two 3-node clusters side by side, each at half the rate.
# Six processes again, each carrying what a node of the 6-node cluster
# carries (half of the cluster-wide appends' replicas); if the 6-node
# cluster scaled perfectly on this machine, its nodes would cost what
# these do.
run 2x3 3 21900 pa 3 22000 pb
echo "nodes  clients  acknowledged  errors  cpu-ms-per-node  per-1000-appends  syncs-per-node-per-1000  switches-per-node-per-1000"
for row in 3-any 6-any 2x3-any 3-leader 6-leader 2x3-leader; do
  read -r nodes mode acked errors ms per synced switched <"$work/row-$row"
  printf "%-6s %-8s %-13s %-7s %-16s %-17s %-24s %s\n" "$nodes" "$mode" "$acked" "$errors" "$ms" "$per" "$synced" "$switched"
done
python3 - "$work" "$secs" <<'PY'
import sys
def row(name):
    return open(f"{sys.argv[1]}/row-{name}").read().split()
def per(name):
    return float(row(name)[5])
def idle(label):
    return float(open(f"{sys.argv[1]}/idle-{label}").read())
secs = float(sys.argv[2])
def marginal(label, mode):
    r = row(f"{label}-{mode}")
    return (float(r[4]) - idle(label) * secs) / int(r[2]) * 1000
print(f"idle CPU per node: 3 nodes {idle('3'):.1f} ms/s, 6 nodes {idle('6'):.1f} ms/s, "
      f"two 3-node clusters {idle('2x3'):.1f} ms/s")
for mode, clients in (("any", "round robin over the nodes"), ("leader", "at each group's leader")):
    print(f"clients {clients}:")
    print(f"  6-node : 3-node CPU per node per append = {per('6-' + mode) / per('3-' + mode):.2f}"
          f" (less idle CPU: {marginal('6', mode) / marginal('3', mode):.2f})")
    print(f"  6-node : two 3-node clusters (six processes either way) = "
          f"{per('6-' + mode) / per('2x3-' + mode):.2f}"
          f" (less idle CPU: {marginal('6', mode) / marginal('2x3', mode):.2f})")
PY
