#!/usr/bin/env bash
# Fan-out, runnel and durable-streams-server alternating, two rounds, on
# port 4599 (install the peer first: bench/compare.sh does).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-bench/results/fanout-repeat}; mkdir -p "$OUT"
for round in 1 2; do
  for n in 100 1000 10000; do
    rate=50; [ $n -ge 10000 ] && rate=5
    for sys in runnel durable-rust; do
      d=$(mktemp -d)
      if [ $sys = runnel ]; then
        target/release/runnel serve --listen 127.0.0.1:4599 --data-dir $d/db > $d/log 2>&1 & api=runnel
      else
        printf '[server]\nbind_address = "127.0.0.1:4599"\n[limits]\nmax_memory_bytes = 17179869184\nmax_stream_bytes = 4294967296\n[storage]\nmode = "file-durable"\ndata_dir = "%s/db"\n' $d > $d/c.toml
        ${RUNNEL_PEERS_DIR:-/opt/runnel-peers}/bin/durable-streams-server --config $d/c.toml > $d/log 2>&1 & api=durable
      fi
      pid=$!; sleep 1
      target/release/runnel bench fan-out --target http://127.0.0.1:4599 --api-style $api --label $sys --subscribers $n --writer-rate $rate --duration-secs 10 --quiet --json $OUT/fan-out-$sys-$n-r$round.json > /dev/null 2>&1
      kill $pid; wait $pid 2>/dev/null; rm -rf $d
    done
  done
done
for f in $OUT/*.json; do python3 -c "import json,sys; r=json.load(open('$f')); print(r['system'], r['size'], 'p50', round(r['latency']['p50_ms'],2), 'p99', round(r['latency']['p99_ms'],2), 'p999', round(r['latency']['p999_ms'],2))"; done
