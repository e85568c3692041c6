#!/usr/bin/env bash
# Partition test: a 3-node cluster of the server BINARY, each node in its
# own network namespace, while a seeded nemesis isolates nodes, cuts the
# leader from its followers, makes bridge partitions, drops packets at
# random and slows links, and writers (idempotent and plain) and readers
# (catch-up and long-poll) go through every node. Then the network heals,
# every stream is read back through every node, and the recorded history
# (invocation and completion of every append and read) is checked: no
# acknowledged append lost or moved, every read a part of the final
# stream, reads at the tail holding everything acknowledged before they
# began, no reader going backwards, the nodes agreeing. Exit 0 only if
# every seed passes.
#
#   scripts/partitions.sh BINARY [SERVE FLAGS...]
#   SEEDS="1 2 3" DURATION=30 scripts/partitions.sh target/release/runnel
#   SEEDS="$(seq 1 20)" DURATION=120 scripts/partitions.sh target/release/runnel  # a longer run
#
# A server that serves reads without the read barrier must fail (the
# test-only runnel-faulty, built beside runnel by cargo test --workspace):
#   RUNNEL_UNSAFE_STALE_READS=1 scripts/partitions.sh target/release/runnel-faulty   # exits 1, "stale read"
#
# Environment: SEEDS (default "1 2 3"), DURATION (seconds of faults per
# seed, default 30), NETFAULT_BIN (a built runnel-netfault; default: cargo
# build --release), KEEP_WORKDIR=1 (keep the logs of a passing run too).
#
# Needs root, iproute2 and nftables (scripts/install-test-deps.sh installs
# nftables). This kernel has no netem qdisc, so there is no fixed added
# delay: slow links are rate limits (tc tbf) that queue and drop.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

die() {
  echo "$(basename "$0"): $*" >&2
  exit 2
}

[ $# -ge 1 ] || die "usage: $(basename "$0") BINARY [SERVE FLAGS...]"
binary=$1
shift
[ -x "$binary" ] || die "$binary is not an executable"
binary=$(cd "$(dirname "$binary")" && pwd)/$(basename "$binary")
[ "$(id -u)" = 0 ] || die "needs root (network namespaces)"
command -v ip >/dev/null || die "needs ip (iproute2)"
command -v nft >/dev/null || die "needs nft (nftables; scripts/install-test-deps.sh installs it)"

if [ -n "${NETFAULT_BIN:-}" ]; then
  netfault=$NETFAULT_BIN
else
  (cd "$root" && cargo build --release --locked -q -p runnel-netfault)
  netfault=$root/target/release/runnel-netfault
fi

workdir=$(mktemp -d -t runnel-partitions.XXXXXX)
status=0
for seed in ${SEEDS:-1 2 3}; do
  echo "== seed $seed"
  if ! "$netfault" --binary "$binary" --workdir "$workdir/seed-$seed" --seed "$seed" \
    --duration-secs "${DURATION:-30}" -- "$@"; then
    status=1
  fi
done
if [ "$status" = 0 ] && [ -z "${KEEP_WORKDIR:-}" ]; then
  rm -rf "$workdir"
  echo "PASS: every seed"
else
  echo "logs in $workdir"
fi
exit "$status"
