"""OpenTelemetry tracing (opentelemetry-sdk): one trace per posture_index across every service.

capture starts the trace: span ``capture.parse_fk``, from the datagram's arrival (the receive
thread's timestamp) through parse, merge and FK to the HumanFrame sent. The W3C ``traceparent`` of
each stage's span travels in the frame it sends (HumanFrame -> RobotFrame -> MocapFrame, through
the interpolator's MotionSample), so the next stage's span is its child: ``retarget.ik``,
``streamer.interpolate_send`` (until the frame's last interpolated sample is sent) and
``viewer.validate_apply`` (from the message's arrival to qpos written and ``mj_kinematics``). Every
span has the attribute ``mocapline.posture_index``; a trace is the chain capture -> retarget ->
streamer -> viewer of one posture_index. A stage whose tracing is off passes the traceparent it
received on unchanged, so the stages that do trace still join one trace. A frame that an
output-rate downsampling folds into the next sample ends its trace at the streamer; upsampling
gives a frame several viewer spans. A bridged frame (a gap upstream: 100..103 missing, the
streamer interpolates frames 100..103 from the real 99 and 104) is made from the real frame after
the gap and sits in its trace: its viewer span has ``mocapline.posture_index`` 100..103 (the index
it stands in for), ``mocapline.bridged`` true and ``mocapline.bridged_from`` 104.

Configuration: the standard environment variables, read by the SDK itself where it can:
``OTEL_SERVICE_NAME`` (default ``mocapline-<stage>``), ``OTEL_RESOURCE_ATTRIBUTES``,
``OTEL_TRACES_EXPORTER`` (``otlp``, ``console``, ``none``; a comma list), ``OTEL_EXPORTER_OTLP_ENDPOINT``
/ ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (+ ``_HEADERS``, ``_TIMEOUT``, ``_COMPRESSION``),
``OTEL_EXPORTER_OTLP_PROTOCOL`` (``http/protobuf``; ``grpc`` only where
opentelemetry-exporter-otlp-proto-grpc is installed), ``OTEL_TRACES_SAMPLER`` / ``OTEL_TRACES_SAMPLER_ARG``,
``OTEL_BSP_*`` (batch processor), ``OTEL_SDK_DISABLED``.

Default: **off**, unless ``OTEL_TRACES_EXPORTER`` names an exporter or an OTLP endpoint is set
(``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``); ``OTEL_SDK_DISABLED=true``
always turns it off. The OpenTelemetry spec would export to localhost:4318 by default; we do not:

- the point of mocapline is the frame path, and tracing costs it: each span is made in the
  stage's own loop (start with the remote parent, attribute, traceparent, end) and encoded to OTLP
  in the batch processor's thread, and a sampled-out frame still pays for the parse and the
  sampler, while off it is one ``is None`` test. That CPU is taken on the hosts that also run the
  IK and the viewer (what it comes to: ``mocapline bench tracing``, docs/benchmarks.md).
- a trace per posture_index is 4 spans per frame: 240-480 spans/s per suit at 60-120 Hz. Whether
  a backend should take that is a choice to make, not a default.
- with no collector running (a laptop with a suit, the tests), a default-on exporter retries a dead
  endpoint from every service and logs an error per batch.

When on, sampling is the SDK's (default ``parentbased_always_on``: every posture_index). capture is
the root, so its sampler decides per posture_index (``OTEL_TRACES_SAMPLER=parentbased_traceidratio``,
``OTEL_TRACES_SAMPLER_ARG=0.1``: one index in ten) and the other stages follow the sampled flag in
the traceparent (their default parent-based sampler): a trace is complete or absent, never partial.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SpanExporter,
)
from opentelemetry.trace import NonRecordingSpan, Span, SpanContext, TraceFlags

log = logging.getLogger(__name__)

ATTR_POSTURE_INDEX = "mocapline.posture_index"
# A viewer span of a bridged frame (one standing in for a posture_index that never arrived):
# bridged = true, and the real posture_index it was made from (whose trace it sits in).
ATTR_BRIDGED = "mocapline.bridged"
ATTR_BRIDGED_FROM = "mocapline.bridged_from"
SPAN_NAMES: dict[str, str] = {
    "capture": "capture.parse_fk",
    "retarget": "retarget.ik",
    "streamer": "streamer.interpolate_send",
    "viewer": "viewer.validate_apply",
}
_TRUE = {"true", "1", "yes", "on"}
_HEX = frozenset("0123456789abcdef")


def enabled(env: Mapping[str, str] | None = None) -> bool:
    """Whether the OTEL_* variables ask for tracing (see the module docstring for the default)."""
    env = os.environ if env is None else env
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() in _TRUE:
        return False
    exporters = env.get("OTEL_TRACES_EXPORTER")
    if exporters is not None:
        return any(name.strip() not in ("", "none") for name in exporters.split(","))
    return bool(env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


def format_traceparent(span: Span) -> str:
    """The W3C traceparent of a span ('' for an invalid one)."""
    ctx = span.get_span_context()
    if not ctx.is_valid:
        return ""
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def parse_traceparent(text: str) -> SpanContext | None:
    """A remote SpanContext from a W3C traceparent, or None if it is empty or malformed."""
    if len(text) < 55 or text[2] != "-" or text[35] != "-" or text[52] != "-":
        return None
    version, trace_hex, span_hex, flags_hex = text[:2], text[3:35], text[36:52], text[53:55]
    if version == "ff" or not _HEX.issuperset(text[:2] + trace_hex + span_hex + flags_hex):
        return None
    if version == "00" and len(text) != 55:
        return None
    trace_id, span_id = int(trace_hex, 16), int(span_hex, 16)
    if trace_id == 0 or span_id == 0:
        return None
    return SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(int(flags_hex, 16)))


class StageTracer:
    """One stage's spans: ``start(posture_index, parent_traceparent, start_ns)`` -> a span to end."""

    def __init__(self, stage: str, tracer: trace.Tracer, provider: TracerProvider | None = None) -> None:
        self.stage = stage
        self.span_name = SPAN_NAMES[stage]
        self.tracer = tracer
        self.provider = provider

    def start(self, posture_index: int, parent: str = "", start_ns: int | None = None) -> Span:
        """A span of this stage for one posture_index: a child of ``parent`` (a traceparent) when
        it is valid, else the root of a new trace."""
        remote = parse_traceparent(parent) if parent else None
        context = trace.set_span_in_context(NonRecordingSpan(remote)) if remote is not None else None
        return self.tracer.start_span(
            self.span_name, context=context, start_time=start_ns, attributes={ATTR_POSTURE_INDEX: posture_index}
        )

    def carry(self, frame: Any, start_ns: int | None = None) -> Span:
        """A span for ``frame`` (a HumanFrame or RobotFrame: ``posture_index``, ``traceparent``),
        a child of the trace it carries (or a new trace); the frame then carries this span on."""
        span = self.start(frame.posture_index, frame.traceparent, start_ns)
        frame.traceparent = format_traceparent(span)
        return span

    def shutdown(self) -> None:
        """Export what is queued and stop (at service exit)."""
        if self.provider is not None:
            self.provider.shutdown()


def _otlp_exporter(env: Mapping[str, str]) -> SpanExporter:
    protocol = (env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                or "http/protobuf").strip()
    if protocol == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                OTLPSpanExporter as GrpcExporter,
            )
        except ImportError:
            log.warning("OTLP over grpc needs opentelemetry-exporter-otlp-proto-grpc; exporting over "
                        "http/protobuf instead (point the endpoint at the collector's HTTP port, 4318)")
        else:
            return GrpcExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()


def make_provider(stage: str, env: Mapping[str, str] | None = None) -> TracerProvider:
    """A TracerProvider configured from OTEL_* (resource, sampler, exporters, batch processor)."""
    env = os.environ if env is None else env
    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: f"mocapline-{stage}"}))
    provider = TracerProvider(resource=resource)  # sampler from OTEL_TRACES_SAMPLER(_ARG)
    names = [n.strip() for n in env.get("OTEL_TRACES_EXPORTER", "otlp").split(",") if n.strip()]
    for name in names:
        exporter: SpanExporter | None = None
        if name == "otlp":
            exporter = _otlp_exporter(env)
        elif name == "console":
            exporter = ConsoleSpanExporter()
        elif name != "none":
            log.warning("OTEL_TRACES_EXPORTER: unknown exporter %r ignored (otlp, console, none)", name)
        if exporter is not None:
            provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def setup(stage: str, env: Mapping[str, str] | None = None) -> StageTracer | None:
    """The stage's tracer when the OTEL_* variables turn tracing on, else None (off: no cost
    beyond one ``is None`` test per frame)."""
    env = os.environ if env is None else env
    if not enabled(env):
        return None
    provider = make_provider(stage, env)
    log.info("tracing on: service %s, exporters %s, sampler %s", provider.resource.attributes.get(SERVICE_NAME),
             env.get("OTEL_TRACES_EXPORTER", "otlp"), type(provider.sampler).__name__)
    return StageTracer(stage, provider.get_tracer("mocapline"), provider)


def for_provider(stage: str, provider: Any) -> StageTracer:
    """A stage tracer on a given TracerProvider (tests, benchmarks)."""
    return StageTracer(stage, provider.get_tracer("mocapline"), None)
