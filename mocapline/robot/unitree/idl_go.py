# mypy: disable-error-code="type-arg,valid-type,call-arg"
"""The ``unitree_go`` message types (the H1's LowCmd_ / LowState_) as Cyclone DDS IDL structs,
under the type names Unitree's own peers use (``unitree_go::msg::dds_::LowCmd_`` ...); the bytes
come from :mod:`.go` (``tests/test_unitree_lowlevel.py`` proves both give equal bytes)."""

from dataclasses import dataclass

from cyclonedds.idl import IdlStruct
from cyclonedds.idl.types import array, float32, int16, int32, uint8, uint16, uint32

# No `from __future__ import annotations`: cyclonedds reads these annotations as objects.
PREFIX = "unitree_go.msg.dds_."


@dataclass
class MotorCmd_(IdlStruct, typename=PREFIX + "MotorCmd_"):  # noqa: N801 - the IDL's name
    mode: uint8
    q: float32
    dq: float32
    tau: float32
    kp: float32
    kd: float32
    reserve: array[uint32, 3]


@dataclass
class BmsCmd_(IdlStruct, typename=PREFIX + "BmsCmd_"):  # noqa: N801
    off: uint8
    reserve: array[uint8, 3]


@dataclass
class LowCmd_(IdlStruct, typename=PREFIX + "LowCmd_"):  # noqa: N801
    head: array[uint8, 2]
    level_flag: uint8
    frame_reserve: uint8
    sn: array[uint32, 2]
    version: array[uint32, 2]
    bandwidth: uint16
    motor_cmd: array[MotorCmd_, 20]
    bms_cmd: BmsCmd_
    wireless_remote: array[uint8, 40]
    led: array[uint8, 12]
    fan: array[uint8, 2]
    gpio: uint8
    reserve: uint32
    crc: uint32


@dataclass
class IMUState_(IdlStruct, typename=PREFIX + "IMUState_"):  # noqa: N801
    quaternion: array[float32, 4]
    gyroscope: array[float32, 3]
    accelerometer: array[float32, 3]
    rpy: array[float32, 3]
    temperature: uint8


@dataclass
class MotorState_(IdlStruct, typename=PREFIX + "MotorState_"):  # noqa: N801
    mode: uint8
    q: float32
    dq: float32
    ddq: float32
    tau_est: float32
    q_raw: float32
    dq_raw: float32
    ddq_raw: float32
    temperature: uint8
    lost: uint32
    reserve: array[uint32, 2]


@dataclass
class BmsState_(IdlStruct, typename=PREFIX + "BmsState_"):  # noqa: N801
    version_high: uint8
    version_low: uint8
    status: uint8
    soc: uint8
    current: int32
    cycle: uint16
    bq_ntc: array[uint8, 2]
    mcu_ntc: array[uint8, 2]
    cell_vol: array[uint16, 15]


@dataclass
class LowState_(IdlStruct, typename=PREFIX + "LowState_"):  # noqa: N801
    head: array[uint8, 2]
    level_flag: uint8
    frame_reserve: uint8
    sn: array[uint32, 2]
    version: array[uint32, 2]
    bandwidth: uint16
    imu_state: IMUState_
    motor_state: array[MotorState_, 20]
    bms_state: BmsState_
    foot_force: array[int16, 4]
    foot_force_est: array[int16, 4]
    tick: uint32
    wireless_remote: array[uint8, 40]
    bit_flag: uint8
    adc_reel: float32
    temperature_ntc1: uint8
    temperature_ntc2: uint8
    power_v: float32
    power_a: float32
    fan_frequency: array[uint16, 4]
    reserve: uint32
    crc: uint32
