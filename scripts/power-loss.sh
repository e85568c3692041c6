#!/usr/bin/env bash
# Power-loss test: runs the server BINARY with its data on runnel-faultfs, a
# FUSE file system that keeps only what was fsynced (files) and directory-
# fsynced (entries) when the power is cut, like a disk with a volatile write
# cache. For CYCLES cycles: concurrent writers append, power is cut while
# they do at a moment that loses written data (at a write to the log, or as
# soon as written data is unsynced; some cuts keep a torn prefix of a
# write), the server is SIGKILLed, the file system revived, the server
# restarted, and every stream read back: every acknowledged append must be
# there, in order, exactly once, and nothing else. Exit 0 only if every
# cycle passes; 1 if one fails; 2 if the test could not run.
#
#   scripts/power-loss.sh BINARY [SERVE FLAGS...]
#   CYCLES=20 scripts/power-loss.sh target/release/runnel
#   scripts/power-loss.sh target/release/runnel --sync never   # must fail: ^VIOLATION lost-acknowledged-append:
#   FAULTFS_MODE=cluster-power-loss scripts/power-loss.sh target/release/runnel   # 3 nodes, a replica move
#   scripts/io-errors.sh BINARY [SERVE FLAGS...]               # failing fsyncs and writes
#
# Every cycle must acknowledge at least one append and its cut must drop at
# least one written byte, and before the cut the server must acknowledge at
# least as many appends as it answers with errors; else the cycle fails.
# What fails prints lines that start with `VIOLATION KIND:` (the server
# broke a rule: lost-acknowledged-append, resurrected-append,
# duplicate-append, reordered-append, foreign-bytes, deleted-stream-back,
# wrong-answer, refused-appends, server-died, nodes-disagree,
# move-unfinished, unavailable) or `UNTESTED KIND:` (no-acknowledged-append,
# no-dropped-bytes: the cycle tested nothing).
#
# FAULTFS_MODE=cluster-power-loss: a 3-node cluster on loopback (replication
# factor 2), node 3's data on runnel-faultfs; each cycle moves a data
# group's replica onto or off node 3 and cuts node 3's power in the middle
# of the move (while adding, between add and remove, while removing), then
# finishes the move with `BINARY ctl node move`; every stream is read back
# through every node. CYCLES defaults to 6 there.
#
# The server runs as `BINARY serve --data-dir MOUNT/data --listen
# 127.0.0.1:PORT --segment-bytes 1048576 --checkpoint-interval-secs 1
# [SERVE FLAGS]` (a SERVE FLAG naming one of those two replaces the default;
# a cluster node also gets --node-id, --peers, --replication-factor 2 and
# --groups 4 unless given).
#
# Environment: CYCLES (at least 1; default 100, 6 in cluster mode), SEED
# (default: the clock; printed, and given again replays the harness's
# choices: write times, cuts, torn writes, moves), FAULTFS_ARGS (more
# options for `runnel-faultfs power-loss`, e.g. "--cycle-timeout-secs 60",
# see `runnel-faultfs power-loss --help`), FAULTFS_BIN (a built
# runnel-faultfs; default: cargo build --release), KEEP_WORKDIR=1 (keep the
# logs of a passing run too).
#
# Needs root and /dev/fuse. Neither libfuse nor fusermount3 is needed: as
# root, runnel-faultfs mounts with mount(2) itself.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mode=${FAULTFS_MODE:-power-loss}

die() {
  echo "$(basename "$0"): $*" >&2
  exit 2
}

[ $# -ge 1 ] || die "usage: $(basename "$0") BINARY [SERVE FLAGS...]"
binary=$1
shift
[ -x "$binary" ] || die "$binary is not an executable"
given_binary=$binary
binary=$(cd "$(dirname "$binary")" && pwd)/$(basename "$binary")
[ "$(id -u)" = 0 ] || die "needs root (mounting a FUSE file system with mount(2))"
[ -c /dev/fuse ] || die "/dev/fuse is missing (modprobe fuse, or give the container the device)"
grep -qw fuse /proc/filesystems || modprobe fuse 2>/dev/null || die "the kernel has no FUSE support"

case "$mode" in
  power-loss) cycles=${CYCLES:-100} ;;
  cluster-power-loss) cycles=${CYCLES:-6} ;;
  io-errors) cycles=1 ;;
  *) die "unknown FAULTFS_MODE $mode (power-loss, cluster-power-loss, io-errors)" ;;
esac
case "$cycles" in '' | *[!0-9]*) die "CYCLES must be a number, not '$cycles'" ;; esac
[ "$cycles" -ge 1 ] || die "CYCLES=$cycles: at least one cycle is needed (a run of no cycles tests nothing)"

if [ -n "${FAULTFS_BIN:-}" ]; then
  faultfs=$FAULTFS_BIN
else
  (cd "$root" && cargo build --release --locked -q -p runnel-faultfs)
  faultfs=$root/target/release/runnel-faultfs
fi

# The script's serve defaults, unless the caller sets the same flag.
defaults=()
has_flag() {
  local flag=$1 arg
  for arg in "${serve_flags[@]}"; do
    [ "$arg" = "$flag" ] || [ "${arg%%=*}" = "$flag" ] && return 0
  done
  return 1
}
serve_flags=("$@")
has_flag --segment-bytes || defaults+=(--segment-bytes 1048576)
has_flag --checkpoint-interval-secs || defaults+=(--checkpoint-interval-secs 1)

work=$(mktemp -d /tmp/runnel-"$mode".XXXXXX)
mnt=$work/mnt
ctl=$work/control.sock
mkdir "$mnt"
fs_pid=
status=1

# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
  if [ -n "$fs_pid" ] && kill -0 "$fs_pid" 2>/dev/null; then
    timeout 10 "$faultfs" ctl "$ctl" shutdown >/dev/null 2>&1 || true
    for _ in $(seq 50); do
      kill -0 "$fs_pid" 2>/dev/null || break
      sleep 0.1
    done
    kill "$fs_pid" 2>/dev/null || true
  fi
  if mountpoint -q "$mnt" 2>/dev/null; then
    umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true
  fi
  if [ "$status" = 0 ] && [ -z "${KEEP_WORKDIR:-}" ]; then
    rm -rf "$work"
  else
    echo "$(basename "$0"): logs kept in $work (server.log, faultfs.log)"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$faultfs" mount "$mnt" --control "$ctl" >"$work/faultfs.log" 2>&1 &
fs_pid=$!
for _ in $(seq 100); do
  [ -S "$ctl" ] && mountpoint -q "$mnt" && break
  kill -0 "$fs_pid" 2>/dev/null || { cat "$work/faultfs.log" >&2; die "runnel-faultfs mount failed"; }
  sleep 0.1
done
[ -S "$ctl" ] || die "runnel-faultfs did not come up within 10 s"

seed=${SEED:-$(date +%s%N)}
case "$seed" in '' | *[!0-9]*) die "SEED must be a number, not '$seed'" ;; esac
[ "$mode" = io-errors ] || echo "$(basename "$0"): $mode, seed $seed (SEED=$seed replays it)"
common=(--binary "$binary" --mount "$mnt" --control "$ctl" --log "$work/server.log")
# shellcheck disable=SC2206 # FAULTFS_ARGS is a word list by design
extra=(${FAULTFS_ARGS:-})
set +e
case "$mode" in
  power-loss)
    timeout --kill-after=30 $((cycles * 130 + 120)) \
      "$faultfs" power-loss "${common[@]}" --seed "$seed" --cycles "$cycles" "${extra[@]}" \
      -- "${defaults[@]}" "${serve_flags[@]}"
    ;;
  cluster-power-loss)
    timeout --kill-after=30 $((cycles * 90 + 120)) \
      "$faultfs" cluster-power-loss "${common[@]}" --seed "$seed" --workdir "$work" --cycles "$cycles" \
      "${extra[@]}" -- "${defaults[@]}" "${serve_flags[@]}"
    ;;
  io-errors)
    timeout --kill-after=30 600 \
      "$faultfs" io-errors "${common[@]}" "${extra[@]}" -- "${defaults[@]}" "${serve_flags[@]}"
    ;;
  *) die "unknown FAULTFS_MODE $mode" ;;
esac
status=$?
set -e
if [ "$status" != 0 ] && [ "$mode" != io-errors ]; then
  echo "$(basename "$0"): FAILED (exit $status); replay: FAULTFS_MODE=$mode SEED=$seed CYCLES=$cycles $0 $given_binary ${serve_flags[*]}"
fi
exit "$status"
