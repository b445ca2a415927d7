"""How a motion meets the ground: foot skate, float, penetration, root travel against the feet's.

Measured on the robot (its sole points: the lowest points of each foot link's collision geoms,
:func:`..footing.foot_geometry`; the floor at z = 0) and on the human source (its ankles against
their stance floor, :func:`..footing.stance_floor`). A foot counts as in contact where the
performer's ankle is within ``CONTACT_M`` of its stance floor: the performer's, not the
retargeter's, so the figure does not grade a detector by itself.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import mujoco
import numpy as np

from mocapline.core.bodies import GMR_BODY_INDEX

from .footing import FOOT_INDEX, FootGeometry, stance_floor

CONTACT_M = 0.025  # the performer's ankle this close to its stance floor: in contact
FLOAT_M = 0.04  # both feet higher than this: floating


@dataclass
class GroundQuality:
    skate_cm_s: float  # mean horizontal speed of a foot while the performer's is in contact
    slid_m: float  # metres the feet slid while in contact, both feet, the whole take
    float_share: float  # frames with both feet more than FLOAT_M up
    penetration_mean_cm: float  # mean depth of the lowest sole point, over the frames it is below
    penetration_max_cm: float
    root_travel_m: float  # horizontal path of the root
    feet_travel_m: float  # horizontal path of the feet, mean of the two

    def as_dict(self) -> dict[str, float]:
        return {k: round(v, 4) for k, v in asdict(self).items()}


def performer_contacts(positions: np.ndarray) -> np.ndarray:
    """(F, 2) bool: each ankle within CONTACT_M of the take's stance floor."""
    positions = np.asarray(positions)
    return positions[:, FOOT_INDEX, 2] - stance_floor(positions) < CONTACT_M


def _path(xy: np.ndarray) -> float:
    return float(np.linalg.norm(np.diff(xy, axis=0), axis=-1).sum()) if len(xy) > 1 else 0.0


def _figures(feet_xy: np.ndarray, lowest: np.ndarray, root_xy: np.ndarray, contacts: np.ndarray, fps: float,
             floor: float) -> GroundQuality:
    """feet_xy (F, 2, 2), lowest (F, 2) heights above ``floor``, root_xy (F, 2), contacts (F, 2)."""
    step = np.linalg.norm(np.diff(feet_xy, axis=0), axis=-1)  # (F-1, 2)
    both = contacts[1:] & contacts[:-1]
    slid = float(step[both].sum())
    skate = float(step[both].mean() * fps * 100.0) if both.any() else 0.0
    depth = floor - lowest.min(axis=1)
    below = depth[depth > 0]
    return GroundQuality(
        skate_cm_s=skate, slid_m=slid,
        float_share=float(((lowest - floor) > FLOAT_M).all(axis=1).mean()) if len(lowest) else 0.0,
        penetration_mean_cm=float(below.mean() * 100.0) if len(below) else 0.0,
        penetration_max_cm=float(below.max() * 100.0) if len(below) else 0.0,
        root_travel_m=_path(root_xy), feet_travel_m=0.5 * (_path(feet_xy[:, 0]) + _path(feet_xy[:, 1])),
    )


def robot_ground(model: mujoco.MjModel, geometry: FootGeometry, qpos: np.ndarray, positions: np.ndarray,
                 fps: float) -> GroundQuality:
    """The robot's figures for solutions ``qpos`` (F, nq) of the human frames ``positions``."""
    data = mujoco.MjData(model)
    bodies = [model.body(name).id for name in geometry.bodies]
    n = len(qpos)
    feet_xy = np.empty((n, 2, 2))
    lowest = np.empty((n, 2))
    for f in range(n):
        data.qpos[:] = qpos[f]
        mujoco.mj_kinematics(model, data)
        for k, b in enumerate(bodies):
            feet_xy[f, k] = data.xpos[b, :2]
            world = data.xpos[b] + geometry.soles[k] @ data.xmat[b].reshape(3, 3).T
            lowest[f, k] = world[:, 2].min()
    return _figures(feet_xy, lowest, np.asarray(qpos)[:, :2], performer_contacts(positions), fps, 0.0)


def human_ground(positions: np.ndarray, fps: float) -> GroundQuality:
    """The source's own figures: its ankles against their stance floor (no sole: penetration is
    the ankles' below that floor)."""
    positions = np.asarray(positions)
    ankles = positions[:, FOOT_INDEX]
    root = positions[:, GMR_BODY_INDEX["Hips"], :2]
    return _figures(ankles[:, :, :2], ankles[:, :, 2], root, performer_contacts(positions), fps,
                    stance_floor(positions))
