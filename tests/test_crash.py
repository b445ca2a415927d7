"""Crash safety with real processes: a service hung and then killed with SIGKILL in the middle of a
120 Hz take, restarted, and the take still ends with every posture_index applied by the viewer
exactly once, in order, and the ledger conserved. First, the loss this fixes, reproduced."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from mocapline.reliable import StageRecord
from mocapline.segmentlog import SegmentLog
from services.emitter.emitter import TakePlan, emit_take
from services.pipeline.procs import free_tcp_port, free_udp_port
from services.pipeline.stack import Stack, StackConfig

pytestmark = pytest.mark.integration

RATE = 120.0
FRAMES = 840  # 7 s at 120 Hz
FIRST = 5000


def make_stack(tmp_path: Path, *, durable: bool, merge: bool = False) -> Stack:
    config = StackConfig(
        main_port=free_udp_port(), side_port=free_udp_port(), merge=merge,
        nats_url=f"nats://127.0.0.1:{free_tcp_port()}", human_port=free_tcp_port(), robot_port=free_tcp_port(),
        output_port=free_tcp_port(), viewer=True, display="none", web_port=free_tcp_port(),
        input_fps=RATE, output_fps=RATE, log_dir=tmp_path / "logs",
        state_dir=tmp_path / "state" if durable else None, fsync="never",
    )
    stack = Stack(config)
    stack.start()
    stack.wait_ready()
    return stack


def applied_indices(viewer_state: Path) -> list[int]:
    """Every posture_index the viewer applied, in order, from its durable log."""
    out = []
    for _, blob in SegmentLog(viewer_state, "stage").read_from(0):
        applied = json.loads(StageRecord.decode(blob).state).get("applied")
        if applied is not None:
            out.append(applied)
    return out


def take_with_a_crash(stack: Stack, victim: str, *, hang_s: float, down_s: float, restart: bool = True,
                      plan: TakePlan | None = None, loss: float = 0.0) -> dict:
    """Emit a take at 120 Hz; 2 s in, hang ``victim`` (SIGSTOP) for ``hang_s``, SIGKILL it, restart
    it ``down_s`` later; drain and return the verdict."""
    c = stack.config
    plan = plan or TakePlan(frames=FRAMES, first_index=FIRST)
    emitter = threading.Thread(
        target=emit_take, args=(plan, [("127.0.0.1", c.main_port), ("127.0.0.1", c.side_port)]),
        kwargs={"rate_hz": RATE}, daemon=True)
    emitter.start()
    time.sleep(2.0)
    proc = stack.services[victim].proc
    assert proc is not None and proc.poll() is None
    if hang_s:
        os.kill(proc.pid, signal.SIGSTOP)
        time.sleep(hang_s)
    stack.services[victim].kill()
    time.sleep(down_s)
    if restart:
        stack.restart(victim)
    emitter.join(timeout=60)
    time.sleep(0.5)
    return stack.verdict(stack.drain(timeout=60))


@pytest.fixture
def stacks():
    made: list[Stack] = []
    yield made
    for stack in made:
        stack.stop()


def test_plain_links_lose_a_hung_then_killed_viewers_backlog(tmp_path, stacks) -> None:
    """The loss as it was: plain PUSH/PULL, the viewer hangs 1.5 s, is killed and restarted."""
    stack = make_stack(tmp_path, durable=False)
    stacks.append(stack)
    v = take_with_a_crash(stack, "viewer", hang_s=1.5, down_s=0.3)
    lost = v["zmq_sent"] - v["viewer_applied"]
    assert v["zmq_sent"] == FRAMES
    assert lost > 50  # the backlog that sat in the dead viewer's queues (and the frames applied before)
    assert v["unique_frames_conserved"] == 0


@pytest.mark.parametrize("victim", ["capture", "retarget", "streamer", "viewer", "auditor"])
def test_kill9_and_restart_loses_and_doubles_nothing(tmp_path, stacks, victim) -> None:
    stack = make_stack(tmp_path, durable=True)
    stacks.append(stack)
    v = take_with_a_crash(stack, victim, hang_s=1.0, down_s=0.3)
    assert v["source_unique_frames"] == FRAMES, v
    assert v["gmr_processed"] == v["motion_generated"] == v["zmq_sent"] == v["viewer_applied"] == FRAMES, v
    assert v["unique_frames_conserved"] == 1, v
    applied = applied_indices(stack.config.state_dir / "viewer")
    assert applied == list(range(FIRST, FIRST + FRAMES))
    assert stack.restarts == {victim: 1}
