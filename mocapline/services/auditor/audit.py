"""The auditor's reasoning, as pure functions of recorded counters (so a verdict can be recomputed
from a saved snapshot: `mocapline auditor --replay snapshot.json`).

A snapshot is ``{"services": {name: last heartbeat}, "side": side-path ledger or None}``.

Several performers: capture's heartbeat holds one ledger per performer (``performers``), the
later stages their counts per performer, the side path one ledger per performer. Each performer
is judged like a whole take (its own conservation verdict and classification of its missing
indices); the overall verdict holds only when the combined counts and every performer's do.
A stage that does not report a performer's counts leaves them None (not conserved) unless there
is only one performer, whose counts are the stage's.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from mocapline.core.counters import (
    PathCounts,
    RetargetCounts,
    RetargetTotals,
    SideLedger,
    SidePathCounts,
    as_published,
    decode,
    from_parts,
    read_stages,
    sum_workers,
    to_json,
)
from mocapline.core.verdict import (
    Layers,
    classify_missing,
    performer_layers,
    pipeline_counts,
    stage_layers,
    with_verdict,
)


def _side_path(side: SideLedger | None, paths: list[PathCounts]) -> SideLedger | PathCounts | None:
    """The side path: the auditor's own listener, else capture's second path, else none."""
    return side if side is not None else paths[1] if len(paths) > 1 else None


def judge(layers: Layers, side: SideLedger | None, *, final: bool = True) -> dict[str, Any]:
    """Verdict plus the dual-path classification of every missing index, for one set of counts.
    ``final``: the counts are a drained take's (unequal layers are then a loss; before that, frames
    in flight)."""
    ledger = pipeline_counts(layers)
    cap = layers.capture
    # capture lists its paths in --ports order: main first
    paths = sorted(cap.paths.values(), key=lambda p: {"main": 0, "side": 1}.get(p.role, 2)) if cap else []
    if paths:
        seen = _side_path(side, paths)
        span = None
        if seen is not None and seen.first_index is not None and seen.last_index is not None:
            span = (seen.first_index, seen.last_index)
        by_path = classify_missing(paths[0].missing_ranges, seen.missing_ranges if seen is not None else None, span,
                                   late=cap.late_ranges if cap else [])
        ledger = replace(ledger, missing_by_path=by_path, merge_on=len(paths) > 1)
    return with_verdict(ledger, final=final)


def with_workers(services: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Retarget as workers (services ``retarget.<name>``): the ledger's retarget line is their sum
    (mocapline.core.counters.sum_workers), published beside them as ``retarget``."""
    workers = {n: hb for n, hb in services.items() if n.startswith("retarget.") and hb}
    if not workers or "retarget" in services:
        return services
    totals = sum_workers({n: decode(RetargetCounts, hb) for n, hb in workers.items()})
    return {**services, "retarget": to_json(totals)}


def audit(snapshot: dict[str, Any], *, final: bool = True) -> dict[str, Any]:
    """The overall verdict, and with performers in capture's ledger one verdict per performer."""
    stages = read_stages(snapshot.get("services", {}))
    side = from_parts(SidePathCounts, snapshot["side"]) if snapshot.get("side") else None
    verdict = judge(stage_layers(stages), side, final=final)
    if isinstance(stages.retarget, RetargetTotals):
        verdict["retarget_workers"] = as_published(stages.retarget.workers)
    performers = stages.capture.performers if stages.capture else {}
    if not performers:
        return verdict
    side_performers = side.performers if side is not None else {}
    verdict["performers"] = {}
    for key, mine in performers.items():
        per = judge(performer_layers(stages, key, len(performers) == 1), side_performers.get(key), final=final)
        per["avatar_name"] = mine.avatar_name
        if mine.human_height_m is not None:  # Xsens MXTP13 scaling
            per["human_height_m"] = mine.human_height_m
        verdict["performers"][key] = per
    verdict["unique_frames_conserved"] = int(bool(verdict["unique_frames_conserved"]) and all(
        p["unique_frames_conserved"] for p in verdict["performers"].values()))
    return verdict
