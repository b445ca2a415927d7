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

from typing import Any

from mocapline.core.counters import RetargetCounts, decode, sum_workers, to_json
from mocapline.core.verdict import classify_missing, performer_services, pipeline_counts, with_verdict


def _path_ledgers(capture: dict[str, Any]) -> list[dict[str, Any]]:
    """Capture's per-path ledgers, main first (capture lists them in --ports order)."""
    paths = list((capture.get("paths") or {}).values())
    return sorted(paths, key=lambda p: {"main": 0, "side": 1}.get(p.get("role", ""), 2))


def judge(services: dict[str, dict[str, Any]], side: dict[str, Any] | None, *, final: bool = True) -> dict[str, Any]:
    """Verdict plus the dual-path classification of every missing index, for one set of counts.
    ``final``: the counts are a drained take's (unequal layers are then a loss; before that, frames
    in flight)."""
    counts = pipeline_counts(services)
    paths = _path_ledgers(services.get("capture", {}))
    main = paths[0] if paths else None
    side = side or (paths[1] if len(paths) > 1 else None)
    if main is not None:
        span = None
        if side is not None and side.get("source_first_index") is not None:
            span = (side["source_first_index"], side["source_last_index"])
        counts["missing_by_path"] = classify_missing(
            main.get("source_missing_ranges", []),
            side.get("source_missing_ranges", []) if side is not None else None,
            span,
            late=services.get("capture", {}).get("late_ranges", []),
        )
        counts["merge_on"] = len(paths) > 1
    return with_verdict(counts, final=final)


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
    services = with_workers(snapshot.get("services", {}))
    side = snapshot.get("side")
    verdict = judge(services, side, final=final)
    if "workers" in services.get("retarget", {}):
        verdict["retarget_workers"] = services["retarget"]["workers"]
    keys = list(services.get("capture", {}).get("performers") or {})
    if not keys:
        return verdict
    side_performers = (side or {}).get("performers") or {}
    performers = {}
    for key in keys:
        per = judge(performer_services(services, key, len(keys) == 1), side_performers.get(key), final=final)
        per["avatar_name"] = services["capture"]["performers"][key].get("avatar_name", "")
        performers[key] = per
    verdict["performers"] = performers
    verdict["unique_frames_conserved"] = int(
        bool(verdict["unique_frames_conserved"]) and all(p["unique_frames_conserved"] for p in performers.values())
    )
    return verdict
