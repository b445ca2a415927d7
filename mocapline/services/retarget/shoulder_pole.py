"""Each shoulder keeps its branch at the gimbal pole: the live fix for limit-to-limit swings.

A humanoid shoulder such as the G1's (and the H1's) is pitch, then roll, then yaw. When the upper
arm points along the pitch axis (the torso's lateral axis: the arm straight out sideways), pitch
and yaw turn about the same line: that direction is the shoulder's *pole*, and the pitch is the
arm's azimuth around it. An arm rising sideways past the pole turns the pitch by about half a turn,
and the side of the pole it passes decides which way: in front (negative pitch for the G1) 0 ->
-pi, behind 0 -> +pi. The range is -3.09 .. +2.67 rad, so the two ways end at opposite limits, and
when successive raises pass on alternate sides (the demo take's walk swings the arms a few degrees
either way) the joint sweeps from one limit to the other between them: the limit-to-limit swing
(docs/retarget.md). The IK tracks exactly either way where the side is decided, so no cost inside
the IK can tell them apart.

What decides is the target, so the target is moved. Each arm remembers the branch it last
committed to (its pitch beyond ``committed``); while the arm is within ``zone`` of its pole:

- on the way up (``|pitch| < arm_down``) it is to pass on the side of that branch (no branch yet,
  the first crossing of a take: nothing is moved, the IK chooses);
- on the way down it is to pass on the side that unwinds its present branch (front for a negative
  pitch);
- an arm more than ``behind_min`` on the other side is reflected to the wanted one, in full from
  ``behind_full`` and within ``core`` of the pole: the whole arm (upper arm, forearm, hand) turned
  about the shoulder by the smallest rotation that does it. Weights are smoothsteps of the
  distance to the pole and of how far on the other side the arm is, so targets stay smooth.

So the pitch never changes branch between crossings, and a take whose arms pass each crossing on
its branch's side (every real take in ``assets/motion``) is not changed at all. Causal, no delay:
the state is two signs. The pole and the forward direction come from the human torso's target
(the config's entry for the robot's torso body) and the robot's shoulder pitch axes (the joints its
description names, ``shoulder_pitch``) in the torso frame.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import mujoco
import numpy as np

from mocapline.core import quat as Q
from mocapline.core.bodies import GMR_BODY_INDEX

from .config import IKConfig, MatchEntry

FRONT, BACK = 1.0, -1.0  # sides of the pole; FRONT is the negative-pitch branch


@dataclass(frozen=True)
class PoleOptions:
    zone: float = 0.5  # rad: arms within this angle of the pole are looked at ...
    core: float = 0.25  # rad: ... and reflected in full within this one
    behind_min: float = 0.02  # an arm further than this on the wrong side (its direction's component) ...
    behind_full: float = 0.06  # ... is reflected, in full from this far
    committed: float = 2.0  # rad: |pitch| beyond which an arm is on a branch (remembered)
    arm_down: float = 1.0  # rad: |pitch| below which a crossing is on the way up


def _smoothstep(x: float) -> float:
    x = min(1.0, max(0.0, x))
    return x * x * (3.0 - 2.0 * x)


class ShoulderPoles:
    """Moves arm targets to the side of their shoulder's pole that keeps the pitch's branch (see
    the module). One per IK stream: it holds each arm's branch; :meth:`reset` between takes.
    ``entry``: the IK config's entry for the torso body (:meth:`for_config` finds it)."""

    @classmethod
    def for_config(cls, model: mujoco.MjModel, config: IKConfig, pitch_joints: tuple[str, str], torso: str,
                   options: PoleOptions | None = None) -> ShoulderPoles | None:
        """The poles for ``config``; None for a config without an entry for ``torso`` (no torso
        target to take the poles from)."""
        entry = next((e for e in config.tables()[-1] if e.robot_frame == torso), None)
        return None if entry is None else cls(model, entry, pitch_joints, options)

    def __init__(self, model: mujoco.MjModel, entry: MatchEntry, pitch_joints: tuple[str, str],
                 options: PoleOptions | None = None) -> None:
        self.options = options or PoleOptions()
        data = mujoco.MjData(model)
        mujoco.mj_kinematics(model, data)
        body = model.body(entry.robot_frame).id
        torso_rot = data.xmat[body].reshape(3, 3)
        offset = Q.to_matrix(entry.rotation_offset)
        outward = []
        for name in pitch_joints:
            joint = model.joint(name)
            axis = torso_rot.T @ data.xaxis[joint.id]
            where = torso_rot.T @ (data.xanchor[joint.id] - data.xpos[body])
            outward.append(axis * np.sign(axis @ where))
        # In the human torso body's frame (target rotation = body rotation @ offset): the two
        # outward pitch axes and the torso's forward axis, turned by the body's quaternion at once.
        self._axes = Q.rotation_map(np.array([*outward, [1.0, 0.0, 0.0]]) @ offset.T)
        self._torso = GMR_BODY_INDEX[entry.human_body]
        self._arms = [(GMR_BODY_INDEX[f"{s}Arm"], GMR_BODY_INDEX[f"{s}ForeArm"], GMR_BODY_INDEX[f"{s}Hand"])
                      for s in ("Left", "Right")]
        # positions -> the two upper arms (elbow - shoulder), one product
        self._upper_arms = np.zeros((2, len(GMR_BODY_INDEX)))
        for i, (shoulder, elbow, _) in enumerate(self._arms):
            self._upper_arms[i, shoulder], self._upper_arms[i, elbow] = -1.0, 1.0
        self._cos_zone = math.cos(self.options.zone)
        self.branch = [0.0, 0.0]  # per arm: FRONT, BACK or 0 (none yet)
        self.moved = 0  # arm-frames moved so far

    def reset(self, branches: list[float] | None = None) -> None:
        """A new take: no arm has a branch, or ``branches`` (an IK's that stopped, to go on with)."""
        self.branch = [0.0, 0.0] if branches is None else [float(np.sign(b)) for b in branches[:2]]

    def wanted_sides(self, pitches: tuple[float, float]) -> list[float]:
        """Per arm the side of the pole it is to pass (0: either), given the shoulder pitches of
        the last output; remembers the branches they are on."""
        o = self.options
        sides = []
        for i, pitch in enumerate(pitches):
            if abs(pitch) > o.committed:
                self.branch[i] = FRONT if pitch < 0 else BACK
            sides.append(self.branch[i] if abs(pitch) < o.arm_down else (FRONT if pitch < 0 else BACK))
        return sides

    def apply(self, positions: np.ndarray, quaternions: np.ndarray,
              pitches: tuple[float, float]) -> tuple[np.ndarray, np.ndarray]:
        """The frame's (23, 3) positions and (23, 4) quaternions with each arm near its pole on the
        side its branch wants (``pitches``: the left and right shoulder pitch of the last output);
        the inputs themselves when nothing moves (the usual case: a few microseconds, in Python
        floats)."""
        sides = self.wanted_sides(pitches)
        if not any(sides):
            return positions, quaternions
        torso = quaternions[self._torso]
        axes = (np.multiply.outer(torso, torso).reshape(16) @ self._axes).tolist()
        arms = (self._upper_arms @ positions).tolist()
        fx, fy, fz = axes[6:9]
        out_p, out_q = positions, quaternions
        for i, (ax, ay, az) in enumerate((axes[0:3], axes[3:6])):
            side = sides[i]
            ux, uy, uz = arms[i]
            pole = ax * ax + ay * ay + az * az
            arm = ux * ux + uy * uy + uz * uz
            if not (side and pole > 1e-18 and arm > 1e-18):  # NaN fails too: the retargeter refuses the frame
                continue
            cos = (ux * ax + uy * ay + uz * az) / math.sqrt(pole * arm)
            if not cos > self._cos_zone:
                continue
            # the wanted side's direction off the pole: +-(f - (f.a) a) (a, f and the arm scaled alike)
            fa = (fx * ax + fy * ay + fz * az) / pole
            hx, hy, hz = side * (fx - fa * ax), side * (fy - fa * ay), side * (fz - fa * az)
            wrong = -(ux * hx + uy * hy + uz * hz) / math.sqrt((hx * hx + hy * hy + hz * hz) * arm)
            if wrong > self.options.behind_min:
                if out_p is positions:
                    out_p, out_q = positions.copy(), quaternions.copy()
                self._move(out_p, out_q, self._arms[i], math.acos(min(1.0, cos)), wrong, np.array([hx, hy, hz]))
        return out_p, out_q

    def _move(self, positions: np.ndarray, quaternions: np.ndarray, bodies: tuple[int, int, int],
              theta: float, wrong: float, towards: np.ndarray) -> None:
        """Reflect one arm (in place), ``theta`` off its pole and ``wrong`` on the other side of it,
        to the side ``towards`` points to."""
        o = self.options
        shoulder = positions[bodies[0]].copy()
        arm = positions[bodies[1]] - shoulder
        arm /= np.linalg.norm(arm)
        towards = towards / np.linalg.norm(towards)
        weight = 1.0 - _smoothstep((theta - o.core) / (o.zone - o.core))
        share = _smoothstep((wrong - o.behind_min) / (o.behind_full - o.behind_min))
        target = arm + 2.0 * wrong * weight * share * towards
        target /= np.linalg.norm(target)
        axis = np.cross(arm, target)
        sin = float(np.linalg.norm(axis))
        if sin < 1e-12:
            return
        turn = Q.from_axis_angle(axis, math.atan2(sin, float(arm @ target)))
        rest = [bodies[1], bodies[2]]
        positions[rest] = shoulder + Q.rotate(turn, positions[rest] - shoulder)
        quaternions[list(bodies)] = Q.multiply(turn, quaternions[list(bodies)])
        self.moved += 1
