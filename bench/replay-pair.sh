#!/usr/bin/env bash
# Reconnect storm with an independent client: CLIENTS streams (200) of
# EVENTS appends (200) of 1 KiB each, written round-robin so each stream is
# scattered over the server's storage, then CLIENTS transfers at once with
# `curl --parallel` (one connection each), each reading its whole stream
# from the start. Prints p50/p99/max of the per-transfer time for each
# system, ROUNDS rounds alternating:
#
#   runnel          the hot path (`--object-store none`)
#   runnel-tiered   every byte tiered to a local bucket before the storm
#                   (`--tier-max-age-secs TIER_AGE`, 30 by default, so a
#                   stream's history is one or two chunks); tiering leaves
#                   the block cache empty, and the script checks that
#                   every transfer missed it and read the bucket
#   durable-rust    durable-streams-server 0.3.0, file-durable
#
#   bench/replay-pair.sh [RUNNEL_BINARY]
#   SYSTEMS="runnel durable-rust" ROUNDS=5 bench/replay-pair.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
bin=${1:-$here/../target/release/runnel}
systems=${SYSTEMS:-runnel runnel-tiered durable-rust}
rounds=${ROUNDS:-3}
clients=${CLIENTS:-200}
events=${EVENTS:-200}
port=${PORT:-4703}
peers=${RUNNEL_PEERS_DIR:-/opt/runnel-peers}
use_work_dir

if [[ " $systems " == *" durable-rust "* ]] && [ ! -x "$peers/bin/durable-streams-server" ]; then
  cargo install --locked --root "$peers" durable-streams-server@0.3.0
fi

start() { # system data-dir
  case "$1" in
    runnel)
      "$bin" serve --listen "127.0.0.1:$port" --data-dir "$2" --object-store none >>"$2.log" 2>&1 & ;;
    runnel-tiered)
      "$bin" serve --listen "127.0.0.1:$port" --data-dir "$2" --object-store "file://$2.bucket" \
        --tier-max-age-secs "${TIER_AGE:-30}" --tier-interval-ms 200 >>"$2.log" 2>&1 & ;;
    durable-rust)
      start_durable_rust "$peers" "$port" "$2" "$2.log" ;;
  esac
  pid=$!
  wait_port "$port"
}
stop() { kill "$pid"; wait "$pid" 2>/dev/null || true; pid=; }

# Creates the streams and appends round-robin from 4 threads.
fill() {
  python3 - "$port" "$clients" "$events" <<'EOF'
import http.client, sys, threading
port, clients, events = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
body = b"x" * 1024
def run(names):
    c = http.client.HTTPConnection("127.0.0.1", port)
    for n in names:
        c.request("PUT", f"/v1/stream/{n}", headers={"Content-Type": "application/octet-stream"})
        r = c.getresponse(); r.read()
        assert r.status in (200, 201), (n, r.status)
    for _ in range(events):
        for n in names:
            c.request("POST", f"/v1/stream/{n}", body=body,
                      headers={"Content-Type": "application/octet-stream"})
            r = c.getresponse(); r.read()
            assert r.status in (200, 204), (n, r.status)
names = [f"rp-{i}" for i in range(clients)]
threads = [threading.Thread(target=run, args=(names[k::4],)) for k in range(4)]
for t in threads: t.start()
for t in threads: t.join()
EOF
}

cache_misses() {
  if [ "$system" = runnel-tiered ]; then
    curl -s "http://127.0.0.1:$port/_runnel/status" |
      python3 -c "import json,sys; print(json.load(sys.stdin)['tiering']['cache_misses'])"
  else
    echo 0
  fi
}

# All transfers at once; prints "p50 p99 max" in ms, checks every byte count.
storm() {
  local args=()
  for i in $(seq 0 $((clients - 1))); do
    args+=(-o /dev/null "http://127.0.0.1:$port/v1/stream/rp-$i?offset=-1")
  done
  curl -s --no-progress-meter -Z --parallel-immediate --parallel-max "$clients" \
    -w '%{time_total} %{size_download} %{http_code}\n' "${args[@]}" >"$work/times"
  python3 - "$work/times" "$clients" "$((events * 1024))" <<'EOF'
import sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
assert len(rows) == int(sys.argv[2]), f"{len(rows)} transfers"
bad = [r for r in rows if r[2] != "200" or int(r[1]) != int(sys.argv[3])]
assert not bad, f"incomplete transfers: {bad[:3]}"
t = sorted(float(r[0]) * 1000 for r in rows)
pick = lambda q: t[min(len(t) - 1, int(q * len(t)))]
print(f"p50 {pick(0.5):.1f} ms  p99 {pick(0.99):.1f} ms  max {t[-1]:.1f} ms")
EOF
}

for round in $(seq "$rounds"); do
  for system in $systems; do
    data="$work/$system-$round"
    start "$system" "$data"
    fill
    if [ "$system" = runnel-tiered ]; then
      for _ in $(seq 180); do
        untiered=$(curl -s "http://127.0.0.1:$port/_runnel/status" |
          python3 -c "import json,sys; print(json.load(sys.stdin)['tiering']['untiered_bytes'])")
        [ "$untiered" = 0 ] && break
        sleep 1
      done
      [ "$untiered" = 0 ] || { echo "runnel-tiered: $untiered bytes still untiered" >&2; exit 1; }
    fi
    sleep 1
    misses=$(cache_misses)
    echo "round $round $system: $(storm)"
    if [ "$system" = runnel-tiered ]; then
      missed=$(($(cache_misses) - misses))
      [ "$missed" -ge "$clients" ] || { echo "only $missed block reads went to the bucket" >&2; exit 1; }
    fi
    stop
    rm -rf "$data" "$data.bucket"
  done
done
