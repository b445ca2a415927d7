"""Start mocapline services as child processes and stop them cleanly."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mocapline.core.lifecycle import supervised_env


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
        env = {**os.environ, **self.env, **supervised_env()}  # it stops when this process is gone
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

    def terminate(self) -> None:
        """SIGTERM to the service's process group (it started its own session): it stops cleanly."""
        if self.proc is not None and self.proc.poll() is None:
            signal_group(self.proc.pid, signal.SIGTERM)

    def stop(self, timeout: float = 10.0) -> int | None:
        if self.proc is None:
            return None
        self.terminate()
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            signal_group(self.proc.pid, signal.SIGKILL)
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


def signal_group(pid: int, sig: int) -> None:
    """Signal the process group led by ``pid`` (a child started with its own session), or the
    process alone when it leads none; silently nothing when it is gone."""
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def last_json_line(path: Path) -> dict[str, Any] | None:
    """A service's final counts: the last JSON line of its output (stages and the sim print one as
    they exit), or None."""
    try:
        lines = [line for line in path.read_text().splitlines() if line.startswith("{")]
    except OSError:
        return None
    try:
        return json.loads(lines[-1]) if lines else None
    except ValueError:
        return None


def stop_all(procs: list[subprocess.Popen[Any]], timeout: float) -> None:
    """SIGTERM every process (and its group) at once, wait for all within one ``timeout``, then
    SIGKILL what is left: stopping N services costs one timeout, not N."""
    for proc in procs:
        if proc.poll() is None:
            signal_group(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for proc in procs:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            signal_group(proc.pid, signal.SIGKILL)
            proc.wait()


def child_pids(parent: int | None = None) -> list[int]:
    """Live direct children of ``parent`` (default: this process), from /proc (Linux). The safety
    net of the tools that start services: a child started just as a Ctrl-C arrived is found here
    even when its Popen object never reached the caller."""
    parent = os.getpid() if parent is None else parent
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 1 and int(fields[1]) == parent and fields[0] != "Z":
            out.append(int(stat.parent.name))
    return out


def kill_children(timeout: float = 3.0) -> list[int]:
    """SIGTERM, then SIGKILL, every live direct child (and its group); returns their PIDs."""
    pids = child_pids()
    for pid in pids:
        signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(process_alive(pid) for pid in pids):
        time.sleep(0.05)
    for pid in pids:
        if process_alive(pid):
            signal_group(pid, signal.SIGKILL)
    for pid in pids:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
    return pids


def _state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def process_alive(pid: int) -> bool:
    return _state(pid) not in (None, "Z")


def process_answers(pid: int) -> bool:
    """Alive and not stopped (SIGSTOP, a debugger): a process that can answer a request."""
    return _state(pid) not in (None, "Z", "T", "t")


@dataclass(frozen=True)
class PortOwner:
    pid: int
    command: str  # e.g. "mocapline streamer" or "nats-server"


def port_owners(port: int, kind: int = socket.SOCK_STREAM) -> list[PortOwner]:
    """The processes holding a local TCP (listening) or UDP port, from /proc/net and each process's
    open sockets (Linux; processes of other users are not visible and not listed)."""
    inodes: set[str] = set()
    tables = ("tcp", "tcp6") if kind == socket.SOCK_STREAM else ("udp", "udp6")
    for table in tables:
        try:
            lines = Path(f"/proc/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if len(cols) < 10 or int(cols[1].rsplit(":", 1)[1], 16) != port:
                continue
            if kind == socket.SOCK_STREAM and cols[3] != "0A":  # LISTEN
                continue
            inodes.add(cols[9])
    if not inodes:
        return []
    wanted = {f"socket:[{inode}]" for inode in inodes}
    owners = []
    for proc_dir in Path("/proc").glob("[0-9]*"):
        if holds_any(proc_dir / "fd", wanted):
            owners.append(PortOwner(int(proc_dir.name), describe_process(int(proc_dir.name))))
    return owners


def holds_any(fd_dir: Path, links: set[str]) -> bool:
    """Whether a process's fd folder (``/proc/PID/fd``) holds one of ``links`` (``socket:[inode]``)."""
    try:
        fds = list(fd_dir.iterdir())
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(fd) in links:
                return True
        except OSError:  # closed meanwhile
            continue
    return False


def describe_process(pid: int) -> str:
    """'mocapline <subcommand>' for our services, else the program's name."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    args = [a.decode(errors="replace") for a in argv if a]
    if "mocapline.cli" in args:
        rest = args[args.index("mocapline.cli") + 1:]
        return "mocapline " + (rest[0] if rest else "")
    for k, arg in enumerate(args):
        if arg.endswith("/mocapline") or arg == "mocapline":
            return "mocapline " + (args[k + 1] if k + 1 < len(args) else "")
    return Path(args[0]).name if args else "?"


def busy_port_message(port: int, kind: int = socket.SOCK_STREAM, what: str = "") -> str:
    """'TCP port 5555 (what) is in use by PID 123 (mocapline streamer)' - owners named when visible."""
    label = ("TCP" if kind == socket.SOCK_STREAM else "UDP") + f" port {port}" + (f" ({what})" if what else "")
    owners = port_owners(port, kind)
    if not owners:
        return f"{label} is in use"
    return f"{label} is in use by " + ", ".join(f"PID {o.pid} ({o.command})" for o in owners)
