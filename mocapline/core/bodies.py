"""The human body set every HumanFrame carries (the contract between capture and retarget)."""

from __future__ import annotations

# The bodies a HumanFrame carries, in wire order. Index i of HumanFrame.positions / quaternions is
# GMR_BODIES[i]. The names are those GMR's BVH configs use.
GMR_BODIES: tuple[str, ...] = (
    "Hips",
    "Spine",
    "Spine1",
    "Spine2",
    "Spine3",
    "Neck",
    "Head",
    "LeftShoulder",
    "LeftArm",
    "LeftForeArm",
    "LeftHand",
    "RightShoulder",
    "RightArm",
    "RightForeArm",
    "RightHand",
    "LeftUpLeg",
    "LeftLeg",
    "LeftFoot",
    "LeftToe",
    "RightUpLeg",
    "RightLeg",
    "RightFoot",
    "RightToe",
)
GMR_BODY_INDEX: dict[str, int] = {name: i for i, name in enumerate(GMR_BODIES)}
