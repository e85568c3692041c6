#!/usr/bin/env bash
# Catch-up of one long stream (SIZE, default 1 GiB) from its start, read
# by one client as fast as it can, in four setups run one after another:
#
#   hot        no tiering: every byte from the local log;
#   local      tiered to a bucket in a local directory;
#   s3         tiered to moto's S3 server on loopback;
#   s3+30ms    the same, with 30 ms added before every object read
#              (object_store's throttled store), as a distant store's
#              first byte would be.
#
# Tiered runs restart the server after tiering, so its block cache starts
# empty. Prints MiB/s for each and the ratio to `hot`.
#
#   bench/tier-replay.sh [BINARY]
#   SETUPS="hot local" SIZE=$((256<<20)) bench/tier-replay.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
. "$here/lib.sh"
bin=${1:-$root/target/release/runnel}
size=${SIZE:-$((1 << 30))}
setups=${SETUPS:-hot local s3 s3+30ms}
port=${PORT:-4703}
moto_port=${MOTO_PORT:-4713}
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

case " $setups " in
  *" s3"*)
    "$root/scripts/install-test-deps.sh" >/dev/null
    "$root/target/test-venv/bin/moto_server" -H 127.0.0.1 -p "$moto_port" >"$work/moto.log" 2>&1 &
    pids+=($!)
    wait_port "$moto_port"
    curl -sf -X PUT "http://127.0.0.1:$moto_port/bench" >/dev/null
    ;;
esac

s3_flags=(--object-store-option "aws_endpoint=http://127.0.0.1:$moto_port"
  --object-store-option aws_allow_http=true --object-store-option aws_region=us-east-1
  --object-store-option aws_access_key_id=bench --object-store-option aws_secret_access_key=bench)

serve() { # DATA_DIR FLAGS...
  local dir=$1
  shift
  "$bin" serve --listen "127.0.0.1:$port" --data-dir "$dir" "$@" >>"$work/server.log" 2>&1 &
  server=$!
  pids+=("$server")
  wait_port "$port"
}
stop() {
  kill "$server"
  wait "$server" 2>/dev/null || true
}
untiered() {
  curl -s "http://127.0.0.1:$port/_runnel/status" |
    python3 -c "import json,sys; t=json.load(sys.stdin)['tiering']; print(t['untiered_bytes'] if t else 0)"
}

declare -A rate
for setup in $setups; do
  dir=$work/$setup
  case "$setup" in
    hot) flags=(--object-store none) ;;
    local) flags=(--object-store "file://$work/bucket-local") ;;
    s3) flags=(--object-store "s3://bench/s3" "${s3_flags[@]}") ;;
    s3+30ms) flags=(--object-store "s3://bench/s3-30ms" "${s3_flags[@]}" --object-store-read-latency-ms 30) ;;
    *) echo "unknown setup $setup" >&2; exit 2 ;;
  esac
  [ "$setup" = hot ] || flags+=(--tier-max-age-secs 0 --tier-chunk-bytes 8388608)
  serve "$dir" "${flags[@]}"
  "$bin" bench fill --target "http://127.0.0.1:$port" --streams 1 --prefix catch-up \
    --total-bytes "$size" --payload-bytes 65536 --batch 1 --verify-streams 0 >/dev/null
  if [ "$setup" != hot ]; then
    for _ in $(seq 600); do
      [ "$(untiered)" = 0 ] && break
      sleep 1
    done
    [ "$(untiered)" = 0 ] || { echo "$setup: tiering did not finish" >&2; exit 1; }
    stop
    serve "$dir" "${flags[@]}"
  fi
  line=$("$bin" bench catch-up --target "http://127.0.0.1:$port" --stream catch-up-0 --json)
  rate[$setup]=$(python3 -c "import json,sys; print(round(json.loads(sys.argv[1])['mib_per_s'], 1))" "$line")
  echo "$setup: $line"
  stop
done
echo
for setup in $setups; do
  if [ -n "${rate[hot]:-}" ]; then
    ratio=$(python3 -c "print(round(${rate[$setup]} / ${rate[hot]}, 2))")
    echo "$setup: ${rate[$setup]} MiB/s (${ratio}x hot)"
  else
    echo "$setup: ${rate[$setup]} MiB/s"
  fi
done
