import pytest

from mocapline.services.capture.merge import PathMerger

MAIN, SIDE = 7014, 7015


def run(events: list[tuple[int, int]], window: float = 0.05, dt: float = 0.001) -> tuple[PathMerger[int], list[int]]:
    m: PathMerger[int] = PathMerger([MAIN, SIDE], window_s=window)
    out: list[int] = []
    t = 0.0
    for path, idx in events:
        out += [i for i, _ in m.push(path, idx, idx, t)]
        t += dt
    out += [i for i, _ in m.flush()]
    return m, out


def interleave(main: list[int], side: list[int]) -> list[tuple[int, int]]:
    events = []
    for i in sorted(set(main) | set(side)):
        if i in main:
            events.append((MAIN, i))
        if i in side:
            events.append((SIDE, i))
    return events


def identity_holds(m: PathMerger[int]) -> bool:
    received = sum(p.ledger.received for p in m.paths.values())
    return received == m.merged.unique + m.duplicates + m.cross_path_copies + m.late_frames


def test_single_path_emits_immediately_and_in_order() -> None:
    m: PathMerger[int] = PathMerger([MAIN])
    assert [i for i, _ in m.push(MAIN, 5, 5, 0.0)] == [5]
    assert [i for i, _ in m.push(MAIN, 8, 8, 0.0)] == [8]  # gap final at once: nothing to wait for
    assert m.merged.missing == 2 and m.pending == 0


def test_gap_on_main_only_is_recovered_from_side() -> None:
    full = list(range(100, 200))
    main = [i for i in full if i not in (120, 121, 150)]
    m, out = run(interleave(main, full))
    assert out == full
    assert m.merged.missing == 0
    assert m.paths[MAIN].ledger.missing == 3 and m.paths[SIDE].ledger.missing == 0
    assert identity_holds(m)


def test_gap_on_both_paths_is_recorded() -> None:
    full = list(range(100, 200))
    both = [i for i in full if i not in (130, 131)]
    m, out = run(interleave(both, both))
    assert out == both
    assert m.merged.missing == 2 and m.merged.missing_ranges == [(130, 131)]
    assert identity_holds(m)


def test_different_gaps_are_all_recovered_even_when_side_lags() -> None:
    full = list(range(0, 300))
    main = [i for i in full if i % 37 != 5]
    side = [i for i in full if i % 41 != 7]
    # side arrives 3 frames behind main
    events = []
    for k in range(len(full) + 3):
        if k < len(full) and full[k] in main:
            events.append((MAIN, full[k]))
        j = k - 3
        if 0 <= j < len(full) and full[j] in side:
            events.append((SIDE, full[j]))
    m, out = run(events, window=1.0)
    assert out == full
    assert m.merged.missing == 0 and m.late_frames == 0
    assert identity_holds(m)


def test_dead_side_path_only_delays_by_window() -> None:
    m: PathMerger[int] = PathMerger([MAIN, SIDE], window_s=0.05)
    m.push(SIDE, 9, 9, 0.0)  # side was live once, then died
    out = [i for i, _ in m.push(MAIN, 10, 10, 1.0)]
    out += [i for i, _ in m.push(MAIN, 12, 12, 1.001)]  # 11 missing everywhere
    assert out == [10]  # a push never judges silence: the caller polls once it has pushed all it has
    assert [i for i, _ in m.poll(1.001)] == [12]  # side has been silent for a second
    assert m.merged.missing_ranges == [(11, 11)] and m.late_frames == 0


def test_copies_pushed_after_the_other_paths_in_one_batch_still_fill_the_gaps() -> None:
    """A loaded host: main's receive thread queued its whole burst before side's ran, and the
    batch is pushed long after side was last heard. Side's copies later in the batch are not late."""
    m: PathMerger[int] = PathMerger([MAIN, SIDE], window_s=0.25)
    full = list(range(0, 40))
    batch = [(MAIN, i) for i in full if i not in (10, 11, 12)] + [(SIDE, i) for i in full]
    out = [i for path, idx in batch for i, _ in m.push(path, idx, idx, 5.0)]
    out += [i for i, _ in m.poll(5.0)]
    assert out == full and m.late_frames == 0 and m.merged.missing == 0
    assert identity_holds(m)


def test_live_lagging_path_holds_gap_until_timeout() -> None:
    m: PathMerger[int] = PathMerger([MAIN, SIDE], window_s=0.05)
    m.push(MAIN, 1, 1, 0.0)
    m.push(SIDE, 1, 1, 0.0)
    assert m.push(MAIN, 3, 3, 0.01) == []  # side (live, at 1) may still bring 2
    assert m.poll(0.03) == []
    assert [i for i, _ in m.poll(0.07)] == [3]
    assert m.merged.missing == 1
    assert [i for i, _ in m.push(SIDE, 2, 2, 0.08)] == [] and m.late_frames == 1


def test_duplicates_within_a_path_are_source_duplicates() -> None:
    m, out = run([(MAIN, 1), (MAIN, 2), (MAIN, 2), (SIDE, 1), (SIDE, 2)])
    assert out == [1, 2]
    assert m.paths[MAIN].ledger.duplicates == 1 and m.duplicates == 1
    assert m.cross_path_copies == 2
    assert identity_holds(m)


def test_a_duplicate_seen_on_both_paths_counts_once() -> None:
    m, out = run([(MAIN, 1), (SIDE, 1), (MAIN, 2), (SIDE, 2), (MAIN, 2), (SIDE, 2)])
    assert out == [1, 2]
    assert m.duplicates == 1 and m.paths[SIDE].ledger.duplicates == 1
    assert m.cross_path_copies == 3
    assert identity_holds(m)


def test_backward_jump_starts_new_segment() -> None:
    events = [(MAIN, i) for i in range(1000, 1010)] + [(MAIN, i) for i in range(0, 5)]
    m, out = run(events)
    assert out == list(range(1000, 1010)) + list(range(0, 5))
    assert m.merged.backward == 1 and m.segment == 1
    assert identity_holds(m)


def test_backward_jump_on_both_paths() -> None:
    seg1 = list(range(50, 60))
    seg2 = list(range(0, 10))
    events = interleave(seg1, seg1) + interleave(seg2, seg2)
    m, out = run(events)
    assert out == seg1 + seg2
    assert m.merged.backward == 1 and m.cross_path_copies == 20
    assert identity_holds(m)


def lagging(lag_s: float, skip_main: set[int], skip_side: set[int], frames: int = 600,
            rate: float = 60.0) -> tuple[PathMerger[int], list[int]]:
    """Main delivers each index ``lag_s`` after side, both at ``rate``; polled every 5 ms."""
    m: PathMerger[int] = PathMerger([MAIN, SIDE], window_s=0.05)
    events = []
    for k in range(frames):
        t = k / rate
        if k not in skip_side:
            events.append((t, SIDE, k))
        if k not in skip_main:
            events.append((t + lag_s, MAIN, k))
    events.sort()
    out: list[int] = []
    now = 0.0
    for t, path, idx in events:
        while now + 0.005 < t:
            now += 0.005
            out += [i for i, _ in m.poll(now)]
        out += [i for i, _ in m.push(path, idx, idx, t)]
    out += [i for i, _ in m.flush()]
    return m, out


@pytest.mark.parametrize("lag_s", [0.15, 0.5])
def test_main_lagging_side_loses_nothing_to_the_window(lag_s: float) -> None:
    """A gap waits for a live lagging path however far behind it is: skips on the side path only
    are filled from the main path 150 / 500 ms later, skips on main only from side; nothing is
    late, and only the indices both paths lack are missing."""
    skip_side, skip_main, both = {100, 101, 300}, {200, 450, 451}, {500}
    m, out = lagging(lag_s, skip_main | both, skip_side | both)
    assert out == [i for i in range(600) if i not in both]
    assert m.late_frames == 0 and m.merged.missing == 1
    assert identity_holds(m)


def test_a_path_silent_for_longer_than_the_window_gives_late_copies_classified_late() -> None:
    """Main stops for 300 ms (silent), side skips 100 meanwhile: the gap is final without main;
    main's copy of 100 arrives later, is a late frame, and is classified ``late``, not side_only."""
    from mocapline.core.verdict import classify_missing

    m: PathMerger[int] = PathMerger([MAIN, SIDE], window_s=0.05)
    out = []
    for k in range(99):
        out += [i for i, _ in m.push(SIDE, k, k, k * 0.016)]
        out += [i for i, _ in m.push(MAIN, k, k, k * 0.016 + 0.001)]
    t = 99 * 0.016
    out += [i for i, _ in m.push(SIDE, 99, 99, t)]
    out += [i for i, _ in m.push(SIDE, 101, 101, t + 0.016)]  # main silent from here
    assert 101 not in out  # main was live a moment ago: wait
    out += [i for i, _ in m.poll(t + 0.2)]  # main silent > window: the gap at 100 is final
    assert out[-1] == 101
    m.push(MAIN, 99, 99, t + 0.3)
    m.push(MAIN, 100, 100, t + 0.31)  # the late copy
    assert m.late_frames == 1 and m.late_indices == [100]
    assert identity_holds(m)
    classes = classify_missing(m.paths[MAIN].ledger.missing_ranges, m.paths[SIDE].ledger.missing_ranges,
                               (0, 101), late=[[100, 100]])
    assert classes["late"] == [[100, 100]] and classes["side_only"] == []
