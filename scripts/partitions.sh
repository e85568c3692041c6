#!/usr/bin/env bash
# Partition test: a cluster of the server BINARY, each node in its own
# network namespace (three founders and a fourth in reserve), while a
# seeded nemesis isolates nodes, cuts the leader from its followers, makes
# bridge partitions, drops packets at random, slows links and crashes
# (SIGKILL) and restarts nodes, and an operator adds the fourth node, moves
# a replica, transfers a group's leadership and removes a node (each change
# tried again until done: `runnel ctl node add|move|remove`, `?lead=N`),
# and writers (idempotent and plain) and readers (catch-up, long-poll, SSE)
# go through every member. Then the network heals, every stream is read
# back through every member, and the recorded history (invocation and
# completion of every append and read) is checked: no acknowledged append
# lost or moved, every read a part of the final stream, reads at the tail
# holding everything acknowledged before they began (linearizable reads),
# no reader going backwards, the members agreeing. Exit 0 only if every
# seed passes; 1 if one fails; 2 if one could not run.
#
#   scripts/partitions.sh BINARY [SERVE FLAGS...]
#   SEEDS="1 2 3" DURATION=30 scripts/partitions.sh target/release/runnel
#   SEEDS="$(seq 1 20)" DURATION=120 scripts/partitions.sh target/release/runnel  # a longer run
#   SEEDS=7 DURATION=30 scripts/partitions.sh target/release/runnel                # replay seed 7
#
# A server that serves reads without the read barrier must fail (the
# test-only runnel-faulty, built beside runnel by cargo test --workspace):
#   RUNNEL_UNSAFE_STALE_READS=1 SEEDS=1 scripts/partitions.sh target/release/runnel-faulty   # ^ANOMALY stale-read:
#
# Per seed it prints the faults applied by kind, the membership changes
# made (and attempts refused or failed), the operations checked (appends
# acknowledged and in doubt, reads by kind), and the verdict lines, each
# at the start of a line: `ANOMALY KIND: ...` (the history checker's rules
# with dashes: stale-read, lost-acknowledged-append, real-time-order,
# reader-went-backwards, read-not-in-the-final-stream, ...; and
# nodes-disagree, node-exited, node-restart, unavailable) and
# `UNTESTED KIND: ...` (no-faults, no-acknowledged-append, no-tail-read,
# no-membership-change). DURATION=0 applies no fault and fails.
#
# Environment: SEEDS (default "1 2 3"), DURATION (seconds of faults per
# seed, default 30), NETFAULT_ARGS (more runnel-netfault options, e.g.
# "--trace" to log every operation with the node that answered it, or
# "--sse-cursor"; see runnel-netfault --help), NETFAULT_BIN (a built
# runnel-netfault; default: cargo build --release), KEEP_WORKDIR=1 (keep
# the logs of a passing run too).
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
given_binary=$1
binary=$1
shift
[ -x "$binary" ] || die "$binary is not an executable"
binary=$(cd "$(dirname "$binary")" && pwd)/$(basename "$binary")
[ "$(id -u)" = 0 ] || die "needs root (network namespaces)"
command -v ip >/dev/null || die "needs ip (iproute2)"
command -v nft >/dev/null || die "needs nft (nftables; scripts/install-test-deps.sh installs it)"
duration=${DURATION:-30}
case "$duration" in '' | *[!0-9]*) die "DURATION must be a number of seconds, not '$duration'" ;; esac

if [ -n "${NETFAULT_BIN:-}" ]; then
  netfault=$NETFAULT_BIN
else
  (cd "$root" && cargo build --release --locked -q -p runnel-netfault)
  netfault=$root/target/release/runnel-netfault
fi

# shellcheck disable=SC2206 # NETFAULT_ARGS is a word list by design
extra=(${NETFAULT_ARGS:-})
workdir=$(mktemp -d -t runnel-partitions.XXXXXX)
status=0
failed=()
for seed in ${SEEDS:-1 2 3}; do
  echo "== seed $seed (replay: SEEDS=$seed DURATION=$duration $0 $given_binary $*)"
  seed_status=0
  "$netfault" --binary "$binary" --workdir "$workdir/seed-$seed" --seed "$seed" \
    --duration-secs "$duration" "${extra[@]}" -- "$@" || seed_status=$?
  if [ "$seed_status" != 0 ]; then
    failed+=("$seed")
    [ "$seed_status" -gt "$status" ] && status=$seed_status
  fi
done
if [ "$status" = 0 ] && [ -z "${KEEP_WORKDIR:-}" ]; then
  rm -rf "$workdir"
  echo "PASS: every seed"
else
  [ "$status" = 0 ] || echo "FAIL: seeds ${failed[*]}; replay one: SEEDS=${failed[0]} DURATION=$duration $0 $given_binary $*"
  echo "logs in $workdir"
fi
exit "$status"
