"""Dex3-1's HandCmd_ / HandState_ bytes (mocapline/robot/unitree/hand.py) against vectors written
by hand from the public IDL's CDR layout, and against cyclonedds' own serializer of that IDL."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from mocapline.robot.unitree.hand import (
    HAND_CMD,
    HAND_STATE,
    HandMessageError,
    hand_cmd,
    hand_state,
    motor_mode,
    new_hand_cmd,
    new_hand_state,
    read_hand_cmd,
    read_hand_state,
)

Q = np.array([0.1, -0.2, 0.3, -0.4, -0.5, -0.6, -0.7])


def expected_hand_cmd(q: np.ndarray, kp: float, kd: float) -> bytes:
    """XCDR1 little endian: the 4-byte encapsulation, the sequence's length, each MotorCmd_ (mode
    u8, 3 bytes of padding to q's 4, q dq tau kp kd f32, reserve u32), then reserve u32[4]."""
    out = b"\x00\x01\x00\x00" + struct.pack("<I", 7)
    for i, value in enumerate(q):
        mode = i | 0x01 << 4  # id, status 1 (enabled), no timeout: 0x10..0x16
        out += struct.pack("<B3x5fI", mode, value, 0.0, 0.0, kp, kd, 0)
    return out + struct.pack("<4I", 0, 0, 0, 0)


def test_hand_cmd_bytes_are_the_public_layout() -> None:
    sample = hand_cmd(new_hand_cmd(), Q, 1.5, 0.2)
    assert len(sample) == 4 + 216 == len(expected_hand_cmd(Q, 1.5, 0.2))
    assert sample == expected_hand_cmd(Q, 1.5, 0.2)
    assert [motor_mode(i) for i in range(7)] == [0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16]
    assert motor_mode(3, status=0, timeout=1) == 0x83
    back = read_hand_cmd(sample)
    np.testing.assert_allclose(back["motor_cmd"]["q"], Q.astype(np.float32))
    # e-stop: the gains open to zero, the targets as they were
    opened = hand_cmd(new_hand_cmd(), Q, 0.0, 0.0)
    assert opened == expected_hand_cmd(Q, 0.0, 0.0)


def test_hand_state_bytes_are_the_public_layout() -> None:
    dq, tau = Q * 2, Q * 3
    sample = hand_state(new_hand_state(), Q, dq, tau)
    assert len(sample) == 4 + 1216
    body = sample[4:]
    assert struct.unpack_from("<I", body, 0) == (7,)
    for i in range(7):  # MotorState_: mode, pad, q dq ddq tau_est, temperature i16[2], vol, sensor[2], ...
        at = 4 + 56 * i
        _, q, dq_i, ddq, tau_i = struct.unpack_from("<B3x4f", body, at)
        assert (q, dq_i, ddq, tau_i) == pytest.approx((Q[i], dq[i], 0.0, tau[i]), rel=1e-6)
    assert struct.unpack_from("<I", body, 4 + 7 * 56) == (7,)  # the pressure sensors' sequence
    imu = 4 + 7 * 56 + 4 + 7 * 104
    assert struct.unpack_from("<4f", body, imu) == (1.0, 0.0, 0.0, 0.0)
    np.testing.assert_allclose(read_hand_state(sample)["motor_state"]["q"], Q.astype(np.float32))


def test_a_hand_message_of_another_size_is_refused() -> None:
    cmd = new_hand_cmd()
    cmd["motor_count"] = 6
    with pytest.raises(HandMessageError):
        read_hand_cmd(HAND_CMD.sample(cmd))
    state = new_hand_state()
    state["press_count"] = 9
    with pytest.raises(HandMessageError):
        read_hand_state(HAND_STATE.sample(state))


def test_cyclonedds_serializes_the_idl_to_the_same_bytes() -> None:
    idl = pytest.importorskip("mocapline.robot.unitree.idl_hg")
    motors = [idl.MotorCmd_(mode=motor_mode(i), q=float(v), dq=0.0, tau=0.0, kp=1.5, kd=0.2, reserve=0)
              for i, v in enumerate(Q)]
    theirs = idl.HandCmd_(motor_cmd=motors, reserve=[0, 0, 0, 0]).serialize()
    assert theirs == hand_cmd(new_hand_cmd(), Q, 1.5, 0.2)
    decoded = idl.HandCmd_.deserialize(hand_cmd(new_hand_cmd(), Q, 1.5, 0.2))
    assert [m.mode for m in decoded.motor_cmd] == list(range(0x10, 0x17))
    assert [m.q for m in decoded.motor_cmd] == pytest.approx(list(Q))
    state = idl.HandState_.deserialize(hand_state(new_hand_state(), Q, Q, Q))
    assert len(state.motor_state) == 7 and len(state.press_sensor_state) == 7
    assert [m.q for m in state.motor_state] == pytest.approx(list(Q))
    assert state.imu_state.quaternion == [1.0, 0.0, 0.0, 0.0]


# ---- the bridge's hands (services/robot/hands.py) ----

def test_the_bridge_drives_the_hands_safely() -> None:
    from mocapline.robot.registry import get_robot
    from mocapline.services.robot.hands import HandDriver

    with pytest.raises(ValueError, match="no Dex3-1 hands"):
        HandDriver.for_robot(get_robot("g1"), 0.05)
    driver = HandDriver.for_robot(get_robot("g1_dex3"), 0.05, rate_hz=100.0)
    assert driver.tick(0.0, "tracking") is None  # no frame yet: nothing sent
    fist = np.where(np.abs(driver.lower) > np.abs(driver.upper), driver.lower, driver.upper) * 2  # past the ends
    driver.take(fist, 7)
    sent = [driver.tick(0.01 * k, "tracking") for k in range(1, 60)]
    assert all(s is not None for s in sent)
    qs = []
    for s in sent:
        assert s is not None
        left, right = (read_hand_cmd(x)["motor_cmd"] for x in s.samples)
        assert np.all(left["kp"] == np.float32(1.5)) and np.all(right["kd"] == np.float32(0.2))
        assert list(left["mode"]) == [motor_mode(i) for i in range(7)]
        qs.append(np.concatenate([left["q"], right["q"]]))
    q = np.array(qs, dtype=np.float64)
    assert np.all(q >= driver.lower - 1e-6) and np.all(q <= driver.upper + 1e-6)  # within the ranges less the margin
    assert np.abs(np.diff(q, axis=0)).max() <= 6.0 * 0.01 + 1e-6  # ramps in at the speed limit
    np.testing.assert_allclose(q[-1], np.clip(fist, driver.lower, driver.upper), atol=1e-6)
    assert driver.tick(0.595, "tracking") is None  # not due yet, no new target
    damped = driver.tick(0.7, "damping")
    assert damped is not None and np.all(read_hand_cmd(damped.samples[0])["motor_cmd"]["kp"] == 0)
    stopped = driver.tick(0.8, "estop")
    assert stopped is not None
    for sample in stopped.samples:
        motors = read_hand_cmd(sample)["motor_cmd"]
        assert np.all(motors["kp"] == 0) and np.all(motors["kd"] == 0)
    # HandState_: the measured hand against the command
    driver.on_state(0, hand_state(new_hand_state(), q[-1, :7] + 0.01, np.zeros(7), np.zeros(7)))
    driver.on_state(1, b"\x00\x01\x00\x00short")
    counts = driver.counts()
    assert (counts.frames, counts.states_received, counts.states_rejected, counts.last_posture_index) == (1, 1, 1, 7)
    assert counts.tracking_error_mean_rad == pytest.approx(0.01, abs=1e-4)


def test_the_sims_hands_follow_their_hand_commands() -> None:
    from mocapline.robot.registry import get_robot
    from mocapline.tools.sim.physics import RobotPhysics

    robot = get_robot("g1_dex3")
    sim = RobotPhysics(robot, "fixed")
    assert len(sim.hand_rows) == 2
    target = np.array([0.3, 0.5, 0.8, -1.0, -1.2, -1.0, -1.2])  # the left hand: thumb, middle, index closing
    sample = hand_cmd(new_hand_cmd(), target, 1.5, 0.2)
    assert sim.apply_hand(0, read_hand_cmd(sample))
    for _ in range(1000):  # 2 s
        sim.step()
    left = read_hand_state(sim.hand_state(0))["motor_state"]["q"]
    right = read_hand_state(sim.hand_state(1))["motor_state"]["q"]
    assert np.all(np.abs(left - target) < 0.25) and np.all(left / target > 0.45)  # kp 1.5: soft, gravity sags it
    np.testing.assert_allclose(right, np.zeros(7), atol=0.05)  # no command: held at 0
    bad = read_hand_cmd(hand_cmd(new_hand_cmd(), np.full(7, np.nan), 1.5, 0.2))
    assert not sim.apply_hand(1, bad)
    stopped = read_hand_cmd(hand_cmd(new_hand_cmd(), target, 0.0, 0.0))  # an e-stop's: the hand goes limp
    assert sim.apply_hand(0, stopped)
    assert np.all(sim.held_kp[sim.hand_rows[0]] == 0)
