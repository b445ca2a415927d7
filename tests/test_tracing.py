"""One trace per posture_index: capture starts it, the traceparent travels in HumanFrame ->
RobotFrame -> MocapFrame, every stage adds a child span.

In process: the services' own classes on inproc ZeroMQ links (mocapline.tools.pipeline.inprocess), each
stage with its own TracerProvider (as separate processes have) exporting to one in-memory
exporter. As processes: the real pipeline configured by OTEL_* environment variables, exporting
OTLP/HTTP to a small receiver in the test.
"""

import gzip
import threading
from collections import defaultdict
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import pairwise

import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased, TraceIdRatioBased
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    TraceFlags,
    set_span_in_context,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from mocapline.core import tracing
from mocapline.core.tracing import (
    ATTR_BRIDGED,
    ATTR_BRIDGED_FROM,
    ATTR_POSTURE_INDEX,
    SPAN_NAMES,
    for_provider,
    format_traceparent,
    parse_traceparent,
)
from mocapline.tools.emitter.emitter import TakePlan, emit_take
from mocapline.tools.pipeline.inprocess import (
    InProcessPipeline,
    StageTracers,
    emitted_take,
)
from mocapline.tools.pipeline.procs import free_tcp_port
from mocapline.tools.pipeline.stack import STAGES, Stack, local_config

CHAIN = [SPAN_NAMES[s] for s in STAGES]  # capture.parse_fk -> retarget.ik -> streamer... -> viewer...


def stage_tracers(exporter, capture_sampler=None, off=()) -> StageTracers:
    tracers = {}
    for stage in STAGES:
        if stage in off:
            continue
        sampler = capture_sampler if stage == "capture" and capture_sampler is not None else ParentBased(ALWAYS_ON)
        provider = TracerProvider(resource=Resource.create({"service.name": f"mocapline-{stage}"}), sampler=sampler)
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        tracers[stage] = for_provider(stage, provider)
    return StageTracers(**tracers)


@pytest.fixture(scope="module")
def take():
    return emitted_take(40, first_index=500)


def run(datagrams, tracers) -> InProcessPipeline:
    pipe = InProcessPipeline(tracers=tracers)
    try:
        pipe.run(datagrams)
    finally:
        pipe.close()
    return pipe


def by_index(spans) -> dict[int, list]:
    out = defaultdict(list)
    for span in spans:
        out[span.attributes[ATTR_POSTURE_INDEX]].append(span)
    return out


def assert_chain(spans: list) -> None:
    """Four spans of one posture_index: one per stage, one trace, each the child of the previous."""
    named = {s.name: s for s in spans}
    assert sorted(named) == sorted(CHAIN) and len(spans) == 4
    assert len({s.context.trace_id for s in spans}) == 1
    assert named[CHAIN[0]].parent is None  # capture starts the trace
    for parent, child in pairwise(CHAIN):
        assert named[child].parent is not None and named[child].parent.is_remote  # it came over the wire
        assert named[child].parent.span_id == named[parent].context.span_id, (parent, child)
    for stage, name in zip(STAGES, CHAIN, strict=True):
        assert named[name].resource.attributes["service.name"] == f"mocapline-{stage}"


def test_every_posture_index_is_one_trace_through_all_four_stages(take) -> None:
    exporter = InMemorySpanExporter()
    pipe = run(take, stage_tracers(exporter))
    assert pipe.applied == list(range(500, 540))
    traces = by_index(exporter.get_finished_spans())
    assert sorted(traces) == list(range(500, 540))
    for spans in traces.values():
        assert_chain(spans)
    assert len({spans[0].context.trace_id for spans in traces.values()}) == 40  # one trace per index
    viewer = [s for spans in traces.values() for s in spans if s.name == SPAN_NAMES["viewer"]]
    assert all(s.start_time <= s.end_time for s in viewer)


def test_sampling_is_decided_once_at_capture(take) -> None:
    exporter = InMemorySpanExporter()
    run(take, stage_tracers(exporter, capture_sampler=ParentBased(TraceIdRatioBased(0.5))))
    traces = by_index(exporter.get_finished_spans())
    # a trace is complete or absent: the other stages follow the sampled flag of the traceparent
    for spans in traces.values():
        assert_chain(spans)
    assert 0 < len(traces) < 40  # some indices sampled, some not (p = 2**-39 of all or none)


def test_a_stage_without_tracing_passes_the_trace_on(take) -> None:
    exporter = InMemorySpanExporter()
    run(take[:5], stage_tracers(exporter, off=("retarget",)))
    for spans in by_index(exporter.get_finished_spans()).values():
        named = {s.name: s for s in spans}
        assert set(named) == {SPAN_NAMES["capture"], SPAN_NAMES["streamer"], SPAN_NAMES["viewer"]}
        assert named[SPAN_NAMES["streamer"]].parent.span_id == named[SPAN_NAMES["capture"]].context.span_id


def test_bridged_frames_say_so_and_which_real_frame_they_were_made_from(take) -> None:
    """Main path missing 520..523: the viewer's spans of the bridged 520..523 sit in the trace of
    524 (the real frame they were interpolated towards) and carry mocapline.bridged and
    mocapline.bridged_from = 524; a real frame's span carries neither."""
    missing = range(520, 524)
    exporter = InMemorySpanExporter()
    pipe = run([d for k, d in enumerate(take) if 500 + k not in missing], stage_tracers(exporter))
    assert pipe.applied == list(range(500, 540))
    viewer = {s.attributes[ATTR_POSTURE_INDEX]: s for s in exporter.get_finished_spans()
              if s.name == SPAN_NAMES["viewer"]}
    real = by_index(s for s in exporter.get_finished_spans() if s.name != SPAN_NAMES["viewer"])
    for index in missing:
        span = viewer[index]
        assert span.attributes[ATTR_BRIDGED] is True and span.attributes[ATTR_BRIDGED_FROM] == 524
        assert span.context.trace_id == real[524][0].context.trace_id
        assert index not in real  # no capture span: it never arrived
    for index in (519, 524):
        assert ATTR_BRIDGED not in viewer[index].attributes and ATTR_BRIDGED_FROM not in viewer[index].attributes


def test_traceparent_is_w3c() -> None:
    ctx = SpanContext(0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, is_remote=False,
                      trace_flags=TraceFlags(1))
    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier, set_span_in_context(NonRecordingSpan(ctx)))
    text = format_traceparent(NonRecordingSpan(ctx))
    assert text == carrier["traceparent"] == "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    parsed = parse_traceparent(text)
    got = (parsed.trace_id, parsed.span_id, parsed.trace_flags, parsed.is_remote)
    assert got == (ctx.trace_id, ctx.span_id, 1, True)
    for bad in ("", "00-" + "0" * 32 + "-b7ad6b7169203331-01",
                "00-0af7651916cd43dd8448eb211c80319c-" + "0" * 16 + "-01",
                "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", text.upper().replace("00-", "zz-", 1),
                text + "-extra", text[:-1]):
        assert parse_traceparent(bad) is None, bad


def test_tracing_is_off_unless_the_environment_asks(monkeypatch) -> None:
    assert not tracing.enabled({})
    assert tracing.setup("capture", {}) is None
    assert tracing.enabled({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert tracing.enabled({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"})
    assert tracing.enabled({"OTEL_TRACES_EXPORTER": "console"})
    assert not tracing.enabled({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"})
    assert not tracing.enabled({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"})
    for var in ("OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG"):
        monkeypatch.delenv(var, raising=False)
    tracer = tracing.setup("retarget", {"OTEL_TRACES_EXPORTER": "none,console"})
    assert tracer is not None and tracer.provider.resource.attributes["service.name"] == "mocapline-retarget"
    tracer.shutdown()
    monkeypatch.setenv("OTEL_SERVICE_NAME", "g1-lab-retarget")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0.25")
    tracer = tracing.setup("retarget", {"OTEL_TRACES_EXPORTER": "console"})
    assert tracer.provider.resource.attributes["service.name"] == "g1-lab-retarget"
    assert "0.25" in tracer.provider.sampler.get_description()
    tracer.shutdown()


class OtlpReceiver:
    """OTLP/HTTP trace receiver (POST /v1/traces, protobuf) collecting every span it is sent."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, object]] = []  # (service.name, Span message)
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                request = trace_service_pb2.ExportTraceServiceRequest()
                request.ParseFromString(body)
                with receiver.lock:
                    for rs in request.resource_spans:
                        attrs = {a.key: a.value.string_value for a in rs.resource.attributes}
                        for ss in rs.scope_spans:
                            receiver.spans.extend((attrs.get("service.name", ""), s) for s in ss.spans)
                reply = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", free_tcp_port()), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def otlp() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver()
    yield receiver
    receiver.close()


@pytest.mark.integration
def test_the_processes_export_one_trace_per_posture_index(tmp_path, otlp) -> None:
    config = local_config(
        input_fps=120.0, output_fps=120.0, log_dir=tmp_path / "logs",
        metrics_ports={name: 0 for name in (*STAGES, "auditor")},
        extra_env={"OTEL_EXPORTER_OTLP_ENDPOINT": otlp.url, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
                   "OTEL_BSP_SCHEDULE_DELAY": "200", "OTEL_TRACES_SAMPLER": "parentbased_always_on"},
    )
    stack = Stack(config)
    try:
        stack.start()
        stack.wait_ready()
        emit_take(TakePlan(frames=60, first_index=7000), [("127.0.0.1", config.main_port)], rate_hz=300)
        verdict = stack.verdict(stack.drain())
    finally:
        stack.stop()  # each service exports what it still holds on its way out
    assert verdict["viewer_applied"] == 60 and verdict["unique_frames_conserved"] == 1
    traces: dict[int, list] = defaultdict(list)
    for service, span in otlp.spans:
        attrs = {a.key: a.value.int_value for a in span.attributes}
        traces[attrs[ATTR_POSTURE_INDEX]].append((service, span))
    assert sorted(traces) == list(range(7000, 7060))
    for index, spans in traces.items():
        named = {span.name: (service, span) for service, span in spans}
        assert sorted(named) == sorted(CHAIN) and len(spans) == 4, index
        assert len({span.trace_id for _, span in spans}) == 1
        assert named[CHAIN[0]][1].parent_span_id == b""
        for parent, child in pairwise(CHAIN):
            assert named[child][1].parent_span_id == named[parent][1].span_id
        assert [named[name][0] for name in CHAIN] == [f"mocapline-{stage}" for stage in STAGES]
