"""Capture's state record: a core rebuilt from its state (through the bytes on disk) goes on exactly
as the original; the decoder of those bytes, which are untrusted, raises nothing but StateError."""

from __future__ import annotations

import contextlib
import json
import logging
import pickle
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mocapline.core.frames import HumanFrame
from mocapline.core.udp import Datagram
from mocapline.formats.axis_bvh import AxisBvhConfig, encode_datagram
from mocapline.formats.axis_split import split_datagram
from mocapline.formats.mxtp02 import encode_mxtp02, split_mxtp02
from mocapline.formats.mxtp_meta import ScalePoint, encode_meta, encode_scaling
from mocapline.formats.skeleton import get_skeleton
from mocapline.services.capture import checkpoint
from mocapline.services.capture import state as capture_state
from mocapline.services.capture.core import AxisDecoder, CaptureCore, XsensDecoder
from mocapline.services.capture.state import STATE_VERSION, StateError

MAIN, SIDE, STREAM = 7014, 7015, 7001
CONFIG = AxisBvhConfig()
CHANNELS = np.zeros((len(get_skeleton(CONFIG.skeleton).bones), 6))
CHANNELS[0, 1] = 95.0


def axis(index: int, avatar: int = 0) -> bytes:
    return encode_datagram(index, CHANNELS, config=CONFIG, avatar_index=avatar, avatar_name=f"A{avatar}")


def xsens(counter: int, character: int = 0, prop: bool = False) -> bytes:
    positions = np.zeros((23, 3))
    positions[:, 2] = 0.95 + 0.001 * counter
    quaternions = np.tile([1.0, 0.0, 0.0, 0.0], (23, 1))
    props = (np.array([24]), np.array([[0.1 * counter, 0.0, 1.0]]), np.array([[1.0, 0.0, 0.0, 0.0]]))
    return encode_mxtp02(counter, positions, quaternions, character_id=character, props=props if prop else None)


def props_only(counter: int, character: int = 5) -> bytes:
    props = (np.array([24, 25]), np.array([[0.5, 0.01 * counter, 1.0], [0.0, 0.2, 0.9]]),
             np.tile([1.0, 0.0, 0.0, 0.0], (2, 1)))
    return encode_mxtp02(counter, None, None, character_id=character, props=props)


SEGMENTS = {"Pelvis": (0.0, 0.0, 0.98), "Head": (0.0, 0.0, 1.62), "RightFoot": (0.0, -0.1, 0.08)}
POINTS = (ScalePoint(2, 0, "pTopOfHead", 0, (0.0, 0.0, 0.18)),
          ScalePoint(3, 0, "pRightHeelFloor", 1, (0.0, 0.0, -0.08)))


Event = tuple[int, bytes] | tuple[int, bytes, str]  # (port, datagram[, sender])


def run(core: CaptureCore, events: list[Event], start: int = 0) -> list[tuple[Any, ...]]:
    out = []
    for k, (port, data, *sender) in enumerate(events, start):
        out += core.feed(Datagram(1_000_000 * k, port, sender[0] if sender else "127.0.0.1", data), k * 0.004)
    return [describe(f) for f in out]


def describe(f: HumanFrame) -> tuple[Any, ...]:
    return (f.posture_index, f.avatar_index, f.avatar_name, f.source_port, f.segment, f.human_height,
            f.prop_character, f.prop_segment, f.prop_positions.tolist(), f.positions.tolist())


def through_bytes(core: CaptureCore, decoder: Any) -> CaptureCore:
    return CaptureCore.from_state(capture_state.decode(capture_state.encode(core.state())), decoder)


def comparable(ledger: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(ledger))


axis_events = st.lists(
    st.tuples(st.sampled_from([MAIN, SIDE]), st.integers(100, 140), st.sampled_from([0, 0, 1])),
    min_size=1, max_size=60,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(axis_events, st.integers(0, 60), st.booleans())
def test_a_core_rebuilt_from_its_state_goes_on_as_the_original(raw, cut, reject) -> None:
    events: list[Event] = [(port, axis(i, avatar)) for port, i, avatar in raw]
    if reject:
        events.insert(len(events) // 2, (MAIN, b"not a datagram"))
    cut = min(cut, len(events))
    original = CaptureCore(AxisDecoder(CONFIG), [MAIN, SIDE], merge_window_s=0.05, session_id="s" * 32)
    run(original, events[:cut])
    rebuilt = through_bytes(original, AxisDecoder(CONFIG))
    assert comparable(rebuilt.ledger()) == comparable(original.ledger())
    assert run(rebuilt, events[cut:], cut) == run(original, events[cut:], cut)
    assert [f.posture_index for f in rebuilt.flush()] == [f.posture_index for f in original.flush()]
    assert comparable(rebuilt.ledger()) == comparable(original.ledger())


def goes_on_alike(original: CaptureCore, decoder: Any, rest: list[Event], start: int) -> CaptureCore:
    """The core rebuilt from ``original``'s state has its record and ledger, and goes on alike."""
    rebuilt = through_bytes(original, decoder)
    assert capture_state.encode(rebuilt.state()) == capture_state.encode(original.state())
    assert comparable(rebuilt.ledger()) == comparable(original.ledger())
    assert run(rebuilt, rest, start) == run(original, rest, start)
    assert [describe(f) for f in rebuilt.flush()] == [describe(f) for f in original.flush()]
    assert comparable(rebuilt.ledger()) == comparable(original.ledger())
    return rebuilt


split_axis_events = st.lists(
    st.tuples(st.sampled_from([MAIN, SIDE, STREAM]), st.integers(100, 130), st.sampled_from(["a", "b"]),
              st.sampled_from(["whole", "split", "split", "head", "tail"])),
    min_size=1, max_size=40,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(split_axis_events, st.integers(0, 80), st.booleans())
def test_axis_frames_split_over_datagrams_and_held_at_the_checkpoint_go_on_alike(raw, cut, interleave) -> None:
    """Heads held per sender (and the tails seen) at the checkpoint: the rebuilt core joins, rejects
    and counts as the original does; a TCP stream path stays whole."""
    events: list[Event] = []
    for port, index, sender, how in raw:
        head, tail = split_datagram(axis(index), 1024)
        if port == STREAM or how == "whole":
            events.append((port, axis(index), sender))
        else:
            parts = {"split": [head, tail], "head": [head], "tail": [tail]}[how]
            events += [(port, part, sender) for part in parts]
    if interleave:
        events = events[::2] + events[1::2]
    cut = min(cut, len(events))
    original = CaptureCore(AxisDecoder(CONFIG), [MAIN, SIDE, STREAM], merge_window_s=0.05, session_id="s" * 32,
                           stream_ports=frozenset({STREAM}))
    run(original, events[:cut])
    goes_on_alike(original, AxisDecoder(CONFIG), events[cut:], cut)


XSENS_KINDS = ["body", "body", "body_prop", "other_body", "split", "split_lost", "props_only", "name", "segments",
               "points"]


def xsens_events(kind: str, counter: int, port: int) -> list[Event]:
    if kind in ("split", "split_lost"):
        parts = split_mxtp02(xsens(counter, prop=True), 9)
        return [(port, p) for p in (parts if kind == "split" else parts[:-1])]
    data = {"body": lambda: xsens(counter), "body_prop": lambda: xsens(counter, prop=True),
            "other_body": lambda: xsens(counter, character=1), "props_only": lambda: props_only(counter),
            "name": lambda: encode_meta(counter % 2, {"name": f"P{counter}", "color": "ff0000"}),
            "segments": lambda: encode_scaling(0, SEGMENTS)[0],
            "points": lambda: encode_scaling(0, points=POINTS)[0]}[kind]()
    return [(port, data)]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(XSENS_KINDS), st.integers(10, 30), st.sampled_from([MAIN, SIDE])),
                min_size=1, max_size=40),
       st.integers(0, 80), st.sampled_from(["m", "auto"]))
def test_xsens_characters_props_and_split_samples_go_on_alike(raw, cut, unit) -> None:
    """MXTP12 names, MXTP13 scaling (the height), props-only characters' latest pose and split
    samples held at the checkpoint: the rebuilt core's frames carry the same."""
    events = [e for kind, counter, port in raw for e in xsens_events(kind, counter, port)]
    cut = min(cut, len(events))
    original = CaptureCore(XsensDecoder(unit), [MAIN, SIDE], merge_window_s=0.05, session_id="x" * 32)
    run(original, events[:cut])
    goes_on_alike(original, XsensDecoder(unit), events[cut:], cut)


def test_names_heights_and_props_taken_in_before_a_checkpoint_are_on_the_frames_after_it() -> None:
    before: list[Event] = [(MAIN, encode_meta(0, {"name": "Ann"})),
                           *[(MAIN, d) for d in encode_scaling(0, SEGMENTS, POINTS)], (MAIN, props_only(3)),
                           (MAIN, xsens(10))]
    original = CaptureCore(XsensDecoder("m"), [MAIN], merge_window_s=0.05)
    run(original, before)
    rebuilt = goes_on_alike(original, XsensDecoder("m"), [(MAIN, xsens(11))], len(before))
    frame = run(rebuilt, [(MAIN, xsens(12))], len(before) + 1)[0]
    assert frame[2] == "Ann" and frame[5] > 1.5 and frame[6] == (5, 5)
    led = rebuilt.ledger()
    assert led["meta_datagrams"] == {"MXTP12": 1, "MXTP13": 2} and led["props"]["5"]["samples"] == 1


def test_a_props_sample_from_before_the_unit_check_stays_unscaled_after_a_restore() -> None:
    """--position-unit auto with MVN sending cm: the props-only sample before the first body frame
    was not scaled; decoded again at the restore, it is not scaled either."""
    positions = np.zeros((23, 3))
    positions[:, 2] = 0.95
    body = encode_mxtp02(10, positions, np.tile([1.0, 0.0, 0.0, 0.0], (23, 1)), position_unit="cm")
    before: list[Event] = [(MAIN, props_only(3)), (MAIN, body)]
    original = CaptureCore(XsensDecoder("auto"), [MAIN], merge_window_s=0.05)
    run(original, before)
    assert original.ledger()["unit_check"]["read_as"] == "cm"
    after: list[Event] = [(MAIN, encode_mxtp02(11, positions, np.tile([1.0, 0.0, 0.0, 0.0], (23, 1)),
                                               position_unit="cm"))]
    goes_on_alike(original, XsensDecoder("auto"), after, len(before))


def test_a_version_1_state_is_refused_saying_why() -> None:
    obj = json.loads(capture_state.encode(CaptureCore(AxisDecoder(CONFIG), [MAIN]).state()))
    obj["version"] = 1
    with pytest.raises(StateError, match="version 1 is not one this capture reads .*split Axis frames"):
        capture_state.decode(json.dumps(obj).encode())


def test_the_legacy_header_numbering_goes_on_after_a_restore() -> None:
    config = AxisBvhConfig(header_format="legacy")
    data = encode_datagram(None, CHANNELS, config=config)
    original = CaptureCore(AxisDecoder(config), [MAIN, SIDE])
    run(original, [(MAIN, data)] * 5)
    rebuilt = through_bytes(original, AxisDecoder(config))
    assert run(rebuilt, [(MAIN, data)] * 3) == run(original, [(MAIN, data)] * 3)


def test_split_xsens_parts_held_at_the_checkpoint_complete_after_it() -> None:
    parts = split_mxtp02(xsens(11), 10)
    events: list[Event] = [(MAIN, xsens(10)), *[(MAIN, p) for p in parts[:-1]]]
    original = CaptureCore(XsensDecoder("auto"), [MAIN, SIDE], merge_window_s=0.05)
    run(original, events)
    rebuilt = through_bytes(original, XsensDecoder("auto"))
    assert rebuilt.ledger()["unit_check"] == original.ledger()["unit_check"] is not None
    rest: list[Event] = [(MAIN, parts[-1]), (MAIN, xsens(12))]
    assert run(rebuilt, rest, 9) == run(original, rest, 9) != []


def test_an_unknown_version_is_refused_by_number() -> None:
    core = CaptureCore(AxisDecoder(CONFIG), [MAIN])
    run(core, [(MAIN, axis(1))])
    obj = json.loads(capture_state.encode(core.state()))
    obj["version"] = STATE_VERSION + 1
    with pytest.raises(StateError, match=f"version {STATE_VERSION + 1} is not one this capture reads"):
        capture_state.decode(json.dumps(obj).encode())


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_random_bytes_only_raise_state_error(blob) -> None:
    with contextlib.suppress(StateError):
        capture_state.decode(blob)


def _sample_state() -> dict[str, Any]:
    core = CaptureCore(AxisDecoder(CONFIG), [MAIN, SIDE, STREAM], merge_window_s=10.0,
                       stream_ports=frozenset({STREAM}))
    head, tail = split_datagram(axis(5), 1024)
    run(core, [(SIDE, axis(1)), (MAIN, axis(1)), (MAIN, axis(3)), (MAIN, b"x"), (MAIN, axis(1, avatar=1)),
               (STREAM, axis(4)), *[(SIDE, p) for p in split_datagram(axis(4), 1024)], (MAIN, head), (SIDE, tail)])
    obj: dict[str, Any] = json.loads(capture_state.encode(core.state()))
    assert obj["performers"][0]["merger"]["pending"]  # 3 waits for 2 from the side path
    assert {a["kind"] for a in obj["assemblers"]} == {"whole", "axis_split"}
    return obj


def _xsens_sample_state() -> dict[str, Any]:
    core = CaptureCore(XsensDecoder("auto"), [MAIN, SIDE], merge_window_s=10.0)
    events = [*xsens_events("body", 10, SIDE), *xsens_events("body", 10, MAIN)]
    events += [e for kind, n in [("body", 12), ("name", 0), ("segments", 0), ("points", 0), ("props_only", 3),
                                 ("split_lost", 13)] for e in xsens_events(kind, n, MAIN)]
    run(core, events)
    obj: dict[str, Any] = json.loads(capture_state.encode(core.state()))
    assert obj["characters"] and obj["props"] and obj["meta_datagrams"] and obj["performers"][0]["merger"]["pending"]
    return obj


SAMPLE = _sample_state()
XSENS_SAMPLE = _xsens_sample_state()
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for k, v in enumerate(obj):
            out += _paths(v, (*prefix, k))
    return out


PATHS = [("axis", p) for p in _paths(SAMPLE)[1:]] + [("xsens", p) for p in _paths(XSENS_SAMPLE)[1:]]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(PATHS), json_values, st.booleans())
def test_a_damaged_state_only_raises_state_error(where, value, delete) -> None:
    """Any one field of a real state replaced (or removed): a StateError, or a record that a core
    is built from (or that raises StateError there), never another exception."""
    source, path = where
    obj = json.loads(json.dumps(SAMPLE if source == "axis" else XSENS_SAMPLE))
    parent = obj
    for key in path[:-1]:
        parent = parent[key]
    if delete:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    try:
        record = capture_state.decode(json.dumps(obj).encode())
        core = CaptureCore.from_state(record, AxisDecoder(CONFIG) if source == "axis" else XsensDecoder("auto"))
        core.ledger()
        for port in core.ports:
            core.feed(Datagram(0, port, "127.0.0.1", axis(6) if source == "axis" else xsens(14)), 0.0)
        core.flush()
    except StateError:
        pass


def test_a_pickled_checkpoint_from_before_the_record_is_not_read(tmp_path, caplog) -> None:
    (tmp_path / checkpoint.LEGACY_FILENAME).write_bytes(pickle.dumps({"core": "anything"}))
    with caplog.at_level(logging.WARNING):
        assert checkpoint.load(tmp_path) is None
    assert "older capture" in caplog.text


def test_a_checkpoint_round_trips_and_a_damaged_one_is_ignored(tmp_path) -> None:
    core = CaptureCore(AxisDecoder(CONFIG), [MAIN])
    run(core, [(MAIN, axis(i)) for i in range(5)])
    checkpoint.save(tmp_path, checkpoint.Checkpoint(3, 9, 5, core.state()))
    loaded = checkpoint.load(tmp_path)
    assert loaded is not None and (loaded.take_start, loaded.position, loaded.produced) == (3, 9, 5)
    assert loaded.capture == core.state()
    (tmp_path / checkpoint.FILENAME).write_bytes(b'{"take_start": 3}')
    assert checkpoint.load(tmp_path) is None
