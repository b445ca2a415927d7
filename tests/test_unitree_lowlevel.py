"""The unitree_hg LowCmd_/LowState_ bytes and their CRC (mocapline/robot/unitree)."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mocapline.robot.unitree.crc import crc32_mpeg2, crc32_words, crc32_words_reference
from mocapline.robot.unitree.hg import LOW_CMD, LOW_STATE, new_low_state
from mocapline.robot.unitree.lowlevel import LayoutError

words = st.binary(min_size=0, max_size=400).map(lambda b: b[: len(b) - len(b) % 4])


def _swap_words(data: bytes) -> bytes:
    return b"".join(data[i:i + 4][::-1] for i in range(0, len(data), 4))


def test_crc_mpeg2_check_value() -> None:
    assert crc32_mpeg2(b"123456789") == 0x0376E6E7  # the catalogue's check value of CRC-32/MPEG-2


def test_crc_of_words_by_hand() -> None:
    # One word 0x00000001 fed MSB first: 31 zero bits then a one, from 0xFFFFFFFF (the rule, unrolled).
    crc = 0xFFFFFFFF
    for bit in [0] * 31 + [1]:
        top = (crc >> 31) ^ bit
        crc = ((crc << 1) & 0xFFFFFFFF) ^ (0x04C11DB7 if top else 0)
    assert crc32_words(struct.pack("<I", 1)) == crc == crc32_words_reference(struct.pack("<I", 1))
    assert crc32_words(b"") == 0xFFFFFFFF  # nothing fed: the initial value, no final xor


@given(words)
def test_crc_fast_equals_rule_and_mpeg2_of_swapped_words(data: bytes) -> None:
    assert crc32_words(data) == crc32_words_reference(data) == crc32_mpeg2(_swap_words(data))


def test_crc_rejects_partial_words() -> None:
    with pytest.raises(ValueError):
        crc32_words(b"abc")


def _command() -> np.ndarray:
    cmd = LOW_CMD.new()
    cmd["mode_machine"] = 5
    motors = cmd["motor_cmd"]
    motors["mode"][:29] = 1
    motors["q"] = np.linspace(-1, 1, 35, dtype=np.float32)
    motors["dq"] = 0.25
    motors["tau"] = -1.5
    motors["kp"][:29] = 40.0
    motors["kd"][:29] = 1.0
    cmd["reserve"] = (1, 2, 3, 4)
    return cmd


def test_low_cmd_is_1004_bytes_and_its_crc_covers_the_first_250_words() -> None:
    assert LOW_CMD.size == 1004
    cmd = _command()
    LOW_CMD.seal(cmd)
    raw = LOW_CMD.c_bytes(cmd)
    assert len(raw) == 1004
    assert struct.unpack_from("<I", raw, 1000)[0] == int(cmd["crc"]) == crc32_words_reference(raw[:1000])
    # field offsets of the packed struct (4-byte alignment): motor 1's q and the reserve words
    assert struct.unpack_from("<f", raw, 4 + 28 + 4)[0] == pytest.approx(float(cmd["motor_cmd"]["q"][1]))
    assert struct.unpack_from("<4I", raw, 984) == (1, 2, 3, 4)
    assert LOW_CMD.crc_ok(cmd)
    cmd["motor_cmd"]["q"][3] += 0.001
    assert not LOW_CMD.crc_ok(cmd)


def test_low_cmd_wire_bytes_equal_cyclonedds_serializer() -> None:
    idl = pytest.importorskip("mocapline.robot.unitree.idl_hg")
    cmd = _command()
    LOW_CMD.seal(cmd)
    motors = [idl.MotorCmd_(mode=int(m["mode"]), q=float(m["q"]), dq=float(m["dq"]), tau=float(m["tau"]),
                            kp=float(m["kp"]), kd=float(m["kd"]), reserve=int(m["reserve"])) for m in cmd["motor_cmd"]]
    sample = idl.LowCmd_(mode_pr=0, mode_machine=5, motor_cmd=motors, reserve=[1, 2, 3, 4], crc=int(cmd["crc"]))
    assert LOW_CMD.sample(cmd) == sample.serialize()
    assert LOW_CMD.cdr_size == 1000  # on the wire the motors follow mode_machine without C's padding


def test_low_state_wire_bytes_equal_cyclonedds_serializer_and_crc_uses_c_layout() -> None:
    idl = pytest.importorskip("mocapline.robot.unitree.idl_hg")
    motors = [idl.MotorState_(mode=1, q=0.1 * i, dq=-0.2, ddq=0.0, tau_est=1.5, temperature=[30, 31], vol=24.0,
                              sensor=[i, 0], motorstate=0, reserve=[0] * 4) for i in range(35)]
    imu = idl.IMUState_(quaternion=[1.0, 0.0, 0.0, 0.0], gyroscope=[0.1, 0.2, 0.3], accelerometer=[0.0, 0.0, 9.81],
                        rpy=[0.0, 0.0, 0.5], temperature=40)
    sample = idl.LowState_(version=[1, 2], mode_pr=0, mode_machine=5, tick=12345, imu_state=imu, motor_state=motors,
                           wireless_remote=list(range(40)), reserve=[0] * 4, crc=0)
    state = LOW_STATE.from_sample(sample.serialize())
    assert int(state["tick"]) == 12345 and int(state["imu_state"]["temperature"]) == 40
    assert state["motor_state"]["q"][7] == pytest.approx(0.7)
    assert list(state["motor_state"]["sensor"][9]) == [9, 0]
    assert LOW_STATE.sample(state) == sample.serialize()
    assert LOW_STATE.size == 2092 and LOW_STATE.cdr_size == 2088
    LOW_STATE.seal(state)
    raw = LOW_STATE.c_bytes(state)
    assert struct.unpack_from("<f", raw, 72 + 4 + 7 * 56)[0] == pytest.approx(0.7)  # C: motors from byte 72
    assert int(state["crc"]) == crc32_words_reference(raw[:2088])


def test_low_state_round_trip_keeps_the_crc_valid() -> None:
    state = new_low_state()
    state["motor_state"]["q"][:29] = np.linspace(-0.5, 0.5, 29)
    state["tick"] = 7
    LOW_STATE.seal(state)
    back = LOW_STATE.from_sample(LOW_STATE.sample(state))
    assert LOW_STATE.crc_ok(back)
    assert np.array_equal(back["motor_state"]["q"], state["motor_state"]["q"])


@given(st.binary(max_size=2200))
def test_decoding_any_bytes_gives_a_record_or_a_layout_error(data: bytes) -> None:
    for layout in (LOW_CMD, LOW_STATE):
        try:
            record = layout.from_sample(data)
        except LayoutError as exc:
            assert exc.reason in ("short_sample", "encapsulation")
        else:
            assert record.dtype == layout.dtype


# Vectors from Unitree's own SDK (unitree_sdk2_python 37116c5, its CRC helper and generated
# unitree_hg types), computed once on these exact messages; no code of theirs is needed here.
UNITREE_LOW_CMD_CRC = 0x81185601  # of _command()
UNITREE_LOW_STATE_CRC = 0x653B679C  # of the LowState of _state_from_fields()


def _state_from_fields() -> np.ndarray:
    state = LOW_STATE.new()
    state["version"] = (1, 2)
    state["mode_machine"] = 5
    state["tick"] = 12345
    imu = state["imu_state"]
    imu["quaternion"], imu["gyroscope"] = (1.0, 0.0, 0.0, 0.0), (0.1, 0.2, 0.3)
    imu["accelerometer"], imu["rpy"], imu["temperature"] = (0.0, 0.0, 9.81), (0.0, 0.0, 0.5), 40
    motors = state["motor_state"]
    motors["mode"], motors["q"], motors["dq"], motors["tau_est"] = 1, np.arange(35) * 0.1, -0.2, 1.5
    motors["temperature"], motors["vol"] = (30, 31), 24.0
    motors["sensor"][:, 0] = np.arange(35)
    state["wireless_remote"] = np.arange(40)
    return state


def test_crc_equals_unitrees_own_on_a_command_and_a_state() -> None:
    cmd = _command()
    LOW_CMD.seal(cmd)
    assert int(cmd["crc"]) == UNITREE_LOW_CMD_CRC
    state = _state_from_fields()
    LOW_STATE.seal(state)
    assert int(state["crc"]) == UNITREE_LOW_STATE_CRC


def test_an_unsealed_state_is_told_from_a_corrupted_one() -> None:
    state = _state_from_fields()  # crc field 0: as Unitree's simulators publish LowState
    assert LOW_STATE.crc_status(state) == "unset"
    LOW_STATE.seal(state)
    assert LOW_STATE.crc_status(state) == "ok"
    state["motor_state"]["q"][4] += 0.01
    assert LOW_STATE.crc_status(state) == "mismatch"


def test_bench_lowcmd_times_both_codecs(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("mocapline.robot.unitree.idl_hg")
    from mocapline.bench.lowcmd import main

    assert main(["--number", "5", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result) == {"lowcmd_ours_us", "lowcmd_cyclonedds_us", "lowstate_ours_us", "lowstate_cyclonedds_us"}
    assert all(v > 0 for v in result.values())
