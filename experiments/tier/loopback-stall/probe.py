#!/usr/bin/env python3
"""Asks every running `tailtrim serve` on loopback for a missing key, each 100 ms, and logs
the answers slower than 15 ms: a server whose workers stall answers its probe late.

    probe.py LOG SECONDS

The servers are found by their listening ports (`ss -tlnp`) and command lines; one probe
connection each (it lands on one of the server's workers, as any client connection does).
Log lines: `probe PID PORT` when a server is found, `slow UNIX_SECONDS PORT MS` per late
answer.
"""

import re
import socket
import subprocess
import sys
import time


def servers():
    """{pid: [port, ...]} of the loopback listeners whose command line holds `serve`."""
    found = {}
    listing = subprocess.run(["ss", "-tlnpH"], capture_output=True, text=True).stdout
    for line in listing.splitlines():
        match = re.search(r"127\.0\.0\.1:(\d+).*pid=(\d+)", line)
        if not match:
            continue
        port, pid = int(match.group(1)), int(match.group(2))
        try:
            command = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if b"serve" in command:
            found.setdefault(pid, []).append(port)
    return found


def connect(port):
    """A probe connection to `port` if it speaks memcached's text protocol, else None."""
    try:
        conn = socket.create_connection(("127.0.0.1", port), timeout=1)
        conn.settimeout(2)
        conn.sendall(b"version\r\n")
        if conn.recv(100).startswith(b"VERSION"):
            return conn
        conn.close()
    except OSError:
        pass
    return None


def ask(conn):
    """One `get` of a missing key; raises OSError when the connection is gone."""
    conn.sendall(b"get __probe\r\n")
    reply = b""
    while not reply.endswith(b"END\r\n"):
        chunk = conn.recv(100)
        if not chunk:
            raise OSError("closed")
        reply += chunk


def main():
    log = open(sys.argv[1], "w")
    deadline = time.time() + float(sys.argv[2])
    conns = {}
    while time.time() < deadline:
        if len(conns) < 8:
            for pid, ports in servers().items():
                for port in ports:
                    if port not in conns and (conn := connect(port)):
                        conns[port] = conn
                        print("probe", pid, port, file=log, flush=True)
        for port, conn in list(conns.items()):
            start = time.time()
            try:
                ask(conn)
            except OSError:
                del conns[port]
                continue
            took = time.time() - start
            if took > 0.015:
                print(f"slow {start:.6f} {port} {took * 1e3:.1f}", file=log, flush=True)
        time.sleep(0.1)


if __name__ == "__main__":
    main()
