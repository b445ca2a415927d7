"""Synthetic but plausible human motion for the 59-bone Axis skeleton: walking in place with an
arm-raising cycle. Channels are what the Axis stream carries per bone: translation (cm, the root's
position, the others' T-pose offsets) then three Euler angles (degrees) in the configured order.

Axis BVH frame: Y-up, character facing +Z, left = +X, T-pose with arms along +-X.
"""

from __future__ import annotations

import numpy as np

from mocapline.formats.skeleton import Skeleton

STEP_HZ = 0.9
ARM_RAISE_HZ = 0.2


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
    names = skeleton.names
    for name, (rx, ry, rz) in angles.items():
        if name in names:
            ch[names.index(name), 3:] = _euler_channels(rotation_order, rx, ry, rz)
    return ch
