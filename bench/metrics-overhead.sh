#!/usr/bin/env bash
# What /metrics costs the write path, in one script: N streams (500), one
# writer each, 256-byte appends with durable acknowledgements (`runnel
# bench multi-stream`), ROUNDS rounds (3) of the setups in rotating
# order, each run on a fresh data directory.
#
#   quiet     nobody scrapes
#   scraped   /metrics scraped every SCRAPE_MS (250 ms: 60 times as often
#             as a 15 s Prometheus interval) for the whole round
#   before    (only with BASE_BIN=path) an older build without the
#             counters, nobody scrapes: what counting itself costs
#
#   bench/metrics-overhead.sh [BINARY]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
bin=${1:-$here/../target/release/runnel}
streams=${STREAMS:-500}
duration=${DURATION:-20}
rounds=${ROUNDS:-3}
scrape_ms=${SCRAPE_MS:-250}
port=${PORT:-4705}
setups=(quiet scraped)
[ -n "${BASE_BIN:-}" ] && setups+=(before)
work=$(mktemp -d)
pid=
scraper=
cleanup() {
  [ -n "$scraper" ] && kill "$scraper" 2>/dev/null
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

run() { # SETUP ROUND
  local dir=$work/$1-$2 server=$bin scrapes=0
  [ "$1" = before ] && server=$BASE_BIN
  "$server" serve --listen "127.0.0.1:$port" --data-dir "$dir" --object-store none >>"$work/server.log" 2>&1 &
  pid=$!
  wait_port "$port"
  if [ "$1" = scraped ]; then
    (while curl -sf "http://127.0.0.1:$port/metrics" -o /dev/null; do
      echo >>"$work/scrapes"
      sleep "$(printf '0.%03d' "$scrape_ms")"
    done) &
    scraper=$!
  fi
  "$bin" bench multi-stream --target "http://127.0.0.1:$port" --streams "$streams" \
    --duration-secs "$duration" --quiet --label "$1" --json "$work/$1-$2.json" >/dev/null
  if [ -n "$scraper" ]; then
    kill "$scraper" 2>/dev/null || true
    wait "$scraper" 2>/dev/null || true
    scraper=
    scrapes=$(wc -l <"$work/scrapes")
    rm -f "$work/scrapes"
    echo "  round $2: $scrapes scrapes"
  fi
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  pid=
}

run_rounds "$rounds" "${setups[@]}"
summarize_rounds "$work" "$rounds" quiet "${setups[@]}"
