#!/usr/bin/env bash
# What access control costs the write path, in one script: N streams
# (500), one writer each, 256-byte appends with durable acknowledgements
# (`runnel bench multi-stream`), ROUNDS rounds (3) of the setups in
# rotating order, each run on a fresh data directory.
#
#   open      no auth file: every request allowed
#   tokens    --auth-file with 50 bearer tokens; the writers send one
#             granted append and create on their prefix
#   limited   as tokens, plus per-token and per-address rate limits set
#             far above the load (every request takes from two buckets)
#
#   bench/auth-overhead.sh [BINARY]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
bin=${1:-$here/../target/release/runnel}
streams=${STREAMS:-500}
duration=${DURATION:-20}
rounds=${ROUNDS:-3}
port=${PORT:-4706}
setups=(open tokens limited)
work=$(mktemp -d)
pid=
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

token=bench-writer-token-$RANDOM$RANDOM
sha() { printf '%s' "$1" | sha256sum | cut -d' ' -f1; }
write_auth() { # FILE LIMITS
  {
    for n in $(seq 49); do
      printf '[[tokens]]\nsha256 = "%s"\ngrants = [{ prefix = "other-%s/", allow = ["read"] }]\n' \
        "$(sha "unused-$n")" "$n"
    done
    printf '[[tokens]]\nname = "bench"\nsha256 = "%s"\ngrants = [{ prefix = "", allow = ["read", "append", "create"] }]\n' \
      "$(sha "$token")"
    if [ -n "$2" ]; then
      printf '[rate_limits]\nper_token = { requests_per_sec = 10000000 }\nper_ip = { requests_per_sec = 10000000 }\n'
    fi
  } >"$1"
}
write_auth "$work/tokens.toml" ""
write_auth "$work/limited.toml" yes

run() { # SETUP ROUND
  local dir=$work/$1-$2 auth=()
  [ "$1" != open ] && auth=(--auth-file "$work/$1.toml")
  "$bin" serve --listen "127.0.0.1:$port" --data-dir "$dir" --object-store none "${auth[@]}" \
    >>"$work/server.log" 2>&1 &
  pid=$!
  wait_port "$port"
  RUNNEL_TOKEN=$token "$bin" bench multi-stream --target "http://127.0.0.1:$port" \
    --streams "$streams" --duration-secs "$duration" --quiet --label "$1" \
    --json "$work/$1-$2.json" >/dev/null
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  pid=
}

# Each round starts with the next setup, so no setup always runs first
# (or right after another) on a machine that warms up and cools down.
for round in $(seq "$rounds"); do
  for i in "${!setups[@]}"; do
    setup=${setups[$(((i + round - 1) % ${#setups[@]}))]}
    run "$setup" "$round"
  done
done
python3 - "$work" "$rounds" "${setups[@]}" <<'PY'
import json, sys
work, rounds, setups = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
rate = {}
for setup in setups:
    rows = [json.load(open(f"{work}/{setup}-{r}.json")) for r in range(1, rounds + 1)]
    rates = [row["throughput_per_sec"] for row in rows]
    p99 = [row["latency"]["p99_ms"] for row in rows]
    rate[setup] = sum(rates) / len(rates)
    print(f"{setup}: " + ", ".join(f"{r:,.0f}/s (p99 {p:.2f} ms)" for r, p in zip(rates, p99)))
line = ", ".join(f"{s} {rate[s]:,.0f}" for s in setups)
print(f"mean appends/s: {line}; tokens/open {rate['tokens'] / rate['open']:.2f}x, "
      f"limited/open {rate['limited'] / rate['open']:.2f}x")
PY
