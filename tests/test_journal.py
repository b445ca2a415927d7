"""mocapline.client.Journal: a frame's result and its position in one record, a torn record cut."""

from __future__ import annotations

from mocapline.client import Journal, JournalEntry


def test_results_and_positions_in_one_record_survive_a_reopen(tmp_path) -> None:
    j = Journal(tmp_path)
    assert j.load() is None
    j.record(b"e" * 16, 0, b"zero")
    j.record(b"e" * 16, 1, None)  # a frame with nothing to keep still moves the position
    j.save(b"e" * 16, 1)  # already there: nothing written
    j.save(b"f" * 16, 5)  # a position alone (skipped frames, a new epoch)
    j.close()
    again = Journal(tmp_path)
    assert again.load() == (b"f" * 16, 5)
    assert list(again.entries()) == [JournalEntry(b"e" * 16, 0, b"zero")]
    assert again.log.last_key == 2
    again.close()


def test_a_record_torn_by_a_kill_is_cut_and_the_position_is_the_one_before(tmp_path) -> None:
    j = Journal(tmp_path)
    for k in range(3):
        j.record(b"e" * 16, k, str(k).encode())
    j.close()
    [segment] = sorted(tmp_path.glob("journal-*.seg"))
    with open(segment, "ab") as fh:
        fh.write(b"\x03\x00\x00\x00\x00\x00\x00\x00\x40\x00")  # the start of a fourth record
    again = Journal(tmp_path)
    assert again.load() == (b"e" * 16, 2)
    assert [e.result for e in again.entries()] == [b"0", b"1", b"2"]
    again.record(b"e" * 16, 3, b"3")
    assert [e.frame_id for e in again.entries()] == [0, 1, 2, 3]
    again.close()
