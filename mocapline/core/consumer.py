"""The consumer end of the robot port (public as ``mocapline.client``): what a robot process
imports to receive the MocapFrame stream exactly once, in order, across restarts of the streamer
and of itself.

    from mocapline.client import MocapClient, ClientSettings

    with MocapClient(ClientSettings("tcp://127.0.0.1:5555", name="g1-left", state="g1-left.pos")) as client:
        for frame in client.frames():          # stops after idle_s without frames, or at close
            if frame.is_end:                   # END_OF_STREAM: frame.end has last_frame_id, frames_sent, reason
                continue
            apply(frame.mocap)                 # a checked MocapFrame (every repeated field's length)

It connects one DEALER to the streamer's robot port and speaks the acknowledged link protocol there
(docs/protocol.md): HELLO with its name and stored position, WELCOME, frames, ACKs. Every frame's
44-byte header, CRC32 and lengths are checked before it is handed out; rejects are counted by
reason (``rejects``), never raised. Duplicates (resends) are dropped, a gap makes it ask again, so
the caller sees each frame once and in order.

A frame counts as processed when the caller asks for the next one: the position (sender epoch,
frame_id) is then written to the ``PositionStore`` (``state``: a JSON file, replaced atomically)
*before* it is acknowledged, so a restarted client resumes right after the last frame it finished,
and the streamer keeps everything after it. For exactly-once into the caller's own storage, give a
``PositionStore`` whose ``load`` reads the position back from that storage (``mocapline tap``
does: its recording is its store). ``curve_client_key`` / ``curve_server_public``: CURVE, as for
the viewer (``mocapline keys``).

It lives in the core because the stages read their fan-out inputs through it too (``durable``).
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import zmq

from mocapline.core import pb
from mocapline.core.frames import parse_mocap_frame
from mocapline.core.header import MessageType, MotionFrameHeader
from mocapline.core.reliable import NO_EPOCH, ReliableReceiver
from mocapline.core.transport import client_link

__all__ = ["ClientSettings", "FilePosition", "Frame", "MemoryPosition", "MocapClient", "PositionStore"]


class WrongRobot(ValueError):
    """A frame for another robot build than the consumer's (MocapFrame.robot_model)."""

    reason = "robot_model"


@dataclass(frozen=True)
class ClientSettings:
    endpoint: str = "tcp://127.0.0.1:5555"
    name: str = "robot"  # this consumer's identity at the streamer: stable across its restarts, unique
    state: Path | str | None = None  # where the position is kept (a JSON file); None = in memory only
    curve_client_key: str = ""
    curve_server_public: str = ""
    # The robot this consumer drives: frames for another build are refused (counted ``robot_model``);
    # "" takes any. ``joint_count`` None takes the count each frame's header gives (and checks the
    # payload against it); a number refuses any other.
    robot_model: str = ""
    joint_count: int | None = None
    fsync: bool = False  # flush the position file to disk on every write (power cuts, not just crashes)
    message_type: MessageType = MessageType.MOTION_FRAME  # HUMAN_FRAME: a retarget worker on capture's fan-out
    # Several performers: hand out only these avatar indices (None: all). The others are still
    # taken off the link and acknowledged, so the position moves on past them.
    performers: frozenset[int] | None = None


class PositionStore(Protocol):
    """Where a client's position lives: the last frame it finished, as (sender epoch, frame_id)."""

    def load(self) -> tuple[bytes, int] | None: ...

    def save(self, epoch: bytes, frame_id: int) -> None: ...


class MemoryPosition:
    def __init__(self) -> None:
        self.position: tuple[bytes, int] | None = None

    def load(self) -> tuple[bytes, int] | None:
        return self.position

    def save(self, epoch: bytes, frame_id: int) -> None:
        self.position = (epoch, frame_id)


class FilePosition:
    """``{"epoch": hex, "frame_id": n}`` in a file, replaced atomically on every save."""

    def __init__(self, path: Path | str, fsync: bool = False) -> None:
        self.path = Path(path)
        self.fsync = fsync

    def load(self) -> tuple[bytes, int] | None:
        try:
            d = json.loads(self.path.read_text())
            return bytes.fromhex(d["epoch"]), int(d["frame_id"])
        except FileNotFoundError:
            return None

    def save(self, epoch: bytes, frame_id: int) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "w") as fh:
            json.dump({"epoch": epoch.hex(), "frame_id": frame_id}, fh)
            if self.fsync:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, self.path)


@dataclass
class Frame:
    """One frame handed out: checked header, raw payload, and the decoded message."""

    frame_id: int
    epoch: bytes  # the sender's 16-byte epoch (from its WELCOME)
    header: MotionFrameHeader
    payload: bytes
    mocap: pb.MocapFrame | None = None  # MOTION_FRAME
    end: pb.EndOfStream | None = None  # END_OF_STREAM

    @property
    def is_end(self) -> bool:
        return self.end is not None

    @property
    def wire(self) -> bytes:
        """The payload's bytes as they arrived (after the 44-byte header)."""
        return self.payload


def routing_id(name: str) -> bytes:
    """The DEALER's ZeroMQ identity: the consumer's name, so that a restarted port can tell it it is
    back (RESTARTED, docs/protocol.md); none for a name ZeroMQ would not take (empty, over 255
    bytes, or starting with a zero byte)."""
    raw = name.encode()
    return raw if 0 < len(raw) <= 255 and raw[0] != 0 else b""


class MocapClient:
    """A named, acknowledging consumer of the robot port (see the module docstring)."""

    def __init__(self, settings: ClientSettings, store: PositionStore | None = None,
                 ctx: zmq.Context | None = None) -> None:
        self.settings = settings
        if store is None:
            store = FilePosition(settings.state, settings.fsync) if settings.state is not None else MemoryPosition()
        self.store = store
        self._own_ctx = ctx is None
        self.ctx = ctx or zmq.Context()
        self.sock = client_link(self.ctx, zmq.DEALER, settings.endpoint, curve_client_key=settings.curve_client_key,
                                curve_server_public=settings.curve_server_public,
                                routing_id=routing_id(settings.name))
        self.sock.setsockopt(zmq.LINGER, 0)
        position = store.load()
        epoch, last = position if position is not None else (NO_EPOCH, -1)
        self._saved = (epoch, last)
        self.rx = ReliableReceiver(self.sock, self.sock, settings.message_type, settings.joint_count,
                                   epoch=epoch, last=last, name=settings.name, before_ack=self._save)
        self.rejects: Counter[str] = self.rx.rejects
        self.delivered = 0
        self.skipped = 0  # frames of performers this client did not ask for

    def _save(self, epoch: bytes | None = None, last: int | None = None) -> None:
        position = (self.rx.epoch, self.rx.last)
        if position != self._saved and self.rx.welcomed:
            self.store.save(*position)
            self._saved = position

    def recv(self, timeout_ms: int = 100) -> Frame | None:
        """The next frame (each once, in order), or None on timeout. Everything handed out before
        this call is taken as processed: its position is stored, then acknowledged."""
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            self._save()
            got = self.rx.recv(max(0, int((deadline - time.monotonic()) * 1000)))
            if got is None:
                return None
            frame = Frame(got.header.frame_id, self.rx.epoch, got.header, bytes(got.payload))
            try:
                if got.header.message_type is MessageType.END_OF_STREAM:
                    frame.end = pb.EndOfStream.FromString(frame.payload)
                else:
                    frame.mocap = parse_mocap_frame(frame.payload, got.header.joint_count)
                    robot = self.settings.robot_model
                    if robot and frame.mocap.robot_model and frame.mocap.robot_model != robot:
                        raise WrongRobot(f"a frame for {frame.mocap.robot_model!r}, this consumer drives {robot!r}")
                    wanted = self.settings.performers
                    if wanted is not None and frame.mocap.avatar_index not in wanted:
                        self.skipped += 1
                        continue
            except Exception as exc:  # noqa: BLE001 - FrameFieldError, ProtobufDecodeError, protobuf's DecodeError
                self.rejects[getattr(exc, "reason", "protobuf")] += 1  # counted, skipped, never raised
                if time.monotonic() >= deadline:
                    return None
                continue
            self.delivered += 1
            return frame

    def commit(self) -> None:
        """Store the position and acknowledge now (``recv`` does both on its next call)."""
        self._save()
        self.rx.ack()

    def run(self, handler: Callable[[Frame], bytes | None], *, idle_s: float | None = None,
            until_end: bool = False) -> int:
        """Exactly once on the consumer's side: ``handler(frame)`` applies a frame and returns what
        to keep of it; the result and the frame's position are then stored in one step, before
        the frame is acknowledged, and only then is the next frame asked for. With a ``Journal``
        as the store (``MocapClient(settings, store=Journal(path))``), one record holds both; with
        the caller's own store, ``handler`` writes its result and the position
        (``frame.epoch``, ``frame.frame_id``) in one transaction of its own and ``store.load``
        reads that position back. A consumer killed anywhere resumes after the last frame whose
        result is stored: each frame's result is stored once. A handler that raises leaves its
        frame unstored and unacknowledged (the exception propagates; the frame comes again).
        Returns the frames handled; stops as ``frames`` does."""
        record = getattr(self.store, "record", None)
        handled = 0
        for frame in self.frames(idle_s, until_end=until_end):
            try:
                result = handler(frame)
            except BaseException:
                # nothing of it is stored: neither its position nor an ACK may cover it (close()
                # would commit it); the port sends it again, now or to the next run
                self.rx.rewind(frame.frame_id - 1)
                raise
            if record is not None:
                record(frame.epoch, frame.frame_id, result)
            self._saved = (frame.epoch, frame.frame_id)  # stored: by the record, or in the handler's transaction
            handled += 1
        return handled

    def frames(self, idle_s: float | None = None, *, until_end: bool = False) -> Iterator[Frame]:
        """Frames as they come; stops after ``idle_s`` without one (None: never) or, with
        ``until_end``, after END_OF_STREAM."""
        last = time.monotonic()
        while True:
            frame = self.recv(100)
            if frame is not None:
                last = time.monotonic()
                yield frame
                if until_end and frame.is_end:
                    self.commit()
                    return
            elif idle_s is not None and time.monotonic() - last > idle_s:
                self.commit()
                return

    @property
    def welcomed(self) -> bool:
        return self.rx.welcomed

    def snapshot(self) -> dict[str, Any]:
        return {**self.rx.snapshot(), "delivered": self.delivered, "rejected_by_reason": dict(self.rejects),
                "epoch": self.rx.epoch.hex()}

    def close(self) -> None:
        """Store the position and acknowledge what was handed out, then close."""
        try:
            self.commit()
        finally:
            self.sock.close(linger=100)
            if self._own_ctx:
                self.ctx.term()

    def __enter__(self) -> MocapClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
