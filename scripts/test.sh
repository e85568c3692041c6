#!/usr/bin/env bash
# Sets up and runs every test of the project: formatting and lints, the
# Rust unit, property, integration and crash tests, and the Durable
# Streams conformance suite against the release binary.
# Needs: a Rust toolchain (rustup), Node.js with npm, python3, curl.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --release --all-targets --locked -- -D warnings
echo "== cargo test"
cargo test --release --workspace --locked
echo "== conformance suite"
# cargo test built the release binary for the end-to-end tests; reuse it.
[ -x target/release/runnel ] || cargo build --release --locked -p runnel
scripts/conformance.sh "$root/target/release/runnel"
echo "== conformance suite through a 3-node cluster"
scripts/conformance.sh "$root/target/release/runnel" --cluster
