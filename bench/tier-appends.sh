#!/usr/bin/env bash
# Appends per second with tiering running against tiering off, in one
# script: N streams (500), one writer each, 256-byte appends with durable
# acknowledgements (`runnel bench multi-stream`), ROUNDS rounds (3) that
# alternate the two servers, each round on a fresh data directory.
#
#   off   --object-store none
#   on    tiering to a local directory, every append tiered within 2 s
#         (--tier-max-age-secs 2), so uploads run for the whole round
#
#   bench/tier-appends.sh [BINARY]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
bin=${1:-$here/../target/release/runnel}
streams=${STREAMS:-500}
duration=${DURATION:-20}
rounds=${ROUNDS:-3}
port=${PORT:-4704}
use_work_dir

run() { # SETUP ROUND
  local dir=$work/$1-$2 flags
  case "$1" in
    off) flags=(--object-store none) ;;
    on) flags=(--object-store "file://$dir-bucket" --tier-max-age-secs 2 --tier-chunk-bytes 1048576) ;;
  esac
  "$bin" serve --listen "127.0.0.1:$port" --data-dir "$dir" "${flags[@]}" >>"$work/server.log" 2>&1 &
  pid=$!
  wait_port "$port"
  "$bin" bench multi-stream --target "http://127.0.0.1:$port" --streams "$streams" \
    --duration-secs "$duration" --quiet --label "$1" --json "$work/$1-$2.json" >/dev/null
  if [ "$1" = on ]; then
    curl -s "http://127.0.0.1:$port/_runnel/status" |
      python3 -c "import json,sys; t=json.load(sys.stdin)['tiering']; print(f\"  round $2: tiered {t['tiered_bytes']>>20} MiB in {t['chunks_uploaded']} chunks, {t['untiered_bytes']>>20} MiB untiered\")"
  fi
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  pid=
}

for round in $(seq "$rounds"); do
  run off "$round"
  run on "$round"
done
python3 - "$work" "$rounds" <<'PY'
import json, sys
work, rounds = sys.argv[1], int(sys.argv[2])
rate = {}
for setup in ("off", "on"):
    rows = [json.load(open(f"{work}/{setup}-{r}.json")) for r in range(1, rounds + 1)]
    rates = [row["throughput_per_sec"] for row in rows]
    p99 = [row["latency"]["p99_ms"] for row in rows]
    rate[setup] = sum(rates) / len(rates)
    print(f"tiering {setup}: " + ", ".join(f"{r:,.0f}/s (p99 {p:.2f} ms)" for r, p in zip(rates, p99)))
print(f"mean appends/s: off {rate['off']:,.0f}, on {rate['on']:,.0f}: {rate['on'] / rate['off']:.2f}x")
PY
