#!/usr/bin/env bash
# Sustained load: a fixed, moderate rate held for a long window, watching
# whether resident memory and the latency tail stay flat. Runnel against
# durable-streams 0.1.5 (the protocol authors' Rust server, WAL
# durability), one after the other in the same run, the same client
# (`runnel bench`, processes of their own on the same cores).
#
# For MINUTES minutes, on a fresh server:
#   - appends: RATE appends/s of PAYLOAD bytes, open loop, spread over
#     STREAMS streams, sent over CONNECTIONS pooled connections
#     (`runnel bench multi-stream --rate --interval-secs 60`: latency is
#     counted from when each append was meant to start);
#   - live readers: SSE_READERS SSE readers of one stream written at 10
#     events/s (`runnel bench fan-out`);
#   - catch-up readers: every minute, 20 clients read a stream of 200 x
#     1 KiB from its start (`runnel bench replay`).
# The server's resident memory (VmRSS, and its anonymous part) is read
# every minute, and Runnel's own account of it by owner (the `memory`
# section of /_runnel/status, to OUT/runnel-memory-by-owner.jsonl). Per minute, the script prints and writes (OUT/SYSTEM.tsv)
# resident memory and the appends' p50 / p99 / p99.9, draws them
# (OUT/sustained.svg), and checks each system against two bounds:
#   - memory: resident memory at the end at most 5% above its value after
#     WARMUP minutes;
#   - tail: after WARMUP minutes (the first holds connecting and creating
#     the streams), no minute's p99.9 above 3x the median minute's.
# A bound missed is reported (FLAT no ...), not fatal: this is a
# measurement, not a test.
#
# Usage: bench/sustained.sh
#   MINUTES=30 WARMUP=5 RATE=5000 STREAMS=10000 CONNECTIONS=1000
#   PAYLOAD=256 SSE_READERS=1000 SYSTEMS="runnel durable-streams-0.1.5"
#   PEERS=/opt/runnel-peers OUT=bench/results/sustained
#   RUNNEL_ENV="NAME=VALUE ..." (environment for Runnel's server only)
#   RUNNEL_BASELINE=PATH with SYSTEMS="runnel runnel-baseline ...": another
#   build of runnel in the same run
# A short run (CI, a smoke test): MINUTES=3 WARMUP=1 STREAMS=1000 ...
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
minutes=${MINUTES:-30}
warmup=${WARMUP:-5}
rate=${RATE:-5000}
streams=${STREAMS:-10000}
connections=${CONNECTIONS:-1000}
payload=${PAYLOAD:-256}
sse_readers=${SSE_READERS:-1000}
systems=${SYSTEMS:-runnel durable-streams-0.1.5}
peers=${PEERS:-/opt/runnel-peers}
out=${OUT:-bench/results/sustained}
runnel=target/release/runnel
. bench/lib.sh
[ "$minutes" -gt "$warmup" ] || { echo "MINUTES must exceed WARMUP" >&2; exit 2; }
mkdir -p "$out"
[ -x "$runnel" ] || cargo build --release --locked -p runnel
case " $systems " in *" durable-streams-0.1.5 "*) peer=$(durable_streams_015 "$peers") ;; esac
port=4599
target=http://127.0.0.1:$port
secs=$((minutes * 60))

for sys in $systems; do
  data=$(mktemp -d)
  start_vs_peer "$sys" $port "$data"
  pid=$server_pid
  helpers=()
  trap 'kill $pid "${helpers[@]}" 2>/dev/null || true' EXIT
  sleep 1
  echo "== $sys: $minutes min, $rate appends/s over $streams streams, $sse_readers SSE readers"
  bench() { "$runnel" bench "$@" --target "$target" --api-style "$api_style" --quiet; }
  bench fan-out --subscribers "$sse_readers" --writer-rate 10 --duration-secs "$secs" \
    >"$data/fan-out.log" 2>&1 &
  helpers+=($!)
  (
    while sleep 60; do
      bench replay --clients 20 --pre-events 200 --event-bytes 1024 >>"$data/replay.log" 2>&1 ||
        echo "replay failed" >>"$data/replay.log"
    done
  ) &
  helpers+=($!)
  (
    minute=0
    while [ $minute -lt "$minutes" ]; do
      sleep 60
      minute=$((minute + 1))
      read -r rss anon <<<"$(resident_mb "$pid")"
      printf '%s\t%s\t%s\n' "$minute" "$rss" "$anon"
      # Runnel's own account of its memory, by owner (other systems
      # have no such status: nothing is written for them).
      curl -sf "$target/_runnel/status" 2>/dev/null |
        python3 -c 'import json, sys; print(json.dumps({"minute": int(sys.argv[1]), "memory": json.load(sys.stdin).get("memory")}))' \
          "$minute" >>"$data/status.jsonl" 2>/dev/null || true
    done
  ) >"$data/memory.tsv" &
  sampler=$!
  if ! bench multi-stream --streams "$streams" --connections "$connections" --rate "$rate" \
    --payload-bytes "$payload" --duration-secs "$secs" --interval-secs 60 \
    --json "$out/$sys-appends.json" >"$data/appends.log" 2>&1; then
    echo "runnel bench multi-stream against $sys failed:" >&2
    tail -5 "$data/appends.log" >&2
    exit 1
  fi
  wait $sampler || true
  kill "${helpers[@]}" 2>/dev/null || true
  cp "$data/memory.tsv" "$out/$sys-memory.tsv"
  [ -s "$data/status.jsonl" ] && cp "$data/status.jsonl" "$out/$sys-memory-by-owner.jsonl"
  grep -E "^replay failed" "$data/replay.log" | head -3 || true
  kill $pid
  wait $pid 2>/dev/null || true
  rm -rf "$data"
done

python3 - "$out" "$warmup" $systems <<'PY'
import json, statistics, sys
out, warmup, systems = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
series = {}
for system in systems:
    result = json.load(open(f"{out}/{system}-appends.json"))
    minutes = result["intervals"]
    memory = [line.split("\t") for line in open(f"{out}/{system}-memory.tsv").read().split("\n") if line]
    rows = []
    with open(f"{out}/{system}.tsv", "w") as tsv:
        tsv.write("minute\trss_mb\tanon_mb\tappends\tp50_ms\tp99_ms\tp999_ms\n")
        for (minute, rss, anon), lat in zip(memory, minutes):
            row = (int(minute), float(rss), float(anon), lat["count"], lat["p50_ms"], lat["p99_ms"], lat["p999_ms"])
            rows.append(row)
            tsv.write("\t".join(str(v) for v in row) + "\n")
    series[system] = rows
    print(f"\n{system}: {result['throughput_per_sec']:,.0f} appends/s, errors {result['counts']['error']}, "
          f"back-pressure {result['counts']['back_pressure']}")
    print("| minute | resident MB (anonymous) | appends | p50 ms | p99 ms | p99.9 ms |")
    print("|---|---|---|---|---|---|")
    for m, rss, anon, n, p50, p99, p999 in rows:
        print(f"| {m} | {rss:.1f} ({anon:.1f}) | {n:,} | {p50:.2f} | {p99:.2f} | {p999:.2f} |")
    after_warmup = next((r[1] for r in rows if r[0] == warmup), rows[0][1])
    growth = rows[-1][1] / after_warmup - 1
    steady = [r for r in rows if r[0] > warmup] or rows
    median = statistics.median(r[6] for r in steady)
    worst = max(r[6] for r in steady)
    print(f"FLAT {'yes' if growth < 0.05 else 'no'} memory: {rows[-1][1]:.1f} MB at the end, "
          f"{growth * 100:+.1f}% from {after_warmup:.1f} MB after minute {warmup} (bound +5%)")
    print(f"FLAT {'yes' if worst <= 3 * median else 'no'} tail after minute {warmup}: worst minute's "
          f"p99.9 {worst:.2f} ms, {worst / median:.1f}x the median minute's {median:.2f} ms (bound 3x)")

# One chart: resident memory (top) and p99.9 (bottom) per minute.
width, height, pad = 720, 520, 50
colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]
panels = [("resident memory (MB)", 1, 0), ("appends p99.9 (ms)", 6, 260)]
last = max(len(rows) for rows in series.values())
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">']
for title, col, top in panels:
    peak = max(r[col] for rows in series.values() for r in rows) * 1.1 or 1
    svg.append(f'<text x="{pad}" y="{top + 20}">{title} per minute (max {peak / 1.1:.1f})</text>')
    svg.append(f'<line x1="{pad}" y1="{top + 230}" x2="{width - 10}" y2="{top + 230}" stroke="#888"/>')
    for i, (system, rows) in enumerate(series.items()):
        x = lambda m: pad + (m - 1) * (width - pad - 20) / max(last - 1, 1)
        y = lambda v: top + 230 - v / peak * 200
        points = " ".join(f"{x(r[0]):.1f},{y(r[col]):.1f}" for r in rows)
        svg.append(f'<polyline fill="none" stroke="{colors[i % 4]}" stroke-width="2" points="{points}"/>')
        svg.append(f'<text x="{width - 200}" y="{top + 40 + 15 * i}" fill="{colors[i % 4]}">{system}</text>')
svg.append("</svg>")
open(f"{out}/sustained.svg", "w").write("\n".join(svg) + "\n")
print(f"\nchart: {out}/sustained.svg")
PY
