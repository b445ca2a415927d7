"""ZeroMQ links with the lossless settings of DESIGN.md and the MotionFrameHeader envelope.

PUSH/PULL, blocking send, SNDHWM = RCVHWM = 10000, LINGER = -1, no CONFLATE, no DONTWAIT: when a
consumer is slow the sender blocks and latency grows; nothing is dropped.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

import zmq

from mocapline.header import (
    TOPICS,
    HeaderError,
    MessageType,
    MotionFrameHeader,
    decode_frame,
    encode_frame,
)

HWM = 10_000


def now_us() -> int:
    return time.time_ns() // 1000


def lossless_socket(ctx: zmq.Context, kind: int, endpoint: str, *, bind: bool) -> zmq.Socket:
    sock = ctx.socket(kind)
    sock.setsockopt(zmq.SNDHWM, HWM)
    sock.setsockopt(zmq.RCVHWM, HWM)
    sock.setsockopt(zmq.LINGER, -1)
    if bind:
        sock.bind(endpoint)
    else:
        sock.connect(endpoint)
    return sock


@dataclass
class FrameSender:
    """Sends one message type on a PUSH socket, numbering frames +1 per message."""

    socket: zmq.Socket
    message_type: MessageType
    joint_count: int
    next_frame_id: int = 0

    def send(self, payload: bytes, *, capture_timestamp_us: int) -> int:
        frame_id = self.next_frame_id
        frame = encode_frame(
            self.message_type,
            frame_id,
            payload,
            capture_timestamp_us=capture_timestamp_us,
            send_timestamp_us=now_us(),
            joint_count=self.joint_count,
        )
        self.socket.send_multipart((TOPICS[self.message_type], frame), copy=False)
        self.next_frame_id = frame_id + 1
        return frame_id

    def send_end(self, payload: bytes = b"") -> None:
        frame = encode_frame(
            MessageType.END_OF_STREAM,
            self.next_frame_id,
            payload,
            capture_timestamp_us=0,
            send_timestamp_us=now_us(),
            joint_count=0,
        )
        self.socket.send_multipart((TOPICS[MessageType.END_OF_STREAM], frame))


@dataclass
class Received:
    header: MotionFrameHeader
    payload: memoryview


@dataclass
class FrameReceiver:
    """Validates every message on a PULL socket; rejects are counted by reason, never raised."""

    socket: zmq.Socket
    message_type: MessageType
    joint_count: int | None
    rejects: Counter[str] = field(default_factory=Counter)

    def recv(self, timeout_ms: int | None = None) -> Received | None:
        """The next valid message, or None on timeout / a counted reject / end of stream marker.

        End-of-stream messages are returned too (header.message_type tells).
        """
        if timeout_ms is not None and not self.socket.poll(timeout_ms):
            return None
        parts = self.socket.recv_multipart(copy=False)
        if len(parts) != 2:
            self.rejects["bad_parts"] += 1
            return None
        topic, body = parts[0].bytes, parts[1].buffer
        expected = None if topic == TOPICS[MessageType.END_OF_STREAM] else self.message_type
        try:
            header, payload = decode_frame(
                body,
                expected_type=expected,
                expected_joint_count=None if expected is None else self.joint_count,
            )
        except HeaderError as exc:
            self.rejects[exc.reason] += 1
            return None
        if topic != TOPICS[header.message_type]:
            self.rejects["wrong_topic"] += 1
            return None
        return Received(header, payload)
