"""A robot's MuJoCo models, made from its description's model file at load time with
:class:`mujoco.MjSpec` (nothing is downloaded, copied or hand-edited; assets/robot/README.md):

- :func:`load_reference_model`: the file exactly as published;
- :func:`load_full_model`: with its meshes (the viewer), the build's locked joints removed, plus the
  IK sites;
- :func:`load_ik_model`: the same kinematic tree without any geom, mesh, material, actuator, sensor
  or keyframe (kinematics only), the IK's locked joints (hands) removed too;
  ``tests/test_robot_model.py`` proves its forward kinematics equal the reference model's.

qpos layout of the IK model: ``qpos[0:3]`` root position, ``qpos[3:7]`` root quaternion w x y z,
``qpos[7:]`` the description's joints in stream order (= the model's joint order).
"""

from __future__ import annotations

import copy
import importlib.resources
from pathlib import Path

import mujoco
import numpy as np

from .description import RobotDescription, RobotDescriptionError


def model_dir(robot: RobotDescription) -> Path:
    """The directory of the robot's packaged model (its XML, scene, meshes and LICENSE)."""
    m = robot.model
    path = Path(str(importlib.resources.files(m.package) / m.directory))
    if not (path / m.file).is_file():
        raise FileNotFoundError(f"{robot.name}: model {m.file} not found at {path}: install the runtime dependency "
                                f"'{m.package.replace('_', '-')}' (pip install -e .)")
    return path


def reference_xml_path(robot: RobotDescription) -> Path:
    return model_dir(robot) / robot.model.file


def scene_xml_path(robot: RobotDescription) -> Path:
    """The model's scene (floor, light, skybox) around the robot: what the viewer shows."""
    return model_dir(robot) / robot.model.scene


def load_reference_model(robot: RobotDescription) -> mujoco.MjModel:
    """The model file exactly as published (meshes included)."""
    return mujoco.MjModel.from_xml_path(str(reference_xml_path(robot)))


def _lock(spec: mujoco.MjSpec, joints: tuple[str, ...]) -> None:
    """Remove ``joints`` (their bodies stay, fixed at the joint's 0) and what refers to them."""
    if not joints:
        return
    for key in list(spec.keys):
        spec.delete(key)  # a keyframe's qpos no longer fits
    for name in joints:
        joint = spec.joint(name)
        if joint is None:
            raise RobotDescriptionError(f"locked joint {name!r} is not in the model")
        for item in [*spec.actuators, *spec.sensors]:
            if getattr(item, "target", None) == name or getattr(item, "objname", None) == name:
                spec.delete(item)
        spec.delete(joint)


def _add_ik_sites(robot: RobotDescription, spec: mujoco.MjSpec) -> None:
    for name, site_def in robot.ik_sites.items():
        body = spec.body(site_def.body)
        if body is None:
            raise RobotDescriptionError(f"{robot.name}: IK site {name!r}: body {site_def.body!r} not in the model")
        site = body.add_site()
        site.name = name
        site.pos = list(site_def.pos)
        site.size = [0.01, 0.01, 0.01]
        site.group = 5
        site.rgba = [0.1, 0.8, 0.1, 1.0]


def _name_free_joint(robot: RobotDescription, spec: mujoco.MjSpec) -> None:
    """Menagerie's H1 leaves its free joint unnamed; every model here calls it ``floating_base_joint``."""
    root = spec.body(robot.root_body)
    if root is None:
        raise RobotDescriptionError(f"{robot.name}: root body {robot.root_body!r} not in the model")
    for joint in root.joints:
        if joint.type == mujoco.mjtJoint.mjJNT_FREE and not joint.name:
            joint.name = ROOT_JOINT


ROOT_JOINT = "floating_base_joint"


def build_spec(robot: RobotDescription, *, scene: bool = False, ik: bool = False) -> mujoco.MjSpec:
    """The build's model as an editable spec: its locked joints removed, the IK sites added;
    ``ik`` also drops everything but the kinematics and the IK's locked joints."""
    spec = mujoco.MjSpec.from_file(str(scene_xml_path(robot) if scene else reference_xml_path(robot)))
    _name_free_joint(robot, spec)
    _lock(spec, robot.model.lock + (robot.model.ik_lock if ik else ()))
    if ik:
        for item in [*spec.sensors, *spec.actuators, *spec.geoms, *spec.meshes, *spec.materials, *spec.lights,
                     *spec.keys]:
            spec.delete(item)
    _add_ik_sites(robot, spec)
    return spec


def physics_spec(robot: RobotDescription) -> mujoco.MjSpec:
    """The build's model without its visual meshes (collision geoms, actuators and sensors kept):
    what a physics simulation and the torque limits need, without loading a mesh."""
    spec = build_spec(robot)
    for geom in list(spec.geoms):
        if geom.type == mujoco.mjtGeom.mjGEOM_MESH:
            spec.delete(geom)
    for mesh in list(spec.meshes):
        spec.delete(mesh)
    return spec


def load_full_model(robot: RobotDescription, *, scene: bool = False) -> mujoco.MjModel:
    """The model with meshes (for rendering), with the IK sites; ``scene`` adds floor and lights."""
    return build_spec(robot, scene=scene).compile()


_IK_XML: dict[RobotDescription, str] = {}


def load_ik_model(robot: RobotDescription) -> mujoco.MjModel:
    """A fresh mesh-free IK model (kinematics only; FK equal to the reference model's)."""
    if robot not in _IK_XML:
        _IK_XML[robot] = build_spec(robot, ik=True).to_xml()
    model = mujoco.MjModel.from_xml_string(_IK_XML[robot])
    names = joint_names(model)
    if names != robot.joint_names:
        raise RobotDescriptionError(f"{robot.name}: the description's joints {robot.joint_names} are not the IK "
                                    f"model's {names}")
    return model


def with_ik_ranges(robot: RobotDescription, model: mujoco.MjModel) -> mujoco.MjModel:
    """A copy of ``model`` whose joints keep to the description's ``ik_range`` where it gives one
    (the retargeter's ``joint_ranges="human"``); the model passed in is left as it is."""
    out = copy.copy(model)
    for joint in robot.joints:
        if joint.ik_range is None:
            continue
        jid = out.joint(joint.name).id
        low, high = max(out.jnt_range[jid][0], joint.ik_range[0]), min(out.jnt_range[jid][1], joint.ik_range[1])
        if not low < high:
            raise RobotDescriptionError(f"{robot.name}: joint {joint.name}: ik_range {list(joint.ik_range)} "
                                        f"does not meet the model's range {list(model.jnt_range[jid])}")
        out.jnt_range[jid] = (low, high)
    return out


def joint_names(model: mujoco.MjModel) -> tuple[str, ...]:
    """The hinge joints after the free joint, in model order."""
    return tuple(mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, j) for j in range(model.njnt)
                 if model.jnt_type[j] != mujoco.mjtJoint.mjJNT_FREE)


def joint_ids(model: mujoco.MjModel, names: tuple[str, ...]) -> np.ndarray:
    return np.array([model.joint(n).id for n in names], dtype=np.intp)


def qpos_addresses(model: mujoco.MjModel, names: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(qpos, qvel) addresses of the named hinge joints."""
    ids = joint_ids(model, names)
    return np.asarray(model.jnt_qposadr[ids], dtype=np.intp), np.asarray(model.jnt_dofadr[ids], dtype=np.intp)


def joint_ranges(model: mujoco.MjModel, names: tuple[str, ...] | None = None) -> np.ndarray:
    """(n, 2) lower / upper limits (rad) of the named joints (default: every hinge, model order)."""
    return np.array(model.jnt_range[joint_ids(model, joint_names(model) if names is None else names)],
                    dtype=np.float64)


def torque_limits(model: mujoco.MjModel, names: tuple[str, ...]) -> np.ndarray:
    """Each named joint's torque limit (N m): its ``actuatorfrcrange``, or else the control range
    times the gear of the motor driving it (Menagerie's H1); needs a model with actuators."""
    out = []
    for name in names:
        j = model.joint(name).id
        if model.jnt_actfrclimited[j]:
            out.append(float(model.jnt_actfrcrange[j][1]))
            continue
        motors = [a for a in range(model.nu) if model.actuator_trnid[a][0] == j and model.actuator_ctrllimited[a]]
        if not motors:
            raise RobotDescriptionError(f"joint {name!r}: the model gives it no torque limit")
        a = motors[0]
        out.append(float(model.actuator_ctrlrange[a][1] * abs(model.actuator_gear[a][0])))
    return np.array(out, dtype=np.float64)


def body_names(model: mujoco.MjModel) -> tuple[str, ...]:
    return tuple(mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, i) for i in range(1, model.nbody))


def site_names(model: mujoco.MjModel) -> tuple[str, ...]:
    return tuple(mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_SITE, i) for i in range(model.nsite))


def neutral_qpos(model: mujoco.MjModel) -> np.ndarray:
    """Root at the origin, identity orientation (facing +X), joints 0."""
    q = np.zeros(model.nq)
    q[3] = 1.0
    return q


def default_qpos(robot: RobotDescription, model: mujoco.MjModel, *, height: float | None = None) -> np.ndarray:
    """Standing zero pose: the neutral pose with the root at ``height`` m (default: the
    description's standing height)."""
    q = neutral_qpos(model)
    q[2] = robot.standing_height if height is None else height
    return q
