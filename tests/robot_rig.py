"""A rig for the robot bridge's tests: `mocapline sim` and `mocapline robot` as real processes on a
private DDS domain restricted to loopback, the robot port played in this process
(`mocapline.tools.port_player`: the streamer's FanoutSender fed frames at the stream's rate), and a
DDS spy on both topics."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from g1_facts import ARMS, STAND

from mocapline.tools.port_player import PortPlayer, joint_frame

_domains = itertools.count((os.getpid() * 7) % 100)


def private_domain() -> int:
    """A DDS domain id of this test alone (100-229: never the robot's 0 or the simulator's 1)."""
    return 100 + next(_domains) % 130


def motion(n: int, rate: float = 50.0, amplitude: float = 0.6, hz: float = 0.5) -> list[tuple[np.ndarray, np.ndarray]]:
    """Frames of a smooth arm swing: (joint_pos, joint_vel) at ``rate``."""
    out = []
    for i in range(n):
        t = i / rate
        q = STAND.copy()
        dq = np.zeros_like(q)
        w = 2 * np.pi * hz
        q[ARMS] += amplitude * np.sin(w * t)
        dq[ARMS] = amplitude * w * np.cos(w * t)
        q[[15, 22]] -= amplitude  # shoulders pitched forward: away from the stand pose at the start
        out.append((q, dq))
    return out


class Port(PortPlayer):
    """The robot port, fed from this process: ``play`` sends (q, dq) frames at their stream rate."""

    def play(self, frames: list[tuple[np.ndarray, np.ndarray]], rate: float = 50.0,  # type: ignore[override]
             start: int = 0, end: bool = False) -> None:
        super().play([joint_frame(start + k, q, dq, (start + k) / rate) for k, (q, dq) in enumerate(frames)],
                     rate, start=start, end=end)


class Spy:
    """Every LowCmd and LowState on the domain, decoded (in the robot build's message family), in a
    thread."""

    def __init__(self, domain: int, robot_model: str = "g1", command_topic: str | None = None) -> None:
        """``command_topic``: the commands of another topic of the LowCmd type (rt/arm_sdk)."""
        from mocapline.robot.registry import get_robot
        from mocapline.robot.unitree.dds import LowLevel, dds_settings
        from mocapline.robot.unitree.family import family

        robot = get_robot(robot_model)
        self.family = family(robot.low_level.family)
        self.dds = LowLevel(dds_settings(robot, domain, "lo"), depth=4096)
        self.cmd_reader, self.state_reader = self.dds.command_reader(command_topic), self.dds.state_reader()
        self.commands: list[tuple[float, np.ndarray]] = []  # (monotonic, LowCmd record)
        self.states: list[tuple[float, np.ndarray]] = []
        self.halt = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        cmd, state = self.family.low_cmd, self.family.low_state
        while not self.halt.is_set():
            self.cmd_reader.wait(0.01)
            now = time.monotonic()
            self.commands.extend((now, cmd.from_sample(s)) for s in self.cmd_reader.take(4096))
            self.states.extend((now, state.from_sample(s)) for s in self.state_reader.take(4096))

    def close(self) -> None:
        self.halt.set()
        self.thread.join(5)
        self.dds.close()


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    return env


class Proc:
    def __init__(self, args: list[str]) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "mocapline.cli", *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=_env(), start_new_session=True)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> tuple[dict[str, Any] | None, str]:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
        lines = [line for line in out.strip().splitlines() if line.startswith("{")]
        return (json.loads(lines[-1]) if lines else None), err

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate()


def start_sim(domain: int, base: str = "fixed", *extra: str, clock: str | None = None) -> Proc:
    """``clock="lockstep"``: the physics steps once per command (docs of `mocapline sim`), so what
    the robot does is a function of what the bridge sent, whatever the load on the machine."""
    return Proc(["sim", "--interface", "lo", "--domain", str(domain), "--base", base, "--log-level", "WARNING",
                 *(["--clock", clock] if clock else []), *extra])


def start_robot(domain: int, port: Port, state: Path, *extra: str) -> Proc:
    return Proc(["robot", "--interface", "lo", "--domain", str(domain), "--input", port.endpoint,
                 "--state-dir", str(state), "--fsync", "never", "--log-level", "INFO", *extra])
