"""The performer's height estimated from a take, checked against each Axis skeleton's own offsets
(Axis Studio's and Axis Neuron's Perception Neuron, as Noitom's hierarchy files give them): the
way `mocapline retarget-file` reads a 2-frame Axis Neuron take at 125 Hz."""

import numpy as np
import pytest

from mocapline.formats.bvh import BvhJoint, BvhMotion, estimate_height, gmr_bodies
from mocapline.formats.skeleton import SkeletonKind, get_skeleton
from mocapline.services.retarget.config import detect_bvh_skeleton

ROT = ("Yrotation", "Xrotation", "Zrotation")


def take(kind: SkeletonKind, frames: np.ndarray, scale: float = 1.0) -> BvhMotion:
    """A BVH of the skeleton (offsets times ``scale``) with one rotation per joint, position on the root."""
    skeleton = get_skeleton(kind)
    joints = tuple(BvhJoint(b.name, b.parent, tuple(v * scale for v in b.offset_cm),
                            (("Xposition", "Yposition", "Zposition") if b.parent < 0 else ()) + ROT)
                   for b in skeleton.bones)
    return BvhMotion(joints, 1 / 125, frames, source=f"{kind}.bvh")


def channels(kind: SkeletonKind, n: int, crouch_deg: float = 0.0) -> np.ndarray:
    """n frames; with a crouch the hips sink and the knees bend (no frame stands straight)."""
    skeleton = get_skeleton(kind)
    values = np.zeros((n, 3 + 3 * len(skeleton.bones)))
    values[:, 1] = skeleton.bones[0].offset_cm[1] * np.cos(np.radians(crouch_deg / 2)) ** 2
    for side in ("Left", "Right"):
        values[:, 3 + 3 * skeleton.index(f"{side}UpLeg") + 1] = -crouch_deg / 2  # X: thigh forward
        values[:, 3 + 3 * skeleton.index(f"{side}Leg") + 1] = crouch_deg  # knee bent back
    values[1:, 3 + 3 * skeleton.index("Neck") + 1] = 25.0  # the head nods in the second frame
    return values


def height(motion: BvhMotion) -> float:
    _, skeleton_map = detect_bvh_skeleton(motion)
    positions, _ = gmr_bodies(motion, skeleton_map)
    return estimate_height(positions)


def t_pose_height_cm(kind: SkeletonKind) -> float:
    """The skeleton's own hips to head joint plus hip to ankle, from its offsets."""
    skeleton = get_skeleton(kind)
    offsets = skeleton.offsets_cm

    def up_to(name: str) -> float:
        k, total = skeleton.index(name), 0.0
        while skeleton.bones[k].parent >= 0:
            total += float(np.linalg.norm(offsets[k]))
            k = skeleton.bones[k].parent
        return total

    return up_to("Head") + up_to("LeftFoot") - float(np.linalg.norm(offsets[skeleton.index("LeftUpLeg")]))


@pytest.mark.parametrize("kind", list(SkeletonKind))
def test_a_two_frame_take_at_125_hz_is_the_skeletons_height(kind: SkeletonKind) -> None:
    # each default skeleton is the reference human: legs and torso in proportion to 1.75 m
    expected = t_pose_height_cm(kind) / 149.05 * 1.75
    assert height(take(kind, channels(kind, 2))) == pytest.approx(expected, abs=0.005)
    assert expected == pytest.approx(1.75, abs=0.005)


@pytest.mark.parametrize("kind", list(SkeletonKind))
def test_a_crouching_or_larger_performer(kind: SkeletonKind) -> None:
    straight = height(take(kind, channels(kind, 2)))
    assert height(take(kind, channels(kind, 2, crouch_deg=60.0))) == pytest.approx(straight, abs=0.01)
    assert height(take(kind, channels(kind, 2), scale=1.1)) == pytest.approx(1.1 * straight, abs=0.01)
