"""Capture's state as a record: what ``CaptureCore.state()`` returns and ``CaptureCore.from_state()``
reads, and its bytes on disk (capture's checkpoints).

The bytes are UTF-8 JSON, one object, ``"version": 2`` first; nothing in them is executed or looked
up by name, so a file that was damaged or written by someone else costs at worst a ``StateError``.
``decode`` checks every field's type and rejects a version it does not know, naming it (version 1,
from before split Axis frames and the Xsens meta data, is refused: capture then replays the take
from the journal). Version 2:

- ``session_id``, ``ports`` (in ``--ports`` order, main path first), ``stream_ports`` (the Axis
  TCP paths, whose datagrams come whole), ``merge_window_s``, ``allowed_sources`` (null: any),
  ``rejected`` (reason -> datagrams), ``frames_out``, ``meta_datagrams`` (Xsens message type
  -> datagrams taken in: ``MXTP12``, ``MXTP13``);
- ``decoder``: ``arrivals`` (datagrams the Axis decoder numbered, for the legacy header) and
  ``unit_check`` (the Xsens position-unit check of the first frame, null before it);
- ``performers``: per avatar ``index``, ``name`` and its ``merger``: per path (``port``, its
  ``ledger``, ``last_arrival`` on capture's monotonic clock, null if never heard), the ``merged``
  ledger, the merge counters, the remembered ``late_indices`` / ``duplicated`` / ``skipped``
  indices, ``segment``, ``next_index``, ``previous_segment_last``, and ``pending``: the frames
  waiting on a gap, each the datagram's bytes (hex, as decoded: a split frame or sample joined) with
  its ``index``, ``arrival``, ``recv_ns``, ``port``, ``source`` and journal ``seq``;
- a ``ledger``: the counts of ``SequenceLedger``, ``missing_ranges`` / ``backward_jumps`` as
  ``[a, b]`` pairs and ``segments`` as ``[first, last, unique, missing]``;
- ``characters`` (Xsens): per ``character`` ID what MXTP12 and MXTP13 said: ``name``, ``segments``
  (name -> null-pose origin ``[x, y, z]`` in metres, in the order sent) and ``points`` (each
  ``segment_id``, ``point_id``, ``name``, ``flags``, ``position``); the height is computed again;
- ``props`` (Xsens): per props-only ``character`` its ``samples`` and ``last``: the latest
  sample's datagram (hex, decoded again), null before one, with ``unit_checked``: whether it
  came after the position-unit check (false: decoded again unscaled, as it was);
- ``assemblers``: per path ``port``, ``kind`` and ``assembler``: ``whole`` (Axis TCP: null),
  ``axis_split`` (``window_ns``, ``joined`` frames and ``parts_joined`` datagrams, ``rejected``
  by reason, ``tail_sizes`` seen, ``held``: per ``sender`` the first parts of a frame as one
  ``data`` hex with the head's ``recv_ns``, the frame's ``length`` and the ``parts`` held) or
  ``mxtp`` (``horizon``, ``dropped``, ``joined``, ``held``: the parts of incomplete samples, hex
  by datagram counter).

A new field or a changed meaning is a new version.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from mocapline.core.counters import CounterSchemaError, UnitCheck, from_parts
from mocapline.core.ledger import Segment, SequenceLedger
from mocapline.core.udp import Datagram
from mocapline.formats.axis_split import AxisSplitState, HeldFrame
from mocapline.formats.mxtp02 import AssemblerState
from mocapline.formats.mxtp_meta import ScalePoint
from mocapline.services.capture.merge import MergerState, PathState

STATE_VERSION = 2
AssemblerRecord = AxisSplitState | AssemblerState | None  # None: the datagrams come whole

T = TypeVar("T")
JsonScalar = int | float | str | bool | None


class StateError(ValueError):
    """Bytes that are not a capture state this version of capture reads."""


@dataclass
class DecoderState:
    arrivals: int = 0
    unit_check: dict[str, JsonScalar] | None = None


@dataclass
class PerformerState:
    index: int
    name: str
    merger: MergerState[Datagram]


@dataclass
class CharacterState:
    character: int
    name: str = ""
    segments: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    points: tuple[ScalePoint, ...] = ()


@dataclass
class PropState:
    character: int
    samples: int
    last: bytes | None  # the latest sample's datagram
    unit_checked: bool = True  # decoded after the Xsens position-unit check


@dataclass
class CaptureState:
    session_id: str
    ports: list[int]
    merge_window_s: float
    allowed_sources: frozenset[str] | None
    rejected: dict[str, int]
    frames_out: int
    decoder: DecoderState
    performers: list[PerformerState]
    assemblers: dict[int, AssemblerRecord] = field(default_factory=dict)
    stream_ports: list[int] = field(default_factory=list)
    meta_datagrams: dict[str, int] = field(default_factory=dict)
    characters: list[CharacterState] = field(default_factory=list)
    props: list[PropState] = field(default_factory=list)
    version: int = STATE_VERSION


def encode(state: CaptureState) -> bytes:
    return json.dumps(to_json(state), separators=(",", ":"), allow_nan=False).encode()


def decode(blob: bytes) -> CaptureState:
    """The record in ``blob``, or ``StateError`` saying what is wrong with it."""
    return from_json(parse_json(blob, "capture state"))


def parse_json(blob: bytes, what: str) -> Any:
    try:
        return json.loads(blob.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise StateError(f"not a {what} (not JSON: {exc})") from None


def to_json(state: CaptureState) -> dict[str, Any]:
    return _capture_json(state)


def from_json(obj: Any) -> CaptureState:
    version = _get(obj, "version", int, "state")
    if version != STATE_VERSION:
        older = " (written before split Axis frames and Xsens meta data were kept)" if version == 1 else ""
        raise StateError(f"capture state version {version} is not one this capture reads{older} "
                         f"(it reads {STATE_VERSION})")
    return _capture(obj)


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number a state holds")


def _capture_json(s: CaptureState) -> dict[str, Any]:
    return {
        "version": s.version, "session_id": s.session_id, "ports": s.ports, "merge_window_s": s.merge_window_s,
        "allowed_sources": None if s.allowed_sources is None else sorted(s.allowed_sources),
        "stream_ports": s.stream_ports, "rejected": dict(s.rejected), "frames_out": s.frames_out,
        "meta_datagrams": dict(s.meta_datagrams),
        "decoder": {"arrivals": s.decoder.arrivals, "unit_check": s.decoder.unit_check},
        "performers": [{"index": p.index, "name": p.name, "merger": _merger_json(p.merger)} for p in s.performers],
        "characters": [_character_json(c) for c in s.characters],
        "props": [{"character": p.character, "samples": p.samples, "last": None if p.last is None else p.last.hex(),
                   "unit_checked": p.unit_checked} for p in s.props],
        "assemblers": [{"port": port, **_assembler_json(a)} for port, a in s.assemblers.items()],
    }


def _capture(obj: Any) -> CaptureState:
    where = "state"
    allowed = _get(obj, "allowed_sources", (list, type(None)), where)
    decoder = _get(obj, "decoder", dict, where)
    unit_check = _get(decoder, "unit_check", (dict, type(None)), "decoder")
    if unit_check is not None:
        try:  # the check as the ledger publishes it: every key, each of its type
            from_parts(UnitCheck, unit_check, "decoder.unit_check")
        except CounterSchemaError as exc:
            raise StateError(str(exc)) from None
    performers = _get(obj, "performers", list, where)
    assemblers = _get(obj, "assemblers", list, where)
    return CaptureState(
        session_id=_get(obj, "session_id", str, where),
        ports=_ints(_get(obj, "ports", list, where), "ports"),
        merge_window_s=_number(obj, "merge_window_s", where),
        allowed_sources=None if allowed is None else frozenset(_items(allowed, str, "allowed_sources")),
        rejected=_counts(_get(obj, "rejected", dict, where), "rejected"),
        frames_out=_get(obj, "frames_out", int, where),
        decoder=DecoderState(_get(decoder, "arrivals", int, "decoder"), unit_check),
        performers=[PerformerState(_get(p, "index", int, "performer"), _get(p, "name", str, "performer"),
                                   _merger(_get(p, "merger", dict, "performer")))
                    for p in performers],
        assemblers={_get(a, "port", int, "assemblers"): _assembler(a) for a in assemblers},
        stream_ports=_ints(_get(obj, "stream_ports", list, where), "stream_ports"),
        meta_datagrams=_counts(_get(obj, "meta_datagrams", dict, where), "meta_datagrams"),
        characters=[_character(c) for c in _get(obj, "characters", list, where)],
        props=[PropState(_get(p, "character", int, "props"), _get(p, "samples", int, "props"),
                         _optional(_get(p, "last", (str, type(None)), "props"), lambda h: _hex(h, "props")),
                         _get(p, "unit_checked", bool, "props"))
               for p in _get(obj, "props", list, where)],
    )


def _counts(obj: dict[str, Any], where: str) -> dict[str, int]:
    return {_text(k, where): _int_value(v, where) for k, v in obj.items()}


def _character_json(c: CharacterState) -> dict[str, Any]:
    return {"character": c.character, "name": c.name, "segments": {k: list(v) for k, v in c.segments.items()},
            "points": [{"segment_id": p.segment_id, "point_id": p.point_id, "name": p.name, "flags": p.flags,
                        "position": list(p.position)} for p in c.points]}


def _character(obj: Any) -> CharacterState:
    where = "characters"
    points = tuple(ScalePoint(_get(p, "segment_id", int, "point"), _get(p, "point_id", int, "point"),
                              _get(p, "name", str, "point"), _get(p, "flags", int, "point"),
                              _vector(_get(p, "position", list, "point"), "point"))
                   for p in _get(obj, "points", list, where))
    segments = {k: _vector(_items([v], list, where)[0], where) for k, v in _get(obj, "segments", dict, where).items()}
    return CharacterState(_get(obj, "character", int, where), _get(obj, "name", str, where), segments, points)


def _vector(values: list[Any], where: str) -> tuple[float, float, float]:
    if len(values) != 3:
        raise StateError(f"{where}: {len(values)} numbers where 3 belong")
    x, y, z = (float(v) for v in _items(values, (int, float), where))
    return x, y, z


def _merger_json(m: MergerState[Datagram]) -> dict[str, Any]:
    return {
        "paths": [{"port": port, "ledger": _ledger_json(p.ledger),
                   "last_arrival": None if p.last_arrival == float("-inf") else p.last_arrival}
                  for port, p in m.paths.items()],
        "window_s": m.window_s, "max_pending": m.max_pending, "merged": _ledger_json(m.merged),
        "duplicates": m.duplicates, "cross_path_copies": m.cross_path_copies, "late_frames": m.late_frames,
        "late_indices": m.late_indices, "duplicated": m.duplicated, "segment": m.segment,
        "next_index": m.next_index, "skipped": m.skipped, "previous_segment_last": m.previous_segment_last,
        "pending": [{"index": i, "arrival": t, "recv_ns": d.recv_ns, "port": d.port, "source": d.source,
                     "data": d.data.hex(), "seq": d.seq} for i, d, t in m.pending],
    }


def _merger(obj: dict[str, Any]) -> MergerState[Datagram]:
    where = "merger"
    paths = {}
    for p in _get(obj, "paths", list, where):
        arrival = _get(p, "last_arrival", (int, float, type(None)), "path")
        paths[_get(p, "port", int, "path")] = PathState(_ledger(_get(p, "ledger", dict, "path")),
                                                        float("-inf") if arrival is None else float(arrival))
    if not paths:
        raise StateError("merger: no path")
    pending = []
    for d in _get(obj, "pending", list, where):
        datagram = Datagram(_get(d, "recv_ns", int, "pending"), _get(d, "port", int, "pending"),
                            _get(d, "source", str, "pending"), _hex(_get(d, "data", str, "pending"), "pending"),
                            _get(d, "seq", int, "pending"))
        pending.append((_get(d, "index", int, "pending"), datagram, _number(d, "arrival", "pending")))
    return MergerState(
        paths=paths, window_s=_number(obj, "window_s", where), max_pending=_get(obj, "max_pending", int, where),
        merged=_ledger(_get(obj, "merged", dict, where)), duplicates=_get(obj, "duplicates", int, where),
        cross_path_copies=_get(obj, "cross_path_copies", int, where),
        late_frames=_get(obj, "late_frames", int, where),
        late_indices=_ints(_get(obj, "late_indices", list, where), "late_indices"),
        duplicated=_ints(_get(obj, "duplicated", list, where), "duplicated"),
        segment=_get(obj, "segment", int, where), next_index=_get(obj, "next_index", (int, type(None)), where),
        pending=pending, skipped=_ints(_get(obj, "skipped", list, where), "skipped"),
        previous_segment_last=_get(obj, "previous_segment_last", (int, type(None)), where),
    )


def _ledger_json(led: SequenceLedger) -> dict[str, Any]:
    return {
        "received": led.received, "unique": led.unique, "duplicates": led.duplicates, "missing": led.missing,
        "backward": led.backward, "first": led.first, "last": led.last, "segment": led.segment,
        "missing_ranges": [list(r) for r in led.missing_ranges],
        "backward_jumps": [list(r) for r in led.backward_jumps],
        "ranges_dropped": led.ranges_dropped,
        "segments": [[s.first, s.last, s.unique, s.missing] for s in led.segments],
    }


def _ledger(obj: dict[str, Any]) -> SequenceLedger:
    where = "ledger"
    led = SequenceLedger(
        **{k: _get(obj, k, int, where) for k in ("received", "unique", "duplicates", "missing", "backward",
                                                  "segment", "ranges_dropped")},
        first=_get(obj, "first", (int, type(None)), where), last=_get(obj, "last", (int, type(None)), where),
        missing_ranges=[_pair(r, "missing_ranges") for r in _get(obj, "missing_ranges", list, where)],
        backward_jumps=[_pair(r, "backward_jumps") for r in _get(obj, "backward_jumps", list, where)],
        segments=[Segment(*_ints(_items([s], list, "segments")[0], "segments", 4))
                  for s in _get(obj, "segments", list, where)],
    )
    if led.last is not None and not led.segments:
        raise StateError("ledger: an index was seen but no segment is kept")
    return led


def _assembler_json(a: AssemblerRecord) -> dict[str, Any]:
    if a is None:
        return {"kind": "whole", "assembler": None}
    if isinstance(a, AxisSplitState):
        return {"kind": "axis_split", "assembler": {
            "window_ns": a.window_ns, "joined": a.joined, "parts_joined": a.parts_joined,
            "rejected": dict(a.rejected), "tail_sizes": a.tail_sizes,
            "held": [{"sender": s, "data": h.data.hex(), "recv_ns": h.recv_ns, "length": h.length, "parts": h.parts}
                     for s, h in a.held.items()]}}
    return {"kind": "mxtp", "assembler": {
        "horizon": a.horizon, "dropped": a.dropped, "joined": a.joined,
        "held": [{"character": c, "sample": s, "parts": {str(k): v.hex() for k, v in parts.items()}, "last": last}
                 for c, s, parts, last in a.held]}}


def _assembler(record: Any) -> AssemblerRecord:
    kind = _get(record, "kind", str, "assemblers")
    if kind == "whole":
        return None
    obj = _get(record, "assembler", dict, "assemblers")
    where = "assembler"
    if kind == "axis_split":
        frames = {_get(h, "sender", str, "held"): HeldFrame(_hex(_get(h, "data", str, "held"), "held"),
                                                          _get(h, "recv_ns", int, "held"),
                                                          _get(h, "length", int, "held"), _get(h, "parts", int, "held"))
                for h in _get(obj, "held", list, where)}
        return AxisSplitState(_get(obj, "window_ns", int, where), _get(obj, "joined", int, where),
                              _get(obj, "parts_joined", int, where), _counts(_get(obj, "rejected", dict, where), where),
                              _ints(_get(obj, "tail_sizes", list, where), where), frames)
    if kind != "mxtp":
        raise StateError(f"assemblers: no assembler of kind {kind!r}")
    held = []
    for h in _get(obj, "held", list, where):
        parts = {_int_key(k, "held"): _hex(_text(v, "held"), "held") for k, v in _get(h, "parts", dict, "held").items()}
        held.append((_get(h, "character", int, "held"), _get(h, "sample", int, "held"), parts,
                     _get(h, "last", (int, type(None)), "held")))
    return AssemblerState(_get(obj, "horizon", int, where), _get(obj, "dropped", int, where), held,
                          _get(obj, "joined", int, where))


def _get(obj: Any, key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if not isinstance(obj, dict):
        raise StateError(f"{where}: not an object")
    if key not in obj:
        raise StateError(f"{where}: {key} is missing")
    value = obj[key]
    if (isinstance(value, bool) and kind is not bool) or not isinstance(value, kind):
        raise StateError(f"{where}.{key}: {type(value).__name__} where {_kind_name(kind)} belongs")
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    return " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))


def _number(obj: Any, key: str, where: str) -> float:
    return float(_get(obj, key, (int, float), where))


def _items(values: list[Any], kind: type | tuple[type, ...], where: str) -> list[Any]:
    return [_get({"item": v}, "item", kind, where) for v in values]


def _ints(values: list[Any], where: str, length: int | None = None) -> list[int]:
    if length is not None and len(values) != length:
        raise StateError(f"{where}: {len(values)} numbers where {length} belong")
    return _items(values, int, where)


def _pair(value: Any, where: str) -> tuple[int, int]:
    a, b = _ints(_items([value], list, where)[0], where, 2)
    return a, b


def _int_value(value: Any, where: str) -> int:
    return int(_items([value], int, where)[0])


def _text(value: Any, where: str) -> str:
    return str(_items([value], str, where)[0])


def _int_key(key: str, where: str) -> int:
    if not key.isdigit():
        raise StateError(f"{where}: {key!r} is not a datagram counter")
    return int(key)


def _hex(text: str, where: str) -> bytes:
    try:
        return bytes.fromhex(text)
    except ValueError:
        raise StateError(f"{where}: data is not hex") from None


def _optional(value: Any, read: Callable[[Any], T]) -> T | None:
    return None if value is None else read(value)
