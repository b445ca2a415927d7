"""`mocapline retarget`: HumanFrames in, RobotFrames out, one per frame, same posture_index.

PULL (connect) HumanFrames from capture, GMR-style IK onto the robot (``--robot-model``; mujoco + mink's
formulation + daqp; see ``mocapline/services/retarget/ik/retargeter.py``), PUSH (bind) RobotFrames to the
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

import argparse
import logging
import time
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal, get_args

import numpy as np

from mocapline.core.counters import FrameIdCounts, HandCounts, RetargetCounts, RetargetPerformerCounts, from_parts
from mocapline.core.frames import HumanFrame
from mocapline.core.header import MessageType
from mocapline.core.ledger import SequenceLedger
from mocapline.core.metrics import ServiceMetrics
from mocapline.core.options import EnvArgumentParser, argv, declared_defaults, settings_from
from mocapline.core.stage import (
    Links,
    StageSettings,
    add_stage_arguments,
)
from mocapline.core.tracing import StageTracer
from mocapline.core.transport import FrameSink
from mocapline.robot.registry import add_robot_model_argument

from .config import DEFAULT_CONFIG, shipped_names
from .hands import HandModel, HandOptions, HandRetargeter
from .ik.options import (
    BACKENDS,
    DEFAULT_FPS,
    DEFAULT_ITERATIONS,
    DEFAULT_LM_DAMPING,
    RetargetOptions,
    add_joint_ranges_argument,
    add_no_footing_argument,
)
from .ik.retargeter import Retargeter, robot_frame_from
from .ik.smoothing import OneFrameSmoother

log = logging.getLogger("mocapline.retarget")

Filter = Literal["none", "smooth3"]  # smooth3: centred [1,2,1]/4 over frames, one frame of delay
FILTERS: tuple[Filter, ...] = get_args(Filter)


def parse_performer_height(text: str) -> tuple[str, float]:
    """``NAME=METRES`` -> (avatar name, height in m)."""
    name, sep, height = text.rpartition("=")
    try:
        value = float(height)
    except ValueError:
        value = 0.0
    if not sep or not name or not 0.5 < value < 3.0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=METRES (a height in metres), e.g. Performer2=1.62")
    return name, value


def build_parser() -> EnvArgumentParser:
    p = EnvArgumentParser(prog="mocapline retarget", description=__doc__)
    p.add_argument("--input", default="tcp://127.0.0.1:5556", help="capture's HumanFrame endpoint (connect)")
    p.add_argument("--output", default="tcp://127.0.0.1:5557", help="endpoint to bind the RobotFrame PUSH on")
    add_robot_model_argument(p)
    p.add_argument("--ik-config", default=DEFAULT_CONFIG,
                   help=f"IK config: the robot's shipped config for a source ({', '.join(shipped_names())}) or a "
                        "JSON file")
    p.add_argument("--human-height", type=float, default=None,
                   help="the performer's height in m (default: the config's human_height_assumption)")
    p.add_argument("--performer-height", type=parse_performer_height, action="append", default=[],
                   metavar="NAME=METRES",
                   help="several performers: the height of the one whose avatar name is NAME (repeat the flag); "
                        "the others use --human-height")
    p.add_argument("--ground-offset", type=float, default=0.0, help="m subtracted from every target's height")
    p.add_argument("--input-fps", type=float, default=DEFAULT_FPS,
                   help="rate of the HumanFrames (the Axis rate): the joint velocity limit is per frame")
    p.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS,
                   help="cap on the IK steps of a frame (it stops earlier once a step gains < 2%%)")
    p.add_argument("--lm-damping", type=float, default=DEFAULT_LM_DAMPING, help="FrameTask Levenberg-Marquardt damping")
    p.add_argument("--filter", choices=FILTERS, default="none",
                   help="output filter: smooth3 = centred [1,2,1]/4 over frames, exactly one frame of delay")
    p.add_argument("--no-velocity-limit", action="store_true", help="do not bound joint speed")
    add_no_footing_argument(p)
    add_joint_ranges_argument(p, what=" (`up --controller policy` sets human)")
    p.add_argument("--backend", choices=BACKENDS, default="fast", help="IK backend (mink = mink.solve_ik, slower)")
    p.add_argument("--max-takes", type=int, default=0,
                   help="exit after forwarding this many END_OF_STREAM markers; 0 = run until stopped")
    p.add_argument("--status-interval", type=float, default=1.0, help="seconds between status lines on stderr; 0 = off")
    p.add_argument("--shutdown-wait", type=float, default=30.0,
                   help="on exit, seconds to wait for the consumer to take queued frames")
    p.add_argument("--worker", default="",
                   help="scale-out: run as the retarget worker NAME ('auto' = host name + a random part, written to "
                        "$TMPDIR/mocapline-retarget-worker), one of several "
                        "sharing the performers (assignment and positions in NATS JetStream; capture needs "
                        "--output-fanout, the streamer --fan-in, and this --state-dir, kept per worker name); "
                        "--output may use port * (any free port: it is announced in NATS)")
    p.add_argument("--advertise-host", default="",
                   help="--worker: the host name the streamer reaches this worker's --output at; default: the "
                        "address --output binds, if a specific one, else this host's address on the route to "
                        "the NATS server (loopback when NATS is on this host)")
    add_stage_arguments(p, "retarget", nats_help="NATS server for heartbeats and control ('' = none)")
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
    hand_frames: int = 0  # frames whose hands were retargeted (the HumanFrame had hand bodies)
    hand_frames_without: int = 0  # frames of a hands build without hand bodies: the hands at rest
    hand_ms_total: float = 0.0
    hand_ms_max: float = 0.0
    input_frame_ids: SequenceLedger = field(default_factory=SequenceLedger)

    @property
    def ik_ms_mean(self) -> float:
        return self.ik_ms_total / self.gmr_processed if self.gmr_processed else 0.0

    def scalars(self) -> dict[str, Any]:
        """Every counter but the input ledger, as a dict (asdict copied the ledger each frame to drop it)."""
        return {name: getattr(self, name) for name in _SCALAR_FIELDS}

    def hand_counts(self) -> HandCounts:
        n = self.hand_frames + self.hand_frames_without
        return HandCounts(frames=self.hand_frames, without_hands=self.hand_frames_without,
                          ms_mean=round(self.hand_ms_total / n, 4) if n else 0.0, ms_max=round(self.hand_ms_max, 4))

    def snapshot(self, pending: int, rejects: dict[str, int],
                 performers: dict[str, RetargetPerformerCounts], hands: bool = False) -> RetargetCounts:
        return RetargetCounts(
            frames_in=self.frames_in, gmr_processed=self.gmr_processed, robot_frames_sent=self.robot_frames_sent,
            ik_failed=self.ik_failed, decode_errors=self.decode_errors, ends_forwarded=self.ends_forwarded,
            takes=self.takes, last_posture_index=self.last_posture_index,
            last_sent_posture_index=self.last_sent_posture_index, ik_ms_max=round(self.ik_ms_max, 4),
            last_error=self.last_error, ik_ms_mean=round(self.ik_ms_mean, 4), pending=pending,
            rejected_by_reason=dict(rejects), performers=performers,
            input_link=from_parts(FrameIdCounts, self.input_frame_ids.as_dict("frame_id_")),
            hands=self.hand_counts() if hands else None,
        )


_SCALAR_FIELDS = tuple(f.name for f in fields(RetargetCounters) if f.name != "input_frame_ids")


@dataclass
class PerformerTrack:
    """One performer's IK state (its own retargeter, take position, last pose, output filter) and
    counts: each performer's frames go in order through its own IK, never another's."""

    retargeter: Retargeter
    smoother: OneFrameSmoother | None = None
    name: str = ""
    hands: HandRetargeter | None = None
    last_posture_index: int | None = None
    segment: int | None = None
    qpos: Any = None  # the last pose solved (durable state: a restart starts from it)
    frames_in: int = 0
    gmr_processed: int = 0
    robot_frames_sent: int = 0

    def counts(self) -> RetargetPerformerCounts:
        return RetargetPerformerCounts(avatar_name=self.name, human_height_m=self.retargeter.human_height,
                                       frames_in=self.frames_in, gmr_processed=self.gmr_processed,
                                       robot_frames_sent=self.robot_frames_sent,
                                       pending=int(self.smoother is not None and self.smoother.pending))


class RetargetService:
    """The stage without its sockets' set-up: feed it received messages, it sends RobotFrames.

    ``retargeter`` serves the first performer; each further performer (avatar_index) gets its own,
    built like it on the same model."""

    def __init__(
        self,
        retargeter: Retargeter,
        sender: FrameSink,
        *,
        filter: Filter = "none",
        metrics: ServiceMetrics | None = None,
        tracer: StageTracer | None = None,
        heights: dict[str, float] | None = None,
    ) -> None:
        if filter not in FILTERS:
            raise ValueError(f"filter {filter!r}: choose from {FILTERS}")
        self.retargeter = retargeter
        self.heights = dict(heights or {})  # avatar name -> human height (m); others: the options'
        self.default_height = retargeter.options.human_height
        self.sender = sender
        self.metrics = metrics
        self.stage_seconds = metrics.stage_seconds if metrics is not None else None
        self.tracer = tracer
        self.filter = filter
        self.counters = RetargetCounters()
        self.ended = False  # an END_OF_STREAM was forwarded and no frame came after it
        self.tracks: dict[int, PerformerTrack] = {}
        hands = retargeter.robot.hands
        # the hands build's hands, one model for every performer (each its own HandRetargeter)
        self.hand_model = HandModel(retargeter.robot) if hands is not None and hands.fingers else None

    def track(self, avatar_index: int, name: str = "") -> PerformerTrack:
        track = self.tracks.get(avatar_index)
        if track is None:
            base = self.retargeter
            retargeter = base if not self.tracks else Retargeter(base.config, replace(base.options), robot=base.robot,
                                                                 model=base.model)
            retargeter.set_human_height(self.heights.get(name, self.default_height))
            smoother = OneFrameSmoother() if self.filter == "smooth3" else None
            # under smooth3 the hands go through the body's filter (centred, its one frame)
            hands = (HandRetargeter(self.hand_model, HandOptions(smooth=smoother is None))
                     if self.hand_model is not None else None)
            track = self.tracks[avatar_index] = PerformerTrack(retargeter, smoother, name, hands)
        return track

    def _scale_from_source(self, track: PerformerTrack, frame: HumanFrame) -> None:
        """The height the source measured (Xsens MXTP13 scaling) scales the performer, unless
        --performer-height or --human-height gave one; a changed scaling rescales."""
        if frame.human_height <= 0 or track.name in self.heights or self.default_height is not None:
            return
        if track.retargeter.human_height != frame.human_height:
            track.retargeter.set_human_height(frame.human_height)

    @property
    def pending(self) -> int:
        """Frames taken in but not yet sent (each performer's output filter holds at most one)."""
        return sum(int(t.smoother is not None and t.smoother.pending) for t in self.tracks.values())

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
        track = self.track(frame.avatar_index, frame.avatar_name)
        self._scale_from_source(track, frame)
        c.frames_in += 1
        track.frames_in += 1
        self.ended = False
        last = track.last_posture_index
        elapsed = 1
        if last is None or frame.posture_index < last or frame.segment != track.segment:
            self._new_take(track)
        elif frame.posture_index > last:
            elapsed = frame.posture_index - last
        c.last_posture_index = track.last_posture_index = frame.posture_index
        track.segment = frame.segment

        t0 = time.perf_counter()
        result = track.retargeter.retarget(frame.positions, frame.quaternions, elapsed)
        ms = (time.perf_counter() - t0) * 1000.0
        c.gmr_processed += 1
        track.gmr_processed += 1
        track.qpos = result.qpos
        c.ik_ms_total += ms
        c.ik_ms_max = max(c.ik_ms_max, ms)
        if result.ik_failed:
            c.ik_failed += 1
            c.last_error = result.error
        qpos = result.qpos
        if track.hands is not None:
            qpos = np.concatenate([qpos, self._hands(track.hands, frame)])
        if track.smoother is None:
            self._send(self._robot_frame(frame, qpos, result.ik_failed), t_in_ns)
        else:
            ready = track.smoother.push(qpos, (frame, result.ik_failed, t_in_ns))
            if ready is not None:
                self._send_held(ready)
        if span is not None:
            if result.ik_failed:
                span.set_attribute("mocapline.ik_failed", True)
            span.end()

    def _hands(self, hands: HandRetargeter, frame: HumanFrame) -> np.ndarray:
        c = self.counters
        t0 = time.perf_counter()
        q = hands.retarget(frame)
        ms = (time.perf_counter() - t0) * 1000.0
        c.hand_ms_total += ms
        c.hand_ms_max = max(c.hand_ms_max, ms)
        if frame.has_hands:
            c.hand_frames += 1
        else:
            c.hand_frames_without += 1
        return q

    def _robot_frame(self, frame: HumanFrame, qpos: np.ndarray, failed: bool) -> Any:
        """The RobotFrame of ``qpos``: the body's, followed by the hands' joints on a hands build."""
        if self.hand_model is None:
            return robot_frame_from(frame, qpos, failed, self.retargeter.robot.name)
        n = len(self.hand_model.rest)
        out = robot_frame_from(frame, qpos[:-n], failed, self.retargeter.robot.name)
        out.hand_joint_pos = np.array(qpos[-n:], dtype=np.float64)
        out.has_hands = frame.has_hands
        return out

    def _send_held(self, ready: tuple[Any, Any]) -> None:
        qpos, (frame, failed, t_in_ns) = ready
        self._send(self._robot_frame(frame, qpos, failed), t_in_ns)

    def _send(self, robot_frame: Any, t_in_ns: int) -> None:
        self.sender.send(robot_frame.to_bytes(), capture_timestamp_us=robot_frame.capture_timestamp_us)
        self.counters.robot_frames_sent += 1
        self.counters.last_sent_posture_index = robot_frame.posture_index
        self.tracks[robot_frame.avatar_index].robot_frames_sent += 1
        if self.stage_seconds is not None:  # taken off the link -> RobotFrame sent (filter hold included)
            self.stage_seconds.observe((time.time_ns() - t_in_ns) / 1e9)

    def _flush(self, track: PerformerTrack) -> None:
        if track.smoother is not None:
            ready = track.smoother.flush()
            if ready is not None:
                self._send_held(ready)

    def _new_take(self, track: PerformerTrack) -> None:
        self._flush(track)
        track.retargeter.reset()
        if track.hands is not None:
            track.hands.reset()
        self.counters.takes += 1

    def on_end(self) -> None:
        """Forward END_OF_STREAM after everything of the take; the next frame starts a new take."""
        for track in self.tracks.values():
            self._flush(track)
            track.last_posture_index = None
            track.segment = None
        self.sender.send_end()
        self.counters.ends_forwarded += 1
        self.counters.last_posture_index = None
        self.ended = True

    def reset(self) -> None:
        for track in self.tracks.values():
            self._flush(track)
        if self.metrics is not None:  # the held frames just sent, before the counters restart
            self.metrics.sync(self.heartbeat())
        self.retargeter.reset()
        self.tracks.clear()
        self.counters = RetargetCounters()
        self.ended = False

    def heartbeat(self, rejects: dict[str, int] | None = None) -> RetargetCounts:
        return self.counters.snapshot(self.pending, rejects or {},
                                      {str(k): t.counts() for k, t in self.tracks.items()},
                                      hands=self.hand_model is not None)

    def durable_state(self) -> dict[str, Any]:
        """What a restarted retarget needs: the counters, and per performer the take's position,
        its counts and the last pose."""
        state: dict[str, Any] = self.counters.scalars()
        state["ended"] = self.ended
        state["performers"] = {
            str(k): {"name": t.name, "segment": t.segment, "last_posture_index": t.last_posture_index,
                     "qpos": None if t.qpos is None else t.qpos.tolist(),
                     "branches": t.retargeter.pole_branches,
                     "hands_q": None if t.hands is None else t.hands.q.tolist(),
                     "frames_in": t.frames_in, "gmr_processed": t.gmr_processed,
                     "robot_frames_sent": t.robot_frames_sent}
            for k, t in self.tracks.items()
        }
        return state

    def restore(self, state: dict[str, Any]) -> None:
        """Continue after a restart: counters as they were, each performer's IK settling from its
        last pose."""
        import numpy as np

        state = dict(state)
        self.ended = bool(state.pop("ended", False))
        performers = state.pop("performers", None) or {}
        known = RetargetCounters.__dataclass_fields__
        self.counters = RetargetCounters(**{k: v for k, v in state.items() if k in known})
        self.tracks.clear()
        for key, saved in performers.items():
            track = self.track(int(key), saved.get("name", ""))
            track.segment, track.last_posture_index = saved.get("segment"), saved.get("last_posture_index")
            track.frames_in = int(saved.get("frames_in", 0))
            track.gmr_processed = int(saved.get("gmr_processed", 0))
            track.robot_frames_sent = int(saved.get("robot_frames_sent", 0))
            if saved.get("qpos") is not None:
                track.qpos = np.asarray(saved["qpos"], dtype=np.float64)
                track.retargeter.reset(track.qpos, saved.get("branches"))
            if track.hands is not None and saved.get("hands_q") is not None:
                track.hands.resume(np.asarray(saved["hands_q"], dtype=np.float64))


def status_line(hb: RetargetCounts) -> str:
    return (
        f"retarget in={hb.frames_in} processed={hb.gmr_processed} sent={hb.robot_frames_sent} "
        f"ik_failed={hb.ik_failed} pending={hb.pending} rejected={sum(hb.rejected_by_reason.values())} "
        f"decode_errors={hb.decode_errors} last={hb.last_posture_index} "
        f"ik_ms={hb.ik_ms_mean:.2f}/{hb.ik_ms_max:.2f}"
    )


@dataclass(frozen=True)
class RetargetSettings:
    """`mocapline retarget`'s flags."""

    input: str
    output: str
    robot_model: str
    ik_config: str
    options: RetargetOptions
    performer_height: dict[str, float]
    filter: Filter
    max_takes: int
    status_interval: float
    shutdown_wait: float
    stage: StageSettings
    worker: str = ""
    advertise_host: str = ""

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> RetargetSettings:
        options = RetargetOptions(
            iterations=args.iterations,
            lm_damping=args.lm_damping,
            fps=args.input_fps,
            velocity_limit=not args.no_velocity_limit,
            footing=not args.no_footing,
            joint_ranges=args.joint_ranges,
            human_height=args.human_height,
            ground_offset=args.ground_offset,
            backend=args.backend,
        )
        options.validate()
        if args.state_dir is not None and args.filter != "none":
            raise ValueError("--filter smooth3 holds a frame in memory, which a crash would lose; "
                             "it cannot be combined with --state-dir")
        stage = StageSettings.from_args(args)
        worker = args.worker
        if worker:
            if worker == "auto":  # replicas on one host network share the hostname: add a random part
                import secrets
                import socket

                worker = f"{socket.gethostname()}-{secrets.token_hex(3)}"
            if stage.state_dir is None or not stage.nats:
                raise ValueError("--worker needs --state-dir and --nats (positions and assignment live there)")
            stage = replace(stage, state_dir=stage.state_dir / worker)
        return settings_from(cls, args, options=options, performer_height=dict(args.performer_height),
                             stage=stage, worker=worker)

    @classmethod
    def defaults(cls) -> RetargetSettings:
        """The settings of ``mocapline retarget`` with no flag (and no ``MOCAPLINE_*`` variable)."""
        return cls.from_args(declared_defaults(build_parser()))

    def to_argv(self) -> list[str]:
        """The flags that give these settings (those not at their default)."""
        parser, o = build_parser(), self.options
        flat = ("input", "output", "robot_model", "ik_config", "filter", "max_takes", "status_interval",
                "shutdown_wait", "worker", "advertise_host")
        values = {f: getattr(self, f) for f in flat}
        values |= {"performer_height": [f"{name}={h!r}" for name, h in self.performer_height.items()],
                   "iterations": o.iterations, "lm_damping": o.lm_damping, "input_fps": o.fps,
                   "no_velocity_limit": not o.velocity_limit, "no_footing": not o.footing,
                   "joint_ranges": o.joint_ranges,
                   "human_height": o.human_height,
                   "ground_offset": o.ground_offset, "backend": o.backend}
        stage = self.stage
        if self.worker and stage.state_dir is not None:  # from_args adds the worker's folder
            stage = replace(stage, state_dir=stage.state_dir.parent)
        return argv(parser, values) + stage.to_argv(parser)


@dataclass
class RetargetLoop:
    """The retarget stage's part of the stage loop: one input message at a time."""

    service: RetargetService
    links: Links
    max_takes: int = 0

    def step(self) -> bool:
        msg = self.links.rx.recv(timeout_ms=20)  # durable: also wakes for the output link's ACKs and HELLOs
        if msg is not None:
            self.service.on_message(msg)
            self.links.done(msg.header.frame_id, self.service.durable_state())
            if self.max_takes and self.service.counters.ends_forwarded >= self.max_takes:
                return False
        return True

    def heartbeat(self) -> RetargetCounts:
        return self.service.heartbeat(self.links.rx.rejects)

    def reset(self) -> None:
        self.service.reset()
        self.links.rx.rejects.clear()
        self.links.remember(self.service.durable_state())  # the fresh counters are remembered at once

    def begin_drain(self, args: dict[str, Any]) -> None:
        pass

    def drained(self) -> bool:
        return self.service.ended and self.links.unacked == 0

    def finish(self) -> None:
        service = self.service
        mid_take = service.pending or (service.counters.robot_frames_sent and not service.ended)
        if self.links.durable is None and mid_take:
            service.on_end()  # stopped mid-take: send what is held and tell the next stage
