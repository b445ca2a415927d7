"""Issue 12, with real processes on loopback: the robot port gives every acknowledged consumer every
frame once and in order, a raw PULL nothing, and the final ledger says where each frame went.

One of the consumers is written from docs/protocol.md alone: ``IndependentConsumer`` speaks the
handshake and decodes the wire with ``struct``, ``zlib`` and protobuf descriptors built here, not
with the project's transport, header or client code. The others are ``mocapline tap`` processes
(the ``mocapline.client`` library) and the viewer (the same library inside a service).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from struct import Struct
from typing import Any

import pytest
import zmq
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from helpers import wait_until

from mocapline.tools.emitter.emitter import TakePlan, emit_take
from mocapline.tools.emitter.relay import LossyRelay
from mocapline.tools.pipeline.stack import Stack, local_config
from mocapline.tools.tap import read_tap

pytestmark = pytest.mark.integration

RATE = 120.0
FRAMES = 720  # 6 s at 120 Hz
FIRST = 5000

# --- an independent consumer: docs/protocol.md, struct, zlib and protobuf descriptors only ----------

HEADER = Struct("<IHHQQQIHHI")
CONTROL = Struct("<4sB16sq")
MAGIC, HELLO, ACK, WELCOME, MOTION_FRAME, END_OF_STREAM = 0x4D4C4346, 1, 2, 3, 1, 5


def _message_classes() -> tuple[type, type]:
    F = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="independent_mocap.proto", package="independent", syntax="proto3")
    frame = fdp.message_type.add(name="MocapFrame")
    repeated = [("body_pos_w", 2), ("body_lin_vel_w", 3), ("body_quat_w", 4), ("body_ang_vel_w", 5),
                ("joint_pos", 6), ("joint_vel", 7), ("left_hand", 8), ("right_hand", 9)]
    frame.field.add(name="index", number=1, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    for name, number in repeated:
        frame.field.add(name=name, number=number, type=F.TYPE_FLOAT, label=F.LABEL_REPEATED)
    for name, number in (("posture_index", 10), ("posture_index_first", 11), ("posture_index_last", 12)):
        frame.field.add(name=name, number=number, type=F.TYPE_UINT64, label=F.LABEL_OPTIONAL)
    frame.field.add(name="avatar_index", number=17, type=F.TYPE_UINT32, label=F.LABEL_OPTIONAL)
    frame.field.add(name="bridged", number=19, type=F.TYPE_BOOL, label=F.LABEL_OPTIONAL)
    end = fdp.message_type.add(name="EndOfStream")
    end.field.add(name="last_frame_id", number=1, type=F.TYPE_UINT64, label=F.LABEL_OPTIONAL)
    end.field.add(name="frames_sent", number=2, type=F.TYPE_UINT64, label=F.LABEL_OPTIONAL)
    end.field.add(name="reason", number=3, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return (message_factory.GetMessageClass(pool.FindMessageTypeByName("independent.MocapFrame")),
            message_factory.GetMessageClass(pool.FindMessageTypeByName("independent.EndOfStream")))


MocapFrame, EndOfStream = _message_classes()
LENGTHS = {"body_pos_w": 3, "body_lin_vel_w": 3, "body_quat_w": 4, "body_ang_vel_w": 3, "joint_pos": 29,
           "joint_vel": 29, "left_hand": 7, "right_hand": 7}


@dataclass
class Got:
    """What a consumer received, in order: (frame_id, posture_index, bridged); ends separately."""

    frames: list[tuple[int, int, bool]] = field(default_factory=list)
    ends: list[tuple[int, int, int, str]] = field(default_factory=list)  # frame_id, last_frame_id, sent, reason

    def add(self, frame_id: int, message_type: int, payload: bytes) -> None:
        if message_type == END_OF_STREAM:
            e = EndOfStream.FromString(payload)
            self.ends.append((frame_id, e.last_frame_id, e.frames_sent, e.reason))
            return
        m = MocapFrame.FromString(payload)
        for name, n in LENGTHS.items():
            assert len(getattr(m, name)) == n, name
        self.frames.append((frame_id, m.posture_index, m.bridged))


def decode(body: bytes) -> tuple[int, int, int, bytes]:
    """(frame_id, message type, header epoch, payload) after every check of the 44-byte header."""
    assert len(body) >= HEADER.size
    magic, version, mtype, frame_id, _cap, _send, size, joints, epoch, crc = HEADER.unpack_from(body)
    assert magic == MAGIC and version == 1 and mtype in (MOTION_FRAME, END_OF_STREAM)
    assert size == len(body) - HEADER.size
    assert joints == (29 if mtype == MOTION_FRAME else 0)
    assert crc == zlib.crc32(body[HEADER.size:], zlib.crc32(body[:40]))
    return frame_id, mtype, epoch, body[HEADER.size:]


class IndependentConsumer(threading.Thread):
    """The minimal consumer loop of docs/protocol.md, in a thread, until END_OF_STREAM."""

    def __init__(self, endpoint: str, name: str, timeout_s: float = 90.0) -> None:
        super().__init__(daemon=True)
        self.endpoint, self.name, self.timeout_s = endpoint, name, timeout_s
        self.got = Got()
        self.duplicates = self.gaps = self.messages = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def _run(self) -> None:
        ctx = zmq.Context()
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 500)
        sock.connect(self.endpoint)
        epoch, last, welcomed = bytes(16), -1, False

        def control(kind: int, name: str = "") -> None:
            sock.send(CONTROL.pack(b"MLAK", kind, epoch, last) + name.encode())

        control(HELLO, self.name)
        hello_at = acked_at = time.monotonic()
        deadline = time.monotonic() + self.timeout_s
        try:
            while time.monotonic() < deadline and not self.got.ends:
                now = time.monotonic()
                if welcomed and now - acked_at > 0.05:
                    control(ACK)
                    acked_at = now
                if not sock.poll(100):
                    if now - hello_at > 0.5:
                        control(HELLO, self.name)
                        hello_at = now
                    continue
                parts = sock.recv_multipart()
                self.messages += 1
                if len(parts) == 1:
                    magic, kind, their_epoch, seq = CONTROL.unpack_from(parts[0])
                    assert magic == b"MLAK"
                    if kind == WELCOME:
                        if their_epoch != epoch:
                            epoch, last = their_epoch, seq - 1
                        welcomed = True
                    continue
                topic, body = parts
                frame_id, mtype, header_epoch, payload = decode(body)
                assert topic == (b"MOCAP_FRAME" if mtype == MOTION_FRAME else b"END_OF_STREAM")
                if not welcomed or frame_id <= last:
                    self.duplicates += 1
                    continue
                assert header_epoch == int.from_bytes(epoch[:2], "little")
                if frame_id > last + 1:
                    self.gaps += 1
                    control(HELLO, self.name)
                    hello_at = time.monotonic()
                    continue
                last = frame_id
                self.got.add(frame_id, mtype, payload)
            control(ACK)
        finally:
            sock.close()
            ctx.term()


def recorded(path: Path) -> Got:
    """A `mocapline tap --record` file, decoded independently."""
    got = Got()
    for _epoch, frame_id, wire in read_tap(path):
        fid, mtype, _, payload = decode(wire)
        assert fid == frame_id
        got.add(frame_id, mtype, payload)
    return got


def check_stream(got: Got, last_index: int, first_index: int | None = None, bridged: set[int] = frozenset()) -> None:
    """0 lost, 0 duplicated, 0 reordered: frame_ids consecutive (END_OF_STREAM takes one), real
    posture indices consecutive, each once, through ``last_index``; bridged frames exactly ``bridged``."""
    ids = sorted([f[0] for f in got.frames] + [e[0] for e in got.ends])
    assert ids == list(range(ids[0], ids[0] + len(ids))), "frame_ids not consecutive"
    assert [f[0] for f in got.frames] == sorted(f[0] for f in got.frames)
    real = [p for _, p, b in got.frames if not b]
    start = real[0] if first_index is None else first_index
    assert real == [i for i in range(start, last_index + 1) if i not in bridged], "real posture indices"
    assert {p for _, p, b in got.frames if b} == {i for i in bridged if i >= start}
    assert len(got.ends) == 1 and got.ends[0][1] == got.ends[0][0] - 1 and got.ends[0][3] == "drain"


# --- the stack and its consumers ---------------------------------------------------------------


def make_stack(tmp_path: Path, *, viewer: bool, merge: bool = False, env: dict[str, str] | None = None,
               plain_output: bool = False) -> Stack:
    config = local_config(merge=merge, viewer=viewer, input_fps=RATE, output_fps=RATE, log_dir=tmp_path / "logs",
                          state_dir=tmp_path / "state", fsync="never", extra_env=env or {},
                          plain_output=plain_output)
    stack = Stack(config)
    stack.start()
    stack.wait_ready()
    return stack


def endpoint(stack: Stack) -> str:
    return f"tcp://127.0.0.1:{stack.config.output_port}"


class Tap:
    """A `mocapline tap` process recording to ``path`` under a fixed name, restartable."""

    def __init__(self, stack: Stack, name: str, path: Path) -> None:
        self.args = [sys.executable, "-m", "mocapline.cli", "tap", "--endpoint", endpoint(stack), "--name", name,
                     "--record", str(path), "--quiet", "--until-end"]
        self.path = path
        self.log = path.with_suffix(".log")
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        with open(self.log, "ab") as fh:
            self.proc = subprocess.Popen(self.args, stdout=fh, stderr=fh)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()

    def wait(self, timeout: float) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(10)


def emit_in_background(stack: Stack, plan: TakePlan, dests: list[tuple[str, int]] | None = None) -> threading.Thread:
    c = stack.config
    dests = dests or [("127.0.0.1", c.main_port)]
    t = threading.Thread(target=emit_take, args=(plan, dests), kwargs={"rate_hz": RATE}, daemon=True)
    t.start()
    return t


def streamer_status(stack: Stack) -> dict:
    return stack.ask("streamer", "status")


def frames_sent_to_someone(stack: Stack) -> int:
    """Frames the streamer has made so far (0 while it does not answer: restarting)."""
    try:
        return streamer_status(stack).get("motion_generated", 0)
    except Exception:  # noqa: BLE001 - no responder yet
        return 0


def consumer(stack: Stack, name: str) -> dict:
    """The streamer's view of one consumer ({} while unknown or the streamer does not answer)."""
    try:
        return streamer_status(stack).get("consumers", {}).get(name, {})
    except Exception:  # noqa: BLE001 - restarting
        return {}


def joined(stack: Stack, name: str, timeout: float = 30) -> None:
    wait_until(lambda: consumer(stack, name).get("connected"), timeout, what=f"{name} to complete the handshake")


def caught_up(stack: Stack, name: str, timeout: float = 60) -> None:
    wait_until(lambda: consumer(stack, name).get("backlog", 1) == 0, timeout, what=f"{name} to acknowledge all")


def finish(stack: Stack) -> dict:
    """Drain the take, check the sum rule, return the verdict."""
    finals = stack.drain(timeout=90)
    v = stack.verdict(finals)
    assert v["output_balanced"] == 1, v
    st = finals["streamer"]
    assert st["motion_generated"] == st["zmq_sent"] + st["pending"] + st["unconfirmed"]
    return v


class Started:
    """What a test starts (stacks, taps), stopped at its end: the taps first."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.stacks: list[Stack] = []
        self.taps: list[Tap] = []

    def stack(self, **options: Any) -> Stack:
        self.stacks.append(make_stack(self.tmp_path, **options))
        return self.stacks[-1]

    def tap(self, stack: Stack, name: str, file: str) -> Tap:
        self.taps.append(Tap(stack, name, self.tmp_path / file))
        return self.taps[-1]

    def stop(self) -> None:
        for tap in self.taps:
            tap.stop()
        for stack in self.stacks:
            stack.stop()


@pytest.fixture
def started(tmp_path: Path) -> Iterator[Started]:
    running = Started(tmp_path)
    yield running
    running.stop()


def test_two_consumers_and_a_raw_pull_joining_mid_take(started) -> None:
    """No viewer. 1 s into the take a tap (mocapline.client) and a raw PULL connect, 2 s in the
    independent consumer: both consumers end complete from where they joined, the PULL gets
    nothing, and the port sent at most 1.1 x frames x consumers."""
    stack = started.stack(viewer=False)
    emitter = emit_in_background(stack, TakePlan(frames=FRAMES, first_index=FIRST))
    wait_until(lambda: frames_sent_to_someone(stack) > 100, 20, what="the take under way")
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    pull.connect(endpoint(stack))
    tap = started.tap(stack, "robot-a", "a.mltap")
    joined(stack, "robot-a")  # the first consumer (a process: slow to start on a loaded host)
    wait_until(lambda: frames_sent_to_someone(stack) > 240, 20, what="a second into the take")
    other = IndependentConsumer(endpoint(stack), "robot-b")
    other.start()
    emitter.join(timeout=60)
    v = finish(stack)
    other.join(timeout=60)
    assert other.error is None, other.error
    assert tap.wait(60) == 0
    pulled = 0
    while pull.poll(100):
        pull.recv_multipart()
        pulled += 1
    pull.close(0)
    ctx.term()
    last = FIRST + FRAMES - 1
    a = recorded(tap.path)
    check_stream(a, last, first_index=FIRST)  # the first consumer: every frame, made before it joined too
    check_stream(other.got, last)
    assert other.got.frames[0][1] > FIRST + 100  # it joined mid-take, where the others were
    assert pulled == 0
    consumers = v["consumers"]
    assert set(consumers) == {"robot-a", "robot-b"}
    assert sum(c["sent"] for c in consumers.values()) <= 1.1 * FRAMES * 2
    assert v["zmq_sent"] == FRAMES and v["unconfirmed"] == 0 and v["unique_frames_conserved"] == 1, v
    assert consumers["robot-a"]["frames_acked"] == consumers["robot-a"]["frames_sent"] == FRAMES
    assert consumers["robot-b"]["backlog"] == 0


def test_streamer_killed_before_any_consumer_connects(started) -> None:
    """kill -9 of the streamer 2 s into a take nobody is consuming yet; restarted; a consumer that
    connects afterwards gets every frame of the take (issue 12, case 2: 720 were lost)."""
    stack = started.stack(viewer=False)
    emitter = emit_in_background(stack, TakePlan(frames=FRAMES, first_index=FIRST))
    wait_until(lambda: frames_sent_to_someone(stack) > 200, 20, what="frames made with no consumer")
    stack.services["streamer"].kill()
    time.sleep(0.5)  # down for a while: retarget's log holds what arrives meanwhile
    stack.restart("streamer")
    wait_until(lambda: frames_sent_to_someone(stack) > 400, 30, what="the restarted streamer going on")
    tap = started.tap(stack, "late-robot", "late.mltap")
    emitter.join(timeout=60)
    joined(stack, "late-robot")
    caught_up(stack, "late-robot")
    v = finish(stack)
    assert tap.wait(60) == 0
    check_stream(recorded(tap.path), FIRST + FRAMES - 1, first_index=FIRST)
    assert v["zmq_sent"] == FRAMES and v["unique_frames_conserved"] == 1, v


def test_each_consumer_killed_mid_take_resumes(started) -> None:
    """A tap and the viewer, each killed with SIGKILL mid-take and started again: both end with
    every frame once, in order; the other consumer never notices."""
    stack = started.stack(viewer=True)
    tap = started.tap(stack, "robot", "robot.mltap")
    joined(stack, "robot")
    emitter = emit_in_background(stack, TakePlan(frames=FRAMES, first_index=FIRST))
    wait_until(lambda: frames_sent_to_someone(stack) > 200, 20, what="the take under way")
    tap.kill()
    time.sleep(0.3)
    tap.start()
    wait_until(lambda: frames_sent_to_someone(stack) > 400, 20, what="more of the take")
    stack.services["viewer"].kill()
    time.sleep(0.3)
    stack.restart("viewer")
    emitter.join(timeout=60)
    stack.wait_ready(60)
    caught_up(stack, "robot")
    v = finish(stack)
    assert tap.wait(60) == 0
    check_stream(recorded(tap.path), FIRST + FRAMES - 1, first_index=FIRST)
    from test_crash import applied_indices

    assert applied_indices(stack.config.state_dir / "viewer") == list(range(FIRST, FIRST + FRAMES))
    assert v["viewer_applied"] == FRAMES and v["zmq_sent"] == FRAMES and v["unique_frames_conserved"] == 1, v
    assert v["consumers"]["robot"]["hellos"] >= 2 and v["consumers"]["viewer"]["hellos"] >= 2


@pytest.mark.parametrize("lag_ms", [150, 500])
def test_merge_with_main_lagging_side(started, lag_ms) -> None:
    """--merge, the main path delayed by a relay, skips on each path: nothing is lost to the merge
    window, nothing is late, every posture_index reaches the viewer and a tap once, in order."""
    stack = started.stack(viewer=True, merge=True)
    c = stack.config
    relay = LossyRelay(("127.0.0.1", 0), ("127.0.0.1", c.main_port), loss=0.0, delay_s=lag_ms / 1000)
    relay.start()
    tap = started.tap(stack, "robot", "robot.mltap")
    joined(stack, "robot")
    skip_main = {FIRST + 100, FIRST + 101, FIRST + 400}
    skip_side = {FIRST + 200, FIRST + 201, FIRST + 202, FIRST + 500}
    plan = TakePlan(frames=FRAMES, first_index=FIRST, skip_main=skip_main, skip_side=skip_side)
    emit_take(plan, [("127.0.0.1", relay.port), ("127.0.0.1", c.side_port)], rate_hz=RATE)
    wait_until(lambda: relay.forwarded >= FRAMES - len(skip_main), 10, what="the relay to forward main")
    relay.stop()
    v = finish(stack)
    cap = stack.ask("capture", "status")
    detail = {k: cap.get(k) for k in ("missing_ranges", "late_ranges", "first_posture_index", "last_posture_index",
                                      "paths", "cross_path_copies", "source_received")}
    assert v["source_unique_frames"] == FRAMES and v["source_missing_indices"] == 0, detail
    by_path = v["missing_by_path"]
    assert v["late_frames"] == 0 and by_path["late"] == [], detail
    assert by_path["side_only"] == [[FIRST + 200, FIRST + 202], [FIRST + 500, FIRST + 500]]  # main had them
    assert by_path["main_only"] == [[FIRST + 100, FIRST + 101], [FIRST + 400, FIRST + 400]]  # side had them
    assert v["viewer_applied"] == FRAMES and v["unique_frames_conserved"] == 1, v
    from test_crash import applied_indices

    assert applied_indices(c.state_dir / "viewer") == list(range(FIRST, FIRST + FRAMES))
    assert tap.wait(60) == 0
    check_stream(recorded(tap.path), FIRST + FRAMES - 1, first_index=FIRST)


def test_a_bridged_gap_is_labelled(started) -> None:
    """Indices 100..102 of the take missing on every path: the interpolator bridges them with three
    frames flagged bridged and carrying 100, 101, 102; every real index arrives once."""
    stack = started.stack(viewer=False)
    tap = started.tap(stack, "robot", "robot.mltap")
    joined(stack, "robot")
    gap = {FIRST + 100, FIRST + 101, FIRST + 102}
    emit_take(TakePlan(frames=FRAMES, first_index=FIRST, skip_all=gap), [("127.0.0.1", stack.config.main_port)],
              rate_hz=RATE)
    v = finish(stack)
    assert tap.wait(60) == 0
    got = recorded(tap.path)
    check_stream(got, FIRST + FRAMES - 1, first_index=FIRST, bridged=gap)
    assert [p for _, p, b in got.frames if b] == sorted(gap)
    assert v["bridged_frames"] == 3 and v["motion_generated"] == FRAMES and v["zmq_sent"] == FRAMES
    assert v["source_missing_indices"] == 3 and v["unique_frames_conserved"] == 0  # a gap is not conserved
    assert got.ends[0][2] == FRAMES  # END_OF_STREAM.frames_sent


def test_a_consumer_that_cannot_acknowledge_gets_unconfirmed_frames(started) -> None:
    """--plain-output: a PUSH fed from the streamer's log. A raw PULL gets every frame (it is the
    only peer), and the ledger says they went out unconfirmed: zmq_sent 0, unconfirmed = all."""
    stack = started.stack(viewer=False, plain_output=True)
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    pull.connect(endpoint(stack))
    got = Got()
    emitter = emit_in_background(stack, TakePlan(frames=FRAMES, first_index=FIRST))
    emitter.join(timeout=60)
    v = finish(stack)
    while pull.poll(1000) and not got.ends:
        frame_id, mtype, _, payload = decode(pull.recv_multipart()[1])
        got.add(frame_id, mtype, payload)
    pull.close(0)
    ctx.term()
    check_stream(got, FIRST + FRAMES - 1, first_index=FIRST)
    assert v["zmq_sent"] == 0 and v["unconfirmed"] == FRAMES and v["delivery"].startswith("unconfirmed"), v
    assert v["unique_frames_conserved"] == 1  # every frame made it onto the wire, unconfirmed


def test_up_binds_the_robot_port_on_loopback_and_warns_otherwise(tmp_path) -> None:
    """The streamer's default endpoint is loopback; another address without CURVE warns."""
    from mocapline.services.streamer.service import build_parser, exposed

    assert build_parser().parse_args([]).output == "tcp://127.0.0.1:5555"
    assert not exposed("tcp://127.0.0.1:5555") and exposed("tcp://0.0.0.0:5555") and exposed("tcp://*:5555")
    from mocapline.tools.pipeline.up import build_parser as up_parser

    assert up_parser().parse_args([]).bind_host == "127.0.0.1"
    import socket

    with socket.socket() as taken:  # a port in use: the streamer warns, then fails to bind and exits
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-m", "mocapline.cli", "streamer", "--output", f"tcp://0.0.0.0:{port}", "--input",
             "tcp://127.0.0.1:1", "--nats", ""], capture_output=True, text=True, timeout=60,
            env={**os.environ, "MOCAPLINE_METRICS_PORT": "0"})
    assert proc.returncode == 1
    assert "WARNING" in proc.stderr and "without CURVE" in proc.stderr, proc.stderr
