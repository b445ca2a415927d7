"""A rig for the robot bridge's tests: `mocapline sim` and `mocapline robot` as real processes on a
private DDS domain restricted to loopback, the robot port played in this process (a FanoutSender
fed frames at the stream's rate, as the streamer would), and a DDS spy on both topics."""

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
import zmq

from mocapline.core import pb
from mocapline.core.fanout import FanoutSender
from mocapline.core.header import G1_JOINT_COUNT, MessageType
from mocapline.core.reliable import NO_EPOCH
from mocapline.core.segmentlog import LogConfig
from mocapline.core.stagelog import Output, StageLog, StageRecord
from mocapline.core.transport import lossless_socket
from mocapline.robot.unitree.g1 import ARMS, STAND
from mocapline.tools.pipeline.procs import free_tcp_port

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


def mocap_frame(i: int, q: np.ndarray, dq: np.ndarray, t: float) -> bytes:
    return pb.MocapFrame(index=i, body_pos_w=[0.0, 0.0, 1.0], body_lin_vel_w=[0.0] * 3, body_quat_w=[1.0, 0, 0, 0],
                         body_ang_vel_w=[0.0] * 3, joint_pos=list(q), joint_vel=list(dq), left_hand=[0.0] * 7,
                         right_hand=[0.0] * 7, posture_index=1000 + i, posture_index_first=1000 + i,
                         posture_index_last=1000 + i, capture_timestamp_us=time.time_ns() // 1000,
                         source_time_s=t).SerializeToString()


class Port:
    """The robot port, fed from this process: ``play`` sends frames at their stream rate."""

    def __init__(self, state: Path) -> None:
        self.endpoint = f"tcp://127.0.0.1:{free_tcp_port()}"
        self.ctx = zmq.Context()
        sock = lossless_socket(self.ctx, zmq.ROUTER, self.endpoint, bind=True)
        self.log = StageLog(state, "stage", LogConfig(fsync="never"))
        self.sender = FanoutSender(sock, self.log, G1_JOINT_COUNT, window=256)
        self.lock = threading.Lock()
        self.halt = threading.Event()
        self.produced = 0
        self.thread = threading.Thread(target=self._pump, daemon=True)
        self.thread.start()

    def _pump(self) -> None:
        while not self.halt.is_set():
            with self.lock:
                self.sender.pump()
            self.sender.sock.poll(2)

    def play(self, frames: list[tuple[np.ndarray, np.ndarray]], rate: float = 50.0, start: int = 0,
             end: bool = False) -> None:
        t0 = time.monotonic()
        for k, (q, dq) in enumerate(frames):
            i = start + k
            wait = t0 + k / rate - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            with self.lock:
                self.sender.commit(StageRecord(NO_EPOCH, i, b"", [
                    Output(MessageType.MOTION_FRAME, mocap_frame(i, q, dq, i / rate), time.time_ns() // 1000)]))
                self.produced += 1
        if end:
            with self.lock:
                self.sender.commit(StageRecord(NO_EPOCH, -1, b"", [Output(MessageType.END_OF_STREAM, b"", 0)]))

    def counts(self) -> dict[str, int]:
        with self.lock:
            return self.sender.counts()

    def close(self) -> None:
        self.halt.set()
        self.thread.join(5)
        self.sender.close()
        self.sender.sock.close(linger=0)
        self.log.close()
        self.ctx.term()


class Spy:
    """Every LowCmd and LowState on the domain, decoded, in a thread."""

    def __init__(self, domain: int) -> None:
        from mocapline.robot.unitree.dds import DdsSettings, LowLevel

        self.dds = LowLevel(DdsSettings(domain, "lo"), depth=4096)
        self.cmd_reader, self.state_reader = self.dds.command_reader(), self.dds.state_reader()
        self.commands: list[tuple[float, np.ndarray]] = []  # (monotonic, LowCmd record)
        self.states: list[tuple[float, np.ndarray]] = []
        self.halt = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        from mocapline.robot.unitree.lowlevel import LOW_CMD, LOW_STATE

        while not self.halt.is_set():
            self.cmd_reader.wait(0.01)
            now = time.monotonic()
            self.commands.extend((now, LOW_CMD.from_sample(s)) for s in self.cmd_reader.take(4096))
            self.states.extend((now, LOW_STATE.from_sample(s)) for s in self.state_reader.take(4096))

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


def start_sim(domain: int, base: str = "fixed") -> Proc:
    return Proc(["sim", "--interface", "lo", "--domain", str(domain), "--base", base, "--log-level", "WARNING"])


def start_robot(domain: int, port: Port, state: Path, *extra: str) -> Proc:
    return Proc(["robot", "--interface", "lo", "--domain", str(domain), "--input", port.endpoint,
                 "--state-dir", str(state), "--fsync", "never", "--log-level", "INFO", *extra])
