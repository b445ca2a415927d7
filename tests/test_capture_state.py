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

from mocapline.core.udp import Datagram
from mocapline.formats.axis_bvh import AxisBvhConfig, encode_datagram
from mocapline.formats.mxtp02 import encode_mxtp02, split_mxtp02
from mocapline.formats.skeleton import get_skeleton
from mocapline.services.capture import checkpoint
from mocapline.services.capture import state as capture_state
from mocapline.services.capture.core import AxisDecoder, CaptureCore, XsensDecoder
from mocapline.services.capture.state import STATE_VERSION, StateError

MAIN, SIDE = 7014, 7015
CONFIG = AxisBvhConfig()
CHANNELS = np.zeros((len(get_skeleton(CONFIG.skeleton).bones), 6))
CHANNELS[0, 1] = 95.0


def axis(index: int, avatar: int = 0) -> bytes:
    return encode_datagram(index, CHANNELS, config=CONFIG, avatar_index=avatar, avatar_name=f"A{avatar}")


def xsens(counter: int) -> bytes:
    positions = np.zeros((23, 3))
    positions[:, 2] = 0.95
    quaternions = np.tile([1.0, 0.0, 0.0, 0.0], (23, 1))
    return encode_mxtp02(counter, positions, quaternions)


Event = tuple[int, bytes]  # (port, datagram)


def run(core: CaptureCore, events: list[Event], start: int = 0) -> list[tuple[int, int, int, int]]:
    out = []
    for k, (port, data) in enumerate(events, start):
        out += core.feed(Datagram(1_000_000 * k, port, "127.0.0.1", data), k * 0.004)
    return [(f.posture_index, f.avatar_index, f.source_port, f.segment) for f in out]


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
    core = CaptureCore(AxisDecoder(CONFIG), [MAIN, SIDE], merge_window_s=10.0)
    run(core, [(SIDE, axis(1)), (MAIN, axis(1)), (MAIN, axis(3)), (MAIN, b"x"), (MAIN, axis(1, avatar=1))])
    obj: dict[str, Any] = json.loads(capture_state.encode(core.state()))
    assert obj["performers"][0]["merger"]["pending"]  # 3 waits for 2 from the side path
    return obj


SAMPLE = _sample_state()
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


PATHS = _paths(SAMPLE)[1:]


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(PATHS), json_values, st.booleans())
def test_a_damaged_state_only_raises_state_error(path, value, delete) -> None:
    """Any one field of a real state replaced (or removed): a StateError, or a record that a core
    is built from (or that raises StateError there), never another exception."""
    obj = json.loads(json.dumps(SAMPLE))
    parent = obj
    for key in path[:-1]:
        parent = parent[key]
    if delete:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    try:
        record = capture_state.decode(json.dumps(obj).encode())
        core = CaptureCore.from_state(record, AxisDecoder(CONFIG))
        core.ledger()
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
