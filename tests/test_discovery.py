"""The auditor's Prometheus service discovery of scaled replicas (``--sd-port``)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from helpers import published

from mocapline.core.counters import CaptureCounts, RetargetCounts, StreamerCounts, to_json, zero
from mocapline.core.metrics import AUTO_PORT, ServiceMetrics, metrics_port
from mocapline.services.auditor.discovery import DiscoveryServer, targets


def test_targets_list_the_services_that_tell_a_metrics_port() -> None:
    services = {
        "capture": published(CaptureCounts, source_unique_frames=3),  # a fixed port, in the static config
        "retarget.w2": published(RetargetCounts, metrics_port=40002),
        "retarget.w1": published(RetargetCounts, metrics_port=40001),
        "retarget.w3": {**published(RetargetCounts), "metrics_port": "40003"},  # not a number: unreadable
        "retarget.w4": published(RetargetCounts, metrics_port=0),
        "retarget.w5": {"metrics_port": 40005},  # no schema version: another mocapline's, unreadable
        "streamer": published(StreamerCounts, metrics_port=40010),
        "sim": {"metrics_port": 40020},  # not a stage
    }
    assert targets(services, "127.0.0.1") == [
        {"targets": ["127.0.0.1:40001"], "labels": {"service": "retarget", "worker": "w1"}},
        {"targets": ["127.0.0.1:40002"], "labels": {"service": "retarget", "worker": "w2"}},
        {"targets": ["127.0.0.1:40010"], "labels": {"service": "streamer"}},
    ]


def test_a_target_on_another_host_is_named_by_the_address_its_heartbeat_tells() -> None:
    services = {
        "retarget.w1": published(RetargetCounts, metrics_port=40001, metrics_host="10.200.0.5"),  # --advertise-host
        "retarget.w2": published(RetargetCounts, metrics_port=40002, metrics_host=""),
        "retarget.w3": published(RetargetCounts, metrics_port=40003),
    }
    assert [g["targets"] for g in targets(services, "127.0.0.1")] == [
        ["10.200.0.5:40001"], ["127.0.0.1:40002"], ["127.0.0.1:40003"]]


def test_metrics_port_auto_serves_on_a_port_the_system_picks() -> None:
    assert metrics_port("auto") == AUTO_PORT and metrics_port("9102") == 9102
    metrics = ServiceMetrics("retarget")
    assert metrics.serve(AUTO_PORT, "127.0.0.1")
    try:
        assert metrics.auto_port and metrics.port is not None and metrics.port > 0
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics.port}/metrics", timeout=5) as r:
            assert b"mocapline_frames_total" in r.read()
    finally:
        metrics.close()
    assert metrics.port is None


def test_the_endpoint_answers_prometheus_with_the_live_services() -> None:
    live: dict[str, dict[str, object]] = {"retarget.w1": published(RetargetCounts, metrics_port=40001)}
    server = DiscoveryServer("127.0.0.1", 0, lambda: live).start()
    try:
        def get(path: str) -> list[dict[str, object]]:
            with urllib.request.urlopen(f"http://127.0.0.1:{server.port}{path}", timeout=5) as r:
                assert r.headers["Content-Type"] == "application/json"
                return json.loads(r.read())

        assert get("/targets") == [{"targets": ["127.0.0.1:40001"], "labels": {"service": "retarget", "worker": "w1"}}]
        live["retarget.w2"] = published(RetargetCounts, metrics_port=40002)
        assert [g["labels"]["worker"] for g in get("/targets")] == ["w1", "w2"]
        with pytest.raises(urllib.error.HTTPError):
            get("/other")
    finally:
        server.close()


class _Quiet:
    """A handler with nothing to say (Stage.heartbeat adds the rest)."""

    def heartbeat(self) -> RetargetCounts:
        return zero(RetargetCounts)


@pytest.mark.parametrize(("advertise", "bind", "told"), [
    ("10.0.0.7", "0.0.0.0", "10.0.0.7"),  # a worker's --advertise-host
    ("", "127.0.0.1", "127.0.0.1"),  # /metrics bound on one address: that one
    ("", "0.0.0.0", None),  # every address: the auditor's own idea of the host
])
def test_a_replica_tells_where_its_metrics_are_reached(advertise: str, bind: str, told: str | None) -> None:
    from mocapline.core.stage import Stage, StageSettings

    with Stage("retarget", StageSettings(nats="", metrics_port=AUTO_PORT, metrics_host=bind),
               advertise_host=advertise) as stage:
        hb = stage.heartbeat(_Quiet())
        assert hb.metrics_port == stage.metrics.port and hb.metrics_host == told
        assert ("metrics_host" in to_json(hb)) == (told is not None)
