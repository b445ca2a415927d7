"""The pipeline across hosts: network namespaces on a bridge (tests/hosts.py), each service started
by hand on its own host as docs/operations.md ("Across hosts") says, cables pulled mid-take.

Every scenario ends with every unique posture_index of every performer delivered to the robot host
once and in order, and the auditor's verdict (its own box; side path over the network, heartbeats
through NATS) conserved. Marker ``hosts``: `.ci/run` runs them as a step of their own (root).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hosts import Hosts, unavailable
from hosts_stack import CLI, PERFORMERS, RATE, SD, Pipeline, Take

pytestmark = pytest.mark.hosts

# The full topology: one host per role.
SPREAD = {role: role for role in ("studio", "nats", "capture", "w1", "w2", "streamer", "robot", "auditor")}


@pytest.fixture(scope="module")
def can_make_hosts() -> None:
    reason = unavailable()
    if reason:
        pytest.skip(f"hosts tests need network namespaces: {reason}")


@pytest.fixture
def spread(can_make_hosts: None, tmp_path: Path) -> Iterator[Pipeline]:
    with Hosts() as hosts:
        for name in dict.fromkeys(SPREAD.values()):
            hosts.add(name)
        pipeline = Pipeline(hosts, tmp_path, dict(SPREAD))
        try:
            pipeline.start()
            yield pipeline
        except BaseException:
            _show_logs(tmp_path)
            raise


def _show_logs(tmp: Path) -> None:
    for log in sorted(tmp.glob("*.log")):
        lines = log.read_text(errors="replace").splitlines()[-15:]
        print(f"--- {log.name}\n" + "\n".join(lines), file=sys.stderr)


def conserved(verdict: dict) -> None:
    assert verdict["unique_frames_conserved"] == 1, json.dumps(verdict)[:2000]
    assert verdict["state"] == "conserved", verdict["state"]


def flowing(pipeline: Pipeline, frames: int) -> bool:
    return pipeline.frames_delivered() >= frames


TAKE_FIELDS = ("unique_frames_conserved", "state", "source_received", "source_unique_frames",
               "source_missing_indices", "source_duplicate_indices", "missing_ranges", "missing_by_path",
               "gmr_processed", "motion_generated", "bridged_frames")


def test_across_hosts_every_frame_arrives_and_the_verdict_is_the_one_host_verdict(spread: Pipeline,
                                                                                    tmp_path: Path) -> None:
    """Studio -> capture -> two workers -> streamer -> robot (CURVE), the auditor on its own box:
    the verdict equals the one `mocapline demo` computes with every process on one host."""
    take = Take(frames=240, skip=(1100,), skip_side=(1150, 1151))
    verdict = spread.finish(take, spread.emit(take))
    # 1100 never left the studio: lost upstream, on both paths; 1150-1151 missed by the side path only
    assert verdict["state"] == "not conserved: 2 posture indices missing at the source", verdict["state"]
    assert verdict["missing_by_path"]["both"] == [[1100, 1100]]
    assert verdict["missing_by_path"]["side_only"] == [[1150, 1151]]
    one_host = subprocess.run(
        [*CLI, "demo", "--frames", str(take.frames), "--first-index", str(take.first), "--rate", str(RATE),
         "--performers", str(PERFORMERS), "--retarget-workers", "2", "--drop-both", "1100",
         "--drop-side", "1150,1151", "--json"], capture_output=True, text=True, timeout=180)
    local = json.loads(one_host.stdout.strip().splitlines()[-1])
    assert {k: verdict.get(k) for k in TAKE_FIELDS} == {k: local.get(k) for k in TAKE_FIELDS}
    # Prometheus discovery names each worker's own address, not 127.0.0.1
    targets = spread.host("studio").call(lambda: _get_json(f"http://{spread.addr('auditor')}:{SD}/targets"))
    workers = {t["labels"]["worker"]: t["targets"][0] for t in targets if t["labels"].get("worker")}
    assert {w: t.rpartition(":")[0] for w, t in workers.items()} == {
        w: spread.addr(w) for w in spread.workers}, targets


def _get_json(url: str) -> list:
    from urllib.request import urlopen

    with urlopen(url, timeout=5) as reply:
        return json.loads(reply.read())
