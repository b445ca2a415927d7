"""Several performers through the whole pipeline (`mocapline demo` as processes): one ledger and
one verdict per performer, gaps in one performer classified for that performer only."""

from __future__ import annotations

import json

import pytest

from mocapline.tools.pipeline.demo import main as demo_main

pytestmark = pytest.mark.integration


def run_demo(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:
    code = demo_main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_three_performers_over_tcp_are_each_conserved(capsys):
    code, ledger = run_demo(capsys, "--performers", "3", "--transport", "tcp", "--frames", "240", "--rate", "240")
    assert code == 0 and ledger["unique_frames_conserved"] == 1
    assert ledger["source_unique_frames"] == ledger["viewer_applied"] == 720
    performers = ledger["performers"]
    assert sorted(performers) == ["0", "1", "2"]
    for key, per in performers.items():
        assert per["unique_frames_conserved"] == 1, key
        assert per["avatar_name"] == f"Performer{int(key) + 1}"
        assert per["source_unique_frames"] == per["gmr_processed"] == per["zmq_sent"] == per["viewer_applied"] == 240


def test_gaps_in_one_performer_only_are_classified_for_it(capsys):
    code, ledger = run_demo(capsys, "--performers", "3", "--frames", "240", "--rate", "240", "--first-index", "1000",
                            "--drop-performer", "1:1100-1103", "--drop-main", "1150")
    assert code == 1 and ledger["unique_frames_conserved"] == 0
    per = ledger["performers"]
    assert per["1"]["unique_frames_conserved"] == 0
    assert per["1"]["missing_by_path"]["both"] == [[1100, 1103]]
    for key in ("0", "2"):
        assert per[key]["missing_by_path"]["both"] == [], key
    for key in ("0", "1", "2"):  # the main-path loss hit every performer and the side path had it
        assert per[key]["missing_by_path"]["main_only"] == [[1150, 1150]], key
    assert per["0"]["source_missing_indices"] == per["2"]["source_missing_indices"] == 1
    assert per["1"]["source_missing_indices"] == 5


def test_three_performers_over_two_retarget_workers(capsys):
    """`mocapline demo --retarget-workers 2`: each performer owned by one worker, each conserved,
    the ledger's retarget counts each frame once and lists the workers."""
    code, ledger = run_demo(capsys, "--performers", "3", "--retarget-workers", "2", "--frames", "240", "--rate", "240")
    assert code == 0 and ledger["unique_frames_conserved"] == 1
    assert ledger["gmr_processed"] == ledger["viewer_applied"] == 720
    workers = ledger["retarget_workers"]
    assert sorted(workers) == ["w1", "w2"]
    assert sorted(k for w in workers.values() for k in w["owned"]) == [0, 1, 2]
    assert sum(w["frames"] for w in workers.values()) == 720
    for key, per in ledger["performers"].items():
        assert per["unique_frames_conserved"] == 1 and per["gmr_processed"] == 240, key
