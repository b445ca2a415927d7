"""The durable log: append, recover after a torn write, rotate, read back from a key, drop."""

from __future__ import annotations

import os

import pytest

from mocapline.core.segmentlog import LogConfig, SegmentLog


def test_records_come_back_in_order_after_reopen(tmp_path):
    log = SegmentLog(tmp_path, "t", LogConfig(fsync="always"))
    for k in range(50):
        log.append(k, f"r{k}".encode())
    log.close()
    again = SegmentLog(tmp_path, "t")
    assert again.last == (49, b"r49")
    assert [d for _, d in again.read_from(45)] == [b"r45", b"r46", b"r47", b"r48", b"r49"]


def test_a_torn_tail_is_cut_and_the_log_goes_on(tmp_path):
    log = SegmentLog(tmp_path, "t", LogConfig(fsync="never"))
    for k in range(10):
        log.append(k, bytes([k]) * 100)
    log.close()
    seg = log.segments()[-1]
    os.truncate(seg, seg.stat().st_size - 30)  # the last record half written
    again = SegmentLog(tmp_path, "t")
    assert again.last is not None and again.last[0] == 8
    assert again.torn_bytes == 116 - 30
    again.append(9, b"new")
    again.close()
    assert [k for k, _ in SegmentLog(tmp_path, "t").read_from(0)] == list(range(10))


def test_rotation_by_size_and_drop_before_keeps_what_is_not_acknowledged(tmp_path):
    log = SegmentLog(tmp_path, "t", LogConfig(max_segment_bytes=1000, fsync="never"))
    for k in range(100):
        log.append(k, b"x" * 90)
    assert len(log.segments()) > 5
    log.drop_before(57)
    assert [k for k, _ in log.read_from(0)][0] <= 57
    assert [k for k, _ in log.read_from(57)] == list(range(57, 100))
    log.drop_before(10_000)
    assert len(log.segments()) == 1  # the segment being written is never dropped
    assert log.read_from(99).__next__()[0] == 99


def test_equal_keys_across_a_rotation_are_all_read_back(tmp_path):
    log = SegmentLog(tmp_path, "t", LogConfig(max_segment_bytes=100, fsync="never"))
    keys = [0, 0, 0, 1, 1, 1, 1, 2, 2, 2]
    for n, k in enumerate(keys):
        log.append(k, b"y" * 40 + bytes([n]))
    assert [d[-1] for _, d in log.read_from(1)] == [3, 4, 5, 6, 7, 8, 9]
    log.drop_before(1)
    assert [d[-1] for _, d in log.read_from(1)] == [3, 4, 5, 6, 7, 8, 9]


def test_retention_removes_the_oldest_segments(tmp_path):
    log = SegmentLog(tmp_path, "t", LogConfig(max_segment_bytes=1000, retain_bytes=3000, fsync="never"))
    for k in range(200):
        log.append(k, b"z" * 90)
    assert log.disk_bytes() <= 3000 + 1100
    assert next(log.read_from(0))[0] > 0


def test_keys_never_decrease_and_bad_policies_are_refused(tmp_path):
    log = SegmentLog(tmp_path, "t", LogConfig(fsync="never"))
    log.append(5, b"a")
    with pytest.raises(ValueError, match="never decrease"):
        log.append(4, b"b")
    with pytest.raises(ValueError, match="fsync policy"):
        LogConfig(fsync="sometimes")


def test_rotation_by_age(tmp_path, monkeypatch):
    import mocapline.core.segmentlog as sl

    clock = [1000.0]
    monkeypatch.setattr(sl.time, "monotonic", lambda: clock[0])
    log = SegmentLog(tmp_path, "t", LogConfig(max_segment_age_s=10, fsync="never"))
    log.append(0, b"a")
    clock[0] += 11
    log.append(1, b"b")
    assert len(log.segments()) == 2
