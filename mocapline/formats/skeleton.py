"""Skeleton definitions: the Axis 59-bone skeletons and the 23-body set GMR retargets from.

The bone names, parents and T-pose offsets (centimetres, Axis Y-up frame) are facts of Noitom's
published "Axis Studio" and legacy "PN Pro" BVH hierarchies. Stream order equals the order below.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from mocapline.core.bodies import GMR_BODIES, HAND_BODIES


@dataclass(frozen=True)
class BoneDef:
    name: str
    parent: int
    offset_cm: tuple[float, float, float]


AXIS_STUDIO_BONES: tuple[BoneDef, ...] = (
    BoneDef('Hips', -1, (0.000, 91.430, 0.000)),
    BoneDef('RightUpLeg', 0, (-9.250, -0.000, 0.000)),
    BoneDef('RightLeg', 1, (0.000, -41.870, 0.000)),
    BoneDef('RightFoot', 2, (0.000, -41.870, 0.000)),
    BoneDef('LeftUpLeg', 0, (9.250, -0.000, 0.000)),
    BoneDef('LeftLeg', 4, (0.000, -41.870, 0.000)),
    BoneDef('LeftFoot', 5, (0.000, -41.870, 0.000)),
    BoneDef('Spine', 0, (0.000, 7.818, 0.000)),
    BoneDef('Spine1', 7, (0.000, 17.310, 0.000)),
    BoneDef('Spine2', 8, (0.000, 12.285, 0.000)),
    BoneDef('Neck', 9, (0.000, 18.427, 0.000)),
    BoneDef('Neck1', 10, (0.000, 4.735, 0.000)),
    BoneDef('Head', 11, (0.000, 4.735, 0.000)),
    BoneDef('RightShoulder', 9, (-2.792, 12.843, 0.000)),
    BoneDef('RightArm', 13, (-13.208, 0.000, 0.000)),
    BoneDef('RightForeArm', 14, (-26.500, 0.000, 0.000)),
    BoneDef('RightHand', 15, (-26.000, 0.000, 0.000)),
    BoneDef('RightHandThumb1', 16, (-2.489, 0.190, 3.121)),
    BoneDef('RightHandThumb2', 17, (-3.683, 0.000, 0.000)),
    BoneDef('RightHandThumb3', 18, (-2.558, 0.000, 0.000)),
    BoneDef('RightInHandIndex', 16, (-3.224, 0.508, 1.978)),
    BoneDef('RightHandIndex1', 20, (-5.217, -0.091, 0.999)),
    BoneDef('RightHandIndex2', 21, (-3.619, 0.000, 0.000)),
    BoneDef('RightHandIndex3', 22, (-2.052, 0.000, 0.000)),
    BoneDef('RightInHandMiddle', 16, (-3.382, 0.517, 0.757)),
    BoneDef('RightHandMiddle1', 24, (-5.174, -0.084, 0.314)),
    BoneDef('RightHandMiddle2', 25, (-3.949, 0.000, 0.000)),
    BoneDef('RightHandMiddle3', 26, (-2.476, 0.000, 0.000)),
    BoneDef('RightInHandRing', 16, (-3.365, 0.538, -0.129)),
    BoneDef('RightHandRing1', 28, (-4.635, -0.022, -0.479)),
    BoneDef('RightHandRing2', 29, (-3.442, 0.000, 0.000)),
    BoneDef('RightHandRing3', 30, (-2.388, 0.000, 0.000)),
    BoneDef('RightInHandPinky', 16, (-3.161, 0.469, -1.202)),
    BoneDef('RightHandPinky1', 32, (-4.141, -0.022, -1.091)),
    BoneDef('RightHandPinky2', 33, (-2.757, 0.000, 0.000)),
    BoneDef('RightHandPinky3', 34, (-1.742, 0.000, 0.000)),
    BoneDef('LeftShoulder', 9, (2.792, 12.843, 0.000)),
    BoneDef('LeftArm', 36, (13.208, 0.000, 0.000)),
    BoneDef('LeftForeArm', 37, (26.500, 0.000, 0.000)),
    BoneDef('LeftHand', 38, (26.000, 0.000, 0.000)),
    BoneDef('LeftHandThumb1', 39, (2.489, 0.190, 3.121)),
    BoneDef('LeftHandThumb2', 40, (3.683, 0.000, 0.000)),
    BoneDef('LeftHandThumb3', 41, (2.558, 0.000, 0.000)),
    BoneDef('LeftInHandIndex', 39, (3.224, 0.508, 1.978)),
    BoneDef('LeftHandIndex1', 43, (5.217, -0.091, 0.999)),
    BoneDef('LeftHandIndex2', 44, (3.619, 0.000, 0.000)),
    BoneDef('LeftHandIndex3', 45, (2.052, 0.000, 0.000)),
    BoneDef('LeftInHandMiddle', 39, (3.382, 0.517, 0.757)),
    BoneDef('LeftHandMiddle1', 47, (5.174, -0.084, 0.314)),
    BoneDef('LeftHandMiddle2', 48, (3.949, 0.000, 0.000)),
    BoneDef('LeftHandMiddle3', 49, (2.476, 0.000, 0.000)),
    BoneDef('LeftInHandRing', 39, (3.365, 0.538, -0.129)),
    BoneDef('LeftHandRing1', 51, (4.635, -0.022, -0.479)),
    BoneDef('LeftHandRing2', 52, (3.442, 0.000, 0.000)),
    BoneDef('LeftHandRing3', 53, (2.388, 0.000, 0.000)),
    BoneDef('LeftInHandPinky', 39, (3.161, 0.469, -1.202)),
    BoneDef('LeftHandPinky1', 55, (4.141, -0.022, -1.091)),
    BoneDef('LeftHandPinky2', 56, (2.757, 0.000, 0.000)),
    BoneDef('LeftHandPinky3', 57, (1.742, 0.000, 0.000)),
)
PN_PRO_BONES: tuple[BoneDef, ...] = (
    BoneDef('Hips', -1, (0.000, 91.430, 0.000)),
    BoneDef('RightUpLeg', 0, (-9.250, -0.000, 0.000)),
    BoneDef('RightLeg', 1, (0.000, -41.870, 0.000)),
    BoneDef('RightFoot', 2, (0.000, -41.870, 0.000)),
    BoneDef('LeftUpLeg', 0, (9.250, -0.000, 0.000)),
    BoneDef('LeftLeg', 4, (0.000, -41.870, 0.000)),
    BoneDef('LeftFoot', 5, (0.000, -41.870, 0.000)),
    BoneDef('Spine', 0, (0.000, 14.782, 0.000)),
    BoneDef('Spine1', 7, (0.000, 10.003, 0.000)),
    BoneDef('Spine2', 8, (0.000, 10.416, 0.000)),
    BoneDef('Spine3', 9, (0.000, 10.003, 0.000)),
    BoneDef('Neck', 10, (0.000, 10.692, 0.000)),
    BoneDef('Head', 11, (0.000, 9.470, 0.000)),
    BoneDef('RightShoulder', 10, (-2.792, 5.108, 0.000)),
    BoneDef('RightArm', 13, (-13.208, 0.000, 0.000)),
    BoneDef('RightForeArm', 14, (-26.500, 0.000, 0.000)),
    BoneDef('RightHand', 15, (-26.000, 0.000, 0.000)),
    BoneDef('RightHandThumb1', 16, (-2.489, 0.190, 3.121)),
    BoneDef('RightHandThumb2', 17, (-3.683, 0.000, 0.000)),
    BoneDef('RightHandThumb3', 18, (-2.558, 0.000, 0.000)),
    BoneDef('RightInHandIndex', 16, (-3.224, 0.508, 1.978)),
    BoneDef('RightHandIndex1', 20, (-5.217, -0.091, 0.999)),
    BoneDef('RightHandIndex2', 21, (-3.619, 0.000, 0.000)),
    BoneDef('RightHandIndex3', 22, (-2.052, 0.000, 0.000)),
    BoneDef('RightInHandMiddle', 16, (-3.382, 0.517, 0.757)),
    BoneDef('RightHandMiddle1', 24, (-5.174, -0.084, 0.314)),
    BoneDef('RightHandMiddle2', 25, (-3.949, 0.000, 0.000)),
    BoneDef('RightHandMiddle3', 26, (-2.476, 0.000, 0.000)),
    BoneDef('RightInHandRing', 16, (-3.365, 0.538, -0.129)),
    BoneDef('RightHandRing1', 28, (-4.635, -0.022, -0.479)),
    BoneDef('RightHandRing2', 29, (-3.442, 0.000, 0.000)),
    BoneDef('RightHandRing3', 30, (-2.388, 0.000, 0.000)),
    BoneDef('RightInHandPinky', 16, (-3.161, 0.469, -1.202)),
    BoneDef('RightHandPinky1', 32, (-4.141, -0.022, -1.091)),
    BoneDef('RightHandPinky2', 33, (-2.757, 0.000, 0.000)),
    BoneDef('RightHandPinky3', 34, (-1.742, 0.000, 0.000)),
    BoneDef('LeftShoulder', 10, (2.792, 5.108, 0.000)),
    BoneDef('LeftArm', 36, (13.208, 0.000, 0.000)),
    BoneDef('LeftForeArm', 37, (26.500, 0.000, 0.000)),
    BoneDef('LeftHand', 38, (26.000, 0.000, 0.000)),
    BoneDef('LeftHandThumb1', 39, (2.489, 0.190, 3.121)),
    BoneDef('LeftHandThumb2', 40, (3.683, 0.000, 0.000)),
    BoneDef('LeftHandThumb3', 41, (2.558, 0.000, 0.000)),
    BoneDef('LeftInHandIndex', 39, (3.224, 0.508, 1.978)),
    BoneDef('LeftHandIndex1', 43, (5.217, -0.091, 0.999)),
    BoneDef('LeftHandIndex2', 44, (3.619, 0.000, 0.000)),
    BoneDef('LeftHandIndex3', 45, (2.052, 0.000, 0.000)),
    BoneDef('LeftInHandMiddle', 39, (3.382, 0.517, 0.757)),
    BoneDef('LeftHandMiddle1', 47, (5.174, -0.084, 0.314)),
    BoneDef('LeftHandMiddle2', 48, (3.949, 0.000, 0.000)),
    BoneDef('LeftHandMiddle3', 49, (2.476, 0.000, 0.000)),
    BoneDef('LeftInHandRing', 39, (3.365, 0.538, -0.129)),
    BoneDef('LeftHandRing1', 51, (4.635, -0.022, -0.479)),
    BoneDef('LeftHandRing2', 52, (3.442, 0.000, 0.000)),
    BoneDef('LeftHandRing3', 53, (2.388, 0.000, 0.000)),
    BoneDef('LeftInHandPinky', 39, (3.161, 0.469, -1.202)),
    BoneDef('LeftHandPinky1', 55, (4.141, -0.022, -1.091)),
    BoneDef('LeftHandPinky2', 56, (2.757, 0.000, 0.000)),
    BoneDef('LeftHandPinky3', 57, (1.742, 0.000, 0.000)),
)



class SkeletonKind(StrEnum):
    AXIS_STUDIO = "axis_studio"
    PN_PRO = "pn_pro"



# Bodies the Axis stream lacks, and the bone that stands in for each (docs/formats.md: the toe falls back to
# foot; the Axis Studio skeleton has no Spine3, its shoulders hang off Spine2).
_STAND_INS: dict[SkeletonKind, dict[str, str]] = {
    SkeletonKind.AXIS_STUDIO: {"Spine3": "Spine2", "LeftToe": "LeftFoot", "RightToe": "RightFoot"},
    SkeletonKind.PN_PRO: {"LeftToe": "LeftFoot", "RightToe": "RightFoot"},
}


# Per hand body (HAND_BONES), the Axis bone (without the side) it is read from.
_AXIS_HAND: dict[str, str] = {
    "Carpus": "Hand", "FirstMC": "HandThumb1", "FirstPP": "HandThumb2", "FirstDP": "HandThumb3",
    **{f"{mvn}{bone}": f"{axis}{n}"
       for mvn, name in (("Second", "Index"), ("Third", "Middle"), ("Fourth", "Ring"), ("Fifth", "Pinky"))
       for bone, axis, n in (("MC", f"InHand{name}", ""), ("PP", f"Hand{name}", "1"),
                             ("MP", f"Hand{name}", "2"), ("DP", f"Hand{name}", "3"))},
}


@dataclass(frozen=True)
class Skeleton:
    kind: SkeletonKind
    bones: tuple[BoneDef, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(b.name for b in self.bones)

    @property
    def parents(self) -> np.ndarray:
        return np.array([b.parent for b in self.bones], dtype=np.int64)

    @property
    def offsets_cm(self) -> np.ndarray:
        return np.array([b.offset_cm for b in self.bones], dtype=np.float64)

    def index(self, name: str) -> int:
        return self.names.index(name)

    def gmr_source_bones(self) -> tuple[int | None, ...]:
        """For each of GMR_BODIES, the stream bone it is read from (None: not in this skeleton)."""
        names = self.names
        stand_ins = _STAND_INS[self.kind]
        out: list[int | None] = []
        for body in GMR_BODIES:
            source = body if body in names else stand_ins.get(body)
            out.append(names.index(source) if source in names else None)
        return tuple(out)


    def hand_source_bones(self) -> tuple[int, ...] | None:
        """For each of HAND_BODIES, the stream bone it is read from: the carpus is the hand, the
        thumb's three bones its MC / PP / DP, each finger's in-hand bone its MC and its three bones
        the phalanges. None for a skeleton without every finger bone (both Axis skeletons have them)."""
        names = self.names
        wanted = [side + _AXIS_HAND[body[len(side):]]
                  for body in HAND_BODIES for side in ("Left", "Right") if body.startswith(side)]
        if not set(wanted) <= set(names):
            return None
        return tuple(names.index(name) for name in wanted)


SKELETONS: dict[SkeletonKind, Skeleton] = {
    SkeletonKind.AXIS_STUDIO: Skeleton(SkeletonKind.AXIS_STUDIO, AXIS_STUDIO_BONES),
    SkeletonKind.PN_PRO: Skeleton(SkeletonKind.PN_PRO, PN_PRO_BONES),
}


# Other names a skeleton goes by: Axis Neuron calls its skeleton (Spine3, no Neck1) Perception Neuron.
SKELETON_ALIASES: dict[str, SkeletonKind] = {"pn": SkeletonKind.PN_PRO, "perception_neuron": SkeletonKind.PN_PRO}
SKELETON_CHOICES: tuple[SkeletonKind, ...] = tuple(SkeletonKind)


def skeleton_kind(text: str) -> SkeletonKind:
    """A skeleton flag's value (a kind or an alias) as its kind."""
    return SKELETON_ALIASES.get(text.lower()) or SkeletonKind(text.lower())


def get_skeleton(kind: SkeletonKind | str) -> Skeleton:
    return SKELETONS[skeleton_kind(kind)]
