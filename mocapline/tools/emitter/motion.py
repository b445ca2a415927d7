"""Synthetic but plausible human motion for the 59-bone Axis skeleton: walking in place with an
arm-raising cycle, the fingers going through open, fist, open, pinch, open, point (``GESTURES``).
Channels are what the Axis stream carries per bone: translation (cm, the root's position, the
others' T-pose offsets) then three Euler angles (degrees) in the configured order.

Axis BVH frame: Y-up, character facing +Z, left = +X, T-pose with arms along +-X.
"""

from __future__ import annotations

import numpy as np

from mocapline.formats.skeleton import Skeleton

STEP_HZ = 0.9
ARM_RAISE_HZ = 0.2
# The hands' cycle: each gesture is reached in GESTURE_MOVE_S and held for the rest of GESTURE_S.
GESTURES: tuple[str, ...] = ("open", "fist", "open", "pinch", "open", "point")
GESTURE_S = 1.25
GESTURE_MOVE_S = 0.5
# Flexion (deg) per hand bone (without the side), per gesture; Thumb1 as (about Y, flexion).
_FINGERS = ("Index", "Middle", "Ring", "Pinky")
_CURLED = {"1": 85.0, "2": 100.0, "3": 70.0}
_GESTURE_FLEX: dict[str, dict[str, float | tuple[float, float]]] = {
    "open": {},
    "fist": {**{f"Hand{f}{k}": v for f in _FINGERS for k, v in _CURLED.items()},
             "HandThumb1": (0.0, 40.0), "HandThumb2": 30.0, "HandThumb3": 40.0},
    # thumb tip on the index tip (3.5 mm apart, tips extrapolated along the distal bones)
    "pinch": {"HandIndex1": 60.0, "HandIndex2": 50.0, "HandIndex3": 30.0,
              **{f"Hand{f}{k}": v for f in _FINGERS[1:] for k, v in (("1", 15.0), ("2", 20.0), ("3", 10.0))},
              "HandThumb1": (0.0, 30.0), "HandThumb2": 20.0, "HandThumb3": 20.0},
    "point": {**{f"Hand{f}{k}": v for f in _FINGERS[1:] for k, v in _CURLED.items()},
              "HandThumb1": (0.0, 40.0), "HandThumb2": 30.0, "HandThumb3": 40.0},
}


def _euler_channels(order: str, rx: float, ry: float, rz: float) -> tuple[float, float, float]:
    by_axis = {"X": rx, "Y": ry, "Z": rz}
    return tuple(by_axis[a] for a in order)  # type: ignore[return-value]


def pose_channels(skeleton: Skeleton, rotation_order: str, t: float, speed: float = 1.0) -> np.ndarray:
    """Channels (59, 6) of the pose at time t seconds. ``speed`` scales the motion's tempo."""
    ch = np.zeros((len(skeleton.bones), 6))
    ch[:, :3] = skeleton.offsets_cm
    phase = 2 * np.pi * STEP_HZ * speed * t
    raise_phase = 2 * np.pi * ARM_RAISE_HZ * speed * t
    s, c = np.sin(phase), np.cos(phase)
    raise_amount = 0.5 - 0.5 * np.cos(raise_phase)  # 0 .. 1 .. 0

    hips_height = skeleton.offsets_cm[0, 1]
    ch[0, :3] = (2.0 * s, hips_height - 1.5 + 1.5 * np.cos(2 * phase), 1.0 * c)

    angles: dict[str, tuple[float, float, float]] = {  # (rx, ry, rz) degrees
        "Hips": (2.0 * np.cos(2 * phase), 6.0 * s, 2.0 * s),
        "RightUpLeg": (-25.0 * s, 0.0, 2.0),
        "LeftUpLeg": (25.0 * s, 0.0, -2.0),
        "RightLeg": (30.0 * max(0.0, c) + 5.0, 0.0, 0.0),
        "LeftLeg": (30.0 * max(0.0, -c) + 5.0, 0.0, 0.0),
        "RightFoot": (10.0 * s, 0.0, 0.0),
        "LeftFoot": (-10.0 * s, 0.0, 0.0),
        "Spine": (3.0, -3.0 * s, 0.0),
        "Spine1": (2.0, -2.0 * s, 0.0),
        "Spine2": (1.0, -1.0 * s, 0.0),
        "Neck": (-2.0, 3.0 * s, 0.0),
        "Head": (-3.0, 4.0 * s, 0.0),
        # Arms hang (about -75 deg from the T-pose) and swing against the legs; every few
        # seconds both arms rise to the side and up.
        "LeftArm": (0.0, 20.0 * s * (1 - raise_amount), -75.0 + 150.0 * raise_amount),
        "RightArm": (0.0, 20.0 * s * (1 - raise_amount), 75.0 - 150.0 * raise_amount),
        "LeftForeArm": (0.0, -25.0 - 10.0 * s, 0.0),
        "RightForeArm": (0.0, 25.0 - 10.0 * s, 0.0),
        "LeftHand": (0.0, 0.0, -5.0),
        "RightHand": (0.0, 0.0, 5.0),
    }
    angles.update(finger_angles(t * speed))
    names = skeleton.names
    for name, (rx, ry, rz) in angles.items():
        if name in names:
            ch[names.index(name), 3:] = _euler_channels(rotation_order, rx, ry, rz)
    return ch


def gesture_at(t: float) -> tuple[str, str, float]:
    """The gesture the hands come from, the one they go to, and how far they are (0..1) at ``t`` s."""
    k = int(t // GESTURE_S)
    into = (t - k * GESTURE_S) / GESTURE_MOVE_S
    blend = 1.0 if into >= 1.0 else into * into * (3.0 - 2.0 * into)  # smoothstep
    return GESTURES[(k - 1) % len(GESTURES)], GESTURES[k % len(GESTURES)], blend


def finger_angles(t: float) -> dict[str, tuple[float, float, float]]:
    """(rx, ry, rz) degrees of every finger bone of both hands at ``t`` s. In the T-pose a hand's
    bones lie along +-X with the palm down (-Y): flexion is about Z (negative on the left hand,
    whose bones point +X); the thumb's first bone may also turn about Y."""
    came, going, blend = gesture_at(t)
    out: dict[str, tuple[float, float, float]] = {}
    for bone in {*_GESTURE_FLEX[came], *_GESTURE_FLEX[going]}:
        a, b = _GESTURE_FLEX[came].get(bone, 0.0), _GESTURE_FLEX[going].get(bone, 0.0)
        across_a, flex_a = a if isinstance(a, tuple) else (0.0, a)
        across_b, flex_b = b if isinstance(b, tuple) else (0.0, b)
        across = across_a + blend * (across_b - across_a)
        flex = flex_a + blend * (flex_b - flex_a)
        out[f"Left{bone}"] = (0.0, across, -flex)
        out[f"Right{bone}"] = (0.0, -across, flex)
    return out
