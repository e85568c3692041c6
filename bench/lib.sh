# Helpers the bench scripts share; source it: . "$(dirname "$0")/lib.sh"

# wait_port PORT: waits up to 30 s for something to listen on
# 127.0.0.1:PORT; fails otherwise.
wait_port() {
  for _ in $(seq 300); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "nothing listens on 127.0.0.1:$1" >&2
  return 1
}

# create_wrk_streams PORT N: creates the text streams wrk-0 .. wrk-(N-1)
# that bench/wrk-append.lua appends to.
create_wrk_streams() {
  for i in $(seq 0 $(($2 - 1))); do
    curl -s -o /dev/null -X PUT -H 'content-type: text/plain' "http://127.0.0.1:$1/v1/stream/wrk-$i"
  done
}
