"""Axis Studio binary BVH datagrams: classify, validate, decode, and encode (the exact inverse).

One UDP datagram is a 64-byte header followed by ``data_count`` little-endian float32 values
(docs/formats.md, "Axis Studio binary BVH"). The payload is, per bone in stream order, translation XYZ in
cm then three Euler angles in degrees in the configured rotation order. Without displacement only
the root carries a translation; the other bones carry three angles each. With reference, six floats
of a reference pose come first.

Header formats, from Noitom's NeuronDataReader SDK headers (public copies):

- ``"current"``: ``BvhDataHeader`` with a ``FrameIndex``: u16 ``DataCount``, u8 ``WithDisp`` and
  ``WithReference``, ``FrameIndex`` at offset 46, three reserved u32. Seen in DataReader "b18"
  (``zpicenow/goodLuck`` DataType.h, 2016), ``hanasaan/ofxPerceptionNeuron``
  libs/NeuronDataReader/include/DataType.h and ``keijiro/NeuronAnimator``
  Assets/Neuron/Scripts/Mocap/NeuronDataReader.cs ("Version of community data format: 1.1.0.0").
- ``"legacy"``: the 2014 SDK's ``BvhDataHeader`` (and ``BvhDataHeaderEx``, identical in size, with
  ``IsCompressed`` in place of the first reserved word): u32 ``DataCount`` ("180 for without disp
  data"), 4-byte ``BOOL`` ``WithDisp`` and ``WithReference``, ``AvatarIndex``, 32-byte name, two
  reserved u32, the same 0xDDFF/0xEEFF tokens, 64 bytes in all, and *no frame index* (version
  example "1.0.0.2"). Found in unattributed copies of the 2014 Perception Neuron SDK's
  NeuronDataReader.h and its C# wrapper (namespace ``NeuronDataReaderWraper``) in the public code
  index. That Axis Studio's "use old header format" option emits exactly this layout is an
  inference from the SDK history (no Axis Studio capture of it was available): the option exists for
  clients built against the old reader, and this is the only older layout Noitom published. A
  legacy datagram therefore has ``posture_index`` None; the ledger cannot run on it.

Calculation data (``CalcDataHeader``, tokens 0x88FF/0x99FF, same SDK files) and the ~192-195-byte
packets Axis also sends are classified and rejected, never decoded.

``parse_header`` and ``parse_datagram`` raise nothing but ``BvhReject`` on any bytes-like input.
"""

from __future__ import annotations

import argparse
import functools
import math
import struct
from dataclasses import dataclass
from typing import Literal, NamedTuple

import numpy as np

from mocapline.formats.skeleton import SKELETON_CHOICES, SkeletonKind, get_skeleton, skeleton_kind

ROTATION_ORDERS: tuple[str, ...] = ("XYZ", "XZY", "YXZ", "YZX", "ZXY", "ZYX")


def add_axis_options(parser: argparse.ArgumentParser, *, from_take: bool = False) -> None:
    """``--rotation-order`` and ``--skeleton``, Axis Studio's two settings of the binary BVH stream,
    declared once for every command that reads or writes one; ``from_take``: no default, the take
    (its config.json or the recording's metadata) says."""
    take = " (default: the take's, else {})" if from_take else " (default {})"
    parser.add_argument("--rotation-order", choices=ROTATION_ORDERS, default=None if from_take else "YXZ",
                        help="Axis Studio's BVH rotation order setting" + take.format("YXZ"))
    parser.add_argument("--skeleton", type=skeleton_kind, choices=SKELETON_CHOICES,
                        default=None if from_take else "axis_studio",
                        help="Axis skeleton: axis_studio (59 bones), or pn (pn_pro: Axis Neuron's Perception Neuron "
                             "skeleton, Spine3 and no Neck1)" + take.format("axis_studio"))
HEADER_FORMATS: tuple[str, ...] = ("current", "legacy")
HeaderFormat = Literal["current", "legacy"]

HEADER_SIZE = 64
TOKEN_BVH_START = 0xDDFF
TOKEN_BVH_END = 0xEEFF
TOKEN_CALC_START = 0x88FF
TOKEN_CALC_END = 0x99FF
_BVH_START = struct.pack("<H", TOKEN_BVH_START)  # b"\xff\xdd"
_BVH_END = struct.pack("<H", TOKEN_BVH_END)
_CALC_START = struct.pack("<H", TOKEN_CALC_START)
UNKNOWN_SMALL_SIZES = range(192, 196)
REFERENCE_FLOATS = 6

# token1, version, data_count, with_displacement, with_reference, avatar_index, name, frame_index,
# reserved x3, token2
_CURRENT = struct.Struct("<H4sHBBI32sIIIIH")
# token1, version, data_count, with_displacement, with_reference, avatar_index, name, reserved x2,
# token2
_LEGACY = struct.Struct("<H4sIIII32sIIH")
assert _CURRENT.size == _LEGACY.size == HEADER_SIZE

DEFAULT_VERSIONS: dict[str, tuple[int, int, int, int]] = {
    "current": (1, 1, 0, 1),
    "legacy": (1, 0, 0, 2),
}

REJECT_REASONS: tuple[str, ...] = (
    "truncated",  # shorter than the header, or than data_count declares
    "bad_token",  # starts with 0xDDFF but the end token is not 0xEEFF
    "bad_flags",  # with_displacement / with_reference not 0 or 1
    "length_mismatch",  # longer than data_count declares
    "bad_count",  # data_count inconsistent with the skeleton and the flags
    "calculation_data",  # Axis calculation data (tokens 0x88FF/0x99FF)
    "unknown_small",  # the ~192-195-byte packets Axis also sends
    "not_bvh",  # anything else
    "non_finite",  # NaN or inf among the values
)


class BvhReject(ValueError):
    """A datagram that is not a usable BVH frame; ``reason`` is one of REJECT_REASONS."""

    def __init__(self, reason: str, detail: str = "") -> None:
        assert reason in REJECT_REASONS, reason
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


@dataclass(frozen=True)
class AxisBvhConfig:
    skeleton: SkeletonKind = SkeletonKind.AXIS_STUDIO
    rotation_order: str = "YXZ"
    header_format: HeaderFormat = "current"

    def __post_init__(self) -> None:
        order = str(self.rotation_order).upper()
        if order not in ROTATION_ORDERS:
            raise ValueError(
                f"rotation_order {self.rotation_order!r} is not one of {', '.join(ROTATION_ORDERS)}"
            )
        if self.header_format not in HEADER_FORMATS:
            raise ValueError(f"header_format {self.header_format!r} is not one of {HEADER_FORMATS}")
        object.__setattr__(self, "rotation_order", order)
        object.__setattr__(self, "skeleton", SkeletonKind(self.skeleton))


DEFAULT_CONFIG = AxisBvhConfig()


class BvhHeader(NamedTuple):
    posture_index: int | None  # None for the legacy header, which has no frame index
    avatar_index: int
    avatar_name: str
    version: tuple[int, int, int, int]  # major, minor, revision, build
    data_count: int
    with_displacement: bool
    with_reference: bool


@dataclass(slots=True)
class BvhDatagram:
    posture_index: int | None
    avatar_index: int
    avatar_name: str
    version: tuple[int, int, int, int]
    with_displacement: bool
    with_reference: bool
    channels: np.ndarray  # (n_bones, 6) float64: translation XYZ cm, angles deg in config order
    reference: np.ndarray | None  # (6,) float64 or None


def expected_data_count(n_bones: int, with_displacement: bool, with_reference: bool) -> int:
    count = 6 * n_bones if with_displacement else 6 + 3 * (n_bones - 1)
    return count + (REFERENCE_FLOATS if with_reference else 0)


@functools.cache
def _n_bones(kind: SkeletonKind) -> int:
    return len(get_skeleton(kind).bones)


@functools.cache
def _tpose_channels(kind: SkeletonKind) -> np.ndarray:
    """Channels of the T-pose: each bone's offset as translation, zero angles (read-only)."""
    channels = np.zeros((len(get_skeleton(kind).bones), 6))
    channels[:, :3] = get_skeleton(kind).offsets_cm
    channels.flags.writeable = False
    return channels


def _classify_other(data: bytes | bytearray | memoryview) -> BvhReject:
    n = len(data)
    if data[:2] == _CALC_START:
        return BvhReject("calculation_data", f"{n} bytes")
    if n in UNKNOWN_SMALL_SIZES:
        return BvhReject("unknown_small", f"{n} bytes")
    return BvhReject("not_bvh", f"{n} bytes, first bytes {bytes(data[:4]).hex()}")


def _decode_name(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


def parse_header(
    data: bytes | bytearray | memoryview, config: AxisBvhConfig = DEFAULT_CONFIG
) -> BvhHeader:
    """Classify and validate everything but the values (struct only, no numpy).

    Capture runs the ledger on the result before paying for the float decode; ``parse_datagram``
    adds the one remaining check (non-finite values).
    """
    n = len(data)
    if data[:2] != _BVH_START:
        if n < 2 and _BVH_START.startswith(bytes(data)) and n:
            raise BvhReject("truncated", f"{n} bytes")
        raise _classify_other(data)
    if n < HEADER_SIZE:
        raise BvhReject("truncated", f"{n} bytes, header needs {HEADER_SIZE}")
    if data[62:64] != _BVH_END:
        raise BvhReject("bad_token", f"end token {bytes(data[62:64]).hex()}")
    if config.header_format == "current":
        (_, ver, count, disp, ref, avatar_index, name, posture_index, _, _, _, _) = (
            _CURRENT.unpack_from(data)
        )
    else:
        (_, ver, count, disp, ref, avatar_index, name, _, _, _) = _LEGACY.unpack_from(data)
        posture_index = None
    if disp > 1 or ref > 1:
        raise BvhReject("bad_flags", f"with_displacement={disp} with_reference={ref}")
    expected_len = HEADER_SIZE + 4 * count
    if n < expected_len:
        raise BvhReject("truncated", f"{n} bytes, data_count {count} needs {expected_len}")
    if n > expected_len:
        raise BvhReject("length_mismatch", f"{n} bytes, data_count {count} needs {expected_len}")
    n_bones = _n_bones(config.skeleton)
    if count != expected_data_count(n_bones, bool(disp), bool(ref)):
        raise BvhReject(
            "bad_count",
            f"data_count {count} for {n_bones} bones, displacement={disp} reference={ref}",
        )
    return BvhHeader(
        posture_index=posture_index,
        avatar_index=avatar_index,
        avatar_name=_decode_name(name),
        version=(ver[3], ver[2], ver[1], ver[0]),
        data_count=count,
        with_displacement=bool(disp),
        with_reference=bool(ref),
    )


MAX_CALC_COUNT = 4096  # calculation data: 16 floats per bone (59 bones: 944); a larger count is corrupt
_CALC_END = struct.pack("<H", TOKEN_CALC_END)


def declared_length(head: bytes | bytearray | memoryview, config: AxisBvhConfig = DEFAULT_CONFIG) -> int | None:
    """The byte length the 64-byte header at the start of ``head`` declares, or None when it is not
    a plausible header: what splits a TCP byte stream into datagrams.

    A BVH header must pass every check ``parse_header`` makes on the header alone (both tokens,
    flags 0 or 1, ``data_count`` consistent with the skeleton and the flags), so a corrupt length is
    never trusted: the splitter resyncs instead of waiting for bytes that will not come. A
    calculation-data header (0x88FF ... 0x99FF, same layout) is framed too, with its count bounded,
    so that it is skipped whole and counted as ``calculation_data``.
    """
    if len(head) < HEADER_SIZE:
        return None
    start, end = bytes(head[:2]), bytes(head[62:64])
    if config.header_format == "current":
        (_, _, count, disp, ref, *_rest) = _CURRENT.unpack_from(head)
    else:
        (_, _, count, disp, ref, *_rest) = _LEGACY.unpack_from(head)
    if start == _CALC_START and end == _CALC_END:
        return HEADER_SIZE + 4 * count if 0 < count <= MAX_CALC_COUNT else None
    if start != _BVH_START or end != _BVH_END or disp > 1 or ref > 1:
        return None
    if count != expected_data_count(_n_bones(config.skeleton), bool(disp), bool(ref)):
        return None
    return HEADER_SIZE + 4 * count


def checked_header_bytes(config: AxisBvhConfig = DEFAULT_CONFIG) -> int:
    """How many leading bytes of a header hold every field ``declared_length`` checks but the end
    token (start token, data_count and the two flags): 10 in the current layout, 18 in the legacy."""
    return 10 if config.header_format == "current" else 18


def may_start_header(head: bytes | bytearray | memoryview, config: AxisBvhConfig = DEFAULT_CONFIG) -> bool | None:
    """Bytes at the end of a stream that start with a start token, fewer than a header's: True
    when their fields pass ``declared_length``'s checks, False when they already rule a header out,
    None when they are too few to tell (``checked_header_bytes``)."""
    if len(head) >= HEADER_SIZE:
        return declared_length(head, config) is not None
    if len(head) < checked_header_bytes(config):
        return None
    full = bytearray(HEADER_SIZE)  # the bytes not there yet: zeros and the end token, which pass
    full[HEADER_SIZE - 2:] = _CALC_END if bytes(head[:2]) == _CALC_START else _BVH_END
    full[: len(head)] = head
    return declared_length(full, config) is not None


def parse_datagram(
    data: bytes | bytearray | memoryview, config: AxisBvhConfig = DEFAULT_CONFIG
) -> BvhDatagram:
    header = parse_header(data, config)
    values = np.frombuffer(data, dtype="<f4", count=header.data_count, offset=HEADER_SIZE)
    values = values.astype(np.float64)
    # float32 magnitudes cannot overflow a float64 sum: the sum is finite iff every value is.
    if not math.isfinite(values.sum()):
        raise BvhReject("non_finite", f"posture_index {header.posture_index}")
    reference = None
    if header.with_reference:
        reference = values[:REFERENCE_FLOATS]
        values = values[REFERENCE_FLOATS:]
    if header.with_displacement:
        channels = values.reshape(-1, 6)
    else:
        channels = _tpose_channels(config.skeleton).copy()
        channels[0] = values[:6]
        channels[1:, 3:] = values[6:].reshape(-1, 3)
    return BvhDatagram(
        posture_index=header.posture_index,
        avatar_index=header.avatar_index,
        avatar_name=header.avatar_name,
        version=header.version,
        with_displacement=header.with_displacement,
        with_reference=header.with_reference,
        channels=channels,
        reference=reference,
    )


def encode_datagram(
    posture_index: int | None,
    channels: np.ndarray,
    *,
    config: AxisBvhConfig = DEFAULT_CONFIG,
    with_displacement: bool = True,
    with_reference: bool = False,
    avatar_name: str = "Avatar00",
    avatar_index: int = 0,
    reference: np.ndarray | None = None,
    version: tuple[int, int, int, int] | None = None,
) -> bytes:
    """The exact inverse of ``parse_datagram`` for float32-representable values.

    Without displacement the non-root translations are not sent (the receiver fills in the T-pose
    offsets). The legacy header has no frame index: ``posture_index`` is not transmitted.
    """
    n_bones = _n_bones(config.skeleton)
    channels = np.asarray(channels, dtype=np.float64)
    if channels.shape != (n_bones, 6):
        raise ValueError(f"channels shape {channels.shape}, expected ({n_bones}, 6)")
    if with_displacement:
        parts = [channels.ravel()]
    else:
        parts = [channels[0], channels[1:, 3:].ravel()]
    if with_reference:
        ref = np.zeros(REFERENCE_FLOATS) if reference is None else np.asarray(reference, float)
        if ref.shape != (REFERENCE_FLOATS,):
            raise ValueError(f"reference shape {ref.shape}, expected ({REFERENCE_FLOATS},)")
        parts.insert(0, ref)
    payload = np.concatenate(parts).astype("<f4")
    count = payload.size
    name = avatar_name.encode("utf-8")
    if len(name) > 32:
        raise ValueError(f"avatar_name is {len(name)} bytes, at most 32")
    major, minor, revision, build = version or DEFAULT_VERSIONS[config.header_format]
    ver = bytes((build, revision, minor, major))
    if config.header_format == "current":
        if posture_index is None:
            raise ValueError("the current header format carries a posture_index")
        header = _CURRENT.pack(
            TOKEN_BVH_START, ver, count, int(with_displacement), int(with_reference),
            avatar_index, name, posture_index, 0, 0, 0, TOKEN_BVH_END,
        )  # fmt: skip
    else:
        header = _LEGACY.pack(
            TOKEN_BVH_START, ver, count, int(with_displacement), int(with_reference),
            avatar_index, name, 0, 0, TOKEN_BVH_END,
        )  # fmt: skip
    return header + payload.tobytes()
