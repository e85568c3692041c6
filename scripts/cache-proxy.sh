#!/usr/bin/env bash
# Readers through a real caching proxy (docs/caching.md): Debian's nginx
# with proxy_cache and proxy_cache_lock in front of `runnel serve`, keyed
# on the URL alone (the worst case for leaks: it ignores Authorization).
#
#   1. long-polls collapse: READERS long-poll readers of one public stream
#      behind the proxy, a writer at 10 events/s for SECS: every reader
#      receives every event once and in order, and the origin answers at
#      most 3 long-polls per event. With two sizes (smaller first), the
#      larger costs the origin at most 1.5x the long-polls per event of the
#      smaller: the origin's load does not grow with the readers.
#   2. catch-up storms collapse: STORM clients read a 10 MiB stream through
#      the proxy at once; the origin serves at most twice its bytes.
#   3. no leaks: a private stream read through the proxy by a reader with
#      the grant is never answered to a reader without it or with a grant
#      elsewhere, in either order; a public stream is answered from the
#      cache (so the cache is in the path).
#   4. re-creation: a stream deleted and created again under the same
#      name, read through the proxy, is never answered with the deleted
#      stream's bytes.
#
# Usage: scripts/cache-proxy.sh [path/to/runnel] [--only collapse|storm|leaks|recreate]...
#          [--break-cache] [--origin-no-cache]
#   READERS="1000 5000" SECS=60 STORM=1000 (defaults)
#
# --break-cache configures nginx as a careless CDN would: it ignores
# Cache-Control and keeps every 200 for 60 s. The leak and re-creation
# checks must then fail (CI shows they do). --origin-no-cache runs the
# origin with `--cache-control off`: the collapse check must then fail.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
runnel=$root/target/release/runnel
only=()
break_cache=
origin_flags=()
while [ $# -gt 0 ]; do
  case $1 in
    --only) only+=("$2"); shift 2 ;;
    --break-cache) break_cache=1; shift ;;
    --origin-no-cache) origin_flags+=(--cache-control off); shift ;;
    -*) echo "cache-proxy.sh: unknown flag $1" >&2; exit 2 ;;
    *) runnel=$1; shift ;;
  esac
done
readers=${READERS:-1000 5000}
secs=${SECS:-60}
storm=${STORM:-1000}
wants() { [ ${#only[@]} = 0 ] || printf '%s\n' "${only[@]}" | grep -qx "$1"; }

command -v nginx >/dev/null || { echo "cache-proxy.sh: nginx is not installed (scripts/install-test-deps.sh)" >&2; exit 1; }
work=$(mktemp -d /tmp/runnel-cache-proxy.XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  [ -f "$work/nginx.pid" ] && kill "$(cat "$work/nginx.pid")" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

fail() { echo "FAIL $*"; failures=$((failures + 1)); }
failures=0

# The two origins: open, and with access control (anyone may read pub/).
read -r open_port auth_port open_proxy auth_proxy < <("$root/scripts/free-ports.sh" 4)
token_hash() { printf '%s' "$1" | sha256sum | cut -d' ' -f1; }
cat >"$work/auth.toml" <<EOF
anonymous_grants = [{ prefix = "pub/", allow = ["read"] }]
[[tokens]]
name = "admin"
sha256 = "$(token_hash admin-token)"
grants = [{ prefix = "", allow = ["admin"] }]
[[tokens]]
name = "team-reader"
sha256 = "$(token_hash team-token)"
grants = [{ prefix = "team/", allow = ["read"] }]
[[tokens]]
name = "other-reader"
sha256 = "$(token_hash other-token)"
grants = [{ prefix = "other/", allow = ["read"] }]
EOF
"$runnel" serve --listen "127.0.0.1:$open_port" --data-dir "$work/open" --sync never \
  "${origin_flags[@]}" 2>"$work/open.log" &
pids+=($!)
"$runnel" serve --listen "127.0.0.1:$auth_port" --data-dir "$work/auth" --sync never \
  --auth-file "$work/auth.toml" "${origin_flags[@]}" 2>"$work/auth.log" &
pids+=($!)

# The proxy: one server block per origin.
if [ -n "$break_cache" ]; then
  caching="proxy_ignore_headers Cache-Control Expires Vary; proxy_cache_valid 200 60s;"
else
  caching="proxy_cache_bypass \$runnel_uncached; proxy_no_cache \$runnel_uncached;"
fi
location() {
  cat <<EOF
    location / {
      proxy_pass http://$1;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_read_timeout 120s;
      proxy_cache streams;
      proxy_cache_lock on;
      proxy_cache_lock_timeout 90s;
      proxy_cache_lock_age 90s;
      proxy_cache_use_stale updating;
      proxy_cache_background_update on;
      $caching
      add_header X-Cache \$upstream_cache_status always;
    }
EOF
}
# Requests the cache did not answer itself are logged (a failed storm
# prints them); CACHE_PROXY_ACCESS_LOG=FILE logs every request there.
if [ -n "${CACHE_PROXY_ACCESS_LOG:-}" ]; then
  access_log="$CACHE_PROXY_ACCESS_LOG timed"
else
  access_log="$work/misses.log timed if=\$runnel_not_hit"
fi
cat >"$work/nginx.conf" <<EOF
worker_processes 1;
pid $work/nginx.pid;
error_log $work/nginx-error.log warn;
user root;
worker_rlimit_nofile 65536;
events { worker_connections 30000; }
http {
  log_format timed "\$msec \$request_uri \$status \$upstream_cache_status \$request_time \$body_bytes_sent";
  map \$upstream_cache_status \$runnel_not_hit { HIT 0; default 1; }
  access_log $access_log;
  client_body_temp_path $work/client-body;
  proxy_temp_path $work/proxy-temp;
  fastcgi_temp_path $work/fastcgi;
  uwsgi_temp_path $work/uwsgi;
  scgi_temp_path $work/scgi;
  proxy_cache_path $work/cache levels=1:2 keys_zone=streams:64m max_size=4g inactive=10m use_temp_path=off;
  # Reads from -1 and now are never cached (docs/caching.md): they skip
  # the cache, and so its lock, which would hand them out one at a time.
  map \$arg_offset \$runnel_uncached { "-1" 1; "now" 1; "" 1; default 0; }
  upstream open_origin { server 127.0.0.1:$open_port; keepalive 512; }
  upstream auth_origin { server 127.0.0.1:$auth_port; keepalive 64; }
  server {
    listen 127.0.0.1:$open_proxy backlog=8192;
$(location open_origin)
  }
  server {
    listen 127.0.0.1:$auth_proxy backlog=8192;
$(location auth_origin)
  }
}
EOF
nginx -p "$work" -c "$work/nginx.conf" -t -q
nginx -p "$work" -c "$work/nginx.conf"
for port in "$open_port" "$auth_port"; do
  for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
    sleep 0.1
  done
done
open=http://127.0.0.1:$open_port
origin_auth=http://127.0.0.1:$auth_port
via_open=http://127.0.0.1:$open_proxy
via_auth=http://127.0.0.1:$auth_proxy
echo "origins $open $origin_auth, proxies $via_open $via_auth, work $work"

json() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))$2)" "$1"; }

# 1. Long-poll readers collapse.
if wants collapse; then
  per_event=()
  for n in $readers; do
    out=$work/fanout-$n.json
    "$runnel" bench fan-out --mode long-poll --target "$open" --via "$via_open" \
      --subscribers "$n" --writer-rate 10 --duration-secs "$secs" --json "$out" --quiet \
      --connect-timeout-secs 120
    events=$(json "$out" "['params']['events_written']")
    complete=$(json "$out" "['params']['readers_complete']")
    dup=$(json "$out" "['params']['duplicates']")
    gaps=$(json "$out" "['params']['gaps']")
    polls=$(json "$out" "['params']['origin_long_polls']")
    ratio=$(json "$out" "['params']['origin_long_polls_per_event']")
    p50=$(json "$out" "['latency']['p50_ms']")
    p99=$(json "$out" "['latency']['p99_ms']")
    echo "collapse: $n readers, $events events: $complete complete, $dup duplicates, $gaps gaps;" \
      "origin long-polls $polls ($ratio per event); delivery p50 $p50 ms p99 $p99 ms"
    [ "$events" -gt 0 ] || fail "collapse: no event was written"
    [ "$complete" = "$n" ] || fail "collapse: $complete of $n readers got every event once, in order"
    python3 -c "import sys; sys.exit(0 if float('$ratio') <= 3 else 1)" ||
      fail "collapse: the origin answered $ratio long-polls per event with $n readers (at most 3)"
    per_event+=("$ratio")
  done
  if [ ${#per_event[@]} = 2 ]; then
    python3 - "${per_event[@]}" <<'EOF' || fail "collapse: the origin answered more than 1.5x the long-polls per event with more readers"
import sys
small, large = (max(float(x), 0.01) for x in sys.argv[1:])
print(f"collapse: origin long-polls per event {small:.2f} and {large:.2f}, ratio {large / small:.2f}")
sys.exit(0 if large / small <= 1.5 else 1)
EOF
  fi
fi

# 2. A catch-up storm through the proxy.
if wants storm; then
  out=$work/storm.json
  "$runnel" bench replay --target "$open" --via "$via_open" --clients "$storm" \
    --per-client-stream false --pre-events 10 --event-bytes 1048576 --json "$out" --quiet
  stream_bytes=$((10 * 1048576))
  ok=$(json "$out" "['counts']['ok']")
  per_client=$(json "$out" "['params']['bytes_per_client']")
  origin_bytes=$(json "$out" "['params']['origin_read_bytes']")
  echo "storm: $storm clients, $ok read it all ($per_client bytes each); origin served $origin_bytes bytes" \
    "($(python3 -c "print(round($origin_bytes / $stream_bytes, 2))")x the stream)"
  [ "$ok" = "$storm" ] || fail "storm: $ok of $storm clients read the stream"
  [ "$per_client" = "$stream_bytes" ] || fail "storm: a client read $per_client bytes of $stream_bytes"
  # The origin served the stream at least once, or its count is wrong.
  [ "$origin_bytes" -ge "$stream_bytes" ] 2>/dev/null ||
    fail "storm: the origin's count of bytes served ($origin_bytes) is below the stream's"
  if [ "$origin_bytes" -gt $((2 * stream_bytes)) ] 2>/dev/null; then
    fail "storm: the origin served $origin_bytes bytes (at most $((2 * stream_bytes)))"
    echo "storm: what the cache did not answer itself (status, cache status, bytes: count):"
    grep -F "/rp-" "$work/misses.log" 2>/dev/null | grep -v "offset=-1" |
      awk '{print $3, $4, $6}' | sort | uniq -c | sort -rn | head -20
  fi
fi

# get BASE PATH [TOKEN]: the status, then the body, of a GET through BASE.
get() {
  local auth=()
  [ -n "${3:-}" ] && auth=(-H "authorization: Bearer $3")
  curl -s -o "$work/body" -w '%{http_code}' "${auth[@]}" "$1$2"
}
# put/post through the origin, as the admin.
admin() { curl -sf -o /dev/null -D "$work/headers" -H "authorization: Bearer admin-token" "$@"; }
next_offset() { tr -d '\r' <"$work/headers" | awk -F': ' 'tolower($1)=="stream-next-offset" {print $2}'; }

# 3. Private streams never leak through the cache, in either order.
if wants leaks; then
  secret=secret-$RANDOM$RANDOM
  admin -X PUT -H 'content-type: text/plain' --data "$secret" "$origin_auth/v1/stream/team/a"
  tail_a=$(next_offset)
  start_a="${tail_a%%_*}_0000000000000000"
  admin -X PUT -H 'content-type: text/plain' --data "$secret" "$origin_auth/v1/stream/team/b"
  tail_b=$(next_offset)
  start_b="${tail_b%%_*}_0000000000000000"
  admin -X PUT "$origin_auth/v1/stream/team/a/\$snapshot/$tail_a" --data "$secret"
  leaked() { grep -q "$secret" "$work/body"; }
  # Order A: the reader with the grant first, then the others.
  for path in "/v1/stream/team/a?offset=$start_a" "/v1/stream/team/a?offset=-1" \
    "/v1/stream/team/a?cursor=1&live=long-poll&offset=$start_a" \
    "/v1/stream/team/a/\$snapshot/$tail_a" "/v1/stream/team/a/\$bootstrap"; do
    status=$(get "$via_auth" "$path" team-token)
    [ "$status" = 200 ] && leaked || fail "leaks: the reader with the grant got $status for $path"
    for caller in "" other-token; do
      status=$(get "$via_auth" "$path" "$caller")
      if leaked; then fail "leaks: ${caller:-a reader without credentials} got the private bytes of $path ($status)"; fi
      case $status in 401 | 403) ;; *) fail "leaks: ${caller:-no credentials} got $status for $path" ;; esac
    done
  done
  # Order B: the others first, then the reader, then the others again.
  path="/v1/stream/team/b?offset=$start_b"
  for caller in "" other-token team-token "" other-token; do
    status=$(get "$via_auth" "$path" "$caller")
    if [ "$caller" = team-token ]; then
      [ "$status" = 200 ] && leaked || fail "leaks: the reader with the grant got $status (order B)"
    elif leaked; then
      fail "leaks: ${caller:-a reader without credentials} got the private bytes (order B, $status)"
    fi
  done
  # The cache is in the path: a public page is answered from it.
  admin -X PUT -H 'content-type: text/plain' --data "news" "$origin_auth/v1/stream/pub/news"
  pub_start="$(next_offset | cut -d_ -f1)_0000000000000000"
  get "$via_auth" "/v1/stream/pub/news?offset=$pub_start" >/dev/null
  hit=$(curl -s -o /dev/null -D - "$via_auth/v1/stream/pub/news?offset=$pub_start" | tr -d '\r' |
    awk -F': ' 'tolower($1)=="x-cache" {print $2}')
  [ "$hit" = HIT ] || fail "leaks: the public page was not answered from the cache (X-Cache: $hit): the cache is not in the path"
  echo "leaks: checked in both orders"
fi

# 4. A stream deleted and created again is never answered with the old
# one's bytes.
if wants recreate; then
  s=$open/v1/stream/reborn
  curl -sf -o /dev/null -X PUT -H 'content-type: text/plain' --data "old-incarnation" "$s"
  # Readers of the old stream fill the cache: from -1, and its pages.
  read_all() { # BASE PATH: follows offsets to the tail, prints the bytes
    local offset=-1 body=
    for _ in $(seq 50); do
      curl -s -o "$work/page" -D "$work/page-headers" "$1$2?offset=$offset"
      body=$body$(cat "$work/page")
      offset=$(tr -d '\r' <"$work/page-headers" | awk -F': ' 'tolower($1)=="stream-next-offset" {print $2}')
      grep -qi '^stream-up-to-date: true' "$work/page-headers" && break
    done
    printf '%s' "$body"
  }
  for _ in 1 2; do read_all "$via_open" /v1/stream/reborn >/dev/null; done
  curl -sf -o /dev/null -X DELETE "$s"
  curl -sf -o /dev/null -X PUT -H 'content-type: text/plain' --data "new" "$s"
  got=$(read_all "$via_open" /v1/stream/reborn)
  [ "$got" = new ] || fail "recreate: a reader of the re-created stream read '$got' through the cache"
  echo "recreate: the re-created stream read '$got'"
fi

if [ "$failures" -gt 0 ]; then
  echo "cache-proxy: $failures checks failed"
  exit 1
fi
echo "cache-proxy: all checks passed"
