#!/usr/bin/env bash
# Fuzzes what untrusted bytes reach, on the stable toolchain (cargo-fuzz
# with `-s none`: libFuzzer's coverage guidance, no sanitizer): the direct
# path's request reader, offsets/cursors/queries/stream paths, the
# protocol's headers, JSON bodies, the Raft transport's request decoder,
# and log entries, checkpoints and fork material as recovery and peers
# decode them. First every input in fuzz/regressions/TARGET (inputs that
# once crashed) is replayed, then each target runs for FUZZ_SECS seconds.
# Exits non-zero on any crash; the input is left in fuzz/artifacts/TARGET.
#
#   scripts/fuzz.sh                 # every target, 20 s each
#   FUZZ_SECS=600 scripts/fuzz.sh json_body
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
version=0.13.1
if ! cargo fuzz --version 2>/dev/null | grep -q "$version"; then
  echo "== installing cargo-fuzz $version"
  cargo install --quiet --locked cargo-fuzz --version "$version"
fi
targets=("$@")
if [ ${#targets[@]} = 0 ]; then
  targets=(http_head offsets_and_cursors protocol_headers json_body raft_frame log_record credentials)
fi
secs=${FUZZ_SECS:-20}
echo "== building the fuzz targets"
cargo fuzz build -s none
for target in "${targets[@]}"; do
  if [ -d "fuzz/regressions/$target" ]; then
    if ! cargo fuzz run -s none "$target" "fuzz/regressions/$target" -- -runs=0 \
      >"fuzz/$target.log" 2>&1; then
      grep -E "panicked at|SUMMARY" "fuzz/$target.log" | head -5
      echo "fuzz.sh: $target fails on an input of fuzz/regressions/$target" >&2
      exit 1
    fi
    echo "$target: $(ls "fuzz/regressions/$target" | wc -l) regression inputs pass"
  fi
  echo "== fuzzing $target for ${secs}s"
  if ! cargo fuzz run -s none "$target" -- -max_total_time="$secs" -rss_limit_mb=2048 \
    >"fuzz/$target.log" 2>&1; then
    grep -E "panicked at|ERROR|SUMMARY" "fuzz/$target.log" | head -5
    echo "fuzz.sh: $target crashed; the input is in fuzz/artifacts/$target (log: fuzz/$target.log)" >&2
    exit 1
  fi
  grep -E "^Done" "fuzz/$target.log"
  rm -f "fuzz/$target.log"
done
