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

# The hand bodies a HumanFrame carries where its source has finger bones (HumanFrame.finger_positions /
# finger_quaternions, in this order): MVN's hand model, 20 a hand, left then right: carpus (the
# wrist), thumb metacarpal / proximal / distal phalanx, then index (Second) to little finger (Fifth)
# each metacarpal / proximal / middle / distal. Each is its segment's origin (a joint), so a distal
# phalanx's is the last finger joint, not the tip. Xsens sends these with gloves; capture computes
# them from an Axis skeleton's finger bones (formats/skeleton.py, ``hand_source_bones``).
HAND_BONES: tuple[str, ...] = (
    "Carpus", "FirstMC", "FirstPP", "FirstDP",
    *(f"{finger}{bone}" for finger in ("Second", "Third", "Fourth", "Fifth") for bone in ("MC", "PP", "MP", "DP")),
)
HAND_BODIES: tuple[str, ...] = tuple(f"{side}{bone}" for side in ("Left", "Right") for bone in HAND_BONES)
N_HAND_BONES = len(HAND_BONES)
