"""Several hosts on one machine, for the `hosts` tests: network namespaces joined by a bridge.

Each host is a network namespace with ``lo`` up and one interface, ``eth0``, at 10.200.0.<k>/24.
Its cable is a veth pair whose other end sits in a namespace of its own, the switch, enslaved to
the bridge there; the root namespace gets no interface and no address, so nothing outside the
namespaces is ever reached. Pulling a host's cable (:meth:`Hosts.cut`) sets the switch's end of
its veth down: the host keeps its address and sees no error, its packets simply go nowhere, as
with a cable pulled at the switch.

Namespaces are named ``mlh<pid>-<host>`` and the run's pid is written to a pid file: a run killed
before it could clean up leaves namespaces whose pid is no longer alive, and the next run removes
them (with the processes still in them) before it starts. Needs root and ``ip netns``;
:func:`unavailable` says in one line why not.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any, TypeVar

T = TypeVar("T")

PREFIX = "mlh"
SUBNET = "10.200.0"
PID_DIR = Path("/run/mocapline-hosts")
CLONE_NEWNET = 0x40000000


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=20)


def _identity(pid: int) -> str:
    """``pid`` and its start time (a pid reused by another process has another start time)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return f"{pid} {stat.rpartition(')')[2].split()[19]}"


def unavailable() -> str:
    """Why namespaces cannot be made here ('' when they can)."""
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2)"
    if os.geteuid() != 0:
        return "not root: network namespaces need root"
    probe = f"{PREFIX}{os.getpid()}-probe"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip()}"
    try:
        veth = _ip("-n", probe, "link", "add", "name", "a", "type", "veth", "peer", "name", "b", check=False)
        if veth.returncode != 0:
            return f"no veth pairs: {veth.stderr.strip()}"
        bridge = _ip("-n", probe, "link", "add", "name", "br", "type", "bridge", check=False)
        if bridge.returncode != 0:
            return f"no bridges: {bridge.stderr.strip()}"
    finally:
        _ip("netns", "del", probe, check=False)
    return ""


def _kill_namespace(name: str) -> None:
    """Kill every process left in namespace ``name`` (ours: started in it by a run of this
    harness), then remove the namespace."""
    pids = _ip("netns", "pids", name, check=False).stdout.split()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)
    _ip("netns", "del", name, check=False)


def clean_stale() -> list[str]:
    """Remove the namespaces of runs whose process is gone (killed before their cleanup)."""
    removed = []
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if not name.startswith(PREFIX):
            continue
        pid_text = name[len(PREFIX):].partition("-")[0]
        if not pid_text.isdigit():
            continue
        pid = int(pid_text)
        pid_file = PID_DIR / f"{pid}.pid"
        recorded = pid_file.read_text().strip() if pid_file.exists() else ""
        if recorded and recorded == _identity(pid):
            continue  # a run still going
        _kill_namespace(name)
        removed.append(name)
        pid_file.unlink(missing_ok=True)
    return removed


class Host:
    """One namespace with its address; started processes are tracked and stopped by :class:`Hosts`."""

    def __init__(self, hosts: Hosts, name: str, index: int, generation: int = 0) -> None:
        self.hosts = hosts
        self.name = name
        self.index = index
        self.generation = generation  # reboots so far
        self.netns = f"{hosts.tag}-{name}"
        self.address = f"{SUBNET}.{index}"
        self.veth = f"v{index}r{generation}"  # the switch's end of this host's cable

    def start(self, argv: Sequence[str], *, log: Path | None = None, env: dict[str, str] | None = None,
              name: str = "") -> subprocess.Popen[bytes]:
        """Start ``argv`` in this host (its own process group), output to ``log``."""
        out: IO[Any] | int = open(log, "ab") if log is not None else subprocess.DEVNULL  # noqa: SIM115
        try:
            proc = subprocess.Popen(["ip", "netns", "exec", self.netns, *argv], stdout=out,
                                    stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
                                    start_new_session=True)
        finally:
            if not isinstance(out, int):
                out.close()
        self.hosts.procs.append((name or argv[0], proc))
        return proc

    def run(self, argv: Sequence[str], timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["ip", "netns", "exec", self.netns, *argv], capture_output=True, text=True,
                              timeout=timeout)

    def call(self, fn: Callable[[], T], timeout: float = 120.0) -> T:
        """``fn()`` in a thread of this process that has entered the host's network namespace (its
        sockets are this host's), so a test talks to the hosts without an address of its own."""
        result: list[Any] = []
        error: list[BaseException] = []

        def body() -> None:
            try:
                fd = os.open(f"/run/netns/{self.netns}", os.O_RDONLY)
                try:
                    if ctypes.CDLL(None, use_errno=True).setns(fd, CLONE_NEWNET) != 0:
                        raise OSError(ctypes.get_errno(), f"setns {self.netns}")
                finally:
                    os.close(fd)
                result.append(fn())
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                error.append(exc)

        thread = threading.Thread(target=body, name=f"in-{self.name}", daemon=True)
        thread.start()
        thread.join(timeout)
        if thread.is_alive():
            raise TimeoutError(f"{self.name}: call did not return within {timeout} s")
        if error:
            raise error[0]
        return result[0]


class Hosts:
    """A switch and hosts on it; see the module docstring. Use as a context manager."""

    def __init__(self) -> None:
        self.tag = f"{PREFIX}{os.getpid()}"
        self.switch = f"{self.tag}-sw"
        self.hosts: dict[str, Host] = {}
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.pid_file = PID_DIR / f"{os.getpid()}.pid"

    def __enter__(self) -> Hosts:
        clean_stale()
        PID_DIR.mkdir(parents=True, exist_ok=True)
        self.pid_file.write_text(_identity(os.getpid()))
        try:
            _kill_namespace(self.switch)  # our own pid reused: nothing of ours can be in it
            _ip("netns", "add", self.switch)
            _ip("-n", self.switch, "link", "add", "name", "br0", "type", "bridge")
            _ip("-n", self.switch, "link", "set", "br0", "up")
            _ip("-n", self.switch, "link", "set", "lo", "up")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def add(self, name: str) -> Host:
        return self._plug(Host(self, name, len(self.hosts) + 2))

    def reboot(self, name: str) -> Host:
        """``name`` powered off and on: its processes die unheard (its cable is pulled first, so
        not even its kernel says goodbye), its namespace is made anew (same address, a kernel
        that knows no connection), the cable plugged back in. Start its processes again."""
        old = self.hosts[name]
        self.cut(name)
        mac = _ip("-n", old.netns, "-br", "link", "show", "eth0").stdout.split()[2]
        _kill_namespace(old.netns)  # its processes, then it (and with it both ends of its cable)
        # The kernel removes the old cable a little later: the new one gets a name of its own, and
        # the old hardware address, so the others' ARP entries stay right, as after a real reboot.
        return self._plug(Host(self, name, old.index, generation=old.generation + 1), mac=mac)

    def _plug(self, host: Host, mac: str = "") -> Host:
        _kill_namespace(host.netns)
        _ip("netns", "add", host.netns)
        self.hosts[host.name] = host
        _ip("-n", host.netns, "link", "set", "lo", "up")
        _ip("-n", self.switch, "link", "add", "name", host.veth, "type", "veth", "peer", "name", "eth0",
            "netns", host.netns)
        _ip("-n", self.switch, "link", "set", host.veth, "master", "br0")
        _ip("-n", self.switch, "link", "set", host.veth, "up")
        if mac:
            _ip("-n", host.netns, "link", "set", "eth0", "address", mac)
        _ip("-n", host.netns, "addr", "add", f"{host.address}/24", "dev", "eth0")
        _ip("-n", host.netns, "link", "set", "eth0", "up")
        return host

    def __getitem__(self, name: str) -> Host:
        return self.hosts[name]

    def cut(self, name: str) -> None:
        """Pull ``name``'s cable at the switch."""
        _ip("-n", self.switch, "link", "set", self.hosts[name].veth, "down")

    def restore(self, name: str) -> None:
        _ip("-n", self.switch, "link", "set", self.hosts[name].veth, "up")

    @contextlib.contextmanager
    def cut_for(self, name: str, seconds: float) -> Iterator[None]:
        """The cable pulled for ``seconds`` (restored on the way out whatever happens)."""
        self.cut(name)
        try:
            time.sleep(seconds)
            yield
        finally:
            self.restore(name)

    def close(self) -> None:
        """Stop every process started (SIGTERM to its group, SIGKILL after 5 s), remove every
        namespace and the pid file."""
        for _, proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        for _, proc in self.procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        for host in self.hosts.values():
            _kill_namespace(host.netns)
        _kill_namespace(self.switch)
        self.hosts.clear()
        self.pid_file.unlink(missing_ok=True)
