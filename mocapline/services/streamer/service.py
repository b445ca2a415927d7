"""`mocapline streamer`: RobotFrames in, the MocapFrame stream out on tcp 5555.

Resamples input fps -> output fps (MotionStreamInterpolator: slerp root, linear joints, velocities),
builds MocapFrames (every field, fixed lengths, hands from the G1's FK), wraps each in the 44-byte
MotionFrameHeader + CRC32 and sends it on the robot port (bound; robots and viewers connect).

Durable mode (``--state-dir``): the robot port is a fan-out with identity
(mocapline/core/fanout.py, docs/protocol.md): any number of named consumers (``mocapline.client``,
``mocapline tap``, the viewer) each get every frame once and in order at their own pace, with
their own acknowledgements and backlog on disk; a peer that does not complete the handshake gets
nothing. A RobotFrame is acknowledged only once its MocapFrames are in the streamer's log, in every
output mode; ``--plain-output`` feeds a plain PUSH from that log instead (for consumers that cannot
acknowledge; what it hands out is counted ``unconfirmed``). Without ``--state-dir``: a plain PUSH
(nothing is acknowledged anywhere in that mode; ``zmq_sent`` counts frames handed to ZeroMQ).

Binds on loopback by default; binding another address without CURVE prints a warning.
"""

from __future__ import annotations

import argparse
import logging
import time
from collections import deque
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from mocapline.core.counters import (
    FanoutCounts,
    FanoutTotals,
    StreamerCounts,
    StreamerPerformerCounts,
    durable_counts,
    from_parts,
)
from mocapline.core.fanout import DEFAULT_MAX_BACKLOG, FanoutSender
from mocapline.core.frames import RobotFrame
from mocapline.core.header import MessageType
from mocapline.core.metrics import (
    ServiceMetrics,
)
from mocapline.core.options import EnvArgumentParser, argv, declared_defaults, settings_from
from mocapline.core.stage import (
    Links,
    StageSettings,
    add_stage_arguments,
)
from mocapline.core.tracing import StageTracer
from mocapline.core.transport import FrameSink, add_curve_server_options
from mocapline.robot.description import RobotDescription
from mocapline.robot.registry import add_robot_model_argument, get_robot
from mocapline.services.streamer.frames import MocapFrameBuilder
from mocapline.services.streamer.interpolator import MotionStreamInterpolator

log = logging.getLogger("mocapline.streamer")


class WrongRobotFrame(ValueError):
    reason = "robot_model"


def build_parser() -> EnvArgumentParser:
    p = EnvArgumentParser(prog="mocapline streamer", description=__doc__)
    p.add_argument("--input", default="tcp://127.0.0.1:5557", help="retarget's RobotFrame endpoint (connect)")
    p.add_argument("--output", default="tcp://127.0.0.1:5555",
                   help="the robot port to bind (loopback by default; another address without CURVE warns)")
    add_robot_model_argument(p)
    p.add_argument("--input-fps", type=float, default=60.0, help="rate of the incoming frames (Axis rate)")
    p.add_argument("--output-fps", type=float, default=60.0, help="rate of the outgoing stream")
    p.add_argument("--record-frames", type=Path, default=None,
                   help="also write every MocapFrame sent to this .mlmf file (mocapline/formats/mlmf.py)")
    p.add_argument("--plain-output", action="store_true",
                   help="with --state-dir: a plain PUSH fed from the log, for consumers that cannot acknowledge; "
                        "frames handed to it are counted unconfirmed, and what a consumer's death takes is not resent")
    p.add_argument("--consumer-backlog", type=int, default=DEFAULT_MAX_BACKLOG,
                   help="frames a consumer may fall behind before it stops holding the log (alarm; it is told "
                        "where the kept frames resume when it returns)")
    p.add_argument("--fan-in", action="store_true",
                   help="read RobotFrames from every retarget worker announced in NATS (`mocapline retarget "
                        "--worker`) instead of --input; needs --state-dir (services/streamer/fanin.py)")
    add_curve_server_options(p)
    add_stage_arguments(p, "streamer", nats_help="NATS server for heartbeats and control")
    return p


@dataclass
class StreamerCounters:
    frames_in: int = 0
    ik_failed_in: int = 0
    motion_generated: int = 0
    zmq_sent: int = 0
    takes_ended: int = 0
    out_base: int = 0  # durable: the output log position where this take's counts start (set at reset)
    bridged_frames: int = 0  # frames standing in for a missing posture_index (MocapFrame.bridged)
    last_posture_index: int | None = None  # of the last MocapFrame sent


@dataclass
class PerformerStream:
    """One performer's resampling (its own interpolator: poses of two performers are never
    interpolated into each other) and counts."""

    interp: MotionStreamInterpolator
    name: str = ""
    frames_in: int = 0
    motion_generated: int = 0
    zmq_sent: int = 0

    def counts(self) -> StreamerPerformerCounts:
        return StreamerPerformerCounts(avatar_name=self.name, frames_in=self.frames_in,
                                       motion_generated=self.motion_generated, zmq_sent=self.zmq_sent,
                                       pending=self.interp.pending)


class Streamer:
    """Resamples each performer's RobotFrames on its own and sends the MocapFrames of all of them
    on one stream, each carrying its performer (``avatar_index``, ``avatar_name``)."""

    def __init__(
        self,
        sender: FrameSink,
        input_fps: float,
        output_fps: float,
        *,
        metrics: ServiceMetrics | None = None,
        tracer: StageTracer | None = None,
        robot: RobotDescription | None = None,
    ) -> None:
        self.sender = sender
        self.robot = robot or get_robot()
        self.stage_seconds = metrics.stage_seconds if metrics is not None else None
        self.tracer = tracer
        self.input_fps = input_fps
        self.output_fps = output_fps
        self.performers: dict[int, PerformerStream] = {}
        self.builder = MocapFrameBuilder(self.robot)
        self.counters = StreamerCounters()
        # (payload, capture_timestamp_us or -1 for END_OF_STREAM, taken in at (time_ns),
        #  posture_index, the span to end once this, the frame's last sample, is sent, avatar_index)
        self.outbox: deque[tuple[bytes, int, int, int, Any, int]] = deque()
        self.recorder: Any = None  # a FrameFileWriter: every MocapFrame sent, as sent (--record-frames)
        self.ended = False

    def robot_frame(self, payload: bytes | memoryview) -> RobotFrame:
        """A RobotFrame off the link, for this streamer's robot (ValueError with its reason if not)."""
        frame = RobotFrame.from_bytes(payload, self.robot.joint_count)
        if frame.robot_model and frame.robot_model != self.robot.name:
            raise WrongRobotFrame(f"a RobotFrame for {frame.robot_model!r}; this streamer streams {self.robot.name!r}")
        return frame

    def on_robot_frame(self, frame: RobotFrame, t_in_ns: int | None = None) -> None:
        """Interpolate one RobotFrame; ``t_in_ns`` (time.time_ns) when it was taken off the link."""
        if t_in_ns is None:
            t_in_ns = time.time_ns()
        # a child of retarget's span; the samples carry this one
        span = self.tracer.carry(frame, t_in_ns) if self.tracer is not None else None
        self.counters.frames_in += 1
        self.counters.ik_failed_in += int(frame.ik_failed)
        self.ended = False
        performer = self.performer(frame.avatar_index, frame.avatar_name)
        performer.frames_in += 1
        self._queue(performer.interp.push(frame), t_in_ns, span, frame.avatar_index)

    def performer(self, avatar_index: int, name: str = "") -> PerformerStream:
        stream = self.performers.get(avatar_index)
        if stream is None:
            interp = MotionStreamInterpolator(self.input_fps, self.output_fps)
            stream = self.performers[avatar_index] = PerformerStream(interp, name)
        return stream

    def on_end(self) -> None:
        for avatar_index, stream in self.performers.items():
            self._queue(stream.interp.flush(), time.time_ns(), None, avatar_index)
        self.outbox.append((b"drain", -1, 0, -1, None, -1))  # END_OF_STREAM marker, in order
        self.ended = True
        self.counters.takes_ended += 1

    def _queue(self, samples: list[Any], t_in_ns: int, span: Any = None, avatar_index: int = 0) -> None:
        performer = self.performer(avatar_index)
        if span is not None and not samples:
            span.end()  # downsampled: the frame is folded into the next sample
        last = len(samples) - 1
        for k, s in enumerate(samples):
            msg = self.builder.build(
                self.counters.motion_generated,
                root_pos=s.root_pos,
                root_quat=s.root_quat,
                root_lin_vel=s.root_lin_vel,
                root_ang_vel=s.root_ang_vel,
                joint_pos=s.joint_pos,
                joint_vel=s.joint_vel,
                posture_index=s.posture_index,
                posture_index_first=s.posture_index_first,
                posture_index_last=s.posture_index_last,
                capture_timestamp_us=s.capture_timestamp_us,
                time_s=s.time_s,
                traceparent=s.traceparent,
                session_id=s.session_id,
                avatar_index=avatar_index,
                avatar_name=performer.name,
                bridged=s.bridged,
                hand_joint_pos=s.hand_joint_pos,
                has_hands=s.has_hands,
            )
            self.outbox.append((msg.SerializeToString(), s.capture_timestamp_us, t_in_ns, s.posture_index,
                                span if k == last else None, avatar_index))
            self.counters.motion_generated += 1
            performer.motion_generated += 1
            self.counters.bridged_frames += int(s.bridged)

    def send_ready(self, timeout_ms: int) -> None:
        """Send queued frames while the socket can take them (blocking sends, never dropped)."""
        while self.outbox and self.sender.writable(timeout_ms):
            payload, cap_us, t_in_ns, posture_index, span, avatar_index = self.outbox[0]
            if cap_us < 0:
                self.sender.send_end(self.end_of_stream(payload.decode()))
            else:
                self.sender.send(payload, capture_timestamp_us=cap_us)
                self.counters.zmq_sent += 1
                self.performers[avatar_index].zmq_sent += 1
                if self.recorder is not None:
                    self.recorder.write(payload, time.time_ns())
                self.counters.last_posture_index = posture_index
                if self.stage_seconds is not None:  # RobotFrame taken in -> this sample sent
                    self.stage_seconds.observe((time.time_ns() - t_in_ns) / 1e9)
                if span is not None:
                    span.end()
            self.outbox.popleft()
            timeout_ms = 0

    def end_of_stream(self, reason: str) -> bytes:
        """END_OF_STREAM's payload: the frame_id of the last MocapFrame before it (the marker itself
        takes the next one), the MocapFrames made this take, and why."""
        from mocapline.core import pb

        return pb.EndOfStream(last_frame_id=max(0, self.sender.next_frame_id - 1),
                              frames_sent=self.counters.motion_generated, reason=reason).SerializeToString()

    @property
    def pending(self) -> int:
        queued = sum(1 for entry in self.outbox if entry[1] >= 0)
        return queued + sum(p.interp.pending for p in self.performers.values())

    def heartbeat(self, rejects: dict[str, int] | None = None) -> StreamerCounts:
        c = self.counters
        return StreamerCounts(
            frames_in=c.frames_in, ik_failed_in=c.ik_failed_in, motion_generated=c.motion_generated,
            zmq_sent=c.zmq_sent, takes_ended=c.takes_ended, out_base=c.out_base, bridged_frames=c.bridged_frames,
            last_posture_index=c.last_posture_index, pending=self.pending, ended=self.ended,
            input_fps=self.input_fps, output_fps=self.output_fps,
            performers={str(k): p.counts() for k, p in self.performers.items()},
            rejected_by_reason=dict(rejects or {}),
        )

    def reset(self) -> None:
        self.counters = StreamerCounters()
        self.performers.clear()

    def durable_state(self) -> dict[str, Any]:
        counts = {str(k): {"name": p.name, "frames_in": p.frames_in, "motion_generated": p.motion_generated,
                           "zmq_sent": p.zmq_sent} for k, p in self.performers.items()}
        # vars, not asdict: every counter is a scalar, and asdict deep-copied each one per frame
        return {**vars(self.counters), "ended": self.ended, "performers": counts}

    def restore(self, state: dict[str, Any]) -> None:
        """Counters as they were before a restart; the resampling clock starts again at the next
        frame (at equal rates, the default, that changes nothing)."""
        state = dict(state)
        self.ended = bool(state.pop("ended", False))
        known = StreamerCounters.__dataclass_fields__
        self.counters = StreamerCounters(**{k: v for k, v in state.items() if k in known})
        self.performers.clear()
        for key, saved in (state.get("performers") or {}).items():
            stream = self.performer(int(key), saved.get("name", ""))
            stream.frames_in = int(saved.get("frames_in", 0))
            stream.motion_generated = int(saved.get("motion_generated", 0))
            stream.zmq_sent = int(saved.get("zmq_sent", 0))


@dataclass(frozen=True)
class StreamerSettings:
    """`mocapline streamer`'s flags."""

    input: str
    output: str
    robot_model: str
    input_fps: float
    output_fps: float
    record_frames: Path | None
    plain_output: bool
    consumer_backlog: int
    curve_server_key: str
    curve_clients: str
    stage: StageSettings
    fan_in: bool = False

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> StreamerSettings:
        if args.consumer_backlog < 1:
            raise ValueError("--consumer-backlog must be >= 1")
        if args.fan_in and (args.state_dir is None or not args.nats):
            raise ValueError("--fan-in needs --state-dir and --nats (the workers' ports are announced there)")
        return settings_from(cls, args, stage=StageSettings.from_args(args))

    @classmethod
    def defaults(cls) -> StreamerSettings:
        """The settings of ``mocapline streamer`` with no flag (and no ``MOCAPLINE_*`` variable)."""
        return cls.from_args(declared_defaults(build_parser()))

    def to_argv(self) -> list[str]:
        """The flags that give these settings (those not at their default)."""
        parser = build_parser()
        return argv(parser, {f: getattr(self, f) for f in self.__dataclass_fields__ if f != "stage"}) + \
            self.stage.to_argv(parser)


def exposed(endpoint: str) -> bool:
    """Whether a bind endpoint reaches beyond this host (anything but loopback and ipc)."""
    if not endpoint.startswith("tcp://"):
        return False
    host = endpoint[len("tcp://"):].rpartition(":")[0].strip("[]")
    return host not in ("127.0.0.1", "localhost", "::1") and not host.startswith("127.")


@dataclass
class StreamerLoop:
    """The streamer's part of the stage loop: one input message, then what the output takes."""

    streamer: Streamer
    links: Links

    def step(self) -> bool:
        rx = self.links.rx
        # durable: the outbox is emptied into the log at once; recv wakes for ACKs and HELLOs too
        msg = rx.recv(timeout_ms=0 if self.streamer.outbox else 10)
        if msg is not None:
            if msg.header.message_type is MessageType.END_OF_STREAM:
                self.streamer.on_end()
            else:
                try:
                    self.streamer.on_robot_frame(self.streamer.robot_frame(msg.payload), time.time_ns())
                except ValueError as exc:
                    rx.rejects[getattr(exc, "reason", "invalid")] += 1
        self.streamer.send_ready(timeout_ms=0 if msg is not None else 1)
        if msg is not None:  # the input, its samples and the counters: one record
            self.links.done(msg.header.frame_id, self.streamer.durable_state())
        return True

    def rejects(self) -> dict[str, int]:
        return dict(self.links.rx.rejects)

    def heartbeat(self) -> StreamerCounts:
        hb = self.streamer.heartbeat(self.rejects())
        stage = self.links.durable
        if stage is not None and isinstance(stage.sender, FanoutSender):
            # where every frame of the take is: acknowledged by a consumer, handed out without an
            # acknowledgement, or waiting (motion_generated == zmq_sent + unconfirmed + pending)
            base = self.streamer.counters.out_base
            counts = from_parts(FanoutTotals, stage.sender.counts(base))
            fanout = from_parts(FanoutCounts, stage.sender.snapshot(base))
            hb = replace(hb, zmq_sent=counts.delivered, unconfirmed=counts.unconfirmed,
                         pending=hb.pending + counts.pending, consumers=fanout.consumers,
                         durable=durable_counts(stage.snapshot()))
        return hb

    def reset(self) -> None:
        self.streamer.reset()
        if self.links.durable is not None:
            self.streamer.counters.out_base = self.links.durable.stage_log.next_seq
        self.links.remember(self.streamer.durable_state())

    def begin_drain(self, args: dict[str, Any]) -> None:
        pass

    def drained(self) -> bool:
        return self.streamer.ended and not self.streamer.outbox and self.links.unacked == 0

    def finish(self) -> None:
        if self.streamer.recorder is not None:
            self.streamer.recorder.close()
