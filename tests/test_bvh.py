"""The generic BVH reader: parsing, forward kinematics against bvhio, skeleton detection and the
normalisation to the 23 GMR bodies."""

from __future__ import annotations

from pathlib import Path

import bvhio
import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from mocapline.core import quat as Q
from mocapline.core.bodies import GMR_BODIES, GMR_BODY_INDEX
from mocapline.core.paths import ASSETS_DIR
from mocapline.formats.bvh import (
    BvhError,
    BvhJoint,
    BvhMotion,
    estimate_height,
    format_bvh,
    gmr_bodies,
    load_bvh,
    parse_bvh,
)
from mocapline.formats.skeleton import AXIS_STUDIO_BONES
from mocapline.services.retarget.config import IKConfigError, detect_bvh_skeleton

MOTION = sorted((ASSETS_DIR / "motion").glob("*.bvh"))
C_QUAT = np.array([np.sqrt(0.5), np.sqrt(0.5), 0.0, 0.0])
MIXAMO = {"Neck1": None, "LeftInHandIndex": None}  # Axis bones a Mixamo rig does not have


def axis_motion(frames: int = 40, *, prefix: str = "", orders: tuple[str, str] = ("ZXY", "YXZ"),
                six_everywhere: bool = False, seed: int = 0, zero: bool = False) -> BvhMotion:
    """A random motion on the Axis Studio skeleton (T-pose rest, cm), as a BVH would hold it."""
    rng = np.random.default_rng(seed)
    joints = []
    for k, bone in enumerate(AXIS_STUDIO_BONES):
        order = orders[k % 2]
        rot = tuple(f"{a}rotation" for a in order)
        pos = ("Xposition", "Yposition", "Zposition") if bone.parent < 0 or six_everywhere else ()
        joints.append(BvhJoint(prefix + bone.name, bone.parent, bone.offset_cm, pos + rot))
    n = sum(len(j.channels) for j in joints)
    values = np.zeros((frames, n)) if zero else rng.uniform(-40.0, 40.0, size=(frames, n))
    col = 0
    for j in joints:  # position channels hold the whole translation: the offset plus a wander
        for c in j.channels:
            if c.endswith("position"):
                wander = 0.0 if zero else values[:, col] * (1.0 if j.parent < 0 else 0.05)
                values[:, col] = j.offset["XYZ".index(c[0])] + wander
            col += 1
    return BvhMotion(tuple(joints), 1.0 / 60.0, values, "synthetic")


def frames_only(path: Path, frames: list[int], out: Path) -> Path:
    """A copy of the BVH file ``path`` holding only ``frames`` (by text lines: the reference reads it,
    so our parser has no part in it); bvhio parses in Python, and a whole take takes it seconds."""
    lines = path.read_text().splitlines()
    motion = next(k for k, line in enumerate(lines) if line.strip() == "MOTION")
    first = motion + 3  # MOTION, Frames:, Frame Time:
    assert lines[motion + 1].startswith("Frames:") and lines[motion + 2].startswith("Frame Time:")
    kept = [lines[first + f] for f in frames]
    out.write_text("\n".join([*lines[: motion + 1], f"Frames: {len(kept)}", lines[motion + 2], *kept]) + "\n")
    return out


def bvhio_poses(path: Path, frames: list[int]) -> list[dict]:
    """bvhio's world pose of each joint at each of ``frames``: (position, rotation, rest rotation)."""
    root = bvhio.readAsHierarchy(str(path))
    layout = root.layout()
    root.loadRestPose()
    rest = {j.Name: np.array([j.RotationWorld.w, j.RotationWorld.x, j.RotationWorld.y, j.RotationWorld.z])
            for j, _, _ in layout}
    poses = []
    for frame in frames:
        root.loadPose(frame)
        out = {}
        for j, _, _ in layout:
            r = j.RotationWorld
            out[j.Name] = (np.array(j.PositionWorld), np.array([r.w, r.x, r.y, r.z]), rest[j.Name])
        poses.append(out)
    return poses


def assert_fk_matches_bvhio(path: Path, frames: list[int], reference: Path | None = None) -> None:
    """Our FK of ``path`` at ``frames`` against bvhio's of ``reference`` (default: ``path``), which
    holds those frames in that order when given."""
    motion = load_bvh(path)
    pos, quat = motion.forward_kinematics()
    ref_frames = list(range(len(frames))) if reference is not None else frames
    for f, pose in zip(frames, bvhio_poses(reference or path, ref_frames), strict=True):
        for name, (p, q, rest) in pose.items():
            k = motion.index(name)
            np.testing.assert_allclose(pos[f, k], p, atol=2e-4, err_msg=f"{path.name} frame {f} {name}")
            ours = Q.multiply(quat[f, k], rest)  # bvhio's world rotation includes its rest orientation
            assert min(np.abs(ours - q).max(), np.abs(ours + q).max()) < 1e-5, (path.name, f, name)


# -- forward kinematics against bvhio -----------------------------------------------------------


@pytest.mark.parametrize("path", MOTION, ids=[p.stem for p in MOTION])
def test_fk_matches_bvhio_on_the_shipped_takes(path: Path, tmp_path: Path) -> None:
    motion = load_bvh(path)
    frames = [0, motion.frames // 2, motion.frames - 1]
    assert_fk_matches_bvhio(path, frames, frames_only(path, frames, tmp_path / path.name))


def test_fk_matches_bvhio_with_six_channels_everywhere_mixed_orders_and_namespaces(tmp_path) -> None:
    path = tmp_path / "mixed.bvh"
    path.write_text(format_bvh(axis_motion(6, prefix="mixamorig:", orders=("XZY", "ZYX"), six_everywhere=True)))
    assert_fk_matches_bvhio(path, [0, 3, 5])


def test_round_trip_through_text_keeps_the_motion() -> None:
    motion = axis_motion(5)
    again = parse_bvh(format_bvh(motion, decimals=6))
    assert again.names == motion.names and again.frames == 5
    np.testing.assert_allclose(again.values, motion.values, atol=1e-6)
    np.testing.assert_allclose(again.forward_kinematics()[0], motion.forward_kinematics()[0], atol=1e-4)


# -- parsing ----------------------------------------------------------------------------------


def test_reader_details() -> None:
    text = format_bvh(axis_motion(3, prefix="mixamorig:"))
    text = text.replace("\n", "\r\n").replace("Frame Time: ", "Frame Time:\t")
    motion = parse_bvh(text)
    assert motion.index("Hips") == 0 and motion.joints[0].name == "mixamorig:Hips"
    assert motion.find("Nope") is None
    assert motion.fps == pytest.approx(60.0)
    assert len(motion.joints) == len(AXIS_STUDIO_BONES)  # End Sites are not joints
    assert motion.slice(1, 3).frames == 2


ROT3 = "CHANNELS 3 Zrotation Xrotation Yrotation"


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda t: "MOTION\nFrames: 0\n", "not a BVH file"),
        (lambda t: t.replace(ROT3, "CHANNELS 3 Zrotation Qrotation Yrotation", 1), "unknown channel"),
        (lambda t: t.replace(ROT3, "CHANNELS 3 Zrotation Xrotation", 1), "lists 2 channels"),
        (lambda t: t.rstrip("\n").rsplit("\n", 1)[0] + "\n", "frame lines \\(file truncated\\?\\)"),
        (lambda t: t.replace("Frame Time: ", "Frame Time: -"), "Frame Time must be > 0"),
        (lambda t: t.split("MOTION")[0], "no MOTION section"),
        (lambda t: t.replace("OFFSET", "OFFSET 1", 1), "OFFSET needs 3 numbers"),
        (lambda t: t[: t.index("MOTION")].rstrip()[:-1] + "MOTION" + t.split("MOTION")[1], "not closed"),
    ],
)
def test_malformed_files_are_refused_with_the_reason(mutate, message) -> None:
    text = format_bvh(axis_motion(3, orders=("ZXY", "ZXY")))
    assert ROT3 in text
    with pytest.raises(BvhError, match=message):
        parse_bvh(mutate(text), "take.bvh")


def test_a_bad_value_names_its_line() -> None:
    lines = format_bvh(axis_motion(3)).splitlines()
    lines[-2] = lines[-2].replace(lines[-2].split()[4], "abc", 1)
    with pytest.raises(BvhError, match=rf"line {len(lines) - 1}: a value is not a number"):
        parse_bvh("\n".join(lines))


def test_unreadable_file(tmp_path) -> None:
    with pytest.raises(BvhError, match="cannot read"):
        load_bvh(tmp_path / "missing.bvh")


# -- skeletons and the GMR bodies ----------------------------------------------------------------


@pytest.mark.parametrize("path", MOTION, ids=[p.stem for p in MOTION])
def test_the_shipped_takes_are_detected_as_cmu(path: Path) -> None:
    config, skeleton = detect_bvh_skeleton(load_bvh(path))
    assert config.source.endswith("cmu_to_g1.json") and skeleton.name.startswith("cmu_")


def test_detection_tells_axis_mixamo_and_refuses_the_unknown() -> None:
    axis = axis_motion(2)
    assert detect_bvh_skeleton(axis)[1].name == "axis_studio"
    joints = [j for j in axis.joints]
    # a Mixamo rig: namespaced, toes, no Axis-only bones (values are irrelevant here)
    mixamo = BvhMotion(tuple(BvhJoint("mixamorig:" + j.name, j.parent, j.offset, j.channels) for j in joints)
                       + (BvhJoint("mixamorig:LeftToeBase", 6, (0.0, -5.0, 10.0), ("Xrotation",)),
                          BvhJoint("mixamorig:RightToeBase", 3, (0.0, -5.0, 10.0), ("Xrotation",))),
                       axis.frame_time, np.zeros((2, axis.values.shape[1] + 2)), "mixamo.bvh")
    assert detect_bvh_skeleton(mixamo)[1].name == "mixamo"
    assert detect_bvh_skeleton(mixamo, "axis")[1].name == "axis_studio"  # by name, when asked
    odd = BvhMotion((BvhJoint("pelvis", -1, (0.0, 0.0, 0.0), ("Xrotation",)),), 0.01, np.zeros((1, 1)), "odd.bvh")
    with pytest.raises(IKConfigError, match="no known skeleton fits.*lacks"):
        detect_bvh_skeleton(odd)
    with pytest.raises(IKConfigError, match="no 'bvh' section"):
        detect_bvh_skeleton(odd, "xsens")


def test_a_t_posed_axis_skeleton_gives_the_axis_convention() -> None:
    """Zero pose = T-pose: every body quaternion is quat(C) and the performer is 1.75 m tall."""
    motion = axis_motion(1, zero=True)
    _, skeleton = detect_bvh_skeleton(motion)
    pos, quat = gmr_bodies(motion, skeleton)
    for k in range(len(GMR_BODIES)):
        assert min(np.abs(quat[0, k] - C_QUAT).max(), np.abs(quat[0, k] + C_QUAT).max()) < 1e-9, GMR_BODIES[k]
    np.testing.assert_allclose(pos[0, GMR_BODY_INDEX["Hips"]], [0.0, 0.0, 0.9143])  # Y-up cm -> Z-up m
    assert estimate_height(pos) == pytest.approx(1.75)


def test_rest_pose_bones_are_straightened_and_the_arm_twist_follows_the_elbow() -> None:
    """Spread legs and a humerus turned 30 deg about itself in the zero pose (as CMU's are) still
    give a straight-legged T-pose frame and an elbow that bends about the vertical."""
    motion = axis_motion(30, zero=True)
    joints = list(motion.joints)
    for name, x in (("LeftLeg", 15.0), ("RightLeg", -15.0)):  # thighs spread outwards
        k = motion.index(name)
        joints[k] = BvhJoint(joints[k].name, joints[k].parent, (x, -39.0, 0.0), joints[k].channels)
    motion = BvhMotion(tuple(joints), motion.frame_time, motion.values, "spread.bvh")
    _, skeleton = detect_bvh_skeleton(motion)
    # bend the left elbow about an axis turned 30 deg from the vertical, about the bone
    twist = np.radians(30.0)
    k = motion.index("LeftForeArm")
    col = sum(len(j.channels) for j in motion.joints[:k])
    order = "".join(c[0] for c in motion.joints[k].channels)
    axis = np.array([0.0, -np.cos(twist), np.sin(twist)])
    bend = Rotation.from_rotvec(np.radians(np.linspace(0.0, 90.0, motion.frames))[:, None] * axis)
    motion.values[:, col:col + 3] = bend.as_euler(order.upper(), degrees=True)  # intrinsic, as BVH
    pos, quat = gmr_bodies(motion, skeleton)
    leg = GMR_BODY_INDEX["LeftUpLeg"]
    # the thigh frame carries the straightening: its down axis points along the spread bone
    down = Q.rotate(quat[0, leg], np.array([0.0, -1.0, 0.0]))  # the T-pose frame's down, BVH axes
    bone = pos[0, GMR_BODY_INDEX["LeftLeg"]] - pos[0, leg]
    assert np.dot(down, bone / np.linalg.norm(bone)) > 0.999
    rel = Q.log(Q.multiply(Q.conjugate(quat[:, GMR_BODY_INDEX["LeftArm"]]), quat[:, GMR_BODY_INDEX["LeftForeArm"]]))
    bent = np.linalg.norm(rel, axis=1) > 0.5
    mean_axis = (rel[bent] / np.linalg.norm(rel[bent], axis=1, keepdims=True)).sum(axis=0)
    np.testing.assert_allclose(mean_axis / np.linalg.norm(mean_axis), [0.0, -1.0, 0.0], atol=1e-6)
