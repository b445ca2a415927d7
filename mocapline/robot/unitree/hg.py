"""``unitree_hg``: the LowCmd_ / LowState_ messages of the G1 (and H1-2), 35 motor slots.

LowCmd_ is 1004 bytes in C and 1000 in CDR (C pads the two bytes before the first motor to 4).
LowState_: in C its ``imu_state`` (54 bytes
of fields) is padded to 56, in CDR the first MotorState_'s ``mode`` follows at once, so the motors
sit 4 bytes earlier on the wire and the sample is 2088 bytes, not 2092.

Field meanings (public IDL of Unitree's SDK): ``mode_pr`` 0 = the ankles and waist are commanded
as pitch/roll; ``mode_machine`` is the robot's type, copied from LowState into every LowCmd;
``motor_cmd[i].mode`` 1 enables motor i. Which joint drives which slot is the robot's description's
(``mocapline/robot/builds``).
"""

from __future__ import annotations

import numpy as np

from mocapline.robot.unitree.lowlevel import Fields, Layout

MOTOR_SLOTS = 35

MOTOR_CMD_FIELDS: Fields = [("mode", "u1", 1), ("q", "f4", 1), ("dq", "f4", 1), ("tau", "f4", 1), ("kp", "f4", 1),
                            ("kd", "f4", 1), ("reserve", "u4", 1)]
LOW_CMD_FIELDS: Fields = [("mode_pr", "u1", 1), ("mode_machine", "u1", 1), ("motor_cmd", MOTOR_CMD_FIELDS, MOTOR_SLOTS),
                          ("reserve", "u4", 4), ("crc", "u4", 1)]
IMU_FIELDS: Fields = [("quaternion", "f4", 4), ("gyroscope", "f4", 3), ("accelerometer", "f4", 3), ("rpy", "f4", 3),
                      ("temperature", "i2", 1)]
MOTOR_STATE_FIELDS: Fields = [("mode", "u1", 1), ("q", "f4", 1), ("dq", "f4", 1), ("ddq", "f4", 1),
                              ("tau_est", "f4", 1), ("temperature", "i2", 2), ("vol", "f4", 1), ("sensor", "u4", 2),
                              ("motorstate", "u4", 1), ("reserve", "u4", 4)]
LOW_STATE_FIELDS: Fields = [("version", "u4", 2), ("mode_pr", "u1", 1), ("mode_machine", "u1", 1), ("tick", "u4", 1),
                            ("imu_state", IMU_FIELDS, 1), ("motor_state", MOTOR_STATE_FIELDS, MOTOR_SLOTS),
                            ("wireless_remote", "u1", 40), ("reserve", "u4", 4), ("crc", "u4", 1)]

LOW_CMD = Layout(LOW_CMD_FIELDS)
LOW_STATE = Layout(LOW_STATE_FIELDS)


def new_low_cmd() -> np.ndarray:
    return LOW_CMD.new()


def new_low_state() -> np.ndarray:
    """A zeroed LowState_ record, its quaternion the identity."""
    state = LOW_STATE.new()
    state["imu_state"]["quaternion"] = (1.0, 0.0, 0.0, 0.0)
    return state
