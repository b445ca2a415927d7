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
    sealed: bool = True  # False: its crc field was 0 (a publisher that does not seal, as Unitree's simulators)


def decode_state(sample: bytes | memoryview, require_crc: bool = False) -> MeasuredState:
    """One LowState sample; :class:`LayoutError` with its reason (``short_sample``,
    ``encapsulation``, ``crc_mismatch``, ``crc_unset`` with ``require_crc``, ``non_finite``) when
    it is refused. A crc field of 0 is taken as unsealed, not wrong, unless ``require_crc``."""
    state = LOW_STATE.from_sample(sample)
    crc = LOW_STATE.crc_status(state)
    if crc == "mismatch" or (crc == "unset" and require_crc):
        raise LayoutError(f"crc_{crc}", f"LowState CRC {'does not match' if crc == 'mismatch' else 'is not set'}")
    motors = state["motor_state"][:N_JOINTS]
    q, dq = motors["q"].astype(np.float64), motors["dq"].astype(np.float64)
    quat = state["imu_state"]["quaternion"].astype(np.float64)
    if not (np.all(np.isfinite(q)) and np.all(np.isfinite(dq)) and np.all(np.isfinite(quat))):
        raise LayoutError("non_finite", "LowState carries NaN or inf")
    return MeasuredState(q, dq, quat, int(state["mode_machine"]), int(state["tick"]), sealed=crc == "ok")


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
