"""A real Prometheus server scraping a real pipeline: the per-stage counts it stores equal the ledger.

The pipeline (NATS, capture, retarget, streamer, viewer, auditor) runs as processes on free loopback
ports (mocapline.tools.pipeline.stack, as `mocapline up` starts it). Prometheus (Debian package
`prometheus`, installed by .ci/run) runs with the project's scrape config,
deploy/prometheus/prometheus.yml, its targets pointed at the services' /metrics ports and its
interval at 1 s. After each take is drained, the test waits for a scrape that started after the
drain and reads everything back through Prometheus' HTTP API.
"""

import json
import os
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from mocapline.core.metrics import SERVICES
from mocapline.core.verdict import BOTH, MAIN_ONLY
from mocapline.tools.emitter.emitter import TakePlan, emit_take
from mocapline.tools.pipeline.procs import free_tcp_port
from mocapline.tools.pipeline.stack import STAGES, Stack, local_config

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]
SCRAPE_CONFIG = ROOT / "deploy/prometheus/prometheus.yml"
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"


class Prometheus:
    """A prometheus server on a free loopback port, storage in a temporary directory."""

    def __init__(self, workdir: Path, metrics_ports: dict[str, int]) -> None:
        config = yaml.safe_load(SCRAPE_CONFIG.read_text())
        config["global"].update(scrape_interval="1s", scrape_timeout="1s", evaluation_interval="1s")
        retargeted = set()
        for job in config["scrape_configs"]:
            job.pop("scrape_interval", None)
            job.pop("scrape_timeout", None)
            job.pop("http_sd_configs", None)  # the replicas' discovery (tests/test_discovery.py): none here
            for static in job.get("static_configs", []):
                service = static["labels"]["service"]
                static["targets"] = [f"127.0.0.1:{metrics_ports[service]}"]
                retargeted.add(service)
        assert retargeted == set(SERVICES), f"the scrape config misses {set(SERVICES) - retargeted}"
        for job in config["scrape_configs"]:  # the robot bridge (an optional stage) is not in this stack
            job["static_configs"] = [s for s in job.get("static_configs", []) if s["labels"]["service"] != "robot"]
        self.job = config["scrape_configs"][0]["job_name"]
        path = workdir / "prometheus.yml"
        path.write_text(json.dumps(config, indent=1))  # JSON is YAML
        self.url = f"http://127.0.0.1:{free_tcp_port()}"
        self.log = open(workdir / "prometheus.log", "w")  # noqa: SIM115 - closed by stop()
        self.proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={path}", f"--storage.tsdb.path={workdir / 'data'}",
             f"--web.listen-address={self.url.removeprefix('http://')}", "--storage.tsdb.retention.time=1h"],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while True:
            assert self.proc.poll() is None, (workdir / "prometheus.log").read_text()
            try:
                urllib.request.urlopen(f"{self.url}/-/ready", timeout=1).read()
                return
            except OSError:
                assert time.monotonic() < deadline, "prometheus did not become ready"
                time.sleep(0.2)

    def query(self, promql: str) -> list[dict]:
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        body = json.loads(urllib.request.urlopen(url, timeout=10).read())
        assert body["status"] == "success", body
        return body["data"]["result"]

    def values(self, promql: str, *labels: str) -> dict:
        """{label values (or one label's value): float} of an instant query."""
        out = {}
        for series in self.query(promql):
            key = tuple(series["metric"].get(name, "") for name in labels)
            out[key[0] if len(key) == 1 else key] = float(series["value"][1])
        return out

    def scalar(self, promql: str) -> float | None:
        result = self.query(promql)
        return float(result[0]["value"][1]) if result else None

    def wait_for_scrape_after(self, t: float, timeout: float = 60.0) -> None:
        """Until every target has been scraped by a scrape that started after t (unix seconds)."""
        deadline = time.monotonic() + timeout
        while True:
            up = self.values(f'up{{job="{self.job}"}}', "service")
            oldest = self.scalar(f'min(timestamp(up{{job="{self.job}"}}))')
            if (len(up) == len(SERVICES) - 1 and all(v == 1 for v in up.values())  # all but the robot
                    and oldest is not None and oldest > t):
                return
            assert time.monotonic() < deadline, f"no scrape of every target after the drain: up={up}"
            time.sleep(0.25)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


@pytest.fixture
def observed(tmp_path) -> Iterator[tuple[Stack, Prometheus]]:
    if not Path(PROMETHEUS).exists():
        message = "prometheus is not installed (Debian: apt-get install prometheus; .ci/run does it)"
        if os.environ.get("CI"):
            pytest.fail(message + ": CI must run this test")
        pytest.skip(message)
    metrics_ports = {name: free_tcp_port() for name in SERVICES}
    config = local_config(
        merge=False, viewer=True, input_fps=120.0, output_fps=120.0, log_dir=tmp_path / "logs",
        metrics_ports=metrics_ports, extra_env={"MOCAPLINE_METRICS_HOST": "127.0.0.1"},
    )
    stack = Stack(config)
    prometheus = None
    try:
        stack.start()
        stack.wait_ready()
        prometheus = Prometheus(tmp_path, metrics_ports)
        yield stack, prometheus
    finally:
        stack.stop()
        if prometheus is not None:
            prometheus.stop()


def run_take(stack: Stack, plan: TakePlan) -> tuple[dict, dict, float]:
    c = stack.config
    emit_take(plan, [("127.0.0.1", c.main_port), ("127.0.0.1", c.side_port)], rate_hz=600.0)
    finals = stack.drain()
    drained_at = time.time()
    return finals, stack.verdict(finals), drained_at


def expected_counts(finals: dict, verdict: dict) -> dict:
    """What each stage's series must hold after one drained take, from the ledger and the stages'
    final counts."""
    cap, ret, st, view = (finals[s] for s in STAGES)
    assert verdict["input_pending"] == 0 and verdict["robot_pending"] == 0
    return {
        ("capture", "in"): verdict["source_received"],
        ("capture", "out"): verdict["source_unique_frames"],
        ("retarget", "in"): ret["frames_in"],
        ("retarget", "out"): verdict["gmr_processed"],
        ("streamer", "in"): st["frames_in"],
        ("streamer", "out"): verdict["zmq_sent"],
        ("viewer", "in"): view["viewer_received"],
        ("viewer", "out"): verdict["viewer_applied"],
        "mocapline_source_unique_frames_total": verdict["source_unique_frames"],
        "mocapline_source_missing_indices_total": verdict["source_missing_indices"],
        "mocapline_source_duplicate_indices_total": verdict["source_duplicate_indices"],
        "mocapline_source_backward_indices_total": verdict["source_backward_indices"],
        "capture_rejected": verdict["rejected_datagrams"],
        "capture_rejected_by_reason": cap["rejected_by_reason"],
        "motion_generated": verdict["motion_generated"],
    }


def check_stage_series(prom: Prometheus, want: dict, last_index: int) -> None:
    frames = prom.values("mocapline_frames_total", "stage", "direction")
    assert frames == {k: float(v) for k, v in want.items() if isinstance(k, tuple)}
    assert frames[("streamer", "out")] == want["motion_generated"]  # nothing generated was left unsent
    for name in ("mocapline_source_unique_frames_total", "mocapline_source_missing_indices_total",
                 "mocapline_source_duplicate_indices_total", "mocapline_source_backward_indices_total"):
        assert prom.scalar(name) == want[name], name
    rejected = prom.values('mocapline_rejected_total{stage="capture"}', "reason")
    assert sum(rejected.values()) == want["capture_rejected"]
    assert {r: n for r, n in rejected.items() if n} == want["capture_rejected_by_reason"]
    assert "source_not_allowed" in rejected  # pre-created: the series exists at 0
    assert prom.values("mocapline_pending", "stage") == {s: 0.0 for s in STAGES}
    last = prom.values("mocapline_last_posture_index", "stage")
    assert last == {s: float(last_index) for s in STAGES}
    # one latency observation per frame passed on
    counts = prom.values("mocapline_stage_seconds_count", "stage")
    assert counts == {s: frames[(s, "out")] for s in STAGES}
    assert prom.scalar("mocapline_end_to_end_seconds_count") == frames[("viewer", "out")]
    p99 = prom.scalar("histogram_quantile(0.99, sum by (le) (mocapline_end_to_end_seconds_bucket))")
    assert p99 is not None and p99 > 0


def wait_for_auditor(prom: Prometheus, verdict: dict, timeout: float = 60.0) -> dict:
    """The auditor's gauges follow its 1 Hz heartbeats: wait until they settle on the take's ledger."""
    fields = ("source_received", "source_unique_frames", "source_missing_indices", "gmr_processed",
              "motion_generated", "zmq_sent", "viewer_applied")
    want = {f: float(verdict[f]) for f in fields}
    deadline = time.monotonic() + timeout
    while True:
        got = prom.values("mocapline_ledger", "field")
        conserved = prom.scalar("mocapline_unique_frames_conserved")
        if {f: got.get(f) for f in fields} == want and conserved == verdict["unique_frames_conserved"]:
            return got
        if time.monotonic() > deadline:
            assert {f: got.get(f) for f in fields} == want
            assert conserved == verdict["unique_frames_conserved"]
        time.sleep(0.5)


def test_prometheus_counts_equal_the_ledger(observed) -> None:
    stack, prom = observed
    # series exist at 0 before the first frame (scraped before any datagram was sent)
    prom.wait_for_scrape_after(time.time())
    assert prom.values('mocapline_frames_total{stage="viewer"}', "direction") == {"in": 0.0, "out": 0.0}
    assert prom.values("mocapline_missing_indices", "classification") == {
        "main_only": 0.0, "both": 0.0, "side_only": 0.0, "main_no_side_data": 0.0, "late": 0.0}

    # Take 1: Axis repeats its last frame, 40 garbage datagrams: conserved.
    plan1 = TakePlan(frames=600, first_index=9368, duplicate={9967}, garbage=40, seed=3)
    finals1, v1, drained1 = run_take(stack, plan1)
    assert v1["unique_frames_conserved"] == 1 and v1["source_duplicate_indices"] == 1
    assert v1["rejected_datagrams"] == 40
    want1 = expected_counts(finals1, v1)
    prom.wait_for_scrape_after(drained1)
    check_stage_series(prom, want1, last_index=9967)
    wait_for_auditor(prom, v1)

    # Take 2 after a reset (the ledgers restart at 0, the counters keep counting): one index lost
    # upstream of both paths, one on the main path only.
    stack.reset()
    plan2 = TakePlan(frames=300, first_index=20000, skip_all={20100}, skip_main={20150})
    finals2, v2, drained2 = run_take(stack, plan2)
    assert v2["source_missing_indices"] == 2 and v2["unique_frames_conserved"] == 0
    want2 = expected_counts(finals2, v2)
    total = {}
    for key, value in want1.items():
        if isinstance(value, dict):
            total[key] = {r: value.get(r, 0) + want2[key].get(r, 0) for r in {*value, *want2[key]}}
            total[key] = {r: n for r, n in total[key].items() if n}
        else:
            total[key] = value + want2[key]
    prom.wait_for_scrape_after(drained2)
    check_stage_series(prom, total, last_index=20299)
    wait_for_auditor(prom, v2)
    by_class = prom.values("mocapline_missing_indices", "classification")
    assert by_class[BOTH] == 1 and by_class[MAIN_ONLY] == 1
    # the dashboard's verdict stat and the range counts, as Grafana would ask for them
    assert prom.scalar("mocapline_unique_frames_conserved") == 0
    in_range = prom.values('sum by (stage) (increase(mocapline_frames_total{direction="out"}[10m]))', "stage")
    assert set(in_range) == set(STAGES)
