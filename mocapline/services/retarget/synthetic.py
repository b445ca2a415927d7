"""Synthetic takes with a known answer: robot motions turned into the HumanFrames that map onto them.

:func:`robot_motion` makes a plausible whole-body motion of a humanoid (walking with turning, arm
swing, an arm-raising cycle, torso twist; every joint inside 90 % of its range), its joints found
by their role in the name (``left_knee``, ``waist_yaw``; a joint the build lacks is left out).
:func:`human_from_robot` inverts an IK config's target mapping (scale, offsets, ground) so that
the human bodies it returns map exactly onto the robot's own frames at that pose: the retargeter's
exact answer is the motion itself. Used by the tests (round-trip accuracy) and by ``mocapline bench retarget``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import mujoco
import numpy as np

from mocapline.core import quat as Q
from mocapline.core.bodies import GMR_BODIES, GMR_BODY_INDEX
from mocapline.robot import model as robot_model
from mocapline.robot.description import RobotDescription
from mocapline.robot.registry import get_robot

from .config import IKConfig, MatchEntry

STEP_HZ = 0.9
ARM_RAISE_HZ = 0.15


class _Roles:
    """Sets qpos columns by a joint's role in its name (``left_knee`` is ``left_knee_joint`` on a
    G1, ``left_knee`` on an H1); a role the model has no joint for is skipped."""

    def __init__(self, model: mujoco.MjModel, q: np.ndarray) -> None:
        self.names = robot_model.joint_names(model)
        self.q = q

    def set(self, roles: str | tuple[str, ...], value: np.ndarray) -> None:
        for role in (roles,) if isinstance(roles, str) else roles:
            for name in (role, f"{role}_joint"):
                if name in self.names:
                    self.q[:, 7 + self.names.index(name)] = value
                    return


def robot_motion(
    n_frames: int,
    fps: float = 60.0,
    speed: float = 1.0,
    *,
    facing_yaw: float = -np.pi / 2,
    robot: RobotDescription | None = None,
    model: mujoco.MjModel | None = None,
) -> np.ndarray:
    """(n_frames, nq) qpos of a walking / arm-raising humanoid; ``speed`` scales the tempo."""
    robot = robot or get_robot()
    model = model or robot_model.load_ik_model(robot)
    ranges = robot_model.joint_ranges(model)
    height = robot.standing_height - 0.053  # knees bent
    t = np.arange(n_frames) / fps * speed
    ph = 2 * np.pi * STEP_HZ * t
    s, c = np.sin(ph), np.cos(ph)
    raise_amount = 0.5 - 0.5 * np.cos(2 * np.pi * ARM_RAISE_HZ * t)
    q = np.zeros((n_frames, model.nq))
    joint = _Roles(model, q)

    yaw = facing_yaw + 0.5 * np.sin(2 * np.pi * 0.05 * t)
    forward = np.stack((np.cos(yaw), np.sin(yaw)), axis=1)
    dist = 0.35 * t  # m, along the (turning) heading
    q[:, 0:2] = forward * dist[:, None] + 0.03 * np.stack((s, c), axis=1)
    q[:, 2] = height + 0.015 * np.cos(2 * ph)
    roll = 0.04 * s
    pitch = 0.05 + 0.02 * np.cos(2 * ph)
    qz = Q.from_axis_angle(np.array([0.0, 0.0, 1.0]), yaw)
    qy = Q.from_axis_angle(np.array([0.0, 1.0, 0.0]), pitch)
    qx = Q.from_axis_angle(np.array([1.0, 0.0, 0.0]), roll)
    q[:, 3:7] = Q.multiply(Q.multiply(qz, qy), qx)

    for side, sign in (("left", 1.0), ("right", -1.0)):
        leg = sign * s
        knee_wave = np.maximum(0.0, sign * c)
        joint.set(f"{side}_hip_pitch", -0.25 - 0.45 * leg)
        joint.set(f"{side}_hip_roll", sign * (0.05 + 0.04 * c))
        joint.set(f"{side}_hip_yaw", sign * 0.08 * s)
        joint.set(f"{side}_knee", 0.45 + 0.6 * knee_wave)
        joint.set((f"{side}_ankle_pitch", f"{side}_ankle"), -0.2 + 0.25 * leg - 0.2 * knee_wave)
        joint.set(f"{side}_ankle_roll", -sign * 0.05 * c)
        swing = -sign * 0.45 * s * (1 - raise_amount)
        joint.set(f"{side}_shoulder_pitch", 0.2 + swing - 0.6 * raise_amount)
        joint.set(f"{side}_shoulder_roll", sign * (0.15 + 1.3 * raise_amount))
        joint.set(f"{side}_shoulder_yaw", sign * 0.3 * np.sin(ph / 2))
        joint.set(f"{side}_elbow", 1.0 - 0.4 * raise_amount + 0.3 * np.sin(ph + 0.5))
        joint.set(f"{side}_wrist_roll", 0.4 * np.sin(0.7 * ph))
        joint.set(f"{side}_wrist_pitch", 0.3 * np.sin(0.5 * ph + sign))
        joint.set(f"{side}_wrist_yaw", 0.25 * np.cos(0.6 * ph))
    joint.set(("waist_yaw", robot.joint_names[robot.group("waist")[0]]), -0.25 * s)
    joint.set("waist_roll", 0.06 * c)
    joint.set("waist_pitch", 0.1 + 0.05 * np.sin(2 * ph))

    lo, hi = ranges[:, 0], ranges[:, 1]
    mid, half = 0.5 * (lo + hi), 0.5 * (hi - lo)
    q[:, 7:] = np.clip(q[:, 7:], mid - 0.9 * half, mid + 0.9 * half)
    return q


def random_poses(
    n: int, rng: np.random.Generator, *, model: mujoco.MjModel | None = None, spread: float = 0.6,
    robot: RobotDescription | None = None,
) -> np.ndarray:
    """(n, 36) random reachable poses: joints uniform in ``spread`` of their range about the middle
    (clipped to include 0), root anywhere near the origin with any yaw and a small tilt."""
    model = model or robot_model.load_ik_model(robot or get_robot())
    ranges = robot_model.joint_ranges(model)
    lo, hi = ranges[:, 0], ranges[:, 1]
    mid, half = 0.5 * (lo + hi), 0.5 * (hi - lo)
    q = np.zeros((n, model.nq))
    q[:, 7:] = rng.uniform(mid - spread * half, mid + spread * half, size=(n, len(mid)))
    q[:, 0:2] = rng.uniform(-1, 1, size=(n, 2))
    q[:, 2] = rng.uniform(0.6, 0.85, size=n)
    yaw = rng.uniform(-np.pi, np.pi, size=n)
    tilt_axis = np.concatenate((rng.normal(size=(n, 2)), np.zeros((n, 1))), axis=1)
    tilt = rng.uniform(0, 0.3, size=n)
    q[:, 3:7] = Q.multiply(Q.from_axis_angle(np.array([0.0, 0.0, 1.0]), yaw), Q.from_axis_angle(tilt_axis, tilt))
    return q


def interpolate_poses(keys: np.ndarray, frames_between: int) -> np.ndarray:
    """Smooth (cosine-eased) path through key poses: joints and root position linear, root slerp."""
    out = []
    for a, b in itertools.pairwise(keys):
        for k in range(frames_between):
            u = 0.5 - 0.5 * np.cos(np.pi * k / frames_between)
            q = (1 - u) * a + u * b
            q[3:7] = Q.slerp(a[3:7], b[3:7], u)
            out.append(q)
    out.append(keys[-1].copy())
    return np.array(out)


class FramePoses:
    """World poses of named robot frames (bodies or sites) for a batch of qpos."""

    def __init__(self, model: mujoco.MjModel, frames: list[tuple[str, str]]) -> None:
        self.model = model
        self.data = mujoco.MjData(model)
        self.frames = frames
        self.ids = [(kind, model.body(n).id if kind == "body" else model.site(n).id) for n, kind in frames]

    def __call__(self, qpos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(36,) qpos -> positions (n, 3), quaternions (n, 4) w x y z."""
        d = self.data
        d.qpos[:] = qpos
        mujoco.mj_kinematics(self.model, d)
        pos = np.empty((len(self.ids), 3))
        rot = np.empty((len(self.ids), 4))
        for i, (kind, fid) in enumerate(self.ids):
            if kind == "body":
                pos[i] = d.xpos[fid]
                rot[i] = d.xquat[fid]
            else:
                pos[i] = d.site_xpos[fid]
                mujoco.mju_mat2Quat(rot[i], d.site_xmat[fid])
        return pos, rot


def human_from_robot(
    qpos: np.ndarray,
    config: IKConfig,
    *,
    human_height: float | None = None,
    ground_offset: float = 0.0,
    model: mujoco.MjModel | None = None,
    robot: RobotDescription | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The 23 human bodies (positions (F, 23, 3), quaternions (F, 23, 4)) whose IK targets under
    ``config`` are exactly the robot's frames at ``qpos`` ((F, nq) or (nq,)).

    Bodies the config does not use copy the root's pose (Spine3 copies Spine2 when only Spine2 is
    used, the toes copy the feet), as capture's stand-ins do.
    """
    model = model or robot_model.load_ik_model(robot or get_robot())
    qpos = np.atleast_2d(qpos)
    entries: dict[str, MatchEntry] = {}
    for table in config.tables():
        for e in table:
            prev = entries.get(e.human_body)
            if prev is not None and (
                not np.allclose(prev.position_offset, e.position_offset)
                or not np.allclose(prev.rotation_offset, e.rotation_offset)
                or prev.robot_frame != e.robot_frame
            ):
                raise ValueError(f"{e.human_body} maps to two different robot targets: not invertible")
            entries[e.human_body] = e
    scales = config.scaled(human_height)
    root = config.human_root_name
    if root not in entries:
        raise ValueError(f"the root {root!r} is not in a table: not invertible")
    names = list(entries)
    poses = FramePoses(model, [(entries[n].robot_frame, entries[n].frame_type) for n in names])
    ground = config.ground_height + ground_offset
    rot_off = np.array([entries[n].rotation_offset for n in names])
    pos_off = np.array([entries[n].position_offset for n in names])
    s = np.array([scales[n] for n in names])
    r = names.index(root)

    n_frames = len(qpos)
    positions = np.zeros((n_frames, len(GMR_BODIES), 3))
    quaternions = np.zeros((n_frames, len(GMR_BODIES), 4))
    for f in range(n_frames):
        p_t, q_t = poses(qpos[f])
        p_t = p_t.copy()
        p_t[:, 2] += ground
        q_h = Q.multiply(q_t, Q.conjugate(rot_off))
        p_scaled = p_t - Q.rotate(q_t, pos_off)
        p_root = p_scaled[r] / s[r]
        p_h = p_root + (p_scaled - s[r] * p_root) / s[:, None]
        p_h[r] = p_root
        positions[f, :] = p_root
        quaternions[f, :] = q_h[r]
        for i, n in enumerate(names):
            positions[f, GMR_BODY_INDEX[n]] = p_h[i]
            quaternions[f, GMR_BODY_INDEX[n]] = q_h[i]
        for body, stand_in in (("Spine3", "Spine2"), ("LeftToe", "LeftFoot"), ("RightToe", "RightFoot")):
            if body not in entries and stand_in in entries:
                positions[f, GMR_BODY_INDEX[body]] = positions[f, GMR_BODY_INDEX[stand_in]]
                quaternions[f, GMR_BODY_INDEX[body]] = quaternions[f, GMR_BODY_INDEX[stand_in]]
    return positions, quaternions


def all_body_positions(model: mujoco.MjModel, qpos: np.ndarray) -> np.ndarray:
    """(F, nbody-1, 3) world positions of every body but the world, for (F, 36) qpos."""
    d = mujoco.MjData(model)
    out = np.empty((len(qpos), model.nbody - 1, 3))
    for f, q in enumerate(qpos):
        d.qpos[:] = q
        mujoco.mj_kinematics(model, d)
        out[f] = d.xpos[1:]
    return out


def joint_jerk(joint_pos: np.ndarray, fps: float) -> float:
    """Mean absolute third derivative (rad/s^3) of (F, n) joint trajectories."""
    if len(joint_pos) < 4:
        return 0.0
    return float(np.mean(np.abs(np.diff(joint_pos, n=3, axis=0))) * fps**3)


# -- a human-proportioned take: the Axis Studio skeleton, as capture would deliver it ---------------

_C = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, -1.0], [0.0, 1.0, 0.0]])  # Y-up -> Z-up (GMR's BVH convention)


def _rx(a: float) -> np.ndarray:
    c, s = np.cos(a), np.sin(a)
    return np.array([[1.0, 0.0, 0.0], [0.0, c, -s], [0.0, s, c]])


def _ry(a: float) -> np.ndarray:
    c, s = np.cos(a), np.sin(a)
    return np.array([[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]])


def _rz(a: float) -> np.ndarray:
    c, s = np.cos(a), np.sin(a)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


@dataclass(frozen=True)
class OverheadRaise:
    """Arms raised sideways past the shoulder's gimbal pole to ``top_deg`` from hanging, in a plane
    turned ``plane_deg`` about the vertical (> 0: behind the pole, both arms mirrored); with
    ``alternate`` every other raise turns the other way, as a walk's arm swing does to the demo
    take's raises. ``mocapline bench retarget --overhead`` sweeps it."""

    plane_deg: float = 0.0
    alternate: bool = False
    top_deg: float = 165.0


def _human_local_rotations(t: float, overhead: OverheadRaise | None = None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Root position (cm, BVH frame) and local bone rotations (BVH frame) at time t (s)."""
    ph = 2 * np.pi * STEP_HZ * t
    s, c = np.sin(ph), np.cos(ph)
    up = 0.5 - 0.5 * np.cos(2 * np.pi * ARM_RAISE_HZ * t)  # arm raise 0..1..0
    yaw = 0.5 * np.sin(2 * np.pi * 0.05 * t)
    heading = _ry(yaw)
    # distance walked (cm): 35 cm/s along the heading (integral of the turning heading, approx.)
    root = np.array([2.0 * s, 91.43 - 3.0 + 1.5 * np.cos(2 * ph), 0.0]) + heading @ np.array([0.0, 0.0, 35.0 * t])
    deg = np.radians
    rot = {
        "Hips": heading @ _rx(deg(3 + 2 * np.cos(2 * ph))) @ _rz(deg(3 * s)),
        "Spine": _ry(deg(-4 * s)) @ _rx(deg(2)),
        "Spine1": _ry(deg(-3 * s)) @ _rx(deg(2)),
        "Spine2": _ry(deg(-2 * s)) @ _rx(deg(1)),
        "Neck": _ry(deg(3 * s)),
        "Head": _rx(deg(-3)),
    }
    for side, sign in (("Left", 1.0), ("Right", -1.0)):
        leg = sign * s
        knee = max(0.0, sign * c)
        rot[f"{side}UpLeg"] = _rx(deg(-15 - 25 * leg)) @ _rz(deg(sign * 2))
        rot[f"{side}Leg"] = _rx(deg(20 + 35 * knee))
        rot[f"{side}Foot"] = _rx(deg(-5 + 10 * leg - 10 * knee))
        # arms: hang (-75 deg about Z from the T-pose), swing against the legs, rise to the side
        lower = sign * deg(-75 + 150 * up * 0.8)
        rot[f"{side}Shoulder"] = np.eye(3)
        if overhead is None:
            rot[f"{side}Arm"] = _rx(deg(25 * leg * (1 - up))) @ _rz(lower)
        else:
            turn = overhead.plane_deg * (-1) ** int(t * ARM_RAISE_HZ) if overhead.alternate else overhead.plane_deg
            rot[f"{side}Arm"] = _ry(sign * deg(turn)) @ _rz(sign * deg(-75 + (overhead.top_deg + 75) * up))
        rot[f"{side}ForeArm"] = _ry(sign * deg(-30 - 15 * s + 20 * up))
        rot[f"{side}Hand"] = _rz(sign * deg(-5 + 10 * np.sin(0.7 * ph))) @ _rx(deg(10 * np.cos(0.6 * ph)))
    return root, rot


def human_motion(n_frames: int, fps: float = 60.0, speed: float = 1.0,
                 overhead: OverheadRaise | None = None) -> tuple[np.ndarray, np.ndarray]:
    """A walking / arm-raising Axis Studio take as HumanFrame arrays: positions (F, 23, 3) m and
    quaternions (F, 23, 4), Z-up, after GMR's BVH conversion (rest pose: T-pose, every quaternion =
    quat(C), facing -Y). Human proportions (the Axis default skeleton, about 1.75 m), so a robot
    cannot match every target exactly: the IK's objective decides. ``overhead``: the arms rise
    overhead instead of to the horizontal."""
    from mocapline.formats.skeleton import AXIS_STUDIO_BONES

    bones = AXIS_STUDIO_BONES
    index = {b.name: i for i, b in enumerate(bones)}
    needed: list[int] = []
    for body in GMR_BODIES:
        name = {"Spine3": "Spine2", "LeftToe": "LeftFoot", "RightToe": "RightFoot"}.get(body, body)
        i = index[name]
        while i >= 0 and i not in needed:
            needed.append(i)
            i = bones[i].parent
    needed.sort()
    positions = np.zeros((n_frames, len(GMR_BODIES), 3))
    quaternions = np.zeros((n_frames, len(GMR_BODIES), 4))
    for f in range(n_frames):
        root, local = _human_local_rotations(f / fps * speed, overhead)
        g_rot: dict[int, np.ndarray] = {}
        g_pos: dict[int, np.ndarray] = {}
        for i in needed:
            b = bones[i]
            r = local.get(b.name, np.eye(3))
            if b.parent < 0:
                g_rot[i], g_pos[i] = r, root
            else:
                g_rot[i] = g_rot[b.parent] @ r
                g_pos[i] = g_pos[b.parent] + g_rot[b.parent] @ np.array(b.offset_cm)
        for k, body in enumerate(GMR_BODIES):
            name = {"Spine3": "Spine2", "LeftToe": "LeftFoot", "RightToe": "RightFoot"}.get(body, body)
            i = index[name]
            positions[f, k] = _C @ g_pos[i] / 100.0
            quaternions[f, k] = _matrix_to_quat(_C @ g_rot[i])
    return positions, quaternions


def _matrix_to_quat(m: np.ndarray) -> np.ndarray:
    q = np.empty(4)
    mujoco.mju_mat2Quat(q, np.ascontiguousarray(m).reshape(9))
    return q
