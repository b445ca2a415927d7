"""The unitree_go LowCmd_/LowState_ (the H1's): their C layout against a packing of the public
IDL written here, their CRC against the rule and against vectors of Unitree's own SDK, their CDR
against cyclonedds' serializer of the IDL types."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from mocapline.robot.unitree.crc import crc32_words_reference
from mocapline.robot.unitree.family import family
from mocapline.robot.unitree.go import LOW_CMD, LOW_STATE, new_low_cmd, new_low_state

# The C structs as Unitree's SDK packs them for its CRC (4-byte aligned, little endian).
CMD_FORMAT = "<4B4IH2x" + "B3x5f3I" * 20 + "4B" + "40B12B2BB" + "x2I"
STATE_FORMAT = "<4B4IH2x" + "13fB3x" + "B3x7fB3x3I" * 20 + "4BiH4B15H" + "8hI41B3xf2B2x2f4H2I"

# Vectors from Unitree's own SDK (unitree_sdk2_python 37116c5: its CRC helper and generated
# unitree_go types), computed once on these exact messages; no code of theirs is needed here.
UNITREE_CMD_CRC = 0x22E3EFF5  # of _command()
UNITREE_STATE_CRC = 0x15278469  # of _state()


def _command() -> np.ndarray:
    cmd = new_low_cmd()
    m = cmd["motor_cmd"]
    m["mode"][:19] = 10
    m["mode"][[4, 10]] = 1
    m["q"] = np.linspace(-1, 1, 20, dtype=np.float32)
    m["dq"], m["tau"] = 0.25, -1.5
    m["kp"][:19], m["kd"][:19] = 200.0, 5.0
    cmd["sn"], cmd["version"], cmd["bandwidth"] = (7, 8), (1, 2), 300
    cmd["led"], cmd["gpio"], cmd["reserve"] = np.arange(12), 3, 99
    return cmd


def _state() -> np.ndarray:
    s = new_low_state()
    s["sn"], s["version"], s["bandwidth"] = (3, 4), (5, 6), 100
    imu = s["imu_state"]
    imu["quaternion"], imu["gyroscope"] = (1.0, 0.0, 0.0, 0.0), (0.1, 0.2, 0.3)
    imu["accelerometer"], imu["rpy"], imu["temperature"] = (0.0, 0.0, 9.81), (0.0, 0.0, 0.5), 40
    m = s["motor_state"]
    m["mode"], m["q"], m["dq"], m["tau_est"], m["temperature"] = 1, np.arange(20) * 0.1, -0.2, 1.5, 30
    m["lost"] = np.arange(20)
    bms = s["bms_state"]
    bms["soc"], bms["current"], bms["cell_vol"] = 80, -5, np.arange(15) + 3000
    s["foot_force"], s["tick"], s["wireless_remote"] = (1, 2, 3, 4), 12345, np.arange(40)
    s["power_v"], s["fan_frequency"] = 48.5, (1, 2, 3, 4)
    return s


def _pack_command(cmd: np.ndarray) -> bytes:
    values: list = [*cmd["head"], cmd["level_flag"], cmd["frame_reserve"], *cmd["sn"], *cmd["version"],
                    cmd["bandwidth"]]
    for m in cmd["motor_cmd"]:
        values += [m["mode"], m["q"], m["dq"], m["tau"], m["kp"], m["kd"], *m["reserve"]]
    values += [cmd["bms_cmd"]["off"], *cmd["bms_cmd"]["reserve"], *cmd["wireless_remote"], *cmd["led"], *cmd["fan"],
               cmd["gpio"], cmd["reserve"], cmd["crc"]]
    return struct.pack(CMD_FORMAT, *(v.item() if hasattr(v, "item") else v for v in values))


def _pack_state(s: np.ndarray) -> bytes:
    imu, bms = s["imu_state"], s["bms_state"]
    values: list = [*s["head"], s["level_flag"], s["frame_reserve"], *s["sn"], *s["version"], s["bandwidth"],
                    *imu["quaternion"], *imu["gyroscope"], *imu["accelerometer"], *imu["rpy"], imu["temperature"]]
    for m in s["motor_state"]:
        values += [m["mode"], m["q"], m["dq"], m["ddq"], m["tau_est"], m["q_raw"], m["dq_raw"], m["ddq_raw"],
                   m["temperature"], m["lost"], *m["reserve"]]
    values += [bms["version_high"], bms["version_low"], bms["status"], bms["soc"], bms["current"], bms["cycle"],
               *bms["bq_ntc"], *bms["mcu_ntc"], *bms["cell_vol"], *s["foot_force"], *s["foot_force_est"], s["tick"],
               *s["wireless_remote"], s["bit_flag"], s["adc_reel"], s["temperature_ntc1"], s["temperature_ntc2"],
               s["power_v"], s["power_a"], *s["fan_frequency"], s["reserve"], s["crc"]]
    return struct.pack(STATE_FORMAT, *(v.item() if hasattr(v, "item") else v for v in values))


def test_the_c_layout_is_the_public_idl_packed() -> None:
    assert LOW_CMD.size == struct.calcsize(CMD_FORMAT) == 812 and LOW_CMD.crc_offset == 808
    assert LOW_STATE.size == struct.calcsize(STATE_FORMAT) == 1180 and LOW_STATE.crc_offset == 1176
    cmd, state = _command(), _state()
    assert LOW_CMD.c_bytes(cmd) == _pack_command(cmd)
    assert LOW_STATE.c_bytes(state) == _pack_state(state)


def test_the_crc_is_the_rule_over_every_word_before_it_and_unitrees_own() -> None:
    cmd, state = _command(), _state()
    LOW_CMD.seal(cmd)
    LOW_STATE.seal(state)
    assert int(cmd["crc"]) == crc32_words_reference(_pack_command(cmd)[:808]) == UNITREE_CMD_CRC
    assert int(state["crc"]) == crc32_words_reference(_pack_state(state)[:1176]) == UNITREE_STATE_CRC
    assert cmd["head"].tolist() == [0xFE, 0xEF] and int(cmd["level_flag"]) == 0xFF
    cmd["motor_cmd"]["q"][3] += 0.01
    assert not LOW_CMD.crc_ok(cmd)


def test_the_cdr_is_cyclonedds_own_serialization() -> None:
    idl = pytest.importorskip("mocapline.robot.unitree.idl_go")
    cmd = _command()
    LOW_CMD.seal(cmd)
    m = cmd["motor_cmd"]
    motors = [idl.MotorCmd_(int(m["mode"][i]), float(m["q"][i]), float(m["dq"][i]), float(m["tau"][i]),
                            float(m["kp"][i]), float(m["kd"][i]), [0, 0, 0]) for i in range(20)]
    message = idl.LowCmd_([0xFE, 0xEF], 0xFF, 0, [7, 8], [1, 2], 300, motors, idl.BmsCmd_(0, [0, 0, 0]),  # type: ignore[arg-type]
                          [0] * 40, list(range(12)), [0, 0], 3, 99, int(cmd["crc"]))
    assert LOW_CMD.sample(cmd) == message.serialize()
    back = LOW_CMD.from_sample(message.serialize())
    assert LOW_CMD.crc_ok(back) and np.array_equal(back["motor_cmd"]["q"], m["q"])


def test_the_state_round_trips_through_cdr_and_the_family_names_the_layouts() -> None:
    state = _state()
    LOW_STATE.seal(state)
    back = LOW_STATE.from_sample(LOW_STATE.sample(state))
    assert LOW_STATE.crc_ok(back) and LOW_STATE.c_bytes(back) == LOW_STATE.c_bytes(state)
    go = family("unitree_go")
    assert go.motor_slots == 20 and go.low_cmd is LOW_CMD and not go.has_mode_machine
    assert family("unitree_hg").motor_slots == 35 and family("unitree_hg").has_mode_machine
    with pytest.raises(ValueError, match="choose from"):
        family("unitree_xx")
