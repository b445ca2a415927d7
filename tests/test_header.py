import struct
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mocapline.core.header import (
    HEADER_SIZE,
    HEADER_STRUCT,
    MAGIC,
    REJECT_REASONS,
    BadMagic,
    CrcMismatch,
    HeaderError,
    JointCountMismatch,
    MessageType,
    SizeMismatch,
    TruncatedFrame,
    UnknownVersion,
    WrongMessageType,
    decode_frame,
    encode_frame,
)


def frame(payload: bytes = b"\x01\x02payload", **kw: object) -> bytes:
    args = dict(capture_timestamp_us=111, send_timestamp_us=222, joint_count=29)
    args.update(kw)
    return encode_frame(MessageType.MOTION_FRAME, 42, payload, **args)  # type: ignore[arg-type]


def repack(data: bytes, **fields: int) -> bytes:
    """Rewrite header fields and recompute the CRC, so only the named field is wrong."""
    names = ["magic", "version", "message_type", "frame_id", "cap", "send", "size", "joints", "reserved", "crc"]
    values = dict(zip(names, HEADER_STRUCT.unpack_from(data), strict=True))
    values.update(fields)
    payload = data[HEADER_SIZE:]
    prefix = HEADER_STRUCT.pack(*[values[n] for n in names])[:40]
    crc = zlib.crc32(payload, zlib.crc32(prefix))
    return prefix + struct.pack("<I", crc) + payload


def test_layout_is_44_bytes_little_endian() -> None:
    data = frame(b"xyz")
    assert HEADER_SIZE == 44
    assert len(data) == 44 + 3
    assert struct.unpack_from("<I", data, 0)[0] == MAGIC
    assert struct.unpack_from("<Q", data, 8)[0] == 42
    assert struct.unpack_from("<I", data, 32)[0] == 3
    assert struct.unpack_from("<H", data, 36)[0] == 29
    assert struct.unpack_from("<I", data, 40)[0] == zlib.crc32(data[:40] + data[44:])


def test_round_trip() -> None:
    header, payload = decode_frame(frame(), expected_type=MessageType.MOTION_FRAME, expected_joint_count=29)
    assert bytes(payload) == b"\x01\x02payload"
    assert (header.frame_id, header.capture_timestamp_us, header.send_timestamp_us) == (42, 111, 222)
    assert header.payload_size == 9 and header.joint_count == 29
    assert header.message_type is MessageType.MOTION_FRAME


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (frame()[:43], TruncatedFrame),
        (repack(frame(), magic=0xDEADBEEF), BadMagic),
        (repack(frame(), version=99), UnknownVersion),
        (repack(frame(), message_type=77), WrongMessageType),
        (repack(frame(), size=3), SizeMismatch),
        (frame() + b"extra", SizeMismatch),
        (repack(frame(), joints=23), JointCountMismatch),
        (frame()[:-1] + b"\x00", CrcMismatch),
        (frame()[:20] + b"\xff" + frame()[21:], CrcMismatch),
    ],
)
def test_every_rejection_reason(data: bytes, error: type[HeaderError]) -> None:
    with pytest.raises(error) as info:
        decode_frame(data, expected_type=MessageType.MOTION_FRAME, expected_joint_count=29)
    assert info.value.reason in REJECT_REASONS


def test_wrong_expected_type() -> None:
    data = encode_frame(MessageType.HUMAN_FRAME, 0, b"", capture_timestamp_us=0, send_timestamp_us=0, joint_count=23)
    with pytest.raises(WrongMessageType):
        decode_frame(data, expected_type=MessageType.MOTION_FRAME)


@given(st.binary(max_size=200))
def test_random_bytes_only_raise_header_errors(data: bytes) -> None:
    try:
        decode_frame(data, expected_type=MessageType.MOTION_FRAME, expected_joint_count=29)
    except HeaderError as exc:
        assert exc.reason in REJECT_REASONS


@given(st.integers(0, 59), st.integers(0, 255))
def test_any_single_byte_flip_is_rejected(pos: int, value: int) -> None:
    good = frame(b"0123456789abcdef")
    if good[pos] == value:
        return
    bad = good[:pos] + bytes([value]) + good[pos + 1 :]
    with pytest.raises(HeaderError):
        decode_frame(bad, expected_type=MessageType.MOTION_FRAME, expected_joint_count=29)
