"""Start mocapline services as child processes and stop them cleanly."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any


def port_free(port: int, kind: int = socket.SOCK_STREAM, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, kind) as s:
        if kind == socket.SOCK_STREAM:
            # As ZeroMQ and http.server bind: connections of a previous run in TIME_WAIT do not
            # make the port busy.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


# Ports handed out are drawn below the kernel's ephemeral range (32768-60999 by default), so the
# client connections every process opens cannot take one between its choice and its bind; and a
# port is never handed out twice by one process.
_FREE_RANGE = range(20000, 32768)
_handed_out: set[int] = set()


def _free_port(kind: int, companion: int = 0) -> int:
    """A free port; with ``companion``, ``port + companion`` is free and reserved too."""
    ports = range(_FREE_RANGE.start, _FREE_RANGE.stop - companion)
    for _ in range(1000):
        port = random.choice(ports)
        wanted = (port, port + companion) if companion else (port,)
        if all(p not in _handed_out and port_free(p, kind, "0.0.0.0") and port_free(p, _other(kind), "0.0.0.0")
               for p in wanted):
            _handed_out.update(wanted)
            return port
    raise RuntimeError("no free port found in 20000-32767")


def _other(kind: int) -> int:
    return socket.SOCK_DGRAM if kind == socket.SOCK_STREAM else socket.SOCK_STREAM


def free_tcp_port() -> int:
    """A port free for TCP (and UDP) on every local address, with port + 1000 free as well: a
    durable link's control endpoint (mocapline/core/reliable.py) is there."""
    from mocapline.core.reliable import ACK_PORT_OFFSET

    return _free_port(socket.SOCK_STREAM, ACK_PORT_OFFSET)


def free_udp_port() -> int:
    return _free_port(socket.SOCK_DGRAM)


@dataclass
class Service:
    name: str
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[str] | None = None
    pass_fds: tuple[int, ...] = ()  # inherited by the child (sockets a supervisor keeps open)
    restarts: int = 0
    command: str = ""  # the `mocapline` subcommand when it is not ``name`` (retarget workers)

    def start(self, stdout: Any = subprocess.PIPE, stderr: Any = None) -> None:
        env = {**os.environ, **self.env}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mocapline.cli", self.command or self.name, *self.args],
            stdout=stdout,
            stderr=stderr,
            text=True,
            env=env,
            pass_fds=self.pass_fds,
            # Own process group: a Ctrl-C in the terminal reaches the orchestrator only, which
            # then drains the stages in order instead of every stage dying at once.
            start_new_session=True,
        )

    def kill(self) -> None:
        """SIGKILL, as a crash would: no clean-up runs in the child."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self, timeout: float = 10.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def wait(self, timeout: float) -> int | None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            rc = self.proc.poll()
            if rc is not None:
                return rc
            time.sleep(0.05)
        return None
