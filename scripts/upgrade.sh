#!/usr/bin/env bash
# scripts/upgrade.sh OLD_REV: builds Runnel at OLD_REV (a release's commit,
# see CHANGELOG.md) in a git worktree, then runs the rolling-upgrade test
# (crates/runnel/tests/it/upgrade.rs): a 3-node cluster of the OLD_REV
# build under writers is moved to this build one node at a time, and one
# node back again; no client error, no loss, identical replicas.
#
# The older build has a target directory of its own (target/upgrade-from)
# so that this tree's build stays as it is. Takes a full build of OLD_REV
# the first time (several minutes on two cores).
set -euo pipefail
rev=${1:?usage: scripts/upgrade.sh OLD_REV}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
worktree=$root/target/upgrade-from/src-$rev
if [ ! -d "$worktree" ]; then
  mkdir -p "$(dirname "$worktree")"
  git worktree add --detach "$worktree" "$rev"
fi
echo "== building $rev in $worktree"
(cd "$worktree" && CARGO_TARGET_DIR=$root/target/upgrade-from/target \
  cargo build --release --locked -p runnel --bin runnel)
old=$root/target/upgrade-from/target/release/runnel
"$old" --version
echo "== rolling upgrade from $rev to $(git rev-parse --short HEAD)"
RUNNEL_UPGRADE_FROM=$old cargo test --release --locked -p runnel --test it \
  upgrade:: -- --ignored --nocapture
