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
from mocapline.core.counters.ledger import CONSUMER_LAYERS, HEAD_FIELDS, LAYER_NAMES, PipelineLedger
from mocapline.core.ledger import index_ranges
from mocapline.core.robotfigures import ledger_block

LEDGER_FIELDS: tuple[str, ...] = (*HEAD_FIELDS, "unique_frames_conserved", "state")  # the JSON's head, in order
LAYERS: tuple[str, ...] = tuple(LAYER_NAMES)

# Where an index missing from the stream was lost, by which paths lack it.
MAIN_ONLY = "main_only"  # our receiver or host load; merging the side path recovers it
BOTH = "both"  # upstream of both paths (suit Wi-Fi, Axis): not recoverable
SIDE_ONLY = "side_only"  # ordinary UDP loss on the side path; main has it
UNKNOWN = "main_no_side_data"  # missing on main while no side path covered that index
LATE = "late"  # a path had it, but its copy arrived after the merge declared the gap final


def _layers(ledger: PipelineLedger) -> list[tuple[str, int | None]]:
    """The layer counts in pipeline order (a consumer's only when it was part of the run); the
    streamer's output layer is what went on the wire, acknowledged or not (zmq_sent + unconfirmed)."""
    out = []
    for key in LAYERS:
        value = ledger.on_the_wire if key == "zmq_sent" else getattr(ledger, key)
        if key not in CONSUMER_LAYERS or value is not None:
            out.append((key, value))
    return out


def segments_complete(ledger: PipelineLedger) -> bool:
    """Nothing missing in any segment; where every segment is listed, they add up to the total."""
    if ledger.source_missing_indices != 0:
        return False
    per_segment = ledger.per_segment
    if not per_segment:
        return True
    if any(seg.missing_indices for seg in per_segment):
        return False
    if len(per_segment) == ledger.segments:
        return sum(seg.unique_frames for seg in per_segment) == ledger.source_unique_frames
    return True


def conserved(ledger: PipelineLedger) -> bool:
    stages = [v for _, v in _layers(ledger)]
    return (
        None not in stages
        and len(set(stages)) == 1
        and segments_complete(ledger)
        and ledger.input_pending == 0
        and ledger.robot_pending == 0
    )


def in_flight(ledger: PipelineLedger) -> int:
    """Frames taken in by the first layer and not yet through the last."""
    layers = [v or 0 for _, v in _layers(ledger)]
    return max(0, layers[0] - layers[-1]) if layers else 0


def waiting(ledger: PipelineLedger, *, final: bool) -> bool:
    """A live take that has not received a frame yet: nothing to judge (0 == 0 == ... is no
    verdict), so not ``conserved`` either."""
    return not final and ledger.source_received == 0 and not ledger.source_unique_frames


def state(ledger: PipelineLedger, *, final: bool) -> str:
    """The verdict in words (see the module docstring)."""
    if waiting(ledger, final=final):
        return "waiting for the first frame"
    if conserved(ledger):
        return "conserved"
    missing = ledger.source_missing_indices or 0
    if missing:
        return f"not conserved: {missing} posture indices missing at the source"
    layers = _layers(ledger)
    if any(v is None for _, v in layers):
        absent = [k for k, v in layers if v is None]
        return f"waiting for {', '.join(absent)}" if not final else f"not conserved: no count for {', '.join(absent)}"
    if final:
        lost = [f"{a} {va} > {b} {vb}" for (a, va), (b, vb) in pairwise(layers) if va != vb]
        reasons = (lost or ["frames still pending after the drain"]) + [n for n in [consumers_note(ledger)] if n]
        return "not conserved: " + "; ".join(reasons)
    return f"running, {in_flight(ledger)} in flight"


def covers(ledger: PipelineLedger) -> str:
    """What the verdict judges, in words: the layers compared, and who is not among them."""
    return (" -> ".join(LAYER_NAMES[k] for k, _ in _layers(ledger)) + "; the robot port's other consumers "
            "(a tap, your robot) are not judged: their own counts are under consumers")


def consumers_behind(ledger: PipelineLedger) -> dict[str, str]:
    """Consumers of the robot port that left with frames still waiting for them, in words."""
    return {name: (f"left with {c.backlog} frames waiting for it in the streamer's log: not lost, they are "
                   "its own when it comes back under that name (until --consumer-backlog evicts it); not part of "
                   "the verdict")
            for name, c in ledger.consumers.items() if c.backlog and not c.connected}


def consumers_note(ledger: PipelineLedger) -> str:
    """The robot port's acknowledging consumers a drained take did not reach everywhere: one gone
    (its frames are kept in the streamer's durable log for its return), or one there that had not
    applied all of them when the drain ended (a second Ctrl-C, or no progress for minutes)."""
    notes = []
    for name, c in sorted(ledger.consumers.items()):
        if not c.acknowledges or not c.frames_to_apply:
            continue
        left = c.frames_to_apply
        notes.append(f"{name} had {left} frames still to apply" if c.connected else
                     f"{name} gone with {left} frames to apply, kept for its return in the streamer's log")
    return "; ".join(notes)


def with_verdict(ledger: PipelineLedger, *, final: bool = True) -> dict[str, Any]:
    """The ledger as published (JSON: the head in its documented order, unique_frames_conserved and
    state, then the details) with what the verdict says about it."""
    published = as_published(ledger)
    out = {key: published.pop(key, None) for key in HEAD_FIELDS}
    out["unique_frames_conserved"] = int(conserved(ledger) and not waiting(ledger, final=final))
    out["state"] = state(ledger, final=final)
    extra = {**published, "verdict_covers": covers(ledger)}
    if behind := consumers_behind(ledger):
        extra["consumers_behind"] = behind
    produced, sent, pending = ledger.motion_generated, ledger.zmq_sent, ledger.streamer_pending
    if produced is not None and sent is not None and pending is not None:
        unconfirmed = ledger.unconfirmed or 0
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


def pipeline_counts(layers: Layers) -> PipelineLedger:
    """The ledger (docs/ledger.md) from the stages' own counters."""
    cap, ret, st, view = layers.capture, layers.retarget, layers.streamer, layers.viewer
    whole = cap if isinstance(cap, CaptureCounts) else None
    # Where every produced frame is (issue 12): acknowledged by a consumer (zmq_sent), handed to the
    # wire without an acknowledgement yet or ever (unconfirmed), or still waiting (pending).
    stream = st if isinstance(st, StreamerCounts) else None
    return PipelineLedger(
        source_received=cap.source_received if cap else None,
        source_unique_frames=cap.source_unique_frames if cap else None,
        source_missing_indices=cap.source_missing_indices if cap else None,
        source_duplicate_indices=cap.source_duplicate_indices if cap else None,
        source_backward_indices=cap.source_backward_indices if cap else None,
        rejected_datagrams=whole.rejected_datagrams if whole else None,
        first_posture_index=cap.first_posture_index if cap else None,
        last_posture_index=cap.last_posture_index if cap else None,
        gmr_processed=ret.gmr_processed if ret else None,
        motion_generated=st.motion_generated if st else None,
        zmq_sent=st.zmq_sent if st else None,
        viewer_applied=view.viewer_applied if view else None,
        # capture's own queue plus what is on the wire to the IK
        input_pending=(cap.input_pending if cap else 0) + max(
            0, (whole.human_frames_sent if whole else 0) - (ret.frames_in if ret else 0)),
        robot_pending=max(0, (ret.robot_frames_sent if ret else 0) - (st.frames_in if st else 0)) + (
            st.pending if st else 0),
        robot_applied=layers.robot.robot_applied if layers.robot is not None else None,
        robot=ledger_block(layers.robot) if layers.robot is not None else None,
        missing_ranges=cap.missing_ranges if cap else [],
        unconfirmed=None if st is None else stream.unconfirmed if stream else 0,
        streamer_pending=st.pending if st else None,
        rejected_by_reason=None if cap is None else dict(whole.rejected_by_reason) if whole else {},
        # what capture joined, and the Xsens messages that are not poses
        split_frames=whole.split_frames if whole else None,
        props=whole.props if whole else None,
        meta_datagrams=dict(whole.meta_datagrams) if whole and whole.meta_datagrams is not None else None,
        link_rejected_by_reason=layers.link_rejects,
        link_duplicates=layers.link_duplicates,
        cross_path_copies=cap.cross_path_copies if cap else None,
        late_frames=cap.late_frames if cap else None,
        late_ranges=cap.late_ranges if cap else [],
        bridged_frames=stream.bridged_frames if stream else None,
        consumers=dict(stream.consumers or {}) if stream else {},
        segments=cap.segments if cap else None,
        per_segment=list(cap.per_segment) if cap else None,
    )


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
