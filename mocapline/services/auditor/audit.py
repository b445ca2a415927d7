"""The auditor's reasoning, as pure functions of recorded counters (so a verdict can be recomputed
from a saved snapshot: `mocapline auditor --replay snapshot.json`).

A snapshot is ``{"services": {name: last heartbeat}, "side": side-path ledger or None}``.
"""

from __future__ import annotations

from typing import Any

from mocapline.core.verdict import CAPTURE_FIELDS, classify_missing, with_verdict


def _path_ledgers(capture: dict[str, Any]) -> list[dict[str, Any]]:
    """Capture's per-path ledgers, main first (capture lists them in --ports order)."""
    paths = list((capture.get("paths") or {}).values())
    return sorted(paths, key=lambda p: {"main": 0, "side": 1}.get(p.get("role", ""), 2))


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
    return counts


def audit(snapshot: dict[str, Any]) -> dict[str, Any]:
    """Verdict plus the dual-path classification of every missing index."""
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
    return with_verdict(counts)
