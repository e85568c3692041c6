#!/usr/bin/env bash
# Fuzzes what untrusted bytes reach, on the stable toolchain: libFuzzer's
# coverage guidance, no sanitizer (the instrumentation `cargo fuzz build
# -s none` asks for, passed to plain cargo, so CI needs no cargo-fuzz).
# Targets: the direct path's request reader, offsets/cursors/queries/
# stream paths, the protocol's headers, JSON bodies, the Raft transport's
# request frames, log entries, checkpoints, fork material, credentials.
# Every decoder target asserts a round trip or invariants, not only the
# absence of panics (see each target's header in fuzz/fuzz_targets/).
#
# For each target, in turn:
# 1. every input in fuzz/regressions/TARGET (inputs that once crashed)
#    is replayed;
# 2. the target runs for FUZZ_SECS seconds from the committed seeds
#    (fuzz/seeds/TARGET, read only) and the git-ignored working corpus
#    (fuzz/corpus/TARGET, where new inputs go and stay between runs).
# It prints, per target, the regressions and seeds replayed, the runs
# executed and the coverage reached (libFuzzer's edges, `cov`, and
# features, `ft`). On any crash it stops non-zero; the input is kept in
# fuzz/artifacts/TARGET/ and the log in fuzz/TARGET.log. To replay it:
# fuzz/target/<host triple>/release/TARGET fuzz/artifacts/TARGET/crash-...
#
#   scripts/fuzz.sh                        # CI: every target, 20 s each
#   scripts/fuzz.sh json_body raft_frame   # some targets
#   scripts/fuzz.sh --build                # build every target, run none
#   scripts/fuzz.sh --shard 1/2            # every other target (CI's lanes)
#   FUZZ_SECS=1800 FUZZ_JOBS=2 scripts/fuzz.sh   # nightly: 30 min each,
#                                          # two processes (-fork=2)
#   scripts/fuzz.sh --seeds                # rewrite fuzz/seeds from their
#                                          # generator (fuzz/src/seeds.rs)
#   scripts/fuzz.sh --check-seeds          # fail if fuzz/seeds is stale
#
# Developers with cargo-fuzz 0.13 can also use `cargo fuzz run -s none
# TARGET fuzz/corpus/TARGET fuzz/seeds/TARGET`: the flags below are the
# ones it passes, so it reuses this script's build.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root/fuzz"

case "${1:-}" in
--seeds | --check-seeds)
  # The generator is built without instrumentation, apart from the
  # targets (host profile directory, not the triple's).
  check=()
  [ "$1" = --check-seeds ] && check=(--check)
  exec cargo run --quiet --locked --features seeds --bin make_seeds -- "${check[@]}"
  ;;
esac

all=(http_head offsets_and_cursors protocol_headers json_body raft_frame log_record
  checkpoint fork_material credentials)
# --build: build every target and run none (CI builds them while other
# lanes run, then fuzzes in two shards).
# --shard K/N: the Kth of N near-equal shares of every target.
build_only=
if [ "${1:-}" = --build ]; then
  build_only=1
  targets=("${all[@]}")
elif [ "${1:-}" = --shard ]; then
  [[ "${2:-}" =~ ^([0-9]+)/([0-9]+)$ ]] && [ "${BASH_REMATCH[1]}" -ge 1 ] &&
    [ "${BASH_REMATCH[1]}" -le "${BASH_REMATCH[2]}" ] ||
    { echo "fuzz.sh: --shard takes K/N with 1 <= K <= N, not '${2:-}'" >&2; exit 2; }
  shard=${BASH_REMATCH[1]} shards=${BASH_REMATCH[2]}
  shift 2
  targets=()
  for i in "${!all[@]}"; do
    [ $((i % shards)) = $((shard - 1)) ] && targets+=("${all[$i]}")
  done
else
  targets=("$@")
  [ ${#targets[@]} = 0 ] && targets=("${all[@]}")
fi
secs=${FUZZ_SECS:-20}
jobs=${FUZZ_JOBS:-1}

# What `cargo fuzz build -s none` (0.13.1, without -O) passes on Linux.
triple=$(rustc -vV | sed -n 's/^host: //p')
rustflags=" -Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4"
rustflags+=" -Cllvm-args=-sanitizer-coverage-inline-8bit-counters"
rustflags+=" -Cllvm-args=-sanitizer-coverage-pc-table"
rustflags+=" -Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing"
rustflags+=" -Cllvm-args=-simplifycfg-branch-fold-threshold=0"
rustflags+=" -Cllvm-args=-sanitizer-coverage-stack-depth -Cdebug-assertions -Ccodegen-units=1"
bins=()
for target in "${targets[@]}"; do bins+=(--bin "$target"); done
echo "== building the fuzz targets"
started=$(date +%s)
RUSTFLAGS="$rustflags" cargo build --release --locked --target "$triple" \
  --config 'profile.release.debug="line-tables-only"' "${bins[@]}"
echo "built in $(($(date +%s) - started)) s"
[ -n "$build_only" ] && exit 0
bin=target/$triple/release

for target in "${targets[@]}"; do
  log=$target.log
  mkdir -p "corpus/$target" "artifacts/$target"
  [ -d "seeds/$target" ] || { echo "fuzz.sh: no seeds in fuzz/seeds/$target" >&2; exit 1; }
  regressions=0
  if [ -d "regressions/$target" ]; then
    # Files (not a directory) make libFuzzer run each once and exit.
    mapfile -t inputs < <(find "regressions/$target" -type f | sort)
    regressions=${#inputs[@]}
    if [ "$regressions" -gt 0 ] && ! "$bin/$target" "${inputs[@]}" >"$log" 2>&1; then
      grep -E "panicked at|ERROR|SUMMARY|Running:" "$log" | tail -5
      echo "fuzz.sh: $target fails on an input of fuzz/regressions/$target (log: fuzz/$log)" >&2
      exit 1
    fi
  fi
  seeds=$(find "seeds/$target" -type f | wc -l)
  fork=()
  [ "$jobs" -gt 1 ] && fork=(-fork="$jobs")
  if ! "$bin/$target" -max_total_time="$secs" -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="artifacts/$target/" "${fork[@]}" "corpus/$target" "seeds/$target" \
    >"$log" 2>&1; then
    grep -E "panicked at|ERROR|SUMMARY|assertion" "$log" | head -8
    echo "fuzz.sh: $target crashed; the input is in fuzz/artifacts/$target/ (log: fuzz/$log):" >&2
    ls -t "artifacts/$target" | head -3 | sed "s|^|  fuzz/artifacts/$target/|" >&2
    exit 1
  fi
  # libFuzzer's last progress line holds the coverage reached.
  last=$(grep -E "cov: [0-9]+" "$log" | tail -1)
  cov=$(sed -nE 's/.*cov: ([0-9]+).*/\1/p' <<<"$last")
  ft=$(sed -nE 's/.*ft: ([0-9]+).*/\1/p' <<<"$last")
  runs=$(sed -nE 's/^stat::number_of_executed_units: ([0-9]+)/\1/p' "$log" | awk '{s+=$1} END {print s+0}')
  if [ "$runs" = 0 ]; then
    runs=$(sed -nE 's/^#([0-9]+).*/\1/p' "$log" | tail -1)
  fi
  corpus=$(find "corpus/$target" -type f | wc -l)
  echo "$target: ${regressions} regressions and ${seeds} seeds replayed; ${runs:-?} runs in ${secs} s;" \
    "cov ${cov:-?}, ft ${ft:-?}; working corpus ${corpus} inputs"
  rm -f "$log"
done
