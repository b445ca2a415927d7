"""The conservation verdict and the dual-path classification of missing indices (docs/ledger.md).

Conserved: source_unique_frames == gmr_processed == motion_generated == zmq_sent + unconfirmed
(== viewer_applied when a viewer is part of the run), input_pending == 0, robot_pending == 0, and
every segment complete: nothing missing in it (so source_missing_indices == 0) and, where capture
lists every segment, their unique frames add up to source_unique_frames.

A segment is a run of posture indices between backward jumps (Axis Studio restarted or replays a
recording, or the demo take looped): a backward jump is counted (source_backward_indices) and starts
a new segment, but it is not a loss, so a looping take of any length can end conserved.

``state`` says in words where a take stands: ``conserved``; ``running, N in flight`` (frames on
their way between the first and the last stage, nothing missing: the normal state of a live take);
or ``not conserved: ...`` with the reason. A take is judged lost only once it is final (drained):
before that, unequal layer counts are frames in flight.

The streamer's output balances at every moment: ``motion_generated == zmq_sent + streamer_pending +
unconfirmed`` (``output_balanced``), where zmq_sent counts frames a consumer acknowledged (in plain
mode without --state-dir, frames handed to ZeroMQ: nothing acknowledges there), unconfirmed frames
handed to the wire and not (or never: ``--plain-output``) acknowledged, and streamer_pending frames
not handed to anyone yet. ``delivery`` says which: ``acknowledged`` when nothing is unconfirmed.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import pairwise
from typing import Any

from mocapline.core.counters import Stages
from mocapline.core.ledger import index_ranges

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
LAYERS: tuple[str, ...] = ("source_unique_frames", "gmr_processed", "motion_generated", "zmq_sent", "viewer_applied")

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
        if key != "viewer_applied" or value is not None:
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


def state(counts: dict[str, Any], *, final: bool) -> str:
    """The verdict in words (see the module docstring)."""
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
        return "not conserved: " + ("; ".join(lost) if lost else "frames still pending after the drain")
    return f"running, {in_flight(counts)} in flight"


def with_verdict(counts: dict[str, Any], *, final: bool = True) -> dict[str, Any]:
    """The ledger in its documented field order, with unique_frames_conserved and state filled in."""
    out = {key: counts.get(key) for key in LEDGER_FIELDS}
    out["unique_frames_conserved"] = int(conserved(counts))
    out["state"] = state(counts, final=final)
    extra = {k: v for k, v in counts.items() if k not in out}
    produced, sent, pending = (counts.get(k) for k in ("motion_generated", "zmq_sent", "streamer_pending"))
    if produced is not None and sent is not None and pending is not None:
        unconfirmed = counts.get("unconfirmed") or 0
        extra["output_balanced"] = int(produced == sent + pending + unconfirmed)
        extra["delivery"] = ("acknowledged" if not unconfirmed else
                             f"unconfirmed: {unconfirmed} frames handed to consumers without an acknowledgement")
    return {**out, **extra}


def pipeline_counts(services: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The ledger fields (docs/ledger.md) from the services' own counters."""
    cap = services.get("capture", {})
    ret = services.get("retarget", {})
    st = services.get("streamer", {})
    view = services.get("viewer")
    counts: dict[str, Any] = {key: cap.get(key) for key in CAPTURE_FIELDS}
    counts["gmr_processed"] = ret.get("gmr_processed")
    counts["motion_generated"] = st.get("motion_generated")
    counts["zmq_sent"] = st.get("zmq_sent")
    counts["viewer_applied"] = view.get("viewer_applied") if view else None
    # Frames between capture's FIFO and the IK: capture's own queue plus those on the wire.
    counts["input_pending"] = (cap.get("input_pending") or 0) + max(
        0, (cap.get("human_frames_sent") or 0) - (ret.get("frames_in") or 0)
    )
    # Robot frames produced but not yet sent on by the streamer.
    counts["robot_pending"] = max(0, (ret.get("robot_frames_sent") or 0) - (st.get("frames_in") or 0)) + (
        st.get("pending") or 0
    )
    counts["missing_ranges"] = cap.get("missing_ranges", [])
    # Where every produced frame is (issue 12): acknowledged by a consumer (zmq_sent), handed to the
    # wire without an acknowledgement yet or ever (unconfirmed), or still waiting (pending).
    counts["unconfirmed"] = st.get("unconfirmed", 0) if st else None
    counts["streamer_pending"] = st.get("pending") if st else None
    counts["rejected_by_reason"] = cap.get("rejected_by_reason", {}) if cap else None
    counts["link_rejected_by_reason"] = {
        name: dict(body.get("rejected_by_reason") or {}) for name, body in services.items()
        if name != "capture" and body.get("rejected_by_reason")}
    counts["cross_path_copies"] = cap.get("cross_path_copies")
    counts["late_frames"] = cap.get("late_frames")
    counts["late_ranges"] = cap.get("late_ranges", [])
    counts["bridged_frames"] = st.get("bridged_frames")
    counts["consumers"] = st.get("consumers", {})
    counts["segments"] = cap.get("segments")
    counts["per_segment"] = cap.get("per_segment")
    return counts


def performer_services(services: dict[str, dict[str, Any]], key: str, alone: bool) -> dict[str, dict[str, Any]]:
    """Each stage's counts for one performer: its ``performers`` entry; the stage's own counts when
    the performer is the only one and the stage does not split them; else nothing (None counts)."""
    out: dict[str, dict[str, Any]] = {}
    for name, hb in services.items():
        per = (hb or {}).get("performers")
        if isinstance(per, dict) and key in per:
            out[name] = per[key]
        elif alone or name not in ("capture", "retarget", "streamer", "viewer"):
            out[name] = hb
        else:
            out[name] = {}
    return out


def stage_rows(stages: Stages) -> list[tuple[str, int | None, int | None, int | None, int | None]]:
    """(stage, in, out, pending, rejected) per stage from the stages' status or heartbeats: the
    rows of the live table (`mocapline up`) and of the web viewer's ledger (None: not there)."""
    cap, ret, st, view = stages.capture, stages.retarget, stages.streamer, stages.viewer
    return [
        ("capture", *((cap.source_received, cap.human_frames_sent, cap.input_pending, cap.rejected_datagrams)
                      if cap else (None,) * 4)),
        ("retarget", *((ret.frames_in, ret.robot_frames_sent, ret.pending, ret.ik_failed) if ret else (None,) * 4)),
        ("streamer", *((st.frames_in, st.on_the_wire, st.pending) if st else (None,) * 3), None),
        ("viewer", *((view.viewer_received, view.viewer_applied, view.viewer_pending,
                      sum(view.rejected_by_reason.values())) if view else (None,) * 4)),
    ]


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
