"""MotionFrameHeader: the 44-byte envelope header on every ZeroMQ link (docs/protocol.md).

Layout, little-endian ``<IHHQQQIHHI``: magic, version, message_type, frame_id,
capture_timestamp_us, send_timestamp_us, payload_size, joint_count, epoch (was ``reserved``; 0 from
senders that predate it), crc32. ``epoch`` is 16 bits of the sender's identity: it changes when a
sender starts with new numbering, so a receiver tells a restart (frame_id back to 0, new epoch) from
a jump back (same epoch). Full contract: docs/protocol.md. The CRC-32
(zlib) covers the first 40 header bytes followed by the payload.
"""

from __future__ import annotations

import struct
import zlib
from enum import IntEnum
from typing import NamedTuple

HEADER_STRUCT = struct.Struct("<IHHQQQIHHI")
HEADER_SIZE = HEADER_STRUCT.size  # 44
_CRC_COVERED = HEADER_SIZE - 4
_PREFIX_STRUCT = struct.Struct("<IHHQQQIHH")

MAGIC = 0x4D4C4346  # "FCLM" on the wire: MoCapLine Frame
VERSION = 1
SUPPORTED_VERSIONS = frozenset({VERSION})


class MessageType(IntEnum):
    MOTION_FRAME = 1
    HUMAN_FRAME = 2
    ROBOT_STATE = 3
    HEARTBEAT = 4
    END_OF_STREAM = 5


TOPICS: dict[MessageType, bytes] = {
    MessageType.MOTION_FRAME: b"MOCAP_FRAME",
    MessageType.HUMAN_FRAME: b"HUMAN_FRAME",
    MessageType.ROBOT_STATE: b"ROBOT_FRAME",
    MessageType.HEARTBEAT: b"HEARTBEAT",
    MessageType.END_OF_STREAM: b"END_OF_STREAM",
}


class HeaderError(ValueError):
    """A frame failed validation; ``reason`` is a stable label for counting rejects."""

    reason = "invalid"


class TruncatedFrame(HeaderError):
    reason = "truncated"


class BadMagic(HeaderError):
    reason = "bad_magic"


class UnknownVersion(HeaderError):
    reason = "unknown_version"


class WrongMessageType(HeaderError):
    reason = "wrong_type"


class SizeMismatch(HeaderError):
    reason = "size_mismatch"


class CrcMismatch(HeaderError):
    reason = "crc_mismatch"


class JointCountMismatch(HeaderError):
    reason = "joint_count"


_TYPES: dict[int, MessageType] = {int(t): t for t in MessageType}

REJECT_REASONS: tuple[str, ...] = tuple(
    cls.reason
    for cls in (
        TruncatedFrame,
        BadMagic,
        UnknownVersion,
        WrongMessageType,
        SizeMismatch,
        CrcMismatch,
        JointCountMismatch,
    )
)


class MotionFrameHeader(NamedTuple):
    """A decoded header (a NamedTuple: built for every frame, so it must be cheap)."""

    message_type: MessageType
    frame_id: int
    capture_timestamp_us: int
    send_timestamp_us: int
    payload_size: int
    joint_count: int
    magic: int = MAGIC
    version: int = VERSION
    epoch: int = 0  # the header's u16 at offset 38 (``reserved`` in the seeds' layout)
    crc32: int = 0


def encode_frame(
    message_type: MessageType,
    frame_id: int,
    payload: bytes,
    *,
    capture_timestamp_us: int,
    send_timestamp_us: int,
    joint_count: int,
    epoch: int = 0,
) -> bytes:
    """Header + payload as one bytes object, CRC filled in."""
    prefix = _PREFIX_STRUCT.pack(
        MAGIC,
        VERSION,
        int(message_type),
        frame_id,
        capture_timestamp_us,
        send_timestamp_us,
        len(payload),
        joint_count,
        epoch & 0xFFFF,
    )
    crc = zlib.crc32(payload, zlib.crc32(prefix))
    return b"".join((prefix, crc.to_bytes(4, "little"), payload))


def decode_frame(
    data: bytes | memoryview,
    *,
    expected_type: MessageType | None = None,
    expected_joint_count: int | None = None,
) -> tuple[MotionFrameHeader, memoryview]:
    """Validate header and CRC; return the header and a view of the payload.

    Checks run cheapest first: length, magic, version, type, size, joint count, CRC.
    """
    view = memoryview(data)
    if len(view) < HEADER_SIZE:
        raise TruncatedFrame(f"{len(view)} bytes, the header alone is {HEADER_SIZE}")
    (magic, version, mtype, frame_id, cap_us, send_us, size, joints, reserved, crc) = (
        HEADER_STRUCT.unpack_from(view)
    )
    if magic != MAGIC:
        raise BadMagic(f"magic 0x{magic:08x}, expected 0x{MAGIC:08x}")
    if version not in SUPPORTED_VERSIONS:
        raise UnknownVersion(f"protocol version {version}, this build knows {sorted(SUPPORTED_VERSIONS)}")
    message_type = _TYPES.get(mtype)
    if message_type is None:
        raise WrongMessageType(f"unknown message type {mtype}")
    if expected_type is not None and message_type != expected_type:
        raise WrongMessageType(f"message type {message_type.name}, expected {expected_type.name}")
    if size != len(view) - HEADER_SIZE:
        raise SizeMismatch(f"header says {size} payload bytes, frame carries {len(view) - HEADER_SIZE}")
    if expected_joint_count is not None and joints != expected_joint_count:
        raise JointCountMismatch(f"joint_count {joints}, expected {expected_joint_count}")
    payload = view[HEADER_SIZE:]
    actual = zlib.crc32(payload, zlib.crc32(view[:_CRC_COVERED]))
    if actual != crc:
        raise CrcMismatch(f"crc32 0x{crc:08x} in header, computed 0x{actual:08x}")
    header = MotionFrameHeader(message_type, frame_id, cap_us, send_us, size, joints, magic, version, reserved, crc)
    return header, payload
