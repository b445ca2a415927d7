"""A LowState sample as the measured robot (mocapline/robot/unitree/state.py): decoded, or refused
by reason; the newest valid one of a batch; the error per joint group."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from g1_facts import ARMS, G1, GROUPS, LEGS, STAND, WAIST
from hypothesis import given
from hypothesis import strategies as st

from mocapline.robot.unitree.hg import LOW_STATE, new_low_state
from mocapline.robot.unitree.lowlevel import LayoutError
from mocapline.robot.unitree.state import StateDecoder, group_errors

DECODER = StateDecoder(G1)


def sample(q: np.ndarray, tick: int = 0, seal: bool = True, crc: int | None = None) -> bytes:
    state = new_low_state()
    state["motor_state"]["q"][:29] = q
    state["motor_state"]["dq"][:29] = -q
    state["imu_state"]["quaternion"] = (0.0, 1.0, 0.0, 0.0)
    state["mode_machine"] = 5
    state["tick"] = tick
    if seal:
        LOW_STATE.seal(state)
    if crc is not None:
        state["crc"] = crc
    return LOW_STATE.sample(state)


def test_a_sample_decodes_to_the_joints_and_the_imu() -> None:
    q = np.linspace(-1.0, 1.0, 29)
    m = DECODER.decode(sample(q, tick=42))
    np.testing.assert_allclose(m.q, q, atol=1e-6)
    np.testing.assert_allclose(m.dq, -q, atol=1e-6)
    assert m.quaternion.tolist() == [0.0, 1.0, 0.0, 0.0]
    assert (m.mode_machine, m.tick) == (5, 42)
    assert m.q.dtype == np.float64 and m.q.shape == (29,)


def test_a_wrong_crc_and_a_nan_are_refused_by_reason() -> None:
    with pytest.raises(LayoutError) as exc:
        DECODER.decode(sample(STAND, crc=0x1234))
    assert exc.value.reason == "crc_mismatch"
    assert not DECODER.decode(sample(STAND, seal=False)).sealed  # crc 0: unsealed, taken
    with pytest.raises(LayoutError) as exc:
        DECODER.decode(sample(STAND, seal=False), require_crc=True)
    assert exc.value.reason == "crc_unset"
    q = STAND.copy()
    q[20] = np.nan
    with pytest.raises(LayoutError) as exc:
        DECODER.decode(sample(q))  # its CRC is right: the value itself is refused
    assert exc.value.reason == "non_finite"


def test_only_the_newest_valid_sample_is_decoded_and_refusals_are_counted() -> None:
    rejected: Counter[str] = Counter()
    batch = [sample(STAND, tick=1), sample(STAND, tick=2), sample(STAND, tick=3, crc=7)]
    state, looked = DECODER.newest(batch, rejected)
    assert state is not None and state.tick == 2 and looked == 2
    assert rejected == Counter({"crc_mismatch": 1})
    assert DECODER.newest([], rejected) == (None, 0)
    state, looked = DECODER.newest([b"\x00\x01\x00\x00", sample(STAND, crc=7)], rejected)
    assert state is None and looked == 2
    assert rejected == Counter({"crc_mismatch": 2, "short_sample": 1})


def test_group_errors_are_mean_and_max_of_the_absolute_error() -> None:
    measured = STAND.copy()
    measured[ARMS] += np.linspace(-0.2, 0.1, 14)
    measured[WAIST[0]] -= 0.3
    err = group_errors(measured, STAND, GROUPS)
    assert err["legs"] == {"mean": 0.0, "max": 0.0}
    assert err["waist"]["mean"] == pytest.approx(0.1) and err["waist"]["max"] == pytest.approx(0.3)
    assert err["arms"]["max"] == pytest.approx(0.2)
    assert err["arms"]["mean"] == pytest.approx(np.abs(np.linspace(-0.2, 0.1, 14)).mean())
    assert set(err) == {"legs", "waist", "arms"} and list(LEGS) == list(range(12))


@given(st.binary(max_size=2200))
def test_any_bytes_decode_to_a_state_or_a_refusal(data: bytes) -> None:
    try:
        m = DECODER.decode(data)
    except LayoutError as exc:
        assert exc.reason in ("short_sample", "encapsulation", "crc_mismatch", "non_finite")
    else:
        assert np.all(np.isfinite(m.q)) and m.q.shape == (29,)
