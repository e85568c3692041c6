#!/usr/bin/env bash
# Runs the Durable Streams conformance suite (npm package pinned in
# js-tests/package-lock.json) against a release build of runnel on
# durable storage.
#
# Usage: scripts/conformance.sh [path/to/runnel] [--cluster] [--zone-loss] [--tls] [--h2] [--saturate] [--only PATTERN] [-- SERVE FLAGS...]
#
# It passes only with exactly 338 tests passed and none failed, skipped or
# marked todo (vitest's own exit code is 0 with skipped tests). --only
# PATTERN runs just the tests whose names match (vitest -t), which the
# count check must then refuse: CI shows it does.
#
# With --tls the suite (its TypeScript client included) speaks HTTPS to a
# server with throwaway certificates (scripts/test-ca.sh); a cluster then
# also runs its Raft and forwarding traffic over mutual TLS, each node
# known by its certificate. --h2 (implies --tls) has the suite's fetch
# negotiate HTTP/2, and checks afterwards that the server counted HTTP/2
# connections.
#
# Flags after `--` go to every `runnel serve` (e.g. tiering thresholds).
# A cluster's nodes share one object store directory when the flags do
# not name one (`--object-store` with `{data}` standing for the run's
# scratch directory).
#
# --saturate runs, beside the servers for the whole suite, a process
# that saturates the disk (8 MiB writes, each followed by fdatasync, into
# one file in the run's directory) and one that keeps a CPU busy: slow
# fsyncs and a starved scheduler must cost the suite latency, not tests.
#
# With --cluster it starts a 3-node cluster on loopback with 3 Raft groups
# (one led by each node) and runs the suite through node 3: requests for
# two groups in three are forwarded to their leader, and forks mostly
# cross groups (the fork copies its source from the source's group).
#
# With --zone-loss it starts 6 nodes in three zones of two (replication
# factor 3), kills both nodes of zone a (SIGKILL) once every group has a
# leader, waits until node 6 is ready again, and runs the suite through
# it: a cluster that lost a whole zone serves the whole protocol.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/target/release/runnel
# The suite's size (@durable-streams/server-conformance-tests 0.3.6 with
# the subscription tests): a run must pass every one of them, no fewer.
EXPECTED_TESTS=${EXPECTED_TESTS:-338}
cluster=0
zone_loss=0
tls=0
h2=0
saturate=0
only=
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --cluster) cluster=1 ;;
    --zone-loss) cluster=1 zone_loss=1 ;;
    --tls) tls=1 ;;
    --h2) tls=1 h2=1 ;;
    --saturate) saturate=1 ;;
    --only) shift; only=$1 ;;
    --) shift; extra=("$@"); break ;;
    *) bin=$1 ;;
  esac
  shift
done
[ -x "$bin" ] || { echo "conformance: no runnel binary at $bin (cargo build --release)" >&2; exit 1; }

[ -d "$root/js-tests/node_modules/@durable-streams/server-conformance-tests" ] ||
  { echo "conformance: the suite is not installed (scripts/install-test-deps.sh)" >&2; exit 1; }

data=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$data"
}
trap cleanup EXIT

# N ports, each with its successor free too (a cluster node's Raft port).
free_port_pairs() { "$root/scripts/free-ports.sh" "$1"; }

scheme=http
curl_tls=()
if [ "$tls" = 1 ]; then
  "$root/scripts/test-ca.sh" "$data/ca" 3
  scheme=https
  curl_tls=(--cacert "$data/ca/ca.pem")
  export NODE_EXTRA_CA_CERTS=$data/ca/ca.pem
fi

wait_healthy() {
  for _ in $(seq 100); do
    curl -sf "${curl_tls[@]}" "$scheme://127.0.0.1:$1/health" >/dev/null && return 0
    sleep 0.1
  done
  cat "$data"/*.log >&2
  echo "conformance: server on port $1 did not start" >&2
  exit 1
}

# Webhook receivers of the subscription tests listen on 127.0.0.1.
common=(--long-poll-timeout-ms 500 --allow-dev-webhooks)
for flag in "${extra[@]}"; do
  common+=("${flag//\{data\}/$data}")
done
if [ "$tls" = 1 ]; then
  common+=(--tls-cert "$data/ca/server.pem" --tls-key "$data/ca/server.key")
fi
if [ "$cluster" = 0 ]; then
  port=$(free_port_pairs 1)
  "$bin" serve --listen "127.0.0.1:$port" --data-dir "$data/db" "${common[@]}" >"$data/server.log" 2>&1 &
  pids+=($!)
  wait_healthy "$port"
  target=$port
else
  nodes=3
  [ "$zone_loss" = 1 ] && nodes=6
  read -r -a ports <<<"$(free_port_pairs $nodes)"
  zones=(a a b b c c)
  peers=""
  for id in $(seq $nodes); do
    zone=""
    [ "$zone_loss" = 1 ] && zone="@${zones[id - 1]}"
    peers="$peers${peers:+,}$id=127.0.0.1:${ports[id - 1]}$zone"
  done
  for id in $(seq $nodes); do
    node_tls=()
    if [ "$tls" = 1 ]; then
      node_tls=(--cluster-ca "$data/ca/ca.pem" --cluster-cert "$data/ca/node-$id.pem"
        --cluster-key "$data/ca/node-$id.key")
    fi
    "$bin" serve --node-id "$id" --peers "$peers" --groups 4 --data-dir "$data/n$id" "${common[@]}" \
      "${node_tls[@]}" >"$data/n$id.log" 2>&1 &
    pids+=($!)
  done
  for port in "${ports[@]}"; do wait_healthy "$port"; done
  # Test through the last node once every group has a leader.
  target=${ports[nodes - 1]}
  for _ in $(seq 100); do
    curl -sf "${curl_tls[@]}" "$scheme://127.0.0.1:$target/_runnel/status" |
      python3 -c 'import json,sys; s=json.load(sys.stdin); sys.exit(0 if all(g.get("leader") for g in s["groups"]) else 1)' &&
      break
    sleep 0.1
  done
  if [ "$zone_loss" = 1 ]; then
    # Every group must span the zones before one is lost.
    curl -sf "${curl_tls[@]}" "$scheme://127.0.0.1:$target/_runnel/status" |
      python3 -c 'import json,sys; s=json.load(sys.stdin); exposed=s["quorum_in_one_zone"]; sys.exit(f"conformance: quorums inside one zone: {exposed}" if exposed else 0)'
    kill -9 "${pids[0]}" "${pids[1]}"
    echo "zone a (nodes 1 and 2) killed"
    ready=0
    for _ in $(seq 300); do
      curl -sf "${curl_tls[@]}" "$scheme://127.0.0.1:$target/ready" >/dev/null && { ready=1; break; }
      sleep 0.1
    done
    [ "$ready" = 1 ] || { echo "conformance: node $nodes not ready after losing zone a" >&2; exit 1; }
  fi
  curl -sf "${curl_tls[@]}" "$scheme://127.0.0.1:$target/_runnel/status" |
    python3 -c 'import json,sys; s=json.load(sys.stdin); print("leaders:", [g.get("leader") for g in s["groups"]])'
fi

if [ "$saturate" = 1 ]; then
  python3 - "$data/saturate" >"$data/saturate.out" <<'PY' &
import os, signal, sys
chunk, written, syncs = os.urandom(8 << 20), 0, 0
def report(*_):
    print(f"{written >> 20} MiB written and fdatasync'ed in {syncs} syncs", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, report)
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
while True:
    if os.lseek(fd, 0, os.SEEK_CUR) >= 256 << 20:
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, chunk)
    os.fdatasync(fd)
    written, syncs = written + len(chunk), syncs + 1
PY
  disk_pid=$!
  pids+=($disk_pid)
  python3 -c 'while True: pass' &
  pids+=($!)
fi

cd "$root/js-tests"
CONFORMANCE_SUBSCRIPTIONS=1 CONFORMANCE_HTTP2=$h2 CONFORMANCE_TEST_URL="$scheme://127.0.0.1:$target" \
  npx vitest run conformance.test.mjs ${only:+-t "$only"} --testTimeout=30000 --reporter=dot --reporter=json --outputFile.json="$data/results.json"
# (vitest's own limit per test, 5 s, is for a quiet machine: CI runs the
# suite beside other tests, and a loaded machine must cost time, not
# tests. The suite's own protocol timeouts are unchanged.)
# vitest exits 0 with tests skipped or marked todo: the counts decide.
python3 - "$data/results.json" "$EXPECTED_TESTS" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
expected = int(sys.argv[2])
counts = {k: r[k] for k in ("numPassedTests", "numFailedTests", "numPendingTests", "numTodoTests", "numTotalTests")}
print(f"conformance: {counts['numPassedTests']} passed, {counts['numFailedTests']} failed, "
      f"{counts['numPendingTests']} skipped, {counts['numTodoTests']} todo, of {counts['numTotalTests']}")
if (counts["numPassedTests"], counts["numTotalTests"]) != (expected, expected) or any(
        counts[k] for k in ("numFailedTests", "numPendingTests", "numTodoTests")):
    sys.exit(f"conformance: expected exactly {expected} passed, 0 failed, 0 skipped, 0 todo")
PY
if [ "$h2" = 1 ]; then
  connections=$(curl -sf "${curl_tls[@]}" "$scheme://127.0.0.1:$target/metrics" |
    sed -n 's/^runnel_connections_total{protocol="h2_tls"} //p')
  echo "HTTP/2 connections served: $connections"
  [ "${connections:-0}" -gt 0 ] || { echo "conformance: the suite did not speak HTTP/2" >&2; exit 1; }
fi
if [ "$saturate" = 1 ]; then
  kill "$disk_pid"
  wait "$disk_pid" 2>/dev/null || true
  echo "saturating the disk meanwhile: $(cat "$data/saturate.out")"
  if [ "$cluster" = 1 ]; then
    curl -sf "${curl_tls[@]}" "$scheme://127.0.0.1:$target/metrics" | grep '^runnel_leader_retr' || true
  fi
fi
