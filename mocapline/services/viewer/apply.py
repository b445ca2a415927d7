"""Validate MocapFrames and write them into MuJoCo's qpos, counting every reject by reason.

qpos[0:3] root position, qpos[3:7] root quaternion (w x y z), then the robot's joints, matched to
the model's joints by name (so a model with more joints, such as hands, or another joint order
still gets the right angles).
"""

from __future__ import annotations

import math
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

import mujoco
import numpy as np

from mocapline.core import pb
from mocapline.core.counters import ViewerCounts, ViewerPerformerCounts
from mocapline.core.frames import (
    FrameFieldError,
    ProtobufDecodeError,
    parse_mocap_frame,
)
from mocapline.core.ledger import SequenceLedger
from mocapline.core.tracing import ATTR_BRIDGED, ATTR_BRIDGED_FROM
from mocapline.core.transport import Received

# Performers drawn at most (each its own MjData, its own pose on the page). Frames of more are still
# applied (into one spare MjData) and counted, but not drawn.
MAX_PERFORMERS_SHOWN = 16


LATENCY_WINDOW = 20_000  # frames behind the viewer's latency_p50_ms / latency_p99_ms

@dataclass
class ViewerCounters:
    """viewer_received counts frames that passed every check; rejects are counted by reason."""

    viewer_received: int = 0
    viewer_applied: int = 0
    applied_by_performer: Counter[int] = field(default_factory=Counter)  # avatar_index -> frames applied
    performer_names: dict[int, str] = field(default_factory=dict)  # avatar_index -> avatar_name
    rejected: Counter[str] = field(default_factory=Counter)
    frame_ids: SequenceLedger = field(default_factory=SequenceLedger)
    frame_id_epoch: int | None = None  # the header epoch of the frames counted in frame_ids
    sender_restarts: int = 0  # frame_id numbering started again under a new header epoch
    last_posture_index: int | None = None
    last_latency_s: float = 0.0
    # End-to-end latency (UDP arrival at capture -> applied here) of the latest frames, for p50/p99.
    latencies_s: deque[float] = field(default_factory=lambda: deque(maxlen=LATENCY_WINDOW))
    # The same, since the web view last took them (its per-second latency chart); bounded.
    recent_latencies_s: deque[float] = field(default_factory=lambda: deque(maxlen=2_000))
    _percentiles: dict[str, float | None] | None = field(default=None, repr=False)
    _percentiles_at: float = field(default=0.0, repr=False)
    _latencies_seen: int = field(default=0, repr=False)  # latencies recorded, ever
    _percentiles_of: int = field(default=0, repr=False)  # ... when the percentiles were computed

    def observe_frame_id(self, header: Any) -> None:
        """Count the frame_id's continuity. A new header epoch is a sender that started its
        numbering again (a plain streamer restarted): counted as a restart, not a backward jump."""
        epoch = getattr(header, "epoch", 0)
        if self.frame_id_epoch is not None and epoch != self.frame_id_epoch:
            self.sender_restarts += 1
            self.frame_ids.last = None  # the next frame_id starts the count again
        self.frame_id_epoch = epoch
        self.frame_ids.observe(header.frame_id)

    def record_latency(self, seconds: float) -> None:
        self.last_latency_s = seconds
        self._latencies_seen += 1
        self.latencies_s.append(seconds)
        self.recent_latencies_s.append(seconds)

    def take_recent_latencies(self) -> list[float]:
        """Latencies recorded since the last call (called from the web view's thread: popleft and
        append on a deque are atomic, so none is lost or taken twice)."""
        out = []
        recent = self.recent_latencies_s
        for _ in range(len(recent)):
            out.append(recent.popleft())
        return out

    def latency_percentiles_ms(self) -> dict[str, float | None]:
        """p50 / p99 over the latest frames; computed again at most once a second (the heartbeat,
        the metrics sync and the web page all ask, and each answer would sort the whole window),
        but at once when the window has grown by a tenth since: a take of a fraction of a second
        after a reset is not reported with the empty window's None."""
        now = time.monotonic()
        seen = self._latencies_seen
        grown = seen - self._percentiles_of > 0.1 * max(self._percentiles_of, 1)
        if self._percentiles is None or grown or (seen != self._percentiles_of and now - self._percentiles_at >= 1.0):
            if not self.latencies_s:
                self._percentiles = {"latency_p50_ms": None, "latency_p99_ms": None}
            else:
                p50, p99 = np.percentile(np.fromiter(self.latencies_s, float), [50, 99]) * 1000.0
                self._percentiles = {"latency_p50_ms": round(float(p50), 3), "latency_p99_ms": round(float(p99), 3)}
            self._percentiles_at, self._percentiles_of = now, seen
        return self._percentiles

    def durable_state(self, applied: int | None) -> dict[str, object]:
        """The viewer's record per input frame: counts, and the posture_index it applied (or None)."""
        return {"viewer_received": self.viewer_received, "viewer_applied": self.viewer_applied,
                "last_posture_index": self.last_posture_index, "rejected": dict(self.rejected), "applied": applied,
                "applied_by_performer": {str(k): n for k, n in self.applied_by_performer.items()}}

    def restore(self, state: dict[str, Any]) -> None:
        self.viewer_received = int(state.get("viewer_received", 0))
        self.viewer_applied = int(state.get("viewer_applied", 0))
        self.last_posture_index = state.get("last_posture_index")
        self.rejected.update(state.get("rejected", {}))
        by_performer: dict[str, int] = state.get("applied_by_performer") or {}
        self.applied_by_performer.update({int(k): int(n) for k, n in by_performer.items()})

    @property
    def crc_invalid(self) -> int:
        return self.rejected["crc_mismatch"]

    def counts(self, pending: int = 0, ended: bool = False) -> ViewerCounts:
        latency = self.latency_percentiles_ms()
        return ViewerCounts(
            viewer_received=self.viewer_received,
            viewer_applied=self.viewer_applied,
            crc_invalid=self.crc_invalid,
            rejected_by_reason=dict(sorted(self.rejected.items())),
            frame_id_gaps=self.frame_ids.missing,
            frame_id_duplicates=self.frame_ids.duplicates,
            frame_id_backward=self.frame_ids.backward,
            frame_id_missing_ranges=[list(r) for r in self.frame_ids.missing_ranges],
            sender_restarts=self.sender_restarts,
            last_posture_index=self.last_posture_index,
            latency_p50_ms=latency["latency_p50_ms"],
            latency_p99_ms=latency["latency_p99_ms"],
            performers={str(k): ViewerPerformerCounts(viewer_applied=n, avatar_name=self.performer_names.get(k, ""))
                        for k, n in sorted(self.applied_by_performer.items())},
            viewer_pending=pending,
            ended=ended,
        )


class QposWriter:
    """Maps MocapFrame joint order (the robot's stream order, by name) onto a model's qpos addresses,
    and ``hand_joint_pos`` onto the hands' joints (``hand_names``, where the model has them free)."""

    def __init__(self, model: mujoco.MjModel, joint_names: tuple[str, ...], hand_names: tuple[str, ...] = ()) -> None:
        missing = [n for n in joint_names if mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, n) < 0]
        if missing:
            raise ValueError(f"model lacks joints {missing}")
        self.joint_adr = np.array([model.joint(n).qposadr[0] for n in joint_names], dtype=np.int64)
        has = all(mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, n) >= 0 for n in hand_names)
        self.hand_adr = np.array([model.joint(n).qposadr[0] for n in hand_names] if has else [], dtype=np.int64)

    def write(self, qpos: np.ndarray, msg: pb.MocapFrame) -> None:
        qpos[0:3] = msg.body_pos_w
        w, x, y, z = msg.body_quat_w  # four floats: plain Python is cheaper than numpy here
        norm = math.sqrt(w * w + x * x + y * y + z * z)
        qpos[3:7] = (w / norm, x / norm, y / norm, z / norm) if norm > 0 else (1.0, 0.0, 0.0, 0.0)
        qpos[self.joint_adr] = msg.joint_pos
        if len(self.hand_adr) and len(msg.hand_joint_pos) == len(self.hand_adr):
            qpos[self.hand_adr] = msg.hand_joint_pos


class FrameValidator:
    """Everything a received motion frame must pass before it may touch qpos."""

    def __init__(self, counters: ViewerCounters, robot_model: str = "") -> None:
        self.counters = counters
        self.robot_model = robot_model  # frames for another robot build are refused ("": any)
        self.pending: deque[pb.MocapFrame] = deque()
        self.arrivals: deque[int] = deque()  # time.time_ns() each pending frame was taken in at

    def accept(self, received: Received) -> pb.MocapFrame | None:
        """Validate the payload of a message whose header and CRC already passed (FrameReceiver,
        sharing ``counters.rejected``). Valid frames are queued in ``pending`` (FIFO)."""
        t_in_ns = time.time_ns()
        c = self.counters
        try:
            msg = parse_mocap_frame(received.payload, received.header.joint_count)
        except (FrameFieldError, ProtobufDecodeError) as exc:
            c.rejected[exc.reason] += 1
            return None
        if self.robot_model and msg.robot_model and msg.robot_model != self.robot_model:
            c.rejected["robot_model"] += 1
            return None
        isfinite = math.isfinite
        if not (all(map(isfinite, msg.body_pos_w)) and all(map(isfinite, msg.body_quat_w))
                and all(map(isfinite, msg.joint_pos))):
            c.rejected["non_finite"] += 1
            return None
        c.viewer_received += 1
        c.observe_frame_id(received.header)
        self.pending.append(msg)
        self.arrivals.append(t_in_ns)
        return msg


@dataclass
class PerformerPose:
    """One performer's robot: its MuJoCo state and the posture_index last applied to it."""

    data: mujoco.MjData
    posture_index: int | None = None


class FrameApplier:
    """Applies validated frames in arrival order, each to its performer's robot (one MjData per
    avatar_index; the first performer's is ``data``, what a window shows): qpos written,
    ``mj_kinematics`` (every body's pose: what a window or a web page shows; the dynamics
    ``mj_forward`` would add are never used, and cost several times more per frame: docs/benchmarks.md),
    counted; observes
    the stage and end-to-end latency histograms and the ``viewer.validate_apply`` span when given."""

    def __init__(
        self,
        model: mujoco.MjModel,
        data: mujoco.MjData,
        writer: QposWriter,
        counters: ViewerCounters,
        *,
        metrics: Any = None,
        tracer: Any = None,
    ) -> None:
        self.model = model
        self.data = data
        self.writer = writer
        self.counters = counters
        self.performers: dict[int, PerformerPose] = {}  # the ones drawn, at most MAX_PERFORMERS_SHOWN
        self._spare: mujoco.MjData | None = None  # the others' frames are applied here
        self.stage_seconds = metrics.stage_seconds if metrics is not None else None
        self.end_to_end_seconds = metrics.end_to_end_seconds if metrics is not None else None
        self.tracer = tracer

    def _pose(self, avatar_index: int) -> PerformerPose | None:
        """The performer's robot, made when it is first seen; None past MAX_PERFORMERS_SHOWN."""
        if len(self.performers) >= MAX_PERFORMERS_SHOWN:
            return None
        pose = self.performers[avatar_index] = PerformerPose(self.data if not self.performers
                                                            else mujoco.MjData(self.model))
        return pose

    def apply_pending(self, validator: FrameValidator) -> int:
        """Apply every frame the validator holds, oldest first; returns how many."""
        n = 0
        pending, arrivals = validator.pending, validator.arrivals
        while pending:
            msg = pending.popleft()
            self.apply(msg, arrivals.popleft() if arrivals else time.time_ns())
            n += 1
        return n

    def apply(self, msg: pb.MocapFrame, t_in_ns: int) -> None:
        span = None
        if self.tracer is not None:  # a child of the streamer's span, from the frame's arrival
            span = self.tracer.start(msg.posture_index, msg.traceparent, t_in_ns)
            if msg.bridged:  # it stands in for posture_index, made from (and in the trace of) a real one
                span.set_attribute(ATTR_BRIDGED, True)
                span.set_attribute(ATTR_BRIDGED_FROM, msg.posture_index_last)
        avatar = msg.avatar_index
        pose = self.performers.get(avatar) or self._pose(avatar)
        if pose is not None:
            data = pose.data
            pose.posture_index = msg.posture_index
        else:
            data = self._spare = self._spare or mujoco.MjData(self.model)
        self.writer.write(data.qpos, msg)
        mujoco.mj_kinematics(self.model, data)
        c = self.counters
        c.viewer_applied += 1
        c.applied_by_performer[avatar] += 1
        if avatar not in c.performer_names:
            c.performer_names[avatar] = msg.avatar_name
        c.last_posture_index = msg.posture_index
        now_ns = time.time_ns()
        latency_s = (now_ns // 1000 - msg.capture_timestamp_us) / 1e6  # capture receive -> applied
        c.record_latency(latency_s)
        if self.stage_seconds is not None:
            self.stage_seconds.observe((now_ns - t_in_ns) / 1e9)
        if self.end_to_end_seconds is not None:
            self.end_to_end_seconds.observe(latency_s)
        if span is not None:
            span.set_attribute("mocapline.frame_index", msg.index)
            span.end()
