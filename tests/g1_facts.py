"""The G1 29-DoF as the tests name it, from its description (mocapline/robot/builds/g1.toml): the
package itself asks the description; many tests are about this one build and read its facts here."""

from __future__ import annotations

import mujoco
import numpy as np

from mocapline.robot import model as robot_model
from mocapline.robot.registry import get_robot

G1 = get_robot("g1")
G1_JOINT_NAMES = G1.joint_names
G1_JOINT_COUNT = G1.joint_count
N_JOINTS = G1.joint_count
G1_VELOCITY_LIMITS = {j.name: j.velocity for j in G1.joints}
VELOCITY_LIMITS = G1.velocity_limits
KP, KD, STAND, REST = G1.kp, G1.kd, G1.stand, G1.rest
LEGS, WAIST, ARMS = G1.group("legs"), G1.group("waist"), G1.group("arms")
GROUPS = G1.groups
IK_SITES = G1.ik_sites
joint_names = robot_model.joint_names
joint_ranges = robot_model.joint_ranges
body_names = robot_model.body_names
site_names = robot_model.site_names


def load_ik_model() -> mujoco.MjModel:
    return robot_model.load_ik_model(G1)


def load_full_model(*, scene: bool = False) -> mujoco.MjModel:
    return robot_model.load_full_model(G1, scene=scene)


def load_reference_model() -> mujoco.MjModel:
    return robot_model.load_reference_model(G1)


def reference_xml_path():  # noqa: ANN201 - a Path
    return robot_model.reference_xml_path(G1)


def model_dir():  # noqa: ANN201 - a Path
    return robot_model.model_dir(G1)


def default_qpos(model: mujoco.MjModel, *, height: float | None = None) -> np.ndarray:
    return robot_model.default_qpos(G1, model, height=height)
