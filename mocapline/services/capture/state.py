"""Capture's state as a record: what ``CaptureCore.state()`` returns and ``CaptureCore.from_state()``
reads, and its bytes on disk (capture's checkpoints).

The bytes are UTF-8 JSON, one object, ``"version": 1`` first; nothing in them is executed or looked
up by name, so a file that was damaged or written by someone else costs at worst a ``StateError``.
``decode`` checks every field's type and rejects a version it does not know, naming it. Version 1:

- ``session_id``, ``ports`` (in ``--ports`` order, main path first), ``merge_window_s``,
  ``allowed_sources`` (null: any), ``rejected`` (reason -> datagrams), ``frames_out``;
- ``decoder``: ``arrivals`` (datagrams the Axis decoder numbered, for the legacy header) and
  ``unit_check`` (the Xsens position-unit check of the first frame, null before it);
- ``performers``: per avatar ``index``, ``name`` and its ``merger``: per path (``port``, its
  ``ledger``, ``last_arrival`` on capture's monotonic clock, null if never heard), the ``merged``
  ledger, the merge counters, the remembered ``late_indices`` / ``duplicated`` / ``skipped``
  indices, ``segment``, ``next_index``, ``previous_segment_last``, and ``pending``: the frames
  waiting on a gap, each the datagram's bytes (hex, as decoded: a split Xsens sample joined) with
  its ``index``, ``arrival``, ``recv_ns``, ``port``, ``source`` and journal ``seq``;
- a ``ledger``: the counts of ``SequenceLedger``, ``missing_ranges`` / ``backward_jumps`` as
  ``[a, b]`` pairs and ``segments`` as ``[first, last, unique, missing]``;
- ``assemblers``: per path ``port`` and, for Xsens, its ``assembler`` (``horizon``, ``dropped``,
  ``held``: the parts of incomplete samples, hex by datagram counter), null for Axis.

A new field or a changed meaning is a new version; a reader keeps reading the versions before it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from mocapline.core.ledger import Segment, SequenceLedger
from mocapline.core.udp import Datagram
from mocapline.formats.mxtp02 import AssemblerState
from mocapline.services.capture.merge import MergerState, PathState

STATE_VERSION = 1

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
class CaptureState:
    session_id: str
    ports: list[int]
    merge_window_s: float
    allowed_sources: frozenset[str] | None
    rejected: dict[str, int]
    frames_out: int
    decoder: DecoderState
    performers: list[PerformerState]
    assemblers: dict[int, AssemblerState | None] = field(default_factory=dict)
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
        raise StateError(f"capture state version {version} is not one this capture reads (it reads {STATE_VERSION})")
    return _capture(obj)


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number a state holds")


def _capture_json(s: CaptureState) -> dict[str, Any]:
    return {
        "version": s.version, "session_id": s.session_id, "ports": s.ports, "merge_window_s": s.merge_window_s,
        "allowed_sources": None if s.allowed_sources is None else sorted(s.allowed_sources),
        "rejected": dict(s.rejected), "frames_out": s.frames_out,
        "decoder": {"arrivals": s.decoder.arrivals, "unit_check": s.decoder.unit_check},
        "performers": [{"index": p.index, "name": p.name, "merger": _merger_json(p.merger)} for p in s.performers],
        "assemblers": [{"port": port, "assembler": None if a is None else _assembler_json(a)}
                       for port, a in s.assemblers.items()],
    }


def _capture(obj: Any) -> CaptureState:
    where = "state"
    allowed = _get(obj, "allowed_sources", (list, type(None)), where)
    decoder = _get(obj, "decoder", dict, where)
    unit_check = _get(decoder, "unit_check", (dict, type(None)), "decoder")
    if unit_check is not None and not all(isinstance(v, JsonScalar) for v in unit_check.values()):
        raise StateError("decoder.unit_check: a value is not a number, text or null")
    performers = _get(obj, "performers", list, where)
    assemblers = _get(obj, "assemblers", list, where)
    return CaptureState(
        session_id=_get(obj, "session_id", str, where),
        ports=_ints(_get(obj, "ports", list, where), "ports"),
        merge_window_s=_number(obj, "merge_window_s", where),
        allowed_sources=None if allowed is None else frozenset(_items(allowed, str, "allowed_sources")),
        rejected={_text(k, "rejected"): _int_value(v, "rejected")
                  for k, v in _get(obj, "rejected", dict, where).items()},
        frames_out=_get(obj, "frames_out", int, where),
        decoder=DecoderState(_get(decoder, "arrivals", int, "decoder"), unit_check),
        performers=[PerformerState(_get(p, "index", int, "performer"), _get(p, "name", str, "performer"),
                                   _merger(_get(p, "merger", dict, "performer")))
                    for p in performers],
        assemblers={_get(a, "port", int, "assemblers"): _optional(_get(a, "assembler", (dict, type(None)),
                                                                       "assemblers"), _assembler)
                    for a in assemblers},
    )


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


def _assembler_json(a: AssemblerState) -> dict[str, Any]:
    return {"horizon": a.horizon, "dropped": a.dropped,
            "held": [{"character": c, "sample": s, "parts": {str(k): v.hex() for k, v in parts.items()}, "last": last}
                     for c, s, parts, last in a.held]}


def _assembler(obj: dict[str, Any]) -> AssemblerState:
    held = []
    for h in _get(obj, "held", list, "assembler"):
        parts = {_int_key(k, "held"): _hex(_text(v, "held"), "held") for k, v in _get(h, "parts", dict, "held").items()}
        held.append((_get(h, "character", int, "held"), _get(h, "sample", int, "held"), parts,
                     _get(h, "last", (int, type(None)), "held")))
    return AssemblerState(_get(obj, "horizon", int, "assembler"), _get(obj, "dropped", int, "assembler"), held)


def _get(obj: Any, key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if not isinstance(obj, dict):
        raise StateError(f"{where}: not an object")
    if key not in obj:
        raise StateError(f"{where}: {key} is missing")
    value = obj[key]
    if isinstance(value, bool) or not isinstance(value, kind):
        raise StateError(f"{where}.{key}: {type(value).__name__} where {_kind_name(kind)} belongs")
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    return " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))


def _number(obj: Any, key: str, where: str) -> float:
    return float(_get(obj, key, (int, float), where))


def _items(values: list[Any], kind: type, where: str) -> list[Any]:
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
