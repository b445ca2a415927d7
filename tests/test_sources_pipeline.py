"""Sources as they really arrive, through the whole pipeline (real processes on loopback)."""

import pytest

from mocapline.tools.emitter.emitter import TakePlan, emit_take
from mocapline.tools.pipeline.stack import Stack, local_config

pytestmark = pytest.mark.integration


def test_axis_neuron_split_frames_with_lost_halves_go_through_conserved(tmp_path) -> None:
    """1480-byte frames sent as 1024 + 456 on the main path (every other frame; the rest whole),
    some halves lost; the side path sends every frame whole, so the merge recovers them."""
    stack = Stack(local_config(merge=True, viewer=True, input_fps=120.0, output_fps=120.0, log_dir=tmp_path / "logs"))
    stack.start()
    try:
        stack.wait_ready()
        c = stack.config
        plan = TakePlan(frames=300, first_index=500, split_bytes=1024, split_every=2,
                        lose_head={510, 600}, lose_tail={520, 700, 798}, version=(1, 1, 0, 0))
        emit_take(plan, [("127.0.0.1", c.main_port), ("127.0.0.1", c.side_port)], rate_hz=600)
        v = stack.verdict(stack.drain())
    finally:
        stack.stop()
    assert v["rejected_by_reason"] == {"split_incomplete": 3, "split_no_head": 2}
    assert v["rejected_datagrams"] == 5
    assert v["split_frames"] == 150 - 5  # the printed ledger says how many were joined (every other frame split)
    assert v["source_missing_indices"] == 0 and v["source_unique_frames"] == 300
    assert v["viewer_applied"] == 300 and v["unique_frames_conserved"] == 1


def test_mvn_two_suits_gloves_a_prop_names_and_scaling_through_the_pipeline(tmp_path) -> None:
    """Two suits (one with gloves), a prop on a third character, MXTP12 and MXTP13 beside them:
    every character accounted for, none of it rejected, the suits retargeted at their scaled height."""
    import socket
    import time

    from test_xsens_meta import check_mvn_ledger, mvn_stream  # the same stream inspect reads from a pcap

    stack = Stack(local_config(source="xsens", merge=False, viewer=True, input_fps=120.0, output_fps=120.0,
                               log_dir=tmp_path / "logs"))
    stack.start()
    try:
        stack.wait_ready()
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            for data in mvn_stream(samples=6):
                sock.sendto(data, ("127.0.0.1", stack.config.main_port))
                time.sleep(0.002)
        finals = stack.drain()
        v = stack.verdict(finals)
    finally:
        stack.stop()
    capture = finals["capture"]
    check_mvn_ledger(capture)
    check_mvn_ledger(v)  # the ledger `up` prints says the same: names, props, MXTP12/13, heights
    assert v["rejected_datagrams"] == 0 and v["source_unique_frames"] == 12 and v["unique_frames_conserved"] == 1
    performers = finals["retarget"]["performers"]
    assert {k: (p["avatar_name"], p["gmr_processed"]) for k, p in performers.items()} == {"0": ("Alice", 6),
                                                                                           "1": ("Bob", 6)}
    assert performers["0"]["human_height_m"] == pytest.approx(1.8, abs=1e-3)
    assert performers["1"]["human_height_m"] == pytest.approx(capture["performers"]["1"]["human_height_m"], abs=1e-3)


def test_capture_killed_mid_take_of_split_frames_resumes_them_whole(tmp_path) -> None:
    """Durable mode: capture journals the parts as they came; killed (SIGKILL) mid-take and
    restarted, it replays them into the same frames: nothing lost, nothing doubled, nothing rejected."""
    import os
    import signal
    import threading

    from helpers import wait_until

    stack = Stack(local_config(viewer=True, input_fps=120.0, output_fps=120.0, log_dir=tmp_path / "logs",
                               state_dir=tmp_path / "state", fsync="never",
                               extra_env={"MOCAPLINE_CHECKPOINT_S": "0.5"}))
    stack.start()
    try:
        stack.wait_ready()
        plan = TakePlan(frames=600, first_index=100, split_bytes=1024)
        emitter = threading.Thread(target=emit_take, args=(plan, [("127.0.0.1", stack.config.main_port)]),
                                   kwargs={"rate_hz": 120.0}, daemon=True)
        emitter.start()

        def under_way() -> bool:
            try:
                return stack.ask("capture", "status", timeout=1.0).get("source_unique_frames", 0) >= 200
            except Exception:  # noqa: BLE001 - not answering yet
                return False

        wait_until(under_way, 30, interval=0.1, what="200 frames through capture")
        proc = stack.services["capture"].proc
        assert proc is not None
        os.kill(proc.pid, signal.SIGKILL)
        stack.services["capture"].kill()
        stack.restart("capture")
        emitter.join(timeout=60)
        v = stack.verdict(stack.drain(timeout=60))
    finally:
        stack.stop()
    assert v["rejected_datagrams"] == 0, v["rejected_by_reason"]
    assert v["source_unique_frames"] == 600 and v["viewer_applied"] == 600 and v["unique_frames_conserved"] == 1, v


def test_emitted_mvn_suits_with_gloves_and_a_prop_are_retargeted_at_their_scaled_height(tmp_path) -> None:
    """`mocapline emit --format mvn` (the synthetic MVN streamer) through the whole pipeline: every
    sample conserved, nothing rejected, no IK failure, each suit retargeted at the height its MXTP13
    says (set per suit), names and the prop in the ledger."""
    from mocapline.tools.emitter.mvn import MvnTake, emit_mvn

    stack = Stack(local_config(source="xsens", merge=False, viewer=True, input_fps=120.0, output_fps=120.0,
                               log_dir=tmp_path / "logs"))
    take = MvnTake(performers=2, gloves=True, props=1, names=["Alice", "Bob", "Sword"], heights_m=[1.80, 1.62])
    stack.start()
    try:
        stack.wait_ready()
        emit_mvn(TakePlan(frames=240, first_index=1000), take, [("127.0.0.1", stack.config.main_port)], rate_hz=120.0)
        finals = stack.drain()
        v = stack.verdict(finals)
    finally:
        stack.stop()
    assert v["rejected_datagrams"] == 0 and v["unique_frames_conserved"] == 1, v["state"]
    assert v["source_unique_frames"] == v["viewer_applied"] == 480
    assert v["props"] == {"2": {"samples": 240, "segments": 1, "name": "Sword"}}
    assert v["meta_datagrams"] == {"MXTP12": 6, "MXTP13": 8}  # repeated every second (120 samples)
    retarget = finals["retarget"]
    assert retarget["ik_failed"] == 0
    for key, (name, height) in {"0": ("Alice", 1.80), "1": ("Bob", 1.62)}.items():
        assert v["performers"][key]["avatar_name"] == name
        assert v["performers"][key]["human_height_m"] == pytest.approx(height, abs=1e-3)
        assert retarget["performers"][key]["gmr_processed"] == 240
        assert retarget["performers"][key]["human_height_m"] == pytest.approx(height, abs=1e-3)


def test_demo_source_xsens_prints_a_conserved_ledger(capsys) -> None:
    """`mocapline demo --source xsens --performers 2 --gloves --props 1`, as a user runs it."""
    import json

    from mocapline.tools.pipeline.demo import main as demo_main

    code = demo_main(["--source", "xsens", "--performers", "2", "--gloves", "--props", "1", "--frames", "120",
                      "--rate", "120", "--json"])
    ledger = json.loads(capsys.readouterr().out)
    assert code == 0 and ledger["unique_frames_conserved"] == 1 and ledger["rejected_datagrams"] == 0
    assert ledger["viewer_applied"] == 240
    assert ledger["props"] == {"2": {"samples": 120, "segments": 1, "name": "Prop1"}}
    assert ledger["meta_datagrams"] == {"MXTP12": 3, "MXTP13": 4}
    assert {k: (p["avatar_name"], p["human_height_m"]) for k, p in ledger["performers"].items()} == {
        "0": ("Performer1", pytest.approx(1.75, abs=1e-3)), "1": ("Performer2", pytest.approx(1.75, abs=1e-3))}
