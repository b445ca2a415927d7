"""Issue 26's scenarios against the real pipeline, with the consumer written from
docs/protocol.md alone (tests/doc_consumer.py, a process: pyzmq, struct, zlib, protobuf): every
frame applied once and in order, and the streamer's ledger for it right (frames_acked ==
frames_sent == the take, sent == frames + END_OF_STREAM, no resend where nothing was lost)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import wait_until
from test_port import FIRST, FRAMES, Started, caught_up, emit_in_background, endpoint, finish, frames_sent_to_someone

from mocapline.tools.emitter.emitter import TakePlan, emit_take
from mocapline.tools.emitter.relay import LossyRelay

pytestmark = pytest.mark.integration

DOC_CONSUMER = Path(__file__).with_name("doc_consumer.py")


class DocConsumer:
    """tests/doc_consumer.py as a process, restartable on the same state; its report per run."""

    def __init__(self, tmp_path: Path, stack, name: str) -> None:
        self.state = tmp_path / f"doc-{name}"
        self.state.mkdir()
        self.argv = [sys.executable, str(DOC_CONSUMER), endpoint(stack), name, str(self.state)]
        self.runs: list[list[tuple[int, int | None]]] = []
        self.hellos: list[tuple[float, int, bool]] = []  # (when, seq, RESEND) of each HELLO it sent
        self.proc: subprocess.Popen[str] | None = None
        self.start()

    def start(self) -> None:
        self.runs.append([])
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, text=True)
        threading.Thread(target=self._read, args=(self.proc, self.runs[-1]), daemon=True).start()

    def _read(self, proc: subprocess.Popen[str], run: list[tuple[int, int | None]]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            d = json.loads(line)
            if "hello" in d:
                self.hellos.append((time.monotonic(), d["hello"], d["resend"]))
                continue
            run.append((d["frame_id"], None if d.get("end") else d["posture_index"]))

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def ended(self) -> bool:
        return any(p is None for _, p in self.runs[-1])

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)

    def check(self, first_index: int = FIRST) -> int:
        """Each run in order; together every frame of the take once, but those a kill caught
        between applying and storing (one per kill at most); returns how many were applied twice."""
        for run in self.runs:
            ids = [f for f, _ in run]
            assert ids == list(range(ids[0], ids[0] + len(ids))) if ids else True, "a run out of order"
        applied = [a for run in self.runs for a in run]
        twice = len(applied) - len(set(applied))
        assert twice <= len(self.runs) - 1, f"{twice} applied twice in {len(self.runs)} runs"
        postures = sorted({p for _, p in applied if p is not None})
        assert postures == list(range(first_index, FIRST + FRAMES)), "posture indices"
        assert sum(p is None for _, p in set(applied)) == 1  # one END_OF_STREAM
        return twice


@pytest.fixture
def started(tmp_path: Path):
    running = Started(tmp_path)
    consumers: list[DocConsumer] = []
    running.consumers = consumers  # type: ignore[attr-defined]
    yield running
    for c in consumers:
        c.stop()
    running.stop()


def doc_consumer(started, stack, name: str) -> DocConsumer:
    c = DocConsumer(started.tmp_path, stack, name)
    started.consumers.append(c)
    return c


def settled(stack, consumer: DocConsumer, name: str) -> dict:
    """The final ledger (the drain ends when every connected consumer acknowledged its
    END_OF_STREAM), and the consumer's report of it."""
    caught_up(stack, name)
    v = finish(stack)
    wait_until(consumer.ended, 30, what=f"{name} to apply END_OF_STREAM")
    return v


def ledger_true(v: dict, name: str, resent: int | None = 0) -> None:
    c = v["consumers"][name]
    assert c["frames_acked"] == c["frames_sent"] == FRAMES and c["sent"] == FRAMES + 1, c
    if resent is not None:
        assert c["resent"] == resent, c
    assert v["zmq_sent"] == FRAMES and v["unconfirmed"] == 0 and v["output_balanced"] == 1, v


def test_clean_take_with_skips_duplicates_and_bad_datagrams(started) -> None:
    """Clean, skips on every path (bridged), duplicates and garbage datagrams: one consumer."""
    stack = started.stack(viewer=False)
    robot = doc_consumer(started, stack, "doc-robot")
    wait_until(lambda: stack.ask("streamer", "status").get("consumers", {}).get("doc-robot"), 30)
    gap = {FIRST + 100, FIRST + 101, FIRST + 102}
    emit_take(TakePlan(frames=FRAMES, first_index=FIRST, skip_all=gap, duplicate={FIRST + 300}, garbage=40),
              [("127.0.0.1", stack.config.main_port)], rate_hz=120.0)
    v = settled(stack, robot, "doc-robot")
    assert robot.check() == 0
    ledger_true(v, "doc-robot")
    assert v["bridged_frames"] == 3


def test_merge_with_main_150ms_late_and_skips_per_path(started) -> None:
    stack = started.stack(viewer=False, merge=True)
    c = stack.config
    robot = doc_consumer(started, stack, "doc-robot")
    wait_until(lambda: stack.ask("streamer", "status").get("consumers", {}).get("doc-robot"), 30)
    relay = LossyRelay(("127.0.0.1", 0), ("127.0.0.1", c.main_port), loss=0.0, delay_s=0.15)
    relay.start()
    plan = TakePlan(frames=FRAMES, first_index=FIRST, skip_main={FIRST + 100, FIRST + 400},
                    skip_side={FIRST + 200, FIRST + 500})
    emit_take(plan, [("127.0.0.1", relay.port), ("127.0.0.1", c.side_port)], rate_hz=120.0)
    wait_until(lambda: relay.forwarded >= FRAMES - 2, 10, what="the relay to forward main")
    relay.stop()
    v = settled(stack, robot, "doc-robot")
    assert robot.check() == 0
    ledger_true(v, "doc-robot")
    assert v["source_missing_indices"] == 0 and v["bridged_frames"] == 0


@pytest.mark.parametrize("victim", ["capture", "retarget", "streamer"])
def test_a_stage_killed_mid_take(started, victim) -> None:
    """kill -9 of a stage mid-take: the consumer gets each frame once; the per-consumer counts
    stay right across a streamer restart (sent was 2284-2306 of 2401 before issue 26)."""
    stack = started.stack(viewer=False)
    robot = doc_consumer(started, stack, "doc-robot")
    wait_until(lambda: stack.ask("streamer", "status").get("consumers", {}).get("doc-robot"), 30)
    emitter = emit_in_background(stack, TakePlan(frames=FRAMES, first_index=FIRST))
    wait_until(lambda: frames_sent_to_someone(stack) > 250, 20, what="the take under way")
    stack.services[victim].kill()
    time.sleep(0.3)
    stack.restart(victim)
    emitter.join(timeout=60)
    stack.wait_ready(60)
    v = settled(stack, robot, "doc-robot")
    assert robot.check() == 0
    ledger_true(v, "doc-robot", resent=None)


def test_streamer_killed_with_no_consumer_yet(started) -> None:
    stack = started.stack(viewer=False)
    emitter = emit_in_background(stack, TakePlan(frames=FRAMES, first_index=FIRST))
    wait_until(lambda: frames_sent_to_someone(stack) > 200, 20, what="frames made with no consumer")
    stack.services["streamer"].kill()
    time.sleep(0.5)
    stack.restart("streamer")
    emitter.join(timeout=60)
    stack.wait_ready(60)
    robot = doc_consumer(started, stack, "doc-late")
    v = settled(stack, robot, "doc-late")
    assert robot.check() == 0
    ledger_true(v, "doc-late")


@pytest.mark.parametrize("pause", ["sigstop", "busy"])
def test_a_paused_consumer_is_not_sent_its_frames_twice(started, pause) -> None:
    """5 s mid-take without reading, frames queued behind it: stopped (SIGSTOP, then SIGCONT), or
    busy in its own loop, after which its idle timer says a keep-alive HELLO at its last position
    (the case of issue 26: HELLO(599) got ~600 frames resent). Each frame once, nothing resent."""
    stack = started.stack(viewer=False)
    robot = doc_consumer(started, stack, "doc-paused")
    wait_until(lambda: stack.ask("streamer", "status").get("consumers", {}).get("doc-paused"), 30)
    emitter = emit_in_background(stack, TakePlan(frames=FRAMES, first_index=FIRST))
    wait_until(lambda: frames_sent_to_someone(stack) > 150, 20, what="the take under way")
    paused_at = time.monotonic()
    if pause == "sigstop":
        robot.signal(signal.SIGSTOP)
        time.sleep(5)
        robot.signal(signal.SIGCONT)
    else:
        robot.signal(signal.SIGUSR1)
        wait_until(lambda: any(t > paused_at + 4 for t, _, _ in robot.hellos), 20, what="its HELLO after the pause")
        [(_, seq, resend)] = [h for h in robot.hellos if h[0] > paused_at + 4][:1]
        assert not resend and 0 < seq < FRAMES - 1, robot.hellos  # a keep-alive, frames behind it
    emitter.join(timeout=60)
    v = settled(stack, robot, "doc-paused")
    assert robot.check() == 0
    ledger_true(v, "doc-paused")


def test_a_consumer_killed_twice_beside_another(started) -> None:
    stack = started.stack(viewer=False)
    a = doc_consumer(started, stack, "doc-a")
    b = doc_consumer(started, stack, "doc-b")
    for name in ("doc-a", "doc-b"):
        wait_until(lambda name=name: stack.ask("streamer", "status").get("consumers", {}).get(name), 30)
    emitter = emit_in_background(stack, TakePlan(frames=FRAMES, first_index=FIRST))
    for after in (150, 400):
        wait_until(lambda after=after: frames_sent_to_someone(stack) > after, 20, what="the take under way")
        a.kill()
        time.sleep(0.3)
        a.start()
    emitter.join(timeout=60)
    caught_up(stack, "doc-a")
    v = settled(stack, b, "doc-b")
    wait_until(a.ended, 30, what="doc-a to apply END_OF_STREAM")
    a.check()
    assert b.check() == 0
    ledger_true(v, "doc-a", resent=None)
    ledger_true(v, "doc-b")


def test_port_check_passes_the_streamers_port(started) -> None:
    """`port-check --port` against the real streamer while a take runs; it leaves no consumer
    holding the log (the take drains with nobody else connected)."""
    from mocapline.tools.portcheck.port_checks import check_port

    stack = started.stack(viewer=False)
    emitter = emit_in_background(stack, TakePlan(frames=FRAMES * 2, first_index=FIRST))
    wait_until(lambda: frames_sent_to_someone(stack) > 100, 20, what="the take under way")
    results = check_port(endpoint(stack))
    assert [(r.name, r.passed) for r in results] == [(n, True) for n in ("handshake", "frames", "hands",
                                                                        "resume", "keep_alive", "rewind",
                                                                        "v1_peer")], \
        [r.detail for r in results]
    emitter.join(timeout=60)
    wait_until(lambda: not stack.ask("streamer", "status").get("consumers"), 10, what="the checker's names forgotten")
