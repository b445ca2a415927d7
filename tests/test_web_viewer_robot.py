"""The web viewer draws the physics robot: `mocapline viewer --robot-domain D` reads LowState on a
private DDS domain (loopback) only while a page is open, and each pose update carries the measured
G1's bodies (forward kinematics of the measured joints at the target's root pose) and the tracking
error per joint group; with `mocapline robot` driving `mocapline sim`, a real browser shows both
robots, the measured one close to the target."""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("cyclonedds")

from browser import Browser, chromium_binary  # noqa: E402
from g1_facts import (  # noqa: E402
    ARMS,
    STAND,
    load_ik_model,  # noqa: E402
)
from robot_rig import Port, Proc, motion, private_domain, start_robot, start_sim  # noqa: E402
from websockets.sync.client import connect  # noqa: E402

from mocapline.tools.pipeline.procs import free_tcp_port  # noqa: E402

pytestmark = pytest.mark.integration
OFFSET = 0.2  # rad added to every arm joint by the test's LowState publisher
# The newest LowState a pose update carries is at most this old: a bound for a loaded 2-core
# machine, where the viewer or the publisher may wait a second for the CPU (the page's freshness
# is shown by the updates coming at all; how fresh, on a quiet machine, is `bench robot`'s).
STALE_MS = 5000


class StatePublisher:
    """LowState of a G1 at ``q``, 200 times a second, as a robot would publish it."""

    def __init__(self, domain: int, q: np.ndarray) -> None:
        from mocapline.robot.unitree.dds import DdsSettings, LowLevel
        from mocapline.robot.unitree.hg import LOW_STATE, new_low_state

        self.dds = LowLevel(DdsSettings(domain, "lo"))
        self.writer = self.dds.state_writer()
        self.state = new_low_state()
        self.state["motor_state"]["q"][: len(q)] = q
        LOW_STATE.seal(self.state)
        self.sample = LOW_STATE.sample(self.state)
        self.halt = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        for _ in range(200 * 120):  # bounded: two minutes
            if self.halt.wait(0.005):
                return
            self.writer.write(self.sample)

    def close(self) -> None:
        self.halt.set()
        self.thread.join(5)
        self.dds.close()


def start_viewer(domain: int, port: Port, web_port: int, state: Path) -> Proc:
    return Proc(["viewer", "--display", "web", "--web-port", str(web_port), "--input", port.endpoint,
                 "--state-dir", str(state), "--fsync", "never", "--nats", "", "--log-level", "INFO",
                 "--robot-domain", str(domain), "--robot-interface", "lo"])


def viewer_counts(web_port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{web_port}/ledger.json", timeout=10) as r:
        return json.loads(r.read())["viewer"]


def wait_for(check, timeout: float, what: str):  # noqa: ANN001, ANN201
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            got = check()
        except OSError:
            got = None
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def parse_update(data: bytes, nbody: int) -> tuple[list[tuple[int, np.ndarray]], dict | None]:
    """A pose update as RobotScene.pose_bytes lays it out: the performers, the measured robot."""
    a = np.frombuffer(data, dtype="<f4")
    o, performers = 1, []
    for _ in range(int(a[0])):
        performers.append((int(a[o]), a[o + 2: o + 2 + 7 * nbody].reshape(nbody, 7)))
        o += 2 + 7 * nbody
    if o == len(a):
        return performers, None
    assert a[o] == 1 and len(a) == o + 9 + 7 * nbody
    return performers, {"avatar": int(a[o + 1]), "age_ms": float(a[o + 2]),
                        "mean": dict(zip(("legs", "waist", "arms"), a[o + 3: o + 6].tolist(), strict=True)),
                        "max": dict(zip(("legs", "waist", "arms"), a[o + 6: o + 9].tolist(), strict=True)),
                        "bodies": a[o + 9:].reshape(nbody, 7)}


@pytest.fixture
def parts(tmp_path):
    made: dict = {}
    yield made
    for name in ("viewer", "robot", "sim"):
        if name in made:
            made[name].stop()
    for name in ("publisher", "port"):
        if name in made:
            made[name].close()


def test_the_page_gets_the_measured_robot_and_its_tracking_error_only_while_open(parts, tmp_path) -> None:
    domain = private_domain()
    measured_q = STAND.copy()
    measured_q[ARMS] += OFFSET
    parts["publisher"] = StatePublisher(domain, measured_q)
    port = parts["port"] = Port(tmp_path / "port")
    web_port = free_tcp_port()
    parts["viewer"] = start_viewer(domain, port, web_port, tmp_path / "viewer")
    stand = motion(400, amplitude=0.0)  # the target: the stand pose, root 1 m up
    feeder = threading.Thread(target=port.play, args=(stand,), daemon=True)
    feeder.start()
    wait_for(lambda: viewer_counts(web_port)["viewer_applied"] > 20, 60, "frames applied")
    time.sleep(1.0)
    idle = viewer_counts(web_port)
    # No page open: no DDS reader, no LowState read.
    assert idle["lowstate_reading"] is False and idle["lowstate_reader_opens"] == 0
    assert idle["lowstate_received"] == 0

    nbody = load_ik_model().nbody
    updates = []
    with connect(f"ws://127.0.0.1:{web_port}/ws", open_timeout=10) as ws:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(updates) < 20:
            performers, measured = parse_update(ws.recv(timeout=10), nbody)
            if measured is not None and performers:
                updates.append((performers, measured))
        watched = viewer_counts(web_port)
    assert len(updates) == 20, "no measured robot in the pose updates"
    assert watched["lowstate_reading"] is True and watched["lowstate_received"] > 0
    assert watched["lowstate_rejected"] == 0
    for performers, measured in updates[-5:]:
        (avatar, target), = performers
        assert measured["avatar"] == avatar
        assert 0 <= measured["age_ms"] < STALE_MS
        # the error is measured minus the target drawn: every arm joint off by OFFSET, the rest 0
        assert measured["mean"]["arms"] == pytest.approx(OFFSET, abs=1e-4)
        assert measured["max"]["arms"] == pytest.approx(OFFSET, abs=1e-4)
        assert measured["max"]["legs"] == pytest.approx(0, abs=1e-5)
        assert measured["max"]["waist"] == pytest.approx(0, abs=1e-5)
        bodies = measured["bodies"]
        # drawn at the target's root pose: the pelvis coincides, the legs too, the hands do not
        np.testing.assert_allclose(bodies[1], target[1], atol=1e-5)
        legs = load_ik_model().body("left_ankle_roll_link").id
        np.testing.assert_allclose(bodies[legs, :3], target[legs, :3], atol=1e-4)
        hand = load_ik_model().body("left_wrist_yaw_link").id
        assert np.linalg.norm(bodies[hand, :3] - target[hand, :3]) > 0.05

    # The page gone: the reader is deleted after a few seconds.
    wait_for(lambda: viewer_counts(web_port)["lowstate_reading"] is False, 20, "the reader to close")
    feeder.join(30)


def test_a_browser_shows_the_sim_robot_over_the_target_with_the_tracking_error(parts, tmp_path) -> None:
    if chromium_binary() is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed: .ci/run installs it (apt-get install chromium)")
        pytest.skip("chromium is not installed (Debian: apt-get install chromium chromium-driver)")
    domain = private_domain()
    parts["sim"] = start_sim(domain, base="fixed", clock="lockstep")  # the physics follows the commands, loaded or not
    port = parts["port"] = Port(tmp_path / "port")
    parts["robot"] = start_robot(domain, port, tmp_path / "robot", "--nats", "", "--support", "pelvis")
    web_port = free_tcp_port()
    parts["viewer"] = start_viewer(domain, port, web_port, tmp_path / "viewer")
    swing = motion(50 * 60)  # a minute of arm swing at 50 Hz (the test stops it sooner)
    feeder = threading.Thread(target=port.play, args=(swing,), daemon=True)
    feeder.start()
    with Browser(1280, 800) as browser:
        browser.open(f"http://127.0.0.1:{web_port}/")
        browser.wait_for("window.__viewer && window.__viewer.ready && window.__viewer.measured.updates > 30 "
                         "&& window.__viewer.measured.avatar >= 0", timeout=120)
        # The bridge starts behind the stream (ramp-in, then catching up at up to 1.25x): once it
        # caught up, the physics follows the target drawn, a playback delay behind.
        browser.wait_for("window.__viewer.measured.mean.arms !== null && window.__viewer.measured.mean.arms < 0.2",
                         timeout=90)
        time.sleep(1.0)  # the camera settled
        deadline = time.monotonic() + 60
        while True:  # a snapshot taken while it tracks (under load the bridge falls behind now and then)
            over = json.loads(browser.eval("JSON.stringify([window.__viewer.measured, window.__viewer.robotBox(),"
                                           " window.__viewer.measuredBox(),"
                                           " document.getElementById('tracking').innerText])"))
            arms = over[0]["mean"]["arms"]
            if (arms is not None and arms < 0.3) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        browser.screenshot(tmp_path / "robot-over.png")
        browser.eval("document.getElementById('beside').click(), true")
        time.sleep(1.5)
        beside = json.loads(browser.eval("JSON.stringify([window.__viewer.robotBox(), window.__viewer.measuredBox()])"))
        browser.screenshot(tmp_path / "robot-beside.png")
        errors = list(browser.errors)
    shots = os.environ.get("MOCAPLINE_SCREENSHOTS")
    if shots:  # to look at them
        for name in ("robot-over.png", "robot-beside.png"):
            Path(shots, name).write_bytes((tmp_path / name).read_bytes())
    assert errors == []
    measured, target_box, measured_box, table = over
    assert measured["mean"]["arms"] is not None and measured["mean"]["arms"] < 0.3, measured
    assert measured["age_ms"] < STALE_MS, measured
    assert "arms" in table and "legs" in table
    for box in (target_box, measured_box, *beside):
        assert box["min"][0] >= -1 and box["max"][0] <= 1 and box["min"][1] >= -1 and box["max"][1] <= 1, box
        assert 1.0 < box["height_m"] < 2.0, box
    # over: the two overlap on the screen; beside: they do not
    assert measured_box["min"][0] < target_box["max"][0] and target_box["min"][0] < measured_box["max"][0]
    target_box, measured_box = beside
    assert measured_box["min"][0] > target_box["max"][0] or target_box["min"][0] > measured_box["max"][0], beside
