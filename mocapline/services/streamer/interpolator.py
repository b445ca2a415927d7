"""MotionStreamInterpolator: a RobotFrame stream at ``input_fps`` -> motion samples at ``output_fps``.

Seed 004, section 8: the human stream's rate and the output rate may differ (60 -> 60, 30 -> 50, ...);
the true rates must be configured or velocities and timing come out wrong. This is the library piece
the streamer wires in (``--input-fps`` / ``--output-fps``); pure numpy.

Time axis: the source ``posture_index``. Frame ``i`` of a take sits at
``t_i = (posture_index_i - posture_index_first) / input_fps`` seconds, so a gap upstream (missing
indices) stretches the segment instead of speeding the motion up. Output sample ``k`` sits at
``k / output_fps``. All clock comparisons are exact (integer arithmetic on the configured rates as fractions).

Causal, no look-ahead: when frame ``i`` arrives, every output sample with ``t_{i-1} < t <= t_i`` is
emitted at once (the first frame of a take emits the sample at t = 0). So at equal rates each input
frame gives exactly one output frame, on the same call, equal to it bit for bit: no added latency.

Per sample:

- joints and root position: linear between frames ``i-1`` and ``i``; root quaternion: slerp
  (shortest arc). A sample that falls on a frame's time copies that frame exactly.
- velocities of the interpolated path, constant over a segment (backward differences at the frame
  times): joint velocity ``(q_i - q_{i-1}) / dt``, root linear velocity likewise (world frame),
  root angular velocity ``log(quat_i * conj(quat_{i-1})) / dt`` (world frame, rad/s). Zero on the
  first frame of a take.
- ``posture_index``: the frame's own index. A sample that falls on a real frame's time, or between
  two consecutive frames (upsampling), carries the later frame's index (``source_last``). A sample
  inside a gap upstream (missing indices between two frames) stands in for the first missing index
  at or after its time: it carries that index and ``bridged = True``. So at equal rates a gap
  1100..1102 before 1103 gives frames 1100, 1101, 1102 (bridged) and 1103 (real), and no real
  posture_index is ever sent twice.
- ``source_first`` .. ``source_last``: the posture_index range the sample came from. It starts at
  the segment's first frame for a sample strictly inside a segment, and reaches back to the oldest
  frame no earlier sample covered (a frame skipped by downsampling is folded into the next
  sample), so every input frame is covered by at least one output sample.

A posture_index lower than the last (Axis restarted, a new take), or a new ``segment``, starts a
new take (output clock restarts; counted in ``takes``); a repeated posture_index is ignored
(counted in ``duplicates``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from mocapline.core import quat as Q


def _rate(value: float) -> Fraction:
    if not value > 0:
        raise ValueError(f"frame rate must be > 0, got {value}")
    return Fraction(str(value)).limit_denominator(1_000_000)


@dataclass(slots=True)
class MotionSample:
    """One output frame of the interpolator (the fields the MocapFrame message carries)."""

    index: int  # output sequence number, +1 per sample across takes
    time_s: float  # since the take's first frame
    source_first: int  # posture_index range this sample came from
    source_last: int
    capture_timestamp_us: int  # of source_last
    root_pos: np.ndarray  # (3,)
    root_quat: np.ndarray  # (4,) w x y z
    root_lin_vel: np.ndarray  # (3,) m/s, world
    root_ang_vel: np.ndarray  # (3,) rad/s, world
    joint_pos: np.ndarray  # (29,)
    joint_vel: np.ndarray  # (29,) rad/s
    ik_failed: bool = False  # a frame it came from was an IK failure
    traceparent: str = ""
    segment: int = 0
    session_id: str = ""
    take: int = 0
    bridged: bool = False  # stands in for the missing index ``bridged_index``
    bridged_index: int = -1
    hand_joint_pos: np.ndarray = field(default_factory=lambda: np.zeros(0))  # (h,) a build with hands
    has_hands: bool = False

    # the names MocapFrame uses
    @property
    def posture_index(self) -> int:
        return self.bridged_index if self.bridged else self.source_last

    @property
    def posture_index_first(self) -> int:
        return self.source_first

    @property
    def posture_index_last(self) -> int:
        return self.source_last


_NO_HANDS = np.zeros(0)


@dataclass
class InterpolatorStats:
    frames_in: int = 0
    samples_out: int = 0
    duplicates: int = 0
    takes: int = 0
    bridged: int = 0  # samples standing in for a missing posture_index


@dataclass
class _Frame:
    posture_index: int
    ticks: int  # time in 1 / MotionStreamInterpolator._unit seconds: exact
    root_pos: np.ndarray
    root_quat: np.ndarray
    joint_pos: np.ndarray
    meta: dict[str, Any] = field(default_factory=dict)


class MotionStreamInterpolator:
    """Resample a RobotFrame stream; see the module docstring for the exact rules."""

    def __init__(self, input_fps: float, output_fps: float) -> None:
        self.input_fps = float(input_fps)
        self.output_fps = float(output_fps)
        self._in = _rate(input_fps)
        self._out = _rate(output_fps)
        # Time as an integer count of 1 / (num(in) * num(out)) s: frame n at n * in_step, sample k
        # at k * out_step, exact as the Fractions were and without making one per comparison.
        self._unit = self._in.numerator * self._out.numerator
        self._in_step = self._in.denominator * self._out.numerator
        self._out_step = self._out.denominator * self._in.numerator
        self.stats = InterpolatorStats()
        self._next_index = 0
        self._reset_take()

    def _reset_take(self) -> None:
        self._first_index: int | None = None
        self._prev: _Frame | None = None
        self._next_k = 0  # next output sample number within the take
        self._uncovered: int | None = None  # oldest posture_index no sample has covered yet
        self._segment: int | None = None

    def reset(self) -> None:
        """End the current take; the next frame starts a new one."""
        if self._first_index is not None:
            self._reset_take()

    def flush(self) -> list[MotionSample]:
        """End of stream: nothing is held back (every due sample went out on its frame's push),
        so this only ends the take; the next frame starts a new one. Returns []."""
        self.reset()
        return []

    @property
    def pending(self) -> int:
        """Input frames held back: always 0 (the interpolator never waits for a later frame)."""
        return 0

    @property
    def equal_rates(self) -> bool:
        return self._in == self._out

    def push(self, frame: Any) -> list[MotionSample]:
        """Feed one RobotFrame (posture_index, capture_timestamp_us, root_pos, root_quat,
        joint_pos, ik_failed, traceparent, segment, session_id); returns the samples now due."""
        return self.push_values(
            int(frame.posture_index),
            np.asarray(frame.root_pos, dtype=np.float64),
            np.asarray(frame.root_quat, dtype=np.float64),
            np.asarray(frame.joint_pos, dtype=np.float64),
            capture_timestamp_us=int(getattr(frame, "capture_timestamp_us", 0)),
            ik_failed=bool(getattr(frame, "ik_failed", False)),
            traceparent=str(getattr(frame, "traceparent", "")),
            segment=int(getattr(frame, "segment", 0)),
            session_id=str(getattr(frame, "session_id", "")),
            hand_joint_pos=np.asarray(getattr(frame, "hand_joint_pos", ()), dtype=np.float64),
            has_hands=bool(getattr(frame, "has_hands", False)),
        )

    def push_values(
        self,
        posture_index: int,
        root_pos: np.ndarray,
        root_quat: np.ndarray,
        joint_pos: np.ndarray,
        **meta: Any,
    ) -> list[MotionSample]:
        segment = meta.get("segment", 0)
        if self._prev is not None and (posture_index < self._prev.posture_index or segment != self._segment):
            self._reset_take()
        if self._prev is not None and posture_index == self._prev.posture_index:
            self.stats.duplicates += 1
            return []
        self.stats.frames_in += 1
        if self._first_index is None:
            self._first_index = posture_index
            self._segment = segment
            self.stats.takes += 1
        quat = root_quat / np.linalg.norm(root_quat)
        if self._prev is not None and np.dot(quat, self._prev.root_quat) < 0:
            quat = -quat  # keep the quaternion sequence continuous
        frame = _Frame(
            posture_index=posture_index,
            ticks=(posture_index - self._first_index) * self._in_step,
            root_pos=np.array(root_pos, dtype=np.float64),
            root_quat=quat,
            joint_pos=np.array(joint_pos, dtype=np.float64),
            meta=meta,
        )
        if self._uncovered is None:
            self._uncovered = posture_index
        out = self._emit(self._prev, frame)
        self._prev = frame
        return out

    def _emit(self, prev: _Frame | None, cur: _Frame) -> list[MotionSample]:
        samples: list[MotionSample] = []
        if prev is None:
            zero3, zero_j = np.zeros(3), np.zeros_like(cur.joint_pos)
            lin, ang, jvel = zero3, zero3, zero_j
            span = 0
        else:
            span = cur.ticks - prev.ticks
            dt = span / self._unit  # int / int: the exact ratio, rounded once
            lin = (cur.root_pos - prev.root_pos) / dt
            jvel = (cur.joint_pos - prev.joint_pos) / dt
            ang = Q.log(Q.multiply(cur.root_quat, Q.conjugate(prev.root_quat))) / dt
        while True:
            t = self._next_k * self._out_step
            if t > cur.ticks:
                break
            hands = cur.meta.get("hand_joint_pos", _NO_HANDS)
            if t == cur.ticks or prev is None:
                pos, quat, joints = cur.root_pos.copy(), cur.root_quat.copy(), cur.joint_pos.copy()
                first = cur.posture_index if self._uncovered is None else self._uncovered
                failed = bool(cur.meta.get("ik_failed", False))
            else:
                u = (t - prev.ticks) / span
                pos = (1.0 - u) * prev.root_pos + u * cur.root_pos
                joints = (1.0 - u) * prev.joint_pos + u * cur.joint_pos
                quat = Q.slerp(prev.root_quat, cur.root_quat, u)
                first = prev.posture_index if self._uncovered is None else min(prev.posture_index, self._uncovered)
                failed = bool(cur.meta.get("ik_failed", False) or prev.meta.get("ik_failed", False))
                before = prev.meta.get("hand_joint_pos", _NO_HANDS)
                if len(before) == len(hands):
                    hands = (1.0 - u) * before + u * hands
            # the first index at or after this sample's time; before cur's, it is one that never arrived
            nominal = cur.posture_index
            if self._first_index is not None:
                nominal = self._first_index - (-t * self._in.numerator // (self._unit * self._in.denominator))
            bridged = prev is not None and nominal < cur.posture_index
            self.stats.bridged += int(bridged)
            samples.append(
                MotionSample(
                    index=self._next_index,
                    time_s=t / self._unit,
                    source_first=first,
                    source_last=cur.posture_index,
                    capture_timestamp_us=int(cur.meta.get("capture_timestamp_us", 0)),
                    root_pos=pos,
                    root_quat=quat,
                    root_lin_vel=lin.copy(),
                    root_ang_vel=ang.copy(),
                    joint_pos=joints,
                    joint_vel=jvel.copy(),
                    ik_failed=failed,
                    traceparent=str(cur.meta.get("traceparent", "")),
                    segment=int(cur.meta.get("segment", 0)),
                    session_id=str(cur.meta.get("session_id", "")),
                    take=self.stats.takes,
                    bridged=bridged,
                    bridged_index=nominal if bridged else -1,
                    hand_joint_pos=hands,
                    has_hands=bool(cur.meta.get("has_hands", False)),
                )
            )
            self._next_index += 1
            self._next_k += 1
            self._uncovered = None
        # No sample (downsampling): _uncovered keeps this frame for the next sample's range.
        self.stats.samples_out += len(samples)
        return samples
