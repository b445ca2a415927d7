"""The end of a take through real processes (durable, the viewer on the robot port): the drain
waits for a consumer that is slow, however long it takes, and not for one that is gone, whose
frames then wait in the streamer's log for its return and the verdict says so."""

from __future__ import annotations

import os
import signal
import threading

import pytest
from helpers import wait_until

from mocapline.tools.emitter.emitter import TakePlan, emit_take
from mocapline.tools.pipeline.stack import Stack, local_config

pytestmark = pytest.mark.integration
FRAMES = 240


@pytest.fixture
def stack(tmp_path):
    made = Stack(local_config(viewer=True, input_fps=120.0, output_fps=120.0, state_dir=tmp_path / "state",
                              log_dir=tmp_path / "logs"))
    try:
        made.start()
        made.wait_ready(timeout=120)
        yield made
    finally:
        viewer = made.services.get("viewer")
        if viewer is not None and viewer.proc is not None and viewer.proc.poll() is None:
            os.kill(viewer.proc.pid, signal.SIGCONT)
        made.stop()


def _viewer_pid(stack: Stack) -> int:
    proc = stack.services["viewer"].proc
    assert proc is not None
    return proc.pid


def _emit(stack: Stack) -> None:
    emit_take(TakePlan(frames=FRAMES, first_index=100), [("127.0.0.1", stack.config.main_port)], rate_hz=120)
    wait_until(lambda: stack.ask("streamer", "status")["motion_generated"] >= FRAMES, 60, what="the take made")


def test_the_drain_waits_for_a_slow_consumer_to_apply_every_frame(stack) -> None:
    """The viewer stopped (SIGSTOP) with the whole take queued for it, then let run 0.3 s in every
    1.5 s: it is there (heard within 5 s, however little of those 0.3 s a loaded machine gives
    it), so the take ends only once it has applied every frame."""
    pid = _viewer_pid(stack)
    os.kill(pid, signal.SIGSTOP)
    _emit(stack)
    halt = threading.Event()

    def starve() -> None:
        while not halt.wait(1.2):
            os.kill(pid, signal.SIGCONT)
            halt.wait(0.3)
            os.kill(pid, signal.SIGSTOP)
        os.kill(pid, signal.SIGCONT)

    starver = threading.Thread(target=starve, daemon=True)
    starver.start()
    seen: list[str] = []
    try:
        finals = stack.drain(progress=lambda w: seen.append(w.line()))
    finally:
        halt.set()
        starver.join(10)
    verdict = stack.verdict(finals)
    assert verdict["state"] == "conserved" and verdict["viewer_applied"] == FRAMES, verdict
    assert stack.drain_wait is not None and stack.drain_wait.complete
    assert any(f" of {FRAMES} applied, waiting " in line for line in seen), seen  # it did wait for the viewer
    viewer = verdict["consumers"]["viewer"]
    assert viewer["frames_to_apply"] == 0 and viewer["resent"] <= FRAMES // 20, viewer


def test_a_consumer_gone_is_not_waited_for_and_its_frames_wait_for_its_return(stack) -> None:
    """The viewer stopped for good before the take: after 5 s silent it is gone, the drain goes on
    without it, the verdict says where its frames are, and back, it gets them."""
    pid = _viewer_pid(stack)
    os.kill(pid, signal.SIGSTOP)
    _emit(stack)
    finals = stack.drain()
    verdict = stack.verdict(finals)
    assert stack.drain_wait is not None and [c.name for c in stack.drain_wait.gone] == ["viewer"]
    assert verdict["unique_frames_conserved"] == 0
    assert f"viewer gone with {FRAMES + 0} frames to apply, kept for its return in the streamer's log" \
        in verdict["state"], verdict["state"]
    os.kill(pid, signal.SIGCONT)  # back: what it missed was kept for it
    wait_until(lambda: stack.ask("streamer", "status")["consumers"]["viewer"]["backlog"] == 0, 60,
               what="the viewer applying the frames kept for it")
    assert stack.ask("viewer", "status")["viewer_applied"] == FRAMES


def test_a_stage_without_the_cpu_at_the_end_of_a_take_is_waited_for(stack) -> None:
    """Retarget stopped (SIGSTOP) with the take queued for it, and continued 3 s into the drain:
    capture's drain answers only once retarget has acknowledged every frame, and the take is
    conserved. (Capture waited 30 s for that and then answered with what retarget had not taken
    counted in input_pending: a retarget given 0.3 s in every 1.08 s beside two spinners, `bench
    load --load stop+busy --service retarget`, needed longer; now the drain request's own bound.)"""
    proc = stack.services["retarget"].proc
    assert proc is not None
    os.kill(proc.pid, signal.SIGSTOP)
    emit_take(TakePlan(frames=FRAMES, first_index=100), [("127.0.0.1", stack.config.main_port)], rate_hz=120)
    resume = threading.Timer(3.0, os.kill, (proc.pid, signal.SIGCONT))
    resume.start()
    try:
        verdict = stack.verdict(stack.drain())
    finally:
        resume.join()
        os.kill(proc.pid, signal.SIGCONT)
    assert verdict["state"] == "conserved" and verdict["input_pending"] == 0, verdict
    assert verdict["viewer_applied"] == FRAMES
