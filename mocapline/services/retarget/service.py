"""`mocapline retarget`: HumanFrames in, G1 RobotFrames out, one per frame, same posture_index.

PULL (connect) HumanFrames from capture, GMR-style IK onto the Unitree G1 (mujoco + mink's
formulation + daqp; see ``mocapline/services/retarget/retargeter.py``), PUSH (bind) RobotFrames to the
streamer, with the capture timestamp and trace context carried over. A failed solve never stops
the stream: the frame goes out with the last good pose, flagged ``ik_failed``, and is counted.
END_OF_STREAM is forwarded in order (after any frame the output filter still holds) and the
service keeps running for the next take. A backward posture_index or a new segment also starts a
new take (the IK settles again from the standing pose).

Counters (``RetargetCounters``) go to stderr at most once a second, to NATS as the 1 Hz heartbeat
(``mocapline.heartbeat.retarget``), and to stdout as one JSON object at exit. Control over NATS:
status, drain (process until the take's END_OF_STREAM has been forwarded), reset, shutdown.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import zmq

from mocapline.core import durable
from mocapline.core.bodies import GMR_BODIES
from mocapline.core.bus import Bus
from mocapline.core.frames import HumanFrame
from mocapline.core.header import G1_JOINT_COUNT, MessageType
from mocapline.core.ledger import SequenceLedger
from mocapline.core.lifecycle import (
    add_service_arguments,
    setup_logging,
    stop_on_signals,
)
from mocapline.core.metrics import LINK_REJECT_REASONS, ServiceMetrics
from mocapline.core.metrics import add_arguments as add_metrics_arguments
from mocapline.core.metrics import start as start_metrics
from mocapline.core.options import EnvArgumentParser
from mocapline.core.tracing import StageTracer
from mocapline.core.tracing import setup as setup_tracing
from mocapline.core.transport import (
    FrameReceiver,
    FrameSender,
    FrameSink,
    lossless_socket,
)

from .config import DEFAULT_CONFIG, SHIPPED_CONFIGS, load_ik_config
from .retargeter import (
    BACKENDS,
    DEFAULT_FPS,
    DEFAULT_ITERATIONS,
    DEFAULT_LM_DAMPING,
    G1Retargeter,
    OneFrameSmoother,
    RetargetOptions,
    robot_frame_from,
)

log = logging.getLogger("mocapline.retarget")

FILTERS = ("none", "smooth3")


def build_parser() -> EnvArgumentParser:
    p = EnvArgumentParser(prog="mocapline retarget", description=__doc__)
    p.add_argument("--input", default="tcp://127.0.0.1:5556", help="capture's HumanFrame endpoint (connect)")
    p.add_argument("--output", default="tcp://127.0.0.1:5557", help="endpoint to bind the RobotFrame PUSH on")
    p.add_argument("--ik-config", default=DEFAULT_CONFIG,
                   help=f"IK config: a shipped name ({', '.join(sorted(SHIPPED_CONFIGS))}) or a JSON file")
    p.add_argument("--human-height", type=float, default=None,
                   help="the performer's height in m (default: the config's human_height_assumption)")
    p.add_argument("--ground-offset", type=float, default=0.0, help="m subtracted from every target's height")
    p.add_argument("--input-fps", type=float, default=DEFAULT_FPS,
                   help="rate of the HumanFrames (the Axis rate): the joint velocity limit is per frame")
    p.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS, help="cap on the IK steps of a frame (it stops earlier once a step gains < 2%%)")
    p.add_argument("--lm-damping", type=float, default=DEFAULT_LM_DAMPING, help="FrameTask Levenberg-Marquardt damping")
    p.add_argument("--filter", choices=FILTERS, default="none",
                   help="output filter: smooth3 = centred [1,2,1]/4 over frames, exactly one frame of delay")
    p.add_argument("--no-velocity-limit", action="store_true", help="do not bound joint speed")
    p.add_argument("--backend", choices=BACKENDS, default="fast", help="IK backend (mink = mink.solve_ik, slower)")
    p.add_argument("--max-takes", type=int, default=0,
                   help="exit after forwarding this many END_OF_STREAM markers; 0 = run until stopped")
    p.add_argument("--status-interval", type=float, default=1.0, help="seconds between status lines on stderr; 0 = off")
    add_service_arguments(p, nats_help="NATS server for heartbeats and control ('' = none)")
    p.add_argument("--shutdown-wait", type=float, default=30.0,
                   help="on exit, seconds to wait for the consumer to take queued frames")
    durable.add_arguments(p)
    add_metrics_arguments(p, "retarget")
    return p


@dataclass
class RetargetCounters:
    """What the retarget stage did; read by the status line, heartbeats and the auditor."""

    frames_in: int = 0  # HumanFrames received and decoded
    gmr_processed: int = 0  # frames through the IK (ik_failed ones included): one per frame in
    robot_frames_sent: int = 0
    ik_failed: int = 0
    decode_errors: int = 0
    ends_forwarded: int = 0
    takes: int = 0
    last_posture_index: int | None = None
    last_sent_posture_index: int | None = None  # of the last RobotFrame sent (kept across END_OF_STREAM)
    ik_ms_total: float = 0.0
    ik_ms_max: float = 0.0
    last_error: str = ""
    input_frame_ids: SequenceLedger = field(default_factory=SequenceLedger)

    @property
    def ik_ms_mean(self) -> float:
        return self.ik_ms_total / self.gmr_processed if self.gmr_processed else 0.0

    def snapshot(self, pending: int, rejects: dict[str, int]) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items() if k != "input_frame_ids"}
        out.pop("ik_ms_total")
        out["ik_ms_mean"] = round(self.ik_ms_mean, 4)
        out["ik_ms_max"] = round(self.ik_ms_max, 4)
        out["pending"] = pending
        out["rejected_by_reason"] = dict(rejects)
        out["input_link"] = self.input_frame_ids.as_dict("frame_id_")
        return out


class RetargetService:
    """The stage without its sockets' set-up: feed it received messages, it sends RobotFrames."""

    def __init__(
        self,
        retargeter: G1Retargeter,
        sender: FrameSink,
        *,
        filter: str = "none",
        metrics: ServiceMetrics | None = None,
        tracer: StageTracer | None = None,
    ) -> None:
        if filter not in FILTERS:
            raise ValueError(f"filter {filter!r}: choose from {FILTERS}")
        self.retargeter = retargeter
        self.sender = sender
        self.metrics = metrics
        self.stage_seconds = metrics.stage_seconds if metrics is not None else None
        self.tracer = tracer
        self.smoother = OneFrameSmoother() if filter == "smooth3" else None
        self.counters = RetargetCounters()
        self.ended = False  # an END_OF_STREAM was forwarded and no frame came after it
        self._segment: int | None = None
        self._qpos: Any = None  # the last pose solved (durable state: a restart starts from it)

    @property
    def pending(self) -> int:
        """Frames taken in but not yet sent (the output filter holds at most one)."""
        return int(self.smoother is not None and self.smoother.pending)

    def on_message(self, msg: Any) -> None:
        """One message from FrameReceiver.recv (a HumanFrame or END_OF_STREAM)."""
        t_in_ns = time.time_ns()
        self.counters.input_frame_ids.observe(msg.header.frame_id)
        if msg.header.message_type is MessageType.END_OF_STREAM:
            self.on_end()
            return
        try:
            frame = HumanFrame.from_bytes(msg.payload)
        except Exception as exc:  # noqa: BLE001 - a bad payload is counted, never fatal
            self.counters.decode_errors += 1
            self.counters.last_error = f"decode: {exc}"
            return
        self.on_frame(frame, t_in_ns)

    def on_frame(self, frame: HumanFrame, t_in_ns: int | None = None) -> None:
        """IK for one HumanFrame; ``t_in_ns`` (time.time_ns) when it was taken off the link."""
        if t_in_ns is None:
            t_in_ns = time.time_ns()
        # a child of capture's span; the RobotFrame carries this one
        span = self.tracer.carry(frame, t_in_ns) if self.tracer is not None else None
        c = self.counters
        c.frames_in += 1
        self.ended = False
        last = c.last_posture_index
        elapsed = 1
        if last is None or frame.posture_index < last or frame.segment != self._segment:
            self._new_take()
        elif frame.posture_index > last:
            elapsed = frame.posture_index - last
        c.last_posture_index = frame.posture_index
        self._segment = frame.segment

        t0 = time.perf_counter()
        result = self.retargeter.retarget(frame.positions, frame.quaternions, elapsed)
        ms = (time.perf_counter() - t0) * 1000.0
        c.gmr_processed += 1
        self._qpos = result.qpos
        c.ik_ms_total += ms
        c.ik_ms_max = max(c.ik_ms_max, ms)
        if result.ik_failed:
            c.ik_failed += 1
            c.last_error = result.error
        if self.smoother is None:
            self._send(robot_frame_from(frame, result.qpos, result.ik_failed), t_in_ns)
        else:
            ready = self.smoother.push(result.qpos, (frame, result.ik_failed, t_in_ns))
            if ready is not None:
                self._send_held(ready)
        if span is not None:
            if result.ik_failed:
                span.set_attribute("mocapline.ik_failed", True)
            span.end()

    def _send_held(self, ready: tuple[Any, Any]) -> None:
        qpos, (frame, failed, t_in_ns) = ready
        self._send(robot_frame_from(frame, qpos, failed), t_in_ns)

    def _send(self, robot_frame: Any, t_in_ns: int) -> None:
        self.sender.send(robot_frame.to_bytes(), capture_timestamp_us=robot_frame.capture_timestamp_us)
        self.counters.robot_frames_sent += 1
        self.counters.last_sent_posture_index = robot_frame.posture_index
        if self.stage_seconds is not None:  # taken off the link -> RobotFrame sent (filter hold included)
            self.stage_seconds.observe((time.time_ns() - t_in_ns) / 1e9)

    def _flush(self) -> None:
        if self.smoother is not None:
            ready = self.smoother.flush()
            if ready is not None:
                self._send_held(ready)

    def _new_take(self) -> None:
        self._flush()
        self.retargeter.reset()
        self.counters.takes += 1

    def on_end(self) -> None:
        """Forward END_OF_STREAM after everything of the take; the next frame starts a new take."""
        self._flush()
        self.sender.send_end()
        self.counters.ends_forwarded += 1
        self.counters.last_posture_index = None
        self._segment = None
        self.ended = True

    def reset(self) -> None:
        self._flush()
        if self.metrics is not None:  # the held frame just sent, before the counters restart
            self.metrics.sync(self.heartbeat())
        self.retargeter.reset()
        if self.smoother is not None:
            self.smoother.reset()
        self.counters = RetargetCounters()
        self._segment = None
        self.ended = False

    def heartbeat(self, rejects: dict[str, int] | None = None) -> dict[str, Any]:
        return self.counters.snapshot(self.pending, rejects or {})

    def durable_state(self) -> dict[str, Any]:
        """What a restarted retarget needs: the counters, the take's position and the last pose."""
        state = {k: v for k, v in asdict(self.counters).items() if k != "input_frame_ids"}
        state["segment"] = self._segment
        state["ended"] = self.ended
        state["qpos"] = None if self._qpos is None else [float(x) for x in self._qpos]
        return state

    def restore(self, state: dict[str, Any]) -> None:
        """Continue after a restart: counters as they were, the IK settling from the last pose."""
        state = dict(state)
        self._segment = state.pop("segment", None)
        self.ended = bool(state.pop("ended", False))
        qpos = state.pop("qpos", None)
        self.counters = RetargetCounters(**{k: v for k, v in state.items() if k in RetargetCounters.__dataclass_fields__})
        if qpos is not None:
            import numpy as np

            self._qpos = np.asarray(qpos, dtype=np.float64)
            self.retargeter.reset(self._qpos)


def status_line(hb: dict[str, Any]) -> str:
    return (
        f"retarget in={hb['frames_in']} processed={hb['gmr_processed']} sent={hb['robot_frames_sent']} "
        f"ik_failed={hb['ik_failed']} pending={hb['pending']} rejected={sum(hb['rejected_by_reason'].values())} "
        f"decode_errors={hb['decode_errors']} last={hb['last_posture_index']} "
        f"ik_ms={hb['ik_ms_mean']:.2f}/{hb['ik_ms_max']:.2f}"
    )


class _NoBus:
    def poll_requests(self) -> list[Any]:
        return []

    def stop(self) -> None:
        pass


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level)
    try:
        options = RetargetOptions(
            iterations=args.iterations,
            lm_damping=args.lm_damping,
            fps=args.input_fps,
            velocity_limit=not args.no_velocity_limit,
            human_height=args.human_height,
            ground_offset=args.ground_offset,
            backend=args.backend,
        )
        options.validate()
        retargeter = G1Retargeter(load_ik_config(args.ik_config), options)
    except (ValueError, OSError) as exc:
        print(f"mocapline retarget: {exc}", file=sys.stderr)
        return 2

    if args.state_dir is not None and args.filter != "none":
        print("mocapline retarget: --filter smooth3 holds a frame in memory, which a crash would lose; "
              "it cannot be combined with --state-dir", file=sys.stderr)
        return 2
    ctx = zmq.Context()
    stage: durable.DurableStage | None = None
    sender: Any
    try:
        if args.state_dir is not None:
            stage = durable.DurableStage(
                ctx, args.state_dir, durable.log_config(args),
                input=durable.LinkSpec(args.input, MessageType.HUMAN_FRAME, len(GMR_BODIES)),
                output=durable.LinkSpec(args.output, MessageType.ROBOT_STATE, G1_JOINT_COUNT),
                window=args.window,
            )
            rx: Any = stage.rx
            sender = stage.out
            out = None
        else:
            rx = FrameReceiver(
                lossless_socket(ctx, zmq.PULL, args.input, bind=False), MessageType.HUMAN_FRAME, len(GMR_BODIES)
            )
            out = lossless_socket(ctx, zmq.PUSH, args.output, bind=True)
            sender = FrameSender(out, MessageType.ROBOT_STATE, G1_JOINT_COUNT)
    except (zmq.ZMQError, ValueError, OSError) as exc:
        print(f"mocapline retarget: cannot bind {args.output}: {exc}", file=sys.stderr)
        ctx.destroy(linger=0)
        return 1
    metrics = start_metrics("retarget", args, reasons=(*LINK_REJECT_REASONS, "decode"))
    tracer = setup_tracing("retarget")
    service = RetargetService(retargeter, sender, filter=args.filter, metrics=metrics, tracer=tracer)
    if stage is not None and stage.restored is not None:
        service.restore(stage.restored)

    def heartbeat() -> dict[str, Any]:
        hb = service.heartbeat(rx.rejects)
        if stage is not None:
            hb["durable"] = stage.snapshot()
            hb["pending"] += stage.unacked
        return hb

    bus: Any = Bus(args.nats, "retarget", heartbeat).start() if args.nats else _NoBus()
    log.info("retarget %s -> %s (config %s, %d steps/frame, lm_damping %s, filter %s)", args.input, args.output,
             retargeter.config.source, options.iterations, options.lm_damping, args.filter)

    stop = stop_on_signals()
    drains: list[Any] = []
    drain_deadline = 0.0
    next_status = time.monotonic() + args.status_interval
    try:
        while not stop.is_set():
            msg = rx.recv(timeout_ms=20)  # durable: also wakes for the output link's ACKs and HELLOs
            if msg is not None:
                service.on_message(msg)
                if stage is not None:
                    stage.done(msg.header.frame_id, service.durable_state())
                if args.max_takes and service.counters.ends_forwarded >= args.max_takes:
                    break
            if stage is not None:
                stage.pump()
            metrics.maybe_sync(heartbeat)
            for req in bus.poll_requests():
                if req.cmd == "drain":
                    drains.append(req)
                    drain_deadline = time.monotonic() + float(req.args.get("timeout", 30)) - 1
                elif req.cmd == "reset":
                    metrics.sync(heartbeat())  # the take's counts into the counters first
                    service.reset()
                    rx.rejects.clear()
                    if stage is not None:  # the fresh counters are remembered at once
                        stage.done(rx.last, service.durable_state())
                    req.answer(metrics.synced(heartbeat()))
                else:
                    req.answer(metrics.synced(heartbeat()))
                    if req.cmd == "shutdown":
                        stop.set()
            delivered = stage is None or stage.unacked == 0
            if drains and ((service.ended and delivered) or time.monotonic() > drain_deadline):
                for req in drains:
                    req.answer(metrics.synced(heartbeat()))
                drains.clear()
            now = time.monotonic()
            if args.status_interval > 0 and now >= next_status:
                print(status_line(heartbeat()), file=sys.stderr, flush=True)
                next_status = now + args.status_interval
    finally:
        if stage is None and (service.pending or (service.counters.robot_frames_sent and not service.ended)):
            service.on_end()  # stopped mid-take: send what is held and tell the next stage
        print(json.dumps(metrics.synced(heartbeat())), flush=True)
        bus.stop()
        metrics.close()
        if tracer is not None:
            tracer.shutdown()
        if stage is not None:  # a restart resumes the take from the log
            stage.close()
        else:
            rx.socket.close(linger=0)
            out.close(linger=int(args.shutdown_wait * 1000))
        ctx.term()
    return 0


if __name__ == "__main__":
    sys.exit(main())
