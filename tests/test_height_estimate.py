"""The performer's height estimated from a take, checked against each Axis skeleton's own offsets
(Axis Studio's and Axis Neuron's Perception Neuron, equal to Noitom's hierarchy files): the way
`mocapline retarget-file` reads a 2-frame Axis Neuron take at 125 Hz."""

import numpy as np
import pytest

from mocapline.formats.bvh import HIP_ABOVE_ANKLE_PER_HEIGHT, BvhJoint, BvhMotion, estimate_height, gmr_bodies
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


def channels(kind: SkeletonKind, n: int) -> np.ndarray:
    """n frames standing, the head nodding in the second and one arm raised."""
    skeleton = get_skeleton(kind)
    values = np.zeros((n, 3 + 3 * len(skeleton.bones)))
    values[:, 1] = skeleton.bones[0].offset_cm[1]
    values[1:, 3 + 3 * skeleton.index("Neck") + 1] = 25.0
    values[1:, 3 + 3 * skeleton.index("LeftArm") + 2] = 60.0
    return values


def height(motion: BvhMotion) -> float:
    _, skeleton_map = detect_bvh_skeleton(motion)
    positions, _ = gmr_bodies(motion, skeleton_map)
    return estimate_height(positions)


def hips_above_ankle_cm(kind: SkeletonKind) -> float:
    """The standing skeleton's hips above its ankles, from its own offsets (Y-up, cm)."""
    skeleton = get_skeleton(kind)
    return -sum(skeleton.bones[skeleton.index(name)].offset_cm[1] for name in ("LeftUpLeg", "LeftLeg", "LeftFoot"))


@pytest.mark.parametrize("kind", list(SkeletonKind))
def test_a_two_frame_take_at_125_hz_is_measured_by_the_skeletons_own_offsets(kind: SkeletonKind) -> None:
    expected = hips_above_ankle_cm(kind) / 100 / HIP_ABOVE_ANKLE_PER_HEIGHT
    assert expected == pytest.approx(1.75, abs=1e-3)  # both default skeletons are the reference human
    assert height(take(kind, channels(kind, 2))) == pytest.approx(expected, abs=1e-3)
    for k in (0.9, 1.17):  # a take's own, longer or shorter, offsets: its own height
        assert height(take(kind, channels(kind, 2), scale=k)) == pytest.approx(k * expected, abs=1e-3)
