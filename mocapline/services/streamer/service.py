"""`mocapline streamer`: RobotFrames in, the seeds' MocapFrame stream out on tcp 5555.

Resamples input fps -> output fps (MotionStreamInterpolator: slerp root, linear joints, velocities),
builds MocapFrames (every field, fixed lengths, hands from the G1's FK), wraps each in the 44-byte
MotionFrameHeader + CRC32 and PUSHes it (bound: robots and viewers connect). Lossless: when no
consumer is connected or it is slow, frames wait in order in the streamer's queue and latency
grows; nothing is dropped. The queue depth is reported as ``pending``.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import zmq

from mocapline.core import durable
from mocapline.core.bus import Bus
from mocapline.core.frames import RobotFrame
from mocapline.core.header import G1_JOINT_COUNT, MessageType
from mocapline.core.lifecycle import (
    add_service_arguments,
    setup_logging,
    stop_on_signals,
)
from mocapline.core.metrics import (
    LINK_REJECT_REASONS,
    PAYLOAD_REJECT_REASONS,
    ServiceMetrics,
)
from mocapline.core.metrics import add_arguments as add_metrics_arguments
from mocapline.core.metrics import start as start_metrics
from mocapline.core.options import EnvArgumentParser
from mocapline.core.tracing import StageTracer
from mocapline.core.tracing import setup as setup_tracing
from mocapline.core.transport import (
    FrameReceiver,
    FrameSender,
    FrameSink,
    add_curve_server_options,
    lossless_socket,
    server_link,
)
from mocapline.services.streamer.frames import MocapFrameBuilder
from mocapline.services.streamer.interpolator import MotionStreamInterpolator

log = logging.getLogger("mocapline.streamer")


def build_parser() -> EnvArgumentParser:
    p = EnvArgumentParser(prog="mocapline streamer", description=__doc__)
    p.add_argument("--input", default="tcp://127.0.0.1:5557", help="retarget's RobotFrame endpoint (connect)")
    p.add_argument("--output", default="tcp://*:5555", help="endpoint to bind the MocapFrame PUSH on")
    p.add_argument("--input-fps", type=float, default=60.0, help="rate of the incoming frames (Axis rate)")
    p.add_argument("--output-fps", type=float, default=60.0, help="rate of the outgoing stream")
    add_service_arguments(p, nats_help="NATS server for heartbeats and control")
    p.add_argument("--record-frames", type=Path, default=None,
                   help="also write every MocapFrame sent to this .mlmf file (mocapline/formats/mlmf.py)")
    durable.add_arguments(p)
    p.add_argument("--plain-output", action="store_true",
                   help="with --state-dir: keep the output a plain PUSH for consumers that do not acknowledge "
                        "(robots); frames a consumer's death takes with it are then not resent")
    add_curve_server_options(p)
    add_metrics_arguments(p, "streamer")
    return p


@dataclass
class StreamerCounters:
    frames_in: int = 0
    ik_failed_in: int = 0
    motion_generated: int = 0
    zmq_sent: int = 0
    takes_ended: int = 0
    last_posture_index: int | None = None  # of the last MocapFrame sent


class Streamer:
    def __init__(
        self,
        sender: FrameSink,
        input_fps: float,
        output_fps: float,
        *,
        metrics: ServiceMetrics | None = None,
        tracer: StageTracer | None = None,
    ) -> None:
        self.sender = sender
        self.stage_seconds = metrics.stage_seconds if metrics is not None else None
        self.tracer = tracer
        self.input_fps = input_fps
        self.output_fps = output_fps
        self.interp = MotionStreamInterpolator(input_fps, output_fps)
        self.builder = MocapFrameBuilder()
        self.counters = StreamerCounters()
        # (payload, capture_timestamp_us or -1 for END_OF_STREAM, taken in at (time_ns),
        #  posture_index, the span to end once this, the frame's last sample, is sent)
        self.outbox: deque[tuple[bytes, int, int, int, Any]] = deque()
        self.recorder: Any = None  # a FrameFileWriter: every MocapFrame sent, as sent (--record-frames)
        self.ended = False

    def on_robot_frame(self, frame: RobotFrame, t_in_ns: int | None = None) -> None:
        """Interpolate one RobotFrame; ``t_in_ns`` (time.time_ns) when it was taken off the link."""
        if t_in_ns is None:
            t_in_ns = time.time_ns()
        # a child of retarget's span; the samples carry this one
        span = self.tracer.carry(frame, t_in_ns) if self.tracer is not None else None
        self.counters.frames_in += 1
        self.counters.ik_failed_in += int(frame.ik_failed)
        self.ended = False
        self._queue(self.interp.push(frame), t_in_ns, span)

    def on_end(self) -> None:
        self._queue(self.interp.flush(), time.time_ns())
        self.outbox.append((b"", -1, 0, -1, None))  # END_OF_STREAM marker, in order
        self.ended = True
        self.counters.takes_ended += 1

    def _queue(self, samples: list[Any], t_in_ns: int, span: Any = None) -> None:
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
            )
            self.outbox.append((msg.SerializeToString(), s.capture_timestamp_us, t_in_ns, s.posture_index,
                                span if k == last else None))
            self.counters.motion_generated += 1

    def send_ready(self, timeout_ms: int) -> None:
        """Send queued frames while the socket can take them (blocking sends, never dropped)."""
        while self.outbox and self.sender.writable(timeout_ms):
            payload, cap_us, t_in_ns, posture_index, span = self.outbox[0]
            if cap_us < 0:
                self.sender.send_end()
            else:
                self.sender.send(payload, capture_timestamp_us=cap_us)
                self.counters.zmq_sent += 1
                if self.recorder is not None:
                    self.recorder.write(payload, time.time_ns())
                self.counters.last_posture_index = posture_index
                if self.stage_seconds is not None:  # RobotFrame taken in -> this sample sent
                    self.stage_seconds.observe((time.time_ns() - t_in_ns) / 1e9)
                if span is not None:
                    span.end()
            self.outbox.popleft()
            timeout_ms = 0

    @property
    def pending(self) -> int:
        return sum(1 for entry in self.outbox if entry[1] >= 0) + self.interp.pending

    def heartbeat(self) -> dict[str, Any]:
        return {**asdict(self.counters), "pending": self.pending, "ended": self.ended,
                "input_fps": self.input_fps, "output_fps": self.output_fps}

    def reset(self) -> None:
        self.counters = StreamerCounters()
        self.interp = MotionStreamInterpolator(self.input_fps, self.output_fps)

    def durable_state(self) -> dict[str, Any]:
        return {**asdict(self.counters), "ended": self.ended}

    def restore(self, state: dict[str, Any]) -> None:
        """Counters as they were before a restart; the resampling clock starts again at the next
        frame (at equal rates, the default, that changes nothing)."""
        state = dict(state)
        self.ended = bool(state.pop("ended", False))
        self.counters = StreamerCounters(**{k: v for k, v in state.items() if k in StreamerCounters.__dataclass_fields__})


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level)
    reliable_output = args.state_dir is not None and not args.plain_output
    if reliable_output and args.curve_server_key:
        print("mocapline streamer: CURVE on an acknowledged output is not supported yet; "
              "use --plain-output with CURVE, or run without --curve-server-key", file=sys.stderr)
        return 2
    ctx = zmq.Context()
    stage: durable.DurableStage | None = None
    out = curve_auth = None
    try:
        if args.state_dir is not None:
            output_spec = durable.LinkSpec(args.output, MessageType.MOTION_FRAME, G1_JOINT_COUNT)
            stage = durable.DurableStage(
                ctx, args.state_dir, durable.log_config(args),
                input=durable.LinkSpec(args.input, MessageType.ROBOT_STATE, G1_JOINT_COUNT),
                output=output_spec if reliable_output else None, window=args.window,
            )
            rx: Any = stage.rx
        else:
            rx = FrameReceiver(lossless_socket(ctx, zmq.PULL, args.input, bind=False), MessageType.ROBOT_STATE,
                               G1_JOINT_COUNT)
        if not reliable_output:
            out, curve_auth = server_link(ctx, zmq.PUSH, args.output, curve_server_key=args.curve_server_key,
                                          curve_clients=args.curve_clients)
    except (zmq.ZMQError, ValueError, OSError) as exc:
        print(f"mocapline streamer: cannot bind {args.output}: {exc}", file=sys.stderr)
        ctx.destroy(linger=0)
        return 1
    if curve_auth is not None:
        log.info("CURVE on %s: clients admitted from %s", args.output, args.curve_clients)
    metrics = start_metrics("streamer", args, reasons=(*LINK_REJECT_REASONS, *PAYLOAD_REJECT_REASONS))
    tracer = setup_tracing("streamer")
    sender: Any = stage.out if reliable_output and stage is not None else FrameSender(
        out, MessageType.MOTION_FRAME, G1_JOINT_COUNT)
    streamer = Streamer(sender, args.input_fps, args.output_fps, metrics=metrics, tracer=tracer)
    if stage is not None and stage.restored is not None:
        streamer.restore(stage.restored)
    if args.record_frames is not None:
        from mocapline.formats.mlmf import FrameFileWriter

        streamer.recorder = FrameFileWriter(args.record_frames, {
            "generator": "mocapline streamer --record-frames", "input_fps": args.input_fps,
            "output_fps": args.output_fps, "started_ns": time.time_ns()})

    def status() -> dict[str, Any]:
        hb = streamer.heartbeat()
        if stage is not None:
            hb["durable"] = stage.snapshot()
            hb["pending"] += stage.unacked
        return hb

    def counts() -> dict[str, Any]:
        return {**status(), "rejected_by_reason": dict(rx.rejects)}

    bus = Bus(args.nats, "streamer", counts).start()
    stop = stop_on_signals()
    drains: list[Any] = []
    drain_deadline = 0.0
    try:
        while not stop.is_set():
            # durable: the outbox is emptied into the log at once; recv wakes for ACKs and HELLOs too
            msg = rx.recv(timeout_ms=0 if streamer.outbox else 10)
            if msg is not None:
                t_in_ns = time.time_ns()
                if msg.header.message_type is MessageType.END_OF_STREAM:
                    streamer.on_end()
                else:
                    try:
                        streamer.on_robot_frame(RobotFrame.from_bytes(msg.payload), t_in_ns)
                    except ValueError as exc:
                        rx.rejects[getattr(exc, "reason", "invalid")] += 1
            streamer.send_ready(timeout_ms=0 if msg is not None else 1)
            if stage is not None:
                if msg is not None:  # the input, its samples and the counters: one record
                    stage.done(msg.header.frame_id, streamer.durable_state())
                stage.pump()
            metrics.maybe_sync(counts)
            for req in bus.poll_requests():
                if req.cmd == "drain":
                    drains.append(req)
                    drain_deadline = time.monotonic() + float(req.args.get("timeout", 30)) - 1
                elif req.cmd == "reset":
                    metrics.sync(counts())  # the take's counts into the counters first
                    streamer.reset()
                    if stage is not None:
                        stage.done(rx.last, streamer.durable_state())
                    metrics.sync(counts())
                    req.answer(status())
                else:
                    metrics.sync(counts())
                    req.answer(status())
                    if req.cmd == "shutdown":
                        stop.set()
            delivered = not streamer.outbox and (stage is None or stage.unacked == 0)
            if drains and ((streamer.ended and delivered) or time.monotonic() > drain_deadline):
                metrics.sync(counts())
                for req in drains:
                    req.answer(status())
                drains.clear()
    finally:
        metrics.sync(counts())
        print(json.dumps(status()), flush=True)
        if streamer.recorder is not None:
            streamer.recorder.close()
        bus.stop()
        metrics.close()
        if tracer is not None:
            tracer.shutdown()
        if stage is not None:
            stage.close()
        else:
            rx.socket.close(linger=0)
        if out is not None:
            out.close(linger=5000)
        if curve_auth is not None:
            curve_auth.stop()
        ctx.term()
    return 0


if __name__ == "__main__":
    sys.exit(main())
