"""``port-check --consumer``: the contract's hard cases played against a consumer process.

Each case starts the consumer with a fresh state directory against a fresh scripted port, plays
its script, and compares what the consumer reported applying (one JSON line per frame on stdout)
with what a consumer following docs/protocol.md applies."""

from __future__ import annotations

import secrets
import socket
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import zmq

from mocapline.core.control import RESTARTED, encode_control, welcome
from mocapline.tools.portcheck.scripted import Applied, ConsumerProcess, ScriptedPort

NAME = "port-check"
WAIT_S = 10.0  # for a HELLO, or for the frames of a step to be applied


@dataclass
class CaseResult:
    name: str
    passed: bool
    detail: str  # what the consumer did
    what: str = ""  # what the case plays


def free_endpoint() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


def posture(epoch_no: int, frame_id: int) -> int:
    return 10_000 * (epoch_no + 1) + frame_id


def expected(frame_ids: range, epoch_no: int = 0) -> list[Applied]:
    return [(f, posture(epoch_no, f)) for f in frame_ids]


def describe(got: list[Applied], want: list[Applied]) -> str:
    if got == want:
        return f"applied {len(got)} frames, each once, in order"
    for k, (g, w) in enumerate(zip(got, want, strict=False)):
        if g != w:
            return f"applied (frame_id, posture_index) {g} where {w} was due (message {k}); applied {len(got)} in all"
    if len(got) < len(want):
        return f"applied {len(got)} of {len(want)}; missing from {want[len(got)]}"
    return f"applied {len(got) - len(want)} more than due, first {got[len(want)]}"


class Case:
    """One case's port, consumer and helpers; ``run`` is the script."""

    name = ""
    what = ""

    def __init__(self, template: str, workdir: Path) -> None:
        self.endpoint = free_endpoint()
        self.state = workdir / self.name
        self.state.mkdir(parents=True)
        self.consumer = ConsumerProcess(template, self.endpoint, NAME, self.state)
        self.port = self.new_port(secrets.token_bytes(16))

    def new_port(self, epoch: bytes, postures: dict[int, int | None] | None = None,
                 ends: dict[int, tuple[int, int]] | None = None) -> ScriptedPort:
        """The scripted port on the case's endpoint, which stops waiting once the consumer exited."""
        return ScriptedPort(self.endpoint, epoch, postures or {}, ends or {}, gone=self.consumer.has_exited)

    def hello(self) -> bool:
        h = self.port.next_hello(WAIT_S)
        return h is not None

    def until_applied(self, n: int, timeout_s: float = WAIT_S, first: int = 0) -> bool:
        """Serve until the consumer reported ``n`` frames (in all its runs)."""
        self.port.serve(lambda: len(self.consumer.snapshot()) >= n, first, timeout_s)
        return len(self.consumer.snapshot()) >= n

    def publish(self, frame_ids: range, epoch_no: int = 0) -> None:
        for f in frame_ids:
            self.port.publish(f, posture(epoch_no, f))

    def end(self, frame_id: int, last: int, frames_sent: int) -> None:
        self.port.publish(frame_id, None, (last, frames_sent))

    def verdict(self, want: list[Applied], note: str = "") -> CaseResult:
        got = self.consumer.snapshot()
        detail = describe(got, want) + (f"; {note}" if note else "")
        return CaseResult(self.name, got == want, detail)

    def welcome_last(self, start: int) -> None:
        """WELCOME(start) answering the consumer's last HELLO."""
        h = self.port.hellos[-1]
        self.port.send_control(welcome(self.port.epoch, start, h.seq, h.version))

    def run(self) -> CaseResult:
        raise NotImplementedError

    def close(self) -> None:
        self.consumer.stop()
        self.port.close()


class LateJoin(Case):
    name = "late_join"
    what = "joins a running take: a frame before the WELCOME is dropped, then frames from WELCOME's seq on"

    def run(self) -> CaseResult:
        self.consumer.start()
        if not self.hello():
            return CaseResult(self.name, False, "no HELLO within 10 s")
        self.port.publish(0, posture(0, 0))
        self.port.send(0)  # before any WELCOME (a frame_id a new consumer would take): must be dropped
        del self.port.postures[0]
        self.publish(range(100, 120))
        self.end(120, 119, 20)
        self.port.answer(self.port.hellos[-1]._replace(flags=1), first=100)
        self.until_applied(21, first=100)
        return self.verdict([*expected(range(100, 120)), (120, None)])


class NewEpoch(Case):
    name = "new_epoch"
    what = "the port restarts with its state wiped: frame_ids start again at 0 under a new epoch"

    def run(self) -> CaseResult:
        self.consumer.start()
        self.publish(range(10))
        if not self.until_applied(10):
            return self.verdict(expected(range(10)), "before the restart")
        self.port.close()
        self.port = self.new_port(secrets.token_bytes(16))
        self.publish(range(10), epoch_no=1)
        self.end(10, 9, 10)
        self.until_applied(21, timeout_s=WAIT_S)
        return self.verdict([*expected(range(10)), *expected(range(10), 1), (10, None)])


class Rewind(Case):
    name = "rewind"
    what = "the port sends frames again that the consumer already has (5..9 twice): dropped"

    def run(self) -> CaseResult:
        self.consumer.start()
        self.publish(range(10))
        self.until_applied(10)
        self.publish(range(10, 15))
        self.end(15, 14, 15)
        for f in range(5, 16):
            self.port.send(f)
        self.until_applied(16)
        time.sleep(0.3)
        return self.verdict([*expected(range(15)), (15, None)])


class StaleWelcome(Case):
    name = "stale_welcome"
    what = "a WELCOME answering an older HELLO (it would skip 10..19) arrives before the right one: ignored"

    def run(self) -> CaseResult:
        self.consumer.start()
        self.publish(range(10))
        self.until_applied(10)
        hello = self.port.next_hello(WAIT_S)  # its idle timer's
        if hello is None:
            return CaseResult(self.name, False, "no HELLO after 10 frames and a pause (the idle timer)")
        first = self.port.hellos[0]  # a late answer to it, which would skip 10..19
        self.port.send_control(welcome(self.port.epoch, 20, first.seq, hello.version))
        self.publish(range(10, 20))
        self.end(20, 19, 20)
        self.port.answer(hello._replace(flags=1), first=0)
        self.until_applied(21)
        return self.verdict([*expected(range(20)), (20, None)])


class CorruptCrc(Case):
    name = "corrupt_crc"
    what = "frame 5 arrives with a CRC that does not match (and another posture_index): rejected, asked again"

    def run(self) -> CaseResult:
        self.consumer.start()
        if not self.hello():
            return CaseResult(self.name, False, "no HELLO within 10 s")
        self.publish(range(10))
        self.end(10, 9, 10)
        self.welcome_last(0)
        for f in range(11):
            self.port.send(f, corrupt=f == 5)
        self.until_applied(11)
        time.sleep(0.3)
        return self.verdict([*expected(range(10)), (10, None)])


class FrameGap(Case):
    name = "frame_id_gap"
    what = "frames 5 and 6 never arrive (7.. do): not applied past the gap, asked again with HELLO"

    def run(self) -> CaseResult:
        self.consumer.start()
        if not self.hello():
            return CaseResult(self.name, False, "no HELLO within 10 s")
        self.publish(range(10))
        self.end(10, 9, 10)
        self.welcome_last(0)
        for f in (0, 1, 2, 3, 4, 7, 8, 9, 10):
            self.port.send(f)
        self.until_applied(11)
        time.sleep(0.3)
        gap_hellos = [h for h in self.port.hellos[1:] if h.seq == 4]
        note = "asked again with HELLO(4)" if gap_hellos else "no HELLO(4) after the gap"
        return self.verdict([*expected(range(10)), (10, None)], note)


class EndOfStream(Case):
    name = "end_of_stream"
    what = "END_OF_STREAM is a message like a frame (applied, acknowledged), and the next take follows it"

    def run(self) -> CaseResult:
        self.consumer.start()
        self.publish(range(10))
        self.end(10, 9, 10)
        self.publish(range(11, 16))
        self.end(16, 15, 5)
        self.until_applied(17)
        deadline = time.monotonic() + 3
        while max(self.port.acks, default=-1) < 16 and time.monotonic() < deadline and not self.consumer.has_exited():
            self.port.next_hello(0.1)
        acked = max(self.port.acks, default=-1)
        result = self.verdict([*expected(range(10)), (10, None), *expected(range(11, 16)), (16, None)],
                              f"acknowledged through {acked}")
        return CaseResult(self.name, result.passed and acked == 16, result.detail)


class ConsumerRestart(Case):
    name = "consumer_killed"
    what = "the consumer is killed -9 mid-take and started again: it resumes from its stored position"

    def run(self) -> CaseResult:
        self.consumer.start()
        self.publish(range(1))
        self.until_applied(1)
        deadline = time.monotonic() + WAIT_S
        for f in range(1, 200):  # a take at 100 Hz: killed while it runs
            if len(self.consumer.snapshot()) >= 60 or time.monotonic() > deadline:
                break
            self.publish(range(f, f + 1))
            self.port.send(f)
            hello = self.port.next_hello(0.01)
            if hello is not None:
                self.port.answer(hello, first=0)
        acked_before = max(self.port.acks, default=-1)
        self.consumer.kill()
        run1 = list(self.consumer.runs[-1])
        self.publish(range(200))
        self.end(200, 199, 200)
        self.consumer.start()
        hello = self.port.next_hello(WAIT_S)
        if hello is None:
            return CaseResult(self.name, False, "no HELLO after the restart")
        self.port.answer(hello._replace(flags=1), first=0)
        self.port.serve(lambda: any(a[1] is None for a in self.consumer.runs[-1]), 0, WAIT_S)
        run2 = list(self.consumer.runs[-1])
        applied1 = [a[0] for a in run1]
        last1 = applied1[-1] if applied1 else -1
        position = hello.seq if hello.epoch == self.port.epoch else None
        problems = []
        if position is None:
            problems.append("its HELLO after the restart carried no stored position of this port's epoch")
        elif position < acked_before:
            problems.append(f"it resumed from {position}, below what it had acknowledged ({acked_before}): "
                            "acknowledged before stored")
        elif position > last1:
            problems.append(f"it resumed from {position}, beyond what it reported applying ({last1})")
        if run1 != expected(range(len(run1))):
            problems.append("before the kill: " + describe(run1, expected(range(len(run1)))))
        start = (position if position is not None else -1) + 1
        want2 = [*expected(range(start, 200)), (200, None)]
        if run2 != want2:
            problems.append("after the restart: " + describe(run2, want2))
        twice = max(0, last1 - (position if position is not None else -1))
        summary = (f"killed after {len(run1)} frames (acknowledged through {acked_before}), resumed from HELLO "
                   f"seq {hello.seq}: {len(run2)} more; {twice} applied again (reported but not stored at the kill)")
        return CaseResult(self.name, not problems, "; ".join([summary, *problems]))


class PortRestarted(Case):
    name = "port_restarted"
    what = "the port comes back (same epoch, its queues lost) and says RESTARTED: the consumer says HELLO"

    def run(self) -> CaseResult:
        self.consumer.start()
        self.publish(range(10))
        self.until_applied(10)
        self.port.close()
        epoch, postures, ends = self.port.epoch, self.port.postures, self.port.ends
        self.port = self.new_port(epoch, postures, ends)
        self.publish(range(10, 20))
        self.end(20, 19, 20)
        self.port.sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.port.route = NAME.encode()
        told = False
        for _ in range(20):  # as a port that remembers it does (only a DEALER named so gets it)
            try:
                self.port.send_control(encode_control(RESTARTED, epoch, 10))
                told = True
                break
            except zmq.ZMQError:  # not connected (yet), or not by its name
                time.sleep(0.1)
        self.port.route = None
        self.until_applied(21)
        return self.verdict([*expected(range(20)), (20, None)],
                            "told RESTARTED" if told else "RESTARTED not delivered (its routing id is not its name)")


CASES: list[type[Case]] = [LateJoin, NewEpoch, Rewind, StaleWelcome, CorruptCrc, FrameGap, EndOfStream,
                           ConsumerRestart, PortRestarted]


def run_cases(template: str, only: list[str] | None = None,
              report: Callable[[CaseResult], None] | None = None) -> list[CaseResult]:
    results = []
    with tempfile.TemporaryDirectory(prefix="mocapline-port-check-") as tmp:
        for cls in CASES:
            if only and cls.name not in only:
                continue
            case = cls(template, Path(tmp))
            try:
                result = replace(case.run(), what=cls.what)
                exited = "" if result.passed else case.consumer.exited()
                if exited:
                    result = replace(result, detail=f"{result.detail}; {exited}")
            finally:
                case.close()
            results.append(result)
            if report is not None:
                report(result)
    return results
