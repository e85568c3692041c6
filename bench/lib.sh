# Helpers the bench scripts share; source it: . "$(dirname "$0")/lib.sh"

# use_work_dir: sets $work to a fresh temporary directory and $pid to
# empty; on exit, the server whose pid the script left in $pid is stopped
# and $work removed.
use_work_dir() {
  work=$(mktemp -d)
  pid=
  trap 'if [ -n "$pid" ]; then kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; fi; rm -rf "$work"' EXIT
}

# wait_port PORT: waits up to 30 s for something to listen on
# 127.0.0.1:PORT; fails otherwise.
wait_port() {
  for _ in $(seq 300); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "nothing listens on 127.0.0.1:$1" >&2
  return 1
}

# create_wrk_streams PORT N: creates the text streams wrk-0 .. wrk-(N-1)
# that bench/wrk-append.lua appends to.
create_wrk_streams() {
  for i in $(seq 0 $(($2 - 1))); do
    curl -s -o /dev/null -X PUT -H 'content-type: text/plain' "http://127.0.0.1:$1/v1/stream/wrk-$i"
  done
}

# run_rounds ROUNDS SETUP...: calls `run SETUP ROUND` (the script's own)
# for every setup in every round. Each round starts with the next setup,
# so no setup always runs first (or right after another) on a machine
# that warms up and cools down.
run_rounds() {
  local rounds=$1 i round
  shift
  local setups=("$@")
  for round in $(seq "$rounds"); do
    for i in "${!setups[@]}"; do
      run "${setups[$(((i + round - 1) % ${#setups[@]}))]}" "$round"
    done
  done
}

# summarize_rounds WORK ROUNDS BASELINE SETUP...: prints each setup's
# appends/s and p99 per round, from the `runnel bench --json` results
# WORK/SETUP-ROUND.json, their means, and each mean against BASELINE's.
summarize_rounds() {
  python3 - "$@" <<'PY'
import json, sys
work, rounds, baseline, setups = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
rate = {}
for setup in setups:
    rows = [json.load(open(f"{work}/{setup}-{r}.json")) for r in range(1, rounds + 1)]
    rates = [row["throughput_per_sec"] for row in rows]
    p99 = [row["latency"]["p99_ms"] for row in rows]
    rate[setup] = sum(rates) / len(rates)
    print(f"{setup}: " + ", ".join(f"{r:,.0f}/s (p99 {p:.2f} ms)" for r, p in zip(rates, p99)))
line = ", ".join(f"{s} {rate[s]:,.0f}" for s in setups)
ratios = ", ".join(f"{s}/{baseline} {rate[s] / rate[baseline]:.2f}x" for s in setups if s != baseline)
print(f"mean appends/s: {line}; {ratios}")
PY
}

# start_durable_rust PEERS PORT DATA LOG: starts the Durable Streams Rust
# server (durable-streams-server 0.3.0, installed into PEERS if missing)
# in the background on 127.0.0.1:PORT, fsyncing every append
# (`file-durable`) into DATA, logging to LOG; its pid is then in $!.
start_durable_rust() {
  local peers=$1 port=$2 data=$3 log=$4
  [ -x "$peers/bin/durable-streams-server" ] ||
    cargo install --locked --root "$peers" durable-streams-server@0.3.0
  cat >"$data.toml" <<TOML
[server]
bind_address = "127.0.0.1:$port"
[limits]
max_memory_bytes = 17179869184
max_stream_bytes = 4294967296
[storage]
mode = "file-durable"
data_dir = "$data"
TOML
  "$peers/bin/durable-streams-server" --config "$data.toml" >>"$log" 2>&1 &
}

# install_peer SYSTEM PEERS: installs a peer into PEERS unless it is there
# (durable-rust, durable-node, ursula, s2; runnel needs nothing).
install_peer() {
  local peers=$2
  case "$1" in
    durable-rust) [ -x "$peers/bin/durable-streams-server" ] ||
      cargo install --locked --root "$peers" durable-streams-server@0.3.0 ;;
    durable-node) [ -d "$peers/node/node_modules/@durable-streams/server" ] ||
      (mkdir -p "$peers/node" && cd "$peers/node" && npm install --no-audit --no-fund @durable-streams/server@0.3.7) ;;
    ursula) [ -x "$peers/bin/ursula" ] || cargo install --locked --root "$peers" ursula@0.11.5 ;;
    s2) [ -x "$peers/bin/s2" ] || cargo install --locked --root "$peers" s2-cli@0.43.4 ;;
    runnel) ;;
    *) echo "unknown system $1" >&2; return 2 ;;
  esac
}

# start_peer SYSTEM PEERS PORT DATA LOG: starts a peer (durable-rust,
# durable-node, ursula, s2) in the background on 127.0.0.1:PORT, durable
# on every append, data in DATA, logging to LOG; sets $api to the
# `runnel bench --api-style` it speaks. Its pid is then in $!.
start_peer() {
  local system=$1 peers=$2 port=$3 data=$4 log=$5
  install_peer "$system" "$peers"
  case "$system" in
    durable-rust)
      api=durable
      start_durable_rust "$peers" "$port" "$data" "$log" ;;
    durable-node)
      api=durable
      node --input-type=module -e "
        import { DurableStreamTestServer } from '$peers/node/node_modules/@durable-streams/server/dist/index.js';
        const s = new DurableStreamTestServer({ port: $port, host: '127.0.0.1', dataDir: '$data' });
        await s.start();" >>"$log" 2>&1 & ;;
    s2)
      api=s2
      "$peers/bin/s2" lite --local-root "$data" --port "$port" >>"$log" 2>&1 & ;;
    ursula)
      api=ursula
      cat >"$data.toml" <<TOML
[server]
listen = "127.0.0.1:$port"
cluster_id = "runnel-bench"
[raft.wal]
path = "$data"
fsync = "always"
[[raft.peers]]
node_id = 1
url = "http://127.0.0.1:$port"
[storage.cold]
backend = "none"
TOML
      "$peers/bin/ursula" server --config "$data.toml" --node-id 1 >>"$log" 2>&1 & ;;
    *) echo "unknown system $system" >&2; return 2 ;;
  esac
}

# durable_streams_015 PEERS: prints the path of durable-streams 0.1.5's
# server (the protocol authors' Rust server), installing it pinned under
# PEERS first if it is not there.
durable_streams_015() {
  local root=$1/durable-streams-0.1.5
  [ -x "$root/bin/durable-streams-server" ] ||
    cargo install --locked --root "$root" durable-streams@0.1.5 >&2
  echo "$root/bin/durable-streams-server"
}

# start_vs_peer SYSTEM PORT DIR: starts `runnel` (target/release/runnel,
# with the environment in RUNNEL_ENV), `runnel-baseline` (the build at
# $RUNNEL_BASELINE, likewise) or `durable-streams-0.1.5` (the
# server at $peer) on 127.0.0.1:PORT with its data in DIR, its log in
# DIR/log; sets server_pid and api_style (for `runnel bench`) and waits
# until it listens.
start_vs_peer() {
  local sys=$1 port=$2 dir=$3
  if [ "$sys" = runnel ] || [ "$sys" = runnel-baseline ]; then
    local bin=target/release/runnel
    if [ "$sys" = runnel-baseline ]; then
      bin=${RUNNEL_BASELINE:?RUNNEL_BASELINE must name the baseline build of runnel}
    fi
    # shellcheck disable=SC2086
    env ${RUNNEL_ENV:-} "$bin" serve --listen "127.0.0.1:$port" \
      --data-dir "$dir/db" >"$dir/log" 2>&1 &
    api_style=runnel
  else
    "$peer" --host 127.0.0.1 --port "$port" --data-dir "$dir/db" >"$dir/log" 2>&1 &
    api_style=durable-root
  fi
  server_pid=$!
  wait_port "$port"
}

# resident_mb PID: the process's resident memory (VmRSS) and its anonymous
# part (RssAnon: what it allocated; the rest is file pages it maps), in MB,
# separated by a space.
resident_mb() {
  awk '/^VmRSS:/ { rss = $2 } /^RssAnon:/ { anon = $2 }
       END { printf "%.1f %.1f", rss / 1024, anon / 1024 }' "/proc/$1/status"
}
