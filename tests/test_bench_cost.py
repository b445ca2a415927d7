"""``mocapline bench cost --quick --json`` through the real processes: the report's shape and that
its numbers agree with each other (no timing is asserted: the machine is shared)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mocapline.bench.cost import PROCESSES, QUICK, top_functions
from mocapline.core.profiling import LoopProfile
from mocapline.tools.pipeline.stack import STAGES

ROOT = Path(__file__).resolve().parents[1]


def _close(a: float, b: float, rel: float = 0.02, abs_: float = 2e-3) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=abs_)


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "mocapline.cli", "bench", "cost", "--quick", "--json"],
                          capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.integration
def test_every_run_delivers_every_frame_and_adds_up(report: dict[str, Any]) -> None:
    runs = report["runs"]
    assert [r["name"] for r in runs] == list(QUICK)
    for r in runs:
        assert r["frames"] == int(r["rate_hz"] * 3.0) * r["performers"]
        assert r["applied"] == r["frames"], r  # a cost measured on a take that lost frames means nothing
        assert set(r["cpu_ms_per_frame"]) == set(PROCESSES)
        assert all(v >= 0 for v in r["cpu_ms_per_frame"].values())
        assert _close(r["stack_ms_per_frame"], sum(r["cpu_ms_per_frame"].values()))
        assert set(r["kernel_us"]) == set(STAGES) and all(v > 0 for v in r["kernel_us"].values())
        assert _close(r["kernel_ms_per_frame"], sum(r["kernel_us"].values()) / 1e3)
        for stage in STAGES:
            assert _close(r["overhead"][stage], r["cpu_ms_per_frame"][stage] * 1e3 / r["kernel_us"][stage], abs_=0.02)
            threads = r["threads_ms_per_frame"][stage]
            assert set(threads) == {"main", "zmq", "other"}
            # live threads only, each rounded to clock ticks: at most the process's own total and a tick
            tick_ms = 1e3 / os.sysconf("SC_CLK_TCK") / r["frames"]
            assert sum(threads.values()) <= r["cpu_ms_per_frame"][stage] + 4 * tick_ms + 1e-3
        assert _close(r["stack_overhead"], r["stack_ms_per_frame"] / r["kernel_ms_per_frame"], abs_=0.02)
        assert set(r["kernel_paced_us"]) == set(STAGES) and all(v > 0 for v in r["kernel_paced_us"].values())
        paced_ms = sum(r["kernel_paced_us"].values()) / 1e3
        assert _close(r["stack_overhead_paced"], r["stack_ms_per_frame"] / paced_ms, abs_=0.02)
        assert all(_close(r["overhead_paced"][s], r["cpu_ms_per_frame"][s] * 1e3 / r["kernel_paced_us"][s], abs_=0.02)
                   for s in STAGES)
        assert all(sum(r["wakeups_per_frame"][s].values()) > 0 for s in STAGES)
        lat = r["latency_ms"]
        assert lat["p50"] is not None and 0 < lat["p50"] <= lat["p99"]
        assert r["code"] == "this"
    by_name = {r["name"]: r for r in runs}
    assert not by_name["plain_120hz"]["durable"] and by_name["durable_120hz"]["durable"]
    ratio = by_name["durable_120hz"]["stack_ms_per_frame"] / by_name["plain_120hz"]["stack_ms_per_frame"]
    assert _close(report["durable_over_plain_120hz"], ratio, abs_=0.01)


@pytest.mark.integration
def test_the_profile_names_each_stages_top_functions(report: dict[str, Any]) -> None:
    prof = report["profile"]
    assert prof["run"] == "durable_120hz" and prof["frames"] > 0
    assert set(prof["stages"]) == set(STAGES)  # every stage wrote its pstats when it stopped
    for rows in prof["stages"].values():
        assert 0 < len(rows) <= 8
        own = [row["own_us_per_frame"] for row in rows]
        assert own == sorted(own, reverse=True)
        assert all(0 <= row["share"] <= 1 for row in rows)
        assert sum(row["share"] for row in rows) <= 1.0 + 1e-6


def _busy(n: int) -> int:
    return sum(i * i for i in range(n))


def test_loop_profile_writes_pstats_only_when_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MOCAPLINE_PROFILE", raising=False)
    off = LoopProfile("capture").start()
    _busy(10)
    off.stop()
    assert off.path is None and not list(tmp_path.iterdir())
    monkeypatch.setenv("MOCAPLINE_PROFILE", str(tmp_path / "prof"))
    on = LoopProfile("retarget.w1").start()
    for _ in range(50):
        _busy(2000)
    on.stop()
    assert on.path == tmp_path / "prof" / "retarget.w1.pstats" and on.path.exists()
    rows = top_functions(on.path, frames=50, top=3)
    assert any(row["function"].endswith("(_busy)") and row["calls_per_frame"] == 1.0 for row in rows)
