# mypy: disable-error-code="type-arg,valid-type,call-arg"
"""The ``unitree_hg`` message types as Cyclone DDS IDL structs, under the type names Unitree's own
peers use (``unitree_hg::msg::dds_::LowCmd_`` ...), so that a topic here matches theirs.

The bridge and the sim register the topics with these types (discovery and type matching use
them) but put bytes on the wire through :mod:`mocapline.robot.unitree.lowlevel`, which lays out
the same CDR in one numpy step (:mod:`.hg`); ``tests/test_unitree_lowlevel.py`` proves both give equal bytes.
"""

from dataclasses import dataclass

from cyclonedds.idl import IdlStruct
from cyclonedds.idl.types import array, float32, int16, sequence, uint8, uint32

# No `from __future__ import annotations`: cyclonedds reads these annotations as objects.
PREFIX = "unitree_hg.msg.dds_."


@dataclass
class MotorCmd_(IdlStruct, typename=PREFIX + "MotorCmd_"):  # noqa: N801 - the IDL's name
    mode: uint8
    q: float32
    dq: float32
    tau: float32
    kp: float32
    kd: float32
    reserve: uint32


@dataclass
class LowCmd_(IdlStruct, typename=PREFIX + "LowCmd_"):  # noqa: N801
    mode_pr: uint8
    mode_machine: uint8
    motor_cmd: array[MotorCmd_, 35]
    reserve: array[uint32, 4]
    crc: uint32


@dataclass
class IMUState_(IdlStruct, typename=PREFIX + "IMUState_"):  # noqa: N801
    quaternion: array[float32, 4]
    gyroscope: array[float32, 3]
    accelerometer: array[float32, 3]
    rpy: array[float32, 3]
    temperature: int16


@dataclass
class MotorState_(IdlStruct, typename=PREFIX + "MotorState_"):  # noqa: N801
    mode: uint8
    q: float32
    dq: float32
    ddq: float32
    tau_est: float32
    temperature: array[int16, 2]
    vol: float32
    sensor: array[uint32, 2]
    motorstate: uint32
    reserve: array[uint32, 4]


@dataclass
class LowState_(IdlStruct, typename=PREFIX + "LowState_"):  # noqa: N801
    version: array[uint32, 2]
    mode_pr: uint8
    mode_machine: uint8
    tick: uint32
    imu_state: IMUState_
    motor_state: array[MotorState_, 35]
    wireless_remote: array[uint8, 40]
    reserve: array[uint32, 4]
    crc: uint32


@dataclass
class PressSensorState_(IdlStruct, typename=PREFIX + "PressSensorState_"):  # noqa: N801
    pressure: array[float32, 12]
    temperature: array[float32, 12]
    lost: uint32
    reserve: uint32


@dataclass
class HandCmd_(IdlStruct, typename=PREFIX + "HandCmd_"):  # noqa: N801 - Dex3-1, rt/dex3/{left,right}/cmd
    motor_cmd: sequence[MotorCmd_]
    reserve: array[uint32, 4]


@dataclass
class HandState_(IdlStruct, typename=PREFIX + "HandState_"):  # noqa: N801 - rt/dex3/{left,right}/state
    motor_state: sequence[MotorState_]
    press_sensor_state: sequence[PressSensorState_]
    imu_state: IMUState_
    power_v: float32
    power_a: float32
    system_v: float32
    device_v: float32
    error: array[uint32, 2]
    reserve: array[uint32, 2]
