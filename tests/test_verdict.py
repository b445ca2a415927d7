from dataclasses import replace
from typing import Any

from helpers import published

from mocapline.core.counters import (
    CaptureCounts,
    ConsumerCounts,
    PathCounts,
    PipelineLedger,
    RetargetCounts,
    SegmentCounts,
    StreamerCounts,
    ViewerCounts,
    zero,
)
from mocapline.core.verdict import (
    BOTH,
    LEDGER_FIELDS,
    MAIN_ONLY,
    SIDE_ONLY,
    UNKNOWN,
    classify_missing,
    conserved,
    state,
    with_verdict,
)
from mocapline.services.auditor.audit import audit


def counts(**over: Any) -> PipelineLedger:
    base = dict(
        source_received=3152, source_unique_frames=3151, source_missing_indices=0, source_duplicate_indices=1,
        source_backward_indices=0, rejected_datagrams=0, first_posture_index=9368, last_posture_index=12518,
        gmr_processed=3151, motion_generated=3151, zmq_sent=3151, viewer_applied=3151, input_pending=0,
        robot_pending=0,
    )
    base.update(over)
    return PipelineLedger(**base)


def test_take008_is_conserved() -> None:
    out = with_verdict(counts())
    assert out["unique_frames_conserved"] == 1
    assert list(out)[: len(LEDGER_FIELDS)] == list(LEDGER_FIELDS)


def test_any_layer_off_by_one_breaks_conservation() -> None:
    for key in ("gmr_processed", "motion_generated", "zmq_sent", "viewer_applied"):
        assert not conserved(counts(**{key: 3150}))
    assert not conserved(counts(source_missing_indices=1))
    assert not conserved(counts(input_pending=2))
    assert not conserved(counts(robot_pending=1))
    assert not conserved(counts(gmr_processed=None))


def test_without_a_viewer_the_viewer_is_not_required() -> None:
    assert conserved(counts(viewer_applied=None))


def test_classification() -> None:
    out = classify_missing([[10, 12], [50, 50]], [[11, 11], [70, 71]], (0, 100))
    assert out[MAIN_ONLY] == [[10, 10], [12, 12], [50, 50]]
    assert out[BOTH] == [[11, 11]]
    assert out[SIDE_ONLY] == [[70, 71]]
    assert out[UNKNOWN] == []


def test_classification_without_side_data() -> None:
    out = classify_missing([[5, 6]], None, None)
    assert out[UNKNOWN] == [[5, 6]] and out[MAIN_ONLY] == []


def test_audit_from_service_heartbeats() -> None:
    capture = published(
        CaptureCounts, source_received=200, source_unique_frames=100, rejected_datagrams=3, first_posture_index=0,
        last_posture_index=99, human_frames_sent=100, paths={
            "7014": zero(PathCounts, role="main", missing_ranges=[[20, 20]], first_index=0, last_index=99),
            "7015": zero(PathCounts, role="side", missing_ranges=[[40, 40]], first_index=0, last_index=99),
        })
    snap = {"services": {
        "capture": capture,
        "retarget": published(RetargetCounts, gmr_processed=100, frames_in=100, robot_frames_sent=100),
        "streamer": published(StreamerCounts, frames_in=100, motion_generated=100, zmq_sent=100),
        "viewer": published(ViewerCounts, viewer_applied=100),
    }}
    v = audit(snap)
    assert v["unique_frames_conserved"] == 1
    assert v["missing_by_path"][MAIN_ONLY] == [[20, 20]]  # recovered by the merge
    assert v["missing_by_path"][BOTH] == []
    assert v["missing_by_path"][SIDE_ONLY] == [[40, 40]]
    snap["services"]["streamer"]["pending"] = 4
    assert audit(snap)["unique_frames_conserved"] == 0
    snap["services"]["streamer"]["pending"] = 0
    snap["services"]["retarget"]["gmr_processed"] = 99
    assert audit(snap)["unique_frames_conserved"] == 0


def looped(loops: int, length: int = 1200) -> PipelineLedger:
    """Counts of a take that looped ``loops`` times (each loop a backward jump to index 1000)."""
    per_segment = [SegmentCounts(k, 1000, 1000 + length - 1, unique_frames=length, missing_indices=0)
                   for k in range(loops + 1)]
    total = length * (loops + 1)
    return counts(source_received=total, source_unique_frames=total, source_duplicate_indices=0,
                  source_backward_indices=loops, first_posture_index=1000, last_posture_index=1000 + length - 1,
                  gmr_processed=total, motion_generated=total, zmq_sent=total, viewer_applied=total,
                  segments=loops + 1, per_segment=per_segment)


def test_a_looping_take_is_conserved_segment_by_segment() -> None:
    for loops in (1, 3, 40):
        out = with_verdict(looped(loops))
        assert out["unique_frames_conserved"] == 1 and out["state"] == "conserved"
        assert out["source_backward_indices"] == loops  # the seeds' field is kept, and counted


def test_a_segment_with_a_gap_is_not_conserved() -> None:
    def segment(c: PipelineLedger, k: int, **change: int) -> PipelineLedger:
        segments = list(c.per_segment or [])
        segments[k] = replace(segments[k], **change)
        return replace(c, per_segment=segments)

    assert conserved(looped(2))
    assert not conserved(segment(looped(2), 1, missing_indices=3))
    # segments that do not add up to the total: a frame counted nowhere
    assert not conserved(segment(looped(2), 2, unique_frames=1199))
    c = looped(70)  # capture keeps the latest segments only: the totals still decide
    assert conserved(replace(c, per_segment=(c.per_segment or [])[-64:]))


def test_state_mid_take_is_frames_in_flight_not_a_loss() -> None:
    mid = counts(gmr_processed=3149, motion_generated=3148, zmq_sent=3148, viewer_applied=3140)
    assert state(mid, final=False) == "running, 11 in flight"
    assert with_verdict(mid, final=False)["unique_frames_conserved"] == 0
    assert state(mid, final=True).startswith("not conserved: source_unique_frames 3151 > gmr_processed 3149")
    assert state(counts(source_missing_indices=2), final=False).startswith("not conserved: 2 posture indices")


def test_the_ledger_carries_rejects_merge_bridged_consumers_and_the_output_balance() -> None:
    """Issue 12: rejected_by_reason, cross_path_copies, late_frames, bridged and per-consumer
    counts reach the verdict (up's final ledger, status --json); the streamer's output balances."""
    from mocapline.services.auditor.audit import audit

    services = {
        "capture": published(CaptureCounts, source_unique_frames=10, rejected_by_reason={"bad_token": 2},
                             cross_path_copies=9, late_frames=1, late_ranges=[[4, 4]], human_frames_sent=10),
        "retarget": published(RetargetCounts, gmr_processed=10, frames_in=10, robot_frames_sent=10),
        "streamer": published(StreamerCounts, frames_in=10, motion_generated=10, zmq_sent=7, unconfirmed=2, pending=1,
                              bridged_frames=1, consumers={"robot": zero(ConsumerCounts, frames_acked=7, backlog=3)},
                              rejected_by_reason={"crc_mismatch": 1}),
    }
    v = audit({"services": services, "side": None})
    assert v["rejected_by_reason"] == {"bad_token": 2}
    assert v["link_rejected_by_reason"] == {"streamer": {"crc_mismatch": 1}}
    assert (v["cross_path_copies"], v["late_frames"], v["bridged_frames"]) == (9, 1, 1)
    assert v["consumers"]["robot"]["frames_acked"] == 7
    assert v["output_balanced"] == 1 and v["delivery"].startswith("unconfirmed: 2")
    services["streamer"].update(zmq_sent=9, unconfirmed=0, pending=0)
    v = audit({"services": services, "side": None})
    assert v["output_balanced"] == 0  # 10 made, 9 accounted for: the ledger says so


def test_the_robot_bridge_is_a_layer_when_it_runs_and_of_a_performer_only_when_it_is_alone() -> None:
    from mocapline.core.counters import RobotCounts, Stages
    from mocapline.core.verdict import performer_layers, pipeline_counts, stage_layers, stage_rows

    robot = zero(RobotCounts, robot_received=6, robot_applied=5, bridge_pending=1, rejected_by_reason={"x": 1})
    stages = Stages(robot=robot)
    assert pipeline_counts(stage_layers(stages)).robot_applied == 5
    assert "robot_applied" not in with_verdict(pipeline_counts(stage_layers(Stages())))
    assert performer_layers(stages, "0", alone=True).robot is robot
    assert performer_layers(stages, "0", alone=False).robot is None
    assert stage_layers(stages).link_rejects == {"robot": {"x": 1}}
    assert stage_rows(stages)[-1] == ("robot", 6, 5, 1, 1)
    assert [row[0] for row in stage_rows(Stages())] == ["capture", "retarget", "streamer", "viewer"]


def test_the_verdict_says_what_it_covers_and_what_a_departed_consumers_backlog_is() -> None:
    """The final ledger said `conserved` beside a tap that left with `backlog 506`, and nothing
    said whether those frames were lost or what the verdict had judged."""
    consumers = {"viewer": zero(ConsumerCounts, frames_acked=900, frames_sent=900, connected=True),
                 "tap": zero(ConsumerCounts, frames_acked=394, frames_sent=394, backlog=506, connected=False)}
    services = {
        "capture": published(CaptureCounts, source_received=900, human_frames_sent=900, source_unique_frames=900),
        "retarget": published(RetargetCounts, frames_in=900, robot_frames_sent=900, gmr_processed=900),
        "streamer": published(StreamerCounts, frames_in=900, zmq_sent=900, motion_generated=900, consumers=consumers),
        "viewer": published(ViewerCounts, viewer_received=900, viewer_applied=900),
    }
    v = audit({"services": services, "side": None})
    assert v["state"] == "conserved"
    assert v["verdict_covers"].startswith("capture -> retarget -> streamer -> the robot port -> viewer; ")
    assert "other consumers (a tap, your robot) are not judged" in v["verdict_covers"]
    assert list(v["consumers_behind"]) == ["tap"]
    assert v["consumers_behind"]["tap"].startswith("left with 506 frames waiting for it in the streamer's log: not")


def test_a_drained_take_says_which_consumer_it_did_not_reach_and_where_its_frames_are() -> None:
    gone = zero(ConsumerCounts, acknowledges=True, connected=False, frames_to_apply=1135)
    there = zero(ConsumerCounts, acknowledges=True, connected=True, frames_to_apply=3)
    done = zero(ConsumerCounts, acknowledges=True, connected=False, frames_to_apply=0)
    said = state(counts(zmq_sent=619, unconfirmed=1135 + 1397, viewer_applied=619,
                        consumers={"viewer": gone, "tap": there, "rec": done}), final=True)
    assert said == ("not conserved: zmq_sent 3151 > viewer_applied 619; tap had 3 frames still to apply; "
                    "viewer gone with 1135 frames to apply, kept for its return in the streamer's log")
    assert state(counts(consumers={"rec": done}), final=True) == "conserved"


def test_the_ledger_is_one_record_whose_metadata_says_the_head_and_the_layers() -> None:
    """Issue 30: the ledger's field names were listed in four tuples beside a dict; now the record
    (core/counters/ledger.py) is the one list, and the verdict and the gauges derive theirs from it."""
    from mocapline.core.counters.ledger import CONSUMER_LAYERS, HEAD_FIELDS, LAYER_NAMES
    from mocapline.core.metrics import LEDGER_GAUGE_FIELDS

    assert LEDGER_GAUGE_FIELDS == HEAD_FIELDS == LEDGER_FIELDS[:-2]
    assert list(LAYER_NAMES.values()) == ["capture", "retarget", "streamer", "the robot port", "viewer",
                                          "robot bridge"]
    assert CONSUMER_LAYERS == ("viewer_applied", "robot_applied")
    ledger = counts(robot_applied=3151, missing_by_path={BOTH: []})
    out = with_verdict(ledger)
    assert list(out)[: len(LEDGER_FIELDS)] == list(LEDGER_FIELDS)
    assert PipelineLedger.from_published(out) == ledger  # the verdict's own keys left aside
    assert "robot_applied" not in with_verdict(counts()) and "missing_by_path" not in with_verdict(counts())
    assert state(replace(ledger, robot_applied=3150), final=True) == (
        "not conserved: viewer_applied 3151 > robot_applied 3150")
