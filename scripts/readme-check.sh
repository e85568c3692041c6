#!/usr/bin/env bash
# Runs README.md's commands as a newcomer would and checks what they print.
#
# - The first command of README's first block (`cargo run ... serve`) runs
#   exactly as printed, from the repository's root. After scripts/test.sh
#   has built everything it must compile nothing (the binary CI tested is
#   the one it runs): a "Compiling" line fails the check. It must serve
#   http://127.0.0.1:4437 within a minute of cargo running it (cargo may
#   first wait on another cargo command's lock on the target directory).
# - The second command must be what .ci/run runs.
# - The lines of "## Try it" run against it one by one; a line whose
#   comment looks like output (starting with `[`, `{` or `"`) must print
#   exactly that. The live tail (`live=sse`) runs for a few seconds while
#   one more message is appended; it must deliver it.
# - The server then stops on SIGTERM, cleanly.
#
# Usage: scripts/readme-check.sh   (needs curl; port 4437 free; leaves no
# ./runnel-data behind)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
fail() {
  echo "readme-check: $*" >&2
  exit 1
}

# The fenced sh blocks of README.md, as "BLOCK<TAB>LINE" (1-based block).
blocks=$(awk '/^```sh$/ { n++; inside = 1; next } /^```$/ { inside = 0; next } inside { print n "\t" $0 }' README.md)
first_block=$(printf '%s\n' "$blocks" | awk -F'\t' '$1 == 1 { print $2 }')
command_of() { sed -e 's/[[:space:]]*#.*$//' <<<"$1"; }
serve=$(command_of "$(sed -n 1p <<<"$first_block")")
tests=$(command_of "$(sed -n 2p <<<"$first_block")")
[[ $serve == *" serve"* ]] || fail "README's first command does not serve: '$serve'"
grep -qx "exec $tests" .ci/run || fail "README's test command '$tests' is not what .ci/run runs"
try=$(awk '/^## Try it/ { on = 1; next } /^## / { on = 0 } on && /^```sh$/ { inside = 1; next } on && /^```$/ { exit } inside' README.md)
[ -n "$try" ] || fail "README has no '## Try it' block"

[ ! -e runnel-data ] || fail "./runnel-data exists already; the first command must start from nothing"
work=$(mktemp -d)
server_pid=
cleanup() {
  if [ -n "$server_pid" ]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$root/runnel-data" "$work"
}
trap cleanup EXIT

echo "readme-check: running README's first command: $serve"
started=$(date +%s.%N)
bash -c "exec $serve" >"$work/serve.out" 2>"$work/serve.err" &
server_pid=$!
# Cargo may first wait for another cargo command in the same target
# directory to finish (CI's lanes run several); the minute to serve
# starts once cargo runs the binary. A wait past 10 minutes fails too.
lock_deadline=$((SECONDS + 600))
deadline=
until curl -sf -o /dev/null http://127.0.0.1:4437/health; do
  if ! kill -0 "$server_pid" 2>/dev/null; then
    cat "$work/serve.err" >&2
    fail "the server exited before it served"
  fi
  if grep -q "Compiling" "$work/serve.err"; then
    grep "Compiling" "$work/serve.err" | head -5 >&2
    fail "README's command compiled crates again: the tested build is not the one it runs"
  fi
  if [ -z "$deadline" ] && grep -q "Running \`" "$work/serve.err"; then
    deadline=$((SECONDS + ${README_SERVE_WAIT_SECS:-60}))
  fi
  [ "$SECONDS" -lt "${deadline:-$lock_deadline}" ] ||
    { tail -20 "$work/serve.err" >&2; fail "nothing served on 127.0.0.1:4437"; }
  sleep 0.2
done
echo "readme-check: serving $(python3 -c "import time; print(f'{time.time() - $started:.1f}')") s after the command"
if grep -q "Compiling" "$work/serve.err"; then
  grep "Compiling" "$work/serve.err" | head -5 >&2
  fail "README's command compiled crates again: the tested build is not the one it runs"
fi

# The "Try it" lines, in order.
n=0
while IFS= read -r line; do
  [ -n "$line" ] || continue
  n=$((n + 1))
  cmd=$(command_of "$line")
  expected=$(sed -n 's/^[^#]*#[[:space:]]*//p' <<<"$line")
  if [[ $cmd == *"live=sse"* ]]; then
    # The live tail: a message appended while it runs must come through.
    (timeout 4 bash -c "$cmd" >"$work/sse.out" 2>"$work/sse.err" || true) &
    tail_pid=$!
    sleep 1
    curl -sf -X POST localhost:4437/v1/stream/chat -H 'content-type: application/json' \
      -d '{"text":"live"}' || fail "appending during the live tail failed"
    wait "$tail_pid"
    grep -q '{"text":"live"}' "$work/sse.out" ||
      { cat "$work/sse.out" "$work/sse.err" >&2; fail "line $n: the live tail delivered nothing: $cmd"; }
    echo "readme-check: line $n ok (the live tail delivered an appended message)"
    continue
  fi
  printed=$(bash -c "$cmd" 2>"$work/line.err") || { cat "$work/line.err" >&2; fail "line $n failed: $cmd"; }
  if [[ $expected == [\[\{\"]* ]]; then
    [ "$printed" = "$expected" ] || fail "line $n printed '$printed', README shows '$expected': $cmd"
    echo "readme-check: line $n ok (printed $printed, as README shows)"
  else
    echo "readme-check: line $n ok"
  fi
done <<<"$try"
[ "$n" -ge 4 ] || fail "only $n 'Try it' lines ran"

kill -TERM "$server_pid"
status=0
wait "$server_pid" || status=$?
server_pid=
[ "$status" = 0 ] || { tail -5 "$work/serve.err" >&2; fail "the server exited with $status on SIGTERM"; }
echo "readme-check: README's commands work as printed"
