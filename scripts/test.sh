#!/usr/bin/env bash
# Sets up and runs every test of the project: formatting and lints, the
# Rust unit, property, integration and crash tests (the tiering tests
# against moto's S3 server), the Durable Streams conformance suite against
# the release binary (single node and cluster, with tiering forced on tiny
# thresholds, through a cluster while the disk and a CPU are saturated,
# and over HTTPS with the cluster on mutual TLS), the console
# in headless Chromium, the power-loss and IO-error tests on runnel-faultfs, the
# fuzz targets for a bounded time (cargo-fuzz, pinned, installed if
# missing), and the partition test (a cluster in network namespaces,
# runnel-netfault).
# Needs: a Rust toolchain (rustup), Node.js with npm, python3, curl, openssl; root,
# /dev/fuse and iproute2 for the power-loss and partition tests.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
started=$(date +%s)
# Each stage's heading, with the seconds since the start (CI must stay
# under 30 minutes on two cores: these say where the time goes).
stage() { echo "== [$(($(date +%s) - started)) s] $*"; }

stage "installing test dependencies"
scripts/install-test-deps.sh
stage "cargo fmt --check"
cargo fmt --all -- --check
stage "cargo clippy"
cargo clippy --release --workspace --all-targets --locked -- -D warnings
stage "cargo test"
cargo test --release --workspace --locked
# cargo test built the release binary for the end-to-end tests; reuse it.
[ -x target/release/runnel ] || cargo build --release --locked -p runnel
bin=$root/target/release/runnel

# Tiering on thresholds so small that most reads cross from tiered
# history into the log: every append is its own chunk, tiered at once.
tiny_tiers=(--tier-chunk-bytes 1 --tier-max-age-secs 0 --tier-interval-ms 20)
stage "conformance suite (tiering every append)"
scripts/conformance.sh "$bin" -- "${tiny_tiers[@]}"
stage "conformance suite through a 3-node cluster (tiering every append to a shared store)"
scripts/conformance.sh "$bin" --cluster -- --object-store 'file://{data}/objects' "${tiny_tiers[@]}"
stage "conformance suite through a 3-node cluster while another process saturates the disk and a CPU"
scripts/conformance.sh "$bin" --cluster --saturate
stage "conformance suite over HTTPS"
scripts/conformance.sh "$bin" --tls
stage "conformance suite over HTTPS (HTTP/2) through a 3-node cluster on mutual TLS"
scripts/conformance.sh "$bin" --cluster --h2
stage "the console in headless Chromium"
scripts/console-test.sh "$bin"

# Power loss: checkpoints, segment rolls, preallocation and tiered-chunk
# reclaim all happen during the cycles.
power_tiers=(--tier-chunk-bytes 4096 --tier-max-age-secs 1 --tier-interval-ms 100
  --tier-gc-grace-secs 1 --hot-bytes 2000000)
stage "power-loss cycles"
CYCLES=${POWER_LOSS_CYCLES:-20} scripts/power-loss.sh "$bin" "${power_tiers[@]}"
stage "power-loss cycles must catch a server that never fsyncs"
never_log=$(mktemp)
status=0
CYCLES=3 scripts/power-loss.sh "$bin" --sync never >"$never_log" 2>&1 || status=$?
# It must fail by finding lost data, not by failing to run.
if [ "$status" = 0 ] || ! grep -q "VIOLATION" "$never_log"; then
  tail -5 "$never_log"
  echo "test.sh: the power-loss test did not catch --sync never (exit $status)" >&2
  exit 1
fi
grep -m1 "VIOLATION" "$never_log"
rm -f "$never_log"
stage "IO errors"
scripts/io-errors.sh "$bin"
stage "fuzzing (bounded; stable toolchain)"
FUZZ_SECS=${FUZZ_SECS:-20} scripts/fuzz.sh
stage "partitions, loss and slow links between namespaced nodes (fixed seeds)"
SEEDS=${PARTITION_SEEDS:-"1 2 3"} DURATION=${PARTITION_SECS:-30} scripts/partitions.sh "$bin"
stage "all passed"
