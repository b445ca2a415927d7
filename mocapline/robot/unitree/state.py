"""A LowState sample as the measured robot: the G1's joint angles and velocities, the IMU's
orientation, each sample checked (layout, CRC, finite values) and refused by reason. The bridge's
controller and the web viewer's measured robot read LowState this way; numpy only."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mocapline.robot.g1 import N_JOINTS
from mocapline.robot.unitree.g1 import GROUPS
from mocapline.robot.unitree.lowlevel import LOW_STATE, LayoutError


@dataclass(frozen=True)
class MeasuredState:
    q: np.ndarray  # (29,) rad, motor i = joint i of G1_JOINT_NAMES
    dq: np.ndarray  # (29,) rad/s
    quaternion: np.ndarray  # (4,) the IMU's (pelvis) orientation, w x y z
    mode_machine: int
    tick: int


def decode_state(sample: bytes | memoryview) -> MeasuredState:
    """One LowState sample; :class:`LayoutError` with its reason (``short_sample``,
    ``encapsulation``, ``crc_mismatch``, ``non_finite``) when it is refused."""
    state = LOW_STATE.from_sample(sample)
    if not LOW_STATE.crc_ok(state):
        raise LayoutError("crc_mismatch", "LowState CRC does not match")
    motors = state["motor_state"][:N_JOINTS]
    q, dq = motors["q"].astype(np.float64), motors["dq"].astype(np.float64)
    quat = state["imu_state"]["quaternion"].astype(np.float64)
    if not (np.all(np.isfinite(q)) and np.all(np.isfinite(dq)) and np.all(np.isfinite(quat))):
        raise LayoutError("non_finite", "LowState carries NaN or inf")
    return MeasuredState(q, dq, quat, int(state["mode_machine"]), int(state["tick"]))


def newest_state(samples: Sequence[bytes], rejected: Counter[str]) -> tuple[MeasuredState | None, int]:
    """The newest valid state of ``samples`` (oldest first), and how many were looked at: only
    the samples from the newest valid one on are decoded (the older ones are stale anyway); each
    one refused is counted in ``rejected`` by reason."""
    looked = 0
    for sample in reversed(samples):
        looked += 1
        try:
            return decode_state(sample), looked
        except LayoutError as exc:
            rejected[exc.reason] += 1
    return None, looked


def group_errors(measured: np.ndarray, target: np.ndarray) -> dict[str, dict[str, float]]:
    """|measured - target| per joint group (legs, waist, arms): mean and max, rad."""
    err = np.abs(np.asarray(measured, dtype=np.float64) - np.asarray(target, dtype=np.float64))
    return {name: {"mean": float(err[group].mean()), "max": float(err[group].max())} for name, group in GROUPS.items()}
