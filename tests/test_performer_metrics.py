"""Per-performer metrics: one series per performer and stage, the label set bounded."""

from __future__ import annotations

from prometheus_client import generate_latest

from mocapline.core.counters import ViewerCounts, ViewerPerformerCounts, zero
from mocapline.core.metrics import MAX_PERFORMER_LABELS, ServiceMetrics


def performer_series(metrics: ServiceMetrics) -> dict[str, float]:
    out = {}
    for line in generate_latest(metrics.registry).decode().splitlines():
        if line.startswith("mocapline_performer_frames_total{"):
            labels, value = line.rsplit(" ", 1)
            out[labels.split('performer="')[1].split('"')[0]] = float(value)
    return out


def test_performer_counts_follow_the_heartbeat_and_the_label_set_is_bounded():
    metrics = ServiceMetrics("viewer")
    assert performer_series(metrics) == {"0": 0.0}  # exists before the first frame
    many = {str(k): zero(ViewerPerformerCounts, viewer_applied=10 + k) for k in range(MAX_PERFORMER_LABELS + 5)}
    metrics.sync(zero(ViewerCounts, performers=many))
    series = performer_series(metrics)
    assert len(series) == MAX_PERFORMER_LABELS + 1  # 0..15 and "other"
    assert series["3"] == 13.0
    assert series["other"] == sum(10 + k for k in range(MAX_PERFORMER_LABELS, MAX_PERFORMER_LABELS + 5))
    metrics.sync(zero(ViewerCounts, performers={"3": zero(ViewerPerformerCounts, viewer_applied=20)}))
    assert performer_series(metrics)["3"] == 20.0
