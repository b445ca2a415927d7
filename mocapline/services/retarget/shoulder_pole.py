"""Arms pass the G1 shoulder's gimbal pole in front: the live fix for the limit-to-limit swing.

A G1 shoulder is pitch, then roll, then yaw. When the upper arm points along the pitch axis (the
torso's lateral axis: arm straight out sideways), pitch and yaw turn about the same line: that
direction is the *pole* of the shoulder, and the pitch is the arm's azimuth around it. An arm rising
sideways past the pole turns the pitch by about half a turn, and which way is decided by the side
of the pole the arm passes: in front, the pitch runs 0 -> -pi (the arm forward, then up); behind,
0 -> +pi. Only the front half is inside the joint range overhead (pitch -3.09 .. +2.67 rad), so an
arm that passed behind ends at +2.67, short of overhead, and the next raise that passes in front
sends the same joint to -3.09: the demo take's limit-to-limit swings (docs/retarget.md). The IK
tracks exactly either way where the choice is made, so no cost inside the IK can tell the two
apart there, and the better side shows only 20-40 frames later.

What decides the side is the target, so the target is moved: within ``zone`` of the pole, an arm
more than ``behind_min`` behind it (the forward component of its direction, off the pole) is
reflected to the front, fully from ``behind_full`` and within ``core`` of the pole; the whole arm
(upper arm, forearm, hand: positions about the shoulder, orientations) is turned by the smallest
rotation that does it. Weights are smoothsteps, so the targets stay smooth. An arm passing straight
through the pole (a sideways raise to the horizontal and a little above, which the G1 follows by
rolling on) or near it in front is left as it is. On the way down the same rule turns the pitch
back through the front. Stateless and causal: no delay, the same on every frame of a stream.

The pole and the forward direction come from the human's torso target (the config's
``torso_link`` entry: its human body's orientation times the entry's rotation offset) and the
G1's shoulder pitch axes in the torso frame, so they are where the robot's are once the torso
tracks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import mujoco
import numpy as np

from mocapline.core import quat as Q
from mocapline.core.bodies import GMR_BODY_INDEX

from .config import IKConfig

SIDES = ("left", "right")
TORSO = "torso_link"


@dataclass(frozen=True)
class PoleOptions:
    zone: float = 0.5  # rad: arms within this angle of the pole are looked at ...
    core: float = 0.25  # rad: ... and reflected in full within this one
    behind_min: float = 0.02  # an arm further behind the pole than this (direction's forward component) ...
    behind_full: float = 0.06  # ... is reflected, in full from this far behind


def _smoothstep(x: float) -> float:
    x = min(1.0, max(0.0, x))
    return x * x * (3.0 - 2.0 * x)


class ShoulderPoles:
    """Moves arm targets that pass behind a shoulder's pole to its front (see the module)."""

    def __init__(self, model: mujoco.MjModel, config: IKConfig, options: PoleOptions | None = None) -> None:
        self.options = options or PoleOptions()
        torso = [e for e in config.tables()[-1] if e.robot_frame == TORSO]
        if not torso:
            raise ValueError(f"the IK config has no {TORSO!r} entry: the shoulder poles need the torso's target")
        entry = torso[0]
        data = mujoco.MjData(model)
        mujoco.mj_kinematics(model, data)
        body = model.body(TORSO).id
        torso_rot = data.xmat[body].reshape(3, 3)
        offset = Q.to_matrix(entry.rotation_offset)
        outward = []
        for side in SIDES:
            joint = model.joint(f"{side}_shoulder_pitch_joint")
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
        self.moved = 0  # arm-frames moved so far

    def apply(self, positions: np.ndarray, quaternions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The frame's (23, 3) positions and (23, 4) quaternions with arms passing behind a pole
        moved to its front; the inputs themselves when nothing moves (the usual case: a few
        microseconds, in Python floats)."""
        torso = quaternions[self._torso]
        axes = (np.multiply.outer(torso, torso).reshape(16) @ self._axes).tolist()
        arms = (self._upper_arms @ positions).tolist()
        fx, fy, fz = axes[6:9]
        out_p, out_q = positions, quaternions
        for i, (ax, ay, az) in enumerate((axes[0:3], axes[3:6])):
            ux, uy, uz = arms[i]
            pole = ax * ax + ay * ay + az * az
            arm = ux * ux + uy * uy + uz * uz
            if not (pole > 1e-18 and arm > 1e-18):  # NaN fails too: the retargeter refuses the frame
                continue
            cos = (ux * ax + uy * ay + uz * az) / math.sqrt(pole * arm)
            if not cos > self._cos_zone:
                continue
            # forward, off the pole: f - (f.a) a, normalised (a, f and the arm scaled alike)
            fa = (fx * ax + fy * ay + fz * az) / pole
            hx, hy, hz = fx - fa * ax, fy - fa * ay, fz - fa * az
            behind = -(ux * hx + uy * hy + uz * hz) / math.sqrt((hx * hx + hy * hy + hz * hz) * arm)
            if behind > self.options.behind_min:
                if out_p is positions:
                    out_p, out_q = positions.copy(), quaternions.copy()
                self._move(out_p, out_q, self._arms[i], math.acos(min(1.0, cos)), behind,
                           np.array([hx, hy, hz]))
        return out_p, out_q

    def _move(self, positions: np.ndarray, quaternions: np.ndarray, bodies: tuple[int, int, int],
              theta: float, behind: float, ahead: np.ndarray) -> None:
        """Turn one arm (in place) ``theta`` off its pole and ``behind`` it towards ``ahead``."""
        o = self.options
        shoulder = positions[bodies[0]].copy()
        arm = positions[bodies[1]] - shoulder
        arm /= np.linalg.norm(arm)
        ahead = ahead / np.linalg.norm(ahead)
        weight = 1.0 - _smoothstep((theta - o.core) / (o.zone - o.core))
        share = _smoothstep((behind - o.behind_min) / (o.behind_full - o.behind_min))
        target = arm + 2.0 * behind * weight * share * ahead
        target /= np.linalg.norm(target)
        axis = np.cross(arm, target)
        sin = float(np.linalg.norm(axis))
        if sin < 1e-12:
            return
        angle = math.atan2(sin, float(arm @ target))
        turn = np.concatenate(([math.cos(0.5 * angle)], math.sin(0.5 * angle) * axis / sin))
        rest = [bodies[1], bodies[2]]
        positions[rest] = shoulder + Q.rotate(turn, positions[rest] - shoulder)
        quaternions[list(bodies)] = Q.multiply(turn, quaternions[list(bodies)])
        self.moved += 1
