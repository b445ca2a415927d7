"""mocapline.core.metrics: the catalogue, counters that mirror the services' counts, FastHistogram, the exporter."""

import importlib
import logging
import math
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from mocapline.core.counters import (
    CaptureCounts,
    DurableCounts,
    LinkReceiverCounts,
    LinkSenderCounts,
    StreamerCounts,
    ViewerCounts,
    zero,
)
from mocapline.core.metrics import (
    DEFAULT_PORTS,
    LINK_REJECT_REASONS,
    MISSING_CLASSES,
    SERVICES,
    STAGE_BUCKETS,
    FastHistogram,
    ServiceMetrics,
)
from mocapline.core.verdict import BOTH, LATE, MAIN_ONLY, SIDE_ONLY, UNKNOWN
from mocapline.tools.pipeline.procs import free_tcp_port

SERVICE_MODULES = {
    "capture": "mocapline.services.capture.service",
    "retarget": "mocapline.services.retarget.service",
    "streamer": "mocapline.services.streamer.service",
    "viewer": "mocapline.services.viewer.service",
    "auditor": "mocapline.services.auditor.service",
    "robot": "mocapline.services.robot.service",
}


def samples(metrics: ServiceMetrics) -> dict[tuple, float]:
    text = generate_latest(metrics.registry).decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_fast_histogram_matches_prometheus_client() -> None:
    registry = CollectorRegistry()
    reference = Histogram("ref_seconds", "r", buckets=STAGE_BUCKETS, registry=registry)
    fast = FastHistogram(STAGE_BUCKETS)
    values = [0.0, 0.0001, 0.00010001, 0.0025, 0.003, 1.0, 2.5, 2.50001, 99.0, *STAGE_BUCKETS]
    for v in values:
        reference.observe(v)
        fast.observe(v)
    fast.publish()
    buckets, total = fast.exposition()
    ref = {}
    for fam in registry.collect():
        for s in fam.samples:
            if s.name.endswith("_bucket"):
                ref[float(s.labels["le"])] = s.value
    assert {float(le): n for le, n in buckets} == ref  # le is inclusive, +Inf counts everything
    assert total == pytest.approx(sum(values)) and fast.count == len(values)


def test_published_histogram_changes_only_at_sync() -> None:
    m = ServiceMetrics("viewer")
    m.stage_seconds.observe(0.01)
    m.end_to_end_seconds.observe(0.02)
    before = samples(m)
    assert before[("mocapline_stage_seconds_count", (("stage", "viewer"),))] == 0
    m.sync(zero(ViewerCounts, viewer_received=1, viewer_applied=1))
    after = samples(m)
    assert after[("mocapline_stage_seconds_count", (("stage", "viewer"),))] == 1
    assert after[("mocapline_end_to_end_seconds_count", ())] == 1


def test_series_exist_at_zero_from_start_up() -> None:
    m = ServiceMetrics("retarget", reasons=(*LINK_REJECT_REASONS, "decode"))
    got = samples(m)
    for direction in ("in", "out"):
        assert got[("mocapline_frames_total", (("direction", direction), ("stage", "retarget")))] == 0
    for reason in (*LINK_REJECT_REASONS, "decode"):
        assert got[("mocapline_rejected_total", (("reason", reason), ("stage", "retarget")))] == 0
    assert got[("mocapline_pending", (("stage", "retarget"),))] == 0
    assert got[("mocapline_last_posture_index", (("stage", "retarget"),))] == -1
    assert got[("mocapline_ik_failed_total", ())] == 0
    assert not any(name.startswith("mocapline_source_") for name, _ in got)  # capture's only
    auditor = samples(ServiceMetrics("auditor"))
    assert {dict(labels)["classification"] for name, labels in auditor if name == "mocapline_missing_indices"} == \
        set(MISSING_CLASSES) == {MAIN_ONLY, BOTH, SIDE_ONLY, UNKNOWN, LATE}


def capture_beat(received: int, unique: int, **extra) -> CaptureCounts:
    return zero(CaptureCounts, source_received=received, source_unique_frames=unique, human_frames_sent=unique,
                source_missing_indices=extra.get("missing", 0), last_posture_index=extra.get("last"),
                rejected_by_reason=extra.get("rejected", {}))


def test_counters_follow_the_ledger_across_resets() -> None:
    m = ServiceMetrics("capture", reasons=("not_bvh",))
    m.sync(capture_beat(10, 9, rejected={"not_bvh": 2}, last=108))
    m.sync(capture_beat(30, 28, missing=1, rejected={"not_bvh": 5, "truncated": 1}, last=127))
    m.sync(capture_beat(0, 0))  # reset: a new take, the ledger restarts at 0
    m.sync(capture_beat(7, 7, rejected={"not_bvh": 1}, last=6))
    got = samples(m)
    frames = {dict(labels)["direction"]: v for (name, labels), v in got.items() if name == "mocapline_frames_total"}
    assert frames == {"in": 37, "out": 35}
    assert got[("mocapline_source_unique_frames_total", ())] == 35
    assert got[("mocapline_source_missing_indices_total", ())] == 1
    assert got[("mocapline_rejected_total", (("reason", "not_bvh"), ("stage", "capture")))] == 6
    assert got[("mocapline_rejected_total", (("reason", "truncated"), ("stage", "capture")))] == 1
    assert got[("mocapline_last_posture_index", (("stage", "capture"),))] == 6
    m.sync(capture_beat(7, 7))  # last_posture_index None (no frame yet / end of take): kept
    assert samples(m)[("mocapline_last_posture_index", (("stage", "capture"),))] == 6


def test_auditor_exports_the_verdict_and_missing_by_class() -> None:
    m = ServiceMetrics("auditor")
    verdict = {"unique_frames_conserved": 0, "source_unique_frames": 97, "gmr_processed": 97, "viewer_applied": None,
               "missing_by_path": {BOTH: [[5, 6]], MAIN_ONLY: [[9, 9]], SIDE_ONLY: [], UNKNOWN: []}}
    m.sync_verdict(verdict)
    got = samples(m)
    assert got[("mocapline_unique_frames_conserved", ())] == 0
    assert got[("mocapline_missing_indices", (("classification", BOTH),))] == 2
    assert got[("mocapline_missing_indices", (("classification", MAIN_ONLY),))] == 1
    assert got[("mocapline_ledger", (("field", "gmr_processed"),))] == 97
    assert math.isnan(got[("mocapline_ledger", (("field", "viewer_applied"),))])
    m.sync_verdict({**verdict, "unique_frames_conserved": 1, "missing_by_path": {}})
    got = samples(m)
    assert got[("mocapline_unique_frames_conserved", ())] == 1
    assert got[("mocapline_missing_indices", (("classification", BOTH),))] == 0


def test_serve_and_a_taken_port(caplog) -> None:
    m = ServiceMetrics("streamer", process_metrics=True)
    port = free_tcp_port()
    assert m.serve(port, "127.0.0.1")
    try:
        m.sync(zero(StreamerCounts, frames_in=3, zmq_sent=2, pending=1, last_posture_index=41))
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        assert 'mocapline_frames_total{direction="out",stage="streamer"} 2.0' in text
        assert "process_cpu_seconds_total" in text and "_created" not in text
        other = ServiceMetrics("streamer")
        with caplog.at_level(logging.WARNING, logger="mocapline.core.metrics"):
            assert not other.serve(port, "127.0.0.1")  # taken: logged, metrics off, no exception
        assert "cannot serve" in caplog.text and not other.serving
    finally:
        m.close()
    again = ServiceMetrics("streamer")
    assert again.serve(port, "127.0.0.1")  # closed: the port can be served again
    again.close()
    assert not ServiceMetrics("streamer").serve(0)  # 0 = off


@pytest.mark.parametrize("service", SERVICES)
def test_every_service_has_a_metrics_port_flag_and_env_var(service, monkeypatch) -> None:
    module = importlib.import_module(SERVICE_MODULES[service])
    monkeypatch.delenv("MOCAPLINE_METRICS_PORT", raising=False)
    assert module.build_parser().parse_args([]).metrics_port == DEFAULT_PORTS[service]
    monkeypatch.setenv("MOCAPLINE_METRICS_PORT", "0")
    assert module.build_parser().parse_args([]).metrics_port == 0
    assert module.build_parser().parse_args(["--metrics-port", "19999"]).metrics_port == 19999


def test_durable_links_are_exported_when_the_stage_runs_durable() -> None:
    m = ServiceMetrics("streamer")
    m.sync(zero(StreamerCounts, frames_in=5, zmq_sent=5))  # plain: the durable series stay at 0
    stage = (("stage", "streamer"),)
    assert samples(m)[("mocapline_unacked", stage)] == 0
    beat = zero(StreamerCounts, frames_in=9, zmq_sent=9, durable=zero(
        DurableCounts, log_bytes=4096, input_link=zero(LinkReceiverCounts, duplicates=3),
        output_link=zero(LinkSenderCounts, resent=40, unacked=120, in_flight=64)))
    m.sync(beat)
    got = samples(m)
    assert got[("mocapline_unacked", stage)] == 120
    assert got[("mocapline_link_in_flight", stage)] == 64
    assert got[("mocapline_durable_log_bytes", stage)] == 4096
    assert got[("mocapline_link_resent_total", stage)] == 40
    assert got[("mocapline_link_duplicates_total", stage)] == 3
    viewer = ServiceMetrics("viewer")
    assert ("mocapline_unacked", (("stage", "viewer"),)) not in samples(viewer)  # it sends nothing on
