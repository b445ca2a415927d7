"""The conservation verdict and the dual-path classification of missing indices (docs/ledger.md).

Conserved: source_unique_frames == gmr_processed == motion_generated == zmq_sent + unconfirmed
(== viewer_applied when a viewer is part of the run, == robot_applied when the robot bridge is: every
unique frame's target reached a motor command), input_pending == 0, robot_pending == 0, and
every segment complete: nothing missing in it (so source_missing_indices == 0) and, where capture
lists every segment, their unique frames add up to source_unique_frames.

A segment is a run of posture indices between backward jumps (Axis Studio restarted or replays a
recording, or the demo take looped): a backward jump is counted (source_backward_indices) and starts
a new segment, but it is not a loss, so a looping take of any length can end conserved.

``state`` says in words where a take stands: ``conserved``; ``running, N in flight`` (frames on
their way between the first and the last stage, nothing missing: the normal state of a live take);
``waiting for the first frame`` (a live take that has received none); or ``not conserved: ...``
with the reason. A take is judged lost only once it is final (drained):
before that, unequal layer counts are frames in flight.

The streamer's output balances at every moment: ``motion_generated == zmq_sent + streamer_pending +
unconfirmed`` (``output_balanced``), where zmq_sent counts frames a consumer acknowledged (in plain
mode without --state-dir, frames handed to ZeroMQ: nothing acknowledges there), unconfirmed frames
handed to the wire and not (or never: ``--plain-output``) acknowledged, and streamer_pending frames
not handed to anyone yet. ``delivery`` says which: ``acknowledged`` when nothing is unconfirmed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from mocapline.core.counters import (
    CaptureCounts,
    CapturePerformerCounts,
    RetargetCounts,
    RetargetPerformerCounts,
    RetargetTotals,
    RobotCounts,
    Stages,
    StreamerCounts,
    StreamerPerformerCounts,
    ViewerCounts,
    ViewerPerformerCounts,
    as_published,
)
from mocapline.core.ledger import index_ranges
from mocapline.core.robotfigures import ledger_block

# The ledger fields capture owns, then the whole ledger in its documented order.
CAPTURE_FIELDS: tuple[str, ...] = (
    "source_received",
    "source_unique_frames",
    "source_missing_indices",
    "source_duplicate_indices",
    "source_backward_indices",
    "rejected_datagrams",
    "first_posture_index",
    "last_posture_index",
)
LEDGER_FIELDS: tuple[str, ...] = (
    *CAPTURE_FIELDS,
    "gmr_processed",
    "motion_generated",
    "zmq_sent",
    "viewer_applied",
    "input_pending",
    "robot_pending",
    "unique_frames_conserved",
    "state",
)
LAYERS: tuple[str, ...] = ("source_unique_frames", "gmr_processed", "motion_generated", "zmq_sent", "viewer_applied",
                           "robot_applied")
CONSUMER_LAYERS = ("viewer_applied", "robot_applied")  # judged only when that consumer is part of the run
LAYER_NAMES = {"source_unique_frames": "capture", "gmr_processed": "retarget", "motion_generated": "streamer",
               "zmq_sent": "the robot port", "viewer_applied": "viewer", "robot_applied": "robot bridge"}

# Where an index missing from the stream was lost, by which paths lack it.
MAIN_ONLY = "main_only"  # our receiver or host load; merging the side path recovers it
BOTH = "both"  # upstream of both paths (suit Wi-Fi, Axis): not recoverable
SIDE_ONLY = "side_only"  # ordinary UDP loss on the side path; main has it
UNKNOWN = "main_no_side_data"  # missing on main while no side path covered that index
LATE = "late"  # a path had it, but its copy arrived after the merge declared the gap final


def on_the_wire(counts: dict[str, Any]) -> int | None:
    """Frames the streamer handed to the wire, acknowledged (zmq_sent) or not yet (unconfirmed).
    A consumer applies a frame before its acknowledgement reaches the streamer, so this, not
    zmq_sent alone, is the count no downstream count exceeds (a streamer's status or the ledger)."""
    sent = counts.get("zmq_sent")
    return None if sent is None else sent + (counts.get("unconfirmed") or 0)


def _layers(counts: dict[str, Any]) -> list[tuple[str, Any]]:
    """The layer counts in pipeline order (viewer_applied only when a viewer was part of the run);
    the streamer's output layer is what went on the wire, acknowledged or not (zmq_sent + unconfirmed)."""
    out = []
    for key in LAYERS:
        value = on_the_wire(counts) if key == "zmq_sent" else counts.get(key)
        if key not in CONSUMER_LAYERS or value is not None:
            out.append((key, value))
    return out


def segments_complete(counts: dict[str, Any]) -> bool:
    """Nothing missing in any segment; where every segment is listed, they add up to the total."""
    if counts.get("source_missing_indices") != 0:
        return False
    per_segment = counts.get("per_segment")
    if not per_segment:
        return True
    if any(seg.get("missing_indices") for seg in per_segment):
        return False
    if len(per_segment) == counts.get("segments"):
        return sum(seg.get("unique_frames", 0) for seg in per_segment) == counts.get("source_unique_frames")
    return True


def conserved(counts: dict[str, Any]) -> bool:
    stages = [v for _, v in _layers(counts)]
    return (
        None not in stages
        and len(set(stages)) == 1
        and segments_complete(counts)
        and counts.get("input_pending", 0) == 0
        and counts.get("robot_pending", 0) == 0
    )


def in_flight(counts: dict[str, Any]) -> int:
    """Frames taken in by the first layer and not yet through the last."""
    layers = [v or 0 for _, v in _layers(counts)]
    return max(0, layers[0] - layers[-1]) if layers else 0


def waiting(counts: dict[str, Any], *, final: bool) -> bool:
    """A live take that has not received a frame yet: nothing to judge (0 == 0 == ... is no
    verdict), so not ``conserved`` either."""
    return not final and counts.get("source_received") == 0 and not counts.get("source_unique_frames")


def state(counts: dict[str, Any], *, final: bool) -> str:
    """The verdict in words (see the module docstring)."""
    if waiting(counts, final=final):
        return "waiting for the first frame"
    if conserved(counts):
        return "conserved"
    missing = counts.get("source_missing_indices") or 0
    if missing:
        return f"not conserved: {missing} posture indices missing at the source"
    layers = _layers(counts)
    if any(v is None for _, v in layers):
        absent = [k for k, v in layers if v is None]
        return f"waiting for {', '.join(absent)}" if not final else f"not conserved: no count for {', '.join(absent)}"
    if final:
        lost = [f"{a} {va} > {b} {vb}" for (a, va), (b, vb) in pairwise(layers) if va != vb]
        reasons = (lost or ["frames still pending after the drain"]) + [n for n in [consumers_note(counts)] if n]
        return "not conserved: " + "; ".join(reasons)
    return f"running, {in_flight(counts)} in flight"


def covers(counts: dict[str, Any]) -> str:
    """What the verdict judges, in words: the layers compared, and who is not among them."""
    return (" -> ".join(LAYER_NAMES[k] for k, _ in _layers(counts)) + "; the robot port's other consumers "
            "(a tap, your robot) are not judged: their own counts are under consumers")


def consumers_behind(counts: dict[str, Any]) -> dict[str, str]:
    """Consumers of the robot port that left with frames still waiting for them, in words."""
    return {name: (f"left with {c['backlog']} frames waiting for it in the streamer's log: not lost, they are "
                   "its own when it comes back under that name (until --consumer-backlog evicts it); not part of "
                   "the verdict")
            for name, c in (counts.get("consumers") or {}).items() if c.get("backlog") and not c.get("connected")}


def consumers_note(counts: dict[str, Any]) -> str:
    """The robot port's acknowledging consumers a drained take did not reach everywhere: one gone
    (its frames are kept in the streamer's durable log for its return), or one there that had not
    applied all of them when the drain ended (a second Ctrl-C, or no progress for minutes)."""
    notes = []
    for name, c in sorted((counts.get("consumers") or {}).items()):
        left = c.get("frames_to_apply") or 0
        if not c.get("acknowledges") or not left:
            continue
        notes.append(f"{name} had {left} frames still to apply" if c.get("connected") else
                     f"{name} gone with {left} frames to apply, kept for its return in the streamer's log")
    return "; ".join(notes)


def with_verdict(counts: dict[str, Any], *, final: bool = True) -> dict[str, Any]:
    """The ledger in its documented field order, with unique_frames_conserved and state filled in."""
    out = {key: counts.get(key) for key in LEDGER_FIELDS}
    out["unique_frames_conserved"] = int(conserved(counts) and not waiting(counts, final=final))
    out["state"] = state(counts, final=final)
    extra = {k: v for k, v in counts.items() if k not in out}
    extra["verdict_covers"] = covers(counts)
    if behind := consumers_behind(counts):
        extra["consumers_behind"] = behind
    produced, sent, pending = (counts.get(k) for k in ("motion_generated", "zmq_sent", "streamer_pending"))
    if produced is not None and sent is not None and pending is not None:
        unconfirmed = counts.get("unconfirmed") or 0
        extra["output_balanced"] = int(produced == sent + pending + unconfirmed)
        extra["delivery"] = ("acknowledged" if not unconfirmed else
                             f"unconfirmed: {unconfirmed} frames handed to consumers without an acknowledgement")
    return {**out, **extra}


CaptureLayer = CaptureCounts | CapturePerformerCounts
RetargetLayer = RetargetCounts | RetargetTotals | RetargetPerformerCounts
StreamerLayer = StreamerCounts | StreamerPerformerCounts
ViewerLayer = ViewerCounts | ViewerPerformerCounts


@dataclass(frozen=True)
class Layers:
    """One take's counts layer by layer: the stages' own (``stage_layers``), or one performer's
    part of them (``performer_layers``); None where a layer has no count."""

    capture: CaptureLayer | None = None
    retarget: RetargetLayer | None = None
    streamer: StreamerLayer | None = None
    viewer: ViewerLayer | None = None
    robot: RobotCounts | None = None  # the robot bridge (`mocapline robot`), a layer when it runs
    link_rejects: dict[str, dict[str, int]] = field(default_factory=dict)
    link_duplicates: dict[str, int] = field(default_factory=dict)  # durable: copies each stage dropped on arrival


def stage_layers(stages: Stages) -> Layers:
    links: list[tuple[str, RetargetCounts | RetargetTotals | StreamerCounts | ViewerCounts | RobotCounts | None]] = [
        *stages.workers.items(), ("retarget", stages.retarget), ("streamer", stages.streamer),
        ("viewer", stages.viewer), ("robot", stages.robot)]
    rejects = {name: dict(c.rejected_by_reason) for name, c in links
               if isinstance(c, RetargetCounts | StreamerCounts | ViewerCounts | RobotCounts) and c.rejected_by_reason}
    duplicates = {name: c.durable.input_link.duplicates for name, c in links
                  if isinstance(c, RetargetCounts | StreamerCounts | ViewerCounts | RobotCounts)
                  and c.durable is not None and c.durable.input_link is not None}
    return Layers(stages.capture, stages.retarget, stages.streamer, stages.viewer, stages.robot, rejects, duplicates)


def performer_layers(stages: Stages, key: str, alone: bool) -> Layers:
    """Each layer's counts for one performer: its ``performers`` entry; the stage's own counts when
    the performer is the only one and the stage does not split them; else None (the robot bridge
    follows one performer and does not split its counts: a layer only when the performer is alone)."""
    whole = stage_layers(stages)

    def part(counts: Any) -> Any:
        if counts is None:
            return None
        return counts.performers.get(key, counts if alone else None)

    return Layers(part(stages.capture), part(stages.retarget), part(stages.streamer), part(stages.viewer),
                  stages.robot if alone else None, whole.link_rejects if alone else {},
                  whole.link_duplicates if alone else {})


def pipeline_counts(layers: Layers) -> dict[str, Any]:
    """The ledger fields (docs/ledger.md) from the stages' own counters."""
    cap, ret, st, view = layers.capture, layers.retarget, layers.streamer, layers.viewer
    whole = cap if isinstance(cap, CaptureCounts) else None
    counts: dict[str, Any] = {
        "source_received": cap.source_received if cap else None,
        "source_unique_frames": cap.source_unique_frames if cap else None,
        "source_missing_indices": cap.source_missing_indices if cap else None,
        "source_duplicate_indices": cap.source_duplicate_indices if cap else None,
        "source_backward_indices": cap.source_backward_indices if cap else None,
        "rejected_datagrams": whole.rejected_datagrams if whole else None,
        "first_posture_index": cap.first_posture_index if cap else None,
        "last_posture_index": cap.last_posture_index if cap else None,
        "gmr_processed": ret.gmr_processed if ret else None,
        "motion_generated": st.motion_generated if st else None,
        "zmq_sent": st.zmq_sent if st else None,
        "viewer_applied": view.viewer_applied if view else None,
    }
    if layers.robot is not None:
        counts["robot_applied"] = layers.robot.robot_applied
        counts["robot"] = ledger_block(layers.robot)  # how the bridge kept up (core/robotfigures.py)
    # Frames between capture's FIFO and the IK: capture's own queue plus those on the wire.
    counts["input_pending"] = (cap.input_pending if cap else 0) + max(
        0, (whole.human_frames_sent if whole else 0) - (ret.frames_in if ret else 0))
    # Robot frames produced but not yet sent on by the streamer.
    counts["robot_pending"] = max(0, (ret.robot_frames_sent if ret else 0) - (st.frames_in if st else 0)) + (
        st.pending if st else 0)
    counts["missing_ranges"] = cap.missing_ranges if cap else []
    # Where every produced frame is (issue 12): acknowledged by a consumer (zmq_sent), handed to the
    # wire without an acknowledgement yet or ever (unconfirmed), or still waiting (pending).
    stream = st if isinstance(st, StreamerCounts) else None
    counts["unconfirmed"] = None if st is None else stream.unconfirmed if stream else 0
    counts["streamer_pending"] = st.pending if st else None
    counts["rejected_by_reason"] = None if cap is None else dict(whole.rejected_by_reason) if whole else {}
    if whole is not None:  # what capture joined, and the Xsens messages that are not poses
        counts["split_frames"] = whole.split_frames
        if whole.props is not None:
            counts["props"] = as_published(whole.props)
        if whole.meta_datagrams is not None:
            counts["meta_datagrams"] = dict(whole.meta_datagrams)
    counts["link_rejected_by_reason"] = layers.link_rejects
    counts["link_duplicates"] = layers.link_duplicates
    counts["cross_path_copies"] = cap.cross_path_copies if cap else None
    counts["late_frames"] = cap.late_frames if cap else None
    counts["late_ranges"] = cap.late_ranges if cap else []
    counts["bridged_frames"] = stream.bridged_frames if stream else None
    counts["consumers"] = as_published(stream.consumers or {}) if stream else {}
    counts["segments"] = cap.segments if cap else None
    counts["per_segment"] = as_published(cap.per_segment) if cap else None
    return counts


def stage_rows(stages: Stages) -> list[tuple[str, int | None, int | None, int | None, int | None]]:
    """(stage, in, out, pending, rejected) per stage from the stages' status or heartbeats: the
    rows of the live table (`mocapline up`) and of the web viewer's ledger (None: not there)."""
    cap, ret, st, view = stages.capture, stages.retarget, stages.streamer, stages.viewer
    rows: list[tuple[str, int | None, int | None, int | None, int | None]] = [
        ("capture", *((cap.source_received, cap.human_frames_sent, cap.input_pending, cap.rejected_datagrams)
                      if cap else (None,) * 4)),
        ("retarget", *((ret.frames_in, ret.robot_frames_sent, ret.pending, ret.ik_failed) if ret else (None,) * 4)),
        ("streamer", *((st.frames_in, st.on_the_wire, st.pending) if st else (None,) * 3), None),
        ("viewer", *((view.viewer_received, view.viewer_applied, view.viewer_pending,
                      sum(view.rejected_by_reason.values())) if view else (None,) * 4)),
    ]
    if stages.robot is not None:
        robot = stages.robot
        rows.append(("robot", robot.robot_received, robot.robot_applied, robot.bridge_pending,
                     sum(robot.rejected_by_reason.values())))
    return rows


def _indices(ranges: Iterable[Iterable[int]]) -> set[int]:
    out: set[int] = set()
    for lo, hi in ranges:
        out.update(range(lo, hi + 1))
    return out


def classify_missing(
    main_missing: Iterable[Iterable[int]],
    side_missing: Iterable[Iterable[int]] | None,
    side_span: tuple[int, int] | None,
    late: Iterable[Iterable[int]] = (),
) -> dict[str, list[list[int]]]:
    """Classify missing indices given each path's missing ranges and the span the side path covered.

    ``side_missing`` None means no side path was observed at all. ``late``: indices missing from
    the merged stream although a path delivered them, too late (capture's ``late_ranges``); they
    are classified ``late`` and nothing else.
    """
    late_set = _indices(late)
    main = _indices(main_missing) - late_set
    side = (_indices(side_missing) if side_missing is not None else set()) - late_set
    covered = (lambda i: side_span[0] <= i <= side_span[1]) if side_span else (lambda i: False)
    out: dict[str, set[int]] = {MAIN_ONLY: set(), BOTH: set(), SIDE_ONLY: set(), UNKNOWN: set(), LATE: late_set}
    for i in main:
        if side_missing is None or not covered(i):
            out[UNKNOWN].add(i)
        elif i in side:
            out[BOTH].add(i)
        else:
            out[MAIN_ONLY].add(i)
    out[SIDE_ONLY] = side - main
    return {k: index_ranges(v) for k, v in out.items()}
