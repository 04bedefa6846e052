"""Fixtures: boot a real `tailtrim serve` on a free port for the pymemcache suite.

Environment:
  TAILTRIM_BIN         server binary (default target/release/tailtrim); a path to a
                       memcached binary runs the suite against stock memcached instead.
  TAILTRIM_SERVE_ARGS  extra server arguments, e.g. "--dispatch size-aware".
"""

import os
import shlex
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_command(port: int) -> list:
    binary = os.environ.get("TAILTRIM_BIN") or str(REPO / "target" / "release" / "tailtrim")
    common = ["-p", str(port), "-U", "0", "-l", "127.0.0.1", "-m", "64", "-I", "1m", "-t", "2"]
    if "memcached" in Path(binary).name:
        args = [binary] + common + (["-u", "root"] if os.geteuid() == 0 else [])
    else:
        args = [binary, "serve"] + common
    return args + shlex.split(os.environ.get("TAILTRIM_SERVE_ARGS", ""))


def serving(command, port):
    """Starts `command`, waits until it accepts on `port`, yields (host, port), kills it."""
    proc = subprocess.Popen(command)
    deadline = time.monotonic() + 10
    while True:
        if proc.poll() is not None:
            pytest.fail(f"server exited early with status {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                proc.kill()
                pytest.fail("server did not accept connections within 10 s")
            time.sleep(0.05)
    yield ("127.0.0.1", port)
    proc.kill()
    proc.wait()


@pytest.fixture(scope="session")
def server():
    """(host, port) of a running server; killed at the end of the session."""
    port = free_port()
    yield from serving(server_command(port), port)


@pytest.fixture
def prefix():
    """A key prefix unique to one test, so that tests never see each other's keys."""
    return "t" + uuid.uuid4().hex[:12] + "_"
