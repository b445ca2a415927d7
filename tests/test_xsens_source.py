"""Xsens as a full source: split samples reassembled (missing only when a part never came),
pre-2019 headers, the position-unit check, each character ID a performer."""

from __future__ import annotations

import logging
import struct

import numpy as np
import pytest

from mocapline.core.bodies import GMR_BODY_INDEX
from mocapline.core.udp import Datagram
from mocapline.formats.mxtp02 import HEADER, MxtpAssembler, encode_mxtp02, parse_mxtp02, split_mxtp02
from mocapline.services.capture.core import CaptureCore, XsensDecoder

MAIN, SIDE = 9763, 9764


def random_pose(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """float32-exact positions (m, pelvis near 0.95 m) and unit quaternions with w >= 0."""
    rng = np.random.default_rng(seed)
    positions = rng.normal(0.0, 0.3, (23, 3))
    positions[:, 2] += 0.95
    positions[GMR_BODY_INDEX["Hips"], 2] = 0.95 + 0.01 * rng.standard_normal()
    q = rng.normal(size=(23, 4))
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    q *= np.where(q[:, :1] < 0.0, -1.0, 1.0)
    return positions.astype(np.float32).astype(np.float64), q.astype(np.float32).astype(np.float64)


def sample(counter: int, character: int = 0, unit: str = "m") -> bytes:
    positions, quaternions = random_pose(counter % 50)
    return encode_mxtp02(counter, positions, quaternions, character_id=character, position_unit=unit)


def feed(core: CaptureCore, items: list[tuple[int, bytes]]) -> list:
    frames = []
    for k, (port, data) in enumerate(items):
        frames += core.feed(Datagram(k, port, "127.0.0.1", data), k * 0.001)
    return frames + core.flush()


def test_split_sample_round_trip_in_any_order():
    whole = sample(7)
    parts = split_mxtp02(whole, 10)
    assert len(parts) == 3 and [HEADER.unpack_from(p)[2] for p in parts] == [0, 1, 0x82]
    assembler = MxtpAssembler()
    assert assembler.push(parts[2]) is None and assembler.push(parts[0]) is None
    assert assembler.push(parts[1]) == whole
    assert assembler.pending == 0 and assembler.dropped == 0


def test_a_sample_is_missing_only_when_a_part_never_came():
    items = []
    for counter in range(100, 120):
        parts = split_mxtp02(sample(counter), 8)
        if counter == 105:
            parts = parts[:-1]  # its last part never came
        if counter == 110:
            parts = parts[::-1]  # all parts, out of order
        items += [(MAIN, p) for p in parts]
    core = CaptureCore(XsensDecoder(), [MAIN])
    frames = feed(core, items)
    assert [f.posture_index for f in frames] == [c for c in range(100, 120) if c != 105]
    led = core.ledger()
    assert led["source_missing_indices"] == 1 and led["missing_ranges"] == [[105, 105]]
    assert led["rejected_by_reason"] == {"fragment_incomplete": 2}  # the two parts that came
    assert led["input_pending"] == 0


def test_parts_on_two_paths_complete_on_each_and_merge():
    items = []
    for counter in range(10):
        parts = split_mxtp02(sample(counter), 12)
        main_parts = parts if counter != 4 else parts[:1]
        items += [(MAIN, p) for p in main_parts] + [(SIDE, p) for p in parts]
    core = CaptureCore(XsensDecoder(), [MAIN, SIDE], merge_window_s=1.0)
    frames = feed(core, items)
    assert [f.posture_index for f in frames] == list(range(10))
    led = core.ledger()
    assert led["source_missing_indices"] == 0
    assert led["paths"][str(MAIN)]["source_missing_ranges"] == [[4, 4]]


def test_pre_2019_header_with_zero_segment_counts():
    data = bytearray(sample(3))
    data[17:20] = b"\0\0\0"  # body, props, fingers: reserved (zero) before MVN 2019
    frame = parse_mxtp02(bytes(data))
    assert frame.sample_counter == 3
    np.testing.assert_array_equal(frame.positions, parse_mxtp02(sample(3)).positions)


def test_each_character_is_a_performer():
    items = [(MAIN, sample(c, character=ch)) for c in range(50, 60) for ch in (0, 1) if not (ch == 1 and c == 55)]
    core = CaptureCore(XsensDecoder(), [MAIN])
    frames = feed(core, items)
    assert sorted({f.avatar_index for f in frames}) == [0, 1]
    led = core.ledger()
    assert led["source_duplicate_indices"] == 0 and led["source_unique_frames"] == 19
    assert led["performers"]["0"]["source_missing_indices"] == 0
    assert led["performers"]["1"]["missing_ranges"] == [[55, 55]]


def test_centimetres_read_as_metres_warn_with_the_flag_that_fixes_it(caplog: pytest.LogCaptureFixture):
    core = CaptureCore(XsensDecoder("m"), [MAIN])
    with caplog.at_level(logging.WARNING):
        feed(core, [(MAIN, sample(c, unit="cm")) for c in range(5)])
    assert "--position-unit cm" in caplog.text
    assert caplog.text.count("pelvis") == 1  # once, not per frame
    check = core.ledger()["unit_check"]
    assert check["plausible"] is False and check["suggested_unit"] == "cm"


def test_position_unit_auto_reads_centimetres():
    core = CaptureCore(XsensDecoder("auto"), [MAIN])
    frames = feed(core, [(MAIN, sample(c, unit="cm")) for c in range(3)])
    expected = random_pose(0)[0][GMR_BODY_INDEX["Hips"], 2]
    assert frames[0].positions[GMR_BODY_INDEX["Hips"], 2] == pytest.approx(expected, abs=1e-5)
    assert core.ledger()["unit_check"]["read_as"] == "cm"


def test_right_unit_passes_silently(caplog: pytest.LogCaptureFixture):
    core = CaptureCore(XsensDecoder("m"), [MAIN])
    with caplog.at_level(logging.WARNING):
        feed(core, [(MAIN, sample(1))])
    assert "pelvis" not in caplog.text and core.ledger()["unit_check"]["plausible"] is True


def test_split_header_fields():
    parts = split_mxtp02(sample(1), 23)
    assert len(parts) == 1 and struct.unpack_from(">B", parts[0], 10)[0] == 0x80
