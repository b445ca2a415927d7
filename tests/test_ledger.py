from mocapline.core.ledger import Seen, SequenceLedger


def feed(indices: list[int]) -> tuple[SequenceLedger, list[Seen]]:
    led = SequenceLedger()
    return led, [led.observe(i) for i in indices]


def test_take008_counts() -> None:
    led, _ = feed(list(range(9368, 12519)) + [12518])
    assert (led.received, led.unique, led.duplicates, led.missing, led.backward) == (3152, 3151, 1, 0, 0)
    assert (led.first, led.last) == (9368, 12518)


def test_gap_records_range() -> None:
    led, seen = feed([100, 101, 104, 105, 110])
    assert seen[2] is Seen.GAP
    assert led.missing == 2 + 4
    assert led.missing_ranges == [(102, 103), (106, 109)]
    assert led.missing_indices() == [102, 103, 106, 107, 108, 109]


def test_backward_jump_starts_segment_and_frame_is_new() -> None:
    led, seen = feed([500, 501, 502, 3, 4, 4])
    assert seen[3] is Seen.BACKWARD and seen[3].is_new
    assert seen[5] is Seen.DUPLICATE and not seen[5].is_new
    assert (led.unique, led.backward, led.segment, led.duplicates) == (5, 1, 1, 1)
    assert led.backward_jumps == [(502, 3)]


def test_as_dict_uses_prefix() -> None:
    led, _ = feed([1, 2, 2])
    d = led.as_dict("source_")
    assert d["source_received"] == 3 and d["source_duplicate_indices"] == 1 and d["source_unique_frames"] == 2


def test_each_segment_keeps_its_own_counts() -> None:
    led, _ = feed([500, 501, 503, 3, 4, 4, 5, 2, 3])
    assert led.as_dict()["segments"] == 3
    assert led.segment_counts() == [
        {"segment": 0, "first_index": 500, "last_index": 503, "unique_frames": 3, "missing_indices": 1},
        {"segment": 1, "first_index": 3, "last_index": 5, "unique_frames": 3, "missing_indices": 0},
        {"segment": 2, "first_index": 2, "last_index": 3, "unique_frames": 2, "missing_indices": 0},
    ]


def test_segment_detail_is_bounded_and_numbered() -> None:
    from mocapline.core.ledger import MAX_SEGMENTS

    led, _ = feed([i for _ in range(MAX_SEGMENTS + 10) for i in range(10)])
    counts = led.segment_counts()
    assert len(counts) == MAX_SEGMENTS and led.as_dict()["segments"] == MAX_SEGMENTS + 10
    assert counts[-1]["segment"] == MAX_SEGMENTS + 9 and counts[0]["segment"] == 10
    assert sum(c["unique_frames"] for c in counts) == 10 * MAX_SEGMENTS  # each loop complete
