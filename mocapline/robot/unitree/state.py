"""A LowState sample as the measured robot: its joint angles and velocities in stream order, the
IMU's orientation and angular rate, each sample checked (layout, CRC, finite values) and refused by
reason. The bridge's controller and the web viewer's measured robot read LowState this way;
numpy only."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mocapline.robot.description import RobotDescription
from mocapline.robot.unitree.family import family
from mocapline.robot.unitree.lowlevel import LayoutError


@dataclass(frozen=True)
class MeasuredState:
    q: np.ndarray  # (n,) rad, the robot's joints in stream order
    dq: np.ndarray  # (n,) rad/s
    quaternion: np.ndarray  # (4,) the IMU's (pelvis) orientation, w x y z
    mode_machine: int  # 0 where the family has none (unitree_go)
    tick: int
    sealed: bool = True  # False: its crc field was 0 (a publisher that does not seal, as Unitree's simulators)
    gyro: np.ndarray | None = None  # (3,) rad/s, the IMU's angular rate in its own frame


class StateDecoder:
    """LowState samples of one robot build: its family's layout, its joints' motor slots."""

    def __init__(self, robot: RobotDescription) -> None:
        self.family = family(robot.low_level.family)
        self.layout = self.family.low_state
        self.motors = robot.motor_index

    def decode(self, sample: bytes | memoryview, require_crc: bool = False) -> MeasuredState:
        """One LowState sample; :class:`LayoutError` with its reason (``short_sample``,
        ``encapsulation``, ``crc_mismatch``, ``crc_unset`` with ``require_crc``, ``non_finite``) when
        it is refused. A crc field of 0 is taken as unsealed, not wrong, unless ``require_crc``."""
        state = self.layout.from_sample(sample)
        crc = self.layout.crc_status(state)
        if crc == "mismatch" or (crc == "unset" and require_crc):
            raise LayoutError(f"crc_{crc}", f"LowState CRC {'does not match' if crc == 'mismatch' else 'is not set'}")
        motors = state["motor_state"]
        q, dq = motors["q"][self.motors].astype(np.float64), motors["dq"][self.motors].astype(np.float64)
        imu = state["imu_state"]
        quat, gyro = imu["quaternion"].astype(np.float64), imu["gyroscope"].astype(np.float64)
        if not all(np.all(np.isfinite(v)) for v in (q, dq, quat, gyro)):
            raise LayoutError("non_finite", "LowState carries NaN or inf")
        machine = int(state["mode_machine"]) if self.family.has_mode_machine else 0
        return MeasuredState(q, dq, quat, machine, int(state["tick"]), sealed=crc == "ok", gyro=gyro)

    def newest(self, samples: Sequence[bytes], rejected: Counter[str]) -> tuple[MeasuredState | None, int]:
        """The newest valid state of ``samples`` (oldest first), and how many were looked at: only
        the samples from the newest valid one on are decoded (the older ones are stale anyway); each
        one refused is counted in ``rejected`` by reason."""
        looked = 0
        for sample in reversed(samples):
            looked += 1
            try:
                return self.decode(sample), looked
            except LayoutError as exc:
                rejected[exc.reason] += 1
        return None, looked


def group_errors(measured: np.ndarray, target: np.ndarray,
                 groups: dict[str, np.ndarray]) -> dict[str, dict[str, float]]:
    """|measured - target| per joint group (legs, waist, arms): mean and max, rad."""
    err = np.abs(np.asarray(measured, dtype=np.float64) - np.asarray(target, dtype=np.float64))
    return {name: {"mean": float(err[group].mean()), "max": float(err[group].max())} for name, group in groups.items()
            if len(group)}
