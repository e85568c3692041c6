#!/usr/bin/env bash
# Sets up and runs every test of the project (CI runs exactly this):
#
# 1. in turn: cargo fmt, clippy, and one build of everything (the
#    workspace's tests, the server, the test-only runnel-faulty, the fault
#    harnesses), while the test dependencies are installed
#    (scripts/install-test-deps.sh, pinned) and the fuzz targets built in
#    the background;
# 2. then six lanes side by side, each running its stages in turn. Most
#    stages wait on clocks, networks and disks rather than on the two
#    cores, so lanes overlap them:
#    - rust: the unit, property and simulation tests, and the simulation
#      shown to catch stale reads;
#    - e2e: the end-to-end tests (crates/runnel/tests/it: real server
#      processes, clusters, an S3 server for tiering);
#    - fuzz: half of the fuzz targets (built with plain cargo and
#      libFuzzer's instrumentation, in fuzz/target), each run for a
#      bounded time from the committed seeds;
#    - protocol: the conformance suite six ways (tiering every append; a
#      3-node cluster tiering to a shared store; a cluster while another
#      process saturates the disk and a CPU; HTTPS; HTTP/2 through a
#      cluster on mutual TLS; through a node of a 6-node cluster in three
#      zones that lost a zone), each required to pass exactly 338 tests,
#      and shown to fail a run that skips tests; the console in headless
#      Chromium; README's commands as printed (scripts/readme-check.sh);
#    - power: power loss on runnel-faultfs (a single node, and one node of a
#      cluster during replica moves; a server that never fsyncs must be
#      caught losing acknowledged appends), IO errors; then the other
#      half of the fuzz targets;
#    - network: partitions between namespaced nodes while members change
#      (runnel-netfault, fixed seeds), and a server serving stale reads,
#      which must be caught.
#
# Every stage's output goes to target/ci-logs/LANE.STAGE.log; a failed
# stage's log is printed. Each line says the seconds since the start: CI
# must stay under 15 minutes on two cores.
#
# Needs: a Rust toolchain (rustup), Node.js with npm, python3, curl; root,
# /dev/fuse and iproute2 for the power-loss and partition tests.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
started=$(date +%s)
elapsed() { echo $(($(date +%s) - started)); }
stage() { echo "== [$(elapsed) s] $*"; }
logs=$root/target/ci-logs
rm -rf "$logs"
mkdir -p "$logs"

# run LANE NAME COMMAND...: one stage of a lane, logged; its status is
# recorded, and a failure does not stop the lane's later stages.
run() {
  local lane=$1 name=$2 log
  shift 2
  log=$logs/$lane.$name.log
  local t0
  t0=$(date +%s)
  echo "== [$(elapsed) s] $lane: $name"
  if "$@" >"$log" 2>&1; then
    echo "== [$(elapsed) s] $lane: $name passed ($(($(date +%s) - t0)) s)"
  else
    echo "== [$(elapsed) s] $lane: $name FAILED ($(($(date +%s) - t0)) s); its log:"
    tail -n 150 "$log" | sed "s/^/   $lane.$name | /"
    echo "$lane.$name" >>"$logs/failed"
  fi
}

# expect_failure PATTERN COMMAND...: the command must fail, and its output
# must hold PATTERN (grep -E): a harness broken on purpose must be caught
# for the reason it exists, not by any error.
expect_failure() {
  local pattern=$1 out status=0
  shift
  out=$(mktemp)
  "$@" >"$out" 2>&1 || status=$?
  if [ "$status" = 0 ]; then
    tail -n 30 "$out"
    echo "expected a failure; the command passed: $*"
    return 1
  fi
  if ! grep -Eq "$pattern" "$out"; then
    tail -n 60 "$out"
    echo "it failed (exit $status), but not with /$pattern/: $*"
    return 1
  fi
  echo "failed as it must (exit $status):"
  grep -E -m 3 "$pattern" "$out"
  rm -f "$out"
}

# Every fuzz target, 20 s each: built once (in the background, below),
# then run in two shards, one in a lane of its own and one at the end of
# the power lane.
fuzz() { env FUZZ_SECS="${FUZZ_SECS:-20}" scripts/fuzz.sh "$@"; }

# While clippy and the build keep the cores busy, the test dependencies
# are installed (mostly network and disk) and the fuzz targets are built
# (in fuzz/target, with their own instrumentation); the lanes wait for
# both.
stage "installing the test dependencies and building the fuzz targets, in the background"
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT
run setup install-test-deps scripts/install-test-deps.sh &
setup_pid=$!
run fuzz build fuzz --build &
fuzz_build_pid=$!
stage "cargo fmt --check"
cargo fmt --all -- --check
stage "cargo clippy"
cargo clippy --release --workspace --all-targets --locked -- -D warnings
stage "building the workspace and its tests"
cargo test --release --workspace --locked --no-run
# `cargo test` links a package's binaries only for its integration tests:
# the fault harnesses have none, so the binaries are built here (the
# libraries are shared with the test build: nothing else compiles).
cargo build --release --workspace --locked --bins
bin=$root/target/release/runnel
faulty=$root/target/release/runnel-faulty
for built in "$bin" "$faulty" target/release/runnel-faultfs target/release/runnel-netfault \
  target/release/runnel-sim; do
  [ -x "$built" ] || { echo "test.sh: $built was not built" >&2; exit 1; }
done
stage "waiting for the test dependencies and the fuzz build"
wait "$setup_pid" "$fuzz_build_pid"
if grep -q "^setup\." "$logs/failed" 2>/dev/null; then
  stage "FAILED: the test dependencies could not be installed"
  exit 1
fi

lane_rust() {
  run rust unit-and-simulation cargo test --release --workspace --locked --exclude runnel
  run rust server-units cargo test --release --locked -p runnel --lib --bins
  # The simulation with reads that skip the read barrier and the read
  # index must report stale reads.
  run rust stale-reads-caught-by-simulation expect_failure "stale read: reader" \
    target/release/runnel-sim --unsafe-stale-reads --scenario faults --seed 1
}

lane_fuzz() {
  run fuzz fuzz-1-of-2 fuzz --shard 1/2
}

lane_e2e() {
  run e2e end-to-end cargo test --release --locked -p runnel --test it -- --test-threads 6
}

# Tiering on thresholds so small that most reads cross from tiered
# history into the log: every append is its own chunk, tiered at once.
tiny_tiers=(--tier-chunk-bytes 1 --tier-max-age-secs 0 --tier-interval-ms 20)
# The suite waits on clocks (TTLs, long-polls) far more than it computes:
# two or three runs at a time share the lane.
lane_protocol() {
  # The count check itself: a run that skips all but a few tests fails.
  run protocol conformance-skips-are-caught expect_failure "expected exactly 338 passed" \
    scripts/conformance.sh "$bin" --only "should create"
  run protocol conformance-tiering scripts/conformance.sh "$bin" -- "${tiny_tiers[@]}" &
  run protocol conformance-https scripts/conformance.sh "$bin" --tls &
  # Through a node of a cluster that lost a whole zone (both of its nodes).
  run protocol conformance-zone-loss scripts/conformance.sh "$bin" --zone-loss &
  wait
  run protocol conformance-cluster-tiering scripts/conformance.sh "$bin" --cluster -- \
    --object-store 'file://{data}/objects' "${tiny_tiers[@]}" &
  run protocol conformance-http2-cluster-mtls scripts/conformance.sh "$bin" --cluster --h2 &
  wait
  # Alone, last: it saturates the disk and a CPU on purpose.
  run protocol conformance-cluster-saturated scripts/conformance.sh "$bin" --cluster --saturate
  run protocol console scripts/console-test.sh "$bin"
  run protocol readme scripts/readme-check.sh
}

# Power loss: checkpoints, segment rolls, preallocation and tiered-chunk
# reclaim all happen during the cycles.
power_tiers=(--tier-chunk-bytes 4096 --tier-max-age-secs 1 --tier-interval-ms 100
  --tier-gc-grace-secs 1 --hot-bytes 2000000)
faultfs=(env FAULTFS_BIN=target/release/runnel-faultfs)
lane_power() {
  run power power-loss "${faultfs[@]}" CYCLES="${POWER_LOSS_CYCLES:-20}" \
    scripts/power-loss.sh "$bin" "${power_tiers[@]}"
  # A server that never fsyncs must be caught losing acknowledged
  # appends, not by any other error; and a run of no cycle proves nothing.
  run power never-fsync-is-caught expect_failure "^VIOLATION lost-acknowledged-append:" \
    "${faultfs[@]}" CYCLES=3 SEED=1 scripts/power-loss.sh "$bin" --sync never
  run power no-cycle-is-refused expect_failure "at least one cycle is needed" \
    "${faultfs[@]}" CYCLES=0 scripts/power-loss.sh "$bin"
  # One node of a 3-node cluster loses power during replica moves.
  run power cluster-power-loss "${faultfs[@]}" FAULTFS_MODE=cluster-power-loss \
    scripts/power-loss.sh "$bin"
  run power io-errors "${faultfs[@]}" scripts/io-errors.sh "$bin"
  # The lane that ends first.
  run power fuzz-2-of-2 fuzz --shard 2/2
}

netfault=(env NETFAULT_BIN=target/release/runnel-netfault)
lane_network() {
  run network partitions "${netfault[@]}" SEEDS="${PARTITION_SEEDS:-1 2 3}" \
    DURATION="${PARTITION_SECS:-30}" scripts/partitions.sh "$bin"
  # A server serving stale reads must be caught by the history checker,
  # and a run with no fault proves nothing.
  run network stale-reads-are-caught expect_failure "^ANOMALY stale-read:" \
    "${netfault[@]}" SEEDS=1 DURATION=30 RUNNEL_UNSAFE_STALE_READS=1 scripts/partitions.sh "$faulty"
  run network no-fault-is-refused expect_failure "^UNTESTED no-faults:" \
    "${netfault[@]}" SEEDS=1 DURATION=0 scripts/partitions.sh "$bin"
  # Readers through nginx: long-polls and catch-up storms collapse, nothing
  # private leaks, nothing of a deleted stream comes back. A careless
  # cache must be caught leaking, and an origin that forbids caching
  # must be caught costing a long-poll per reader.
  run network cache-proxy env READERS="1000 5000" SECS=10 STORM=500 scripts/cache-proxy.sh "$bin"
  run network leaky-cache-is-caught expect_failure "^FAIL leaks: .* got the private bytes" \
    scripts/cache-proxy.sh "$bin" --only leaks --break-cache
  run network stale-cache-is-caught expect_failure "^FAIL recreate:" \
    scripts/cache-proxy.sh "$bin" --only recreate --break-cache
  run network uncached-origin-is-caught expect_failure "^FAIL collapse:" \
    env READERS=100 SECS=3 scripts/cache-proxy.sh "$bin" --only collapse --origin-no-cache
}

stage "running the lanes"
lane_rust &
lane_e2e &
lane_protocol &
lane_power &
lane_network &
lane_fuzz &
wait

if [ -s "$logs/failed" ]; then
  stage "FAILED: $(tr '\n' ' ' <"$logs/failed")(logs in $logs)"
  exit 1
fi
stage "all passed"
