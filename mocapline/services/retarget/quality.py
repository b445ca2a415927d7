"""How good a retargeted take is: tracking error, smoothness, configuration jumps, limits.

Used by ``mocapline bench retarget`` (both IKs on the same targets), ``mocapline retarget-file``
(its summary line) and the take-set regression test. Errors are measured against the targets of
the config's last table (the one that decides the pose), on the robot frames it names:

- position error (mm): entries with a position weight, the mean and the 99th percentile over every
  (frame, entry) sample; and the same two by body group (:data:`GROUPS`): ``hands`` / ``feet`` /
  ``pelvis`` are the entries whose human body is a hand / a foot or toe / the root, ``rest`` the
  other position-weighted entries (in the shipped configs: the hip-yaw links, knees, shoulders and
  elbows). A group's p99 pools its entries' samples as the overall one does; a group without
  position-weighted entries in the config reads 0;
- orientation error (deg): entries with a rotation weight, the angle of target * conj(frame);
- jerk: mean absolute third difference of the joints (rad/s^3);
- configuration jumps: events where some joint moves more than ``JUMP_JOINT_RAD`` within
  ``JUMP_WINDOW`` frames while every target moves less than ``JUMP_TARGET_M`` and
  ``JUMP_TARGET_DEG``: the IK switched to another solution of the same targets (an arm flip).
  Consecutive flagged frames are one event;
- limit-to-limit swings: events where a joint sweeps more than ``SWING_SHARE`` of its range, and
  more than half a turn, within ``SWING_WINDOW_S`` seconds (targets moving or not), per joint;
  consecutive windows are one event. Such a sweep of a wide joint (a G1 shoulder has 330 deg) means
  the IK took the other branch of its range (the demo take's shoulders met successive overhead
  raises at +2.67 and -3.09 rad), which the robot executes as a full-range swing; the half-turn
  floor keeps real motion of small ranges out (an ankle's 30 deg roll in a crouch, an elbow's bend);
- limit contacts: frames with a joint within ``CONTACT_RAD`` of its range; violations: samples
  outside the range or moving faster than the joint's velocity limit.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import mujoco
import numpy as np

from mocapline.robot import model as robot_model

JUMP_WINDOW = 10
JUMP_JOINT_RAD = 1.0
JUMP_TARGET_M = 0.05
JUMP_TARGET_DEG = 20.0
CONTACT_RAD = 1e-3
SWING_SHARE = 0.8
SWING_WINDOW_S = 3.0
SKIP_FRAMES = 5  # the first frames of a take start from the standing pose: not tracking yet


GROUPS = ("hands", "feet", "pelvis", "rest")  # the position error's body groups (module docstring)


def body_group(human_body: str, root: str = "Hips") -> str:
    """The group (one of :data:`GROUPS`) of an entry whose human body is ``human_body``."""
    if human_body == root:
        return "pelvis"
    if human_body.endswith("Hand"):
        return "hands"
    if human_body.endswith("Foot") or human_body.endswith("Toe"):
        return "feet"
    return "rest"


@dataclass
class Quality:
    err_mm: float
    err_p99_mm: float
    hands_mm: float
    feet_mm: float
    pelvis_mm: float
    rest_mm: float
    hands_p99_mm: float
    feet_p99_mm: float
    pelvis_p99_mm: float
    rest_p99_mm: float
    rot_deg: float
    jerk: float
    jumps: int
    limit_contacts: int
    range_violations: int
    velocity_violations: int
    swings: int = 0

    def as_dict(self) -> dict[str, float | int]:
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def angle_deg(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Angle (deg) between unit quaternions a and b (..., 4)."""
    w = np.abs(np.sum(a * b, axis=-1))
    return 2.0 * np.degrees(np.arccos(np.clip(w, 0.0, 1.0)))


def frame_poses(
    model: mujoco.MjModel, frames: list[tuple[str, str]], qpos: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """World positions (F, n, 3) and quaternions (F, n, 4) of named bodies / sites for (F, nq) qpos."""
    data = mujoco.MjData(model)
    ids = [(kind, model.body(n).id if kind == "body" else model.site(n).id) for n, kind in frames]
    pos = np.empty((len(qpos), len(ids), 3))
    quat = np.empty((len(qpos), len(ids), 4))
    for f, q in enumerate(qpos):
        data.qpos[:] = q
        mujoco.mj_kinematics(model, data)
        for i, (kind, fid) in enumerate(ids):
            if kind == "body":
                pos[f, i], quat[f, i] = data.xpos[fid], data.xquat[fid]
            else:
                pos[f, i] = data.site_xpos[fid]
                mujoco.mju_mat2Quat(quat[f, i], data.site_xmat[fid])
    return pos, quat


def configuration_jumps(joints: np.ndarray, targets: np.ndarray, window: int = JUMP_WINDOW) -> int:
    """Jump events in (F, n) joint trajectories given the (F, m, 7) targets (w x y z, x y z)."""
    n = len(joints)
    flagged = np.zeros(n, dtype=bool)
    for k in range(1, min(window, n - 1) + 1):
        moved = np.abs(joints[k:] - joints[:-k]).max(axis=1)
        target_m = np.linalg.norm(targets[k:, :, 4:] - targets[:-k, :, 4:], axis=2).max(axis=1)
        target_deg = angle_deg(targets[k:, :, :4], targets[:-k, :, :4]).max(axis=1)
        flagged[:-k] |= (moved > JUMP_JOINT_RAD) & (target_m < JUMP_TARGET_M) & (target_deg < JUMP_TARGET_DEG)
    return int(np.count_nonzero(flagged[1:] & ~flagged[:-1]) + flagged[0])


def limit_swings(joints: np.ndarray, ranges: np.ndarray, fps: float, window_s: float = SWING_WINDOW_S,
                 share: float = SWING_SHARE) -> int:
    """Events in (F, n) joint trajectories where a joint sweeps more than ``share`` of its (n, 2)
    range, and more than pi rad, within ``window_s`` seconds; consecutive windows of one joint are
    one event."""
    if len(joints) < 2:
        return 0
    width = min(len(joints), max(2, int(round(window_s * fps)) + 1))
    windows = np.lib.stride_tricks.sliding_window_view(joints, width, axis=0)  # (F - width + 1, n, width)
    swept = windows.max(axis=2) - windows.min(axis=2)
    flagged = swept > np.maximum(share * (ranges[:, 1] - ranges[:, 0]), np.pi)
    starts = flagged[1:] & ~flagged[:-1]
    return int(np.count_nonzero(starts) + np.count_nonzero(flagged[0]))


def joint_jerk(joints: np.ndarray, fps: float) -> float:
    """Mean absolute third derivative (rad/s^3) of (F, n) joint trajectories."""
    if len(joints) < 4:
        return 0.0
    return float(np.mean(np.abs(np.diff(joints, n=3, axis=0))) * fps**3)


def evaluate(
    model: mujoco.MjModel,
    entries: tuple,
    targets: np.ndarray,
    qpos: np.ndarray,
    fps: float,
    velocity_limits: np.ndarray,
    *,
    root: str = "Hips",
    skip: int = SKIP_FRAMES,
) -> Quality:
    """Quality of (F, nq) ``qpos`` against (F, n, 7) ``targets`` of the config ``entries``."""
    skip = min(skip, max(len(qpos) - 1, 0))
    pos, quat = frame_poses(model, [(e.robot_frame, e.frame_type) for e in entries], qpos[skip:])
    tgt = targets[skip:]
    err = np.linalg.norm(pos - tgt[:, :, 4:], axis=2) * 1000.0
    rot = angle_deg(quat, tgt[:, :, :4])
    pos_w = np.array([e.position_weight > 0 for e in entries])
    rot_w = np.array([e.rotation_weight > 0 for e in entries])

    groups = np.array([body_group(e.human_body, root) for e in entries])
    by_group: dict[str, tuple[float, float]] = {}
    for g in GROUPS:
        sel = (groups == g) & pos_w
        samples = err[:, sel]
        by_group[g] = (float(samples.mean()), float(np.percentile(samples, 99))) if samples.size else (0.0, 0.0)
    joints = qpos[:, 7:]
    ranges = robot_model.joint_ranges(model)
    contact = (joints <= ranges[:, 0] + CONTACT_RAD) | (joints >= ranges[:, 1] - CONTACT_RAD)
    outside = (joints < ranges[:, 0] - 1e-6) | (joints > ranges[:, 1] + 1e-6)
    speed = np.abs(np.diff(joints[skip:], axis=0)) * fps
    return Quality(
        err_mm=float(err[:, pos_w].mean()),
        err_p99_mm=float(np.percentile(err[:, pos_w], 99)),
        hands_mm=by_group["hands"][0],
        feet_mm=by_group["feet"][0],
        pelvis_mm=by_group["pelvis"][0],
        rest_mm=by_group["rest"][0],
        hands_p99_mm=by_group["hands"][1],
        feet_p99_mm=by_group["feet"][1],
        pelvis_p99_mm=by_group["pelvis"][1],
        rest_p99_mm=by_group["rest"][1],
        rot_deg=float(rot[:, rot_w].mean()),
        jerk=joint_jerk(joints[skip:], fps),
        jumps=configuration_jumps(joints[skip:], tgt),
        limit_contacts=int(np.count_nonzero(contact[skip:].any(axis=1))),
        range_violations=int(np.count_nonzero(outside)),
        velocity_violations=int(np.count_nonzero(speed > velocity_limits * (1.0 + 1e-6) + 1e-9)),
        swings=limit_swings(joints[skip:], ranges, fps),
    )


FIRST_FRAMES = SKIP_FRAMES


def first_frames_error(model: mujoco.MjModel, entries: tuple, targets: np.ndarray, qpos: np.ndarray,
                       frames: int = FIRST_FRAMES) -> float:
    """Mean position error (mm) of the first frames, which :func:`evaluate` leaves out: a take
    whose IK start collapsed (GMR's most reported failure) shows here far above its mean."""
    pos, _ = frame_poses(model, [(e.robot_frame, e.frame_type) for e in entries], qpos[:frames])
    err = np.linalg.norm(pos - targets[:frames, :, 4:], axis=2) * 1000.0
    sel = np.array([e.position_weight > 0 for e in entries])
    return float(err[:, sel].mean())
