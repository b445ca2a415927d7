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
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers import wait_until
from hosts import Hosts
from hosts_stack import CLI, PERFORMERS, RATE, SD, Pipeline, Take

pytestmark = pytest.mark.hosts

# The full topology: one host per role.
SPREAD = {role: role for role in ("studio", "nats", "capture", "w1", "w2", "streamer", "robot", "auditor")}


@pytest.fixture
def spread(tmp_path: Path) -> Iterator[Pipeline]:
    with Hosts() as hosts:
        for name in dict.fromkeys(SPREAD.values()):
            hosts.add(name)
        pipeline = Pipeline(hosts, tmp_path, dict(SPREAD))
        try:
            pipeline.start()
            yield pipeline
        finally:
            _show_logs(tmp_path)  # (pytest shows it only when the test failed)


def test_the_namespaces_of_a_killed_run_are_removed_by_the_next(tmp_path: Path) -> None:
    """A run killed with -9 cannot clean up: its namespaces, and a process left in one, are
    removed when the next run starts; a live run's are left alone."""
    script = tmp_path / "run.py"
    script.write_text(
        "import sys, time\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from hosts import Hosts\n"
        "hosts = Hosts().__enter__()\n"
        "hosts.add('a').start(['sleep', '600'])\n"
        "print(hosts.tag, flush=True)\n"
        "time.sleep(600)\n")
    run = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert run.stdout is not None
        tag = run.stdout.readline().strip()
        assert tag, "the run did not start"
        left = [n for n in _namespaces() if n.startswith(tag)]
        assert sorted(left) == [f"{tag}-a", f"{tag}-sw"]
        sleeper = int(subprocess.run(["ip", "netns", "pids", f"{tag}-a"], capture_output=True, text=True,
                                     check=True).stdout.split()[0])
        with Hosts():
            assert [n for n in _namespaces() if n.startswith(tag)] == left  # alive: not touched
        run.kill()
        run.wait(10)
        with Hosts() as hosts:
            assert not [n for n in _namespaces() if n.startswith(tag)]
            assert hosts.tag != tag
        wait_until(lambda: not Path(f"/proc/{sleeper}").exists(), 10, what="the left-over process killed")
    finally:
        if run.poll() is None:
            run.kill()
        with Hosts():
            pass


def _namespaces() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.split()]


def _show_logs(tmp: Path) -> None:
    """The last lines of every process's log, on stderr."""
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


def test_a_worker_host_cut_off_for_5_s_mid_take_loses_nothing(spread: Pipeline) -> None:
    """w1's cable pulled for 5 s: longer than its 3 s announcement, so w2 takes its performer over
    and w1, back, rejoins; the robot still gets every frame of both performers once, in order."""
    take = Take(frames=600)
    emitter = spread.emit(take)
    with_cable_pulled(spread, "w1", 5.0, after=lambda: flowing(spread, 2 * 120))
    verdict = spread.finish(take, emitter)
    conserved(verdict)
    w1, w2 = (spread.ask(f"retarget.{w}", "status")["worker"] for w in ("w1", "w2"))
    assert w2["takeovers"] >= 1, w2  # w1 was gone longer than its announcement lasts
    assert len(w1["owned"]) == len(w2["owned"]) == 1, (w1, w2)  # back, w1 was handed its share again


def test_a_worker_host_lost_for_good_is_taken_over(spread: Pipeline) -> None:
    """w2's host goes dark for good (cable pulled, then its process dies unheard): w1 takes its
    performer over from the positions in NATS and the take completes."""
    take = Take(frames=480)
    emitter = spread.emit(take)
    wait_until(lambda: flowing(spread, 2 * 120), 60, interval=0.1, what="the take under way")
    spread.hosts.cut("w2")
    spread.procs["retarget.w2"].kill()
    verdict = spread.finish(take, emitter)
    conserved(verdict)
    assert spread.ask("retarget.w1", "status")["worker"]["takeovers"] >= 1
    assert verdict["retarget_workers"]["w1"]["owned"] == [0, 1], verdict["retarget_workers"]
    wait_until(lambda: set(spread.ask("capture", "status")["durable"]["output_link"]["consumers"])
               == {"retarget.w1"}, 20, interval=0.5, what="capture to forget the lost worker")


def test_the_robot_host_cut_off_for_10_s_resumes_from_the_streamers_backlog(spread: Pipeline) -> None:
    take = Take(frames=840)
    emitter = spread.emit(take)
    wait_until(lambda: flowing(spread, 2 * 120), 60, interval=0.1, what="the take under way")
    spread.hosts.cut("robot")
    try:
        time.sleep(10)
        held = spread.consumer("robot")
        assert held is not None and held["backlog"] >= 2 * RATE * 5, held  # kept for it, on the streamer's disk
    finally:
        spread.hosts.restore("robot")
    conserved(spread.finish(take, emitter))


def test_the_auditors_box_cut_off_for_10_s_holds_up_nothing_and_judges_right_after(spread: Pipeline) -> None:
    """The auditor is a witness: with its cable pulled for 10 s the frames keep reaching the robot at
    the take's rate; back, it hears the heartbeats again, and its verdict is the right one (the side
    datagrams sent to it meanwhile are lost on the side path only: ``side_only``, not a loss)."""
    take = Take(frames=900)
    emitter = spread.emit(take)
    wait_until(lambda: flowing(spread, 2 * 120), 60, interval=0.1, what="the take under way")
    before = spread.frames_delivered()
    spread.hosts.cut("auditor")
    try:
        time.sleep(10)
        during_cut = spread.frames_delivered() - before
    finally:
        spread.hosts.restore("auditor")
    assert during_cut >= 0.7 * 10 * RATE * PERFORMERS, f"{during_cut} frames reached the robot in 10 s"

    def hears_again() -> bool:
        try:  # (TCP retransmits with back-off: the link is up again a few seconds after the cable)
            reply = spread.ask("auditor", "status", timeout=2.0)
            capture = spread.ask("capture", "status", timeout=2.0)
        except Exception:  # noqa: BLE001 - not yet
            return False
        return reply["verdict"].get("last_posture_index") == capture.get("last_posture_index")

    wait_until(hears_again, 30, interval=0.5, what="the auditor to hear capture's heartbeats again")
    verdict = spread.finish(take, emitter)
    conserved(verdict)
    assert verdict["missing_by_path"]["side_only"] and not verdict["missing_by_path"]["main_only"], verdict


def test_nats_on_its_own_host_restarted_mid_take(spread: Pipeline) -> None:
    """NATS (heartbeats, control, the workers' assignment) killed and started again on its host:
    the data path does not wait for it, and every service is back on it for the drain."""
    take = Take(frames=600)
    emitter = spread.emit(take)
    wait_until(lambda: flowing(spread, 2 * 120), 60, interval=0.1, what="the take under way")
    spread.procs["nats"].kill()
    spread.procs["nats"].wait(10)
    before = spread.frames_delivered()
    time.sleep(2)
    assert spread.frames_delivered() > before, "frames stopped with NATS"
    spread.start_nats()
    conserved(spread.finish(take, emitter))


def with_cable_pulled(pipeline: Pipeline, host: str, seconds: float, *, after: Callable[[], bool]) -> None:
    wait_until(after, 60, interval=0.1, what="the take under way")
    pipeline.hosts.cut(host)
    try:
        time.sleep(seconds)
    finally:
        pipeline.hosts.restore(host)


# docs/operations.md, "Across hosts": two machines.
TWO_HOSTS = {"studio": "a", "nats": "a", "capture": "a", "auditor": "a",
             "retarget": "b", "streamer": "b", "viewer": "b", "robot": "b"}


@pytest.fixture
def two_hosts(tmp_path: Path) -> Iterator[Pipeline]:
    with Hosts() as hosts:
        hosts.add("a")
        hosts.add("b")
        pipeline = Pipeline(hosts, tmp_path, dict(TWO_HOSTS), workers=[])
        try:
            pipeline.start()
            yield pipeline
        finally:
            _show_logs(tmp_path)  # (pytest shows it only when the test failed)


def test_two_machines_as_the_operations_guide_says(two_hosts: Pipeline) -> None:
    """Capture + auditor (+ NATS, Axis) on one machine; retarget + streamer + viewer (+ a robot) on
    the other: every frame reaches the viewer and the robot, and the verdict covers the viewer."""
    take = Take(frames=300)
    verdict = two_hosts.finish(take, two_hosts.emit(take))
    conserved(verdict)
    assert verdict["viewer_applied"] == take.frames * PERFORMERS


def test_capture_machine_rebooted_is_reached_again(two_hosts: Pipeline) -> None:
    """Capture's machine powered off and on between takes: the other machine's connections to it
    are dead without either end having said so. Retarget only ever reads from capture's data port,
    so without ZeroMQ heartbeats (mocapline/core/transport.py) nothing would ever tell it and the
    next take would never reach it."""
    two_hosts.reboot("a")
    take = Take(frames=240)
    conserved(two_hosts.finish(take, two_hosts.emit(take), timeout=60))
