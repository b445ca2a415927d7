"""A scripted robot port for ``port-check --consumer``: a ROUTER speaking docs/protocol.md to one
consumer process, whose applied frames are read from its stdout (one JSON line per frame)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import zmq

from mocapline.core import pb
from mocapline.core.control import ACK, HELLO, RESEND, Control, decode_control, welcome
from mocapline.core.header import MessageType, encode_frame
from mocapline.robot.registry import get_robot

Applied = tuple[int, int | None]  # (frame_id, posture_index); None: END_OF_STREAM


def mocap_payload(posture_index: int) -> bytes:
    """A frame of the default robot build at rest (the contract's cases need no motion)."""
    robot = get_robot()
    joints = [0.0] * robot.joint_count
    return pb.MocapFrame(index=posture_index, body_pos_w=[0.0] * 3, body_lin_vel_w=[0.0] * 3,
                         body_quat_w=[1.0, 0, 0, 0], body_ang_vel_w=[0.0] * 3, joint_pos=joints,
                         joint_vel=joints, left_hand=[0.0] * 7, right_hand=[0.0] * 7,
                         posture_index=posture_index, robot_model=robot.name).SerializeToString()


def data_message(epoch: bytes, frame_id: int, posture_index: int | None, *, corrupt: bool = False,
                 end: tuple[int, int] = (0, 0)) -> list[bytes]:
    """(topic, header + payload); ``posture_index`` None: END_OF_STREAM with ``end`` = (last_frame_id,
    frames_sent); ``corrupt``: the CRC is of the real payload, the payload sent says another index."""
    header_epoch = int.from_bytes(epoch[:2], "little")
    if posture_index is None:
        payload = pb.EndOfStream(last_frame_id=end[0], frames_sent=end[1], reason="drain").SerializeToString()
        body = encode_frame(MessageType.END_OF_STREAM, frame_id, payload, capture_timestamp_us=0,
                            send_timestamp_us=time.time_ns() // 1000, joint_count=0, epoch=header_epoch)
        return [b"END_OF_STREAM", body]
    payload = mocap_payload(posture_index)
    body = encode_frame(MessageType.MOTION_FRAME, frame_id, payload, capture_timestamp_us=time.time_ns() // 1000,
                        send_timestamp_us=time.time_ns() // 1000, joint_count=get_robot().joint_count,
                        epoch=header_epoch)
    if corrupt:
        body = body[:44] + mocap_payload(posture_index + 500_000)
        body = body[:32] + len(body[44:]).to_bytes(4, "little") + body[36:]  # the size right, the CRC wrong
    return [b"MOCAP_FRAME", body]


class ConsumerProcess:
    """The consumer under test, started from the command template (``{endpoint}``, ``{name}``,
    ``{state}`` filled in; the same values in MOCAPLINE_PORT_CHECK_ENDPOINT / _NAME / _STATE)."""

    def __init__(self, template: str, endpoint: str, name: str, state: Path) -> None:
        values = {"endpoint": endpoint, "name": name, "state": str(state)}
        self.argv = shlex.split(template.format(**values))
        self.env = {**os.environ, **{f"MOCAPLINE_PORT_CHECK_{k.upper()}": v for k, v in values.items()}}
        self.applied: list[Applied] = []
        self.runs: list[list[Applied]] = []
        self.proc: subprocess.Popen[str] | None = None
        self._stdout_reader: threading.Thread | None = None
        self._stderr_reader: threading.Thread | None = None
        self.stderr_tail: deque[str] = deque(maxlen=3)  # of its current run: why it exited, if it did
        self._lock = threading.Lock()

    def start(self) -> None:
        self.runs.append([])
        self.stderr_tail.clear()
        self.proc = subprocess.Popen(self.argv, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, errors="replace", start_new_session=True)
        self._stdout_reader = threading.Thread(target=self._read, args=(self.proc, self.runs[-1]), daemon=True)
        self._stdout_reader.start()
        self._stderr_reader = threading.Thread(target=self._read_stderr, args=(self.proc,), daemon=True)
        self._stderr_reader.start()

    def _read_stderr(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            if line.strip() and proc is self.proc:
                self.stderr_tail.append(line.strip()[:200])

    def has_exited(self) -> bool:
        """Its current run has ended (by itself, or killed by the case), and every line it
        reported has been read."""
        if self.proc is None or self.proc.poll() is None:
            return False
        if self._stdout_reader is not None:
            self._stdout_reader.join(timeout=1.0)
        return True

    def exited(self) -> str:
        """How its current run ended by itself ("" while it runs): the exit status and the last lines
        of its stderr, so a consumer that died on its own is not reported as merely silent."""
        if self.proc is None or self.proc.poll() is None:
            return ""
        if self._stderr_reader is not None:  # it ends at the pipe's end, every line the consumer left read
            self._stderr_reader.join(timeout=1.0)
        tail = " | ".join(self.stderr_tail)
        return f"the consumer exited with status {self.proc.returncode}" + (f": {tail}" if tail else "")

    def _read(self, proc: subprocess.Popen[str], run: list[Applied]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            got = parse_report(line)
            if got is not None:
                with self._lock:
                    run.append(got)
                    self.applied.append(got)

    def snapshot(self) -> list[Applied]:
        with self._lock:
            return list(self.applied)

    def kill(self) -> None:
        """kill -9 (its whole process group: a shell's children too)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.kill()


def parse_report(line: str) -> Applied | None:
    """One applied frame from a consumer's stdout line: a JSON object with ``frame_id`` and
    ``posture_index``, or ``frame_id`` and ``end`` (any other line is ignored)."""
    try:
        d = json.loads(line)
    except ValueError:
        return None
    if not isinstance(d, dict) or not isinstance(d.get("frame_id"), int):
        return None
    if d.get("end"):
        return (d["frame_id"], None)
    return (d["frame_id"], int(d["posture_index"])) if isinstance(d.get("posture_index"), int) else None


@dataclass
class ScriptedPort:
    """A ROUTER on ``endpoint`` with one epoch and the frames published so far on it."""

    endpoint: str
    epoch: bytes
    postures: dict[int, int | None] = field(default_factory=dict)  # frame_id -> posture (None: end)
    ends: dict[int, tuple[int, int]] = field(default_factory=dict)
    hellos: list[Control] = field(default_factory=list)
    acks: list[int] = field(default_factory=list)
    route: bytes | None = None
    # The consumer has exited: nobody will say HELLO or apply a frame, so no wait goes on (a
    # consumer that died at once made every case wait out its 10-15 s).
    gone: Callable[[], bool] = lambda: False

    def __post_init__(self) -> None:
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.ROUTER_HANDOVER, 1)
        self.sock.bind(self.endpoint)

    def publish(self, frame_id: int, posture_index: int | None, end: tuple[int, int] = (0, 0)) -> None:
        self.postures[frame_id] = posture_index
        if posture_index is None:
            self.ends[frame_id] = end

    def send(self, frame_id: int, *, corrupt: bool = False) -> None:
        if self.route is not None:
            msg = data_message(self.epoch, frame_id, self.postures[frame_id], corrupt=corrupt,
                               end=self.ends.get(frame_id, (0, 0)))
            self.sock.send_multipart([self.route, *msg])

    def send_control(self, body: bytes) -> None:
        if self.route is not None:
            self.sock.send_multipart([self.route, body])

    def next_hello(self, timeout_s: float) -> Control | None:
        """The next HELLO (ACKs noted meanwhile), or None."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.sock.poll(20):
                if self.gone():
                    return None
                continue
            parts = self.sock.recv_multipart()
            msg = decode_control(parts[1]) if len(parts) == 2 else None
            if msg is None:
                continue
            if msg.kind == ACK:
                self.acks.append(msg.seq)
            elif msg.kind == HELLO:
                self.route = parts[0]
                self.hellos.append(msg)
                return msg
        return None

    def answer(self, hello: Control, first: int) -> None:
        """WELCOME as a port does, then (unless a keep-alive) every published frame from there."""
        start = hello.seq + 1 if hello.epoch == self.epoch else first
        self.send_control(welcome(self.epoch, start, hello.seq, hello.version))
        if hello.version == 1 or hello.flags & RESEND or hello.epoch != self.epoch:
            for frame_id in sorted(f for f in self.postures if f >= start):
                self.send(frame_id)

    def serve(self, done: Callable[[], bool], first: int, timeout_s: float) -> None:
        """Answer HELLOs until ``done()`` or the time is up."""
        deadline = time.monotonic() + timeout_s
        while not done() and not self.gone() and time.monotonic() < deadline:
            hello = self.next_hello(min(0.1, max(0.0, deadline - time.monotonic())))
            if hello is not None:
                self.answer(hello, first)

    def close(self) -> None:
        self.sock.close(linger=0)
        self.ctx.term()
