#!/usr/bin/env bash
# Prints N loopback ports, each with its successor free too, all distinct,
# below the kernel's ephemeral range (32768 and up here): a port from that
# range can be taken meanwhile as the source port of some connection (a
# load test's thousands of clients, a node's connection to a peer that has
# not started yet), and the server meant for it then cannot bind it.
#
# Usage: scripts/free-ports.sh N
set -euo pipefail
python3 - "${1:?usage: free-ports.sh N}" <<'PY'
import random, socket, sys
wanted, taken, chosen = int(sys.argv[1]), set(), []
while len(chosen) < wanted:
    port = random.randrange(20000, 32000)
    if {port, port + 1} & taken:
        continue
    try:
        for p in (port, port + 1):
            s = socket.socket(); s.bind(("127.0.0.1", p)); s.close()
    except OSError:
        continue
    taken |= {port, port + 1}
    chosen.append(port)
print(" ".join(map(str, chosen)))
PY
