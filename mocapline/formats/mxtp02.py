"""Xsens MVN network streamer, message MXTP02 (segment positions and quaternions): decode, encode.

Layout (docs/formats.md): a 24-byte big-endian header ``'>6sIBBIBBBB2sH'`` (ID "MXTP02", sample counter,
datagram counter (0x80: the only datagram of the sample), item count, time code in ms, character
id, body segment count, prop count, finger segment count, 2 reserved, payload size), then one
32-byte ``'>i7f'`` item per segment: 1-based segment id, position x y z, quaternion w x y z. With
23 body segments and no props or fingers a datagram is 760 bytes. The frame is Z-up already.

MVN splits a sample that does not fit one datagram (props, finger tracking) over several: datagram
counter 0, 1, ..., the top bit (0x80) set on the last; each part carries the items that fit, with the
whole sample's segment counts. ``MxtpAssembler`` joins the parts back into the single-datagram form
``parse_mxtp02`` reads. MVN before 2019 left the segment-count bytes reserved (zero): such a header
is read as 23 body segments, any further items being props.

The position unit is disputed (the spec text says cm, public code treats the values as metres):
it is configuration, and ``guess_position_unit`` / ``pelvis_height_plausible`` give a sanity
check on the pelvis height. Orientations are passed through as sent (w >= 0 is enforced); any
offset between Xsens segment frames and the bodies GMR expects belongs to the retarget config.

Items come body segments first, then props, then finger segments (the header's three counts).
A character with props carries their poses beside its body; a character with only props (MVN
streams a tracked object as a character of its own) has no body (``XsensFrame.has_body`` False).
Finger tracking adds 40 segments (20 per hand, ``FINGER_SEGMENTS``), kept in segment-id order.

``parse_mxtp02`` raises nothing but ``XsensReject`` on any bytes-like input.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from mocapline.core.bodies import GMR_BODIES, GMR_BODY_INDEX, HAND_BODIES

HEADER = struct.Struct(">6sIBBIBBBB2sH")
ITEM = struct.Struct(">i7f")
HEADER_SIZE = HEADER.size  # 24
ITEM_SIZE = ITEM.size  # 32
MESSAGE_ID = b"MXTP02"
SINGLE_DATAGRAM = 0x80
N_SEGMENTS = 23

PositionUnit = Literal["m", "cm"]
PositionUnitSetting = Literal["m", "cm", "auto"]  # auto: the first frame's pelvis height decides
POSITION_UNITS: dict[str, float] = {"m": 1.0, "cm": 0.01}

# Segment id i + 1 is XSENS_SEGMENTS[i] (MVN body segment order).
XSENS_SEGMENTS: tuple[str, ...] = (
    "Pelvis", "L5", "L3", "T12", "T8", "Neck", "Head",
    "RightShoulder", "RightUpperArm", "RightForearm", "RightHand",
    "LeftShoulder", "LeftUpperArm", "LeftForearm", "LeftHand",
    "RightUpperLeg", "RightLowerLeg", "RightFoot", "RightToe",
    "LeftUpperLeg", "LeftLowerLeg", "LeftFoot", "LeftToe",
)  # fmt: skip
XSENS_TO_GMR: dict[str, str] = {
    "Pelvis": "Hips",
    "L5": "Spine",
    "L3": "Spine1",
    "T12": "Spine2",
    "T8": "Spine3",
    "Neck": "Neck",
    "Head": "Head",
    "RightShoulder": "RightShoulder",
    "RightUpperArm": "RightArm",
    "RightForearm": "RightForeArm",
    "RightHand": "RightHand",
    "LeftShoulder": "LeftShoulder",
    "LeftUpperArm": "LeftArm",
    "LeftForearm": "LeftForeArm",
    "LeftHand": "LeftHand",
    "RightUpperLeg": "RightUpLeg",
    "RightLowerLeg": "RightLeg",
    "RightFoot": "RightFoot",
    "RightToe": "RightToe",
    "LeftUpperLeg": "LeftUpLeg",
    "LeftLowerLeg": "LeftLeg",
    "LeftFoot": "LeftFoot",
    "LeftToe": "LeftToe",
}
# MVN's hand model (finger tracking): the HumanFrame's hand bodies (core/bodies.py).
FINGER_SEGMENTS: tuple[str, ...] = HAND_BODIES
# GMR body row -> 0-based Xsens segment index.
_GMR_TO_XSENS = {body: segment for segment, body in XSENS_TO_GMR.items()}
_SEGMENT_FOR_BODY = np.array([XSENS_SEGMENTS.index(_GMR_TO_XSENS[body]) for body in GMR_BODIES])
_ITEM_DTYPE = np.dtype([("id", ">i4"), ("values", ">f4", (7,))])

REJECT_REASONS: tuple[str, ...] = (
    "truncated",  # shorter than the header or than the items it declares
    "not_mxtp",  # does not start with "MXTP"
    "unsupported_type",  # another MXTP message type (MXTP01, MXTP13, ...)
    "fragmented",  # datagram counter != 0x80: one part of a split sample, given to the parser alone
    "bad_count",  # body segments neither 23 nor 0 (props only), or item count != body + props + fingers
    "length_mismatch",  # payload size or datagram length disagrees with the item count
    "bad_segment_id",  # body segment ids are not exactly 1..23
    "non_finite",  # NaN or inf among the values
    "bad_quaternion",  # a quaternion far from unit length
    "bad_meta",  # MXTP12 / MXTP13 whose counts or strings run past the datagram
)


# Not the parser's: counted by capture for the parts MxtpAssembler dropped.
FRAGMENT_INCOMPLETE = "fragment_incomplete"  # a part of a split sample whose other parts never came


class XsensReject(ValueError):
    """A datagram that is not a usable MXTP02 frame; ``reason`` is one of REJECT_REASONS."""

    def __init__(self, reason: str, detail: str = "") -> None:
        assert reason in REJECT_REASONS, reason
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


_EMPTY3 = np.zeros((0, 3))
_EMPTY4 = np.zeros((0, 4))
_NO_IDS = np.zeros(0, dtype=np.int64)


@dataclass(slots=True)
class XsensFrame:
    sample_counter: int  # plays the role of posture_index
    time_code_ms: int
    character_id: int
    positions: np.ndarray  # (23, 3) metres, Z-up, GMR_BODIES order; (0, 3) for a props-only character
    quaternions: np.ndarray  # (23, 4) w x y z, w >= 0, GMR_BODIES order; (0, 4) without a body
    prop_ids: np.ndarray = field(default_factory=lambda: _NO_IDS)  # (P,) segment ids of the props
    prop_positions: np.ndarray = field(default_factory=lambda: _EMPTY3)  # (P, 3) metres
    prop_quaternions: np.ndarray = field(default_factory=lambda: _EMPTY4)  # (P, 4) w x y z
    finger_positions: np.ndarray = field(default_factory=lambda: _EMPTY3)  # (F, 3), segment-id order
    finger_quaternions: np.ndarray = field(default_factory=lambda: _EMPTY4)  # (F, 4)

    @property
    def has_body(self) -> bool:
        return len(self.positions) > 0


def _check_message(data: bytes | bytearray | memoryview) -> None:
    n = len(data)
    if data[:4] != MESSAGE_ID[:4]:
        if n < 4 and MESSAGE_ID.startswith(bytes(data)) and n:
            raise XsensReject("truncated", f"{n} bytes")
        raise XsensReject("not_mxtp", f"{n} bytes, first bytes {bytes(data[:6]).hex()}")
    if n < 6:
        raise XsensReject("truncated", f"{n} bytes")
    if data[:6] != MESSAGE_ID:
        raise XsensReject("unsupported_type", bytes(data[:6]).decode("ascii", "replace"))
    if n < HEADER_SIZE:
        raise XsensReject("truncated", f"{n} bytes, header needs {HEADER_SIZE}")


def parse_mxtp02(
    data: bytes | bytearray | memoryview, position_unit: PositionUnit = "m"
) -> XsensFrame:
    if position_unit not in POSITION_UNITS:
        raise ValueError(f"position_unit {position_unit!r} is not one of {tuple(POSITION_UNITS)}")
    n = len(data)
    _check_message(data)
    (_, sample, datagram_counter, items, time_code, character, body, props, fingers, _, payload) = (
        HEADER.unpack_from(data)
    )
    if datagram_counter != SINGLE_DATAGRAM:
        raise XsensReject("fragmented", f"datagram counter {datagram_counter:#04x}")
    if body == props == fingers == 0 and items >= N_SEGMENTS:  # MVN before 2019: reserved, zero
        body, props = N_SEGMENTS, items - N_SEGMENTS
    if body not in (0, N_SEGMENTS) or items != body + props + fingers or not body + props or (fingers and not body):
        raise XsensReject(
            "bad_count", f"items {items}, body {body}, props {props}, fingers {fingers}"
        )
    expected = HEADER_SIZE + ITEM_SIZE * items
    if n < expected:
        raise XsensReject("truncated", f"{n} bytes, {items} items need {expected}")
    if n > expected or payload != ITEM_SIZE * items:
        raise XsensReject(
            "length_mismatch", f"{n} bytes, payload size {payload}, {items} items need {expected}"
        )
    records = np.frombuffer(data, dtype=_ITEM_DTYPE, count=items, offset=HEADER_SIZE)
    ids = records["id"].astype(np.int64)
    if body and not np.array_equal(np.sort(ids[:body]), np.arange(1, N_SEGMENTS + 1)):
        raise XsensReject("bad_segment_id", f"ids {ids[:body].tolist()}")
    with np.errstate(invalid="ignore"):
        values = records["values"].astype(np.float64)
    if not np.isfinite(values).all():
        raise XsensReject("non_finite", f"sample {sample}")
    norms = np.linalg.norm(values[:, 3:], axis=1)
    if np.any(np.abs(norms - 1.0) > 1e-2):
        raise XsensReject("bad_quaternion", f"norms {norms.min():.3f}..{norms.max():.3f}")
    values[:, :3] *= POSITION_UNITS[position_unit]
    values[:, 3:] *= np.where(values[:, 3:4] < 0.0, -1.0, 1.0)
    body_values = np.empty((body, 7))
    if body:
        body_values[ids[:body] - 1] = values[:body]
        body_values = body_values[_SEGMENT_FOR_BODY]
    prop_values = values[body : body + props]
    finger_order = body + props + np.argsort(ids[body + props :], kind="stable")
    finger_values = values[finger_order]
    return XsensFrame(
        sample_counter=sample,
        time_code_ms=time_code,
        character_id=character,
        positions=body_values[:, :3],
        quaternions=body_values[:, 3:],
        prop_ids=ids[body : body + props],
        prop_positions=prop_values[:, :3],
        prop_quaternions=prop_values[:, 3:],
        finger_positions=finger_values[:, :3],
        finger_quaternions=finger_values[:, 3:],
    )


def encode_mxtp02(
    sample_counter: int,
    positions: np.ndarray | None,
    quaternions: np.ndarray | None,
    *,
    time_code_ms: int = 0,
    character_id: int = 0,
    position_unit: PositionUnit = "m",
    props: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
    fingers: tuple[np.ndarray, np.ndarray] | None = None,
) -> bytes:
    """Inverse of ``parse_mxtp02``: positions (23, 3) m and quaternions (23, 4) in GMR_BODIES
    order, written as segments 1..23 in the given unit (None: a character with props only), then
    ``props`` (segment ids, positions, quaternions) and ``fingers`` (positions, quaternions, in
    FINGER_SEGMENTS order, written as the segment ids after the body's and the props')."""
    if position_unit not in POSITION_UNITS:
        raise ValueError(f"position_unit {position_unit!r} is not one of {tuple(POSITION_UNITS)}")
    unit = POSITION_UNITS[position_unit]
    blocks: list[np.ndarray] = []
    if positions is not None and quaternions is not None:
        positions = np.asarray(positions, dtype=np.float64)
        quaternions = np.asarray(quaternions, dtype=np.float64)
        if positions.shape != (N_SEGMENTS, 3) or quaternions.shape != (N_SEGMENTS, 4):
            raise ValueError(
                f"shapes {positions.shape}, {quaternions.shape}; expected (23, 3), (23, 4)"
            )
        body = np.empty(N_SEGMENTS, dtype=_ITEM_DTYPE)
        body["id"] = np.arange(1, N_SEGMENTS + 1)
        values = np.empty((N_SEGMENTS, 7))
        values[_SEGMENT_FOR_BODY, :3] = positions / unit
        values[_SEGMENT_FOR_BODY, 3:] = quaternions
        body["values"] = values
        blocks.append(body)
    n_body = len(blocks[0]) if blocks else 0
    n_props = n_fingers = 0
    if props is not None:
        ids, pos, quat = (np.asarray(a) for a in props)
        block = np.empty(len(ids), dtype=_ITEM_DTYPE)
        block["id"] = ids
        block["values"] = np.hstack([np.reshape(pos, (-1, 3)) / unit, np.reshape(quat, (-1, 4))])
        blocks.append(block)
        n_props = len(ids)
    if fingers is not None:
        pos, quat = (np.reshape(np.asarray(a, dtype=np.float64), (-1, k)) for a, k in zip(fingers, (3, 4), strict=True))
        block = np.empty(len(pos), dtype=_ITEM_DTYPE)
        block["id"] = N_SEGMENTS + n_props + 1 + np.arange(len(pos))
        block["values"] = np.hstack([pos / unit, quat])
        blocks.append(block)
        n_fingers = len(pos)
    records = np.concatenate(blocks).astype(_ITEM_DTYPE) if blocks else np.empty(0, dtype=_ITEM_DTYPE)
    header = HEADER.pack(
        MESSAGE_ID, sample_counter, SINGLE_DATAGRAM, len(records), time_code_ms, character_id,
        n_body, n_props, n_fingers, b"\0\0", ITEM_SIZE * len(records),
    )  # fmt: skip
    return header + records.tobytes()


def guess_position_unit(raw_pelvis_height: float) -> PositionUnit | None:
    """The unit in which a raw pelvis z reads as a standing or crouching person (0.3-2 m)."""
    if 0.3 <= raw_pelvis_height <= 2.0:
        return "m"
    if 30.0 <= raw_pelvis_height <= 200.0:
        return "cm"
    return None


def pelvis_height_plausible(frame: XsensFrame, low: float = 0.3, high: float = 2.0) -> bool:
    """Whether the decoded pelvis height (m) is that of a person; False hints at a wrong unit."""
    return low <= float(frame.positions[GMR_BODY_INDEX["Hips"], 2]) <= high


@dataclass
class AssemblerState:
    """``held``: per incomplete sample, (character id, sample counter, parts by datagram counter,
    the last part's counter once it is in)."""

    horizon: int
    dropped: int
    held: list[tuple[int, int, dict[int, bytes], int | None]]
    joined: int = 0


class MxtpAssembler:
    """Joins the parts of split MXTP02 samples (one assembler per path: the same part arriving on
    two paths must not complete the other path's sample).

    ``push`` returns the datagram to parse: a single-datagram sample as it came, a split one once
    its last part is in (any order), else None (held). A sample still incomplete when a later
    sample of the same character is ``horizon`` samples ahead, or at ``flush``, is dropped: its
    parts count as ``dropped`` (rejected, ``fragment_incomplete``) and the ledger finds its
    sample counter missing, which it is.
    """

    def __init__(self, horizon: int = 8) -> None:
        self.horizon = horizon
        self.dropped = 0
        self.joined = 0  # samples reassembled from several datagrams
        self._parts: dict[tuple[int, int], dict[int, bytes]] = {}
        self._last: dict[tuple[int, int], int] = {}

    @property
    def pending(self) -> int:
        """Parts held, waiting for the rest of their sample."""
        return sum(len(p) for p in self._parts.values())

    @property
    def rejected(self) -> dict[str, int]:
        return {FRAGMENT_INCOMPLETE: self.dropped} if self.dropped else {}

    def push(self, data: bytes, recv_ns: int = 0, sender: str = "") -> bytes | None:
        if len(data) < HEADER_SIZE or data[:6] != MESSAGE_ID:
            return data  # not a part: the parser says what it is
        (_, sample, counter, _, _, character, *_rest) = HEADER.unpack_from(data)
        if counter == SINGLE_DATAGRAM:
            return data
        key = (character, sample)
        self._expire(character, sample)
        parts = self._parts.setdefault(key, {})
        parts[counter & 0x7F] = bytes(data)
        if counter & SINGLE_DATAGRAM:
            self._last[key] = counter & 0x7F
        last = self._last.get(key)
        if last is None or len(parts) < last + 1 or any(k not in parts for k in range(last + 1)):
            return None
        del self._parts[key], self._last[key]
        self.joined += 1
        return _join([parts[k] for k in range(last + 1)])

    def state(self) -> AssemblerState:
        """The parts held and the count dropped, as plain values (capture's checkpoints)."""
        return AssemblerState(self.horizon, self.dropped,
                              [(c, s, dict(parts), self._last.get((c, s))) for (c, s), parts in self._parts.items()],
                              self.joined)

    @classmethod
    def from_state(cls, state: AssemblerState) -> MxtpAssembler:
        assembler = cls(state.horizon)
        assembler.dropped, assembler.joined = state.dropped, state.joined
        for character, sample, parts, last in state.held:
            assembler._parts[(character, sample)] = dict(parts)
            if last is not None:
                assembler._last[(character, sample)] = last
        return assembler

    def flush(self) -> None:
        """End of a take: what is still incomplete never completes."""
        self.dropped += self.pending
        self._parts.clear()
        self._last.clear()

    def _expire(self, character: int, sample: int) -> None:
        for key in [k for k in self._parts if k[0] == character and sample - k[1] > self.horizon]:
            self.dropped += len(self._parts.pop(key))
            self._last.pop(key, None)


def _join(parts: list[bytes]) -> bytes:
    """One single-datagram MXTP02 from a sample's parts, in datagram-counter order."""
    first = HEADER.unpack_from(parts[0])
    items = sum(HEADER.unpack_from(p)[3] for p in parts)
    payload = b"".join(p[HEADER_SIZE:] for p in parts)
    if items > 255 or len(payload) > 0xFFFF:
        return parts[0]  # cannot be written as one datagram header: the parser rejects the first part
    header = HEADER.pack(first[0], first[1], SINGLE_DATAGRAM, items, *first[4:10], len(payload))
    return header + payload


def split_mxtp02(data: bytes, items_per_part: int) -> list[bytes]:
    """The inverse of ``MxtpAssembler``: a single-datagram sample as MVN sends it when it does not
    fit one datagram (for tests and the emitter)."""
    fields = HEADER.unpack_from(data)
    items = fields[3]
    chunks = [data[HEADER_SIZE + ITEM_SIZE * k : HEADER_SIZE + ITEM_SIZE * min(k + items_per_part, items)]
              for k in range(0, items, items_per_part)]
    out = []
    for n, chunk in enumerate(chunks):
        counter = n | (SINGLE_DATAGRAM if n == len(chunks) - 1 else 0)
        out.append(HEADER.pack(fields[0], fields[1], counter, len(chunk) // ITEM_SIZE, *fields[4:10], len(chunk))
                   + chunk)
    return out
