#!/usr/bin/env bash
# What access control and TLS cost the write path, in one script: N
# streams (500), one writer each, 256-byte appends with durable
# acknowledgements (`runnel bench multi-stream`), ROUNDS rounds (3) of the
# setups in rotating order, each run on a fresh data directory.
#
#   open      plain HTTP, no auth file: every request allowed
#   tokens    --auth-file with 50 bearer tokens; the writers send one
#             granted append and create on every stream
#   limited   as tokens, plus per-token and per-address rate limits set
#             far above the load (every request takes from two buckets)
#   tls       HTTPS (HTTP/1.1, one TLS connection per writer), no auth file
#
#   bench/security-overhead.sh [BINARY]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
bin=${1:-$here/../target/release/runnel}
streams=${STREAMS:-500}
duration=${DURATION:-20}
rounds=${ROUNDS:-3}
port=${PORT:-4706}
setups=(${SETUPS:-open tokens limited tls})
use_work_dir

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
"$here/../scripts/test-ca.sh" "$work/ca" 1

run() { # SETUP ROUND
  local dir=$work/$1-$2 flags=() scheme=http
  case "$1" in
    tokens | limited) flags=(--auth-file "$work/$1.toml") ;;
    tls)
      flags=(--tls-cert "$work/ca/server.pem" --tls-key "$work/ca/server.key")
      scheme=https
      ;;
  esac
  "$bin" serve --listen "127.0.0.1:$port" --data-dir "$dir" --object-store none "${flags[@]}" \
    >>"$work/server.log" 2>&1 &
  pid=$!
  wait_port "$port"
  RUNNEL_TOKEN=$token "$bin" bench multi-stream --target "$scheme://127.0.0.1:$port" \
    --ca "$work/ca/ca.pem" --streams "$streams" --duration-secs "$duration" --quiet --label "$1" \
    --json "$work/$1-$2.json" >/dev/null
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  pid=
}

run_rounds "$rounds" "${setups[@]}"
summarize_rounds "$work" "$rounds" open "${setups[@]}"
