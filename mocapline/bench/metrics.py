"""``mocapline bench metrics``: what the Prometheus metrics cost the frame path.

Per frame a stage does one ``FastHistogram.observe`` (the viewer two); counters and gauges are
brought up to the service's own counts by ``ServiceMetrics.sync`` at most every 0.25 s, off the
per-frame path. Side by side: prometheus-client's own ``Histogram.observe`` and ``Counter.inc``
with label children bound once (what incrementing in the hot path would cost), and one sync of a
capture-sized heartbeat.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import replace

from prometheus_client import CollectorRegistry, Counter, Histogram

from mocapline.bench.timing import per_call_us
from mocapline.core.counters import CaptureCounts, zero
from mocapline.core.metrics import STAGE_BUCKETS, FastHistogram, ServiceMetrics


def measure(number: int) -> dict[str, float]:
    registry = CollectorRegistry()
    hist = Histogram("h_seconds", "h", ["stage"], buckets=STAGE_BUCKETS, registry=registry).labels(stage="x")
    counter = Counter("c_total", "c", ["stage"], registry=registry).labels(stage="x")
    fast = FastHistogram(STAGE_BUCKETS)
    metrics = ServiceMetrics("capture", reasons=("a", "b", "c"))
    beat = zero(CaptureCounts, last_posture_index=0, rejected_by_reason={"a": 1, "b": 0, "c": 2})

    def sync() -> None:
        nonlocal beat
        beat = replace(beat, source_received=beat.source_received + 60,
                       human_frames_sent=beat.human_frames_sent + 60)
        metrics.sync(beat)

    observe, inc, fobserve = hist.observe, counter.inc, fast.observe
    return {
        "fast_histogram_observe_us": per_call_us(lambda: fobserve(0.0031), number),
        "prometheus_histogram_observe_us": per_call_us(lambda: observe(0.0031), number),
        "prometheus_counter_inc_us": per_call_us(lambda: inc(), number),
        "empty_call_us": per_call_us(lambda: None, number),
        "sync_us": per_call_us(sync, max(number // 100, 100)),
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="mocapline bench metrics", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--number", type=int, default=200_000, help="calls per timing")
    p.add_argument("--json", action="store_true", help="one JSON object")
    args = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    result = measure(args.number)
    if args.json:
        print(json.dumps(result))
        return 0
    print("per call, us (an empty Python call is the floor):")
    for key, value in result.items():
        print(f"  {key.removesuffix('_us'):<32} {value:7.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
