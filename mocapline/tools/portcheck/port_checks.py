"""``port-check --port``: a running robot port checked from the consumer's side (docs/protocol.md):
handshake, frames, resume on a new connection, keep-alive, rewind, an older (v1) peer. It needs
frames flowing (a take running); the two names it used are forgotten at the end (FORGET)."""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import zmq

from mocapline.core.control import (
    ACK,
    FORGET,
    HELLO,
    NO_EPOCH,
    RESEND,
    WELCOME,
    Control,
    decode_control,
    encode_control,
)
from mocapline.core.frames import FrameFieldError, ProtobufDecodeError, parse_mocap_frame
from mocapline.core.header import MessageType
from mocapline.core.transport import validate_message
from mocapline.robot.registry import RobotDescriptionError, get_robot
from mocapline.tools.portcheck.consumer_cases import CaseResult

WAIT_S = 10.0


@dataclass
class Seen:
    welcome: Control | None
    frame_ids: list[int]
    rejects: Counter[str]
    hands: Counter[tuple[str, int]] = field(default_factory=Counter)  # (robot_model, hand joints): frames


class Peer:
    """One DEALER connection to the port under test."""

    def __init__(self, ctx: zmq.Context, endpoint: str, name: str) -> None:
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint)
        self.name = name
        self.epoch = NO_EPOCH

    def hello(self, seq: int, flags: int = RESEND, version: int = 2) -> None:
        self.sock.send(encode_control(HELLO, self.epoch, seq, self.name, flags=flags, version=version))

    def control(self, kind: int, seq: int, name: str = "") -> None:
        self.sock.send(encode_control(kind, self.epoch, seq, name))

    def read(self, frames: int, timeout_s: float = WAIT_S, in_flight: bool = False) -> Seen:
        """Until a WELCOME and ``frames`` frames arrived, or the time is up; the frames before the
        WELCOME count only with ``in_flight`` (they were on their way before the HELLO)."""
        seen = Seen(None, [], Counter())
        deadline = time.monotonic() + timeout_s
        while (len(seen.frame_ids) < frames or seen.welcome is None) and time.monotonic() < deadline:
            if not self.sock.poll(50):
                continue
            parts = self.sock.recv_multipart()
            if len(parts) == 1:
                msg = decode_control(parts[0])
                if msg is not None and msg.kind == WELCOME and seen.welcome is None:
                    seen.welcome = msg
                continue
            got = validate_message(parts, MessageType.MOTION_FRAME, None, seen.rejects)  # any robot's
            if got is not None and (seen.welcome is not None or in_flight):
                if got.header.epoch != int.from_bytes(self.epoch[:2], "little") and self.epoch != NO_EPOCH:
                    seen.rejects["header_epoch"] += 1
                seen.frame_ids.append(got.header.frame_id)
                try:
                    msg = parse_mocap_frame(got.payload, got.header.joint_count)
                except (FrameFieldError, ProtobufDecodeError) as exc:
                    seen.rejects[exc.reason] += 1
                    continue
                seen.hands[(msg.robot_model, len(msg.hand_joint_pos))] += 1
        return seen

    def close(self) -> None:
        self.sock.close(linger=0)


def shown(msg: Control | None) -> str:
    """A WELCOME as a reader of the report wants it (not a repr with the epoch's raw bytes)."""
    if msg is None:
        return "none"
    ref = msg.ref if msg.version == 2 else f"{msg.name!r} (v1: in the name)"
    return f"WELCOME(v{msg.version}, epoch {msg.epoch.hex()[:8]}.., seq {msg.seq}, ref {ref})"


def consecutive(ids: list[int], start: int) -> bool:
    return ids == list(range(start, start + len(ids)))


def hands_check(hands: Counter[tuple[str, int]]) -> tuple[bool, str]:
    """Every frame's hand joints are none or its build's (``[hands]`` of the robot_model it names)."""
    wrong = []
    for (model, count), frames in sorted(hands.items()):
        try:
            robot_hands = get_robot(model).hands if model else None
        except RobotDescriptionError:
            wrong.append(f"{frames} frames of an unknown robot_model {model!r}")
            continue
        expected = len(robot_hands.left) + len(robot_hands.right) if robot_hands is not None else 0
        if count not in (0, expected):
            wrong.append(f"{frames} frames of {model or 'g1'} with {count} hand joints, expected {expected}")
    if wrong:
        return False, "; ".join(wrong)
    return True, ", ".join(f"{frames} frames of {model or 'g1'} with {count or 'no'} hand joints"
                           for (model, count), frames in sorted(hands.items()))


def check_port(endpoint: str, name: str = "port-check",
               report: Callable[[CaseResult], None] | None = None) -> list[CaseResult]:
    ctx = zmq.Context()
    names = (f"{name}-{os.getpid()}", f"{name}-{os.getpid()}-v1")
    results: list[CaseResult] = []

    def result(case: str, ok: bool, detail: str) -> bool:
        results.append(CaseResult(case, ok, detail))
        if report is not None:
            report(results[-1])
        return ok

    peer = Peer(ctx, endpoint, names[0])
    try:
        peer.hello(-1)
        seen = peer.read(50)
        w = seen.welcome
        if not result("handshake", w is not None and w.ref == -1 and w.version == 2,
                      shown(w) if w is not None else "no WELCOME within 10 s"):
            return results
        assert w is not None
        peer.epoch = w.epoch
        ok = bool(seen.frame_ids) and consecutive(seen.frame_ids, w.seq) and not seen.rejects
        if not result("frames", ok, f"{len(seen.frame_ids)} frames from {w.seq}, rejects {dict(seen.rejects)}"
                      if seen.frame_ids else "no frames within 10 s (is a take running?)"):
            return results
        result("hands", *hands_check(seen.hands))
        last = seen.frame_ids[-1]
        peer.control(ACK, last)
        peer.close()
        peer = Peer(ctx, endpoint, names[0])
        peer.epoch = w.epoch
        peer.hello(last)
        seen = peer.read(10)
        w2 = seen.welcome
        ok = w2 is not None and w2.seq == last + 1 and w2.ref == last and consecutive(seen.frame_ids, last + 1)
        result("resume", ok, f"HELLO({last}) on a new connection: {shown(w2)}, frames from "
                             f"{seen.frame_ids[:1]}")
        last = seen.frame_ids[-1] if seen.frame_ids else last
        peer.control(ACK, last)
        time.sleep(0.2)
        peer.hello(last, flags=0)  # a keep-alive while frames are on their way
        seen = peer.read(30, timeout_s=3, in_flight=True)
        ok = seen.welcome is not None and seen.welcome.ref == last and consecutive(seen.frame_ids, last + 1)
        result("keep_alive", ok, f"HELLO({last}) without RESEND: {shown(seen.welcome)}; frames "
                                 f"{seen.frame_ids[:3]}..., {len(seen.frame_ids) - len(set(seen.frame_ids))} twice")
        last = seen.frame_ids[-1] if seen.frame_ids else last
        peer.control(ACK, last)  # then a HELLO below it, without RESEND: still a rewind, no keep-alive
        back = max(-1, last - 5)
        peer.hello(back, flags=0)
        seen = peer.read(5)
        ids = seen.frame_ids
        ok = seen.welcome is not None and seen.welcome.seq == back + 1 and back + 1 in ids \
            and consecutive(ids[ids.index(back + 1):], back + 1) if back + 1 in ids else False
        result("rewind", ok, f"HELLO({back}) without RESEND below its ACK ({last}): {shown(seen.welcome)}, "
                             f"frames {ids[:3]}...")
        old = Peer(ctx, endpoint, names[1])
        old.hello(-1, version=1)
        seen = old.read(1)
        w1 = seen.welcome
        result("v1_peer", w1 is not None and w1.version == 1 and w1.name == "-1",
               f"a v1 HELLO answered by {shown(w1)}" if w1 is not None else "no WELCOME to a v1 HELLO")
        if w1 is not None:
            old.epoch = w1.epoch
            old.control(FORGET, -1, names[0])
            peer.epoch = w1.epoch
            peer.control(FORGET, -1, names[1])
            time.sleep(0.2)
        old.close()
    finally:
        peer.close()
        ctx.term()
    return results
