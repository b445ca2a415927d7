"""The web viewer's server side without a browser: the WebSocket handshake and frames, what the page
gets in ledger.json, and that nothing is packed for display while no page is open."""

from __future__ import annotations

import json
import struct
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
from helpers import published, wait_until
from websockets.sync.client import connect

from mocapline.core.bus import Bus
from mocapline.core.counters import (
    CaptureCounts,
    FanInInfo,
    RetargetCounts,
    SegmentCounts,
    StreamerCounts,
    ViewerCounts,
    WorkerInfo,
    zero,
)
from mocapline.services.viewer import websocket
from mocapline.services.viewer.scene import MeasuredPose, RobotScene
from mocapline.services.viewer.web import STATIC, LatencyHistory, PipelineView, WebView, page_data, readable_rows


def test_accept_key_and_frame_lengths_follow_rfc_6455() -> None:
    assert websocket.accept_key("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
    assert websocket.frame(b"abc")[:2] == bytes([0x82, 3])
    assert websocket.frame(b"x" * 300)[:4] == bytes([0x82, 126]) + struct.pack("!H", 300)
    assert websocket.frame(b"x" * 70000)[:10] == bytes([0x82, 127]) + struct.pack("!Q", 70000)


def test_client_frames_are_unmasked_and_a_cut_off_one_is_dropped() -> None:
    key = b"\x01\x02\x03\x04"
    ping = bytes([0x89, 0x80 | 5]) + key + bytes(b ^ key[i % 4] for i, b in enumerate(b"hello"))
    close = bytes([0x88, 0x80]) + key
    assert websocket.client_frames(ping + close) == [(0x9, b"hello"), (0x8, b"")]
    assert websocket.client_frames(ping[:-1]) == []
    assert websocket.client_frames(bytes([0x82, 0x80 | 126, 0, 200]) + key + bytes(200)) == [(0x2, key * 50)]


def test_durable_state_reads_as_rows() -> None:
    rows = readable_rows({"input_link": {"welcomed": True, "last": 41}, "log_bytes": 1024, "lag_s": 0.12345,
                          "acked": list(range(12))})
    assert rows == [["input_link.welcomed", "True"], ["input_link.last", "41"], ["log_bytes", "1024"],
                    ["lag_s", "0.123"], ["acked", "0, 1, 2, 3, 4, 5, 6, 7 ..."]]


def test_page_data_has_every_stage_and_the_verdict() -> None:
    stages = {
        "capture": published(CaptureCounts, source_received=5, human_frames_sent=5, source_unique_frames=5,
                             segments=1, per_segment=[SegmentCounts(0, 0, 4, 5, 0)]),
        "retarget": published(RetargetCounts, frames_in=5, robot_frames_sent=5, gmr_processed=5),
        "streamer": published(StreamerCounts, frames_in=5, zmq_sent=5, motion_generated=5),
        "viewer": published(ViewerCounts, viewer_received=5, viewer_applied=5),
        "auditor": {"verdict": {"missing_by_path": {"main_only": [], "both": [[7, 8]]}}},
    }
    d = page_data({"viewer_applied": 6, "durable": {"a": 1}}, stages, LatencyHistory(list))
    assert [r["stage"] for r in d["stages"]] == ["capture", "retarget", "streamer", "viewer"]
    assert d["stages"][3]["out"] == 5  # the snapshot's, not the newer own count: never above streamer
    assert d["verdict"]["state"] == "conserved" and d["verdict"]["missing_by_path"]["both"] == [[7, 8]]
    assert d["durable"] == [["a", "1"]] and d["viewer"] == {"viewer_applied": 6}
    assert d["performers"] == []


def test_the_page_says_what_its_verdict_and_its_two_latencies_measure() -> None:
    """A healthy running take showed `unique_frames_conserved 0` throughout, a chart p99 of 16.4 ms
    beside the viewer block's latency_p99_ms 539.565 with nothing saying what each measures, and a
    plots hint (`--plots-dir TAKE`) that is wrong under `up`."""
    running = {
        "capture": published(CaptureCounts, source_received=9, human_frames_sent=9, source_unique_frames=9),
        "retarget": published(RetargetCounts, frames_in=9, robot_frames_sent=9, gmr_processed=9),
        "streamer": published(StreamerCounts, frames_in=9, zmq_sent=7, motion_generated=9, pending=2),
        "viewer": published(ViewerCounts, viewer_received=7, viewer_applied=7),
    }
    d = page_data({"viewer_applied": 7, "latency_p99_ms": 539.565}, running, LatencyHistory(list))
    source = dict(d["source"])
    assert source["unique_frames_conserved"] == "not yet (running, 2 in flight): judged once drained"
    assert d["viewer"] == {"viewer_applied": 7,
                           "latency p99 ms (last 20,000 frames, unwatched time included)": 539.565}
    html = (STATIC / "index.html").read_text()
    assert "while a page watched" in html  # the chart's own latency: per second, only while watched
    assert "--plots-dir TAKE" not in html and "mocapline up --plots-dir DIR" in html
    done = {**running, "streamer": published(StreamerCounts, frames_in=9, zmq_sent=9, motion_generated=9),
            "viewer": published(ViewerCounts, viewer_received=9, viewer_applied=9)}
    assert dict(page_data({}, done, LatencyHistory(list))["source"])["unique_frames_conserved"] == 1


def test_the_page_shows_how_the_robot_bridge_keeps_up() -> None:
    """`up --demo --robot sim`: the page had the bridge's state, rate and tracking error; its
    period p99, deadline misses, stalls and latency were only in robot.log."""
    from mocapline.core.counters import RobotCounts

    bridge = published(RobotCounts, robot_received=5, robot_applied=5, commands_sent=900, command_rate_hz=499.0,
                       period_p99_ms=3.1, deadline_misses=7, stalls=1, latency_p50_ms=5.2, latency_p99_ms=9.5)
    stages = {"capture": published(CaptureCounts, source_received=5, human_frames_sent=5, source_unique_frames=5),
              "robot": bridge}
    figures = dict(page_data({}, stages, LatencyHistory(list))["robot"]["figures"])
    assert figures["period p99"] == "3.1 ms" and figures["deadline misses"] == "7"
    assert figures["stalls"].startswith("1 ") and figures["latency p50 / p99"] == "5.2 ms / 9.5 ms"
    assert b"robot-section" in (STATIC / "index.html").read_bytes()
    assert b"d.robot.figures" in (STATIC / "app.js").read_bytes()


def worker_answers() -> dict[str, dict[str, object]]:
    """A take retargeted by two workers (no ``retarget`` service): w1 owns performer 0, w2 none."""
    return {
        "capture": published(CaptureCounts, source_received=5, human_frames_sent=5, source_unique_frames=5),
        "retarget.w1": published(RetargetCounts, frames_in=5, robot_frames_sent=5, gmr_processed=5, pending=1,
                                 performers={"0": {"frames_in": 5, "robot_frames_sent": 5, "gmr_processed": 5}},
                                 worker=zero(WorkerInfo, name="w1", owned=[0])),
        "retarget.w2": published(RetargetCounts, ik_failed=2, worker=zero(WorkerInfo, name="w2")),
        "streamer": published(StreamerCounts, frames_in=5, zmq_sent=5, motion_generated=5,
                              fan_in=zero(FanInInfo, workers=["w1", "w2"], live=["w1", "w2"])),
        "viewer": published(ViewerCounts, viewer_received=5, viewer_applied=5),
    }


def test_page_data_sums_retarget_workers_into_the_retarget_row_and_lists_them() -> None:
    d = page_data({"viewer_applied": 5}, worker_answers(), LatencyHistory(list))
    assert d["stages"][1] == {"stage": "retarget", "in": 5, "out": 5, "pending": 1, "rejected": 2}
    assert d["workers"] == [{"worker": "w1", "performers": [0], "frames": 5, "takeovers": 0},
                            {"worker": "w2", "performers": [], "frames": 0, "takeovers": 0}]
    assert d["verdict"]["gmr_processed"] == 5 and d["verdict"]["state"] == "conserved"


def test_the_page_asks_the_workers_the_streamer_names(nats_server) -> None:
    """Under compose (or `up --retarget-workers N`) no service answers as ``retarget``: the page
    reads the workers the streamer's fan-in names, as `mocapline up`'s table does."""
    answers = worker_answers()
    buses = [Bus(nats_server.url, name, lambda: {}, interval_s=60).start() for name in answers]
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            for bus, name in zip(buses, answers, strict=True):
                for req in bus.poll_requests():
                    req.answer(answers[name])
            time.sleep(0.01)

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    try:
        assert all(bus.connected.wait(5) for bus in buses)
        view = PipelineView(nats_server.url)
        stages = wait_until(lambda: got if "capture" in (got := view.refresh()) else None, 10,
                            interval=1.0, what="the stages to answer")
        assert {"retarget.w1", "retarget.w2"} <= set(stages)
        d = page_data({}, stages, LatencyHistory(list))
        assert d["stages"][1]["out"] == 5 and [w["worker"] for w in d["workers"]] == ["w1", "w2"]
    finally:
        stop.set()
        server.join(5)
        for bus in buses:
            bus.stop()


def test_page_data_judges_each_performer_from_the_same_snapshot() -> None:
    stages = {
        "capture": published(CaptureCounts, source_received=12, human_frames_sent=12, source_unique_frames=12,
                             source_missing_indices=2, performers={
                                 "0": {"avatar_name": "Ann", "source_unique_frames": 6, "source_missing_indices": 0},
                                 "1": {"avatar_name": "Bo", "source_unique_frames": 6, "source_missing_indices": 2}}),
        "retarget": published(RetargetCounts, frames_in=12, gmr_processed=12,
                              performers={"0": {"gmr_processed": 6}, "1": {"gmr_processed": 6}}),
        "streamer": published(StreamerCounts, frames_in=12, zmq_sent=11, motion_generated=12,
                              performers={"0": {"zmq_sent": 5, "motion_generated": 6},
                                          "1": {"zmq_sent": 6, "motion_generated": 6}}),
        "viewer": published(ViewerCounts, viewer_applied=11,
                            performers={"0": {"viewer_applied": 5, "avatar_name": "Ann"},
                                        "1": {"viewer_applied": 6, "avatar_name": "Bo"}}),
    }
    rows = page_data({"viewer_applied": 11}, stages, LatencyHistory(list))["performers"]
    assert [(r["performer"], r["name"], r["unique"], r["applied"], r["missing"]) for r in rows] == [
        (0, "Ann", 6, 5, 0), (1, "Bo", 6, 6, 2)]
    assert rows[0]["state"] == "running, 1 in flight"
    assert rows[1]["state"] == "not conserved: 2 posture indices missing at the source" and not rows[1]["conserved"]


def test_poses_stream_only_to_an_open_page() -> None:
    view = WebView("127.0.0.1", 0, lambda: published(ViewerCounts, viewer_applied=1), fps=60)
    view.start()
    try:
        assert not view.watching  # nobody: the viewer's loop packs nothing
        with connect(view.address.replace("http", "ws") + "ws", open_timeout=10) as ws:
            for _ in range(100):
                if view.watching:
                    break
                time.sleep(0.05)
            assert view.watching
            assert ws.ping(b"alive").wait(10)  # a client's keep-alive is answered
            xpos, xquat = np.arange(9.0).reshape(3, 3), np.tile([1.0, 0, 0, 0], (3, 1))
            view.publish_poses([(0, 1234, xpos, xquat), (2, None, xpos + 1, xquat)])
            pose = np.frombuffer(ws.recv(timeout=10), "<f4")
        # two performers: avatar_index, posture_index (-1: none yet), then 3 bodies of x y z qw qx qy qz
        assert pose[0] == 2 and len(pose) == 1 + 2 * (2 + 3 * 7)
        first, second = pose[1:24], pose[24:]
        assert first[:2].tolist() == [0, 1234] and first[2:5].tolist() == [0, 1, 2]
        assert first[5:9].tolist() == [1, 0, 0, 0]
        assert second[:2].tolist() == [2, -1] and second[2:5].tolist() == [1, 2, 3]
        assert len(RobotScene.pose_bytes([])) == 4
        # the measured robot after the performers: 1, avatar, age ms, mean and max per group, its bodies
        errors = {"legs": {"mean": 0.1, "max": 0.2}, "waist": {"mean": 0.3, "max": 0.4},
                  "arms": {"mean": 0.5, "max": 0.6}}
        view.publish_poses([(0, 7, xpos, xquat)], MeasuredPose(0, 0.012, errors, xpos + 5, xquat))
        pose = np.frombuffer(view.poses.data, "<f4")
        tail = pose[1 + 2 + 3 * 7:]
        assert len(tail) == 9 + 3 * 7 and tail[:3].tolist() == pytest.approx([1, 0, 12])
        assert tail[3:9].tolist() == pytest.approx([0.1, 0.3, 0.5, 0.2, 0.4, 0.6])
        assert tail[9:12].tolist() == [5, 6, 7]
        no_target = np.frombuffer(RobotScene.pose_bytes([], MeasuredPose(-1, 0.0, None, xpos, xquat)), "<f4")
        assert no_target[:3].tolist() == [0, 1, -1] and np.isnan(no_target[4:10]).all()
        page = urllib.request.urlopen(view.address, timeout=5).read()
        assert b"/static/app.js" in page and b"importmap" in page
        js = urllib.request.urlopen(view.address + "static/vendor/three/three.module.min.js", timeout=5).read()
        assert len(js) > 500_000
        assert json.loads(urllib.request.urlopen(view.address + "ledger.json", timeout=5).read())["viewer"]
        for bad in ("static/../web.py", "static/%2e%2e/web.py"):
            try:
                urllib.request.urlopen(view.address + bad, timeout=5)
                raise AssertionError(f"{bad} was served")
            except urllib.error.HTTPError as exc:
                assert exc.code == 404
    finally:
        view.stop()


def test_the_latency_chart_leaves_gaps_where_no_page_watched() -> None:
    """Unwatched, the viewer takes frames in idle batches: their latencies are not a watcher's."""
    recorded = [[0.010, 0.012], [0.040, 0.060], [0.011, 0.013]]
    history = LatencyHistory(lambda: recorded.pop(0), last_tick=9.0)
    history.tick(10.0, watched=True)
    history.tick(11.0, watched=False)
    history.tick(12.0, watched=True)
    chart = history.as_dict()
    assert chart["p50_ms"][0] == pytest.approx(11.0) and chart["p50_ms"][1] is None
    assert chart["p50_ms"][2] == pytest.approx(12.0) and not recorded
