#!/usr/bin/env bash
# What one node does per core, and how much of an append is serial: the
# figures README's "one node of N cores" follows from.
#
# 1. Per core: the server pinned to core 0 and the client to core 1
#    (`taskset`), closed loop (`runnel bench multi-stream`, STREAMS
#    writers of PAYLOAD bytes, durable appends): appends/s, and the
#    server's CPU over the window (how much of its core it used).
# 2. The serial fraction: the server and the client on every core,
#    with 1 group and with 2, closed loop again. From /metrics over the
#    window: the process's CPU, the CPU of the log's committer thread
#    (one per node: no core added helps it) and each group's commit task
#    busy time (serial per group: groups divide it). The serial fraction
#    with G groups is  committer / process + (commit task / process) / G,
#    from the 1-group run; the 2-group run shows the division happen.
# 3. Projection, by Amdahl's law from 1 and 2: a node of N cores with the
#    default groups (1 up to two cores, N/2 past that) carries about
#        per-core appends/s x N / (1 + f x (N - 1))
#    where f is the serial fraction at that group count. The client and
#    the disk are left out: on a bigger machine, measure instead of
#    projecting (step 4).
# 4. On a machine of more than 2 cores: the server on the first half of
#    the cores (default groups), the client on the rest, measured.
#
#   bench/cores.sh   STREAMS=100 SECS=15 PAYLOAD=256 ROUNDS=2
#   RUNNEL=target/release/runnel OUT=<file for the summary, optional>
# Needs `taskset` (util-linux) and 2 cores at least.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
RUNNEL=${RUNNEL:-$here/../target/release/runnel}
streams=${STREAMS:-100}
secs=${SECS:-15}
payload=${PAYLOAD:-256}
rounds=${ROUNDS:-2}
port=${PORT:-5100}
cores=$(nproc)
[ "$cores" -ge 2 ] || { echo "cores.sh: needs 2 cores, this machine has $cores" >&2; exit 1; }
use_work_dir

# scrape FILE: the metrics this script reads, and the process's CPU.
scrape() {
  { curl -sf "http://127.0.0.1:$port/metrics" |
      grep -E '^(process_cpu_seconds_total|runnel_log_records_total|runnel_log_committer_cpu_seconds_total|runnel_group_commit_busy_seconds_total)' || true
  } >"$1"
}

# measure NAME SERVER_CPUS CLIENT_CPUS [serve flags...]: a fresh server,
# a 3 s warm-up, then SECS of closed-loop appends with /metrics read
# before and after; writes $work/NAME.json.
measure() {
  local name=$1 server_cpus=$2 client_cpus=$3
  shift 3
  port=$((port + 1))
  local data=$work/$name
  taskset -c "$server_cpus" "$RUNNEL" serve --listen "127.0.0.1:$port" --data-dir "$data" \
    --object-store none "$@" >"$data.log" 2>&1 &
  pid=$!
  wait_port "$port"
  local bench=(taskset -c "$client_cpus" "$RUNNEL" bench multi-stream --target "http://127.0.0.1:$port"
    --streams "$streams" --payload-bytes "$payload" --quiet)
  "${bench[@]}" --duration-secs 3 >/dev/null
  scrape "$data.before"
  "${bench[@]}" --duration-secs "$secs" --json "$data.bench.json" >/dev/null
  scrape "$data.after"
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  pid=
  python3 - "$data" "$secs" >"$work/$name.json" <<'PY'
import json, sys
data, secs = sys.argv[1], float(sys.argv[2])
def read(path):
    out = {}
    for line in open(path):
        key, value = line.rsplit(" ", 1)
        out[key] = float(value)
    return out
before, after = read(data + ".before"), read(data + ".after")
delta = {k: v - before.get(k, 0.0) for k, v in after.items()}
bench = json.load(open(data + ".bench.json"))
cpu = delta["process_cpu_seconds_total"]
groups = sorted(v for k, v in delta.items() if k.startswith("runnel_group_commit_busy"))
print(json.dumps({
    "appends_per_sec": bench["throughput_per_sec"],
    "p99_ms": bench["latency"]["p99_ms"],
    "errors": bench["counts"]["error"],
    "server_cores": cpu / secs,
    "cpu_us_per_append": 1e6 * cpu / max(delta["runnel_log_records_total"], 1),
    "committer_share": delta["runnel_log_committer_cpu_seconds_total"] / cpu,
    "commit_task_shares": [g / cpu for g in groups],
}))
PY
}

for round in $(seq "$rounds"); do
  measure "pinned-$round" 0 1 --groups 1
  measure "one-group-$round" "0-$((cores - 1))" "0-$((cores - 1))" --groups 1
  measure "two-groups-$round" "0-$((cores - 1))" "0-$((cores - 1))" --groups 2
done
if [ "$cores" -gt 2 ]; then
  half=$((cores / 2))
  measure "half-the-cores" "0-$((half - 1))" "$half-$((cores - 1))"
fi

python3 - "$work" "$rounds" "$cores" <<'PY' | tee "${OUT:-/dev/null}"
import json, os, statistics, sys
work, rounds, cores = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def runs(name):
    return [json.load(open(f"{work}/{name}-{r}.json")) for r in range(1, rounds + 1)]
def median(rows, key):
    return statistics.median(r[key] for r in rows)
pinned, one, two = runs("pinned"), runs("one-group"), runs("two-groups")
print("| run | round | appends/s | p99 ms | server cores | CPU µs/append | committer | commit task(s) | errors |")
print("|---|---|---|---|---|---|---|---|---|")
for name, rows in (("server on 1 core, client on the other", pinned),
                   ("both on every core, 1 group", one),
                   ("both on every core, 2 groups", two)):
    for r, row in enumerate(rows, 1):
        tasks = " / ".join(f"{100 * s:.1f}%" for s in row["commit_task_shares"])
        print(f"| {name} | {r} | {row['appends_per_sec']:,.0f} | {row['p99_ms']:.2f} | "
              f"{row['server_cores']:.2f} | {row['cpu_us_per_append']:.1f} | "
              f"{100 * row['committer_share']:.1f}% | {tasks} | {row['errors']} |")
per_core = median(pinned, "appends_per_sec")
committer = median(one, "committer_share")
task = statistics.median(r["commit_task_shares"][0] for r in one)
print()
print(f"- per core (server pinned): {per_core:,.0f} appends/s, using "
      f"{median(pinned, 'server_cores'):.2f} of its core")
print(f"- serial, 1 group (medians): committer thread {100 * committer:.1f}% + "
      f"commit task {100 * task:.1f}% = {100 * (committer + task):.1f}% of the server's CPU")
two_tasks = [s for r in two for s in r["commit_task_shares"]]
print(f"- with 2 groups: committer {100 * median(two, 'committer_share'):.1f}%, each commit task "
      f"{100 * min(two_tasks):.1f}-{100 * max(two_tasks):.1f}%")
print()
print("| cores | groups (default) | serial fraction | projected appends/s |")
print("|---|---|---|---|")
for n in (1, 2, 4, 8, 16, 32):
    groups = 1 if n <= 2 else n // 2
    f = committer + task / groups
    print(f"| {n} | {groups} | {100 * f:.1f}% | {per_core * n / (1 + f * (n - 1)):,.0f} |")
path = f"{work}/half-the-cores.json"
if os.path.exists(path):
    row = json.load(open(path))
    print(f"\n- measured, server on {cores // 2} of {cores} cores (default groups), client on the rest: "
          f"{row['appends_per_sec']:,.0f} appends/s, p99 {row['p99_ms']:.2f} ms, "
          f"committer {100 * row['committer_share']:.1f}%")
PY
