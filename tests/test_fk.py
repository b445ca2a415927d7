"""Forward kinematics against independent evaluations: bvhio on a text BVH file written here, and a
deliberately simple per-bone loop with scipy; plus the sign conventions of the Z-up output."""

from __future__ import annotations

import logging
from pathlib import Path

import bvhio
import glm
import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from mocapline.core.bodies import GMR_BODIES, GMR_BODY_INDEX
from mocapline.formats.axis_bvh import (
    ROTATION_ORDERS,
    AxisBvhConfig,
    encode_datagram,
    parse_datagram,
)
from mocapline.formats.skeleton import (
    BoneDef,
    Skeleton,
    SkeletonKind,
    get_skeleton,
)
from mocapline.services.capture.fk import AxisForwardKinematics, matrices_to_quaternions

C = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, -1.0], [0.0, 1.0, 0.0]])  # (x, y, z) -> (x, -z, y)
SKELETON_CASES = [(kind, order) for kind in SkeletonKind for order in ROTATION_ORDERS]


def random_frames(kind: SkeletonKind, n: int, seed: int, tpose_first: bool = True) -> np.ndarray:
    rng = np.random.default_rng(seed)
    frames = np.zeros((n, 59, 6))
    frames[:, :, :3] = get_skeleton(kind).offsets_cm
    frames[:, 0, :3] += rng.normal(0.0, 30.0, (n, 3))
    frames[:, :, 3:] = rng.uniform(-180.0, 180.0, (n, 59, 3))
    if tpose_first:
        frames[0, 0, :3] = get_skeleton(kind).offsets_cm[0]
        frames[0, :, 3:] = 0.0
    return frames


def write_bvh(path: Path, skeleton: Skeleton, order: str, frames: np.ndarray) -> None:
    """Text BVH: the skeleton's hierarchy and offsets, 6 channels per joint, rotation channels in
    the configured order, one motion line per frame in depth-first joint order."""
    children: dict[int, list[int]] = {i: [] for i in range(len(skeleton.bones))}
    for i, bone in enumerate(skeleton.bones):
        if bone.parent >= 0:
            children[bone.parent].append(i)
    lines = ["HIERARCHY"]
    written: list[int] = []

    def joint(i: int, depth: int) -> None:
        bone = skeleton.bones[i]
        pad = "  " * depth
        written.append(i)
        lines.append(f"{pad}{'ROOT' if bone.parent < 0 else 'JOINT'} {bone.name}")
        lines.append(pad + "{")
        x, y, z = bone.offset_cm
        lines.append(f"{pad}  OFFSET {x!r} {y!r} {z!r}")
        rotations = " ".join(f"{axis}rotation" for axis in order)
        lines.append(f"{pad}  CHANNELS 6 Xposition Yposition Zposition {rotations}")
        for child in children[i]:
            joint(child, depth + 1)
        if not children[i]:
            lines.extend([f"{pad}  End Site", f"{pad}  {{", f"{pad}    OFFSET 0 1 0", f"{pad}  }}"])
        lines.append(pad + "}")

    joint(0, 0)
    lines += ["MOTION", f"Frames: {len(frames)}", "Frame Time: 0.0166667"]
    for frame in frames:
        lines.append(" ".join(repr(float(v)) for v in frame[written].ravel()))
    path.write_text("\n".join(lines) + "\n")


def reference_fk(
    skeleton: Skeleton, order: str, channels: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """One bone at a time, straight from the definition; Y-up, centimetres."""
    n = len(skeleton.bones)
    rotations = np.zeros((n, 3, 3))
    positions = np.zeros((n, 3))
    for i, bone in enumerate(skeleton.bones):
        local = Rotation.from_euler(order, channels[i, 3:], degrees=True).as_matrix()
        if bone.parent < 0:
            rotations[i] = local
            positions[i] = channels[i, :3]
        else:
            rotations[i] = rotations[bone.parent] @ local
            positions[i] = positions[bone.parent] + rotations[bone.parent] @ channels[i, :3]
    return positions, rotations


def to_gmr(positions_cm: np.ndarray, rotations: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return positions_cm * 0.01 @ C.T, C @ rotations


def canonical(q: np.ndarray) -> np.ndarray:
    return q * np.where(q[..., :1] < 0.0, -1.0, 1.0)


@pytest.mark.parametrize("kind, order", SKELETON_CASES)
def test_matches_bvhio(tmp_path, kind, order):
    skeleton = get_skeleton(kind)
    frames = random_frames(kind, 4, seed=ROTATION_ORDERS.index(order))
    path = tmp_path / "take.bvh"
    write_bvh(path, skeleton, order, frames)
    root = bvhio.readAsHierarchy(str(path))
    joints = {j.Name: j for j, _, _ in root.layout()}
    names = skeleton.names
    fk = AxisForwardKinematics(skeleton, order)

    def bvhio_pose(frame: int) -> tuple[np.ndarray, np.ndarray]:
        root.loadPose(frame)
        positions = np.array([list(joints[name].PositionWorld) for name in names])
        rotations = np.array(
            [np.array(glm.mat3_cast(joints[name].RotationWorld).to_list()).T for name in names]
        )
        return positions, rotations

    _, rest = bvhio_pose(0)  # frame 0 is the T-pose: every global rotation is the identity
    for f in range(len(frames)):
        positions_cm, rotations = bvhio_pose(f)
        # bvhio carries a per-joint rest rotation (bone-tip aligned) on its world rotations.
        rotations = rotations @ np.transpose(rest, (0, 2, 1))
        expected_p, expected_r = to_gmr(positions_cm, rotations)
        positions, matrices = fk.all_bones(frames[f])
        np.testing.assert_allclose(positions, expected_p, atol=1e-5)
        np.testing.assert_allclose(matrices, expected_r, atol=1e-5)


@pytest.mark.parametrize("kind, order", SKELETON_CASES)
def test_matches_reference_loop(kind, order):
    skeleton = get_skeleton(kind)
    fk = AxisForwardKinematics(kind, order)
    sources = skeleton.gmr_source_bones()
    frames = random_frames(kind, 5, seed=100 + ROTATION_ORDERS.index(order))
    for channels in frames:
        expected_p, expected_r = to_gmr(*reference_fk(skeleton, order, channels))
        positions, rotations = fk.all_bones(channels)
        np.testing.assert_allclose(positions, expected_p, atol=1e-12)
        np.testing.assert_allclose(rotations, expected_r, atol=1e-12)

        body_p, body_q = fk.bodies(channels)
        assert body_p.shape == (23, 3) and body_q.shape == (23, 4)
        np.testing.assert_allclose(body_p, expected_p[list(sources)], atol=1e-12)
        scipy_q = Rotation.from_matrix(expected_r[list(sources)]).as_quat(scalar_first=True)
        np.testing.assert_allclose(body_q, canonical(scipy_q), atol=1e-12)
        assert (body_q[:, 0] >= 0.0).all()
        np.testing.assert_allclose(np.linalg.norm(body_q, axis=1), 1.0, atol=1e-12)


def test_batch_equals_single():
    fk = AxisForwardKinematics()
    frames = random_frames(SkeletonKind.AXIS_STUDIO, 7, seed=3)
    batch_p, batch_q = fk.bodies_batch(frames)
    assert batch_p.shape == (7, 23, 3) and batch_q.shape == (7, 23, 4)
    for f, channels in enumerate(frames):
        p, q = fk.bodies(channels)
        np.testing.assert_allclose(batch_p[f], p, atol=1e-14)
        np.testing.assert_allclose(batch_q[f], q, atol=1e-14)


def test_quaternions_near_180_degrees():
    """w ~ 0: the sign of x, y, z must not come from differences of near-equal entries."""
    axes = np.array([[1.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, -2.0, 3.0], [0.0, 1.0, -1.0]])
    axes /= np.linalg.norm(axes, axis=1, keepdims=True)
    angles = np.pi - np.array([0.0, 1e-9, 1e-6, 1e-3])
    rotations = Rotation.from_rotvec(axes * angles[:, None])
    q = matrices_to_quaternions(rotations.as_matrix())
    np.testing.assert_allclose(q, canonical(rotations.as_quat(scalar_first=True)), atol=1e-12)


def test_tpose_conventions_axis_studio():
    """Axis BVH: Y-up, right-handed, facing +Z, left = +X. After (x, y, z) -> (x, -z, y): Z-up,
    facing -Y, left still +X."""
    skeleton = get_skeleton(SkeletonKind.AXIS_STUDIO)
    fk = AxisForwardKinematics(skeleton)
    tpose = random_frames(SkeletonKind.AXIS_STUDIO, 1, seed=0)[0]
    p, q = fk.bodies(tpose)
    body = {name: (p[i], q[i]) for i, name in enumerate(GMR_BODIES)}

    hips = body["Hips"][0]
    np.testing.assert_allclose(hips, [0.0, 0.0, 0.9143], atol=1e-12)
    assert body["Head"][0][2] > hips[2] + 0.5
    assert body["LeftUpLeg"][0][0] > hips[0] + 0.09
    assert body["RightUpLeg"][0][0] < hips[0] - 0.09
    np.testing.assert_allclose(body["LeftHand"][0][0], 0.685, atol=1e-9)
    np.testing.assert_allclose(body["RightHand"][0][0], -0.685, atol=1e-9)
    np.testing.assert_allclose(body["LeftFoot"][0][2], 0.9143 - 2 * 0.4187, atol=1e-9)
    # Facing -Y: the thumbs (Axis +Z, forward, of the hand) end up at smaller y.
    positions, _ = fk.all_bones(tpose)
    thumb, hand = skeleton.index("LeftHandThumb1"), skeleton.index("LeftHand")
    assert positions[thumb, 1] < positions[hand, 1] - 0.02
    # Every bone has the Axis identity orientation; in the Z-up frame that is C = Rx(+90 deg).
    for name in GMR_BODIES:
        np.testing.assert_allclose(body[name][1], [0.5**0.5, 0.5**0.5, 0.0, 0.0], atol=1e-12)
    # Stand-ins: Spine3 reads Spine2; toes read the feet.
    np.testing.assert_array_equal(p[GMR_BODY_INDEX["Spine3"]], p[GMR_BODY_INDEX["Spine2"]])
    np.testing.assert_array_equal(p[GMR_BODY_INDEX["LeftToe"]], p[GMR_BODY_INDEX["LeftFoot"]])
    np.testing.assert_array_equal(q[GMR_BODY_INDEX["RightToe"]], q[GMR_BODY_INDEX["RightFoot"]])


def test_pn_pro_has_its_own_spine3():
    fk = AxisForwardKinematics(SkeletonKind.PN_PRO)
    p, _ = fk.bodies(random_frames(SkeletonKind.PN_PRO, 1, seed=0)[0])
    spine2, spine3 = p[GMR_BODY_INDEX["Spine2"]], p[GMR_BODY_INDEX["Spine3"]]
    np.testing.assert_allclose(spine3 - spine2, [0.0, 0.0, 0.10003], atol=1e-12)


def test_yaw_plus_90_turns_left_hip_to_plus_y():
    """Yaw +90 deg about the Axis vertical (Y) turns the character from facing +Z to facing +X
    (its left side to -Z). In the Z-up frame it then faces +X with its left hip at +Y."""
    fk = AxisForwardKinematics(SkeletonKind.AXIS_STUDIO, "YXZ")
    channels = random_frames(SkeletonKind.AXIS_STUDIO, 1, seed=0)[0]
    channels[0, 3] = 90.0  # first angle of YXZ is Y
    p, q = fk.bodies(channels)
    hips = p[GMR_BODY_INDEX["Hips"]]
    left_hip = p[GMR_BODY_INDEX["LeftUpLeg"]] - hips
    np.testing.assert_allclose(left_hip, [0.0, 0.0925, 0.0], atol=1e-12)
    # Root orientation: Rz(+90 deg) after C.
    expected = Rotation.from_euler("z", 90, degrees=True) * Rotation.from_euler("x", 90, True)
    np.testing.assert_allclose(
        q[GMR_BODY_INDEX["Hips"]], canonical(expected.as_quat(scalar_first=True)), atol=1e-12
    )


def test_without_displacement_datagram_gives_the_same_bodies():
    config = AxisBvhConfig()
    channels = random_frames(SkeletonKind.AXIS_STUDIO, 2, seed=9)[1]
    channels = channels.astype(np.float32).astype(np.float64)
    channels[1:, :3] = get_skeleton(SkeletonKind.AXIS_STUDIO).offsets_cm[1:]
    fk = AxisForwardKinematics()
    with_disp = parse_datagram(encode_datagram(1, channels, config=config), config)
    without = parse_datagram(encode_datagram(1, channels, with_displacement=False), config)
    p1, q1 = fk.bodies(with_disp.channels)
    p2, q2 = fk.bodies(without.channels)
    np.testing.assert_allclose(p1, p2, atol=1e-6)  # offsets went through float32 in one of them
    np.testing.assert_allclose(q1, q2, atol=1e-12)


def test_missing_body_warns_once_and_gets_identity(caplog):
    base = get_skeleton(SkeletonKind.AXIS_STUDIO)
    bones = tuple(
        BoneDef("LeftPalm", b.parent, b.offset_cm) if b.name == "LeftHand" else b
        for b in base.bones
    )
    skeleton = Skeleton(SkeletonKind.AXIS_STUDIO, bones)
    with caplog.at_level(logging.WARNING, logger="mocapline.services.capture.fk"):
        fk = AxisForwardKinematics(skeleton)
        frames = random_frames(SkeletonKind.AXIS_STUDIO, 3, seed=4)
        p, q = fk.bodies(frames[1])
        fk.bodies(frames[2])
        bp, bq = fk.bodies_batch(frames)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "LeftHand" in warnings[0].getMessage()
    assert fk.missing_bodies == ("LeftHand",)
    i = GMR_BODY_INDEX["LeftHand"]
    assert p.shape == (23, 3) and q.shape == (23, 4)
    np.testing.assert_array_equal(p[i], 0.0)
    np.testing.assert_array_equal(q[i], [1.0, 0.0, 0.0, 0.0])
    np.testing.assert_array_equal(bq[:, i], [[1.0, 0.0, 0.0, 0.0]] * 3)
    # The other bodies are unaffected.
    full_p, _ = AxisForwardKinematics().bodies(frames[1])
    others = [j for j in range(23) if j != i]
    np.testing.assert_allclose(p[others], full_p[others], atol=1e-12)


def test_shape_validation():
    fk = AxisForwardKinematics()
    with pytest.raises(ValueError, match="expected"):
        fk.bodies(np.zeros((58, 6)))
    with pytest.raises(ValueError, match="expected"):
        fk.bodies_batch(np.zeros((59, 6)))
    with pytest.raises(ValueError, match="rotation_order"):
        AxisForwardKinematics(rotation_order="XYX")
