"""Axis Studio binary BVH codec: round trips, every reject reason, and fuzzing."""

from __future__ import annotations

import itertools
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mocapline.formats.axis_bvh import (
    DEFAULT_CONFIG,
    HEADER_SIZE,
    REJECT_REASONS,
    ROTATION_ORDERS,
    AxisBvhConfig,
    BvhReject,
    encode_datagram,
    expected_data_count,
    parse_datagram,
    parse_header,
)
from mocapline.formats.skeleton import SkeletonKind, get_skeleton

N_BONES = 59


def random_channels(kind: SkeletonKind, seed: int) -> np.ndarray:
    """A plausible frame, float32-representable so that the round trip is exact."""
    rng = np.random.default_rng(seed)
    channels = np.zeros((N_BONES, 6))
    channels[:, :3] = get_skeleton(kind).offsets_cm
    channels[0, :3] += rng.normal(0.0, 20.0, 3)
    channels[:, 3:] = rng.uniform(-180.0, 180.0, (N_BONES, 3))
    return channels.astype(np.float32).astype(np.float64)


def calculation_datagram() -> bytes:
    """A CalcDataHeader datagram (tokens 0x88FF / 0x99FF) with a few floats."""
    header = struct.pack(
        "<H4sII32sIIIIH", 0x88FF, bytes((0, 0, 1, 1)), 16, 0, b"Avatar00", 7, 0, 0, 0, 0x99FF
    )
    assert len(header) == HEADER_SIZE
    return header + np.zeros(16, dtype="<f4").tobytes()


CASES = list(
    itertools.product(
        list(SkeletonKind), ROTATION_ORDERS, ("current", "legacy"), (True, False), (True, False)
    )
)


@pytest.mark.parametrize("kind, order, header_format, displacement, reference", CASES)
def test_round_trip(kind, order, header_format, displacement, reference):
    config = AxisBvhConfig(skeleton=kind, rotation_order=order, header_format=header_format)
    seed = ROTATION_ORDERS.index(order) + 10 * list(SkeletonKind).index(kind)
    channels = random_channels(kind, seed)
    ref = np.arange(6, dtype=np.float64) - 2.5 if reference else None
    data = encode_datagram(
        1234,
        channels,
        config=config,
        with_displacement=displacement,
        with_reference=reference,
        avatar_name="Performer",
        avatar_index=3,
        reference=ref,
    )
    count = expected_data_count(N_BONES, displacement, reference)
    assert len(data) == HEADER_SIZE + 4 * count

    out = parse_datagram(data, config)
    expected = channels.copy()
    if not displacement:
        expected[1:, :3] = get_skeleton(kind).offsets_cm[1:]
    np.testing.assert_array_equal(out.channels, expected)
    assert out.channels.dtype == np.float64 and out.channels.shape == (N_BONES, 6)
    assert out.posture_index == (1234 if header_format == "current" else None)
    assert out.avatar_name == "Performer"
    assert out.avatar_index == 3
    assert out.with_displacement is displacement
    assert out.with_reference is reference
    if reference:
        np.testing.assert_array_equal(out.reference, ref)
    else:
        assert out.reference is None

    header = parse_header(data, config)
    assert header.posture_index == out.posture_index
    assert header.data_count == count
    assert header.version == out.version
    # Re-encoding what was parsed gives the same bytes.
    again = encode_datagram(
        out.posture_index,
        out.channels,
        config=config,
        with_displacement=displacement,
        with_reference=reference,
        avatar_name=out.avatar_name,
        avatar_index=out.avatar_index,
        reference=out.reference,
        version=out.version,
    )
    assert again == data


def test_known_sizes_and_layout():
    channels = random_channels(SkeletonKind.AXIS_STUDIO, 0)
    assert len(encode_datagram(1, channels)) == 1480
    assert len(encode_datagram(1, channels, with_reference=True)) == 1504
    assert len(encode_datagram(1, channels, with_displacement=False)) == 784
    data = encode_datagram(0x01020304, channels, version=(1, 1, 0, 1))
    assert data[:2] == b"\xff\xdd" and data[62:64] == b"\xff\xee"
    assert data[2:6] == bytes((1, 0, 1, 1))  # build, revision, minor, major
    assert struct.unpack_from("<H", data, 6)[0] == 354
    assert struct.unpack_from("<I", data, 46)[0] == 0x01020304
    assert parse_header(data).version == (1, 1, 0, 1)
    # First float after the header: root X translation.
    assert struct.unpack_from("<f", data, 64)[0] == np.float32(channels[0, 0])


def test_legacy_layout_has_no_frame_index():
    config = AxisBvhConfig(header_format="legacy")
    data = encode_datagram(99, random_channels(SkeletonKind.AXIS_STUDIO, 1), config=config)
    token1, _, count, disp, ref, index, _, r1, r2, token2 = struct.unpack_from(
        "<H4sIIII32sIIH", data
    )
    assert (token1, count, disp, ref, index, r1, r2, token2) == (
        0xDDFF, 354, 1, 0, 0, 0, 0, 0xEEFF,
    )  # fmt: skip
    assert parse_header(data, config).posture_index is None


def test_header_format_mismatch_is_rejected():
    channels = random_channels(SkeletonKind.AXIS_STUDIO, 2)
    current = encode_datagram(5, channels)
    legacy = encode_datagram(5, channels, config=AxisBvhConfig(header_format="legacy"))
    with pytest.raises(BvhReject):
        parse_datagram(current, AxisBvhConfig(header_format="legacy"))
    with pytest.raises(BvhReject):
        parse_datagram(legacy, DEFAULT_CONFIG)


def test_accepts_bytearray_and_memoryview():
    channels = random_channels(SkeletonKind.AXIS_STUDIO, 3)
    data = encode_datagram(42, channels)
    for view in (bytearray(data), memoryview(data)):
        out = parse_datagram(view)
        assert out.posture_index == 42
        np.testing.assert_array_equal(out.channels, channels)


def _valid() -> bytes:
    return encode_datagram(7, random_channels(SkeletonKind.AXIS_STUDIO, 4))


def _patched(data: bytes, offset: int, new: bytes) -> bytes:
    return data[:offset] + new + data[offset + len(new) :]


def _nan_datagram() -> bytes:
    channels = random_channels(SkeletonKind.AXIS_STUDIO, 5)
    channels[12, 4] = np.nan
    return encode_datagram(8, channels)


def _inf_datagram() -> bytes:
    channels = random_channels(SkeletonKind.AXIS_STUDIO, 6)
    channels[0, 1] = np.inf
    return encode_datagram(9, channels)


REJECTS: list[tuple[str, bytes]] = [
    ("truncated", _valid()[:40]),
    ("truncated", _valid()[:-4]),
    ("truncated", b"\xff"),
    ("bad_token", _patched(_valid(), 62, b"\x00\x00")),
    ("bad_flags", _patched(_valid(), 8, b"\x02")),
    ("bad_flags", _patched(_valid(), 9, b"\xff")),
    ("length_mismatch", _valid() + b"\0\0\0\0"),
    ("length_mismatch", _valid() + b"\0"),
    # 180 floats (no displacement) but the flag says displacement.
    (
        "bad_count",
        _patched(
            encode_datagram(
                1, random_channels(SkeletonKind.AXIS_STUDIO, 7), with_displacement=False
            ),
            8,
            b"\x01",
        ),
    ),
    ("calculation_data", calculation_datagram()),
    ("unknown_small", bytes(range(193))),
    ("unknown_small", b"\x00" * 195),
    ("not_bvh", b""),
    ("not_bvh", b"hello, this is not a mocap datagram"),
    ("not_bvh", b"\xdd\xff" + _valid()[2:]),  # token bytes swapped (big-endian)
    ("non_finite", _nan_datagram()),
    ("non_finite", _inf_datagram()),
]


@pytest.mark.parametrize(
    "reason, data", REJECTS, ids=[f"{r}-{i}" for i, (r, _) in enumerate(REJECTS)]
)
def test_reject_reason(reason, data):
    with pytest.raises(BvhReject) as info:
        parse_datagram(data)
    assert info.value.reason == reason
    if reason != "non_finite":  # the header parse does every check but the values
        with pytest.raises(BvhReject) as info:
            parse_header(data)
        assert info.value.reason == reason
    else:
        parse_header(data)


def test_every_reject_reason_is_exercised():
    assert {reason for reason, _ in REJECTS} == set(REJECT_REASONS)


def test_config_validation():
    assert AxisBvhConfig(rotation_order="yxz").rotation_order == "YXZ"
    assert AxisBvhConfig(skeleton="pn_pro").skeleton is SkeletonKind.PN_PRO
    with pytest.raises(ValueError, match="rotation_order 'XXZ'"):
        AxisBvhConfig(rotation_order="XXZ")
    with pytest.raises(ValueError, match="header_format"):
        AxisBvhConfig(header_format="old")  # type: ignore[arg-type]


def test_encode_rejects_bad_arguments():
    channels = random_channels(SkeletonKind.AXIS_STUDIO, 8)
    with pytest.raises(ValueError):
        encode_datagram(1, channels[:58])
    with pytest.raises(ValueError):
        encode_datagram(1, channels, avatar_name="x" * 33)
    with pytest.raises(ValueError):
        encode_datagram(None, channels)


def _check_outcome(data: bytes, config: AxisBvhConfig) -> None:
    try:
        out = parse_datagram(data, config)
    except BvhReject as exc:
        assert exc.reason in REJECT_REASONS
    else:
        assert out.channels.shape == (N_BONES, 6)
        assert np.isfinite(out.channels).all()
    try:
        parse_header(data, config)
    except BvhReject as exc:
        assert exc.reason in REJECT_REASONS


CONFIGS = st.builds(
    AxisBvhConfig,
    skeleton=st.sampled_from(list(SkeletonKind)),
    rotation_order=st.sampled_from(ROTATION_ORDERS),
    header_format=st.sampled_from(["current", "legacy"]),
)


@given(data=st.binary(max_size=2048), config=CONFIGS)
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
def test_random_bytes_only_raise_bvh_reject(data, config):
    _check_outcome(data, config)


@given(
    config=CONFIGS,
    displacement=st.booleans(),
    reference=st.booleans(),
    seed=st.integers(0, 2**16),
    mutation=st.sampled_from(["flip", "truncate", "extend", "header"]),
    draw=st.data(),
)
@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
def test_mutated_datagrams_only_raise_bvh_reject(
    config, displacement, reference, seed, mutation, draw
):
    valid = encode_datagram(
        seed,
        random_channels(config.skeleton, seed),
        config=config,
        with_displacement=displacement,
        with_reference=reference,
    )
    data = bytearray(valid)
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
    _check_outcome(bytes(data), config)
