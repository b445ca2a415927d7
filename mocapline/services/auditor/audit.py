"""The auditor's reasoning, as pure functions of recorded counters (so a verdict can be recomputed
from a saved snapshot: `mocapline auditor --replay snapshot.json`).

A snapshot is ``{"services": {name: last heartbeat}, "side": side-path ledger or None}``.
"""

from __future__ import annotations

from typing import Any

from mocapline.core.verdict import classify_missing, pipeline_counts, with_verdict


def _path_ledgers(capture: dict[str, Any]) -> list[dict[str, Any]]:
    """Capture's per-path ledgers, main first (capture lists them in --ports order)."""
    paths = list((capture.get("paths") or {}).values())
    return sorted(paths, key=lambda p: {"main": 0, "side": 1}.get(p.get("role", ""), 2))


def audit(snapshot: dict[str, Any], *, final: bool = True) -> dict[str, Any]:
    """Verdict plus the dual-path classification of every missing index. ``final``: the counts are
    a drained take's (unequal layers are then a loss; before that, frames in flight)."""
    services = snapshot.get("services", {})
    counts = pipeline_counts(services)
    paths = _path_ledgers(services.get("capture", {}))
    main = paths[0] if paths else None
    side = snapshot.get("side") or (paths[1] if len(paths) > 1 else None)
    if main is not None:
        span = None
        if side is not None and side.get("source_first_index") is not None:
            span = (side["source_first_index"], side["source_last_index"])
        counts["missing_by_path"] = classify_missing(
            main.get("source_missing_ranges", []),
            side.get("source_missing_ranges", []) if side is not None else None,
            span,
        )
        counts["merge_on"] = len(paths) > 1
    return with_verdict(counts, final=final)
