"""Start mocapline services as child processes and stop them cleanly."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field


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


def free_tcp_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Service:
    name: str
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[str] | None = None

    def start(self, stdout: int | None = subprocess.PIPE, stderr: int | None = None) -> None:
        env = {**os.environ, **self.env}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mocapline.cli", self.name, *self.args],
            stdout=stdout,
            stderr=stderr,
            text=True,
            env=env,
            # Own process group: a Ctrl-C in the terminal reaches the orchestrator only, which
            # then drains the stages in order instead of every stage dying at once.
            start_new_session=True,
        )

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
