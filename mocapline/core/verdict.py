"""The conservation verdict and the dual-path classification of missing indices (docs/ledger.md).

Conserved: source_unique_frames == gmr_processed == motion_generated == zmq_sent + unconfirmed
(== viewer_applied when a viewer is part of the run), source_missing_indices == 0,
source_backward_indices == 0, input_pending == 0, robot_pending == 0.

The streamer's output balances at every moment: ``motion_generated == zmq_sent + streamer_pending +
unconfirmed`` (``output_balanced``), where zmq_sent counts frames a consumer acknowledged (in plain
mode without --state-dir, frames handed to ZeroMQ: nothing acknowledges there), unconfirmed frames
handed to the wire and not (or never: ``--plain-output``) acknowledged, and streamer_pending frames
not handed to anyone yet. ``delivery`` says which: ``acknowledged`` when nothing is unconfirmed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

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
)

# Where an index missing from the stream was lost, by which paths lack it.
MAIN_ONLY = "main_only"  # our receiver or host load; merging the side path recovers it
BOTH = "both"  # upstream of both paths (suit Wi-Fi, Axis): not recoverable
SIDE_ONLY = "side_only"  # ordinary UDP loss on the side path; main has it
UNKNOWN = "main_no_side_data"  # missing on main while no side path covered that index
LATE = "late"  # a path had it, but its copy arrived after the merge declared the gap final


def conserved(counts: dict[str, Any]) -> bool:
    sent = counts.get("zmq_sent")
    out = None if sent is None else sent + (counts.get("unconfirmed") or 0)  # on the wire, confirmed or not
    stages = [counts.get(k) for k in ("source_unique_frames", "gmr_processed", "motion_generated")] + [out]
    if counts.get("viewer_applied") is not None:
        stages.append(counts["viewer_applied"])
    return (
        None not in stages
        and len(set(stages)) == 1
        and counts.get("source_missing_indices") == 0
        and counts.get("source_backward_indices") == 0
        and counts.get("input_pending", 0) == 0
        and counts.get("robot_pending", 0) == 0
    )


def with_verdict(counts: dict[str, Any]) -> dict[str, Any]:
    """The ledger in its documented field order, with unique_frames_conserved filled in."""
    out = {key: counts.get(key) for key in LEDGER_FIELDS}
    out["unique_frames_conserved"] = int(conserved(counts))
    extra = {k: v for k, v in counts.items() if k not in out}
    produced, sent, pending = (counts.get(k) for k in ("motion_generated", "zmq_sent", "streamer_pending"))
    if produced is not None and sent is not None and pending is not None:
        unconfirmed = counts.get("unconfirmed") or 0
        extra["output_balanced"] = int(produced == sent + pending + unconfirmed)
        extra["delivery"] = ("acknowledged" if not unconfirmed else
                             f"unconfirmed: {unconfirmed} frames handed to consumers without an acknowledgement")
    return {**out, **extra}


def _indices(ranges: Iterable[Iterable[int]]) -> set[int]:
    out: set[int] = set()
    for lo, hi in ranges:
        out.update(range(lo, hi + 1))
    return out


def _ranges(indices: Iterable[int]) -> list[list[int]]:
    out: list[list[int]] = []
    for i in sorted(indices):
        if out and i == out[-1][1] + 1:
            out[-1][1] = i
        else:
            out.append([i, i])
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
    return {k: _ranges(v) for k, v in out.items()}
