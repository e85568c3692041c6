#!/usr/bin/env bash
# What an idle connection costs a server: its anonymous resident memory
# (RssAnon) with N connections open and idle, against before they
# opened, per connection. Two kinds of idle, one after the other:
#
#   silent     connected, nothing sent yet
#   kept-alive one catch-up read of a small stream answered, then nothing
#              (a client between requests: most of a connection's life)
#
# Runnel against durable-streams 0.1.5 (the protocol authors' Rust
# server) in one run, alternating rounds.
#
# Usage: bench/idle-connections.sh
#   ROUNDS=2 CONNECTIONS=2000 PEERS=/opt/runnel-peers
#   RUNNEL_BASELINE=PATH (another build of runnel, run as system
#   runnel-baseline in each round: a before-and-after in one run)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
rounds=${ROUNDS:-2}
connections=${CONNECTIONS:-2000}
peers=${PEERS:-/opt/runnel-peers}
port=${PORT:-4602}
. bench/lib.sh
[ -x target/release/runnel ] || cargo build --release --locked -p runnel
peer=$(durable_streams_015 "$peers")
use_work_dir
ulimit -n $((connections + 1000))

anon_kib() { awk '/^RssAnon:/ { print $2 }' "/proc/$1/status"; }

# hold KIND PATH: opens the connections, readies them, and holds them
# until killed (or this script ends); prints "ready" on its stdout once
# they are all idle.
hold() {
  python3 - "$port" "$connections" "$1" "$2" <<'PY'
import os, socket, sys, time
parent = os.getppid()
port, n, kind, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]
if kind == "kept-alive":
    request = f"GET {path} HTTP/1.1\r\nHost: bench\r\n\r\n".encode()
    for s in socks:
        s.sendall(request)
    for s in socks:
        s.settimeout(10)
        data = b""
        while b"\r\n\r\n" not in data:
            data += s.recv(65536)
        head, _, body = data.partition(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            sys.exit(f"the read was answered {head.splitlines()[0]!r}")
        length = next(int(l.split(b":")[1]) for l in head.split(b"\r\n")
                      if l.lower().startswith(b"content-length:"))
        while len(body) < length:
            body += s.recv(65536)
print("ready", flush=True)
while os.getppid() == parent:
    time.sleep(0.5)
PY
}

results=$work/results.tsv
printf 'round\tsystem\tkind\tbefore_kib\twith_kib\tbytes_per_connection\n' >"$results"
for round in $(seq "$rounds"); do
  for sys in runnel ${RUNNEL_BASELINE:+runnel-baseline} durable-streams-0.1.5; do
    # A fresh server for each kind: memory the first kind freed and its
    # allocator kept would be reused by the second, and hide its cost.
    for kind in silent kept-alive; do
      data=$work/$sys-$round-$kind
      mkdir -p "$data"
      start_vs_peer "$sys" "$port" "$data"
      pid=$server_pid
      if [ "$api_style" = runnel ]; then path=/v1/stream/idle; else path=/idle; fi
      head -c 1024 /dev/urandom | curl -sf -X PUT -H 'content-type: application/octet-stream' \
        --data-binary @- "http://127.0.0.1:$port$path" -o /dev/null
      sleep 2
      before=$(anon_kib "$pid")
      hold "$kind" "$path?offset=-1" >"$data/hold" 2>&1 &
      holder=$!
      for _ in $(seq 600); do grep -q ready "$data/hold" && break; sleep 0.1; done
      grep -q ready "$data/hold" || {
        echo "$sys: the connections never got ready:" >&2
        tail -5 "$data/hold" >&2
        exit 1
      }
      sleep 3
      with=$(anon_kib "$pid")
      kill "$holder"
      wait "$holder" 2>/dev/null || true
      per=$(((with - before) * 1024 / connections))
      printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$sys" "$kind" "$before" "$with" "$per" >>"$results"
      echo "round $round $sys $kind: ${per} bytes per idle connection ($before -> $with KiB anonymous, $connections connections)"
      kill "$pid"
      wait "$pid" 2>/dev/null || true
      pid=
    done
  done
done
echo
column -t "$results"
