"""Xsens MVN network streamer, the messages beside the poses: MXTP12 (character meta data) and
MXTP13 (scaling). Same 24-byte header as MXTP02 (``mxtp02.HEADER``; the character id names the
performer), then, big-endian:

- **MXTP12**: an i32 byte count and that many bytes of text, one ``tag:value`` per line. MVN
  sends ``name`` (the character's name in MVN's navigator), ``color`` (RRGGBB) and ``xmid`` (the
  body pack or Awinda station id). The name becomes the performer's ``avatar_name``.
- **MXTP13**: an i32 segment count, then per segment an i32 byte count, the segment's name and
  its origin in the null pose (3 x f32, Z-up). A count of 0 means "points follow": an i32 point
  count, then per point i16 segment id (1-based, in the order of the segments sent), i16 point id
  (negative: no more points), an i32 byte count and the point's name, u32 flags and its position
  relative to the segment origin (3 x f32). MVN sends the segments first and the points in
  further datagrams.

From the scaling capture takes the performer's height (``scaling_height``): the highest point of
the null pose above its lowest, counting segment origins and points (the head's top and the soles
are points); with segment origins only, the head origin's height above the lowest origin times
``HEAD_ORIGIN_TO_HEIGHT``. Retargeting scales by that height unless ``--human-height`` or
``--performer-height`` says otherwise.

``parse_meta`` and ``parse_scaling`` raise nothing but ``XsensReject`` on any bytes-like input.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np

from mocapline.formats.mxtp02 import HEADER, HEADER_SIZE, POSITION_UNITS, SINGLE_DATAGRAM, PositionUnit, XsensReject

META_ID = b"MXTP12"
SCALING_ID = b"MXTP13"
MAX_TEXT = 65536
# The reference skeleton (Axis Studio's, 172.7 cm): crown 172.7 cm, head joint 156.7 cm above the floor.
HEAD_ORIGIN_TO_HEIGHT = 172.7 / 156.7
PERSON_HEIGHT_M = (0.5, 2.5)

_I32 = struct.Struct(">i")
_POINT = struct.Struct(">hh")
_VEC = struct.Struct(">3f")
_FLAGS = struct.Struct(">I")


@dataclass(frozen=True)
class XsensMeta:
    character_id: int
    tags: dict[str, str]

    @property
    def name(self) -> str:
        return self.tags.get("name", "")


@dataclass(frozen=True)
class ScalePoint:
    segment_id: int
    point_id: int
    name: str
    flags: int
    position: tuple[float, float, float]  # relative to the segment origin, metres


@dataclass(frozen=True)
class XsensScaling:
    """One MXTP13 datagram: the null pose's segments, or (a later datagram) points."""

    character_id: int
    segments: dict[str, tuple[float, float, float]] = field(default_factory=dict)  # name -> origin, metres
    points: tuple[ScalePoint, ...] = ()


class _Reader:
    def __init__(self, data: bytes | bytearray | memoryview, offset: int) -> None:
        self.data = data
        self.offset = offset

    def take(self, s: struct.Struct) -> tuple:
        if self.offset + s.size > len(self.data):
            raise XsensReject("bad_meta", f"ends inside a field at byte {self.offset}")
        out = s.unpack_from(self.data, self.offset)
        self.offset += s.size
        return out

    def count(self, limit: int) -> int:
        (n,) = self.take(_I32)
        if not 0 <= n <= limit:
            raise XsensReject("bad_meta", f"count {n} at byte {self.offset - 4}")
        return int(n)

    def text(self) -> str:
        n = self.count(min(MAX_TEXT, len(self.data) - self.offset - 4))
        raw = bytes(self.data[self.offset : self.offset + n])
        self.offset += n
        return raw.split(b"\0", 1)[0].decode("utf-8", "replace")

    def vector(self) -> tuple[float, float, float]:
        x, y, z = self.take(_VEC)
        if not np.isfinite((x, y, z)).all():
            raise XsensReject("non_finite", f"at byte {self.offset - 12}")
        return float(x), float(y), float(z)


def _header(data: bytes | bytearray | memoryview, message: bytes) -> int:
    if len(data) < HEADER_SIZE:
        raise XsensReject("truncated", f"{len(data)} bytes, header needs {HEADER_SIZE}")
    fields = HEADER.unpack_from(data)
    if fields[0] != message:
        raise XsensReject("unsupported_type", bytes(data[:6]).decode("ascii", "replace"))
    return int(fields[5])


def parse_meta(data: bytes | bytearray | memoryview) -> XsensMeta:
    character = _header(data, META_ID)
    text = _Reader(data, HEADER_SIZE).text()
    tags = {}
    for line in text.splitlines():
        tag, sep, value = line.partition(":")
        if sep:
            tags[tag.strip()] = value.strip()
    return XsensMeta(character, tags)


def parse_scaling(data: bytes | bytearray | memoryview, position_unit: PositionUnit = "m") -> XsensScaling:
    character = _header(data, SCALING_ID)
    unit = POSITION_UNITS[position_unit]
    reader = _Reader(data, HEADER_SIZE)
    n_segments = reader.count(len(data) // 16)
    if n_segments:
        segments = {}
        for _ in range(n_segments):
            name = reader.text()
            segments[name] = tuple(v * unit for v in reader.vector())
        return XsensScaling(character, segments)  # type: ignore[arg-type]
    points = []
    for _ in range(reader.count(len(data) // 8)):
        segment_id, point_id = reader.take(_POINT)
        if point_id < 0:
            break
        name = reader.text()
        (flags,) = reader.take(_FLAGS)
        position = tuple(v * unit for v in reader.vector())
        points.append(ScalePoint(segment_id, point_id, name, flags, position))  # type: ignore[arg-type]
    return XsensScaling(character, points=tuple(points))


def scaling_height(
    segments: dict[str, tuple[float, float, float]], points: tuple[ScalePoint, ...] = ()
) -> float | None:
    """The performer's height (m) from the null pose (see the module's docstring), or None when the
    scaling says nothing plausible (no segments, or a height outside 0.5-2.5 m)."""
    if not segments:
        return None
    origins = list(segments.values())
    heights = [o[2] for o in origins]
    located = [origins[p.segment_id - 1][2] + p.position[2] for p in points if 1 <= p.segment_id <= len(origins)]
    if located:
        height = max(heights + located) - min(heights + located)
    elif "Head" in segments:
        height = (segments["Head"][2] - min(heights)) * HEAD_ORIGIN_TO_HEIGHT
    else:
        return None
    return height if PERSON_HEIGHT_M[0] <= height <= PERSON_HEIGHT_M[1] else None


def _pack_header(message: bytes, character_id: int, payload: bytes) -> bytes:
    return HEADER.pack(message, 0, SINGLE_DATAGRAM, 1, 0, character_id, 0, 0, 0, b"\0\0", len(payload))


def _text(value: str) -> bytes:
    raw = value.encode("utf-8")
    return _I32.pack(len(raw)) + raw


def encode_meta(character_id: int, tags: dict[str, str]) -> bytes:
    """Inverse of ``parse_meta`` (for tests and the emitter)."""
    payload = _text("".join(f"{k}:{v}\n" for k, v in tags.items()))
    return _pack_header(META_ID, character_id, payload) + payload


def encode_scaling(character_id: int, segments: dict[str, tuple[float, float, float]] | None = None,
                   points: tuple[ScalePoint, ...] = ()) -> list[bytes]:
    """Inverse of ``parse_scaling``, metres: the segments datagram, then one with the points (if any)."""
    out = []
    if segments:
        payload = _I32.pack(len(segments)) + b"".join(_text(n) + _VEC.pack(*o) for n, o in segments.items())
        out.append(_pack_header(SCALING_ID, character_id, payload) + payload)
    if points:
        payload = _I32.pack(0) + _I32.pack(len(points)) + b"".join(
            _POINT.pack(p.segment_id, p.point_id) + _text(p.name) + _FLAGS.pack(p.flags) + _VEC.pack(*p.position)
            for p in points)
        out.append(_pack_header(SCALING_ID, character_id, payload) + payload)
    return out
