"""A dataset's figures: the summary (counts, frames, rate), the quality report (DIR/quality.json,
per take and over the dataset), its plot (DIR/quality.png, when matplotlib is installed) and the
table printed at the end of a run."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from mocapline.tools.dataset.manifest import DONE, FAILED, write_atomic

FIGURES = ("err_mm", "err_p99_mm", "hands_mm", "hands_p99_mm", "feet_mm", "feet_p99_mm", "pelvis_mm",
           "pelvis_p99_mm", "rest_mm", "rest_p99_mm", "rot_deg", "limit_contacts", "velocity_violations", "jumps",
           "swings", "ik_failed", "first_frame_err_mm", "skate_cm_s", "float_share", "penetration_max_cm")
WORST = 10


def summarise(records: list[dict[str, Any]], converted: list[dict[str, Any]], seconds: float,
              engine: str) -> dict[str, Any]:
    frames = sum(int(r.get("frames", 0)) for r in converted)
    reasons = Counter(_reason_kind(r.get("reason", "")) for r in records if r["status"] == FAILED)
    return {
        "takes": len(records), "done": sum(r["status"] == DONE for r in records),
        "failed": sum(r["status"] == FAILED for r in records), "converted_now": len(converted),
        "frames_now": frames, "seconds": round(seconds, 3),
        "frames_per_s": round(frames / seconds, 1) if seconds > 0 else 0.0, "engine": engine,
        "failed_by_reason": dict(reasons),
    }


def _reason_kind(reason: str) -> str:
    """The kind of a failure, for counting: the reason without the file name and details."""
    low = reason.lower()
    for key, kind in (("skeleton fits", "unknown skeleton"), ("diverged", "IK diverged"),
                      ("not a bvh", "not a BVH file"), ("cannot read", "unreadable"), ("worker died", "worker died"),
                      ("ray:", "ray task lost"), ("select no frames", "too few frames")):
        if key in low:
            return kind
    return "malformed input"


def quality_report(records: list[dict[str, Any]]) -> dict[str, Any]:
    per_take = {r["take"]: {k: r.get("quality", {}).get(k) for k in FIGURES if k in r.get("quality", {})}
                for r in records if r["status"] == DONE}
    dataset: dict[str, Any] = {}
    for k in FIGURES:
        values = np.array([v[k] for v in per_take.values() if v.get(k) is not None], dtype=float)
        if len(values):
            dataset[k] = {"mean": round(float(values.mean()), 2), "p99": round(float(np.percentile(values, 99)), 2),
                          "max": round(float(values.max()), 2)}
    return {"dataset": dataset, "takes": per_take}


def write_reports(out: Path, records: list[dict[str, Any]]) -> dict[str, Any]:
    q = quality_report(records)
    written = {"quality": str(out / "quality.json")}
    write_atomic(out / "quality.json", json.dumps(q, indent=1, sort_keys=True).encode())
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return written
    takes = q["takes"]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for ax, key, label in zip(axes, ("err_mm", "err_p99_mm", "hands_mm"),
                              ("mean position error (mm)", "p99 position error (mm)", "hands error (mm)"), strict=True):
        values = [v[key] for v in takes.values() if v.get(key) is not None]
        ax.hist(values, bins=30)
        ax.set_xlabel(label)
        ax.set_ylabel("takes")
    fig.suptitle(f"{len(takes)} takes done, {sum(r['status'] == FAILED for r in records)} failed")
    fig.tight_layout()
    tmp = out / "quality.tmp-plot.png"
    fig.savefig(tmp, dpi=80)
    plt.close(fig)
    tmp.replace(out / "quality.png")
    written["plot"] = str(out / "quality.png")
    return written


def print_table(records: list[dict[str, Any]], summary: dict[str, Any], stream: TextIO) -> None:
    done = [r for r in records if r["status"] == DONE]
    failed = [r for r in records if r["status"] == FAILED]
    rows = [("take", "status", "frames", "err mm", "p99 mm", "hands mm", "limits", "reason")]
    worst = sorted(done, key=lambda r: -float(r.get("quality", {}).get("err_mm", 0.0)))[:WORST]
    for r in [*failed, *worst]:
        q = r.get("quality", {})
        rows.append((r["take"], r["status"], str(r.get("frames", "")), str(q.get("err_mm", "")),
                     str(q.get("err_p99_mm", "")), str(q.get("hands_mm", "")), str(q.get("limit_contacts", "")),
                     str(r.get("reason", ""))[:70]))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    stream.write(f"{summary['takes']} takes: {summary['done']} done, {summary['failed']} failed"
                 f" ({', '.join(f'{n} {k}' for k, n in summary['failed_by_reason'].items()) or 'none'}); "
                 f"{summary['converted_now']} converted now, {summary['frames_now']} frames in "
                 f"{summary['seconds']} s ({summary['frames_per_s']} frames/s, {summary['engine']})\n")
    if len(rows) > 1:
        stream.write(f"the failed takes and the {min(WORST, len(done))} with the largest error:\n")
        for row in rows:
            cells = "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False))
            stream.write(f"  {cells}  {row[-1]}\n")
    stream.flush()
