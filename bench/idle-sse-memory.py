#!/usr/bin/env python3
"""Resident memory a runnel server spends per idle SSE connection (or
long-poll, with `long-poll` as the second argument).

Starts `runnel serve` on a free port, opens 1,000 warm-up connections,
then 10,000 idle readers on one stream, and reports the growth of the
server's VmRSS divided by 10,000.

    bench/idle-sse-memory.py [path/to/runnel] [sse|long-poll]
"""
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time

binary = sys.argv[1] if len(sys.argv) > 1 else "target/release/runnel"
live = sys.argv[2] if len(sys.argv) > 2 else "sse"
if live not in ("sse", "long-poll"):
    sys.exit(f"unknown live mode {live!r}: sse or long-poll")
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
probe = socket.socket()
probe.bind(("127.0.0.1", 0))
port = probe.getsockname()[1]
probe.close()
data = tempfile.mkdtemp()
server = subprocess.Popen([binary, "serve", "--listen", f"127.0.0.1:{port}", "--data-dir", data],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
try:
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port)).close()
            break
        except OSError:
            time.sleep(0.05)

    def rss_kib():
        with open(f"/proc/{server.pid}/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmRSS"))

    def connect(request):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(request)
        return s

    create = connect(b"PUT /v1/stream/idle HTTP/1.1\r\nhost: x\r\ncontent-type: text/plain\r\ncontent-length: 0\r\n\r\n")
    create.recv(1000)
    sse = f"GET /v1/stream/idle?offset=now&live={live} HTTP/1.1\r\nhost: x\r\n\r\n".encode()
    held = [connect(sse) for _ in range(1000)]
    time.sleep(1)
    before = rss_kib()
    held += [connect(sse) for _ in range(10000)]
    time.sleep(2)
    after = rss_kib()
    print(f"RSS {before} KiB with 1,000 readers, {after} KiB with 11,000: "
          f"{(after - before) / 10000:.2f} KiB per idle {live} connection")
finally:
    server.kill()
    server.wait()
