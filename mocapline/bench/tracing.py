"""``mocapline bench tracing``: what a trace per posture_index costs each frame.

Two measurements, each side by side with the same work untraced:

1. ``spans``: the tracing work alone, as the four stages do it per frame (start a span with the
   remote parent parsed from the incoming traceparent, the posture_index attribute, format the
   outgoing traceparent, end), each stage with its own TracerProvider and BatchSpanProcessor (as in
   separate processes) and an exporter that encodes every batch to OTLP protobuf and drops it (the
   CPU of an OTLP export without the network). Also with the root sampled out (what
   ``OTEL_TRACES_SAMPLER_ARG`` < 1 costs for the indices not traced).
2. ``pipeline``: the whole pipeline in one process (mocapline.tools.pipeline.inprocess: capture parse + FK,
   retarget IK, streamer interpolation + MocapFrame, viewer validate + apply, inproc ZeroMQ links
   with the real envelope) over the emitter's walk, traced and untraced in alternate rounds; the
   best round of each. ``ratio`` = traced / untraced time per frame.

The batch processors' export threads run beside the frame path, as they do in the services; on a
machine with spare cores that work is off the frame path's core.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, ParentBased

from mocapline.core.tracing import StageTracer, for_provider, format_traceparent

STAGES = ("capture", "retarget", "streamer", "viewer")


class EncodingExporter(SpanExporter):
    """Encodes each batch to an OTLP ExportTraceServiceRequest, then drops it."""

    def __init__(self) -> None:
        self.spans = 0
        self.bytes = 0
        self._lock = threading.Lock()  # shared by every stage's export thread

    def export(self, spans: Sequence[Any]) -> SpanExportResult:
        size = len(encode_spans(spans).SerializeToString())
        with self._lock:
            self.bytes += size
            self.spans += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def make_tracers(
    sampled: bool = True, queue: int = 2048
) -> tuple[dict[str, StageTracer], list[TracerProvider], EncodingExporter]:
    exporter = EncodingExporter()
    tracers, providers = {}, []
    for stage in STAGES:
        root = ALWAYS_ON if sampled else ALWAYS_OFF
        provider = TracerProvider(resource=Resource.create({"service.name": f"mocapline-{stage}"}),
                                  sampler=ParentBased(root))
        provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=queue))
        providers.append(provider)
        tracers[stage] = for_provider(stage, provider)
    return tracers, providers, exporter


def spans_per_frame(tracers: dict[str, StageTracer] | None, frames: int) -> float:
    """Seconds per frame of the four stages' span work (None: the untraced stages' ``is None`` tests)."""
    start = time.perf_counter()
    for index in range(frames):
        t_ns = time.time_ns()
        traceparent = ""
        for stage in STAGES:
            tracer = tracers[stage] if tracers is not None else None
            if tracer is not None:
                span = tracer.start(index, traceparent, t_ns)
                traceparent = format_traceparent(span)
                span.end()
    return (time.perf_counter() - start) / frames


def measure_spans(frames: int, rounds: int) -> dict[str, float]:
    """Per frame: the spans made and exported (every batch encoded; the queue is large enough that
    none is dropped), i.e. all the CPU tracing adds, whichever thread spends it."""
    out: dict[str, float] = {}
    for label, sampled in (("traced", True), ("sampled_out", False)):
        best = float("inf")
        for _ in range(rounds + 1):  # the first round warms up
            tracers, providers, exporter = make_tracers(sampled, queue=max(frames + 1, 2048))
            start = time.perf_counter()
            spans_per_frame(tracers, frames)
            for provider in providers:
                provider.force_flush()
            best = min(best, (time.perf_counter() - start) / frames)
            for provider in providers:
                provider.shutdown()
            assert exporter.spans == (len(STAGES) * frames if sampled else 0), "spans were dropped"
        out[f"{label}_us_per_frame"] = best * 1e6
        if sampled:
            out["otlp_bytes_per_span"] = exporter.bytes / max(exporter.spans, 1)
    out["untraced_us_per_frame"] = min(spans_per_frame(None, frames) for _ in range(rounds)) * 1e6
    return out


def measure_pipeline(frames: int, rounds: int) -> dict[str, float]:
    from mocapline.tools.pipeline.inprocess import (
        InProcessPipeline,
        StageTracers,
        emitted_take,
    )

    take = emitted_take(frames)
    times: dict[str, list[float]] = {"untraced": [], "traced": []}
    spans = 0
    for _ in range(rounds + 1):  # the first round of each warms up
        for label in ("untraced", "traced"):
            providers: list[TracerProvider] = []
            tracers = StageTracers()
            if label == "traced":
                stage_tracers, providers, exporter = make_tracers()
                tracers = StageTracers(**stage_tracers)
            pipe = InProcessPipeline(tracers=tracers)
            start = time.perf_counter()
            pipe.run(take)
            elapsed = (time.perf_counter() - start) / frames
            assert len(pipe.applied) == frames, "the in-process pipeline lost frames"
            pipe.close()
            for provider in providers:
                provider.shutdown()
            if label == "traced":
                spans = exporter.spans
            times[label].append(elapsed)
    untraced = min(times["untraced"][1:])
    traced = min(times["traced"][1:])
    return {
        "untraced_ms_per_frame": untraced * 1e3,
        "traced_ms_per_frame": traced * 1e3,
        "overhead_us_per_frame": (traced - untraced) * 1e6,
        "ratio": traced / untraced,
        "untraced_median_ms": statistics.median(times["untraced"][1:]) * 1e3,
        "traced_median_ms": statistics.median(times["traced"][1:]) * 1e3,
        "spans_per_frame": spans / frames,
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="mocapline bench tracing", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--frames", type=int, default=600, help="frames per pipeline round")
    p.add_argument("--span-frames", type=int, default=5000, help="frames per span-only round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", action="store_true", help="one JSON object")
    args = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    spans = measure_spans(args.span_frames, args.rounds)
    pipeline = measure_pipeline(args.frames, args.rounds)
    if args.json:
        print(json.dumps({"spans": spans, "pipeline": pipeline}))
        return 0
    print("tracing cost per frame (4 stage spans, batch export encoded to OTLP protobuf)")
    print(f"  spans alone   traced {spans['traced_us_per_frame']:8.1f} us   untraced "
          f"{spans['untraced_us_per_frame']:6.2f} us   sampled out {spans['sampled_out_us_per_frame']:6.1f} us   "
          f"({spans['otlp_bytes_per_span']:.0f} B/span on the wire)")
    print(f"  pipeline      traced {pipeline['traced_ms_per_frame']:8.3f} ms   untraced "
          f"{pipeline['untraced_ms_per_frame']:6.3f} ms   overhead {pipeline['overhead_us_per_frame']:6.1f} us/frame   "
          f"ratio {pipeline['ratio']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
