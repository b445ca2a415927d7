"""``unitree_go``: the LowCmd_ / LowState_ messages of the H1 (and Unitree's quadrupeds), 20 motor
slots, each family with its own field layout (from the public IDL of Unitree's SDK,
``unitree_sdk2py/idl/unitree_go``). The CRC rule is the hg family's; it covers every word before
``crc``, which is the last word here too: 812 bytes of LowCmd_ in C (the CRC at 808), 1180 of
LowState_ (at 1176).

A command starts with ``head`` 0xFE 0xEF and ``level_flag`` 0xFF (low level), as Unitree's H1
example sets them; there is no ``mode_machine``. Motor modes: 0x0A (servo) for the H1's strong
motors, 0x01 for its weak ones (the description's ``mode``).
"""

from __future__ import annotations

import numpy as np

from mocapline.robot.unitree.lowlevel import Fields, Layout

MOTOR_SLOTS = 20
HEAD = (0xFE, 0xEF)
LEVEL_LOW = 0xFF

MOTOR_CMD_FIELDS: Fields = [("mode", "u1", 1), ("q", "f4", 1), ("dq", "f4", 1), ("tau", "f4", 1), ("kp", "f4", 1),
                            ("kd", "f4", 1), ("reserve", "u4", 3)]
BMS_CMD_FIELDS: Fields = [("off", "u1", 1), ("reserve", "u1", 3)]
LOW_CMD_FIELDS: Fields = [("head", "u1", 2), ("level_flag", "u1", 1), ("frame_reserve", "u1", 1), ("sn", "u4", 2),
                          ("version", "u4", 2), ("bandwidth", "u2", 1), ("motor_cmd", MOTOR_CMD_FIELDS, MOTOR_SLOTS),
                          ("bms_cmd", BMS_CMD_FIELDS, 1), ("wireless_remote", "u1", 40), ("led", "u1", 12),
                          ("fan", "u1", 2), ("gpio", "u1", 1), ("reserve", "u4", 1), ("crc", "u4", 1)]
IMU_FIELDS: Fields = [("quaternion", "f4", 4), ("gyroscope", "f4", 3), ("accelerometer", "f4", 3), ("rpy", "f4", 3),
                      ("temperature", "u1", 1)]
MOTOR_STATE_FIELDS: Fields = [("mode", "u1", 1), ("q", "f4", 1), ("dq", "f4", 1), ("ddq", "f4", 1),
                              ("tau_est", "f4", 1), ("q_raw", "f4", 1), ("dq_raw", "f4", 1), ("ddq_raw", "f4", 1),
                              ("temperature", "u1", 1), ("lost", "u4", 1), ("reserve", "u4", 2)]
BMS_STATE_FIELDS: Fields = [("version_high", "u1", 1), ("version_low", "u1", 1), ("status", "u1", 1), ("soc", "u1", 1),
                            ("current", "i4", 1), ("cycle", "u2", 1), ("bq_ntc", "u1", 2), ("mcu_ntc", "u1", 2),
                            ("cell_vol", "u2", 15)]
LOW_STATE_FIELDS: Fields = [("head", "u1", 2), ("level_flag", "u1", 1), ("frame_reserve", "u1", 1), ("sn", "u4", 2),
                            ("version", "u4", 2), ("bandwidth", "u2", 1), ("imu_state", IMU_FIELDS, 1),
                            ("motor_state", MOTOR_STATE_FIELDS, MOTOR_SLOTS), ("bms_state", BMS_STATE_FIELDS, 1),
                            ("foot_force", "i2", 4), ("foot_force_est", "i2", 4), ("tick", "u4", 1),
                            ("wireless_remote", "u1", 40), ("bit_flag", "u1", 1), ("adc_reel", "f4", 1),
                            ("temperature_ntc1", "u1", 1), ("temperature_ntc2", "u1", 1), ("power_v", "f4", 1),
                            ("power_a", "f4", 1), ("fan_frequency", "u2", 4), ("reserve", "u4", 1), ("crc", "u4", 1)]

LOW_CMD = Layout(LOW_CMD_FIELDS)
LOW_STATE = Layout(LOW_STATE_FIELDS)


def new_low_cmd() -> np.ndarray:
    cmd = LOW_CMD.new()
    cmd["head"] = HEAD
    cmd["level_flag"] = LEVEL_LOW
    return cmd


def new_low_state() -> np.ndarray:
    state = LOW_STATE.new()
    state["head"] = HEAD
    state["imu_state"]["quaternion"] = (1.0, 0.0, 0.0, 0.0)
    return state
