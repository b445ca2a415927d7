"""Xsens MVN MXTP02 codec: round trips, segment mapping, every reject reason, fuzzing."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.spatial.transform import Rotation

from mocapline.core.bodies import GMR_BODIES, GMR_BODY_INDEX
from mocapline.formats.mxtp02 import (
    HEADER,
    HEADER_SIZE,
    ITEM,
    ITEM_SIZE,
    REJECT_REASONS,
    XSENS_SEGMENTS,
    XSENS_TO_GMR,
    XsensReject,
    encode_mxtp02,
    guess_position_unit,
    parse_mxtp02,
    pelvis_height_plausible,
)


def random_pose(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """float32-representable positions (m, pelvis near 0.95 m) and unit quaternions with w >= 0."""
    rng = np.random.default_rng(seed)
    positions = rng.normal(0.0, 0.3, (23, 3))
    positions[:, 2] += 0.95
    q = Rotation.random(23, random_state=seed).as_quat(scalar_first=True)
    q *= np.where(q[:, :1] < 0.0, -1.0, 1.0)
    as32 = lambda a: a.astype(np.float32).astype(np.float64)  # noqa: E731
    return as32(positions), as32(q)


def test_mapping_covers_every_gmr_body_once():
    assert len(XSENS_SEGMENTS) == 23
    assert set(XSENS_TO_GMR) == set(XSENS_SEGMENTS)
    assert sorted(XSENS_TO_GMR.values()) == sorted(GMR_BODIES)


@pytest.mark.parametrize("unit", ["m", "cm"])
def test_round_trip(unit):
    positions, quaternions = random_pose(1)
    data = encode_mxtp02(
        4242, positions, quaternions, time_code_ms=987654, character_id=2, position_unit=unit
    )
    assert len(data) == 760
    frame = parse_mxtp02(data, position_unit=unit)
    assert (frame.sample_counter, frame.time_code_ms, frame.character_id) == (4242, 987654, 2)
    tolerance = 0.0 if unit == "m" else 1e-6  # cm goes through float32 after scaling
    np.testing.assert_allclose(frame.positions, positions, rtol=0, atol=tolerance)
    np.testing.assert_array_equal(frame.quaternions, quaternions)
    assert frame.positions.shape == (23, 3) and frame.quaternions.shape == (23, 4)


def test_wire_layout_and_segment_mapping():
    positions, quaternions = random_pose(2)
    data = encode_mxtp02(17, positions, quaternions)
    fields = HEADER.unpack_from(data)
    assert fields[0] == b"MXTP02" and fields[1] == 17 and fields[2] == 0x80
    assert fields[3] == 23 and fields[6:9] == (23, 0, 0) and fields[10] == 736
    mapped = [(1, "Hips"), (5, "Spine3"), (9, "RightArm"), (19, "RightToe"), (20, "LeftUpLeg")]
    for segment_id, body in mapped:
        item = ITEM.unpack_from(data, HEADER_SIZE + ITEM_SIZE * (segment_id - 1))
        assert item[0] == segment_id
        assert XSENS_TO_GMR[XSENS_SEGMENTS[segment_id - 1]] == body
        np.testing.assert_array_equal(item[1:4], positions[GMR_BODY_INDEX[body]])
        np.testing.assert_array_equal(item[4:], quaternions[GMR_BODY_INDEX[body]])


def test_items_in_any_order_map_by_segment_id():
    positions, quaternions = random_pose(3)
    data = encode_mxtp02(5, positions, quaternions)
    start = HEADER_SIZE
    items = [data[start + ITEM_SIZE * i : start + ITEM_SIZE * (i + 1)] for i in range(23)]
    shuffled = data[:HEADER_SIZE] + b"".join(reversed(items))
    frame = parse_mxtp02(shuffled)
    np.testing.assert_array_equal(frame.positions, positions)
    np.testing.assert_array_equal(frame.quaternions, quaternions)


def test_negative_w_is_flipped_to_the_same_rotation():
    positions, quaternions = random_pose(4)
    frame = parse_mxtp02(encode_mxtp02(1, positions, -quaternions))
    np.testing.assert_array_equal(frame.quaternions, quaternions)


def _valid() -> bytes:
    return encode_mxtp02(9, *random_pose(5))


def _patched(data: bytes, offset: int, new: bytes) -> bytes:
    return data[:offset] + new + data[offset + len(new) :]


def _with_value(segment: int, slot: int, value: float) -> bytes:
    offset = HEADER_SIZE + ITEM_SIZE * segment + 4 + 4 * slot
    return _patched(_valid(), offset, struct.pack(">f", value))


REJECTS: list[tuple[str, bytes]] = [
    ("truncated", b"MX"),
    ("truncated", b"MXTP0"),
    ("truncated", _valid()[:20]),
    ("truncated", _valid()[:-1]),
    ("not_mxtp", b""),
    ("not_mxtp", b"\xff\xdd" + bytes(758)),
    ("unsupported_type", b"MXTP01" + _valid()[6:]),
    ("unsupported_type", b"MXTP13" + bytes(100)),
    ("fragmented", _patched(_valid(), 10, b"\x01")),
    ("bad_count", _patched(_valid(), 17, b"\x16")),  # 22 body segments
    ("bad_count", _patched(_valid(), 11, b"\x18")),  # item count 24, no props or fingers
    ("length_mismatch", _valid() + b"\0"),
    ("length_mismatch", _patched(_valid(), 22, struct.pack(">H", 735))),
    ("bad_segment_id", _patched(_valid(), HEADER_SIZE + ITEM_SIZE * 3, struct.pack(">i", 1))),
    ("bad_segment_id", _patched(_valid(), HEADER_SIZE, struct.pack(">i", 0))),
    ("non_finite", _with_value(4, 1, float("nan"))),
    ("non_finite", _with_value(0, 0, float("inf"))),
    ("bad_quaternion", _with_value(6, 3, 3.0)),
]


@pytest.mark.parametrize(
    "reason, data", REJECTS, ids=[f"{r}-{i}" for i, (r, _) in enumerate(REJECTS)]
)
def test_reject_reason(reason, data):
    with pytest.raises(XsensReject) as info:
        parse_mxtp02(data)
    assert info.value.reason == reason


def test_every_reject_reason_is_exercised():
    assert {reason for reason, _ in REJECTS} == set(REJECT_REASONS) - {"bad_meta"}  # MXTP12/13: test_xsens_meta.py


def test_position_unit_sanity_check():
    positions, quaternions = random_pose(6)
    positions[GMR_BODY_INDEX["Hips"], 2] = 0.97
    assert guess_position_unit(0.97) == "m"
    assert guess_position_unit(97.0) == "cm"
    assert guess_position_unit(12.0) is None
    frame = parse_mxtp02(encode_mxtp02(1, positions, quaternions), position_unit="m")
    assert pelvis_height_plausible(frame)
    # The same bytes read as centimetres put the pelvis at 9.7 mm: implausible.
    wrong = parse_mxtp02(encode_mxtp02(1, positions, quaternions), position_unit="cm")
    assert not pelvis_height_plausible(wrong)
    with pytest.raises(ValueError):
        data = encode_mxtp02(1, positions, quaternions)
        parse_mxtp02(data, position_unit="mm")  # type: ignore[arg-type]


def _check_outcome(data: bytes) -> None:
    try:
        frame = parse_mxtp02(data)
    except XsensReject as exc:
        assert exc.reason in REJECT_REASONS
    else:
        assert frame.positions.shape == (23, 3)
        assert np.isfinite(frame.positions).all()


@given(data=st.binary(max_size=1024))
@settings(max_examples=300)
def test_random_bytes_only_raise_xsens_reject(data):
    _check_outcome(data)
    _check_outcome(b"MXTP02" + data)


@given(
    seed=st.integers(0, 2**16),
    mutation=st.sampled_from(["flip", "truncate", "extend", "header"]),
    draw=st.data(),
)
@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
def test_mutated_datagrams_only_raise_xsens_reject(seed, mutation, draw):
    data = bytearray(encode_mxtp02(seed, *random_pose(seed)))
    if mutation == "flip":
        for _ in range(draw.draw(st.integers(1, 8))):
            i = draw.draw(st.integers(0, len(data) - 1))
            data[i] = draw.draw(st.integers(0, 255))
    elif mutation == "header":
        i = draw.draw(st.integers(0, HEADER_SIZE - 1))
        data[i] ^= 1 << draw.draw(st.integers(0, 7))
    elif mutation == "truncate":
        data = data[: draw.draw(st.integers(0, len(data) - 1))]
    else:
        data += draw.draw(st.binary(min_size=1, max_size=64))
    _check_outcome(bytes(data))
