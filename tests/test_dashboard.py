"""The Grafana provisioning and dashboard against what the services really export.

Every PromQL expression of deploy/grafana/dashboards/mocapline.json may name only series that the
services' live metric registries expose (mocapline.core.metrics builds them exactly as the services do),
so a renamed metric cannot leave a panel silently blank. Where promtool is installed, every
expression must also parse as PromQL.
"""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from mocapline.core.metrics import FAMILIES, exported_names

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "deploy/grafana/dashboards/mocapline.json"
DATASOURCE = ROOT / "deploy/grafana/provisioning/datasources/prometheus.yml"
PROVIDER = ROOT / "deploy/grafana/provisioning/dashboards/dashboards.yml"
PROMETHEUS = ROOT / "deploy/prometheus/prometheus.yml"

# Series Prometheus itself adds to every target (not exported by a service).
PROMETHEUS_SYNTHETIC = {"up"}

_KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "offset",
             "bool", "inf", "nan", "atan2"}
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENT = re.compile(r"(?<![\w:$.])([a-zA-Z_:][a-zA-Z0-9_:]*)(?![\w:])(\s*\()?")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (functions, keywords, labels excluded)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals (label values)
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # range / subquery durations
    text = _GROUPING.sub("", text)
    names = set()
    for match in _IDENT.finditer(text):
        name, call = match.group(1), match.group(2)
        if call or name in _KEYWORDS or re.fullmatch(r"\d+[smhdwy]", name):
            continue
        names.add(name)
    return names


def dashboard_exprs() -> list[str]:
    board = json.loads(DASHBOARD.read_text())
    out = []

    def walk(panels: list) -> None:
        for panel in panels:
            out.extend(t["expr"] for t in panel.get("targets", []) if t.get("expr"))
            walk(panel.get("panels", []))

    walk(board["panels"])
    for var in board.get("templating", {}).get("list", []):
        query = var.get("query")
        if isinstance(query, dict):
            query = query.get("query")
        if isinstance(query, str) and query:
            out.append(query)
    return out


def test_the_extractor_finds_the_metrics_and_only_them() -> None:
    expr = ('histogram_quantile(0.99, sum by (stage, le) (rate(mocapline_stage_seconds_bucket{stage=~"a|b"}'
            '[$__rate_interval]))) / on(stage) group_left mocapline_pending offset 5m > bool 0')
    assert metric_names(expr) == {"mocapline_stage_seconds_bucket", "mocapline_pending"}
    assert metric_names('sum(rate(x_total{le="0.1",job="rate"}[5m])) by (job)') == {"x_total"}
    assert metric_names("up == 1") == {"up"}


def test_every_dashboard_expression_names_exported_metrics_only() -> None:
    exported = exported_names() | PROMETHEUS_SYNTHETIC
    exprs = dashboard_exprs()
    assert len(exprs) >= 15
    unknown = {}
    for expr in exprs:
        names = metric_names(expr)
        assert names, f"no metric in {expr!r}"
        missing = names - exported
        if missing:
            unknown[expr] = sorted(missing)
    assert not unknown, f"dashboard expressions name metrics no service exports: {unknown}"


def test_a_renamed_metric_would_be_caught() -> None:
    exported = exported_names()
    assert "mocapline_frames_total" in exported
    assert "mocapline_stage_seconds_bucket" in exported and "mocapline_stage_seconds" not in exported
    renamed = "sum by (stage) (rate(mocapline_frame_total[$__rate_interval]))"
    assert metric_names(renamed) - exported == {"mocapline_frame_total"}


def test_the_dashboard_shows_what_the_issue_asks_for() -> None:
    board = json.loads(DASHBOARD.read_text())
    panels = [p for p in board["panels"] if p["type"] != "row"]
    by_expr = [(p, t["expr"]) for p in panels for t in p["targets"]]
    assert any(p["type"] == "stat" and "mocapline_unique_frames_conserved" in e for p, e in by_expr)  # verdict
    assert any("increase(mocapline_frames_total" in e and "$__range" in e for _, e in by_expr)  # counts in range
    assert any("rate(mocapline_frames_total" in e for _, e in by_expr)  # per-stage rate
    assert any("mocapline_pending" in e for _, e in by_expr)
    assert any("mocapline_missing_indices" in e and "classification" in e for _, e in by_expr)
    quantiles = [e for _, e in by_expr if e.startswith("histogram_quantile(")]
    assert any("mocapline_stage_seconds_bucket" in e for e in quantiles)
    assert any("mocapline_end_to_end_seconds_bucket" in e for e in quantiles)
    uid = json.loads(DASHBOARD.read_text())["panels"][1]["datasource"]["uid"]
    datasources = yaml.safe_load(DATASOURCE.read_text())["datasources"]
    assert uid in {d["uid"] for d in datasources}  # panels point at the provisioned datasource


def test_every_family_of_the_catalogue_is_exported() -> None:
    exported = exported_names()
    for fam in FAMILIES:
        assert set(fam.sample_names) <= exported, fam.name
        assert fam.name.startswith("mocapline_")
        if fam.kind == "counter":
            assert fam.name.endswith("_total") and ("stage" in fam.labels or len(fam.services) == 1)
        if fam.kind == "histogram":
            assert fam.name.endswith("_seconds")


def test_datasource_time_interval_equals_the_scrape_interval() -> None:
    prometheus = yaml.safe_load(PROMETHEUS.read_text())
    interval = prometheus["global"]["scrape_interval"]
    assert all(job.get("scrape_interval", interval) == interval for job in prometheus["scrape_configs"])
    datasources = yaml.safe_load(DATASOURCE.read_text())["datasources"]
    prom = [d for d in datasources if d["type"] == "prometheus"]
    assert prom and all(d["jsonData"]["timeInterval"] == interval for d in prom)
    provider = yaml.safe_load(PROVIDER.read_text())["providers"][0]
    assert provider["type"] == "file" and provider["options"]["path"]


def test_the_scrape_config_covers_every_service_on_its_default_port() -> None:
    from mocapline.core.metrics import DEFAULT_PORTS

    config = yaml.safe_load(PROMETHEUS.read_text())
    targets = {sc["labels"]["service"]: sc["targets"]
               for job in config["scrape_configs"] for sc in job.get("static_configs", [])}
    assert {s: [f"127.0.0.1:{p}"] for s, p in DEFAULT_PORTS.items()} == targets


@pytest.mark.skipif(shutil.which("promtool") is None and not os.environ.get("CI"),
                    reason="promtool not installed (Debian: apt-get install prometheus; .ci/run does it)")
def test_promtool_parses_every_expression_and_the_scrape_config(tmp_path) -> None:
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:expr{k}",
         "expr": expr.replace("$__rate_interval", "20s").replace("$__range", "15m").replace("$__interval", "5s")}
        for k, expr in enumerate(dashboard_exprs())
    ]}]}
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump(rules))
    result = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    result = subprocess.run(["promtool", "check", "config", "--syntax-only", str(PROMETHEUS)],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
