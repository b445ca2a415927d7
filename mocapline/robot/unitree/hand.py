"""``unitree_hg``'s hand messages (Dex3-1): ``HandCmd_`` on ``rt/dex3/{left,right}/cmd`` and
``HandState_`` on ``rt/dex3/{left,right}/state``, one per hand, 7 motors each.

Public IDL of Unitree's SDK (unitree_sdk2_python, ``idl/unitree_hg/msg/dds_``): ``HandCmd_`` is
``sequence<MotorCmd_> motor_cmd; uint32 reserve[4]`` (no CRC), ``HandState_`` is
``sequence<MotorState_> motor_state; sequence<PressSensorState_> press_sensor_state;
IMUState_ imu_state; float power_v, power_a, system_v, device_v; uint32 error[2], reserve[2]``,
``PressSensorState_`` ``float pressure[12], temperature[12]; uint32 lost, reserve``. In CDR a
sequence is its length (uint32) and then its elements, so with 7 motors (and 7 pressure sensors:
the SDK's default HandState_) each message has a fixed layout, a u32 count before each sequence:
HandCmd_ is 216 bytes of CDR (4 + 7 x 28 + 16), HandState_ 1216 (4 + 7 x 56, 4 + 7 x 104, the IMU's
54 and 2 of padding, 16 + 8 + 8).

``motor_cmd[i].mode`` packs the motor's id (bits 0-3), its status (bits 4-6: 1 = enabled, position
control) and a timeout flag (bit 7), as Unitree's xr_teleoperate writes it (``_RIS_Mode``); its
gains there are kp 1.5, kd 0.2 (the description's ``[hands]``).
"""

from __future__ import annotations

import numpy as np

from mocapline.robot.unitree.hg import IMU_FIELDS, MOTOR_CMD_FIELDS, MOTOR_STATE_FIELDS
from mocapline.robot.unitree.lowlevel import Fields, Layout

MOTORS = 7
PRESS_SENSORS = 7
STATUS_ENABLED = 0x01

PRESS_SENSOR_FIELDS: Fields = [("pressure", "f4", 12), ("temperature", "f4", 12), ("lost", "u4", 1),
                               ("reserve", "u4", 1)]
HAND_CMD_FIELDS: Fields = [("motor_count", "u4", 1), ("motor_cmd", MOTOR_CMD_FIELDS, MOTORS), ("reserve", "u4", 4)]
HAND_STATE_FIELDS: Fields = [("motor_count", "u4", 1), ("motor_state", MOTOR_STATE_FIELDS, MOTORS),
                             ("press_count", "u4", 1), ("press_sensor_state", PRESS_SENSOR_FIELDS, PRESS_SENSORS),
                             ("imu_state", IMU_FIELDS, 1), ("power_v", "f4", 1), ("power_a", "f4", 1),
                             ("system_v", "f4", 1), ("device_v", "f4", 1), ("error", "u4", 2), ("reserve", "u4", 2)]
HAND_CMD = Layout(HAND_CMD_FIELDS)
HAND_STATE = Layout(HAND_STATE_FIELDS)


def motor_mode(motor_id: int, status: int = STATUS_ENABLED, timeout: int = 0) -> int:
    """The ``mode`` byte: id in bits 0-3, status in 4-6, the timeout flag in 7."""
    return (motor_id & 0x0F) | (status & 0x07) << 4 | (timeout & 0x01) << 7


def new_hand_cmd() -> np.ndarray:
    """A HandCmd_ record: 7 motors, each its mode byte (enabled), zero targets and gains."""
    cmd = HAND_CMD.new()
    cmd["motor_count"] = MOTORS
    cmd["motor_cmd"]["mode"] = [motor_mode(i) for i in range(MOTORS)]
    return cmd


def hand_cmd(cmd: np.ndarray, q: np.ndarray, kp: float | np.ndarray, kd: float | np.ndarray) -> bytes:
    """Write q (7, the hand's motor order), kp and kd (dq and tau 0) into ``cmd``; its DDS sample."""
    motors = cmd["motor_cmd"]
    motors["q"], motors["kp"], motors["kd"] = q, kp, kd
    motors["dq"], motors["tau"] = 0.0, 0.0
    return HAND_CMD.sample(cmd)


def new_hand_state() -> np.ndarray:
    state = HAND_STATE.new()
    state["motor_count"], state["press_count"] = MOTORS, PRESS_SENSORS
    state["imu_state"]["quaternion"] = (1.0, 0.0, 0.0, 0.0)
    return state


def hand_state(state: np.ndarray, q: np.ndarray, dq: np.ndarray, tau: np.ndarray) -> bytes:
    """Write the motors' q, dq, tau_est into ``state``; its DDS sample."""
    motors = state["motor_state"]
    motors["q"], motors["dq"], motors["tau_est"] = q, dq, tau
    return HAND_STATE.sample(state)


class HandMessageError(ValueError):
    reason = "hand_message"


def _read(layout: Layout, sample: bytes | memoryview, counts: tuple[str, ...]) -> np.ndarray:
    record = layout.from_sample(sample)
    for name, expected in zip(counts, (MOTORS, PRESS_SENSORS), strict=False):
        if int(record[name]) != expected:
            raise HandMessageError(f"{name} {int(record[name])}, expected {expected}")
    return record


def read_hand_cmd(sample: bytes | memoryview) -> np.ndarray:
    """A HandCmd_ sample's record (LayoutError on a short sample, HandMessageError on another count)."""
    return _read(HAND_CMD, sample, ("motor_count",))


def read_hand_state(sample: bytes | memoryview) -> np.ndarray:
    return _read(HAND_STATE, sample, ("motor_count", "press_count"))
