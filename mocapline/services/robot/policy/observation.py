"""The policy's observation, term by term as its description declares: the reference (the stream at
the timeline's playback time), the measured robot (the newest LowState), the policy's own last
action; one frame of groups, the frames before it (oldest first), the groups after.

Everything is in the robot's stream order until a term picks the policy's joints (``indices``).
Quaternions are w x y z (the stream's and LowState's convention).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from mocapline.core import quat as Q
from mocapline.services.robot.policy.description import PolicyDescription, Term


@dataclass(frozen=True)
class Reference:
    """The motion the policy is asked to follow, now: world frame, Z up."""

    root_pos: np.ndarray  # (3,) m
    root_quat: np.ndarray  # (4,) w x y z
    root_lin_vel: np.ndarray  # (3,) m/s, world
    root_ang_vel: np.ndarray  # (3,) rad/s, world
    joint_pos: np.ndarray  # (n,) rad, stream order

    @classmethod
    def at_rest(cls, joint_pos: np.ndarray, height: float) -> Reference:
        """Standing still, upright, facing +X, at ``joint_pos``."""
        z = np.zeros(3)
        return cls(np.array([0.0, 0.0, height]), np.array([1.0, 0.0, 0.0, 0.0]), z, z.copy(),
                   np.asarray(joint_pos, dtype=np.float64).copy())

    def blend(self, other: Reference, a: float) -> Reference:
        """``a`` of the way from this reference to ``other`` (joints, height and tilt blended;
        velocities scaled by ``a``, since this one is at rest)."""
        quat = Q.slerp(self.root_quat, other.root_quat, a)
        return Reference(self.root_pos + a * (other.root_pos - self.root_pos), quat,
                         self.root_lin_vel + a * (other.root_lin_vel - self.root_lin_vel),
                         self.root_ang_vel + a * (other.root_ang_vel - self.root_ang_vel),
                         self.joint_pos + a * (other.joint_pos - self.joint_pos))


@dataclass(frozen=True)
class Proprio:
    """The measured robot: LowState's joints (stream order) and IMU."""

    q: np.ndarray
    dq: np.ndarray
    quat: np.ndarray  # (4,) w x y z
    gyro: np.ndarray  # (3,) rad/s, the IMU's frame


def yaw_pitch_roll(quat: np.ndarray) -> tuple[float, float, float]:
    """Z-Y-X Euler angles (rad) of a w x y z quaternion, yaw about the world's Z first (as TWIST2's
    quatToEuler)."""
    w, x, y, z = (float(v) for v in quat)
    yaw = math.atan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))
    pitch = math.asin(max(-1.0, min(1.0, 2 * (w * y - z * x))))
    roll = math.atan2(2 * (w * x + y * z), 1 - 2 * (x * x + y * y))
    return yaw, pitch, roll


def from_yaw_pitch_roll(yaw: float, pitch: float, roll: float) -> np.ndarray:
    """The w x y z quaternion of Z-Y-X Euler angles (rad): yaw * pitch * roll."""
    cy, sy = math.cos(yaw / 2), math.sin(yaw / 2)
    cp, sp = math.cos(pitch / 2), math.sin(pitch / 2)
    cr, sr = math.cos(roll / 2), math.sin(roll / 2)
    return np.array([cy * cp * cr + sy * sp * sr, cy * cp * sr - sy * sp * cr,
                     cy * sp * cr + sy * cp * sr, sy * cp * cr - cy * sp * sr])


def roll_pitch(quat: np.ndarray) -> np.ndarray:
    """Roll and pitch (rad) of a w x y z quaternion (:func:`yaw_pitch_roll`'s)."""
    _, pitch, roll = yaw_pitch_roll(quat)
    return np.array([roll, pitch])


def heading_quat(quat: np.ndarray) -> np.ndarray:
    """The yaw part of a w x y z quaternion (rotation about world Z only)."""
    yaw = yaw_pitch_roll(quat)[0]
    return np.array([math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2)])


def to_frame(vec: np.ndarray, quat: np.ndarray, frame: str) -> np.ndarray:
    """A world vector expressed in the root's frame, its heading frame, or left in the world's."""
    if frame == "world":
        return vec
    q = quat if frame == "root" else heading_quat(quat)
    return Q.rotate(Q.conjugate(q), vec)


class Observation:
    """Builds the policy's input from its description; ``history`` is shifted once per call."""

    def __init__(self, policy: PolicyDescription, indices: np.ndarray) -> None:
        self.policy = policy
        self.indices = indices  # the stream index of each policy joint
        self.default = policy.default
        self.frame_terms = policy.terms(policy.frame)
        self.after_terms = policy.terms(policy.after)
        self.history: deque[np.ndarray] = deque(maxlen=max(policy.history, 1))
        self.started = False
        self.width = policy.width

    def reset(self) -> None:
        """The next call initialises the history again (``history_init``)."""
        self.history.clear()
        self.started = False

    def term(self, t: Term, ref: Reference, state: Proprio, last_action: np.ndarray) -> np.ndarray:
        idx = self.indices
        if t.source == "stream":
            if t.name == "root_lin_vel":
                v = to_frame(ref.root_lin_vel, ref.root_quat, t.frame)[list(t.axes)]
            elif t.name == "root_ang_vel":
                v = to_frame(ref.root_ang_vel, ref.root_quat, t.frame)[list(t.axes)]
            elif t.name == "root_height":
                v = ref.root_pos[2:3]
            elif t.name == "root_roll_pitch":
                v = roll_pitch(ref.root_quat)
            else:
                v = ref.joint_pos[idx]
        elif t.source == "lowstate":
            if t.name == "gyro":
                v = state.gyro[list(t.axes)]
            elif t.name == "roll_pitch":
                v = roll_pitch(state.quat)
            elif t.name == "projected_gravity":
                v = Q.rotate(Q.conjugate(state.quat), np.array([0.0, 0.0, -1.0]))
            elif t.name == "joint_pos":
                v = state.q[idx]
            else:
                v = state.dq[idx]
        else:
            v = last_action
        v = np.array(v, dtype=np.float64)
        if t.zero:
            v[list(t.zero)] = 0.0
        if t.offset_default:
            v = v - self.default
        v = v * t.scale
        if t.clip is not None:
            v = np.clip(v, t.clip[0], t.clip[1])
        return v

    def _terms(self, terms: tuple[Term, ...], ref: Reference, state: Proprio, last: np.ndarray) -> np.ndarray:
        if not terms:
            return np.zeros(0)
        return np.concatenate([self.term(t, ref, state, last) for t in terms])

    def __call__(self, ref: Reference, state: Proprio, last_action: np.ndarray) -> np.ndarray:
        """The observation now (float32, the description's width)."""
        frame = self._terms(self.frame_terms, ref, state, last_action)
        n = self.policy.history
        if not self.started:
            fill = frame if self.policy.history_init == "first" else np.zeros_like(frame)
            self.history.extend(fill.copy() for _ in range(n))
            self.started = True
        past = [*self.history] if n else []
        if n:
            self.history.append(frame)
        after = self._terms(self.after_terms, ref, state, last_action)
        return np.concatenate([frame, *past, after]).astype(np.float32)
